"""Everyday numerical routines of NumPy (differences, integration, interpolation,
polynomials, convolution) as differentiable functions.

Here: np.gradient, np.trapezoid, np.interp, np.cross, np.real_if_close. Convolution and
polynomials (np.convolve, np.correlate, np.polyval, np.polyfit) live in `ops.numerical_poly`.
All of them are compositions of differentiable ops (slices, arithmetic, gathers), so they are
differentiable to every order in every traced argument, spacings and sample points included.

>>> from tape import autodiff, Reverse, Active
>>> (g,), = autodiff(Reverse, lambda y: np.trapezoid(y * y, dx=0.5), Active,
...                  Active(np.array([1.0, 2.0, 3.0])))
>>> g
array([0.5, 2. , 1.5])

Conventions at non-smooth points:

- np.interp is piecewise linear: at a sample point xp[j] (0 < j < n-1) the derivative in x is
  the slope of the segment to its right; at xp[-1] that of the last segment. Outside
  [xp[0], xp[-1]] the result is `left` / `right` (fp[0] / fp[-1] by default), constant in x.
  The derivative in xp is that of the linear formula on the segment that holds x.
- np.real_if_close decides on the values whether to drop the imaginary part; the decision
  carries no derivative.
"""
from __future__ import annotations

import warnings

import numpy as np
from numpy.lib.array_utils import normalize_axis_index, normalize_axis_tuple

from tape.backend import array_module
from tape.core import Tracer, peek, primal
from tape.inactive_code import inactive
from tape.rules import register_function

from ._util import as_array, numpy_scalar, shape_of
from .linalg import _cross as _cross3


def _along(axis: int, index, ndim: int) -> tuple:
    """An index tuple that applies `index` to `axis` and takes everything elsewhere."""
    return (slice(None),) * axis + (index,) + (slice(None),) * (ndim - axis - 1)


def _float_array(a):
    """`a` as an array (a traced value stays traced); integers become float64 as NumPy does."""
    if isinstance(a, Tracer):
        return a
    a = as_array(a)
    return a.astype(np.float64) if a.dtype.kind in "biu" else a


# -- gradient -------------------------------------------------------------------------------------
def _spacings(f_shape, axes, varargs, xp):
    """Each axis' spacing: a scalar (uniform) or the 1-d differences of its coordinates, on
    the array module `xp` of the values (NumPy coordinates go to the device with CuPy values,
    as cupy.gradient takes them)."""
    if not varargs:
        return [1.0] * len(axes)
    if len(varargs) == 1 and np.ndim(varargs[0]) == 0:
        return [varargs[0]] * len(axes)
    if len(varargs) != len(axes):
        raise TypeError(f"np.gradient: invalid number of spacing arguments ({len(varargs)}) "
                        f"for {len(axes)} axes; give none, one scalar, or one per axis")
    spacings = []
    for axis, h in zip(axes, varargs):
        if np.ndim(h) == 0:
            spacings.append(h)
            continue
        if np.ndim(h) != 1:
            raise ValueError("np.gradient: distances must be either scalars or 1d")
        if xp is not np and not isinstance(h, Tracer):
            h = xp.asarray(h)
        if shape_of(h)[0] != f_shape[axis]:
            raise ValueError("np.gradient: when 1d, distances must match the length of the "
                             f"corresponding dimension ({shape_of(h)[0]} != {f_shape[axis]} "
                             f"along axis {axis})")
        d = np.diff(_float_array(h))
        # NumPy takes the uniform formula for equally spaced plain coordinates. Traced ones keep
        # the general formula: its derivative in each coordinate is the right one.
        if not isinstance(d, Tracer) and np.all(d == d[0]):
            d = d[0]
        spacings.append(d)
    return spacings


