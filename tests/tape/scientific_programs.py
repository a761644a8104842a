"""Scientific programs written the way a user writes them (loops, preallocated buffers, masks,
SciPy calls), each a scalar function of one float64 parameter vector.

`PROGRAMS` maps a name to ``(f, x0, x1, smooth)``: the function, two points at which it is
differentiated (the second one exercises a compiled program's cache or its guards) and whether
it is smooth enough for a Hessian-vector product against finite differences. Used by
tests/tape/test_scipy_user_programs_redteam.py.

>>> f, x0, x1, smooth = PROGRAMS["logistic regression"]
>>> bool(np.isfinite(f(x0)))
True
"""
from __future__ import annotations

import numpy as np

import tape.scipy.linalg as tsl
import tape.scipy.special as tsp
import tape.scipy.stats as tst
from scipy import special as sp

_rng = np.random.default_rng(7)
_DESIGN = _rng.normal(size=(12, 3))
_LABELS = (_rng.random(12) < 0.5).astype(float)
_COUNTS = _rng.poisson(2.0, size=12).astype(float)
_GP_X = np.linspace(0.0, 3.0, 8)
_GP_Y = np.sin(2 * _GP_X) + 0.1 * _rng.normal(size=8)
_CLASSES = np.array([0, 2, 1, 1, 0, 2])
_MIX_DATA = np.concatenate([_rng.normal(-1.0, 0.5, 6), _rng.normal(1.5, 0.7, 6)])
_OBS = np.array([0.9, 1.4, 1.1, 2.0, 2.6, 2.2, 3.1, 3.0])


