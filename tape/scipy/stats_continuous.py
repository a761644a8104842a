"""Continuous distributions of tape.scipy.stats: norm, t, beta, gamma, chi2.

Each is an object with SciPy's methods and signatures (`logpdf`, `pdf`, `cdf`, `logcdf`, `sf`,
`logsf`; shape parameters first, then `loc=0`, `scale=1`), written as compositions of
differentiable NumPy calls and scipy.special ufuncs, so every argument is differentiable in
forward and reverse mode, to any order, wherever the ufuncs are:

>>> from tape import gradient, Reverse
>>> gradient(Reverse, lambda mu: norm.logpdf(1.0, loc=mu), 0.25)   # (x - mu) / sigma^2
(0.75,)

The CDFs of t, beta, gamma and chi2 go through the regularized incomplete beta and gamma
functions, whose derivatives with respect to their shape parameters (t's `df`, beta's `a` and
`b`, gamma's `a`, chi2's `df`) have no closed form: differentiating a CDF with respect to a
shape parameter raises NotImplementedError (from the ufunc's rule); with respect to x, loc and
scale it works.

As in SciPy: outside the support logpdf is -inf (pdf 0) and the CDF is 0 or 1; invalid
parameters (scale <= 0, df <= 0, a <= 0, ...) give NaN, and the derivative there is NaN too.
t with df = inf is the normal distribution.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import scipy.special as sc
from numpy.typing import ArrayLike

from ops.scipy_special_rules import elementwise_rule, no_closed_form

from .stats_common import (_Distribution, as_value, guard, log_probability, log_scale,
                           nan_where_invalid, select, standardize)

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


# -- norm ------------------------------------------------------------------------------------------
def _norm_logpdf(z):
    return -0.5 * z * z - _LOG_SQRT_2PI


class _Norm(_Distribution):
    """The normal distribution N(loc, scale^2) (scipy.stats.norm)."""

    name = "norm"

    def logpdf(self, x: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Any:
        """log of the normal density.

        >>> float(norm.logpdf(0.0))   # -log(sqrt(2 pi))
        -0.9189385332046727
        """
        z, valid = standardize(x, loc, scale)
        return nan_where_invalid(valid, _norm_logpdf(z) - log_scale(scale, valid))

    def pdf(self, x: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Any:
        """The normal density.

        >>> round(float(norm.pdf(1.0, loc=1.0, scale=2.0)), 6)
        0.199471
        """
        return np.exp(self.logpdf(x, loc, scale))

    def cdf(self, x: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Any:
        """P(X <= x), through scipy.special.ndtr.

        >>> norm.cdf(np.array([0.0, 1.0]), loc=np.array([0.0, 1.0]))
        array([0.5, 0.5])
        """
        z, valid = standardize(x, loc, scale)
        return nan_where_invalid(valid, sc.ndtr(z))

    def logcdf(self, x: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Any:
        """log P(X <= x), through scipy.special.log_ndtr (accurate far in the left tail).

        >>> round(float(norm.logcdf(-40.0)), 3)
        -804.608
        """
        z, valid = standardize(x, loc, scale)
        return nan_where_invalid(valid, sc.log_ndtr(z))

    def sf(self, x: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Any:
        """P(X > x) = ndtr(-z), accurate in the right tail.

        >>> float(norm.sf(0.0, loc=0.0, scale=3.0))
        0.5
        """
        z, valid = standardize(x, loc, scale)
        return nan_where_invalid(valid, sc.ndtr(-z))

    def logsf(self, x: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Any:
        """log P(X > x) = log_ndtr(-z).

        >>> round(float(norm.logsf(40.0)), 3)
        -804.608
        """
        z, valid = standardize(x, loc, scale)
        return nan_where_invalid(valid, sc.log_ndtr(-z))


norm = _Norm()


# -- two CDFs scipy.special has as ufuncs without rules: stdtr (t) and betaincc (beta's sf) ------
# Private primitives (not routed from the ufuncs): differentiable in the variable, whose partial
# is the density; the shape parameters raise NotImplementedError when differentiated, as the
# incomplete gamma and beta functions of ops.scipy_special do.
_SHAPE = "has no closed form (it needs a series or quadrature)"


_SERIES_FROM = 50.0   # df / 2 from which the asymptotic series is exact to rounding


def _log_t_normaliser(df):
    """log(gamma((df + 1) / 2) / (gamma(df / 2) sqrt(pi df))), the log of the t density at 0.

    The two gammaln are each about (df/2) log(df/2), so their difference loses all digits
    for large df (an error of 2e-4 at df = 1e12; SciPy uses poch). From df/2 = 50 on, the
    asymptotic series of log(gamma(x + 1/2) / (gamma(x) sqrt(x))) in 1/x is used instead
    (exact to rounding there); each branch gets safe arguments so the other stays finite.

    >>> bool(np.isclose(_log_t_normaliser(1e12), -0.5 * np.log(2 * np.pi), rtol=1e-15))
    True
    """
    df = as_value(df)
    x = 0.5 * df
    large = x >= _SERIES_FROM
    # (log(pi df), not log(2 pi x): at a subnormal df, x underflows to 0 and the difference of
    # two infinities would be NaN where SciPy, and this, give -inf.)
    df_direct = guard(~large, df, 2.0)
    direct = (sc.gammaln(0.5 * df_direct + 0.5) - sc.gammaln(0.5 * df_direct)
              - 0.5 * np.log(np.pi * df_direct))
    if not np.any(large):
        return direct
    inv = 1.0 / guard(large, x, _SERIES_FROM)
    inv2 = inv * inv
    series = (-0.5 * np.log(2 * np.pi)
              + inv * (-1 / 8 + inv2 * (1 / 192 + inv2 * (-1 / 640 + inv2 * 17 / 14336))))
    return series if np.all(large) else np.where(large, series, direct)


def _t_density(df, z):
    half = 0.5 * (df + 1.0)
    return np.exp(_log_t_normaliser(df) - half * np.log1p(z * z / df))


_stdtr = elementwise_rule("scipy.special.stdtr", sc.stdtr,
                          [no_closed_form("df", _SHAPE), lambda df, z, ans: _t_density(df, z)])
def _log1p_square(w):
    """log(1 + w^2), also where w^2 overflows: 2 log|w| + log1p(w^-2) beyond |w| = 1."""
    w = as_value(w)
    big = (w > 1.0) | (w < -1.0)   # |w| > 1, by comparisons alone
    if not np.any(big):
        return np.log1p(w * w)
    wb = np.abs(guard(big, w, 2.0))
    far = 2.0 * np.log(wb) + np.log1p(1.0 / (wb * wb))
    if np.all(big):
        return far
    ws = guard(~big, w, 0.0)
    return np.where(big, far, np.log1p(ws * ws))


def _t_logcdf_value(df, z):
    """log stdtr(df, z), as t.logcdf computes it (see log_probability)."""
    with np.errstate(divide="ignore"):
        p = sc.stdtr(df, z)
        return np.where(p >= 0.5, np.log1p(-sc.stdtr(df, -z)), np.log(p))[()]


def _t_logcdf_slope(df, z, ans):
    # pdf / cdf as exp(log pdf - log cdf): far in a tail the density underflows while the CDF,
    # about |z|^-df, does not (df = 3 at z = -1e100: cdf 1e-300, slope 3e-100).
    log_pdf = _log_t_normaliser(df) - 0.5 * (df + 1.0) * _log1p_square(z / np.sqrt(df))
    return np.exp(log_pdf - ans)


_t_logcdf = elementwise_rule("scipy.stats.t.logcdf", _t_logcdf_value,
                             [no_closed_form("df", _SHAPE), _t_logcdf_slope], uses_ans=True)
_betaincc = elementwise_rule(
    "scipy.special.betaincc", sc.betaincc,
    [no_closed_form("a", _SHAPE), no_closed_form("b", _SHAPE),
     lambda a, b, x, ans: -np.exp(sc.xlogy(a - 1.0, x) + sc.xlog1py(b - 1.0, -x)
                                  - sc.betaln(a, b))])


# -- t ---------------------------------------------------------------------------------------------
def _t_parts(x, df, loc, scale):
    """(z, df with safe values, where df is finite, where the parameters are valid)."""
    z, valid = standardize(x, loc, scale)
    df = as_value(df)
    valid = valid & (df > 0)
    finite = np.isfinite(df)
    return z, guard(valid & finite, df, 1.0), finite, valid


def _norm_logcdf(z):
    """log ndtr(z) split at the median, as SciPy's t.logcdf takes it where df is infinite."""
    return log_probability(sc.ndtr(z), sc.ndtr(-z))


