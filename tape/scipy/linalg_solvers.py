"""Structured solvers: solve_triangular, solve_banded, solve_sylvester.

Each is a primitive whose rules call the primitive itself (a triangular system's adjoint is
the transposed triangular system, a Sylvester equation's adjoint is the transposed Sylvester
equation), so derivatives nest to any order. Derivatives are those of the function SciPy
computes: solve_triangular reads one triangle of `a` (and not its diagonal with
`unit_diagonal`), solve_banded reads only the band entries of `ab`; the entries never read
get a zero derivative.
"""
from __future__ import annotations

import numpy as np
import scipy.linalg

from ops._util import add_tangents, defprimitive, shape_of, unbroadcast
from .linalg_base import (Array, _as_array, _check_finite, _check_rhs, _matrix_rhs, _mT,
                          _read_triangle, _square, _traced)

_TRANS = {0: 0, "N": 0, 1: 1, "T": 1, 2: 2, "C": 2}


# -- solve_triangular: op(T) x = b, T the triangle read from a, op = identity or transpose -------
def _tri_impl(a, b, *, trans, lower, unit):
    # Inputs are checked once by the public function (its check_finite), not on every call.
    return scipy.linalg.solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=unit,
                                         check_finite=False)


def _tri_augmented(cfg, a, b, *, trans, lower, unit):
    x = _tri(a, b, trans=trans, lower=lower, unit=unit)
    return x, (a, x if cfg.active[0] else None, shape_of(a), shape_of(b), trans, lower, unit)


def _tri_reverse(cfg, saved, g):
    a, x, a_shape, b_shape, trans, lower, unit = saved
    gb = _tri(a, g, trans=1 - trans, lower=lower, unit=unit)   # op(T)^-T g
    ga = None
    if cfg.active[0]:
        # d x = -op(T)^-1 op(dT) x, so the cotangent of op(T) is -gb x^T.
        g_op = -(gb @ _mT(x))
        ga = unbroadcast(_read_triangle(g_op if trans == 0 else _mT(g_op), lower, unit), a_shape)
    return ga, unbroadcast(gb, b_shape) if cfg.active[1] else None


def _tri_forward(cfg, primals, tangents, *, trans, lower, unit):
    a, b = primals
    ta, tb = tangents
    x = _tri(a, b, trans=trans, lower=lower, unit=unit)
    rhs = tb
    if ta is not None:
        dt = _read_triangle(ta, lower, unit)
        rhs = add_tangents(rhs, -((dt if trans == 0 else _mT(dt)) @ x))
    return x, _tri(a, rhs, trans=trans, lower=lower, unit=unit)


_tri = defprimitive("solve_triangular", _tri_impl, _tri_augmented, _tri_reverse, _tri_forward)


def solve_triangular(a: Array, b: Array, trans: int | str = 0, lower: bool = False,
                     unit_diagonal: bool = False, overwrite_b: bool = False,
                     check_finite: bool = True) -> Array:
    """Solve ``a x = b`` (trans 0 or 'N'), ``a^T x = b`` (1, 'T') or ``a^H x = b`` (2, 'C'),
    where only the `lower` (or upper) triangle of `a` is read, and with `unit_diagonal` its
    diagonal is taken to be ones. As scipy.linalg.solve_triangular; differentiable in `a`
    (the entries read) and `b`. A 1-D `b` is one right-hand side, otherwise the last two
    axes are (n, k) and leading axes are batch axes.

    >>> import numpy as np
    >>> from tape import gradient, Reverse
    >>> a = np.array([[2.0, 0.0], [1.0, 4.0]])
    >>> solve_triangular(a, np.array([2.0, 9.0]), lower=True)
    array([1., 2.])
    >>> gradient(Reverse, lambda b: solve_triangular(a, b, lower=True).sum(),
    ...          np.array([2.0, 9.0]))[0]
    array([0.375, 0.25 ])
    """
    a, b = _as_array(a), _as_array(b)
    where = "solve_triangular"
    n = _square(a, "a", where)
    _check_rhs(n, b, where)
    if trans not in _TRANS:
        raise ValueError(f"{where}: trans must be 0, 1, 2, 'N', 'T' or 'C'; got {trans!r}")
    if not _traced(a, b):
        return scipy.linalg.solve_triangular(a, b, trans=trans, lower=lower,
                                             unit_diagonal=unit_diagonal,
                                             check_finite=check_finite)
    _check_finite(check_finite, "solve_triangular", a, b)
    trans = _TRANS[trans]
    if trans == 2:   # a^H x = b is (conj a)^T x = b: conj carries its own (non-holomorphic) rule
        a, trans = (np.conj(a), 1) if np.iscomplexobj(a) else (a, 1)
    return _matrix_rhs(_tri, a, b, trans=trans, lower=bool(lower), unit=bool(unit_diagonal))


