"""The Poisson distribution of tape.scipy.stats (scipy.stats.poisson).

Differentiable in the rate `mu`; the count `k` and the integer shift `loc` have no derivative,
and a traced `k` or `loc` raises TypeError (pass them as plain arrays). As in SciPy, the pmf of
a non-integer or negative count is 0 (logpmf -inf), the CDF floors k, and mu < 0 gives NaN.

>>> from tape import gradient, Reverse
>>> gradient(Reverse, lambda mu: poisson.logpmf(3, mu), 2.0)   # k/mu - 1
(0.5,)
"""
from __future__ import annotations

from typing import Any

import numpy as np
import scipy.special as sc
from numpy.typing import ArrayLike

from .stats_common import as_value, guard, nan_where_invalid, no_derivative, select
from .stats_continuous import _Distribution


def _counts(name: str, k, mu, loc):
    """(k - loc as a plain float array, mu with safe values, where mu is valid)."""
    no_derivative(name, "k", k)
    no_derivative(name, "loc", loc)
    mu = as_value(mu)
    valid = mu >= 0
    return np.asarray(k, dtype=float) - np.asarray(loc), guard(valid, mu, 1.0), valid


def _tail_parts(name, k, mu, loc):
    """(floor(k) + 1, mu, k >= 0, valid) for the tail sums, which are incomplete gamma
    functions of order floor(k) + 1 (1 where k < 0, a value that is not used)."""
    k, mu, valid = _counts(name, k, mu, loc)
    k = np.floor(k)
    counted = k >= 0
    return np.where(counted, k, 0.0) + 1.0, mu, counted, valid


class _Poisson(_Distribution):
    """The Poisson distribution with rate `mu`: P(k) = mu^k e^-mu / k!."""

    name = "poisson"

    def logpmf(self, k: ArrayLike, mu: ArrayLike, loc: ArrayLike = 0) -> Any:
        """log P(X = k); differentiable in mu.

        >>> float(poisson.logpmf(0, 2.0))   # -mu
        -2.0
        """
        k, mu, valid = _counts("poisson.logpmf", k, mu, loc)
        counted = (k >= 0) & (k == np.floor(k))
        k = np.where(counted, k, 0.0)
        out = sc.xlogy(k, mu) - sc.gammaln(k + 1.0) - mu
        return nan_where_invalid(valid, select(counted, out, -np.inf))

    def pmf(self, k: ArrayLike, mu: ArrayLike, loc: ArrayLike = 0) -> Any:
        """P(X = k).

        >>> round(float(poisson.pmf(1, 2.0)), 6)   # 2 exp(-2)
        0.270671
        """
        return np.exp(self.logpmf(k, mu, loc))

    def cdf(self, k: ArrayLike, mu: ArrayLike, loc: ArrayLike = 0) -> Any:
        """P(X <= k) = gammaincc(floor(k) + 1, mu); differentiable in mu.

        >>> round(float(poisson.cdf(1, 2.0)), 6)   # 3 exp(-2)
        0.406006
        """
        order, mu, counted, valid = _tail_parts("poisson.cdf", k, mu, loc)
        return nan_where_invalid(valid, select(counted, sc.gammaincc(order, mu), 0.0))

    def logcdf(self, k: ArrayLike, mu: ArrayLike, loc: ArrayLike = 0) -> Any:
        """log P(X <= k).

        >>> float(poisson.logcdf(0, 2.0))
        -2.0
        """
        return np.log(self.cdf(k, mu, loc))

    def sf(self, k: ArrayLike, mu: ArrayLike, loc: ArrayLike = 0) -> Any:
        """P(X > k) = gammainc(floor(k) + 1, mu); differentiable in mu.

        >>> round(float(poisson.sf(0, 2.0)), 6)   # 1 - exp(-2)
        0.864665
        """
        order, mu, counted, valid = _tail_parts("poisson.sf", k, mu, loc)
        return nan_where_invalid(valid, select(counted, sc.gammainc(order, mu), 1.0))

    def logsf(self, k: ArrayLike, mu: ArrayLike, loc: ArrayLike = 0) -> Any:
        """log P(X > k).

        >>> round(float(poisson.logsf(0, 2.0)), 6)
        -0.145413
        """
        return np.log(self.sf(k, mu, loc))


poisson = _Poisson()

__all__ = ["poisson"]
