"""Lists and tuples of traced values wherever NumPy takes an array: ``np.array([a, 1.0])``,
``np.mean([a, b])``, ``np.concatenate(([a, 0.0], x))``, ``np.r_[a, b]``, ``np.full(3, a)``.

NumPy has no hook for this. np.array and its spellings are not dispatched through
``__array_function__``, and for ``np.mean([a, b])`` NumPy looks for ``__array_function__`` on
the list, not inside it. Both end by asking each traced value for ``__array__``, which refuses
with `TracerConversionError`. So, while at least one trace is open (in any thread), the numpy
module attributes array, asarray, asanyarray, ascontiguousarray, asfortranarray,
asarray_chkfinite, full, full_like, r_, c_ and every numpy / numpy.linalg / numpy.fft function
that has a rule are replaced by thin wrappers (tape.core's ON_FIRST_TRACE / ON_LAST_TRACE hooks
install them when the first trace opens and put NumPy's objects back when the last one closes,
errors included). A wrapper calls NumPy's own function first; only when that raises
TracerConversionError does it turn the list and tuple arguments holding traced values into
traced arrays (np.array's semantics: a nested stack) and call again, now dispatching to the
rule (`ops.numpy_patch` puts the wrappers in place). Calls made by NumPy's own Python code are not converted, so that NumPy never runs on
traced values half-way (np.meshgrid calls np.asanyarray): the refusal reaches the outer
wrapper, which converts before NumPy's code runs. With no trace open the attributes are
NumPy's own objects, so code outside differentiation sees NumPy exactly.

Not covered (the TracerConversionError message says to build the array first): ufuncs given a
list (``np.sin([a, b])``: a ufunc cannot be replaced by a wrapper without changing its type),
functions bound to another name before tracing (``from numpy import mean``), and the shape and
type queries (np.shape, np.ndim, ... of a list), left unwrapped as a speed-up.
"""
from __future__ import annotations

import sys

import numpy as np

from tape.core import Tracer, peek, primal
from tape.errors import NonDifferentiableError, TracerConversionError
from tape.tracer import FUNCTION_RULES
from tape.views import is_read_only

from .creation import astype, filled, full_like, has_tracer, refuse_untraceable_dtype
from .joining import concatenate, stack_p
from .shape import reshape

# NumPy's own constructors, taken before any wrapper can be installed.
_np_array, _np_asarray, _np_einsum = np.array, np.asarray, np.einsum
_np_asfortranarray, _np_require = np.asfortranarray, np.require
_COPY_ERROR = ("Unable to avoid copy while creating an array as requested.")


# The wrappers only forward calls: code that asks who called it looks past their frames
# (tape.constbuffer tells the user's own buffers from the rules').
__hecate_transparent__ = True

def _plain(obj, read=primal):
    """`obj` with each traced value replaced by its plain value: what NumPy would see. `read`
    is `peek` where only the dtype and shape of what NumPy builds are used."""
    if isinstance(obj, Tracer):
        return read(obj)
    if isinstance(obj, (list, tuple)):
        return [_plain(o, read) for o in obj]
    return obj


def traced_array(obj, dtype=None, *, copy=None, ndmin: int = 0, order: str | None = "K"):
    """``np.array(obj, dtype, copy=copy, ndmin=ndmin, order=order)`` for an `obj` holding
    traced values: nested lists and tuples of traced values (0-d or arrays), numbers and arrays.
    The result has NumPy's memory layout (`order`), which ravel/reshape with 'A'/'K' read.

    The dtype, the shape and the errors (ragged nesting, ``copy=False``) are NumPy's own: NumPy
    builds the plain array first. Floating and complex results are traced (a nested stack of
    the elements, each cast to the result dtype); integer or boolean results carry no
    derivative and come back plain, as ``x.astype(int)`` does.

    >>> import numpy as np
    >>> from tape import gradient, Reverse
    >>> gradient(Reverse, lambda x: np.sum(traced_array([[x, 1.0], [2.0, x * x]])), 3.0)
    (7.0,)
    """
    if isinstance(obj, Tracer):
        return _in_layout(_from_tracer(obj, dtype, copy, ndmin, order), order, copy)
    # NumPy's dtype, shape and errors, from the values without deciding on them: a compiled
    # function replays the stack below for new values (an integer result is the values).
    like = _np_array(_plain(obj, peek), dtype=dtype, copy=copy, ndmin=ndmin)
    if not has_tracer(obj):
        return like
    if like.dtype.kind not in "fc":
        if like.dtype.kind not in "biu":
            raise NonDifferentiableError(
                f"an array of dtype {like.dtype} built from traced values cannot carry a "
                "derivative; give numbers of one numeric type (or dtype=float)")
        return _np_array(_plain(obj), dtype=dtype, copy=copy, ndmin=ndmin)
    out = _build(obj, like.dtype)
    return _in_layout(_with_ndmin(out, ndmin), order, copy)


