"""Convolution and polynomials: np.convolve, np.correlate, np.polyval, np.polyfit.

Both convolutions are slices of one primitive, the full discrete convolution
``conv_full(a, v)[k] = sum_i a[i] v[k - i]`` (length n + m - 1). It is bilinear, so its reverse
rule is two more full convolutions with a reversed argument (hence differentiable again), and
its forward rule the sum of the two partial convolutions. Complex inputs follow the transpose
convention of the other rules (docs/complex.md): conv_full itself conjugates nothing, and
np.correlate's conjugation of its second argument is an explicit np.conj.

>>> from tape import autodiff, Reverse, Active
>>> (ga, gv), = autodiff(Reverse, lambda a, v: np.sum(np.convolve(a, v)), Active,
...                      Active(np.array([1.0, 2.0])), Active(np.array([3.0, 4.0, 5.0])))
>>> ga, gv
(array([12., 12.]), array([3., 3., 3.]))

np.polyval is Horner's rule on traced values. np.polyfit is NumPy's own algorithm (a scaled
Vandermonde matrix and np.linalg.lstsq) written with differentiable ops, so it is
differentiable in y, x and w wherever the fit has full rank.
"""
from __future__ import annotations

import warnings

import numpy as np

from tape.backend import array_module
from tape.core import Tracer, is_complex, peek
from tape.rules import register_function

from ._util import add_tangents, as_array, defprimitive, shape_of


# -- the full convolution -------------------------------------------------------------------------
def _conv_full_impl(a, v):
    return array_module(a).convolve(a, v, mode="full")


def _conv_full_augmented(cfg, a, v):
    return conv_full(a, v), (a if cfg.active[1] else None, v if cfg.active[0] else None,
                             shape_of(a)[0], shape_of(v)[0])


def _conv_full_reverse(cfg, saved, g):
    # out[k] = sum_i a[i] v[k-i]:  ga[i] = sum_k g[k] v[k-i],  gv[j] = sum_k g[k] a[k-j].
    # Each is the 'valid' correlation of g with the other argument: O(n m) operations, where a
    # window of a full convolution computes all of it (O(n^2) for the kernel's cotangent).
    a, v, n, m = saved
    return (_correlate_valid(g, v) if cfg.active[0] else None,
            _correlate_valid(g, a) if cfg.active[1] else None)


def _correlate_valid(g, w):
    """sum_k g[k] w[k - j] for each j: np.correlate(g, w, 'valid') without its conjugate (a
    derivative under an outer level goes through np.correlate's own rule)."""
    return array_module(peek(g)).correlate(g, np.conj(w) if is_complex(w) else w, mode="valid")


def _conv_full_forward(cfg, primals, tangents):
    a, v = primals
    ta, tv = tangents
    return conv_full(a, v), add_tangents(None if ta is None else conv_full(ta, v),
                                         None if tv is None else conv_full(a, tv))


conv_full = defprimitive("conv_full", _conv_full_impl, _conv_full_augmented,
                         _conv_full_reverse, _conv_full_forward)


def _vector(x, name, fn):
    if np.ndim(x) != 1:
        raise ValueError(f"np.{fn}: {name} must be one-dimensional, got shape {shape_of(x)}")
    if shape_of(x)[0] == 0:
        raise ValueError(f"{name} cannot be empty")
    return as_array(x)


def _window(full, n, m, mode, offset_same):
    """The `mode` window of a full convolution of lengths n and m."""
    if mode in ("full", 2):
        return full
    k = min(n, m)
    if mode in ("valid", 0):
        return full[k - 1:k - 1 + max(n, m) - k + 1]
    if mode in ("same", 1):
        return full[offset_same:offset_same + max(n, m)]
    raise ValueError(f"mode must be one of 'valid', 'same', or 'full' (got {mode!r})")


