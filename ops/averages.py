"""Averages and variances: mean, average, var and std.

mean is the sum (`reductions.sum_`) divided by the number of reduced entries; average is
``sum(a * w) / sum(w)``, differentiable in `a` and in `weights`; var is the mean squared
deviation divided by ``n - ddof``. Arguments (`axis`, `keepdims`, `dtype`, `where=`, refused
`out=`) are taken as in `ops.reductions`; nanmean is there too, nanvar and nanstd are in
`ops.reductions_nan`.

Convention at a non-smooth point: std'(0) = 0. Where the variance is exactly 0 (a constant
slice) the derivative of std is 0 instead of 0 * inf = nan (`sqrt_of_variance`), as for
norm'(0) = 0.

>>> from tape import autodiff, Reverse, Active
>>> (g,), = autodiff(Reverse, lambda x: np.std(x), Active, Active(np.array([2.0, 2.0, 2.0])))
>>> g
array([0., 0., 0.])
"""
from __future__ import annotations

import math
import warnings

import numpy as np
from numpy.lib.array_utils import normalize_axis_tuple

from tape.core import Tracer, peek, primal
from tape.rules import register_function

from ._util import dtype_of, numpy_scalar, shape_of
from .reductions import _count, _differentiable, _given, _refuse, masked, normalize_axis, sum_


def _selected_count(mask, axes, keepdims):
    """How many entries `mask` selects in each reduced slice (a float array, NumPy's count)."""
    return np.sum(mask, axis=axes, keepdims=bool(keepdims), dtype=np.float64)


def _mean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
    """np.mean: the sum divided by the number of reduced entries (those `where` selects)."""
    _refuse("mean", out)
    if not _differentiable(a, dtype):
        extra = {} if not _given(where) else {"where": primal(where)}
        return np.mean(primal(a), axis=axis, dtype=dtype, keepdims=keepdims, **extra)
    shape = shape_of(a)
    axes = normalize_axis(axis, len(shape))
    a, mask = masked(a, where, 0)
    # As NumPy: float16 is summed and divided in float32, and the mean cast back (a float16
    # sum overflows at 65504, and so does a float16 count).
    half = dtype is None and np.result_type(peek(a)) == np.float16
    total = sum_(a, axis=axes, dtype=np.float32 if half else dtype, keepdims=bool(keepdims))
    if mask is not None:   # NumPy's nan (and warning) for a slice with nothing selected
        with np.errstate(invalid="warn", divide="warn"):
            mean = total / _selected_count(mask, axes, keepdims).astype(
                np.result_type(peek(total)), copy=False)
        return mean.astype(np.float16) if half else mean
    count = _count(shape, axes)
    if count == 0:   # NumPy's nan for an empty slice, with its warning
        warnings.warn("Mean of empty slice.", RuntimeWarning, stacklevel=3)
        return total * math.nan
    return (total / count).astype(np.float16) if half else total / count


# -- var / std ------------------------------------------------------------------------------------
def _var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, mean=None,
         correction=None):
    """np.var: the mean squared deviation, divided by n - ddof instead of n (n: the entries
    `where` selects)."""
    _refuse("var", out)
    if _given(correction):
        ddof = correction
    if not _differentiable(a, dtype) and not isinstance(mean, Tracer):
        extra = {"mean": mean} if _given(mean) else {}
        if _given(where):
            extra["where"] = primal(where)
        return np.var(primal(a), axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims, **extra)
    shape = shape_of(a)
    axes = normalize_axis(axis, len(shape))
    centre = mean if _given(mean) else _mean(a, axis=axes, dtype=dtype, keepdims=True,
                                              where=where)
    d = a - centre
    square = d.real * d.real + d.imag * d.imag if np.iscomplexobj(d) else d * d
    square, mask = masked(square, where, 0)
    total = sum_(square, axis=axes, dtype=dtype, keepdims=bool(keepdims))
    if mask is not None:
        count = np.maximum(_selected_count(mask, axes, keepdims) - ddof, 0)
        with np.errstate(invalid="warn", divide="warn"):
            return total / count.astype(np.result_type(peek(total)), copy=False)
    return total / max(_count(shape, axes) - ddof, 0)


def _std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, mean=None,
         correction=None):
    """np.std: sqrt(var), with std'(0) = 0 on constant slices."""
    return sqrt_of_variance(_var(a, axis=axis, dtype=dtype, out=out, ddof=ddof,
                                 keepdims=keepdims, where=where, mean=mean,
                                 correction=correction))


def sqrt_of_variance(v):
    """sqrt(v) for a variance, with derivative 0 where v == 0 (a constant slice)."""
    if not isinstance(v, Tracer):
        return np.sqrt(v)
    flat = v == 0   # (an inactive comparison: a compiled program computes it at each call)
    # The inner where keeps sqrt away from 0, so no inf reaches the cotangent.
    return numpy_scalar(np.where(flat, 0, np.sqrt(np.where(flat, 1, v))))


# -- average --------------------------------------------------------------------------------------
def _average(a, axis=None, weights=None, returned=False, *, keepdims=False):
    """np.average: sum(a * w) / sum(w), differentiable in `a` and in `weights`."""
    if returned:
        raise NotImplementedError("np.average(..., returned=True) is not supported on traced "
                                  "values; compute np.sum(weights) separately")
    if weights is None:
        return _mean(a, axis=axis, keepdims=keepdims)
    shape, wshape = shape_of(a), shape_of(weights)
    axes = normalize_axis(axis, len(shape))
    if wshape != shape:
        if axis is None:
            raise TypeError("Axis must be specified when shapes of a and weights differ.")
        given = normalize_axis_tuple(axis, len(shape))
        if wshape != tuple(shape[i] for i in given):
            raise ValueError("Shape of weights must be consistent with shape of a along "
                             "specified axis.")
        order = tuple(int(i) for i in np.argsort(given))
        if order != tuple(range(len(order))):
            weights = np.transpose(weights, order)
        weights = np.reshape(weights, tuple(n if i in axes else 1 for i, n in enumerate(shape)))
    # NumPy sums in the common dtype of a and the weights (float64 at least for integer or
    # bool a): a float16 weight sum of 16 x 5000 would overflow to inf (and the average to 0).
    a_dtype, w_dtype = dtype_of(a), dtype_of(weights)
    dtype = (np.result_type(a_dtype, w_dtype, "f8") if a_dtype.kind in "biu"
             else np.result_type(a_dtype, w_dtype))
    scale = np.sum(weights, axis=axes, keepdims=keepdims, dtype=dtype)
    if bool(np.any(scale == 0)):   # (a decision on the sums only: a compiled function guards it)
        raise ZeroDivisionError("Weights sum to zero, can't be normalized")
    product = np.multiply(a, weights) if a_dtype == dtype == w_dtype else (
        np.multiply(_as_dtype(a, dtype), _as_dtype(weights, dtype)))
    return np.sum(product, axis=axes, keepdims=keepdims) / scale


def _as_dtype(x, dtype):
    if dtype_of(x) == dtype:
        return x
    return x.astype(dtype) if isinstance(x, Tracer) else np.asarray(x, dtype=dtype)


for _fn, _rule in [(np.mean, _mean), (np.var, _var), (np.std, _std), (np.average, _average)]:
    register_function(_fn, _rule)
