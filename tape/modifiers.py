"""What the mode modifiers do: strong zero, NaN check, holomorphic reverse, complex conventions.

- **Strong zero** (`set_strong_zero(mode)`): a zero cotangent (or tangent) times an infinite or
  NaN partial derivative gives 0, not NaN. Rules multiply by their partials through
  `ops._util.times_partial`, which reads `STRONG_ZERO` (a context variable the trace sets for
  the duration of its `autodiff` call; an enclosing strong-zero call keeps it on in nested
  calls). Off, the product is plain IEEE arithmetic: ``0 * inf = nan``.
- **NaN check** (`set_nan_check(mode)`): the reverse sweep inspects every cotangent a rule
  returns (forward mode: every tangent) and raises `NaNError` at the first NaN, naming the op,
  its record on the tape and the argument. Off, the sweep runs unchanged: the check is a
  wrapper put around the sweep only in that mode.
- **Complex numbers**: rules work in the *transpose* convention (the cotangent of a holomorphic
  f is ``g * f'(z)``, exactly the real formula), and `autodiff` conjugates complex seeds on the
  way in and complex derivatives on the way out, so that users see Enzyme.jl's convention: the
  derivative of a real f of z = x + iy is ``df/dx + i df/dy``. `holomorphic_sweep` implements
  `ReverseHolomorphic`. docs/complex.md states the conventions.
- **Runtime activity** (`set_runtime_activity(mode)`): as in Enzyme.jl, a value whose shadow is
  the primal itself (`Duplicated(c, c)`, the same memory) is inactive: `runtime_inactive`
  makes such an argument Const, and gives such a leaf of a container a throwaway zero shadow.
  Without the modifier `Duplicated(c, c)` is refused (the gradient would be added into `c`).
  Everything else is decided at run time already (a value is active when it is a tracer), so
  the activity-unstable code that needs the modifier in Enzyme.jl works in every mode.
"""
from __future__ import annotations

from typing import Iterable, Iterator, Sequence

import numpy as np

from .backend import add_or_none, array_module
from .batching import Batched
from .activities import Annotation, BatchDuplicated, Const, Duplicated
from .arguments import _is_float
from .core import STRONG_ZERO, Trace, Tracer, is_complex, peek, primal
from .errors import ActivityError, NaNError
from .pytree import flatten, unflatten

__all__ = ["STRONG_ZERO", "strong_zero_enabled", "strong_zero_scope", "nan_checked",
           "nan_checked_process", "is_complex", "to_user", "user_cotangents",
           "check_complex_return", "holomorphic_sweep", "runtime_inactive"]


def runtime_inactive(annotated: Sequence[Annotation]) -> list[Annotation]:
    """The arguments as runtime activity sees them: a Duplicated argument whose shadow is its
    primal (the same array object or memory) becomes Const, as Enzyme.jl treats it. In a
    container, a leaf whose shadow is the leaf itself gets a zero shadow of its own, so that
    it seeds nothing and the gradient it receives is dropped. Numbers are values, not memory:
    ``Duplicated(3.0, 3.0)`` stays a tangent of 3.0.

    >>> x, dx = np.ones(2), np.zeros(2)
    >>> runtime_inactive([Duplicated(x, x), Duplicated(x, dx)])
    [Const(array([1., 1.])), Duplicated(array([1., 1.]), array([0., 0.]))]
    """
    return [_runtime_inactive(a) if isinstance(a, Duplicated) else a for a in annotated]


def _runtime_inactive(ann: Duplicated) -> Annotation:
    leaves, td = flatten(ann.val)
    directions = ann.dval if isinstance(ann, BatchDuplicated) else (ann.dval,)
    shadows = []
    for dval in directions:
        shadow_leaves, shadow_td = flatten(dval)
        if shadow_td != td:
            return ann   # the structure check names the difference
        shadows.append(shadow_leaves)
    own = [[_is_own_shadow(x, dx) for x, dx in zip(leaves, ds)] for ds in shadows]
    if not any(map(any, own)):
        return ann
    differentiable = [i for i, x in enumerate(leaves) if _is_float(x)]
    if not isinstance(ann, BatchDuplicated) and all(own[0][i] for i in differentiable):
        return Const(ann.val)   # (a batch keeps its width: its results are W-tuples)
    fresh = [unflatten(td, [_zeros_like(dx) if mine else dx for dx, mine in zip(ds, row)])
             for ds, row in zip(shadows, own)]
    return type(ann)(ann.val, tuple(fresh) if isinstance(ann, BatchDuplicated) else fresh[0])


