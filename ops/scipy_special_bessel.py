"""Bessel functions of scipy.special on traced values, differentiable in their argument x:
i0, i0e, i1, i1e, iv, ive, k0, k0e, k1, k1e, kv, kve, j0, j1, jv (= jn), y0, y1, yn, yv; and
NumPy's own np.i0 (a function, not a ufunc).

Each derivative is the recurrence C_v'(x) = (C_{v-1}(x) - C_{v+1}(x)) / 2 (J, Y), with a plus
sign for I and a minus sign overall for K, so derivatives of every order stay within the same
family. The order v has no closed-form derivative: differentiating it raises
NotImplementedError; yn's order is an integer and has none at all. Real input only.

The exponentially scaled i0e, i1e, ive (times e^-|x|) have a kink at x = 0; there the
derivative is the average of the one-sided ones (the sign(0) = 0 convention of |x|' = 0).
kve (times e^x) is smooth.

The derivatives of the order-1 functions use the recurrences C_2 = (2/x) C_1 -+ C_0, which
need orders 0 and 1 only (j1' = j0 - j1/x, i1' = i0 - i1/x, k1' = -k0 - k1/x), and y1' takes
yn(2, x): on CPU many times cheaper than SciPy's general-order jv, yv, iv, kv, and on CuPy
arrays (where SciPy's ufuncs run as cupyx.scipy.special's) all there is: cupyx has the orders
0 and 1 and yn, but not jv, yv, iv, ive, kv or kve, which have no CuPy version themselves.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.special as sc

from tape.rules import register_function

from .scipy_special_rules import elementwise_rule, integer_argument, no_closed_form, special_ufunc

_ORDER = no_closed_form("v", "(the order) has no closed form")


def _iv(v, x):
    """iv(v, x) inside derivatives. SciPy's iv underflows to 0 too early (iv(1, 1e-300) is 0,
    not 5e-301) and is NaN at subnormal x, where the scaled ive is right; so |x| < 1 takes
    ive(v, x) e^|x|. At x = 0 itself iv is exact (0, 1 or inf) where ive may be NaN
    (ive(-0.5, 0)). The inner wheres keep each branch's argument in its own range."""
    small = (np.abs(x) < 1.0) & (x != 0)
    xs = np.where(small, x, 0.5)
    xb = np.where(small, 2.0, x)
    return np.where(small, sc.ive(v, xs) * np.exp(np.abs(xs)), sc.iv(v, xb))


def _i_prime(v, x):
    return 0.5 * (_iv(v - 1.0, x) + _iv(v + 1.0, x))


def _ive_prime(v, x, ans):
    return 0.5 * (sc.ive(v - 1.0, x) + sc.ive(v + 1.0, x)) - np.sign(x) * ans


def _kve_prime(v, x, ans):
    return ans - 0.5 * (sc.kve(v - 1.0, x) + sc.kve(v + 1.0, x))


# -- order-1 derivatives from orders 0 and 1 only --------------------------------------------
# (C_2 by the recurrence, C_1/x by a power series near 0.) On CPU these are as accurate as
# 0.5 (C_0 -+ C_2) with SciPy's general-order C_2 (checked against mpmath, x in 1e-6..700: the
# same median and worst relative errors to within 2x, both worst where the two terms cancel
# near an extremum), and 10-30x cheaper; on CuPy they are all cupyx.scipy.special has.

# j1(x)/x and i1(x)/x = sum_k (+-1)^k (x^2/4)^k / (2 k! (k+1)!), alternating for j1. Five terms
# are exact to rounding for |x| < 1e-3 and give the right derivatives at x = 0 up to the 8th.
_RATIO_SERIES = tuple(1.0 / (2.0 * math.factorial(k) * math.factorial(k + 1) * 4.0 ** k)
                      for k in range(5))
_SERIES_BELOW = 1e-3


def _ratio_series(x, alternating: bool):
    x2 = x * x
    total = 0.0
    for k in reversed(range(len(_RATIO_SERIES))):
        total = total * x2 + (-_RATIO_SERIES[k] if alternating and k % 2 else _RATIO_SERIES[k])
    return total


