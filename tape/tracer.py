"""The ndarray surface of a tracer, so that unmodified NumPy code is differentiated.

Operators and methods look their primitive up in the plain dicts of tape.rule_tables that
`ops/` fills in; NumPy's views among traced values are linked by tape.views. The engine never
imports a rule.
"""
from __future__ import annotations

import inspect
import sys

import numpy as np

from .batching import Batched
from .constbuffer import ConstBuffer
from .core import ReverseTrace, ReverseTracer, Tracer, peek, primal
from .forward_trace import DualTracer, ForwardTrace
from .errors import NonDifferentiableError, PythonNumberError, TracerConversionError
# The tables are read from here too (tape.program, the tests): one module, two names.
from .rule_tables import (FUNCTION_RULES, METHOD_RULES, UFUNC_PRIMITIVES,  # noqa: F401
                          UFUNC_RULES, _call_function, _call_method, _call_ufunc, _missing,
                          _rule, _ufunc_name)
from .operators import (_NO_PARAMS, _binary, _defers_to_batched, _inplace, _ipow, _pow,
                        _unary, check_cast, is_python_number)
from .views import _is_view_index, _refresh_views, _same, mark_read_only_view, mark_view

_MATMUL_IN_PLACE_AXES = [(-2, -1), (-2, -1), (-2, -1)]


def _refuse_array(self, *args, **kwargs):
    process = getattr(self.level, "process", None)
    if getattr(process, "serving", False) and not isinstance(self.value, Tracer):
        # A checkpointed call's first run computes plain values only (a buffer from
        # np.zeros_like is a plain array there, and `buffer[:] = x` asks for this); its
        # recomputation in the reverse pass is traced and refuses what would drop a derivative.
        return process.read(self, *args, **kwargs)
    raise TracerConversionError(
        f"converting a traced value ({_describe(self)}) to a plain NumPy array would drop its "
        "derivative. Keep it as an array (use np.zeros_like(x) for buffers you write into), "
        "or take tape.primal(x) if you really want the plain value without derivative.",
        sys._getframe(1))


def _refuse_python_number(tracer, what):
    """A traced Python number is indexed as the number would be: Python raises."""
    if is_python_number(tracer):
        raise TypeError(f"'{type(peek(tracer)).__name__}' object {what}")


def _divmod(a, b):
    """divmod(a, b): Python's (a // b, a % b) of two Python numbers, one of them traced (Python
    floats, as the floats' divmod gives), np.divmod otherwise."""
    if is_python_number(a) and is_python_number(b):
        return a // b, a % b
    return _call_ufunc(np.divmod, a, b)


def _refuse(call, fix):
    def refuse(self, *args, **kwargs):
        # The frame that asked: where it is SciPy's code (scipy.integrate.quad's float() of
        # the integrand's value), the message names the SciPy function when it is read.
        raise PythonNumberError(
            f"{call} of a traced value ({_describe(self)}) would give a plain Python value "
            f"and drop its derivative. {fix}", sys._getframe(1), call)
    return refuse


_KEEP_ARRAY = ("Keep computing with the traced value itself (branching on it works: "
               "`if x > 0:`), or use tape.primal(x) for the plain value without derivative. "
               "Writing it into a plain array (buffer[i] = x) asks for this too: allocate the "
               "buffer with np.zeros_like(x) (or np.empty_like, x.copy()) instead.")


def _describe(x) -> str:
    value = peek(x)
    return f"{_dtype_of(value)} of shape {np.shape(value)}"


def _method(fn, out_at, self, args, kwargs):
    """The ndarray method of the NumPy function `fn` (x.sum(...) calls np.sum, read at call
    time: while tracing, its wrapper). With `out` (a keyword, or the positional argument at
    `out_at`) it goes through the function protocol, which computes and then writes into
    `out` as np.sum(x, out=b) does."""
    if len(args) > out_at:   # the positional arguments from `out` on, as keywords
        names = _PARAMETERS.get(fn)
        if names is None:
            names = _PARAMETERS[fn] = list(inspect.signature(fn).parameters)[1:]
        kwargs = dict(kwargs, **dict(zip(names[out_at:], args[out_at:])))
        args = args[:out_at]
    if kwargs.get("out") is not None:
        return self.__array_function__(fn, (type(self),), (self,) + args, kwargs)
    return _call_function(fn, self, *args, **kwargs)


