"""Reductions: sum, mean, prod, max/min, ptp, var/std, average, nansum/nanmean/nanprod, and the
cumulative sums and products.

Every reduction takes `axis` (None, an int or a tuple; negative allowed) and `keepdims` as NumPy
does; `out=` and `where=` are refused on traced values. Integer results (an integer input, or an
integer `dtype=`) carry no derivative and are computed on the plain values; float results keep
the dtype NumPy gives them (float32 stays float32).

Conventions at non-smooth points:

- max, min, amax, amin (and ptp): the cotangent is split equally among tied extrema, so
  d max([1, 3, 3]) = [0, 1/2, 1/2]; forward mode takes the mean tangent of the tied entries,
  which is the transpose of that. With `initial=`, entries tied with `initial` still get the
  cotangent, and a slice whose extremum is `initial` alone gets none. When a slice holds NaN the
  result is NaN and its NaN entries share the cotangent.
- prod, cumprod: exact at zeros, to every order. The rules never divide by an entry: they use the
  product of the *other* entries, built from exclusive cumulative products taken from both ends,
  so d prod([2, 0, 3]) = [0, 6, 0]. The reverse and forward rules of cumprod are first-order
  linear recurrences (`linear_recurrence`), whose own rules are linear recurrences again.
- std'(0) = 0: where the variance is exactly 0 (a constant slice) the derivative of std is 0
  instead of 0 * inf = nan, as for norm'(0) = 0.
- nansum, nanmean, nanprod: NaN entries are ignored and get a zero derivative (nanmax, nanmin,
  nanvar, nanstd, nancumsum, nancumprod too: `ops.reductions_nan`).
"""
from __future__ import annotations

import math
import warnings

import numpy as np
from numpy.lib.array_utils import normalize_axis_index, normalize_axis_tuple

from tape.backend import array_module
from tape.core import Tracer, primal
from tape.rules import register_function

from ._util import add_tangents, defprimitive, numpy_scalar, shape_of

_NO_VALUE = getattr(np, "_NoValue", None)


def normalize_axis(axis, ndim: int) -> tuple:
    """`axis` as a sorted tuple of non-negative ints (None means every axis).

    >>> normalize_axis((-1, 0), 3)
    (0, 2)
    """
    if type(axis) is tuple:   # speed-up: a tuple seen before (rules pass their own again)
        try:
            known = _NORMALIZED.get((axis, ndim))
        except TypeError:   # unhashable: NumPy's check below names the fault
            known = None
        if known is not None and _all_ints(axis):   # (1.0,) equals (1,) but is refused
            return known
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (int, np.integer)):   # the common case, without NumPy's generic path
        return (normalize_axis_index(axis, ndim),)
    out = tuple(sorted(normalize_axis_tuple(axis, ndim)))
    if type(axis) is tuple and len(_NORMALIZED) < 4096 and _all_ints(axis):
        _NORMALIZED[axis, ndim] = out
    return out


def _all_ints(items: tuple) -> bool:
    for i in items:
        if type(i) is not int:
            return False
    return True


# Tuples of Python ints that `normalize_axis` has normalized, by (axis, ndim).
_NORMALIZED: dict = {}


def restore_reduced(g, in_shape: tuple, axis, keepdims: bool):
    """Reshape a cotangent of a reduction so that it broadcasts against the input."""
    if keepdims:
        return g
    axes = normalize_axis(axis, len(in_shape))
    if axes == tuple(range(len(axes))):   # leading axes: broadcasting already lines g up
        return g
    shape = tuple(1 if i in axes else n for i, n in enumerate(in_shape))
    # np.reshape's own path for an ndarray, without its dispatch (speed-up)
    return g.reshape(shape) if type(g) is np.ndarray else np.reshape(g, shape)


def _dtype(x):
    dt = getattr(x, "dtype", None)
    return dt if dt is not None else np.result_type(x)


def _differentiable(x, dtype=None) -> bool:
    """Whether a reduction of `x` (computed in `dtype`) has a float result that carries a
    derivative."""
    return _dtype(x).kind in "fc" and (dtype is None or np.dtype(dtype).kind in "fc")


def _given(value) -> bool:
    return value is not None and value is not _NO_VALUE


# What a masked reduction becomes without where=: the masked entries replaced by the
# reduction's neutral value (mean, var, std: the selected entries themselves).
_WITHOUT_WHERE = {
    "sum": "np.sum(np.where(mask, x, 0))", "nansum": "np.nansum(np.where(mask, x, 0))",
    "prod": "np.prod(np.where(mask, x, 1))", "max": "np.max(np.where(mask, x, -np.inf))",
    "min": "np.min(np.where(mask, x, np.inf))",
    "mean": "np.sum(np.where(mask, x, 0), axis) / np.sum(mask, axis), or np.mean(x[mask])"}


