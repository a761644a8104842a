"""np.linalg's triangle-reading factorisations and QR: cholesky, eigh, eigvalsh, qr.

cholesky, eigh and eigvalsh read one triangle of their input (and the real part of its
diagonal): their rules differentiate the function of that triangle, through
`hermitian_from_triangle` (tangents) and `triangle_adjoint` (cotangents), so the derivative is
right for non-symmetric input too. Real and complex (Hermitian) inputs; the conventions are
listed in `ops.linalg`'s docstring. Every rule is written with differentiable NumPy calls, so
second derivatives work.

The sum of squared eigenvalues is the squared Frobenius norm of the matrix read,
a00^2 + a11^2 + 2 a10^2 here; the upper triangle is not read:

>>> from tape import Active, Reverse, autodiff
>>> a = np.array([[2.0, 5.0], [1.0, 3.0]])
>>> autodiff(Reverse, lambda x: np.sum(np.linalg.eigvalsh(x) ** 2), Active, Active(a))[0][0]
array([[4., 0.],
       [4., 6.]])
"""
from __future__ import annotations

import numpy as np

from tape.rules import register_function

try:
    from scipy.linalg import solve_triangular as _solve_triangular
except ImportError:   # the optional dependency is absent: the rules use general solves
    _solve_triangular = None

from ._util import add_tangents, defprimitive, shape_of
from .linalg import solve
from .linalg_common import (EighResult, QRResult, _cj, _diag, _diag_embed, _gap_inverse, _mH,
                            _mT, _re, _real_eye, _tril_mask, _uplo_lower,
                            hermitian_from_triangle, triangle_adjoint)


# -- cholesky: H = L L^H with H the Hermitian matrix of the triangle read (lower, or upper with
# upper=True, where NumPy returns U = L^H). dL = L phi(L^-1 dH L^-H), phi = the lower triangle
# with the diagonal halved.
def _phi(x):
    n = shape_of(x)[-1]
    return x * (_tril_mask(n, x) - 0.5 * _real_eye(n, x))


def _cholesky_augmented(cfg, a, upper=False):
    chol = cholesky(a, upper=upper)
    return chol, (chol, upper)


def _cholesky_reverse(cfg, saved, g):
    chol, upper = saved
    if upper:                                          # U = L^H, so gL = gU^H
        chol, g = _mH(chol), _mH(g)
    k = _phi(_mT(chol) @ g)
    if _plain_matrices(chol, k):   # speed-up: triangular solves (BLAS trsm), no factorisation
        z = _lower_solve(chol, k, trans=1)                      # L^-T k
        y = _lower_solve(chol.conj(), z.T, trans=1).T           # z conj(L)^-1
    else:   # (differentiable calls: a traced or batched cotangent, a stack of matrices)
        y = _mT(solve(_mH(chol), _mT(solve(_mT(chol), k))))   # L^-T k conj(L)^-1
    return (triangle_adjoint(y, not upper),)


def _cholesky_forward(cfg, primals, tangents, upper=False):
    out = cholesky(primals[0], upper=upper)
    chol = _mH(out) if upper else out
    dh = hermitian_from_triangle(tangents[0], not upper)
    if _plain_matrices(chol, dh):
        y = _lower_solve(chol, dh)                                     # L^-1 dH
        t = chol @ _phi(_lower_solve(chol.conj(), y.T).T)              # L phi(L^-1 dH L^-H)
    else:
        y = solve(chol, dh)
        t = chol @ _phi(_mT(solve(_cj(chol), _mT(y))))
    return out, _mH(t) if upper else t


def _plain_matrices(chol, b) -> bool:
    """Whether a rule's solves with the factor `chol` can be SciPy's triangular ones: plain
    NumPy matrices of one LAPACK dtype (a traced value is differentiated again, a batched
    or stacked one goes through `solve`), and SciPy installed."""
    return (_solve_triangular is not None and type(chol) is np.ndarray
            and type(b) is np.ndarray and chol.ndim == 2 and b.ndim == 2
            and chol.dtype == b.dtype and chol.dtype.char in "fdFD")


def _lower_solve(chol, b, trans=0):
    """``L^-1 b`` (or ``L^-T b`` with trans=1) for the lower-triangular `chol`, by back
    substitution: n^2 per column where a general solve factorises `chol` first."""
    return _solve_triangular(chol, b, trans=trans, lower=True, check_finite=False)


def _cholesky_impl(a, upper=False):
    # `upper` is passed only when set: CuPy's cholesky has no such keyword.
    return np.linalg.cholesky(a, upper=True) if upper else np.linalg.cholesky(a)


cholesky = defprimitive("cholesky", _cholesky_impl,
                        _cholesky_augmented, _cholesky_reverse, _cholesky_forward)


def _cholesky(a, /, *, upper=False):
    return cholesky(a, upper=bool(upper))


register_function(np.linalg.cholesky, _cholesky)


# -- eigh: H = V diag(w) V^H, H Hermitian from the UPLO triangle --------------------------------
# With M = V^H dH V: dw = Re diag(M), dV = V (F o M), F_ij = 1 / (w_j - w_i) (the phase of each
# complex column fixed by diag(V^H dV) = 0). The reverse rule is the adjoint:
# dH-cotangent = conj(V) (diag(Re gw) + F o (V^T gV)) V^T.
def _eigh_augmented(cfg, a, UPLO="L"):
    w, v = eigh(a, UPLO=UPLO)
    return (w, v), (w, v, UPLO == "L")