def _in_layout(out, order, copy):
    """`out` with the contiguity order 'C' or 'F' asks for: a copy in that order when it has
    another layout (NumPy's error when `copy` is False)."""
    flags = getattr(peek(out), "flags", None) if isinstance(out, Tracer) else None
    if order not in ("C", "F") or flags is None:
        return out
    if flags.c_contiguous if order == "C" else flags.f_contiguous:
        return out
    if copy is False:
        raise ValueError(_COPY_ERROR)
    return out.copy(order=order)


def _build(obj, dtype):
    refuse_untraceable_dtype(dtype, "np.array(..., dtype={})")
    if isinstance(obj, Tracer):
        return obj if obj.dtype == dtype else astype(obj, dtype=dtype)
    parts = [_build(o, dtype) if has_tracer(o) else _np_asarray(o, dtype=dtype) for o in obj]
    return stack_p(*parts, axis=0)


def _from_tracer(t, dtype, copy, ndmin, order="K"):
    order = "K" if order is None else order
    if dtype is not None and np.dtype(dtype) != t.dtype:
        if copy is False:
            raise ValueError(_COPY_ERROR)
        out = t.astype(dtype, order=order)   # a new array; integer/boolean casts come back plain
    elif copy:
        out = t.copy(order=order)   # np.array copies by default: a private buffer
    elif type(peek(t)) in (bool, int, float, complex):
        out = t.astype(np.asarray(peek(t)).dtype)   # a traced Python number: a strong 0-d value
    else:
        out = t                 # np.asarray returns its argument itself
    return _with_ndmin(out, ndmin)


def _with_ndmin(out, ndmin):
    shape = np.shape(out)
    if len(shape) >= ndmin:
        return out
    return reshape(out, shape=(1,) * (ndmin - len(shape)) + shape)


# -- fallbacks: what a wrapper does after NumPy's function refused a traced value --------------
def _array(fn, args, kwargs):
    return _array_args(*args, **kwargs)


def _array_args(object, dtype=None, *, copy=True, order="K", subok=True, ndmin=0, like=None):
    return traced_array(object, dtype, copy=copy, ndmin=ndmin, order=order)


def _asarray(fn, args, kwargs):
    return _asarray_args(*args, **kwargs)


def _asarray_args(a, dtype=None, order=None, *, device=None, copy=None, like=None):
    return traced_array(a, dtype, copy=copy, order=order)


def _contiguous(fn, args, kwargs):
    """np.ascontiguousarray and np.asfortranarray: at least 1-d, in C or Fortran layout."""
    def contiguous(a, dtype=None, *, like=None):
        return traced_array(a, dtype, ndmin=1, order="F" if fn is _np_asfortranarray else "C")
    return contiguous(*args, **kwargs)


def _chkfinite(fn, args, kwargs):
    return _chkfinite_args(*args, **kwargs)


def _chkfinite_args(a, dtype=None, order=None):
    out = traced_array(a, dtype, order=order)
    if not np.isfinite(primal(out)).all():
        raise ValueError("array must not contain infs or NaNs")
    return out


_REQUIREMENTS = {"C": "C", "C_CONTIGUOUS": "C", "CONTIGUOUS": "C", "F": "F",
                 "F_CONTIGUOUS": "F", "FORTRAN": "F", "A": "A", "ALIGNED": "A", "W": "W",
                 "WRITEABLE": "W", "O": "O", "OWNDATA": "O", "E": "E", "ENSUREARRAY": "E"}


