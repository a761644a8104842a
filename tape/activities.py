"""Activity annotations and differentiation modes, spelled as in Enzyme.jl."""
from __future__ import annotations

from typing import Any


class Annotation:
    """Base of the activity annotations. `val` is the primal value."""

    __slots__ = ("val",)

    def __init__(self, val: Any):
        self.val = val

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.val!r})"


class Const(Annotation):
    """Not differentiated. `Const(x)`; un-annotated arguments are Const too."""

    __slots__ = ()


class Active(Annotation):
    """Reverse mode: the derivative with respect to this value is *returned*.

    Enzyme allows only immutable scalars here; Hecate also accepts arrays and pytrees, whose
    derivative comes back with the same structure.
    """

    __slots__ = ()


class Duplicated(Annotation):
    """A value and its shadow `dval` of the same structure.

    Reverse mode adds the gradient into `dval` (call twice, get twice). Forward mode reads the
    tangent seed from `dval`. Buffers that the function overwrites have their shadow used as
    the seed and zeroed (reverse) or overwritten by the tangent (forward).
    """

    __slots__ = ("dval",)

    def __init__(self, val: Any, dval: Any):
        self.val = val
        self.dval = dval

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.val!r}, {self.dval!r})"


class DuplicatedNoNeed(Duplicated):
    """As Duplicated; the primal result need not be computed or returned."""

    __slots__ = ()


class Mode:
    """A differentiation mode. `kind` is "reverse" or "forward"."""

    __slots__ = ("name", "kind", "with_primal")

    def __init__(self, name: str, kind: str, with_primal: bool):
        self.name = name
        self.kind = kind
        self.with_primal = with_primal

    def __repr__(self) -> str:
        return self.name


Reverse = Mode("Reverse", "reverse", False)
ReverseWithPrimal = Mode("ReverseWithPrimal", "reverse", True)
Forward = Mode("Forward", "forward", False)
ForwardWithPrimal = Mode("ForwardWithPrimal", "forward", True)

ACTIVITY_TYPES = (Const, Active, Duplicated, DuplicatedNoNeed)
