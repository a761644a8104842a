"""Nested and mixed-mode differentiation of plain NumPy code: cases that once failed.

Each second derivative is compared with a closed form or with central differences of the
first derivative (itself checked against central differences of the function).
"""
import numpy as np
import pytest

from tape import (ActivityError, Active, BatchDuplicated, Const, Duplicated, Forward, Reverse,
                  ReverseSplitWithPrimal, autodiff, autodiff_thunk)

S = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, -0.4], [0.5, -0.4, 5.0]])   # SPD
X = np.array([0.4, -0.6, 0.9])
EYE = tuple(np.eye(3))


def grad(f, x):
    (g,), = autodiff(Reverse, f, Active, Active(x))
    return g


def central(f, x, eps=1e-5):
    """d f / d x by central differences: one row per entry of x."""
    rows = []
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = eps
        rows.append((np.asarray(f(x + e)) - np.asarray(f(x - e))) / (2 * eps))
    return np.array(rows)


def quartic(z):
    return np.dot(z, S @ z) ** 2


def quartic_hessian(z):
    sz = S @ z
    return 8 * np.outer(sz, sz) + 4 * np.dot(z, sz) * S


def inverse_norm(z):
    return np.sum(np.linalg.inv(S + np.diag(z * z)) ** 2)


def determinant(z):
    return np.linalg.det(S + np.outer(z, z))


def _row_by_inner_batch_forward(f, i):
    """Row i of the Hessian: reverse mode over the i-th of three batched tangents."""
    def directional(z):
        tangents, = autodiff(Forward, f, BatchDuplicated(z, tuple(e.copy() for e in EYE)))
        return tangents[i]
    return grad(directional, X.copy())


def test_reverse_over_inner_batch_forward_closed_form():
    # np.dot's and matmul's forward rules met a batched tangent beside an outer tracer; the
    # outer level recorded tracer(Batched) and the "gradient" came back as a Batched.
    rows = [_row_by_inner_batch_forward(quartic, i) for i in range(3)]
    assert all(type(row) is np.ndarray for row in rows), [type(row) for row in rows]
    np.testing.assert_allclose(np.array(rows), quartic_hessian(X), rtol=1e-12)