def _normal_if_infinite(finite, value, normal, z):
    """t with df = inf is the normal distribution: `normal(z)` where df is infinite."""
    return value if np.all(finite) else np.where(finite, value, normal(z))


class _T(_Distribution):
    """Student's t distribution with `df` degrees of freedom (scipy.stats.t)."""

    name = "t"

    def logpdf(self, x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0.0,
               scale: ArrayLike = 1.0) -> Any:
        """log of the t density; differentiable in x, df, loc and scale.

        >>> round(float(t.logpdf(0.0, 1.0)), 6)   # Cauchy: -log(pi)
        -1.14473
        """
        z, df, finite, valid = _t_parts(x, df, loc, scale)
        half = 0.5 * (df + 1.0)
        out = _log_t_normaliser(df) - half * np.log1p(z * z / df)
        out = _normal_if_infinite(finite, out, _norm_logpdf, z)
        return nan_where_invalid(valid, out - log_scale(scale, valid))

    def pdf(self, x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0.0,
            scale: ArrayLike = 1.0) -> Any:
        """The t density.

        >>> round(float(t.pdf(0.0, 1.0)), 6)   # Cauchy: 1/pi
        0.31831
        """
        return np.exp(self.logpdf(x, df, loc, scale))

    def cdf(self, x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0.0,
            scale: ArrayLike = 1.0) -> Any:
        """P(X <= x), through scipy.special.stdtr. Not differentiable in `df` (raises).

        >>> float(t.cdf(1.0, 1.0))   # Cauchy: 1/2 + arctan(1)/pi
        0.75
        """
        z, df, finite, valid = _t_parts(x, df, loc, scale)
        return nan_where_invalid(valid, _normal_if_infinite(finite, _stdtr(df, z), sc.ndtr, z))

    def logcdf(self, x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0.0,
               scale: ArrayLike = 1.0) -> Any:
        """log P(X <= x).

        >>> round(float(t.logcdf(1.0, 1.0)), 6)
        -0.287682
        """
        z, df, finite, valid = _t_parts(x, df, loc, scale)
        return nan_where_invalid(valid, _normal_if_infinite(finite, _t_logcdf(df, z),
                                                            _norm_logcdf, z))

    def sf(self, x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0.0,
           scale: ArrayLike = 1.0) -> Any:
        """P(X > x) = cdf(-x) by symmetry.

        >>> round(float(t.sf(1.0, 1.0)), 12)
        0.25
        """
        z, df, finite, valid = _t_parts(x, df, loc, scale)
        return nan_where_invalid(valid, _normal_if_infinite(finite, _stdtr(df, -z), sc.ndtr,
                                                            -z))

    def logsf(self, x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0.0,
              scale: ArrayLike = 1.0) -> Any:
        """log P(X > x).

        >>> round(float(t.logsf(1.0, 1.0)), 6)
        -1.386294
        """
        z, df, finite, valid = _t_parts(x, df, loc, scale)
        return nan_where_invalid(valid, _normal_if_infinite(finite, _t_logcdf(df, -z),
                                                            _norm_logcdf, -z))


