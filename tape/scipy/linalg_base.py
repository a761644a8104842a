"""Helpers shared by the modules of `tape.scipy.linalg`: traced-value checks, triangles and
the symmetric matrix that a one-triangle LAPACK routine actually reads.

Every helper is written with differentiable NumPy calls (masks, transposes, indexing), so
rules built from them nest to any order.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ops._util import shape_of
from tape.backend import array_module
from tape.core import Tracer, peek

Array = Any   # an ndarray, or a traced value standing for one


def _mT(x):
    """Swap the last two axes (the transpose of each matrix of a stack)."""
    return np.swapaxes(x, -1, -2)


def _eye(n: int, like):
    """The identity of `like`'s array module and dtype (a constant)."""
    like = peek(like)
    return array_module(like).eye(n, dtype=_float_dtype(like))


def _traced(*values) -> bool:
    """Whether any of `values` is being differentiated."""
    return any(isinstance(v, Tracer) for v in values)


def _check_finite(enabled: bool, where: str, *values) -> None:
    """SciPy's `check_finite` on the traced path: a ValueError for NaN or inf entries (the
    plain path gets SciPy's own check). The test is made on the traced values, so a compiled
    function checks again at each call rather than guarding the values."""
    if enabled and not all(bool(np.all(np.isfinite(v))) for v in values if v is not None):
        raise ValueError(f"{where}: array must not contain infs or NaNs (as SciPy with "
                         "check_finite=True); pass check_finite=False to compute anyway")


def _as_array(x) -> Array:
    """`x` as an array (tracers are kept; lists and numbers become ndarrays)."""
    return x if isinstance(x, Tracer) or hasattr(x, "shape") else np.asarray(x)


def _float_dtype(*values) -> np.dtype:
    """The floating-point dtype SciPy computes in for `values` (integers give float64)."""
    dtype = np.result_type(*[_dtype(peek(v)) for v in values])
    return dtype if dtype.kind in "fc" else np.dtype(np.float64)


def _dtype(x):
    # Batched tangents and tracers carry a dtype; Python numbers and lists are asked NumPy's.
    dtype = getattr(x, "dtype", None)
    return dtype if dtype is not None else np.result_type(x)


def _square(a, name: str, where: str) -> int:
    """The size n of the square matrices of `a` (..., n, n), or a ValueError naming `name`."""
    shape = shape_of(a)
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise ValueError(f"{where}: {name} must be a square matrix (or a stack of them, shape "
                         f"(..., n, n)); got shape {shape}")
    return shape[-1]


def _mask(n: int, like, lower: bool, k: int = 0) -> np.ndarray:
    """A constant 0/1 matrix: the lower (k <= 0) or upper triangle, offset k from the diagonal."""
    ones = np.ones((n, n), dtype=_float_dtype(like))
    return np.tril(ones, k) if lower else np.triu(ones, k)


def _read_triangle(g, lower: bool, unit_diagonal: bool = False):
    """A cotangent or tangent restricted to the entries LAPACK reads (the others get zero)."""
    n = shape_of(g)[-1]
    return g * _mask(n, g, lower, (-1 if lower else 1) if unit_diagonal else 0)


def _symmetric_from(a, lower: bool):
    """The symmetric matrix a routine that reads only one triangle of `a` works with:
    that triangle mirrored onto the other. Its derivative reaches only the entries read."""
    n = shape_of(a)[-1]
    tri = a * _mask(n, a, lower)
    return tri + _mT(tri * (1 - _eye(n, tri)))


def _vector_rhs(b) -> bool:
    """SciPy's rule for right-hand sides: a 1-D `b` is one vector, anything else a (stack of)
    matrices whose last two axes are (n, k)."""
    return len(shape_of(b)) == 1


def _matrix_rhs(solver, a, b, **params):
    """Call `solver(a, B, **params)` with B a matrix: a vector `b` becomes one column."""
    if _vector_rhs(b):
        return solver(a, b[:, None], **params)[..., 0]
    return solver(a, b, **params)


def _check_rhs(n: int, b, where: str) -> None:
    shape = shape_of(b)
    rows = shape[0] if len(shape) == 1 else (shape[-2] if shape else None)
    if rows != n:
        raise ValueError(f"{where}: b of shape {shape} does not fit a matrix of size {n}; b "
                         f"must have shape ({n},) or (..., {n}, k)")


def _refuse_complex(where: str, *values) -> None:
    """An error for complex traced inputs where the rule assumes real (symmetric) matrices."""
    if any(np.iscomplexobj(peek(v)) for v in values):
        raise NotImplementedError(
            f"{where}: derivatives for complex matrices are not implemented (the rule assumes "
            "a real symmetric matrix); differentiate the real and imaginary parts as a real "
            "block matrix instead")
