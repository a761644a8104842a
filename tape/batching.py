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
from .core import _BATCHED_TYPE, Trace, Tracer
from .errors import BatchingFallback


class VECTORISED:
    """The vectorised NumPy functions, installed by tape.batched_numpy (written in terms of
    `Batched`, it sits above this module). Until then every function runs once per direction,
    which is always correct."""
    handlers: dict = {}                  # NumPy function -> its vectorised version
    reduce_as: dict = {}                 # ufunc -> the reduction its .reduce is (np.add: np.sum)
    in_place: frozenset = frozenset()    # functions that write into their first argument
    matmul = staticmethod(lambda a, b, **kwargs: NotImplemented)
    reduction = None                     # reduction(func, args, kwargs), for reduce_as


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
            # into the buffers themselves: with `where=` the entries it leaves out keep their
            # values, and an input of fewer axes than `out` broadcasts behind the batch axis
            _width_of(list(inputs) + list(out))
            ndim = max(_logical_ndim(v) for v in list(inputs) + list(out))
            rest = {k: _aligned(v, ndim) for k, v in kwargs.items() if k != "out"}
            ufunc(*[_aligned(v, ndim) for v in inputs], out=tuple(o.data for o in out), **rest)
            return out[0] if len(out) == 1 else out
        if method == "__call__" and "out" not in kwargs:
            if ufunc.signature is None:
                return _broadcast_call(ufunc, inputs, kwargs)
            if ufunc is np.matmul and len(inputs) == 2:   # a gufunc: core axes are not broadcast
                result = VECTORISED.matmul(*inputs, **kwargs)
                if result is not NotImplemented:
                    return result
        if method == "reduce" and ufunc in VECTORISED.reduce_as and len(inputs) == 1:
            # np.add.reduce(g) reduces axis 0 where np.sum(g) reduces every axis
            return VECTORISED.reduction(VECTORISED.reduce_as[ufunc], (inputs[0],),
                                        {"axis": 0, **kwargs})
        return _per_direction(getattr(ufunc, method), inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        if func in VECTORISED.in_place and not isinstance(args[0] if args else None, Batched):
            raise BatchingFallback(f"{func.__name__} writes into a plain array")
        if not isinstance(kwargs.get("out", self), Batched):
            raise BatchingFallback(f"{func.__name__} writes into a plain array")
        handler = VECTORISED.handlers.get(func)
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
# Indexing


def _simple_index(index) -> bool:
    """Whether prefixing the batch axis keeps NumPy's meaning of `index`: advanced indices
    that are not adjacent would move their axes in front of the batch axis. Beside an array
    index an integer is an advanced index too (``x[[0, 2], :, 1]`` moves both axes first)."""
    if not isinstance(index, tuple):
        index = (index,)
    basic = [x is None or x is Ellipsis or isinstance(x, slice) for x in index]
    integer = [isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in index]
    if all(b or i for b, i in zip(basic, integer)):
        return True
    advanced = [k for k, b in enumerate(basic) if not b]
    return advanced[-1] - advanced[0] == len(advanced) - 1


def _unwrap_index(index):
    if isinstance(index, Batched):
        raise TypeError("an index cannot be a batched tangent")
    return index if isinstance(index, tuple) else (index,)


def _getitem(a: Batched, index):
    if _simple_index(index):
        return Batched(a.data[(slice(None),) + _unwrap_index(index)])
    return Batched(array_module(a.data).stack([a.data[w][index] for w in range(a.width)]))


def _setitem(a: Batched, index, value):
    written = value.data if isinstance(value, Batched) else value
    if isinstance(written, Tracer) and not isinstance(a.data, Tracer):
        # An outer level's values (a rule of an inner batch mode, its primal differentiated
        # there) cannot be written into plain directions: the buffer joins that level.
        a.data = written.level.constant(a.data.copy())
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


def call_per_direction(prim, args, params):
    """Primitive `prim` called on each direction of its batched arguments, the results
    stacked: for a batched tangent or cotangent met by an outer level's tracer (the results
    are that level's tracers, which np.stack records)."""
    width = _width_of(_batched_in(args))
    results = [prim(*_slice(args, w), **params) for w in range(width)]
    if prim.multiple_results:
        return tuple(Batched(np.stack([r[i] for r in results])) for i in range(len(results[0])))
    return Batched(np.stack(results))


_BATCHED_TYPE[0] = Batched
Trace.hooks.update(forward_per_direction=forward_per_direction,
                   reverse_per_direction=reverse_per_direction,
                   call_per_direction=call_per_direction)
