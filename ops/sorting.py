"""Sorting and selection: np.sort, np.partition, np.select, np.quantile/percentile/median and
their nan* versions, np.unique.

A sort is a data-dependent permutation: the values move, the derivative moves with them. So
`sort(x)` is `permute(x, argsort(x))`, whose reverse rule applies the inverse permutation to the
cotangent (a gather again, hence itself differentiable) and whose forward rule permutes the
tangent. Quantiles interpolate linearly between two sorted values; median, quantile and
percentile find them with np.argpartition and gather only those entries (the nan* versions,
whose positions differ per slice, sort, unless every axis is reduced). np.argsort,
np.argpartition and np.lexsort carry no derivative (`ops.inactive`).

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
- NaN: quantile, percentile and median give NaN for a slice that holds NaN, as NumPy does; the
  nan* versions use each slice's non-NaN entries (NaN, with NumPy's RuntimeWarning, when there
  are none). NaN entries and NaN results carry no derivative.
- np.unique: a value that occurs several times takes its derivative from its first occurrence
  (the index `return_index` reports); the index, inverse and count outputs are plain integers.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from tape.backend import array_module
from tape.core import Tracer, nondiff_value, peek, primal
from tape.rules import inactive, register_function

from ._util import defprimitive, dtype_of, shape_of

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
    # On NumPy, np.argsort of a tracer is a recorded nondiff step: a compiled program sorts
    # each call's values (CuPy's sort is always stable and accepts no `kind`).
    perm = np.argsort(a, axis=axis, kind="stable") if xp is np else \
        xp.argsort(primal(a), axis=axis)
    return permute(a, perm=nondiff_value(perm), axis=axis)


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
    # On NumPy a recorded nondiff step: a compiled program partitions each call's values.
    perm = _partition_order(a, primal(kth), axis, kind) if xp is np else \
        xp.argpartition(primal(a), primal(kth), axis=axis)
    return permute(a, perm=nondiff_value(perm), axis=axis)


@inactive
def _partition_order(a, kth, axis, kind):
    """The permutation that gives np.partition(a, kth)'s own arrangement. NumPy's
    np.partition and np.argpartition may order the entries beside `kth` differently (a SIMD
    selection for the first): np.argpartition's permutation where it gives the same array,
    else one matched through stable sorts of `a` and of np.partition's result (equal values
    are interchangeable)."""
    perm = np.argpartition(a, kth, axis=axis, kind=kind)
    want = np.partition(a, kth, axis=axis, kind=kind)
    if np.array_equal(np.take_along_axis(a, perm, axis=axis), want, equal_nan=True):
        return perm
    order = np.argsort(a, axis=axis, kind="stable")
    np.put_along_axis(perm, np.argsort(want, axis=axis, kind="stable"), order, axis=axis)
    return perm


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
    # The conditions stay traced in a compiled function (np.where takes each call's masks)
    # rather than being guarded by value.
    conds = [c if isinstance(c, Tracer) else c if hasattr(c, "dtype") else np.asarray(c)
             for c in condlist]
    for i, c in enumerate(conds):
        if dtype_of(c) != np.bool_:
            raise TypeError(f"invalid entry {i} in condlist: should be boolean ndarray")
    result = default
    for cond, choice in zip(reversed(conds), reversed(list(choicelist))):
        result = np.where(cond, choice, result)
    # NumPy's dtype: its own select on stand-ins (a Python number stays one: weak, so a
    # float32 choice with 0.5 beside it is float32, where nested np.where made float64).
    dtype = np.select([np.zeros(1, bool)] * len(conds),
                      [_stand_in(c) for c in choicelist], default=_stand_in(default)).dtype
    if peek(result).dtype != dtype:
        result = result.astype(dtype) if isinstance(result, Tracer) else np.asarray(result, dtype)
    # NumPy's result has the broadcast shape even when default was the only thing selected.
    shape = np.broadcast_shapes(*(shape_of(v) for v in (*conds, *choicelist, default)))
    return result if shape_of(result) == shape else np.broadcast_to(result, shape)


def _stand_in(value):
    """A one-entry array of `value`'s dtype; a Python number as it is (NumPy's weak scalar)."""
    if type(peek(value)) in (bool, int, float, complex):   # (a traced Python number too)
        return peek(value)
    return np.zeros(1, dtype_of(value))


register_function(np.select, select)


# -- quantiles: linear interpolation between neighbouring sorted values ------------------------------
def _merge_reduced(a, axis):
    """`a` with its reduced axes moved to the front and merged into axis 0, the reduced axes
    (sorted, non-negative) and the kept shape."""
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
    x = a if axes + kept == tuple(range(ndim)) else np.transpose(a, axes + kept)
    return np.reshape(x, (-1,) + tuple(shape[i] for i in kept)), axes


def _lerp(below, above, frac, weak_dtype=None):
    """NumPy's `_lerp`: below + (above - below) t, or above - (above - below)(1 - t) where
    t >= 0.5. With `weak_dtype` the weights are rounded to it, as NumPy's Python-float weight
    (a scalar q) is under weak promotion, so a float32 input gives a float32 result."""
    rest = 1 - frac
    upper = primal(frac) >= 0.5
    if weak_dtype is not None:
        xp = array_module(below)
        frac, rest = xp.asarray(frac, dtype=weak_dtype), xp.asarray(rest, dtype=weak_dtype)
    diff = above - below
    return np.where(upper, above - diff * rest, below + diff * frac)


def _quantile(a, q, axis, keepdims, ignore_nan=False, weak=False, median=False,
              method="linear"):
    """Quantiles over `axis` by `method` (module `_METHODS`). A slice holding NaN gives NaN, or
    with `ignore_nan` the quantile of its other entries (NaN when it has none). `weak`: q was
    a Python number (NumPy keeps the input's float dtype); `median`: the mean of the middle
    two entries, as np.median computes it."""
    shape = shape_of(a)
    x, axes = _merge_reduced(a, axis)
    n = shape_of(x)[0]
    xp = array_module(a)
    # With ignore_nan the positions differ per slice (they count its non-NaN entries): sort in
    # full. Otherwise they are the same for every slice, and a partition at them is enough; so
    # too for a single slice (a reduction over every axis), NaN partitioning last.
    single = math.prod(shape_of(x)[1:]) == 1
    by_sort = (ignore_nan and not single) or n == 0 or np.result_type(peek(a)).kind == "c"
    per_slice = ignore_nan and by_sort
    if ignore_nan and not by_sort:
        # no derivative; a compiled function counts again at each call
        nan_count = np.sum(np.isnan(x), axis=0)
    if by_sort:
        s = sort(x, axis=0)              # NaN entries sort last
        nan = np.isnan(s)   # no derivative; a compiled function computes it again at each call
        nan_count = np.sum(nan, axis=0)
        if bool(np.any(nan)):
            # NaN-free values to interpolate: a NaN would reach the derivative in q as 0 * nan.
            s = np.where(nan, 0, s)
    dtype = np.result_type(peek(a))
    if dtype.kind == "c" and not median:   # NumPy's median takes complex input, quantile not
        raise TypeError("a must be an array of real numbers")
    weak_dtype = dtype if weak and dtype.kind == "f" else None
    target = _result_dtype(dtype, q, method, median, weak)
    if not isinstance(q, Tracer):   # positions are real, for complex input too; a float q
        real = np.empty(0, dtype).real.dtype   # keeps its precision, as in NumPy
        given = dtype_of(q)
        q = xp.asarray(q, dtype=given if given.kind == "f" and not weak
                       else np.result_type(real, np.float64))
    q_shape, rest = shape_of(q), shape_of(x)[1:]
    if per_slice:
        count = n - nan_count            # valid entries per slice, shape `rest`
        pos = np.reshape(q, q_shape + (1,) * len(rest)) * (count - 1)
        last = xp.maximum(count - 1, 0)
    elif ignore_nan:                     # one slice: positions among its valid entries
        count = n - np.reshape(nan_count, ())
        pos, last = q * (count - 1), xp.maximum(count - 1, 0)
    else:
        pos, last = q * (n - 1), n - 1
    lo = xp.minimum(xp.clip(xp.floor(primal(pos)), 0, None), last).astype(np.intp)
    hi = xp.minimum(lo + 1, last)
    frac = pos - lo                      # differentiable in q when q is traced
    if per_slice:                        # per-slice positions: gather with one index per slice
        grids = tuple(xp.arange(k).reshape((1,) * (len(q_shape) + i) + (k,)
                                           + (1,) * (len(rest) - i - 1))
                      for i, k in enumerate(rest))
        below, above = s[(lo,) + grids], s[(hi,) + grids]
    else:
        if by_sort:
            s_lo, s_hi = lo, hi
        elif ignore_nan:                 # the NaN entries were counted above
            s, s_lo, s_hi, _ = _order_statistics(x, lo, hi, n, xp)
        else:
            s, s_lo, s_hi, nan_count = _order_statistics(x, lo, hi, n, xp)
        if lo.ndim == 0:
            lo, hi = int(lo), int(hi)
            s_lo, s_hi = int(s_lo), int(s_hi)   # a basic index: a cheap getitem and scatter
        if q_shape:   # a 0-d frac broadcasts as it is; reshaped, the forward-mode tangent of a
            #           scalar q would become a 1-element NumPy array, which CuPy refuses
            frac = np.reshape(frac, q_shape + (1,) * len(rest))
        below, above = s[s_lo], s[s_hi]
    if median or method != "linear":
        out = _selected(method, below, above, primal(frac), lo, target)
    else:
        out = _lerp(below, above, frac, weak_dtype)
    undefined = (nan_count == n) if ignore_nan else (nan_count > 0)
    if undefined.any():
        if ignore_nan:
            warnings.warn("All-NaN slice encountered", RuntimeWarning, stacklevel=3)
        out = np.where(undefined, np.nan, out)
    if keepdims:
        out = np.reshape(out, q_shape + tuple(1 if i in axes else shape[i]
                                              for i in range(len(shape))))
    return out if peek(out).dtype == target else out.astype(target)


def _order_statistics(x, lo, hi, n, xp):
    """The entries of sorted order `lo` and `hi` (integer arrays of one shape) along axis 0 of
    `x`, found by a partition (as NumPy finds them) rather than a sort: only those entries are
    gathered, so the reverse writes those alone. Returns the gathered rows (NaN replaced by
    0), the row of each of `lo` and `hi` among them, and per slice a flag that is set when
    the slice holds NaN."""
    kth = xp.unique(xp.concatenate((lo.reshape(-1), hi.reshape(-1), xp.asarray([n - 1]))))
    positions = kth.tolist()             # n - 1 too: the maximum, where NaN sorts
    ties = [i for i, k in enumerate(positions) if k != n - 1 or bool(xp.any(hi == n - 1))]
    # A recorded nondiff step: a compiled program partitions each call's values.
    index = _partition_index(x, positions, ties)
    rest = shape_of(x)[1:]
    grids = tuple(xp.arange(k).reshape((1,) * (i + 1) + (k,) + (1,) * (len(rest) - i - 1))
                  for i, k in enumerate(rest))
    s = x[(nondiff_value(index),) + grids]   # one row per position in kth
    nan = np.isnan(s)   # no derivative; a compiled function computes it again at each call
    if bool(np.any(nan)):
        # NaN-free values to interpolate: a NaN would reach the derivative in q as 0 * nan.
        s = np.where(nan, 0, s)
    return s, xp.searchsorted(kth, lo), xp.searchsorted(kth, hi), nan[-1]


@inactive
def _partition_index(x, positions, ties):
    """For each sorted position in `positions` (increasing), the index along axis 0 of the
    entry of `x` that a stable sort puts there. np.argpartition finds an entry of the right
    value; where that value is tied (the rows `ties` are checked), the stable sort's is the
    j-th tied entry in index order, j = position - the number of smaller entries."""
    xp = array_module(x)
    index = xp.argpartition(x, positions, axis=0)[xp.asarray(positions)]
    values = xp.take_along_axis(x, index, axis=0)
    for i in ties:
        equal = x == values[i]
        tied = xp.count_nonzero(equal, axis=0) > 1
        if bool(tied.any()):
            j = positions[i] - xp.count_nonzero(x < values[i], axis=0)
            nth = xp.argmax(xp.cumsum(equal, axis=0) > j, axis=0)
            index[i] = xp.where(tied, nth, index[i])
    return index


def _result_dtype(dtype, q, method, median, weak) -> np.dtype:
    """The dtype NumPy's own call gives (it follows the input, q's dtype and the method:
    midpoint of float32 with a float64 q is float64, linear of float32 with a float32 q is
    float32), read from NumPy on a two-entry stand-in."""
    stand_in = np.zeros(2, dtype)
    if median:
        return np.median(stand_in).dtype
    if weak:   # q was a Python number (percentile's q / 100 included): promoted weakly
        return np.quantile(stand_in, 0.5, method=method).dtype
    return np.quantile(stand_in, np.zeros(1, dtype_of(q)), method=method).dtype


def _selected(method, below, above, frac, lo, dtype=None):
    """The discontinuous methods: an entry (or the mean of two) chosen by the position's
    fraction `frac` between the sorted entries `below` and `above`, as NumPy chooses them;
    their derivative in q is zero and in `a` that of the chosen entries."""
    if method == "lower":
        return below
    if method == "higher":
        return np.where(frac == 0, below, above)
    if method == "nearest":   # a tie goes to the even index, as NumPy's `around`
        lo = np.reshape(np.asarray(lo), np.shape(frac)) if np.ndim(lo) else lo
        return np.where((frac > 0.5) | ((frac == 0.5) & (lo % 2 == 1)), above, below)
    if method == "midpoint":   # NumPy's lerp at t = 1/2 with t in the result's dtype
        half = np.asarray(0.5, dtype=dtype)
        return np.where(frac == 0, below, above - (above - below) * half)
    return np.where(frac == 0, below, (below + above) / 2)   # the median


_METHODS = ("linear", "lower", "higher", "nearest", "midpoint")


def _check_q(a, q, high):
    qv = array_module(a).asarray(primal(q))
    if bool(((qv < 0) | (qv > high)).any()):
        raise ValueError(f"{'Quantiles' if high == 1 else 'Percentiles'} must be in the range "
                         f"[0, {high}]")


def _unsupported(out, method, weights, interpolation):
    if out is not None or weights is not None or interpolation is not None:
        raise NotImplementedError("out=, weights= and interpolation= are not supported on "
                                  "traced values")
    if method not in _METHODS:
        raise NotImplementedError(f"np.quantile / np.percentile of a traced value take method "
                                  f"{', '.join(repr(m) for m in _METHODS)}, got {method!r}")


def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
             keepdims=False, *, weights=None, interpolation=None):
    """np.quantile, differentiable in `a` (and in `q` for the linear method).

    >>> float(quantile(np.array([1.0, 2.0, 3.0, 4.0]), 0.5))
    2.5
    """
    _unsupported(out, method, weights, interpolation)
    _check_q(a, q, 1)
    return _quantile(a, q, axis, keepdims, weak=type(peek(q)) in (int, float), method=method)


def percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
               keepdims=False, *, weights=None, interpolation=None):
    """np.percentile: quantile at q / 100.

    >>> percentile(np.array([1.0, 2.0, 3.0, 4.0]), [0, 100])
    array([1., 4.])
    """
    _unsupported(out, method, weights, interpolation)
    _check_q(a, q, 100)
    return _quantile(a, np.true_divide(q, 100), axis, keepdims, weak=type(peek(q)) in (int, float),
                     method=method)


def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """np.median: the 0.5 quantile (the mean of the middle two values for even counts).

    >>> median(np.array([[1.0, 5.0, 2.0], [4.0, 3.0, 0.0]]), axis=1)
    array([2., 3.])
    """
    _unsupported(out, "linear", None, None)
    return _quantile(a, 0.5, axis, keepdims, weak=True, median=True)


def nanquantile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
                keepdims=False, *, weights=None, interpolation=None):
    """np.nanquantile: the quantile of each slice's non-NaN entries.

    >>> float(nanquantile(np.array([1.0, np.nan, 3.0, 4.0]), 0.5))
    3.0
    """
    _unsupported(out, method, weights, interpolation)
    _check_q(a, q, 1)
    return _quantile(a, q, axis, keepdims, ignore_nan=True, weak=type(peek(q)) in (int, float),
                     method=method)


def nanpercentile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
                  keepdims=False, *, weights=None, interpolation=None):
    """np.nanpercentile: nanquantile at q / 100.

    >>> nanpercentile(np.array([1.0, np.nan, 3.0]), [0, 100])
    array([1., 3.])
    """
    _unsupported(out, method, weights, interpolation)
    _check_q(a, q, 100)
    return _quantile(a, np.true_divide(q, 100), axis, keepdims, ignore_nan=True,
                     weak=type(peek(q)) in (int, float), method=method)


def nanmedian(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """np.nanmedian: the median of each slice's non-NaN entries.

    >>> nanmedian(np.array([[1.0, np.nan, 2.0], [4.0, 3.0, 0.0]]), axis=1)
    array([1.5, 3. ])
    """
    _unsupported(out, "linear", None, None)
    return _quantile(a, 0.5, axis, keepdims, ignore_nan=True, weak=True, median=True)


for _np_fn, _rule in [(np.quantile, quantile), (np.percentile, percentile), (np.median, median),
                      (np.nanquantile, nanquantile), (np.nanpercentile, nanpercentile),
                      (np.nanmedian, nanmedian)]:
    register_function(_np_fn, _rule)


# -- unique: the unique values are gathered from their first occurrences --------------------------
def _first_occurrences(flat, values, equal_nan):
    """For NumPy's unique `values` of the 1-d `flat` (in NumPy's order, which need not be
    sorted), the index of each value's first occurrence in `flat`."""
    xp = array_module(flat)
    uniq, first = xp.unique(flat, return_index=True, equal_nan=equal_nan)
    nan_at = xp.flatnonzero(xp.isnan(flat))
    value_nan = xp.isnan(values)
    index = first[xp.clip(xp.searchsorted(uniq, values), 0, len(uniq) - 1)]
    # NaN never equals itself: the NaN values take the NaN entries in order of appearance.
    index[value_nan] = nan_at[:int(value_nan.sum())]
    return index


