"""Arrays made from traced values: buffers (`np.zeros_like(x)`, `x.copy()`, np.full_like),
dtype conversion, evenly spaced values (np.linspace, np.logspace, np.geomspace with traced
endpoints) and coordinate grids (np.meshgrid).

A buffer made with `np.zeros_like(x)` from a traced `x` is itself traced (with no derivative
yet), so that writes into it (`out[1:] = x[:-1] * 2`) are recorded and differentiated.
linspace and geomspace are primitives whose primal is NumPy's own (so values match NumPy
exactly) and whose rules use the interpolation weights w_k = k / div: linspace is
start (1 - w) + stop w, geomspace start^(1 - w) stop^w.
"""
from __future__ import annotations

import operator

import numpy as np

from tape.backend import array_module
from tape.core import Tracer, peek, primal
from tape.errors import NonDifferentiableError
from tape.rules import inactive, register_function, register_method

from ._util import add_tangents, broadcast_tangent, defprimitive, shape_of, unbroadcast
from .shape import _array, broadcast_to, reshape


def has_tracer(obj) -> bool:
    """Whether `obj` is a traced value or a (nested) list or tuple holding one."""
    if isinstance(obj, Tracer):
        return True
    if isinstance(obj, (list, tuple)):
        return any(has_tracer(o) for o in obj)
    return False


# -- buffers -----------------------------------------------------------------------------------
def _like(np_fn):
    def make(a, *args, **kwargs):
        value = np_fn(peek(a), *args, **kwargs)
        return a.level.constant(value)
    return make


for _fn in (np.zeros_like, np.ones_like):
    register_function(_fn, _like(_fn))
# The contents of np.empty_like are unspecified: zeros here, so that a compiled program's
# buffer is the same constant at every trace (whatever memory it got would differ between the
# trace and the confirming trace, and the signature would run eagerly for good).
register_function(np.empty_like, _like(np.zeros_like))


def filled(shape: tuple, fill, dtype, xp=np) -> object:
    """A new array of `shape` and `dtype` holding `fill` (broadcast): np.full, traced (a
    private, writable buffer) when `fill` is traced and `dtype` is inexact; on the array
    module `xp` (numpy, or cupy for a device result).

    >>> filled((2,), np.float64(1.5), np.dtype(np.float64))
    array([1.5, 1.5])
    """
    if not isinstance(fill, Tracer) or not np.issubdtype(dtype, np.inexact):
        return xp.full(shape, primal(fill), dtype=dtype)   # integer buffers carry no derivative
    value = fill if fill.dtype == dtype else astype(fill, dtype=dtype)
    if xp is not np and array_module(value) is not xp:
        # A host fill (a traced Python number) reaches the device through a product with
        # device ones; its forward-mode tangent follows, direction by direction.
        return value * xp.ones(tuple(shape), dtype)
    return _copy_method(broadcast_to(value, shape=tuple(shape)))


def full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None, *, device=None):
    """np.full_like where `a` or `fill_value` is traced (or a list holding traced values).

    The result lives at the deeper of the two levels, so that later writes into it of values
    of either level are recorded."""
    if not hasattr(a, "shape"):
        a = np.asarray(a)
    fill = np.asarray(fill_value) if has_tracer(fill_value) else fill_value
    # subok only when given: CuPy's full_like refuses it even at its default.
    extra = {} if subok is True else {"subok": subok}
    if not isinstance(fill, Tracer):
        if isinstance(a, Tracer):
            return a.level.constant(np.full_like(peek(a), fill, dtype=dtype, order=order,
                                                 shape=shape, **extra))
        return np.full_like(a, fill, dtype=dtype, order=order, shape=shape, **extra)
    if not isinstance(a, Tracer) or fill.level.depth >= a.level.depth:
        out_shape = shape_of(a) if shape is None else shape
        out_shape = (out_shape,) if isinstance(out_shape, (int, np.integer)) else out_shape
        return filled(out_shape, fill, np.dtype(a.dtype if dtype is None else dtype),
                      array_module(a))
    out = np.zeros_like(a, dtype=dtype, shape=shape)
    out[...] = fill
    return out


