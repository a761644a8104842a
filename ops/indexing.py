"""Indexing: `x[i]` (basic, advanced and boolean), `x[i] = v`, the scatter that reverses them,
and the gathers built on them (take, take_along_axis, diagonal, diag, trace, pad).

`pad` supports the modes 'constant' (with a plain, or a traced scalar, `constant_values`),
'edge', 'reflect', 'symmetric' and 'wrap' as gathers, and the statistic modes and
'linear_ramp' as compositions (ops/pad_modes.py); other modes raise NotImplementedError.

Writes are functional on the tape: `x[i] = v` records `x_new = setitem(x_old, v)` and the tracer
then stands for `x_new`, so values saved earlier are never overwritten (the old array is copied
unless the tracer owns a private buffer that no record has seen).

Repeated indices: a gather `x[[0, 0]]` sends both cotangents to x[0] (they accumulate). In an
assignment `x[[0, 0]] = v` NumPy keeps one of the written values; only the value that NumPy kept
receives a cotangent (the overwritten ones had no effect on the result).
"""
from __future__ import annotations

import numpy as np

from tape.backend import add_at, array_module
from tape.core import Tracer, nondiff_value, peek, primal
from tape.errors import NonDifferentiableError
from tape.rules import register_function, register_method
from tape.views import mark_read_only_view

from ._util import defprimitive, shape_of, unbroadcast
from .creation import has_tracer
from .pad_modes import STATISTICS, pad_by_slices, pad_by_statistic, pad_linear_ramp
from .shape import _along, _no_out, moveaxis, normalize_axis, numpy_layout, ravel


def plain_index(index):
    """Indices carry no derivative: replace traced index arrays by their values. Integer
    arrays go through `nondiff_value` (a compiled program reads them at each call); boolean
    masks decide the result's shape, so their values are read (and guarded) here."""
    if isinstance(index, tuple):
        return tuple(_index_item(i) for i in index)
    return _index_item(index)


def _index_item(i):
    if isinstance(i, Tracer) and np.issubdtype(peek(i).dtype, np.integer):
        return nondiff_value(i)
    return primal(i)


def _items(index) -> tuple:
    return index if isinstance(index, tuple) else (index,)


def _may_repeat(index) -> bool:
    """Whether `index` can select one element twice: only integer index arrays can."""
    for i in _items(index):
        if i is None or i is Ellipsis or isinstance(i, (int, np.integer, slice, bool)):
            continue
        if getattr(i, "dtype", None) != bool and np.size(i) > 1:
            return True
    return False


def _dtype(x):
    dt = getattr(x, "dtype", None)
    return dt if dt is not None else np.result_type(x)


# -- x[index] -------------------------------------------------------------------------------------
def _getitem_augmented(cfg, x, index):
    return x[index], (shape_of(x), _dtype(x), index)


def _getitem_reverse(cfg, saved, g):
    shape, dtype, index = saved
    return (scatter_add(g, index=index, shape=shape, dtype=dtype),)


def _getitem_forward(cfg, primals, tangents, index):
    return primals[0][index], tangents[0][index]


def _getitem_accumulate_into(cfg, saved, g, buffer) -> bool:
    # The reverse rule scatters g into zeros of x's shape, which the sweep then adds to x's
    # cotangent: with that cotangent its own, the sweep adds g at `index` alone (a loop over a
    # matrix's rows would otherwise make a full-size array per row).
    shape, dtype, index = saved
    if (type(g) is not np.ndarray and not isinstance(g, np.generic)) or _may_repeat(index):
        return False
    if (type(buffer) is not np.ndarray or buffer.shape != shape
            or np.result_type(buffer.dtype, dtype, g.dtype) != buffer.dtype):
        return False
    buffer[index] += g
    return True


getitem = defprimitive("getitem", lambda x, index: x[index], _getitem_augmented,
                       _getitem_reverse, _getitem_forward)
