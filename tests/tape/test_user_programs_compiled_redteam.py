"""Programs written in plain NumPy/SciPy without AD in mind, from domains the other program
suites do not cover: Monte Carlo option pricing under a seeded generator, finite-volume and
finite-difference solvers with slicing and in-place updates, ray tracing with np.where
branches, masked attention, a Matérn GP, a Morse potential with a cutoff, hand-written L-BFGS,
a Poisson GLM with offsets, a mixture density loss, log-domain Sinkhorn, Runge-Kutta-Fehlberg
with step control, portfolio variance through np.cov, total variation with np.roll and
np.gradient, interpolation by np.searchsorted, quaternion chains, hinge and Huber losses,
accelerator transfer matrices, np.polyfit, pharmacokinetics, planar kinematics with
np.cumsum, Cox partial likelihood, ridge leave-one-out, InfoNCE, Bradley-Terry, wave and
smoothing stencils, FFT band power.

Each program f(x, c) (x a float64 vector, c Const data) is checked in float64:
  1. the primal under eager ReverseWithPrimal equals plain NumPy's;
  2. the eager reverse gradient equals central finite differences at a smooth point;
  3. eager Forward mode on a fixed direction equals the reverse gradient's projection;
  4. tape.compile(Reverse, f, Active, Active, Const), called at 3-4 new points (and new data),
     equals eager autodiff at every call; so does tape.compile(ForwardWithPrimal, ...).
The last test moves the points far enough that boolean masks change their counts (rays that
miss, pairs past the cutoff, keys masked by -inf) and Const scalars change a loop's length.
Code a user would write with scipy.special.logsumexp, or with a plain np.empty/np.zeros buffer
filled by traced values, is refused with an error naming the fix; the programs use the fix
(tape.scipy.special.logsumexp, np.pad, np.zeros_like, a list and np.array).
"""
from __future__ import annotations

import types
import warnings

import numpy as np
import pytest

pytest.importorskip("scipy")

import scipy.special as sp  # noqa: E402

import tape.scipy.special as tsp  # noqa: E402

import tape  # noqa: E402
from tape import (Active, Const, Duplicated, Forward, ForwardWithPrimal, Reverse,  # noqa: E402
                  ReverseWithPrimal)

from numeric_checks import close, fd_gradient  # noqa: E402

R = np.random.default_rng(7)


def _softmax(z, axis=-1):
    z = z - np.max(z, axis=axis, keepdims=True)
    e = np.exp(z)
    return e / np.sum(e, axis=axis, keepdims=True)


# --------------------------------------------------------------------------- finance
def mc_asian_call(x, c):
    """Arithmetic Asian call by Monte Carlo (pathwise): GBM paths from a seeded Generator."""
    s0, sigma, r = x[0], x[1], x[2]
    K, T, n_steps, n_paths = c
    rng = np.random.default_rng(1234)
    dt = T / n_steps
    z = rng.standard_normal((n_paths, n_steps))
    log_inc = (r - 0.5 * sigma ** 2) * dt + sigma * np.sqrt(dt) * z
    paths = s0 * np.exp(np.cumsum(log_inc, axis=1))
    avg = paths.mean(axis=1)
    payoff = np.maximum(avg - K, 0.0)
    return np.exp(-r * T) * payoff.mean()


def mc_call_const_draws(x, z):
    """European call by Monte Carlo, the normal draws passed in as data."""
    s0, sigma, r = x
    T = 1.0
    st = s0 * np.exp((r - 0.5 * sigma ** 2) * T + sigma * np.sqrt(T) * z)
    return np.exp(-r * T) * np.mean(np.maximum(st - 1.0, 0.0))


def portfolio_variance(x, R_):
    """Mean-variance objective: softmax weights, np.cov of returns shifted by views."""
    k = R_.shape[1]
    w = _softmax(x[:k])
    rets = R_ + x[k:] * 0.01
    S = np.cov(rets, rowvar=False)
    mu = rets.mean(axis=0)
    return w @ S @ w - 0.5 * w @ mu


# --------------------------------------------------------------------------- PDE / ODE
def burgers_upwind(x, c):
    """Finite-volume Burgers with a Godunov-style upwind flux chosen by np.where, ghost
    cells by slicing, in-place updates of a fresh buffer."""
    nu, steps = c
    u = x.copy()
    dx, dt = 1.0 / u.size, 0.2 / u.size
    for _ in range(steps):
        ug = np.pad(u, 1, mode="edge")      # outflow (zero-gradient) ghost cells
        ul, ur = ug[:-1], ug[1:]
        flux = np.where(ul + ur > 0, 0.5 * ul ** 2, 0.5 * ur ** 2)
        u = u - dt / dx * (flux[1:] - flux[:-1])
        u[1:-1] += nu * dt / dx ** 2 * (u[2:] - 2 * u[1:-1] + u[:-2])
    return np.sum(u ** 2) * dx


