"""np.linalg: inv, solve, det, slogdet, cholesky, eigh, svd, qr, norm, pinv, lstsq, matrix_power.

Real floating-point matrices (complex ones for inv, solve, det, slogdet and matrix_power; the
factorisations refuse them, see the end of this file); leading dimensions are batch
("stacked" matrices) wherever NumPy allows them. Every rule is written with differentiable
NumPy calls (matmul, solve, transpose, ...), so second derivatives work and the same code runs
on CuPy arrays.

Conventions and assumptions (derivatives exist only where the factorisation is smooth):

- inv, solve, det, slogdet, matrix_power(n < 0) assume an invertible matrix.
- cholesky and eigh assume a symmetric input; NumPy reads one triangle only, while the
  derivative is taken with respect to the symmetric matrix (the cotangent is symmetrised,
  the tangent is symmetrised before use), as in JAX and PyTorch.
- eigh: eigenvector derivatives divide by eigenvalue gaps, so they are undefined (inf/nan) for
  degenerate eigenvalues. Eigenvalues alone are fine there: eigvalsh, or eigh in reverse mode
  with only `w` used (forward mode still computes the undefined eigenvector tangent).
- svd: the differentiable path is full_matrices=False (or a square input); U and Vh
  derivatives assume distinct, nonzero singular values. Singular values alone (compute_uv=False,
  svdvals, norms 2/-2/'nuc') need no such assumption for first derivatives. full_matrices=True on a non-square
  input raises NotImplementedError (the extra columns are not unique). With hermitian=True the
  general SVD rule is used, which is exact for symmetric perturbations.
- qr: mode 'reduced' (or 'complete' for square input) and 'r', with m >= n and full rank.
- pinv and lstsq: the rank must be locally constant (full rank in practice); lstsq's
  residuals and singular values are differentiable, its rank is not.

The factorisations (cholesky, eigh, eigvalsh, svd, svdvals, qr) live in `ops.linalg_factor`,
the norms (norm, vector_norm, matrix_norm, cond) in `ops.linalg_norms`.
"""
from __future__ import annotations

import functools
import operator
from collections import namedtuple

import numpy as np

from tape.backend import array_module
from tape.core import Tracer, primal
from tape.rules import inactive, register_function

from ._util import add_tangents, defprimitive, refuse_complex, shape_of, unbroadcast

EighResult = namedtuple("EighResult", "eigenvalues eigenvectors")
SVDResult = namedtuple("SVDResult", "U S Vh")
QRResult = namedtuple("QRResult", "Q R")
SlogdetResult = namedtuple("SlogdetResult", "sign logabsdet")


# -- helpers (all differentiable, all batch-aware) ------------------------------------------------
def _mT(x):
    """Swap the last two axes."""
    nd = len(shape_of(x))
    return np.transpose(x, tuple(range(nd - 2)) + (nd - 1, nd - 2))


def _eye(n, like):
    return array_module(like).eye(n, dtype=like.dtype)


def _diag(x):
    """The diagonal of each matrix of a stack."""
    return np.sum(x * _eye(shape_of(x)[-1], x), axis=-1)


def _diag_embed(v):
    """Diagonal matrices with the vectors of `v` on their diagonals."""
    return v[..., :, None] * _eye(shape_of(v)[-1], v)


def _tril_mask(n, like, k=0):
    xp = array_module(like)
    return xp.tril(xp.ones((n, n), dtype=like.dtype), k)


def _expand2(x):
    """Append two unit axes, so that a value per matrix broadcasts against the matrices."""
    return np.reshape(x, shape_of(x) + (1, 1))


def _sym(x):
    return 0.5 * (x + _mT(x))


def _gap_inverse(w):
    """F[..., i, j] = 1 / (w_j - w_i) off the diagonal, 0 on it."""
    eye = _eye(shape_of(w)[-1], w)
    return (1 - eye) / (w[..., None, :] - w[..., :, None] + eye)


def _as_array(x):
    return x if isinstance(x, Tracer) or hasattr(x, "shape") else np.asarray(x)


def _hermitian(hermitian):
    # CuPy's svd has no `hermitian` keyword: pass it only when it matters.
    return {"hermitian": True} if hermitian else {}


# -- inv ------------------------------------------------------------------------------------------
def _inv_augmented(cfg, a):
    ainv = inv(a)
    return ainv, ainv


def _inv_reverse(cfg, ainv, g):
    ainv_t = _mT(ainv)
    return (-(ainv_t @ g @ ainv_t),)


def _inv_forward(cfg, primals, tangents):
    ainv = inv(primals[0])
    return ainv, -(ainv @ tangents[0] @ ainv)


inv = defprimitive("inv", lambda a: np.linalg.inv(a), _inv_augmented, _inv_reverse, _inv_forward,
                   function=np.linalg.inv)


