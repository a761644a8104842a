"""Batch mode's vectorised NumPy functions: each takes `Batched` values (W arrays on a leading
axis) and puts the batch axis into the function's axis arguments, so that W directions cost one
call. Logical axis a is data axis a + 1. Functions not listed here run once per direction
(`tape.batching`'s fallback).
"""
from __future__ import annotations

import numbers

import numpy as np

from .backend import array_module
from .batching import (VECTORISED, Batched, _aligned, _batched_in, _broadcast_call, _logical_ndim,
                       _width_of)


def _shift_axis(axis, ndim: int):
    if axis is None:
        return tuple(range(1, ndim + 1))
    if isinstance(axis, (tuple, list)):
        return tuple(_normalize(a, ndim) + 1 for a in axis)
    return _normalize(axis, ndim) + 1


def _normalize(axis: int, ndim: int) -> int:
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise np.exceptions.AxisError(axis, ndim)
    return axis % max(ndim, 1)


def reduction(func, args, kwargs):
    (a, *rest) = args
    if not isinstance(a, Batched) or _batched_in(rest) or _batched_in(kwargs.values()):
        return NotImplemented
    kwargs = dict(kwargs)
    kwargs["axis"] = _shift_axis(kwargs.get("axis"), a.ndim)
    return Batched(func(a.data, *rest, **kwargs))


def _scan(func, a, axis=None, **kwargs):
    if not isinstance(a, Batched):
        return NotImplemented
    if axis is None:
        return Batched(func(a.data.reshape(a.width, -1), axis=1, **kwargs))
    return Batched(func(a.data, axis=_normalize(axis, a.ndim) + 1, **kwargs))


def _reshape(a, shape=None, order="C", **kwargs):
    if "newshape" in kwargs:   # the NumPy < 2.1 spelling
        shape = kwargs.pop("newshape")
    if not isinstance(a, Batched) or order != "C" or kwargs:
        return NotImplemented
    shape = (shape,) if isinstance(shape, numbers.Integral) else tuple(shape)
    return Batched(a.data.reshape((a.width,) + shape))


def _transpose(a, axes=None):
    if not isinstance(a, Batched):
        return NotImplemented
    axes = tuple(reversed(range(a.ndim))) if axes is None else axes
    return Batched(np.transpose(a.data, (0,) + tuple(_normalize(x, a.ndim) + 1 for x in axes)))


def _swapaxes(a, axis1, axis2):
    if not isinstance(a, Batched):
        return NotImplemented
    return Batched(np.swapaxes(a.data, _normalize(axis1, a.ndim) + 1,
                               _normalize(axis2, a.ndim) + 1))


def _moveaxis(a, source, destination):
    if not isinstance(a, Batched):
        return NotImplemented
    src, dst = _shift_axis(source, a.ndim), _shift_axis(destination, a.ndim)
    return Batched(np.moveaxis(a.data, src, dst))


def _expand_dims(a, axis):
    if not isinstance(a, Batched):
        return NotImplemented
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    out_ndim = a.ndim + len(axes)
    return Batched(np.expand_dims(a.data, tuple(_normalize(x, out_ndim) + 1 for x in axes)))


def _squeeze(a, axis=None):
    if not isinstance(a, Batched):
        return NotImplemented
    if axis is None:
        axis = tuple(i for i, n in enumerate(a.shape) if n == 1)
    return Batched(np.squeeze(a.data, _shift_axis(axis, a.ndim)))


def _broadcast_to(a, shape, subok=False):
    if not isinstance(a, Batched):
        return NotImplemented
    shape = (shape,) if isinstance(shape, numbers.Integral) else tuple(shape)
    return Batched(np.broadcast_to(_aligned(a, len(shape)), (a.width,) + shape))