def wave_leapfrog(x, c):
    """1-D wave equation, leapfrog, Dirichlet ends written in place on np.empty buffers."""
    n_steps, = c
    speed = x[0]
    u_prev = np.sin(np.pi * np.linspace(0, 1, x.size - 1)) * x[1:]
    u = u_prev.copy()
    r2 = (speed * 0.4) ** 2
    for _ in range(n_steps):
        u_next = np.empty_like(u)
        u_next[1:-1] = 2 * u[1:-1] - u_prev[1:-1] + r2 * (u[2:] - 2 * u[1:-1] + u[:-2])
        u_next[0] = 0.0
        u_next[-1] = 0.0
        u_prev, u = u, u_next
    return np.sum(u ** 2)


def rkf45(x, c):
    """Runge-Kutta-Fehlberg 4(5), Butcher tableau as arrays, step-size control: the number
    of accepted and rejected steps follows the values."""
    a, b = x[0], x[1]
    T, tol = c
    A = np.array([[0, 0, 0, 0, 0], [1 / 4, 0, 0, 0, 0], [3 / 32, 9 / 32, 0, 0, 0],
                  [1932 / 2197, -7200 / 2197, 7296 / 2197, 0, 0],
                  [439 / 216, -8, 3680 / 513, -845 / 4104, 0],
                  [-8 / 27, 2, -3544 / 2565, 1859 / 4104, -11 / 40]])
    b4 = np.array([25 / 216, 0, 1408 / 2565, 2197 / 4104, -1 / 5, 0])
    b5 = np.array([16 / 135, 0, 6656 / 12825, 28561 / 56430, -9 / 50, 2 / 55])

    def rhs(y):
        return np.array([y[1], -a * y[0] - b * y[1] ** 3])

    y = np.array([1.0, 0.0])
    t, h = 0.0, 0.1
    while t < T:
        h = min(h, T - t)
        ks = []
        for i in range(6):
            ks.append(rhs(y + h * (A[i, :i] @ np.array(ks) if i else 0.0)))
        k = np.array(ks)
        y4 = y + h * (b4 @ k)
        y5 = y + h * (b5 @ k)
        err = np.linalg.norm(y5 - y4)
        if err <= tol:
            t += h
            y = y5
        h = 0.9 * h * (tol / max(err, 1e-14)) ** 0.2
    return y[0] ** 2 + y[1]


def spring_mass_chain(x, c):
    """Masses on a line: positions from np.cumsum of gaps, spring forces from np.diff, one
    explicit Euler step of the velocities, kinetic plus potential energy."""
    k, rest = c
    pos = np.cumsum(np.concatenate(([0.0], x)))
    ext = np.diff(pos) - rest
    f_spring = k * ext
    force = np.zeros_like(pos)
    force[:-1] += f_spring
    force[1:] -= f_spring
    v = 0.1 * force
    return 0.5 * np.sum(v ** 2) + 0.5 * np.sum(k * ext ** 2)


def beam_transfer(x, c):
    """Accelerator optics: drift and thin-quad 2x2 matrices built from traced strengths,
    multiplied in a loop; sigma-matrix propagation, final beam size plus Twiss mismatch."""
    L, = c
    S = np.array([[1.0, 0.0], [0.0, 0.5]])
    M = np.eye(2)
    for kq in x:
        Q = np.array([[1.0, 0.0], [-kq, 1.0]])
        D = np.array([[1.0, L], [0.0, 1.0]])
        M = D @ Q @ M
    S1 = M @ S @ M.T
    return np.sqrt(S1[0, 0]) + (np.trace(M) / 2) ** 2


def pk_one_compartment(x, c):
    """Oral dosing pharmacokinetics: superposed doses switched on by np.where(t > t_dose),
    log-normal observation likelihood."""
    ka, ke, V = np.exp(x)
    t, doses, t_dose, y = c
    dt = t[:, None] - t_dose[None, :]
    amt = doses * ka / (V * (ka - ke))
    contrib = np.where(dt > 0, amt * (np.exp(-ke * np.maximum(dt, 0)) - np.exp(-ka * np.maximum(dt, 0))), 0.0)
    conc = contrib.sum(axis=1)
    return np.sum((np.log(conc) - np.log(y)) ** 2)


def planar_arm(x, c):
    """Planar robot arm forward kinematics: joint angles accumulated by np.cumsum, link tip
    positions by np.cumsum of the link vectors, distance to a target plus a joint penalty."""
    lengths, target = c
    phi = np.cumsum(x)
    px = np.cumsum(lengths * np.cos(phi))
    py = np.cumsum(lengths * np.sin(phi))
    tip = np.array([px[-1], py[-1]])
    return np.sum((tip - target) ** 2) + 0.01 * np.sum(np.diff(x) ** 2)