def lotka_volterra_rk4(p):
    """Fixed-step RK4 over 40 steps; squared error against observations of the prey."""
    def rhs(y):
        prey, pred = y[0], y[1]
        return np.array([p[0] * prey - p[1] * prey * pred, p[2] * prey * pred - p[3] * pred])

    y, dt, loss = np.array([1.0, 0.5]), 0.05, 0.0
    for step in range(40):
        k1 = rhs(y)
        k2 = rhs(y + 0.5 * dt * k1)
        k3 = rhs(y + 0.5 * dt * k2)
        k4 = rhs(y + dt * k3)
        y = y + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        if step % 5 == 4:
            loss = loss + (y[0] - _OBS[step // 5]) ** 2
    return loss


def leapfrog_nbody_energy(q):
    """Three bodies in 2-D integrated with leapfrog (kick-drift-kick); final total energy plus
    the distance travelled by the first body."""
    pos = q.reshape(3, 2).copy()
    vel = np.array([[0.0, 0.3], [0.2, -0.1], [-0.2, -0.2]])
    mass = np.array([1.0, 0.8, 1.2])

    def accel(r):
        diff = r[None, :, :] - r[:, None, :]
        dist2 = np.sum(diff ** 2, axis=-1) + np.eye(3) + 0.01
        inv3 = (1.0 - np.eye(3)) / dist2 ** 1.5
        return np.einsum("ij,ijk,j->ik", inv3, diff, mass)

    dt, start = 0.02, pos[0].copy()
    a = accel(pos)
    for _ in range(25):
        vel = vel + 0.5 * dt * a
        pos = pos + dt * vel
        a = accel(pos)
        vel = vel + 0.5 * dt * a
    kinetic = 0.5 * np.sum(mass[:, None] * vel ** 2)
    i, j = np.triu_indices(3, 1)
    r = np.sqrt(np.sum((pos[i] - pos[j]) ** 2, axis=1) + 0.01)
    potential = -np.sum(mass[i] * mass[j] / r)
    return kinetic + potential + np.linalg.norm(pos[0] - start)


def gp_marginal_likelihood(log_params):
    """Negative log marginal likelihood of a GP with an RBF kernel, through a Cholesky."""
    lengthscale, variance, noise = np.exp(log_params)
    d2 = (_GP_X[:, None] - _GP_X[None, :]) ** 2
    k = variance * np.exp(-0.5 * d2 / lengthscale ** 2) + noise * np.eye(_GP_X.size)
    chol = np.linalg.cholesky(k)
    alpha = tsl.solve_triangular(chol, _GP_Y, lower=True)
    return (0.5 * alpha @ alpha + np.sum(np.log(np.diag(chol)))
            + 0.5 * _GP_X.size * np.log(2 * np.pi))


def gp_cho_solve(log_params):
    """The same likelihood through cho_factor / cho_solve and a prediction at new points."""
    lengthscale, variance, noise = np.exp(log_params)
    k = variance * np.exp(-0.5 * np.subtract.outer(_GP_X, _GP_X) ** 2 / lengthscale ** 2)
    k[np.diag_indices_from(k)] += noise
    factor = tsl.cho_factor(k, lower=True)
    alpha = tsl.cho_solve(factor, _GP_Y)
    logdet = 2 * np.sum(np.log(np.diag(factor[0])))
    x_new = np.array([0.5, 2.5])
    k_star = variance * np.exp(-0.5 * (x_new[:, None] - _GP_X) ** 2 / lengthscale ** 2)
    return 0.5 * _GP_Y @ alpha + 0.5 * logdet + np.sum((k_star @ alpha) ** 2)


def logistic_regression(w):
    """Negative log-likelihood with L2, written with logaddexp and with log_expit."""
    z = _DESIGN @ w[:3] + w[3]
    nll = np.sum(np.logaddexp(0.0, z) - _LABELS * z)
    nll2 = -np.sum(_LABELS * sp.log_expit(z) + (1 - _LABELS) * sp.log_expit(-z))
    return nll + nll2 + 0.1 * np.sum(w[:3] ** 2)


def poisson_regression(w):
    """Poisson log-likelihood with gammaln and xlogy, plus an L2 penalty."""
    rate = np.exp(_DESIGN @ w[:3] + w[3])
    loglik = sp.xlogy(_COUNTS, rate) - rate - sp.gammaln(_COUNTS + 1)
    loglik2 = tst.poisson.logpmf(_COUNTS, rate)
    return -np.sum(loglik) - np.sum(loglik2) + 0.05 * w @ w


def mlp_cross_entropy(theta):
    """A two-layer tanh network with softmax cross-entropy, written from scratch."""
    w1 = theta[:12].reshape(3, 4)
    b1 = theta[12:16]
    w2 = theta[16:28].reshape(4, 3)
    hidden = np.tanh(_DESIGN[:6] @ w1 + b1)
    logits = hidden @ w2
    logits = logits - np.max(logits, axis=1, keepdims=True)
    log_probs = logits - np.log(np.sum(np.exp(logits), axis=1, keepdims=True))
    loss = -np.mean(log_probs[np.arange(6), _CLASSES])
    probs = tsp.softmax(hidden @ w2, axis=1)
    onehot = np.eye(3)[_CLASSES]
    return loss + np.mean(np.sum(onehot * -tsp.log_softmax(hidden @ w2, axis=1), axis=1)) \
        + 0.01 * np.sum(probs ** 2)


def kalman_log_likelihood(params):
    """Log-likelihood of a local-linear-trend model by a Kalman filter."""
    q_level, q_slope, r = np.exp(params)
    f = np.array([[1.0, 1.0], [0.0, 1.0]])
    h = np.array([1.0, 0.0])
    q = np.diag(np.array([q_level, q_slope]))
    mean, cov, loglik = np.zeros(2), 10.0 * np.eye(2), 0.0
    for y in _OBS:
        mean = f @ mean
        cov = f @ cov @ f.T + q
        s = h @ cov @ h + r
        gain = cov @ h / s
        innovation = y - h @ mean
        loglik = loglik - 0.5 * (np.log(2 * np.pi * s) + innovation ** 2 / s)
        mean = mean + gain * innovation
        cov = (np.eye(2) - np.outer(gain, h)) @ cov
    return loglik


def gaussian_mixture(params):
    """Two-component Gaussian mixture: log-likelihood with logsumexp and the EM expected
    complete-data log-likelihood with responsibilities held fixed (a Const copy)."""
    means, log_sds, logit_w = params[:2], params[2:4], params[4]
    log_w = np.array([-np.logaddexp(0.0, -logit_w), -np.logaddexp(0.0, logit_w)])
    comp = tst.norm.logpdf(_MIX_DATA[:, None], means, np.exp(log_sds)) + log_w
    loglik = np.sum(tsp.logsumexp(comp, axis=1))
    resp = np.exp(comp - tsp.logsumexp(comp, axis=1, keepdims=True))
    return -loglik - 0.1 * np.sum(resp * comp)


def spring_chain_energy(x):
    """A chain of five masses with springs (np.diff) and a pairwise soft repulsion."""
    pos = x.reshape(5, 2)
    bonds = np.diff(pos, axis=0)
    lengths = np.linalg.norm(bonds, axis=1)
    spring = 0.5 * 3.0 * np.sum((lengths - 1.0) ** 2)
    diff = pos[:, None, :] - pos[None, :, :]
    dist = np.sqrt(np.sum(diff ** 2, axis=-1) + np.eye(5))
    mask = np.triu(np.ones((5, 5), dtype=bool), 2)
    repulsion = np.sum(np.where(mask, np.exp(-dist), 0.0))
    gravity = 0.3 * np.sum(pos[:, 1])
    return spring + repulsion + gravity


def heat_equation(p):
    """Explicit finite differences for u_t = k u_xx into a preallocated buffer, with boundary
    values written each step; squared distance of the final profile to a target."""
    n, steps = 12, 30
    grid = np.linspace(0.0, 1.0, n)
    u = np.zeros_like(p, shape=(steps + 1, n))
    u[0] = p[0] * np.sin(np.pi * grid) + p[1] * grid
    r = 0.4 * p[2]
    for t in range(steps):
        u[t + 1, 1:-1] = u[t, 1:-1] + r * (u[t, 2:] - 2 * u[t, 1:-1] + u[t, :-2])
        u[t + 1, 0] = p[3]
        u[t + 1, -1] = u[t + 1, -2] + 0.1 * p[1]
    target = 0.5 * grid
    return np.sum((u[-1] - target) ** 2) + 0.01 * np.sum(u[:, n // 2] ** 2)


def newton_cubic_root(ab):
    """Newton's method for x^3 + a x - b = 0 with a data-dependent stopping rule; the root's
    derivative is that of the converged iteration (implicit function theorem)."""
    a, b = ab[0], ab[1]
    x = b
    for _ in range(50):
        step = (x ** 3 + a * x - b) / (3 * x ** 2 + a)
        x = x - step
        if abs(step) < 1e-13:
            break
    return x ** 2 + np.sin(x)


def top_k_loss(scores):
    """Mean of the three largest scores (np.sort), a hinge on the argmax margin and
    np.partition."""
    k = 3
    top = np.sort(scores)[-k:]
    best = np.argmax(scores)
    others = np.delete(scores, best)
    margin = np.maximum(0.0, 1.0 - (scores[best] - np.max(others)))
    part = np.partition(scores, -2)[-2:]
    return np.mean(top) + margin + np.sum(part ** 2)


def piecewise_drag(v):
    """Drag force piecewise in the Reynolds number (np.where and a mask assignment)."""
    reynolds = np.abs(v) * 50.0
    laminar = 24.0 / np.maximum(reynolds, 1e-3)
    transitional = 24.0 / np.maximum(reynolds, 1e-3) * (1 + 0.15 * reynolds ** 0.687)
    cd = np.where(reynolds < 1.0, laminar, transitional)
    high = reynolds > 1000.0
    cd = np.where(high, 0.44, cd)
    force = 0.5 * cd * v * np.abs(v)
    out = np.zeros_like(v)
    out[v > 0] = force[v > 0]
    out[v <= 0] = 2.0 * force[v <= 0]
    return np.sum(out ** 2) + np.sum(np.clip(v, -0.5, 0.5) ** 3)


def bayesian_regression(theta):
    """Log posterior of a robust (Student-t) regression with gamma and normal priors."""
    w, log_scale, log_df = theta[:3], theta[3], theta[4]
    resid = _OBS[:6] - (_DESIGN[:6] @ w)
    loglik = np.sum(tst.t.logpdf(resid, np.exp(log_df), scale=np.exp(log_scale)))
    prior = np.sum(tst.norm.logpdf(w, 0.0, 2.0)) + tst.gamma.logpdf(np.exp(log_df), 2.0,
                                                                     scale=5.0)
    prior = prior + tst.norm.logcdf(log_scale) + np.sum(sp.log_ndtr(w))
    return -(loglik + prior)


def linear_ode_expm(a):
    """Solution of dx/dt = A x by expm against the same system by RK4 steps."""
    mat = a.reshape(2, 2) - np.eye(2)
    x0 = np.array([1.0, -0.5])
    exact = tsl.expm(0.8 * mat) @ x0
    x, dt = x0, 0.1
    for _ in range(8):
        k1 = mat @ x
        k2 = mat @ (x + 0.5 * dt * k1)
        k3 = mat @ (x + 0.5 * dt * k2)
        k4 = mat @ (x + dt * k3)
        x = x + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return np.sum(exact ** 2) + np.sum(x * exact) + tsl.det(tsl.expm(mat))


def multivariate_normal_fit(params):
    """Multivariate normal log-density with a Cholesky-parametrised covariance, against
    the same density written by hand (slogdet and solve)."""
    chol = np.zeros_like(params, shape=(3, 3))
    chol[np.tril_indices(3)] = params[:6]
    chol[np.diag_indices(3)] = np.exp(params[:3])
    cov = chol @ chol.T
    points = _DESIGN[:5]
    mean = params[6:9]
    lib = np.sum(tst.multivariate_normal.logpdf(points, mean, cov))
    centred = points - mean
    sign, logdet = np.linalg.slogdet(cov)
    maha = np.sum(centred * np.linalg.solve(cov, centred.T).T, axis=1)
    hand = np.sum(-0.5 * (maha + logdet + 3 * np.log(2 * np.pi)))
    return lib + 2 * hand


def _x(*values):
    return np.array(values, dtype=float)


PROGRAMS = {
    "lotka-volterra rk4": (lotka_volterra_rk4, _x(1.1, 0.4, 0.4, 0.9), _x(1.0, 0.5, 0.3, 1.0),
                           True),
    "leapfrog n-body": (leapfrog_nbody_energy, _x(0, 0, 1, 0, 0, 1.2),
                        _x(0.1, 0, 1, 0.1, -0.1, 1.1), True),
    "gp marginal likelihood": (gp_marginal_likelihood, _x(-0.3, 0.2, -2.0), _x(0.1, -0.1, -1.5),
                               True),
    "gp cho_solve": (gp_cho_solve, _x(-0.3, 0.2, -2.0), _x(0.1, -0.1, -1.5), True),
    "logistic regression": (logistic_regression, _x(0.3, -0.5, 0.8, 0.1),
                            _x(-0.2, 0.1, 0.4, -0.3), True),
    "poisson regression": (poisson_regression, _x(0.1, -0.2, 0.3, 0.5),
                           _x(-0.1, 0.2, 0.1, 0.6), True),
    "mlp cross-entropy": (mlp_cross_entropy, np.sin(np.arange(28.0)),
                          np.cos(np.arange(28.0)), True),
    "kalman filter": (kalman_log_likelihood, _x(-1.0, -3.0, -0.5), _x(-0.5, -2.0, -1.0), True),
    "gaussian mixture": (gaussian_mixture, _x(-0.8, 1.2, -0.5, -0.3, 0.2),
                         _x(-1.1, 1.6, -0.7, -0.4, -0.1), True),
    "spring chain": (spring_chain_energy, np.array([0, 0, 1, .1, 2, 0, 3, .2, 4, 0.]) * 0.9,
                     np.array([0, 0, 1.1, 0, 2, .1, 3, 0, 4.2, 0.1]), True),
    "heat equation": (heat_equation, _x(1.0, 0.3, 0.9, 0.1), _x(0.8, 0.5, 1.1, -0.2), True),
    "newton cubic root": (newton_cubic_root, _x(2.0, 3.0), _x(1.5, 0.7), True),
    "top-k loss": (top_k_loss, _x(0.3, 1.2, -0.4, 0.9, 2.0, 0.1),
                   _x(1.3, 0.2, -0.4, 0.95, 0.8, 0.1), False),
    "piecewise drag": (piecewise_drag, _x(0.01, -0.005, 0.3, -2.0, 30.0, -0.7),
                       _x(0.015, -0.01, 0.2, -3.0, 25.0, -0.3), False),
    "bayesian t regression": (bayesian_regression, _x(0.2, -0.1, 0.3, 0.1, 1.0),
                              _x(0.1, 0.1, 0.2, -0.2, 1.5), True),
    "linear ode expm": (linear_ode_expm, _x(0.1, 0.5, -0.4, 0.2), _x(0.3, 0.2, -0.6, -0.1),
                        True),
    "multivariate normal fit": (multivariate_normal_fit,
                                _x(0.1, 0.2, -0.1, 0.3, -0.2, 0.1, 0.0, 0.1, -0.1),
                                _x(0.2, 0.1, 0.0, 0.1, 0.2, -0.3, 0.2, 0.0, 0.1), True),
}