def _over_x(f, x, series):
    """f(x) / x for an odd f with f(x) ~ x/2 at 0 (j1, i1, i1e), finite at x = 0: below
    _SERIES_BELOW the power series `series(x)`, which also keeps every derivative of the ratio
    right at 0 (a plain f(x)/x is 0/0 there and loses all digits once x is subnormal)."""
    small = np.abs(x) < _SERIES_BELOW
    xs = np.where(small, 1.0, x)
    return np.where(small, series(x), f(xs) / xs)


def _j1_prime(x, ans):
    return sc.j0(x) - _over_x(sc.j1, x, lambda x: _ratio_series(x, alternating=True))


def _y1_prime(x, ans):
    return 0.5 * (sc.y0(x) - sc.yn(2, x))


def _i1_prime(x, ans):
    i0 = sc.i0(x)   # inf past |x| ~ 713, where i0 - i1/x would be inf - inf
    return np.where(np.isinf(i0), i0,
                    i0 - _over_x(sc.i1, x, lambda x: _ratio_series(x, alternating=False)))


def _i1e_prime(x, ans):
    ratio = _over_x(sc.i1e, x, lambda x: _ratio_series(x, alternating=False) * np.exp(-np.abs(x)))
    return sc.i0e(x) - ratio - np.sign(x) * ans


def _k1_prime(x, ans):
    return -sc.k0(x) - sc.k1(x) / x


def _k1e_prime(x, ans):
    return ans - sc.k0e(x) - ans / x


# -- modified Bessel functions of the first kind ----------------------------------------------
i0 = special_ufunc(sc.i0, lambda x, ans: sc.i1(x))
i1 = special_ufunc(sc.i1, _i1_prime)
i0e = special_ufunc(sc.i0e, lambda x, ans: sc.i1e(x) - np.sign(x) * ans, uses_ans=True)
i1e = special_ufunc(sc.i1e, _i1e_prime, uses_ans=True)
iv = special_ufunc(sc.iv, _ORDER, lambda v, x, ans: _i_prime(v, x))
ive = special_ufunc(sc.ive, _ORDER, _ive_prime, uses_ans=True)

# -- modified Bessel functions of the second kind ---------------------------------------------
k0 = special_ufunc(sc.k0, lambda x, ans: -sc.k1(x))
k1 = special_ufunc(sc.k1, _k1_prime)
k0e = special_ufunc(sc.k0e, lambda x, ans: ans - sc.k1e(x), uses_ans=True)
k1e = special_ufunc(sc.k1e, _k1e_prime, uses_ans=True)
kv = special_ufunc(sc.kv, _ORDER, lambda v, x, ans: -0.5 * (sc.kv(v - 1.0, x)
                                                            + sc.kv(v + 1.0, x)))
kve = special_ufunc(sc.kve, _ORDER, _kve_prime, uses_ans=True)

# -- Bessel functions of the first and second kind --------------------------------------------
j0 = special_ufunc(sc.j0, lambda x, ans: -sc.j1(x))
j1 = special_ufunc(sc.j1, _j1_prime)
jv = special_ufunc(sc.jv, _ORDER, lambda v, x, ans: 0.5 * (sc.jv(v - 1.0, x)
                                                           - sc.jv(v + 1.0, x)))
y0 = special_ufunc(sc.y0, lambda x, ans: -sc.y1(x))
y1 = special_ufunc(sc.y1, _y1_prime)
yv = special_ufunc(sc.yv, _ORDER, lambda v, x, ans: 0.5 * (sc.yv(v - 1.0, x)
                                                           - sc.yv(v + 1.0, x)))
yn = special_ufunc(sc.yn, integer_argument("n"),
                   lambda n, x, ans: 0.5 * (sc.yn(np.subtract(n, 1), x)
                                            - sc.yn(np.add(n, 1), x)))

# -- np.i0: NumPy's own modified Bessel function (an array function, not a ufunc) -------------
np_i0 = elementwise_rule("np.i0", np.i0, (lambda x, ans: sc.i1(x),))
register_function(np.i0, np_i0)
