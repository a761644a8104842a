"""Complex numbers: compiled programs with branches, complex linear algebra and real<->complex
FFTs against central differences on the real and imaginary parts, complex64 precision, and the
branch cuts with signed-zero imaginary parts (docs/complex.md: the gradient of a real f of
z = x + iy is df/dx + i df/dy)."""
import warnings

import numpy as np
import pytest

import tape
from tape import (Active, Duplicated, Forward, ForwardWithPrimal, Reverse, ReverseWithPrimal,
                  autodiff)
from tape.testing import traced_value

from numeric_checks import fd_gradient_complex as fd_gradient

rng = np.random.default_rng(33)


def crandn(*shape):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


Z, W = crandn(3), crandn(3)
A, WM = crandn(3, 3), crandn(3, 3)
H = A @ A.conj().T + 3 * np.eye(3)


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return (a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)
            and np.array_equal(np.signbit(a.real), np.signbit(b.real))
            and np.array_equal(np.signbit(a.imag), np.signbit(b.imag)))


# -- tape.compile: complex inputs and intermediates, branches that change between calls ----------
def branchy_loss(z):
    if np.sum(np.real(z)) > 0:
        return np.sum(np.abs(z * W) ** 2) + np.real(np.vdot(z, np.exp(z)))
    return np.sum(np.angle(z) + np.imag(np.conj(z) * z * W)) + np.linalg.norm(np.sqrt(z))


