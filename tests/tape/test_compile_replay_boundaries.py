"""Replayed value-dependent steps across their decision boundaries.

A compiled function replays, instead of guarding, the parts of a rule that depend on values: NaN
masks of the nan-reductions and of median/quantile, inactive steps (heaviside, nan_to_num's fill
values, running-extremum positions, lstsq's solution and rank, logsumexp's shift and sign with
`b`, the sign conventions of eigh/svd/qr, multivariate_normal's spectrum, dirichlet's checks),
the parameter-validity masks of tape.scipy.stats, and truth guards (average's zero sum,
check_finite). A replay that reused a value of an earlier call would be silently wrong, so each
function below is called with values that cross those boundaries between calls (NaN appearing,
moving and filling a slice, parameters valid on some calls only, ties, sign flips, rank changes,
exact zeros, inf), in all four modes, against eager autodiff on the same values and plain
NumPy/SciPy. A call that raises eagerly must raise the same error compiled, and the next valid
call must still be right.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import tape
import tape.scipy.linalg as tsl
import tape.scipy.special as tsp
import tape.scipy.stats as tst
from tape import (Active, BatchDuplicated, Const, Duplicated, Forward, ForwardWithPrimal,
                  Reverse, ReverseWithPrimal, autodiff)

from numeric_checks import fd_gradient

nan, inf = np.nan, np.inf
W5 = np.array([1.0, 2.0, -1.5, 0.5, 3.0])
X5 = np.array([0.3, -1.2, 2.0, 0.7, -0.4])
M34 = np.arange(12.0).reshape(3, 4) * 0.3 - 1.0
S3 = np.array([[2.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 4.0]])
G32 = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 7.0]])
PD = np.array([[2.0, 0.3], [0.3, 1.0]])
XM = np.array([[0.5, -1.0], [1.0, 2.0]])
MODES = {"Reverse": Reverse, "ReverseWithPrimal": ReverseWithPrimal, "Forward": Forward,
         "ForwardWithPrimal": ForwardWithPrimal}


def _with(a, idx, value):
    a = np.array(a, dtype=float)
    a[idx] = value
    return a


def _sym(a):
    a = a.reshape(3, 3)
    return (a + a.T) / 2


# Each entry: (f of one float array, the values of successive calls). Every sequence revisits
# each side of its boundary at least twice, so confirmed programs replay across it.
NAN5 = [X5, _with(X5, 1, nan), _with(X5, [0, 3], nan), np.full(5, nan), X5 * 1.1,
        _with(X5, 1, nan) * 1.1, _with(X5, 4, nan), np.full(5, nan), X5]
NAN34 = [M34, _with(M34, (1, 2), nan), _with(M34, 0, nan), _with(M34, (slice(None), 1), nan),
         M34 * 1.1, _with(M34, 0, nan) * 1.1, _with(M34, (2, 3), nan), M34]
ORDER4 = [np.array([1.0, 2.0, 3.0, 4.0]), np.array([4.0, 3.0, 2.0, 1.0]),
          np.array([2.0, 2.0, 2.0, 1.0]), np.array([1.0, 1.0, 3.0, 3.0]),
          np.array([3.0, 1.0, 1.0, 2.0]), np.array([4.0, 3.0, 2.0, 1.0]) * 1.1,
          np.array([1.0, 2.0, 3.0, 4.0])]
ZERO5 = [X5, np.array([0.0, 0.0, 1.0, -2.0, 0.5]), np.array([-1.0, 2.0, 3.0, 0.0, 0.0]),
         np.array([-0.0, 0.5, -0.5, 2.0, 0.0]), -X5, np.array([0.0, 0.0, 1.0, -2.0, 0.5]) * 1.1,
         np.array([0.0, -0.0, nan, 1.0, -1.0]), X5]
NONFINITE5 = [X5, np.array([inf, -1.2, nan, 0.7, -inf]), np.array([0.3, nan, nan, inf, -0.4]),
              np.array([-inf, -inf, 1.0, 2.0, 3.0]), X5 * 1.1,
              np.array([inf, -1.2, nan, 0.7, -inf]) * 1.1, np.array([1.0, 2.0, 3.0, 4.0, nan]),
              X5]
RUNS5 = [X5, np.array([3.0, 2.0, 1.0, 0.0, -1.0]), np.array([1.0, 1.0, 1.0, 2.0, 2.0]),
         np.array([1.0, nan, 3.0, 0.0, 5.0]), np.array([nan, 1.0, 2.0, 3.0, 4.0]),
         np.array([0.0, 1.0, 0.0, 1.0, 5.0]), X5 * 1.1, np.array([3.0, 2.0, 1.0, 0.0, -1.0]),
         np.array([1.0, 1.0, 1.0, 2.0, 2.0]) * 1.1]
LSTSQ = [np.array([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 2.0, 1.0]),
         np.array([1.0, 2.0, 2.0, 4.0, 3.0, 6.0, 4.0, 8.0]),           # rank 1
         np.array([1.0, 0.5, 0.0, 1.0, 1.0, 1.0, 2.0, -1.0]), np.zeros(8),   # rank 0
         np.array([1.0, 2.0, 2.0, 4.0, 3.0, 6.0, 4.0, 8.0]) * 1.1, np.ones(8),
         np.array([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 2.0, 1.0]) * 1.1, np.zeros(8)]
LSE = [np.array([0.3, -1.2, 2.0, 0.7]), np.array([5.0, 0.0, 0.0, 0.0]),
       np.array([0.0, 0.0, 5.0, 0.0]), np.array([0.0, 0.0, 0.0, 0.0]),
       np.array([1000.0, 1.0, 1.0, 999.0]), np.array([5.0, 0.0, 0.0, 0.0]) * 1.1,
       np.array([0.0, 0.0, 5.0, 0.0]) * 1.1, np.array([0.3, -1.2, 2.0, 0.7])]
B4 = np.array([1.0, -0.5, -1.0, 2.0])
LSE_B = [np.ones(4), -np.ones(4), np.array([1.0, -2.0, 1.0, 0.0]), np.zeros(4),
         np.array([2.0, 0.0, 0.0, 0.0]), -np.ones(4) * 1.1, np.array([1.0, -2.0, 1.0, 0.0]),
         np.ones(4) * 1.1]
WEIGHTS5 = [np.arange(1.0, 6.0), np.array([1.0, -1.0, 0.0, 0.0, 0.0]),
            np.array([1.0, 1.0, 1.0, 1.0, -4.0]), np.zeros(5),
            np.array([-1.0, 2.0, 0.5, 0.0, 1.0]), np.arange(1.0, 6.0) * 1.1, np.zeros(5),
            np.array([0.0, 0.0, 0.0, 0.0, 1.0])]
SCALES = [1.0, 2.0, 0.0, -1.0, 0.5, nan, inf, -2.0, 1.5, 0.0, 3.0]
EIGH = [S3.ravel(), -S3.ravel(), (S3 @ np.diag([1.0, -1.0, 1.0]) @ S3).ravel(),
        np.diag([3.0, 2.0, 1.0]).ravel(), np.diag([1.0, 2.0, 3.0]).ravel(),
        -S3.ravel() * 1.1, (S3 + 5 * np.eye(3)).ravel(), np.diag([3.0, 2.0, 1.0]).ravel()]
FLIPS32 = [G32.ravel(), -G32.ravel(), np.array([[0.0, 1.0], [1.0, 0.0], [0.0, 0.5]]).ravel(),
           np.array([[-3.0, 0.0], [0.0, 2.0], [1.0, 1.0]]).ravel(), -G32.ravel() * 1.1,
           np.array([[0.0, 1.0], [1.0, 0.0], [0.0, 0.5]]).ravel() * 1.1, G32.ravel()]
NONFINITE9 = [S3.ravel(), _with(S3.ravel(), 0, nan), S3.ravel() * 2, _with(S3.ravel(), 4, inf),
              S3.ravel() * 1.1, _with(S3.ravel(), 8, nan), S3.ravel()]
COVS = [PD.ravel(), np.ones(4), np.array([1.0, 2.0, 2.0, 1.0]), np.eye(2).ravel(),
        PD.ravel() * 3, np.ones(4) * 2, np.array([1.0, 2.0, 2.0, 1.0]) * 1.1, PD.ravel()]
ALPHAS = [np.array([2.0, 3.0, 1.5]), np.array([0.5, 3.0, 1.0]), np.array([0.0, 1.0, 1.0]),
          np.array([-1.0, 2.0, 2.0]), np.array([1.0, 1.0, 1.0]), np.array([0.5, 3.0, 1.0]) * 1.1,
          np.array([-1.0, 2.0, 2.0]) * 1.1, np.array([2.0, 3.0, 1.5])]
SIMPLEX = [np.array([0.2, 0.3, 0.5]), np.array([0.0, 0.5, 0.5]), np.array([0.5, 0.0, 0.5]),
           np.array([0.2, 0.3, 0.6]), np.array([-0.1, 0.6, 0.5]), np.array([0.1, 0.1, 0.8]),
           np.array([0.0, 0.5, 0.5]), np.array([0.25, 0.25, 0.5])]
KNOTS_X = [np.array([0.5, 1.5, 2.5]), np.array([-1.0, 0.0, 3.0]), np.array([1.0, 2.0, 4.0]),
           np.array([3.0, 3.0, -0.5]), np.array([nan, 1.5, 0.0]), np.array([0.5, 1.5, 2.5]) * 1.1,
           np.array([-1.0, 0.0, 3.0]) * 1.1, np.array([1.0, 2.0, 4.0])]
XP4, FP4 = np.array([0.0, 1.0, 2.0, 3.0]), np.array([1.0, 3.0, 2.0, 5.0])
WRAPS = [np.arange(5.0), np.array([0.0, 3.5, 0.5, -3.0, 0.0]),
         np.array([0.0, np.pi, 0.0, -np.pi, 0.0]), np.array([0.0, 6.0, 12.0, 18.0, 24.0]),
         np.array([0.0, 1.0, nan, 3.0, 4.0]), np.array([0.0, 3.5, 0.5, -3.0, 0.0]) * 1.1,
         np.arange(5.0)]
M25 = np.array([[1.0, 2.0, 0.5, 3.0, -1.0], [0.2, -1.0, 2.0, 1.0, 0.0]])
AWEIGHTS = [np.arange(1.0, 6.0), np.ones(5), np.array([0.0, 0.0, 0.0, 0.0, 1.0]),
            np.array([0.0, 1.0, 0.0, 0.0, 1.0]), np.zeros(5), np.array([1.0, -1.0, 1.0, 1.0, 1.0]),
            np.arange(1.0, 6.0) * 1.1, np.array([0.0, 0.0, 0.0, 0.0, 1.0]) * 2]

CASES = {
    # NaN masks, all-NaN slices
    "nansum": (lambda x: np.nansum(x) * 2.0, NAN5),
    "nanmean axis=1": (lambda x: np.sum(np.nanmean(x, axis=1) * np.arange(1.0, 4.0)), NAN34),
    "nanmax axis=0": (lambda x: np.sum(np.nanmax(x, axis=0) * np.arange(1.0, 5.0)), NAN34),
    "nanstd": (lambda x: np.nanstd(x) * 2.0, NAN5),
    "nanprod axis=0": (lambda x: np.sum(np.nanprod(x, axis=0) * np.arange(1.0, 5.0)), NAN34),
    "nancumsum": (lambda x: np.sum(np.nancumsum(x) * W5), NAN5),
    "nanmedian axis=1": (lambda x: np.sum(np.nanmedian(x, axis=1) * np.arange(1.0, 4.0)), NAN34),
    "nanpercentile 30": (lambda x: np.nanpercentile(x, 30.0) * 2.0, NAN5),
    "nanquantile [0, .3, 1] axis=0": (lambda x: np.sum(np.nanquantile(
        x, [0.0, 0.3, 1.0], axis=0) * np.arange(12.0).reshape(3, 4)), NAN34),
    "nanargmax gather": (lambda x: x[np.nanargmax(x)] * 2.0, NAN5),
    "median with NaN": (lambda x: np.median(x) * 2.0, NAN5),
    "quantile with NaN": (lambda x: np.quantile(x, 0.3) * 2.0, NAN5),
    # order swaps and duplicates
    "median ties": (lambda x: np.median(x) * 3.0, ORDER4),
    "quantile [0, .3, 1] swaps": (lambda x: np.sum(np.quantile(x, [0.0, 0.3, 1.0])
                                                   * np.array([1.0, 2.0, 3.0])), ORDER4),
    "percentile nearest": (lambda x: np.sum(np.percentile(x, [25.0, 50.0, 75.0],
                                                          method="nearest") * np.arange(1.0, 4.0)),
                           ORDER4),
    "quantile traced q": (lambda q: np.quantile(X5, q) * 2.0, [0.0, 0.3, 0.5, 0.75, 1.0, 0.3,
                                                               0.75, 1.5, 0.25]),
    # inactive steps, exact zeros and non-finite values
    "heaviside(x, 0.5)": (lambda x: np.sum(np.heaviside(x, 0.5) * W5 * x), ZERO5),
    "heaviside(x, traced x2)": (lambda x: np.sum(np.heaviside(x, x * 2 + 1) * W5), ZERO5),
    "sign": (lambda x: np.sum(np.sign(x) * W5 * x ** 2) + np.sum(np.sign(x)), ZERO5),
    "heaviside in a branch": (lambda x: x[0] * 2 if np.heaviside(x[0], 0.5) > 0.7 else x[1] * 3,
                              ZERO5),
    "nan_to_num": (lambda x: np.sum(np.nan_to_num(x) * W5), NONFINITE5),
    "nan_to_num fills": (lambda x: np.sum(np.nan_to_num(x * x, nan=1.5, posinf=7.0, neginf=-3.0)
                                          * W5), NONFINITE5),
    "where(traced cond, consts)": (lambda x: np.sum(np.where(x > 0, 1.0, -1.0) * x * W5), ZERO5),
    "where(isnan, 0, x)": (lambda x: np.sum(np.where(np.isnan(x), 0.0, x) * W5), NONFINITE5),
    "maximum.accumulate": (lambda x: np.sum(np.maximum.accumulate(x) * W5), RUNS5),
    "minimum.accumulate": (lambda x: np.sum(np.minimum.accumulate(x) * W5), RUNS5),
    "lstsq solution": (lambda x: np.sum(np.linalg.lstsq(x.reshape(4, 2), np.arange(1.0, 5.0),
                                                        rcond=None)[0] * np.array([1.0, 2.0])),
                       LSTSQ),
    "lstsq rank slices": (lambda x: np.sum(x[:np.linalg.lstsq(
        x.reshape(4, 2), np.arange(1.0, 5.0), rcond=None)[2]]), LSTSQ),
    "logsumexp b, sign": (lambda x: np.sum(np.array(tsp.logsumexp(x, b=B4, return_sign=True))
                                           * np.array([1.0, 3.0])), LSE),
    "logsumexp traced b": (lambda b: np.sum(np.array(tsp.logsumexp(
        np.array([0.1, 0.2, 0.3, 0.4]), b=b, return_sign=True)) * np.array([1.0, 3.0])), LSE_B),
    "logsumexp a and b traced": (lambda x: np.sum(np.array(tsp.logsumexp(
        x, b=x - 0.5, return_sign=True)) * np.array([1.0, 3.0])), LSE),
    # truth guards and errors
    "average zero-sum weights": (lambda w: np.average(X5, weights=w) * 2.0, WEIGHTS5),
    "average weights and values": (lambda w: np.average(w * w, weights=w) * 2.0, WEIGHTS5),
    "scipy.linalg.solve check_finite": (lambda a: np.sum(tsl.solve(
        a.reshape(3, 3), np.array([1.0, 2.0, 3.0]))), NONFINITE9),
    "scipy.linalg.cholesky": (lambda a: np.sum(tsl.cholesky(_sym(a)) * np.arange(9.0).reshape(
        3, 3)), NONFINITE9 + [-S3.ravel(), S3.ravel()]),
    # sign conventions
    "scipy.linalg.eigh vectors": (lambda a: np.sum(tsl.eigh(_sym(a))[1]
                                                   * np.arange(9.0).reshape(3, 3)), EIGH),
    "scipy.linalg.svd u": (lambda a: np.sum(tsl.svd(a.reshape(3, 2), full_matrices=False)[0]
                                            * np.arange(6.0).reshape(3, 2)), FLIPS32),
    "scipy.linalg.svd vh": (lambda a: np.sum(tsl.svd(a.reshape(3, 2), full_matrices=False)[2]
                                             * np.arange(4.0).reshape(2, 2)), FLIPS32),
    "scipy.linalg.qr economic": (lambda a: np.sum(tsl.qr(a.reshape(3, 2), mode="economic")[0]
                                                  * np.arange(6.0).reshape(3, 2)), FLIPS32),
    # parameter-validity masks
    "norm.logpdf scale": (lambda s: np.sum(tst.norm.logpdf(X5, 0.3, s) * W5), SCALES),
    "norm.cdf vector scale": (lambda s: np.sum(tst.norm.cdf(X5, 0.3, s) * W5),
                              [np.abs(X5), X5, -np.abs(X5), np.abs(X5) * 2, X5 * 1.1]),
    "t.logpdf df": (lambda d: np.sum(tst.t.logpdf(X5, d) * W5),
                    [3.0, 0.0, -2.0, 1.5, inf, 30.0, -1.0, 4.0]),
    "t.sf scale": (lambda s: np.sum(tst.t.sf(X5, 4.0, 0.1, s) * W5), SCALES),
    "gamma.logpdf a": (lambda a: np.sum(tst.gamma.logpdf(np.abs(X5), a) * W5),
                       [2.0, 0.0, -1.0, 0.5, 3.0, -0.5, 1.0]),
    "beta.logpdf a": (lambda a: np.sum(tst.beta.logpdf(np.array([0.1, 0.5, 0.9, 0.3, 1.0]), a,
                                                       2.0) * W5),
                      [2.0, 0.0, -1.0, 0.5, 3.0, -0.5, 1.0]),
    "poisson.logpmf mu": (lambda mu: np.sum(tst.poisson.logpmf(np.array([0, 1, 3, 5, 2]), mu)
                                            * W5),
                          [2.0, 0.0, -1.0, 0.5, 3.0, nan, -0.5, 1.0]),
    "multivariate_normal cov": (lambda c: np.sum(tst.multivariate_normal.logpdf(
        XM, np.zeros(2), c.reshape(2, 2)) * np.array([1.0, 2.0])), COVS),
    "multivariate_normal variances": (lambda c: np.sum(tst.multivariate_normal.logpdf(
        XM, np.zeros(2), c) * np.array([1.0, 2.0])),
        [np.array([1.0, 2.0]), np.array([0.0, 1.0]), np.array([-1.0, 1.0]), np.array([3.0, 1.0]),
         np.array([0.0, 1.0]) * 1.1, np.array([1.0, 2.0]) * 1.1]),
    "dirichlet alpha": (lambda a: tst.dirichlet.logpdf(np.array([0.0, 0.5, 0.5]), a) * 1.0,
                        ALPHAS),
    "dirichlet x": (lambda x: tst.dirichlet.logpdf(x, np.array([2.0, 0.5, 1.5])) * 1.0, SIMPLEX),
    # np.array of traced scalars, histogram weights, interp, unwrap, cov
    "np.array of traced scalars": (lambda x: np.sum(np.array(
        [x[1], -np.sin(x[0]) - 0.1 * x[1], x[0] * x[2], 3.0]) * np.arange(1.0, 5.0)),
        [np.array([1.0, 2.0, 3.0]), np.zeros(3), np.array([nan, 1.0, inf]),
         np.array([-1.0, 5.0, 2.0]), np.zeros(3), np.array([1.0, 2.0, 3.0]) * 1.1]),
    "histogram weights": (lambda w: np.sum(np.histogram(
        np.array([0.1, 0.5, 0.5, 0.9, 0.3]), bins=3, weights=w, density=True)[0]
        * np.array([1.0, 2.0, 3.0])), WEIGHTS5),
    "interp x": (lambda x: np.sum(np.interp(x, XP4, FP4, left=-7.0, right=9.0)
                                  * np.array([1.0, 2.0, 3.0])), KNOTS_X),
    "interp period": (lambda x: np.sum(np.interp(x, XP4, FP4, period=2.5)
                                       * np.array([1.0, 2.0, 3.0])), KNOTS_X),
    "interp xp": (lambda p: np.sum(np.interp(np.array([-1.0, 0.5, 1.0, 2.5, 4.0]), p, FP4)
                                   * np.arange(1.0, 6.0)),
                  [XP4, np.array([0.0, 0.5, 2.0, 3.5]), np.array([0.0, 1.0, 1.0, 3.0]),
                   np.array([-2.0, 0.2, 0.7, 0.9]), XP4 * 1.1, np.array([0.0, 0.5, 2.0, 3.5])]),
    "unwrap": (lambda x: np.sum(np.unwrap(x) * W5), WRAPS),
    "unwrap period": (lambda x: np.sum(np.unwrap(x, period=4.0) * W5), WRAPS),
    "cov aweights": (lambda w: np.sum(np.cov(M25, aweights=w) * np.array([[1.0, 2.0], [3.0, 4.0]])),
                     AWEIGHTS),
}


def _copy(x):
    return np.array(x, copy=True) if isinstance(x, np.ndarray) else x


def _same(got, want, what):
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want), what
        for i, (g, w) in enumerate(zip(got, want)):
            _same(g, w, f"{what}[{i}]")
    elif want is None:
        assert got is None, what
    else:
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-10, atol=1e-12,
                                   err_msg=what)


def _outcome(thunk):
    try:
        return True, thunk()
    except Exception as e:  # noqa: BLE001 - the eager error is the reference
        return False, type(e)


def _cross(mode_name, f, xs):
    """Compile f, call it with each of xs in turn, compare every call with eager autodiff (and
    the primal with plain NumPy); return the compiled function's stats."""
    mode = MODES[mode_name]
    reverse = mode_name.startswith("Reverse")
    g = tape.compile(mode, f, *((Active, Active) if reverse else (Duplicated, Duplicated)))
    for i, x in enumerate(xs):
        shape = np.shape(x)
        v = np.cos(np.arange(np.size(x)) + 0.5).reshape(shape) if shape else 0.7

        def arg():
            return Active(_copy(x)) if reverse else Duplicated(_copy(x), _copy(v))
        ok, want = _outcome(lambda: autodiff(mode, f, *(() if not reverse else (Active,)), arg()))
        got_ok, got = _outcome(lambda: g(arg()))
        assert got_ok == ok, f"call {i} ({x}): eager {'ok' if ok else want}, compiled " \
                             f"{'ok' if got_ok else got}"
        if not ok:
            assert got is want, f"call {i} ({x}): eager raised {want}, compiled {got}"
            continue
        _same(got, want, f"call {i} ({x})")
        if mode_name.endswith("WithPrimal"):
            _same(got[-1], f(_copy(x)), f"call {i} ({x}): primal against NumPy")
    return g.stats


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("case", list(CASES))
def test_replay_across_boundaries(case, mode):
    f, xs = CASES[case]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            stats = _cross(mode, f, xs)
    assert stats.traces >= 1