_PARAMETERS: dict = {}   # a NumPy function's parameter names after the array


class _Surface:
    """Mixed into both tracer kinds: the ndarray protocol and operator surface."""

    __slots__ = ()
    __array_priority__ = 1000.0

    # -- NumPy protocols ------------------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method == "__call__" and not kwargs:   # speed-up: the common case
            prim = UFUNC_PRIMITIVES.get(ufunc)
            if prim is not None:
                if len(inputs) == 1 and self.level.alive:
                    return self.level.process(prim, inputs, _NO_PARAMS)
                for a in inputs:   # (a list operand: made an array by `_call_ufunc`)
                    if type(a) is list or type(a) is tuple:
                        break
                else:
                    return prim(*inputs)   # (a Batched input: see Primitive.__call__)
        if _defers_to_batched(inputs) or _defers_to_batched(kwargs.get("out", ())):
            return NotImplemented
        if ufunc is np.matmul and kwargs.get("axes") == _MATMUL_IN_PLACE_AXES:
            del kwargs["axes"]   # what `a @= b` passes: the default axes
        out = kwargs.pop("out", None)
        if method == "__call__" and out is not None and kwargs.get("where", True) is not True:
            return _masked_ufunc(ufunc, inputs, kwargs, out)
        if method == "__call__":
            result = _call_ufunc(ufunc, *inputs, **kwargs)
        elif method == "reduce" and ufunc in _REDUCE_AS:
            # ufunc.reduce defaults to axis=0, the functions it maps to to axis=None.
            kwargs.setdefault("axis", 0)
            if kwargs["axis"] in (0, -1) and np.ndim(peek(inputs[0])) == 0:
                kwargs["axis"] = None   # NumPy reduces a 0-d array over axis 0 or -1 to itself
            result = _call_function(_REDUCE_AS[ufunc], *inputs, **kwargs)
        elif method == "reduce" and f"{ufunc.__name__}.reduce" in METHOD_RULES:
            result = METHOD_RULES[f"{ufunc.__name__}.reduce"](*inputs, **kwargs)
        elif method == "accumulate" and ufunc in _ACCUMULATE_AS:
            kwargs.setdefault("axis", 0)
            result = _call_function(_ACCUMULATE_AS[ufunc], *inputs, **kwargs)
        elif method == "accumulate" and f"{ufunc.__name__}.accumulate" in METHOD_RULES:
            result = METHOD_RULES[f"{ufunc.__name__}.accumulate"](*inputs, **kwargs)
        elif method == "reduceat" and f"{ufunc.__name__}.reduceat" in METHOD_RULES:
            result = METHOD_RULES[f"{ufunc.__name__}.reduceat"](*inputs, **kwargs)
        elif method == "outer" and len(inputs) == 2:
            a, b = inputs
            a = np.reshape(a, np.shape(peek(a)) + (1,) * np.ndim(peek(b)))
            result = _call_ufunc(ufunc, a, b, **kwargs)
        elif method == "at":
            name = f"{ufunc.__name__}.at"
            return _rule(METHOD_RULES, name, f"numpy.{name}")(*inputs)
        else:
            raise _missing(f"{_ufunc_name(ufunc)}.{method}")
        if out is None:
            return result
        if method in ("__call__", "outer"):   # NumPy's output casting rule (reductions: unsafe)
            for target, value in zip(out if isinstance(out, tuple) else (out,),
                                     result if isinstance(result, tuple) else (result,)):
                check_cast(ufunc.__name__, "output", value, target,
                           kwargs.get("casting", "same_kind"))
        # a call (and outer) broadcasts into a larger `out`, as NumPy's ufuncs do; reduce and
        # accumulate don't
        name = ufunc.__name__ if method == "__call__" else f"{ufunc.__name__}.{method}"
        return _write_out(out, result, name, exact_shape=method not in ("__call__", "outer"))

    def __array_function__(self, func, types, args, kwargs):
        if Batched in types:
            return NotImplemented   # see _defers_to_batched
        if kwargs.get("out") is not None:
            # np.sum(x, out=c), ...: compute, then write into `out` (a plain `out` takes a
            # plain result, and refuses a traced one naming the call and the fix)
            kwargs = dict(kwargs)
            out = kwargs.pop("out")
            return _write_out(out, _call_function(func, *args, **kwargs), func.__name__,
                              exact_shape=func.__name__ not in _BROADCAST_INTO_OUT)
        return _call_function(func, *args, **kwargs)

    __array__ = _refuse_array
    __float__ = _refuse("float(x)", "The math module's functions ask for this (math.exp(x)): "
                        "use NumPy's (np.exp(x)). " + _KEEP_ARRAY)
    __complex__ = _refuse("complex(x)", _KEEP_ARRAY)
    __int__ = _refuse("int(x)", "An integer has no derivative: for an index or a count, use "
                      "int(tape.primal(x)); to keep differentiating, use np.floor(x) or "
                      "np.round(x), which stay traced (with derivative zero).")
    __index__ = __int__
    __round__ = _refuse("round(x)", "Use np.round(x), which stays traced (its derivative is "
                        "zero), or round(tape.primal(x)) for a plain number.")
    item = _refuse("x.item()", _KEEP_ARRAY)
    as_integer_ratio = _refuse("x.as_integer_ratio()", "The statistics and fractions modules "
                               "ask for this (statistics.mean(x)): use NumPy's functions "
                               "(np.mean(x), np.median(x), np.var(x)), which stay traced.")
    tolist = _refuse("x.tolist()", "Index the traced array instead (x[i] stays traced), or "
                     "use tape.primal(x).tolist() for plain values.")

    @property
    def flat(self):
        raise NonDifferentiableError(
            f"x.flat of a traced value ({_describe(self)}) is not supported: its iterator "
            "reads and writes plain elements. Use x.ravel() or x.reshape(-1) (a view: writes "
            "into it reach x, as x.flat[i] = v would), or x.ravel()[i] to read.")

    def sort(self, *args, **kwargs):
        raise NonDifferentiableError(
            f"x.sort() sorts a traced value ({_describe(self)}) in place, which is not "
            "supported; write x = np.sort(x, axis=...) (or x[...] = np.sort(x) to keep views "
            "of x in step).")

    def partition(self, *args, **kwargs):
        raise NonDifferentiableError(
            f"x.partition() partitions a traced value ({_describe(self)}) in place, which is "
            "not supported; write x = np.partition(x, kth, axis=...).")

    def __bool__(self):
        # Control flow on a value is allowed (its derivative is not needed to branch).
        return bool(primal(self))

    __hash__ = object.__hash__

    # -- attributes -----------------------------------------------------------------------
    shape = property(lambda self: _shape(peek(self)))
    ndim = property(lambda self: _ndim(peek(self)))
    size = property(lambda self: np.size(peek(self)))
    dtype = property(lambda self: _dtype_of(peek(self)))
    T = property(lambda self: _call_function(np.transpose, self))
    mT = property(lambda self: _call_function(np.swapaxes, self, -1, -2))
    itemsize = property(lambda self: _dtype_of(peek(self)).itemsize)
    nbytes = property(lambda self: np.size(peek(self)) * _dtype_of(peek(self)).itemsize)
    strides = property(lambda self: _strides_of(peek(self)))
    # The layout flags of the value (np.isfortran, x.flags.c_contiguous), read-only: a write
    # goes through the tracer, never through its value's flags.
    flags = property(lambda self: np.asarray(peek(self)).view().flags)

    @property
    def real(self):
        """A view, as in NumPy: writes into `z.real` reach `z`."""
        out = _call_method("real", self)
        if not np.iscomplexobj(peek(self)):
            return mark_view(out, self, to_base=_same, from_base=_same)
        return mark_view(out, self, to_base=lambda v: v + 1j * _call_function(np.imag, self),
                         from_base=lambda base: _call_method("real", base))

    @real.setter
    def real(self, value):
        self[...] = (value + 1j * _call_function(np.imag, self)
                     if np.iscomplexobj(peek(self)) else value)

    @property
    def imag(self):
        """A view for complex values, as in NumPy (a real array's `.imag` is zeros)."""
        out = _call_function(np.imag, self)
        if not np.iscomplexobj(peek(self)):   # zeros, read-only as NumPy's
            return mark_read_only_view(out, self, lambda base: _call_function(np.imag, base))
        return mark_view(out, self, to_base=lambda v: _call_function(np.real, self) + 1j * v,
                         from_base=lambda base: _call_function(np.imag, base))

    @imag.setter
    def imag(self, value):
        if not np.iscomplexobj(peek(self)):
            raise TypeError("array does not have imaginary part to set")
        self[...] = _call_function(np.real, self) + 1j * value

    def __len__(self):
        return len(peek(self))

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __repr__(self):
        return f"{type(self).__name__}(level={self.level.depth}, {primal(self)!r})"

    def __format__(self, spec):   # f"{loss:.4f}" formats the value, as NumPy's 0-d arrays
        return format(primal(self), spec)

    def __deepcopy__(self, memo):
        return self.copy()

    # -- the array API (NumPy 2): the namespace is numpy, whose functions are differentiated --
    device = property(lambda self: getattr(peek(self), "device", "cpu"))

    def to_device(self, device, /, *, stream=None):
        if device != self.device:
            raise ValueError(f"to_device({device!r}) of a traced value on {self.device!r}: "
                             "a traced value stays on its device")
        return self

    def __array_namespace__(self, *, api_version=None):
        return np.ndarray.__array_namespace__(np.empty(0), api_version=api_version)

    # -- operators ------------------------------------------------------------------------
    __add__, __radd__ = _binary(np.add)
    __sub__, __rsub__ = _binary(np.subtract)
    __mul__, __rmul__ = _binary(np.multiply)
    __truediv__, __rtruediv__ = _binary(np.true_divide)
    __floordiv__, __rfloordiv__ = _binary(np.floor_divide)
    __mod__, __rmod__ = _binary(np.remainder)
    __pow__ = _pow   # NumPy's `x ** c` need not call np.power (see _power_shortcut)
    __rpow__ = _binary(np.power)[1]
    __matmul__, __rmatmul__ = _binary(np.matmul)
    __divmod__ = lambda self, other: _divmod(self, other)
    __rdivmod__ = lambda self, other: _divmod(other, self)
    __lt__ = lambda self, other: _call_ufunc(np.less, self, other)
    __le__ = lambda self, other: _call_ufunc(np.less_equal, self, other)
    __gt__ = lambda self, other: _call_ufunc(np.greater, self, other)
    __ge__ = lambda self, other: _call_ufunc(np.greater_equal, self, other)
    __eq__ = lambda self, other: _call_ufunc(np.equal, self, other)
    __ne__ = lambda self, other: _call_ufunc(np.not_equal, self, other)
    __neg__ = _unary(np.negative)
    __pos__ = _unary(np.positive)
    __abs__ = _unary(np.absolute)
    __iadd__ = _inplace(np.add)
    __isub__ = _inplace(np.subtract)
    __imul__ = _inplace(np.multiply)
    __itruediv__ = _inplace(np.true_divide)
    __ipow__ = _ipow
    __imatmul__ = _inplace(np.matmul)

    def __getitem__(self, index):
        _refuse_python_number(self, "is not subscriptable")
        out = _call_method("__getitem__", self, index)
        if _is_view_index(index, np.ndim(peek(self))):
            mark_view(out, self, index)   # NumPy returns a view: writes into it reach `self`
        return out

    def __setitem__(self, index, value):
        _refuse_python_number(self, "does not support item assignment")
        guard = getattr(self, "write_guard", None)   # unset unless this is an argument
        if guard is not None:
            guard(self)
        new = _call_method("__setitem__", self, index, value,
                           inplace=getattr(self, "owned", False))
        self._become(new, owned=True)
        view_of = getattr(self, "view_of", None)   # unset unless this tracer is a view
        if view_of is not None:
            base, base_index, to_base, _ = view_of
            base[base_index] = self if to_base is None else to_base(self)
        else:
            _refresh_views(self)

    def _become(self, new, owned=False):
        """Make this tracer stand for `new` (a functional update of its value). `owned` says
        the new value is a private buffer, which later writes may update in place."""
        before = peek(self)
        self._rebind(new)
        after = peek(self)
        if (type(before) is np.ndarray and type(after) is np.ndarray
                and before.strides != after.strides and before.shape == after.shape
                and getattr(self, "layout", None) is None):
            self.layout = before.strides   # NumPy's array keeps its strides (reshape reads them)
        if owned:
            self.owned = True
        elif getattr(self, "owned", False):
            del self.owned

    def _write(self, result):
        """Make this tracer hold `result`, NumPy style: arrays are updated in place, while
        0-d values behave like Python numbers (the name is simply rebound)."""
        if np.ndim(peek(self)) == 0 and not isinstance(peek(self), np.ndarray):
            return result
        self[...] = result
        return self

    # -- methods --------------------------------------------------------------------------
    def sum(self, *a, **k): return _method(np.sum, 2, self, a, k)
    def mean(self, *a, **k): return _method(np.mean, 2, self, a, k)
    def prod(self, *a, **k): return _method(np.prod, 2, self, a, k)
    def max(self, *a, **k): return _method(np.max, 1, self, a, k)
    def min(self, *a, **k): return _method(np.min, 1, self, a, k)
    def var(self, *a, **k): return _method(np.var, 2, self, a, k)
    def std(self, *a, **k): return _method(np.std, 2, self, a, k)
    if hasattr(np.ndarray, "ptp"):   # NumPy 2 removed the method (np.ptp stays)
        def ptp(self, *a, **k): return _method(np.ptp, 1, self, a, k)
    def cumsum(self, *a, **k): return _method(np.cumsum, 2, self, a, k)
    def cumprod(self, *a, **k): return _method(np.cumprod, 2, self, a, k)
    def dot(self, other, out=None): return np.dot(self, other, out=out)
    def clip(self, *a, **k): return _method(np.clip, 2, self, a, k)
    def round(self, *a, **k): return _method(np.round, 1, self, a, k)
    def conj(self):
        """The conjugate; for real values the array itself, as NumPy's method returns it."""
        return self if not np.iscomplexobj(peek(self)) else _call_ufunc(np.conjugate, self)
    conjugate = conj
    def squeeze(self, *a, **k): return _call_function(np.squeeze, self, *a, **k)
    def swapaxes(self, a1, a2): return _call_function(np.swapaxes, self, a1, a2)
    def repeat(self, *a, **k): return _call_function(np.repeat, self, *a, **k)
    def take(self, *a, **k): return _method(np.take, 2, self, a, k)
    def diagonal(self, *a, **k): return _call_function(np.diagonal, self, *a, **k)
    def trace(self, *a, **k): return _call_function(np.trace, self, *a, **k)
    def ravel(self, *a, **k): return _call_function(np.ravel, self, *a, **k)
    def flatten(self, order="C"): return _call_function(np.ravel, self, order).copy()
    def argmax(self, *a, **k): return _call_function(np.argmax, self, *a, **k)
    def argmin(self, *a, **k): return _call_function(np.argmin, self, *a, **k)
    def argsort(self, *a, **k): return _call_function(np.argsort, self, *a, **k)
    def argpartition(self, *a, **k): return _call_function(np.argpartition, self, *a, **k)
    def nonzero(self): return _call_function(np.nonzero, self)
    def all(self, *a, **k): return _call_function(np.all, self, *a, **k)
    def any(self, *a, **k): return _call_function(np.any, self, *a, **k)
    def astype(self, dtype, order="K", casting="unsafe", subok=True, copy=True):
        if not copy and np.dtype(dtype) == _dtype_of(peek(self)) and _has_layout(self, order):
            return self   # NumPy returns the array itself: later writes are seen through it
        return _call_method("astype", self, dtype, order=order)
    def copy(self, order="C"): return _call_method("copy", self, order=order)
    def compress(self, condition, axis=None, out=None):
        return _call_function(np.compress, condition, self, axis=axis, out=out)
    def searchsorted(self, v, side="left", sorter=None):
        return _call_function(np.searchsorted, self, v, side=side, sorter=sorter)
    def choose(self, choices, out=None, mode="raise"):
        return _call_function(np.choose, self, choices, out=out, mode=mode)
    def put(self, indices, values, mode="raise"):
        _call_function(np.put, self, indices, values, mode=mode)   # in place, as NumPy

    def resize(self, *new_shape, refcheck=True):
        raise NonDifferentiableError(
            f"x.resize() resizes a traced value ({_describe(self)}) in place, which is not "
            "supported; write x = np.resize(x, shape) (repeating the values) or "
            "x = np.concatenate([x.ravel(), np.zeros(k)]).reshape(shape) (ndarray.resize's "
            "zero fill).")

    def view(self, dtype=None, type=None):
        if (dtype is not None and np.dtype(dtype) != _dtype_of(peek(self))) or type is not None:
            raise NonDifferentiableError(
                f"x.view(dtype) of a traced value ({_describe(self)}) reinterprets its bytes, "
                "which has no derivative; use x.astype(dtype) to convert the values")
        return self[...]

    def reshape(self, *shape, **k):
        if len(shape) == 1 and not isinstance(shape[0], int):
            shape = shape[0]
        return _call_function(np.reshape, self, shape, **k)

    def transpose(self, *axes):
        if len(axes) == 1 and not isinstance(axes[0], int):
            axes = axes[0]
        return _call_function(np.transpose, self, axes or None)

    def fill(self, value):
        self[...] = value


