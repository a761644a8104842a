"""tape.scipy.linalg: primal values against SciPy (hypothesis, random sizes and options),
derivatives against finite differences to second order (check_grads), and the one-triangle
semantics of SciPy's routines (the entries never read have derivative zero).

Inputs are well conditioned: matrices near a multiple of the identity, symmetric
positive-definite matrices with a perturbation in the triangle that is *not* read (so a rule
that read it would fail the finite-difference check).
"""
import numpy as np
import pytest
import scipy.linalg as sl
from hypothesis import given, settings
from hypothesis import strategies as st

import tape.scipy.linalg as L
from tape import Reverse, gradient
from tape.testing import check_grads, traced_value

FAST = settings(max_examples=12, deadline=None)
seeds = st.integers(0, 2 ** 32 - 1)
sizes = st.integers(1, 4)
rng = np.random.default_rng(0)


def well(seed, n, batch=()):
    """A matrix near 2 I (eigenvalues in the right half plane, far from singular)."""
    r = np.random.default_rng(seed)
    return 2 * np.eye(n) + 0.4 * r.standard_normal(batch + (n, n)) / np.sqrt(n)


def spd_with_noise(seed, n, lower):
    """SPD in the triangle read by `lower`, unrelated noise in the other one."""
    r = np.random.default_rng(seed)
    x = r.standard_normal((n, n))
    spd = x @ x.T + n * np.eye(n)
    noise = r.standard_normal((n, n))
    return spd + (np.triu(noise, 1) if lower else np.tril(noise, -1))


def same(f, g, *args, rtol=1e-9, atol=1e-10):
    """f on traced inputs (forward and reverse rules) equals g (SciPy) on plain ones."""
    want = g(*args)
    complex_result = any(np.iscomplexobj(w) for w in (want if isinstance(want, tuple)
                                                      else (want,)))
    for mode in ("forward",) if complex_result else ("forward", "reverse"):
        got = traced_value(f, *args, mode=mode)
        for u, v in zip(got if isinstance(got, tuple) else (got,),
                        want if isinstance(want, tuple) else (want,)):
            np.testing.assert_allclose(u, v, rtol=rtol, atol=atol)


# -- matrix functions -----------------------------------------------------------------------------
@FAST
@given(seeds, sizes, st.sampled_from([(), (2,)]))
def test_expm_sqrtm_primal(seed, n, batch):
    a = well(seed, n, batch)
    same(L.expm, sl.expm, a)
    same(L.sqrtm, sl.sqrtm, a)
    e = np.random.default_rng(seed + 1).standard_normal((n, n))   # SciPy's takes no batches
    same(lambda a, e: L.expm_frechet(a, e), lambda a, e: sl.expm_frechet(a, e), a[0] if batch
         else a, e)


def test_expm_second_order_and_trace_identity():
    a = 0.5 * rng.standard_normal((3, 3))
    check_grads(L.expm, a)
    check_grads(L.expm, 0.5 * rng.standard_normal((2, 2, 2)), modes=("fwd", "rev"))
    g, = gradient(Reverse, lambda a: np.trace(L.expm(a)), a)   # d tr e^A = (e^A)^T
    np.testing.assert_allclose(g, sl.expm(a).T, rtol=1e-12, atol=1e-12)


def test_expm_frechet_second_order():
    check_grads(lambda a, e: L.expm_frechet(a, e), 0.5 * rng.standard_normal((2, 2)),
                rng.standard_normal((2, 2)), modes=("fwd", "rev"))
    check_grads(lambda a, e: L.expm_frechet(a, e, compute_expm=False),
                0.5 * rng.standard_normal((2, 2)), rng.standard_normal((2, 2)), order=1)


def test_sqrtm_second_order_real_and_complex():
    a = well(1, 3)
    check_grads(L.sqrtm, a)
    check_grads(L.sqrtm, a + 0.3j * rng.standard_normal((3, 3)), modes=("fwd", "rev"))
    g, = gradient(Reverse, lambda a: np.trace(L.sqrtm(a)), np.diag([4.0, 9.0]))
    np.testing.assert_allclose(g, np.diag([0.25, 1 / 6]), atol=1e-12)