REPLAYED = ["nansum", "median ties", "heaviside(x, 0.5)", "nan_to_num fills", "maximum.accumulate",
            "lstsq solution", "logsumexp traced b", "scipy.linalg.eigh vectors",
            "norm.logpdf scale", "interp x", "np.array of traced scalars"]


@pytest.mark.parametrize("case", REPLAYED)
def test_boundary_crossings_are_replays(case):
    """The crossings above are not all eager runs or fresh traces: most calls replay."""
    f, xs = CASES[case]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            stats = _cross("ReverseWithPrimal", f, xs)
    assert stats.eager_calls == 0
    assert stats.hits >= len(xs) // 2, stats


# smooth points on either side of each boundary (no ties, zeros or NaN at the point)
SMOOTH = {
    "nanmean axis=1": [M34 + 0.05, _with(M34 + 0.05, (1, 2), nan),
                       _with(M34 + 0.05, (slice(None), 1), nan), M34 * 1.3 + 0.05],
    "nanmedian axis=1": [M34 + np.arange(12.0).reshape(3, 4) ** 2 * 0.01,
                         _with(M34 + 0.01, (1, 2), nan), M34 * 1.7 + 0.01],
    "quantile [0, .3, 1] swaps": [np.array([1.0, 2.0, 3.0, 4.0]), np.array([4.0, 3.1, 2.0, 1.2]),
                                  np.array([2.0, 1.0, 3.0, 4.0])],
    "heaviside(x, 0.5)": [X5, -X5, X5[::-1]],
    "nan_to_num fills": [X5, np.array([inf, -1.2, nan, 0.7, -inf]), X5 * 1.5],
    "maximum.accumulate": [X5, np.array([3.0, 2.0, 1.0, 0.0, -1.0]),
                           np.array([1.0, 1.5, 1.2, 2.0, 2.5])],
    "lstsq solution": [LSTSQ[0], LSTSQ[2], LSTSQ[0] * 1.1],
    "logsumexp traced b": [np.ones(4), -np.ones(4), np.array([1.0, -2.0, 1.0, 0.5])],
    "logsumexp a and b traced": [LSE[0], LSE[1] + np.array([0.0, 0.1, 0.2, 0.3]), LSE[0] * 1.1],
    "scipy.linalg.svd u": [FLIPS32[0], FLIPS32[1], FLIPS32[3]],
    "t.logpdf df": [3.0, 1.5, 30.0, 4.0],
    "multivariate_normal cov": [PD.ravel(), np.array([3.0, 0.5, 0.5, 1.0]), PD.ravel() * 3],
    "interp xp": [XP4 + 0.1, np.array([0.0, 0.6, 2.0, 3.5]), np.array([-2.0, 0.2, 0.7, 0.9])],
    "unwrap": [np.arange(5.0), np.array([0.0, 3.5, 0.5, -3.0, 0.0]), np.arange(5.0) * 6.0],
    "cov aweights": [np.arange(1.0, 6.0), np.array([0.1, 0.1, 0.2, 0.1, 1.0]),
                     np.array([0.5, 1.0, 0.2, 0.3, 1.0])],
}


