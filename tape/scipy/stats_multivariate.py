"""Multivariate distributions of tape.scipy.stats: dirichlet and multivariate_normal.

Both follow SciPy's argument conventions and checks (the same errors for invalid input):

- `dirichlet.logpdf(x, alpha)`: the components of `x` run along its *first* axis (as SciPy's
  code does); `x` may omit the last component, which is then 1 - sum(x). With the full
  K components x must lie on the simplex (to 1e-9), so a derivative in x is a derivative along
  the simplex only if the direction sums to 0: differentiate through the K-1 free components
  (or a softmax) rather than the full vector.
- `multivariate_normal.logpdf(x, mean=None, cov=1, allow_singular=False)`: the components of
  `x` run along its last axis; `cov` is a number, a vector of variances or a matrix (its lower
  triangle is read, as SciPy's eigh does). The density is computed with a Cholesky factor, so
  derivatives in x, mean and cov are those of differentiable NumPy linear algebra. A singular
  covariance (with allow_singular=True) is supported for a constant `cov` only: the derivative
  of a pseudo-determinant with respect to a rank-deficient matrix is not implemented and raises.
  `multivariate_normal.cdf` is SciPy's randomized quasi-Monte-Carlo integral: it is available
  on plain values, and raises NotImplementedError on traced ones (no derivative rule).

>>> from tape import gradient, Reverse
>>> gradient(Reverse, lambda x: multivariate_normal.logpdf(x, np.zeros(2)), np.array([1.0, -2.0]))
(array([-1.,  2.]),)

As in SciPy, the dimension comes from `mean` (or from a matrix `cov`): without them a vector x
is a batch of 1-d points.
"""
from __future__ import annotations

import functools

import math
from typing import Any

import numpy as np
import scipy.special as sc
import scipy.stats as _st
from numpy.typing import ArrayLike

from tape.core import Tracer, peek, primal
from tape.inactive_code import inactive

from .stats_common import as_value, plain, select, squeeze_output
from .stats_continuous import _Distribution

_LOG_2PI = math.log(2 * math.pi)


# -- dirichlet -------------------------------------------------------------------------------------
# SciPy's checks, on the values (no derivative): a compiled function makes them again at each
# call (a replayed step whose outcome it decides on) instead of guarding the values.
_min = inactive(np.min)


def _dirichlet_alpha(alpha):
    alpha = as_value(alpha)
    a = peek(alpha)   # its shape only
    if np.size(a) and _min(alpha) <= 0:
        raise ValueError(f"dirichlet: every concentration parameter alpha must be > 0; got "
                         f"min(alpha) = {np.min(primal(alpha))}")
    if np.ndim(a) != 1:
        raise ValueError(f"dirichlet: alpha must be one-dimensional (K,), got shape "
                         f"{np.shape(a)}")
    return alpha


def _dirichlet_x(alpha, x, check=True):
    """x with its K components along axis 0 (the K-th appended as 1 - sum when omitted),
    checked as SciPy checks it (`check`)."""
    x = as_value(x)
    k, shape = np.shape(alpha)[0], np.shape(x)
    if not shape or shape[0] not in (k, k - 1):
        raise ValueError(f"dirichlet: x must have K = {k} or K - 1 = {k - 1} components along "
                         f"its first axis (alpha has shape {np.shape(alpha)}); got x.shape = "
                         f"{shape}")
    if shape[0] == k - 1:
        if len(shape) > 2:
            raise ValueError("dirichlet: an x without its last component must be one- or "
                             f"two-dimensional; got shape {shape}")
        last = 1.0 - np.sum(x, axis=0, keepdims=True)
        x = np.concatenate([x, last], axis=0)
    if check:
        _check_simplex(alpha, x)
    return x


@inactive
def _simplex_failures(alpha, x):
    """Which of SciPy's checks of a Dirichlet point x fail, in order, as a boolean array."""
    below_one = np.reshape(alpha < 1, (-1,) + (1,) * (x.ndim - 1))
    return np.array([np.min(x) < 0, np.max(x) > 1, np.any((x == 0) & below_one),
                     np.any(np.abs(np.sum(x, axis=0) - 1.0) > 1e-9)])


def _check_simplex(alpha, x):
    failed = _simplex_failures(alpha, x)
    if failed[0]:
        raise ValueError("dirichlet: each entry of x must be >= 0")
    if failed[1]:
        raise ValueError("dirichlet: each entry of x must be <= 1")
    if failed[2]:
        raise ValueError("dirichlet: each entry of x must be > 0 where its alpha is < 1")
    if failed[3]:
        raise ValueError(f"dirichlet: x must lie on the simplex (its components along axis 0 "
                         f"summing to 1); the sums are {np.sum(primal(x), axis=0)}")


