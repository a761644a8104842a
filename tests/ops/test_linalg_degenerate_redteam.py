"""np.linalg derivatives at degenerate or ill-conditioned (but valid) inputs: rank-deficient
pinv/lstsq, singular det, repeated singular values and eigenvalues, ties in matrix norms,
a non-diagonalizable sqrtm.

References are plain NumPy: central finite differences in float64, or closed forms. The strict
xfails are findings (wrong values where the true derivative exists, or a crash); the plain tests
cover degenerate inputs the other linalg tests leave out.
"""
import numpy as np
import pytest

import tape.scipy.linalg as tsl
from tape import Forward, Reverse, gradient, hessian
from tape.testing import check_grads

MODES = [Reverse, Forward]


def orthogonal(seed, n):
    return np.linalg.qr(np.random.default_rng(seed).standard_normal((n, n)))[0]


def central(f, a, h):
    """Central finite differences of the real scalar f at a (float64)."""
    g = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        e = np.zeros_like(a)
        e[i] = h
        g[i] = (f(a + e) - f(a - e)) / (2 * h)
    return g


def jacobian_central(f, a, h):
    """d f(a)[...] / d a[i], stacked as f's shape + a's shape."""
    out = np.zeros(np.shape(f(a)) + a.shape)
    for i in np.ndindex(a.shape):
        e = np.zeros_like(a)
        e[i] = h
        out[(...,) + i] = (f(a + e) - f(a - e)) / (2 * h)
    return out


def close_or_nan(got, expected, rtol):
    """The documented outcome at a degenerate spectrum: the right value, or NaN (undefined)."""
    got = np.asarray(got)
    if np.all(np.isnan(got)):
        return True
    return np.max(np.abs(got - expected)) <= rtol * np.max(np.abs(expected))


# -- findings: silent wrong values ----------------------------------------------------------------
# lstsq's rcond truncates singular values; its derivative must be that of the truncated
# solution, pinv(a, rcond) @ b. The rules differentiate the untruncated pinv(a) instead.
RNG = np.random.default_rng(0)
U43 = np.linalg.qr(RNG.standard_normal((4, 3)))[0]
V33 = orthogonal(1, 3)
W34 = RNG.standard_normal((3, 4))
B4 = RNG.standard_normal(4)


def _refused_or_right(f, a, mode, expected):
    """The truncated-SVD derivative is not implemented: a clear refusal, or the right value."""
    try:
        got = gradient(mode, f, a)[0]
    except NotImplementedError as e:
        assert "truncated SVD" in str(e) and "nonzero singular values" in str(e)
        return
    np.testing.assert_allclose(got, expected, atol=1e-5 * np.max(np.abs(expected)))


# lstsq's derivative ignored rcond (it differentiated pinv(a) with the default cutoff, so a
# singular value rcond drops was inverted: 6.7e5 for 0.2), and pinv's Golub-Pereyra rule is
# exact only where the dropped singular values are 0 (off by about the dropped value, 0.064
# of 0.2 here): both now refuse a cutoff that drops a nonzero one.
@pytest.mark.parametrize("mode", MODES, ids=["reverse", "forward"])
def test_lstsq_derivative_respects_rcond(mode):
    a = (U43 * [3.0, 2.0, 1e-3]) @ V33.T          # rcond=1e-2 keeps rank 2, locally constant
    assert np.linalg.lstsq(a, B4, rcond=1e-2)[2] == 2

    def f(x):
        return np.sum(W34[0, :3] * np.linalg.lstsq(x, B4, rcond=1e-2)[0])
    _refused_or_right(f, a, mode, central(f, a, 1e-7))


@pytest.mark.parametrize("mode", MODES, ids=["reverse", "forward"])
@pytest.mark.parametrize("keyword", ["rcond", "rtol"])
def test_pinv_derivative_with_a_cutoff_that_drops_a_nonzero_singular_value(mode, keyword):
    a = (U43 * [3.0, 2.0, 0.5]) @ V33.T           # cutoff 0.3 * 3 = 0.9 drops 0.5: rank 2

    def f(x):
        return np.sum(W34 * np.linalg.pinv(x, **{keyword: 0.3}))
    _refused_or_right(f, a, mode, central(f, a, 1e-6))


