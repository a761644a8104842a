"""Complex numbers in whole user programs: quantum state evolution (expm, eigh, a two-qubit
circuit with a partial trace and an entropy), FFT convolutions and phase retrieval, complex
least squares, SVD losses, Cayley unitaries, complex activations written with np.where and
np.maximum, mixed real/complex pytrees, complex64, and ReverseHolomorphic through linear algebra
and FFTs. Each is checked against plain NumPy (primal) and central differences on the real and
imaginary parts (docs/complex.md: the gradient of a real f of z = x + iy is df/dx + i df/dy),
in reverse and forward mode, and to second order on real parameters."""
import copy

import numpy as np
import pytest

import tape
import tape.scipy.linalg as tsl
from tape import (Active, BatchDuplicated, Duplicated, Forward, Reverse, ReverseHolomorphic,
                  ReverseWithPrimal, autodiff, gradient)

from numeric_checks import fd_gradient_complex as fd_gradient

rng = np.random.default_rng(2024)


def crandn(*shape):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


N = 3
_S, _B = crandn(N, N), crandn(N, N)
HAM = _S + _S.conj().T                    # Hermitian generators
OBS = _B + _B.conj().T
PSI0 = crandn(N) / np.sqrt(6.0)
TARGET = crandn(N)
T0 = np.array([0.3, 0.7])


def fd_hessian(f, x, eps=1e-5):
    grad = lambda x: gradient(Reverse, f, x)[0]   # noqa: E731
    return np.array([(grad(x + eps * e) - grad(x - eps * e)) / (2 * eps) for e in np.eye(x.size)])


def check_program(f, z, rtol=1e-6, atol=1e-7):
    (g,), value = autodiff(ReverseWithPrimal, f, Active, Active(z.copy()))
    assert value == pytest.approx(f(z.copy()), rel=1e-12, abs=1e-12)
    gf, = gradient(Forward, f, z.copy())
    assert np.asarray(g).dtype == np.asarray(gf).dtype == z.dtype
    ref = fd_gradient(f, z)
    np.testing.assert_allclose(g, ref, rtol=rtol, atol=atol)
    np.testing.assert_allclose(gf, g, rtol=1e-10, atol=1e-12)


# -- quantum-style programs ---------------------------------------------------------------------
def energy_expm(t):
    u = tsl.expm(-1j * (t[0] * HAM + t[1] * OBS))
    psi = u @ PSI0
    return np.real(np.vdot(psi, OBS @ psi))


def energy_eigh(t):
    w, v = np.linalg.eigh(t[0] * HAM + t[1] * OBS)
    psi = ((v * np.exp(-1j * w)) @ v.conj().T) @ PSI0
    return np.real(np.conj(psi) @ (OBS @ psi))


def fidelity(t):
    psi = tsl.expm(-1j * (t[0] * HAM + t[1] * OBS)) @ PSI0
    return np.abs(np.inner(TARGET.conj(), psi)) ** 2


def energy_of_generator(k):   # complex parameter K, generator K + K^H
    psi = tsl.expm(-1j * (k + k.conj().T)) @ PSI0
    return np.real(np.einsum("i,ij,j->", psi.conj(), OBS, psi))


def rayleigh(psi):
    psi = psi / np.linalg.norm(psi)
    return np.real(np.vdot(psi, HAM @ psi))


_PX = np.array([[0, 1], [1, 0]], complex)
_PY = np.array([[0, -1j], [1j, 0]])
_PZ = np.diag([1.0 + 0j, -1.0])
_CNOT = np.eye(4)[[0, 1, 3, 2]].astype(complex)


def _rot(p, t):
    return np.cos(t / 2) * np.eye(2) - 1j * np.sin(t / 2) * p


def two_qubit_circuit(t):
    psi = np.zeros(4, complex)
    psi[0] = 1
    psi = _CNOT @ (np.kron(_rot(_PX, t[0]), _rot(_PY, t[1])) @ psi)
    psi = np.kron(_rot(_PY, t[2]), np.eye(2)) @ psi
    rho_a = np.einsum("ijkj->ik", np.outer(psi, psi.conj()).reshape(2, 2, 2, 2))
    p = np.clip(np.linalg.eigvalsh(rho_a), 1e-12, 1.0)
    return (-np.sum(p * np.log(p)) + np.real(np.trace(rho_a @ rho_a))
            + np.real(np.vdot(psi, np.kron(_PZ, _PZ) @ psi)))