def unique(ar, return_index=False, return_inverse=False, return_counts=False, axis=None, *,
           equal_nan=True, sorted=True):
    """np.unique of a traced array: the unique values are differentiable, the indices, inverse
    and counts are plain integer arrays.

    Convention: a value that occurs several times takes its derivative from its *first*
    occurrence (the entry np.unique's `return_index` names); its other copies get none.

    >>> from tape import autodiff, Reverse, Active
    >>> (g,), = autodiff(Reverse, lambda x: np.sum(np.unique(x) * np.array([1.0, 10.0])),
    ...                  Active, Active(np.array([2.0, 1.0, 2.0])))
    >>> g
    array([10.,  1.,  0.])
    """
    value = primal(ar)
    if sorted is not True and array_module(value) is not np:
        sorted = True   # cupy.unique has no `sorted`; its sorted order is one sorted=False allows
    extra = {} if sorted is True else {"sorted": sorted}
    results = np.unique(value, return_index=return_index, return_inverse=return_inverse,
                        return_counts=return_counts, axis=axis, equal_nan=equal_nan, **extra)
    results = results if isinstance(results, tuple) else (results,)
    if return_index:
        first = results[1]
    elif axis is not None or sorted is True or return_inverse or return_counts:
        # The sorting path: asking for the indices too does not change the order.
        first = np.unique(value, return_index=True, axis=axis, equal_nan=equal_nan)[1]
    else:   # the hash path's own order
        first = _first_occurrences(value.reshape(-1), results[0], equal_nan)
    values = np.take(ar, first, axis=axis)
    if len(results) == 1:
        return values
    return (values,) + results[1:]


def _unique_variant(name, **flags):
    """The array-API spellings (np.unique_all, ...): np.unique with fixed flags, returning
    NumPy's named tuple; the values are differentiable."""
    numpy_fn = getattr(np, name)
    result_type = type(numpy_fn(np.zeros(1)))

    def variant(x):
        result = unique(x, equal_nan=False, **flags)
        return result if result_type is np.ndarray else result_type(*result)
    variant.__doc__ = f"np.{name} on a traced array: the values are differentiable."
    return variant


register_function(np.unique, unique)
if hasattr(np, "unique_all"):   # NumPy >= 2.0
    for _name, _flags in [
            ("unique_all", dict(return_index=True, return_inverse=True, return_counts=True)),
            ("unique_counts", dict(return_counts=True)),
            ("unique_inverse", dict(return_inverse=True)), ("unique_values", dict(sorted=False))]:
        register_function(getattr(np, _name), _unique_variant(_name, **_flags))