def _shape(value) -> tuple:
    # Speed-up: an ndarray's own attribute, without np.shape's dispatch (the same tuple).
    return value.shape if type(value) is np.ndarray else np.shape(value)


def _ndim(value) -> int:
    return value.ndim if type(value) is np.ndarray else np.ndim(value)


def _strides_of(value):
    """The strides of a traced value's array (NumPy or CuPy; a number's as a 0-d array's)."""
    return value.strides if hasattr(value, "strides") else np.asarray(value).strides


def _dtype_of(x):
    dt = getattr(x, "dtype", None)
    return dt if dt is not None else np.result_type(x)


def _has_layout(tracer, order) -> bool:
    """Whether the traced value already has the memory layout `order` asks for (so that NumPy
    would not copy): 'C' and 'F' need that contiguity, 'A' and 'K' take any layout."""
    flags = getattr(peek(tracer), "flags", None)
    if order not in ("C", "F") or flags is None:
        return True
    return flags.c_contiguous if order == "C" else flags.f_contiguous


# NumPy functions that end in a ufunc call and so broadcast their result into a larger `out`,
# as ufuncs do; the others need `out` of the result's shape.
_BROADCAST_INTO_OUT = frozenset(("clip", "outer", "fix"))


_IN_PLACE_OPERATORS = {"add": "+", "subtract": "-", "multiply": "*", "true_divide": "/",
                       "divide": "/", "floor_divide": "//", "remainder": "%", "power": "**",
                       "matmul": "@"}


