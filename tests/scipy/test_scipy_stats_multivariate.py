"""tape.scipy.stats, multivariate: dirichlet and multivariate_normal against scipy.stats on
traced input (random dimensions, batches and covariance forms), derivatives to second order
against finite differences, singular covariances, and SciPy's errors."""
import numpy as np
import pytest
import scipy.stats as ss
from hypothesis import given, settings
from hypothesis import strategies as st

import tape.scipy.stats as S
from tape import Forward, Reverse, gradient
from tape.testing import arrays, check_grads, traced_value

FAST = settings(max_examples=25, deadline=None)


def assert_same(got, expected):
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


# -- multivariate_normal ---------------------------------------------------------------------------
@st.composite
def mvn_case(draw):
    """(x, mean, cov): x of shape (d,) or (..., d), cov a number, variances or an SPD matrix."""
    d = draw(st.integers(1, 4))
    batch = draw(st.sampled_from([(), (3,), (2, 2)]))
    x = draw(arrays(batch + (d,)))
    mean = draw(arrays((d,), low=-1.0, high=1.0))
    form = draw(st.sampled_from(["number", "variances", "matrix"]))
    if form == "number":
        cov = draw(st.floats(0.3, 3.0))
    elif form == "variances":
        cov = draw(arrays((d,), low=0.3, high=3.0))
    else:
        a = draw(arrays((d, d), low=-1.0, high=1.0))
        cov = a @ a.T + 0.5 * np.eye(d)
    return x, mean, cov


@FAST
@given(mvn_case(), st.sampled_from(["forward", "reverse"]), st.sampled_from(["logpdf", "pdf"]),
       st.booleans())
def test_mvn_matches_scipy(case, mode, method, allow_singular):
    x, mean, cov = case
    ours = getattr(S.multivariate_normal, method)
    expected = getattr(ss.multivariate_normal, method)(x, mean, cov, allow_singular)
    got = traced_value(lambda x, m, c: ours(x, m, c, allow_singular), x, mean, cov, mode=mode)
    assert_same(got, expected)


def test_mvn_scipy_conventions_for_default_arguments():
    for args in [(1.0,), (np.array([1.0, 2.0]),), (np.array([1.0, 2.0]), 0.5, 2.0),
                 (np.array([1.0, 2.0]), np.array([0.5]), np.array([[2.0]])),
                 (np.array([[1.0, 2.0]]), np.array([0.5, 0.1]), 2.0),
                 (np.array([0.3, 0.2]), None, np.array([[2.0, 0.5], [0.5, 1.0]]))]:
        assert_same(S.multivariate_normal.logpdf(*args), ss.multivariate_normal.logpdf(*args))


RNG = np.random.default_rng(3)
X = RNG.standard_normal((4, 3))
MEAN = np.array([0.3, -0.2, 0.5])
B = RNG.standard_normal((3, 3))
COV = B @ B.T + np.eye(3)


@pytest.mark.parametrize("method", ["logpdf", "pdf"])
@pytest.mark.parametrize("cov", [COV, np.array([1.5, 0.7, 2.0]), 1.3], ids=["matrix", "diag",
                                                                          "number"])
def test_mvn_second_order(method, cov):
    f = getattr(S.multivariate_normal, method)
    check_grads(lambda x, m, c: f(x, m, c), X, MEAN, cov)


def test_mvn_reads_the_lower_triangle_as_scipy():
    skew = COV + np.triu(np.ones((3, 3)), 1)   # an upper triangle SciPy ignores
    assert_same(S.multivariate_normal.logpdf(X, MEAN, skew),
                ss.multivariate_normal.logpdf(X, MEAN, COV))
    check_grads(lambda c: S.multivariate_normal.logpdf(X, MEAN, c), skew)


SINGULAR = np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 2.0]])


def test_mvn_singular_covariance_constant():
    """The degenerate density on the range of cov, -inf off it, as SciPy; derivatives in x
    and mean along the range."""
    on = np.array([[0.4, 0.4, 1.0], [-1.0, -1.0, 0.3]])
    off = np.array([[0.4, 0.1, 1.0]])
    for x in (on, off):
        assert_same(S.multivariate_normal.logpdf(x, None, SINGULAR, allow_singular=True),
                    ss.multivariate_normal.logpdf(x, None, SINGULAR, allow_singular=True))
    along = np.array([1.0, 1.0, 0.0])
    check_grads(lambda t, z, m: S.multivariate_normal.logpdf(
        t[:, None] * along + z[:, None] * np.eye(3)[2], m * along, SINGULAR, allow_singular=True),
        np.array([0.4, -1.0]), np.array([1.0, 0.3]), 0.2)


