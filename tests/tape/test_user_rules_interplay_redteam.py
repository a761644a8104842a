"""Users' rules (`custom_rule`, `easy_rule`) where they meet other features: low precision,
complex values, batch reverse, `tape.compile` replays, nested differentiation, strided views
and in-place writes after the call. Primals are compared with plain NumPy, derivatives with
central differences in float64."""
import numpy as np
import pytest
from numeric_checks import fd_gradient

from tape import (Active, BatchDuplicated, Const, Duplicated, Forward, OnceDifferentiableError,
                  Reverse, ReverseWithPrimal, RuleError, autodiff, custom_rule, easy_rule,
                  hessian)
from tape import compile as compile_

X = np.array([0.3, -1.2, 2.0])


def _fd_gradient(f, x):
    """Central differences of a scalar f at a float64 copy of x (tests/numeric_checks.py)."""
    return fd_gradient(f, np.array(x, dtype=np.float64))


def _fd_hessian(f, x, h=1e-4):
    n = x.size
    H = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            ei, ej = np.eye(n)[i] * h, np.eye(n)[j] * h
            H[i, j] = (f(x + ei + ej) - f(x + ei - ej) - f(x - ei + ej)
                       + f(x - ei - ej)) / (4 * h * h)
    return H


# -- low precision --------------------------------------------------------------------------

def _cube_with_float64_derivatives():
    """``x ** 3`` whose rules compute the derivative in float64 (a common slip)."""
    def cube(x):
        return x ** 3
    return custom_rule(
        cube, augmented_primal=lambda cfg, x: (x ** 3, x),
        reverse=lambda cfg, x, g: (3.0 * x.astype(np.float64) ** 2 * g,),
        forward=lambda cfg, p, t: (p[0] ** 3, 3.0 * p[0].astype(np.float64) ** 2 * t[0]))


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_low_precision_rules_give_derivatives_in_the_arguments_dtype(dtype):
    cube = _cube_with_float64_derivatives()
    x = np.array([0.5, -1.0, 2.0], dtype=dtype)
    want = 3.0 * x.astype(np.float64) ** 2
    (dx,), primal = autodiff(ReverseWithPrimal, lambda x: np.sum(cube(x)), Active,
                              Active(x))
    assert dx.dtype == dtype and np.asarray(primal).dtype == np.sum(x ** 3).dtype
    np.testing.assert_allclose(dx.astype(float), want, rtol=1e-3, atol=1e-3)
    shadow = np.zeros_like(x)
    autodiff(Reverse, lambda x: np.sum(cube(x)), Active, Duplicated(x, shadow))
    np.testing.assert_allclose(shadow.astype(float), want, rtol=1e-3, atol=1e-3)
    (tangent,) = autodiff(Forward, cube, Duplicated(x, np.ones_like(x)))
    assert tangent.dtype == dtype
    np.testing.assert_allclose(tangent.astype(float), want, rtol=1e-3, atol=1e-3)
    power = easy_rule(lambda x, y: x ** y, partials=lambda x, y: (y * x ** (y - 1),
                                                                  np.log(x) * x ** y))
    a, b = dtype(2.0), dtype(3.0)
    (da, db), = autodiff(Reverse, power, Active, Active(a), Active(b))
    assert type(da) is dtype and type(db) is dtype   # as the plain a ** b
    np.testing.assert_allclose([float(da), float(db)], [12.0, 8.0 * np.log(2.0)], rtol=2e-3)


def test_a_float16_rule_accumulating_in_float32_passes_the_primal_check():
    def running_total(x):
        return np.cumsum(x)
    rule = custom_rule(
        running_total,
        augmented_primal=lambda cfg, x: (np.cumsum(x, dtype=np.float32).astype(x.dtype), None),
        reverse=lambda cfg, s, g: (np.cumsum(g[::-1])[::-1],))
    x = np.random.default_rng(0).uniform(0.5, 1.5, 1000).astype(np.float16)
    ((dx,),) = autodiff(Reverse, lambda x: np.sum(rule(x)), Active, Active(x))
    np.testing.assert_allclose(dx.astype(float), np.arange(1000.0, 0.0, -1.0), rtol=1e-3)


# -- complex values and batch reverse --------------------------------------------------------