QUANTUM = {
    "expm_energy": (energy_expm, T0),
    "eigh_energy": (energy_eigh, T0),
    "fidelity": (fidelity, T0),
    "expm_of_complex_generator": (energy_of_generator, 0.3 * crandn(N, N)),
    "rayleigh_quotient": (rayleigh, crandn(N)),
    "two_qubit_entropy_purity": (two_qubit_circuit, np.array([0.3, 1.1, -0.4])),
}


@pytest.mark.parametrize("name", QUANTUM)
def test_quantum_programs(name):
    f, x = QUANTUM[name]
    check_program(f, x)


@pytest.mark.parametrize("f, x", [(energy_expm, T0), (energy_eigh, T0),
                                  (two_qubit_circuit, np.array([0.3, 1.1, -0.4]))])
def test_quantum_hessians_and_hvp_on_real_parameters(f, x):
    h = tape.hessian(f, x)
    np.testing.assert_allclose(h, fd_hessian(f, x), rtol=1e-5, atol=1e-7)
    v = np.linspace(1.0, -2.0, x.size)
    np.testing.assert_allclose(tape.hvp(f, x, v), h @ v, rtol=1e-10, atol=1e-10)


def test_compiled_circuit_and_checkpointed_evolution():
    rev = tape.compile(ReverseWithPrimal, two_qubit_circuit, Active, Active)
    t = np.array([0.3, 1.1, -0.4])
    for x in (t, 2 * t, t):
        (g,), value = rev(Active(x.copy()))
        assert value == pytest.approx(two_qubit_circuit(x), rel=1e-13)
        np.testing.assert_allclose(g, fd_gradient(two_qubit_circuit, x), rtol=1e-6, atol=1e-7)
    assert rev.stats.traces == 1 and not rev.stats.eager_reasons

    @tape.checkpoint
    def step(psi, t):
        return tsl.expm(-1j * t * (_PX + 0.5 * _PZ)) @ psi

    def loss(z):
        psi = z
        for k in range(3):
            psi = step(psi, 0.3 * (k + 1))
        return np.abs(psi[1]) ** 2 + np.angle(psi[0])

    check_program(loss, crandn(2))


# -- spectral programs --------------------------------------------------------------------------
KER = rng.standard_normal(8)
MEAS = np.abs(np.fft.fft(crandn(8))) ** 2
SPECTRAL = {
    "rfft_convolution": (lambda x: np.sum(np.fft.irfft(np.fft.rfft(x) * np.fft.rfft(KER), n=8)
                                          ** 2 * np.arange(8)), rng.standard_normal(8)),
    "rfft_convolution_odd_n": (lambda x: np.sum(np.fft.irfft(np.fft.rfft(x, n=7)
                                                             * np.fft.rfft(KER, n=7), n=7) ** 3),
                               rng.standard_normal(8)),
    "fftshift_weighted_spectrum": (lambda z: np.sum(np.abs(np.fft.fftshift(np.fft.fft(z))) ** 2
                                                    * (np.arange(8) - 4) ** 2), crandn(8)),
    "ifftshift_ortho": (lambda z: np.sum(np.abs(np.fft.ifftshift(np.fft.fft(z, norm="ortho"))
                                                [:4]) ** 2), crandn(8)),
    "phase_retrieval": (lambda z: np.sum((np.abs(np.fft.fft(z)) ** 2 - MEAS) ** 2), crandn(8)),
    "phase_retrieval_real_signal": (lambda x: np.sum((np.abs(np.fft.fft(x)) ** 2 - MEAS) ** 2),
                                    rng.standard_normal(8)),
    "phase_retrieval_2d": (lambda z: np.sum((np.real(np.fft.fft2(z) * np.conj(np.fft.fft2(z)))
                                             - 1.0) ** 2), crandn(3, 4)),
    "irfft_of_complex_spectrum_n9": (lambda c: np.sum(np.fft.irfft(c, n=9) ** 2 * np.arange(9)),
                                     crandn(5)),
    "fft_padded_and_truncated": (lambda z: np.sum(np.abs(np.fft.fft(z, n=11)) ** 2 * np.arange(11))
                                 + np.sum(np.abs(np.fft.fft(z, n=5))), crandn(8)),
    "fftshift_axes_2d": (lambda z: np.sum(np.abs(np.fft.fftshift(np.fft.fft2(z), axes=0))
                                          * np.arange(6).reshape(2, 3)), crandn(2, 3)),
}


