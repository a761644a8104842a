"""np.linalg: inv, solve, det, slogdet, pinv, lstsq, matrix_power, tensorinv, tensorsolve and
the array-API aliases.

Real and complex floating-point matrices; leading dimensions are batch ("stacked" matrices)
wherever NumPy allows them. Every rule is written with differentiable NumPy calls (matmul,
solve, transpose, conj, ...), so second derivatives work and the same code runs on CuPy arrays.
Complex rules follow the transpose convention of docs/complex.md (see `ops.linalg_common`).

Conventions and assumptions (derivatives exist only where the function is smooth):

- inv, solve, slogdet, matrix_power(n < 0) assume an invertible matrix. det's first
  derivative (the cofactor matrix, through an SVD) holds for singular matrices too; its
  second derivatives assume an invertible one.
- eigh, eigvalsh, cholesky and the hermitian=True paths of svd and pinv read ONE triangle of
  their input (eigh/eigvalsh: UPLO, default 'L'; cholesky: the lower one, or the upper one with
  upper=True; svd/pinv: the lower one) and ignore the diagonal's imaginary part. Their
  derivatives are those of that function: the entries of the other triangle get a zero
  derivative, and a symmetric input gets no special treatment. For the derivative "with respect
  to a symmetric matrix", symmetrise before the call: eigh(0.5 * (a + a.T)).
- eigh (vectors): derivatives divide by eigenvalue gaps, so they are undefined (inf/nan) for
  degenerate eigenvalues, and for a gap within rounding of them (1000 eps of the largest),
  which rounding leaves between a double eigenvalue's two copies. Eigenvalues alone are fine there: eigvalsh, or eigh in reverse mode
  with only `w` used (forward mode still computes the undefined eigenvector tangent). Complex
  eigenvectors are unique up to a phase per column: the derivative takes the phase fixed by
  diag(V^H dV) = 0, so only phase-invariant functions of them (|v|, v v^H, ...) have derivatives
  that match differences of LAPACK's output.
- eig, eigvals: distinct eigenvalues (derivatives divide by w_j - w_i; inf/nan otherwise).
  Eigenvectors are differentiated in LAPACK's normalisation (unit 2-norm, largest-modulus
  component real); for real input their sign is not continuous, so differentiate sign-invariant
  functions of them (see `ops.linalg_eig`).
- svd: the differentiable path is full_matrices=False (or a square input); U and Vh
  derivatives assume distinct, nonzero singular values; for complex input the phase of each
  pair (u_i, v_i) is free, and the derivative takes Im diag(V^H dV) = 0, so use
  phase-invariant functions (u @ diag(s) @ vh, |u|, s). Singular values alone (compute_uv=False,
  svdvals, norms 2/-2/'nuc') need no such assumption for first derivatives. full_matrices=True on
  a non-square input raises NotImplementedError (the extra columns are not unique).
- qr: mode 'reduced' (or 'complete' for square input) and 'r', with m >= n and full rank.
- pinv and lstsq: the rank must be locally constant (full rank in practice); lstsq's
  residuals and singular values are differentiable, its rank is not. A cutoff (rcond, rtol)
  that drops nonzero singular values truncates the SVD, whose derivative is not implemented:
  refused (one that drops only zero ones, a rank-deficient product, is differentiated).

The factorisations live in `ops.linalg_factor` (cholesky, eigh, eigvalsh, qr), `ops.linalg_svd`
(svd, svdvals) and `ops.linalg_eig` (eig, eigvals); the norms (norm, vector_norm, matrix_norm,
cond) in `ops.linalg_norms`; shared helpers in `ops.linalg_common`.
"""
from __future__ import annotations

import math
import operator

import numpy as np

from tape.backend import array_module
from tape.core import peek, primal
from tape.rules import inactive, register_function