def _refuse(name, out=None, where=None):
    if _given(where) and where is not True:
        fix = _WITHOUT_WHERE.get(name, f"np.{name}(x[mask]) for a whole-array reduction")
        raise NotImplementedError(
            f"np.{name} with where= is not supported on traced values; select the entries "
            f"with np.where instead: {fix}")
    if out is not None:
        raise NotImplementedError(
            f"np.{name} with out= is not supported on traced values; assign the result instead")


def _cast(x, dtype):
    return x if dtype is None or np.dtype(dtype) == _dtype(x) else x.astype(dtype)


def _count(shape, axes) -> int:
    return math.prod(shape[i] for i in axes)


# -- sum ------------------------------------------------------------------------------------------
def _sum_augmented(cfg, x, axis=None, dtype=None, keepdims=False):
    if type(x) is np.ndarray:   # speed-up: np.sum's own path for an ndarray, without dispatch
        out = x.sum(axis=axis, dtype=dtype, keepdims=keepdims)
        return out, (x.shape, None if dtype is None else x.dtype, axis, keepdims)
    out = np.sum(x, axis=axis, dtype=dtype, keepdims=keepdims)
    return out, (shape_of(x), None if dtype is None else _dtype(x), axis, keepdims)


def _sum_reverse(cfg, saved, g):
    shape, in_dtype, axis, keepdims = saved
    g = np.broadcast_to(restore_reduced(g, shape, axis, keepdims), shape)
    return (_cast(g, in_dtype),)


def _sum_forward(cfg, primals, tangents, axis=None, dtype=None, keepdims=False):
    return (np.sum(primals[0], axis=axis, dtype=dtype, keepdims=keepdims),
            np.sum(tangents[0], axis=axis, dtype=dtype, keepdims=keepdims))


sum_ = defprimitive("sum", np.sum, _sum_augmented, _sum_reverse, _sum_forward)
sum_.inline = ("sum",)   # compiled programs broadcast the cotangent back themselves
sum_.reverse_results = "set"   # never None for an active argument; a broadcast view of g


def _sum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    """np.sum (and ndarray.sum, np.add.reduce) on traced values."""
    _refuse("sum", out, where)
    if not _differentiable(a, dtype):
        extra = {"initial": initial} if _given(initial) else {}
        return np.sum(primal(a), axis=axis, dtype=dtype, keepdims=keepdims, **extra)
    result = sum_(a, axis=normalize_axis(axis, len(shape_of(a))), dtype=dtype,
                  keepdims=bool(keepdims))
    return result + initial if _given(initial) else result


def _mean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
    """np.mean: the sum divided by the number of reduced entries."""
    _refuse("mean", out, where)
    if not _differentiable(a, dtype):
        return np.mean(primal(a), axis=axis, dtype=dtype, keepdims=keepdims)
    shape = shape_of(a)
    axes = normalize_axis(axis, len(shape))
    total = sum_(a, axis=axes, dtype=dtype, keepdims=bool(keepdims))
    count = _count(shape, axes)
    if count == 0:   # NumPy's nan for an empty slice, with its warning
        warnings.warn("Mean of empty slice.", RuntimeWarning, stacklevel=3)
        return total * math.nan
    return total / count


# -- cumulative sums: linear, the transpose is the cumulative sum taken from the other end -------
def _cumsum_impl(x, axis, reverse=False):
    if not reverse:
        return np.cumsum(x, axis=axis)
    xp = array_module(x)
    return xp.flip(xp.cumsum(xp.flip(x, axis), axis=axis), axis)


cumsum_ = defprimitive(
    "cumsum", _cumsum_impl,
    lambda cfg, x, axis, reverse=False: (cumsum_(x, axis=axis, reverse=reverse), (axis, reverse)),
    lambda cfg, saved, g: (cumsum_(g, axis=saved[0], reverse=not saved[1]),),
    lambda cfg, primals, tangents, axis, reverse=False: (
        cumsum_(primals[0], axis=axis, reverse=reverse),
        cumsum_(tangents[0], axis=axis, reverse=reverse)))