@pytest.mark.parametrize("case", list(SMOOTH))
def test_replayed_gradient_against_finite_differences(case):
    f = CASES[case][0]
    g = tape.compile(ReverseWithPrimal, f, Active, Active)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            for x in SMOOTH[case] * 2:
                (grad,), value = g(Active(_copy(x)))
                np.testing.assert_allclose(value, f(_copy(x)), rtol=1e-12, atol=1e-13)
                fd = fd_gradient(lambda y: f(np.where(np.isnan(x), x, y)),
                                 np.asarray(x, dtype=float))
                finite = np.isfinite(np.asarray(x, dtype=float))
                np.testing.assert_allclose(np.asarray(grad)[finite], fd[finite], rtol=1e-5,
                                           atol=1e-7)
    assert g.stats.hits >= 2


def _const_cases():
    x = XM
    return {
        "multivariate_normal constant cov": (
            lambda x, c: np.sum(tst.multivariate_normal.logpdf(x, np.zeros(2), c)
                                * np.array([1.0, 2.0])),
            [(x, PD), (x, np.ones((2, 2))), (x, np.array([[1.0, 2.0], [2.0, 1.0]])),
             (x, np.eye(2)), (x, PD * 3), (x, np.ones((2, 2))), (x, PD)]),
        "norm constant scale": (
            lambda x, s: np.sum(tst.norm.logsf(x, 0.3, s) * np.array([[1.0, 2.0], [3.0, 4.0]])),
            [(x, 1.0), (x, np.array([1.0, 0.0])), (x, np.array([1.0, 1.0])),
             (x, np.array([-1.0, 2.0])), (x, np.array([2.0, 3.0])), (x, np.array([1.0, 0.0]))]),
    }


