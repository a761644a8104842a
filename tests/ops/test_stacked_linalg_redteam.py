"""Red-team of np.linalg and tape.scipy.linalg on stacked (batched) matrices: broadcasting a
single matrix against a stack, NumPy 2's 1-D-only vector rhs, stacks with no matrices and
0x0 matrices, float32 stacks, Hessians and compiled replays on stacks, and SciPy's batched
linear algebra. Shapes already swept elsewhere (batches (2,) and (1, 2), complex input, norm
axes) are not repeated here.
"""
import warnings

import numpy as np
import pytest
import scipy.linalg as sl

import tape.scipy.linalg as tl
from tape import (Active, Duplicated, Forward, Reverse, autodiff, compile, gradient, hessian,
                  jacobian)
from tape.testing import check_grads, traced_value
from numeric_checks import fd_jacobian_of

L = np.linalg
RNG = np.random.default_rng(20240607)


def general(*batch, n=3, rng=RNG):
    return rng.standard_normal(batch + (n, n)) + 3 * np.eye(n)


def spd(*batch, n=3, rng=RNG):
    x = rng.standard_normal(batch + (n, n))
    return x @ np.swapaxes(x, -1, -2) + n * np.eye(n)


def separated_spd(*batch, n=3, rng=RNG):
    """Symmetric stacks with eigenvalues 1, 2, 3, ... (vector derivatives need gaps)."""
    out = []
    for _ in range(int(np.prod(batch))):
        q, _ = np.linalg.qr(rng.standard_normal((n, n)))
        out.append((q * (1.0 + np.arange(n))) @ q.T)
    return np.array(out).reshape(batch + (n, n))


def same(got, want, rtol=1e-10, atol=1e-12):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert np.shape(g) == np.shape(w)
        assert np.result_type(g) == np.result_type(w)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


# -- solve: a single matrix against a stack, and NumPy 2's rule for the rhs -----------------------
SOLVE_CASES = {
    "A[3,4,4] b[4,4] (2-D rhs is a matrix)": (general(3, n=4), RNG.standard_normal((4, 4))),
    "A[4,4] B[2,3,4,1]": (general(n=4), RNG.standard_normal((2, 3, 4, 1))),
    "A[2,1,3,3] B[4,3,2]": (general(2, 1), RNG.standard_normal((4, 3, 2))),
    "A[1,3,3] b[3]": (general(1), RNG.standard_normal(3)),
    "complex A[3,3] B[2,3,2]": (general() + 1j * RNG.standard_normal((3, 3)),
                                RNG.standard_normal((2, 3, 2)) + 1j),
    "real A[2,3,3] complex b[3]": (general(2), RNG.standard_normal(3) * (1 + 2j)),
    "1x1 A[4,1,1] b[1]": (general(4, n=1), RNG.standard_normal(1)),
}


@pytest.mark.parametrize("name", sorted(SOLVE_CASES))
def test_solve_broadcasts_as_numpy(name):
    a, b = SOLVE_CASES[name]
    same(traced_value(L.solve, a, b), L.solve(a, b))
    check_grads(L.solve, a, b, order=1, modes=("fwd", "rev"))


def test_solve_refuses_a_2d_rhs_that_numpy_2_refuses():
    # b of shape (3, 4) is a matrix with 3 rows (not a stack of vectors) for a 4x4 system
    a, b = general(3, n=4), RNG.standard_normal((3, 4))
    with pytest.raises(ValueError):
        L.solve(a, b)
    with pytest.raises(ValueError):
        gradient(Reverse, lambda a: np.sum(L.solve(a, b)), a)


# -- stacks with no matrices, and stacks of 0x0 matrices ------------------------------------------
EMPTY = {
    "inv": (L.inv, general),
    "det": (L.det, general),
    "slogdet": (lambda x: L.slogdet(x).logabsdet, general),
    "solve[vector]": (lambda x: L.solve(x, np.ones(np.shape(x)[-1])), general),
    "cholesky": (L.cholesky, spd),
    "eigh": (lambda x: L.eigh(x)[0] + np.sum(L.eigh(x)[1] ** 2, axis=-2), spd),
    "eigvalsh": (L.eigvalsh, spd),
    "qr": (lambda x: L.qr(x)[1] ** 2, general),
    "svd": (lambda x: (lambda u, s, vh: (u * s[..., None, :]) @ vh)(*L.svd(x)), general),
    "svdvals": (L.svdvals, general),
    "pinv": (L.pinv, general),
    "matrix_power[-2]": (lambda x: L.matrix_power(x, -2), general),
    "matrix_power[3]": (lambda x: L.matrix_power(x, 3), general),
    "norm[2]": (lambda x: L.norm(x, 2, axis=(-2, -1)), general),
    "norm[nuc]": (lambda x: L.norm(x, "nuc", axis=(-1, -2)), general),
    "cond": (L.cond, general),
    "eigvals": (lambda x: np.abs(L.eigvals(x)), general),
}