def test_mvn_errors_as_scipy():
    with pytest.raises(np.linalg.LinAlgError, match="allow_singular=True"):
        S.multivariate_normal.logpdf(X, MEAN, SINGULAR)
    with pytest.raises(ValueError, match="positive semidefinite"):
        S.multivariate_normal.logpdf(X, MEAN, -COV)
    with pytest.raises(ValueError, match="3 components along its last axis"):
        S.multivariate_normal.logpdf(np.ones((2, 2)), MEAN, COV)
    with pytest.raises(ValueError, match=r"\(3, 3\) matrix"):
        S.multivariate_normal.logpdf(X, MEAN, np.eye(2))
    with pytest.raises(NotImplementedError, match="singular covariance"):
        gradient(Reverse, lambda c: S.multivariate_normal.logpdf(
            X, MEAN, c * SINGULAR, allow_singular=True).sum(), 1.0)


def test_mvn_cdf_plain_values_only():
    cov = np.array([[1.0, 0.5], [0.5, 2.0]])
    x = np.array([0.3, -0.4])
    got = S.multivariate_normal.cdf(x, np.zeros(2), cov, rng=1)
    assert np.isclose(got, ss.multivariate_normal.cdf(x, np.zeros(2), cov, rng=1))
    for mode in (Reverse, Forward):
        with pytest.raises(NotImplementedError, match="multivariate_normal.cdf"):
            gradient(mode, lambda x: S.multivariate_normal.cdf(x, np.zeros(2), cov), x)


# -- dirichlet -------------------------------------------------------------------------------------
@st.composite
def dirichlet_case(draw):
    """(x on the simplex along axis 0, maybe without its last component, alpha)."""
    k = draw(st.integers(2, 4))
    batch = draw(st.sampled_from([(), (3,)]))
    w = draw(arrays((k,) + batch, low=0.1, high=1.0))
    x = w / np.sum(w, axis=0)
    if draw(st.booleans()):
        x = x[:-1]
    return x, draw(arrays((k,), low=0.3, high=4.0))


@FAST
@given(dirichlet_case(), st.sampled_from(["forward", "reverse"]), st.sampled_from(["logpdf",
                                                                                 "pdf"]))
def test_dirichlet_matches_scipy(case, mode, method):
    x, alpha = case
    expected = getattr(ss.dirichlet, method)(x, alpha)
    if x.shape[0] == alpha.shape[0]:   # on the simplex: perturbing x would leave it
        got = traced_value(lambda a: getattr(S.dirichlet, method)(x, a), alpha, mode=mode)
    else:
        got = traced_value(getattr(S.dirichlet, method), x, alpha, mode=mode)
    assert_same(got, expected)


@pytest.mark.parametrize("method", ["logpdf", "pdf"])
def test_dirichlet_second_order(method):
    f, alpha = getattr(S.dirichlet, method), np.array([1.5, 2.0, 0.7])
    free = np.array([[0.2, 0.5, 0.1], [0.3, 0.25, 0.6]])            # K - 1 components
    check_grads(lambda x, a: f(x, a), free, alpha)
    softmax = lambda y: np.exp(y) / np.sum(np.exp(y))                # noqa: E731
    check_grads(lambda y, a: f(softmax(y), a), np.array([0.1, -0.3, 0.5]), alpha)


def test_dirichlet_errors_as_scipy():
    alpha = np.array([1.0, 2.0, 0.5])
    for x, alpha_, match in [(np.array([0.2, 0.3, 0.6]), alpha, "simplex"),
                             (np.array([0.5, 0.5, 0.0]), alpha, "alpha is < 1"),
                             (np.array([1.2, -0.2, 0.0]), np.ones(3), ">= 0"),
                             (np.array([0.5, 0.5]), np.array([1.0, -1.0]), "> 0"),
                             (np.ones(5) / 5, alpha, "components"),
                             (np.array([0.5, 0.5]), np.ones((2, 1)), "one-dimensional")]:
        with pytest.raises(ValueError, match=match):
            S.dirichlet.logpdf(x, alpha_)
        with pytest.raises(ValueError):
            ss.dirichlet.logpdf(x, alpha_)


@pytest.mark.parametrize("cov", [2.5, np.array([1.5, 0.5]), np.array([[2.0, 0.3], [0.3, 1.0]])])
def test_mvn_entropy_matches_scipy_and_differentiates(cov):
    dim = 2 if np.ndim(cov) else 1
    want = ss.multivariate_normal.entropy(np.zeros(dim), cov)
    np.testing.assert_allclose(S.multivariate_normal.entropy(np.zeros(dim), cov), want,
                               rtol=1e-13, atol=1e-13)
    check_grads(lambda c: S.multivariate_normal.entropy(np.zeros(dim), c * c), np.sqrt(cov)
                if np.ndim(cov) < 2 else cov, order=2)
