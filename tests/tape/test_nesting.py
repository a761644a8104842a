"""Nested autodiff: reverse-over-reverse, forward-over-reverse, and no perturbation confusion."""
import numpy as np
import pytest

from tape import Active, Const, Duplicated, Forward, Reverse, autodiff


def grad(f, x):
    (g,), = autodiff(Reverse, f, Active, Active(x))
    return g


def test_no_perturbation_confusion():
    # d/dx [x * d/dy (x*y)] = d/dx [x * x] = 2x. Confusing the levels gives 3x or x.
    def outer(x):
        return x * grad(lambda y: x * y, 2.0)
    assert grad(outer, 3.0) == pytest.approx(6.0)


def test_no_perturbation_confusion_forward_outer():
    def outer(x):
        return x * grad(lambda y: x * y, 2.0)
    assert autodiff(Forward, outer, Duplicated(3.0, 1.0))[0] == pytest.approx(6.0)


def test_reverse_over_reverse_second_derivative():
    f = lambda z: np.sin(z) * z
    d2 = grad(lambda x: grad(f, x), 1.0)
    assert d2 == pytest.approx(2 * np.cos(1.0) - np.sin(1.0), rel=1e-12)


def test_forward_over_reverse_second_derivative():
    f = lambda z: np.exp(z) * z ** 3
    d2, = autodiff(Forward, lambda x: grad(f, x), Duplicated(0.7, 1.0))
    x = 0.7
    assert d2 == pytest.approx(np.exp(x) * (x**3 + 6 * x**2 + 6 * x), rel=1e-12)


def test_third_derivative():
    f = lambda z: z ** 5
    d3 = grad(lambda a: grad(lambda b: grad(f, b), a), 2.0)
    assert d3 == pytest.approx(60 * 2.0 ** 2)


def test_hessian_vector_product_arrays():
    rng = np.random.default_rng(1)
    A = rng.standard_normal((4, 4))
    A = A + A.T
    x, v = rng.standard_normal(4), rng.standard_normal(4)

    def f(x):
        return np.sum(x * (A * x).sum(axis=1)) / 2 + np.sum(np.sin(x))  # x^T A x / 2 + sum sin

    def gradient(x):
        (g,), = autodiff(Reverse, f, Active, Active(x))
        return g
    hv, = autodiff(Forward, gradient, Duplicated(x, v))
    np.testing.assert_allclose(hv, A @ v - np.sin(x) * v, rtol=1e-10, atol=1e-12)


def test_inner_duplicated_shadow_is_traced_by_the_outer_level():
    # The inner call accumulates dy = 3 y^2 into an outer-level buffer; d/dx sum(3 x^2) = 6x.
    def outer(x):
        y, dy = x * 1.0, np.zeros_like(x)
        autodiff(Reverse, lambda y: np.sum(y ** 3), Active, Duplicated(y, dy))
        return np.sum(dy)
    x = np.array([0.5, -1.0, 2.0])
    (g,), = autodiff(Reverse, outer, Active, Active(x))
    np.testing.assert_allclose(g, 6 * x, atol=1e-11)


def test_const_outer_tracer_inside_inner():
    def outer(x):
        (g, _), = autodiff(Reverse, lambda y, c: c * y ** 2, Active, Active(1.5), Const(x))
        return g      # = 2 * 1.5 * x
    assert grad(outer, 4.0) == pytest.approx(3.0)