def _zeros_like(x):
    if isinstance(x, Tracer):   # a zero of the leaf's level (an enclosing differentiation's)
        return np.zeros_like(x)
    return array_module(x).zeros_like(x)


def _has_memory(x) -> bool:
    return hasattr(x, "__array_interface__") or hasattr(x, "__cuda_array_interface__")


def _is_own_shadow(x, dx) -> bool:
    """Whether shadow `dx` is primal `x` itself: the same object, or an array over exactly
    the same memory (``x[...]``). Numbers never are."""
    if isinstance(x, (int, float, complex, np.generic)):
        return False
    if dx is x:
        return True
    # (an enclosing differentiation's values: `c` and `c[...]` are two tracers of one memory)
    x, dx = peek(x), peek(dx)
    if not (_has_memory(x) and type(dx) is type(x)):
        return False
    if (x.shape, x.strides, x.dtype) != (dx.shape, dx.strides, dx.dtype):
        return False
    interface = ("__array_interface__" if hasattr(x, "__array_interface__")
                 else "__cuda_array_interface__")
    return getattr(x, interface)["data"][0] == getattr(dx, interface)["data"][0]


def strong_zero_enabled() -> bool:
    """Whether the current `autodiff` call (or an enclosing one) runs in strong-zero mode.

    >>> strong_zero_enabled()
    False
    """
    return STRONG_ZERO.get()


class strong_zero_scope:
    """``with strong_zero_scope(on):`` strong-zero mode on inside the block when `on` (for a
    sweep that runs after its trace has closed, as split mode's reverse does).

    >>> with strong_zero_scope(True):
    ...     strong_zero_enabled()
    True
    """

    __slots__ = ("on", "token")

    def __init__(self, on: bool):
        self.on, self.token = on, None

    def __enter__(self):
        if self.on:
            self.token = STRONG_ZERO.set(True)
        return self

    def __exit__(self, *exc):
        if self.token is not None:
            STRONG_ZERO.reset(self.token)
        return False


# --------------------------------------------------------------------------------------------
# NaN check


def _has_nan(x) -> bool:
    if x is None:
        return False
    if isinstance(x, tuple):
        return any(_has_nan(v) for v in x)
    x = primal(x)
    data = x.data if isinstance(x, Batched) else x
    dt = getattr(data, "dtype", None)
    if dt is None:
        return isinstance(data, (float, complex)) and data != data
    if dt.kind not in "fc":
        return False
    return bool(array_module(data).isnan(data).any())


class _NaNCheckedRule:
    """A record's primitive, seen by the sweep, whose reverse rule is checked for NaNs."""

    __slots__ = ("prim", "index", "total", "name")

    # Every cotangent goes through `reverse`, where it is checked: none of the sweep's in-place
    # speed-ups (tape.core.Primitive), which would skip the check.
    accumulate_into = reverse_in_place = None
    reverse_fresh = False

    def __init__(self, prim, index, total):
        self.prim, self.index, self.total, self.name = prim, index, total, prim.name

    def reverse(self, cfg, saved, g):
        if _has_nan(g):
            raise NaNError(self.name, self.index, self.total, None, incoming=True)
        cts = self.prim.reverse(cfg, saved, g)
        for i, c in enumerate(cts):
            if _has_nan(c):
                raise NaNError(self.name, self.index, self.total, i, incoming=False)
        return cts


def nan_checked(sweep: Iterable[tuple], total: int) -> Iterator[tuple]:
    """The records of `sweep` (last first) with each primitive wrapped by a NaN check.

    Used by `ReverseTrace.backward` in NaN-check mode only, so that the ordinary sweep pays
    nothing for the feature."""
    index = total
    for prim, cfg, saved, in_slots, out_slot in sweep:
        index -= 1
        yield _NaNCheckedRule(prim, index, total), cfg, saved, in_slots, out_slot


