"""Batch mode: W tangents (or cotangents) of one value, stacked on a leading axis.

A `Batched` value looks like one array of the primal's shape to the rules: `.shape`, `.ndim`
and every NumPy function see the *logical* shape, while the data holds W of them. The rules of
`ops/` are written with NumPy calls, so they run unchanged on batched tangents, and W
directions cost one vectorised pass instead of W passes (JAX's `vmap`, restricted to the linear
maps that rules apply to tangents).

Each NumPy function is vectorised in one of two ways:

- ufuncs broadcast, after the batch axis is put first and the logical axes are aligned;
- the common shape and reduction functions (`sum`, `reshape`, `transpose`, `matmul`, ...) get
  the batch axis added to their axis arguments;
- anything else runs once per direction and the results are stacked. That fallback is always
  correct (a rule is a function of one tangent), only slower.

>>> import numpy as np
>>> t = Batched(np.array([[1., 2.], [3., 4.], [5., 6.]]))      # 3 directions in R^2
>>> t.shape, t.width
((2,), 3)
>>> (np.sum(t * np.array([10., 1.]))).data
array([12., 34., 56.])
"""
from __future__ import annotations

import numbers
from typing import Any, Callable, Sequence

import numpy as np

from .backend import array_module
from .errors import BatchingFallback