# --------------------------------------------------------------------------- graphics / geometry
def ray_sphere(x, c):
    """Ray-sphere intersection: discriminant, hits chosen by np.where, Lambert shading."""
    origins, dirs = c
    center, radius = x[:3], x[3]
    oc = origins - center
    b = np.sum(oc * dirs, axis=1)
    cc = np.sum(oc * oc, axis=1) - radius ** 2
    disc = b * b - cc
    hit = disc > 0
    t = np.where(hit, -b - np.sqrt(np.where(hit, disc, 1.0)), 0.0)
    p = origins + t[:, None] * dirs
    n = (p - center) / radius
    light = np.array([0.0, 0.6, 0.8])
    shade = np.where(hit, np.maximum(n @ light, 0.0), 0.0)
    return np.sum(shade ** 2)


def _qmul(p, q):
    w1, x1, y1, z1 = p[0], p[1], p[2], p[3]
    w2, x2, y2, z2 = q[0], q[1], q[2], q[3]
    return np.array([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
                     w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                     w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
                     w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2])


def quaternion_chain(x, c):
    """Rotation chain: axis-angle joints to unit quaternions, composed with a hand-written
    Hamilton product, then v' = q v q*; distance to a target vector."""
    axes, v, target = c
    q = np.array([1.0, 0.0, 0.0, 0.0])
    for ang, ax in zip(x, axes):
        ax = ax / np.linalg.norm(ax)
        qi = np.concatenate(([np.cos(ang / 2)], np.sin(ang / 2) * ax))
        q = _qmul(q, qi)
    q = q / np.linalg.norm(q)
    vq = np.concatenate(([0.0], v))
    conj = q * np.array([1.0, -1.0, -1.0, -1.0])
    out = _qmul(_qmul(q, vq), conj)[1:]
    return np.sum((out - target) ** 2)


def morse_cutoff(x, c):
    """Morse pair potential over np.triu_indices pairs, smoothly switched off past a cutoff
    selected by a boolean mask."""
    rc, = c
    pos = x.reshape(-1, 2)
    i, j = np.triu_indices(pos.shape[0], k=1)
    d = np.linalg.norm(pos[i] - pos[j], axis=1)
    inside = d < rc
    dd = d[inside]
    e = (1 - np.exp(-1.5 * (dd - 1.0))) ** 2 - 1
    sw = 0.5 * (np.cos(np.pi * dd / rc) + 1)
    return np.sum(e * sw)


# --------------------------------------------------------------------------- images / signals
def tv_denoise_roll(x, c):
    """Total-variation denoising energy, forward differences by np.roll (periodic)."""
    f, lam = c
    u = x.reshape(f.shape)
    dx = np.roll(u, -1, axis=0) - u
    dy = np.roll(u, -1, axis=1) - u
    return 0.5 * np.sum((u - f) ** 2) + lam * np.sum(np.sqrt(dx ** 2 + dy ** 2 + 1e-3))


def tv_denoise_gradient(x, c):
    """The same energy with np.gradient (central differences, one-sided at the edges)."""
    f, lam = c
    u = x.reshape(f.shape)
    gy, gx = np.gradient(u)
    return 0.5 * np.sum((u - f) ** 2) + lam * np.sum(np.sqrt(gx ** 2 + gy ** 2 + 1e-3))


def savgol_smoothing(x, c):
    """Moving-average smoothing by np.convolve(mode='same') and a roughness penalty."""
    y, = c
    kernel = np.ones(5) / 5
    s = np.convolve(x, kernel, mode="same")
    return np.sum((s - y) ** 2) + 0.1 * np.sum(np.diff(s, n=2) ** 2)


def fft_band_power(x, c):
    """Signal from a parametrised sum of sines; fraction of power in a frequency band."""
    t, band = c
    sig = x[0] * np.sin(2 * np.pi * 3 * t) + x[1] * np.sin(2 * np.pi * 7 * t) + x[2] * t
    P = np.abs(np.fft.rfft(sig)) ** 2
    freqs = np.fft.rfftfreq(t.size, d=t[1] - t[0])
    in_band = (freqs >= band[0]) & (freqs <= band[1])
    return P[in_band].sum() / P.sum()


def interp_searchsorted(x, c):
    """Piecewise-linear lookup by hand (np.searchsorted on traced queries) and np.interp on
    a traced table, same grid."""
    xp, q = c
    fp = np.cumsum(np.exp(x[:xp.size]))          # monotone table
    queries = q + 0.05 * x[xp.size:]
    idx = np.clip(np.searchsorted(xp, queries) - 1, 0, xp.size - 2)
    t = (queries - xp[idx]) / (xp[idx + 1] - xp[idx])
    hand = fp[idx] * (1 - t) + fp[idx + 1] * t
    lib = np.interp(queries, xp, fp)
    return np.sum(hand ** 2) + np.sum(lib)


def polyfit_polyval(x, c):
    """Least-squares polynomial through traced samples, evaluated elsewhere."""
    t, tq = c
    coef = np.polyfit(t, np.sin(x) + x ** 2, 3)
    return np.sum(np.polyval(coef, tq) ** 2)


