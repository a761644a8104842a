"""Extrema: max, min, amax, amin (the `extremum` primitive) and ptp, with their tie convention.

The cotangent is split equally among tied extrema, so d max([1, 3, 3]) = [0, 1/2, 1/2]; forward
mode takes the mean tangent of the tied entries, which is the transpose of that. With
`initial=`, entries tied with `initial` still get the cotangent, and a slice whose extremum is
`initial` alone gets none. When a slice holds NaN the result is NaN and its NaN entries share
the cotangent. ptp is max - min, each with that convention. Arguments (`axis`, `keepdims`,
`dtype`, `where=` with `initial=` as NumPy asks, refused `out=`) are taken as in
`ops.reductions`; nanmax and nanmin are in `ops.reductions_nan`.

>>> from tape import autodiff, Reverse, Active
>>> (g,), = autodiff(Reverse, lambda x: np.max(x), Active, Active(np.array([1.0, 3.0, 3.0])))
>>> g
array([0. , 0.5, 0.5])
"""
from __future__ import annotations

import numpy as np

from tape.core import Tracer, primal
from tape.rules import register_function

from ._util import defprimitive, shape_of
from .reductions import (_cast, _differentiable, _dtype, _given, _refuse, masked, normalize_axis,
                         restore_reduced)


def _extremum_impl(x, axis, keepdims=False, initial=None, kind="max"):
    extra = {} if initial is None else {"initial": initial}
    if type(x) is np.ndarray:   # speed-up: np.max's own path for an ndarray, without dispatch
        return (x.max if kind == "max" else x.min)(axis=axis, keepdims=keepdims, **extra)
    return (np.max if kind == "max" else np.min)(x, axis=axis, keepdims=keepdims, **extra)


def _tie_weights(x, out, axis, keepdims):
    """1 / (number of ties) at the entries that equal their slice's extremum, 0 elsewhere.

    Computed on plain values: the weights are locally constant, so they carry no derivative.
    """
    x = primal(x)
    best = restore_reduced(primal(out), shape_of(x), axis, keepdims)
    hit = x == best
    if np.isnan(best).any():   # (speed-up: only then can a NaN entry be a hit)
        hit = hit | (np.isnan(x) & np.isnan(best))
    hit = hit.astype(_dtype(x))
    counts = np.sum(hit, axis=axis, keepdims=True)
    if hit.dtype.kind == "f" and counts.size and counts.max() <= 1:
        return hit   # no ties (speed-up): hit / 1 is hit, the same bits
    return hit / np.maximum(counts, 1)


def _extremum_augmented(cfg, x, axis, keepdims=False, initial=None, kind="max"):
    out = extremum(x, axis=axis, keepdims=keepdims, initial=initial, kind=kind)
    return out, (_tie_weights(x, out, axis, keepdims), axis, keepdims)


def _extremum_reverse(cfg, saved, g):
    weights, axis, keepdims = saved
    return (restore_reduced(g, shape_of(weights), axis, keepdims) * weights,)


def _extremum_forward(cfg, primals, tangents, axis, keepdims=False, initial=None, kind="max"):
    x, = primals
    out = extremum(x, axis=axis, keepdims=keepdims, initial=initial, kind=kind)
    weights = _tie_weights(x, out, axis, keepdims)
    # A selection: the entries that are not the extremum pass nothing, not 0 times their
    # tangent (an infinite one, sqrt's at 0, would make a NaN the reverse rule does not make).
    picked = np.where(weights != 0, tangents[0], 0)
    return out, np.sum(picked * weights, axis=axis, keepdims=keepdims)


extremum = defprimitive("extremum", _extremum_impl, _extremum_augmented, _extremum_reverse,
                        _extremum_forward)


def _extremum_function(kind):
    numpy_fn = np.max if kind == "max" else np.min

    def reduce(a, axis=None, out=None, keepdims=False, initial=None, where=None, dtype=None):
        _refuse(kind, out)
        if isinstance(initial, Tracer):
            raise NotImplementedError(f"np.{kind} with a traced initial= is not supported; use "
                                      f"np.{kind}imum(np.{kind}(x), initial)")
        extra = {"initial": initial} if _given(initial) else {}
        selected = _given(where) and where is not True
        if not _differentiable(a, dtype) or (selected and not _given(initial)):
            # (NumPy's own error for a mask without initial=: the reduction has no identity)
            mask = {"where": primal(where)} if selected else {}
            return numpy_fn(_cast(primal(a), dtype), axis=axis, keepdims=keepdims, **extra,
                            **mask)
        a = _cast(a, dtype)
        if selected:   # the entries left out can never win, and get no derivative
            a, _ = masked(a, where, -np.inf if kind == "max" else np.inf)
        return extremum(a, axis=normalize_axis(axis, len(shape_of(a))), keepdims=bool(keepdims),
                        initial=extra.get("initial"), kind=kind)
    reduce.__doc__ = (f"np.{kind} / np.a{kind} (and ndarray.{kind}, ufunc.reduce) on traced "
                      "values; ties share the cotangent equally.")
    return reduce


_max = _extremum_function("max")
_min = _extremum_function("min")


def _ptp(a, axis=None, out=None, keepdims=False):
    """np.ptp: max - min (each with its tie convention)."""
    _refuse("ptp", out)
    return _max(a, axis=axis, keepdims=keepdims) - _min(a, axis=axis, keepdims=keepdims)


for _fn, _rule in [(np.max, _max), (np.amax, _max), (np.min, _min), (np.amin, _min),
                   (np.ptp, _ptp)]:
    register_function(_fn, _rule)
