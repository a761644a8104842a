"""np.linalg: each function against NumPy's primal and against finite differences (forward and
reverse mode, first and second order).

Non-symmetric, complex and eig inputs are in the test_linalg_*.py modules beside this one.

Inputs are built to be well conditioned (A = U diag(s) V^T with s in [1, 3], or with
well-separated s where eigenvectors / singular vectors are differentiated), and eigen/singular
vectors enter the checked functions only through sign-invariant expressions (v**2, u @ vh).
"""
import doctest
import importlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tape import Active, Duplicated, ForwardWithPrimal, Reverse, autodiff
from tape.testing import check_grads, traced_value

FAST = settings(max_examples=10, deadline=None)   # shapes at order 1: test_linalg_properties
seeds = st.integers(0, 2 ** 32 - 1)
batches = st.sampled_from([(), (2,)])


def orthogonal(rng, n):
    q, r = np.linalg.qr(rng.standard_normal((n, n)))
    return q * np.sign(np.diag(r))


def matrices(seed, batch, m, n=None, spectrum=None, symmetric=False):
    """A stack of m x n matrices U diag(s) V^T; s defaults to uniform in [1, 3]."""
    rng = np.random.default_rng(seed)
    n = m if n is None else n
    k = min(m, n)
    out = []
    for _ in range(int(np.prod(batch))):
        s = rng.uniform(1, 3, k) if spectrum is None else spectrum(rng, k)
        u = orthogonal(rng, m)[:, :k]
        v = u if symmetric else orthogonal(rng, n)[:, :k]
        out.append((u * s) @ v.T)
    return np.array(out).reshape(batch + (m, n))


def separated(rng, k):
    """Singular values / eigenvalues at least 0.5 apart (vector derivatives need gaps)."""
    return 1 + 0.8 * np.arange(k) + 0.3 * rng.uniform(size=k)


def mT(x):
    return np.swapaxes(x, -1, -2)


def sym(x):
    return 0.5 * (x + mT(x))


# -- inv, solve, det, slogdet, matrix_power -------------------------------------------------------
@FAST
@given(seeds, batches, st.integers(1, 4))
def test_inv(seed, batch, n):
    a = matrices(seed, batch, n)
    np.testing.assert_allclose(traced_value(np.linalg.inv, a), np.linalg.inv(a), atol=1e-12)
    check_grads(np.linalg.inv, a)


@FAST
@given(seeds, st.sampled_from([((), ()), ((2,), ()), ((), (2,)), ((2, 1), (3,))]),
       st.integers(1, 3), st.integers(1, 2))
def test_solve_matrix_rhs_with_broadcast_batches(seed, batches_ab, n, k):
    a = matrices(seed, batches_ab[0], n)
    b = np.random.default_rng(seed).standard_normal(batches_ab[1] + (n, k))
    np.testing.assert_allclose(traced_value(np.linalg.solve, a, b), np.linalg.solve(a, b),
                               atol=1e-12)
    check_grads(np.linalg.solve, a, b)


@FAST
@given(seeds, batches, st.integers(1, 3))
def test_solve_vector_rhs(seed, batch, n):
    a = matrices(seed, batch, n)
    b = np.random.default_rng(seed).standard_normal(n)
    x = traced_value(np.linalg.solve, a, b)
    assert x.shape == batch + (n,)
    np.testing.assert_allclose(x, np.linalg.solve(a, b), atol=1e-12)
    check_grads(np.linalg.solve, a, b)


@FAST
@given(seeds, batches, st.integers(1, 4), st.booleans())
def test_det_and_slogdet(seed, batch, n, flip):
    a = matrices(seed, batch, n)
    if flip:
        a = a * np.where(np.arange(n) == 0, -1.0, 1.0)[:, None]   # negative determinant
    np.testing.assert_allclose(traced_value(np.linalg.det, a), np.linalg.det(a), atol=1e-11)
    sign, logdet = traced_value(np.linalg.slogdet, a)
    np.testing.assert_array_equal(sign, np.linalg.slogdet(a).sign)
    np.testing.assert_allclose(logdet, np.linalg.slogdet(a).logabsdet, atol=1e-12)
    check_grads(np.linalg.det, a)
    check_grads(lambda x: np.linalg.slogdet(x).logabsdet, a)
    check_grads(lambda x: np.multiply(*np.linalg.slogdet(x)), a)   # sign * logabsdet