from ._util import add_tangents, defprimitive, shape_of, unbroadcast
from .linalg_common import (SlogdetResult, _as_array, _cj, _eye, _expand2, _hermitian, _mH,
                            _mT, check_square, hermitian_from_triangle, triangle_adjoint)


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
    a, b = _as_array(a), _as_array(b)
    if len(shape_of(b)) == 1:
        return solve(a, b[:, None])[..., 0]
    return solve(a, b)


register_function(np.linalg.solve, _solve)


# -- det: d det a = <C, da> with the cofactor matrix C = adj(a)^T (= det(a) a^-T) ----------------
def _cofactor_value(a):
    """adj(a)^T: det(a) a^-T where `a` is well conditioned, otherwise through the SVD."""
    xp = array_module(a)
    if a.size == 0:
        return xp.zeros_like(a)
    fast = _cofactor_by_inverse(xp, a)
    return fast if fast is not None else _cofactor_by_svd(xp, a)


def _cofactor_by_inverse(xp, a):
    """det(a) a^-T, or None unless every matrix of the stack is well conditioned.

    Both factors carry a relative error of about cond(a) eps, so the inverse is used only when
    its residual |a a^-1 - I| (about cond(a) eps as well) is below sqrt(eps) / 100: a relative
    error under 1e-10 in float64. An exactly singular `a` (LinAlgError, or the NaNs and
    infinities CuPy gives) fails the test too."""
    try:
        ainv = xp.linalg.inv(a)
    except np.linalg.LinAlgError:
        return None
    n = a.shape[-1]
    residual = xp.abs(a @ ainv - xp.eye(n, dtype=a.dtype)).max()
    if not bool(residual <= 0.01 * math.sqrt(float(xp.finfo(a.dtype).eps))):
        return None
    return xp.linalg.det(a)[..., None, None] * xp.swapaxes(ainv, -1, -2)


def _cofactor_by_svd(xp, a):
    """adj(a)^T through the SVD a = U diag(s) V^H: adj(a) = det(U) det(V^H) V adj(diag s) U^H
    with adj(diag s) = diag(prod_{j != i} s_j). Unlike det(a) a^-T it needs no inverse: exact
    for a singular `a` (rank n - 1 keeps one term, rank <= n - 2 gives 0)."""
    u, s, vh = xp.linalg.svd(a)
    ones = xp.ones_like(s[..., :1])
    before = xp.cumprod(xp.concatenate([ones, s[..., :-1]], axis=-1), axis=-1)
    after = xp.cumprod(xp.concatenate([ones, s[..., :0:-1]], axis=-1), axis=-1)[..., ::-1]
    others = (before * after).astype(u.dtype)           # prod_{j != i} s_j, no division
    phase = xp.linalg.det(u) * xp.linalg.det(vh)        # +-1, or a unit complex number
    adjugate = (xp.conj(xp.swapaxes(vh, -1, -2)) * others[..., None, :]) @ xp.conj(
        xp.swapaxes(u, -1, -2))
    return xp.swapaxes(adjugate * phase[..., None, None], -1, -2)


def _cofactor_derivative_at(a, c, da, transpose_da):
    # dC = tr(a^-1 da) C - C da^T a^-T for an invertible a (second derivatives of det assume
    # one, as inv's do); `transpose_da` gives the reverse rule's adjoint of this map.
    b = _mT(inv(a))
    if transpose_da:
        return _expand2(np.sum(da * c, axis=(-2, -1))) * b - b @ _mT(da) @ c
    return _expand2(np.sum(b * da, axis=(-2, -1))) * c - c @ _mT(da) @ b


cofactor = defprimitive(
    "cofactor", _cofactor_value, lambda cfg, a: (cofactor(a), a),
    lambda cfg, a, g: (_cofactor_derivative_at(a, cofactor(a), g, True),),
    lambda cfg, primals, tangents: (
        cofactor(primals[0]),
        _cofactor_derivative_at(primals[0], cofactor(primals[0]), tangents[0], False)))