t = _T()


# -- gamma and chi2 --------------------------------------------------------------------------------
def _gamma_parts(x, a, loc, scale):
    """(z with safe values, a with safe values, z >= 0, where the parameters are valid)."""
    z, valid = standardize(x, loc, scale)
    a = as_value(a)
    valid = valid & (a > 0)
    inside = z >= 0
    return guard(inside, z, 1.0), guard(valid, a, 1.0), inside, valid


def _gamma_cdf(parts):
    """gammainc(a, z) inside the support, 0 below it; `parts` as `_gamma_parts` gives them."""
    z, a, inside, valid = parts
    return nan_where_invalid(valid, select(inside, sc.gammainc(a, z), 0.0))


def _gamma_sf(parts):
    """gammaincc(a, z) inside the support (accurate in the right tail), 1 below it."""
    z, a, inside, valid = parts
    return nan_where_invalid(valid, select(inside, sc.gammaincc(a, z), 1.0))


class _Gamma(_Distribution):
    """The gamma distribution with shape `a` (scipy.stats.gamma): density x^(a-1) e^-x / G(a)."""

    name = "gamma"

    def logpdf(self, x: ArrayLike, a: ArrayLike, loc: ArrayLike = 0.0,
               scale: ArrayLike = 1.0) -> Any:
        """log of the gamma density; differentiable in x, a, loc and scale.

        >>> float(gamma.logpdf(1.0, 1.0))   # the exponential distribution: -x
        -1.0
        """
        z, a, inside, valid = _gamma_parts(x, a, loc, scale)
        out = sc.xlogy(a - 1.0, z) - z - sc.gammaln(a) - log_scale(scale, valid)
        return nan_where_invalid(valid, select(inside, out, -np.inf))

    def pdf(self, x: ArrayLike, a: ArrayLike, loc: ArrayLike = 0.0,
            scale: ArrayLike = 1.0) -> Any:
        """The gamma density.

        >>> round(float(gamma.pdf(2.0, 1.0, scale=2.0)), 6)   # exp(-1) / 2
        0.18394
        """
        return np.exp(self.logpdf(x, a, loc, scale))

    def cdf(self, x: ArrayLike, a: ArrayLike, loc: ArrayLike = 0.0,
            scale: ArrayLike = 1.0) -> Any:
        """P(X <= x) = gammainc(a, z). Not differentiable in `a` (raises).

        >>> round(float(gamma.cdf(1.0, 1.0)), 6)   # 1 - exp(-1)
        0.632121
        """
        return _gamma_cdf(_gamma_parts(x, a, loc, scale))

    def logcdf(self, x: ArrayLike, a: ArrayLike, loc: ArrayLike = 0.0,
               scale: ArrayLike = 1.0) -> Any:
        """log P(X <= x).

        >>> round(float(gamma.logcdf(1.0, 1.0)), 6)
        -0.458675
        """
        return log_probability(self.cdf(x, a, loc, scale), self.sf(x, a, loc, scale))

    def sf(self, x: ArrayLike, a: ArrayLike, loc: ArrayLike = 0.0,
           scale: ArrayLike = 1.0) -> Any:
        """P(X > x) = gammaincc(a, z), accurate in the right tail. Not differentiable in `a`.

        >>> round(float(gamma.sf(1.0, 1.0)), 6)   # exp(-1)
        0.367879
        """
        return _gamma_sf(_gamma_parts(x, a, loc, scale))

    def logsf(self, x: ArrayLike, a: ArrayLike, loc: ArrayLike = 0.0,
              scale: ArrayLike = 1.0) -> Any:
        """log P(X > x).

        >>> float(gamma.logsf(3.0, 1.0))   # -x for the exponential distribution
        -3.0
        """
        return log_probability(self.sf(x, a, loc, scale), self.cdf(x, a, loc, scale))