@FAST
@given(seeds, batches, st.integers(1, 3), st.integers(-3, 4))
def test_matrix_power(seed, batch, n, power):
    a = matrices(seed, batch, n)
    f = lambda x: np.linalg.matrix_power(x, power)  # noqa: E731
    np.testing.assert_allclose(traced_value(f, a), np.linalg.matrix_power(a, power), atol=1e-11)
    check_grads(f, a)


def test_matrix_power_zero_is_a_constant_identity():
    a = matrices(0, (2,), 3)
    (g,), = autodiff(Reverse, lambda x: np.sum(np.linalg.matrix_power(x, 0)), Active, Active(a))
    np.testing.assert_array_equal(g, np.zeros_like(a))


# -- cholesky, eigh -------------------------------------------------------------------------------
@FAST
@given(seeds, batches, st.integers(1, 4), st.booleans())
def test_cholesky(seed, batch, n, upper):
    a = matrices(seed, batch, n, symmetric=True)
    f = lambda x: np.linalg.cholesky(sym(x), upper=upper)  # noqa: E731
    np.testing.assert_allclose(traced_value(f, a), np.linalg.cholesky(a, upper=upper), atol=1e-12)
    check_grads(f, a)


def test_cholesky_gradient_lives_on_the_triangle_it_reads():
    # NumPy reads one triangle: the other one gets a zero derivative, even for symmetric input.
    a = matrices(1, (), 3, symmetric=True)
    for upper, unread in ((False, np.triu_indices(3, 1)), (True, np.tril_indices(3, -1))):
        (g,), = autodiff(Reverse, lambda x: np.sum(np.linalg.cholesky(x, upper=upper) ** 3),
                         Active, Active(a))
        np.testing.assert_array_equal(g[unread], 0.0)
        assert np.all(g[tuple(reversed(unread))] != 0.0)


@FAST
@given(seeds, batches, st.integers(1, 4), st.sampled_from(["L", "U"]))
def test_eigh(seed, batch, n, uplo):
    a = matrices(seed, batch, n, spectrum=separated, symmetric=True)
    weights = np.random.default_rng(seed).standard_normal((n, n))

    def f(x):
        w, v = np.linalg.eigh(sym(x), UPLO=uplo)
        return w, np.sum(v ** 2 * weights, axis=-1)
    w, v = traced_value(lambda x: np.linalg.eigh(x, UPLO=uplo), a)
    np.testing.assert_allclose(w, np.linalg.eigh(a).eigenvalues, atol=1e-11)
    np.testing.assert_allclose(v ** 2, np.linalg.eigh(a).eigenvectors ** 2, atol=1e-12)
    np.testing.assert_allclose(traced_value(np.linalg.eigvalsh, a), np.linalg.eigvalsh(a),
                               atol=1e-11)
    check_grads(f, a)
    check_grads(lambda x: np.linalg.eigvalsh(sym(x)), a)


def test_eigh_derivatives_follow_the_triangle_read():
    # eigh(x, UPLO) sees only one triangle: a tangent in the other one changes nothing.
    a = matrices(4, (), 3, spectrum=separated, symmetric=True)
    da = np.random.default_rng(4).standard_normal((3, 3))
    for uplo, keep in (("L", np.tril), ("U", np.triu)):
        f = lambda x: np.linalg.eigh(x, uplo).eigenvectors ** 2 + np.linalg.eigh(  # noqa: E731
            x, uplo).eigenvalues
        tangent, _ = autodiff(ForwardWithPrimal, f, Duplicated(a, da))
        triangle_tangent, _ = autodiff(ForwardWithPrimal, f, Duplicated(a, keep(da)))
        np.testing.assert_allclose(tangent, triangle_tangent, atol=1e-12)
        (g,), = autodiff(Reverse, lambda x: np.sum(f(x) * da), Active, Active(a))
        np.testing.assert_array_equal(g - keep(g), 0.0)


