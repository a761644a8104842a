"""Sorting and selection: np.sort, np.partition, np.select, np.quantile/percentile/median.

A sort is a data-dependent permutation: the values move, the derivative moves with them. So
`sort(x)` is `permute(x, argsort(x))`, whose reverse rule applies the inverse permutation to the
cotangent (a gather again, hence itself differentiable) and whose forward rule permutes the
tangent. Quantiles interpolate linearly between two sorted values.

>>> from tape import autodiff, Reverse, Active
>>> (g,), = autodiff(Reverse, lambda x: np.sort(x)[0], Active, Active(np.array([3.0, 1.0, 2.0])))
>>> g
array([0., 1., 0.])

Conventions at non-smooth points:

- Ties: the permutation is NumPy's stable argsort, so the k-th sorted value takes its
  derivative from the k-th of the tied entries in index order (the derivative is not shared).
- np.partition's non-kth entries are ordered as np.argpartition orders them (a valid partition,
  not necessarily the arrangement np.partition itself returns).
- Quantiles are differentiable in `q` too; where q * (n - 1) is an integer the derivative is
  the right-sided one (interpolating towards the next larger value).
"""
from __future__ import annotations

import numpy as np

from tape.backend import array_module
from tape.core import Tracer, primal
from tape.rules import register_function

from ._util import defprimitive, shape_of

_AxisError = getattr(np, "exceptions", np).AxisError


# -- permute along an axis: the differentiable core of sort and partition -------------------------
# permute(x, perm=p, axis=k) is take_along_axis(x, p, k) for a permutation p of each slice.
def _permute_impl(x, perm, axis):
    return array_module(x).take_along_axis(x, perm, axis=axis)


def _permute_augmented(cfg, x, perm, axis):
    return permute(x, perm=perm, axis=axis), (perm, axis)


def _permute_reverse(cfg, saved, g):
    perm, axis = saved
    inverse = array_module(perm).argsort(perm, axis=axis)
    return (permute(g, perm=inverse, axis=axis),)


def _permute_forward(cfg, primals, tangents, perm, axis):
    return permute(primals[0], perm=perm, axis=axis), permute(tangents[0], perm=perm, axis=axis)


permute = defprimitive("permute", _permute_impl, _permute_augmented, _permute_reverse,
                       _permute_forward)


def _flat_if_none(a, axis):
    """NumPy's axis=None: work on the flattened array along axis 0."""
    if axis is None:
        return np.reshape(a, (-1,)), 0
    ndim = len(shape_of(a))
    if not -ndim <= axis < ndim:
        raise _AxisError(axis, ndim)
    return a, axis


def sort(a, axis=-1, kind=None, order=None, *, stable=None):
    """np.sort of a traced array: the cotangent goes back through the sorting permutation.

    >>> sort(np.array([[3.0, 1.0], [0.0, 2.0]]), axis=None)
    array([0., 1., 2., 3.])
    """
    if order is not None:
        raise NotImplementedError("np.sort with order= (structured arrays) is not differentiable")
    a, axis = _flat_if_none(a, axis)
    xp = array_module(a)
    # CuPy's sort is always stable and accepts no `kind`.
    perm = xp.argsort(primal(a), axis=axis, **({"kind": "stable"} if xp is np else {}))
    return permute(a, perm=perm, axis=axis)


def partition(a, kth, axis=-1, kind="introselect", order=None):
    """np.partition of a traced array: entries at `kth` are in sorted position, smaller ones
    before, larger ones after; derivatives move with the values.

    >>> float(partition(np.array([3.0, 1.0, 2.0, 0.0]), 1)[1])
    1.0
    """
    if order is not None:
        raise NotImplementedError("np.partition with order= is not differentiable")
    a, axis = _flat_if_none(a, axis)
    xp = array_module(a)
    extra = {"kind": kind} if xp is np else {}
    perm = xp.argpartition(primal(a), primal(kth), axis=axis, **extra)
    return permute(a, perm=perm, axis=axis)


register_function(np.sort, sort)
register_function(np.partition, partition)


