"""np.linalg's factorisations: cholesky, eigh, eigvalsh, svd, svdvals, qr.

The conventions (symmetric inputs, distinct eigenvalues and singular values, full rank) are
listed in `ops.linalg`'s docstring. Every rule is written with differentiable NumPy calls, so
second derivatives work. Complex inputs are refused: the rules assume real symmetric or
orthogonal factors, and a wrong derivative is worse than an error.
"""
from __future__ import annotations

import numpy as np

from tape.rules import register_function

from ._util import add_tangents, defprimitive, refuse_complex, shape_of
from .linalg import (EighResult, QRResult, SVDResult, _diag, _diag_embed, _eye, _gap_inverse,
                     _hermitian, _mT, _sym, _tril_mask, solve)


# -- cholesky (lower): dL = L phi(L^-1 dA L^-T), phi = lower triangle with halved diagonal ------
def _phi(x):
    n = shape_of(x)[-1]
    return x * (_tril_mask(n, x) - 0.5 * _eye(n, x))


def _cholesky_augmented(cfg, a):
    chol = cholesky(a)
    return chol, chol


def _cholesky_reverse(cfg, chol, g):
    chol_t = _mT(chol)
    y = solve(chol_t, _phi(chol_t @ g))                 # L^-T phi(L^T g)
    return (_sym(_mT(solve(chol_t, _mT(y)))),)          # sym(L^-T phi(L^T g) L^-1)


def _cholesky_forward(cfg, primals, tangents):
    chol = cholesky(primals[0])
    z = solve(chol, _sym(tangents[0]))                  # L^-1 dA
    return chol, chol @ _phi(_mT(solve(chol, _mT(z))))   # L phi(L^-1 dA L^-T)


cholesky = defprimitive("cholesky", lambda a: np.linalg.cholesky(a), _cholesky_augmented,
                        _cholesky_reverse, _cholesky_forward)


def _cholesky(a, /, *, upper=False):
    chol = cholesky(a)
    return _mT(chol) if upper else chol


register_function(np.linalg.cholesky, _cholesky)


# -- eigh: a = V diag(w) V^T ---------------------------------------------------------------------
def _eigh_augmented(cfg, a, UPLO="L"):
    w, v = eigh(a, UPLO=UPLO)
    return (w, v), (w, v)


def _eigh_reverse(cfg, saved, g):
    w, v = saved
    gw, gv = g
    inner = None if gw is None else _diag_embed(gw)
    if gv is not None:
        inner = add_tangents(inner, _gap_inverse(w) * (_mT(v) @ gv))
    return (_sym(v @ inner @ _mT(v)),)


def _eigh_forward(cfg, primals, tangents, UPLO="L"):
    w, v = eigh(primals[0], UPLO=UPLO)
    m = _mT(v) @ _sym(tangents[0]) @ v
    return (w, v), (_diag(m), v @ (_gap_inverse(w) * m))


eigh = defprimitive("eigh", lambda a, UPLO="L": tuple(np.linalg.eigh(a, UPLO=UPLO)),
                    _eigh_augmented, _eigh_reverse, _eigh_forward, multiple_results=True)
register_function(np.linalg.eigh, lambda a, UPLO="L": EighResult(*eigh(a, UPLO=UPLO)))


# eigenvalues only: d w_i = v_i^T dA v_i, which stays defined for repeated eigenvalues.
def _eigvalsh_augmented(cfg, a, UPLO="L"):
    w, v = eigh(a, UPLO=UPLO)
    return w, v


def _eigvalsh_forward(cfg, primals, tangents, UPLO="L"):
    w, v = eigh(primals[0], UPLO=UPLO)
    return w, np.sum(v * (tangents[0] @ v), axis=-2)


eigvalsh = defprimitive("eigvalsh", lambda a, UPLO="L": np.linalg.eigvalsh(a, UPLO=UPLO),
                        _eigvalsh_augmented,
                        lambda cfg, v, g: ((v * g[..., None, :]) @ _mT(v),),
                        _eigvalsh_forward)
register_function(np.linalg.eigvalsh, lambda a, UPLO="L": eigvalsh(a, UPLO=UPLO))


# -- svd (reduced): a = U diag(s) Vh --------------------------------------------------------------
def _svd_augmented(cfg, a, hermitian=False):
    u, s, vh = svd(a, hermitian=hermitian)
    return (u, s, vh), (u, s, vh, shape_of(a)[-2:])


