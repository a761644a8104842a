"""Scientific programs written the way a user writes them, second set: integrators with loops
on a tolerance, Newton and Gauss-Newton solves, finite-element assembly by `np.add.at`, grids
updated in place, a Kalman smoother, a hand-written spline, quadrature, option pricing,
molecular energies and hand-written linear algebra. Each is a scalar function of one float64
parameter vector; `step` arguments let a test swap a loop body for its `tape.checkpoint`.

`PROGRAMS` maps a name to ``(f, points)``: the function and three or four points at which it
is differentiated; the points change the program's loop counts, pivots or masks, so that a
compiled program must retrace or fall back. Used by
tests/tape/test_scientific_programs_redteam2.py.

>>> f, points = PROGRAMS["black-scholes"]
>>> bool(np.isfinite(f(points[0])))
True
"""
from __future__ import annotations

import numpy as np
from scipy import special as sp

import tape.scipy.stats as tst


def _plain(step):
    return step


def adaptive_rk4(p, wrap=_plain):
    """RK4 with step doubling: the step is accepted or halved by a test on the traced error,
    so the number of steps depends on the parameters."""
    def rk4(y, h):
        rhs = lambda y: np.array([y[1], -p[0] * y[0] - p[1] * y[1]])   # noqa: E731
        k1 = rhs(y)
        k2 = rhs(y + 0.5 * h * k1)
        k3 = rhs(y + 0.5 * h * k2)
        k4 = rhs(y + h * k3)
        return y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    step = wrap(rk4)
    y, t, h, end = np.array([1.0, 0.0]), 0.0, 0.2, 1.0
    while t < end - 1e-12:
        h = min(h, end - t)
        full = step(y, h)
        half = step(step(y, 0.5 * h), 0.5 * h)
        if np.max(np.abs(full - half)) < 1e-5:
            y, t, h = half, t + h, h * 1.5
        else:
            h = h * 0.5
    return y[0] ** 2 + y[1]


def backward_euler_newton(p, wrap=_plain):
    """Backward Euler for a stiff ODE, each implicit step solved by Newton until |dz| < 1e-14."""
    def implicit_step(y, t):
        z = y
        while True:
            dz = (z - y + 0.1 * (p[0] * (z - np.cos(t)) + z ** 3)) / (1 + 0.1 * (p[0] + 3 * z ** 2))
            z = z - dz
            if abs(dz) < 1e-14:
                return z
    step = wrap(implicit_step)
    y = p[1]
    for n in range(10):
        y = step(y, 0.1 * (n + 1))
    return y


def fem_poisson(p):
    """1-D finite elements: element stiffness scattered with np.add.at, Dirichlet row written
    in place, dense solve."""
    n = 5
    ke = (np.exp(p[:n]) * n)[:, None, None] * np.array([[1.0, -1.0], [-1.0, 1.0]])
    stiffness = np.zeros_like(p, shape=(n + 1, n + 1))
    conn = np.stack([np.arange(n), np.arange(1, n + 1)], axis=1)
    rows = np.broadcast_to(conn[:, :, None], (n, 2, 2))
    cols = np.broadcast_to(conn[:, None, :], (n, 2, 2))
    np.add.at(stiffness, (rows, cols), ke)
    stiffness[0, :] = 0.0
    stiffness[0, 0] = 1.0
    load = np.full(n + 1, 1.0 / n)
    load[0] = 0.0
    u = np.linalg.solve(stiffness, load)
    return u[-1] + np.sum(u ** 2)


def heat_inplace(p, wrap=_plain):
    """u[1:-1] += r * (u[2:] - 2 u[1:-1] + u[:-2]) in a loop."""
    def advance(u):
        u = u.copy()
        u[1:-1] += 0.3 * p[2] * (u[2:] - 2 * u[1:-1] + u[:-2])
        return u
    step = wrap(advance)
    x = np.linspace(0, 1, 10)
    u = p[0] * np.sin(np.pi * x) + p[1] * x * (1 - x)
    for _ in range(25):
        u = step(u)
    return np.sum(u ** 2)