def test_expm_complex():
    check_grads(L.expm, 0.4 * (rng.standard_normal((2, 2)) + 1j * rng.standard_normal((2, 2))),
                modes=("fwd", "rev"))


# -- structured solvers ---------------------------------------------------------------------------
@FAST
@given(seeds, sizes, st.sampled_from([0, 1, 2, "N", "T", "C"]), st.booleans(), st.booleans(),
       st.sampled_from([None, 1, 2]))
def test_solve_triangular_primal(seed, n, trans, lower, unit, k):
    a = well(seed, n) + np.random.default_rng(seed).standard_normal((n, n))   # both triangles
    b = np.random.default_rng(seed + 1).standard_normal((n,) if k is None else (n, k))
    kw = dict(trans=trans, lower=lower, unit_diagonal=unit)
    same(lambda a, b: L.solve_triangular(a, b, **kw), lambda a, b: sl.solve_triangular(a, b, **kw),
         a, b)


@pytest.mark.parametrize("trans", [0, 1])
@pytest.mark.parametrize("lower", [False, True])
@pytest.mark.parametrize("unit", [False, True])
def test_solve_triangular_second_order(trans, lower, unit):
    a = well(3, 3) + rng.standard_normal((3, 3))   # the unread triangle is noise
    f = lambda a, b: L.solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=unit)
    # Second order on two of the eight variants (the rules are shared), first order on all.
    order = 2 if (trans, lower, unit) in ((0, True, False), (1, False, True)) else 1
    check_grads(f, a, rng.standard_normal((3, 2)), order=order)
    check_grads(f, a, rng.standard_normal(3), order=1)


def test_solve_triangular_conjugate_transpose_and_batches():
    a = well(4, 3) + 0.3j * rng.standard_normal((3, 3))
    b = rng.standard_normal(3) + 1j * rng.standard_normal(3)
    f = lambda a, b: L.solve_triangular(a, b, trans="C", lower=True)
    same(f, lambda a, b: sl.solve_triangular(a, b, trans="C", lower=True), a, b)
    check_grads(f, a, b, order=1)
    ab = well(5, 2, (2,))
    check_grads(lambda a, b: L.solve_triangular(a, b), ab, rng.standard_normal((2, 2, 1)),
                order=1)


def test_solve_triangular_reads_one_triangle():
    a = well(6, 3)
    g, = gradient(Reverse, lambda a: L.solve_triangular(a, np.ones(3), lower=True,
                                                        unit_diagonal=True).sum(), a)
    assert np.all(np.triu(g) == 0)   # upper triangle and diagonal are never read


@FAST
@given(seeds, st.integers(1, 5), st.integers(0, 2), st.integers(0, 2), st.booleans())
def test_solve_banded_primal(seed, n, lo, up, vector):
    r = np.random.default_rng(seed)
    ab = r.standard_normal((lo + up + 1, n))
    ab[up] += 4.0 + lo + up   # diagonally dominant
    b = r.standard_normal((n,) if vector else (n, 2))
    f = lambda ab, b: L.solve_banded((lo, up), ab, b)
    same(f, lambda ab, b: sl.solve_banded((lo, up), ab, b), ab, b)


@pytest.mark.parametrize("lu", [(1, 2), (2, 0)])
def test_solve_banded_second_order(lu):
    ab = rng.standard_normal((sum(lu) + 1, 4))
    ab[lu[1]] += 5.0
    f = lambda ab, b: L.solve_banded(lu, ab, b)
    check_grads(f, ab, rng.standard_normal((4, 2)))
    check_grads(f, ab, rng.standard_normal(4), order=1)
    g, = gradient(Reverse, lambda ab: f(ab, np.ones(4)).sum(), ab)
    row = np.arange(sum(lu) + 1)[:, None] + np.arange(4) - lu[1]   # A's row of ab[k, j]
    outside = (row < 0) | (row >= 4)                                # corners never read
    assert outside.any() and np.all(g[outside] == 0) and np.all(g[~outside] != 0)


