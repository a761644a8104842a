"""tape.scipy.special: differentiable counterparts of scipy.special.

SciPy's special functions are mostly ufuncs (`gammaln`, `digamma`, `ndtr`, `xlogy`, ...):
called on a traced value they dispatch through NumPy's ufunc protocol to the rules registered
in `ops.scipy_special`, so `scipy.special.gammaln(x)` is differentiable as it stands. They are
re-exported here so that one import serves every name. The functions that are *not* ufuncs
live here: `logsumexp` (with SciPy's `b=` weights and `return_sign`), `softmax` and
`log_softmax`, with SciPy's signatures (note that SciPy's softmax reduces over every axis by
default, unlike `ops.softmax`).

>>> from tape import gradient, Reverse
>>> x = np.array([0.5, 1.5, -1.0])
>>> g, = gradient(Reverse, lambda x: logsumexp(x), x)
>>> bool(np.allclose(g, softmax(x)))
True
>>> g, = gradient(Reverse, lambda x: gammaln(x).sum(), np.array([1.0, 2.0]))
>>> bool(np.allclose(g, digamma(np.array([1.0, 2.0]))))
True

Conventions:

- logsumexp without `return_sign` is NaN where the weighted sum is negative, as in SciPy; its
  derivative there is NaN too (never a finite number of an undefined value).
- `return_sign=True` returns `(log|s|, sign(s))`; the sign is piecewise constant (no
  derivative) and 0 where the sum is 0 (then the log is -inf).
"""
from __future__ import annotations

from typing import Any

import numpy as np

import scipy.special as _sc

from ops import nn as _nn
from ops._util import dtype_of
from tape.core import Tracer, peek
from tape.inactive_code import inactive
from tape.rule_tables import array_of_sequence
from tape.tracer import UFUNC_RULES

# The differentiable ufuncs (their rules are in ops.scipy_special) and the two Python
# functions built there, re-exported: one import place for every name.
from scipy.special import (  # noqa: F401  (re-exports)
    beta, betainc, betaln, digamma, entr, erf, erfc, erfcinv, erfcx, erfinv, expit, gamma,
    gammainc, gammaincc, gammaln, i0, i0e, i1, i1e, iv, ive, j0, j1, jn, jv, k0, k0e, k1, k1e,
    kl_div, kv, kve, log_expit, log_ndtr, loggamma, logit, ndtr, ndtri, psi, rel_entr, rgamma,
    xlog1py, xlogy, y0, y1, yn, yv, zeta)
from ops.scipy_special import multigammaln, polygamma  # noqa: F401  (re-exports)

UFUNCS = ("beta", "betainc", "betaln", "digamma", "entr", "erf", "erfc", "erfcinv", "erfcx",
          "erfinv", "expit", "gamma", "gammainc", "gammaincc", "gammaln", "i0", "i0e", "i1",
          "i1e", "iv", "ive", "j0", "j1", "jn", "jv", "k0", "k0e", "k1", "k1e", "kl_div", "kv",
          "kve", "log_expit", "log_ndtr", "loggamma", "logit", "ndtr", "ndtri", "psi",
          "rel_entr", "rgamma", "xlog1py", "xlogy", "y0", "y1", "yn", "yv", "zeta")

__all__ = ["logsumexp", "softmax", "log_softmax", "multigammaln", "polygamma", *UFUNCS]


def __getattr__(name: str) -> Any:
    """Any other scipy.special ufunc that has a derivative rule (ops.scipy_special registers
    more than the names listed above), e.g. `gammaincinv`; names without one raise.

    >>> import tape.scipy.special as special
    >>> special.gammaincinv is __import__("scipy.special").special.gammaincinv
    True
    """
    ufunc = getattr(_sc, name, None)
    rule = UFUNC_RULES.get(ufunc) if isinstance(ufunc, np.ufunc) else None
    if rule is None or getattr(rule, "__hecate_inactive__", False):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r} (scipy.special."
                             f"{name} is not a differentiable ufunc)")
    return ufunc


