"""Whether `tape.compile` replays common NumPy/SciPy idioms: called four times with new values of
the same shapes and dtypes, a compiled function must trace once and never run eagerly, and give
what eager autodiff gives (value, gradient, tangent), in Reverse and Forward mode.

A rule that reads a traced value with `primal()` makes the trace guard that whole value, so a
call with other values traces again. That is right where a Python decision depends on the values
(a loop count, a data-dependent shape); the strict xfails below are rules that read values only
for a dtype, a NaN mask, a positivity mask or an index that a replayed step could compute.
"""
from __future__ import annotations

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

import tape
import tape.scipy.linalg as tsl
import tape.scipy.special as tsp
import tape.scipy.stats as tst
from tape import (Active, Const, Duplicated, ForwardWithPrimal, ReverseWithPrimal, autodiff)

RNG = np.random.default_rng(11)
X6 = RNG.normal(size=6)
A34 = RNG.normal(size=(3, 4))
_S = RNG.normal(size=(3, 3))
SPD = _S @ _S.T + 3 * np.eye(3)
IMG = RNG.normal(size=(2, 5, 5))
MASK = np.array([True, False, True, True, False, True])


def _copy(c):
    return c.copy() if isinstance(c, np.ndarray) else c


def _points(x0, consts, calls=4):
    """The first point, then points (and float Const arrays) moved by a small relative step:
    the same shapes, dtypes and Python decisions, other values."""
    rng = np.random.default_rng(3)
    yield x0.copy(), [_copy(c) for c in consts]
    for _ in range(calls - 1):
        step = lambda a: a + 1e-3 * rng.normal(size=a.shape) * (1 + np.abs(a))  # noqa: E731
        yield step(x0), [step(c) if isinstance(c, np.ndarray) and c.dtype.kind == "f"
                         else _copy(c) for c in consts]


