"""Forward mode on scientific programs written as plain NumPy/SciPy, as users write them.

Each program maps a float64 vector to an array (or a scalar) and uses one construct the
existing program suites leave out of forward mode: explicit Euler and RK4 trajectories
returned whole, a leapfrog ring built on np.roll with in-place kicks, a 2-D Laplacian stencil,
np.bincount and np.add.at scatter into a buffer made from the traced value, cumsum/cumprod
combinations, np.interp with traced knots and with a period, inverse-transform sampling by
np.searchsorted into a traced CDF, trimmed statistics of a sorted vector, polyfit with traced
weights and its covariance, lstsq with a 2-D right-hand side and an under-determined system,
PCA by eigh with a sign convention, SciPy log-likelihoods through tape.scipy, a Monte Carlo
estimate with a seeded Generator made inside the function, pairwise distances, softmax and
logsumexp of inputs scaled by 800, and np.where / np.select / np.piecewise.

For every program and two or three inputs: the ForwardWithPrimal primal against the plain
NumPy run, the tangent against central differences in float64 and against the reverse
gradient of sum(f * W) dotted with the direction, and `tape.compile(ForwardWithPrimal, ...)`
replayed over changing inputs (the first input again at the end) against eager forward
mode. Scalar programs also check forward-over-reverse Hessian-vector products (`tape.hvp`,
and the same composition under `tape.compile(Forward, ...)`) against differences of the
reverse gradient. Then Duplicated buffers written in place, pytrees with Const arguments,
and extreme inputs of tape.scipy.stats functions.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("scipy")

import scipy.special as sp  # noqa: E402

import tape  # noqa: E402
import tape.scipy.special as tsp  # noqa: E402
import tape.scipy.stats as tst  # noqa: E402
from tape import Const, Duplicated, Forward, ForwardWithPrimal, Reverse, autodiff  # noqa: E402


# ---------------------------------------------------------------------------------------------
# programs

def euler_logistic(p):
    """Explicit Euler on logistic growth; the whole trajectory is the result."""
    r, K, y = p[0], p[1], p[2]
    out = []
    for _ in range(30):
        y = y + 0.1 * r * y * (1 - y / K)
        out.append(y)
    return np.array(out)


def rk4_pendulum(p):
    """RK4 for a pendulum whose state is built with np.stack; trajectory stacked at the end."""
    g, L, th0 = p[0], p[1], p[2]
    s = np.stack([th0, 0.0 * th0])

    def rhs(s):
        return np.array([s[1], -(g / L) * np.sin(s[0])])

    dt, traj = 0.05, []
    for _ in range(25):
        k1 = rhs(s)
        k2 = rhs(s + dt / 2 * k1)
        k3 = rhs(s + dt / 2 * k2)
        k4 = rhs(s + dt * k3)
        s = s + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        traj.append(s)
    return np.stack(traj)


def leapfrog_ring(p):
    """Anharmonic ring of masses, neighbours by np.roll, kick-drift-kick with `+=`; energy."""
    q = p.copy()
    v = np.zeros_like(p)
    dt = 0.1
    for _ in range(20):
        v += 0.5 * dt * (np.roll(q, 1) + np.roll(q, -1) - 2 * q - 0.3 * q ** 3)
        q += dt * v
        v += 0.5 * dt * (np.roll(q, 1) + np.roll(q, -1) - 2 * q - 0.3 * q ** 3)
    return np.sum(0.5 * v ** 2) + np.sum(0.5 * (np.roll(q, -1) - q) ** 2 + 0.075 * q ** 4)


def stencil_2d(p):
    """Five explicit diffusion steps of a 2-D field through a sliced five-point Laplacian."""
    u = np.outer(p, p[::-1])
    for _ in range(5):
        lap = np.zeros_like(u)
        lap[1:-1, 1:-1] = (u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2]
                           - 4 * u[1:-1, 1:-1])
        u = u + 0.2 * lap
    return u[1:-1, 1:-1].ravel()


def weighted_bins(p):
    """Bin totals by np.bincount(weights=) and a weighted sum by np.add.at; their ratio."""
    idx = np.array([0, 2, 2, 1, 0, 3, 3, 3])
    w = np.exp(p)
    total = np.bincount(idx, weights=w, minlength=5)
    acc = np.zeros_like(w, shape=5)
    np.add.at(acc, idx, w * p)
    return acc / (total + 1.0)


def cumulative(p):
    """Running sum of squares times a running product, plus a reversed cumulative sum."""
    q = np.cumprod(1 + 0.1 * np.tanh(p))
    return np.cumsum(p ** 2) * q + np.cumsum(q[::-1])[::-1]


def interp_traced_knots(p):
    """Linear interpolation with increasing knots and values both from the parameters."""
    xp = np.cumsum(np.exp(p[:5]))
    return np.interp(np.linspace(0.5, 8.0, 7), xp, np.sin(p[5:]))


def interp_periodic(p):
    """Periodic interpolation evaluated at traced points, times the points."""
    return np.interp(p, np.array([0., 1., 2.5, 3.]), np.array([1., 2., 0., 1.]), period=3.0) * p


def inverse_transform(p):
    """Inverse-transform sampling: np.searchsorted of fixed uniforms into a traced CDF, then
    the position inside the bracketing cell by gathers."""
    w = np.exp(p)
    cdf = np.cumsum(w) / np.sum(w)
    u = np.array([0.05, 0.3, 0.55, 0.8, 0.97])
    i = np.searchsorted(cdf, u)
    lo = np.where(i > 0, cdf[np.maximum(i - 1, 0)], 0.0)
    return (u - lo) / (cdf[i] - lo) + i


def sorted_statistics(p):
    """Trimmed mean of the sorted vector, ranks by a double argsort, median times the max."""
    s = np.sort(p)
    ranks = np.argsort(np.argsort(p))
    return np.sum((p - s[1:-1].mean()) ** 2 * (ranks + 1)) + np.median(p) * s[-1]


_XG = np.linspace(-1, 1, 9)


def weighted_polyfit(p):
    """Quadratic fit with traced weights, coefficients and their covariance."""
    y = np.sin(_XG * p[0]) + p[1] * _XG ** 3
    c, cov = np.polyfit(_XG, y, 2, w=np.exp(p[2] * _XG), cov=True)
    return np.concatenate([np.polyval(c, np.array([0.3, 1.5])), cov.ravel()])


def lstsq_two_columns(p):
    """Least squares of a perturbed Vandermonde matrix against two right-hand sides: solution,
    residuals and singular values; then a minimum-norm solution of a 2x3 system."""
    A = np.vander(_XG, 3) + 0.1 * p[:27].reshape(9, 3)
    B = np.stack([np.cos(_XG), p[27:36]], 1)
    sol, res, _, sv = np.linalg.lstsq(A, B, rcond=None)
    small = np.linalg.lstsq(p[:6].reshape(2, 3) + np.eye(2, 3), p[6:8], rcond=None)[0]
    return np.concatenate([sol.ravel(), res, sv, small])


def pca_eigh(p):
    """PCA of a 10x3 data matrix: eigenvalues of the covariance and the variance of the
    projections on the two leading axes, with signs fixed by the first row."""
    X = p.reshape(10, 3)
    Xc = X - X.mean(axis=0)
    w, V = np.linalg.eigh(Xc.T @ Xc / 9)
    V = V * np.sign(V[0])
    return np.concatenate([w, np.sum((Xc @ V[:, -2:]) ** 2, axis=0)])


_OBS = np.array([0.3, 1.2, -0.5, 2.1, 0.9])


def log_likelihoods(p):
    """Normal, Student-t and gamma log-likelihoods (tape.scipy.stats) in log-parameters,
    plus gammaln and xlogy terms."""
    mu, s, nu = p[0], np.exp(p[1]), np.exp(p[2])
    return (np.sum(tst.norm.logpdf(_OBS, mu, s))
            + np.sum(tst.t.logpdf(_OBS, nu, loc=mu, scale=s))
            + np.sum(tst.gamma.logpdf(np.abs(_OBS) + 0.1, nu, scale=s))
            + np.sum(sp.gammaln(nu + _OBS ** 2) - sp.xlogy(_OBS ** 2, s)))


def monte_carlo_option(p):
    """Call payoff and second moment of a lognormal price from 200 draws of a Generator
    seeded inside the function."""
    z = np.random.default_rng(42).standard_normal(200)
    S = p[0] * np.exp((p[1] - 0.5 * p[2] ** 2) + p[2] * z)
    return np.array([np.maximum(S - 1.0, 0.0).mean(), np.mean(S ** 2)])


def pairwise_energy(p):
    """Pairwise distances by broadcasting, the diagonal shifted off zero, upper triangle."""
    X = p.reshape(6, 2)
    D = np.sqrt(np.sum((X[:, None, :] - X[None, :, :]) ** 2, axis=-1) + np.eye(6))
    iu = np.triu_indices(6, 1)
    return np.sum(np.exp(-D[iu])) + np.sum(1.0 / D[iu])


def softmax_large(p):
    """Softmax and logsumexp of inputs scaled by 800, by hand and through tape.scipy."""
    z = 800.0 * p
    m = np.max(z)
    e = np.exp(z - m)
    return np.concatenate([e / e.sum(), [m + np.log(e.sum()), tsp.logsumexp(z)],
                           tsp.softmax(z), tsp.log_softmax(z)])


def piecewise_forms(p):
    """The same kind of piecewise law by np.where, np.select (a scalar choice among arrays)
    and np.piecewise (a constant piece among functions)."""
    a = np.where(p < 0, p ** 2, np.sqrt(np.abs(p) + 1))
    b = np.select([p < -0.5, p < 0.5], [np.sin(p), p ** 3], default=np.exp(-p))
    c = np.piecewise(p, [p < 0, p > 0.5], [0.25, lambda t: t ** 3, lambda t: 2 * t])
    return a + b + c


def _x(*values):
    return np.array(values, dtype=float)


PROGRAMS = {
    "euler logistic": (euler_logistic, [_x(0.8, 2.0, 0.3), _x(1.2, 1.5, 0.5)]),
    "rk4 pendulum": (rk4_pendulum, [_x(9.8, 1.0, 0.5), _x(9.0, 1.3, 1.0)]),
    "leapfrog ring": (leapfrog_ring, [np.sin(np.arange(6.0)), np.cos(np.arange(6.0))]),
    "2-d stencil": (stencil_2d, [np.linspace(0.1, 1, 6), np.linspace(-1, 0.3, 6)]),
    "bincount and add.at": (weighted_bins, [np.linspace(-1, 1, 8), np.linspace(0.3, -0.5, 8)]),
    "cumsum cumprod": (cumulative, [np.linspace(-1, 1, 6), np.linspace(0.3, 1.5, 6)]),
    "interp traced knots": (interp_traced_knots, [np.linspace(-0.5, 0.5, 10),
                                                  np.linspace(0.2, -0.3, 10)]),
    "interp periodic": (interp_periodic, [_x(-0.4, 0.5, 3.7, 7.1), _x(0.2, 1.3, 2.7, 5.9)]),
    "searchsorted cdf": (inverse_transform, [np.linspace(-1, 1, 6), np.linspace(0.5, -0.5, 6)]),
    "sorted statistics": (sorted_statistics, [_x(0.3, -1.2, 2.0, 0.7, -0.1, 1.1),
                                              _x(1.3, 0.2, -2.0, 0.4, -0.6, 0.9)]),
    "weighted polyfit": (weighted_polyfit, [_x(1.0, 0.5, 0.2), _x(0.7, -0.2, 0.4)]),
    "lstsq": (lstsq_two_columns, [np.sin(np.arange(36.0)), np.cos(np.arange(36.0))]),
    "pca eigh": (pca_eigh, [np.sin(np.arange(30.0) * 1.7) * np.tile([1., 2., 3.], 10),
                            np.cos(np.arange(30.0) * 0.7) * np.tile([3., 1., 0.5], 10)]),
    "log-likelihoods": (log_likelihoods, [_x(0.4, -0.2, 1.0), _x(0.1, 0.3, 0.5)]),
    "monte carlo": (monte_carlo_option, [_x(1.0, 0.05, 0.2), _x(1.1, 0.02, 0.3)]),
    "pairwise": (pairwise_energy, [np.sin(np.arange(12.0) * 2.1), np.cos(np.arange(12.0) * 1.3)]),
    "softmax x800": (softmax_large, [np.linspace(-1, 1, 5) * 0.004,
                                     _x(0.3, 0.5, -0.2, 0.499, 0.1) * 0.01]),
    "piecewise": (piecewise_forms, [_x(-1.2, -0.3, 0.2, 0.7, 1.5), _x(-0.8, -0.6, 0.4, 0.45, 2.0)]),
}


# ---------------------------------------------------------------------------------------------
# checks

def _direction(n):
    return np.cos(np.arange(n) * 1.3 + 0.2)


def _fd_tangent(f, x, v, h=1e-6):
    return (np.asarray(f(x + h * v), float) - np.asarray(f(x - h * v), float)) / (2 * h)


def _close(got, want, tol):
    got, want = np.asarray(got, float), np.asarray(want, float)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert np.all(np.isfinite(got)), got
    assert np.max(np.abs(got - want), initial=0.0) <= tol * max(1.0, np.max(np.abs(want))), \
        (got, want)


def _weights(shape):
    size = int(np.prod(shape))
    return np.linspace(-1.3, 1.7, size).reshape(shape) + 0.05


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_forward_tangent_against_differences_reverse_and_compiled(name):
    f, points = PROGRAMS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        compiled = tape.compile(ForwardWithPrimal, f, Duplicated, Duplicated)
        for x in points + [points[0]]:
            v = _direction(x.size)
            want = np.asarray(f(x.copy()))
            tangent, primal = autodiff(ForwardWithPrimal, f, Duplicated(x.copy(), v.copy()))
            np.testing.assert_allclose(primal, want, rtol=1e-12, atol=1e-13)
            _close(tangent, _fd_tangent(f, x, v), 1e-6)
            W = _weights(want.shape)
            (grad,) = tape.gradient(Reverse, lambda z: np.sum(f(z) * W), x.copy())
            np.testing.assert_allclose(np.sum(np.asarray(tangent) * W), grad @ v,
                                       rtol=1e-10, atol=1e-12)
            c_tangent, c_primal = compiled(Duplicated(x.copy(), v.copy()))
            np.testing.assert_allclose(c_primal, want, rtol=1e-12, atol=1e-13)
            np.testing.assert_allclose(c_tangent, tangent, rtol=1e-12, atol=1e-13)
    assert compiled.stats.eager_calls == 0, compiled.stats.eager_reasons
    assert compiled.stats.hits >= 1, compiled.stats


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_forward_over_reverse_hessian_vector_product(name):
    f, points = PROGRAMS[name]
    W = _weights(np.shape(f(points[0].copy())))

    def loss(z):
        return np.sum(f(z) * W)

    def grad(z):
        return tape.gradient(Reverse, loss, z)[0]

    compiled = tape.compile(Forward, grad, Duplicated, Duplicated)
    for x in points + [points[0]]:
        v = _direction(x.size)
        hv = tape.hvp(loss, x.copy(), v)
        want = (grad(x + 1e-5 * v) - grad(x - 1e-5 * v)) / 2e-5
        _close(hv, want, 1e-5)
        np.testing.assert_allclose(compiled(Duplicated(x.copy(), v.copy()))[0], hv,
                                   rtol=1e-10, atol=1e-12)


def heat_in_place(u, k):
    """Explicit heat steps written into the Duplicated field."""
    for _ in range(10):
        u[1:-1] += k * (u[2:] - 2 * u[1:-1] + u[:-2])
    return np.sum(u ** 2)


def test_duplicated_field_stepped_in_place_overwrites_its_shadow_under_compile():
    compiled = tape.compile(ForwardWithPrimal, heat_in_place, Duplicated, Duplicated, Duplicated)

    def final_field(z):
        u = z[:-1].copy()
        heat_in_place(u, z[-1])
        return u

    for shift in (0.0, 0.3, 0.7, 0.0):
        u0, du0 = np.sin(np.linspace(0, 3, 7) + shift), np.cos(np.arange(7.0))
        k, dk = 0.2 + 0.05 * shift, 0.5
        z, dz = np.append(u0, k), np.append(du0, dk)
        ue, due = u0.copy(), du0.copy()
        te, pe = autodiff(ForwardWithPrimal, heat_in_place, Duplicated(ue, due), Duplicated(k, dk))
        uc, duc = u0.copy(), du0.copy()
        tc, pc = compiled(Duplicated(uc, duc), Duplicated(k, dk))
        np.testing.assert_allclose(pe, heat_in_place(u0.copy(), k), rtol=1e-12)
        _close(te, _fd_tangent(lambda z: heat_in_place(z[:-1].copy(), z[-1]), z, dz), 1e-6)
        np.testing.assert_allclose(ue, final_field(z), rtol=1e-12, atol=1e-14)
        _close(due, _fd_tangent(final_field, z, dz), 1e-6)
        np.testing.assert_allclose([tc, pc], [te, pe], rtol=1e-12)
        np.testing.assert_allclose(uc, ue, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(duc, due, rtol=1e-12, atol=1e-14)
    assert compiled.stats.eager_calls == 0, compiled.stats.eager_reasons


def scatter_into(acc, w, idx):
    """np.add.at and np.subtract.at into a Duplicated accumulator with repeated indices."""
    np.add.at(acc, idx, w ** 2)
    np.subtract.at(acc, idx[::-1], np.sin(w))
    return acc.sum()


def test_scatter_into_duplicated_accumulator_under_compile():
    idx = np.array([0, 2, 2, 1, 0, 3])
    compiled = tape.compile(ForwardWithPrimal, scatter_into, Duplicated, Duplicated, Duplicated,
                            Const)

    def final(z):
        a = z[:4].copy()
        scatter_into(a, z[4:], idx)
        return a

    for s in (0.0, 1.0, 2.0, 0.0):
        a0, da0 = np.ones(4) * s, np.array([1.0, 0.0, 0.0, 2.0])
        w, dw = np.linspace(-1, 1, 6) + s, np.cos(np.arange(6.0))
        z, dz = np.append(a0, w), np.append(da0, dw)
        ae, dae = a0.copy(), da0.copy()
        te, _ = autodiff(ForwardWithPrimal, scatter_into, Duplicated(ae, dae), Duplicated(w, dw),
                         Const(idx))
        ac, dac = a0.copy(), da0.copy()
        tc, _ = compiled(Duplicated(ac, dac), Duplicated(w, dw), Const(idx))
        np.testing.assert_allclose(ae, final(z), rtol=1e-12, atol=1e-14)
        _close(dae, _fd_tangent(final, z, dz), 1e-6)
        np.testing.assert_allclose(dac, dae, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(tc, te, rtol=1e-12, atol=1e-14)


def regression_model(params, xs, dt):
    """A dict of parameters with a list leaf and a float leaf; a dict result."""
    s = params["layers"][0] * np.tanh(params["w"] @ xs + params["b"])
    return {"loss": params["scale"] * np.sum(s ** 2) * dt, "pred": s}


def test_pytree_parameters_with_changing_const_step_under_compile():
    p = {"w": np.array([[0.3, -0.2], [0.1, 0.5]]), "b": np.array([0.1, -0.1]),
         "layers": [np.array([1.0, 2.0])], "scale": 1.5}
    dp = {"w": np.array([[1.0, 0.0], [0.0, 1.0]]), "b": np.array([0.5, 0.5]),
          "layers": [np.array([0.1, -0.1])], "scale": 0.7}
    xs = np.array([1.0, 2.0])
    compiled = tape.compile(ForwardWithPrimal, regression_model, Duplicated, Duplicated, Const,
                            Const)

    def flat(h, dt):
        q = {"w": p["w"] + h * dp["w"], "b": p["b"] + h * dp["b"],
             "layers": [p["layers"][0] + h * dp["layers"][0]],
             "scale": p["scale"] + h * dp["scale"]}
        out = regression_model(q, xs, dt)
        return np.append(out["pred"], out["loss"])

    for dt in (0.1, 0.2, 0.1):
        te, pe = autodiff(ForwardWithPrimal, regression_model, Duplicated(p, dp), Const(xs),
                          Const(dt))
        tc, pc = compiled(Duplicated(p, dp), Const(xs), Const(dt))
        np.testing.assert_allclose(np.append(pe["pred"], pe["loss"]), flat(0.0, dt), rtol=1e-12)
        _close(np.append(te["pred"], te["loss"]), (flat(1e-6, dt) - flat(-1e-6, dt)) / 2e-6, 1e-6)
        for key in ("loss", "pred"):
            np.testing.assert_allclose(tc[key], te[key], rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(pc[key], pe[key], rtol=1e-12, atol=1e-14)


# Tails where a naive derivative overflows or divides 0 by 0: the tangent (eager and compiled)
# must match the reverse gradient and central differences.
TAILS = {
    "norm.logcdf": (lambda x: tst.norm.logcdf(x), _x(-800., -40., -5., 0., 5., 40.)),
    "norm.logsf": (lambda x: tst.norm.logsf(x), _x(-40., -5., 0., 5., 40., 800.)),
    "norm.logcdf in loc": (lambda x: tst.norm.logcdf(1.0, loc=x, scale=0.5), _x(-5., 0., 5., 40.)),
    "t.logcdf": (lambda x: tst.t.logcdf(x, 3.0), _x(-800., -40., -5., 0., 5., 40.)),
    "t.logsf": (lambda x: tst.t.logsf(x, 3.0), _x(-40., -5., 0., 5., 40., 800.)),
    "log_ndtr": (lambda x: sp.log_ndtr(x), _x(-800., -40., -5., 0., 5.)),
    "log_expit": (lambda x: sp.log_expit(x), _x(-800., -40., 0., 40., 800.)),
    "logaddexp(0, x)": (lambda x: np.logaddexp(0.0, x), _x(-800., -40., 0., 40., 800.)),
    "log erfc": (lambda x: np.log(sp.erfc(x)), _x(-5., 0., 5., 20.)),
    "chi2.logcdf": (lambda x: tst.chi2.logcdf(x, 3.0), _x(1e-3, 1., 30.)),
    "beta.logcdf": (lambda x: tst.beta.logcdf(x, 2.0, 3.0), _x(1e-6, 0.5, 1 - 1e-6)),
    "logsumexp x800": (lambda x: tsp.logsumexp(np.stack([x, 2 * x, -x]), axis=0),
                       _x(-1.0, -0.3, 0.0, 0.4, 1.0)),
}


@pytest.mark.parametrize("name", sorted(TAILS))
def test_tails_of_log_probabilities(name):
    f, x = TAILS[name]
    v = np.ones_like(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        h = 1e-6 * np.maximum(1.0, np.abs(x))
        fd = (f(x + h) - f(x - h)) / (2 * h)
    te, pe = autodiff(ForwardWithPrimal, f, Duplicated(x.copy(), v))
    np.testing.assert_allclose(pe, f(x), rtol=1e-12)
    _close(te, fd, 1e-5)
    (grad,) = tape.gradient(Reverse, lambda z: np.sum(f(z)), x.copy())
    np.testing.assert_allclose(grad, te, rtol=1e-10, atol=1e-12)
    compiled = tape.compile(ForwardWithPrimal, f, Duplicated, Duplicated)
    for scale in (1.0, 0.5, 1.0):
        tc, pc = compiled(Duplicated(x * scale, v))
        te2, pe2 = autodiff(ForwardWithPrimal, f, Duplicated(x * scale, v))
        np.testing.assert_allclose(tc, te2, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(pc, pe2, rtol=1e-12, atol=1e-14)