def _like(func):
    def handler(a, *args, shape=None, **kwargs):
        if not isinstance(a, Batched) or _batched_in(args):
            return NotImplemented
        if shape is not None:
            shape = (shape,) if isinstance(shape, numbers.Integral) else tuple(shape)
            return Batched(func(a.data, *args, shape=(a.width,) + shape, **kwargs))
        return Batched(func(a.data, *args, **kwargs))
    return handler


# NumPy's own np.stack, taken at import: while tracing, the numpy module attribute is a
# wrapper (ops/lists.py), so `np.stack` at call time is not the function `func` was given as.
_STACK = np.stack


def _joined(func):
    """concatenate / stack: unbatched pieces are repeated across the batch."""
    def handler(arrays, axis=0, **kwargs):
        arrays = list(arrays)
        width = _width_of(_batched_in(arrays))
        xp = array_module(_batched_in(arrays)[0].data)
        ndim = max(_logical_ndim(v) for v in arrays)
        if axis is None:
            pieces = [_full(v, width, xp).reshape(width, -1) for v in arrays]
            return Batched(xp.concatenate(pieces, axis=1, **kwargs))
        out_ndim = ndim + (func is _STACK)
        pieces = [_full(v, width, xp) for v in arrays]
        return Batched(func(pieces, axis=_normalize(axis, out_ndim) + 1, **kwargs))
    return handler


def _full(v, width, xp):
    if isinstance(v, Batched):
        return v.data
    v = xp.asarray(v)
    return xp.broadcast_to(v, (width,) + v.shape)


def _where(cond, x=None, y=None):
    if x is None:
        return NotImplemented
    return _broadcast_call(np.where, (cond, x, y), {})


def matmul(a, b, **kwargs):
    if kwargs or (isinstance(a, Batched) and isinstance(b, Batched)):
        return NotImplemented
    na, nb = _logical_ndim(a), _logical_ndim(b)
    # A batched vector becomes a row (left) or a column (right), so that NumPy never reads
    # the batch axis as a matrix axis; the other operand's stack axes sit after the batch axis.
    if isinstance(a, Batched):
        if na == 1 and nb >= 2:
            row = a.data.reshape((a.width,) + (1,) * (nb - 2) + (1, a.shape[0]))
            return Batched(np.matmul(row, b)[..., 0, :])
        return Batched(np.matmul(_aligned(a, max(na, nb)), b))
    if nb == 1:
        column = b.data.reshape((b.width,) + (1,) * (na - 2) + (b.shape[0], 1))
        return Batched(np.matmul(a, column)[..., 0])
    return Batched(np.matmul(a, _aligned(b, max(na, nb))))


def _dot(a, b, out=None):
    if out is not None:
        return NotImplemented
    if np.ndim(a) == 0 or np.ndim(b) == 0:
        return np.multiply(a, b)
    if _logical_ndim(a) <= 2 and _logical_ndim(b) <= 2:
        return matmul(a, b)
    return NotImplemented


def _tensordot(a, b, axes=2):
    if isinstance(a, Batched) and isinstance(b, Batched):
        return NotImplemented
    if isinstance(axes, numbers.Integral):
        na = _logical_ndim(a)
        axes = (list(range(na - axes, na)), list(range(axes)))
    ax_a, ax_b = ([x] if isinstance(x, numbers.Integral) else list(x) for x in axes)
    if isinstance(a, Batched):
        return Batched(np.tensordot(a.data, b, (_shift_axis(tuple(ax_a), a.ndim), ax_b)))
    out = np.tensordot(a, b.data, (ax_a, _shift_axis(tuple(ax_b), b.ndim)))
    return Batched(np.moveaxis(out, np.ndim(a) - len(ax_a), 0))