# -- solve: a x = b for a stack of matrices b (..., m, k); batch dimensions broadcast ------------
def _solve_augmented(cfg, a, b):
    x = solve(a, b)
    return x, (a, x if cfg.active[0] else None, shape_of(a), shape_of(b))


def _solve_reverse(cfg, saved, g):
    a, x, a_shape, b_shape = saved
    gb = solve(_mT(a), g)
    ga = unbroadcast(-(gb @ _mT(x)), a_shape) if cfg.active[0] else None
    return ga, unbroadcast(gb, b_shape) if cfg.active[1] else None


def _solve_forward(cfg, primals, tangents):
    a, b = primals
    ta, tb = tangents
    x = solve(a, b)
    return x, solve(a, add_tangents(tb, None if ta is None else -(ta @ x)))


solve = defprimitive("solve", lambda a, b: np.linalg.solve(a, b), _solve_augmented,
                     _solve_reverse, _solve_forward)


def _solve(a, b):
    """np.linalg.solve: `b` is a vector only when it is 1-D (NumPy 2 semantics)."""
    b = _as_array(b)
    if len(shape_of(b)) == 1:
        return solve(a, b[:, None])[..., 0]
    return solve(a, b)


register_function(np.linalg.solve, _solve)


# -- det and slogdet: d log|det a| = tr(a^-1 da) ---------------------------------------------------
def _logdet_tangent(a, ta):
    return np.sum(_mT(inv(a)) * ta, axis=(-2, -1))


def _det_augmented(cfg, a):
    d = det(a)
    return d, (a, d)


def _det_reverse(cfg, saved, g):
    a, d = saved
    return (_expand2(g * d) * _mT(inv(a)),)


def _det_forward(cfg, primals, tangents):
    d = det(primals[0])
    return d, d * _logdet_tangent(primals[0], tangents[0])


det = defprimitive("det", lambda a: np.linalg.det(a), _det_augmented, _det_reverse, _det_forward,
                   function=np.linalg.det)


def _slogdet_augmented(cfg, a):
    out = slogdet(a)
    return out, (a, out[0])


def _slogdet_reverse(cfg, saved, g):
    # With t = tr(a^-1 da): d logabsdet = Re t and d sign = sign * i Im t. A real sign is
    # piecewise constant, so its cotangent is dropped; a complex one (the phase) is smooth.
    a, sign = saved
    g_sign, g_logdet = g
    if not np.iscomplexobj(a):
        return (None if g_logdet is None else _expand2(g_logdet) * _mT(inv(a)),)
    c = None if g_logdet is None else np.real(g_logdet)
    if g_sign is not None:
        phase = -1j * np.real(1j * g_sign * sign)
        c = phase if c is None else c + phase
    return (None if c is None else _expand2(c) * _mT(inv(a)),)


def _slogdet_forward(cfg, primals, tangents):
    out = slogdet(primals[0])
    t = _logdet_tangent(primals[0], tangents[0])
    if not np.iscomplexobj(primals[0]):
        return out, (None, t)
    return out, (out[0] * 1j * np.imag(t), np.real(t))


slogdet = defprimitive("slogdet", lambda a: tuple(np.linalg.slogdet(a)), _slogdet_augmented,
                       _slogdet_reverse, _slogdet_forward, multiple_results=True)
register_function(np.linalg.slogdet, lambda a: SlogdetResult(*slogdet(a)))


# -- pinv: Golub & Pereyra's derivative for locally constant rank ---------------------------------
def _pinv_jvp(a, x, da):
    dat = _mT(da)
    return (-(x @ da @ x) + (x @ _mT(x)) @ (dat - (dat @ a) @ x)
            + (dat - x @ (a @ dat)) @ (_mT(x) @ x))


def _pinv_vjp(a, x, g):
    xt, gt = _mT(x), _mT(g)
    return (-(xt @ g @ xt) + (gt - a @ (x @ gt)) @ (x @ xt)
            + (xt @ x) @ (gt - (gt @ x) @ a))


def _pinv_augmented(cfg, a, **kw):
    x = pinv(a, **kw)
    return x, (a, x)


def _pinv_forward(cfg, primals, tangents, **kw):
    x = pinv(primals[0], **kw)
    return x, _pinv_jvp(primals[0], x, tangents[0])


pinv = defprimitive("pinv", lambda a, **kw: np.linalg.pinv(a, **kw), _pinv_augmented,
                    lambda cfg, saved, g: (_pinv_vjp(*saved, g),), _pinv_forward)


def _pinv(a, rcond=None, hermitian=False, **kw):
    # Only the options given are passed on (CuPy's pinv knows rcond alone).
    if rcond is not None:
        kw["rcond"] = rcond
    return pinv(a, **kw, **_hermitian(hermitian))


register_function(np.linalg.pinv, _pinv)


