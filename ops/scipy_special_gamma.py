"""The gamma family of scipy.special on traced values: gammaln, digamma (= psi), gamma, rgamma,
loggamma, beta, betaln, the regularised incomplete gamma and beta functions, Hurwitz's zeta,
and the polygamma primitive behind `ops.scipy_special.polygamma`.

Real arguments only (complex input raises). Conventions:

- gammaln is log|gamma(x)|, so its derivative is digamma(x) for negative x too.
- loggamma of a negative real is NaN in SciPy; so is its derivative.
- rgamma = 1/gamma is entire: its derivative is finite at the poles of gamma (x = 0, -1, ...),
  computed there through the reflection formula rather than as 0 * inf.
- gammainc, gammaincc and betainc are differentiable in x only; their shape parameters (a, b)
  have no closed-form derivative and raise NotImplementedError when differentiated. Likewise
  zeta(x, q) in x; its q-derivative is -x zeta(x + 1, q).
- Derivatives at a pole of gamma or digamma are whatever the formula gives (inf or NaN).
"""
from __future__ import annotations

import math

import numpy as np
import scipy.special as sc
from scipy.special import _ufuncs

from tape.backend import array_module
from tape.core import primal

from .scipy_special_rules import elementwise_rule, integer_argument, no_closed_form, special_ufunc


# -- polygamma: a primitive of (n, x), n an integer ------------------------------------------------
def _polygamma(n, x):
    """scipy.special.polygamma, or cupyx.scipy.special's for CuPy arrays (SciPy's is not a ufunc:
    it converts its arguments to NumPy arrays, which CuPy refuses)."""
    xp = array_module(x)
    if xp is np:
        return sc.polygamma(n, x)
    import cupyx.scipy.special   # only reached with CuPy arrays, so CuPy is installed
    return cupyx.scipy.special.polygamma(xp.asarray(n), x)


def _d_polygamma(n, x, ans):
    return polygamma_rule(np.add(n, 1), x)


polygamma_rule = elementwise_rule("polygamma", _polygamma,
                                  (integer_argument("n"), _d_polygamma))


def _trigamma(x):
    # SciPy's polygamma computes in float64; digamma of float32 keeps float32, so must its
    # derivative (a forward tangent wider than its primal).
    d = polygamma_rule(1, x)
    dtype = getattr(x, "dtype", None)
    return d.astype(dtype) if dtype is not None and dtype.kind == "f" and d.dtype != dtype else d


# -- one-argument gamma functions -------------------------------------------------------------
def _d_loggamma(x, ans):
    # SciPy's real loggamma is NaN for x < 0; the derivative follows it rather than being finite.
    return np.where(x < 0, np.nan, sc.psi(x))


def _d_rgamma(x, ans):
    # -psi(x) / gamma(x) is 0 * inf at the poles of gamma, where 1/gamma is smooth. Left of 1/2
    # the reflection 1/gamma(x) = gamma(1 - x) sin(pi x) / pi gives a pole-free derivative,
    # gamma(1 - x) (cos(pi x) - psi(1 - x) sin(pi x) / pi). The inner wheres keep each branch's
    # arguments inside its own domain, so the branch not taken has finite derivatives too.
    left = x < 0.5
    xl = np.where(left, x, 0.0)
    xr = np.where(left, 1.0, x)
    reflected = sc.gamma(1.0 - xl) * (np.cos(math.pi * xl)
                                      - sc.psi(1.0 - xl) * np.sin(math.pi * xl) / math.pi)
    return np.where(left, reflected, -sc.psi(xr) * sc.rgamma(xr))


gammaln = special_ufunc(sc.gammaln, lambda x, ans: sc.psi(x))
digamma = special_ufunc(sc.digamma, lambda x, ans: _trigamma(x))   # sc.psi is the same ufunc
gamma = special_ufunc(sc.gamma, lambda x, ans: ans * sc.psi(x), uses_ans=True)
rgamma = special_ufunc(sc.rgamma, _d_rgamma)
loggamma = special_ufunc(sc.loggamma, _d_loggamma)