getitem.accumulate_into = _getitem_accumulate_into
getitem.reverse_fresh = True   # a scatter into new zeros
# For compiled programs: with a basic index the reverse is written into x's cotangent buffer.
getitem.inline = ("scatter",)


# -- zeros(shape) with g added at index: the transpose of getitem ----------------------------------
def _scatter_impl(g, index, shape, dtype):
    # zeros_like(g, shape=...) rather than xp.zeros: a batched g gives a batched buffer.
    out = np.zeros_like(g, shape=shape, dtype=np.result_type(dtype, _dtype(g)))
    if _may_repeat(index):
        add_at(out, index, g)   # np.add.at, also on CuPy arrays
    else:
        out[index] = g   # each element is selected at most once: plain assignment is enough
    return out


def _scatter_augmented(cfg, g, index, shape, dtype):
    return _scatter_dispatch(g, index, shape, dtype), index


def _scatter_reverse(cfg, index, ct):
    return (ct[index],)


def _scatter_forward(cfg, primals, tangents, index, shape, dtype):
    return (_scatter_dispatch(primals[0], index, shape, dtype),
            _scatter_dispatch(tangents[0], index, shape, dtype))


def _scatter_dispatch(g, index, shape, dtype):
    # With an outer-level traced `g` the scatter itself must be recorded at that level.
    if isinstance(g, Tracer):
        return scatter_add(g, index=index, shape=shape, dtype=dtype)
    return _scatter_impl(g, index, shape, dtype)


scatter_add = defprimitive("scatter_add", _scatter_impl, _scatter_augmented, _scatter_reverse,
                           _scatter_forward)


# -- x[index] = v ---------------------------------------------------------------------------------
def _setitem_impl(old, value, index, inplace):
    if type(old) in (bool, int, float, complex):   # a Python number's value: a 0-d array
        old = np.array(old)
    if isinstance(value, Tracer) and not isinstance(old, Tracer):
        # An outer level's value written into a plain buffer: the buffer joins that level.
        old = value.level.constant(old.copy(order="K"))
    elif not inplace:
        # A 0-d cotangent may arrive as a NumPy scalar, which has no item assignment. The copy
        # keeps the buffer's memory layout ("K"), as the write into it does in NumPy: a
        # Fortran-ordered buffer must stay one for ravel("K") and reshape(order="A").
        old = np.array(old) if isinstance(old, np.generic) else old.copy(order="K")
    old[index] = value
    return old


def _kept(shape, index, xp):
    """Which written values an assignment at `index` kept, as a mask over `x[index]` (None when
    no element is written twice)."""
    if not _may_repeat(index):
        return None
    owner = xp.zeros(shape, dtype=np.intp)
    target_shape = owner[index].shape
    written = xp.arange(int(np.prod(target_shape))).reshape(target_shape)
    owner[index] = written
    kept = owner[index] == written
    return None if bool(kept.all()) else kept


def _setitem_augmented(cfg, old, value, index, inplace):
    kept = _kept(shape_of(old), index, array_module(old)) if cfg.active[1] else None
    return _setitem_impl(old, value, index, inplace), (index, shape_of(value), kept)


def _covers_everything(index) -> bool:
    """Whether `x[index] = v` writes every element of x (``x[...] = v``, ``x[:] = v``)."""
    parts = index if type(index) is tuple else (index,)
    return all(p is Ellipsis or type(p) is slice and p == _WHOLE for p in parts)


_WHOLE = slice(None)


def _setitem_reverse(cfg, saved, g):
    index, value_shape, kept = saved
    g_old = None
    # The buffer's values before the write reach the result where it was not overwritten;
    # a write of the whole buffer leaves them no path (no cotangent, not an array of zeros).
    if cfg.active[0] and not _covers_everything(index):
        g_old = setitem(g, 0, index=index, inplace=False)
    return g_old, (_value_cotangent(saved, g) if cfg.active[1] else None)