def _write_out(out, result, name, exact_shape=False):
    if isinstance(out, tuple) and len(out) > 1:   # np.divmod(a, b, out=(q, r))
        return tuple(r if o is None else _write_out(o, r, name, exact_shape)
                     for o, r in zip(out, result))
    target = out[0] if isinstance(out, tuple) else out
    if exact_shape and np.shape(peek(target)) != np.shape(peek(result)):
        # NumPy refuses such an `out` (np.dot, np.einsum, np.sum, ...); writing the result
        # into it would broadcast copies of it
        raise ValueError(f"np.{name}(..., out=...): `out` has shape "
                         f"{np.shape(peek(target))} but the result has shape "
                         f"{np.shape(peek(result))}; NumPy needs them equal here")
    if isinstance(target, Tracer):
        target[...] = result
        return target
    if isinstance(result, Tracer) and not isinstance(target, ConstBuffer):   # it refuses too
        operator = _IN_PLACE_OPERATORS.get(name)
        also = (f" (what `x {operator}= value` runs for a plain array x: an accumulator made "
                "with np.array(0.0) or np.zeros(n) is one)" if operator else "")
        raise NonDifferentiableError(
            f"np.{name}(..., out=...){also} would write a traced value into a plain array, "
            "which cannot carry a derivative; allocate the output with np.zeros_like(x) "
            "instead, or write `x = x + value`")
    target[...] = result
    return target