gamma = _Gamma()


_LOG_2 = float(np.log(2.0))


def _chi2_parts(x, df, loc, scale):
    """(z / 2, df / 2, z >= 0, valid): chi2(df) is gamma(df / 2) of z / 2. The support test is
    made on z itself, as SciPy makes it: halving a subnormal z can round it to zero."""
    z, df, inside, valid = _gamma_parts(x, df, loc, scale)
    return z * 0.5, df * 0.5, inside, valid


class _Chi2(_Distribution):
    """The chi-squared distribution with `df` degrees of freedom (scipy.stats.chi2): the gamma
    distribution with shape df/2 and scale 2."""

    name = "chi2"

    def logpdf(self, x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0.0,
               scale: ArrayLike = 1.0) -> Any:
        """log of the chi-squared density; differentiable in x, df, loc and scale.

        >>> float(chi2.logpdf(1.0, 2.0))   # exp(-x/2)/2
        -1.1931471805599454
        """
        z, df, inside, valid = _gamma_parts(x, df, loc, scale)
        half = df * 0.5   # SciPy's formula, on z itself (z / 2 can round a subnormal z to 0)
        out = (sc.xlogy(half - 1.0, z) - 0.5 * z - sc.gammaln(half) - _LOG_2 * half
               - log_scale(scale, valid))
        return nan_where_invalid(valid, select(inside, out, -np.inf))

    def pdf(self, x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0.0,
            scale: ArrayLike = 1.0) -> Any:
        """The chi-squared density.

        >>> round(float(chi2.pdf(2.0, 2.0)), 6)   # exp(-1)/2
        0.18394
        """
        return np.exp(self.logpdf(x, df, loc, scale))

    def cdf(self, x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0.0,
            scale: ArrayLike = 1.0) -> Any:
        """P(X <= x). Not differentiable in `df` (raises).

        >>> round(float(chi2.cdf(2.0, 2.0)), 6)   # 1 - exp(-1)
        0.632121
        """
        return _gamma_cdf(_chi2_parts(x, df, loc, scale))

    def logcdf(self, x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0.0,
               scale: ArrayLike = 1.0) -> Any:
        """log P(X <= x).

        >>> round(float(chi2.logcdf(2.0, 2.0)), 6)
        -0.458675
        """
        return log_probability(self.cdf(x, df, loc, scale), self.sf(x, df, loc, scale))

    def sf(self, x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0.0,
           scale: ArrayLike = 1.0) -> Any:
        """P(X > x). Not differentiable in `df` (raises).

        >>> round(float(chi2.sf(2.0, 2.0)), 6)   # exp(-1)
        0.367879
        """
        return _gamma_sf(_chi2_parts(x, df, loc, scale))

    def logsf(self, x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0.0,
              scale: ArrayLike = 1.0) -> Any:
        """log P(X > x).

        >>> float(chi2.logsf(6.0, 2.0))   # -x/2
        -3.0
        """
        return log_probability(self.sf(x, df, loc, scale), self.cdf(x, df, loc, scale))