def heat_until_decay(p):
    """Explicit heat steps until the peak falls below 0.2: the step count depends on p."""
    u = p[0] * np.sin(np.pi * np.linspace(0, 1, 8))
    steps = 0
    while np.max(np.abs(u)) > 0.2 and steps < 200:
        u[1:-1] += 0.25 * p[1] * (u[2:] - 2 * u[1:-1] + u[:-2])
        steps += 1
    return np.sum(u) * (1 + steps)


_KALMAN_Y = np.array([0.3, 0.9, 1.4, 1.2, 2.1, 2.7])


def kalman_rts(p):
    """Kalman filter into preallocated buffers, then a Rauch-Tung-Striebel smoother."""
    q, r = np.exp(p[0]), np.exp(p[1])
    trans, obs = np.array([[1.0, 1.0], [0.0, 1.0]]), np.array([[1.0, 0.0]])
    n = _KALMAN_Y.size
    m, cov_f = np.zeros_like(p, shape=(n, 2)), np.zeros_like(p, shape=(n, 2, 2))
    m_pred, cov_pred = np.zeros_like(p, shape=(n, 2)), np.zeros_like(p, shape=(n, 2, 2))
    mean, cov = np.zeros(2), np.eye(2) * 5.0
    for k in range(n):
        mean, cov = trans @ mean, trans @ cov @ trans.T + q * np.eye(2)
        m_pred[k], cov_pred[k] = mean, cov
        gain = cov @ obs.T / (obs @ cov @ obs.T + r)
        mean = mean + (gain * (_KALMAN_Y[k] - obs @ mean)).ravel()
        cov = cov - gain @ obs @ cov
        m[k], cov_f[k] = mean, cov
    ms, cov_s = m.copy(), cov_f.copy()
    for k in range(n - 2, -1, -1):
        g = cov_f[k] @ trans.T @ np.linalg.inv(cov_pred[k + 1])
        ms[k] = m[k] + g @ (ms[k + 1] - m_pred[k + 1])
        cov_s[k] = cov_f[k] + g @ (cov_s[k + 1] - cov_pred[k + 1]) @ g.T
    return np.sum(ms[:, 0] ** 2) + np.trace(cov_s[0])


_KNOTS = np.array([0.0, 0.4, 1.0, 1.5, 2.2, 3.0])


def cubic_spline(y):
    """Natural cubic spline by the Thomas algorithm with scalar writes, evaluated at knots
    found by np.searchsorted."""
    n, h = _KNOTS.size, np.diff(_KNOTS)
    lower, diag, upper = np.zeros(n), np.ones(n), np.zeros(n)
    rhs = np.zeros_like(y)
    for i in range(1, n - 1):
        lower[i], diag[i], upper[i] = h[i - 1] / 6, (h[i - 1] + h[i]) / 3, h[i] / 6
        rhs[i] = (y[i + 1] - y[i]) / h[i] - (y[i] - y[i - 1]) / h[i - 1]
    c, d = np.zeros(n), np.zeros_like(y)
    c[0], d[0] = upper[0] / diag[0], rhs[0] / diag[0]
    for i in range(1, n):
        den = diag[i] - lower[i] * c[i - 1]
        c[i], d[i] = upper[i] / den, (rhs[i] - lower[i] * d[i - 1]) / den
    curv = np.zeros_like(y)
    curv[-1] = d[-1]
    for i in range(n - 2, -1, -1):
        curv[i] = d[i] - c[i] * curv[i + 1]
    xq = np.array([0.2, 1.2, 2.5])
    k = np.searchsorted(_KNOTS, xq) - 1
    t0, t1 = _KNOTS[k], _KNOTS[k + 1]
    hk = t1 - t0
    s = ((curv[k] * (t1 - xq) ** 3 + curv[k + 1] * (xq - t0) ** 3) / (6 * hk)
         + (y[k] / hk - curv[k] * hk / 6) * (t1 - xq)
         + (y[k + 1] / hk - curv[k + 1] * hk / 6) * (xq - t0))
    return np.sum(s ** 2) + np.interp(1.7, _KNOTS, y * y)


_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(8)