# -- solve_banded: the matrix A[i, j] = ab[u + i - j, j] inside the band ------------------------
def _band_index(n: int, rows: int, shift: int):
    """Index arrays (rows, n): the column index j + k - shift for row k, and where it is in
    range (as a boolean mask)."""
    idx = np.arange(rows)[:, None] + np.arange(n)[None, :] - shift
    valid = (idx >= 0) & (idx < n)   # a bool mask: a product keeps the other's dtype
    return np.clip(idx, 0, n - 1), valid


def _band_matvec(ab, x, lu):
    """A x for the banded A stored in `ab` (x of shape (n, k)): (A x)_i = sum_k ab[k, j] x_j
    with j = i - k + u."""
    lower, upper = lu
    rows, n = shape_of(ab)
    j = np.arange(n)[None, :] - np.arange(rows)[:, None] + upper     # j for (k, i)
    valid = (j >= 0) & (j < n)
    j = np.clip(j, 0, n - 1)
    k = np.broadcast_to(np.arange(rows)[:, None], j.shape)
    coeff = ab[k, j] * valid                                          # A[i, j(k, i)]
    return np.sum(coeff[:, :, None] * x[j], axis=0)


def _band_outer(gb, x, lu):
    """The band of gb x^T in `ab` storage: out[k, j] = (gb x^T)[k + j - u, j]."""
    lower, upper = lu
    n = shape_of(x)[0]
    i, valid = _band_index(n, lower + upper + 1, upper)
    return np.sum(gb[i] * x[None, :, :], axis=-1) * valid


def _band_transpose(ab, lu):
    """`ab` storage of A^T, whose band is (u, l): A^T[i, j] = A[j, i]."""
    lower, upper = lu
    rows, n = shape_of(ab)
    col, valid = _band_index(n, rows, lower)
    k = np.broadcast_to(np.arange(rows)[::-1, None], col.shape)
    return ab[k, col] * valid


def _banded_impl(ab, b, *, lu):
    return scipy.linalg.solve_banded(lu, ab, b, check_finite=False)   # checked by solve_banded


def _banded_augmented(cfg, ab, b, *, lu):
    x = _banded(ab, b, lu=lu)
    return x, (ab, x, lu)


def _banded_reverse(cfg, saved, g):
    ab, x, lu = saved
    gb = _banded(_band_transpose(ab, lu), g, lu=lu[::-1])   # A^-T g
    ga = -_band_outer(gb, x, lu) if cfg.active[0] else None
    return ga, gb if cfg.active[1] else None


def _banded_forward(cfg, primals, tangents, *, lu):
    ab, b = primals
    ta, tb = tangents
    x = _banded(ab, b, lu=lu)
    rhs = add_tangents(tb, None if ta is None else -_band_matvec(ta, x, lu))
    return x, _banded(ab, rhs, lu=lu)


_banded = defprimitive("solve_banded", _banded_impl, _banded_augmented, _banded_reverse,
                       _banded_forward)