register_function(np.full_like, full_like)


# -- copy: the identity, producing a private buffer ----------------------------------------------
def _copied(x, order="C"):
    # A traced Python float holds no .copy of its own; NumPy's copy of it is a 0-d array.
    # The copy keeps NumPy's memory layout (`order`), which ravel/reshape with 'A'/'K' read.
    return x.copy(order=order) if hasattr(x, "copy") else np.array(x)


copy = defprimitive("copy", _copied,
                    lambda cfg, x, order="C": (_copied(x, order), None),
                    lambda cfg, saved, g: (g,),
                    lambda cfg, primals, tangents, order="C": (_copied(primals[0], order),
                                                               _copied(tangents[0], order)))


def _copy_method(x, order="C"):
    """ndarray.copy (C order unless told): a private buffer, in NumPy's memory layout."""
    out = copy(x) if order == "C" else copy(x, order=order)
    if isinstance(out, Tracer):   # a checkpointed call's first run computes on plain arrays
        out.owned = True
    return out


def _np_copy(a, order="K", subok=False):
    return _copy_method(a, order=order)


register_method("copy", _copy_method)
register_function(np.copy, _np_copy)


# -- astype: cotangents go back in the input's dtype ---------------------------------------------
def _cast(x, dtype, order="K"):
    # A traced Python float holds no .astype of its own.
    if hasattr(x, "astype"):
        return x.astype(dtype, order=order) if order != "K" else x.astype(dtype)
    return np.asarray(x).astype(dtype)


def _astype_augmented(cfg, x, dtype, order="K"):
    return _cast(x, dtype, order), np.result_type(x)


def _astype_reverse(cfg, in_dtype, g):
    if in_dtype.kind != "c" and np.iscomplexobj(g):
        g = np.real(g)   # a real input's cotangent is the real part (docs/complex.md)
    return (g.astype(in_dtype),)


def _astype_forward(cfg, primals, tangents, dtype, order="K"):
    return _cast(primals[0], dtype, order), _cast(tangents[0], dtype, order)


astype = defprimitive("astype", _cast, _astype_augmented, _astype_reverse, _astype_forward)


def refuse_untraceable_dtype(dtype, call: str) -> str:
    """The kind of `dtype`, to which `call` (a format with a place for the dtype) casts a
    traced array; object, string and structured dtypes are refused (the cast would drop the
    derivative silently).

    >>> refuse_untraceable_dtype(np.float32, "x.astype({})")
    'f'
    """
    dtype = np.dtype(dtype)
    if dtype.kind in "OSUV":
        raise NonDifferentiableError(
            f"{call.format(dtype)} of a traced array: hecate does not trace object, "
            "string or structured arrays, and the result would carry no derivative. Keep a "
            "float or complex dtype, or cast tape.primal(x) for a value that needs none.")
    return dtype.kind


# A recorded nondiff step: a compiled function casts each call's values (an index built
# with (x > 0).astype(np.intp) is read, not checked).
_plain_cast = inactive(_cast)


def _astype_method(x, dtype, order="K"):
    """ndarray.astype: integer and boolean casts carry no derivative; `order` is NumPy's."""
    if refuse_untraceable_dtype(dtype, "x.astype({})") not in "fc":
        return _plain_cast(x, dtype, order)   # integer/bool/time casts carry no derivative
    return astype(x, dtype=dtype) if order == "K" else astype(x, dtype=dtype, order=order)


register_method("astype", _astype_method)


def _np_astype(x, dtype, /, *, copy=True, device=None):
    """np.astype (NumPy >= 2.1): x.astype(dtype, copy=copy); with copy=False and no cast
    needed it is x itself, as in NumPy (later writes are seen through it)."""
    if device is not None:
        np.astype(np.empty(0), dtype, device=device)   # NumPy's error for a device not "cpu"
    return x.astype(dtype, copy=copy)


if hasattr(np, "astype"):
    register_function(np.astype, _np_astype)