class _Dirichlet(_Distribution):
    """The Dirichlet distribution on the simplex with concentrations `alpha` (K,)."""

    name = "dirichlet"

    def logpdf(self, x: ArrayLike, alpha: ArrayLike) -> Any:
        """log of the Dirichlet density; differentiable in x (K-1 free components) and alpha.

        >>> round(float(dirichlet.logpdf(np.array([0.2, 0.3, 0.5]), np.ones(3))), 6)   # log 2!
        0.693147
        >>> dirichlet.logpdf(np.array([[0.2, 0.5], [0.3, 0.25]]), np.array([2.0, 2.0, 2.0])).shape
        (2,)
        """
        alpha = _dirichlet_alpha(alpha)
        x = _dirichlet_x(alpha, x, check=False)   # (checked before the promotion: below)
        column = np.reshape(alpha, (-1,) + (1,) * (np.ndim(x) - 1))
        log_b = np.sum(sc.gammaln(alpha)) - sc.gammaln(np.sum(alpha))
        return squeeze_output(np.sum(sc.xlogy(column - 1.0, x), axis=0) - log_b)

    def pdf(self, x: ArrayLike, alpha: ArrayLike) -> Any:
        """The Dirichlet density.

        >>> round(float(dirichlet.pdf(np.array([0.25, 0.75]), np.array([2.0, 1.0]))), 6)
        0.5
        """
        return np.exp(self.logpdf(x, alpha))


def _checked_as_given(method):
    """`method` with SciPy's checks of x made in x's own precision, before the promotion to
    double (a float32 point whose float32 sum is 1 sums to 1 + 1.5e-8 in float64)."""
    @functools.wraps(method)
    def checked(self, x, alpha):
        _dirichlet_x(_dirichlet_alpha(alpha), x)
        return method(self, x, alpha)
    return checked


_Dirichlet.logpdf = _checked_as_given(_Dirichlet.logpdf)
dirichlet = _Dirichlet()


# -- multivariate_normal ---------------------------------------------------------------------------
def _mvn_parameters(mean, cov):
    """(dim, mean (dim,), cov (dim, dim)) from SciPy's accepted forms."""
    if isinstance(cov, _st.Covariance):
        raise TypeError("multivariate_normal: scipy.stats.Covariance objects are not supported; "
                        "pass the covariance matrix (or variances, or a number)")
    cov = as_value(1.0 if cov is None else cov)
    if mean is None:
        dim = 1 if np.ndim(cov) < 2 else np.shape(cov)[0]
        mean = np.zeros(dim)
    mean = as_value(mean)
    dim = int(np.size(peek(mean)))
    if dim == 1:
        mean, cov = np.reshape(mean, (1,)), np.reshape(cov, (1, 1))
    if np.ndim(mean) != 1 or np.shape(mean)[0] != dim:
        raise ValueError(f"multivariate_normal: mean must be a vector of length {dim}; "
                         f"got shape {np.shape(mean)}")
    if np.ndim(cov) == 0:
        cov = cov * np.eye(dim)
    elif np.ndim(cov) == 1:
        cov = cov * np.eye(dim) if np.shape(cov) == (dim,) else _bad_cov(cov, dim)
    elif np.ndim(cov) > 2 or np.shape(cov) != (dim, dim):
        _bad_cov(cov, dim)
    return dim, mean, cov


def _bad_cov(cov, dim):
    raise ValueError(f"multivariate_normal: cov must be a number, a vector of {dim} variances "
                     f"or a ({dim}, {dim}) matrix to match mean; got shape {np.shape(cov)}")


def _mvn_quantiles(x, dim):
    """x with its components along the last axis (SciPy's rules for 0-d and 1-d x)."""
    x = as_value(x)
    if np.ndim(x) == 0:
        x = np.reshape(x, (1,))
    if np.ndim(x) == 1:
        x = np.reshape(x, (-1, 1) if dim == 1 else (1, -1))
    if np.shape(x)[-1] != dim:
        raise ValueError(f"multivariate_normal: x must have {dim} components along its last "
                         f"axis; got shape {np.shape(x)}")
    return x


@inactive
def _eigh_plain(cov):
    """The eigendecomposition of the covariance's value (no derivative flows through it): a
    compiled function computes it again at each call instead of guarding the covariance."""
    s, u = np.linalg.eigh(np.asarray(cov))
    return s, u


def _spectrum(cov, allow_singular):
    """(eigenvalues, eigenvectors, cutoff) of the plain covariance, with SciPy's checks."""
    s, u = _eigh_plain(cov)
    eps = 1e6 * np.finfo(np.float64).eps * np.max(np.abs(s))
    if np.min(s) < -eps:
        raise ValueError("multivariate_normal: cov must be symmetric positive semidefinite; its "
                         f"smallest eigenvalue is {primal(np.min(s))}")
    if np.min(s) <= eps and not allow_singular:
        raise np.linalg.LinAlgError(
            "multivariate_normal: cov is singular; pass allow_singular=True for the degenerate "
            "density on its range, or regularize cov")
    return s, u, eps


