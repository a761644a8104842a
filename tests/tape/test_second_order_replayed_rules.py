"""Second order through the rules whose value-dependent parts are traced masks or `inactive`
steps (np.where with constant branches, sign, heaviside, nan_to_num, the nan-reductions' NaN
masks, median/quantile, np.average, maximum.accumulate, np.array of traced scalars, lstsq,
logsumexp with b, tape.scipy.stats masks, tape.scipy.linalg sign conventions, interp, unwrap,
cov, real_if_close, gradient, ediff1d, copyto(where=), dot/inner with Python numbers).

test_nested_every_op checks forward-over-reverse, reverse-over-reverse and forward-over-forward
with `check_grads(order=2)`; here the same rules go through `tape.hessian`, `tape.hvp` and
reverse-over-forward as well (and all five against one reference), an outer derivative with
respect to a parameter that reaches the inner function only through a mask, and inputs that
hold NaN where the function ignores NaN. References: central finite differences in float64
of the reverse gradient, itself checked against finite differences of the function.
"""
import warnings

import numpy as np
import pytest

import tape.scipy.linalg as tsl
import tape.scipy.special as tss
import tape.scipy.stats as tst
from tape import (Active, Duplicated, Forward, Reverse, ReverseWithPrimal, autodiff, gradient,
                  hessian, hvp, jacobian, set_strong_zero)

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

x4 = np.array([0.3, -0.7, 1.1, 0.45])
p4 = np.array([0.6, 1.3, 2.1, 0.9])
e4 = np.array([0.35, 0.82, 0.33, -1.3])   # SciPy's eigenvector signs are stable around here
V4 = np.array([0.7, -1.2, 0.4, 1.5])
U4 = np.array([-0.3, 0.9, 1.1, -0.6])
COORDS = np.array([0.0, 0.4, 1.1, 1.5])


def _fd(g, x, eps=1e-6):
    """Central differences of `g` (array-valued) at `x`: the Jacobian, one column per entry."""
    cols = []
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = eps
        cols.append((np.asarray(g(x + e), float) - np.asarray(g(x - e), float)) / (2 * eps))
    return np.stack(cols, axis=-1)


def _grad(f, x, mode=Reverse):
    return gradient(mode, f, x)[0]


def _copyto_where(x):
    out = np.zeros_like(x) + x[0]
    np.copyto(out, x ** 3, where=x > 0)     # a traced mask
    return np.sum(out ** 2)


def _copyto_constant(x):
    out = x ** 2
    np.copyto(out, 0.5, where=np.sin(x) > 0.5)
    return np.sum(out * x)


