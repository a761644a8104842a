"""Reductions: sum, prod, nansum/nanmean/nanprod, the cumulative sums and products, and the
argument handling every reduction shares (`normalize_axis`, `restore_reduced`, `masked` for
`where=`, the refusal of `out=`). max/min/amax/amin and ptp are in `ops.extrema`; mean, average, var and std
in `ops.averages`; the other NaN-ignoring reductions in `ops.reductions_nan`.

Every reduction takes `axis` (None, an int or a tuple; negative allowed) and `keepdims` as NumPy
does; `out=` is refused on traced values, and `where=` is taken by sum, prod, mean, var, std,
max, min, nansum and nanmean (the entries left out get no derivative) and refused by the others. Integer
results (an integer input, or an integer `dtype=`) carry no derivative and are computed on the plain values; float results keep
the dtype NumPy gives them (float32 stays float32).

Conventions at non-smooth points (max/min ties: `ops.extrema`; std'(0) = 0: `ops.averages`):

- prod, cumprod: exact at zeros, to every order. Where an entry or a product is 0, inf, NaN or
  not a normal number, and whenever a rule is itself differentiated, the rules never divide by
  an entry: they use the product of the *other* entries, built from exclusive cumulative
  products taken from both ends, so d prod([2, 0, 3]) = [0, 6, 0]. The reverse and forward
  rules of cumprod are first-order linear recurrences (`linear_recurrence`), whose own rules
  are linear recurrences again. Otherwise (the usual case) a first derivative divides by the
  entries, as accurate and many times faster.
- nansum, nanmean, nanprod: NaN entries are ignored and get a zero derivative (nanmax, nanmin,
  nanvar, nanstd, nancumsum, nancumprod too: `ops.reductions_nan`).
"""
from __future__ import annotations

import math

import numpy as np
from numpy.lib.array_utils import normalize_axis_index, normalize_axis_tuple

from tape.backend import array_module
from tape.batching import Batched
from tape.core import Tracer, peek, primal
from tape.rules import register_function

from ._util import add_tangents, defprimitive, dtype_of, shape_of

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


def masked(a, where, fill):
    """`a` with the entries that `where` leaves out replaced by `fill` (the reduction's neutral
    value), and the mask broadcast to `a`'s shape (NumPy's error when it does not broadcast);
    `(a, None)` when there is no mask."""
    if not _given(where) or where is True:
        return a, None
    mask = np.broadcast_to(np.asarray(primal(where), dtype=bool), shape_of(a))
    return np.where(mask, a, fill), mask


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
    """np.sum (and ndarray.sum, np.add.reduce) on traced values; `where=` sums the selected
    entries."""
    a, _ = masked(a, where, 0)
    _refuse("sum", out)
    if not _differentiable(a, dtype):
        extra = {"initial": initial} if _given(initial) else {}
        return np.sum(primal(a), axis=axis, dtype=dtype, keepdims=keepdims, **extra)
    result = sum_(a, axis=normalize_axis(axis, len(shape_of(a))), dtype=dtype,
                  keepdims=bool(keepdims))
    return result + _in_dtype_of(result, initial) if _given(initial) else result


def _in_dtype_of(result, initial):
    """`initial=` as NumPy applies it: cast to the reduction's dtype (np.sum of float32 with
    initial=np.float64(1) stays float32)."""
    dtype = peek(result).dtype
    if hasattr(initial, "astype") and not isinstance(initial, np.generic):
        return initial if initial.dtype == dtype else initial.astype(dtype)
    return dtype.type(initial)


# -- scans along a leading axis --------------------------------------------------------------------
# NumPy's accumulate walks each column of a leading axis through memory separately, several
# times slower than the reduction: np.cumsum(x, axis=0) of a 1000x1000 array takes about 30x
# np.sum's time. Scanning one slice at a time multiplies or adds whole contiguous slices; the
# operations and their order per entry are the same (accumulate is sequential), so the bits are.
_SLICE_SCAN_MIN = 128   # entries per slice below which the Python loop costs more than it saves


