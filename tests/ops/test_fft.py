"""np.fft on traced values: fft, ifft, fftn, ifftn, fft2, ifft2, rfft, irfft, rfftn, irfftn,
rfft2, irfft2, hfft, ihfft, fftshift, ifftshift.

Primal results on traced input are compared with NumPy over random shapes, axes, lengths and
norms (and the errors NumPy raises with them); derivatives with finite differences in forward,
reverse and batch mode to second order, for every function and option, on real and complex
input; the half-spectrum weights also against Parseval's identity, worked out by hand.
"""
import doctest
import importlib
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ops.fft_rules
from tape.errors import NonDifferentiableError
from tape import Active, Duplicated, Forward, Reverse, ReverseHolomorphic, autodiff
from tape.testing import GradientCheckError, arrays, check_grads, shapes, traced_value

NORMS = [None, "backward", "ortho", "forward"]
rng = np.random.default_rng(3)


def randn(*shape, complex_=False):
    x = rng.standard_normal(shape)
    return x + 1j * rng.standard_normal(shape) if complex_ else x


def grad(f, *args):
    return autodiff(Reverse, f, Active, *map(Active, args))[0]


# -- primal values against NumPy -----------------------------------------------------------------
ONE_D = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"]
N_D = ["fftn", "ifftn", "rfftn", "irfftn", "fft2", "ifft2", "rfft2", "irfft2"]
REAL_ONLY = {"rfft", "ihfft", "rfftn", "rfft2"}


@st.composite
def fft_case(draw, name):
    """(array, keyword arguments) for one call of np.fft.<name>, valid or not."""
    shape = draw(shapes(1, 3, min_side=1, max_side=5))
    ndim = len(shape)
    a = draw(arrays(shape))
    if name not in REAL_ONLY and draw(st.booleans()):
        a = a + 1j * draw(arrays(shape))
    axis_value = st.integers(-ndim, ndim - 1)
    if name in ("fftshift", "ifftshift"):
        axes = draw(st.sampled_from(["none", "int", "tuple"]))
        if axes != "none":
            axes = draw(axis_value if axes == "int" else
                        st.lists(axis_value, min_size=1, max_size=ndim).map(tuple))
        return a, {"axes": None if axes == "none" else axes}
    kw = {"norm": draw(st.sampled_from(NORMS))}
    if name in ONE_D:
        kw["n"] = draw(st.sampled_from([None, 1, 2, 3, 4, 5, 6, 7, 8, 9]))
        kw["axis"] = draw(axis_value)
        return a, kw
    two = name.endswith("2")
    if draw(st.integers(0, 4)) == 0:   # the default axes
        axes = None if not two else [-2, -1]
        if two and ndim < 2:
            axes = draw(st.lists(axis_value, min_size=2, max_size=2))
    else:   # subsets, any order, negative values; repeats now and then
        axes = draw(st.lists(axis_value, min_size=2 if two else 1, max_size=2 if two else 4))
    kw["axes"] = axes
    if axes is not None and draw(st.booleans()):
        kw["s"] = draw(st.lists(st.sampled_from([-1, 1, 2, 3, 4, 5, 6, 7]),
                                min_size=len(axes), max_size=len(axes)))
    return a, kw


def _outcome(f, *args):
    try:
        return f(*args), None
    except Exception as e:   # noqa: BLE001 - the type is compared with NumPy's
        return None, e


def assert_matches(got, want):
    assert np.shape(got) == np.shape(want)
    assert np.result_type(got) == np.result_type(want)
    scale = 1.0 + np.max(np.abs(want), initial=0.0)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * scale)


@pytest.mark.parametrize("name", ONE_D + N_D + ["fftshift", "ifftshift"])
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_primal_matches_numpy(name, data):
    a, kw = data.draw(fft_case(name))
    f = lambda x: getattr(np.fft, name)(x, **kw)   # noqa: E731
    want, error = _outcome(f, a)
    if error is not None:
        with pytest.raises(type(error)):
            traced_value(f, a, mode="forward")
        return
    assert_matches(traced_value(f, a, mode="forward"), want)
    # Reverse mode records the augmented-primal rules: the same values through that path.
    parts = traced_value(lambda x: (np.real(f(x)), np.imag(f(x))), a, mode="reverse")
    assert_matches(parts[0] + 1j * parts[1] if np.iscomplexobj(want) else parts[0], want)


def test_float32_keeps_its_precision():
    x = randn(6).astype(np.float32)
    for name in ("fft", "rfft", "ihfft"):
        f = getattr(np.fft, name)
        got = traced_value(f, x, mode="forward")
        assert got.dtype == f(x).dtype == np.complex64
        np.testing.assert_allclose(got, f(x), rtol=1e-6, atol=1e-6)
    got = traced_value(np.fft.irfft, np.fft.rfft(x), mode="forward")
    assert got.dtype == np.float32


