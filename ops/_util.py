"""Helpers shared by the rules of ops/: one place for broadcasting and symbolic zeros."""
from __future__ import annotations

import numpy as np

import math
import numbers

from tape.backend import add_or_none, array_module, broadcast_axes
from tape.core import STRONG_ZERO, Primitive, Tracer, peek, primal
from tape.rules import register_function, register_ufunc


def shape_of(x) -> tuple:
    """The shape of an array, tracer, Python number or (plain) nested list."""
    try:
        return x.shape
    except AttributeError:
        return np.shape(x) if isinstance(x, (list, tuple)) else ()


def dtype_of(x) -> np.dtype:
    """The dtype of `x`, traced or not, read without deciding on its values (`peek`): an
    array's (a CuPy array's without a transfer), or the one NumPy gives a list or a number.

    >>> dtype_of([1, 2]), dtype_of(np.ones(2, np.float32))
    (dtype('int64'), dtype('float32'))
    """
    value = peek(x)
    return value.dtype if hasattr(value, "dtype") else np.asarray(value).dtype


def numpy_scalar(x):
    """A 0-d result as NumPy's reductions return it: a scalar (np.float64), not a 0-d array,
    so that a later `s += 1` rebinds `s` instead of writing into an array another name holds.

    >>> type(numpy_scalar(np.array(2.0))).__name__
    'float64'
    """
    return x[()] if shape_of(x) == () and isinstance(peek(x), np.ndarray) else x


def as_array(x):
    """`x` as an array without leaving its device: a traced value or a CuPy array as it is,
    anything else (a list, a number, a NumPy array) through np.asarray.

    >>> as_array([1.0, 2.0])
    array([1., 2.])
    """
    if isinstance(x, Tracer) or hasattr(x, "__cuda_array_interface__"):
        return x
    return np.asarray(x)


def as_float(x):
    """x as a floating-point array of its array module (impls write into temporaries)."""
    xp = array_module(x)
    x = xp.asarray(x)
    return x if x.dtype.kind in "fc" else x.astype(np.float64)


def unbroadcast(g, shape: tuple):
    """Sum the cotangent `g` down to `shape`: the reverse of NumPy broadcasting.

    >>> unbroadcast(np.ones((2, 3)), (3,))
    array([2., 2., 2.])
    """
    gshape = shape_of(g)
    if gshape == shape:
        return g
    axes = broadcast_axes(gshape, shape)
    if axes:
        g = _sum_axes(g, axes)
    return np.reshape(g, shape) if shape_of(g) != shape else g


def _sum_axes(g, axes: tuple):
    """np.sum(g, axis=axes). Speed-up: NumPy reduces along short contiguous rows slowly (one
    inner-loop call per row: summing (p, 3) over its last axis, or (K, n, d) over n with
    d = 10, runs 8-20x slower than a pass over memory), so a run of adjacent axes that is not
    the whole array is summed as a product with a vector of ones (BLAS) when g is a
    C-contiguous float ndarray. Tracers, batched, strided and CuPy values take np.sum."""
    if dtype_of(g) == np.float16:
        # NumPy adds float16 rows in float16, which stops growing at 2048 (2048 + 1 rounds
        # back to 2048); np.mean accumulates float16 in float32, and so does this sum.
        return np.sum(g, axis=axes, dtype=np.float32).astype(np.float16)
    first, last = axes[0], axes[-1]
    if (type(g) is not np.ndarray or g.dtype not in _BLAS_FLOATS or last - first + 1 != len(axes)
            or len(axes) == g.ndim or not g.flags.c_contiguous):
        # ndarray.sum is np.sum's own path for an ndarray, without its Python dispatch
        return g.sum(axis=axes) if type(g) is np.ndarray else np.sum(g, axis=axes)
    outer, inner = g.shape[:first], g.shape[last + 1:]
    n = math.prod(g.shape[first:last + 1])
    ones = np.ones(n, dtype=g.dtype)
    if inner:   # (outer, n, inner) -> (outer, inner)
        summed = ones @ g.reshape(math.prod(outer), n, math.prod(inner))
    else:       # trailing axes: (outer, n) -> (outer,)
        summed = g.reshape(math.prod(outer), n) @ ones
    return summed.reshape(outer + inner)


_BLAS_FLOATS = (np.dtype(np.float64), np.dtype(np.float32))


def broadcast_tangent(t, shape: tuple):
    """A tangent of an input, broadcast to the output's shape (forward-mode counterpart)."""
    return t if shape_of(t) == shape else np.broadcast_to(t, shape)


add_tangents = add_or_none   # sum of two tangents where None is a symbolic zero


def times_partial(g, d):
    """``g * d``: a cotangent (or tangent) `g` times a partial derivative `d`.

    Elementwise rules multiply through this one helper so that strong-zero mode
    (`tape.set_strong_zero`) can hold: there a zero `g` gives 0 even where `d` is inf or NaN
    (the derivative of a branch that was not taken), as in Enzyme. Otherwise it is IEEE
    arithmetic, ``0 * inf = nan``.

    >>> times_partial(np.array([0.0, 2.0]), np.array([np.inf, 3.0]))
    array([nan,  6.])
    """
    if STRONG_ZERO.get():
        return _strong_product(g, d)
    return g * d


def _strong_product(g, d):
    if isinstance(d, numbers.Number):
        if math.isfinite(abs(d)):
            return g * d
        # A constant inf partial (rare): an array of g's array module, shape and precision.
        value = primal(g)
        d = array_module(value).full(shape_of(g), d, dtype=np.result_type(
            getattr(value, "dtype", np.float64), d))
    # Replacing the partial, not the product, keeps the dtype and raises no 0 * inf warning.
    return g * np.where(g == 0, 0, d)


def scale_tangent(t, factor):
    """The tangent `t` (None: a symbolic zero) times `factor`, through `times_partial`."""
    return None if t is None else times_partial(t, factor)


def defprimitive(name, impl, augmented_primal, reverse, forward, *, ufunc=None, function=None,
                 multiple_results=False) -> Primitive:
    """Build a primitive and route the NumPy ufunc/function it implements to it."""
    prim = Primitive(name, impl, augmented_primal, reverse, forward,
                     multiple_results=multiple_results)
    # The engine's own operations are functions of their arguments alone: a compiled program
    # computes a repeated call once (tape/program_cse.py).
    prim.pure = True
    if ufunc is not None:
        register_ufunc(ufunc, prim, primitive=prim)
    if function is not None:
        register_function(function, prim)
    return prim