def _require(fn, args, kwargs):
    return _require_args(*args, **kwargs)


def _require_args(a, dtype=None, requirements=None, *, like=None):
    """np.require of traced values, as NumPy's: the array itself where it meets the
    requirements, else a copy that does (a view that must own its data, or be writeable)."""
    if not requirements:
        return traced_array(a, dtype, copy=None)
    wanted = {_REQUIREMENTS[r.upper()] for r in requirements}
    if {"C", "F"} <= wanted:
        raise ValueError('Cannot specify both "C" and "F" order')
    order = "C" if "C" in wanted else "F" if "F" in wanted else "K"
    out = traced_array(a, dtype, copy=None, order=order)
    if not isinstance(out, Tracer):
        return _np_require(out, requirements=requirements)
    if ("O" in wanted and getattr(out, "view_of", None) is not None
            or "W" in wanted and is_read_only(out)):
        return out.copy(order="A" if order == "K" else order)
    return out


def _full(shape, fill_value, dtype=None, order="C", *, device=None, like=None):
    fill = traced_array(fill_value)
    dtype = np.dtype(fill.dtype if dtype is None else dtype)
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    return filled(shape, fill, dtype)


# Functions whose arguments are sequences of arrays: their lists are converted item by item
# (np.concatenate(([a, 1.0], x)) joins a traced [a, 1.0] with x), by position and by name.
_SEQUENCE_ARGS = {np.concatenate: (0, "arrays"), np.stack: (0, "arrays"),
                  np.hstack: (0, "tup"), np.vstack: (0, "tup"), np.dstack: (0, "tup"),
                  np.column_stack: (0, "tup"), np.linalg.multi_dot: (0, "arrays"),
                  np.select: (0, "condlist", 1, "choicelist")}
for _name in ("concat", "row_stack"):
    if hasattr(np, _name):   # not in every NumPy version
        _SEQUENCE_ARGS[getattr(np, _name)] = (0, "arrays" if _name == "concat" else "tup")


# Functions whose first n positional arguments are all arrays: their plain lists become arrays
# too, as some rules take a plain list for a scalar (np.dot(x, [1.0, 2.0])).
_ARRAY_ARGS = {np.dot: 2, np.inner: 2, np.outer: 2, np.vdot: 2, np.kron: 2, np.tensordot: 2}


def _converted(value, items: bool, array: bool = False):
    if not isinstance(value, (list, tuple)):
        return value
    if not has_tracer(value):
        return _np_asarray(value) if array else value
    if items:
        return [_converted(v, False) for v in value]
    return traced_array(value)


def _convert_lists(fn, args, kwargs):
    """The generic fallback: list and tuple arguments holding traced values become traced
    arrays (sequences of arrays item by item), then NumPy's function is called again; now it
    dispatches to the rule. An argument that is itself traced is left as it is."""
    items = _SEQUENCE_ARGS.get(fn, ())
    n_arrays = _ARRAY_ARGS.get(fn, 0)
    if fn is _np_einsum and args and isinstance(args[0], str):
        n_arrays = len(args)   # einsum("ij,j", *operands)
    args = tuple(_converted(a, i in items, i < n_arrays) for i, a in enumerate(args))
    kwargs = {k: _converted(v, k in items) for k, v in kwargs.items()}
    return fn(*args, **kwargs)


_FALLBACKS = {np.array: _array, np.asarray: _asarray, np.asanyarray: _asarray,
              np.ascontiguousarray: _contiguous, np.asfortranarray: _contiguous,
              np.asarray_chkfinite: _chkfinite, np.require: _require}


def _from_numpy(frame) -> bool:
    """Whether the code running in `frame` is NumPy's or SciPy's own. SciPy's Python code
    expects plain arrays too: it gets the refusal, whose message names the tape.scipy
    replacement, instead of carrying on with traced values half-way."""
    name = frame.f_globals.get("__name__", "")
    if name.startswith("numpy.polynomial."):   # compositions of array operations, traced
        return False                           # through (legval, chebfit: np.array(c, ...))
    return name.partition(".")[0] in ("numpy", "scipy")