def _value_cotangent(saved, g):
    """The cotangent of the value written by ``x[index] = value``: g at `index`, where the
    value was kept, summed onto the value's shape."""
    index, value_shape, kept = saved
    g_value = g[index]
    if kept is not None:
        g_value = np.where(kept, g_value, 0)
    # NumPy drops a value's leading unit axes (y[0] = v with v of shape (1, 3)): sum onto
    # the shape it broadcast from, then restore them.
    dropped = len(value_shape) - len(shape_of(g_value))
    if dropped > 0:
        return np.reshape(unbroadcast(g_value, value_shape[dropped:]), value_shape)
    return unbroadcast(g_value, value_shape)


def _setitem_reverse_in_place(cfg, saved, g):
    # With g the sweep's own array, the buffer's cotangent is g itself with the written
    # entries zeroed, rather than a copy of it per write (many scalar writes into one buffer).
    index, value_shape, kept = saved
    if type(g) is not np.ndarray or not cfg.active[0] or _covers_everything(index):
        return None
    g_value = None
    if cfg.active[1]:
        g_value = _value_cotangent(saved, g)
        if isinstance(g_value, np.ndarray) and np.may_share_memory(g_value, g):
            g_value = g_value.copy()   # read before the zeroing below
    g[index] = 0
    return g, g_value


def _setitem_forward(cfg, primals, tangents, index, inplace):
    old, value = primals
    t_old, t_value = tangents
    out = _setitem_impl(old, value, index, inplace)
    if t_old is None:
        t_old = np.zeros_like(out)
    elif not inplace:
        t_old = np.array(t_old) if isinstance(t_old, np.generic) else t_old.copy(order="K")
    # The same assignment on the tangent keeps the same values, so repeats need no care here.
    # (_setitem_impl: a tangent differentiated at an outer level, reverse over forward, cannot
    # be written into a plain buffer; the buffer joins that level.)
    return out, _setitem_impl(t_old, 0 if t_value is None else t_value, index, inplace=True)


setitem = defprimitive("setitem", _setitem_impl, _setitem_augmented, _setitem_reverse,
                       _setitem_forward)
setitem.reverse_in_place = _setitem_reverse_in_place
setitem.reverse_fresh = True   # the buffer's cotangent is a copy of g


def _setitem_method(x, index, value, inplace):
    if isinstance(value, (list, tuple)) and any(isinstance(v, Tracer) for v in value):
        value = np.stack(value)   # y[:2] = [a, b] with traced scalars a, b
    if isinstance(value, Tracer) and _dtype(peek(x)).kind in "biu":
        # An integer or boolean buffer truncates what it receives: no derivative gets through.
        value = value.astype(_dtype(peek(x)))
    return setitem(x, value, index=plain_index(index), inplace=inplace)


register_method("__getitem__", lambda x, index: getitem(x, index=plain_index(index)))
register_method("__setitem__", _setitem_method)


def _plain_buffer_error(what):
    return NonDifferentiableError(
        f"{what} would write a traced value into a plain array, which cannot carry a "
        "derivative; allocate the buffer with np.zeros_like(x) (or np.empty_like, x.copy()) "
        "instead")


def copyto(dst, src, casting="same_kind", where=True):
    """np.copyto into a traced buffer (a plain `dst` cannot receive a traced `src`)."""
    if not isinstance(dst, Tracer):
        raise _plain_buffer_error("np.copyto")
    if isinstance(where, (bool, np.bool_)):
        if where:
            dst[...] = src
    else:   # a traced mask stays traced: a compiled function takes each call's mask
        dst[...] = np.where(where, src, dst)