class Batched:
    """W arrays of one shape, held as one array with a leading batch axis of length W."""

    __slots__ = ("data",)
    __array_priority__ = 1000   # make `ndarray op Batched` defer to Batched's operators

    def __init__(self, data):
        self.data = data

    # -- the logical array -------------------------------------------------------------------
    @property
    def width(self) -> int:
        return self.data.shape[0]

    @property
    def shape(self) -> tuple:
        return tuple(self.data.shape[1:])

    @property
    def ndim(self) -> int:
        return self.data.ndim - 1

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def dtype(self):
        return self.data.dtype

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"Batched(width={self.width}, shape={self.shape}, data={self.data!r})"

    def __array__(self, dtype=None, copy=None):
        # A rule that needs one plain array (`plain[idx] = g`, np.asarray(g), a raw kernel)
        # is run once per direction instead: the trace catches this and loops.
        raise BatchingFallback(
            "a batched tangent cannot become one plain array; the rule is run once per "
            "direction instead")

    def __float__(self):
        raise BatchingFallback("a batched tangent is not one number")

    __complex__ = __int__ = __float__

    def unstack(self) -> tuple:
        """The W arrays, one per direction."""
        return tuple(self.data[w] for w in range(self.width))

    # -- NumPy protocols ----------------------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        out = kwargs.get("out")
        if out is not None or method == "at":
            # Writing batched values into a plain buffer cannot work: the buffer holds one
            # direction. The trace then runs the rule once per direction.
            targets = out if out is not None else inputs[:1]
            if not all(isinstance(o, Batched) for o in targets):
                raise BatchingFallback(f"{ufunc.__name__} writes into a plain array")
        if method == "__call__" and out is not None and ufunc.signature is None:
            result = _broadcast_call(ufunc, inputs, {k: v for k, v in kwargs.items()
                                                     if k != "out"})
            results = result if isinstance(result, tuple) else (result,)
            for o, r in zip(out, results):
                o.data[...] = r.data
            return out[0] if len(out) == 1 else out
        if method == "__call__" and "out" not in kwargs:
            if ufunc.signature is None:
                return _broadcast_call(ufunc, inputs, kwargs)
            if ufunc is np.matmul and len(inputs) == 2:   # a gufunc: core axes are not broadcast
                result = _matmul(*inputs, **kwargs)
                if result is not NotImplemented:
                    return result
        if method == "reduce" and ufunc in _REDUCE_AS and len(inputs) == 1:
            return _reduction(_REDUCE_AS[ufunc], (inputs[0],), kwargs)
        return _per_direction(getattr(ufunc, method), inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        if func in _IN_PLACE and not isinstance(args[0] if args else None, Batched):
            raise BatchingFallback(f"{func.__name__} writes into a plain array")
        if not isinstance(kwargs.get("out", self), Batched):
            raise BatchingFallback(f"{func.__name__} writes into a plain array")
        handler = _HANDLERS.get(func)
        if handler is not None:
            result = handler(*args, **kwargs)
            if result is not NotImplemented:
                return result
        return _per_direction(func, args, kwargs)

    # -- the ndarray surface the rules use ----------------------------------------------------
    def __getitem__(self, index):
        return _getitem(self, index)

    def __setitem__(self, index, value):
        _setitem(self, index, value)

    T = property(lambda self: np.transpose(self))
    real = property(lambda self: np.real(self))
    imag = property(lambda self: np.imag(self))
    mT = property(lambda self: np.swapaxes(self, -1, -2))

    def conj(self):
        return np.conjugate(self)

    conjugate = conj

    def copy(self):
        return Batched(self.data.copy())

    def astype(self, dtype, copy=True, **kwargs):
        return Batched(self.data.astype(dtype, copy=copy, **kwargs))

    def reshape(self, *shape, order="C"):
        shape = shape[0] if len(shape) == 1 and not isinstance(shape[0], numbers.Integral) else shape
        return np.reshape(self, shape, order=order)

    def transpose(self, *axes):
        axes = axes[0] if len(axes) == 1 and not isinstance(axes[0], numbers.Integral) else axes
        return np.transpose(self, axes or None)

    def ravel(self):
        return np.reshape(self, (-1,))

    flatten = ravel

    def __getattr__(self, name):
        # The reductions and the rest of the method surface: `g.sum(axis=0)` is `np.sum(g, ...)`.
        func = getattr(np, name, None)
        if name.startswith("_") or func is None or not callable(func):
            raise AttributeError(f"'Batched' object has no attribute {name!r}")
        return lambda *args, **kwargs: func(self, *args, **kwargs)


def _operator(ufunc, reflected=False):
    if reflected:
        return lambda self, other: ufunc(other, self)
    return lambda self, other: ufunc(self, other)


for _name, _uf in [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                   ("truediv", np.true_divide), ("floordiv", np.floor_divide),
                   ("mod", np.remainder), ("pow", np.power), ("matmul", np.matmul),
                   ("lt", np.less), ("le", np.less_equal), ("gt", np.greater),
                   ("ge", np.greater_equal), ("eq", np.equal), ("ne", np.not_equal),
                   ("and", np.logical_and), ("or", np.logical_or)]:
    setattr(Batched, f"__{_name}__", _operator(_uf))
    setattr(Batched, f"__r{_name}__", _operator(_uf, reflected=True))
Batched.__neg__ = lambda self: np.negative(self)
Batched.__pos__ = lambda self: self
Batched.__abs__ = lambda self: np.abs(self)
Batched.__invert__ = lambda self: np.invert(self)
Batched.__hash__ = None


def stack_directions(values: Sequence) -> Batched:
    """W arrays (or numbers) of one shape as one batched value."""
    xp = array_module(values[0])
    return Batched(xp.stack([xp.asarray(v) for v in values]))


def _width_of(values) -> int:
    widths = {v.width for v in values if isinstance(v, Batched)}
    if len(widths) > 1:
        raise ValueError(f"batched values of different widths {sorted(widths)} met in one "
                         "operation")
    return widths.pop()


def _aligned(v, ndim: int):
    """The data of `v` with its logical axes right-aligned to `ndim` axes (batch axis first)."""
    if not isinstance(v, Batched):
        return v
    missing = ndim - v.ndim
    if missing <= 0:
        return v.data
    return v.data.reshape((v.width,) + (1,) * missing + v.shape)


def _logical_ndim(v) -> int:
    return v.ndim if isinstance(v, Batched) else np.ndim(v)


def _broadcast_call(ufunc, inputs, kwargs):
    _width_of(inputs)
    ndim = max(_logical_ndim(v) for v in inputs)
    out = ufunc(*[_aligned(v, ndim) for v in inputs], **kwargs)
    if isinstance(out, tuple):
        return tuple(Batched(o) for o in out)
    return Batched(out)


def _per_direction(func: Callable, args, kwargs):
    """The universal fallback: call `func` once per direction and stack the results."""
    flat = list(args) + list(kwargs.values())
    width = _width_of(_batched_in(flat))
    results = []
    for w in range(width):
        results.append(func(*_slice(args, w), **dict(zip(kwargs, _slice(kwargs.values(), w)))))
    first = results[0]
    if first is None:
        return None
    xp = array_module(_batched_in(flat)[0].data)
    if isinstance(first, tuple):
        return tuple(Batched(xp.stack([r[i] for r in results])) for i in range(len(first)))
    if isinstance(first, list):
        return [Batched(xp.stack([r[i] for r in results])) for i in range(len(first))]
    return Batched(xp.stack(results))


def _batched_in(values) -> list:
    found = []
    for v in values:
        if isinstance(v, Batched):
            found.append(v)
        elif isinstance(v, (list, tuple)):
            found.extend(_batched_in(v))
    return found


def _slice(values, w):
    out = []
    for v in values:
        if isinstance(v, Batched):
            out.append(v.data[w])
        elif isinstance(v, (list, tuple)) and _batched_in(v):
            out.append(type(v)(_slice(v, w)))
        else:
            out.append(v)
    return out


# --------------------------------------------------------------------------------------------
# Vectorised handlers: the batch axis is 0, so logical axis a is data axis a + 1.


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


def _reduction(func, args, kwargs):
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
        out_ndim = ndim + (func is np.stack)
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


def _matmul(a, b, **kwargs):
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
        return _matmul(a, b)
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
    if b.ndim == 1:    # a vector right-hand side: keep the batch axis off the matrix axes
        return Batched(np.linalg.solve(a, b.data[..., None])[..., 0])
    return Batched(np.linalg.solve(a, b.data))


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
    return lambda a, *args, **kwargs: _reduction(func, (a, *args), kwargs)


_IN_PLACE = {np.copyto, np.put, np.put_along_axis, np.place, np.putmask, np.fill_diagonal}

_REDUCE_AS = {np.add: np.sum, np.multiply: np.prod, np.maximum: np.max, np.minimum: np.min,
              np.logical_and: np.all, np.logical_or: np.any}

_HANDLERS: dict = {
    np.reshape: _reshape, np.transpose: _transpose, np.swapaxes: _swapaxes,
    np.moveaxis: _moveaxis, np.expand_dims: _expand_dims, np.squeeze: _squeeze,
    np.broadcast_to: _broadcast_to, np.concatenate: _joined(np.concatenate),
    np.stack: _joined(np.stack), np.where: _where, np.matmul: _matmul, np.dot: _dot,
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
    _HANDLERS[_func] = _reducer(_func)
_HANDLERS[np.clip] = lambda a, a_min=None, a_max=None, **kw: _broadcast_call(
    np.clip, (a, a_min, a_max), kw)


# --------------------------------------------------------------------------------------------
# Indexing


def _simple_index(index) -> bool:
    """Whether prefixing the batch axis keeps NumPy's meaning of `index`: advanced indices
    that are not adjacent would move their axes in front of the batch axis."""
    if not isinstance(index, tuple):
        index = (index,)
    advanced = [i for i, x in enumerate(index)
                if not (x is None or x is Ellipsis or isinstance(x, (slice, numbers.Integral)))]
    return not advanced or advanced[-1] - advanced[0] == len(advanced) - 1


def _unwrap_index(index):
    if isinstance(index, Batched):
        raise TypeError("an index cannot be a batched tangent")
    return index if isinstance(index, tuple) else (index,)


def _getitem(a: Batched, index):
    if _simple_index(index):
        return Batched(a.data[(slice(None),) + _unwrap_index(index)])
    return Batched(array_module(a.data).stack([a.data[w][index] for w in range(a.width)]))


def _setitem(a: Batched, index, value):
    if _simple_index(index):
        target = (slice(None),) + _unwrap_index(index)
        if isinstance(value, Batched):
            value = _aligned(value, a.data[target].ndim - 1)
        a.data[target] = value
        return
    for w in range(a.width):
        a.data[w][index] = value.data[w] if isinstance(value, Batched) else value


def is_batched(x: Any) -> bool:
    return isinstance(x, Batched)


# --------------------------------------------------------------------------------------------
# Rules that cannot take batched values: run them once per direction


def _restack(per_w: list, width: int):
    """Stack W results (each None, an array or a tuple of them) into batched ones."""
    first = per_w[0]
    if isinstance(first, tuple):
        return tuple(_restack([r[i] for r in per_w], width) for i in range(len(first)))
    present = [r for r in per_w if r is not None]
    if not present:
        return None
    xp = array_module(present[0])
    return Batched(xp.stack([xp.zeros_like(present[0]) if r is None else xp.asarray(r)
                             for r in per_w]))


def _direction_of(v, w):
    if isinstance(v, Batched):
        return v.data[w]
    if isinstance(v, tuple):
        return tuple(_direction_of(x, w) for x in v)
    return v


def forward_per_direction(forward: Callable, cfg, vals, tans, params):
    """A forward rule applied to each direction of batched tangents; returns (out, tangent).

    Called when the rule raised TypeError or ValueError: without batched tangents that was a
    real error, raised again here."""
    if not _batched_in(tans):
        raise
    width = _width_of(_batched_in(tans))
    outs, tangents = [], []
    for w in range(width):
        out, t = forward(cfg, vals, [_direction_of(t, w) for t in tans], **params)
        outs.append(out)
        tangents.append(t)
    return outs[0], _restack(tangents, width)


def reverse_per_direction(reverse: Callable, cfg, saved, g):
    """A reverse rule applied to each direction of a batched cotangent (re-raises the
    current error when there is none: see `forward_per_direction`)."""
    batched = _batched_in(g if isinstance(g, tuple) else (g,))
    if not batched:
        raise
    width = _width_of(batched)
    cts = [reverse(cfg, saved, _direction_of(g, w)) for w in range(width)]
    return _restack(cts, width)