_NOT_YET = object()   # (no result yet: NumPy's function, or the fallback, is still to run)


def _wrapper(fn, fallback, route=None, finish=None):
    """NumPy's function `fn` while tracing: calls it, and when a traced value refused to
    become a plain array, calls `fallback(fn, args, kwargs)` instead. Only for calls from
    outside NumPy: NumPy's own Python code (np.meshgrid calls np.asanyarray) lets the refusal
    through, so that the outer wrapper converts the lists before NumPy's code runs at all.
    `route(fn, args, kwargs)`, when given, may answer first (a call NumPy would not dispatch),
    and `finish(result, caller's frame)` may amend the result."""
    def wrapped(*args, **kwargs):
        out = _NOT_YET if route is None else route(fn, args, kwargs)
        if out is _NOT_YET:
            try:
                out = fn(*args, **kwargs)
            except TracerConversionError:
                if _from_numpy(sys._getframe(1)) or not (
                        has_tracer(args) or has_tracer(list(kwargs.values()))):
                    raise
            # Outside the except clause: an error of the fallback is not chained to NumPy's.
            if out is _NOT_YET:
                out = fallback(fn, args, kwargs)
        return out if finish is None else finish(out, sys._getframe(1))
    return wrapped


def _full_wrapper(fn, fallback=None):
    # np.full(shape, traced, dtype) ends in np.copyto into a plain array, which refuses with
    # another error: a traced fill value is routed before NumPy's function is called.
    def wrapped(shape, fill_value, *args, **kwargs):
        if has_tracer(fill_value):
            return _full(shape, fill_value, *args, **kwargs)
        return fn(shape, fill_value, *args, **kwargs)
    return wrapped


def _full_like_wrapper(fn, fallback=None):
    # np.full_like(plain, traced) is not dispatched (only `a` is) and ends in np.copyto.
    def wrapped(a, fill_value, *args, **kwargs):
        if has_tracer(fill_value) or has_tracer(a):
            return full_like(a, fill_value, *args, **kwargs)
        return fn(a, fill_value, *args, **kwargs)
    return wrapped


def _pad_route(fn, args, kwargs):
    # np.pad(plain, ..., constant_values=traced) is not dispatched (only `array` is): the
    # rule takes it, as it takes a traced array.
    array = args[0] if args else kwargs.get("array")
    if not has_tracer(array) and has_tracer(kwargs.get("constant_values")):
        return FUNCTION_RULES[fn](*args, **kwargs)
    return _NOT_YET


def _select_route(fn, args, kwargs):
    # np.select(plain conditions, plain choices, default=traced) is not dispatched (`default`
    # is not among the dispatched arguments): the rule takes it.
    default = args[2] if len(args) > 2 else kwargs.get("default")
    if has_tracer(default) and not has_tracer(list(args[:2]) + [
            kwargs.get("condlist"), kwargs.get("choicelist")]):
        return FUNCTION_RULES[fn](*args, **kwargs)
    return _NOT_YET


# np.polynomial's polyval, chebval, ... give the coefficients one axis per axis of x only when
# `isinstance(x, np.ndarray)`, which a traced x is not (tensor=True, the default): the
# coefficient array they make first with np.array gets those axes here, found by the caller's
# code object, so that a function bound to another name (`from ... import polyval`) is right too.
_POLYNOMIAL_VALS = frozenset(getattr(getattr(np.polynomial, m), f"{p}val").__code__ for m, p in (
    ("polynomial", "poly"), ("chebyshev", "cheb"), ("legendre", "leg"), ("hermite", "herm"),
    ("hermite_e", "herme"), ("laguerre", "lag")))


def _polynomial_axes(out, frame):
    """np.array's result, with a polynomial val function's coefficient axes (above) when the
    caller is one."""
    if frame.f_code in _POLYNOMIAL_VALS:
        x, tensor = frame.f_locals.get("x"), frame.f_locals.get("tensor")
        if tensor and isinstance(x, Tracer) and x.ndim and np.ndim(out) > 1:
            return reshape(out, tuple(np.shape(out)) + (1,) * x.ndim)
    return out