def put(a, ind, v, mode="raise"):
    """np.put into a traced `a`: `a.flat[ind] = v`, with `v` repeated to the length of `ind`."""
    if not isinstance(a, Tracer):
        raise _plain_buffer_error("np.put")
    n = int(np.prod(shape_of(a)))
    if mode == "wrap":
        ind = np.mod(primal(ind), n)
    elif mode == "clip":
        ind = np.clip(primal(ind), 0, n - 1)
    count = int(np.size(peek(ind)))
    if np.ndim(peek(ind)) > 1:   # NumPy reads the indices flat
        ind = np.ravel(ind)
    if np.size(peek(v)) not in (1, count):
        v = np.resize(v, count)
    flat = np.ravel(a)       # a view of `a` when its memory is contiguous, else a copy
    flat[ind] = v if np.size(peek(v)) == count else np.reshape(v, ())
    if getattr(flat, "view_of", None) is None:
        a[...] = np.reshape(flat, shape_of(a))


def place(arr, mask, vals):
    """np.place into a traced `arr`: the entries where `mask` holds take `vals` in order,
    repeated as needed."""
    if not isinstance(arr, Tracer):
        raise _plain_buffer_error("np.place")
    mask = np.reshape(primal(mask), shape_of(arr)).astype(bool)
    count = int(np.count_nonzero(mask))
    if count:
        arr[mask] = np.resize(vals, count)


def putmask(a, mask, values):
    """np.putmask into a traced `a`: `a.flat[n] = values.flat[n]` where `mask.flat[n]`, with
    `values` repeated to the size of `a`."""
    if not isinstance(a, Tracer):
        raise _plain_buffer_error("np.putmask")
    shape = shape_of(a)
    values = values if shape_of(values) == shape else np.resize(values, shape)
    a[...] = np.where(nondiff_value(mask), values, a)


def fill_diagonal(a, val, wrap=False):
    """np.fill_diagonal of a traced `a` (a matrix, or an array with equal dimensions)."""
    shape = shape_of(a)
    if len(shape) < 2:
        raise ValueError("array must be at least 2-d")
    if len(shape) == 2:
        step, end = shape[1] + 1, (None if wrap else shape[1] * shape[1])
    else:
        if len(set(shape)) != 1:
            raise ValueError("All dimensions of input must be of equal length")
        step, end = 1 + int(np.cumprod(shape[:-1]).sum()), None
    put(a, np.arange(int(np.prod(shape)))[:end:step], val)


def ufunc_at(sign):
    """`np.add.at(a, indices, b)` (sign 1) and `np.subtract.at` (sign -1) into a traced `a`:
    unbuffered, so a repeated index receives every value."""
    def at(a, indices, b):
        if not isinstance(a, Tracer):
            raise _plain_buffer_error("numpy.add.at" if sign > 0 else "numpy.subtract.at")
        index = plain_index(indices)
        peeked = tuple(peek(i) for i in index) if isinstance(index, tuple) else peek(index)
        shape = np.broadcast_to(np.int8(0), shape_of(a))[peeked].shape
        selected = np.broadcast_to(b, shape)
        if not isinstance(selected, Tracer):   # a constant `b` joins a's tape (a traced zero)
            selected = np.zeros_like(a, shape=shape) + selected
        update = scatter_add(selected, index=index, shape=shape_of(a), dtype=_dtype(a))
        a[...] = a + update if sign > 0 else a - update
    return at


# -- pad -------------------------------------------------------------------------------------------
def _pad_impl(x, pad_width, constant_values=0):
    return np.pad(x, pad_width, mode="constant", constant_values=constant_values)


def _pad_augmented(cfg, x, pad_width, constant_values=0):
    return _pad_impl(x, pad_width, constant_values), (shape_of(x), pad_width)


def _pad_reverse(cfg, saved, g):
    shape, pad_width = saved
    return (g[tuple(slice(b, b + n) for (b, _), n in zip(pad_width, shape))],)


def _pad_forward(cfg, primals, tangents, pad_width, constant_values=0):
    out = _pad_impl(primals[0], pad_width, constant_values)
    return out, pad_p(tangents[0], pad_width=pad_width)


pad_p = defprimitive("pad", _pad_impl, _pad_augmented, _pad_reverse, _pad_forward)

_GATHER_MODES = ("edge", "reflect", "symmetric", "wrap")