def quadrature(p):
    """Trapezoid and Simpson by hand on a grid whose end is a parameter, and Gauss-Legendre."""
    x = np.linspace(0, p[0], 11)
    y = np.exp(-p[1] * x ** 2) * np.cos(x)
    h = x[1] - x[0]
    trap = h * (0.5 * y[0] + np.sum(y[1:-1]) + 0.5 * y[-1])
    simpson = h / 3 * (y[0] + 4 * np.sum(y[1:-1:2]) + 2 * np.sum(y[2:-1:2]) + y[-1])
    xs = 0.5 * p[0] * (_GL_NODES + 1)
    gauss = 0.5 * p[0] * np.sum(_GL_WEIGHTS * np.exp(-p[1] * xs) * np.sin(p[2] * xs))
    return trap + 2 * simpson + gauss


def black_scholes(p):
    """Call by scipy.special.ndtr, put by erf, plus tape.scipy.stats.norm.cdf."""
    spot, strike, expiry, rate, vol = p
    d1 = (np.log(spot / strike) + (rate + 0.5 * vol ** 2) * expiry) / (vol * np.sqrt(expiry))
    d2 = d1 - vol * np.sqrt(expiry)
    call = spot * sp.ndtr(d1) - strike * np.exp(-rate * expiry) * sp.ndtr(d2)
    cdf = lambda z: 0.5 * (1 + sp.erf(z / np.sqrt(2)))   # noqa: E731
    put = strike * np.exp(-rate * expiry) * cdf(-d2) - spot * cdf(-d1)
    return call + 2 * put + tst.norm.cdf(d1)


def binomial_tree(p):
    """American put: backward induction in place with early exercise by np.maximum."""
    spot, strike, expiry, rate, vol = p
    n = 12
    dt = expiry / n
    up = np.exp(vol * np.sqrt(dt))
    q = (np.exp(rate * dt) - 1 / up) / (up - 1 / up)
    j = np.arange(n + 1)
    value = np.maximum(strike - spot * up ** (n - 2 * j), 0.0)
    for i in range(n - 1, -1, -1):
        value[:i + 1] = np.exp(-rate * dt) * (q * value[:i + 1] + (1 - q) * value[1:i + 2])
        value[:i + 1] = np.maximum(value[:i + 1], strike - spot * up ** (i - 2 * np.arange(i + 1)))
    return value[0]


def lennard_jones(x):
    """Lennard-Jones energy with a cutoff by np.where; the diagonal distance set to inf."""
    pos = x.reshape(5, 2)
    diff = pos[:, None, :] - pos[None, :, :]
    r = np.sqrt(np.sum(diff ** 2, axis=-1) + np.diag(np.full(5, np.inf)))
    sr6 = (1.0 / r) ** 6
    shift = 4 * ((1 / 1.6) ** 12 - (1 / 1.6) ** 6)
    return 0.5 * np.sum(np.where(r < 1.6, 4 * (sr6 ** 2 - sr6) - shift, 0.0))


def markov_stationary(p):
    """Stationary distribution of a softmax-parametrised chain through np.linalg.eig (complex
    eigenvectors, normalised so the gauge cancels) and through a solve."""
    logits = p.reshape(3, 3)
    chain = np.exp(logits) / np.sum(np.exp(logits), axis=1, keepdims=True)
    w, vecs = np.linalg.eig(chain.T)
    v = vecs[:, np.argmin(np.abs(w - 1.0))]
    by_eig = np.real(v / np.sum(v))
    a = chain.T - np.eye(3)
    a[-1, :] = 1.0
    by_solve = np.linalg.solve(a, np.array([0.0, 0.0, 1.0]))
    return by_eig @ np.array([1.0, 2.0, 5.0]) + by_solve @ np.array([0.5, -1.0, 3.0])


def conjugate_gradient(p):
    """Conjugate gradients until the residual norm is below 1e-13."""
    n = 5
    a = np.diag(2 + p) - np.diag(np.full(n - 1, 0.5), 1) - np.diag(np.full(n - 1, 0.5), -1)
    b = np.arange(1.0, n + 1)
    x, r = np.zeros(n), b.copy()
    d, rs = r.copy(), b @ b
    while np.sqrt(rs) > 1e-13:
        ad = a @ d
        alpha = rs / (d @ ad)
        x, r = x + alpha * d, r - alpha * ad
        rs_new = r @ r
        d, rs = r + rs_new / rs * d, rs_new
    return np.sum(x ** 2)