def test_deprecated_s_forms_warn_and_match_numpy():
    a = randn(3, 4, complex_=True)
    for kw in ({"s": (3, 5)}, {"s": (None, 6), "axes": (0, 1)}):
        with pytest.warns(DeprecationWarning):
            want = np.fft.irfftn(a, **kw)
        with pytest.warns(DeprecationWarning):
            got = traced_value(lambda x: np.fft.irfftn(x, **kw), a)
        assert_matches(got, want)


def test_s_minus_one_is_the_input_length():
    a = randn(3, 4, complex_=True)
    got = traced_value(lambda x: np.fft.irfftn(x, s=(-1, -1), axes=(0, 1)), a)
    assert got.shape == (3, 4)
    assert_matches(got, np.fft.irfftn(a, s=(-1, -1), axes=(0, 1)))


# -- derivatives: every function and option, to second order --------------------------------------
# (name, keyword arguments, input shape); lengths cover cropping and padding, odd and even.
ONE_D_CASES = [(name, n, axis) for name in ONE_D for n, axis in
               [(None, -1), (3, -1), (8, 0), (7, -2), (4, 1)]]


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("name, n, axis", ONE_D_CASES)
def test_one_dimensional_grads(name, n, axis, norm):
    f = getattr(np.fft, name)
    complex_ = name not in REAL_ONLY and (n or 0) % 2 == 0   # half the cases complex
    a = randn(4, 5, complex_=complex_)
    check_grads(lambda x: f(x * x, n=n, axis=axis, norm=norm), a, order=2)


N_D_CASES = [(None, None), ((3, 6), (0, 1)), ((5, 2), (-1, 0)), (None, (1,)), ((4,), (-2,)),
             ((3, 5), (1, 1))]


@pytest.mark.parametrize("norm", ["backward", "ortho", "forward"])
@pytest.mark.parametrize("s, axes", N_D_CASES)
@pytest.mark.parametrize("name", ["fftn", "ifftn", "rfftn", "irfftn"])
def test_n_dimensional_grads(name, s, axes, norm):
    f = getattr(np.fft, name)
    a = randn(3, 4, complex_=name not in REAL_ONLY and norm != "ortho")
    check_grads(lambda x: f(x * x, s=s, axes=axes, norm=norm), a, order=2)


@pytest.mark.parametrize("name", ["fft2", "ifft2", "rfft2", "irfft2"])
def test_two_dimensional_grads(name):
    f = getattr(np.fft, name)
    a = randn(2, 3, 4, complex_=name not in REAL_ONLY)
    check_grads(lambda x: f(x * x), a, order=2)
    check_grads(lambda x: f(x, s=(5, 2), axes=(0, 2), norm="ortho"), a, order=1)


@pytest.mark.parametrize("name", ["fftshift", "ifftshift"])
@pytest.mark.parametrize("axes", [None, 0, (-1,), (1, 0)])
def test_shift_grads(name, axes):
    f = getattr(np.fft, name)
    check_grads(lambda x: f(x * x, axes=axes), randn(3, 5, complex_=axes == 0), order=2)


@pytest.mark.parametrize("n", [5, 6])
@pytest.mark.parametrize("name", ["rfft", "irfft", "hfft", "ihfft"])
def test_half_spectrum_full_jacobian(name, n):
    """Every entry of the Jacobian, odd and even lengths: DC, interior and Nyquist bins."""
    f = getattr(np.fft, name)
    m = n if name in REAL_ONLY else n // 2 + 1
    if name in REAL_ONLY:
        check_grads(lambda x: f(x, n=n, norm="ortho"), randn(m), order=1, full_jacobian=True)
        return
    # A complex input as its real and imaginary parts, entry by entry (the full-Jacobian mode
    # of check_grads perturbs real directions only).
    check_grads(lambda re, im: f(re + 1j * im, n=n, norm="ortho"), randn(m), randn(m),
                order=1, full_jacobian=True)