# -- linspace and geomspace: NumPy's values, derivatives through the weights w_k = k / div --------
def _weights(num: int, endpoint: bool, out, ndim: int):
    """w_k = k / div along a leading axis of length num (then ndim broadcast axes), in the real
    precision of `out`'s dtype and on its array module; w = 0 where NumPy has no step
    (num == 1 with the endpoint)."""
    div = num - 1 if endpoint else num
    real = np.finfo(out.dtype).dtype
    xp = array_module(out)
    w = xp.arange(num, dtype=real) / real.type(div) if div > 0 else xp.zeros(num, real)
    return w.reshape((num,) + (1,) * ndim)


def _leading(out, axis):
    """The shape of `out` with `axis` moved to the front (where the rules work)."""
    shape = list(shape_of(out))
    return (shape.pop(axis),) + tuple(shape)


def _to_front(x, axis):
    return x if axis == 0 else np.moveaxis(x, axis, 0)


def _from_front(x, axis):
    return x if axis == 0 else np.moveaxis(x, 0, axis)


def _like_out(t, out):
    """A tangent in the output's dtype (a real output takes the real part)."""
    if np.iscomplexobj(t) and not np.iscomplexobj(out):
        t = np.real(t)
    return t if t.dtype == out.dtype else t.astype(out.dtype)


def _spaced(np_fn):
    def impl(start, stop, *, num, endpoint, axis, dtype):
        return np_fn(start, stop, num=num, endpoint=endpoint, axis=axis, dtype=dtype)
    return impl


def _spaced_augmented(impl, keep_out):
    def augmented(cfg, start, stop, *, num, endpoint, axis, dtype):
        out = impl(start, stop, num=num, endpoint=endpoint, axis=axis, dtype=dtype)
        axis = axis % np.ndim(out)
        w = _weights(num, endpoint, out, np.ndim(out) - 1)
        saved = (start, stop, out) if keep_out else (shape_of(start), shape_of(stop), None)
        return out, saved + (w, axis)
    return augmented


_linspace_impl = _spaced(np.linspace)


def _linspace_reverse(cfg, saved, g):
    start_shape, stop_shape, _, w, axis = saved
    g = _to_front(g, axis)
    g_stop = np.sum(g * w, axis=0)
    g_start = np.sum(g, axis=0) - g_stop   # the weight of start is 1 - w
    return (unbroadcast(g_start, start_shape) if cfg.active[0] else None,
            unbroadcast(g_stop, stop_shape) if cfg.active[1] else None)


def _linspace_forward(cfg, primals, tangents, *, num, endpoint, axis, dtype):
    out = _linspace_impl(*primals, num=num, endpoint=endpoint, axis=axis, dtype=dtype)
    axis = axis % np.ndim(out)
    w = _weights(num, endpoint, out, np.ndim(out) - 1)
    t_start, t_stop = tangents
    t = add_tangents(None if t_start is None else t_start * (1 - w),
                     None if t_stop is None else t_stop * w)
    t = broadcast_tangent(t, _leading(out, axis))
    return out, _like_out(_from_front(t, axis), out)


linspace_p = defprimitive("linspace", _linspace_impl, _spaced_augmented(_linspace_impl, False),
                          _linspace_reverse, _linspace_forward)

_geomspace_impl = _spaced(np.geomspace)


def _geomspace_reverse(cfg, saved, g):
    # y_k = start^(1 - w_k) stop^w_k: dy_k/dstart = (1 - w_k) y_k / start, dy_k/dstop = w_k y_k / stop
    start, stop, out, w, axis = saved
    gy = _to_front(g * out, axis)
    g_stop = np.sum(gy * w, axis=0)
    g_start = np.sum(gy, axis=0) - g_stop
    return (unbroadcast(g_start / start, shape_of(start)) if cfg.active[0] else None,
            unbroadcast(g_stop / stop, shape_of(stop)) if cfg.active[1] else None)


def _geomspace_forward(cfg, primals, tangents, *, num, endpoint, axis, dtype):
    start, stop = primals
    out = _geomspace_impl(start, stop, num=num, endpoint=endpoint, axis=axis, dtype=dtype)
    axis = axis % np.ndim(out)
    w = _weights(num, endpoint, out, np.ndim(out) - 1)
    t_start, t_stop = tangents
    rate = add_tangents(None if t_start is None else t_start / start * (1 - w),
                        None if t_stop is None else t_stop / stop * w)
    t = rate * _to_front(out, axis)
    return out, _like_out(_from_front(t, axis), out)