def pad(array, pad_width, mode="constant", **kwargs):
    """np.pad for the modes 'constant', 'edge', 'reflect', 'symmetric', 'wrap', 'linear_ramp',
    'maximum', 'minimum', 'mean' and 'median'.

    The other modes raise NotImplementedError. A traced `constant_values` must be a scalar.
    """
    shape = shape_of(array)
    widths = np.asarray(primal(pad_width))
    if widths.dtype.kind not in "iu":
        raise TypeError("`pad_width` must be of integral type.")
    widths = np.broadcast_to(widths, (len(shape), 2))
    if np.any(widths < 0):
        raise ValueError("index can't contain negative values")
    widths = tuple((int(b), int(a)) for b, a in widths)
    xp = array_module(array)
    if mode == "constant":
        cval = kwargs.pop("constant_values", 0)
        if kwargs:
            raise TypeError(f"unsupported keyword arguments for mode 'constant': {set(kwargs)}")
        if not has_tracer(cval):
            return pad_p(array, pad_width=widths, constant_values=cval)
        if not isinstance(cval, Tracer) or np.ndim(cval) != 0:   # (a list of them too)
            raise NotImplementedError(
                "np.pad with a traced constant_values per axis or side: give one traced "
                "scalar, or pad with 0 and set each border with np.where or slices")
        border = xp.pad(xp.zeros(shape, dtype=bool), widths, constant_values=True)
        padded = pad_p(array, pad_width=widths)
        # Selected, not added (an infinite constant times 0 would be NaN inside), in the
        # array's dtype, as NumPy casts the constant.
        dtype = peek(padded).dtype
        return np.where(border, cval if cval.dtype == dtype else cval.astype(dtype), padded)
    if mode in _GATHER_MODES and kwargs.get("reflect_type", "even") == "even":
        if not any(before or after for before, after in widths):
            return pad_p(array, pad_width=widths)
        return pad_by_slices(array, widths, mode, **kwargs)
    if mode in STATISTICS or mode == "linear_ramp":
        for axis, width_pair in enumerate(widths):
            if shape[axis] == 0 and any(width_pair):
                raise ValueError(f"can't extend empty axis {axis} using modes other than "
                                 "'constant' or 'empty'")
        option = "stat_length" if mode in STATISTICS else "end_values"
        if set(kwargs) - {option}:
            raise ValueError(f"unsupported keyword arguments for mode '{mode}': "
                             f"{set(kwargs) - {option}}")
        if mode == "linear_ramp":
            return pad_linear_ramp(array, widths, kwargs.get("end_values", 0))
        return pad_by_statistic(array, widths, mode, kwargs.get("stat_length"))
    what = f"mode {getattr(mode, '__name__', mode)!r}"
    if mode in _GATHER_MODES:
        what += " with reflect_type='odd'"   # values 2 * edge - mirror: not a gather
    raise NotImplementedError(
        f"np.pad with {what} is not differentiable in hecate; supported modes: "
        "'constant', 'edge', 'reflect', 'symmetric', 'wrap' (reflect_type='even'), "
        "'linear_ramp', 'maximum', 'minimum', 'mean', 'median'")


# -- gathers ---------------------------------------------------------------------------------------
def take(a, indices, axis=None, out=None, mode="raise"):
    """np.take: a gather, so repeated indices accumulate their cotangents."""
    _no_out("take", out)
    if axis is None:
        a, axis = ravel(a), 0
    axis = normalize_axis(axis, np.ndim(a))
    indices = _index_item(indices)
    n = shape_of(a)[axis]
    if mode == "wrap":
        indices = np.mod(indices, n)
    elif mode == "clip":
        indices = np.clip(indices, 0, n - 1)
    return getitem(a, index=_along(axis, indices))   # a copy, never a view (unlike a[i])


def _along_axis_index(shape, indices, axis, xp):
    ndim = len(shape)
    return tuple(indices if d == axis else
                 xp.arange(shape[d]).reshape((1,) * d + (-1,) + (1,) * (ndim - d - 1))
                 for d in range(ndim))