# -- select: the first true condition picks its choice ---------------------------------------------
def select(condlist, choicelist, default=0):
    """np.select: conditions carry no derivative; each choice and `default` receive the
    cotangent where they are selected (and broadcast as NumPy broadcasts them).

    >>> select([np.array([True, False]), np.array([True, True])], [1.0, 2.0], default=0.0)
    array([1., 2.])
    """
    if len(condlist) != len(choicelist):
        raise ValueError("list of cases must be same length as list of conditions")
    if len(condlist) == 0:
        raise ValueError("select with an empty condition list is not possible")
    conds = [primal(c) if hasattr(c, "dtype") else np.asarray(c) for c in condlist]
    for i, c in enumerate(conds):
        if c.dtype != np.bool_:
            raise TypeError(f"invalid entry {i} in condlist: should be boolean ndarray")
    result = default
    for cond, choice in zip(reversed(conds), reversed(list(choicelist))):
        result = np.where(cond, choice, result)
    # NumPy's result has the broadcast shape even when default was the only thing selected.
    shape = np.broadcast_shapes(*(shape_of(v) for v in (*conds, *choicelist, default)))
    return result if shape_of(result) == shape else np.broadcast_to(result, shape)


register_function(np.select, select)


# -- quantiles: linear interpolation between neighbouring sorted values ------------------------------
def _quantile(a, q, axis, keepdims):
    shape = shape_of(a)
    ndim = len(shape)
    if axis is None:
        axes = tuple(range(ndim))
    else:
        axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
        for ax in axes:
            if not -ndim <= ax < ndim:
                raise _AxisError(int(ax), ndim)
        if len({int(ax) % ndim for ax in axes}) != len(axes):
            raise ValueError("repeated axis")
        axes = tuple(sorted(int(ax) % ndim for ax in axes))
    kept = tuple(i for i in range(ndim) if i not in axes)
    # Reduced axes first, merged into one: the quantile is then taken along axis 0.
    x = a if axes + kept == tuple(range(ndim)) else np.transpose(a, axes + kept)
    x = np.reshape(x, (-1,) + tuple(shape[i] for i in kept))
    n = shape_of(x)[0]
    s = sort(x, axis=0)

    xp = array_module(a)
    if not isinstance(q, Tracer):
        q = xp.asarray(q, dtype=np.result_type(primal(a), np.float64))
    pos = q * (n - 1)
    lo = xp.clip(xp.floor(primal(pos)), 0, n - 1).astype(np.intp)
    hi = xp.minimum(lo + 1, n - 1)
    frac = pos - lo                      # differentiable in q when q is traced
    if lo.ndim == 0:
        lo, hi = int(lo), int(hi)        # a basic index: a cheap getitem and scatter
    q_shape = shape_of(frac)
    rest = shape_of(s)[1:]
    frac = np.reshape(frac, q_shape + (1,) * len(rest))
    below = s[lo]
    out = below + frac * (s[hi] - below)
    if keepdims:
        out = np.reshape(out, q_shape + tuple(1 if i in axes else shape[i] for i in range(ndim)))
    return out


def _check_q(a, q, high):
    qv = array_module(a).asarray(primal(q))
    if bool(((qv < 0) | (qv > high)).any()):
        raise ValueError(f"{'Quantiles' if high == 1 else 'Percentiles'} must be in the range "
                         f"[0, {high}]")


def _unsupported(out, method, weights, interpolation):
    if out is not None or weights is not None or interpolation is not None:
        raise NotImplementedError("out=, weights= and interpolation= are not supported on "
                                  "traced values")
    if method != "linear":
        raise NotImplementedError(f"only method='linear' is differentiable, got {method!r}")


def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
             keepdims=False, *, weights=None, interpolation=None):
    """np.quantile (method 'linear'), differentiable in `a` and in `q`.

    >>> float(quantile(np.array([1.0, 2.0, 3.0, 4.0]), 0.5))
    2.5
    """
    _unsupported(out, method, weights, interpolation)
    _check_q(a, q, 1)
    return _quantile(a, q, axis, keepdims)


def percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
               keepdims=False, *, weights=None, interpolation=None):
    """np.percentile (method 'linear'): quantile at q / 100.

    >>> percentile(np.array([1.0, 2.0, 3.0, 4.0]), [0, 100])
    array([1., 4.])
    """
    _unsupported(out, method, weights, interpolation)
    _check_q(a, q, 100)
    return _quantile(a, np.true_divide(q, 100), axis, keepdims)


def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """np.median: the 0.5 quantile (the mean of the middle two values for even counts).

    >>> median(np.array([[1.0, 5.0, 2.0], [4.0, 3.0, 0.0]]), axis=1)
    array([2., 3.])
    """
    _unsupported(out, "linear", None, None)
    return _quantile(a, 0.5, axis, keepdims)


register_function(np.quantile, quantile)
register_function(np.percentile, percentile)
register_function(np.median, median)