# -- lstsq: x = pinv(a) b; computed once by LAPACK, passed in as `solution` -----------------------
def _lstsq_augmented(cfg, a, b, solution):
    return lstsq_solution(a, b, solution=solution), (a, b, pinv(a))


def _lstsq_reverse(cfg, saved, g):
    a, b, a_pinv = saved
    ga = gb = None
    if cfg.active[0]:
        outer = g[:, None] * b[None, :] if len(shape_of(b)) == 1 else g @ _mT(b)
        ga = _pinv_vjp(a, a_pinv, outer)
    if cfg.active[1]:
        gb = _mT(a_pinv) @ g
    return ga, gb


def _lstsq_forward(cfg, primals, tangents, solution):
    a, b = primals
    ta, tb = tangents
    a_pinv = pinv(a)
    t = add_tangents(None if ta is None else _pinv_jvp(a, a_pinv, ta) @ b,
                     None if tb is None else a_pinv @ tb)
    return lstsq_solution(a, b, solution=solution), t


lstsq_solution = defprimitive("lstsq", lambda a, b, solution: solution, _lstsq_augmented,
                              _lstsq_reverse, _lstsq_forward)


def _lstsq(a, b, rcond=None):
    b = _as_array(b)
    x, residuals, rank, s = np.linalg.lstsq(primal(a), primal(b), rcond=rcond)
    x = lstsq_solution(a, b, solution=x)
    if np.size(residuals):   # NumPy reports them only for a tall, full-rank a
        r = b - a @ x
        residuals = np.reshape(np.sum(r * r, axis=0), np.shape(residuals))
    return x, residuals, rank, np.linalg.svdvals(a)


register_function(np.linalg.lstsq, _lstsq)


# -- matrix_power: repeated squaring, as NumPy does ------------------------------------------------
def _matrix_power(a, n):
    n = operator.index(n)
    if n == 0:
        return np.zeros_like(a) + _eye(shape_of(a)[-1], a)
    if n < 0:
        a, n = inv(a), -n
    result = None
    while True:
        if n & 1:
            result = a if result is None else result @ a
        n >>= 1
        if not n:
            return result
        a = a @ a


register_function(np.linalg.matrix_power, _matrix_power)


# -- the rest of np.linalg: matrix_rank has no derivative; the array-API aliases of functions
# whose rules live elsewhere are routed to them.
register_function(np.linalg.matrix_rank, inactive(np.linalg.matrix_rank))
register_function(np.linalg.matmul, lambda x1, x2, /: np.matmul(x1, x2))
register_function(np.linalg.matrix_transpose, lambda x, /: _mT(x))
register_function(np.linalg.outer, lambda x1, x2, /: np.outer(x1, x2))
register_function(np.linalg.tensordot, lambda x1, x2, /, *, axes=2: np.tensordot(x1, x2, axes))
register_function(np.linalg.vecdot, lambda x1, x2, /, *, axis=-1: np.sum(
    (np.conj(x1) if np.iscomplexobj(x1) else x1) * x2, axis=axis))
register_function(np.linalg.diagonal, lambda x, /, *, offset=0: np.diagonal(
    x, offset, axis1=-2, axis2=-1))
register_function(np.linalg.trace, lambda x, /, *, offset=0, dtype=None: np.trace(
    x, offset, axis1=-2, axis2=-1, dtype=dtype))


def _cross(x1, x2, /, *, axis=-1):
    # np.cross has no rule of its own; np.linalg.cross takes 3-vectors only, so spell it out.
    a, b = np.moveaxis(_as_array(x1), axis, -1), np.moveaxis(_as_array(x2), axis, -1)
    for name, x, moved in (("x1", x1, a), ("x2", x2, b)):
        if shape_of(moved)[-1] != 3:
            raise ValueError(f"np.linalg.cross: {name} of shape {shape_of(_as_array(x))} "
                             f"must have length 3 along axis {axis}")
    c = np.stack([a[..., 1] * b[..., 2] - a[..., 2] * b[..., 1],
                  a[..., 2] * b[..., 0] - a[..., 0] * b[..., 2],
                  a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]], axis=-1)
    return np.moveaxis(c, -1, axis)


register_function(np.linalg.cross, _cross)
register_function(np.linalg.multi_dot, lambda arrays, *, out=None: functools.reduce(
    np.dot, arrays))


# -- complex matrices: inv, solve, det, slogdet and matrix_power are holomorphic, so their rules
# hold as written (docs/complex.md). The factorisations are not: their rules assume real
# symmetric or orthogonal factors, so a complex input is refused rather than given a wrong
# derivative.
for _prim in (pinv, lstsq_solution):
    refuse_complex(_prim, f"np.linalg.{_prim.name}", "real symmetric or orthogonal factors")

from . import linalg_factor  # noqa: E402,F401  (cholesky, eigh, svd, qr)
from . import linalg_norms  # noqa: E402,F401  (np.linalg.norm and friends)