# -- beta -------------------------------------------------------------------------------------
def _psi_difference(a, b):
    """psi(a) - psi(a + b), the slope of betaln in a. Where a and a + b are both at least 1e3
    the two digammas (about log a) cancel to about b / a: there the difference of their
    asymptotic series, written so that nothing cancels: -log1p(b/a) - b / (2a(a+b))
    - b(2a+b) / (12 a^2 (a+b)^2) + 1/(120 a^4) - 1/(120 (a+b)^4) (the next term is below
    1e-19 of the sum)."""
    direct = sc.psi(a) - sc.psi(a + b)
    va, vb = primal(a), primal(b)
    xp = array_module(va if hasattr(va, "shape") else vb)   # (CuPy stays on its device)
    va, vb = xp.asarray(va, dtype=float), xp.asarray(vb, dtype=float)
    far = (va >= 1e3) & (va + vb >= 1e3)
    if not bool(xp.any(far)):
        return direct
    a_, b_ = np.where(far, a, 1e3), np.where(far, b, 0.0)
    c = a_ + b_
    series = (-np.log1p(b_ / a_) - b_ / (2.0 * a_ * c) - b_ * (a_ + c) / (12.0 * a_ * a_ * c * c)
              + (1.0 / a_ ** 4 - 1.0 / c ** 4) / 120.0)
    return np.where(far, series, direct)


beta = special_ufunc(sc.beta,
                     lambda a, b, ans: ans * _psi_difference(a, b),
                     lambda a, b, ans: ans * _psi_difference(b, a), uses_ans=True)
betaln = special_ufunc(sc.betaln,
                       lambda a, b, ans: _psi_difference(a, b),
                       lambda a, b, ans: _psi_difference(b, a))


# -- regularised incomplete gamma and beta: differentiable in x --------------------------------
# Their x-derivatives are the gamma and beta densities. Written plainly, as the exponential of
# (a-1) log x - x - gammaln(a), the exponent is a difference of terms of size a log a and the
# density loses about log10(a) digits (5e-7 relative at a = 1e8). From a shape of _LARGE_SHAPE
# on, the densities are computed in Loader's form ("Fast and accurate computation of binomial
# probabilities", 2000): Stirling's formula with its remainder stirlerr, and the deviance bd0,
# neither of which cancels. 15 is where the five-term series of stirlerr is exact to 3e-16 and
# where the two forms are equally accurate (worst relative errors about 1e-14 at shapes 15 to
# 20); the plain form's error then grows with a log a (9e-14 at a = 100, 1e-12 at 1e3, 5e-7 at
# 1e8), the stable one's stays within the density's own conditioning in x (eps |x f'/f|, what
# rounding x itself changes).
_LARGE_SHAPE = 15.0
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _stirlerr(a):
    """gammaln(a) - ((a - 1/2) log a - a + log(2 pi) / 2) for a >= 15, from its asymptotic
    series 1/(12a) - 1/(360a^3) + 1/(1260a^5) - 1/(1680a^7) + 1/(1188a^9) (the next term is
    below 3e-16 there), in powers of 1/a^2 so that nothing overflows."""
    r = 1.0 / (a * a)
    return (1.0 / 12 - r * (1.0 / 360 - r * (1.0 / 1260 - r * (1.0 / 1680 - r / 1188)))) / a


def _bd0(k, lam):
    """The deviance k log(k / lam) + lam - k for k, lam > 0, without its cancellation near
    k = lam: there (|v| < 0.1, v = (k - lam) / (k + lam)) it is the series
    (k - lam) v + 2k (v^3/3 + v^5/5 + ...), whose terms after v^17/17 are below 1e-17 of the
    sum."""
    d = k - lam
    v = d / (k + lam)
    vv = primal(v)
    xp = array_module(vv)
    near = xp.abs(xp.asarray(vv)) < 0.1
    w = v * v
    tail = 1.0 / 17
    for j in range(7, 0, -1):
        tail = 1.0 / (2 * j + 1) + w * tail
    series = d * v + 2.0 * k * v * w * tail
    if bool(xp.all(near)):
        return series
    # Elsewhere log(k / lam) is log1p of a positive ratio, (k - lam) / lam or (lam - k) / k (both
    # finite for any positive k, lam), so that its error is a few ulps of d rather than of k.
    log_ratio = np.where(d >= 0, np.log1p(d / lam), -np.log1p(-d / k))
    return np.where(near, series, k * log_ratio - d)