@pytest.mark.parametrize("mode", MODES, ids=["reverse", "forward"])
def test_a_cutoff_that_drops_only_zero_singular_values_is_differentiated(mode):
    # a = B C has rank 2 along every perturbation of B: its third singular value is 0.
    for keyword in ("rcond", "rtol"):
        def f(b):
            a = b @ FACTOR_C
            return (np.sum(W34 * np.linalg.pinv(a, **{keyword: 1e-3}))
                    + np.sum(W34[0, :3] * np.linalg.lstsq(a, B4, rcond=1e-3)[0]))
        expected = central(f, FACTOR_B, 1e-6)
        np.testing.assert_allclose(gradient(mode, f, FACTOR_B)[0], expected,
                                   atol=1e-7 * np.max(np.abs(expected)))


# A symmetric matrix with a double eigenvalue, as rounding leaves it (gap ~ 1e-15, not 0).
_Q3 = orthogonal(2, 3)
NEAR_DOUBLE = (_Q3 * [2.0, 2.0, 1.0]) @ _Q3.T
NEAR_DOUBLE = 0.5 * (NEAR_DOUBLE + NEAR_DOUBLE.T)
W33 = np.random.default_rng(3).standard_normal((3, 3))


def _lower_symmetric(x):
    return np.tril(x) + np.tril(x, -1).T


@pytest.mark.parametrize("mode", MODES, ids=["reverse", "forward"])
def test_eigh_spectral_function_through_vectors_at_a_double_eigenvalue(mode):
    def f(x):
        w, v = np.linalg.eigh(x)
        return np.sum(W33 * ((v * w ** 2) @ v.T))            # = sum(W * H @ H), H read from L
    expected = central(lambda x: np.sum(W33 * (_lower_symmetric(x) @ _lower_symmetric(x))),
                       NEAR_DOUBLE, 1e-6)
    assert close_or_nan(gradient(mode, f, NEAR_DOUBLE)[0], expected, 1e-6)


def test_eigvalsh_hessian_of_a_spectral_function_at_a_double_eigenvalue():
    s = NEAR_DOUBLE

    def f(x):
        return np.sum(np.linalg.eigvalsh(0.5 * (x + x.T)) ** 3)
    expected = np.zeros((3, 3, 3, 3))
    for i in np.ndindex(3, 3):
        e = np.zeros((3, 3))
        e[i] = 1.0
        ds = 0.5 * (e + e.T)
        expected[i] = 3 * (s @ ds + ds @ s)                   # d(3 S^2) along e
    assert close_or_nan(hessian(f, s), expected, 1e-6)


@pytest.mark.xfail(strict=True, reason="second derivatives of svdvals go through svd's vector "
                   "rule (1 / (s_j^2 - s_i^2)): the Hessian of the nuclear norm at a double "
                   "singular value has NaN and inf entries (not all NaN), though the gradient "
                   "U V^T (polar factor) is smooth there (ops/linalg_svd.py _svdvals_reverse)")
def test_nuclear_norm_hessian_at_a_double_singular_value():
    def polar(x):
        u, _, vh = np.linalg.svd(x)
        return u @ vh
    expected = jacobian_central(polar, NEAR_DOUBLE, 1e-6)       # d(U V^T)[k, l] / d a[i, j]
    expected = np.moveaxis(expected, (0, 1), (2, 3))            # -> [i, j, k, l]
    assert close_or_nan(hessian(lambda x: np.linalg.norm(x, "nuc"), NEAR_DOUBLE), expected, 1e-5)


# -- findings: crashes ----------------------------------------------------------------------------
def _adjugate_transpose(a):
    """The cofactor matrix of a 3x3 matrix, from its minors (exact at singular a)."""
    c = np.zeros_like(a)
    for i, j in np.ndindex(3, 3):
        minor = np.delete(np.delete(a, i, 0), j, 1)
        c[i, j] = (-1) ** (i + j) * (minor[0, 0] * minor[1, 1] - minor[0, 1] * minor[1, 0])
    return c


SINGULAR = (orthogonal(4, 3) * [2.0, 1.0, 0.0]) @ orthogonal(5, 3).T


@pytest.mark.xfail(strict=True, raises=np.linalg.LinAlgError,
                   reason="det's second derivative inverts a (documented: 'second derivatives "
                   "assume an invertible one'), so hessian(det) at a singular matrix raises "
                   "though det is a polynomial (ops/linalg.py _cofactor_derivative_at: inv(a))")
