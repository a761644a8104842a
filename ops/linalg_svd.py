"""np.linalg.svd and svdvals, real and complex: A = U diag(s) Vh (reduced), Vh = V^H.

With J = U^H dA V and F_ij = 1 / (s_j^2 - s_i^2) off the diagonal (0 on it):

    ds = Re diag(J)
    dU = U (F o (J S + S J^H) + i diag(Im diag(J) / s)) + (I - U U^H) dA V S^-1
    dV = V (F o (S J + J^H S))                           + (I - V V^H) dA^H U S^-1

For complex input each pair (u_i, v_i) is unique up to a common phase; the formulas fix it by
Im diag(V^H dV) = 0, which is one choice among many, so only phase-invariant functions of U and
Vh (u @ diag(s) @ vh, |u|, s) have derivatives that match differences of LAPACK's output. The
reverse rule is the adjoint of the above in the transpose convention (docs/complex.md).

hermitian=True makes NumPy read the lower triangle only (it calls eigh): the rules then
differentiate the SVD of the Hermitian matrix built from that triangle.
"""
from __future__ import annotations

import numpy as np

from tape.rules import register_function

from ._util import add_tangents, defprimitive, shape_of
from .linalg_common import (SVDResult, _cj, _diag, _diag_embed, _gap_inverse, _hermitian, _mH,
                            _mT, _re, hermitian_from_triangle, triangle_adjoint)


def _read(ta, hermitian):
    """The tangent of the matrix that LAPACK factorises."""
    return hermitian_from_triangle(ta, True) if hermitian else ta


def _written(ga, hermitian):
    """The cotangent of the input, from the one of the matrix that LAPACK factorises."""
    return triangle_adjoint(ga, True) if hermitian else ga


def _svd_augmented(cfg, a, hermitian=False):
    u, s, vh = svd(a, hermitian=hermitian)
    return (u, s, vh), (u, s, vh, shape_of(a)[-2:], hermitian)


def _svd_reverse(cfg, saved, g):
    u, s, vh, (m, n), hermitian = saved
    gu, gs, gvh = g
    s_row, s_col = s[..., None, :], s[..., :, None]     # x * s_row = x S, s_col * x = S x
    f = _gap_inverse(s * s)
    inner = None if gs is None else _diag_embed(_re(gs))   # the cotangent of J
    if gu is not None:
        ut_gu = _mT(u) @ gu
        k = f * ut_gu
        inner = add_tangents(inner, (k + _mH(k)) * s_row)
        if np.iscomplexobj(ut_gu):                        # the i Im diag(J) / s term
            inner = inner + _diag_embed(1j * np.imag(_diag(ut_gu)) / s)
    if gvh is not None:
        k = f * _cj(vh @ _mT(gvh))                        # F o (V^T gV), gV = gVh^H
        inner = add_tangents(inner, s_col * (k + _mH(k)))
    uc, vc = _cj(u), _cj(vh)
    ga = uc @ inner @ vc
    if gu is not None and m > n:                         # (I - conj(U) U^T) gU S^-1 V^T
        ga = ga + ((gu - uc @ (_mT(u) @ gu)) / s_row) @ vc
    if gvh is not None and n > m:                        # conj(U) S^-1 gVh (I - conj(V) V^T)
        ga = ga + uc @ ((gvh - (gvh @ _mT(vh)) @ vc) / s_col)
    return (_written(ga, hermitian),)


def _svd_forward(cfg, primals, tangents, hermitian=False):
    a, = primals
    ta = _read(tangents[0], hermitian)
    u, s, vh = svd(a, hermitian=hermitian)
    v = _mH(vh)
    m, n = shape_of(a)[-2:]
    s_row, s_col = s[..., None, :], s[..., :, None]
    f = _gap_inverse(s * s)
    j = _mH(u) @ ta @ v
    js, sj = j * s_row, s_col * j
    du = u @ (f * (js + _mH(js)))
    if np.iscomplexobj(j):
        du = du + u * (1j * np.imag(_diag(j)) / s)[..., None, :]
    dv = v @ (f * (sj + _mH(sj)))
    if m > n:
        tav = ta @ v
        du = du + (tav - u @ (_mH(u) @ tav)) / s_row
    if n > m:
        tahu = _mH(ta) @ u
        dv = dv + (tahu - v @ (vh @ tahu)) / s_row
    return (u, s, vh), (du, _re(_diag(j)), _mH(dv))


svd = defprimitive("svd", lambda a, hermitian=False: tuple(np.linalg.svd(
    a, full_matrices=False, **_hermitian(hermitian))), _svd_augmented, _svd_reverse,
    _svd_forward, multiple_results=True)


# singular values only: ds_i = Re(u_i^H dA v_i), defined for repeated singular values too.
def _svdvals_augmented(cfg, a, hermitian=False):
    u, s, vh = svd(a, hermitian=hermitian)
    return s, (u, vh, hermitian)


def _svdvals_reverse(cfg, saved, g):
    u, vh, hermitian = saved
    return (_written((_cj(u) * _re(g)[..., None, :]) @ _cj(vh), hermitian),)


def _svdvals_forward(cfg, primals, tangents, hermitian=False):
    u, s, vh = svd(primals[0], hermitian=hermitian)
    ta = _read(tangents[0], hermitian)
    return s, _re(np.sum(_cj(u) * (ta @ _mH(vh)), axis=-2))


svdvals = defprimitive(
    "svdvals", lambda a, hermitian=False: np.linalg.svd(a, compute_uv=False,
                                                         **_hermitian(hermitian)),
    _svdvals_augmented, _svdvals_reverse, _svdvals_forward)
register_function(np.linalg.svdvals, lambda x, /: svdvals(x))


def _svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    if not compute_uv:
        return svdvals(a, hermitian=bool(hermitian))
    m, n = shape_of(a)[-2:]
    if full_matrices and m != n:
        raise NotImplementedError(
            "the derivative of np.linalg.svd with full_matrices=True is not defined for a "
            f"non-square ({m}x{n}) input: the extra singular vectors are not unique. Use "
            "full_matrices=False, or compute_uv=False for singular values only")
    return SVDResult(*svd(a, hermitian=bool(hermitian)))


register_function(np.linalg.svd, _svd)
