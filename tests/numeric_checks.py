"""Checks shared by the red-team tests of tests/ops and tests/tape (this folder is on their
import path): central differences with a step that follows the size of each entry, or a fixed
one per argument of a function of several, and a comparison scaled by the largest expected
entry."""
from __future__ import annotations

import numpy as np


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
