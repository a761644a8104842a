"""Fused elementwise activations: sigmoid, softplus, silu, gelu.

Each is one primitive with a cheap rule written with differentiable NumPy calls (second
derivatives work). silu and gelu keep the sigmoid / tanh / normal CDF they computed as
residuals, because in NumPy each recomputed op is another pass over memory. gelu's exact form
uses the normal CDF `ndtr` of `ops.special` (absolute error below 1e-15).

>>> sigmoid(np.array([-1000.0, 0.0, 1000.0]))
array([0. , 0.5, 1. ])
"""
from __future__ import annotations

import math

import numpy as np

from tape.backend import array_module

from ._util import as_float
from .special import ndtr, unary_primitive as _unary, unary_with_intermediate


# -- elementwise activations -----------------------------------------------------------------------
def _sigmoid_impl(x):
    x = as_float(x)
    xp = array_module(x)
    e = xp.abs(x, out=xp.empty_like(x))           # out=: a 0-d result stays an array
    e = xp.exp(xp.negative(e, out=e), out=e)     # exp(-|x|) never overflows
    r = xp.reciprocal(e + 1)                      # 1 / (1 + exp(-|x|)): sigmoid for x >= 0
    e *= r                                        # exp(-|x|) / (1 + exp(-|x|)): for x < 0
    xp.copyto(e, r, where=x >= 0)
    return e


def _softplus_impl(x):
    xp = array_module(x)
    return xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x)))


def _silu_parts(x):
    s = _sigmoid(x)
    return x * s, s


_sigmoid = _unary("sigmoid", _sigmoid_impl, lambda y: y * (1 - y), save_output=True)
_softplus = _unary("softplus", _softplus_impl, lambda x: _sigmoid(x))
_silu = unary_with_intermediate("silu", _silu_parts, lambda x, s: s * (1 + x * (1 - s)))


def sigmoid(x):
    """The logistic function 1 / (1 + exp(-x)), without overflow for large |x|.

    >>> sigmoid(np.array([-1000.0, 0.0, 1000.0]))
    array([0. , 0.5, 1. ])
    """
    return _sigmoid(x)


def softplus(x):
    """log(1 + exp(x)), computed as max(x, 0) + log1p(exp(-|x|)): exact for large |x|.

    >>> softplus(np.array([-1000.0, 0.0, 1000.0])) - np.array([0.0, np.log(2.0), 1000.0])
    array([0., 0., 0.])
    """
    return _softplus(x)


def silu(x):
    """x * sigmoid(x) (also called swish).

    >>> silu(np.array([0.0, 1000.0]))
    array([   0., 1000.])
    """
    return _silu(x)


# -- gelu ------------------------------------------------------------------------------------------
_GELU_K = math.sqrt(2.0 / math.pi)
_GELU_C = 0.044715


_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _gelu_tanh_parts(x):
    th = np.tanh(_GELU_K * (x + _GELU_C * x * x * x))
    return 0.5 * x * (1 + th), th


def _gelu_tanh_derivative(x, th):
    return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * _GELU_K * (1 + 3 * _GELU_C * x * x)


def _gelu_erf_parts(x):
    cdf = ndtr(x)
    return x * cdf, cdf


_gelu_tanh = unary_with_intermediate("gelu_tanh", _gelu_tanh_parts, _gelu_tanh_derivative)
_gelu_erf = unary_with_intermediate("gelu", _gelu_erf_parts, lambda x, cdf: cdf + x * (
    _INV_SQRT_2PI * np.exp(-0.5 * x * x)))


def gelu(x, approximate=False):
    """GELU: x * Phi(x) with the exact normal CDF, or with `approximate=True` the tanh form
    0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).

    >>> gelu(np.array([-1000.0, 0.0, 1000.0]))
    array([  -0.,    0., 1000.])
    >>> bool(abs(gelu(np.array(1.0), approximate=True) - 0.8411919906) < 1e-9)
    True
    """
    return _gelu_tanh(x) if approximate else _gelu_erf(x)