def _axis_tuple(axis, ndim: int):
    """SciPy's `axis` (None, an int or a tuple) as a tuple of non-negative ints."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    for a in axes:
        if not -ndim <= a < ndim:
            raise np.exceptions.AxisError(int(a), ndim)
    return tuple(sorted(int(a) % ndim for a in axes))


def _drop(x, axes: tuple):
    """x (kept dims) with the reduced axes removed."""
    return np.reshape(x, tuple(n for i, n in enumerate(np.shape(x)) if i not in axes))


@inactive
def _shift(a, b, axes: tuple):
    """The max of a where b != 0 over `axes` (dims kept; 0 where none is finite)."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    counted = np.where(b != 0, a, -np.inf)
    m = np.max(counted, axis=axes, keepdims=True, initial=-np.inf) if a.size else np.zeros(
        tuple(1 if i in axes else n for i, n in enumerate(a.shape)))
    return np.where(np.isfinite(m), m, 0.0)


def _weighted_lse(a, b, axes: tuple):
    """(log|sum(b exp(a))|, sum) over `axes`, dims kept. The shift by the max of a is a
    constant (no derivative; a compiled function computes it again at each call): the result
    does not depend on it, so neither do its derivatives at any order, and no max() enters
    the tape."""
    m = _shift(a, b, axes)
    s = np.sum(b * np.exp(a - m), axis=axes, keepdims=True)
    return np.log(np.abs(s)) + m, s


_sign_of = inactive(np.sign)


def logsumexp(a: Any, axis: Any = None, b: Any = None, keepdims: bool = False,
              return_sign: bool = False) -> Any:
    """log(sum(b * exp(a))) over `axis`, computed without overflow (scipy.special.logsumexp).

    `b` (weights, broadcast against `a`) is differentiable too. With `return_sign=True` the
    result is `(log|s|, sign(s))`; otherwise a negative weighted sum gives NaN.

    >>> float(logsumexp(np.array([1000.0, 1000.0])))  # 1000 + log(2), no overflow
    1000.6931471805599
    >>> logsumexp(np.array([1.0, 2.0]), b=np.array([1.0, -2.0]), return_sign=True)
    (array(2.48988013), array(-1.))
    """
    a, b = array_of_sequence(a), array_of_sequence(b)
    if np.ndim(a) == 0:
        a = np.reshape(a, (1,))   # SciPy treats a 0-d input as 1-d (keepdims gives (1,))
    if b is None and not return_sign and np.size(peek(a)):   # (its size only: no guard)
        return _nn.logsumexp(a, axis=axis, keepdims=keepdims)   # the fused primitive
    if b is None:
        b = 1.0
    elif hasattr(peek(b), "dtype"):   # SciPy computes in the common dtype of a and b
        a_dtype = dtype_of(a)
        common = np.result_type(a_dtype, peek(b).dtype)
        if a_dtype != common:
            a = a.astype(common) if isinstance(a, Tracer) else np.asarray(a, dtype=common)
    shape = np.broadcast_shapes(np.shape(a), np.shape(b))
    axes = _axis_tuple(axis, len(shape))
    if np.shape(a) != shape:
        a = np.broadcast_to(a, shape)
    out, s = _weighted_lse(a, b, axes)
    sign = _sign_of(s)   # no derivative; a compiled function computes it again at each call
    if not return_sign:
        # NaN where the sum is negative, as a factor so that the derivative is NaN there too.
        out = out * np.where(sign < 0, np.nan, 1.0).astype(np.result_type(peek(out)))
    if not keepdims:
        out, sign = _drop(out, axes), _drop(sign, axes)
    return (out, sign) if return_sign else out


def softmax(x: Any, axis: Any = None) -> Any:
    """exp(x) / sum(exp(x)) over `axis` (default: every axis, as scipy.special.softmax).

    >>> softmax(np.array([[1.0, 1.0], [1.0, 1.0]]))
    array([[0.25, 0.25],
           [0.25, 0.25]])
    >>> softmax(np.array([[0.0, 0.0], [0.0, 1000.0]]), axis=1)
    array([[0.5, 0.5],
           [0. , 1. ]])
    """
    return _nn.softmax(array_of_sequence(x), axis=axis)


def log_softmax(x: Any, axis: Any = None) -> Any:
    """x - logsumexp(x) over `axis` (default: every axis, as scipy.special.log_softmax).

    >>> log_softmax(np.array([0.0, 1000.0]))
    array([-1000.,     0.])
    """
    return _nn.log_softmax(array_of_sequence(x), axis=axis)
