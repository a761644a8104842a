"""Shape and layout: reshape, transpose, broadcast_to, flip, roll, repeat, tile, triu, ...

These maps are linear, so each reverse rule is the transposed map and each forward rule is the
same map applied to the tangent. Only a few are primitives (reshape, transpose, broadcast_to,
flip, roll, triu/tril); the rest are written in terms of them and of indexing (`x[idx]`), whose
reverse rule scatters and accumulates repeated indices. Joining and splitting (concatenate,
stack, split, ...) live in ops/joining.py; `pad` in ops/indexing.py, as its non-constant modes
are gathers.
"""
from __future__ import annotations

import numpy as np

from tape.backend import array_module
from tape.core import Tracer, peek, primal
from tape.rules import register_function
from tape.views import mark_read_only_view, mark_view

from ._util import defprimitive, shape_of, unbroadcast

AxisError = getattr(np, "exceptions", np).AxisError


def linear(name, fn, transpose, save=lambda x, **params: shape_of(x), function=None):
    """A primitive linear in its single array argument: `fn(x, **params)`; the reverse rule is
    `transpose(saved, g)` where `saved = save(x, **params)`."""

    def augmented_primal(cfg, x, **params):
        return fn(x, **params), save(x, **params)

    def reverse(cfg, saved, g):
        return (transpose(saved, g),)

    def forward(cfg, primals, tangents, **params):
        return fn(primals[0], **params), fn(tangents[0], **params)

    return defprimitive(name, fn, augmented_primal, reverse, forward, function=function)


def normalize_axis(axis, ndim: int) -> int:
    """`axis` as a non-negative int, with NumPy's AxisError when out of range."""
    axis = int(axis)
    if not -ndim <= axis < ndim:
        raise AxisError(axis, ndim)
    return axis % ndim


def _axes(axis, ndim: int) -> tuple:
    if isinstance(axis, (int, np.integer)):
        axis = (axis,)
    out = tuple(normalize_axis(a, ndim) for a in axis)
    if len(set(out)) != len(out):
        raise ValueError("repeated axis")
    return out


def _no_out(name, out):
    if out is not None:
        raise NotImplementedError(f"np.{name}(..., out=...) is not supported on traced values")


def static_shape(shape):
    """`shape` with its traced integers (``x.reshape(np.argmax(y) + 1, -1)``) as plain ones. A
    shape decides the result's shape, and a compiled program's derivative code is written for
    it: taken with `primal`, the program guards it and traces again when it changes, instead of
    filling each call's value into code written for the first one.

    >>> static_shape((2, -1)), static_shape(3)
    ((2, -1), 3)
    """
    if isinstance(shape, (tuple, list)):
        return tuple(primal(s) for s in shape)
    return primal(shape)


def _array(a):
    """Plain sequences and numbers given alongside traced arrays, as arrays."""
    return a if hasattr(a, "shape") else np.asarray(a)


def _along(axis: int, index) -> tuple:
    """An index selecting `index` along `axis` and everything along the other axes."""
    return (slice(None),) * axis + (index,)


# -- reshape, transpose, broadcast_to --------------------------------------------------------------
_reshape = linear("reshape", lambda x, shape, order="C": np.reshape(x, shape, order=order),
                  lambda saved, g: np.reshape(g, saved[0], order=saved[1]),
                  save=lambda x, shape, order="C": (shape_of(x), order))


def reshape(a, shape, order="C"):
    """np.reshape. When NumPy returns a view, writes into the result reach `a`, as in NumPy.
    Order 'A' reads and writes in Fortran order when `a` is Fortran-contiguous (and not also
    C-contiguous), as NumPy decides, and is resolved before recording: the reverse rule
    reshapes a cotangent whose own layout says nothing about `a`'s."""
    if order == "A":
        order = "F" if _is_fortran(peek(a)) else "C"
    shape = static_shape(shape)
    out = _reshape(a, shape=shape, order=order)
    base_shape = shape_of(a)
    layout = getattr(a, "layout", None)
    if layout is not None:   # NumPy's array has other strides than the value: its answer
        view = _reshaped_layout(numpy_layout(a), shape, order)
        if view is None:
            return out       # NumPy copies here
        if isinstance(out, Tracer) and view != peek(out).strides:
            out.layout = view
    return mark_view(out, a, to_base=lambda v: _reshape(v, shape=base_shape, order=order),
                     from_base=lambda b: _reshape(b, shape=shape, order=order),
                     check_memory=layout is None)


