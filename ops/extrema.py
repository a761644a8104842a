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

import math

import numpy as np

from tape.backend import array_module
from tape.batching import Batched
from tape.core import Tracer, primal
from tape.rules import register_function

from ._util import defprimitive, dtype_of, shape_of
from .reductions import (_cast, _differentiable, _dtype, _given, _refuse, masked, normalize_axis,
                         restore_reduced)


def _extremum_impl(x, axis, keepdims=False, initial=None, kind="max"):
    extra = {} if initial is None else {"initial": initial}
    if type(x) is np.ndarray:   # speed-up: np.max's own path for an ndarray, without dispatch
        return (x.max if kind == "max" else x.min)(axis=axis, keepdims=keepdims, **extra)
    return (np.max if kind == "max" else np.min)(x, axis=axis, keepdims=keepdims, **extra)


def _tie_weights(x, out, axis, keepdims, initial=None):
    """Where each slice's extremum is: `(hit, counts, hits)`, `hit` the boolean mask of the
    entries that equal their slice's extremum, `counts` the number of hits in each slice (in
    `x`'s dtype, with the reduced axes kept) or None when no slice has a tie, and `hits` the
    number of hits in all (None for a complex `x`). The weights are
    `_weights(hit, counts, dtype)`: 1 / (number of ties) at the hits, 0 elsewhere.

    Computed on plain values: the weights are locally constant, so they carry no derivative.
    """
    x = primal(x)
    best = restore_reduced(primal(out), shape_of(x), axis, keepdims)
    hit = x == best
    if np.isnan(best).any():   # (speed-up: only then can a NaN entry be a hit)
        hit = hit | (np.isnan(x) & np.isnan(best))
    dtype = _dtype(x)
    if dtype.kind != "f":
        return hit, np.sum(hit.astype(dtype), axis=axis, keepdims=True), None
    hits = int(np.count_nonzero(hit))
    if initial is None and hits == _size(out):
        # (speed-up) Every slice has at least one hit (its extremum is one of its entries, a
        # NaN one when it holds NaN), so as many hits as slices means one in each: no ties.
        return hit, None, hits
    counts = np.sum(hit.astype(dtype), axis=axis, keepdims=True)
    if counts.size and counts.max() <= 1:
        return hit, None, hits   # no ties (speed-up): hit / 1 is hit, the same bits
    return hit, counts, hits


def _weights(hit, counts, dtype):
    weights = hit.astype(dtype)
    return weights if counts is None else weights / np.maximum(counts, 1)


def _size(out) -> int:
    return math.prod(shape_of(out))


def _plain(g) -> bool:
    """Whether `g` is a plain array (NumPy or CuPy), neither traced nor batched."""
    return not isinstance(g, (Tracer, Batched)) and (
        isinstance(g, (np.ndarray, np.generic)) or hasattr(g, "__cuda_array_interface__"))


def _extremum_augmented(cfg, x, axis, keepdims=False, initial=None, kind="max"):
    out = extremum(x, axis=axis, keepdims=keepdims, initial=initial, kind=kind)
    return out, (_tie_weights(x, out, axis, keepdims, initial), _dtype(primal(x)), axis,
                 keepdims)


# Below this fraction of hits, the reverse rule copies the cotangent to the hits of an array
# filled with g * 0; above it, a masked copy (a branch per entry) is slower than a product.
_SPARSE_HITS = 1 / 512


def _extremum_reverse(cfg, saved, g):
    (hit, counts, hits), dtype, axis, keepdims = saved
    g = restore_reduced(g, shape_of(hit), axis, keepdims)
    if (hits is not None and len(shape_of(hit)) and _plain(g)
            and np.result_type(dtype_of(g), dtype) == dtype):
        # (speed-up) g * weights, the same bits, without the division by the counts at every
        # entry: each slice's g times its weight 1 / count (g * 1 is g without ties) at the
        # hits, and elsewhere g * 0 (a zero of g's sign, NaN where g is infinite or NaN), which
        # 0 * (g / count) is too.
        at_hits = g if counts is None else g * (dtype.type(1) / np.maximum(counts, 1))
        if hits <= _SPARSE_HITS * hit.size:
            grad = array_module(hit).empty(shape_of(hit), dtype)
            np.copyto(grad, g * dtype.type(0))
            np.copyto(grad, at_hits, where=hit)
        else:
            grad = hit.astype(dtype)
            grad *= at_hits
        return (grad,)
    return (g * _weights(hit, counts, dtype),)


def _extremum_forward(cfg, primals, tangents, axis, keepdims=False, initial=None, kind="max"):
    x, = primals
    out = extremum(x, axis=axis, keepdims=keepdims, initial=initial, kind=kind)
    hit, counts, _ = _tie_weights(x, out, axis, keepdims, initial)
    # A selection: the entries that are not the extremum pass nothing, not 0 times their
    # tangent (an infinite one, sqrt's at 0, would make a NaN the reverse rule does not make).
    t, dtype = tangents[0], _dtype(primal(x))
    if counts is not None:   # each tangent times its weight, 1 / count, taken at the hits
        t = t * (dtype.type(1) / np.maximum(counts, 1))
    elif np.result_type(dtype_of(t), dtype) != dtype_of(t):
        t = t * dtype.type(1)   # (the dtype that the weights would give)
    # (speed-up) the product of the selection with the weights, without the weights: t * w
    # at the hits, 0 * 0 elsewhere, the same bits.
    return out, np.sum(np.where(hit, t, 0), axis=axis, keepdims=keepdims)


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