# --------------------------------------------------------------------------- statistics / ML
def gp_matern52(x, c):
    """GP negative log marginal likelihood, Matérn 5/2 kernel on a precomputed distance
    matrix, Cholesky solves by np.linalg.solve on the factor."""
    X, y = c
    ell, sf2, sn2 = np.exp(x)
    d = np.sqrt(np.sum((X[:, None, :] - X[None, :, :]) ** 2, axis=-1))
    r = np.sqrt(5.0) * d / ell
    K = sf2 * (1 + r + r ** 2 / 3) * np.exp(-r) + sn2 * np.eye(len(y))
    L = np.linalg.cholesky(K)
    alpha = np.linalg.solve(L.T, np.linalg.solve(L, y))
    return 0.5 * y @ alpha + np.sum(np.log(np.diag(L))) + 0.5 * len(y) * np.log(2 * np.pi)


def lbfgs_logreg(x, c):
    """Logistic regression trained by a hand-written L-BFGS (two-loop recursion, Python
    lists of pairs, Armijo backtracking); loss after training, as a function of the start."""
    X, y, lam = c

    def loss_grad(w):
        z = X @ w
        p = 1 / (1 + np.exp(-z))
        loss = -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)) + 0.5 * lam * w @ w
        return loss, X.T @ (p - y) / len(y) + lam * w

    w = x.copy()
    f, g = loss_grad(w)
    S, Y = [], []
    for _ in range(4):
        q = g.copy()
        alphas = []
        for s, yv in reversed(list(zip(S, Y))):
            a = (s @ q) / (yv @ s)
            alphas.append(a)
            q = q - a * yv
        if S:
            q = q * (S[-1] @ Y[-1]) / (Y[-1] @ Y[-1])
        for (s, yv), a in zip(zip(S, Y), reversed(alphas)):
            bta = (yv @ q) / (yv @ s)
            q = q + s * (a - bta)
        step = 1.0
        while True:
            w_new = w - step * q
            f_new, g_new = loss_grad(w_new)
            if f_new <= f - 1e-4 * step * (g @ q) or step < 1e-3:
                break
            step *= 0.5
        S.append(w_new - w)
        Y.append(g_new - g)
        if len(S) > 3:
            S.pop(0)
            Y.pop(0)
        w, f, g = w_new, f_new, g_new
    return f


def poisson_glm_offset(x, c):
    """Poisson GLM with log-exposure offset; log y! through scipy.special.gammaln."""
    X, y, exposure = c
    eta = X @ x + np.log(exposure)
    return -np.sum(y * eta - np.exp(eta) - sp.gammaln(y + 1))


def mdn_loss(x, c):
    """Mixture density network head: linear layer -> (logits, means, log-sigmas) per sample,
    negative log-likelihood with logsumexp."""
    H, t = c
    K = 3
    W = x.reshape(H.shape[1], 3 * K)
    out = H @ W
    logits, mu, log_s = out[:, :K], out[:, K:2 * K], out[:, 2 * K:]
    log_pi = logits - tsp.logsumexp(logits, axis=1, keepdims=True)
    z = (t[:, None] - mu) / np.exp(log_s)
    comp = log_pi - 0.5 * z ** 2 - log_s - 0.5 * np.log(2 * np.pi)
    return -np.mean(tsp.logsumexp(comp, axis=1))


def sinkhorn_log(x, c):
    """Entropic OT between two point clouds in log space, fixed iterations; cost of the
    transport plan as a function of the source positions."""
    Y, eps = c
    X = x.reshape(-1, 2)
    C = np.sum((X[:, None, :] - Y[None, :, :]) ** 2, axis=-1)
    n, m = C.shape
    log_a, log_b = np.full(n, -np.log(n)), np.full(m, -np.log(m))
    f, g = np.zeros(n), np.zeros(m)
    for _ in range(30):
        f = eps * log_a - eps * tsp.logsumexp((g[None, :] - C) / eps, axis=1)
        g = eps * log_b - eps * tsp.logsumexp((f[:, None] - C) / eps, axis=0)
    P = np.exp((f[:, None] + g[None, :] - C) / eps)
    return np.sum(P * C)


def masked_attention(x, c):
    """Single-head attention with a key-padding mask applied by np.where(..., -np.inf)."""
    Xs, keep = c
    d = Xs.shape[1]
    Wq, Wk = x[:d * d].reshape(d, d), x[d * d:].reshape(d, d)
    Q, K = Xs @ Wq, Xs @ Wk
    scores = Q @ K.T / np.sqrt(d)
    scores = np.where(keep[None, :], scores, -np.inf)
    A = _softmax(scores, axis=-1)
    return np.sum((A @ Xs) ** 2)


def hinge_svm(x, c):
    """Soft-margin linear SVM: mean hinge with np.maximum plus an L2 penalty."""
    X, y = c
    margins = 1 - y * (X @ x[:-1] + x[-1])
    return np.mean(np.maximum(0.0, margins)) + 0.05 * x[:-1] @ x[:-1]