def _svd_reverse(cfg, saved, g):
    u, s, vh, (m, n) = saved
    gu, gs, gvh = g
    s_row, s_col = s[..., None, :], s[..., :, None]     # x * s_row = x S, s_col * x = S x
    f = _gap_inverse(s * s)
    inner = None if gs is None else _diag_embed(gs)
    if gu is not None:
        k = f * (_mT(u) @ gu)
        inner = add_tangents(inner, (k + _mT(k)) * s_row)
    if gvh is not None:
        k = f * (vh @ _mT(gvh))
        inner = add_tangents(inner, s_col * (k + _mT(k)))
    ga = u @ inner @ vh
    if gu is not None and m > n:                         # (I - U U^T) gU S^-1 Vh
        ga = ga + ((gu - u @ (_mT(u) @ gu)) / s_row) @ vh
    if gvh is not None and n > m:                        # U S^-1 gVh (I - V Vh)
        ga = ga + u @ ((gvh - (gvh @ _mT(vh)) @ vh) / s_col)
    return (ga,)


def _svd_forward(cfg, primals, tangents, hermitian=False):
    a, = primals
    ta, = tangents
    u, s, vh = svd(a, hermitian=hermitian)
    v = _mT(vh)
    m, n = shape_of(a)[-2:]
    s_row, s_col = s[..., None, :], s[..., :, None]
    f = _gap_inverse(s * s)
    j = _mT(u) @ ta @ v
    js, sj = j * s_row, s_col * j
    du = u @ (f * (js + _mT(js)))
    dv = v @ (f * (sj + _mT(sj)))
    if m > n:
        tav = ta @ v
        du = du + (tav - u @ (_mT(u) @ tav)) / s_row
    if n > m:
        tatu = _mT(ta) @ u
        dv = dv + (tatu - v @ (vh @ tatu)) / s_row
    return (u, s, vh), (du, _diag(j), _mT(dv))


svd = defprimitive("svd", lambda a, hermitian=False: tuple(np.linalg.svd(
    a, full_matrices=False, **_hermitian(hermitian))), _svd_augmented, _svd_reverse,
    _svd_forward, multiple_results=True)


# singular values only: ds_i = u_i^T dA v_i, defined for repeated singular values too.
def _svdvals_augmented(cfg, a, hermitian=False):
    u, s, vh = svd(a, hermitian=hermitian)
    return s, (u, vh)


def _svdvals_reverse(cfg, saved, g):
    u, vh = saved
    return ((u * g[..., None, :]) @ vh,)


def _svdvals_forward(cfg, primals, tangents, hermitian=False):
    u, s, vh = svd(primals[0], hermitian=hermitian)
    return s, np.sum(u * (tangents[0] @ _mT(vh)), axis=-2)


svdvals = defprimitive(
    "svdvals", lambda a, hermitian=False: np.linalg.svd(a, compute_uv=False,
                                                         **_hermitian(hermitian)),
    _svdvals_augmented, _svdvals_reverse, _svdvals_forward)
register_function(np.linalg.svdvals, lambda x: svdvals(x))


def _svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    if not compute_uv:
        return svdvals(a, hermitian=hermitian)
    m, n = shape_of(a)[-2:]
    if full_matrices and m != n:
        raise NotImplementedError(
            "the derivative of np.linalg.svd with full_matrices=True is not defined for a "
            f"non-square ({m}x{n}) input: the extra singular vectors are not unique. Use "
            "full_matrices=False, or compute_uv=False for singular values only")
    return SVDResult(*svd(a, hermitian=hermitian))


register_function(np.linalg.svd, _svd)


# -- qr (reduced, m >= n) -------------------------------------------------------------------------
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
    # upper triangle of c, mirrored into the lower one
    upper = 1 - _tril_mask(n, r, -1)
    y = c * upper + _mT(c) * (1 - upper)
    return (_mT(solve(r, _mT(add_tangents(gq, q @ y)))),)      # (gQ + Q y) R^-T


def _qr_forward(cfg, primals, tangents):
    q, r = qr(primals[0])
    c = _mT(solve(_mT(r), _mT(tangents[0])))                   # dA R^-1
    x = _mT(q) @ c
    lower = x * _tril_mask(shape_of(r)[-1], r, -1)
    omega = lower - _mT(lower)
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


for _prim in (cholesky, eigh, eigvalsh, svd, svdvals, qr):
    refuse_complex(_prim, f"np.linalg.{_prim.name}", "real symmetric or orthogonal factors")