def _gradient_along(f, axis, h, edge_order):
    ndim = len(shape_of(f))

    def at(index):
        return f[_along(axis, index, ndim)]

    def per_slot(c):   # spacing coefficients of the interior, lined up with `axis`
        return np.reshape(c, tuple(-1 if i == axis else 1 for i in range(ndim)))

    if np.ndim(h) == 0:
        interior = (at(slice(2, None)) - at(slice(None, -2))) / (2.0 * h)
    else:
        h1, h2 = h[:-1], h[1:]
        interior = (at(slice(None, -2)) * per_slot(-h2 / (h1 * (h1 + h2)))
                    + at(slice(1, -1)) * per_slot((h2 - h1) / (h1 * h2))
                    + at(slice(2, None)) * per_slot(h1 / (h2 * (h1 + h2))))
    first, second, third = at(slice(0, 1)), at(slice(1, 2)), at(slice(2, 3))
    last, before, third_last = at(slice(-1, None)), at(slice(-2, -1)), at(slice(-3, -2))
    uniform = np.ndim(h) == 0
    if edge_order == 1:
        start = (second - first) / (h if uniform else h[0])
        end = (last - before) / (h if uniform else h[-1])
    elif uniform:
        start = (-1.5 * first + 2.0 * second - 0.5 * third) / h
        end = (0.5 * third_last - 2.0 * before + 1.5 * last) / h
    else:   # second-order one-sided differences on uneven spacing
        h1, h2 = h[0], h[1]
        start = (first * (-(2.0 * h1 + h2) / (h1 * (h1 + h2))) + second * ((h1 + h2) / (h1 * h2))
                 + third * (-h1 / (h2 * (h1 + h2))))
        h1, h2 = h[-2], h[-1]
        end = (third_last * (h2 / (h1 * (h1 + h2))) + before * (-(h1 + h2) / (h1 * h2))
               + last * ((2.0 * h2 + h1) / (h2 * (h1 + h2))))
    return np.concatenate([start, interior, end], axis=axis)


def gradient(f, *varargs, axis=None, edge_order=1):
    """np.gradient: central differences inside, one-sided differences (first or second order)
    at the edges; differentiable in `f` and in the spacings or coordinates.

    >>> gradient(np.array([1.0, 4.0, 9.0, 16.0]), 2.0)
    array([1.5, 2. , 3. , 3.5])
    """
    f = _float_array(f)
    shape = shape_of(f)
    axes = tuple(range(len(shape))) if axis is None else normalize_axis_tuple(axis, len(shape))
    if edge_order not in (1, 2):
        raise ValueError(f"np.gradient: edge_order must be 1 or 2, got {edge_order!r}")
    spacings = _spacings(shape, axes, varargs, array_module(f))
    dtype = np.result_type(peek(f))
    out = []
    for ax, h in zip(axes, spacings):
        if shape[ax] < edge_order + 1:
            raise ValueError(
                "Shape of array too small to calculate a numerical gradient, at least "
                f"(edge_order + 1) = {edge_order + 1} elements are required along axis {ax}.")
        g = _gradient_along(f, ax, h, edge_order)
        # NumPy stores each derivative in an array of f's dtype (float64 for integer f),
        # whatever the spacings' dtype
        out.append(g if np.result_type(peek(g)) == dtype else g.astype(dtype))
    return out[0] if len(axes) == 1 else tuple(out)


# -- trapezoid ------------------------------------------------------------------------------------
def trapezoid(y, x=None, dx=1.0, axis=-1):
    """np.trapezoid: the trapezoidal rule along `axis`, differentiable in `y`, `x` and `dx`.

    >>> trapezoid(np.array([1.0, 2.0, 3.0]), x=np.array([0.0, 1.0, 3.0]))
    np.float64(6.5)
    """
    y = _float_array(y)
    ndim = len(shape_of(y))
    axis = normalize_axis_index(axis, ndim)
    if x is None:
        d = dx
    elif np.ndim(x) == 1:
        d = np.diff(_float_array(x))
        d = np.reshape(d, tuple(-1 if i == axis else 1 for i in range(ndim)))
    else:
        d = np.diff(_float_array(x), axis=axis)
    heights = y[_along(axis, slice(1, None), ndim)] + y[_along(axis, slice(None, -1), ndim)]
    return np.sum(d * heights / 2.0, axis=axis)


# -- interp ---------------------------------------------------------------------------------------
@inactive
def _gather(a, index):
    return a[index]


def _take(a, index):
    """a[index] for an integer index without derivative; for a plain `a` (a constant) the
    gather is a step of its own, so that a compiled call replays it on each call's index
    rather than guarding the index's values."""
    return a[index] if isinstance(a, Tracer) else _gather(a, index)


@inactive
def _multiples(v, p):
    """The whole multiples of the period p that np.interp takes off v (no derivative)."""
    k = np.floor(v / p)
    return array_module(k).asarray(k)


