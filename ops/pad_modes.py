"""np.pad's statistic modes ('maximum', 'minimum', 'mean', 'median', with `stat_length`) and
'linear_ramp' on traced arrays, as compositions of differentiable operations.

NumPy pads one axis after another, each from the array padded so far (so a corner takes the
statistic, or the ramp, of the border already added along the earlier axes); the same
sequence is followed here, with NumPy's slices and calls, so values agree bit for bit.
"""
from __future__ import annotations

import numpy as np

from tape.core import Tracer, peek

from ._util import shape_of

STATISTICS = {"maximum": np.max, "minimum": np.min, "mean": np.mean, "median": np.median}


def _along(axis: int, index) -> tuple:
    return (slice(None),) * axis + (index,)


def _as_pairs(values, ndim: int, as_index: bool = False):
    """NumPy's reading of a per-axis (before, after) option, scalar types included: one value
    or one pair stays a NumPy scalar, a full table becomes Python numbers (which decides the
    precision np.linspace computes a ramp in)."""
    x = np.array(values)
    if as_index:
        x = np.round(x).astype(np.intp, copy=False)
        if x.size and x.min() < 0:
            raise ValueError(f"index can't contain negative values (np.pad stat_length="
                             f"{values!r})")
    if x.ndim < 3 and x.size == 1:
        x = x.ravel()
        return ((x[0], x[0]),) * ndim
    if x.ndim < 3 and x.size == 2 and x.shape != (2, 1):
        x = x.ravel()
        return ((x[0], x[1]),) * ndim
    return np.broadcast_to(x, (ndim, 2)).tolist()


def _repeated(stat, count: int, axis: int):
    shape = list(shape_of(stat))
    shape[axis] = count
    return np.broadcast_to(stat, tuple(shape))


def pad_by_statistic(array, widths: tuple, mode: str, stat_length=None):
    """np.pad(array, widths, mode) for mode 'maximum', 'minimum', 'mean' or 'median'.

    >>> pad_by_statistic(np.array([1.0, 5.0, 3.0]), ((2, 1),), "maximum", stat_length=2)
    array([5., 5., 1., 5., 3., 5.])
    """
    statistic = STATISTICS[mode]
    ndim = len(widths)
    lengths = None if stat_length is None else _as_pairs(stat_length, ndim, as_index=True)
    out = array
    for axis, (before, after) in enumerate(widths):
        if not (before or after):
            continue
        n = shape_of(out)[axis]
        left, right = (n, n) if lengths is None else (min(int(v), n) for v in lengths[axis])
        if (left == 0 or right == 0) and mode in ("maximum", "minimum"):
            raise ValueError("stat_length of 0 yields no value for padding")
        left_stat = statistic(out[_along(axis, slice(0, left))], axis=axis, keepdims=True)
        right_stat = left_stat if left == right == n else statistic(
            out[_along(axis, slice(n - right, n))], axis=axis, keepdims=True)
        out = np.concatenate([_repeated(left_stat, before, axis), out,
                              _repeated(right_stat, after, axis)], axis=axis)
    return out


def pad_linear_ramp(array, widths: tuple, end_values=0):
    """np.pad(array, widths, 'linear_ramp', end_values=...): ramps from the end values to the
    edge values (NumPy's np.linspace calls, endpoint excluded).

    >>> pad_linear_ramp(np.array([4.0, 1.0]), ((2, 1),), end_values=(0, 3))
    array([0., 2., 4., 1., 3.])
    """
    if isinstance(end_values, Tracer):
        raise NotImplementedError("np.pad(mode='linear_ramp') with traced end_values is not "
                                  "supported; pass plain end values (tape.primal(v))")
    ends = _as_pairs(end_values, len(widths))
    dtype = peek(array).dtype
    out = array
    for axis, (before, after) in enumerate(widths):
        if not (before or after):
            continue
        n = shape_of(out)[axis]
        ramps = []
        for end, edge, width in ((ends[axis][0], out[_along(axis, slice(0, 1))], before),
                                 (ends[axis][1], out[_along(axis, slice(n - 1, n))], after)):
            ramps.append(np.linspace(start=end, stop=np.squeeze(edge, axis), num=width,
                                     endpoint=False, dtype=dtype, axis=axis))
        out = np.concatenate([ramps[0], out, ramps[1][_along(axis, slice(None, None, -1))]],
                             axis=axis)
    return out


def pad_by_slices(array, widths: tuple, mode: str, **kwargs):
    """np.pad(array, widths, mode) for mode 'edge', 'reflect', 'symmetric' or 'wrap'
    (reflect_type 'even'): each axis's padded array is a concatenation of slices of the array
    (reversed ones for the mirrored modes) and broadcast edge rows, so the reverse folds each
    border's cotangent back with slice sums, and no scatter with repeated indices is needed.

    >>> pad_by_slices(np.array([1.0, 2.0, 3.0]), ((2, 4),), "reflect")
    array([3., 2., 1., 2., 3., 2., 1., 2., 3.])
    """
    out = array
    for axis, (before, after) in enumerate(widths):
        if not (before or after):
            continue
        n = shape_of(array)[axis]
        # NumPy's own padding of the positions (its errors too, an empty axis say).
        source = np.pad(np.arange(n), (before, after), mode=mode, **kwargs)
        out = np.concatenate([_run(out, axis, source[start:stop])
                              for start, stop in _runs(source)], axis=axis)
    return out


def _runs(source):
    """Split the positions `source` into runs of steps +1, -1 or 0: (start, stop) pairs."""
    runs, start, size = [], 0, len(source)
    while start < size:
        stop = start + 1
        if stop < size and abs(int(source[stop]) - int(source[start])) <= 1:
            step = int(source[stop]) - int(source[start])
            while stop < size and int(source[stop]) - int(source[stop - 1]) == step:
                stop += 1
        runs.append((start, stop))
        start = stop
    return runs


def _run(x, axis: int, positions):
    """x's entries at `positions` (consecutive, reversed or repeated) along `axis`, by
    slicing: a view, or a broadcast of one row."""
    first, last, count = int(positions[0]), int(positions[-1]), len(positions)
    if count > 1 and first == last:
        return _repeated(x[_along(axis, slice(first, first + 1))], count, axis)
    if first <= last:
        return x[_along(axis, slice(first, last + 1))]
    return x[_along(axis, slice(first, last - 1 if last else None, -1))]
