"""tape.scipy in the programs scientists write, combining several of its functions: maximum-
likelihood fits at extreme shape parameters, censored likelihoods, Bayesian marginals with
special functions, Bessel-function models, incomplete gamma and beta functions as CDFs, and
float32 input.

Primal values are compared with plain SciPy; gradients with central finite differences in
float64 (Reverse and Forward), or, where finite differences of the SciPy primal lose their
digits (shape parameters of 1e6 and more), with closed forms evaluated in 50-digit arithmetic
(the constants below); second derivatives with finite differences of the gradient or with a
closed form.
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("scipy")

import scipy.linalg as sl  # noqa: E402
import scipy.special as sp  # noqa: E402
import scipy.stats as st  # noqa: E402

import tape  # noqa: E402
import tape.scipy.linalg as tsl  # noqa: E402
import tape.scipy.special as tsp  # noqa: E402
import tape.scipy.stats as tst  # noqa: E402
from tape import Forward, Reverse, ReverseWithPrimal  # noqa: E402

RNG = np.random.default_rng(1)
GAMMA_DATA = RNG.gamma(3.0, 2.0, size=12)
T_DATA = RNG.standard_t(4.0, size=12) * 1.5 + 0.3
CENSORED = np.array([5.0, 8.0, 12.0])


def _fd(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in range(x.size):
        step = np.zeros_like(x)
        step[i] = eps * max(1.0, abs(x[i]))
        g[i] = (float(f(x + step)) - float(f(x - step))) / (2 * step[i])
    return g


def _grads(f, x):
    x = np.asarray(x, dtype=float)
    (rev,), value = tape.gradient(ReverseWithPrimal, f, x.copy())
    fwd, = tape.gradient(Forward, f, x.copy())
    return value, rev, fwd


def _check(ours, scipys, x, tol=1e-6, hvp=True):
    x = np.asarray(x, dtype=float)
    value, rev, fwd = _grads(ours, x)
    want = scipys(x.copy())
    np.testing.assert_allclose(value, want, rtol=1e-13, atol=0)
    fd = _fd(scipys, x)
    scale = max(1.0, float(np.max(np.abs(fd))))
    assert np.max(np.abs(rev - fd)) <= tol * scale, (rev, fd)
    assert np.max(np.abs(fwd - fd)) <= tol * scale, (fwd, fd)
    if hvp:
        v = np.sin(np.arange(x.size) + 1.0)
        got = tape.hvp(ours, x.copy(), v)
        grad = lambda z: tape.gradient(Reverse, ours, z)[0]   # noqa: E731
        want_h = (grad(x + 1e-5 * v) - grad(x - 1e-5 * v)) / 2e-5
        assert np.max(np.abs(got - want_h)) <= 1e-5 * max(1.0, float(np.max(np.abs(want_h))))


# -- maximum likelihood and censored likelihoods ----------------------------------------------
def _censored_gamma(stats):
    def f(p):
        s = np.exp(p[0])
        return (np.sum(stats.gamma.logsf(CENSORED, 3.0, scale=s))
                + np.sum(stats.gamma.logcdf(GAMMA_DATA, 3.0, scale=s))
                + np.sum(stats.gamma.logpdf(GAMMA_DATA, np.exp(p[1]), scale=s)))
    return f


def _censored_t(stats):
    def f(p):
        loc, scale = p[0], np.exp(p[1])
        return (np.sum(stats.t.logsf(CENSORED, 3.0, loc=loc, scale=scale))
                + np.sum(stats.t.logcdf(-GAMMA_DATA, 3.0, loc=loc, scale=scale))
                + np.sum(stats.t.logpdf(T_DATA, np.exp(p[2]), loc=loc, scale=scale)))
    return f


@pytest.mark.parametrize("make, x", [
    (_censored_gamma, [0.7, 1.1]),
    (_censored_gamma, [np.log(0.05), 1.1]),    # the censored points far in the right tail
    (_censored_t, [0.1, -2.0, 1.3]),
    (_censored_t, [0.1, 0.4, np.log(1e8)]),    # df in the asymptotic-series branch
])
def test_censored_likelihood_in_the_scale(make, x):
    _check(make(tst), make(st), x)


def test_beta_mle_at_shapes_of_1e8_matches_the_exact_gradient():
    # d/dlog(a) sum beta.logpdf = a sum(log x - psi(a) + psi(a + b)); finite differences of
    # SciPy's primal lose about 3 digits here, so the reference is the closed form.
    x = np.array([0.49999, 0.5, 0.50001])
    f = lambda p: np.sum(tst.beta.logpdf(x, np.exp(p[0]), np.exp(p[1])))   # noqa: E731
    p = np.full(2, np.log(1e8))
    value, rev, fwd = _grads(f, p)
    assert value == pytest.approx(np.sum(st.beta.logpdf(x, *np.exp(p))), rel=1e-13)
    # (the gradient is a * (a difference of size 7e-9): its own condition number is 3e8)
    np.testing.assert_allclose(rev, 0.710000001867, rtol=1e-7)
    np.testing.assert_allclose(fwd, 0.710000001867, rtol=1e-7)


def test_beta_binomial_marginal_with_large_hyperparameters():
    k, n = np.array([3.0, 0.0, 7.0, 2.0]), np.array([10.0, 5.0, 9.0, 4.0])

    def f(p):
        a, b = np.exp(p[0]), np.exp(p[1])
        return np.sum(sp.betaln(k + a, n - k + b) - sp.betaln(a, b) + sp.gammaln(n + 1)
                      - sp.gammaln(k + 1) - sp.gammaln(n - k + 1))
    p = np.log([1e6, 1e7])
    value, rev, fwd = _grads(f, p)
    assert value == f(p)
    want = [9.4545212562949462, -9.4545407380193034]   # digamma differences, 50 digits
    np.testing.assert_allclose(rev, want, rtol=1e-9)
    np.testing.assert_allclose(fwd, want, rtol=1e-9)
    _check(f, f, [0.3, 0.9])


def test_multivariate_normal_fit_with_a_cholesky_parametrised_covariance():
    pts = RNG.normal(size=(6, 3))

    def make(stats):
        def f(p):
            d = np.exp(p[3:6])
            chol = np.array([[d[0], 0.0, 0.0], [p[6], d[1], 0.0], [p[7], p[8], d[2]]])
            return np.sum(stats.multivariate_normal.logpdf(pts, p[:3], chol @ chol.T))
        return f
    _check(make(tst), make(st), [0.1, -0.2, 0.3, 0.2, -0.1, 0.3, 0.4, -0.5, 0.1])


# -- Bayesian models with special functions ---------------------------------------------------
def test_dirichlet_multinomial_and_probit_with_far_tails():
    counts = np.array([4.0, 0.0, 11.0, 2.0])
    design = np.array([[1.0, 0.5], [1.0, -2.0], [1.0, 3.0], [1.0, 40.0]])
    sign = np.array([1.0, -1.0, 1.0, -1.0])

    def f(p):
        alpha = np.exp(p[:4])
        total = np.sum(alpha)
        return (sp.gammaln(total) - sp.gammaln(total + counts.sum())
                + np.sum(sp.gammaln(alpha + counts) - sp.gammaln(alpha))
                + np.sum(sp.log_ndtr(sign * (design @ p[4:]))))
    _check(f, f, [0.1, -0.5, 1.2, 0.3, 0.2, 0.5])
    _check(f, f, [0.1, -0.5, 1.2, 0.3, 0.2, 30.0])   # log_ndtr at -1200


def test_mixture_posterior_with_logsumexp_and_log_softmax():
    y = np.array([-2.1, -1.7, 0.2, 2.9, 3.3, 3.1])

    def make(special):
        def f(p):
            w = special.log_softmax(np.array([0.0, 1.0]) * p[4])
            lp = (-0.5 * ((y[:, None] - p[:2]) / np.exp(p[2:4])) ** 2 - p[2:4]
                  - 0.5 * np.log(2 * np.pi) + w)
            return np.sum(special.logsumexp(lp, axis=1)) + special.logsumexp(
                800 + p[:3], b=np.array([1.0, -0.5, 2.0]), return_sign=True)[0]
        return f
    _check(make(tsp), make(sp), [-2.0, 3.0, 0.1, -0.3, 0.4])


# -- Bessel-function models -------------------------------------------------------------------
def test_von_mises_and_matern_models_through_the_scaled_bessel_functions():
    theta = np.array([0.1, 0.4, -0.2, 0.3, 0.05])
    r = np.array([0.1, 0.5, 1.0, 3.0])

    def f(p):
        kappa, ell = np.exp(p[1]), np.exp(p[2])
        z = np.sqrt(5.0) * r / ell
        von_mises = np.sum(kappa * np.cos(theta - p[0])) - 5 * (np.log(sp.ive(0, kappa)) + kappa)
        return von_mises + np.sum(np.log(sp.kve(2.5, z)) - z + 2.5 * np.log(z))
    for p in ([0.1, 0.5, 0.0], [0.1, np.log(1e6), np.log(1e-4)], [0.1, np.log(1e-6), np.log(1e4)]):
        _check(f, f, p, tol=1e-5)


# -- open findings ----------------------------------------------------------------------------
# The second derivative of log(f(x)) is f''/f - (f'/f)^2. The derivative rule of log is 1/y and
# the partial of 1/y in y is evaluated on its own, -(1/y)/y, before it meets the tangent f':
# for f beyond 1e154 that factor underflows to 0 (the (f'/f)^2 term vanishes and the result is
# f''/f, a finite wrong value) and below 1e-154 it overflows to -inf.
def _log_sinh_model(k):   # von Mises-Fisher (d = 3) log normaliser; log I_1/2 is elementary
    return 0.5 * np.log(k) - np.log(sp.iv(0.5, k))


LOG_OF_EXTREME_VALUES = {
    # f, x, exact second derivative
    "vMF normaliser: log iv(1/2, kappa) at kappa = 400 (iv ~ 1e172)":
        (_log_sinh_model, 400.0, -1.0 / 400.0 ** 2),   # + 1/sinh(400)^2, below 1e-340
    "Matern: log kv(1/2, r) at r = 400 (kv ~ 1e-175; -inf today)":
        (lambda z: np.log(sp.kv(0.5, z)), 400.0, 0.5 / 400.0 ** 2),
    "log gamma(a) written as np.log(sp.gamma(a)) at a = 150":
        (lambda z: np.log(sp.gamma(z)), 150.0, float(sp.polygamma(1, 150.0))),
}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name", sorted(LOG_OF_EXTREME_VALUES))
def test_hessian_of_the_log_of_a_very_large_or_small_special_function(name):
    f, x, want = LOG_OF_EXTREME_VALUES[name]
    np.testing.assert_allclose(tape.hessian(f, np.float64(x)), want, rtol=1e-6)


def test_gradient_of_the_log_of_a_very_large_special_function_is_right():
    # (the first derivative is fine: the finding above is about the second only)
    for f, x, _ in LOG_OF_EXTREME_VALUES.values():
        g, = tape.gradient(Reverse, f, np.float64(x))
        fd = (f(x * (1 + 1e-7)) - f(x * (1 - 1e-7))) / (2e-7 * x)
        assert g == pytest.approx(fd, rel=1e-6)


# d/dx gammainc(a, x) computed as exp(xlogy(a - 1, x) - x - gammaln(a)) subtracts terms of
# size a log a and lost log10(a) digits (8e-8 relative at a = 1e8, 1e-5 at a = 1e10; the
# incomplete beta density likewise), although SciPy's gammainc is exact to rounding there: an
# Erlang/gamma CDF likelihood with a large shape had a gradient in its scale with 7 digits.
# The densities now take Loader's stirlerr/bd0 form from shape 15 on.
INCOMPLETE_DENSITIES = {
    # f, x, exact derivative (50-digit arithmetic)
    "gammainc(1e8, x)": (lambda x: sp.gammainc(1e8, x), 1e8 + 1e4, 2.4195459407843491029e-05),
    "gammaincc(1e8, x)": (lambda x: -sp.gammaincc(1e8, x), 1e8 + 1e4, 2.4195459407843491029e-05),
    "betainc(1e8, 2e8, x)": (lambda x: sp.betainc(1e8, 2e8, x), 0.33334, 14224.724347380655469),
    "gamma.cdf in the scale, a = 1e8": (
        lambda s: np.sum(tst.gamma.cdf(np.array([1e8 - 1e4, 1e8, 1e8 + 1e4]), 1e8, scale=s)),
        1.0, -8828.8372776298567143),
    # the inverse's slope is 1 / the density at the inverse: d/dy gammaincinv(1e8, 0.3)
    "gammaincinv(1e8, y)": (lambda y: sp.gammaincinv(1e8, y), 0.3, 28760.031056479584587),
}


@pytest.mark.parametrize("name", sorted(INCOMPLETE_DENSITIES))
def test_incomplete_gamma_and_beta_densities_at_shapes_of_1e8(name):
    f, x, want = INCOMPLETE_DENSITIES[name]
    rev, = tape.gradient(Reverse, f, np.float64(x))
    fwd, = tape.gradient(Forward, f, np.float64(x))
    np.testing.assert_allclose([rev, fwd], want, rtol=1e-11)


def test_incomplete_gamma_density_at_moderate_shape_keeps_its_digits():
    g, = tape.gradient(Reverse, lambda x: sp.gammainc(1e3, x), np.float64(1e3 + 10 ** 1.5))
    assert g == pytest.approx(0.007493378673588262, rel=1e-11)


def test_traced_det_of_float32_matches_scipys_double_precision():
    # SciPy returns float64 from a float32 LU (36.33100074 here); the traced det factors in
    # double precision, the exact determinant of the float32 entries (36.33100016).
    m = (np.eye(3) * 2 + 0.1 + np.diag([0.3, 1.2, 2.5])).astype(np.float32)
    (_,), value = tape.gradient(ReverseWithPrimal, tsl.det, m.copy())
    want = sl.det(m)
    assert np.asarray(value).dtype == want.dtype
    np.testing.assert_allclose(value, want, rtol=1e-6)
    np.testing.assert_allclose(value, np.linalg.det(m.astype(np.float64)), rtol=1e-14)


def test_multigammaln_of_float32_has_scipys_dtype_and_digits():
    a = np.float32(3.5)
    want = sp.multigammaln(a, 2)
    got = tsp.multigammaln(a, 2)
    assert np.asarray(got).dtype == np.asarray(want).dtype
    np.testing.assert_allclose(got, want, rtol=1e-13)


def test_dirichlet_logpdf_accepts_a_float32_point_scipy_accepts():
    alpha = np.array([0.3, 1.2, 2.5], dtype=np.float32)
    x = alpha / np.sum(alpha)
    want = st.dirichlet.logpdf(x, alpha)
    (grad,), value = tape.gradient(ReverseWithPrimal, lambda a: tst.dirichlet.logpdf(x, a),
                                   alpha.copy())
    np.testing.assert_allclose(value, want, rtol=1e-6)