def _scan_along(ufunc, numpy_scan, x, axis, reverse, kinds="fc"):
    """`numpy_scan` (np.cumsum / np.cumprod) of `x` along `axis`, from the last entry when
    `reverse`, one slice at a time where that is faster (see above) for dtypes of `kinds`."""
    shape = shape_of(x)
    if (type(x) is np.ndarray and x.dtype.kind in kinds and axis < len(shape) - 1
            and math.prod(shape[axis + 1:]) >= _SLICE_SCAN_MIN and shape[axis] > 1):
        out = np.empty(shape, x.dtype)
        src, dst = np.moveaxis(x, axis, 0), np.moveaxis(out, axis, 0)
        order = range(shape[axis] - 1, -1, -1) if reverse else range(shape[axis])
        previous = None
        for i in order:
            if previous is None:
                dst[i] = src[i]
            else:
                ufunc(dst[previous], src[i], out=dst[i])
            previous = i
        return out
    if not reverse:
        return numpy_scan(x, axis=axis)
    xp = array_module(x)
    return xp.flip(numpy_scan(xp.flip(x, axis), axis=axis), axis)


# -- cumulative sums: linear, the transpose is the cumulative sum taken from the other end -------
def _cumsum_impl(x, axis, reverse=False):
    return _scan_along(np.add, np.cumsum, x, axis, reverse)


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
    # (Complex products of whole slices take NumPy's vectorised loop, whose roundings differ
    # from the one-entry loop that accumulate runs: complex scans stay NumPy's.)
    return _scan_along(np.multiply, np.cumprod, x, axis, reverse, kinds="f")


def _cumprod_augmented(cfg, x, axis, reverse=False):
    y = cumprod_(x, axis=axis, reverse=reverse)
    return y, (x, y, axis, reverse)


def _all_normal(values) -> bool:
    """Whether every entry of the plain array `values` is a finite nonzero normal number (of
    a product: then none of its factors is 0, inf or NaN)."""
    magnitude = array_module(values).abs(values)
    if magnitude.size == 0:
        return True
    tiny = np.finfo(dtype_of(magnitude)).tiny
    return bool((magnitude.max() < np.inf) & (magnitude.min() >= tiny))


def _cumprod_reverse_by_division(x, y, g, axis, reverse):
    """gx[i] = (sum_{k >= i} g[k] y[k]) / x[i], or None where that could lose accuracy.

    Used when every y is a finite nonzero normal number (then no entry of x is 0, inf or NaN),
    no product g[k] y[k] of a nonzero g[k] underflows and the sums are finite: the quotient is
    then as accurate as the recurrence, at a few passes over memory instead of its log-depth
    scan. Only for plain arrays, as in prod's rule: the derivative of the quotient cancels."""
    if isinstance(x, Tracer) or isinstance(y, Tracer) or isinstance(g, (Tracer, Batched)):
        return None
    if not _all_normal(y):
        return None
    xp = array_module(y)
    weighted = g * y
    tiny = np.finfo(dtype_of(weighted)).tiny
    if not bool(xp.all((xp.abs(weighted) >= tiny) | (g == 0))):
        return None
    summed = cumsum_(weighted, axis=axis, reverse=not reverse)
    if not bool(xp.isfinite(summed).all()):
        return None
    return summed / x


def _cumprod_reverse(cfg, saved, g):
    # gx[i] = sum_{k >= i} g[k] * prod_{j <= k, j != i} x[j]
    #       = y[i-1] * lam[i],  lam[i] = g[i] + x[i+1] * lam[i+1]:  no division by x.
    x, y, axis, reverse = saved
    if x.size:
        quick = _cumprod_reverse_by_division(x, y, g, axis, reverse)
        if quick is not None:
            return (quick,)
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


def _cumulative(name, scan, identity):
    """The array-API spellings np.cumulative_sum / np.cumulative_prod; include_initial=True
    puts the operation's identity (0 or 1, in the result's dtype) before each scan."""
    def cumulative(x, /, *, axis=None, dtype=None, out=None, include_initial=False):
        if axis is None and len(shape_of(x)) > 1:
            raise ValueError(f"np.{name} needs an axis for arrays with more than one dimension")
        if not include_initial:
            return scan(x, axis=axis, dtype=dtype, out=out)
        _refuse(name, out)
        result = scan(x, axis=axis, dtype=dtype)
        axis = normalize_axis_index(0 if axis is None else axis, len(shape_of(result)))
        shape = list(shape_of(result))
        shape[axis] = 1
        first = array_module(result).full(shape, identity, dtype=np.result_type(peek(result)))
        return np.concatenate([first, result], axis=axis)
    cumulative.__doc__ = f"np.{name} on traced values."
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