def test_det_hessian_at_a_singular_matrix():
    expected = np.moveaxis(jacobian_central(_adjugate_transpose, SINGULAR, 1e-5), (0, 1), (2, 3))
    np.testing.assert_allclose(hessian(np.linalg.det, SINGULAR), expected, atol=1e-8)


# -- coverage: degenerate inputs where the rules are right ---------------------------------------
FACTOR_B = RNG.standard_normal((4, 2))
FACTOR_C = RNG.standard_normal((2, 3))


@pytest.mark.parametrize("mode", MODES, ids=["reverse", "forward"])
def test_pinv_and_lstsq_of_a_rank_deficient_matrix_with_constant_rank(mode):
    # a = B C has rank 2 along every perturbation of B (Golub-Pereyra applies).
    def f(b):
        a = b @ FACTOR_C
        return np.sum(W34 * np.linalg.pinv(a)) + np.sum(W34[0, :3] * np.linalg.lstsq(a, B4)[0])
    expected = central(f, FACTOR_B, 1e-6)
    np.testing.assert_allclose(gradient(mode, f, FACTOR_B)[0], expected,
                               atol=1e-7 * np.max(np.abs(expected)))


@pytest.mark.parametrize("mode", MODES, ids=["reverse", "forward"])
@pytest.mark.parametrize("spectrum", [[2.0, 1.0, 0.0], [2.0, 0.0, 0.0], [0.0, 0.0, 0.0],
                                      [2.0, 1.0, 1e-9], [2.0, 1e-8, 1e-9], [2.0, 1.0, 1e-5]],
                         ids=["rank2", "rank1", "zero", "cond2e9", "cond2e9-two-small",
                              "cond2e5"])
def test_det_gradient_is_the_cofactor_matrix_at_singular_matrices(mode, spectrum):
    # Near-singular matrices take the SVD path, moderately conditioned ones det(a) a^-T: the
    # cofactor matrix from the minors is exact to rounding in both cases.
    a = (orthogonal(4, 3) * spectrum) @ orthogonal(5, 3).T
    for f in (np.linalg.det, tsl.det):
        np.testing.assert_allclose(gradient(mode, f, a)[0], _adjugate_transpose(a), atol=1e-12)


@pytest.mark.parametrize("mode", MODES, ids=["reverse", "forward"])
def test_nuclear_norm_gradient_at_repeated_singular_values(mode):
    # sum of singular values: gradient U V^T (U, V reduced), defined at repeated values.
    tall = (np.linalg.qr(RNG.standard_normal((4, 3)))[0] * [2.0, 2.0, 1.0]) @ V33.T
    for a in (tall, tall.T, NEAR_DOUBLE, 2.0 * np.eye(3)):
        u, _, vh = np.linalg.svd(a, full_matrices=False)
        np.testing.assert_allclose(gradient(mode, lambda x: np.linalg.norm(x, "nuc"), a)[0],
                                   u @ vh, atol=1e-12)
        np.testing.assert_allclose(
            gradient(mode, lambda x: np.sum(np.linalg.svd(x, compute_uv=False) ** 3), a)[0],
            3 * (u * np.linalg.svd(a, compute_uv=False) ** 2) @ vh, atol=1e-10)


def test_matrix_norm_ties_split_the_same_way_in_both_modes():
    # Column sums of |x| tie (4, 4, 2.5) for ord=1; each tied column gets half (mean of ties).
    x = np.array([[1.0, -2.0, 0.0], [2.0, 1.0, -0.5], [-1.0, 1.0, 2.0]])
    for ord_ in (1, -1, np.inf, -np.inf, 2, "nuc", "fro"):
        rev = gradient(Reverse, lambda a: np.linalg.norm(a, ord_), x)[0]
        fwd = gradient(Forward, lambda a: np.linalg.norm(a, ord_), x)[0]
        np.testing.assert_allclose(rev, fwd, atol=1e-12)
    rev = gradient(Reverse, lambda a: np.linalg.norm(a, 1), x)[0]
    np.testing.assert_allclose(rev, 0.5 * np.sign(x) * [1.0, 1.0, 0.0], atol=1e-15)


def test_sqrtm_and_expm_of_a_jordan_block_to_second_order():
    jordan = np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0], [0.0, 0.0, 1.0]])   # not diagonalisable
    check_grads(lambda a: np.sum(W33 * tsl.sqrtm(a)), jordan, order=2, modes=("fwd", "rev"))
    check_grads(lambda a: np.sum(W33 * tsl.expm(a)), jordan, order=2, modes=("fwd", "rev"))