def test_a_wrong_weight_is_caught(monkeypatch):
    """The checks can fail: without the Hermitian weights, rfft's reverse rule is wrong."""
    monkeypatch.setattr(ops.fft_rules, "_bin_weights",
                        lambda n, axis, value, like: np.ones((n // 2 + 1,) + (1,) * (-axis - 1)))
    with pytest.raises(GradientCheckError):
        check_grads(np.fft.rfft, randn(6), modes=("rev",), order=1)


# -- derivatives against closed forms -------------------------------------------------------------
def test_parseval_gradients():
    """With norm="ortho" the transforms are unitary: |fft(z)|^2 sums to |z|^2 (gradient 2z in
    Enzyme's convention, for complex z too), and |irfft(h)|^2 to the half-spectrum sum with
    interior bins twice and the imaginary parts of DC and Nyquist dropped."""
    z = randn(5, complex_=True)
    g, = grad(lambda z: np.sum(np.abs(np.fft.fft(z, norm="ortho")) ** 2), z)
    np.testing.assert_allclose(g, 2 * z, rtol=1e-12, atol=1e-11)
    x = randn(6)
    g, = grad(lambda x: np.sum(np.abs(np.fft.ifftn(x, norm="ortho")) ** 2), x)
    assert g.dtype == np.float64   # a real input gets a real derivative
    np.testing.assert_allclose(g, 2 * x, rtol=1e-12, atol=1e-11)
    for n in (6, 7):
        h = randn(n // 2 + 1, complex_=True)
        g, = grad(lambda h: np.sum(np.fft.irfft(h, n=n, norm="ortho") ** 2), h)
        want = 4 * h
        want[0] = 2 * h[0].real
        if n % 2 == 0:
            want[-1] = 2 * h[-1].real
        np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-12)
        x = randn(n)
        g, = grad(lambda x: np.sum(np.abs(np.fft.rfft(x, norm="ortho")) ** 2), x)
        # |rfft|^2 holds DC (and Nyquist) once and each interior bin once of the two.
        full = np.fft.fft(x, norm="ortho")
        weights = np.full(n, 0.5)
        weights[0] = 1.0
        if n % 2 == 0:
            weights[n // 2] = 1.0
        np.testing.assert_allclose(g, 2 * np.real(np.fft.ifft(weights * full, norm="ortho")),
                                   rtol=1e-10, atol=1e-12)
        h = randn(n // 2 + 1, complex_=True)
        weights = np.full(n // 2 + 1, 2.0)
        weights[0] = 1.0
        if n % 2 == 0:
            weights[-1] = 1.0
        g, = grad(lambda x: np.sum(np.fft.irfft(x, n=n) * np.arange(n)), h)
        np.testing.assert_allclose(
            g, weights * np.fft.rfft(np.arange(n, dtype=float)) / n, rtol=1e-10, atol=1e-12)


def test_holomorphic_reverse_gives_the_dft_matrix():
    """fft is complex-linear: ReverseHolomorphic of one output bin is that row of F."""
    z = randn(5, complex_=True)
    g, = autodiff(ReverseHolomorphic, lambda z: np.fft.fft(z, norm="ortho")[2], Active,
                  Active(z))[0]
    np.testing.assert_allclose(g, np.exp(-2j * np.pi * 2 * np.arange(5) / 5) / np.sqrt(5),
                               rtol=1e-12, atol=1e-12)


def test_forward_mode_gives_complex_tangents_to_real_inputs():
    x, dx = randn(6), randn(6)
    for name in ("fft", "rfft", "ihfft", "fftn", "rfftn"):
        f = getattr(np.fft, name)
        t, = autodiff(Forward, f, Duplicated(x, dx))
        assert t.dtype == np.complex128
        np.testing.assert_allclose(t, f(dx), rtol=1e-12, atol=1e-12)
    x32 = x.astype(np.float32)
    t, = autodiff(Forward, np.fft.rfft, Duplicated(x32, dx.astype(np.float32)))
    assert t.dtype == np.complex64
    t, = autodiff(Forward, lambda x: np.fft.fft(x)[1], Duplicated(x, dx))
    np.testing.assert_allclose(t, np.fft.fft(dx)[1], rtol=1e-12, atol=1e-12)


# -- errors --------------------------------------------------------------------------------------
def test_errors_name_the_argument():
    x = randn(4)
    with pytest.raises(NonDifferentiableError, match="out="):
        grad(lambda x: np.sum(np.real(np.fft.fft(x, out=np.zeros(4, complex)))), x)
    with pytest.raises(TypeError, match="rfft takes real input.*complex128"):
        grad(lambda z: np.sum(np.real(np.fft.rfft(z))), x + 1j)
    with pytest.raises(ValueError, match="Invalid norm value 'unitary'"):
        grad(lambda x: np.sum(np.real(np.fft.fft(x, norm="unitary"))), x)
    with pytest.raises(ValueError, match=r"Invalid number of FFT data points \(0\)"):
        grad(lambda x: np.sum(np.fft.irfft(x, n=0)), x)
    with pytest.raises(TypeError, match="number of points must be an integer"):
        grad(lambda x: np.sum(np.fft.irfft(x, n=4.0)), x)
    with pytest.raises(np.exceptions.AxisError):
        grad(lambda x: np.sum(np.fft.irfft(x, axis=1)), x)
    for name in ("rfftn", "irfftn"):
        with pytest.raises(ValueError, match=f"{name} needs at least one axis"):
            grad(lambda x: np.sum(np.real(getattr(np.fft, name)(x, axes=()))), x)
    np.testing.assert_array_equal(traced_value(lambda x: np.fft.fftn(x, axes=()), x), x)
    with pytest.raises(ValueError, match="Shape and axes have different lengths"):
        grad(lambda x: np.sum(np.fft.irfftn(x, s=(4, 4), axes=(0,))), x)


@pytest.mark.parametrize("module", ["ops.fft", "ops.fft_rules"])
def test_docstring_examples(module):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = doctest.testmod(importlib.import_module(module), extraglobs={"np": np})
    assert result.failed == 0
