"""Factorisations with SciPy's conventions: cholesky, cho_factor / cho_solve, lu_factor /
lu_solve.

The derivatives are those of the functions SciPy computes, entry by entry:

- cholesky and cho_factor read one triangle of `a` (the upper one by default): the factor is
  taken of the symmetric matrix mirrored from that triangle, so the other triangle gets a zero
  derivative. cho_factor returns the factor in that triangle and, as SciPy, leaves the input's
  entries in the other one (they pass through with derivative 1).
- cho_solve((c, lower), b) reads only the factor's triangle of c: it is two triangular solves
  with that triangle, so the derivative with respect to the other triangle is zero.
- lu_factor: P A = L U with the pivots held fixed (they are integers, inactive); square
  matrices only. lu_solve((lu, piv), b) reads L (unit diagonal) and U from lu.

All rules are compositions of differentiable operations (np.linalg.cholesky's rule, the
triangular solves of `linalg_solvers`) or, for lu_factor, written with them, so derivatives
nest to any order.
"""
from __future__ import annotations

import numpy as np
import scipy.linalg

from ops._util import defprimitive, shape_of
from tape.core import primal

from .linalg_base import (Array, _as_array, _check_finite, _check_rhs, _eye, _mask, _mT,
                          _refuse_complex, _square, _symmetric_from, _traced)
from .linalg_solvers import solve_triangular


def _triangular(a, b, **options):
    """solve_triangular without SciPy's finiteness check: the inputs were checked once by the
    public function (its own check_finite), and intermediate values are not the user's."""
    return solve_triangular(a, b, check_finite=False, **options)


# -- cholesky ------------------------------------------------------------------------------------
def _factor(a, lower: bool, where: str):
    """The Cholesky factor (lower or upper) of the symmetric matrix read from one triangle."""
    _refuse_complex(where, a)
    chol = np.linalg.cholesky(_symmetric_from(a, lower))
    return chol if lower else _mT(chol)


def cholesky(a: Array, lower: bool = False, overwrite_a: bool = False,
             check_finite: bool = True) -> Array:
    """The Cholesky factor of a symmetric positive-definite `a`: upper U with a = U^T U by
    default, lower L with a = L L^T when `lower`, as scipy.linalg.cholesky. Only that
    triangle of `a` is read, and only it gets a derivative. Real matrices only when
    differentiated.

    >>> import numpy as np
    >>> from tape import gradient, Reverse
    >>> a = np.array([[4.0, 2.0], [2.0, 5.0]])
    >>> cholesky(a)
    array([[2., 1.],
           [0., 2.]])
    >>> gradient(Reverse, lambda a: cholesky(a)[0, 1], a)[0]   # a[1, 0] is never read
    array([[-0.125,  0.5  ],
           [ 0.   ,  0.   ]])
    """
    a = _as_array(a)
    _square(a, "a", "cholesky")
    if not _traced(a):
        return scipy.linalg.cholesky(a, lower=lower, check_finite=check_finite)
    _check_finite(check_finite, "cholesky", a)
    return _factor(a, bool(lower), "cholesky")


def cho_factor(a: Array, lower: bool = False, overwrite_a: bool = False,
               check_finite: bool = True) -> tuple:
    """``(c, lower)``: the Cholesky factor of `a` in one triangle of c, as
    scipy.linalg.cho_factor (the other triangle of c holds the input's entries, as SciPy
    leaves them; use c only through cho_solve). Differentiable in `a`'s read triangle.

    >>> import numpy as np
    >>> c, low = cho_factor(np.array([[4.0, 2.0], [2.0, 5.0]]))
    >>> c, low
    (array([[2., 1.],
           [2., 2.]]), False)
    """
    a = _as_array(a)
    n = _square(a, "a", "cho_factor")
    if not _traced(a):
        return scipy.linalg.cho_factor(a, lower=lower, check_finite=check_finite)
    _check_finite(check_finite, "cho_factor", a)
    lower = bool(lower)
    chol = _factor(a, lower, "cho_factor")
    other = a * (1 - _mask(n, a, lower))
    return chol + other, lower