@pytest.mark.parametrize("name", SPECTRAL)
def test_spectral_programs(name):
    f, x = SPECTRAL[name]
    check_program(f, x)


def test_spectral_loss_hessian_on_a_real_signal():
    def f(x):
        return (np.sum(np.abs(np.fft.rfft(x) * np.fft.rfft(x[::-1])) ** 2)
                + np.sum(np.angle(np.fft.fft(x)[1:4]) ** 2))
    x = rng.standard_normal(6)
    np.testing.assert_allclose(tape.hessian(f, x), fd_hessian(f, x), rtol=1e-5, atol=1e-6)


# -- least squares, SVD losses, unitary parametrisations ---------------------------------------
A53, B5, S33 = crandn(5, 3), crandn(5), crandn(3, 3)


def cayley_energy(k):
    skew = k - k.conj().T
    u = np.linalg.solve(np.eye(N) + skew, np.eye(N) - skew)
    return np.real(np.vdot(u @ PSI0, OBS @ (u @ PSI0)))


def cayley_trace(k):
    skew = k - k.conj().T
    return np.abs(np.trace((np.eye(N) - skew) @ np.linalg.inv(np.eye(N) + skew) @ OBS)) ** 2


LINALG = {
    "lstsq_solution": (lambda a: np.sum(np.abs(np.linalg.lstsq(a, B5, rcond=None)[0]) ** 2), A53),
    "lstsq_rhs": (lambda b: np.sum(np.abs(np.linalg.lstsq(A53, b, rcond=None)[0] * [1, 2, 3])
                                   ** 2), B5),
    "lstsq_real_a_complex_b": (lambda b: np.sum(np.abs(np.linalg.lstsq(A53.real, b, rcond=None)[0])
                                                ** 2 * [1, 2, 3]), B5),
    "normal_equations_inv": (lambda a: np.real(np.vdot(B5[:3], np.linalg.inv(a.conj().T @ a)
                                                       @ (a.conj().T @ B5))), A53),
    "pinv_wide": (lambda a: np.sum(np.abs(np.linalg.pinv(a) @ B5[:3]) ** 2), A53.T.copy()),
    "pinv_hermitian": (lambda a: np.real(np.sum(np.linalg.pinv(a @ a.conj().T + np.eye(3),
                                                               hermitian=True) * S33)), S33),
    "nuclear_plus_spectral_norm": (lambda a: np.linalg.norm(a, "nuc") + np.linalg.norm(a, 2),
                                   A53),
    "singular_value_cubes_and_cond": (lambda a: np.sum(np.linalg.svd(a, compute_uv=False) ** 3)
                                      + np.linalg.cond(a[:3]), A53),
    "gram_logdet": (lambda a: np.linalg.slogdet(a.conj().T @ a)[1], A53),
    "cayley_solve": (cayley_energy, 0.3 * crandn(N, N)),
    "cayley_inv": (cayley_trace, 0.3 * crandn(N, N)),
    "lu_solve": (lambda a: np.sum(np.abs(tsl.lu_solve(tsl.lu_factor(a), S33[:, 0])) ** 2),
                 S33 + 2 * np.eye(3)),
    "solve_triangular_trans_C": (lambda a: np.sum(np.abs(tsl.solve_triangular(
        a + 3 * np.eye(3), S33[:, 0], trans="C")) ** 2), S33),
    "eig_evolution": (lambda t: np.sum(np.abs(
        (lambda w, v: v @ np.diag(np.exp(w)) @ np.linalg.inv(v))(
            *np.linalg.eig(S33 * t[0] + np.diag([1.0, 2.0, 3.0]) * t[1]))) ** 2), T0),
}