def huber_regression(x, c):
    """Robust regression: Huber loss written with np.where on |r| <= delta."""
    X, y, delta = c
    r = y - X @ x
    a = np.abs(r)
    return np.sum(np.where(a <= delta, 0.5 * r ** 2, delta * (a - 0.5 * delta)))


def cox_partial_likelihood(x, c):
    """Cox proportional hazards partial likelihood: risk sets by a reversed np.cumsum over
    times sorted by np.argsort."""
    X, times, events = c
    order = np.argsort(times)
    eta = (X @ x)[order]
    ev = events[order]
    risk = np.log(np.cumsum(np.exp(eta)[::-1])[::-1])
    return -np.sum((eta - risk)[ev.astype(bool)])


def ridge_loocv(x, c):
    """Leave-one-out CV error of ridge regression from the hat matrix diagonal (np.einsum);
    x is log lambda and a feature scaling."""
    X, y = c
    lam = np.exp(x[0])
    Xs = X * np.exp(x[1:])
    A = Xs.T @ Xs + lam * np.eye(Xs.shape[1])
    Hm = Xs @ np.linalg.solve(A, Xs.T)
    h = np.einsum("ii->i", Hm)
    resid = y - Hm @ y
    return np.mean((resid / (1 - h)) ** 2)


def infonce(x, c):
    """Contrastive InfoNCE: L2-normalised projections (np.linalg.norm keepdims), temperature
    scaled similarities, cross-entropy on the diagonal."""
    A, B, tau = c
    W = x.reshape(A.shape[1], -1)
    za, zb = A @ W, B @ W
    za = za / np.linalg.norm(za, axis=1, keepdims=True)
    zb = zb / np.linalg.norm(zb, axis=1, keepdims=True)
    logits = za @ zb.T / tau
    logp = logits - tsp.logsumexp(logits, axis=1, keepdims=True)
    return -np.mean(np.diag(logp))


def bradley_terry(x, c):
    """Pairwise-comparison ratings: fancy-indexed differences, np.logaddexp(0, -d)."""
    winners, losers = c
    d = x[winners] - x[losers]
    return np.sum(np.logaddexp(0.0, -d)) + 0.01 * np.sum(x ** 2)


def kde_bandwidth(x, c):
    """Leave-one-out KDE log-likelihood in the bandwidth, diagonal masked by -np.inf."""
    pts, = c
    h = np.exp(x[0])
    D = (pts[:, None] - pts[None, :]) ** 2
    logk = -D / (2 * h ** 2) - np.log(h * np.sqrt(2 * np.pi))
    np.fill_diagonal(logk, -np.inf)
    return -np.sum(tsp.logsumexp(logk, axis=1) - np.log(pts.size - 1)) + x[1] ** 2


# --------------------------------------------------------------------------- cases
def _pts(n, d=2, scale=1.0):
    return R.normal(size=(n, d)) * scale


_Xg = R.normal(size=(6, 2))
_yg = np.sin(_Xg[:, 0]) + 0.1 * R.normal(size=6)
_Xl = R.normal(size=(20, 3))
_yl = (R.random(20) < 1 / (1 + np.exp(-_Xl @ [1.0, -2.0, 0.5]))).astype(float)
_Xp = R.normal(size=(15, 3)) * 0.5
_expo = R.uniform(0.5, 2.0, 15)
_yp = R.poisson(_expo * np.exp(_Xp @ [0.3, -0.2, 0.5])).astype(float)
_H = R.normal(size=(10, 3))
_tm = R.normal(size=10)
_Xs = R.normal(size=(5, 3))
_Rp = R.normal(size=(30, 4)) * 0.02 + 0.01
_img = R.normal(size=(5, 6))
_ro = np.column_stack([R.uniform(-0.5, 0.5, 12), R.uniform(-0.5, 0.5, 12), np.full(12, -5.0)])
_rd = np.tile([0.0, 0.0, 1.0], (12, 1))
_Xsvm = R.normal(size=(20, 2))
_ysvm = np.sign(_Xsvm[:, 0] + 0.3 * _Xsvm[:, 1] + 0.2 * R.normal(size=20))
_Xh = R.normal(size=(15, 2))
_yh = _Xh @ [1.0, -1.0] + R.standard_t(2, size=15)
_Xc = R.normal(size=(12, 2))
_tc = R.exponential(size=12)
_ec = (R.random(12) < 0.7).astype(float)
_Xr = R.normal(size=(12, 3))
_yr = _Xr @ [1.0, 0.5, -1.0] + 0.3 * R.normal(size=12)
_Ai, _Bi = R.normal(size=(6, 3)), R.normal(size=(6, 3))
_w_i = np.array([0, 1, 2, 3, 0, 2, 1, 3, 0])
_l_i = np.array([1, 2, 3, 0, 2, 0, 3, 1, 3])
_t_fft = np.linspace(0, 1, 64, endpoint=False)
_axes = R.normal(size=(4, 3))
_xp = np.array([0.0, 0.5, 1.3, 2.0, 3.1])


