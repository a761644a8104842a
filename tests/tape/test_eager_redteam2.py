"""Eager autodiff on realistic scientific and ML NumPy/SciPy programs written without Hecate in
mind: ODE integrators, filters, likelihoods, solvers, attention, sorting, FFTs, in-place loops.

Each program runs on plain arrays (the reference primal) and under `autodiff`: the primal must
equal NumPy's, the reverse gradient central finite differences (float64), the forward JVP the
reverse gradient along a direction. The findings of this red team and their fixes (memory
layout, float32 statistics, singular det, error messages, ndarray methods) are tested in
test_eager_redteam2_fixes.py.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.linalg
import scipy.special as sp
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

import tape
from tape import Active, Duplicated, Forward, ForwardWithPrimal, Reverse, ReverseWithPrimal, autodiff
from tape.scipy import linalg as tsl
from tape.scipy import stats as tstats
from tape.scipy.special import logsumexp

RNG = np.random.default_rng(0)
X_DATA = RNG.standard_normal((20, 3))
LABELS = RNG.integers(0, 4, 20)
BINARY = (RNG.random(20) > 0.5).astype(float)
GP_X = np.linspace(0.0, 1.0, 8)
GP_Y = np.sin(3.0 * GP_X)


def _fd(f, x, eps=1e-6):
    grad = np.zeros_like(x)
    for j in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[j] += eps
        down[j] -= eps
        grad[j] = (float(f(up)) - float(f(down))) / (2 * eps)
    return grad


def check(f, x, rtol=1e-6):
    """Primal against NumPy; reverse gradient against central differences (relative to the
    gradient's largest entry); forward JVP against the reverse gradient."""
    x = np.array(x, dtype=float)
    want = f(x.copy())
    want_grad = _fd(f, x)
    (grad,), value = autodiff(ReverseWithPrimal, f, Active, Active(x.copy()))
    np.testing.assert_allclose(value, want, rtol=1e-12, atol=1e-300)
    scale = max(np.max(np.abs(want_grad)), 1e-8)
    np.testing.assert_allclose(grad, want_grad, rtol=0, atol=rtol * scale)
    v = np.linspace(-1.0, 1.0, x.size).reshape(x.shape) + 0.25
    tangent, value = autodiff(ForwardWithPrimal, f, Duplicated(x.copy(), v))
    np.testing.assert_allclose(value, want, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(tangent, np.sum(grad * v), rtol=1e-9, atol=1e-12 * scale)
    return grad


# -- the programs -----------------------------------------------------------------------------
def rk4_oscillator(p):
    k, c = p[0], p[1]

    def rhs(y):
        return np.array([y[1], -k * y[0] - c * y[1]])
    y, h, trajectory = np.array([1.0, 0.0]), 0.05, []
    trajectory.append(y)
    for _ in range(40):
        k1 = rhs(y)
        k2 = rhs(y + h / 2 * k1)
        k3 = rhs(y + h / 2 * k2)
        k4 = rhs(y + h * k3)
        y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        trajectory.append(y)
    path = np.stack(trajectory)
    return np.sum(path[:, 0] ** 2) + np.mean(path[:, 1])


def kalman_nll(q):
    F, H = np.array([[1.0, 1.0], [0.0, 1.0]]), np.array([[1.0, 0.0]])
    Q, R = q[0] * np.eye(2), np.array([[q[1]]])
    x, P, nll = np.zeros(2), np.eye(2), 0.0
    for z in [1.0, 2.1, 2.9, 4.2, 5.1]:
        x, P = F @ x, F @ P @ F.T + Q
        S = H @ P @ H.T + R
        K = P @ H.T @ np.linalg.inv(S)
        r = z - H @ x
        x, P = x + K @ r, (np.eye(2) - K @ H) @ P
        P = 0.5 * (P + P.T)
        nll = nll + 0.5 * (np.log(np.linalg.det(S)) + r @ np.linalg.solve(S, r))
    return nll


def logistic_regression(w):
    p = np.clip(sp.expit(X_DATA @ w), 1e-12, 1 - 1e-12)
    return -np.mean(BINARY * np.log(p) + (1 - BINARY) * np.log1p(-p)) + 0.01 * w @ w


def softmax_cross_entropy(w):
    logits = X_DATA @ w.reshape(3, 4)
    return np.mean(logsumexp(logits, axis=1) - logits[np.arange(20), LABELS])


def softmax_cross_entropy_by_hand(w):
    logits = X_DATA @ w.reshape(3, 4)
    m = np.max(logits, axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.sum(np.exp(logits - m), axis=1))
    return np.mean(lse - np.take_along_axis(logits, LABELS[:, None], 1)[:, 0])


def _gp_kernel(theta):
    ell, sf, sn = np.exp(theta)
    d2 = (GP_X[:, None] - GP_X[None, :]) ** 2
    return sf ** 2 * np.exp(-0.5 * d2 / ell ** 2) + sn ** 2 * np.eye(8)


def gp_nll_numpy(theta):
    L = np.linalg.cholesky(_gp_kernel(theta))
    alpha = np.linalg.solve(L.T, np.linalg.solve(L, GP_Y))
    return 0.5 * GP_Y @ alpha + np.sum(np.log(np.diag(L)))


def gp_nll_scipy(theta):
    K = _gp_kernel(theta)
    factor = tsl.cho_factor(K)
    _, logdet = np.linalg.slogdet(K)
    return 0.5 * GP_Y @ tsl.cho_solve(factor, GP_Y) + 0.5 * logdet


def heat_equation(u0):
    u = u0.copy()
    for _ in range(10):
        u[1:-1] = u[1:-1] + 0.2 * (u[2:] - 2 * u[1:-1] + u[:-2])
    v = u0.copy()
    for _ in range(5):
        v = v + 0.2 * (np.roll(v, 1) - 2 * v + np.roll(v, -1))
    return np.sum(u ** 2) + np.sum(v * np.arange(len(v)))


def nbody_energy(q):
    P = q.reshape(5, 3)
    r = np.sqrt(np.sum((P[:, None, :] - P[None, :, :]) ** 2, -1) + np.eye(5))
    inverse = np.where(np.eye(5, dtype=bool), 0.0, 1.0 / r)
    i, j = np.triu_indices(5, 1)
    return -0.5 * np.sum(inverse) + 1e-3 * np.sum(1 / r[i, j] ** 12)


def discounted_returns(r):
    gamma, T = 0.99, len(r)
    disc = gamma ** np.arange(T)
    G = np.cumsum((r * disc)[::-1])[::-1] / disc
    G2, acc = np.zeros_like(r), 0.0
    for t in reversed(range(T)):
        acc = r[t] + gamma * acc
        G2[t] = acc
    return (np.sum(G * np.log1p(np.arange(T))) + 0.01 * np.sum(G2 ** 2)
            + np.sum(np.cumprod(1 + 0.1 * r)) + np.sum(np.diff(G, prepend=0.0) ** 2))


def order_statistics(x):
    M = x.reshape(3, 4)
    top = np.take_along_axis(M, np.argsort(M, axis=1)[:, -2:], axis=1)
    return (np.sum(np.sort(x) * np.arange(12)) + np.median(x) + np.percentile(x, 30)
            + np.quantile(x, [0.1, 0.9]).sum() + np.sum(top ** 2) + np.sum(np.median(M, axis=0))
            + np.sum(np.quantile(M, 0.5, axis=1, keepdims=True)))


T_GRID = np.linspace(-1.0, 1.0, 10)


def polynomial_fit(y):
    c = np.polyfit(T_GRID, y, 3)
    return np.sum(np.polyval(c, 0.9 * T_GRID) ** 2) + np.sum(np.vander(y[:4], 3) @ np.ones(3))


def causal_attention(w):
    T, d = 5, 4
    Wq, Wk, Wv = w.reshape(3, d, d)
    X = X_DATA[:T, :].repeat(2, axis=1)[:, :d]
    q, k, v = X @ Wq, X @ Wk, X @ Wv
    s = np.einsum("td,sd->ts", q, k) / np.sqrt(d)
    s = np.where(np.triu(np.ones((T, T), dtype=bool), 1), -np.inf, s)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.sum(np.einsum("ts,sd->td", p, v) ** 2)


def batch_norm(x):
    X = x.reshape(6, 3)
    mu, var = X.mean(axis=0, keepdims=True), X.var(axis=0, ddof=1, keepdims=True)
    h = (X - mu) / np.sqrt(var + 1e-5)
    return np.sum(np.tanh(h) * np.arange(18).reshape(6, 3)) + np.sum(np.std(X, axis=1, ddof=1))


KERNEL = RNG.standard_normal(5)


def fft_convolution(x):
    n = len(x) + len(KERNEL) - 1
    y = np.fft.irfft(np.fft.rfft(x, n) * np.fft.rfft(KERNEL, n), n)
    return np.sum(y ** 2) + np.sum(np.abs(np.fft.fft(x)) ** 2) / len(x)


def complex_modulus_loss(v):
    z = v[:4] + 1j * v[4:]
    w = np.exp(1j * z) * np.conj(z)
    return np.sum(np.abs(w) ** 2) + np.real(np.vdot(z, z)) + np.sum(np.angle(z + 2.0))


def interpolate_and_integrate(fp):
    xq = np.linspace(-0.1, 1.1, 13)
    yq = np.interp(xq, np.linspace(0.0, 1.0, 6), fp)
    A = np.outer(fp, fp[::-1]) + np.eye(6)
    return (np.trapezoid(yq ** 2, xq) + np.linalg.norm(fp) + np.linalg.norm(fp, 1)
            + np.linalg.norm(A, 2) + np.linalg.norm(A, "nuc") + np.linalg.norm(A, axis=1).sum())


def data_masks(x):
    m = x > 0.2
    y = x.copy()
    y[~m] = 0.0
    y[np.abs(x) > 1] *= 2
    return (np.sum(x[m] ** 2) + np.sum(np.exp(x[np.nonzero(x < 0)[0]]))
            + np.mean(x[x > np.median(x)]) + np.sum(y ** 3) / np.count_nonzero(m)
            + np.sum(x[np.argsort(-x)[:3]] * np.array([3.0, 2.0, 1.0])))


W6 = RNG.standard_normal(6)


def accumulate_in_place(x):
    acc = np.zeros_like(x[:3])
    for i in range(6):
        acc += x[i] * W6[i] * np.array([1.0, i, i * i])
    out = np.empty_like(x)
    for i in range(6):
        out[i] = acc[i % 3] * x[i]
    return np.sum(out ** 2)


def nan_handling(x):
    y = np.where(x > 0.5, np.nan, x)
    with np.errstate(invalid="ignore", divide="ignore"):
        logs = np.log(x)
    return (np.nansum(y ** 2) + np.nanmean(y) + np.nanmax(y) + np.nanstd(y)
            + np.sum(np.nan_to_num(logs, nan=0.0, neginf=-5.0)))


def negative_binomial_nll(theta):
    r, p = np.exp(theta[0]), sp.expit(theta[1])
    k = np.array([0.0, 1.0, 3.0, 7.0, 2.0])
    ll = sp.gammaln(k + r) - sp.gammaln(r) - sp.gammaln(k + 1) + r * np.log(1 - p) + sp.xlogy(k, p)
    return (-np.sum(ll) + 0.01 * np.sum(sp.digamma(r + k)) + np.sum(sp.erf(theta))
            + sp.log_expit(theta[0]) + np.sum(sp.xlog1py(k, p)))


STATS_DATA = np.array([0.1, 1.2, -0.5, 2.0])


def stats_likelihood(theta):
    scale = np.exp(theta[1])
    C = np.array([[2.0, 0.3], [0.3, 1.0]])
    return (-np.sum(tstats.norm.logpdf(STATS_DATA, theta[0], scale))
            - np.sum(tstats.t.logpdf(STATS_DATA, 3.0, theta[0], scale))
            - np.sum(tstats.gamma.logpdf(np.abs(STATS_DATA) + 0.1, scale + 1, scale=2.0))
            + np.sum(tstats.norm.cdf(STATS_DATA, loc=theta[0]))
            - tstats.multivariate_normal.logpdf(STATS_DATA.reshape(2, 2), theta, C).sum())


def spectral_loss(a):
    A = a.reshape(3, 3)
    w, V = np.linalg.eigh(A @ A.T + np.diag([0.0, 3.0, 7.0]))
    s = np.linalg.svd(A + np.diag([0.0, 2.0, 5.0]), compute_uv=False)
    projector = V[:, -1:] @ V[:, -1:].T
    return np.sum(np.log(w)) + np.sum(projector * np.arange(9).reshape(3, 3)) + np.sum(s ** 3)


class TwoLayerNet:
    def __init__(self, flat):
        self.W1, self.b1, self.w2 = flat[:12].reshape(3, 4), flat[12:16], flat[16:20]

    def hidden(self, x):
        return np.tanh(x @ self.W1 + self.b1)

    def __call__(self, x):
        return self.hidden(x) @ self.w2

    @property
    def l2(self):
        return np.sum(self.W1 ** 2) + np.sum(self.w2 ** 2)


def object_oriented_loss(flat):
    net = TwoLayerNet(flat)
    return np.mean((net(X_DATA) - np.sin(X_DATA.sum(1))) ** 2) + 1e-2 * net.l2


def cholesky_parameterised(p):
    L = np.zeros_like(p, shape=(3, 3))
    L[np.tril_indices(3)] = p
    L[np.diag_indices(3)] = np.exp(L[np.diag_indices(3)])
    return np.linalg.slogdet(L @ L.T + np.eye(3))[1] + np.trace(L @ L.T)


def overlapping_writes(x):
    y = x * 1.0
    y[1:] = y[:-1]            # NumPy copies the overlapping source first
    z = x * 1.0
    z[[0, 0, 1]] += x[2]      # repeated indices add once
    np.add.at(z, [0, 0, 1], x[:3])   # ... and np.add.at adds every time
    return np.sum(y * np.arange(6.0)) + np.sum(z ** 2)


PROGRAMS = {
    "rk4": (rk4_oscillator, [2.0, 0.3]),
    "kalman": (kalman_nll, [0.1, 0.5]),
    "logistic": (logistic_regression, [0.1, -0.2, 0.3]),
    "softmax_ce": (softmax_cross_entropy, RNG.standard_normal(12)),
    "softmax_ce_by_hand": (softmax_cross_entropy_by_hand, RNG.standard_normal(12)),
    "gp_numpy": (gp_nll_numpy, [-1.0, 0.0, -2.0]),
    "gp_tape_scipy": (gp_nll_scipy, [-1.0, 0.0, -2.0]),
    "heat": (heat_equation, np.sin(np.linspace(0.0, 3.0, 9))),
    "nbody": (nbody_energy, RNG.standard_normal(15)),
    "returns": (discounted_returns, RNG.standard_normal(7)),
    "order_statistics": (order_statistics, RNG.standard_normal(12)),
    "polyfit": (polynomial_fit, np.sin(2 * T_GRID) + 0.1 * RNG.standard_normal(10)),
    "attention": (causal_attention, 0.3 * RNG.standard_normal(48)),
    "batch_norm": (batch_norm, RNG.standard_normal(18)),
    "fft_conv": (fft_convolution, RNG.standard_normal(8)),
    "complex": (complex_modulus_loss, RNG.standard_normal(8)),
    "interp_trapz_norm": (interpolate_and_integrate, RNG.standard_normal(6)),
    "masks": (data_masks, RNG.standard_normal(10)),
    "accumulate": (accumulate_in_place, RNG.standard_normal(6)),
    "nan": (nan_handling, [0.1, 0.7, -0.3, 0.2, 1.5, 0.4]),
    "special": (negative_binomial_nll, [0.3, -0.2]),
    "stats": (stats_likelihood, [0.2, 0.1]),
    "spectral": (spectral_loss, 0.3 * RNG.standard_normal(9)),
    "object": (object_oriented_loss, 0.5 * RNG.standard_normal(20)),
    "tril_cholesky": (cholesky_parameterised, 0.3 * RNG.standard_normal(6)),
    "overlapping_writes": (overlapping_writes, RNG.standard_normal(6)),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_matches_numpy_and_finite_differences(name):
    f, x = PROGRAMS[name]
    check(f, x)


@pytest.mark.parametrize("name", ["softmax_ce", "gp_numpy", "rk4", "heat", "special", "spectral"])
def test_second_derivatives_match_differences_of_the_gradient(name):
    f, x = PROGRAMS[name]
    x = np.array(x, dtype=float)
    v = np.linspace(-1.0, 1.0, x.size)

    def grad(z):
        return autodiff(Reverse, f, Active, Active(z.copy()))[0][0]
    want = (grad(x + 1e-5 * v) - grad(x - 1e-5 * v)) / 2e-5
    scale = np.max(np.abs(want))
    np.testing.assert_allclose(tape.hvp(f, x.copy(), v), want, rtol=0, atol=1e-5 * scale)
    reverse_over_reverse = autodiff(Reverse, lambda z: np.sum(grad(z) * v), Active, Active(x))[0][0]
    np.testing.assert_allclose(reverse_over_reverse, want, rtol=0, atol=1e-5 * scale)


# -- kinks: eager follows the documented conventions, the same in both modes ----------------
@pytest.mark.parametrize("f, x, want", [
    (lambda x: np.sum(np.abs(x) * [1, 2, 3]), [0.0, 1.0, -1.0], [0.0, 2.0, -3.0]),
    (lambda x: np.sum(np.maximum(x, 0) * [1, 2, 3]), [0.0, 1.0, -1.0], [0.5, 2.0, 0.0]),
    (lambda x: np.sum(np.where(x > 0, x, 0) * [1, 2, 3]), [0.0, 1.0, -1.0], [0.0, 2.0, 0.0]),
    (lambda x: np.sum(np.clip(x, -1, 1) * [1, 2, 3]), [0.0, 1.0, -1.0], [1.0, 2.0, 3.0]),
    (lambda x: np.max(x), [1.0, 3.0, 3.0], [0.0, 0.5, 0.5]),
    (lambda x: np.median(x), [1.0, 2.0, 2.0, 0.0], [0.5, 0.5, 0.0, 0.0]),
    (lambda x: np.sort(x) @ np.array([1.0, 10.0, 100.0]), [2.0, 2.0, 1.0], [10.0, 100.0, 1.0]),
    (lambda x: np.sum(np.sign(x) * x), [0.0, 1.0, -1.0], [0.0, 1.0, -1.0]),
    (lambda x: np.linalg.norm(x), [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]),
])
def test_kinks_follow_the_documented_conventions_in_both_modes(f, x, want):
    x = np.array(x)
    (g,), value = autodiff(ReverseWithPrimal, f, Active, Active(x.copy()))
    assert value == f(x.copy())
    np.testing.assert_array_equal(g, want)
    for v in np.eye(len(x)):
        assert autodiff(Forward, f, Duplicated(x.copy(), v))[0] == pytest.approx(g @ v)


# -- pytrees of parameters --------------------------------------------------------------------
def _mlp_loss(p):
    h = np.tanh(X_DATA @ p["W1"] + p["b1"])
    return np.mean((p["scale"] * h @ p["w2"] - np.cos(X_DATA[:, 0])) ** 2)


def test_dict_of_parameters_active_duplicated_and_forward():
    params = {"W1": 0.5 * RNG.standard_normal((3, 4)), "b1": np.zeros(4),
              "w2": 0.5 * RNG.standard_normal(4), "scale": 1.5}
    sizes = [("W1", 12), ("b1", 4), ("w2", 4)]

    def unflatten(v):
        p, at = {}, 0
        for key, n in sizes:
            p[key], at = v[at:at + n].reshape(np.shape(params[key])), at + n
        p["scale"] = v[at]
        return p
    v0 = np.concatenate([np.ravel(params[k]) for k, _ in sizes] + [[params["scale"]]])
    want = _fd(lambda v: _mlp_loss(unflatten(v)), v0)

    def flat(p):
        return np.concatenate([np.ravel(p[k]) for k, _ in sizes] + [[p["scale"]]])
    (g,), = autodiff(Reverse, _mlp_loss, Active, Active(dict(params)))
    np.testing.assert_allclose(flat(g), want, rtol=0, atol=1e-6 * np.max(np.abs(want)))
    shadow = {"W1": np.zeros((3, 4)), "b1": np.zeros(4), "w2": np.zeros(4), "scale": 0.0}
    autodiff(Reverse, _mlp_loss, Active, Duplicated(dict(params), shadow))
    np.testing.assert_allclose(flat(shadow), want, rtol=0, atol=1e-6 * np.max(np.abs(want)))
    ones = {"W1": np.ones((3, 4)), "b1": np.ones(4), "w2": np.ones(4), "scale": 1.0}
    tangent, = autodiff(Forward, _mlp_loss, Duplicated(dict(params), ones))
    assert tangent == pytest.approx(np.sum(want), rel=1e-6)


# -- dtype promotion (NEP 50) with float32 data -----------------------------------------------
X32 = np.array([0.5, 1.5, -0.2, 0.7], dtype=np.float32)


@pytest.mark.parametrize("f", [
    lambda x: x * 2.5, lambda x: x * np.float64(2.5), lambda x: x * np.arange(4.0),
    lambda x: np.exp(x) ** 2.0 / 3.0, lambda x: np.where(x > 0, x, 0.1),
    lambda x: np.where(x > 0, x, np.zeros(4)), lambda x: np.maximum(x, np.float64(0.1)),
    lambda x: np.interp(x, [0.0, 1.0], [1.0, 3.0]), lambda x: np.cumsum(x) * np.arange(4.0),
    lambda x: sp.erf(x) + sp.gammaln(x + 2), lambda x: np.abs(np.fft.rfft(x)),
    lambda x: np.var(x, keepdims=True), lambda x: logsumexp(x, keepdims=True),
    lambda x: np.polyval(np.array([1.0, 2.0]), x),
])
def test_float32_results_have_numpys_dtype_and_value(f):
    want = f(X32.copy())
    tangent, value = autodiff(ForwardWithPrimal, f, Duplicated(X32.copy(), np.ones(4, np.float32)))
    assert np.asarray(value).dtype == want.dtype
    np.testing.assert_array_equal(value, want)
    (g,), = autodiff(Reverse, lambda x: np.sum(f(x)), Active, Active(X32.copy()))
    assert g.dtype == np.float32


# -- properties over random shapes and values -------------------------------------------------
@settings(max_examples=15, deadline=None)
@given(n=st.integers(2, 6), k=st.integers(2, 5), seed=st.integers(0, 2 ** 16))
def test_softmax_cross_entropy_any_shape(n, k, seed):
    rng = np.random.default_rng(seed)
    logits_in, labels = rng.standard_normal((n, k)), rng.integers(0, k, n)

    def f(w):
        logits = logits_in * w
        return np.mean(logsumexp(logits, axis=1) - logits[np.arange(n), labels])
    check(f, 1.0 + 0.3 * rng.standard_normal((n, k)))


@settings(max_examples=15, deadline=None)
@given(rows=st.integers(3, 6), cols=st.integers(1, 4), seed=st.integers(0, 2 ** 16))
def test_batch_norm_and_quantiles_any_shape(rows, cols, seed):
    rng = np.random.default_rng(seed)
    weights = rng.standard_normal((rows, cols))

    def f(x):
        h = (x - x.mean(0, keepdims=True)) / np.sqrt(x.var(0, ddof=1, keepdims=True) + 1e-3)
        return np.sum(h * weights) + np.sum(np.quantile(x, 0.3, axis=0)) + np.median(x)
    check(f, rng.standard_normal((rows, cols)))


# -- SciPy functions called on traced values: an error naming the replacement -----------------
@pytest.mark.parametrize("call, replacement", [
    (lambda a: sp.logsumexp(a), "tape.scipy.special"),
    (lambda a: scipy.linalg.solve(np.eye(3) + np.outer(a, a), a), "tape.scipy.linalg"),
    (lambda a: scipy.stats.norm.logpdf(a, 0.0, 1.0), "tape.scipy.stats"),
])
def test_scipy_on_a_traced_value_names_the_tape_replacement(call, replacement):
    with pytest.raises(tape.NonDifferentiableError, match=re.escape(replacement)):
        autodiff(Reverse, lambda a: np.sum(call(a)), Active, Active(np.array([1.0, 2.0, 0.5])))


def test_unsupported_numpy_calls_name_the_function():
    x = np.array([1.0, 3.0, 2.0])
    for call, name in [(lambda a: np.nanvar(a, where=a > 1.5), "np.nanvar"),
                       (lambda a: np.polynomial.polynomial.polymul(a, a), "polymul"),
                       (lambda a: np.percentile(a, 30, method="weibull"), "weibull")]:
        with pytest.raises((NotImplementedError, tape.NonDifferentiableError), match=name):
            autodiff(Reverse, lambda a: np.sum(call(a)), Active, Active(x.copy()))