@pytest.mark.parametrize("name, shape", [
    (name, shape) for name in sorted(EMPTY) for shape in [(0, 3), (2, 0)]
    if (name, shape) not in (("cond", (2, 0)), ("norm[2]", (2, 0)))])   # findings below
def test_empty_stacks_give_numpy_shapes_and_empty_derivatives(name, shape):
    f, make = EMPTY[name]
    a = make(shape[0], n=shape[1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # cond of a 0x0 matrix divides 0 / 0
        try:
            want = f(a)
        except (ValueError, np.linalg.LinAlgError) as e:   # NumPy's own refusal: the same one
            with pytest.raises(type(e)):
                traced_value(f, a)
            return
        same(traced_value(f, a), want)
        y = lambda x: np.sum(f(x))  # noqa: E731
        (g,) = gradient(Reverse, y, a)
        assert g.shape == a.shape and g.dtype == a.dtype
        (t,) = jacobian(Forward, y, a)
        assert np.shape(t) == a.shape


def test_einsum_matmul_and_multi_dot_over_empty_batches():
    a, b = RNG.standard_normal((0, 4, 3)), RNG.standard_normal((3, 2))
    f = lambda a: np.einsum("bij,jk->bik", a, b) + a @ b  # noqa: E731
    same(traced_value(f, a), f(a))
    (g,) = gradient(Reverse, lambda a: np.sum(f(a)), a)
    assert g.shape == a.shape
    m = lambda x: L.multi_dot([x, RNG.standard_normal((0, 4)), np.ones((4, 2))])  # noqa: E731
    x = RNG.standard_normal((2, 0))
    assert traced_value(m, x).shape == (2, 2)
    (g,) = gradient(Reverse, lambda x: np.sum(m(x)), x)
    assert g.shape == (2, 0)


# -- float32 stacks: NumPy's dtype, values within float32 rounding, float32 derivatives -----------
F32 = {
    "inv": (L.inv, general),
    "det": (L.det, general),
    "slogdet": (lambda x: L.slogdet(x).logabsdet, general),
    "solve[broadcast]": (lambda x: L.solve(x[0], np.ones((2, 3, 1), np.float32)), general),
    "cholesky": (L.cholesky, spd),
    "eigvalsh": (L.eigvalsh, spd),
    "eigh |v|": (lambda x: L.eigh(x)[1] ** 2, separated_spd),
    "qr r**2": (lambda x: L.qr(x)[1] ** 2, general),
    "svdvals": (L.svdvals, general),
    "pinv": (L.pinv, general),
    "matrix_power[-2]": (lambda x: L.matrix_power(x, -2), general),
    "norm[2]": (lambda x: L.norm(x, 2, axis=(-2, -1)), general),
    "einsum batch": (lambda x: np.einsum("...ij,...jk->...ik", x, x[:1]), general),
}


@pytest.mark.parametrize("name", sorted(F32))
def test_float32_stacks(name):
    f, make = F32[name]
    a = make(2).astype(np.float32)
    want = f(a)
    got = traced_value(f, a)
    assert np.result_type(got) == np.result_type(want) == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    y = lambda x: np.sum(np.sin(f(x)))  # noqa: E731
    (g,) = gradient(Reverse, y, a)
    assert g.dtype == np.float32
    (g64,) = gradient(Reverse, y, a.astype(np.float64))
    np.testing.assert_allclose(g, g64, rtol=1e-3, atol=1e-3)
    t = autodiff(Forward, y, Duplicated(a, np.ones_like(a)))[0]
    assert np.result_type(t) == np.float32


# -- second order and compiled replays on stacks --------------------------------------------------
W = np.array([0.3, -0.7, 1.1])


def _eigh_weighted(a):   # gauge-invariant: eigenvalues and squared eigenvector entries
    w, v = L.eigh(a)
    return np.sum(w * W) + np.sum(np.sin(v ** 2) * W)


def _svd_product(a):     # U S V^T rebuilt, and the singular values weighted
    u, s, vh = L.svd(a, full_matrices=False)
    return np.sum(np.cos((u * s[..., None, :]) @ vh)) + np.sum(s * W[:s.shape[-1]])


def _qr_invariant(a):    # R_ii^2 and Q R do not depend on LAPACK's signs
    q, r = L.qr(a)
    return np.sum(np.diagonal(r, axis1=-2, axis2=-1) ** 2 * W) + np.sum(np.sin(q @ r))


SECOND = {
    "det of a stack": (lambda a: np.sum(np.sin(L.det(a))), general),
    "solve single matrix against a stack": (
        lambda a: np.sum(np.sin(L.solve(a[0], np.arange(4.0 * a.shape[-1]).reshape(
            2, a.shape[-1], 2) / 5))), general),
    "eigh weighted": (_eigh_weighted, separated_spd),
    "slogdet and inv": (lambda a: np.sum(L.slogdet(a)[1]) + np.sum(L.inv(a)[..., 0, :]),
                        general),
}
COMPILED = dict(SECOND, **{
    "svd product": (_svd_product, lambda *b: general(*b) + np.diag([2.0, 0, -1])),
    "qr invariant": (_qr_invariant, general),
    "norm 2 and nuc, reversed axes": (
        lambda a: np.sum(L.norm(a, 2, axis=(-1, -2)) * L.norm(a, "nuc", axis=(-2, -1))),
        lambda *b: general(*b) + np.diag([2.0, 0, -1])),
    "multi_dot of stack slices": (lambda a: np.sum(L.multi_dot([a[0], a[1], a[0][:, :1]])),
                                  general),
    "matmul vector against a stack": (lambda a: np.sum(np.tanh(np.ones(3) @ a @ a)), general),
    "pinv and matrix_power": (lambda a: np.sum(L.pinv(a) * L.matrix_power(a, -1)), general),
})


def _fd_hessian(f, a, eps=1e-5):
    """Row i: central differences of the reverse-mode gradient along entry i."""
    return fd_jacobian_of(lambda v: gradient(Reverse, f, v)[0], a, eps).T


@pytest.mark.parametrize("name", sorted(SECOND))
def test_hessian_of_stacked_functions(name):
    f, make = SECOND[name]
    a = make(2, n=2) if name != "eigh weighted" else make(2)
    h = np.reshape(hessian(f, a), (a.size, a.size))
    fd = _fd_hessian(f, a)
    np.testing.assert_allclose(h, fd, rtol=1e-6, atol=1e-6 * max(1.0, np.abs(fd).max()))


@pytest.mark.parametrize("name", sorted(COMPILED))
def test_compiled_stacks_replay_as_eager(name):
    f, make = COMPILED[name]
    rev = compile(Reverse, f, Active, Active)
    fwd = compile(Forward, f, Duplicated, Duplicated)
    for a in (make(2), make(2), make(3)):   # two values, then another batch size
        (want,), = autodiff(Reverse, f, Active, Active(a))
        (got,), = rev(Active(a))
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        t = np.cos(np.arange(a.size)).reshape(a.shape)
        np.testing.assert_allclose(fwd(Duplicated(a, t))[0],
                                   autodiff(Forward, f, Duplicated(a, t))[0],
                                   rtol=1e-12, atol=1e-12)
    check_grads(f, make(2), order=1, modes=("fwd", "rev"))
    assert rev.stats.traces == 2   # one per batch size


# -- tape.scipy.linalg on stacks (SciPy >= 1.15 batches its linear algebra) ----------------------
SCIPY = {
    "inv": (tl.inv, sl.inv, lambda: (general(2),)),
    "det complex": (tl.det, sl.det, lambda: (general(2) + 1j * general(2),)),
    "solve A[3,3] B[2,3,2]": (tl.solve, sl.solve,
                              lambda: (general(), RNG.standard_normal((2, 3, 2)))),
    "solve pos lower": (lambda a, b: tl.solve(a, b, assume_a="pos", lower=True),
                        lambda a, b: sl.solve(a, b, assume_a="pos", lower=True),
                        lambda: (spd(2), RNG.standard_normal((2, 3, 2)))),
    "solve transposed": (lambda a, b: tl.solve(a, b, transposed=True),
                         lambda a, b: sl.solve(a, b, transposed=True),
                         lambda: (general(2), RNG.standard_normal((2, 3, 2)))),
    "cho_solve": (lambda a, b: tl.cho_solve(tl.cho_factor(a), b),
                  lambda a, b: sl.cho_solve(sl.cho_factor(a), b),
                  lambda: (spd(2), RNG.standard_normal((2, 3, 2)))),
    "lu_solve": (lambda a, b: tl.lu_solve(tl.lu_factor(a), b),
                 lambda a, b: sl.lu_solve(sl.lu_factor(a), b),
                 lambda: (general(2), RNG.standard_normal((2, 3, 2)))),
    "eigh |v|": (lambda a: tl.eigh(a)[1] ** 2, lambda a: sl.eigh(a)[1] ** 2,
                 lambda: (separated_spd(2),)),
    "svd u s": (lambda a: tl.svd(a)[0] * tl.svd(a)[1][..., None, :],
                lambda a: sl.svd(a)[0] * sl.svd(a)[1][..., None, :],
                lambda: (general(2) + np.diag([2.0, 0, -1]),)),
    "expm complex": (tl.expm, sl.expm, lambda: (0.3 * (general(2) + 1j * general(2)),)),
    "sqrtm": (tl.sqrtm, sl.sqrtm, lambda: (spd(2),)),
    "solve_sylvester": (tl.solve_sylvester, sl.solve_sylvester,
                        lambda: (general(2), general(2) + 1, general(2))),
}


@pytest.mark.parametrize("name", sorted(SCIPY))
def test_scipy_linalg_stacks(name):
    ours, theirs, make = SCIPY[name]
    args = make()
    same(traced_value(ours, *args), theirs(*args), rtol=1e-9, atol=1e-11)
    check_grads(ours, *args, order=1, modes=("fwd", "rev"))


# -- findings -------------------------------------------------------------------------------------
QR_SIGNS = np.stack([np.eye(2), -np.eye(2)]) + 0.1 * RNG.standard_normal((2, 2, 2))


@pytest.mark.parametrize("mode", ["full", "economic"])
def test_scipy_qr_of_a_stack_has_scipys_signs(mode):
    for part in (0, 1):   # Q, R
        same(traced_value(lambda a: tl.qr(a, mode=mode)[part], QR_SIGNS),
             sl.qr(QR_SIGNS, mode=mode)[part])


def test_scipy_qr_mode_r_of_a_stack_returns_what_scipy_returns():
    a = RNG.standard_normal((2, 4, 3))
    got = traced_value(lambda a: tl.qr(a, mode="r"), a)
    assert isinstance(got, np.ndarray) and got.shape == (2, 4, 3)


@pytest.mark.xfail(strict=True, reason=(
    "tape/scipy/linalg_matfuncs.py:110 and :115: sqrtm's derivative rules call "
    "solve_sylvester, whose SciPy routine refuses zero-size batches (ValueError), while "
    "sqrtm of a (0, n, n) stack is valid (SciPy returns an empty stack)"))
def test_scipy_sqrtm_of_an_empty_stack_is_differentiated():
    a = np.zeros((0, 3, 3))
    assert traced_value(tl.sqrtm, a).shape == (0, 3, 3)
    (g,) = gradient(Reverse, lambda a: np.sum(tl.sqrtm(a)), a)
    assert g.shape == (0, 3, 3)


@pytest.mark.parametrize("p", [None, "fro", 1])
def test_cond_of_0x0_matrices_is_refused_as_numpy_refuses(p):
    a = np.zeros((2, 0, 0))
    with pytest.raises(np.linalg.LinAlgError):
        L.cond(a, p)
    with pytest.raises(np.linalg.LinAlgError):
        traced_value(lambda x: L.cond(x, p), a)


@pytest.mark.parametrize("ord", [2, 1, np.inf])
def test_matrix_norms_of_0x0_matrices_are_zero(ord):
    a = np.zeros((2, 0, 0))
    f = lambda x: L.norm(x, ord, axis=(-2, -1))  # noqa: E731
    same(f(a), np.zeros(2))
    same(traced_value(f, a), f(a))


@pytest.mark.xfail(strict=True, reason=(
    "ops/contractions.py:109 (_refuse_keywords, :115): np.matmul / np.matvec with the "
    "gufunc keyword axes= (a stack whose matrix axes are not the last two) raise "
    "NotImplementedError on traced values; the rule is matmul after moveaxis"))
def test_matmul_with_gufunc_axes_on_a_stack():
    a, b = RNG.standard_normal((3, 4, 2)), RNG.standard_normal((4, 5, 2))
    f = lambda a, b: np.matmul(a, b, axes=[(0, 1), (0, 1), (0, 1)])  # noqa: E731
    same(traced_value(f, a, b), f(a, b))
    check_grads(f, a, b, order=1, modes=("fwd", "rev"))
