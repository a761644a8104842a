"""Segment reductions and scatter extrema: `np.add.reduceat` / `np.multiply.reduceat` (segment
sums and products, the readout of a graph network) and `np.maximum.at` / `np.minimum.at`
(scatter-max message passing into a traced buffer).

`add.reduceat` is linear: its reverse sends each segment's cotangent to the elements of that
segment (an element in two segments, as with NumPy's rule that ``indices[i] >= indices[i+1]``
gives ``x[indices[i]]``, receives both). Its primal is NumPy's own call, so values agree to the
last bit (NumPy sums long segments pairwise).

`maximum.at(a, idx, b)` leaves each position of `a` holding the largest of its old value and
the values scattered to it. The derivative goes to the one source that won: the old value
when it equals the result (it wins ties), otherwise the first scattered value, in NumPy's
iteration order, that equals the result. A NaN propagates as in np.maximum: the first NaN
source wins.
"""
from __future__ import annotations

import numpy as np

from tape.core import Tracer, peek
from tape.inactive_code import inactive
from tape.rules import register_method

from ._util import defprimitive, shape_of
from .indexing import _dtype, _plain_buffer_error, getitem, plain_index, scatter_add
from .shape import _no_out, moveaxis, normalize_axis


# -- np.add.reduceat / np.multiply.reduceat ---------------------------------------------------------
def _segments(indices, n: int):
    """(segment, element) pairs of `reduceat`: segment i covers indices[i]:indices[i+1], or
    the single element indices[i] when indices[i] >= indices[i+1]; the last runs to the end.

    >>> _segments(np.array([3, 1, 1, 5]), 6)
    (array([0, 1, 2, 2, 2, 2, 3]), array([3, 1, 1, 2, 3, 4, 5]))
    """
    starts = np.asarray(indices, dtype=np.intp).reshape(-1)
    ends = np.append(starts[1:], n)
    ends = np.where(starts < ends, ends, starts + 1)
    lengths = ends - starts
    segment = np.repeat(np.arange(starts.size), lengths)
    offsets = np.arange(segment.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return segment, starts[segment] + offsets


def _reduceat_impl(x, indices, axis, dtype=None):
    if isinstance(x, Tracer):   # an outer level's traced value: recorded at that level
        return add_reduceat_p(x, indices=indices, axis=axis, dtype=dtype)
    return np.add.reduceat(x, indices, axis=axis, dtype=dtype)


def _reduceat_augmented(cfg, x, indices, axis, dtype=None):
    return _reduceat_impl(x, indices, axis, dtype), (shape_of(x), _dtype(x), indices, axis)


def _reduceat_reverse(cfg, saved, g):
    shape, dtype, indices, axis = saved
    segment, element = _segments(indices, shape[axis])
    moved = getitem(moveaxis(g, axis, 0), index=segment)
    moved_shape = (shape[axis],) + shape[:axis] + shape[axis + 1:]
    ct = scatter_add(moved, index=element, shape=moved_shape, dtype=dtype)
    return (moveaxis(ct, 0, axis),)


def _reduceat_forward(cfg, primals, tangents, indices, axis, dtype=None):
    return (_reduceat_impl(primals[0], indices, axis, dtype),
            _reduceat_impl(tangents[0], indices, axis, dtype))


add_reduceat_p = defprimitive("add_reduceat", _reduceat_impl, _reduceat_augmented,
                              _reduceat_reverse, _reduceat_forward)


def _reduceat_arguments(name, array, indices, axis, out):
    _no_out(f"{name}.reduceat", out)
    listed = isinstance(indices, (list, tuple))
    indices = np.asarray(plain_index(indices))
    if listed and indices.dtype.kind in "fb":
        indices = indices.astype(np.intp)   # NumPy casts the numbers of a list (not an array's)
    if indices.ndim != 1:
        raise ValueError(f"np.{name}.reduceat: `indices` must be 1-d, got shape {indices.shape}")
    axis = normalize_axis(axis, np.ndim(array))
    n = shape_of(array)[axis]
    if np.any((indices < 0) | (indices >= n)):
        bad = indices[(indices < 0) | (indices >= n)][0]
        raise IndexError(f"index {bad} out-of-bounds in {name}.reduceat [0, {n})")
    return indices, axis


def add_reduceat(array, indices, axis=0, dtype=None, out=None):
    """np.add.reduceat on a traced `array`: the sum of each segment along `axis`.

    >>> add_reduceat(np.arange(6.0), [3, 1, 1, 5])
    array([ 3.,  1., 10.,  5.])
    """
    indices, axis = _reduceat_arguments("add", array, indices, axis, out)
    return add_reduceat_p(array, indices=indices, axis=axis, dtype=dtype)


def multiply_reduceat(array, indices, axis=0, dtype=None, out=None):
    """np.multiply.reduceat on a traced `array`: each segment's product along `axis`, as a
    product over the segment's elements gathered into rows padded with ones (np.prod's
    derivative, zeros included).

    >>> multiply_reduceat(np.arange(1.0, 7.0), [0, 2, 2])
    array([  2.,   3., 360.])
    """
    indices, axis = _reduceat_arguments("multiply", array, indices, axis, out)
    n = shape_of(array)[axis]
    segment, element = _segments(indices, n)
    lengths = np.bincount(segment, minlength=indices.size)
    width = int(lengths.max(initial=0))
    column = np.arange(segment.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    moved = moveaxis(array, axis, 0)
    rest = shape_of(moved)[1:]
    ones = np.ones((indices.size, width) + rest, dtype=np.result_type(_dtype(array), dtype
                                                                        or _dtype(array)))
    rows = np.zeros_like(ones, dtype=bool)
    rows[segment, column] = True
    gathered = scatter_add(getitem(moved, index=element), index=(segment, column),
                           shape=ones.shape, dtype=ones.dtype)
    padded = np.where(rows, gathered, ones)
    return moveaxis(np.prod(padded, axis=1, dtype=dtype), 0, axis)


# -- np.maximum.at / np.minimum.at -----------------------------------------------------------------
def _nan_equal(a, b):
    return (a == b) | (np.isnan(a) & np.isnan(b))


def _winners(ufunc, old, index, values):
    """Which source each position of ``ufunc.at(old, index, values)`` takes its value from:
    (old_won, chosen), where old_won marks the positions that keep their old value and chosen
    the one scattered value (the first in NumPy's order) that each other position takes."""
    shape = np.shape(old)
    positions = np.arange(int(np.prod(shape)), dtype=np.intp).reshape(shape)[index]
    values = np.broadcast_to(values, positions.shape).astype(old.dtype, copy=False)
    result = old.copy()
    with np.errstate(invalid="ignore"):   # NaN operands: NumPy warns, the result is the NaN
        ufunc.at(result, index, values)
    old_won = _nan_equal(old, result)
    flat_positions = positions.reshape(-1)
    candidate = (_nan_equal(values.reshape(-1), result.reshape(-1)[flat_positions])
                 & ~old_won.reshape(-1)[flat_positions])
    chosen = np.zeros(flat_positions.size, dtype=bool)
    order = np.flatnonzero(candidate)
    _, first = np.unique(flat_positions[order], return_index=True)
    chosen[order[first]] = True
    return old_won, chosen.reshape(positions.shape)


# A compiling trace replays this on each call's values (the winners are data-dependent).
_inactive_winners = inactive(_winners)


def extremum_at(ufunc):
    """`np.maximum.at(a, indices, b)` / `np.minimum.at` into a traced `a` (unbuffered: each
    position takes the extremum of its old value and every value scattered to it)."""
    name = f"numpy.{ufunc.__name__}.at"

    def at(a, indices, b=None):
        if b is None:
            raise TypeError(f"{name} requires a second operand `b`")
        if not isinstance(a, Tracer):
            raise _plain_buffer_error(name)
        index = plain_index(indices)
        peeked = tuple(peek(i) for i in index) if isinstance(index, tuple) else peek(index)
        shape = shape_of(a)
        selected_shape = np.broadcast_to(np.int8(0), shape)[peeked].shape
        selected = np.broadcast_to(b, selected_shape)
        old_won, chosen = _inactive_winners(ufunc, a, index, b)
        winners = np.where(chosen, selected, np.zeros((), dtype=_dtype(a)))
        if not isinstance(winners, Tracer):   # a constant `b` joins a's tape (a traced zero)
            winners = np.zeros_like(a, shape=selected_shape) + winners
        scattered = scatter_add(winners, index=index, shape=shape, dtype=_dtype(a))
        a[...] = np.where(old_won, a, scattered)
    at.__name__ = f"{ufunc.__name__}_at"
    return at


register_method("add.reduceat", add_reduceat)
register_method("multiply.reduceat", multiply_reduceat)
register_method("maximum.at", extremum_at(np.maximum))
register_method("minimum.at", extremum_at(np.minimum))