@pytest.mark.parametrize("name", LINALG)
def test_least_squares_svd_and_unitary_programs(name):
    f, x = LINALG[name]
    check_program(f, x)


def test_second_order_of_svd_lstsq_and_cayley_losses_on_real_parts():
    def as_complex(x, shape):
        k = x.size // 2
        return x[:k].reshape(shape) + 1j * x[k:].reshape(shape)

    def svd_loss(x):
        a = as_complex(x, (3, 2))
        return np.sum(np.linalg.svd(a, compute_uv=False) ** 3) + np.linalg.norm(a, "nuc")

    def lstsq_loss(x):
        a = as_complex(x, (3, 2))
        return (np.sum(np.abs(np.linalg.lstsq(a, PSI0, rcond=None)[0]) ** 2)
                + np.sum(np.abs(np.linalg.pinv(a)) ** 2))

    def cayley_modrelu(x):
        psi = np.linalg.solve(np.eye(3) + (lambda k: k - k.conj().T)(as_complex(x, (3, 3))),
                              PSI0)
        r = np.abs(psi)
        return np.sum(np.where(r > 0.2, (r - 0.2) * np.angle(psi), 0) ** 2)

    for f, x in ((svd_loss, rng.standard_normal(12)), (lstsq_loss, rng.standard_normal(12)),
                 (cayley_modrelu, 0.3 * rng.standard_normal(18))):
        np.testing.assert_allclose(tape.hessian(f, x), fd_hessian(f, x), rtol=1e-5, atol=1e-6)


# -- complex activations and contractions with conj ---------------------------------------------
BIAS = rng.standard_normal(4)
Z4, M4 = crandn(4), crandn(4, 4)
ACTIVATIONS = {
    "modrelu_where": lambda z: np.sum(np.abs(np.where(np.abs(z) + BIAS > 0,
                                                      (np.abs(z) + BIAS) / np.abs(z) * z, 0)
                                             * [1, 2j, 3, -1]) ** 2),
    "modrelu_maximum": lambda z: np.sum(np.real(np.maximum(np.abs(z) + BIAS, 0) * z / np.abs(z))
                                        * [1, 2, 3, 4]),
    "cardioid": lambda z: np.sum(np.abs(0.5 * (1 + np.cos(np.angle(z))) * z) ** 2),
    "crelu": lambda z: np.sum(np.abs(np.maximum(np.real(z), 0) + 1j * np.maximum(np.imag(z), 0))
                              ** 2 * [1, 2, 3, 4]),
    "phase_only": lambda z: np.real(np.sum(np.exp(1j * np.angle(z)) * Z4[::-1])),
    "angle_degrees": lambda z: np.sum(np.angle(z, deg=True) ** 2),
    "imag_setter": lambda z: np.sum(np.abs((lambda y: (setattr(y, "imag", z.real ** 2), y)[1])(
        z.copy())) ** 2 * [1, 2, 3, 4]),
    "quadratic_form_einsum_optimize": lambda z: np.real(np.einsum("i,ij,jk,k->", z.conj(), M4, M4,
                                                                  z, optimize=True)),
    "vdot_of_matrices": lambda z: np.abs(np.vdot(z.reshape(2, 2), M4[:2, :2])) ** 2,
    "inner_with_conj": lambda z: np.imag(np.inner(np.conj(z), M4 @ z)),
    "multi_dot": lambda z: np.real(np.linalg.multi_dot([z.conj(), M4, M4, z])),
    "vecdot_conjugates_first": lambda z: np.real(np.sum(np.linalg.vecdot(z.reshape(2, 2),
                                                                         z.reshape(2, 2)[::-1]))),
    "correlate_conjugates_second": lambda z: np.sum(np.abs(np.correlate(Z4, z, mode="full")) ** 2
                                                    * np.arange(7)),
    "add_at_products": lambda z: np.sum(np.abs((lambda y: (np.add.at(y, [0, 0, 2],
                                                                     z[:3] * z[1:]), y)[1])(
        np.zeros_like(z))) ** 2),
}


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_complex_activations_and_contractions(name):
    check_program(ACTIVATIONS[name], Z4)


