"""The error function family and the normal distribution of scipy.special on traced values:
erf, erfc, erfcx, erfinv, erfcinv, ndtr, ndtri, log_ndtr.

erf, erfc and erfcx are holomorphic and accept complex input (their derivative formulas hold
for complex z); the others are real only. The inverse functions take their derivative from
their own result (1 / f'(f^-1(y))), so they are infinite at the ends of their domains (erfinv
at +-1, ndtri at 0 and 1), as the true derivatives are. log_ndtr's derivative, the ratio
pdf(x) / ndtr(x), is computed without cancellation in both tails.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.special as sc

from .scipy_special_rules import asymptotic_beyond, special_ufunc

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_HALF_SQRT_PI = 0.5 * math.sqrt(math.pi)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_SQRT_2PI = math.sqrt(2.0 * math.pi)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_SQRT_HALF = math.sqrt(0.5)


def _gauss(x):
    return np.exp(-(x * x))


def _d_log_ndtr(x, ans):
    # pdf(x) / ndtr(x). Left of 0 it is sqrt(2/pi) / erfcx(-x / sqrt 2), accurate far into the
    # tail where both pdf and ndtr underflow; right of 0 it is exp(-x^2/2 - log_ndtr(x)) / sqrt(2
    # pi), which tends to 0 where erfcx(-x / sqrt 2) would overflow. The inner wheres keep each
    # branch finite (and so its derivative) where it is not taken.
    right = x > 0
    xl = np.where(right, 0.0, x)
    xr = np.where(right, x, 0.0)
    left_value = _SQRT_2_OVER_PI / sc.erfcx(-_SQRT_HALF * xl)
    right_value = _INV_SQRT_2PI * np.exp(-0.5 * (xr * xr) - sc.log_ndtr(xr))
    return np.where(right, right_value, left_value)


erf = special_ufunc(sc.erf, lambda x, ans: _TWO_OVER_SQRT_PI * _gauss(x), complex_ok=True)
erfc = special_ufunc(sc.erfc, lambda x, ans: -_TWO_OVER_SQRT_PI * _gauss(x), complex_ok=True)
def _erfcx_slope(x, ans):
    """2 x erfcx(x) - 2/sqrt(pi), which cancels for large real x: beyond x = 50 the asymptotic
    series -(t/sqrt(pi)) (1 - 3t/2 + 15t^2/4 - 105t^3/8 + 945t^4/16), t = 1/x^2 (its next
    term is below 2e-15 of the sum there)."""
    return asymptotic_beyond(
        x, 50.0, 2.0 * x * ans - _TWO_OVER_SQRT_PI,
        lambda t: -(t / math.sqrt(math.pi)) * (1.0 + t * (-1.5 + t * (3.75 + t * (
            -13.125 + t * 59.0625)))))


erfcx = special_ufunc(sc.erfcx, _erfcx_slope, uses_ans=True, complex_ok=True)
erfinv = special_ufunc(sc.erfinv, lambda y, ans: _HALF_SQRT_PI * np.exp(ans * ans),
                       uses_ans=True)
erfcinv = special_ufunc(sc.erfcinv, lambda y, ans: -_HALF_SQRT_PI * np.exp(ans * ans),
                        uses_ans=True)
ndtr = special_ufunc(sc.ndtr, lambda x, ans: _INV_SQRT_2PI * np.exp(-0.5 * (x * x)))
ndtri = special_ufunc(sc.ndtri, lambda y, ans: _SQRT_2PI * np.exp(0.5 * (ans * ans)),
                      uses_ans=True)
log_ndtr = special_ufunc(sc.log_ndtr, _d_log_ndtr)