def test_eigh_result_fields_and_degenerate_eigenvalues():
    # With a repeated eigenvalue the eigenvectors are not differentiable, but the eigenvalues'
    # sum (the trace) is, and an unused eigenvector output must not poison it.
    a = 2.0 * np.eye(3)

    def f(x):
        result = np.linalg.eigh(x)
        assert result.eigenvectors is result[1]
        return np.sum(result.eigenvalues)
    (g,), = autodiff(Reverse, f, Active, Active(a))
    np.testing.assert_allclose(g, np.eye(3), atol=1e-12)
    (g,), = autodiff(Reverse, lambda x: np.sum(np.linalg.eigvalsh(x)), Active, Active(a))
    np.testing.assert_allclose(g, np.eye(3), atol=1e-12)


# -- svd, qr --------------------------------------------------------------------------------------
@FAST
@given(seeds, batches, st.integers(1, 4), st.integers(1, 4))
def test_svd_reduced(seed, batch, m, n):
    a = matrices(seed, batch, m, n, spectrum=separated)

    def f(x):
        u, s, vh = np.linalg.svd(x, full_matrices=False)
        return s, u ** 2, vh ** 2, u @ vh
    u, s, vh = traced_value(lambda x: np.linalg.svd(x, full_matrices=False), a)
    np.testing.assert_allclose((u * s[..., None, :]) @ vh, a, atol=1e-12)
    np.testing.assert_allclose(s, np.linalg.svd(a, compute_uv=False), atol=1e-12)
    check_grads(f, a)


@FAST
@given(seeds, batches, st.integers(1, 4), st.integers(1, 4))
def test_singular_values_only(seed, batch, m, n):
    a = matrices(seed, batch, m, n)
    np.testing.assert_allclose(traced_value(np.linalg.svdvals, a), np.linalg.svdvals(a), atol=1e-12)
    # First derivatives need no gap between singular values; second ones divide by
    # s_i^2 - s_j^2, so they are checked on separated spectra.
    check_grads(lambda x: np.linalg.svd(x, compute_uv=False), a, order=1)
    check_grads(np.linalg.svdvals, matrices(seed, batch, m, n, spectrum=separated))


def test_svd_full_matrices():
    square = matrices(2, (), 3, spectrum=separated)
    check_grads(lambda x: np.linalg.svd(x)[0] ** 2, square)   # full_matrices=True, square: fine
    with pytest.raises(NotImplementedError, match="full_matrices=False"):
        autodiff(Reverse, lambda x: np.sum(np.linalg.svd(x)[1]), Active,
                 Active(matrices(2, (), 4, 3)))


@FAST
@given(seeds, batches, st.integers(1, 4), st.integers(0, 2))
def test_qr_reduced(seed, batch, n, extra_rows):
    a = matrices(seed, batch, n + extra_rows, n)
    q, r = traced_value(np.linalg.qr, a)
    np.testing.assert_allclose(q, np.linalg.qr(a).Q, atol=1e-12)
    np.testing.assert_allclose(r, np.linalg.qr(a).R, atol=1e-12)
    check_grads(lambda x: tuple(np.linalg.qr(x)), a)
    check_grads(lambda x: np.linalg.qr(x, mode="r"), a)


def test_qr_wide_input_is_not_differentiable():
    with pytest.raises(NotImplementedError, match="m >= n"):
        autodiff(Reverse, lambda x: np.sum(np.linalg.qr(x).R), Active,
                 Active(matrices(0, (), 2, 3)))


# -- pinv, lstsq ----------------------------------------------------------------------------------
@FAST
@given(seeds, batches, st.integers(1, 4), st.integers(1, 4))
def test_pinv_full_rank(seed, batch, m, n):
    a = matrices(seed, batch, m, n)
    np.testing.assert_allclose(traced_value(np.linalg.pinv, a), np.linalg.pinv(a), atol=1e-12)
    check_grads(np.linalg.pinv, a)