def convolve(a, v, mode="full"):
    """np.convolve of 1-d arrays in mode 'full', 'same' or 'valid', real or complex.

    >>> convolve(np.array([1.0, 2.0, 3.0]), np.array([0.0, 1.0, 0.5]), mode="same")
    array([1. , 2.5, 4. ])
    """
    a, v = _vector(a, "a", "convolve"), _vector(v, "v", "convolve")
    n, m = shape_of(a)[0], shape_of(v)[0]
    return _window(conv_full(a, v), n, m, mode, (min(n, m) - 1) // 2)


def correlate(a, v, mode="valid"):
    """np.correlate: ``c[k] = sum_n a[n + k] * conj(v[n])``, modes as np.convolve.

    >>> correlate(np.array([1.0, 2.0, 3.0]), np.array([0.0, 1.0, 0.5]), mode="full")
    array([0.5, 2. , 3.5, 3. , 0. ])
    """
    a, v = _vector(a, "a", "correlate"), _vector(v, "v", "correlate")
    n, m = shape_of(a)[0], shape_of(v)[0]
    w = v[::-1]
    if np.iscomplexobj(w):
        w = np.conj(w)
    # NumPy centres 'same' one place later when v is the longer argument.
    k = min(n, m)
    return _window(conv_full(a, w), n, m, mode, k // 2 if n < m else (k - 1) // 2)


# -- polyval --------------------------------------------------------------------------------------
def polyval(p, x):
    """np.polyval by Horner's rule, differentiable in the coefficients `p` and in `x`.

    >>> polyval(np.array([1.0, 0.0, -2.0]), np.array([0.0, 2.0]))
    array([-2.,  2.])
    """
    if isinstance(p, np.poly1d) or isinstance(x, np.poly1d):
        raise NotImplementedError("np.polyval with np.poly1d arguments is not supported on "
                                  "traced values; pass the coefficient array")
    if isinstance(p, (list, tuple)) and not any(isinstance(c, Tracer) for c in p):
        p = np.asarray(p)   # as NumPy does: [1.0, 2.0] is float64, whatever x's dtype
    elif not isinstance(p, (Tracer, list, tuple)):
        p = as_array(p)
    x = as_array(x)
    y = np.zeros_like(peek(x))
    for k in range(len(p)):
        y = y * x + p[k]
    return y


# -- polyder, polyint -----------------------------------------------------------------------------
def _coefficients(p, name):
    if isinstance(p, np.poly1d):
        raise NotImplementedError(f"np.{name} of an np.poly1d is not supported on traced "
                                  "values; pass the coefficient array")
    return p if isinstance(p, Tracer) else as_array(p)


def polyder(p, m=1):
    """np.polyder: the m-th derivative's coefficients, linear in `p` (NumPy's own steps).

    >>> polyder(np.array([1.0, 2.0, 3.0, 4.0]), 2)
    array([6., 4.])
    """
    m = int(m)
    if m < 0:
        raise ValueError("Order of derivative must be positive (see polyint)")
    p = _coefficients(p, "polyder")
    for _ in range(m):
        n = len(p) - 1
        p = p[:-1] * np.arange(n, 0, -1)
    return p


def polyint(p, m=1, k=None):
    """np.polyint: the m-th antiderivative's coefficients with integration constants `k`
    (traced or not), linear in `p` and `k`.

    >>> polyint(np.array([3.0, 2.0, 1.0]), k=5.0)
    array([1., 1., 1., 5.])
    """
    m = int(m)
    if m < 0:
        raise ValueError("Order of integral must be positive (see polyder)")
    if k is None:
        k = np.zeros(m, float)
    k = np.atleast_1d(k if isinstance(k, Tracer) else as_array(k))
    if len(k) == 1 and m > 1:
        k = k[0] * np.ones(m, float)
    if len(k) < m:
        raise ValueError("k must be a scalar or a rank-1 array of length 1 or >m.")
    p = _coefficients(p, "polyint")
    for i in range(m):
        p = np.concatenate((p / np.arange(len(p), 0, -1), k[i:i + 1]))
    return p


# -- polyfit --------------------------------------------------------------------------------------
def _vandermonde(x, order):
    """The columns x**(order-1), ..., x, 1, built by repeated products (so the derivative at
    x = 0 has no 0 * inf)."""
    # (NumPy's vander promotes with int: float32 points give float64 columns, and fit)
    columns = [np.ones_like(peek(x), dtype=np.promote_types(peek(x).dtype, np.int_))]
    for _ in range(order - 1):
        columns.append(columns[-1] * x)
    return np.stack(columns[::-1], axis=1)


def _check_polyfit(x, y, deg, w):
    if deg < 0:
        raise ValueError("expected deg >= 0")
    if np.ndim(x) != 1:
        raise TypeError(f"expected 1D vector for x, got shape {shape_of(x)}")
    if shape_of(x)[0] == 0:
        raise TypeError("expected non-empty vector for x")
    if np.ndim(y) < 1 or np.ndim(y) > 2:
        raise TypeError(f"expected 1D or 2D array for y, got shape {shape_of(y)}")
    if shape_of(x)[0] != shape_of(y)[0]:
        raise TypeError(f"expected x and y to have same length ({shape_of(x)[0]} != "
                        f"{shape_of(y)[0]})")
    if w is not None:
        if np.ndim(w) != 1:
            raise TypeError(f"expected a 1-d array for weights w, got shape {shape_of(w)}")
        if shape_of(w)[0] != shape_of(y)[0]:
            raise TypeError("expected w and y to have the same length")


def polyfit(x, y, deg, rcond=None, full=False, w=None, cov=False):
    """np.polyfit (least squares), differentiable in y, x and w while the fit has full rank.

    `full=True` returns (coefficients, residuals, rank, singular values, rcond) as NumPy does;
    the rank and rcond carry no derivative. `cov=True` (or "unscaled") also returns the
    covariance of the coefficients, differentiable as well.

    >>> polyfit(np.array([0.0, 1.0, 2.0]), np.array([1.0, 3.0, 5.0]), 1).round(12)
    array([2., 1.])
    """
    order = int(deg) + 1
    x = as_array(x) + 0.0
    y = as_array(y) + 0.0
    _check_polyfit(x, y, int(deg), w)
    if rcond is None:
        rcond = shape_of(x)[0] * np.finfo(peek(x).dtype).eps
    lhs, rhs = _vandermonde(x, order), y
    if w is not None:
        w = as_array(w) + 0.0
        lhs = lhs * w[:, None]
        rhs = rhs * (w if np.ndim(rhs) == 1 else w[:, None])
    scale = np.sqrt(np.sum(lhs * lhs, axis=0))
    c, resids, rank, s = np.linalg.lstsq(lhs / scale, rhs, rcond=rcond)
    c = (c.T / scale).T
    if rank != order and not full:
        warnings.warn("Polyfit may be poorly conditioned", np.exceptions.RankWarning,
                      stacklevel=2)
    if full:
        return c, resids, rank, s, rcond
    if cov:
        return c, _covariance(lhs / scale, scale, resids, cov, shape_of(x)[0], order, np.ndim(y))
    return c


def _covariance(lhs, scale, resids, cov, n, order, y_ndim):
    """polyfit's coefficient covariance, as NumPy forms it from the scaled system."""
    base = np.linalg.inv(lhs.T @ lhs) / (scale[:, None] * scale[None, :])
    if cov == "unscaled":
        return base if y_ndim == 1 else base[:, :, None]
    if n <= order:
        raise ValueError("the number of data points must exceed order to scale the covariance "
                         "matrix")
    fac = resids / (n - order)
    return base * fac if y_ndim == 1 else base[:, :, None] * fac


for _np_fn, _rule in [(np.convolve, convolve), (np.correlate, correlate), (np.polyval, polyval),
                      (np.polyfit, polyfit), (np.polyder, polyder), (np.polyint, polyint)]:
    register_function(_np_fn, _rule)