def cho_solve(c_and_lower: tuple, b: Array, overwrite_b: bool = False,
              check_finite: bool = True) -> Array:
    """Solve ``a x = b`` given ``(c, lower) = cho_factor(a)``, as scipy.linalg.cho_solve.
    Only the factor's triangle of c is read, and only it gets a derivative (with respect to
    c as given, not to the matrix it was factored from; differentiate through cho_factor for
    that). Complex factors are Hermitian (a = L L^H).

    >>> import numpy as np
    >>> from tape import gradient, Reverse
    >>> a = np.array([[4.0, 2.0], [2.0, 5.0]])
    >>> cho_solve(cho_factor(a), np.array([6.0, 7.0]))
    array([1., 1.])
    >>> g, = gradient(Reverse, lambda a: cho_solve(cho_factor(a), np.ones(2)).sum(), a)
    >>> np.round(g * 256, 8) + 0.0          # only the upper triangle of a is read
    array([[ -9., -12.],
           [  0.,  -4.]])
    """
    c, lower = c_and_lower
    c, b = _as_array(c), _as_array(b)
    n = _square(c, "c", "cho_solve")
    _check_rhs(n, b, "cho_solve")
    if not _traced(c, b):
        return scipy.linalg.cho_solve((c, lower), b, check_finite=check_finite)
    _check_finite(check_finite, "cho_solve", c, b)
    lower = bool(lower)
    # a = L L^H (lower) or U^H U (upper): two triangular solves with the same triangle.
    if lower:
        y = _triangular(c, b, lower=True)
        return _triangular(c, y, trans=2, lower=True)
    y = _triangular(c, b, trans=2, lower=False)
    return _triangular(c, y, lower=False)


# -- lu_factor: P A = L U with fixed pivots ---------------------------------------------------
def _permutation(piv) -> np.ndarray:
    """LAPACK's row interchanges (row i swapped with piv[i], in order) as one permutation
    `perm` of each matrix's rows: a[..., perm, :] = L U."""
    piv = np.asarray(piv)
    flat = piv.reshape(-1, piv.shape[-1])
    perm = np.empty_like(flat)
    for row, swaps in zip(perm, flat):
        row[:] = np.arange(len(swaps))
        for i, j in enumerate(swaps):
            row[i], row[j] = row[j], row[i]
    return perm.reshape(piv.shape)


def _rows(x, perm):
    """x[..., perm, :], one permutation per matrix of a stack."""
    if perm.ndim == 1:
        return x[..., perm, :]
    shape = np.broadcast_shapes(perm.shape[:-1], shape_of(x)[:-2]) + shape_of(x)[-2:]
    if shape_of(x) != shape:   # a right-hand side shared by a stack of factorisations
        x = np.broadcast_to(x, shape)
    return np.take_along_axis(x, perm[..., :, None], axis=-2)


def _unrows(x, perm):
    """The inverse of `_rows`: y with y[..., perm, :] = x."""
    return _rows(x, np.argsort(perm, axis=-1))


def _lu_parts(lu):
    n = shape_of(lu)[-1]
    return lu * _mask(n, lu, True, -1), lu * _mask(n, lu, False)   # strictly lower, upper


def _lu_aug(cfg, a, *, value, perm):
    lu = _lu(a, value=value, perm=perm)
    return lu, (lu, perm)


def _lu_reverse(cfg, saved, g):
    # <g, dlu> = <M, L^-1 dA_p U^-1> with M = tril(L^T gL, -1) + triu(gU U^T), so
    # the cotangent of A_p = P A is L^-T M U^-T.
    lu, perm = saved
    n = shape_of(lu)[-1]
    strict, upper = _mask(n, lu, True, -1), _mask(n, lu, False)
    low, up = _lu_parts(lu)
    l_mat = low + _eye(n, lu)
    m = (_mT(l_mat) @ (g * strict)) * strict + ((g * upper) @ _mT(up)) * upper
    y = _triangular(lu, m, trans=1, lower=True, unit_diagonal=True)    # L^-T M
    ga_p = _mT(_triangular(lu, _mT(y), lower=False))                  # (U^-1 Y^T)^T
    return (_unrows(ga_p, perm),)