def gauss_elimination(p):
    """Hand-written Gaussian elimination with partial pivoting (row swaps by fancy indexing)."""
    n = 4
    a, b = p[:16].reshape(n, n).copy(), p[16:20].copy()
    for i in range(n):
        k = np.argmax(np.abs(a[i:, i])) + i
        a[[i, k]] = a[[k, i]]
        b[[i, k]] = b[[k, i]]
        for j in range(i + 1, n):
            factor = a[j, i] / a[i, i]
            a[j, i:] -= factor * a[i, i:]
            b[j] -= factor * b[i]
    x = np.zeros_like(b)
    for i in range(n - 1, -1, -1):
        x[i] = (b[i] - a[i, i + 1:] @ x[i + 1:]) / a[i, i]
    return x @ np.array([1.0, -1.0, 2.0, 0.5])


def repeated_index_update(p):
    """x[[0, 0, 2]] += v applies one update per distinct index, as NumPy buffers it."""
    x = p[:4] * 1.0
    x[np.array([0, 0, 2])] += p[4:7] ** 2
    y = p[:4] * 1.0
    y[[1, 3, 1]] = p[4:7] * np.array([1.0, 2.0, 3.0])
    return x @ np.array([1.0, 2.0, 3.0, 4.0]) + np.sum(y ** 2)


def _x(*values):
    return np.array(values, dtype=float)


_RNG = np.random.default_rng(8)
_OPTIONS = [_x(100, 95, 0.5, 0.02, 0.25), _x(90, 100, 1.0, 0.05, 0.3),
            _x(105, 100, 0.25, 0.01, 0.15)]

PROGRAMS = {
    "adaptive rk4": (adaptive_rk4, [_x(4.0, 0.3), _x(9.0, 0.5), _x(1.0, 0.1)]),
    "backward euler newton": (backward_euler_newton, [_x(2.0, 1.0), _x(5.0, 0.3), _x(0.5, 2.0)]),
    "fem add.at": (fem_poisson, [_x(0.1, 0.2, -0.1, 0.3, 0.0), _x(0.5, -0.2, 0.1, 0.0, 0.2),
                                 _x(0, 0, 0, 0, 0.0)]),
    "heat in place": (heat_inplace, [_x(1.0, 0.5, 0.9), _x(0.7, 1.0, 1.1), _x(1.2, -0.3, 0.5)]),
    "heat until decay": (heat_until_decay, [_x(1.0, 1.0), _x(3.0, 1.0), _x(0.5, 1.2),
                                            _x(2.0, 0.8)]),
    "kalman rts smoother": (kalman_rts, [_x(-1.0, -0.5), _x(-2.0, 0.3), _x(0.0, -1.0)]),
    "cubic spline": (cubic_spline, [_x(0, 1, 0.5, 2, 1, 0), _x(1, 0, 1, 0, 1, 0.),
                                    _x(0.3, 0.2, 0.1, 0.4, 0.5, 0.6)]),
    "quadrature": (quadrature, [_x(2.0, 0.5, 1.5), _x(1.0, 1.0, 2.0), _x(3.0, 0.2, 0.5)]),
    "black-scholes": (black_scholes, _OPTIONS),
    "binomial tree": (binomial_tree, _OPTIONS),
    "lennard-jones": (lennard_jones, [_x(0, 0, 1.1, 0, 0, 1.05, 1.2, 1.15, 2.5, 0.5),
                                      _x(0, 0, 1.0, 0.1, 0.1, 1.1, 1.1, 1.0, 2.2, 0.4),
                                      _x(0, 0, 1.2, 0, 0, 1.2, 1.3, 1.3, 2.6, 0.6)]),
    "markov stationary": (markov_stationary, [_RNG.normal(size=9) * 0.5 for _ in range(3)]),
    "conjugate gradient": (conjugate_gradient, [_x(1, 2, 0.5, 1, 3), _x(0.2, 0.3, 0.4, 0.5, 0.6),
                                                _x(5, 1, 1, 1, 1.0)]),
    "gauss elimination": (gauss_elimination, [_RNG.normal(size=20) for _ in range(3)]),
    "repeated index update": (repeated_index_update, [_RNG.normal(size=7) for _ in range(3)]),
}

# Programs whose loop body takes `wrap=tape.checkpoint`.
CHECKPOINTED = ["adaptive rk4", "backward euler newton", "heat in place"]