@FAST
@given(seeds, st.integers(1, 4), st.integers(1, 4), st.sampled_from([(), (2,)]))
def test_lstsq_solution(seed, m, n, rhs_cols):
    a = matrices(seed, (), m, n)
    b = np.random.default_rng(seed).standard_normal((m,) + rhs_cols)
    x, residuals, rank, s = traced_value(lambda x, y: np.linalg.lstsq(x, y), a, b)
    expected = np.linalg.lstsq(a, b)
    np.testing.assert_allclose(x, expected[0], atol=1e-12)
    np.testing.assert_allclose(residuals, expected[1], atol=1e-12)   # |b - a x|^2, not LAPACK's
    assert rank == expected[2]
    np.testing.assert_allclose(s, expected[3], atol=1e-12)
    check_grads(lambda x, y: np.linalg.lstsq(x, y)[0], a, b)
    check_grads(lambda x: np.linalg.lstsq(x, b)[3], a)
    if residuals.size:   # tall a only
        check_grads(lambda x, y: np.linalg.lstsq(x, y)[1], a, b)


def test_lstsq_compiled_replays_and_follows_the_rank():
    """A compiled lstsq reads a and b at each call (no guard on their values: one trace for
    new values of the same rank) and follows a change of rank (residuals, then none), with the
    eager gradient and NumPy's four results at every call."""
    import tape

    def f(a, b):
        x, residuals, rank, s = np.linalg.lstsq(a, b, rcond=None)
        return np.sum(x ** 2) + np.sum(residuals) + rank + np.sum(s)

    g = tape.compile(Reverse, f, Active, Active, Active)
    rng = np.random.default_rng(3)
    deficient = rng.standard_normal((5, 3))
    deficient[:, 2] = deficient[:, 0]
    for i, a in enumerate([rng.standard_normal((5, 3)), rng.standard_normal((5, 3)),
                           deficient, rng.standard_normal((5, 3))]):
        b = rng.standard_normal(5)
        expected = autodiff(tape.ReverseWithPrimal, f, Active, Active(a), Active(b))
        got = g(Active(a), Active(b))
        for e, o in zip(expected[0], got[0]):
            np.testing.assert_allclose(o, e, rtol=1e-10, atol=1e-10)
        if i == 1:
            assert g.stats.traces == 1 and g.stats.hits == 1
    assert g.stats.traces == 2   # rank 3, then rank 2; the return to rank 3 finds the first
    x, residuals, rank, s = np.linalg.lstsq(deficient, np.ones(5), rcond=None)
    ours = traced_value(lambda p: np.linalg.lstsq(p, np.ones(5), rcond=None), deficient)
    assert residuals.shape == ours[1].shape == (0,) and ours[2] == rank == 2


# -- norms ----------------------------------------------------------------------------------------
@FAST
@given(seeds, st.sampled_from([None, 2, 1, np.inf, -np.inf, 3, 0.5, -1]),
       st.sampled_from([None, 0, -1, (0, 1)]), st.booleans())
def test_vector_norms(seed, ord, axis, keepdims):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.5, 2, (3, 4)) * rng.choice([-1.0, 1.0], (3, 4))   # away from |x| = 0
    if axis is None:
        x = x[0]
    if axis == (0, 1):   # the array-API spelling: a vector norm over several axes
        f = lambda v: np.linalg.vector_norm(v, ord=2 if ord is None else ord,  # noqa: E731
                                            axis=axis, keepdims=keepdims)
        expected = np.linalg.vector_norm(x, ord=2 if ord is None else ord, axis=axis,
                                         keepdims=keepdims)
    else:
        f = lambda v: np.linalg.norm(v, ord, axis, keepdims)  # noqa: E731
        expected = np.linalg.norm(x, ord, axis, keepdims)
    np.testing.assert_allclose(traced_value(f, x), expected, atol=1e-12)
    check_grads(f, x)


@FAST
@given(seeds, st.sampled_from([None, "fro", "nuc", 2, -2, 1, -1, np.inf, -np.inf]),
       st.sampled_from([(1, 2), (2, 1), (0, 2), (-1, -3)]), st.booleans())
def test_matrix_norms(seed, ord, axis, keepdims):
    rng = np.random.default_rng(seed)
    x = np.moveaxis(matrices(seed, (2,), 3, 4, spectrum=separated), 0, 1)   # shape (3, 2, 4)
    x = x + 0.01 * rng.standard_normal(x.shape)   # break ties among row / column sums
    f = lambda v: np.linalg.norm(v, ord, axis, keepdims)  # noqa: E731
    np.testing.assert_allclose(traced_value(f, x), np.linalg.norm(x, ord, axis, keepdims),
                               atol=1e-11)
    check_grads(f, x)