chi2 = _Chi2()


# -- beta ------------------------------------------------------------------------------------------
def _beta_parts(x, a, b, loc, scale):
    """(z, safe z, safe a, safe b, 0 <= z <= 1, where the parameters are valid); the first z
    is for comparisons only."""
    z, valid = standardize(x, loc, scale)
    a, b = as_value(a), as_value(b)
    valid = valid & (a > 0) & (b > 0)
    inside = (z >= 0) & (z <= 1)
    a, b = guard(valid, a, 1.0), guard(valid, b, 1.0)
    return z, guard(inside, z, 0.5), a, b, inside, valid


class _Beta(_Distribution):
    """The beta distribution on [0, 1] with shapes `a`, `b` (scipy.stats.beta)."""

    name = "beta"

    def logpdf(self, x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0.0,
               scale: ArrayLike = 1.0) -> Any:
        """log of the beta density; differentiable in x, a, b, loc and scale.

        >>> round(float(beta.logpdf(0.5, 2.0, 2.0)), 6)   # 6 x (1 - x) = 1.5
        0.405465
        """
        _, z, a, b, inside, valid = _beta_parts(x, a, b, loc, scale)
        out = (sc.xlogy(a - 1.0, z) + sc.xlog1py(b - 1.0, -z) - sc.betaln(a, b)
               - log_scale(scale, valid))
        return nan_where_invalid(valid, select(inside, out, -np.inf))

    def pdf(self, x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0.0,
            scale: ArrayLike = 1.0) -> Any:
        """The beta density.

        >>> round(float(beta.pdf(0.5, 2.0, 2.0)), 6)
        1.5
        """
        return np.exp(self.logpdf(x, a, b, loc, scale))

    def cdf(self, x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0.0,
            scale: ArrayLike = 1.0) -> Any:
        """P(X <= x) = betainc(a, b, z). Not differentiable in `a` or `b` (raises).

        >>> round(float(beta.cdf(0.5, 2.0, 3.0)), 6)
        0.6875
        """
        zp, z, a, b, inside, valid = _beta_parts(x, a, b, loc, scale)
        return nan_where_invalid(valid, select(inside, sc.betainc(a, b, z), 1.0 * (zp > 1)))

    def logcdf(self, x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0.0,
               scale: ArrayLike = 1.0) -> Any:
        """log P(X <= x).

        >>> round(float(beta.logcdf(0.5, 1.0, 1.0)), 6)   # the uniform distribution
        -0.693147
        """
        return log_probability(self.cdf(x, a, b, loc, scale),
                               self.sf(x, a, b, loc, scale))

    def sf(self, x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0.0,
           scale: ArrayLike = 1.0) -> Any:
        """P(X > x) = betaincc(a, b, z). Not differentiable in `a` or `b` (raises).

        >>> round(float(beta.sf(0.5, 2.0, 3.0)), 6)
        0.3125
        """
        zp, z, a, b, inside, valid = _beta_parts(x, a, b, loc, scale)
        return nan_where_invalid(valid, select(inside, _betaincc(a, b, z), 1.0 * (zp < 0)))

    def logsf(self, x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0.0,
              scale: ArrayLike = 1.0) -> Any:
        """log P(X > x).

        >>> round(float(beta.logsf(0.75, 1.0, 1.0)), 6)
        -1.386294
        """
        return log_probability(self.sf(x, a, b, loc, scale),
                               self.cdf(x, a, b, loc, scale))


beta = _Beta()

__all__ = ["norm", "t", "gamma", "chi2", "beta"]