@FAST
@given(seeds, sizes, sizes)
def test_solve_sylvester_primal(seed, m, n):
    r = np.random.default_rng(seed)
    a, b, q = well(seed, m), well(seed + 1, n), r.standard_normal((m, n))
    same(L.solve_sylvester, sl.solve_sylvester, a, b, q)
    same(L.solve_continuous_lyapunov, sl.solve_continuous_lyapunov, a, r.standard_normal((m, m)))


def test_solve_sylvester_second_order():
    check_grads(L.solve_sylvester, well(7, 3), well(8, 2), rng.standard_normal((3, 2)))
    check_grads(L.solve_continuous_lyapunov, well(9, 2), rng.standard_normal((2, 2)))


# -- factorisations -------------------------------------------------------------------------------
@FAST
@given(seeds, sizes, st.booleans())
def test_cholesky_family_primal(seed, n, lower):
    a = spd_with_noise(seed, n, lower)
    b = np.random.default_rng(seed).standard_normal((n, 2))
    same(lambda a: L.cholesky(a, lower=lower), lambda a: sl.cholesky(a, lower=lower), a)
    same(lambda a: L.cho_factor(a, lower=lower)[0], lambda a: sl.cho_factor(a, lower=lower)[0],
         a)
    c = sl.cho_factor(a, lower=lower)[0]
    same(lambda c, b: L.cho_solve((c, lower), b), lambda c, b: sl.cho_solve((c, lower), b),
         c, b)


@pytest.mark.parametrize("lower", [False, True])
def test_cholesky_family_second_order(lower):
    a = spd_with_noise(10, 3, lower)   # noise in the unread triangle
    b = rng.standard_normal((3, 2))
    order = 1 if lower else 2   # second order once: both variants share the rules
    check_grads(lambda a: L.cholesky(a, lower=lower), a, order=order)
    check_grads(lambda a: L.cho_factor(a, lower=lower)[0], a, order=order)
    c = sl.cho_factor(a, lower=lower)[0]   # c holds garbage in its other triangle
    check_grads(lambda c, b: L.cho_solve((c, lower), b), c, b, order=order)
    check_grads(lambda c, b: L.cho_solve((c, lower), b), c, b[:, 0], order=1)
    check_grads(lambda a, b: L.cho_solve(L.cho_factor(a, lower=lower), b), a, b, order=1)


def test_cho_solve_ignores_the_other_triangle():
    a = spd_with_noise(11, 3, lower=False)
    c = sl.cho_factor(a)[0]
    g, = gradient(Reverse, lambda c: L.cho_solve((c, False), np.ones(3)).sum(), c)
    assert np.all(np.tril(g, -1) == 0)
    g, = gradient(Reverse, lambda a: L.cho_solve(L.cho_factor(a), np.ones(3)).sum(), a)
    assert np.all(np.tril(g, -1) == 0)


@FAST
@given(seeds, sizes, st.sampled_from([(), (2,)]), st.sampled_from([0, 1, 2]), st.booleans())
def test_lu_primal(seed, n, batch, trans, vector):
    a = np.random.default_rng(seed).standard_normal(batch + (n, n)) + 0.1 * np.eye(n)
    same(lambda a: L.lu_factor(a)[0], lambda a: sl.lu_factor(a)[0], a, rtol=1e-7)
    lu, piv = sl.lu_factor(a)
    b = np.random.default_rng(seed + 1).standard_normal((n,) if vector else batch + (n, 2))
    same(lambda lu, b: L.lu_solve((lu, piv), b, trans=trans),
         lambda lu, b: sl.lu_solve((lu, piv), b, trans=trans), lu, b, rtol=1e-7, atol=1e-8)