def _jit(x, s=0.05, k=0):
    """Deterministic nearby points for later calls."""
    return x + s * np.cos(np.arange(x.size) * 1.7 + k)


def _calls(x0, c0, c1=None):
    c1 = c0 if c1 is None else c1
    return [(x0, c0), (_jit(x0, k=1), c0), (_jit(x0, k=2), c1), (_jit(x0, 0.03, k=3), c1)]


# name -> (f, calls, fd_tol)
CASES = {
    "mc_asian_call": (mc_asian_call, _calls(np.array([1.0, 0.3, 0.05]), (1.0, 1.0, 8, 200),
                                          (1.05, 1.0, 8, 200)), 1e-5),
    "mc_call_const_draws": (mc_call_const_draws, _calls(np.array([1.0, 0.25, 0.03]),
                                                      R.standard_normal(300), R.standard_normal(300)), 1e-5),
    "portfolio_variance": (portfolio_variance, _calls(np.array([0.1, -0.2, 0.3, 0.0, 1.0, -1.0, 0.5, 0.2]),
                                                    _Rp, _Rp[::-1].copy()), 1e-6),
    "burgers_upwind": (burgers_upwind, _calls(0.5 + 0.3 * np.sin(np.linspace(0, 3, 12)), (0.01, 6),
                                            (0.02, 8)), 1e-6),
    "wave_leapfrog": (wave_leapfrog, _calls(np.concatenate(([1.0], 1 + 0.1 * np.arange(10))), (8,), (11,)), 1e-6),
    "rkf45": (rkf45, _calls(np.array([2.0, 0.5]), (2.0, 1e-5), (3.0, 1e-5)), 1e-4),
    "spring_mass_chain": (spring_mass_chain, _calls(np.array([1.1, 0.9, 1.3, 0.8]),
                                                  (np.array([1.0, 2.0, 1.5, 0.7]), 1.0)), 1e-6),
    "beam_transfer": (beam_transfer, _calls(np.array([0.3, -0.4, 0.25, -0.2]), (1.0,), (1.3,)), 1e-6),
    "pk_one_compartment": (pk_one_compartment, _calls(
        np.log([1.2, 0.2, 3.0]),
        (np.linspace(0.5, 20, 10), np.array([100.0, 50.0]), np.array([0.0, 8.0]),
         np.array([20, 25, 18, 12, 8, 15, 14, 9, 5, 3.0]))), 1e-6),
    "planar_arm": (planar_arm, _calls(np.array([0.3, 0.5, -0.2]),
                                    (np.array([1.0, 0.8, 0.5]), np.array([1.2, 1.1])),
                                    (np.array([1.0, 0.8, 0.5]), np.array([0.2, 1.8]))), 1e-6),
    "ray_sphere": (ray_sphere, _calls(np.array([0.05, 0.02, 0.0, 0.3]), (_ro, _rd)), 1e-6),
    "quaternion_chain": (quaternion_chain, _calls(np.array([0.3, -0.7, 1.1, 0.4]),
                                                (_axes, np.array([1.0, 0.0, 0.0]), np.array([0.0, 1.0, 0.0])),
                                                (_axes, np.array([0.0, 0.0, 1.0]), np.array([0.0, 1.0, 0.0]))), 1e-6),
    "morse_cutoff": (morse_cutoff, _calls(np.array([0.0, 0.0, 1.1, 0.1, 0.3, 1.2, 2.6, 0.4, 1.4, 1.6]),
                                        (2.0,), (2.3,)), 1e-6),
    "tv_denoise_roll": (tv_denoise_roll, _calls(_img.ravel() * 0.8, (_img, 0.3), (_img[::-1].copy(), 0.5)), 1e-6),
    "tv_denoise_gradient": (tv_denoise_gradient, _calls(_img.ravel() * 0.8, (_img, 0.3),
                                                      (_img[::-1].copy(), 0.5)), 1e-6),
    "savgol_smoothing": (savgol_smoothing, _calls(np.sin(np.linspace(0, 3, 12)), (np.cos(np.linspace(0, 3, 12)),)),
                         1e-6),
    "fft_band_power": (fft_band_power, _calls(np.array([1.0, 0.7, 0.3]), (_t_fft, (2.0, 5.0)),
                                            (_t_fft, (5.0, 9.0))), 1e-6),
    "interp_searchsorted": (interp_searchsorted, _calls(np.array([0.1, -0.2, 0.3, 0.0, 0.2, 0.1, -0.1, 0.2]),
                                                      (_xp, np.array([0.2, 1.0, 2.7])),
                                                      (_xp, np.array([0.7, 1.7, 2.2]))), 1e-6),
    "polyfit_polyval": (polyfit_polyval, _calls(np.linspace(-1, 1, 7) + 0.1,
                                              (np.linspace(0, 1, 7), np.array([0.1, 0.45, 0.9]))), 1e-6),
    "gp_matern52": (gp_matern52, _calls(np.array([0.0, 0.2, -2.0]), (_Xg, _yg), (_Xg[::-1].copy(), _yg[::-1].copy())),
                    1e-6),
    "lbfgs_logreg": (lbfgs_logreg, _calls(np.array([0.1, -0.3, 0.2]), (_Xl, _yl, 0.1)), 1e-5),
    "poisson_glm_offset": (poisson_glm_offset, _calls(np.array([0.2, -0.1, 0.4]), (_Xp, _yp, _expo),
                                                    (_Xp, _yp[::-1].copy(), _expo)), 1e-6),
    "mdn_loss": (mdn_loss, _calls(R.normal(size=27) * 0.3, (_H, _tm)), 1e-6),
    "sinkhorn_log": (sinkhorn_log, _calls(_pts(4).ravel(), (_pts(5) + 0.5, 0.5), (_pts(5) - 0.5, 0.5)), 1e-5),
    "masked_attention": (masked_attention, _calls(R.normal(size=18) * 0.5,
                                                (_Xs, np.array([True, True, False, True, False])),
                                                (_Xs, np.array([True, False, True, True, True]))), 1e-6),
    "hinge_svm": (hinge_svm, _calls(np.array([0.8, 0.35, -0.07]), (_Xsvm, _ysvm)), 1e-6),
    "huber_regression": (huber_regression, _calls(np.array([0.83, -0.91]), (_Xh, _yh, 1.0)), 1e-6),
    "cox_partial_likelihood": (cox_partial_likelihood, _calls(np.array([0.4, -0.3]), (_Xc, _tc, _ec),
                                                            (_Xc, _tc[::-1].copy(), _ec)), 1e-6),
    "ridge_loocv": (ridge_loocv, _calls(np.array([-0.5, 0.1, 0.0, -0.1]), (_Xr, _yr)), 1e-6),
    "infonce": (infonce, _calls(R.normal(size=9) * 0.5, (_Ai, _Bi, 0.5), (_Bi, _Ai, 0.5)), 1e-6),
    "bradley_terry": (bradley_terry, _calls(np.array([0.2, -0.1, 0.4, 0.0]), (_w_i, _l_i),
                                          (_l_i, _w_i)), 1e-6),
    "kde_bandwidth": (kde_bandwidth, _calls(np.array([-0.5, 0.3]), (R.normal(size=10),)), 1e-6),
}