_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _einsum(subscripts, *operands, **kwargs):
    if not isinstance(subscripts, str) or "->" not in subscripts or "." in subscripts:
        return NotImplemented
    inputs, output = subscripts.replace(" ", "").split("->")
    inputs = inputs.split(",")
    free = [c for c in _LETTERS if c not in subscripts]
    if not free:
        return NotImplemented
    b = free[0]
    inputs = [b + s if isinstance(op, Batched) else s for s, op in zip(inputs, operands)]
    data = [op.data if isinstance(op, Batched) else op for op in operands]
    return Batched(np.einsum(",".join(inputs) + "->" + b + output, *data, **kwargs))


def _solve(a, b):
    if isinstance(a, Batched) or not isinstance(b, Batched):
        return NotImplemented
    na = np.ndim(a)
    if b.ndim == 1:    # a vector right-hand side: keep the batch axis off the matrix axes, and
        # off a stack of matrices' axes (solve(a[3, n, n], b[n]) is one vector per matrix)
        column = b.data.reshape((b.width,) + (1,) * (na - 2) + (b.shape[0], 1))
        return Batched(np.linalg.solve(a, column)[..., 0])
    return Batched(np.linalg.solve(a, _aligned(b, max(na, b.ndim))))


def _shape(a):
    return a.shape


def _ndim(a):
    return a.ndim


def _size(a, axis=None):
    return a.size if axis is None else a.shape[axis]


def _real_or_imag(func):
    return lambda a: Batched(func(a.data))


def _dtype_query(func):
    return lambda a, *args, **kwargs: func(a.data, *args, **kwargs)


def _result_type(*arrays_and_dtypes):
    return np.result_type(*[v.data if isinstance(v, Batched) else v for v in arrays_and_dtypes])


def _copy(a, *args, **kwargs):
    return Batched(np.copy(a.data, *args, **kwargs))


def _reducer(func):
    return lambda a, *args, **kwargs: reduction(func, (a, *args), kwargs)


IN_PLACE = {np.copyto, np.put, np.put_along_axis, np.place, np.putmask, np.fill_diagonal}

REDUCE_AS = {np.add: np.sum, np.multiply: np.prod, np.maximum: np.max, np.minimum: np.min,
              np.logical_and: np.all, np.logical_or: np.any}

HANDLERS: dict = {
    np.reshape: _reshape, np.transpose: _transpose, np.swapaxes: _swapaxes,
    np.moveaxis: _moveaxis, np.expand_dims: _expand_dims, np.squeeze: _squeeze,
    np.broadcast_to: _broadcast_to, np.concatenate: _joined(np.concatenate),
    np.stack: _joined(np.stack), np.where: _where, np.matmul: matmul, np.dot: _dot,
    np.tensordot: _tensordot, np.einsum: _einsum, np.linalg.solve: _solve,
    np.shape: _shape, np.ndim: _ndim, np.size: _size, np.real: _real_or_imag(np.real),
    np.imag: _real_or_imag(np.imag), np.iscomplexobj: _dtype_query(np.iscomplexobj),
    np.isrealobj: _dtype_query(np.isrealobj), np.result_type: _result_type, np.copy: _copy,
    np.zeros_like: _like(np.zeros_like), np.ones_like: _like(np.ones_like),
    np.empty_like: _like(np.empty_like), np.full_like: _like(np.full_like),
    np.cumsum: lambda a, axis=None, **kw: _scan(np.cumsum, a, axis, **kw),
    np.cumprod: lambda a, axis=None, **kw: _scan(np.cumprod, a, axis, **kw),
}
for _func in (np.sum, np.mean, np.prod, np.max, np.min, np.amax, np.amin, np.any, np.all,
              np.var, np.std, np.nansum):
    HANDLERS[_func] = _reducer(_func)
HANDLERS[np.clip] = lambda a, a_min=None, a_max=None, **kw: _broadcast_call(
    np.clip, (a, a_min, a_max), kw)


VECTORISED.handlers, VECTORISED.reduce_as, VECTORISED.in_place = HANDLERS, REDUCE_AS, IN_PLACE
VECTORISED.matmul, VECTORISED.reduction = staticmethod(matmul), staticmethod(reduction)
