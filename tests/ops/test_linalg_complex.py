"""Complex matrices through np.linalg, in the convention of docs/complex.md (the gradient of a
real f is df/dx + i df/dy): closed-form gradients that do not share the rules' algebra, the
phase freedom of singular and eigenvectors, matrix_power's special exponents, and the errors
for what has no derivative. Finite-difference checks over shapes are in
test_linalg_properties.py, second order in tests/tape/second_order_linalg.py.
"""
import numpy as np
import pytest

from tape import Active, Reverse, autodiff
from tape.testing import check_grads, traced_value

rng = np.random.default_rng(3)


def crandn(*shape):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def grad(f, a):
    (g,), = autodiff(Reverse, f, Active, Active(a))
    return g


def test_nuclear_norm_gradient_is_u_vh():
    # d sum(s) = Re tr(U^H dA V): the gradient (df/dx + i df/dy) of the nuclear norm is U Vh.
    a = crandn(2, 4, 3)
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    for f in (lambda x: np.sum(np.linalg.svdvals(x)),
              lambda x: np.sum(np.linalg.norm(x, "nuc", axis=(-2, -1))),
              lambda x: np.sum(np.linalg.svd(x, full_matrices=False).S)):
        np.testing.assert_allclose(grad(f, a), u @ vh, atol=1e-12)


def test_eigenvalue_sum_is_the_real_trace():
    # sum(eigvalsh(a)) = Re tr(a) whatever the triangles hold: the gradient is the identity.
    a = crandn(3, 3)
    a = a + a.conj().T + 6 * np.eye(3) + np.triu(crandn(3, 3), 1)
    for uplo in "LU":
        np.testing.assert_allclose(grad(lambda x: np.sum(np.linalg.eigvalsh(x, uplo)), a),
                                   np.eye(3), atol=1e-12)


def test_singular_vector_phases_do_not_leak():
    # Multiplying u_i and v_i by a common phase changes neither u diag(s) vh, |u| nor s:
    # the derivatives of these agree with finite differences, however LAPACK picks the phase.
    a = (np.linalg.qr(crandn(4, 4))[0][:, :3] * [3.0, 2.0, 1.0]) @ np.linalg.qr(crandn(3, 3))[0]
    for full in (False, True):
        b = a if not full else a[:3]   # full_matrices=True: square input only
        check_grads(lambda x: (lambda r: ((r.U * r.S[..., None, :]) @ r.Vh, np.abs(r.U),
                                          np.abs(r.Vh) ** 2, r.S))(
            np.linalg.svd(x, full_matrices=full)), b, order=1)


def test_eigh_phase_invariants():
    a = crandn(2, 3, 3)
    a = a + np.conj(np.swapaxes(a, -1, -2)) + np.array([0.0, 3.0, 6.0]) * np.eye(3)
    check_grads(lambda x: (lambda w, v: (w, np.abs(v), v @ (w[..., :, None] * np.conj(
        np.swapaxes(v, -1, -2)))))(*np.linalg.eigh(x)), a, order=1)


@pytest.mark.parametrize("power", [0, 1, 2, 3, -1, -4, 9])
def test_matrix_power_exponents(power):
    a = crandn(2, 3, 3) + 3 * np.eye(3)
    f = lambda x: np.linalg.matrix_power(x, power)  # noqa: E731
    got = traced_value(f, a)
    assert got.dtype == np.complex128
    np.testing.assert_allclose(got, f(a), rtol=1e-10, atol=1e-12 * np.max(np.abs(f(a))))
    check_grads(lambda x: f(x) * x, a, order=1)
    if power == 0:
        np.testing.assert_array_equal(grad(lambda x: np.abs(np.sum(f(x))), a), 0)


def test_matrix_power_needs_square_matrices():
    for power in (0, 1, 2):
        with pytest.raises(np.linalg.LinAlgError, match=r"matrix_power.*\(1, 3\)"):
            grad(lambda x: np.sum(np.linalg.matrix_power(x, power)), np.ones((1, 3)))


def test_lstsq_residuals_are_real_squared_moduli():
    a, b = crandn(5, 2), crandn(5, 3)
    x, residuals, rank, s = traced_value(lambda p, q: np.linalg.lstsq(p, q), a, b)
    expected = np.linalg.lstsq(a, b)
    assert residuals.dtype == np.float64
    np.testing.assert_allclose(residuals, expected[1], rtol=1e-10, atol=1e-11)
    np.testing.assert_allclose(x, expected[0], rtol=1e-10, atol=1e-12)
    check_grads(lambda p, q: np.linalg.lstsq(p, q)[1], a, b, order=2)


def test_complex_paths_without_a_derivative_raise():
    with pytest.raises(NotImplementedError, match="full_matrices=False"):
        grad(lambda x: np.sum(np.abs(np.linalg.svd(x).U)), crandn(4, 3))
    with pytest.raises(NotImplementedError, match="m >= n"):
        grad(lambda x: np.sum(np.abs(np.linalg.qr(x).R)), crandn(2, 3))