def _replayed(mode, f, x0, consts=()):
    """Compile `f` in `mode`, call it four times with new values against eager autodiff and
    plain NumPy, and return the compiled function's stats."""
    n = len(consts)
    if mode == "reverse":
        g = tape.compile(ReverseWithPrimal, f, Active, Active, *[Const] * n)
    else:
        g = tape.compile(ForwardWithPrimal, f, Duplicated, Duplicated, *[Const] * n)
    for x, cs in _points(x0, consts):
        want_value = f(x.copy(), *map(_copy, cs))
        if mode == "reverse":
            (got, *_), value = g(Active(x.copy()), *[Const(_copy(c)) for c in cs])
            (want, *_), eager = autodiff(ReverseWithPrimal, f, Active, Active(x.copy()),
                                         *[Const(_copy(c)) for c in cs])
        else:
            v = np.cos(np.arange(x.size) + 0.5).reshape(x.shape)
            got, value = g(Duplicated(x.copy(), v.copy()), *[Const(_copy(c)) for c in cs])
            want, eager = autodiff(ForwardWithPrimal, f, Duplicated(x.copy(), v.copy()),
                                   *[Const(_copy(c)) for c in cs])
        np.testing.assert_allclose(value, want_value, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(value, eager, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    return g.stats


MODES = ["reverse", "forward"]


# -- idioms that replay (no test elsewhere checks that they trace once) -----------------------
REPLAYED = {
    "np.sort": (lambda x: np.sum(np.sort(x) * np.arange(6)), X6),
    "gather by argsort": (lambda x: np.sum(x[np.argsort(x)] * np.arange(6)), X6),
    "rank by argsort of argsort": (lambda x: np.sum(x * np.argsort(np.argsort(x))), X6),
    "take_along_axis of argsort": (lambda a: np.sum(np.take_along_axis(
        a, np.argsort(a, axis=1), axis=1) * np.arange(4)), A34),
    "gather by argmax per row": (lambda a: np.sum(a[np.arange(3), np.argmax(a, axis=1)]), A34),
    "top-k by argpartition": (lambda x: np.sum(x[np.argpartition(x, 3)[:3]]), X6),
    "np.partition": (lambda x: np.sum(np.partition(x, 3)[:3]), X6),
    "np.clip": (lambda x: np.sum(np.clip(x, -0.5, 0.5) ** 2), X6),
    "relu np.maximum(x, 0)": (lambda x: np.sum(np.maximum(x, 0) ** 2), X6),
    "np.where on a traced condition": (lambda x: np.sum(np.where(x > 0, x, 0.1 * x)), X6),
    "boolean index by a traced mask": (lambda x: np.sum(x[x > 0] ** 2), X6),
    "boolean index by a plain mask": (lambda x: np.sum(x[MASK] ** 2), X6),
    "masked assignment into a copy": (
        lambda x: (lambda y: (y.__setitem__(y < 0, 0.0), np.sum(y ** 2))[1])(x.copy()), X6),
    "sum with where=": (lambda x: np.sum(x ** 2, where=x > 0), X6),
    "max with where= and initial": (lambda x: np.max(x, where=x < 0.6, initial=-5.0), X6),
    "row max shift": (lambda a: np.sum(np.exp(a - a.max(1, keepdims=True))), A34),
    "tape.scipy softmax": (lambda a: np.sum(tsp.softmax(a, axis=1) ** 2), A34),
    "tape.scipy log_softmax": (lambda a: np.sum(tsp.log_softmax(a, axis=1)[:, 0]), A34),
    "np.cumsum": (lambda x: np.sum(np.cumsum(x) ** 2), X6),
    "np.linalg.norm ord=inf": (lambda x: np.linalg.norm(x, np.inf), X6),
    "np.linalg.norm ord=2 of a matrix": (lambda a: np.linalg.norm(a, 2), A34),
    "np.linalg.slogdet": (lambda s: np.linalg.slogdet(s)[1], SPD),
    "np.linalg.eigh": (lambda s: np.sum(np.linalg.eigh(s)[0] ** 2), SPD),
    "np.linalg.svd": (lambda a: np.sum(np.linalg.svd(a, compute_uv=False)), A34),
    "np.linalg.pinv": (lambda a: np.sum(np.linalg.pinv(a)), A34),
    "np.einsum optimize=True": (lambda a: np.einsum("ij,kj,kl->", a, a, a, optimize=True),
                                A34),
    "np.polyfit": (lambda x: np.sum(np.polyfit(np.arange(6.0), x, 2)), X6),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(REPLAYED))
def test_idiom_traces_once(name, mode):
    f, x0 = REPLAYED[name]
    stats = _replayed(mode, f, x0)
    assert stats.eager_calls == 0 and stats.traces == 1, stats


# -- rules that guard whole values where a replayed step would do -----------------------------
def _ode_rhs(p):
    """An ODE right-hand side as users write it: np.array of traced scalars."""
    y = np.array([1.0, 0.5])
    for _ in range(3):
        y = y + 0.05 * np.array([p[0] * y[0] - p[1] * y[0] * y[1], p[2] * y[0] * y[1] - p[3]])
    return np.sum(y ** 2)


def _as_strided_conv(w, img):
    xp = np.pad(img, ((0, 0), (1, 1), (1, 1)))
    c, hp, wp = xp.shape
    s0, s1, s2 = xp.strides
    win = as_strided(xp, shape=(c, hp - 2, wp - 2, 3, 3), strides=(s0, s1, s2, s1, s2))
    return np.sum(np.tanh(np.einsum("chwij,cij->hw", win, w.reshape(2, 3, 3))))


def _finding(reason):
    return pytest.mark.xfail(strict=True, reason=reason)


GUARDED = [
    pytest.param(_ode_rhs, np.array([1.1, 0.4, 0.4, 0.9]), (), id="np.array of traced scalars"),
    pytest.param(lambda x: np.max([x[0], x[1], 0.0]) + np.mean([x[2], x[3]]), X6, (),
                 id="np.max and np.mean of a list"),
    pytest.param(lambda p: np.sum(tst.norm.logpdf(np.linspace(-1, 1, 5), p[0], np.exp(p[1]))),
                 X6, (), id="stats.norm.logpdf with traced loc and scale"),
    pytest.param(lambda p: np.sum(tst.t.logpdf(np.array([0.5, 1.5]), np.exp(p[0]))), X6, (),
                 id="stats.t.logpdf with a traced df"),
    pytest.param(lambda p: np.sum(tst.gamma.logpdf(np.array([0.5, 1.5]), np.exp(p[0]))), X6, (),
                 id="stats.gamma.logpdf with a traced shape"),
    pytest.param(lambda p: np.sum(tst.poisson.logpmf(np.array([1, 2]), np.exp(p[:2]))), X6, (),
                 id="stats.poisson.logpmf with a traced rate"),
    pytest.param(lambda s: tst.multivariate_normal.logpdf(np.ones(3), np.zeros(3), s), SPD, (),
                 id="stats.multivariate_normal.logpdf with a traced cov"),
    pytest.param(lambda s: np.sum(tsl.cho_solve(tsl.cho_factor(s), np.ones(3))), SPD, (),
                 id="scipy.linalg cho_factor and cho_solve"),
    pytest.param(lambda s: np.sum(tsl.solve_triangular(np.linalg.cholesky(s), np.ones(3),
                                                       lower=True)), SPD, (),
                 id="scipy.linalg solve_triangular"),
    pytest.param(lambda x: np.median(x) ** 2 + np.percentile(x, 30), X6, (),
                 id="np.median and np.percentile"),
    pytest.param(lambda a: np.sum(np.quantile(a, [0.25, 0.75], axis=0)), A34, (),
                 id="np.quantile along an axis"),
    pytest.param(lambda x: np.nansum(x ** 2) + np.nanmean(x) + np.nanmax(x), X6, (),
                 id="np.nansum, nanmean, nanmax without NaN"),
    pytest.param(lambda x: np.sum(np.sign(x) * x ** 2), X6, (), id="np.sign of a real array"),
    pytest.param(lambda x: np.sum(np.interp(x, [-3.0, 0.0, 3.0], [0.0, 1.0, 4.0])), X6, (),
                 id="np.interp at traced points"),
    pytest.param(lambda x: np.sum(np.heaviside(x, 0.5) * x), X6, (), id="np.heaviside"),
    pytest.param(lambda x: np.sum(np.nan_to_num(x ** 2)), X6, (), id="np.nan_to_num"),
    pytest.param(lambda x: np.average(np.arange(6.0), weights=np.exp(x)), X6, (),
                 id="np.average with traced weights"),
    pytest.param(lambda x: np.sum(np.cov(np.arange(6.0), aweights=np.exp(x))), X6, (),
                 id="np.cov with traced aweights"),
    pytest.param(lambda x: np.sum(np.maximum.accumulate(x)), X6, (), id="np.maximum.accumulate"),
    pytest.param(lambda x: np.sum(np.histogram(np.arange(6.0), bins=3, weights=x)[0] ** 2), X6,
                 (), id="np.histogram with traced weights"),
    pytest.param(lambda a: np.sum(np.unwrap(a * 10, axis=0) ** 2),
                 np.random.default_rng(0).uniform(0.1, 0.9, (3, 4)), (), id="np.unwrap"),
    pytest.param(_as_strided_conv, RNG.normal(size=18), (IMG,),
                 id="as_strided windows of a Const image",
                 marks=_finding("NumPy's as_strided calls np.asarray on the Const's tracer "
                                "(ops/lists.py wrapper): its values are guarded")),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("f, x0, consts", GUARDED)
def test_rule_replays_instead_of_guarding_values(f, x0, consts, mode):
    stats = _replayed(mode, f, x0, consts)
    assert stats.eager_calls == 0 and stats.traces == 1, stats