def _logdet_tangent(a, ta):
    return np.sum(_mT(inv(a)) * ta, axis=(-2, -1))


def _det_augmented(cfg, a):
    return det(a), a


def _det_reverse(cfg, a, g):
    return (_expand2(g) * cofactor(a),)


def _det_forward(cfg, primals, tangents):
    return det(primals[0]), np.sum(cofactor(primals[0]) * tangents[0], axis=(-2, -1))


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
# dX = -X dA X + X X^H dA^H (I - A X) + (I - X A) dA^H X^H X, with X = pinv(A). The reverse rule
# is its adjoint in the transpose convention: ^H of dA becomes conj of the cotangent.
def _pinv_jvp(a, x, da):
    dah, xh = _mH(da), _mH(x)
    return (-(x @ da @ x) + (x @ xh) @ (dah - (dah @ a) @ x)
            + (dah - x @ (a @ dah)) @ (xh @ x))


def _pinv_vjp(a, x, g):
    xt, gh, xc, ac = _mT(x), _mH(g), _cj(x), _cj(a)
    return (-(xt @ g @ xt) + (gh - ac @ (xc @ gh)) @ (xc @ xt)
            + (xt @ xc) @ (gh - (gh @ xc) @ ac))


def _refuse_truncation(a, cutoff, name: str) -> None:
    """Golub & Pereyra's derivative is that of a rank that does not change: exact where the
    singular values a cutoff drops are zero (to rounding). A cutoff (`rcond`, `rtol`) that
    drops nonzero ones truncates the SVD, whose derivative has gap terms it lacks (wrong by
    about the dropped value): refused."""
    if cutoff is None:
        return
    v = primal(a)
    xp = array_module(v)
    s = xp.linalg.svd(v, compute_uv=False)
    top = xp.max(s, axis=-1, keepdims=True)
    rounding = 10 * max(shape_of(a)[-2:]) * float(xp.finfo(s.dtype).eps) * top
    dropped = (s <= xp.asarray(cutoff)[..., None] * top) & (s > rounding)
    if bool(xp.any(dropped)):
        raise NotImplementedError(
            f"the derivative of {name} with a cutoff that drops nonzero singular values (here "
            f"{float(xp.max(xp.where(dropped, s, 0)))!r}) is not implemented: it is that of a "
            "truncated SVD. Lower the cutoff to keep them, or truncate explicitly with "
            "np.linalg.svd, which is differentiated (v[:, :r] / s[:r] @ u[:, :r].T)")


# With hermitian=True NumPy reads the lower triangle only: the rules differentiate pinv of the
# Hermitian matrix built from it, and map the derivative back to that triangle.
def _pinv_augmented(cfg, a, **kw):
    _refuse_truncation(a, kw.get("rcond", kw.get("rtol")), "pinv")
    x = pinv(a, **kw)
    hermitian = kw.get("hermitian", False)
    return x, (hermitian_from_triangle(a, True) if hermitian else a, x, hermitian)


def _pinv_reverse(cfg, saved, g):
    a, x, hermitian = saved
    ga = _pinv_vjp(a, x, g)
    return (triangle_adjoint(ga, True) if hermitian else ga,)


def _pinv_forward(cfg, primals, tangents, **kw):
    _refuse_truncation(primals[0], kw.get("rcond", kw.get("rtol")), "pinv")
    a, ta = primals[0], tangents[0]
    if kw.get("hermitian", False):
        a, ta = hermitian_from_triangle(a, True), hermitian_from_triangle(ta, True)
    x = pinv(primals[0], **kw)
    return x, _pinv_jvp(a, x, ta)


pinv = defprimitive("pinv", lambda a, **kw: np.linalg.pinv(a, **kw), _pinv_augmented,
                    _pinv_reverse, _pinv_forward)


def _pinv(a, rcond=None, hermitian=False, **kw):
    # Only the options given are passed on (CuPy's pinv knows rcond alone).
    if rcond is not None:
        kw["rcond"] = rcond
    return pinv(a, **kw, **_hermitian(hermitian))


