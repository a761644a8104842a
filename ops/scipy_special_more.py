"""More scipy.special ufuncs on traced values: the inverses of the incomplete gamma and beta
functions (in their probability argument), erfi, dawsn, the exponential integrals exp1 and
expi, ndtri_exp, and SciPy's own exp2, exp10, expm1, log1p, cbrt and cosm1 (separate ufunc
objects from NumPy's, so they need rules of their own).

The inverses take their derivative from their result: d/dy P^-1(a, y) = 1 / P'(P^-1(a, y)).
Their shape parameters have no closed-form derivative (NotImplementedError when
differentiated). erfi, dawsn, expm1 and log1p accept complex input; the rest are real only.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.special as sc

from .scipy_special_gamma import _beta_density, _gamma_density
from .scipy_special_rules import asymptotic_beyond, no_closed_form, special_ufunc

_SHAPE = "has no closed form (it needs a series or quadrature)"
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_SQRT_2PI = math.sqrt(2.0 * math.pi)
_LN2, _LN10 = math.log(2.0), math.log(10.0)


def _inverse_gamma_slope(a, x):
    """1 / (d/dx gammainc(a, x)) = x^(1-a) e^x gamma(a), from the density that stays exact at
    large shapes (the plain exponent lost log10(a) digits: 1e-7 at a = 1e8)."""
    with np.errstate(divide="ignore"):
        return 1.0 / _gamma_density(a, x)


def _inverse_beta_slope(a, b, x):
    """1 / (d/dx betainc(a, b, x)) = B(a, b) x^(1-a) (1-x)^(1-b) (as `_inverse_gamma_slope`)."""
    with np.errstate(divide="ignore"):
        return 1.0 / _beta_density(a, b, x)


gammaincinv = special_ufunc(sc.gammaincinv, no_closed_form("a", _SHAPE),
                            lambda a, y, ans: _inverse_gamma_slope(a, ans), uses_ans=True)
gammainccinv = special_ufunc(sc.gammainccinv, no_closed_form("a", _SHAPE),
                             lambda a, y, ans: -_inverse_gamma_slope(a, ans), uses_ans=True)
betaincinv = special_ufunc(sc.betaincinv, no_closed_form("a", _SHAPE),
                           no_closed_form("b", _SHAPE),
                           lambda a, b, y, ans: _inverse_beta_slope(a, b, ans), uses_ans=True)

erfi = special_ufunc(sc.erfi, lambda x, ans: _TWO_OVER_SQRT_PI * np.exp(x * x),
                     complex_ok=True)
def _dawsn_slope(x, ans):
    """1 - 2 x dawsn(x), which cancels for large real |x|: beyond |x| = 50 the asymptotic
    series -(t/2) (1 + 3t/2 + 15t^2/4 + 105t^3/8 + 945t^4/16), t = 1/x^2."""
    return asymptotic_beyond(
        x, 50.0, 1.0 - 2.0 * x * ans,
        lambda t: -(0.5 * t) * (1.0 + t * (1.5 + t * (3.75 + t * (13.125 + t * 59.0625)))),
        even=True)


dawsn = special_ufunc(sc.dawsn, _dawsn_slope, uses_ans=True, complex_ok=True)
exp1 = special_ufunc(sc.exp1, lambda x, ans: -np.exp(-x) / x)
def _expi_slope(x, ans):
    """e^x / x, as exp(x - log x) for large x, where e^x alone overflows (709.8 < x < 716)."""
    big = x > 700
    return np.where(big, np.exp(x - np.log(np.where(big, x, 1.0))),
                    np.exp(np.where(big, 0.0, x)) / x)


expi = special_ufunc(sc.expi, _expi_slope)
ndtri_exp = special_ufunc(sc.ndtri_exp, lambda y, ans: _SQRT_2PI * np.exp(y + 0.5 * (ans * ans)),
                          uses_ans=True)

exp2 = special_ufunc(sc.exp2, lambda x, ans: _LN2 * ans, uses_ans=True)
exp10 = special_ufunc(sc.exp10, lambda x, ans: _LN10 * ans, uses_ans=True)
expm1 = special_ufunc(sc.expm1, lambda x, ans: np.exp(x), complex_ok=True)   # (not ans + 1)
# np.add, not +: a Python float x = -1 gives inf (the limit), not a ZeroDivisionError.
log1p = special_ufunc(sc.log1p, lambda x, ans: 1.0 / np.add(1.0, x), complex_ok=True)
cbrt = special_ufunc(sc.cbrt, lambda x, ans: 1.0 / (3.0 * (ans * ans)), uses_ans=True)
cosm1 = special_ufunc(sc.cosm1, lambda x, ans: -np.sin(x))
