"""tape.scipy.stats: differentiable counterparts of scipy.stats' distributions.

`norm`, `t`, `beta`, `gamma`, `chi2` (logpdf, pdf, cdf, logcdf, sf, logsf), `poisson`
(logpmf, pmf, cdf, logcdf, sf, logsf), `dirichlet` (logpdf, pdf) and `multivariate_normal`
(logpdf, pdf; cdf on plain values only), with SciPy's names, signatures, broadcasting and
results outside the support. They are compositions of differentiable NumPy calls and
scipy.special ufuncs, so they work in forward and reverse mode and nest to any order. The
details (what is not differentiable, and what raises) are in `stats_continuous`,
`stats_discrete` and `stats_multivariate`.

>>> from tape import gradient, Reverse
>>> x = np.array([0.5, -1.0, 2.0])
>>> gradient(Reverse, lambda s: np.sum(norm.logpdf(x, scale=s)), 1.0)   # sum(x^2)/s^3 - n/s
(2.25,)
"""
from .stats_continuous import beta, chi2, gamma, norm, t  # noqa: F401
from .stats_discrete import poisson  # noqa: F401
from .stats_multivariate import dirichlet, multivariate_normal  # noqa: F401

__all__ = ["norm", "t", "beta", "gamma", "chi2", "poisson", "dirichlet", "multivariate_normal"]