register_function(np.linalg.pinv, _pinv)


# -- lstsq: x = pinv(a) b; computed once by LAPACK, passed in as `solution` -----------------------
def _lstsq_augmented(cfg, a, b, solution, rcond=None):
    _refuse_truncation(a, rcond, "lstsq")
    return lstsq_solution(a, b, solution=solution, rcond=rcond), (a, b, pinv(a))


def _lstsq_reverse(cfg, saved, g):
    a, b, a_pinv = saved
    ga = gb = None
    if cfg.active[0]:
        outer = g[:, None] * b[None, :] if len(shape_of(b)) == 1 else g @ _mT(b)
        ga = _pinv_vjp(a, a_pinv, outer)
    if cfg.active[1]:
        gb = _mT(a_pinv) @ g
    return ga, gb


def _lstsq_forward(cfg, primals, tangents, solution, rcond=None):
    _refuse_truncation(primals[0], rcond, "lstsq")
    a, b = primals
    ta, tb = tangents
    a_pinv = pinv(a)
    t = add_tangents(None if ta is None else _pinv_jvp(a, a_pinv, ta) @ b,
                     None if tb is None else a_pinv @ tb)
    return lstsq_solution(a, b, solution=solution, rcond=rcond), t


lstsq_solution = defprimitive("lstsq", lambda a, b, solution, rcond=None: solution,
                              _lstsq_augmented, _lstsq_reverse, _lstsq_forward)


@inactive
def _lstsq_plain(a, b, rcond):
    """LAPACK's solution and rank, as arrays: a compiled function replays this call (a step of
    its program, run again on each call's values) instead of guarding on a and b."""
    x, _, rank, _ = np.linalg.lstsq(a, b, rcond=rcond)
    return x, array_module(x).asarray(rank)


def _lstsq(a, b, rcond=None):
    b = _as_array(b)
    x, rank = _lstsq_plain(a, b, rcond)
    x = lstsq_solution(a, b, solution=x, rcond=rcond)
    (m, n), b_shape = shape_of(a), shape_of(b)
    if m > n and rank == n:   # NumPy reports residuals only for a tall, full-rank a
        r = b - a @ x         # |r|^2 per column, real for complex r too
        square = np.real(r) ** 2 + np.imag(r) ** 2 if np.iscomplexobj(r) else r * r
        residuals = np.reshape(np.sum(square, axis=0), (1,) if len(b_shape) == 1 else b_shape[1:])
    else:
        x_plain = peek(x)   # its dtype and module only
        residuals = array_module(x_plain).zeros((0,), dtype=x_plain.real.dtype)
    # np.linalg.svdvals is this same call; CuPy has only the svd form.
    return x, residuals, rank[()], np.linalg.svd(a, compute_uv=False)


register_function(np.linalg.lstsq, _lstsq)


# -- matrix_power: repeated squaring, as NumPy does ------------------------------------------------
def _matrix_power(a, n):
    n = operator.index(n)
    check_square(a, "np.linalg.matrix_power")
    if n == 0:   # a constant: the identity, in a's dtype and batch shape
        return np.zeros_like(a) + _eye(shape_of(a)[-1], primal(a))
    if n < 0:
        a, n = inv(a), -n
    if n == 3:   # NumPy's own order for a cube
        return (a @ a) @ a
    result = None
    while True:
        if n & 1:
            result = a if result is None else result @ a
        n >>= 1
        if not n:
            return result
        a = a @ a


register_function(np.linalg.matrix_power, _matrix_power)


# -- tensorinv and tensorsolve: inv and solve of the matrix the tensor is reshaped to ---------
def _tensorinv(a, ind=2):
    if ind <= 0:
        raise ValueError("Invalid ind argument.")
    shape = shape_of(a)
    rows = math.prod(shape[ind:])
    return np.reshape(inv(np.reshape(a, (rows, -1))), shape[ind:] + shape[:ind])


