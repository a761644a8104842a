"""Checks shared by the program red-team tests: central differences with a step that follows
the size of each entry, and a comparison scaled by the largest expected entry."""
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