def _others_product_of(x, product, axis, keepdims):
    """`_others_product(x, axis)`, given the product itself: product / x when every product
    is a finite nonzero normal number. Then no entry of `x` is 0, inf or NaN (their product
    would be 0 or NaN), and the quotient is as accurate as the two scans at a fraction of
    their cost; otherwise the scans, which are exact at zeros.

    Only for plain arrays: the derivative of product / x_i in x_i is a difference of two
    nearly equal terms, so a rule that is differentiated again keeps the scans."""
    if isinstance(x, Tracer) or isinstance(product, Tracer) or not _all_normal(product):
        return _others_product(x, axis)
    return restore_reduced(product, shape_of(x), axis, keepdims) / x


def _prod_augmented(cfg, x, axis, keepdims=False):
    out = prod_(x, axis=axis, keepdims=keepdims)
    return out, (x, out, axis, keepdims)


def _prod_reverse(cfg, saved, g):
    x, out, axis, keepdims = saved
    return (restore_reduced(g, shape_of(x), axis, keepdims)
            * _others_product_of(x, out, axis, keepdims),)


def _prod_forward(cfg, primals, tangents, axis, keepdims=False):
    x, = primals
    out = prod_(x, axis=axis, keepdims=keepdims)
    others = _others_product_of(x, out, axis, keepdims)
    return out, np.sum(tangents[0] * others, axis=axis, keepdims=keepdims)


prod_ = defprimitive("prod", lambda x, axis, keepdims=False: np.prod(x, axis=axis,
                                                                     keepdims=keepdims),
                     _prod_augmented, _prod_reverse, _prod_forward)


def _prod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    """np.prod (and ndarray.prod, np.multiply.reduce) on traced values; `where=` multiplies
    the selected entries."""
    a, _ = masked(a, where, 1)
    _refuse("prod", out)
    if not _differentiable(a, dtype):
        extra = {"initial": initial} if _given(initial) else {}
        return np.prod(primal(a), axis=axis, dtype=dtype, keepdims=keepdims, **extra)
    a = _cast(a, dtype)
    result = prod_(a, axis=normalize_axis(axis, len(shape_of(a))), keepdims=bool(keepdims))
    return result * _in_dtype_of(result, initial) if _given(initial) else result


# -- NaN-ignoring reductions -----------------------------------------------------------------------
def _without_nan(a, fill):
    """`a` with NaN entries replaced by `fill` (which carries no derivative), and the NaN mask."""
    nan = np.isnan(a)   # no derivative; a compiled function computes it again at each call
    return (np.where(nan, fill, a) if bool(np.any(nan)) else a), nan


def _nansum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    """np.nansum: NaN entries count as 0 and get a zero derivative."""
    return _sum(_without_nan(a, 0)[0], axis=axis, dtype=dtype, out=out, keepdims=keepdims,
                initial=initial, where=where)


def _nanprod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    """np.nanprod: NaN entries count as 1 and get a zero derivative."""
    return _prod(_without_nan(a, 1)[0], axis=axis, dtype=dtype, out=out, keepdims=keepdims,
                 initial=initial, where=where)


def _nanmean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
    """np.nanmean: the mean of the non-NaN entries (of those `where` selects); NaN entries get
    a zero derivative."""
    _refuse("nanmean", out)
    if not _differentiable(a, dtype):
        extra = {} if not _given(where) else {"where": primal(where)}
        return np.nanmean(primal(a), axis=axis, dtype=dtype, keepdims=keepdims, **extra)
    filled, nan = _without_nan(a, 0)
    filled, mask = masked(filled, where, 0)
    if mask is not None:   # an entry left out counts as a NaN one
        nan = nan | ~mask
    axes = normalize_axis(axis, len(shape_of(a)))
    total = sum_(filled, axis=axes, dtype=dtype, keepdims=bool(keepdims))
    count = np.sum(~nan, axis=axes, keepdims=bool(keepdims))
    return total / count.astype(_dtype(total))   # all-NaN slices give NaN, as in NumPy


# -- routing --------------------------------------------------------------------------------------
_cumsum = _scan("cumsum", cumsum_)
_cumprod = _scan("cumprod", cumprod_)

for _fn, _rule in [(np.sum, _sum), (np.prod, _prod), (np.cumsum, _cumsum),
                   (np.cumprod, _cumprod), (np.nansum, _nansum), (np.nanprod, _nanprod),
                   (np.nanmean, _nanmean)]:
    register_function(_fn, _rule)
if hasattr(np, "cumulative_sum"):   # NumPy >= 2.1
    register_function(np.cumulative_sum, _cumulative("cumulative_sum", _cumsum, 0))
    register_function(np.cumulative_prod, _cumulative("cumulative_prod", _cumprod, 1))
