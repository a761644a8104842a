"""Second-order examples for np.linalg beyond the real, symmetric ones in
test_nested_every_op.py: eig and eigvals, non-symmetric input to the functions that read one
triangle (eigh, eigvalsh, cholesky, hermitian=True), and complex input to the factorisations.

Eigen- and singular vectors of complex input enter through phase-invariant expressions only
(|v|^2, u @ diag(s) @ vh); eig's vectors are checked directly (the rule follows LAPACK's
normalisation) for complex input, and as v**2 for real input, where LAPACK's signs jump.
"""
import numpy as np


def _unitary(n, seed, complex_=True):
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((n, n)) + (1j * rng.standard_normal((n, n)) if complex_ else 0)
    q, r = np.linalg.qr(z)
    return q * (np.diag(r) / np.abs(np.diag(r)))


def _crandn(*shape, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


# Hermitian positive definite with separated eigenvalues, plus unrelated values in the strict
# upper triangle and the diagonal's imaginary part: eigh(., "L") and cholesky never read them.
_HL = (_unitary(3, 1) * [1.0, 1.9, 2.8]) @ _unitary(3, 1).conj().T
HL = _HL + np.triu(_crandn(3, 3, seed=2), 1) + 0.5j * np.eye(3)
HU = _HL + np.tril(_crandn(3, 3, seed=3), -1)                     # read from the upper triangle
RL = np.real(_HL) + np.triu(np.random.default_rng(4).standard_normal((3, 3)), 1)
RU = np.real(_HL) + np.tril(np.random.default_rng(5).standard_normal((3, 3)), -1)
C3 = (_unitary(3, 6) * [1.0, 1.8, 2.7]) @ _unitary(3, 7)           # separated singular values
C32 = (_unitary(3, 8)[:, :2] * [1.0, 2.1]) @ _unitary(2, 9)
c3 = _crandn(3, seed=10)
G3 = np.random.default_rng(11).standard_normal((3, 3))            # real, a complex pair


def _abs2(v):
    return np.real(v * np.conj(v))


def _eigh(a, uplo):
    w, v = np.linalg.eigh(a, uplo)
    return w, _abs2(v)


def _eig_real(a):
    w, v = np.linalg.eig(a)
    return w, v * v


def _svd(a, **kw):
    u, s, vh = np.linalg.svd(a, full_matrices=False, **kw)
    return s, (u * s[..., None, :]) @ vh, _abs2(u), _abs2(vh)


EXAMPLES = {
    "np.linalg.eig": (lambda a: tuple(np.linalg.eig(a)), (_crandn(3, 3, seed=12),)),
    "np.linalg.eig[real input, complex pair]": (_eig_real, (G3,)),
    "np.linalg.eig[real spectrum]": (_eig_real, (np.real(_HL) + 0.3 * G3,)),
    "np.linalg.eigvals": (np.linalg.eigvals, (_crandn(3, 3, seed=13),)),
    "np.linalg.eigvals[real input]": (np.linalg.eigvals, (G3,)),
    "np.linalg.eigh[non-symmetric, L]": (lambda a: _eigh(a, "L"), (RL,)),
    "np.linalg.eigh[non-symmetric, U]": (lambda a: _eigh(a, "U"), (RU,)),
    "np.linalg.eigh[complex, L]": (lambda a: _eigh(a, "L"), (HL,)),
    "np.linalg.eigh[complex, U]": (lambda a: _eigh(a, "U"), (HU,)),
    "np.linalg.eigvalsh[non-symmetric, U]": (lambda a: np.linalg.eigvalsh(a, "U"), (RU,)),
    "np.linalg.eigvalsh[complex, L]": (np.linalg.eigvalsh, (HL,)),
    "np.linalg.cholesky[non-symmetric]": (np.linalg.cholesky, (RL,)),
    "np.linalg.cholesky[non-symmetric, upper]": (
        lambda a: np.linalg.cholesky(a, upper=True), (RU,)),
    "np.linalg.cholesky[complex]": (np.linalg.cholesky, (HL,)),
    "np.linalg.cholesky[complex, upper]": (lambda a: np.linalg.cholesky(a, upper=True), (HU,)),
    "np.linalg.svd[complex]": (_svd, (C3,)),
    "np.linalg.svd[complex, tall]": (_svd, (C32,)),
    "np.linalg.svd[complex, wide]": (_svd, (C32.T,)),
    "np.linalg.svd[hermitian, non-symmetric]": (lambda a: _svd(a, hermitian=True), (RL,)),
    "np.linalg.svdvals[complex]": (np.linalg.svdvals, (C32,)),
    "np.linalg.qr[complex]": (lambda a: tuple(np.linalg.qr(a)), (C32,)),
    "np.linalg.pinv[complex]": (np.linalg.pinv, (C32,)),
    "np.linalg.pinv[hermitian, non-symmetric]": (
        lambda a: np.linalg.pinv(a, hermitian=True), (HL,)),
    "np.linalg.lstsq[complex]": (lambda a, b: np.linalg.lstsq(a, b)[:2], (C32, c3)),
    "np.linalg.matrix_power[1, complex]": (lambda a: np.linalg.matrix_power(a, 1) * a, (C3,)),
    "np.linalg.matrix_power[stacked, complex]": (
        lambda a: np.linalg.matrix_power(a, -3), (np.stack([C3, C3.T + np.eye(3)]),)),
    "np.linalg.norm[nuc, complex]": (lambda a: np.linalg.norm(a, "nuc"), (C3,)),
    "np.linalg.cond[complex]": (np.linalg.cond, (C3,)),
    "np.linalg.tensorinv": (lambda a: np.linalg.tensorinv(a, ind=1),
                            (np.reshape(np.kron(C3, np.eye(2)) + 2 * np.eye(6), (6, 2, 3)),)),
    "np.linalg.tensorsolve": (lambda a, b: np.linalg.tensorsolve(a, b, axes=(1, 0)),
                              (np.reshape(np.kron(np.eye(2), C3.real) + np.eye(6), (2, 3, 3, 2)),
                               np.arange(6.0).reshape(2, 3))),
}