def _tensorsolve(a, b, axes=None):
    a, b = _as_array(a), _as_array(b)
    an, bn = len(shape_of(a)), len(shape_of(b))
    if axes is not None:   # the given axes move to the end, as NumPy does
        a = np.transpose(a, [k for k in range(an) if k not in axes] + list(axes))
    shape = shape_of(a)[-(an - bn):]
    size = math.prod(shape)
    if math.prod(shape_of(a)) != size ** 2:
        raise np.linalg.LinAlgError(
            f"np.linalg.tensorsolve: a of shape {shape_of(a)} and b of shape {shape_of(b)} "
            "must satisfy prod(a.shape[b.ndim:]) == prod(a.shape[:b.ndim])")
    x = np.linalg.solve(np.reshape(a, (size, size)), np.reshape(b, (size,)))
    return np.reshape(x, shape)


register_function(np.linalg.tensorinv, _tensorinv)
register_function(np.linalg.tensorsolve, _tensorsolve)


# -- the rest of np.linalg: matrix_rank has no derivative; the array-API aliases of functions
# whose rules live elsewhere are routed to them.
register_function(np.linalg.matrix_rank, inactive(np.linalg.matrix_rank))
register_function(np.linalg.matmul, lambda x1, x2, /: np.matmul(x1, x2))
register_function(np.linalg.matrix_transpose, lambda x, /: _mT(x))


def _linalg_outer(x1, x2, /):
    if np.ndim(x1) != 1 or np.ndim(x2) != 1:   # np.outer would flatten them; this one refuses
        raise ValueError(f"Input arrays must be one-dimensional, but they are "
                         f"x1.ndim={np.ndim(x1)} and x2.ndim={np.ndim(x2)}.")
    return np.outer(x1, x2)


register_function(np.linalg.outer, _linalg_outer)
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
def _multi_dot(arrays, *, out=None):
    """np.linalg.multi_dot (a traced `out` is written by the tracer before this is called)."""
    if out is not None:
        raise NotImplementedError("np.linalg.multi_dot(..., out=) with a plain `out` is not "
                                  "supported on traced values; allocate it with np.zeros_like")
    if len(arrays) < 2:
        raise ValueError("Expecting at least two arrays.")
    if len(arrays) == 2:
        return np.dot(arrays[0], arrays[1])
    # NumPy's order of products (the cheapest), so that rounding is NumPy's too: a float32
    # (a @ a) rounded before meeting a float64 vector is not a @ (a @ v).
    arrays = [_as_array(a) for a in arrays]
    first, last = len(shape_of(arrays[0])), len(shape_of(arrays[-1]))
    if first == 1:
        arrays[0] = np.reshape(arrays[0], (1, -1))
    if last == 1:
        arrays[-1] = np.reshape(arrays[-1], (-1, 1))
    dims = [shape_of(a)[0] for a in arrays] + [shape_of(arrays[-1])[1]]
    result = _chain(arrays, _chain_order(dims), 0, len(arrays) - 1)
    if first == 1 and last == 1:
        return result[0, 0]
    return np.reshape(result, (-1,)) if first == 1 or last == 1 else result


def _chain_order(dims):
    """The split of each sub-chain i..j that needs the fewest multiplications (NumPy's
    matrix-chain order; for three matrices, its cost comparison of (AB)C and A(BC))."""
    n = len(dims) - 1
    cost = [[0.0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            cost[i][j] = math.inf
            for k in range(i, j):
                q = cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1]
                if q < cost[i][j]:
                    cost[i][j], split[i][j] = q, k
    return split


def _chain(arrays, split, i, j):
    if i == j:
        return arrays[i]
    k = split[i][j]
    return np.dot(_chain(arrays, split, i, k), _chain(arrays, split, k + 1, j))


register_function(np.linalg.multi_dot, _multi_dot)