def _large_shape(values, x_ok):
    """Where the stable form is taken: every shape at least _LARGE_SHAPE and x (of the
    predicate `x_ok`, on primal values) inside the support; None where nowhere."""
    vals = [primal(v) for v in values]
    xp = array_module(next((v for v in vals if hasattr(v, "shape")), vals[0]))
    large = x_ok(xp.asarray(vals[-1], dtype=float))
    for shape in vals[:-1]:
        shape = xp.asarray(shape, dtype=float)
        large = large & (shape >= _LARGE_SHAPE) & (shape < np.inf)
    return large if bool(xp.any(large)) else None


def _gamma_density(a, x):
    """d/dx gammainc(a, x) = x^(a-1) e^(-x) / gamma(a); xlogy makes x = 0 with a = 1 exact.
    NaN for x < 0, where SciPy's gammainc is NaN (the formula alone is finite there when
    a = 1). For a >= _LARGE_SHAPE and 0 < x < inf it is
    exp(-bd0(a, x) - log x + log(a) / 2 - log(2 pi) / 2 - stirlerr(a))."""
    density = np.exp(sc.xlogy(a - 1.0, x) - x - sc.gammaln(a))
    large = _large_shape((a, x), lambda vx: (vx > 0) & (vx < np.inf))
    if large is not None:
        a_ = np.where(large, a, _LARGE_SHAPE)
        x_ = np.where(large, x, a_)
        stable = np.exp(-_bd0(a_, x_) - np.log(x_) + 0.5 * np.log(a_) - _HALF_LOG_2PI
                        - _stirlerr(a_))
        density = np.where(large, stable, density)
    return np.where(x < 0, np.nan, density)


def _beta_density(a, b, x):
    """d/dx betainc(a, b, x) = x^(a-1) (1-x)^(b-1) / B(a, b); NaN outside [0, 1], where SciPy's
    betainc is NaN (the formula alone is finite there when a or b is 1). For a, b >=
    _LARGE_SHAPE and 0 < x < 1 it is, with n = a + b,
    exp(-bd0(a, n x) - bd0(b, n (1-x)) + log(a b / n) / 2 - log(x (1-x)) - log(2 pi) / 2
        + stirlerr(n) - stirlerr(a) - stirlerr(b))
    (rounding n changes that exponent by a part in 1e16 only: its slope in n is -1/(2n))."""
    density = np.exp(sc.xlogy(a - 1.0, x) + sc.xlog1py(b - 1.0, -x) - sc.betaln(a, b))
    large = _large_shape((a, b, x), lambda vx: (vx > 0) & (vx < 1))
    if large is not None:
        a_ = np.where(large, a, _LARGE_SHAPE)
        b_ = np.where(large, b, _LARGE_SHAPE)
        x_ = np.where(large, x, 0.5)
        n = a_ + b_
        stable = np.exp(-_bd0(a_, n * x_) - _bd0(b_, n * (1.0 - x_))
                        + 0.5 * np.log(a_ * (b_ / n)) - np.log(x_) - np.log1p(-x_)
                        - _HALF_LOG_2PI + _stirlerr(n) - _stirlerr(a_) - _stirlerr(b_))
        density = np.where(large, stable, density)
    return np.where((x < 0) | (x > 1), np.nan, density)


_SHAPE = "has no closed form (it needs a series or quadrature)"
gammainc = special_ufunc(sc.gammainc, no_closed_form("a", _SHAPE),
                         lambda a, x, ans: _gamma_density(a, x))
gammaincc = special_ufunc(sc.gammaincc, no_closed_form("a", _SHAPE),
                          lambda a, x, ans: -_gamma_density(a, x))
betainc = special_ufunc(sc.betainc, no_closed_form("a", _SHAPE), no_closed_form("b", _SHAPE),
                        lambda a, b, x, ans: _beta_density(a, b, x))


# -- zeta: scipy.special.zeta(x, q) calls the ufunc _zeta, zeta(x) the ufunc _riemann_zeta -----
zeta = special_ufunc(_ufuncs._zeta, no_closed_form("x", _SHAPE),
                     lambda x, q, ans: -x * _ufuncs._zeta(x + 1.0, q), name="zeta")
# Riemann's zeta has no closed-form derivative in its only argument: registered so that
# differentiating it names the function and the argument.
riemann_zeta = special_ufunc(_ufuncs._riemann_zeta, no_closed_form("x", _SHAPE), name="zeta")