def _eigh_reverse(cfg, saved, g):
    w, v, lower = saved
    gw, gv = g
    inner = None if gw is None else _diag_embed(_re(gw))
    if gv is not None:
        inner = add_tangents(inner, _gap_inverse(w) * (_mT(v) @ gv))
    return (triangle_adjoint(_cj(v) @ inner @ _mT(v), lower),)


def _eigh_forward(cfg, primals, tangents, UPLO="L"):
    w, v = eigh(primals[0], UPLO=UPLO)
    m = _mH(v) @ hermitian_from_triangle(tangents[0], UPLO == "L") @ v
    return (w, v), (_re(_diag(m)), v @ (_gap_inverse(w) * m))


eigh = defprimitive("eigh", lambda a, UPLO="L": tuple(np.linalg.eigh(a, UPLO=UPLO)),
                    _eigh_augmented, _eigh_reverse, _eigh_forward, multiple_results=True)


def _eigh(a, UPLO="L"):
    uplo = "L" if _uplo_lower(UPLO, "np.linalg.eigh") else "U"
    return EighResult(*eigh(a, UPLO=uplo))


register_function(np.linalg.eigh, _eigh)


# eigenvalues only: d w_i = Re(v_i^H dH v_i), which stays defined for repeated eigenvalues.
def _eigvalsh_augmented(cfg, a, UPLO="L"):
    w, v = eigh(a, UPLO=UPLO)
    return w, (v, UPLO == "L")


def _eigvalsh_reverse(cfg, saved, g):
    v, lower = saved
    return (triangle_adjoint((_cj(v) * _re(g)[..., None, :]) @ _mT(v), lower),)


def _eigvalsh_forward(cfg, primals, tangents, UPLO="L"):
    w, v = eigh(primals[0], UPLO=UPLO)
    h = hermitian_from_triangle(tangents[0], UPLO == "L")
    return w, _re(np.sum(_cj(v) * (h @ v), axis=-2))


eigvalsh = defprimitive("eigvalsh", lambda a, UPLO="L": np.linalg.eigvalsh(a, UPLO=UPLO),
                        _eigvalsh_augmented, _eigvalsh_reverse, _eigvalsh_forward)


def _eigvalsh(a, UPLO="L"):
    return eigvalsh(a, UPLO="L" if _uplo_lower(UPLO, "np.linalg.eigvalsh") else "U")


register_function(np.linalg.eigvalsh, _eigvalsh)


# -- qr (reduced, m >= n): A = QR, Q^H Q = I, R upper with a real diagonal (LAPACK's Householder
# reflections make it real). With C = Q^H dA R^-1, Omega = Q^H dQ is anti-Hermitian: its strict
# lower triangle is C's, its diagonal i Im diag(C). dQ = Q Omega + (I - Q Q^H) dA R^-1,
# dR = (C - Omega) R.
def _qr_augmented(cfg, a):
    q, r = qr(a)
    return (q, r), (q, r)


def _qr_reverse(cfg, saved, g):
    q, r = saved
    gq, gr = g
    n = shape_of(r)[-1]
    c = None if gr is None else gr @ _mT(r)
    if gq is not None:
        c = add_tangents(c, -(_mT(q) @ gq))
    # the adjoint of C -> C - Omega(C): the upper triangle of c, its strict lower triangle
    # mirrored (conjugated) from the upper one, and the real part of its diagonal
    strict_upper = 1 - _tril_mask(n, r)
    y = c * strict_upper + _mH(c * strict_upper) + _re(c) * _real_eye(n, r)
    return (_mT(solve(r, _mT(add_tangents(gq, _cj(q) @ y)))),)      # (gQ + conj(Q) y) R^-T


def _qr_forward(cfg, primals, tangents):
    q, r = qr(primals[0])
    c = _mT(solve(_mT(r), _mT(tangents[0])))                   # dA R^-1
    x = _mH(q) @ c
    lower = x * _tril_mask(shape_of(r)[-1], r, -1)
    omega = lower - _mH(lower)
    if np.iscomplexobj(x):
        omega = omega + 1j * np.imag(x) * _real_eye(shape_of(r)[-1], r)
    return (q, r), (q @ (omega - x) + c, (x - omega) @ r)


qr = defprimitive("qr", lambda a: tuple(np.linalg.qr(a)), _qr_augmented, _qr_reverse,
                  _qr_forward, multiple_results=True)


def _qr(a, mode="reduced"):
    m, n = shape_of(a)[-2:]
    if m < n or mode not in ("reduced", "complete", "r") or (mode == "complete" and m != n):
        raise NotImplementedError(
            f"np.linalg.qr is differentiable for mode='reduced' or 'r' with m >= n (and "
            f"'complete' for square input); got mode={mode!r} on a {m}x{n} input")
    q, r = qr(a)
    return r if mode == "r" else QRResult(q, r)


register_function(np.linalg.qr, _qr)