@pytest.mark.parametrize("mode", ["ReverseWithPrimal", "ForwardWithPrimal"])
@pytest.mark.parametrize("case", list(_const_cases()))
def test_constant_parameters_across_boundaries(case, mode):
    """A Const parameter that is valid on some calls only: the replay checks it afresh."""
    f, pairs = _const_cases()[case]
    reverse = mode.startswith("Reverse")
    m = MODES[mode]
    g = tape.compile(m, f, *((Active, Active, Const) if reverse else (Duplicated, Duplicated,
                                                                     Const)))
    v = np.cos(np.arange(4.0) + 0.5).reshape(2, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            for i, (x, c) in enumerate(pairs):
                def args():
                    return ((Active(_copy(x)) if reverse else Duplicated(_copy(x), v.copy())),
                            Const(_copy(c)))
                ok, want = _outcome(lambda: autodiff(m, f, *((Active,) if reverse else ()),
                                                     *args()))
                got_ok, got = _outcome(lambda: g(*args()))
                assert got_ok == ok, (i, want, got)
                if not ok:
                    assert got is want, (i, want, got)
                    continue
                _same(got, want, f"call {i}")
                _same(got[-1], f(_copy(x), _copy(c)), f"call {i}: primal against SciPy")


@pytest.mark.parametrize("case", ["nanmean axis=1", "nan_to_num fills", "logsumexp a and b traced",
                                  "norm.cdf vector scale"])
def test_batched_directions_across_boundaries(case):
    """W tangents (forward) and W seeds (reverse) in one replay, across the same crossings."""
    f, xs = CASES[case]
    fwd = tape.compile(ForwardWithPrimal, f, BatchDuplicated, BatchDuplicated)
    rev = tape.compile(ReverseWithPrimal, f, Active, BatchDuplicated)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            for x in xs:
                x = np.asarray(x, dtype=float)
                if x.ndim == 0:
                    continue
                ts = (np.cos(np.arange(x.size)).reshape(x.shape),
                      np.sin(np.arange(x.size) + 1.0).reshape(x.shape))
                ok, want = _outcome(lambda: autodiff(ForwardWithPrimal, f, BatchDuplicated,
                                                     BatchDuplicated(x.copy(), ts)))
                got_ok, got = _outcome(lambda: fwd(BatchDuplicated(x.copy(), ts)))
                assert ok == got_ok
                if ok:
                    _same(got, want, "forward")
                d1 = (np.zeros_like(x), np.zeros_like(x))
                d2 = (np.zeros_like(x), np.zeros_like(x))
                ok, want = _outcome(lambda: autodiff(ReverseWithPrimal, f, Active,
                                                     BatchDuplicated(x.copy(), d2)))
                got_ok, got = _outcome(lambda: rev(BatchDuplicated(x.copy(), d1)))
                assert ok == got_ok
                if ok:
                    _same(got, want, "reverse")
                    _same(d1, d2, "reverse shadows")