def _lu_forward(cfg, primals, tangents, *, value, perm):
    # F = L^-1 dA_p U^-1; dL = L tril(F, -1) and dU = triu(F) U.
    lu = _lu(primals[0], value=value, perm=perm)
    n = shape_of(lu)[-1]
    x = _triangular(lu, _rows(tangents[0], perm), lower=True, unit_diagonal=True)
    f = _mT(_triangular(lu, _mT(x), trans=1, lower=False))
    low, up = _lu_parts(lu)
    d_low = (low + _eye(n, lu)) @ (f * _mask(n, lu, True, -1))
    return lu, d_low + (f * _mask(n, lu, False)) @ up


# SciPy factors once (in lu_factor below); the primitive passes that result on, so that every
# level of nesting sees the same factors and pivots.
_lu = defprimitive("lu_factor", lambda a, *, value, perm: value, _lu_aug, _lu_reverse,
                   _lu_forward)


def lu_factor(a: Array, overwrite_a: bool = False, check_finite: bool = True) -> tuple:
    """``(lu, piv)``: the pivoted LU factorisation P A = L U in one matrix (L strictly below
    the diagonal, its unit diagonal implied, U on and above) and LAPACK's pivot indices, as
    scipy.linalg.lu_factor. Differentiable in `a` (square, nonsingular) with the pivots held
    fixed; `piv` is an integer array and carries no derivative.

    >>> import numpy as np
    >>> from tape import gradient, Reverse
    >>> lu, piv = lu_factor(np.array([[1.0, 2.0], [3.0, 4.0]]))
    >>> lu, piv
    (array([[3.        , 4.        ],
           [0.33333333, 0.66666667]]), array([1, 1], dtype=int32))
    """
    a = _as_array(a)
    if not _traced(a):
        return scipy.linalg.lu_factor(a, check_finite=check_finite)
    _square(a, "a", "lu_factor (differentiated)")
    value, piv = scipy.linalg.lu_factor(np.asarray(primal(a)), check_finite=check_finite)
    return _lu(a, value=value, perm=_permutation(piv)), piv


def lu_solve(lu_and_piv: tuple, b: Array, trans: int = 0, overwrite_b: bool = False,
             check_finite: bool = True) -> Array:
    """Solve ``a x = b`` (trans 0), ``a^T x = b`` (1) or ``a^H x = b`` (2) given
    ``(lu, piv) = lu_factor(a)``, as scipy.linalg.lu_solve; differentiable in lu (the entries
    that hold L and U) and b.

    >>> import numpy as np
    >>> from tape import gradient, Reverse
    >>> a = np.array([[1.0, 2.0], [3.0, 4.0]])
    >>> lu_solve(lu_factor(a), np.array([5.0, 11.0]))
    array([1., 2.])
    >>> g, = gradient(Reverse, lambda a: lu_solve(lu_factor(a), np.array([5.0, 11.0]))[0], a)
    >>> bool(np.allclose(g, -np.linalg.inv(a).T[:, :1] * [1.0, 2.0]))   # -a^-T e_0 x^T
    True
    """
    lu, piv = lu_and_piv
    lu, b = _as_array(lu), _as_array(b)
    n = _square(lu, "lu", "lu_solve")
    _check_rhs(n, b, "lu_solve")
    if trans not in (0, 1, 2):
        raise ValueError(f"lu_solve: trans must be 0, 1 or 2; got {trans!r}")
    if not _traced(lu, b):
        return scipy.linalg.lu_solve((lu, piv), b, trans=trans, check_finite=check_finite)
    _check_finite(check_finite, "lu_solve", b)   # SciPy checks b only
    perm = _permutation(piv)
    vector = len(shape_of(b)) == 1
    b = b[:, None] if vector else b
    if trans == 0:   # x = U^-1 L^-1 (P b)
        y = _triangular(lu, _rows(b, perm), lower=True, unit_diagonal=True)
        x = _triangular(lu, y, lower=False)
    else:            # a^T = U^T L^T P: x = P^T L^-T U^-T b
        y = _triangular(lu, b, trans=trans, lower=False)
        x = _unrows(_triangular(lu, y, trans=trans, lower=True, unit_diagonal=True), perm)
    return x[..., 0] if vector else x