@pytest.mark.parametrize("f", [inverse_norm, determinant], ids=["inv", "det"])
def test_reverse_over_inner_batch_forward_linalg(f):
    # BatchingFallback escaped (or an IndexError) from the linalg forward rules.
    np.testing.assert_allclose(grad(f, X.copy()), central(f, X), rtol=1e-7, atol=1e-9)
    want = central(lambda z: grad(f, z), X)
    rows = [_row_by_inner_batch_forward(f, i) for i in range(3)]
    for row in rows:
        assert isinstance(row, np.ndarray) and row.shape == (3,)
    np.testing.assert_allclose(np.array(rows), want, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("f", [quartic, inverse_norm], ids=["dot", "inv"])
def test_reverse_over_inner_batch_reverse(f):
    # Batched cotangents of an inner reverse sweep, its rules reading outer tracers.
    want = central(lambda z: grad(f, z), X)

    def second_shadow_entry(z, i):
        shadows = (np.zeros_like(z), np.zeros_like(z))
        autodiff(Reverse, f, Active, BatchDuplicated(z * 1.0, shadows))
        return shadows[1][i]
    rows = [grad(lambda z: second_shadow_entry(z, i), X.copy()) for i in range(3)]
    np.testing.assert_allclose(np.array(rows), want, rtol=1e-6, atol=1e-8)


def written_copy(x):
    y = x.copy()
    y[0] = x[1] * x[2]
    return np.sum(y ** 3)


def written_copy_gradient(x):
    # f = (x1 x2)^3 + x1^3 + x2^3
    a = x[1] * x[2]
    return np.array([0.0, 3 * a * a * x[2] + 3 * x[1] ** 2, 3 * a * a * x[1] + 3 * x[2] ** 2])


def test_reverse_over_forward_through_a_write():
    # setitem's forward rule wrote an outer-traced tangent into a plain copy of the buffer's
    # tangent: "float(x) of a traced value ..." on valid code.
    want = central(written_copy_gradient, X)
    for i in range(3):
        row = grad(lambda z: autodiff(Forward, written_copy, Duplicated(z, EYE[i].copy()))[0],
                   X.copy())
        np.testing.assert_allclose(row, want[i], rtol=1e-7, atol=1e-9)
    fof = [[autodiff(Forward, lambda z: autodiff(Forward, written_copy,
                                                  Duplicated(z, EYE[i].copy()))[0],
                     Duplicated(X.copy(), EYE[j].copy()))[0] for j in range(3)]
           for i in range(3)]
    np.testing.assert_allclose(np.array(fof), want, rtol=1e-7, atol=1e-9)


def test_reverse_over_inner_batch_forward_through_a_write():
    want = central(written_copy_gradient, X)
    rows = [_row_by_inner_batch_forward(written_copy, i) for i in range(3)]
    np.testing.assert_allclose(np.array(rows), want, rtol=1e-7, atol=1e-9)


def test_plain_shadow_of_an_outer_traced_derivative_is_refused_by_name():
    # Was "numpy.add(..., out=...) would write a traced value into a plain array": the user
    # wrote no np.add; the shadow that cannot hold the outer level's derivative is named.
    def outer(x):
        shadow = np.zeros(3)
        autodiff(Reverse, lambda h: np.sum(np.sin(h) * x), Active, Duplicated(x * 1.0, shadow))
        return np.sum(shadow)
    with pytest.raises(ActivityError, match=r"shadow of argument 0 \(`h`\) is a plain array"):
        grad(outer, X.copy())

    def fixed(x):   # the fix the message gives: a buffer of the outer level
        shadow = np.zeros_like(x)
        autodiff(Reverse, lambda h: np.sum(np.sin(h) * x), Active, Duplicated(x * 1.0, shadow))
        return np.sum(shadow)
    np.testing.assert_allclose(grad(fixed, X.copy()), np.cos(X) - np.sin(X) * X, rtol=1e-12)


def test_plain_written_buffer_of_an_outer_traced_value_is_refused_by_name():
    def f_(y, x):
        y[0] = x[0] ** 2 + x[1]
        y[1] = x[0] * x[1]

    def outer(x):
        y, dy = np.zeros(2), np.zeros(2)
        autodiff(Forward, f_, Duplicated(y, dy), Duplicated(x[:2], np.array([1.0, 0.0])))
        return np.sum(dy)
    with pytest.raises(ActivityError, match=r"primal of argument 0 \(`y`\) is a plain array"):
        grad(outer, X.copy())

    def fixed(x):   # dy = [2 x0, x1]: d/dx sum(dy) = [2, 1, 0]
        y, dy = np.zeros_like(x[:2]), np.zeros_like(x[:2])
        autodiff(Forward, f_, Duplicated(y, dy), Duplicated(x[:2], np.array([1.0, 0.0])))
        return np.sum(dy)
    np.testing.assert_allclose(grad(fixed, X.copy()), [2.0, 1.0, 0.0], rtol=1e-12)


def test_split_reverse_compares_an_outer_traced_const_by_value():
    # A Const that an enclosing autodiff traces was left uncompared: reverse given another
    # value silently returned the derivative at forward's value (a plain Const is refused).
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, lambda h, c: np.sum(np.sin(S @ h) * c),
                              Active, Active, Const)
    h = np.array([0.3, 0.1, -0.2])

    def outer(x, scale):
        tape, _, _ = fwd(Active(h), Const(x))
        (g, _), = rev(Active(h), Const(x * scale), 1.0, tape)
        return np.sum(g ** 2)
    with pytest.raises(ActivityError, match="Const argument 1 holds other values"):
        grad(lambda x: outer(x, 2.0), X.copy())
    # The same values (another traced array) are accepted: g = S^T (cos(S h) * x).
    A = S.T * np.cos(S @ h)
    np.testing.assert_allclose(grad(lambda x: outer(x, 1.0), X.copy()), 2 * A.T @ (A @ X),
                               rtol=1e-12)