STATS: dict = {}


def _copy(c):
    if isinstance(c, np.ndarray):
        return c.copy()
    if isinstance(c, tuple):
        return tuple(_copy(v) for v in c)
    return c


@pytest.mark.parametrize("name", list(CASES))
def test_program_eager_forward_and_compiled(name):
    f, calls, tol = CASES[name]
    direction = np.cos(np.arange(calls[0][0].size) * 0.7 + 0.3)
    g = tape.compile(Reverse, f, Active, Active, Const)
    gf = tape.compile(ForwardWithPrimal, f, Duplicated, Duplicated, Const)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tape.CompileWarning)
        for k, (x, c) in enumerate(calls):
            want = f(x.copy(), _copy(c))
            (g_eager, _), v_eager = tape.autodiff(ReverseWithPrimal, f, Active,
                                                  Active(x.copy()), Const(_copy(c)))
            np.testing.assert_allclose(v_eager, want, rtol=1e-12, atol=1e-14)
            if k == 0:
                fd = fd_gradient(lambda z: f(z, _copy(c)), x.copy())
                close(g_eager, fd, tol)
                t, = tape.autodiff(Forward, f, Duplicated(x.copy(), direction.copy()),
                                   Const(_copy(c)))
                np.testing.assert_allclose(t, g_eager @ direction, rtol=1e-9, atol=1e-11)
            (g_comp, _), = g(Active(x.copy()), Const(_copy(c)))
            np.testing.assert_allclose(g_comp, g_eager, rtol=1e-10, atol=1e-12,
                                       err_msg=f"compiled call {k}")
            t_comp, v_comp = gf(Duplicated(x.copy(), direction.copy()), Const(_copy(c)))
            np.testing.assert_allclose(v_comp, want, rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(t_comp, g_eager @ direction, rtol=1e-9, atol=1e-11,
                                       err_msg=f"compiled forward call {k}")
    STATS[name] = g.stats


_XM = np.array([0.0, 0.0, 1.1, 0.1, 0.3, 1.2, 2.6, 0.4, 1.4, 1.6])
_XA = R.normal(size=18) * 0.5
_X0 = np.array([0.05, 0.02, 0.0, 0.3])
MOVES = {
    # every ray hits, some miss, all miss, back
    "ray_sphere": [(_X0, (_ro, _rd)), (_X0 + [0.3, 0, 0, 0], (_ro, _rd)),
                   (_X0 + [0, 0, 0, 0.2], (_ro, _rd)), (_X0 + [5, 0, 0, 0], (_ro, _rd)),
                   (_X0, (_ro, _rd))],
    # 7, 6 and all 10 pairs inside the cutoff
    "morse_cutoff": [(_XM, (2.0,)), (_XM * 1.3, (2.0,)), (_XM * 0.6, (2.0,)), (_XM, (2.0,))],
    "masked_attention": [(_XA, (_Xs, np.array(k, bool)))
                         for k in ([1, 1, 0, 1, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1], [0, 1, 0, 0, 1])],
    "rkf45": [(np.array([2.0, 0.5]), (2.0, 1e-5)), (np.array([8.0, 0.5]), (2.0, 1e-7)),
              (np.array([2.0, 0.5]), (2.0, 1e-5))],
    "hinge_svm": [(np.array([0.8, 0.35, -0.07]), (_Xsvm, _ysvm)), (np.array([3.0, 1.0, 0.5]), (_Xsvm, _ysvm)),
                  (np.array([0.01, 0.02, 0.003]), (_Xsvm, _ysvm))],
    "huber_regression": [(np.array([0.83, -0.91]), (_Xh, _yh, 1.0)), (np.array([3.0, 1.0]), (_Xh, _yh, 1.0)),
                         (np.array([1.0, -1.0]), (_Xh, _yh, 1.0))],
}


@pytest.mark.parametrize("name", list(MOVES))
def test_compiled_calls_where_masks_and_loop_counts_change(name):
    f = CASES[name][0]
    g = tape.compile(ReverseWithPrimal, f, Active, Active, Const)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tape.CompileWarning)
        for k, (x, c) in enumerate(MOVES[name]):
            want = f(x.copy(), _copy(c))
            (g_eager, _), = tape.autodiff(Reverse, f, Active, Active(x.copy()), Const(_copy(c)))
            (g_comp, _), v = g(Active(x.copy()), Const(_copy(c)))
            np.testing.assert_allclose(v, want, rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(g_comp, g_eager, rtol=1e-10, atol=1e-12,
                                       err_msg=f"compiled call {k}")
    assert g.stats.eager_calls == 0, g.stats.eager_reasons


def cox_logaddexp_accumulate(x, c):
    """The Cox partial likelihood with its risk sets in the numerically stable spelling: a
    running log-sum-exp by np.logaddexp.accumulate over the reversed sorted scores."""
    X, times, events = c
    order = np.argsort(times)
    eta = (X @ x)[order]
    risk = np.logaddexp.accumulate(eta[::-1])[::-1]
    return -np.sum((eta - risk)[events[order].astype(bool)])


def test_running_logsumexp_by_logaddexp_accumulate():
    x, c = np.array([0.4, -0.3]), (_Xc, _tc, _ec)
    want = cox_partial_likelihood(x, c)
    np.testing.assert_allclose(cox_logaddexp_accumulate(x, c), want, rtol=1e-12)
    (g, _), v = tape.autodiff(ReverseWithPrimal, cox_logaddexp_accumulate, Active,
                              Active(x.copy()), Const(c))
    np.testing.assert_allclose(v, want, rtol=1e-12)
    close(g, fd_gradient(lambda z: cox_logaddexp_accumulate(z, c), x.copy()), 1e-6)


def _mlp_with_options(x, opts):
    """A small regression net whose activation and penalty come in an options object."""
    X, y = opts.X, opts.y
    W = x[:6].reshape(3, 2)
    h = opts.activation(X @ W)
    return np.mean((h @ x[6:] - y) ** 2) + opts.lam * x @ x


def _opts(activation):
    return types.SimpleNamespace(X=_Xr, y=_yr, lam=0.01, activation=activation)


@pytest.mark.parametrize("activation", [np.tanh, lambda v: v / (1 + np.abs(v))],
                         ids=["ufunc", "function"])
def test_options_object_as_const_runs_eagerly_with_the_right_values(activation):
    x = np.linspace(-0.5, 0.6, 8)
    g = tape.compile(Reverse, _mlp_with_options, Active, Active, Const)
    for k in range(3):
        xk = _jit(x, k=k)
        (want, _), = tape.autodiff(Reverse, _mlp_with_options, Active, Active(xk.copy()),
                                   Const(_opts(activation)))
        close(want, fd_gradient(lambda z: _mlp_with_options(z, _opts(activation)), xk.copy()))
        (got, _), = g(Active(xk.copy()), Const(_opts(activation)))
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_options_object_as_const_is_compiled_or_the_reason_fits_a_const():
    x = np.linspace(-0.5, 0.6, 8)
    g = tape.compile(Reverse, _mlp_with_options, Active, Active, Const)
    for k in range(3):
        g(Active(_jit(x, k=k)), Const(_opts(np.tanh)))
    stats = g.stats
    assert stats.eager_calls == 0 or not any(
        "differentiate through" in r or "register_pytree" in r for r in stats.eager_reasons), stats
