"""The adjoint half of a compiled program (tape/program.py), written as straight-line code.

Each cotangent is a local variable ``ct<slot>``. While the code is written, what is known of
each one is tracked statically (`_State`): whether it may still be None (no contribution has
certainly arrived, or a rule may have returned a symbolic zero) and whether it is *owned*: a
fresh array made by the program itself (an inline product, a sum, a scatter buffer) that no
other variable, rule residual or result references. With that knowledge:

- a step whose cotangent is certainly set runs without its ``is not None`` test;
- a second contribution to an owned cotangent is added in place (``ct += term``) instead of
  allocating ``ct + term``; a cotangent that is not owned (a seed, a rule's result, which may
  be its own cotangent argument or a view of a saved value, the cotangent of ``x + y`` passed
  through unchanged) is summed out of place, and the sum is owned from then on;
- the reverse of a basic-index gather (``x[1:3]``, ``x[0]``) writes into the owned cotangent
  of ``x`` (``ct[index] += g``) rather than scattering into fresh zeros and adding.

In-place sums are written as ``ct += term`` when every floating value of the program is
float64 (`inplace`): then every cotangent is float64 too, and ``ct += term`` computes the same
bits as ``ct + term`` (the same two operands, in the same order, into a buffer of the same
dtype). In other programs (float32 ones) an owned cotangent is summed by `add_into`, which
checks at run time that the term has the cotangent's dtype and shape before summing in place,
and otherwise allocates ``ct + term`` as eager mode does (a float64 term promotes the sum).
A cotangent is accumulated in the order of the eager sweep, so results equal eager ones.
"""
from __future__ import annotations

import numpy as np

from .batching import Batched, reverse_per_direction


class _State:
    """What is known of one cotangent variable at the current line."""
    __slots__ = ("maybe_none", "owned")

    def __init__(self, maybe_none: bool, owned: bool):
        self.maybe_none = maybe_none
        self.owned = owned


class AdjointWriter:
    """Writes the contributions to cotangents, tracking `_State` per slot."""

    def __init__(self, lines: list, inplace: bool, scalar_slots):
        self.lines = lines
        self.inplace = inplace
        self.scalar_slots = scalar_slots   # NumPy scalars and 0-d arrays (never in place)
        self.states: dict[int, _State] = {}
        self.before = None   # in a conditional block: slot -> (maybe_none, owned) before it

    # -- blocks ------------------------------------------------------------------------------
    def certain(self, slots) -> bool:
        """Whether at least one of these cotangents is certainly set (its block always runs)."""
        return any(s in self.states and not self.states[s].maybe_none for s in slots)

    def open_block(self, conditional: bool) -> None:
        """Start a step's block; a conditional one remembers the states its lines change."""
        self.before = {} if conditional else None

    def close_block(self) -> None:
        """After a conditional block a cotangent is what it was before or what the block
        made of it: it may be None if either may be, owned only if both are."""
        for s, (old_none, old_owned) in (self.before or {}).items():
            st = self.states[s]
            st.maybe_none = st.maybe_none or old_none
            st.owned = st.owned and old_owned
        self.before = None

    def _touch(self, s: int) -> None:
        if self.before is not None and s not in self.before:
            st = self.states.get(s)
            self.before[s] = (True, True) if st is None else (st.maybe_none, st.owned)

    # -- contributions -----------------------------------------------------------------------
    def add(self, s: int, term: str, indent: str, may_be_none: bool, fresh: bool) -> None:
        """Add `term` to the cotangent of slot `s`. `may_be_none`: a rule's result (None is a
        symbolic zero); `fresh`: an array the program just made, referenced nowhere else."""
        self._touch(s)
        lines, st = self.lines, self.states.get(s)
        ct = f"ct{s}"
        if st is None:   # the first contribution in sweep order is assigned
            lines.append(f"{indent}{ct} = {term}")
            self.states[s] = _State(may_be_none, fresh)
            return
        if st.owned and s not in self.scalar_slots:
            if may_be_none or not self.inplace:   # a call that sums in place where it may
                lines.append(f"{indent}{ct} = {'_iadd' if self.inplace else '_add_into'}"
                             f"({ct}, {term})")
                st.owned = st.owned and (not st.maybe_none or fresh)
                st.maybe_none = st.maybe_none and may_be_none
            elif st.maybe_none:
                lines.append(f"{indent}if {ct} is None: {ct} = {term}")
                lines.append(f"{indent}else: {ct} += {term}")
                st.owned, st.maybe_none = fresh, False
            else:
                lines.append(f"{indent}{ct} += {term}")
            return
        if not st.maybe_none and not may_be_none:
            lines.append(f"{indent}{ct} = {ct} + {term}")
            st.owned = True
            return
        lines.append(f"{indent}{ct} = _add({ct}, {term})")
        # A term certainly set and fresh: the result is that term or a new sum.
        st.owned = fresh and not may_be_none
        st.maybe_none = st.maybe_none and may_be_none

    def scatter(self, s: int, g: str, index: str, shape: tuple, indent: str) -> None:
        """The reverse of ``x[index]`` (a basic index, so a plain assignment is its transpose)
        into the cotangent of `x`, slot `s`: written into its owned buffer when it has one,
        else into fresh zeros then summed, as the rule does."""
        self._touch(s)
        lines, st = self.lines, self.states.get(s)
        ct = f"ct{s}"
        if st is None:
            lines.append(f"{indent}{ct} = _zeros({shape!r})")
            lines.append(f"{indent}{ct}[{index}] = {g}")
            self.states[s] = _State(False, True)
        elif not st.owned:
            lines.append(f"{indent}_t = _zeros({shape!r})")
            lines.append(f"{indent}_t[{index}] = {g}")
            self.add(s, "_t", indent, may_be_none=False, fresh=True)
            lines.append(f"{indent}_t = None")
        elif st.maybe_none:
            lines.append(f"{indent}if {ct} is None:")
            lines.append(f"{indent}    {ct} = _zeros({shape!r})")
            lines.append(f"{indent}    {ct}[{index}] = {g}")
            lines.append(f"{indent}else:")
            lines.append(f"{indent}    {ct}[{index}] += {g}")
            st.maybe_none = False
        else:
            lines.append(f"{indent}{ct}[{index}] += {g}")

    def assigned(self, s: int) -> bool:
        return s in self.states