# -- shift: out[k] = x[k - offset] along `axis`, `fill` where that falls outside -------------------
def _shift_impl(x, axis, offset, fill=0):
    xp = array_module(x)
    out = xp.full_like(x, fill)
    n = x.shape[axis]
    k = min(abs(offset), n)
    dst = [slice(None)] * x.ndim
    src = list(dst)
    dst[axis], src[axis] = (slice(k, n), slice(0, n - k)) if offset >= 0 else (
        slice(0, n - k), slice(k, n))
    out[tuple(dst)] = x[tuple(src)]
    return out


shift = defprimitive(
    "shift", _shift_impl,
    lambda cfg, x, axis, offset, fill=0: (shift(x, axis=axis, offset=offset, fill=fill),
                                          (axis, offset)),
    lambda cfg, saved, g: (shift(g, axis=saved[0], offset=-saved[1], fill=0),),
    lambda cfg, primals, tangents, axis, offset, fill=0: (
        shift(primals[0], axis=axis, offset=offset, fill=fill),
        shift(tangents[0], axis=axis, offset=offset, fill=0)))


# -- linear recurrence ----------------------------------------------------------------------------
def _linrec_impl(a, b, axis, reverse=False):
    # A log-depth (Hillis-Steele) scan: log2(n) vectorised steps instead of a Python loop over
    # n. The pair (A, B) stands for s -> A*s + B; composing adjacent windows doubles their span.
    xp = array_module(b)
    dt = np.result_type(a.dtype, b.dtype)
    A = xp.moveaxis(a, axis, -1).astype(dt, copy=True)
    B = xp.moveaxis(b, axis, -1).astype(dt, copy=True)
    if reverse:
        A, B = A[..., ::-1], B[..., ::-1]
    n, d = B.shape[-1], 1
    while d < n:
        B[..., d:] += A[..., d:] * B[..., :-d]
        if 2 * d < n:
            A[..., d:] = A[..., d:] * A[..., :-d]
        d *= 2
    if reverse:
        B = B[..., ::-1]
    return xp.ascontiguousarray(xp.moveaxis(B, -1, axis))


def _linrec_augmented(cfg, a, b, axis, reverse=False):
    s = linear_recurrence(a, b, axis=axis, reverse=reverse)
    return s, (a, s if cfg.active[0] else None, axis, reverse)


def _linrec_reverse(cfg, saved, g):
    # The adjoint runs the same recurrence from the other end: lam[k] = g[k] + a[k+1] lam[k+1].
    a, s, axis, reverse = saved
    step = -1 if reverse else 1
    lam = linear_recurrence(shift(a, axis=axis, offset=-step, fill=0), g, axis=axis,
                            reverse=not reverse)
    ga = lam * shift(s, axis=axis, offset=step, fill=0) if cfg.active[0] else None
    return ga, (lam if cfg.active[1] else None)


def _linrec_forward(cfg, primals, tangents, axis, reverse=False):
    a, b = primals
    ta, tb = tangents
    s = linear_recurrence(a, b, axis=axis, reverse=reverse)
    step = -1 if reverse else 1
    drive = tb if ta is None else add_tangents(ta * shift(s, axis=axis, offset=step, fill=0), tb)
    return s, linear_recurrence(a, drive, axis=axis, reverse=reverse)


# linear_recurrence(a, b, axis=k, reverse=False): s[k] = a[k] * s[k-1] + b[k] along `axis`
# with s[-1] = 0 (reverse=True runs from the last entry: s[k] = a[k] * s[k+1] + b[k]).
# `a` and `b` have the same shape.
linear_recurrence = defprimitive("linear_recurrence", _linrec_impl, _linrec_augmented,
                                 _linrec_reverse, _linrec_forward)


# -- cumulative products ------------------------------------------------------------------------
def _cumprod_impl(x, axis, reverse=False):
    if not reverse:
        return np.cumprod(x, axis=axis)
    xp = array_module(x)
    return xp.flip(xp.cumprod(xp.flip(x, axis), axis=axis), axis)


def _cumprod_augmented(cfg, x, axis, reverse=False):
    y = cumprod_(x, axis=axis, reverse=reverse)
    return y, (x, y, axis, reverse)


def _cumprod_reverse(cfg, saved, g):
    # gx[i] = sum_{k >= i} g[k] * prod_{j <= k, j != i} x[j]
    #       = y[i-1] * lam[i],  lam[i] = g[i] + x[i+1] * lam[i+1]:  no division by x.
    x, y, axis, reverse = saved
    step = -1 if reverse else 1
    before = shift(y, axis=axis, offset=step, fill=1)
    lam = linear_recurrence(shift(x, axis=axis, offset=-step, fill=0), g, axis=axis,
                            reverse=not reverse)
    return (before * lam,)


