"""Scientific programs users write in plain NumPy/SciPy, second round, in every mode.

Each program (tests/tape/scientific_programs2.py) is compared in float64 with the plain NumPy
run for the primal and with central finite differences for the gradient: eager Reverse and
Forward, `tape.compile` (reverse with primal, and forward) over calls whose inputs change the
loop counts, pivots and masks, the loop bodies under `tape.checkpoint`, and Hessian-vector
products. The open findings at the end are strict xfails: each names the cause.
"""
from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest

pytest.importorskip("scipy")

import scipy.interpolate as sint  # noqa: E402
import scipy.stats as st  # noqa: E402

import tape  # noqa: E402
from tape import (Active, Const, Duplicated, Forward, ForwardWithPrimal, Reverse,  # noqa: E402
                  ReverseWithPrimal)
from tape.errors import TracerConversionError  # noqa: E402

from numeric_checks import close, fd_gradient  # noqa: E402
from scientific_programs2 import CHECKPOINTED, PROGRAMS  # noqa: E402


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_in_every_mode(name):
    f, points = PROGRAMS[name]
    fds = [fd_gradient(f, x.copy()) for x in points]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        reverse = tape.compile(ReverseWithPrimal, f, Active, Active)
        forward = tape.compile(ForwardWithPrimal, f, Duplicated, Duplicated)
        for x, fd in zip(points, fds):
            (grad,), value = tape.gradient(ReverseWithPrimal, f, x.copy())
            np.testing.assert_allclose(value, f(x.copy()), rtol=1e-12, atol=1e-13)
            close(grad, fd)
            close(tape.gradient(Forward, f, x.copy())[0], fd)
        for x, fd in list(zip(points, fds)) + [(points[0], fds[0])]:
            (grad,), value = reverse(Active(x.copy()))
            np.testing.assert_allclose(value, f(x.copy()), rtol=1e-12, atol=1e-13)
            close(grad, fd)
            direction = np.cos(np.arange(x.size) + 0.5)
            tangent, value = forward(Duplicated(x.copy(), direction))
            np.testing.assert_allclose(value, f(x.copy()), rtol=1e-12, atol=1e-13)
            close(tangent, fd @ direction)


@pytest.mark.parametrize("name", CHECKPOINTED)
def test_checkpointed_loop_body(name):
    f, points = PROGRAMS[name]
    checkpointed = functools.partial(f, wrap=tape.checkpoint)
    compiled = tape.compile(ReverseWithPrimal, checkpointed, Active, Active)
    for x in points[:2]:
        fd = fd_gradient(f, x.copy())
        (grad,), value = tape.gradient(ReverseWithPrimal, checkpointed, x.copy())
        np.testing.assert_allclose(value, f(x.copy()), rtol=1e-12, atol=1e-13)
        close(grad, fd)
        (grad,), value = compiled(Active(x.copy()))
        np.testing.assert_allclose(value, f(x.copy()), rtol=1e-12, atol=1e-13)
        close(grad, fd)
    v = np.sin(np.arange(points[0].size) + 1.0)
    close(tape.hvp(checkpointed, points[0].copy(), v), tape.hvp(f, points[0].copy(), v), 1e-9)


@pytest.mark.parametrize("name", ["kalman rts smoother", "lennard-jones", "markov stationary",
                                  "backward euler newton", "cubic spline"])
def test_hessian_vector_product(name):
    f, points = PROGRAMS[name]
    x = points[0]
    v = np.sin(np.arange(x.size) + 1.0)
    grad = lambda z: tape.gradient(Reverse, f, z)[0]   # noqa: E731
    close(tape.hvp(f, x.copy(), v), (grad(x + 1e-5 * v) - grad(x - 1e-5 * v)) / 2e-5, 1e-5)


def test_bisection_derivative_comes_from_the_arithmetic_not_the_decisions():
    """Bisection on a constant bracket: every iterate is arithmetic on constants, selected by
    decisions, so the derivative is zero; the compiled program retraces when the decisions
    change and its primal is the plain run's."""
    def bisection(p):
        lo, hi = 0.0, 3.0
        while hi - lo > 1e-12:
            mid = 0.5 * (lo + hi)
            if mid ** 3 - p[0] * mid - p[1] > 0:
                hi = mid
            else:
                lo = mid
        return 0.5 * (lo + hi)
    compiled = tape.compile(ReverseWithPrimal, bisection, Active, Active)
    for p in ([1.0, 2.0], [2.0, 0.5], [0.5, 3.0], [1.0, 2.0]):
        p = np.array(p)
        (grad,), value = compiled(Active(p.copy()))
        assert value == bisection(p.copy())
        np.testing.assert_array_equal(grad, np.zeros(2))


