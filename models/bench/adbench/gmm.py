"""ADBench's Gaussian mixture model objective in plain NumPy, and its gradient with Hecate.

For K components with weights alpha_k, means mu_k and inverse-covariance factors
Q_k = diag(exp q_k) + L_k (L_k strictly lower triangular), n points x_i in d dimensions and a
Wishart prior (gamma, m):

    F = -(n d / 2) log(2 pi) + sum_i logsumexp_k(alpha_k + sum(q_k) - 0.5 ||Q_k (x_i - mu_k)||^2)
        - n logsumexp(alpha)
        + sum_k [0.5 gamma^2 (||exp q_k||^2 + ||l_k||^2) - m sum(q_k)] - K C,
    C = n' d (log gamma - 0.5 log 2) - log Gamma_d(n' / 2),   n' = d + m + 1.

The objective is ordinary vectorised NumPy; Hecate differentiates it as it stands.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from tape import Active, Const, Duplicated, Reverse, autodiff

from .io import GMMInput


def logsumexp(x, axis):
    """log(sum(exp(x))) along `axis`, shifted by the maximum so that exp cannot overflow."""
    mx = np.max(x, axis=axis, keepdims=True)
    return np.log(np.sum(np.exp(x - mx), axis=axis)) + np.squeeze(mx, axis=axis)


def multigammaln(a: float, d: int) -> float:
    """log of the multivariate gamma function Gamma_d(a)."""
    return (0.25 * d * (d - 1) * math.log(math.pi)
            + sum(math.lgamma(a + 0.5 * (1 - j)) for j in range(1, d + 1)))


@functools.lru_cache(maxsize=None)
def lower_gather_index(d: int) -> np.ndarray:
    """(d, d) indices into [0, l_1, ..., l_{d(d-1)/2}] that place the strictly-lower entries of
    L column by column (ADBench's order) and the 0 everywhere else."""
    index = np.zeros((d, d), dtype=np.intp)
    pos = 1
    for col in range(d):
        for row in range(col + 1, d):
            index[row, col] = pos
            pos += 1
    return index


def lower_triangular(l, d: int):
    """The (K, d, d) strictly-lower matrices L_k from their packed entries l (K, d(d-1)/2)."""
    padded = np.concatenate([np.zeros((l.shape[0], 1)), l], axis=1)
    return padded[:, lower_gather_index(d)]


def log_wishart_prior(d: int, gamma: float, m: int, sum_qs, Qdiags, l):
    """The Wishart prior on the K inverse covariances, with ADBench's normalising constant."""
    n = d + m + 1
    K = Qdiags.shape[0]
    frobenius = np.sum(Qdiags ** 2, axis=1) + np.sum(l ** 2, axis=1)
    out = np.sum(0.5 * gamma * gamma * frobenius - m * sum_qs)
    C = n * d * (math.log(gamma) - 0.5 * math.log(2)) - multigammaln(0.5 * n, d)
    return out - K * C


def gmm_objective(alphas, means, icf, x, gamma, m):
    """ADBench's GMM log-likelihood plus prior (module docstring), a float."""
    n, d = x.shape
    q, l = icf[:, :d], icf[:, d:]
    Qdiags = np.exp(q)                                            # (K, d)
    sum_qs = np.sum(q, axis=1)                                    # (K,)
    Ls = lower_triangular(l, d)                                   # (K, d, d)
    xcentered = x[None, :, :] - means[:, None, :]                 # (K, n, d)
    # Q_k (x_i - mu_k) for every k and i: the diagonal part, plus one matmul per component
    Qxcentered = Qdiags[:, None, :] * xcentered + xcentered @ np.swapaxes(Ls, 1, 2)
    sqsum = np.sum(Qxcentered ** 2, axis=2)                       # (K, n)
    inner = (alphas + sum_qs)[:, None] - 0.5 * sqsum
    const = -n * d * 0.5 * math.log(2 * math.pi)
    return (const + np.sum(logsumexp(inner, axis=0)) - n * logsumexp(alphas, axis=0)
            + log_wishart_prior(d, gamma, m, sum_qs, Qdiags, l))


def objective(inp: GMMInput) -> float:
    """The objective at an ADBench input."""
    return float(gmm_objective(inp.alphas, inp.means, inp.icf, inp.x, inp.gamma, inp.m))


def gradient(inp: GMMInput, differentiate=autodiff) -> np.ndarray:
    """Hecate's reverse-mode gradient, flattened in ADBench's layout [alphas, means, icf].
    `differentiate` is `autodiff` or a compiled stand-in (`runners.compiled_autodiff`)."""
    d_alphas, d_means, d_icf = (np.zeros_like(a) for a in (inp.alphas, inp.means, inp.icf))
    differentiate(Reverse, gmm_objective, Active,
             Duplicated(inp.alphas, d_alphas), Duplicated(inp.means, d_means),
             Duplicated(inp.icf, d_icf), Const(inp.x), Const(inp.gamma), Const(inp.m))
    return np.concatenate([d_alphas.ravel(), d_means.ravel(), d_icf.ravel()])