def test_norm_defaults_matrix_norm_and_cond():
    a = matrices(3, (2,), 3, spectrum=separated)
    for f in (np.linalg.norm, np.linalg.matrix_norm, lambda x: np.linalg.norm(x[0], "fro"),
              lambda x: np.linalg.matrix_norm(x, ord="nuc", keepdims=True),
              np.linalg.cond, lambda x: np.linalg.cond(x, -2),
              lambda x: np.linalg.cond(x, "fro"), lambda x: np.linalg.cond(x, 1)):
        np.testing.assert_allclose(traced_value(f, a), f(a), atol=1e-11)
        check_grads(f, a)


def test_two_norm_at_zero_has_zero_derivative():
    zero = np.zeros((2, 3))
    for f in (np.linalg.norm, lambda x: np.linalg.norm(x, axis=1),
              lambda x: np.linalg.norm(x, "fro", keepdims=True)):
        (g,), = autodiff(Reverse, lambda x: np.sum(f(x)), Active, Active(zero))
        np.testing.assert_array_equal(g, zero)
        tangent, = autodiff(ForwardWithPrimal, f, Duplicated(zero, np.ones_like(zero)))[:1]
        np.testing.assert_array_equal(tangent, np.zeros_like(tangent))


def test_zero_norm_counts_nonzeros_without_derivative():
    x = np.array([0.0, 2.0, -1.0])
    (g,), = autodiff(Reverse, lambda v: np.linalg.norm(v, 0) * np.sum(v), Active, Active(x))
    np.testing.assert_array_equal(g, [2.0, 2.0, 2.0])


def test_array_api_aliases_and_hermitian_variants():
    rng = np.random.default_rng(5)
    a = matrices(5, (2,), 3, spectrum=separated, symmetric=True)
    b = rng.standard_normal((2, 3, 3))
    v, w = rng.standard_normal(3), rng.standard_normal(4)
    cases = [
        (np.linalg.matmul, a, b), (np.linalg.matrix_transpose, b), (np.linalg.outer, v, w),
        (lambda x, y: np.linalg.tensordot(x, y, axes=1), b, v), (np.linalg.vecdot, a, b),
        (lambda x: np.linalg.diagonal(x, offset=1), b), (np.linalg.trace, b),
        (lambda x, y: np.linalg.multi_dot([x[0], y[1], x[1]]), a, b),
        (lambda x: np.linalg.svd(sym(x), compute_uv=False, hermitian=True), a),
        (lambda x: np.linalg.pinv(sym(x), 1e-10, True), a),
        (lambda x: np.linalg.pinv(x, rtol=1e-10), b),
        (lambda x: np.linalg.eigvalsh(sym(x), "U"), a),
        (np.linalg.cross, b, v), (lambda x, y: np.linalg.cross(x, y, axis=0), a[0], b[1]),
    ]
    for f, *args in cases:
        np.testing.assert_allclose(traced_value(f, *args), f(*args), atol=1e-12)
        check_grads(f, *args)
    assert traced_value(np.linalg.matrix_rank, a).tolist() == [3, 3]


def test_cross_needs_three_vectors():
    with pytest.raises(ValueError, match=r"np.linalg.cross: x2 of shape \(2,\) must have length 3"):
        autodiff(Reverse, lambda x: np.sum(np.linalg.cross(x, np.ones(2))), Active,
                 Active(np.ones(3)))


@pytest.mark.parametrize("module", ["ops.linalg", "ops.linalg_common", "ops.linalg_factor",
                                    "ops.linalg_svd", "ops.linalg_eig", "ops.linalg_norms"])
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(module), extraglobs={"np": np})
    assert result.failed == 0


@pytest.mark.parametrize("call", [
    lambda x: np.linalg.multi_dot([x]),              # NumPy: "Expecting at least two arrays."
    lambda x: np.linalg.outer(x, x[0]),              # NumPy 2: one-dimensional inputs only
])
def test_linalg_refuses_on_traced_values_what_numpy_refuses(call):
    x = np.ones((2, 2))
    with pytest.raises(ValueError) as plain:
        call(x)
    with pytest.raises(ValueError, match=str(plain.value)[:20]):
        autodiff(Reverse, lambda x: np.sum(call(x)), Active, Active(x))