def test_an_easy_rule_from_real_to_complex_gives_real_derivatives_to_any_order():
    expi = easy_rule(lambda x: np.exp(1j * x), partials=lambda x: 1j * np.exp(1j * x))

    def f(x):
        return np.sum(np.real(expi(x) * (2 - 1j)))

    def ref(x):
        return np.sum(np.real(np.exp(1j * x) * (2 - 1j)))
    want = _fd_gradient(ref, X)
    shadow = np.zeros(3)
    autodiff(Reverse, f, Active, Duplicated(X.copy(), shadow))
    np.testing.assert_allclose(shadow, want, rtol=1e-7, atol=1e-8)
    (tangent,) = autodiff(Forward, f, Duplicated(X, np.ones(3)))
    np.testing.assert_allclose(tangent, np.sum(want), rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(hessian(f, X), _fd_hessian(ref, X), rtol=1e-5, atol=1e-5)


def _scale(x, s):
    return np.sin(x) * s


def _scale_rule(differentiable, vectorized=True):
    """`_scale` as a custom rule with reverse and forward parts."""
    def reverse(cfg, saved, g):
        x, s = saved
        return (g * np.cos(x) * s if cfg.active[0] else None,
                np.sum(g * np.sin(x)) if cfg.active[1] else None)

    def forward(cfg, p, t):
        (x, s), (tx, ts) = p, t
        terms = [v for v in (None if tx is None else tx * np.cos(x) * s,
                             None if ts is None else np.sin(x) * ts) if v is not None]
        return np.sin(x) * s, (sum(terms[1:], terms[0]) if terms else None)
    return custom_rule(_scale, augmented_primal=lambda cfg, x, s: (np.sin(x) * s, (x, s)),
                       reverse=reverse, forward=forward, differentiable=differentiable,
                       vectorized=vectorized, name="scale")


@pytest.mark.parametrize("vectorized", [True, False])
def test_batch_reverse_through_a_complex_rule_matches_single_sweeps(vectorized):
    rule = _scale_rule(False, vectorized=vectorized)

    def f(y, x, s):
        y[:] = rule(x, s)
    x, s = X + 0.3j, 1.5 + 0.5j
    seeds = (np.array([1.0, 0.0, 2.0 - 1j]), np.array([0.0, 3.0j, 1.0]))
    shadows = (np.zeros(3, complex), np.zeros(3, complex))
    ((_, _, ds),) = autodiff(Reverse, f, Const, BatchDuplicated(np.zeros(3, complex),
                                                               tuple(v.copy() for v in seeds)),
                             BatchDuplicated(x.copy(), shadows), Active(s))
    for w, seed in enumerate(seeds):
        shadow = np.zeros(3, complex)
        ((_, _, ds1),) = autodiff(Reverse, f, Const, Duplicated(np.zeros(3, complex),
                                                                     seed.copy()),
                                  Duplicated(x.copy(), shadow), Active(s))
        np.testing.assert_allclose(shadows[w], shadow, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(ds[w], ds1, rtol=1e-12, atol=1e-12)
    # Enzyme's convention for a real loss of a complex argument: d/dRe + i d/dIm.
    real_loss = lambda x: np.sum(np.abs(rule(x, s)) ** 2)   # noqa: E731
    ((dx,),) = autodiff(Reverse, real_loss, Active, Active(x))
    want = (_fd_gradient(lambda re: np.sum(np.abs(_scale(re + 1j * x.imag, s)) ** 2), x.real)
            + 1j * _fd_gradient(lambda im: np.sum(np.abs(_scale(x.real + 1j * im, s)) ** 2),
                                x.imag))
    np.testing.assert_allclose(dx, want, rtol=1e-6, atol=1e-7)


# -- tape.compile ----------------------------------------------------------------------------

def test_compiled_calls_see_what_a_rule_reads_from_its_closure_now():
    weights = np.array([1.0, 2.0, 3.0])
    state = {"k": 2.0}

    def scaled(x):
        return x * weights * state["k"]
    rule = custom_rule(
        scaled, augmented_primal=lambda cfg, x: (x * weights * state["k"], None),
        reverse=lambda cfg, s, g: (g * weights * state["k"],),
        forward=lambda cfg, p, t: (p[0] * weights * state["k"], t[0] * weights * state["k"]))
    loss = lambda x: np.sum(rule(x) ** 2)   # noqa: E731
    reverse = compile_(ReverseWithPrimal, loss, Active, Active)
    forward = compile_(Forward, loss, Duplicated)
    for w, k in (([1.0, 2.0, 3.0], 2.0), ([5.0, -6.0, 7.0], 2.0), ([5.0, -6.0, 7.0], -0.5)):
        weights[:] = w
        state["k"] = k
        (dx,), value = reverse(Active(X))
        np.testing.assert_allclose(value, np.sum((X * weights * k) ** 2), rtol=1e-12)
        np.testing.assert_allclose(dx, 2 * X * (weights * k) ** 2, rtol=1e-12)
        (tangent,) = forward(Duplicated(X, np.ones(3)))
        np.testing.assert_allclose(tangent, np.sum(2 * X * (weights * k) ** 2), rtol=1e-12)


# -- nested differentiation ------------------------------------------------------------------

def _inner_reverse(rule, s):
    ((dx, _),) = autodiff(Reverse, lambda x, s: np.sum(rule(x, s) ** 2), Active, Active(X),
                          Const(s))
    return np.sum(dx)


def _inner_forward(rule, s):
    (t,) = autodiff(Forward, lambda x, s: np.sum(rule(x, s) ** 2), Duplicated(X, np.ones(3)),
                    Const(s))
    return t


@pytest.mark.parametrize("inner", [_inner_reverse, _inner_forward], ids=["rev", "fwd"])
@pytest.mark.parametrize("outer", ["rev", "fwd"])
def test_an_outer_derivative_reaches_a_rule_through_an_inner_const_argument(inner, outer):
    # The inner call sees `s` as Const; the outer one differentiates it. d/ds of
    # sum(2 sin(x) cos(x) s^2) is sum(4 sin(x) cos(x) s).
    want = np.sum(4 * np.sin(X) * np.cos(X) * 1.7)
    rule = _scale_rule(True)
    if outer == "rev":
        ((got,),) = autodiff(Reverse, lambda s: inner(rule, s), Active, Active(1.7))
    else:
        (got,) = autodiff(Forward, lambda s: inner(rule, s), Duplicated(1.7, 1.0))
    np.testing.assert_allclose(got, want, rtol=1e-10)
    with pytest.raises(OnceDifferentiableError, match="`scale` is once differentiable"):
        once = _scale_rule(False)
        if outer == "rev":
            autodiff(Reverse, lambda s: inner(once, s), Active, Active(1.7))
        else:
            autodiff(Forward, lambda s: inner(once, s), Duplicated(1.7, 1.0))


def test_a_reverse_only_rule_in_forward_mode_raises_and_its_hessian_is_right():
    def cube(x):
        return x ** 3
    once = custom_rule(cube, augmented_primal=lambda cfg, x: (x ** 3, x),
                       reverse=lambda cfg, x, g: (3 * x ** 2 * g,))
    with pytest.raises(NotImplementedError, match="`cube` has no forward-mode"):
        autodiff(Forward, once, BatchDuplicated(X, (np.ones(3), X)))
    twice = custom_rule(cube, augmented_primal=lambda cfg, x: (x ** 3, x),
                        reverse=lambda cfg, x, g: (3 * x ** 2 * g,), differentiable=True)
    np.testing.assert_allclose(hessian(lambda x: np.sum(twice(x) * x), X),
                               _fd_hessian(lambda x: np.sum(x ** 4), X), rtol=1e-6, atol=1e-5)


# -- views and writes after the call ---------------------------------------------------------

def test_a_rule_saving_a_strided_view_of_an_input_written_after_the_call():
    def row_norms(a):
        return np.sum(a ** 2, axis=-1)
    rule = custom_rule(
        row_norms, augmented_primal=lambda cfg, a: (np.sum(a ** 2, axis=-1), a),
        reverse=lambda cfg, a, g: (2 * a * g[..., None],),
        forward=lambda cfg, p, t: (np.sum(p[0] ** 2, axis=-1), np.sum(2 * p[0] * t[0], axis=-1)))

    def f(a):
        y = rule(a.T[::2])   # non-contiguous: columns 0 and 2
        a *= 3.0             # the rule saved a view of memory written now
        return np.sum(y * a[:2, 1])

    def ref(a):
        a = a.copy()
        y = np.sum(a.T[::2] ** 2, axis=-1)
        a *= 3.0
        return np.sum(y * a[:2, 1])
    A = np.arange(12.0).reshape(3, 4) / 10
    want = _fd_gradient(ref, A)
    compiled = compile_(Reverse, f, Active, Duplicated)
    for run in (lambda a, s: autodiff(Reverse, f, Active, Duplicated(a, s)),
                lambda a, s: compiled(Duplicated(a, s))):
        shadow = np.zeros_like(A)
        run(A.copy(), shadow)
        np.testing.assert_allclose(shadow, want, rtol=1e-7, atol=1e-8)
    (tangent,) = autodiff(Forward, f, Duplicated(A.copy(), np.ones_like(A)))
    np.testing.assert_allclose(tangent, np.sum(want), rtol=1e-7)


def test_a_float16_rule_that_computes_something_else_is_still_refused():
    # agreeing with the function run in float64 is the bar, not agreeing with nothing
    rule = custom_rule(
        lambda x: np.cumsum(x),
        augmented_primal=lambda cfg, x: ((np.cumsum(x, dtype=np.float32) * 1.01).astype(x.dtype),
                                         None),
        reverse=lambda cfg, s, g: (np.cumsum(g[::-1])[::-1],), name="off_by_one_percent")
    x = np.random.default_rng(0).uniform(0.5, 1.5, 1000).astype(np.float16)
    with pytest.raises(RuleError, match="off_by_one_percent"):
        autodiff(Reverse, lambda x: np.sum(rule(x)), Active, Active(x))
