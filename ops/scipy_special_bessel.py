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
"""
from __future__ import annotations

import numpy as np
import scipy.special as sc

from tape.rules import register_function

from .scipy_special_rules import elementwise_rule, integer_argument, no_closed_form, special_ufunc

_ORDER = no_closed_form("v", "(the order) has no closed form")


def _iv(v, x):
    """iv(v, x) inside derivatives. SciPy's iv underflows to 0 too early (iv(1, 1e-300) is 0,
    not 5e-301) and is NaN at subnormal x, where the scaled ive is right; so |x| < 1 takes
    ive(v, x) e^|x|. The inner wheres keep each branch's argument in its own range."""
    small = np.abs(x) < 1.0
    xs = np.where(small, x, 0.5)
    xb = np.where(small, 2.0, x)
    return np.where(small, sc.ive(v, xs) * np.exp(np.abs(xs)), sc.iv(v, xb))


def _i_prime(v, x):
    return 0.5 * (_iv(v - 1.0, x) + _iv(v + 1.0, x))


def _ive_prime(v, x, ans):
    return 0.5 * (sc.ive(v - 1.0, x) + sc.ive(v + 1.0, x)) - np.sign(x) * ans


def _kve_prime(v, x, ans):
    return ans - 0.5 * (sc.kve(v - 1.0, x) + sc.kve(v + 1.0, x))


# -- modified Bessel functions of the first kind ----------------------------------------------
i0 = special_ufunc(sc.i0, lambda x, ans: sc.i1(x))
i1 = special_ufunc(sc.i1, lambda x, ans: 0.5 * (sc.i0(x) + _iv(2.0, x)))
i0e = special_ufunc(sc.i0e, lambda x, ans: sc.i1e(x) - np.sign(x) * ans, uses_ans=True)
i1e = special_ufunc(sc.i1e, lambda x, ans: 0.5 * (sc.i0e(x) + sc.ive(2.0, x))
                    - np.sign(x) * ans, uses_ans=True)
iv = special_ufunc(sc.iv, _ORDER, lambda v, x, ans: _i_prime(v, x))
ive = special_ufunc(sc.ive, _ORDER, _ive_prime, uses_ans=True)

# -- modified Bessel functions of the second kind ---------------------------------------------
k0 = special_ufunc(sc.k0, lambda x, ans: -sc.k1(x))
k1 = special_ufunc(sc.k1, lambda x, ans: -0.5 * (sc.k0(x) + sc.kv(2.0, x)))
k0e = special_ufunc(sc.k0e, lambda x, ans: ans - sc.k1e(x), uses_ans=True)
k1e = special_ufunc(sc.k1e, lambda x, ans: ans - 0.5 * (sc.k0e(x) + sc.kve(2.0, x)),
                    uses_ans=True)
kv = special_ufunc(sc.kv, _ORDER, lambda v, x, ans: -0.5 * (sc.kv(v - 1.0, x)
                                                            + sc.kv(v + 1.0, x)))
kve = special_ufunc(sc.kve, _ORDER, _kve_prime, uses_ans=True)

# -- Bessel functions of the first and second kind --------------------------------------------
j0 = special_ufunc(sc.j0, lambda x, ans: -sc.j1(x))
j1 = special_ufunc(sc.j1, lambda x, ans: 0.5 * (sc.j0(x) - sc.jv(2.0, x)))
jv = special_ufunc(sc.jv, _ORDER, lambda v, x, ans: 0.5 * (sc.jv(v - 1.0, x)
                                                           - sc.jv(v + 1.0, x)))
y0 = special_ufunc(sc.y0, lambda x, ans: -sc.y1(x))
y1 = special_ufunc(sc.y1, lambda x, ans: 0.5 * (sc.y0(x) - sc.yv(2.0, x)))
yv = special_ufunc(sc.yv, _ORDER, lambda v, x, ans: 0.5 * (sc.yv(v - 1.0, x)
                                                           - sc.yv(v + 1.0, x)))
yn = special_ufunc(sc.yn, integer_argument("n"),
                   lambda n, x, ans: 0.5 * (sc.yn(np.subtract(n, 1), x)
                                            - sc.yn(np.add(n, 1), x)))

# -- np.i0: NumPy's own modified Bessel function (an array function, not a ufunc) -------------
np_i0 = elementwise_rule("np.i0", np.i0, (lambda x, ans: sc.i1(x),))
register_function(np.i0, np_i0)