_WRAPPER_MAKERS = {np.full: _full_wrapper, np.full_like: _full_like_wrapper,
                   np.pad: lambda fn, fallback: _wrapper(fn, fallback, route=_pad_route),
                   np.select: lambda fn, fallback: _wrapper(fn, fallback, route=_select_route),
                   np.array: lambda fn, fallback: _wrapper(fn, fallback,
                                                           finish=_polynomial_axes)}


# -- np.r_ and np.c_ ----------------------------------------------------------------------------
class _Concatenator:
    """Stands for np.r_ / np.c_ while tracing: NumPy's own object, and a traced concatenation
    when an item holds traced values."""

    __slots__ = ("original",)

    def __init__(self, original):
        self.original = original

    def __getitem__(self, key):
        if isinstance(key, str):   # the matrix-builder syntax reads the caller's names
            frame = sys._getframe(1)
            return np.bmat(key, frame.f_globals, frame.f_locals)
        try:
            return self.original[key]
        except TracerConversionError:
            if not has_tracer(key):
                raise
        return _traced_concatenation(self.original, key if isinstance(key, tuple) else (key,))

    def __len__(self):
        return 0

    def __getattr__(self, name):
        return getattr(self.original, name)

    def __repr__(self):
        return repr(self.original)


def _traced_concatenation(how, items):
    """np.r_ / np.c_ semantics: a leading 'axis,ndmin,trans1d' directive, slices as ranges,
    scalars promoted weakly, each item raised to `ndmin` dimensions (its own axes starting at
    position `trans1d`), all joined along `axis`."""
    axis, ndmin, trans1d = how.axis, how.ndmin, how.trans1d
    if how.matrix:
        raise NotImplementedError("np.r_/np.c_ matrix output cannot carry a derivative")
    pieces, kinds = [], []
    for k, item in enumerate(items):
        if isinstance(item, str):
            axis, ndmin, trans1d = _directive(item, k, axis, ndmin, trans1d)
            continue
        if isinstance(item, slice):
            piece = _with_ndmin(np.r_[item], ndmin)
            if ndmin > 1 and trans1d != -1:
                piece = piece.swapaxes(-1, trans1d)
            pieces.append(piece)
            kinds.append(piece.dtype)
        elif type(item) in np.ScalarType:
            pieces.append(item)
            kinds.append(item)   # a Python number is promoted weakly, as NumPy does
        else:
            piece = traced_array(item) if has_tracer(item) else _np_array(item, copy=None)
            pieces.append(_placed(piece, ndmin, trans1d))
            kinds.append(piece.dtype)
    dtype = np.result_type(*kinds)
    return concatenate([_cast_to(p, dtype, ndmin) for p in pieces], axis=axis)


def _directive(item, k, axis, ndmin, trans1d):
    if k != 0:
        raise ValueError("special directives must be the first entry.")
    if item in ("r", "c"):
        raise NotImplementedError("np.r_['r', ...] builds a np.matrix, which cannot carry a "
                                  "derivative")
    try:
        values = [int(v) for v in item.split(",")]
    except ValueError as e:
        raise ValueError(f"unknown special directive {item!r}") from e
    axis = values[0]
    if len(values) > 1:
        ndmin = values[1]
    if len(values) > 2:
        trans1d = values[2]
    return axis, ndmin, trans1d


def _placed(piece, ndmin, trans1d):
    """`piece` raised to `ndmin` dimensions; with trans1d, its own axes start at position
    trans1d (counted among the ndmin axes, negative from the end) instead of last."""
    ndim = np.ndim(piece)
    out = _with_ndmin(piece, ndmin)
    if trans1d == -1 or ndim >= ndmin:
        return out
    new = ndmin - ndim
    start = trans1d + new + 1 if trans1d < 0 else trans1d
    order = list(range(ndmin))
    return np.transpose(out, order[:start] + order[new:] + order[start:new])


def _cast_to(piece, dtype, ndmin):
    if isinstance(piece, Tracer):
        return _with_ndmin(piece if piece.dtype == dtype else astype(piece, dtype=dtype), ndmin)
    return _np_array(piece, copy=None, ndmin=ndmin, dtype=dtype)