def _cumprod_forward(cfg, primals, tangents, axis, reverse=False):
    # dy[k] = x[k] * dy[k-1] + dx[k] * y[k-1]
    x, = primals
    y = cumprod_(x, axis=axis, reverse=reverse)
    before = shift(y, axis=axis, offset=-1 if reverse else 1, fill=1)
    return y, linear_recurrence(x, tangents[0] * before, axis=axis, reverse=reverse)


cumprod_ = defprimitive("cumprod", _cumprod_impl, _cumprod_augmented, _cumprod_reverse,
                        _cumprod_forward)


def _scan(name, prim):
    """np.cumsum / np.cumprod (and ndarray methods, ufunc.accumulate) on traced values."""
    numpy_fn = getattr(np, name)

    def scan(a, axis=None, dtype=None, out=None):
        _refuse(name, out)
        if not _differentiable(a, dtype):
            return numpy_fn(primal(a), axis=axis, dtype=dtype)
        a = _cast(a, dtype)
        if axis is None:
            a, axis = np.reshape(a, (-1,)), 0
        return prim(a, axis=normalize_axis_index(axis, len(shape_of(a))))
    scan.__doc__ = f"np.{name} on traced values (axis=None scans the flattened array)."
    return scan


def _cumulative(name, scan):
    """The array-API spellings np.cumulative_sum / np.cumulative_prod."""
    def cumulative(x, /, *, axis=None, dtype=None, out=None, include_initial=False):
        if include_initial:
            raise NotImplementedError(f"np.{name}(..., include_initial=True) is not supported "
                                      "on traced values")
        if axis is None and len(shape_of(x)) > 1:
            raise ValueError(f"np.{name} needs an axis for arrays with more than one dimension")
        return scan(x, axis=axis, dtype=dtype, out=out)
    cumulative.__doc__ = f"np.{name} on traced values (include_initial=False)."
    return cumulative


# -- prod -----------------------------------------------------------------------------------------
def _others_product(x, axes):
    """For each entry of `x`, the product of the *other* entries of its slice over `axes`.

    Built from exclusive cumulative products from both ends (no division), so it is exact when
    some entries are zero, and differentiable to every order.
    """
    shape = shape_of(x)
    if not axes:
        return np.ones_like(x)
    if len(axes) == 1:
        flat, axis = x, axes[0]
    else:   # move the reduced axes to the end and merge them into one
        keep = tuple(i for i in range(len(shape)) if i not in axes)
        perm = keep + tuple(axes)
        moved = np.transpose(x, perm)
        flat = np.reshape(moved, tuple(shape[i] for i in keep) + (_count(shape, axes),))
        axis = len(keep)
    before = shift(cumprod_(flat, axis=axis), axis=axis, offset=1, fill=1)
    after = shift(cumprod_(flat, axis=axis, reverse=True), axis=axis, offset=-1, fill=1)
    others = before * after
    if len(axes) == 1:
        return others
    others = np.reshape(others, shape_of(moved))
    return np.transpose(others, tuple(int(i) for i in np.argsort(perm)))


def _prod_augmented(cfg, x, axis, keepdims=False):
    return prod_(x, axis=axis, keepdims=keepdims), (x, axis, keepdims)


def _prod_reverse(cfg, saved, g):
    x, axis, keepdims = saved
    return (restore_reduced(g, shape_of(x), axis, keepdims) * _others_product(x, axis),)


def _prod_forward(cfg, primals, tangents, axis, keepdims=False):
    x, = primals
    tangent = np.sum(tangents[0] * _others_product(x, axis), axis=axis, keepdims=keepdims)
    return prod_(x, axis=axis, keepdims=keepdims), tangent


prod_ = defprimitive("prod", lambda x, axis, keepdims=False: np.prod(x, axis=axis,
                                                                     keepdims=keepdims),
                     _prod_augmented, _prod_reverse, _prod_forward)


def _prod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    """np.prod (and ndarray.prod, np.multiply.reduce) on traced values."""
    _refuse("prod", out, where)
    if not _differentiable(a, dtype):
        extra = {"initial": initial} if _given(initial) else {}
        return np.prod(primal(a), axis=axis, dtype=dtype, keepdims=keepdims, **extra)
    a = _cast(a, dtype)
    result = prod_(a, axis=normalize_axis(axis, len(shape_of(a))), keepdims=bool(keepdims))
    return result * initial if _given(initial) else result


# -- max / min ------------------------------------------------------------------------------------
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
    return out, np.sum(tangents[0] * weights, axis=axis, keepdims=keepdims)