def test_lu_second_order():
    a = rng.standard_normal((3, 3)) + np.eye(3)   # pivoting happens
    assert np.any(sl.lu_factor(a)[1] != np.arange(3))
    check_grads(lambda a: L.lu_factor(a)[0], a)
    check_grads(lambda a: L.lu_factor(a)[0], rng.standard_normal((2, 2, 2)), order=1)
    lu, piv = sl.lu_factor(a)
    b = rng.standard_normal((3, 2))
    for trans in (0, 1):
        check_grads(lambda lu, b: L.lu_solve((lu, piv), b, trans=trans), lu, b, order=1)
    check_grads(lambda a, b: L.lu_solve(L.lu_factor(a), b), a, b[:, 0])
    g, = gradient(Reverse, lambda a: L.lu_solve(L.lu_factor(a), b).sum(), a)
    g_dense, = gradient(Reverse, lambda a: np.linalg.solve(a, b).sum(), a)
    np.testing.assert_allclose(g, g_dense, rtol=1e-10,
                               atol=1e-11)   # same function, same derivative


# -- np.linalg's functions with SciPy's signatures ------------------------------------------------
@FAST
@given(seeds, sizes, st.sampled_from([None, "gen", "sym", "pos", "lower triangular",
                                       "upper triangular", "diagonal"]),
       st.booleans(), st.booleans(), st.booleans())
def test_solve_primal(seed, n, assume_a, lower, transposed, vector):
    a = spd_with_noise(seed, n, lower)
    b = np.random.default_rng(seed).standard_normal((n,) if vector else (n, 2))
    kw = dict(assume_a=assume_a, lower=lower, transposed=transposed)
    same(lambda a, b: L.solve(a, b, **kw), lambda a, b: sl.solve(a, b, **kw), a, b)


@pytest.mark.parametrize("assume_a", ["gen", "pos", "upper triangular", "diagonal"])
def test_solve_derivatives(assume_a):
    a = spd_with_noise(12, 3, lower=False)
    check_grads(lambda a, b: L.solve(a, b, assume_a=assume_a), a, rng.standard_normal(3),
                order=2 if assume_a == "pos" else 1)


@FAST
@given(seeds, sizes, st.booleans())
def test_decompositions_primal(seed, n, lower):
    a = spd_with_noise(seed, n, lower)
    same(lambda a: L.eigh(a, lower=lower), lambda a: sl.eigh(a, lower=lower), a)
    same(lambda a: L.eigvalsh(a, lower=lower), lambda a: sl.eigvalsh(a, lower=lower), a)
    same(L.svd, sl.svd, a)
    same(L.svdvals, sl.svdvals, a)
    tall = np.random.default_rng(seed).standard_normal((n + 1, n))
    for mode in ("economic", "r"):
        same(lambda a: L.qr(a, mode=mode), lambda a: sl.qr(a, mode=mode), tall)
    same(L.qr, sl.qr, a)
    for f, g in ((L.inv, sl.inv), (L.det, sl.det), (L.norm, sl.norm)):
        same(f, g, a)


def test_decompositions_second_order():
    a = spd_with_noise(13, 3, lower=True)   # noise above the diagonal: eigh reads below
    check_grads(lambda a: L.eigh(a)[0], a)
    check_grads(lambda a: L.eigh(a)[1] ** 2, a, order=1)
    check_grads(lambda a: L.svd(a)[0] * L.svd(a)[2].sum(), well(14, 3), order=1)
    check_grads(lambda a: L.qr(a, mode="economic"), rng.standard_normal((3, 2)), order=1)
    check_grads(lambda a: L.inv(a) + L.det(a), well(15, 2))


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="A must be a square"):
        L.expm(np.ones((2, 3)))
    with pytest.raises(ValueError, match="q must have shape"):
        L.solve_sylvester(np.eye(2), np.eye(3), np.ones((3, 2)))
    with pytest.raises(ValueError, match=r"ab must have shape .* = \(3, n\)"):
        L.solve_banded((1, 1), np.ones((2, 4)), np.ones(4))
    with pytest.raises(NotImplementedError, match="generalised"):
        gradient(Reverse, lambda a: L.eigh(a, np.eye(2))[0].sum(), np.eye(2))
    with pytest.raises(NotImplementedError, match="assume_a='banded'"):
        gradient(Reverse, lambda a: L.solve(a, np.ones(2), assume_a="banded").sum(), np.eye(2))