def test_compiled_reverse_of_complex_code_equals_eager_as_branches_change():
    rev = tape.compile(Reverse, branchy_loss, Active, Active)
    revp = tape.compile(ReverseWithPrimal, branchy_loss, Active, Active)
    for z in (Z, -Z, 2 * Z, -3 * Z, Z):   # trace, trace, replay, replay, replay
        (eager,), = autodiff(Reverse, branchy_loss, Active, Active(z.copy()))
        (g,), = rev(Active(z.copy()))
        (gp,), value = revp(Active(z.copy()))
        np.testing.assert_allclose(g, eager, rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(gp, eager, rtol=1e-13, atol=1e-13)
        assert value == pytest.approx(branchy_loss(z), rel=1e-14)
        np.testing.assert_allclose(g, fd_gradient(branchy_loss, z), rtol=1e-6, atol=1e-7)
    assert rev.stats.traces == 2 and rev.stats.hits == 3 and not rev.stats.eager_reasons


def test_compiled_reverse_shadows_and_dtype_changes_of_the_same_signature():
    # One compiled function called with float, complex128, complex64 and float32 arrays: each
    # gets its own program and a derivative of its own dtype, equal to the eager one.
    def loss(z):
        return np.sum(np.abs(z * z + 1) ** 2) if np.real(z[0]) > 0 else np.sum(np.real(z) ** 3)

    rev = tape.compile(Reverse, loss, Active, Duplicated)
    for z in (np.array([1.0, 2.0]), np.array([1 + 1j, 2 - 1j]),
              np.array([1 + 1j, 2 - 1j], np.complex64), np.array([-1.0, 2.0], np.float32),
              np.array([-1 + 1j, 2 - 1j]), np.array([1 + 1j, 2 - 1j])):
        dz, dz_eager = np.zeros_like(z), np.zeros_like(z)
        rev(Duplicated(z.copy(), dz))
        autodiff(Reverse, loss, Active, Duplicated(z.copy(), dz_eager))
        assert dz.dtype == z.dtype
        np.testing.assert_allclose(dz, dz_eager, rtol=1e-6 if z.dtype.itemsize < 16 else 1e-13)
    assert not rev.stats.eager_reasons


def test_compiled_forward_of_complex_code_equals_eager_as_branches_change():
    def f(z):
        if np.imag(z[0]) > 0:
            return np.exp(z) * np.conj(z) + np.abs(z)
        return np.sqrt(z) * np.real(z) - np.log(z) * 1j

    fwd = tape.compile(Forward, f, Duplicated)
    fwdp = tape.compile(ForwardWithPrimal, f, Duplicated)
    for z in (Z, np.conj(Z), 1j * Z, Z, np.conj(Z)):
        z = np.where(np.imag(z[0]) == 0, z + 0.1j, z)
        eager, = autodiff(Forward, f, Duplicated(z.copy(), W.copy()))
        t, = fwd(Duplicated(z.copy(), W.copy()))
        tp, value = fwdp(Duplicated(z.copy(), W.copy()))
        np.testing.assert_allclose(t, eager, rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(tp, eager, rtol=1e-13, atol=1e-13)
        assert same_bits(value, f(z))
        np.testing.assert_allclose(t, (f(z + 1e-6 * W) - f(z - 1e-6 * W)) / 2e-6, rtol=1e-6,
                                   atol=1e-7)
    assert fwd.stats.traces >= 2 and fwd.stats.hits >= 2 and not fwd.stats.eager_reasons


def test_compiled_forward_real_input_complex_result_and_complex64():
    # A real input whose result is complex gets a complex tangent from the compiled program too.
    f = lambda x: np.exp(1j * x) if x[0] > 0 else x + 0j   # noqa: E731
    fwdp = tape.compile(ForwardWithPrimal, f, Duplicated)
    for x in (np.array([1.0, 2.0]), np.array([-1.0, 2.0]), np.array([1.0, 3.0])):
        t, value = fwdp(Duplicated(x.copy(), np.ones(2)))
        eager = autodiff(ForwardWithPrimal, f, Duplicated(x.copy(), np.ones(2)))
        assert t.dtype == np.complex128 and same_bits(value, f(x))
        np.testing.assert_allclose(t, eager[0], rtol=1e-14)
    g = lambda z: np.log(z) * np.conj(z)   # noqa: E731
    fwd = tape.compile(ForwardWithPrimal, g, Duplicated)
    z64 = Z.astype(np.complex64)
    for _ in range(2):
        t, value = fwd(Duplicated(z64.copy(), np.ones(3, np.complex64)))
        assert t.dtype == np.complex64 and value.dtype == np.complex64
        np.testing.assert_allclose(value, g(z64), rtol=1e-6)


# -- complex linear algebra against central differences ------------------------------------------
def _svd_rebuilt(a, full=True):
    u, s, vh = np.linalg.svd(a, full_matrices=full)
    return (u[:, :s.size] * s) @ vh[:s.size]


def _projector(v):
    return np.outer(v, v.conj())


A32 = crandn(3, 2)
LINALG = {
    "solve_hermitian": (lambda a: np.sum(np.abs(np.linalg.solve(a, A[:, :2])) ** 2), H),
    "inv_real_part": (lambda a: np.sum(np.real(WM * np.linalg.inv(a))), A),
    "det_imag": (lambda a: np.imag(np.linalg.det(a)), A),
    "slogdet_sign_and_log": (lambda a: np.real(np.linalg.slogdet(a)[0] * WM[0, 0])
                             + np.linalg.slogdet(a)[1], A),
    "eigh_upper_triangle": (lambda a: np.sum(np.linalg.eigh(a, UPLO="U")[0] * [1.0, 2.0, 3.0]),
                            H),
    "eigh_projector": (lambda a: np.real(np.sum(WM * _projector(np.linalg.eigh(a)[1][:, 0]))), H),
    "svd_thin_rebuilt": (lambda a: np.real(np.sum(WM[:, :2] * _svd_rebuilt(a, False))), A32),
    "svd_left_projector": (lambda a: np.real(np.sum(WM * _projector(np.linalg.svd(a)[0][:, 0]))),
                           A),
    "svd_u_vh_pair": (lambda a: np.real(np.sum(WM * np.outer(np.linalg.svd(a)[0][:, 0],
                                                             np.linalg.svd(a)[2][0]))), A),
    "qr_thin": (lambda a: np.real(np.sum(WM[:, :2] * np.linalg.qr(a)[0])
                                  + np.sum(WM[:2, :2] * np.linalg.qr(a)[1])), A32),
    "cholesky_imag": (lambda a: np.imag(np.sum(WM * np.linalg.cholesky(a))), H),
    "cholesky_upper": (lambda a: np.real(np.sum(WM * np.linalg.cholesky(a, upper=True))), H),
    "norm_2_and_cond": (lambda a: np.linalg.norm(a, 2) + np.linalg.cond(a), A),
}


@pytest.mark.parametrize("name", sorted(LINALG))
def test_complex_linalg_against_finite_differences(name):
    f, a = LINALG[name]
    (g,), value = autodiff(ReverseWithPrimal, f, Active, Active(a.copy()))
    assert value == pytest.approx(f(a), rel=1e-13)
    expected = fd_gradient(f, a)
    np.testing.assert_allclose(g, expected, rtol=1e-6, atol=1e-7)
    # Forward mode along one real and one imaginary direction gives those parts.
    for unit, part in ((1.0, np.real), (1j, np.imag)):
        e = np.zeros_like(a)
        e[1, 0] = unit
        t, = autodiff(Forward, f, Duplicated(a.copy(), e))
        assert t == pytest.approx(part(expected[1, 0]), rel=1e-6, abs=1e-7)


# -- real <-> complex FFTs -----------------------------------------------------------------------
X6, X5, Z4 = rng.standard_normal(6), rng.standard_normal(5), crandn(4)
W8 = crandn(8)
WEIGHTS = np.arange(1.0, 9.0)


@pytest.mark.parametrize("n", [None, 4, 7, 8])
@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
def test_real_complex_ffts_against_finite_differences(n, norm):
    # irfft and hfft ignore the imaginary parts of the zero (and, for even n, the Nyquist) bin:
    # the gradient must have no imaginary part there.
    cases = [
        (lambda v: np.sum(np.real(W8[:n // 2 + 1 if n else 4]
                                  * np.fft.rfft(v, n=n, norm=norm))), X6),
        (lambda v: np.sum(WEIGHTS[:n or 6] * np.fft.irfft(v, n=n, norm=norm)), Z4),
        (lambda v: np.sum(WEIGHTS[:n or 6] * np.fft.hfft(v, n=n, norm=norm)), Z4),
        (lambda v: np.sum(np.imag(W8[:(n or 5) // 2 + 1] * np.fft.ihfft(v, n=n, norm=norm))),
         X5),
    ]
    for f, x in cases:
        (g,), = autodiff(Reverse, f, Active, Active(x.copy()))
        np.testing.assert_allclose(g, fd_gradient(f, x), rtol=1e-6, atol=1e-8)


def test_two_dimensional_real_ffts_against_finite_differences():
    m, zm = rng.standard_normal((4, 5)), crandn(4, 3)
    for f, x in ((lambda v: np.sum(np.real(WM[:1, :3] * np.fft.rfft2(v))), m),
                 (lambda v: np.sum(m * np.fft.irfft2(v, s=(4, 5))), zm),
                 (lambda v: np.sum(np.arange(18.0).reshape(6, 3) * np.fft.irfftn(v, axes=(0,))),
                  zm)):
        (g,), = autodiff(Reverse, f, Active, Active(x.copy()))
        np.testing.assert_allclose(g, fd_gradient(f, x), rtol=1e-6, atol=1e-8)


# -- complex64 is kept: values and derivatives ---------------------------------------------------
A64, H64 = A.astype(np.complex64), H.astype(np.complex64)
SINGLE = {
    "solve": (lambda a: np.sum(np.abs(np.linalg.solve(a, a[:, 0]))), A64),
    "slogdet": (lambda a: np.linalg.slogdet(a)[1], A64),
    "eigh": (lambda a: np.sum(np.linalg.eigh(a)[0] ** 2), H64),
    "svd": (lambda a: np.sum(np.linalg.svd(a)[1]), A64),
    "cholesky": (lambda a: np.sum(np.real(np.linalg.cholesky(a))), H64),
    "irfft": (lambda a: np.sum(np.fft.irfft(a) ** 2), A64),
    "hfft": (lambda a: np.sum(np.fft.hfft(a[0]) * np.arange(4, dtype=np.float32)), A64),
    "abs2_angle": (lambda a: np.sum(np.real(a * np.conj(a)) + np.angle(a)), A64),
}


@pytest.mark.parametrize("name", sorted(SINGLE))
def test_complex64_values_and_derivatives_stay_single_precision(name):
    f, a = SINGLE[name]
    want = np.asarray(f(a))
    (g,), value = autodiff(ReverseWithPrimal, f, Active, Active(a.copy()))
    assert g.dtype == np.complex64 and np.asarray(value).dtype == want.dtype == np.float32
    t, value = autodiff(ForwardWithPrimal, f, Duplicated(a.copy(), np.ones_like(a)))
    assert np.asarray(t).dtype == np.float32 and np.asarray(value).dtype == np.float32
    np.testing.assert_allclose(g, fd_gradient(f, a.astype(np.complex128)), rtol=2e-3, atol=2e-3)


# -- branch cuts with signed zeros ---------------------------------------------------------------
def one_sided_derivative(f, z, direction, h=1e-6):
    """d f / d(direction) at z on a branch cut, from the side z's signed zero names (second-order
    one-sided differences); central differences along the cut itself."""
    along_cut_is_real = z.imag == 0
    if (direction == 1.0) == along_cut_is_real:   # moving along the cut keeps the side
        if along_cut_is_real:
            def at(t):
                return f(complex(z.real + t, z.imag))
        else:
            def at(t):
                return f(complex(z.real, z.imag + t))
        return (at(h) - at(-h)) / (2 * h)
    side = -1.0 if np.signbit(z.imag if along_cut_is_real else z.real) else 1.0
    if along_cut_is_real:
        def at(t):
            return f(complex(z.real, z.imag + side * t)) if t else f(z)
    else:
        def at(t):
            return f(complex(z.real + side * t, z.imag)) if t else f(z)
    return side * (-3 * at(0) + 4 * at(h) - at(2 * h)) / (2 * h)


def check_on_cut(fn, z):
    bad = []
    for part in (np.real, np.imag):
        loss = lambda v: np.sum(part(fn(v)))   # noqa: E731
        (g,), value = autodiff(ReverseWithPrimal, loss, Active, Active(np.array([z])))
        if not same_bits(value, loss(np.array([z]))):
            bad.append(f"{part.__name__} value {value!r}")
        for direction, gpart in ((1.0, np.real), (1j, np.imag)):
            want = one_sided_derivative(lambda v: part(fn(np.array([v])))[0], z, direction)
            seed = np.array([direction], complex)
            t, = autodiff(Forward, loss, Duplicated(np.array([z]), seed))
            if not (t == pytest.approx(want, rel=1e-5, abs=1e-7)
                    and gpart(g[0]) == pytest.approx(want, rel=1e-5, abs=1e-7)):
                bad.append(f"d{part.__name__}/d{direction}: forward {t}, reverse {gpart(g[0])},"
                           f" one-sided difference {want}")
    assert not bad, f"{fn.__name__} at {z!r}: " + "; ".join(bad)


CORRECT_ON_CUTS = [
    (np.sqrt, -4.0, "real"), (np.log, -4.0, "real"), (np.log10, -3.0, "real"),
    (np.log1p, -3.0, "real"), (np.arccosh, 0.5, "real"), (np.arcsin, 2.0, "real"),
    (np.arccos, 2.0, "real"), (np.arctanh, 2.0, "real"), (np.arctanh, -2.0, "real"),
    (np.arctan, 2.0, "imag"), (np.arctan, -2.0, "imag"), (np.emath.sqrt, -4.0, "real"),
    (lambda z: np.power(z, 1 / 3), -3.0, "real"), (lambda z: np.float_power(z, 0.5), -4.0, "real"),
]


@pytest.mark.parametrize("fn,at,axis", CORRECT_ON_CUTS)
@pytest.mark.parametrize("zero", [0.0, -0.0], ids=["+0", "-0"])
def test_values_and_derivatives_on_branch_cuts_follow_the_signed_zero(fn, at, axis, zero):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        check_on_cut(fn, complex(at, zero) if axis == "real" else complex(zero, at))


@pytest.mark.parametrize("fn", [np.arcsin, np.arccos])
def test_arcsin_arccos_derivative_below_minus_one_with_negative_zero(fn):
    # arcsin(-2 - 0j) = -pi/2 - 1.317i, continuous from below; d Re/dy there is -1/sqrt(3) for
    # arcsin, but the rule gives +1/sqrt(3).
    check_on_cut(fn, complex(-2.0, -0.0))


def test_arccosh_derivative_below_minus_one_with_negative_zero():
    # arccosh(-4 - 0j) = 2.063 - pi i; d Re/dx = -1/sqrt(15), the rule gives +1/sqrt(15).
    check_on_cut(np.arccosh, complex(-4.0, -0.0))


@pytest.mark.parametrize("z", [complex(0.0, -2.0), complex(-0.0, 2.0)], ids=["+0-2j", "-0+2j"])
def test_arcsinh_derivative_on_the_imaginary_cut(z):
    check_on_cut(np.arcsinh, z)


# -- the ** operator on complex arrays -------------------------------------------------------------
# NumPy's ndarray ** takes np.sqrt, np.reciprocal and np.square for a Python 0.5, -1 and 2 (and,
# before NumPy 2.3, for other scalar types and for 1), whose values at infinite or overflowing
# inputs differ from np.power's: the traced operator takes the same ufunc.
@pytest.mark.parametrize("mode", ["forward", "reverse"])
@pytest.mark.parametrize("p,x", [(0.5, [complex(np.inf, 1.0), 1 - 2j]),
                                 (-1, [complex(np.inf, 1.0), 1 - 2j]),
                                 (2, [complex(1e300, 1e300), 1 - 2j]),
                                 (0.5, np.array([-np.inf, 4.0], np.float32)),
                                 (2, np.array([complex(3e38, 3e38), 1j], np.complex64)),
                                 (np.float64(0.5), [-np.inf, 4.0]), (3, [complex(np.inf, 1.0)])],
                         ids=["sqrt", "reciprocal", "square", "sqrt-f32", "square-c64",
                              "np.float64", "cube"])
def test_power_operator_matches_numpy_ndarray_power(p, x, mode):
    x = np.asarray(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = x ** p
        assert same_bits(traced_value(lambda v: v ** p, x.copy(), mode=mode), want)
        x0 = x[:1].reshape(())   # a 0-d array (not a NumPy scalar) takes the same ufunc
        assert same_bits(traced_value(lambda v: v ** p, x0.copy(), mode=mode), x0 ** p)

        def inplace(v):
            v = v.copy()
            v **= p
            return v
        assert same_bits(traced_value(inplace, x.copy(), mode=mode), want)


@pytest.mark.xfail(strict=True, reason="a traced NumPy scalar's ** calls np.power, whose float "
                   "loop takes sqrt for the exponent 0.5 (nan at -inf, -0.0 at -0.0), while "
                   "NumPy's scalar ** calls C pow (inf, +0.0)")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_power_operator_of_a_numpy_scalar_matches_numpy(dtype):
    x = np.array([-np.inf, -0.0, 4.0], dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = [x[k] ** 0.5 for k in range(3)]   # NumPy scalars: inf, 0.0, 2.0
        got = traced_value(lambda v: [v[k] ** 0.5 for k in range(3)], x.copy())
    assert all(same_bits(g, w) for g, w in zip(got, want))


def test_power_operator_shortcuts_before_numpy_2_3(monkeypatch):
    # NumPy < 2.3 took the unary ufunc for any integer or floating scalar exponent (a 0-d array
    # too) equal to -1, 0.5, 2 or 1.
    monkeypatch.setattr(tape.operators, "_POWER_SHORTCUT_LEGACY", True)
    x = np.array([complex(np.inf, 1.0), 1 - 2j])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for p, ufunc in [(np.float64(0.5), np.sqrt), (np.array(-1), np.reciprocal),
                         (np.int8(2), np.square), (1, np.positive), (3.0, None)]:
            want = ufunc(x) if ufunc else np.power(x, p)
            assert same_bits(traced_value(lambda v: v ** p, x.copy()), want)


def test_power_operator_on_the_cut_keeps_the_side():
    # Not bit-equal to NumPy's sqrt (a 1e-16 real part), but on the side the signed zero names.
    for zero in (0.0, -0.0):
        x = np.array([complex(-4.0, zero)])
        value = traced_value(lambda v: v ** 0.5, x.copy(), mode="forward")
        np.testing.assert_allclose(value, x ** 0.5, atol=1e-15)
        assert np.signbit(value.imag[0]) == np.signbit(zero)


# -- forward tangents of c ** x keep single precision -------------------------------------------
@pytest.mark.parametrize("base,x", [(2.0 + 1j, Z.astype(np.complex64)),
                                    (2.0, np.array([0.3, 1.0], np.float32))],
                         ids=["complex64", "float32"])
def test_forward_tangent_of_a_scalar_to_an_array_power_keeps_precision(base, x):
    t, value = autodiff(ForwardWithPrimal, lambda v: base ** v, Duplicated(x.copy(),
                                                                           np.ones_like(x)))
    assert value.dtype == x.dtype
    assert t.dtype == x.dtype