extremum = defprimitive("extremum", _extremum_impl, _extremum_augmented, _extremum_reverse,
                        _extremum_forward)


def _extremum_function(kind):
    numpy_fn = np.max if kind == "max" else np.min

    def reduce(a, axis=None, out=None, keepdims=False, initial=None, where=None, dtype=None):
        _refuse(kind, out, where)
        if isinstance(initial, Tracer):
            raise NotImplementedError(f"np.{kind} with a traced initial= is not supported; use "
                                      f"np.{kind}imum(np.{kind}(x), initial)")
        extra = {"initial": initial} if _given(initial) else {}
        if not _differentiable(a, dtype):
            return numpy_fn(_cast(primal(a), dtype), axis=axis, keepdims=keepdims, **extra)
        a = _cast(a, dtype)
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


# -- var / std ------------------------------------------------------------------------------------
def _var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, mean=None,
         correction=None):
    """np.var: the mean squared deviation, divided by n - ddof instead of n."""
    _refuse("var", out, where)
    if _given(correction):
        ddof = correction
    if not _differentiable(a, dtype) and not isinstance(mean, Tracer):
        extra = {"mean": mean} if _given(mean) else {}
        return np.var(primal(a), axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims, **extra)
    shape = shape_of(a)
    axes = normalize_axis(axis, len(shape))
    centre = mean if _given(mean) else _mean(a, axis=axes, dtype=dtype, keepdims=True)
    d = a - centre
    square = d.real * d.real + d.imag * d.imag if np.iscomplexobj(d) else d * d
    total = sum_(square, axis=axes, dtype=dtype, keepdims=bool(keepdims))
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
    flat = primal(v) == 0
    # The inner where keeps sqrt away from 0, so no inf reaches the cotangent.
    return numpy_scalar(np.where(flat, 0, np.sqrt(np.where(flat, 1, v))))


# -- NaN-ignoring reductions -----------------------------------------------------------------------
def _without_nan(a, fill):
    """`a` with NaN entries replaced by `fill` (which carries no derivative), and the NaN mask."""
    nan = np.isnan(primal(a))
    return (np.where(nan, fill, a) if nan.any() else a), nan


def _nansum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    """np.nansum: NaN entries count as 0 and get a zero derivative."""
    return _sum(_without_nan(a, 0)[0], axis=axis, dtype=dtype, out=out, keepdims=keepdims,
                initial=initial, where=where)


def _nanprod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    """np.nanprod: NaN entries count as 1 and get a zero derivative."""
    return _prod(_without_nan(a, 1)[0], axis=axis, dtype=dtype, out=out, keepdims=keepdims,
                 initial=initial, where=where)


def _nanmean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
    """np.nanmean: the mean of the non-NaN entries; NaN entries get a zero derivative."""
    _refuse("nanmean", out, where)
    if not _differentiable(a, dtype):
        return np.nanmean(primal(a), axis=axis, dtype=dtype, keepdims=keepdims)
    filled, nan = _without_nan(a, 0)
    axes = normalize_axis(axis, len(shape_of(a)))
    total = sum_(filled, axis=axes, dtype=dtype, keepdims=bool(keepdims))
    count = np.sum(~nan, axis=axes, keepdims=bool(keepdims))
    return total / count.astype(_dtype(total))   # all-NaN slices give NaN, as in NumPy


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
    scale = np.sum(weights, axis=axes, keepdims=keepdims)
    if np.any(primal(scale) == 0):
        raise ZeroDivisionError("Weights sum to zero, can't be normalized")
    return np.sum(a * weights, axis=axes, keepdims=keepdims) / scale


# -- routing --------------------------------------------------------------------------------------
_cumsum = _scan("cumsum", cumsum_)
_cumprod = _scan("cumprod", cumprod_)

for _fn, _rule in [(np.sum, _sum), (np.mean, _mean), (np.prod, _prod), (np.max, _max),
                   (np.amax, _max), (np.min, _min), (np.amin, _min), (np.ptp, _ptp),
                   (np.var, _var), (np.std, _std), (np.cumsum, _cumsum), (np.cumprod, _cumprod),
                   (np.nansum, _nansum), (np.nanprod, _nanprod), (np.nanmean, _nanmean),
                   (np.average, _average)]:
    register_function(_fn, _rule)
if hasattr(np, "cumulative_sum"):   # NumPy >= 2.1
    register_function(np.cumulative_sum, _cumulative("cumulative_sum", _cumsum))
    register_function(np.cumulative_prod, _cumulative("cumulative_prod", _cumprod))