def _masked_ufunc(ufunc, inputs, kwargs, out):
    """`ufunc(*inputs, out=out, where=mask)`: only the selected entries are computed and
    written, so `np.divide(a, b, out=c, where=b != 0)` gets no nan derivative from the others."""
    outs = out if isinstance(out, tuple) else (out,)
    shape = np.shape(peek(outs[0]))
    mask = np.broadcast_to(primal(kwargs.pop("where")), shape)
    picked = [np.broadcast_to(x, shape)[mask] for x in inputs]
    result = _call_ufunc(ufunc, *picked, **kwargs)
    results = result if isinstance(result, tuple) else (result,)
    for target, value in zip(outs, results):   # before any write
        if isinstance(value, Tracer) and not isinstance(target, (Tracer, ConstBuffer)):
            # as `_write_out` refuses it without `where=` (np.frexp's integer exponent, which
            # carries no derivative, may go to a plain array)
            raise NonDifferentiableError(
                f"np.{ufunc.__name__}(..., out=..., where=...) would write a traced value "
                "into a plain array, which cannot carry a derivative; allocate the output "
                "with np.zeros_like(x) instead")
        check_cast(ufunc.__name__, "output", value, target, kwargs.get("casting", "same_kind"))
    for target, value in zip(outs, results):
        target[mask] = value
    return out if isinstance(out, tuple) and len(out) > 1 else outs[0]