def take_along_axis(arr, indices, axis=-1):
    """np.take_along_axis: a gather along `axis` (of the flattened array when None)."""
    if axis is None:
        arr, axis = ravel(arr), 0
    indices = _index_item(indices)
    axis = normalize_axis(axis, np.ndim(arr))
    if np.ndim(indices) != np.ndim(arr):
        raise ValueError("`indices` and `arr` must have the same number of dimensions")
    return getitem(arr, index=_along_axis_index(shape_of(arr), indices, axis, array_module(arr)))


def put_along_axis(arr, indices, values, axis):
    """np.put_along_axis into a traced `arr` (a buffer from np.zeros_like, or an argument)."""
    if not isinstance(arr, Tracer):
        raise _plain_buffer_error("np.put_along_axis")
    if axis is None:
        raise NotImplementedError("np.put_along_axis with axis=None on a traced array")
    axis = normalize_axis(axis, np.ndim(arr))
    arr[_along_axis_index(shape_of(arr), _index_item(indices), axis, array_module(arr))] = values


# -- diagonals -------------------------------------------------------------------------------------
def _diagonal_index(n1, n2, offset, xp):
    length = max(0, min(n1 + min(offset, 0), n2 - max(offset, 0)))
    steps = xp.arange(length)
    return steps + max(-offset, 0), steps + max(offset, 0)


def diagonal(a, offset=0, axis1=0, axis2=1):
    """np.diagonal: the diagonal becomes the last axis; a read-only view, as in NumPy (later
    writes into `a` are seen through it, writes into it raise)."""
    out = mark_read_only_view(_diagonal(a, offset, axis1, axis2), a,
                              lambda base: _diagonal(base, offset, axis1, axis2))
    if isinstance(out, Tracer) and hasattr(peek(a), "strides"):
        # a gather: NumPy's strided view's layout, which ravel and reshape read
        out.layout = np.diagonal(numpy_layout(a), offset, axis1, axis2).strides
    return out


def _diagonal(a, offset, axis1, axis2):
    ndim = np.ndim(a)
    if ndim < 2:
        raise ValueError("diag requires an array of at least two dimensions")
    axis1, axis2 = normalize_axis(axis1, ndim), normalize_axis(axis2, ndim)
    if axis1 == axis2:
        raise ValueError("axis1 and axis2 cannot be the same")
    shape = shape_of(a)
    rows, cols = _diagonal_index(shape[axis1], shape[axis2], int(offset), array_module(a))
    return getitem(moveaxis(a, (axis1, axis2), (-2, -1)), index=(Ellipsis, rows, cols))


def trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    """np.trace: the sum of a diagonal."""
    _no_out("trace", out)
    return np.sum(diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype)


def diag(v, k=0):
    """np.diag: a 1-d `v` becomes a matrix with `v` on its k-th diagonal; a 2-d `v` gives its
    k-th diagonal."""
    ndim = np.ndim(v)
    if ndim == 2:
        return diagonal(v, k)
    if ndim != 1:
        raise ValueError("Input must be 1- or 2-d.")
    k = int(k)
    n = shape_of(v)[0] + abs(k)
    index = _diagonal_index(n, n, k, array_module(v))
    return scatter_add(v, index=index, shape=(n, n), dtype=_dtype(v))


for _np_fn, _rule in [(np.copyto, copyto), (np.pad, pad), (np.take, take),
                      (np.take_along_axis, take_along_axis), (np.put_along_axis, put_along_axis),
                      (np.diagonal, diagonal), (np.trace, trace), (np.diag, diag),
                      (np.put, put), (np.place, place), (np.putmask, putmask),
                      (np.fill_diagonal, fill_diagonal)]:
    register_function(_np_fn, _rule)
register_method("add.at", ufunc_at(1))          # np.add.at(a, indices, b)
register_method("subtract.at", ufunc_at(-1))