def numpy_layout(a):
    """A stand-in with the shape, dtype and strides of NumPy's array behind `a` (its `layout`
    where a write gave the traced value other strides), over one element: for questions of
    layout only (a reshape without a copy, flags, a diagonal's strides), which read no entry."""
    value = peek(a)
    strides = getattr(a, "layout", None) if isinstance(a, Tracer) else None
    return np.lib.stride_tricks.as_strided(np.zeros(1, value.dtype), value.shape,
                                           value.strides if strides is None else strides)


def _reshaped_layout(stand_in, shape, order):
    """The strides of NumPy's reshape of `stand_in` (`numpy_layout`), or None where NumPy
    copies."""
    try:
        return np.reshape(stand_in, shape, order=order, copy=False).strides
    except ValueError:
        return None


def _reshape_function(a, *args, copy=None, **kw):
    """np.reshape and x.reshape, with NumPy 2.1's copy=: True gives a private copy (writes do
    not reach `a`), False refuses with NumPy's error where a copy would be needed."""
    kw = {**dict(zip(("shape", "order"), args)), **_renamed(kw, newshape="shape")}
    if copy is False:
        np.reshape(peek(a), kw["shape"], order=kw.get("order", "C"), copy=False)
    out = reshape(a, **kw)
    return out.copy() if copy else out


register_function(np.reshape, _reshape_function)


def _renamed(kw, **names):
    return {names.get(k, k): v for k, v in kw.items()}


def _transpose_fn(x, axes=None):
    return np.transpose(x, axes)


def _transpose_back(saved, g):
    axes = saved
    return np.transpose(g, None if axes is None else tuple(np.argsort(axes)))


_transpose = linear("transpose", _transpose_fn, _transpose_back,
                    save=lambda x, axes=None: None if axes is None else tuple(
                        a % np.ndim(x) for a in axes))


def transpose(a, axes=None):
    """np.transpose: always a view in NumPy, so writes into the result reach `a`."""
    out = _transpose(a, axes=axes)
    inverse = None if axes is None else tuple(np.argsort([x % np.ndim(a) for x in axes]))
    return mark_view(out, a, to_base=lambda v: _transpose(v, axes=inverse),
                     from_base=lambda b: _transpose(b, axes=axes))


register_function(np.transpose, lambda a, axes=None: transpose(
    a, axes=None if axes is None else tuple(axes)))

broadcast_to = linear("broadcast_to", lambda x, shape: np.broadcast_to(x, shape),
                      lambda saved, g: unbroadcast(g, saved))


def _broadcast_to_function(array, shape, subok=False):
    """np.broadcast_to: a read-only view, as in NumPy (later writes into `array` are seen
    through it)."""
    shape = static_shape(tuple(shape) if not isinstance(shape, int) else (shape,))
    return mark_read_only_view(broadcast_to(array, shape=shape), array,
                               lambda base: broadcast_to(base, shape=shape))


register_function(np.broadcast_to, _broadcast_to_function)


def _broadcast_arrays(*args, subok=False):
    """np.broadcast_arrays: each argument broadcast to the common shape (read-only views, as
    np.broadcast_to gives), as a tuple (NumPy 2) or a list (NumPy 1)."""
    shape = np.broadcast_shapes(*(np.shape(a) for a in args))
    out = [a if np.shape(a) == shape else _broadcast_to_function(a, shape) for a in args]
    return tuple(out) if _BROADCAST_ARRAYS_TUPLE else out


_BROADCAST_ARRAYS_TUPLE = isinstance(np.broadcast_arrays(np.zeros(1)), tuple)
register_function(np.broadcast_arrays, _broadcast_arrays)


# -- compositions of reshape and transpose ---------------------------------------------------------
def _is_fortran(value) -> bool:
    """NumPy's PyArray_ISFORTRAN: Fortran-contiguous and not C-contiguous."""
    flags = getattr(value, "flags", None)
    return flags is not None and flags.f_contiguous and not flags.c_contiguous