def test_abs_and_angle_on_the_real_axis_and_at_zero():
    z = np.array([0j, 1 + 0j, -1 + 0j])
    f = lambda z: np.sum(np.abs(z)) + np.sum(np.angle(z))   # noqa: E731
    for mode in (Reverse, Forward):
        g, = gradient(mode, f, z)
        np.testing.assert_array_equal(g, [0, 1 + 1j, -1 - 1j])


# -- pytrees, complex seeds, complex64 ----------------------------------------------------------
def test_mixed_real_complex_pytree():
    params = {"t": T0.copy(), "k": 0.2 * crandn(N, N), "phase": 0.4, "psi": [crandn(N), 1.5]}

    def loss(p):
        g = p["t"][0] * HAM + p["t"][1] * OBS + p["k"] + p["k"].conj().T
        psi = tsl.expm(-1j * g) @ (p["psi"][0] * np.exp(1j * p["phase"])) * p["psi"][1]
        return np.real(np.vdot(psi, OBS @ psi)) + np.abs(np.fft.fft(psi)[0]) ** 2

    def fd_leaf(get, put):
        def f(v):
            p = copy.deepcopy(params)
            put(p, v)
            return loss(p)
        return fd_gradient(f, np.asarray(get(params)))

    ref = {"t": fd_leaf(lambda p: p["t"], lambda p, v: p.__setitem__("t", v)),
           "k": fd_leaf(lambda p: p["k"], lambda p, v: p.__setitem__("k", v)),
           "phase": fd_leaf(lambda p: p["phase"], lambda p, v: p.__setitem__("phase", float(v))),
           "psi0": fd_leaf(lambda p: p["psi"][0], lambda p, v: p["psi"].__setitem__(0, v)),
           "psi1": fd_leaf(lambda p: p["psi"][1],
                           lambda p, v: p["psi"].__setitem__(1, float(v)))}
    (gr,), value = autodiff(ReverseWithPrimal, loss, Active, Active(params))
    assert value == pytest.approx(loss(params), rel=1e-13)
    gf, = gradient(Forward, loss, params)
    for g in (gr, gf):
        assert g["t"].dtype == np.float64 and g["k"].dtype == np.complex128
        assert isinstance(g["phase"], float) and isinstance(g["psi"][1], float)
        np.testing.assert_allclose(g["t"], ref["t"], rtol=1e-6)
        np.testing.assert_allclose(g["k"], ref["k"], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(g["psi"][0], ref["psi0"], rtol=1e-6, atol=1e-7)
        # (a global phase: the derivative is 0, the finite difference rounding noise)
        assert g["phase"] == pytest.approx(float(ref["phase"]), rel=1e-6, abs=1e-7)
        assert g["psi"][1] == pytest.approx(float(ref["psi1"]), rel=1e-6)


def test_forward_complex_seeds_of_a_real_loss_and_batches():
    # The tangent of a real loss along a complex seed v is Re(conj(grad) v), and the batch
    # (v, iv) gives both directions at once; hvp with complex x and v is the directional
    # derivative of the gradient.
    f = lambda z: np.sum(np.abs(np.fft.fft(z)) ** 3)   # noqa: E731
    z, v = crandn(5), crandn(5)
    g, = gradient(Reverse, f, z)
    t, = autodiff(Forward, f, Duplicated(z.copy(), v))
    assert t == pytest.approx(np.sum(np.real(np.conj(g) * v)), rel=1e-12)
    (t1, t2), = autodiff(Forward, f, BatchDuplicated(z.copy(), (v, 1j * v)))
    assert t1 == pytest.approx(t, rel=1e-12)
    assert t2 == pytest.approx((f(z + 1e-6j * v) - f(z - 1e-6j * v)) / 2e-6, rel=1e-6)
    grad = lambda z: gradient(Reverse, f, z)[0]   # noqa: E731
    np.testing.assert_allclose(tape.hvp(f, z, v), (grad(z + 1e-6 * v) - grad(z - 1e-6 * v)) / 2e-6,
                               rtol=1e-6, atol=1e-6)


M64 = crandn(4, 4).astype(np.complex64)
SINGLE = {
    "quadratic_form": (lambda z: np.real(np.vdot(z, M64 @ z)), crandn(4)),
    "irfft_spectrum": (lambda c: np.sum(np.fft.irfft(c) ** 2 * np.arange(6, dtype=np.float32)),
                       crandn(4)),
    "lstsq": (lambda a: np.sum(np.abs(np.linalg.lstsq(a, M64[:, 0], rcond=None)[0]) ** 2),
              crandn(4, 4)),
    "expm": (lambda a: np.real(np.trace(tsl.expm(0.3 * a) @ M64)), crandn(4, 4)),
    "sqrtm": (lambda a: np.real(np.trace(tsl.sqrtm(a @ a.conj().T + np.eye(4, dtype=np.float32)))),
              crandn(4, 4)),
    "modrelu": (lambda z: np.sum(np.where(np.abs(z) > 0.5, (np.abs(z) - 0.5) / np.abs(z) * z, 0)
                                 .real), crandn(4)),
}


@pytest.mark.parametrize("name", SINGLE)
def test_complex64_programs_keep_single_precision(name):
    f, z = SINGLE[name]
    z64 = z.astype(np.complex64)
    (g,), value = autodiff(ReverseWithPrimal, f, Active, Active(z64.copy()))
    gf, = gradient(Forward, f, z64.copy())
    assert np.asarray(value).dtype == np.asarray(f(z64)).dtype == np.float32
    assert g.dtype == gf.dtype == np.complex64
    g128, = gradient(Reverse, f, z64.astype(np.complex128))
    np.testing.assert_allclose(g, g128, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(gf, g128, rtol=2e-3, atol=2e-3)


# -- holomorphic programs -------------------------------------------------------------------------
_MH, _ZH = crandn(3, 3), crandn(3)
HOLOMORPHIC = {
    "expm_entry": lambda z: tsl.expm(np.array([[z, 1.0], [0.0, z * z]]))[0, 1],
    "solve": lambda z: np.linalg.solve(_MH + z * np.eye(3), _ZH)[1],
    "det": lambda z: np.linalg.det(_MH * z + np.eye(3)),
    "fft_of_powers": lambda z: np.sum(np.fft.fft(np.exp(z * np.arange(4))) * np.arange(4)),
    "einsum": lambda z: np.einsum("i,ij,j->", _ZH, _MH, _ZH * z),
    "matrix_power": lambda z: np.linalg.matrix_power(_MH * z, 3)[0, 0],
    "sqrtm": lambda z: tsl.sqrtm(np.eye(2) * 3 + z * np.array([[1.0, 2.0], [0.0, 1.0]]))[0, 1],
    "solve_triangular": lambda z: tsl.solve_triangular(np.triu(_MH) + (z + 2) * np.eye(3), _ZH)[0],
    "complex_power": lambda z: (1.5 + 0.2j) ** z,
}


@pytest.mark.parametrize("name", HOLOMORPHIC)
def test_holomorphic_programs(name):
    f, z = HOLOMORPHIC[name], 0.4 + 0.3j
    want = (f(z + 1e-6) - f(z - 1e-6)) / 2e-6
    (g,), = autodiff(ReverseHolomorphic, f, Active, Active(z))
    t, = autodiff(Forward, f, Duplicated(z, 1.0 + 0j))
    assert g == pytest.approx(want, rel=1e-7)
    assert t == pytest.approx(want, rel=1e-7)


def test_compiled_holomorphic_fft_program():
    f = lambda z: np.sum(np.fft.fft(z * z)[1:])   # noqa: E731
    rev = tape.compile(ReverseHolomorphic, f, Active, Active)
    z = crandn(3)
    for x in (z, 2 * z):
        (g,), = rev(Active(x.copy()))
        want = [(f(x + 1e-6 * e) - f(x - 1e-6 * e)) / 2e-6 for e in np.eye(3)]
        np.testing.assert_allclose(g, want, rtol=1e-7, atol=1e-8)