def _full_rank(dev, cov, dim):
    """-log density terms (log det, Mahalanobis) through a Cholesky factor: differentiable."""
    chol = np.linalg.cholesky(cov)
    white = np.linalg.solve(chol, np.transpose(np.reshape(dev, (-1, dim))))
    log_det = 2.0 * np.sum(np.log(np.diagonal(chol)))
    maha = np.reshape(np.sum(white * white, axis=0), np.shape(dev)[:-1])
    return -0.5 * (dim * _LOG_2PI + log_det + maha)


def _singular(dev, s, u, eps, cov):
    """The degenerate density on the range of a singular (constant) cov; -inf off it."""
    if isinstance(cov, Tracer):
        raise NotImplementedError(
            "multivariate_normal: the derivative with respect to a singular covariance (the "
            "pseudo-determinant of a rank-deficient matrix) is not implemented; pass cov as a "
            "constant, or regularize it (cov + eps * I) to differentiate it")
    s, u, eps = primal(s), primal(u), primal(eps)   # the rank decides shapes
    kept = s > eps
    whiten = u[:, kept] / np.sqrt(s[kept])
    white = dev @ whiten
    rank, log_pdet = int(np.sum(kept)), float(np.sum(np.log(s[kept])))
    out = -0.5 * (rank * _LOG_2PI + log_pdet + np.sum(white * white, axis=-1))
    residual = np.linalg.norm(plain(dev) @ u[:, ~kept], axis=-1)
    return select(residual < 1e3 * eps, out, -np.inf)


def _traced(*values) -> bool:
    return any(isinstance(v, Tracer) for v in values)


class _MultivariateNormal(_Distribution):
    """The multivariate normal distribution N(mean, cov) (scipy.stats.multivariate_normal)."""

    name = "multivariate_normal"

    def logpdf(self, x: ArrayLike, mean: ArrayLike | None = None, cov: ArrayLike = 1,
               allow_singular: bool = False) -> Any:
        """log of the density; differentiable in x, mean and cov.

        >>> cov = np.array([[2.0, 0.3], [0.3, 1.0]])
        >>> x = np.array([[0.5, -1.0], [1.0, 2.0], [0.0, 0.0]])
        >>> bool(np.allclose(multivariate_normal.logpdf(x, np.zeros(2), cov),
        ...                  __import__("scipy.stats").stats.multivariate_normal.logpdf(
        ...                      x, np.zeros(2), cov)))
        True
        """
        dim, mean, cov = _mvn_parameters(mean, cov)
        dev = _mvn_quantiles(x, dim) - mean
        s, u, eps = _spectrum(cov, allow_singular)
        if np.min(s) > eps:
            out = _full_rank(dev, cov, dim)
        else:
            out = _singular(dev, s, u, eps, cov)
        return squeeze_output(out)

    def pdf(self, x: ArrayLike, mean: ArrayLike | None = None, cov: ArrayLike = 1,
            allow_singular: bool = False) -> Any:
        """The density.

        >>> round(float(multivariate_normal.pdf(np.zeros(2), np.zeros(2))), 6)   # 1 / (2 pi)
        0.159155
        """
        return np.exp(self.logpdf(x, mean, cov, allow_singular))

    def entropy(self, mean: ArrayLike | None = None, cov: ArrayLike = 1) -> Any:
        """The differential entropy, (dim log(2 pi e) + log det cov) / 2; differentiable in
        cov (through a Cholesky factor: cov must be positive definite).

        >>> round(float(multivariate_normal.entropy(np.zeros(2), np.eye(2))), 6)
        2.837877
        """
        dim, mean, cov = _mvn_parameters(mean, cov)
        log_det = 2.0 * np.sum(np.log(np.diagonal(np.linalg.cholesky(cov))))
        return 0.5 * (dim * (_LOG_2PI + 1.0) + log_det)

    def cdf(self, x: ArrayLike, mean: ArrayLike | None = None, cov: ArrayLike = 1,
            allow_singular: bool = False, maxpts: int | None = None, abseps: float = 1e-5,
            releps: float = 1e-5, *, lower_limit: ArrayLike | None = None,
            rng: Any = None) -> Any:
        """P(X <= x), SciPy's randomized quasi-Monte-Carlo integral, on plain values only: it
        has no derivative rule, and traced arguments raise NotImplementedError.

        >>> cdf = multivariate_normal.cdf(np.zeros(2), np.zeros(2), rng=0)
        >>> round(float(cdf), 4)   # independent components: 1/2 * 1/2
        0.25
        """
        if _traced(x, mean, cov, lower_limit):
            raise NotImplementedError(
                "multivariate_normal.cdf has no derivative rule (it is a randomized numerical "
                "integral); for d = 1 use norm.cdf, otherwise differentiate a smooth "
                "approximation, or pass plain values")
        return _st.multivariate_normal.cdf(x, mean, cov, allow_singular, maxpts, abseps,
                                           releps, lower_limit=lower_limit, rng=rng)


multivariate_normal = _MultivariateNormal()

__all__ = ["dirichlet", "multivariate_normal"]
