"""The logistic and information-theory functions of scipy.special on traced values: logit,
expit, log_expit, xlogy, xlog1py, entr, rel_entr, kl_div.

Conventions where the formulas meet 0 * log 0:

- xlogy(x, y) = x log y is 0 at x = 0 whatever y is (SciPy's convention). Its derivative in y,
  x / y, is 0 wherever x == 0, y == 0 included; its derivative in x is log y (-inf at y = 0,
  the true one-sided limit). xlog1py(x, y) likewise at x == 0, y == -1. Both accept complex
  input (x log y is holomorphic in each argument).
- entr(x) = -x log x: entr'(x) = -log(x) - 1, +inf at x = 0 (the one-sided limit).
- rel_entr(x, y) = x log(x / y) and kl_div(x, y) = x log(x / y) - x + y: at x = 0 the
  y-derivative is 0 (rel_entr) and 1 (kl_div), y = 0 included; the x-derivative is -inf there
  for y > 0, and NaN at x = y = 0 (the function jumps to inf for x > 0, y = 0).
- Outside their domains (x < 0 or y < 0, where SciPy returns -inf or inf, a constant) these
  derivatives are NaN rather than 0: the function is not differentiable there in any useful
  sense, and a NaN cannot be mistaken for a gradient.
"""
from __future__ import annotations

import numpy as np
import scipy.special as sc

from .scipy_special_rules import safe_ratio, special_ufunc


def _log_ratio(x, y):
    return np.log(x) - np.log(y)


def _in_domain(partial):
    """A partial of rel_entr or kl_div, NaN where x < 0 or y < 0 (SciPy's constant inf)."""
    def d(x, y, ans):
        return np.where((x < 0) | (y < 0), np.nan, partial(x, y))
    return d


# np.multiply / np.add rather than * and +: for Python floats the product is a NumPy float, so
# that at p = 0 or 1 the derivative is inf (as the limit) rather than a ZeroDivisionError.
logit = special_ufunc(sc.logit, lambda p, ans: 1.0 / np.multiply(p, 1.0 - p))
# expit(x) expit(-x), not ans (1 - ans): 1 - ans keeps no digits in the right tail
expit = special_ufunc(sc.expit, lambda x, ans: ans * sc.expit(-x), uses_ans=True)
log_expit = special_ufunc(sc.log_expit, lambda x, ans: sc.expit(-x))

xlogy = special_ufunc(sc.xlogy, lambda x, y, ans: np.log(y),
                      lambda x, y, ans: safe_ratio(x, y), complex_ok=True)
xlog1py = special_ufunc(sc.xlog1py, lambda x, y, ans: np.log1p(y),
                        lambda x, y, ans: safe_ratio(x, 1.0 + y), complex_ok=True)
entr = special_ufunc(sc.entr, lambda x, ans: -np.log(x) - 1.0)
rel_entr = special_ufunc(sc.rel_entr, _in_domain(lambda x, y: _log_ratio(x, y) + 1.0),
                         _in_domain(lambda x, y: -safe_ratio(x, y)))
kl_div = special_ufunc(sc.kl_div, _in_domain(_log_ratio),
                       _in_domain(lambda x, y: 1.0 - safe_ratio(x, y)))
