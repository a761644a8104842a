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


def unannotated(f):
    """The function of Enzyme's annotated function ``Const(f)`` (what autodiff, autodiff_thunk
    and compile take as `f`); anything else as it is.

    >>> unannotated(Const(abs)) is abs, unannotated(abs) is abs
    (True, True)
    """
    return f.val if type(f) is Const and callable(f.val) else f


class Active(Annotation):
    """Reverse mode: the derivative with respect to this value is *returned*.

    Enzyme allows only immutable scalars here; Hecate also accepts arrays and pytrees, whose
    derivative comes back with the same structure. A plain Python int becomes a float, as in
    Enzyme (``Active(3)`` is ``Active(3.0)``); integers inside containers or arrays do not.
    """

    __slots__ = ()

    def __init__(self, val: Any):
        self.val = float(val) if type(val) is int else val


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


class BatchDuplicated(Duplicated):
    """A value and a tuple of W shadows: W directions (forward) or W seeds (reverse) at once.

    Forward mode stacks the W tangents on a leading axis, so one pass computes all of them.
    Reverse mode adds W gradients into the W shadows, and returns W-tuples for Active arguments.
    """

    __slots__ = ()

    def __init__(self, val: Any, dval: tuple):
        if not isinstance(dval, (tuple, list)) or not dval:
            raise TypeError(f"{type(self).__name__}(x, dxs) needs a non-empty tuple of shadows, "
                            f"got {type(dval).__name__}")
        super().__init__(val, tuple(dval))

    @property
    def width(self) -> int:
        return len(self.dval)


class BatchDuplicatedNoNeed(BatchDuplicated):
    """As BatchDuplicated; the primal result need not be computed or returned."""

    __slots__ = ()


class MixedDuplicated(Duplicated):
    """A container mixing immutable active leaves (floats) with arrays.

    Reverse mode adds array gradients into the shadow's arrays and returns a container of the
    primal's structure holding the derivatives of the immutable leaves (arrays there are None).
    Enzyme.jl needs it because immutable leaves have no memory to accumulate into.
    """

    __slots__ = ()


class Mode:
    """A differentiation mode. `kind` is "reverse" or "forward".

    Modes are immutable; the modifiers (`set_strong_zero`, `set_runtime_activity`,
    `set_nan_check`, and their `clear_` forms) return a new mode.
    """

    __slots__ = ("name", "kind", "with_primal", "split", "holomorphic", "strong_zero",
                 "runtime_activity", "nan_check")

    def __init__(self, name: str, kind: str, with_primal: bool, *, split: bool = False,
                 holomorphic: bool = False, strong_zero: bool = False,
                 runtime_activity: bool = False, nan_check: bool = False):
        self.name = name
        self.kind = kind
        self.with_primal = with_primal
        self.split = split
        self.holomorphic = holomorphic
        self.strong_zero = strong_zero
        self.runtime_activity = runtime_activity
        self.nan_check = nan_check

    def replace(self, **changes) -> "Mode":
        fields = {k: getattr(self, k) for k in self.__slots__}
        fields.update(changes)
        name, kind, with_primal = fields.pop("name"), fields.pop("kind"), fields.pop("with_primal")
        return Mode(name, kind, with_primal, **fields)

    def __eq__(self, other) -> bool:
        return isinstance(other, Mode) and all(
            getattr(self, k) == getattr(other, k) for k in self.__slots__)

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, k) for k in self.__slots__))

    def __repr__(self) -> str:
        r = self.name
        for flag in ("strong_zero", "runtime_activity", "nan_check"):
            if getattr(self, flag):
                r = f"set_{flag}({r})"
        return r


Reverse = Mode("Reverse", "reverse", False)
ReverseWithPrimal = Mode("ReverseWithPrimal", "reverse", True)
ReverseSplitNoPrimal = Mode("ReverseSplitNoPrimal", "reverse", False, split=True)
ReverseSplitWithPrimal = Mode("ReverseSplitWithPrimal", "reverse", True, split=True)
ReverseHolomorphic = Mode("ReverseHolomorphic", "reverse", False, holomorphic=True)
ReverseHolomorphicWithPrimal = Mode("ReverseHolomorphicWithPrimal", "reverse", True,
                                    holomorphic=True)
Forward = Mode("Forward", "forward", False)
ForwardWithPrimal = Mode("ForwardWithPrimal", "forward", True)


def _modifier(flag: str, value: bool):
    def modify(mode: Mode) -> Mode:
        if not isinstance(mode, Mode):
            raise TypeError(f"expected a mode such as Reverse or Forward, got {mode!r}")
        return mode.replace(**{flag: value})
    verb = "set" if value else "clear"
    modify.__name__ = f"{verb}_{flag}"
    modify.__doc__ = (f"`mode` with {flag.replace('_', ' ')} {'on' if value else 'off'}.\n\n"
                      f"    >>> {verb}_{flag}(Reverse).{flag}\n    {value}\n    ")
    return modify


set_strong_zero = _modifier("strong_zero", True)
clear_strong_zero = _modifier("strong_zero", False)
set_runtime_activity = _modifier("runtime_activity", True)
clear_runtime_activity = _modifier("runtime_activity", False)
set_nan_check = _modifier("nan_check", True)
clear_nan_check = _modifier("nan_check", False)

ACTIVITY_TYPES = (Const, Active, Duplicated, DuplicatedNoNeed, BatchDuplicated,
                  BatchDuplicatedNoNeed, MixedDuplicated)
