"""tape.scipy.integrate.odeint: primal against scipy.integrate.odeint (hypothesis), derivatives
against an analytic solution (y' = A y, y(t) = expm(A (t - t0)) y0) and against finite
differences (check_grads), first order in every mode and second order on a small system.

Tolerances: the derivatives are further ODE solves, accurate to about the solver tolerance,
so every solve here runs at rtol = atol = 1e-10..1e-12, and finite differences use a step of
1e-5 (an adaptive solver's result is smooth in its inputs only to about its tolerance).
"""
import numpy as np
import pytest
import scipy.integrate
from hypothesis import given, settings
from hypothesis import strategies as st

from tape import Duplicated, Forward, Reverse, autodiff, gradient
from tape.scipy.integrate import odeint
from tape.scipy.linalg import expm
from tape.testing import check_grads, traced_value

TIGHT = dict(rtol=1e-12, atol=1e-12)
FD = dict(eps=1e-5, rtol=1e-5, atol=1e-7)
rng = np.random.default_rng(0)


def linear(y, t, a):
    return a @ y


def exact(y0, t, a):
    """The analytic solution of y' = a y, written with differentiable ops."""
    return np.stack([expm(a * (t[i] - t[0])) @ y0 for i in range(len(t))])


def lotka(y, t, p):
    """Nonlinear, explicit time, parameters in a dict."""
    return np.stack([p["a"] * y[0] - p["b"] * y[0] * y[1],
                     -y[1] + 0.5 * y[0] * y[1] + 0.1 * np.sin(t)])


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2 ** 32 - 1), st.integers(1, 3), st.integers(1, 4), st.booleans())
def test_primal_equals_scipy(seed, n, steps, tfirst):
    r = np.random.default_rng(seed)
    a, y0 = 0.5 * r.standard_normal((n, n)), r.standard_normal(n)
    t = np.cumsum(r.uniform(0.1, 0.5, steps)) * (1 if seed % 2 else -1)   # either direction
    func = (lambda t, y, a: np.tanh(a @ y) + t) if tfirst else (lambda y, t, a: np.tanh(a @ y) + t)
    want = scipy.integrate.odeint(func, y0, t, args=(a,), tfirst=tfirst)
    got = traced_value(lambda y0, a: odeint(func, y0, t, args=(a,), tfirst=tfirst), y0, a)
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-9)
    got = traced_value(lambda y0, a: odeint(func, y0, t, args=(a,), tfirst=tfirst), y0, a,
                       mode="reverse")
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-9)


def test_plain_input_is_scipy_itself():
    t = np.linspace(0, 1, 4)
    np.testing.assert_array_equal(odeint(linear, np.ones(2), t, args=(np.eye(2),)),
                                  scipy.integrate.odeint(linear, np.ones(2), t, args=(np.eye(2),)))


def test_linear_ode_against_expm():
    a = 0.5 * rng.standard_normal((3, 3))
    y0, t = rng.standard_normal(3), np.array([0.1, 0.5, 1.2])
    f = lambda y0, t, a: odeint(linear, y0, t, args=(a,), **TIGHT)
    np.testing.assert_allclose(f(y0, t, a), exact(y0, t, a), rtol=1e-9, atol=1e-10)
    loss = lambda f: lambda y0, t, a: np.sum(np.sin(f(y0, t, a)))
    got = gradient(Reverse, loss(f), y0, t, a)           # adjoint method
    want = gradient(Reverse, loss(exact), y0, t, a)      # through expm's rules
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-8, atol=1e-9)
    dirs = [rng.standard_normal(np.shape(x)) for x in (y0, t, a)]
    got, = autodiff(Forward, f, *map(Duplicated, (y0, t, a), dirs))   # forward sensitivities
    want, = autodiff(Forward, exact, *map(Duplicated, (y0, t, a), dirs))
    np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-9)


def test_first_order_every_mode():
    y0, t = np.array([1.0, 0.5]), np.array([0.0, 0.3, 0.7])
    f = lambda y0, t, a, b: odeint(lotka, y0, t, args=({"a": a, "b": b},), **TIGHT)
    check_grads(f, y0, t, 0.8, np.array(0.4), order=1, **FD)


def test_first_order_tfirst_decreasing_times_and_static_args():
    g = lambda t, y, k, power: [-k * y[0] ** power, y[0] - y[1]]   # a list, an int argument
    f = lambda y0, t, k: odeint(g, y0, t, args=(k, 2), tfirst=True, **TIGHT)
    check_grads(f, np.array([1.0, 0.5]), np.array([1.0, 0.6, 0.2]), 0.7, order=1, **FD)