def keep_order_permutation(value) -> np.ndarray | None:
    """The C-order flat indices of `value` in the order ``np.ravel(value, 'K')`` reads them:
    NumPy's own ravel applied to an index array laid out with the same shape and strides (so
    negative, permuted and zero strides follow NumPy exactly). None when a stride is not a
    multiple of the item size.

    >>> keep_order_permutation(np.arange(6.0).reshape(2, 3).T[::-1])
    array([0, 2, 4, 1, 3, 5])
    """
    shape, strides, itemsize = tuple(value.shape), tuple(value.strides), value.itemsize
    if any(s % itemsize for s in strides):
        return None
    steps = [s // itemsize for s in strides]
    low = sum((n - 1) * s for n, s in zip(shape, steps) if s < 0)
    high = sum((n - 1) * s for n, s in zip(shape, steps) if s > 0)
    memory = np.zeros(max(high - low + 1, 1), dtype=np.intp)
    labels = np.lib.stride_tricks.as_strided(
        memory[-low:], shape, tuple(s * memory.itemsize for s in steps))
    # Elements sharing memory (zero strides) share a label: they hold the same value.
    labels[...] = np.arange(int(np.prod(shape)), dtype=np.intp).reshape(shape)
    return np.ravel(labels, "K")


def _ravel_keep_order(a):
    value = peek(a)
    if _is_fortran(value):
        return reshape(a, shape=(-1,), order="F")
    perm = keep_order_permutation(value) if np.ndim(value) > 1 else None
    if perm is None:
        return reshape(a, shape=(-1,), order="C")
    c_order = np.arange(perm.size).reshape(shape_of(a))
    if np.array_equal(perm, c_order.ravel()):
        return reshape(a, shape=(-1,), order="C")
    if np.array_equal(perm, c_order.ravel("F")):
        return reshape(a, shape=(-1,), order="F")
    # Axes by decreasing stride: where NumPy returns a view, a transposed reshape is one too.
    axes = tuple(sorted(range(np.ndim(value)), key=lambda d: -value.strides[d]))
    if np.array_equal(perm, np.transpose(c_order, axes).ravel()):
        return reshape(transpose(a, axes=axes), shape=(-1,), order="C")
    return reshape(a, shape=(-1,), order="C")[array_module(a).asarray(perm)]


def ravel(a, order="C"):
    """np.ravel. Order 'A' reads in Fortran order when the primal is Fortran-contiguous (only),
    'K' in the order NumPy's own ravel reads the primal's memory (any strides), as NumPy does.

    >>> ravel(np.asfortranarray(np.arange(6.0).reshape(2, 3)), "K")
    array([0., 3., 1., 4., 2., 5.])
    """
    if order == "K":
        return _ravel_keep_order(a)
    if order == "A":
        order = "F" if _is_fortran(peek(a)) else "C"
    if not _contiguous(a, order):   # NumPy's ravel copies (reshape(-1) would give a view)
        return _reshape(a, shape=(-1,), order=order)
    return reshape(a, shape=(-1,), order=order)


def _contiguous(a, order) -> bool:
    """Whether NumPy's array behind `a` (its `layout`, if a write changed the value's) is
    contiguous in `order` ("C" or "F")."""
    if not hasattr(peek(a), "strides"):   # a traced Python number
        return True
    flags = numpy_layout(a).flags
    return flags.c_contiguous if order == "C" else flags.f_contiguous


def moveaxis(a, source, destination):
    """np.moveaxis, as a transpose."""
    ndim = np.ndim(a)
    source, destination = _axes(source, ndim), _axes(destination, ndim)
    if len(source) != len(destination):
        raise ValueError("`source` and `destination` arguments must have the same number of "
                         "elements")
    order = [n for n in range(ndim) if n not in source]
    for dest, src in sorted(zip(destination, source)):
        order.insert(dest, src)
    return transpose(a, axes=tuple(order))


def swapaxes(a, axis1, axis2):
    """np.swapaxes, as a transpose."""
    ndim = np.ndim(a)
    order = list(range(ndim))
    i, j = normalize_axis(axis1, ndim), normalize_axis(axis2, ndim)
    order[i], order[j] = order[j], order[i]
    return transpose(a, axes=tuple(order))


def rollaxis(a, axis, start=0):
    """np.rollaxis (prefer moveaxis), as a transpose."""
    ndim = np.ndim(a)
    axis = normalize_axis(axis, ndim)
    if not -ndim <= start <= ndim:
        raise AxisError(f"start arg requires {-ndim} <= start < {ndim + 1} but {start} was "
                        "passed in")
    start = start + ndim if start < 0 else start
    if axis < start:
        start -= 1
    order = [n for n in range(ndim) if n != axis]
    order.insert(start, axis)
    return transpose(a, axes=tuple(order))


def expand_dims(a, axis):
    """np.expand_dims; `axis` may be a tuple."""
    shape = shape_of(a)
    axes = _axes(axis, len(shape) + (1 if isinstance(axis, (int, np.integer)) else len(axis)))
    it = iter(shape)
    return reshape(a, shape=tuple(1 if d in axes else next(it)
                                  for d in range(len(shape) + len(axes))))


def squeeze(a, axis=None):
    """np.squeeze: drop axes of length one (all of them, or those in `axis`)."""
    shape = shape_of(a)
    if axis is None:
        return reshape(a, shape=tuple(n for n in shape if n != 1))
    axes = _axes(axis, len(shape))
    if any(shape[d] != 1 for d in axes):
        raise ValueError("cannot select an axis to squeeze out which has size not equal to one")
    return reshape(a, shape=tuple(n for d, n in enumerate(shape) if d not in axes))


def _atleast(ndim_min, promote):
    def atleast(*arys):
        out = []
        for a in map(_array, arys):
            shape = shape_of(a)
            out.append(reshape(a, shape=promote(shape)) if len(shape) < ndim_min else a)
        return out[0] if len(out) == 1 else tuple(out)
    return atleast


atleast_1d = _atleast(1, lambda s: (1,))
atleast_2d = _atleast(2, lambda s: (1,) + s + (1,) * (1 - len(s)))
atleast_3d = _atleast(3, lambda s: {0: (1, 1, 1), 1: (1,) + s + (1,), 2: s + (1,)}[len(s)])
atleast_1d.__doc__ = "np.atleast_1d"
atleast_2d.__doc__ = "np.atleast_2d"
atleast_3d.__doc__ = "np.atleast_3d: 1-d (n,) becomes (1, n, 1), 2-d (m, n) becomes (m, n, 1)."


def matrix_transpose(x):
    """np.matrix_transpose: swap the last two axes."""
    if np.ndim(x) < 2:
        raise ValueError("Input array must be at least 2-dimensional")
    return swapaxes(x, -1, -2)


# -- flips and rolls -------------------------------------------------------------------------------
flip_p = linear("flip", lambda x, axis: np.flip(x, axis), lambda axis, g: np.flip(g, axis),
                save=lambda x, axis: axis)


def _flip_view(m, axis):
    """A flip is a view in NumPy: writes into it reach `m`."""
    flip_back = lambda v: flip_p(v, axis=axis)   # noqa: E731  (a flip is its own inverse)
    return mark_view(flip_p(m, axis=axis), m, to_base=flip_back, from_base=flip_back)


def flip(m, axis=None):
    """np.flip: reverse the order along `axis` (all axes when None)."""
    ndim = np.ndim(m)
    return _flip_view(m, axis=tuple(range(ndim)) if axis is None else _axes(axis, ndim))


def fliplr(m):
    """np.fliplr: flip axis 1."""
    if np.ndim(m) < 2:
        raise ValueError("Input must be >= 2-d.")
    return _flip_view(m, axis=(1,))


def flipud(m):
    """np.flipud: flip axis 0."""
    if np.ndim(m) < 1:
        raise ValueError("Input must be >= 1-d.")
    return _flip_view(m, axis=(0,))


def rot90(m, k=1, axes=(0, 1)):
    """np.rot90: `k` quarter turns in the plane `axes`, from the first towards the second."""
    ndim = np.ndim(m)
    axes = tuple(axes)
    if len(axes) != 2:
        raise ValueError("len(axes) must be 2.")
    if axes[0] == axes[1] or abs(axes[0] - axes[1]) == ndim:
        raise ValueError("Axes must be different.")
    a0, a1 = normalize_axis(axes[0], ndim), normalize_axis(axes[1], ndim)
    k %= 4
    if k == 0:
        return m[...]
    if k == 2:
        return _flip_view(m, axis=(a0, a1))
    order = list(range(ndim))
    order[a0], order[a1] = order[a1], order[a0]
    if k == 1:
        return transpose(_flip_view(m, axis=(a1,)), axes=tuple(order))
    return _flip_view(transpose(m, axes=tuple(order)), axis=(a1,))


roll_p = linear("roll", lambda x, shift, axis: np.roll(x, shift, axis),
                lambda saved, g: np.roll(g, saved[0], saved[1]),
                save=lambda x, shift, axis: (tuple(-s for s in shift), axis))


def roll(a, shift, axis=None):
    """np.roll: shift cyclically along `axis` (the flattened array when None)."""
    if axis is None:
        return reshape(roll(ravel(a), shift, 0), shape=shape_of(a))
    shift, axis = np.broadcast_arrays(primal(shift), axis)
    return roll_p(a, shift=tuple(int(s) for s in shift.ravel()),
                  axis=tuple(int(d) for d in axis.ravel()))


# -- repetition ------------------------------------------------------------------------------------
def repeat(a, repeats, axis=None):
    """np.repeat: a constant count is a broadcast; per-element counts are a gather."""
    if axis is None:
        a, axis = ravel(a), 0
    shape = shape_of(a)
    axis = normalize_axis(axis, len(shape))
    repeats = primal(repeats)
    if np.size(repeats) == 1:
        r = int(np.reshape(repeats, -1)[0])
        wide = broadcast_to(expand_dims(a, axis + 1),
                            shape=shape[:axis + 1] + (r,) + shape[axis + 1:])
        return _new_array(_reshape(wide, shape=shape[:axis] + (shape[axis] * r,)
                                   + shape[axis + 1:]))
    xp = array_module(a)
    return a[_along(axis, xp.repeat(xp.arange(shape[axis]), repeats))]


def tile(A, reps):
    """np.tile: a broadcast of A with an interleaved repetition axis per axis."""
    reps = tuple(int(r) for r in np.reshape(primal(reps), -1))
    shape = shape_of(A)
    nd = max(len(shape), len(reps))
    shape = (1,) * (nd - len(shape)) + shape
    reps = (1,) * (nd - len(reps)) + reps
    interleaved = reshape(A, shape=tuple(d for n in shape for d in (1, n)))
    wide = broadcast_to(interleaved, shape=tuple(d for r, n in zip(reps, shape) for d in (r, n)))
    return _new_array(_reshape(wide, shape=tuple(r * n for r, n in zip(reps, shape))))


def _new_array(out):
    """`out` as NumPy's tile and repeat return it: a new C-contiguous array, not a view of
    their input (a reshape of a broadcast can be one, with stride-0 axes). Then a ravel or
    reshape of it is a view, and writes through that reach it, as in NumPy."""
    value = peek(out)
    if hasattr(value, "flags") and not value.flags.c_contiguous:
        return out.copy()
    return out


# -- triangles -------------------------------------------------------------------------------------
triu_p = linear("triu", lambda x, k: np.triu(x, k), lambda saved, g: unbroadcast(
    np.triu(g, saved[1]), saved[0]), save=lambda x, k: (shape_of(x), k))
tril_p = linear("tril", lambda x, k: np.tril(x, k), lambda saved, g: unbroadcast(
    np.tril(g, saved[1]), saved[0]), save=lambda x, k: (shape_of(x), k))


def triu(m, k=0):
    """np.triu: zero below the k-th diagonal (of the last two axes)."""
    return triu_p(m, k=int(k))


def tril(m, k=0):
    """np.tril: zero above the k-th diagonal (of the last two axes)."""
    return tril_p(m, k=int(k))


def diff(a, n=1, axis=-1, prepend=np._NoValue, append=np._NoValue):
    """np.diff: n-th differences along `axis`, with optional prepend/append values."""
    if n == 0:
        return a
    if n < 0:
        raise ValueError("order must be non-negative but got " + repr(n))
    ndim = np.ndim(a)
    if ndim == 0:
        raise ValueError("diff requires input that is at least one dimensional")
    axis = normalize_axis(axis, ndim)
    edge_shape = tuple(1 if d == axis else s for d, s in enumerate(shape_of(a)))
    before = [] if prepend is np._NoValue else [_edge(prepend, edge_shape)]
    after = [] if append is np._NoValue else [_edge(append, edge_shape)]
    if before or after:
        a = np.concatenate(before + [a] + after, axis=axis)   # traced a: ops.joining
    later, earlier = _along(axis, slice(1, None)), _along(axis, slice(None, -1))
    for _ in range(n):
        a = a[later] - a[earlier]
    return a


def _edge(values, shape):
    """Scalars given to np.diff's prepend/append fill one slice along the axis."""
    values = _array(values)
    return broadcast_to(values, shape=shape) if np.ndim(values) == 0 else values


for _np_fn, _rule in [
        (np.ravel, ravel), (np.moveaxis, moveaxis), (np.swapaxes, swapaxes),
        (np.rollaxis, rollaxis), (np.expand_dims, expand_dims), (np.squeeze, squeeze),
        (np.atleast_1d, atleast_1d), (np.atleast_2d, atleast_2d), (np.atleast_3d, atleast_3d),
        (np.flip, flip),
        (np.fliplr, fliplr), (np.flipud, flipud), (np.rot90, rot90), (np.roll, roll),
        (np.repeat, repeat), (np.tile, tile), (np.triu, triu), (np.tril, tril), (np.diff, diff)]:
    register_function(_np_fn, _rule)
if hasattr(np, "matrix_transpose"):   # not in every NumPy version
    register_function(np.matrix_transpose, matrix_transpose)
