"""Checks shared by the red-team tests of tests/ops and tests/tape (this folder is on their
import path): central differences with a step that follows the size of each entry, or a fixed
one per argument of a function of several, and a comparison scaled by the largest expected
entry."""
from __future__ import annotations

import numpy as np

import tape
from tape import Active, Duplicated, Forward, ReverseWithPrimal, autodiff
from tape.testing import traced_value


def fd_gradient(f, x, eps=1e-6):
    """Central differences of a scalar function of a float array, step eps * max(1, |x_i|)."""
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[i] = eps * max(1.0, abs(x[i]))
        g[i] = (float(f(x + step)) - float(f(x - step))) / (2 * step[i])
    return g


def fd_gradient_complex(f, z, eps=1e-6):
    """df/dx + i df/dy of a real f, entry by entry (df/dx alone for a real z): the gradient
    convention of docs/complex.md."""
    z = np.asarray(z)
    units = (1.0, 1j) if np.iscomplexobj(z) else (1.0,)
    out = np.zeros(z.shape, dtype=complex if np.iscomplexobj(z) else float)
    for k in np.ndindex(z.shape):
        for unit in units:
            e = np.zeros(z.shape, dtype=z.dtype)
            e[k] = unit * eps
            out[k] += unit * (f(z + e) - f(z - e)) / (2 * eps)
    return out


def close(got, want, tol=1e-6):
    """`got` is finite and within tol times the largest |want| (at least 1) of `want`."""
    got = np.asarray(got, dtype=float)
    assert np.all(np.isfinite(got)), got
    assert np.max(np.abs(got - want)) <= tol * max(1.0, float(np.max(np.abs(want)))), (got, want)


def fd_gradient_of(f, xs, i, eps=1e-6):
    """Central differences of the scalar f(*xs) with respect to argument i, entry by entry,
    with a fixed step `eps` (the other arguments are held at their values)."""
    grad = np.zeros_like(xs[i])
    for j in np.ndindex(xs[i].shape):
        def at(step):
            ys = [x.copy() for x in xs]
            ys[i][j] += step
            return float(f(*ys))
        grad[j] = (at(eps) - at(-eps)) / (2 * eps)
    return grad


def fd_jacobian_of(g, x, eps=1e-5):
    """Central differences of an array function `g` of a float array (a gradient, for a
    Hessian), one column per entry of x: shape (g's size, x's size), fixed step `eps`."""
    n = x.size
    J = None
    for k in range(n):
        e = np.zeros(n)
        e[k] = eps
        e = e.reshape(x.shape)
        column = (np.reshape(g(x + e), -1) - np.reshape(g(x - e), -1)) / (2 * eps)
        if J is None:
            J = np.zeros((column.size, n))
        J[:, k] = column
    return J


def fixed_weights(shape):
    """Fixed weights of a shape, none of them zero."""
    return np.linspace(-1.3, 1.7, int(np.prod(shape))).reshape(shape) + 0.05


def check_all_modes(f, x, rtol=1e-12, grad_tol=1e-6, compiled=True):
    """`f(x)` (an array) against plain NumPy, through the loss sum(f(x) * W) for fixed weights
    W: reverse mode against central differences, forward mode along one direction (a plain
    number, no tracer), and tape.compile (unless `compiled` is false) at two points."""
    x = np.asarray(x, dtype=float)
    want = np.asarray(f(x.copy()))
    w = fixed_weights(want.shape)
    loss = lambda a: np.sum(f(a) * w)   # noqa: E731

    np.testing.assert_allclose(np.asarray(traced_value(f, x.copy(), mode="reverse")), want,
                               rtol=rtol, atol=rtol)
    grad = fd_gradient_of(loss, [x.copy()], 0)
    shadow = np.zeros_like(x)
    _, value = autodiff(ReverseWithPrimal, loss, Active, Duplicated(x.copy(), shadow))
    np.testing.assert_allclose(value, float(loss(x.copy())), rtol=rtol, atol=rtol)
    np.testing.assert_allclose(shadow, grad, rtol=grad_tol, atol=grad_tol)

    direction = np.linspace(-1.0, 1.0, x.size).reshape(x.shape) + 0.3
    tangent, = autodiff(Forward, loss, Duplicated(x.copy(), direction.copy()))
    assert isinstance(tangent, (float, np.floating, np.ndarray)), type(tangent)
    np.testing.assert_allclose(tangent, np.sum(grad * direction), rtol=grad_tol, atol=grad_tol)

    if not compiled:
        return
    program = tape.compile(ReverseWithPrimal, loss, Active, Duplicated)
    for scale in (1.0, 1.17):
        xs = x * scale
        shadow = np.zeros_like(xs)
        _, value = program(Duplicated(xs.copy(), shadow))
        np.testing.assert_allclose(value, float(loss(xs.copy())), rtol=rtol, atol=rtol)
        np.testing.assert_allclose(shadow, fd_gradient_of(loss, [xs.copy()], 0),
                                   rtol=grad_tol, atol=grad_tol)