def test_loop_counts_from_const_arguments_under_compile():
    def euler(p, n, forcing):
        y = p[0]
        for k in range(n):
            y = y + (-p[1] * y + forcing[k % forcing.size]) / n
        for _ in range(int(forcing[0] * 10)):
            y = y * (1 + 0.01 * p[1])
        return y
    compiled = tape.compile(ReverseWithPrimal, euler, Active, Active, Const, Const)
    for p, n, forcing in ((np.array([1.0, 0.5]), 10, np.array([0.1, 0.2])),
                          (np.array([1.0, 0.5]), 13, np.array([0.1, 0.2])),
                          (np.array([0.5, 1.5]), 10, np.array([0.3, -0.2, 0.4])),
                          (np.array([1.0, 0.5]), 10, np.array([0.1, 0.2]))):
        (grad, _, _), value = compiled(Active(p.copy()), Const(n), Const(forcing))
        assert value == pytest.approx(euler(p, n, forcing), rel=1e-13)
        close(grad, fd_gradient(lambda q: euler(q, n, forcing), p))


def test_duplicated_grid_written_in_place_under_compile():
    def heat(u, p):
        for _ in range(5):
            u[1:-1] += p[0] * (u[2:] - 2 * u[1:-1] + u[:-2])
        return np.sum(u ** 2)
    compiled = tape.compile(ReverseWithPrimal, heat, Active, Duplicated, Active)
    grids = (np.sin(np.arange(6.0)), np.cos(np.arange(6.0)), np.sin(np.arange(6.0)))
    for u0, p in zip(grids, (np.array([0.2]), np.array([0.3]), np.array([0.2]))):
        u, du, plain = u0.copy(), np.zeros(6), u0.copy()
        (_, grad_p), value = compiled(Duplicated(u, du), Active(p.copy()))
        assert value == pytest.approx(heat(plain, p), rel=1e-13)
        np.testing.assert_allclose(u, plain, rtol=1e-13)
        close(du, fd_gradient(lambda w: heat(w.copy(), p), u0))
        close(grad_p, fd_gradient(lambda q: heat(u0.copy(), q), p))


@pytest.mark.parametrize("method", ["nearest", "lower", "higher", "midpoint"])
@pytest.mark.parametrize("q", [40, 50, 100 / 6])   # 100/6 of 7 entries: a tie for 'nearest'
def test_percentile_methods_other_than_linear(method, q):
    x = np.array([0.3, 1.7, -0.4, 0.9, 0.2, 0.75, 1.1])
    f = lambda z: np.percentile(z, q, method=method)   # noqa: E731
    (grad,), value = tape.gradient(ReverseWithPrimal, f, x.copy())
    assert value == f(x)
    close(grad, fd_gradient(f, x))


@pytest.mark.parametrize("make", [
    lambda xs, c: np.polynomial.legendre.legval(xs, c),
    lambda xs, c: np.polynomial.chebyshev.chebval(xs, c),
    lambda xs, c: np.polynomial.hermite.hermval(c, xs),        # traced points
    lambda xs, c: np.polynomial.chebyshev.chebfit(xs[:3], c, 2),
], ids=["legval", "chebval", "hermval-x", "chebfit"])
def test_numpy_polynomial_module_with_traced_coefficients(make):
    # NumPy's polynomial code calls np.array(c, ndmin=1, copy=None) on its input, which was
    # refused as NumPy's own conversion
    xs = np.linspace(-1, 1, 5)
    f = lambda c: np.sum(make(xs, c) ** 2)   # noqa: E731
    c = np.array([0.3, -0.5, 0.8])
    (grad,), value = tape.gradient(ReverseWithPrimal, f, c.copy())
    assert value == pytest.approx(f(c), rel=1e-14)
    close(grad, fd_gradient(f, c))
    close(tape.gradient(Forward, f, c.copy())[0], fd_gradient(f, c))


@pytest.mark.parametrize("make", [lambda y: sint.CubicSpline(np.arange(4.0), y)(1.5),
                                  lambda y: st.gaussian_kde(y)(0.3)[0]],
                         ids=["CubicSpline", "gaussian_kde"])
def test_a_scipy_class_without_a_counterpart_is_not_said_to_have_one(make):
    with pytest.raises(TracerConversionError) as info:
        tape.gradient(Reverse, make, np.array([1.3, 0.5, 2.0, 1.0]))
    assert "Use the differentiable" not in str(info.value), str(info.value)




# -- open findings -----------------------------------------------------------------------------
def test_histogram_with_traced_weights():
    data = np.array([0.1, 0.4, 0.35, 0.8, 0.9, 0.55])
    f = lambda w: np.sum(np.histogram(data, bins=3, range=(0, 1), weights=w)[0] ** 2)  # noqa: E731
    w = np.array([0.5, 1.0, -0.3, 2.0, 0.1, 0.7])
    close(tape.gradient(Reverse, f, w.copy())[0], fd_gradient(f, w))