def _periodic(x, xp, fp, period):
    """Wrap x and xp into [0, period), sort the samples and extend them by one period on each
    side, as NumPy does. The wrap subtracts an integer multiple of the period (no derivative
    in the multiple), so d/dx = 1 and d/dperiod = -multiple."""
    p = np.abs(period)

    def wrap(v):
        return v - p * _multiples(v, p)

    x, xp = wrap(x), wrap(xp)
    order = np.argsort(xp, kind="stable")   # an index without derivative
    xp, fp = _take(xp, order), _take(fp, order)
    xp = np.concatenate([xp[-1:] - p, xp, xp[:1] + p])
    fp = np.concatenate([fp[-1:], fp, fp[:1]])
    return x, xp, fp


def _at_least_double(a):
    dtype = np.result_type(peek(a))
    wanted = np.complex128 if dtype.kind == "c" else np.float64
    return a if dtype == wanted else a.astype(wanted)


@inactive
def _segment(xp, x):
    """The segment of the sorted samples xp that holds each x (0 to len(xp) - 2): an index
    without derivative, which a compiled call computes again from its own values."""
    j = np.clip(np.searchsorted(xp, x, side="right") - 1, 0, xp.shape[0] - 2)
    return array_module(j).asarray(j)   # an array for a 0-d x too


def interp(x, xp, fp, left=None, right=None, period=None):
    """np.interp: piecewise-linear interpolation, differentiable in x, xp, fp, left, right and
    period (segment choices carry no derivative).

    >>> interp(np.array([0.5, 2.5]), np.array([0.0, 1.0, 2.0]), np.array([1.0, 3.0, 2.0]))
    array([2., 2.])
    """
    # NumPy interpolates in float64 (complex128 for complex fp), whatever the input's width
    x, xp, fp = (_at_least_double(_float_array(a)) for a in (x, xp, fp))
    if np.ndim(xp) != 1 or np.ndim(fp) != 1:
        raise ValueError(f"np.interp: xp and fp must be 1-d sequences, got shapes "
                         f"{shape_of(xp)} and {shape_of(fp)}")
    if shape_of(xp) != shape_of(fp):
        raise ValueError(f"np.interp: fp and xp are not of the same length "
                         f"({shape_of(fp)[0]} != {shape_of(xp)[0]})")
    if shape_of(xp)[0] == 0:
        raise ValueError("np.interp: array of sample points (xp) is empty")
    if np.iscomplexobj(x) or np.iscomplexobj(xp):
        raise TypeError("np.interp: x and xp must be real; only fp may be complex")
    if period is not None:
        if primal(period) == 0:
            raise ValueError("np.interp: period must be a non-zero value")
        x, xp, fp = _periodic(x, xp, fp, period)
        left = right = None
    n = shape_of(xp)[0]
    if n == 1:
        inside = fp[0] + 0 * x   # the one sample, broadcast to x's shape
    else:
        j = _segment(xp, x)
        x0, f0 = _take(xp, j), _take(fp, j)
        x1, f1 = _take(xp, j + 1), _take(fp, j + 1)
        width = x1 - x0
        # A repeated sample point gives a zero-width segment; the where keeps 0/0 out of the
        # derivative (NumPy then returns the segment's end value too).
        flat = width == 0
        slope = (f1 - f0) / np.where(flat, 1.0, width)
        inside = np.where(flat, f1, f0 + slope * (x - x0))
    # (comparisons of traced values: masks that a compiled call computes again, no guard)
    out = np.where(x < xp[0], fp[0] if left is None else left, inside)
    return numpy_scalar(np.where(x > xp[-1], fp[-1] if right is None else right, out))


# -- cross ----------------------------------------------------------------------------------------
def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """np.cross of 2- and 3-vectors along any axes; 2-vectors are taken as having z = 0, and
    two 2-vectors give the scalar z-component (as NumPy does, with its DeprecationWarning).

    >>> cross(np.array([1.0, 0.0, 0.0]), np.array([0.0, 1.0, 0.0]))
    array([0., 0., 1.])
    """
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = _float_array(a), _float_array(b)
    a = np.moveaxis(a, normalize_axis_index(axisa, np.ndim(a)), -1)
    b = np.moveaxis(b, normalize_axis_index(axisb, np.ndim(b)), -1)
    na, nb = shape_of(a)[-1], shape_of(b)[-1]
    if na not in (2, 3) or nb not in (2, 3):
        raise ValueError(f"incompatible dimensions for cross product (dimension must be 2 or 3): "
                         f"a has {na} and b has {nb} components")
    if na == 2 or nb == 2:
        warnings.warn("Arrays of 2-dimensional vectors are deprecated. Use arrays of "
                      "3-dimensional vectors instead. (deprecated in NumPy 2.0)",
                      DeprecationWarning, stacklevel=3)
    if na == nb == 2:
        return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]
    a, b = _as_3d(a), _as_3d(b)
    result_ndim = len(np.broadcast_shapes(shape_of(a), shape_of(b)))
    c = _cross3(a, b)
    return np.moveaxis(c, -1, normalize_axis_index(axisc, result_ndim))