# Smooth points: no entry on a mask's boundary, distinct values for sorts and maxima.
CASES = {
    "where[constant branches]": (lambda x: np.sum(np.where(x > 0, 1.0, -1.0) * x ** 3), x4),
    "where[constant branches, computed condition]": (
        lambda x: np.sum(np.where(np.sin(x) > 0, 2.0, -0.5) * x ** 2), x4),
    "sign[real]": (lambda x: np.sum(np.sign(x) * x ** 3), x4),
    "heaviside[traced h0]": (lambda x: np.sum(np.heaviside(x - 0.2, x[0]) * x ** 3), x4),
    "heaviside[x at 0]": (lambda x: np.sum(np.heaviside(x * np.array([0.0, 1, 1, 1]), x[0] * x[1])
                                           * x ** 2), x4),
    "nan_to_num[replaced entries]": (
        lambda x: np.sum(np.nan_to_num(np.log(x), nan=2.0) * x ** 3), x4),
    "median": (lambda x: np.median(x ** 3 + x), x4),
    "quantile[two q]": (lambda x: np.sum(np.quantile(x ** 3, np.array([0.2, 0.7])) ** 2), x4),
    "percentile[traced q]": (lambda x: np.sum(np.percentile(x ** 3, x[2] * 30.0) ** 2), x4),
    "average[traced weights]": (lambda x: np.average(x ** 2, weights=np.sin(x) + 2.0) ** 2, x4),
    "maximum.accumulate": (lambda x: np.sum(np.maximum.accumulate(x ** 3 - x) ** 2), x4),
    "minimum.accumulate[2-d]": (
        lambda x: np.sum(np.minimum.accumulate(np.outer(x, x[::-1]), axis=0) ** 2), x4),
    "np.array[traced scalars]": (
        lambda x: np.sum(np.array([x[0] * x[1], np.sin(x[2]), 2.0, x[3]]) ** 3), x4),
    "np.array[nested lists, 0-d sums]": (
        lambda x: np.sum(np.array([[np.sum(x ** 2), x[1]], [x[2] * x[0], 1.0]]) ** 2), x4),
    "lstsq[residuals]": (lambda x: np.sum(np.linalg.lstsq(
        np.stack([x, x ** 2, np.ones(4)], 1), np.array([1.0, 2.0, 0.5, 3.0]) * x[0])[1]), x4),
    "logsumexp[b]": (lambda x: tss.logsumexp(x, b=x ** 2 + 0.1), x4),
    "logsumexp[b with a zero at the max]": (
        lambda x: tss.logsumexp(x * np.array([1.0, 1.0, 3.0, 1.0]),
                                b=x[3] * np.array([1.0, 2.0, 0.0, 1.0])), x4),
    "logsumexp[negative b, return_sign]": (
        lambda x: tss.logsumexp(x, b=np.array([1.0, -3.0, -2.0, 0.5]) * x[0],
                                return_sign=True)[0], x4),
    "stats.norm.logpdf[traced loc, scale]": (
        lambda x: np.sum(tst.norm.logpdf(x, loc=x[0] * 0.3, scale=x[1] ** 2 + 0.5)), x4),
    "stats.t.logpdf[traced df]": (
        lambda x: np.sum(tst.t.logpdf(x, df=x[2] ** 2 + 1.0, scale=1.3)), x4),
    "stats.gamma.logpdf[traced a, scale]": (
        lambda x: np.sum(tst.gamma.logpdf(x, a=x[2] + 1.0, scale=x[3] ** 2 + 0.2)), p4),
    "stats.beta.logpdf": (lambda x: np.sum(tst.beta.logpdf(x / 3.0, x[0] + 1.0, x[1])), p4),
    "stats.poisson.logpmf": (
        lambda x: np.sum(tst.poisson.logpmf(np.array([0, 1, 3, 2]), x ** 2 + 0.1)), x4),
    "stats.multivariate_normal.logpdf[traced cov]": (
        lambda x: tst.multivariate_normal.logpdf(
            x[:2], mean=x[2:] * 0.5,
            cov=np.array([[x[0] ** 2 + 1, x[1] * 0.2], [x[1] * 0.2, x[2] ** 2 + 1]])), x4),
    "stats.dirichlet.logpdf[traced alpha and x]": (
        lambda x: tst.dirichlet.logpdf(x[:3] / np.sum(x[:3]), x[1:] ** 2 + 0.5), p4),
    "scipy.linalg.eigh[SciPy's signs]": (
        lambda x: np.sum(tsl.eigh(np.diag([1.0, 2.0, 3.0, 4.5]) + 0.3 * np.outer(x, x))[1]
                         @ np.arange(1.0, 5.0)), e4),
    "scipy.linalg.svd[SciPy's signs]": (
        lambda x: np.sum(tsl.svd(np.outer(x, x[:3]) + np.eye(4, 3) * [1.0, 2.2, 3.7],
                                 full_matrices=False)[0] @ np.arange(1.0, 4.0)), x4),
    "scipy.linalg.qr[SciPy's signs]": (
        lambda x: np.sum(tsl.qr(np.outer(x, x[:3]) + np.eye(4, 3) * [1.0, -2.2, 3.7],
                                mode="economic")[0] @ np.arange(1.0, 4.0)), x4),
    "interp[traced xp]": (lambda x: np.sum(np.interp(np.array([0.1, 0.6, 1.4]),
                                                     np.cumsum(x ** 2 + 0.1), x) ** 2), x4),
    "interp[period]": (lambda x: np.sum(np.interp(x * 3, np.array([0.0, 0.7, 1.5]),
                                                  np.array([1.0, -0.5, 2.0]) * x[1],
                                                  period=2.0) ** 2), x4),
    "unwrap": (lambda x: np.sum(np.unwrap(np.array([0.0, 3.0, 6.2, 9.0]) * x[0] + x) ** 2), x4),
    "cov[traced aweights]": (
        lambda x: np.sum(np.cov(np.stack([x, x ** 2]), aweights=x ** 2 + 0.5) ** 2), x4),
    "real_if_close": (lambda x: np.sum(np.real_if_close(x ** 2 + 0j) ** 2 * x), x4),
    "gradient[traced coordinates]": (
        lambda x: np.sum(np.gradient(np.sin(x), np.cumsum(x ** 2 + 0.1)) ** 2), x4),
    "gradient[traced spacing, edge_order=2]": (
        lambda x: np.sum(np.gradient(x ** 3, x[0] + 1.0, edge_order=2) ** 2), x4),
    "ediff1d[traced to_begin, to_end]": (
        lambda x: np.sum(np.ediff1d(x ** 2, to_end=x[0], to_begin=np.array([1.0, x[1]])) ** 3),
        x4),
    "dot, inner[Python numbers]": (
        lambda x: np.sum(np.dot(x ** 2, 0.1) ** 2) + np.inner(2.5, x) @ x, x4),
    "copyto[traced where]": (_copyto_where, x4),
    "copyto[constant value, traced where]": (_copyto_constant, x4),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hessian_hvp_and_every_nesting_agree_with_finite_differences(name):
    f, x = CASES[name]
    g = _grad(f, x)
    np.testing.assert_allclose(g, _fd(lambda z: np.asarray(f(z)), x), rtol=1e-6, atol=1e-7)
    H = _fd(lambda z: _grad(f, z), x)
    got = {
        "hessian": hessian(f, x),
        "hvp": hvp(f, x, V4),
        "forward over reverse": autodiff(Forward, lambda z: _grad(f, z), Duplicated(x, V4))[0],
        "reverse over reverse": _grad(lambda z: np.sum(_grad(f, z) * U4), x),
        "reverse over forward": _grad(lambda z: autodiff(Forward, f, Duplicated(z, V4))[0], x),
    }
    expected = {"hessian": H, "hvp": H @ V4, "forward over reverse": H @ V4,
                "reverse over reverse": H.T @ U4, "reverse over forward": H.T @ V4}
    for how, value in got.items():
        np.testing.assert_allclose(value, expected[how], rtol=1e-5, atol=1e-6, err_msg=how)


def _copyto_at(x, p):
    out = x ** 2
    np.copyto(out, 2 * x, where=x > p)
    return np.sum(out * x)


# f(x, p): p reaches f only through a mask or an inactive step (or a value that is constant
# near p0). The inner gradient in x is differentiated in p from outside.
OUTER = {
    "where[condition]": (lambda x, p: np.sum(np.where(x * p > 0, 1.0, -1.0) * x ** 3), 0.8),
    "where[condition of p alone]": (
        lambda x, p: np.sum(x ** 2 * np.where(np.array([p, -p, p, p]) > 0, 1.0, -1.0)), 0.8),
    "where[branch chosen by p]": (
        lambda x, p: np.sum(np.where(np.sin(p * x[0] + x) > 0, x, 2.0) ** 3), 0.5),
    "sign": (lambda x, p: np.sum(np.sign(x - p) * x ** 3), 0.2),
    "heaviside": (lambda x, p: np.sum(np.heaviside(x - p, 0.5) * x ** 3), 0.2),
    "nan_to_num[mask from p]": (lambda x, p: np.sum(np.nan_to_num(np.log(x + p)) * x ** 2), 0.5),
    "nanmedian[NaN mask from p]": (
        lambda x, p: np.nanmedian(np.where(x > p, np.nan, x ** 3)), 0.5),
    "nanquantile[NaN mask from p]": (
        lambda x, p: np.nanquantile(np.where(x > p, np.nan, x ** 3), 0.4), 0.5),
    "nanmax[NaN mask from p]": (lambda x, p: np.nanmax(np.where(x > p, np.nan, x ** 3)), 0.5),
    "nanmean[NaN mask from p]": (lambda x, p: np.nanmean(np.where(x > p, np.nan, x ** 3)), 0.5),
    "logsumexp[b's zeros from p]": (
        lambda x, p: tss.logsumexp(x, b=np.where(x > p, 1.0, 0.0) + 0.5), 0.5),
    "logsumexp[sign from p]": (
        lambda x, p: np.sum(tss.logsumexp(x, b=np.sign(x - p) + 0.1, return_sign=True)[1]
                            * x ** 2), 0.0),
    "maximum.accumulate[positions from p]": (
        lambda x, p: np.sum(np.maximum.accumulate(np.where(x > p, x, -x)) ** 3), 0.35),
    "copyto[where from p]": (_copyto_at, 0.35),
    "interp[xp moved by floor(p)]": (
        lambda x, p: np.sum(np.interp(x, np.array([-1.0, 0.0, 0.5, 2.0]) + np.floor(p),
                                      np.arange(4.0)) * x), 0.3),
}


@pytest.mark.parametrize("name", sorted(OUTER))
def test_outer_derivative_through_a_mask_parameter(name):
    f, p0 = OUTER[name]
    inner = lambda p: _grad(lambda x: f(x, p), x4)   # noqa: E731
    np.testing.assert_allclose(inner(p0), _fd(lambda z: np.asarray(f(z, p0)), x4), atol=1e-6)
    ref = (inner(p0 + 1e-6) - inner(p0 - 1e-6)) / 2e-6
    w = np.arange(1.0, 5.0)
    np.testing.assert_allclose(autodiff(Forward, inner, Duplicated(p0, 1.0))[0], ref, atol=1e-6)
    np.testing.assert_allclose(jacobian(Reverse, inner, p0)[0], ref, atol=1e-6)
    np.testing.assert_allclose(_grad(lambda p: np.sum(inner(p) * w), p0), ref @ w, atol=1e-6)
    rof = _grad(lambda p: autodiff(Forward, lambda x: f(x, p), Duplicated(x4, w))[0], p0)
    np.testing.assert_allclose(rof, ref @ w, atol=1e-6)


# -- inputs holding NaN where the function ignores NaN -----------------------------------------
XN = np.array([0.3, np.nan, 1.1, 0.45, -0.8])
VN = np.linspace(0.5, 1.5, 5)

NAN_DIRECT = {   # the reduction reads the NaN input itself
    "nansum": lambda x: np.nansum(x) ** 2,
    "nanmean": lambda x: np.nanmean(x) ** 2,
    "nanvar": np.nanvar,
    "nanstd": np.nanstd,
    "nanprod": np.nanprod,
    "nanmax": lambda x: np.nanmax(x) ** 2,
    "nanmin": lambda x: np.nanmin(x) ** 3,
    "nanmedian": lambda x: np.nanmedian(x) ** 2,
    "nanquantile": lambda x: np.nanquantile(x, 0.3) ** 2,
    "nanpercentile": lambda x: np.nanpercentile(x, 65.0) ** 2,
    "nancumsum": lambda x: np.sum(np.nancumsum(x) ** 2),
    "nancumprod": lambda x: np.sum(np.nancumprod(x) ** 2),
}

NAN_COMPOSED = {   # an elementwise function first: 0 * f'(NaN) is NaN unless strong zero
    "nansum": lambda x: np.nansum(x ** 3),
    "nanmean": lambda x: np.nanmean(np.sin(x)) ** 2,
    "nanvar[scaled by an entry]": lambda x: np.nanvar(x * x[0]),
    "nanstd": lambda x: np.nanstd(x ** 2),
    "nanprod": lambda x: np.nanprod(x ** 2),
    "nanmax": lambda x: np.nanmax(x ** 3),
    "nancumsum": lambda x: np.sum(np.nancumsum(x ** 2) ** 2),
    "nanmedian": lambda x: np.nanmedian(x ** 3),
    "nanquantile": lambda x: np.nanquantile(x ** 3, 0.3),
    "nan_to_num": lambda x: np.sum(np.nan_to_num(x, nan=2.0) ** 3),
}


def _nan_fd(g, x):
    """Finite differences where x holds NaN: g ignores those entries, so NaN +- eps changes
    nothing (the difference of two NaN results, where g itself is NaN there, counts as 0)."""
    return np.nan_to_num(_fd(g, x), nan=0.0)


@pytest.mark.parametrize("name", sorted(NAN_DIRECT))
def test_nan_input_read_by_the_reduction_second_order(name):
    f = NAN_DIRECT[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = f(XN.copy())
    value = autodiff(ReverseWithPrimal, f, Active, Active(XN.copy()))[1]
    np.testing.assert_allclose(value, plain, rtol=1e-13)
    g = _grad(f, XN)
    np.testing.assert_allclose(g, _nan_fd(f, XN), rtol=1e-6, atol=1e-7)
    H = _nan_fd(lambda z: _grad(f, z), XN)
    np.testing.assert_allclose(hessian(f, XN), H, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(hvp(f, XN, VN), H @ VN, rtol=1e-5, atol=1e-6)
    rof = _grad(lambda z: autodiff(Forward, f, Duplicated(z, VN))[0], XN)
    np.testing.assert_allclose(rof, H.T @ VN, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(NAN_COMPOSED))
def test_nan_input_under_strong_zero_second_order(name):
    f = NAN_COMPOSED[name]
    R, F = set_strong_zero(Reverse), set_strong_zero(Forward)
    g = _grad(f, XN, R)
    np.testing.assert_allclose(g, _nan_fd(f, XN), rtol=1e-6, atol=1e-7)
    H = _nan_fd(lambda z: _grad(f, z, R), XN)
    fr = autodiff(F, lambda z: _grad(f, z, R), Duplicated(XN, VN))[0]
    np.testing.assert_allclose(fr, H @ VN, rtol=1e-5, atol=1e-6)
    rr = _grad(lambda z: np.sum(_grad(f, z, R) * VN), XN, R)
    np.testing.assert_allclose(rr, H.T @ VN, rtol=1e-5, atol=1e-6)
    rof = _grad(lambda z: autodiff(F, f, Duplicated(z, VN))[0], XN, R)
    np.testing.assert_allclose(rof, H.T @ VN, rtol=1e-5, atol=1e-6)


# -- findings ------------------------------------------------------------------------------------
def test_nan_to_num_traced_replacement_value_is_differentiated():
    v = np.array([0.5, -1.0, 2.0])
    f = lambda v: np.sum(np.nan_to_num(np.log(v), nan=v[0] ** 2))   # noqa: E731
    # log(-1) is NaN: replaced by v[0]**2, so df/dv0 = 1/v0 + 2 v0 = 3, d2f/dv0^2 = -4 + 2
    np.testing.assert_allclose(_grad(f, v), [3.0, 0.0, 0.5], atol=1e-9)
    np.testing.assert_allclose(hessian(f, v)[0, 0], -2.0, atol=1e-9)


def test_nan_to_num_traced_posinf_forward():
    x = np.array([np.inf, 1.0])
    f = lambda h: np.sum(np.nan_to_num(x * h, posinf=3.0 * h))   # noqa: E731
    assert gradient(Forward, f, 2.0)[0] == pytest.approx(4.0)