geomspace_p = defprimitive("geomspace", _geomspace_impl, _spaced_augmented(_geomspace_impl, True),
                           _geomspace_reverse, _geomspace_forward)


def _endpoints(start, stop, num):
    num = operator.index(num)
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    # A Python number stays one: NumPy takes it as weakly typed (1.0 beside a float32 stop
    # computes in float32), a 0-d array would make it float64
    keep = (int, float, complex)
    return (start if type(start) in keep else _array(start),
            stop if type(stop) in keep else _array(stop), num)


def _inexact(dtype) -> bool:
    return dtype is None or np.issubdtype(np.dtype(dtype), np.inexact)


def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *,
             device=None):
    """np.linspace with traced endpoints (arrays broadcast; `axis` places the samples).

    >>> from tape import gradient, Reverse
    >>> gradient(Reverse, lambda a, b: np.sum(np.linspace(a, b, 5) ** 2), 0.0, 1.0)
    (1.25, 3.75)
    """
    start, stop, num = _endpoints(start, stop, num)
    if _inexact(dtype):
        out = linspace_p(start, stop, num=num, endpoint=bool(endpoint), axis=axis, dtype=dtype)
    else:   # integer samples are floored: no derivative
        out = np.linspace(primal(start), primal(stop), num, endpoint, dtype=dtype, axis=axis)
    if not retstep:
        return out
    div = num - 1 if endpoint else num
    return out, (stop - start) / div if div > 0 else np.nan


def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0):
    """np.logspace: base ** linspace(start, stop); `base` may be traced too."""
    start, stop, num = _endpoints(start, stop, num)
    if not isinstance(base, (float, int)) and np.ndim(base):
        # An array base broadcasts with the endpoints before the samples' axis is placed.
        base = _array(base)
        ndim = len(np.broadcast_shapes(shape_of(start), shape_of(stop), shape_of(base)))
        start, stop, base = (_leading_ones(_array(a), ndim) for a in (start, stop, base))
        base = np.expand_dims(base, axis)
    out = np.power(base, linspace(start, stop, num=num, endpoint=endpoint, axis=axis))
    return out if dtype is None else out.astype(dtype)


def _leading_ones(a, ndim):
    shape = shape_of(a)
    return a if len(shape) >= ndim else reshape(a, shape=(1,) * (ndim - len(shape)) + shape)


def geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
    """np.geomspace with traced endpoints (negative and complex endpoints too)."""
    start, stop, num = _endpoints(start, stop, num)
    if not _inexact(dtype):
        return np.geomspace(primal(start), primal(stop), num, endpoint, dtype=dtype, axis=axis)
    return geomspace_p(start, stop, num=num, endpoint=bool(endpoint), axis=axis, dtype=dtype)


# -- meshgrid: reshapes and broadcasts -----------------------------------------------------------
def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    """np.meshgrid of traced (or plain) coordinate vectors (each is flattened)."""
    if indexing not in ("xy", "ij"):
        raise ValueError("Valid values for `indexing` are 'xy' and 'ij'.")
    n = len(xi)
    out = []
    for i, x in enumerate(xi):
        where = (1 - i if i < 2 else i) if indexing == "xy" and n > 1 else i
        out.append(reshape(_array(x), shape=(1,) * where + (-1,) + (1,) * (n - where - 1)))
    if not sparse:
        shape = np.broadcast_shapes(*(shape_of(o) for o in out))
        out = tuple(broadcast_to(o, shape=shape) for o in out)
    if copy:
        out = tuple(o.copy() for o in out)
    return out   # a list when sparse without copy, a tuple otherwise, as NumPy returns


for _np_fn, _rule in [(np.linspace, linspace), (np.logspace, logspace),
                      (np.geomspace, geomspace), (np.meshgrid, meshgrid)]:
    register_function(_np_fn, _rule)
