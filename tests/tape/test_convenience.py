"""gradient, gradient_, jacobian, hvp, hvp_, hvp_and_gradient_, hessian, make_zero_, onehot,
and nested autodiff in Enzyme.jl's own example."""
import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings

from tape import (ActivityError, Const, Duplicated, Forward, ForwardWithPrimal, Reverse,
                  ReverseWithPrimal, autodiff, gradient, gradient_, hessian, hvp, hvp_,
                  hvp_and_gradient_, jacobian, make_zero_, onehot)
from tape.testing import arrays

A = np.array([[1.0, -2.0, 0.5], [0.3, 0.7, -1.1]])


def rosen(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def rosen_hessian(x):
    n = len(x)
    H = np.zeros((n, n))
    for i in range(n - 1):
        H[i, i] += 1200 * x[i] ** 2 - 400 * x[i + 1] + 2
        H[i + 1, i + 1] += 200
        H[i, i + 1] = H[i + 1, i] = -400 * x[i]
    return H


def rosen_grad(x):
    g = np.zeros_like(x)
    g[:-1] = -400 * x[:-1] * (x[1:] - x[:-1] ** 2) - 2 * (1 - x[:-1])
    g[1:] += 200 * (x[1:] - x[:-1] ** 2)
    return g


X = np.array([0.5, -1.2, 0.8, 1.7])


@pytest.mark.parametrize("mode", [Reverse, Forward])
def test_gradient_is_structural(mode):
    g = gradient(mode, lambda x, s, c: s * rosen(x) + c, X, 2.0, Const(5.0))
    assert isinstance(g, tuple) and len(g) == 3
    np.testing.assert_allclose(g[0], 2.0 * rosen_grad(X), atol=1e-9)
    assert isinstance(g[1], float) and g[1] == pytest.approx(rosen(X))
    assert g[2] is None


def test_gradient_with_primal():
    r = gradient(ReverseWithPrimal, rosen, X)
    np.testing.assert_allclose(r.derivs[0], rosen_grad(X), atol=1e-9)
    assert r.val == pytest.approx(rosen(X))
    r = gradient(ForwardWithPrimal, rosen, X)
    np.testing.assert_allclose(r.derivs[0], rosen_grad(X), atol=1e-9)


def test_gradient_of_a_pytree():
    @dataclasses.dataclass
    class Params:
        w: np.ndarray
        b: float
    p = Params(np.array([1.0, 2.0]), 0.5)
    (g,) = gradient(Reverse, lambda p: np.sum(p.w ** 2) * p.b, p)
    assert isinstance(g, Params)
    np.testing.assert_allclose(g.w, [1.0, 2.0], atol=1e-12)
    assert g.b == pytest.approx(5.0)


def test_gradient_refuses_annotations_and_vector_functions():
    with pytest.raises(ActivityError, match="plain values"):
        gradient(Reverse, rosen, Duplicated(X, np.zeros(4)))
    with pytest.raises(ActivityError, match="scalar"):
        gradient(Forward, lambda x: x * 2, X)
    with pytest.raises(ActivityError, match="scalar"):
        gradient(Reverse, lambda x: x * 2, X)


def test_gradient_underscore_zeroes_then_fills():
    dx = np.full(4, 123.0)
    out = gradient_(Reverse, dx, rosen, X)
    assert out is dx
    np.testing.assert_allclose(dx, rosen_grad(X), atol=1e-9)
    gradient_(Reverse, dx, rosen, X)
    np.testing.assert_allclose(dx, rosen_grad(X), atol=1e-9)     # not doubled


@pytest.mark.parametrize("mode", [Forward, Reverse])
@pytest.mark.parametrize("chunk", [None, 1, 2])
def test_jacobian_all_chunks(mode, chunk):
    f = lambda x: np.tanh(A @ x) * x[0]   # noqa: E731
    x = np.array([0.2, -0.5, 0.9])
    (J,) = jacobian(mode, f, x, chunk=chunk)
    assert J.shape == (2, 3)
    expected = np.stack([autodiff(Forward, f, Duplicated(x, e))[0] for e in np.eye(3)], axis=1)
    np.testing.assert_allclose(J, expected, rtol=1e-12, atol=1e-12)


def test_jacobian_shapes_and_const_arguments():
    f = lambda X, v: X @ v     # noqa: E731
    Xm, v = np.arange(6.0).reshape(2, 3), np.array([1.0, 2.0, 3.0])
    JX, Jv = jacobian(Reverse, f, Xm, v, chunk=1)
    assert JX.shape == (2, 2, 3) and Jv.shape == (2, 3)
    np.testing.assert_allclose(Jv, Xm, atol=1e-11)
    np.testing.assert_allclose(JX[1, 1], v, atol=1e-12)
    np.testing.assert_allclose(JX[0, 1], 0.0, atol=1e-12)
    JX2, none = jacobian(Forward, f, Xm, Const(v))
    assert none is None
    np.testing.assert_allclose(JX2, JX, atol=1e-12)
    with pytest.raises(ValueError, match="chunk must be at least 1"):
        jacobian(Forward, f, Xm, v, chunk=0)


def test_hvp_family():
    v = np.array([1.0, -1.0, 0.5, 2.0])
    H = rosen_hessian(X)
    np.testing.assert_allclose(hvp(rosen, X, v), H @ v, atol=1e-9)
    res = np.zeros(4)
    assert hvp_(res, rosen, X, v) is res
    np.testing.assert_allclose(res, H @ v, atol=1e-9)
    res, grad = np.zeros(4), np.zeros(4)
    hvp_and_gradient_(res, grad, rosen, X, v)
    np.testing.assert_allclose(res, H @ v, atol=1e-9)
    np.testing.assert_allclose(grad, rosen_grad(X), atol=1e-9)


@pytest.mark.parametrize("chunk", [None, 1, 3])
def test_hessian_is_batched_hvp(chunk):
    np.testing.assert_allclose(hessian(rosen, X, chunk=chunk), rosen_hessian(X), rtol=1e-12,
                               atol=1e-9)


@settings(max_examples=10, deadline=None)
@given(arrays(shape=(3,), low=-1.5, high=1.5))
def test_hessian_matches_finite_differences_of_gradients(x):
    f = lambda x: np.sum(np.sin(x) * x[::-1]) ** 2 + np.prod(np.cos(x))   # noqa: E731
    H = hessian(f, x)
    eps = 1e-6
    numeric = np.stack([(gradient(Reverse, f, x + eps * e)[0] - gradient(Reverse, f, x - eps * e)[0])
                        / (2 * eps) for e in np.eye(3)], axis=1)
    np.testing.assert_allclose(H, numeric, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(H, H.T, rtol=1e-10, atol=1e-12)


def test_hvp_of_a_non_scalar_function_raises():
    with pytest.raises(ActivityError, match="hvp needs a scalar function"):
        hvp(lambda x: x ** 2, X, X)


def test_make_zero_and_onehot():
    s = {"w": np.ones(2), "b": [1.5, np.ones(1)], "t": (np.ones(1),)}
    assert make_zero_(s) is s
    assert s["b"][0] == 0.0 and not s["w"].any() and not s["b"][1].any() and not s["t"][0].any()
    hots = onehot(np.zeros((2, 2)))
    assert len(hots) == 4
    np.testing.assert_array_equal(sum(hots), np.ones((2, 2)))
    np.testing.assert_array_equal(hots[1], [[0.0, 1.0], [0.0, 0.0]])
    mixed = onehot({"a": np.zeros(2), "b": 0.0})
    assert mixed[2]["b"] == 1.0 and not mixed[2]["a"].any()


def test_enzyme_nested_forward_over_reverse_example():
    """Enzyme.jl's Hessian-vector product example, word for word in Python."""
    def f(x, y):
        y[0] = x[0] * x[0] + x[1] * x[0]

    def grad(x, dx, y, dy):
        autodiff(Reverse, f, Duplicated(x, dx), Duplicated(y, dy))

    x, bx = np.array([2.0, 2.0]), np.array([0.0, 1.0])
    y, by = np.array([0.0]), np.array([0.0])
    dx, dbx = np.array([0.0, 0.0]), np.array([0.0, 0.0])
    dy, dby = np.array([1.0]), np.array([0.0])
    autodiff(Forward, grad, Duplicated(x, bx), Duplicated(dx, dbx), Duplicated(y, by),
             Duplicated(dy, dby))
    np.testing.assert_array_equal(y, [8.0])
    np.testing.assert_array_equal(dx, [6.0, 2.0])     # the gradient, 2 x0 + x1 and x0
    np.testing.assert_array_equal(dbx, [1.0, 0.0])    # the Hessian [[2, 1], [1, 0]] times bx
    np.testing.assert_array_equal(dy, [0.0])


def test_reverse_over_reverse_hessian_row():
    def grad0(x):
        return autodiff(Reverse, rosen, Active, Active(x))[0][0][0]
    from tape import Active
    (row,), = autodiff(Reverse, grad0, Active, Active(X))
    np.testing.assert_allclose(row, rosen_hessian(X)[0], atol=1e-9)


def test_reverse_jacobian_of_a_scalar_input():
    # A Python float (or NumPy scalar) has no shadow to fill: one reverse sweep per row.
    (J,) = jacobian(Reverse, lambda x: np.array([1.0, 2.0]) * x ** 2, 2.0)
    np.testing.assert_allclose(J, [4.0, 8.0], atol=1e-11)
    assert jacobian(Reverse, lambda x: x ** 3, np.float64(2.0)) == (12.0,)
    (J,) = jacobian(Reverse, lambda x: np.sin(x) * np.ones((2, 2)), 0.5)
    np.testing.assert_allclose(J, np.full((2, 2), np.cos(0.5)), rtol=1e-14, atol=1e-15)
    # nested: the inner Jacobian is differentiated by an outer one
    (H,) = jacobian(Forward, lambda x: jacobian(Reverse, lambda y: y ** 3 * np.ones(2), x)[0],
                    2.0)
    np.testing.assert_allclose(H, [12.0, 12.0], atol=1e-11)
    assert jacobian(Reverse, lambda x: jacobian(Reverse, lambda y: y ** 3, x)[0], 2.0) == (12.0,)