def test_second_order():
    # Forward-over-reverse and reverse-over-reverse: odeint's rules call odeint on augmented
    # systems whose derivatives are nested derivatives of func.
    func = lambda y, t, k: -k * y ** 2 + np.sin(t)
    f = lambda y0, t, k: odeint(func, y0, t, args=(k,), rtol=1e-10, atol=1e-10)
    check_grads(f, np.array([0.8]), np.array([0.0, 0.5]), 0.7, order=2, modes=("fwd", "rev"),
                eps=1e-5, rtol=1e-4, atol=1e-6)


def test_hessian_of_linear_ode_against_expm():
    a, t = np.array([[-0.5, 0.3], [0.2, -0.4]]), np.array([0.0, 0.8])
    f = lambda y0: np.sum(odeint(linear, y0, t, args=(a,), **TIGHT)[-1] ** 3)
    e = expm(a * 0.8)
    y0, v = np.array([1.0, -0.5]), np.array([0.3, 1.0])
    hv, = autodiff(Forward, lambda y0: gradient(Reverse, f, y0)[0], Duplicated(y0, v))
    want = e.T @ (6 * (e @ y0) * (e @ v))   # d/dy0 of 3 e^T (e y0)^2, in direction v
    np.testing.assert_allclose(hv, want, rtol=1e-7, atol=1e-8)


def test_single_time_is_the_initial_value():
    check_grads(lambda y0: odeint(linear, y0, np.array([0.0]), args=(np.eye(2),)),
                np.array([1.0, 2.0]), order=1)


def test_errors():
    y0, t = np.array([1.0]), np.array([0.0, 1.0])
    with pytest.raises(TypeError, match="captured from outside"):
        gradient(Reverse, lambda k: odeint(lambda y, t: -k * y, y0, t).sum(), 0.3)
    with pytest.raises(TypeError, match="captured from outside"):   # y0, t, args all plain
        gradient(Reverse, lambda k: odeint(lambda y, t: -k * y, np.array([1.0]), t)[1, 0] * k,
                 0.3)
    with pytest.raises(NotImplementedError, match="full_output"):
        gradient(Reverse, lambda y0: odeint(linear, y0, t, args=(np.eye(1),),
                                            full_output=True)[0].sum(), y0)
    with pytest.raises(ValueError, match="y0 must be one-dimensional"):
        gradient(Reverse, lambda y0: odeint(linear, y0, t, args=(np.eye(2),)).sum(),
                 np.ones((2, 1)))



def _numbers(result) -> np.ndarray:
    """Every number in a nested result, as one vector."""
    if isinstance(result, (tuple, list)):
        return np.concatenate([_numbers(r) for r in result] or [np.zeros(0)])
    return np.ravel(np.asarray(result, dtype=float))


@pytest.mark.parametrize("mode", [Reverse, Forward])
def test_a_compiled_odeint_replays_and_sees_its_right_hand_side_change(mode):
    """tape.compile's two traces compare odeint's system by its function and argument
    structure (not by identity of a per-call object), so a reverse-mode call replays; an
    array the right-hand side reads is watched like any other (a change retraces)."""
    from tape import Active, compile as compile_tape
    rate = np.array([0.5])

    def rhs(y, t, a):
        return -a * y * rate[0]

    def f(y0, a):
        return np.sum(odeint(rhs, y0, np.linspace(0.0, 1.0, 5), args=(a,)))

    def arguments(y0, a):
        if mode is Reverse:
            return Active(y0), Active(a)
        return Duplicated(y0, np.ones(2)), Duplicated(a, 1.0)
    kinds = (Active, Active) if mode is Reverse else (Duplicated, Duplicated)
    g = compile_tape(mode, f, Active if mode is Reverse else Duplicated, *kinds)
    for i in range(4):
        if i == 2:
            rate[0] = 0.9
        y0, a = np.array([1.0, 2.0]) * (i + 1), 0.3 + i
        want = autodiff(mode, f, Active if mode is Reverse else Duplicated, *arguments(y0, a))
        np.testing.assert_allclose(_numbers(g(*arguments(y0, a))), _numbers(want),
                                   rtol=1e-12, atol=1e-15)
    if mode is Reverse:
        assert g.stats.hits >= 1 and g.stats.eager_calls == 0, g.stats
    else:   # forward mode integrates the tangents with a nested autodiff: eager by design
        assert g.stats.eager_calls == 4, g.stats