def nan_checked_process(trace, process):
    """`process` (a ForwardTrace's) with the tangent it returns checked for NaN."""
    count = [0]

    def checked(prim, args, params):
        index = count[0]
        count[0] = index + 1
        tangents_in = [a.tangent for a in args
                       if isinstance(a, Tracer) and a.level is trace]
        out = process(prim, args, params)
        outs = out if isinstance(out, tuple) else (out,)
        if any(_has_nan(o.tangent) for o in outs):
            raise NaNError(prim.name, index, None, None, incoming=any(
                _has_nan(t) for t in tangents_in), forward=True)
        return out
    return checked


# --------------------------------------------------------------------------------------------
# Complex numbers


def to_user(g):
    """Between the user's convention (Enzyme's) and the sweep's (the transpose convention),
    either way: complex values are conjugated, real ones returned as they are.

    >>> to_user(np.array([1 + 2j])), to_user(1.5)
    (array([1.-2.j]), 1.5)
    """
    return np.conjugate(g) if is_complex(g) else g


def user_cotangents(cts: dict, leaves: Iterable[tuple]) -> dict:
    """The sweep's cotangents `cts` (by slot) in the user's convention, for the `leaves`, pairs
    ``(primal value, slot)``: conjugated for a complex leaf; the real part for a real leaf
    whose cotangent came back complex (it went through complex intermediates). In place."""
    for x, s in leaves:
        g = cts.get(s)
        if g is not None and is_complex(g):
            cts[s] = np.conjugate(g) if is_complex(x) else np.real(g)
    return cts


def check_complex_return(mode, width) -> None:
    """Refuse an Active complex result unless the mode is `ReverseHolomorphic` (as Enzyme.jl
    does): which derivative is meant would be ambiguous."""
    if not mode.holomorphic:
        raise ActivityError(
            "reverse mode with an Active return needs a real scalar result, but the function "
            "returned a complex number, and which derivative is wanted is then ambiguous. For a "
            "holomorphic function use ReverseHolomorphic (it returns f'(z)); otherwise return a "
            "real scalar, e.g. np.real(f(z)), np.imag(f(z)) or np.abs(f(z))**2 (docs/complex.md)")
    if width is not None:
        raise ActivityError("ReverseHolomorphic does not support batch mode (BatchDuplicated "
                            "arguments); call it once per seed")


def holomorphic_sweep(trace, seeds: dict, out, keep: Sequence[int], complex_slots: set) -> dict:
    """`ReverseHolomorphic`'s sweep for `out`, a complex scalar result traced by `trace`, as
    Enzyme.jl does
    it: with the result seeded by 1 and by i (the user's convention), a complex input gets
    ``(conj(d_1) + i conj(d_i)) / 2``, the Wirtinger derivative df/dz, which is f'(z) when f is
    holomorphic; a real input gets d_1. `seeds` (overwritten Duplicated buffers, already in the
    sweep's convention) get a sweep of their own. Returns derivatives in the sweep's convention,
    like `ReverseTrace.backward`.
    """
    result: dict = {}
    if seeds:
        result = trace.backward(seeds, keep, consume=False)
    out_slot = out.slot
    one = np.ones((), dtype=getattr(primal(out), "dtype", np.complex128))
    d_1 = trace.backward({out_slot: one}, keep, consume=False)
    # The user's seed i is the sweep's seed conj(i) = -i.
    d_i = trace.backward({out_slot: -1j * one}, keep)
    for s in keep:
        g1, gi = d_1.get(s), d_i.get(s)
        if s in complex_slots:
            # conj of (conj(conj(g1)) + i conj(conj(gi))) / 2: `autodiff` conjugates it back.
            total = None if g1 is None and gi is None else _conj_half(g1, gi)
        else:
            total = g1
        result[s] = add_or_none(result.get(s), total)
    return result


def _conj_half(g1, gi):
    g1 = 0 if g1 is None else g1
    gi = 0 if gi is None else gi
    return np.conjugate((g1 + 1j * gi) * 0.5)


Trace.hooks.update(nan_checked_sweep=nan_checked, nan_checked_process=nan_checked_process)