def iadd(ct, term):
    """``ct += term`` on an owned cotangent, None standing for a zero (either side)."""
    if term is None:
        return ct
    if ct is None:
        return term
    ct += term
    return ct


def batched_add_into(ct, term):
    """`add_into` for batch mode's cotangents (`Batched`, W directions stacked on a leading
    axis): summed into `ct`'s data when ``ct + term`` would be the same array (both batched,
    their data of one dtype and shape), else ``ct + term`` as eager mode sums. `ct` is owned."""
    if term is None:
        return ct
    if ct is None:
        return term
    if (type(ct) is Batched and type(term) is Batched and ct.data.shape == term.data.shape
            and ct.data.dtype == term.data.dtype):
        ct.data += term.data
        return ct
    return ct + term


def reverse_batched(reverse, cfg, saved, g):
    """``reverse(cfg, saved, g)`` as eager mode's sweep calls it (tape/core.py
    ReverseTrace.backward): a rule that raises TypeError or ValueError on a batched
    cotangent runs once per direction (without one the error is raised again)."""
    try:
        return reverse(cfg, saved, g)
    except (TypeError, ValueError):
        return reverse_per_direction(reverse, cfg, saved, g)


def inline_terms(inline, active, g, operands, out, const, batched=None, derivative_value=None):
    """(argument index, cotangent expression, fresh) of an inlined rule (`Primitive.inline`):
    the same arithmetic as the rule's reverse when nothing broadcasts. `derivative_value`: an
    expression of the program equal to a unary rule's derivative (``v7``, ``-v7``), used
    instead of calling it.

    `batched`: in batch mode, the shape ``(W,) + shape`` of the data of a cotangent `g` that
    has the result's shape. Each term is then written on that data where `g` is such a
    `Batched` (what `tape.batching` computes for the rule's own NumPy calls then: the same
    ufunc on the same arrays), and as the rule's expression on `g` otherwise."""
    def on_data(expression, data, same_shape=True):
        if batched is None:
            return expression
        test = f"type({g}) is _B" + (f" and {g}.data.shape == {batched!r}" if same_shape else "")
        return f"(_B({data}) if {test} else {expression})"

    kind = inline[0]
    if kind == "unary":
        _, derivative, use_ans, times = inline
        at = out if use_ans else operands[0]
        if times is not None:
            t = const(times, 'times')
            yield 0, on_data(f"{t}({g}, {at})", f"{t}({g}.data, {at})"), True
        else:
            d = derivative_value or f"{const(derivative, 'derivative')}({at})"
            yield 0, on_data(f"{g} * {d}", f"{g}.data * {d}"), True
    elif kind == "linear":
        for k in range(2):
            if active[k]:
                yield ((k, g, False) if k == 0 or inline[1] > 0
                       else (k, on_data(f"-{g}", f"-{g}.data", False), True))
    elif kind == "product":
        for k in range(2):
            if active[k]:
                yield k, on_data(f"{g} * {operands[1 - k]}", f"{g}.data * {operands[1 - k]}"), True
    elif kind == "binary":
        _, d_first, d_second, uses_ans, times_second = inline
        ans = out if uses_ans else "None"
        for k, d in enumerate((d_first, d_second)):
            if not active[k]:
                continue
            if k == 1 and times_second is not None:
                times = const(times_second, 'times')
                rest = f"{operands[0]}, {operands[1]}, {ans}"
                yield k, on_data(f"{times}({g}, {rest})", f"{times}({g}.data, {rest})"), True
                continue
            partial = f"{const(d, 'partial')}({operands[0]}, {operands[1]}, {ans})"
            yield k, on_data(f"{g} * {partial}", f"{g}.data * {partial}"), True
    elif kind == "map":
        adjoint = const(inline[1], 'adjoint')
        yield 0, on_data(f"{adjoint}({g})", f"{adjoint}({g}.data)", False), True
    else:
        raise ValueError(f"unknown inline rule {kind!r}")


INLINE_KINDS = ("unary", "linear", "product", "binary", "map")


def basic_index(index) -> bool:
    """Whether `index` selects each element at most once and gives a view: integers, slices,
    None and Ellipsis only."""
    items = index if type(index) is tuple else (index,)
    return all(i is None or i is Ellipsis or type(i) in (int, slice) or isinstance(i, np.integer)
               for i in items)