def _as_3d(v):
    """A 2-vector (x, y) as the 3-vector (x, y, 0); a 3-vector unchanged."""
    if shape_of(v)[-1] == 3:
        return v
    zeros = array_module(v).zeros(shape_of(v)[:-1] + (1,), dtype=peek(v).dtype)
    return np.concatenate([v, zeros], axis=-1)


# -- real_if_close --------------------------------------------------------------------------------
def real_if_close(a, tol=100):
    """np.real_if_close: the real part when every imaginary part is within `tol` machine
    epsilons of zero (the choice is made on the values), else `a` unchanged.

    >>> real_if_close(np.array([1.0 + 1e-20j, 2.0]))
    array([1., 2.])
    """
    if not np.iscomplexobj(a):
        return a
    if tol > 1:
        tol = np.finfo(as_array(peek(a)).dtype).eps * tol   # (a Python complex has no dtype)
    # A decision on the traced values: a compiled call checks that it holds again (no guard
    # on the values themselves)
    return np.real(a) if bool(np.all(np.abs(np.imag(a)) < tol)) else a


# -- unwrap ---------------------------------------------------------------------------------------
def _unwrap_correction(p, discont, axis, period):
    """The cumulative multiples of `period` that np.unwrap adds to p[1:] along `axis`, by
    NumPy's own steps (so p[1:] + correction has NumPy's bits)."""
    dd = np.diff(p, axis=axis)
    if discont is None:
        discont = period / 2
    dtype = np.result_type(dd, period)
    if np.issubdtype(dtype, np.integer):
        interval_high, rem = divmod(period, 2)
        boundary_ambiguous = rem == 0
    else:
        interval_high, boundary_ambiguous = period / 2, True
    interval_low = -interval_high
    ddmod = np.mod(dd - interval_low, period) + interval_low
    if boundary_ambiguous:
        np.copyto(ddmod, interval_high, where=(ddmod == interval_low) & (dd > 0))
    ph_correct = ddmod - dd
    np.copyto(ph_correct, 0, where=abs(dd) < discont)
    return ph_correct.cumsum(axis)


# The correction depends on the values: a compiling trace replays it on each call's.
_inactive_unwrap_correction = inactive(_unwrap_correction)


def unwrap(p, discont=None, axis=-1, *, period=2 * np.pi):
    """np.unwrap: p plus piecewise-constant multiples of `period`, so the derivative passes
    straight through (a traced `discont` only moves the jumps: its derivative is zero).

    >>> unwrap(np.array([0.0, 3.0, -3.0]))
    array([0.        , 3.        , 3.28318531])
    """
    if isinstance(period, Tracer):
        raise NotImplementedError(
            "np.unwrap with a traced `period` is not supported: the result moves by whole "
            "multiples of it; pass a plain period (tape.primal(period))")
    axis = normalize_axis_index(axis, np.ndim(p))
    correction = _inactive_unwrap_correction(p, primal(discont), axis, period)
    # NumPy's dtype: that of np.diff(p) (p's own, bool for bool) with the period
    dtype = np.result_type(as_array(peek(p)).dtype, period)
    later = _along(axis, slice(1, None), np.ndim(p))
    unwrapped = p.astype(dtype)   # a copy, as np.array(p, copy=True, dtype=dtype)
    unwrapped[later] = p[later] + correction
    return unwrapped


for _np_fn, _rule in [(np.gradient, gradient), (np.trapezoid, trapezoid), (np.interp, interp),
                      (np.cross, cross), (np.real_if_close, real_if_close),
                      (np.unwrap, unwrap)]:
    register_function(_np_fn, _rule)

# Convolution and polynomials.
from . import numerical_poly  # noqa: E402,F401