# ufunc.reduce / ufunc.accumulate spelled as the functions that have rules.
_REDUCE_AS = {np.add: np.sum, np.multiply: np.prod, np.maximum: np.max, np.minimum: np.min}
_ACCUMULATE_AS = {np.add: np.cumsum, np.multiply: np.cumprod}


class ReverseTracerArray(_Surface, ReverseTracer):
    """A value on a reverse-mode tape."""

    __slots__ = ()

    def _rebind(self, new):
        if not (isinstance(new, ReverseTracer) and new.level is self.level):
            raise _leak_error()
        self.value, self.slot = new.value, new.slot


class DualTracerArray(_Surface, DualTracer):
    """A value carrying a forward-mode tangent."""

    __slots__ = ()

    def _rebind(self, new):
        if isinstance(new, DualTracer) and new.level is self.level:
            self.value, self.tangent = new.value, new.tangent
        elif isinstance(new, Tracer) and new.level.depth > self.level.depth:
            raise _leak_error()
        else:  # the written value carries no tangent at this level
            self.value, self.tangent = new, None


def _leak_error():
    return NonDifferentiableError(
        "a value of an inner autodiff was written into a buffer of an outer one; return it "
        "from the inner function instead")


ReverseTrace.tracer_class = ReverseTracerArray
ForwardTrace.tracer_class = DualTracerArray