def solve_banded(l_and_u: tuple[int, int], ab: Array, b: Array, overwrite_ab: bool = False,
                 overwrite_b: bool = False, check_finite: bool = True) -> Array:
    """Solve ``A x = b`` for a banded A with `l` sub- and `u` super-diagonals, stored as
    ``ab[u + i - j, j] = A[i, j]`` (shape (l + u + 1, n)), as scipy.linalg.solve_banded.
    Differentiable in `ab` (the entries outside the band are never read: their derivative is
    zero) and in `b` of shape (n,) or (n, k).

    >>> import numpy as np
    >>> from tape import gradient, Reverse
    >>> ab = np.array([[0.0, 1.0, 1.0], [4.0, 4.0, 4.0], [1.0, 1.0, 0.0]])  # tridiagonal
    >>> solve_banded((1, 1), ab, np.array([5.0, 6.0, 5.0]))
    array([1., 1., 1.])
    >>> g, = gradient(Reverse, lambda ab: solve_banded((1, 1), ab, np.ones(3))[0], ab)
    >>> bool(g[0, 0] == 0), g.shape               # ab[0, 0] lies outside the band
    (True, (3, 3))
    """
    lower, upper = (int(v) for v in l_and_u)
    ab, b = _as_array(ab), _as_array(b)
    where = "solve_banded"
    if len(shape_of(ab)) != 2 or shape_of(ab)[0] != lower + upper + 1:
        raise ValueError(f"{where}: ab must have shape (l + u + 1, n) = ({lower + upper + 1}, "
                         f"n) for (l, u) = ({lower}, {upper}); got {shape_of(ab)}")
    if not _traced(ab, b):
        return scipy.linalg.solve_banded((lower, upper), ab, b, check_finite=check_finite)
    _check_finite(check_finite, "solve_banded", ab, b)
    n = shape_of(ab)[1]
    if len(shape_of(b)) not in (1, 2) or shape_of(b)[0] != n:
        raise ValueError(f"{where}: b must have shape ({n},) or ({n}, k) to be differentiated; "
                         f"got {shape_of(b)}")
    return _matrix_rhs(_banded, ab, b, lu=(lower, upper))


# -- solve_sylvester: a x + x b = q --------------------------------------------------------------
def _sylvester_augmented(cfg, a, b, q):
    x = _sylvester(a, b, q)
    return x, (a, b, x, shape_of(a), shape_of(b), shape_of(q))


def _sylvester_reverse(cfg, saved, g):
    # The adjoint of X -> aX + Xb is Y -> a^T Y + Y b^T.
    a, b, x, a_shape, b_shape, q_shape = saved
    y = _sylvester(_mT(a), _mT(b), g)
    ga = unbroadcast(-(y @ _mT(x)), a_shape) if cfg.active[0] else None
    gb = unbroadcast(-(_mT(x) @ y), b_shape) if cfg.active[1] else None
    return ga, gb, unbroadcast(y, q_shape) if cfg.active[2] else None


def _sylvester_forward(cfg, primals, tangents):
    a, b, q = primals
    ta, tb, tq = tangents
    x = _sylvester(a, b, q)
    rhs = add_tangents(tq, add_tangents(None if ta is None else -(ta @ x),
                                        None if tb is None else -(x @ tb)))
    return x, _sylvester(a, b, rhs)


_sylvester = defprimitive("solve_sylvester", lambda a, b, q: scipy.linalg.solve_sylvester(
    a, b, q), _sylvester_augmented, _sylvester_reverse, _sylvester_forward)


def solve_sylvester(a: Array, b: Array, q: Array) -> Array:
    """Solve the Sylvester equation ``a x + x b = q`` (a: (m, m), b: (n, n), q: (m, n),
    leading axes are batch axes), as scipy.linalg.solve_sylvester; differentiable in all
    three. Needs a and -b to share no eigenvalue.

    >>> import numpy as np
    >>> from tape import gradient, Reverse
    >>> a, b = np.diag([1.0, 2.0]), np.diag([3.0, 4.0])
    >>> solve_sylvester(a, b, np.array([[4.0, 5.0], [5.0, 6.0]]))
    array([[1., 1.],
           [1., 1.]])
    >>> gradient(Reverse, lambda q: solve_sylvester(a, b, q)[0, 0], np.ones((2, 2)))[0]
    array([[0.25, 0.  ],
           [0.  , 0.  ]])
    """
    a, b, q = _as_array(a), _as_array(b), _as_array(q)
    where = "solve_sylvester"
    m, n = _square(a, "a", where), _square(b, "b", where)
    if shape_of(q)[-2:] != (m, n):
        raise ValueError(f"{where}: q must have shape (..., {m}, {n}) for a of size {m} and b "
                         f"of size {n}; got {shape_of(q)}")
    return _sylvester(a, b, q)
