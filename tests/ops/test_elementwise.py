"""Elementwise ops: derivatives (forward and reverse, first and second order) against finite
differences, primal values against NumPy's, and the documented conventions at kinks."""
import numpy as np
import pytest
from hypothesis import given, settings

from tape import (Active, Duplicated, Forward, ForwardWithPrimal, NonDifferentiableError,
                  Reverse, autodiff)
from tape.testing import arrays, broadcastable_arrays, check_grads, shapes

FEW = settings(max_examples=25, deadline=None)


# -- input preparation: keep finite differences away from singularities and kinks ---------------
def anything(x):
    return x


def positive(x):
    return np.abs(x) + 0.1


def nonzero(x):
    return np.copysign(np.abs(x) + 0.1, x)


def unit(x):
    return 0.45 * x   # inside (-1, 1)


def band(x, start):
    """x moved into [floor(x) + start, floor(x) + start + 0.1]: two different bands never tie,
    and band 0.25 or 0.55 never meets an integer or a half-integer."""
    low = np.floor(x)
    return low + start + 0.2 * np.minimum(x - low, 0.5)   # x - low may round up to 1


def sep(x, y):
    return band(x, 0.25), band(y, 0.55)


def both(x, y):
    return x, y


def positive_base(x, y):
    return positive(x), y


def nonzero_second(x, y):
    return x, nonzero(y)


def away_from_jumps(x, y):
    """remainder/fmod: x/y lies strictly between integers. x takes the broadcast shape."""
    y = band(y, 0.25)
    q = np.broadcast_to(x, np.broadcast_shapes(np.shape(x), np.shape(y)))
    return (np.floor(q) + 0.3 + 0.4 * (q - np.floor(q))) * y, y


UNARY = {
    "negative": (np.negative, anything), "positive": (np.positive, anything),
    "square": (np.square, anything), "reciprocal": (np.reciprocal, nonzero),
    "sqrt": (np.sqrt, positive), "cbrt": (np.cbrt, nonzero),
    "exp": (np.exp, anything), "exp2": (np.exp2, anything), "expm1": (np.expm1, anything),
    "log": (np.log, positive), "log2": (np.log2, positive), "log10": (np.log10, positive),
    "log1p": (np.log1p, unit),
    "sin": (np.sin, anything), "cos": (np.cos, anything), "tan": (np.tan, unit),
    "arcsin": (np.arcsin, unit), "arccos": (np.arccos, unit), "arctan": (np.arctan, anything),
    "sinh": (np.sinh, anything), "cosh": (np.cosh, anything), "tanh": (np.tanh, anything),
    "arcsinh": (np.arcsinh, anything), "arccosh": (np.arccosh, lambda x: positive(x) + 1.0),
    "arctanh": (np.arctanh, unit),
    "deg2rad": (np.deg2rad, anything), "radians": (np.radians, anything),
    "rad2deg": (np.rad2deg, anything), "degrees": (np.degrees, anything),
    "absolute": (np.absolute, nonzero), "fabs": (np.fabs, nonzero),
    "conjugate": (np.conjugate, anything), "real": (np.real, anything),
    "imag": (np.imag, anything), "angle": (np.angle, nonzero),
    "sinc": (np.sinc, anything), "nan_to_num": (np.nan_to_num, anything),
    "clip_scalars": (lambda x: np.clip(x, -0.5, 0.7), lambda x: band(x, 0.25)),
    "clip_method": (lambda x: x.clip(max=0.7), lambda x: band(x, 0.25)),
    "ldexp": (lambda x: np.ldexp(x, np.arange(np.size(x)).reshape(np.shape(x)) - 2), anything),
    "frexp": (lambda x: np.frexp(x)[0], lambda x: band(x, 0.55)),   # no powers of 2
    "modf": (lambda x: np.modf(x)[0], lambda x: band(x, 0.25)),
    "heaviside": (lambda h0: np.heaviside(np.array([-1.0, 0.0, 2.0]), h0), anything),
}

BINARY = {
    "add": (np.add, both), "subtract": (np.subtract, both),
    "multiply": (np.multiply, both), "divide": (np.divide, nonzero_second),
    "power": (np.power, positive_base), "float_power": (np.float_power, positive_base),
    "maximum": (np.maximum, sep), "minimum": (np.minimum, sep),
    "fmax": (np.fmax, sep), "fmin": (np.fmin, sep),
    "hypot": (np.hypot, sep), "arctan2": (np.arctan2, sep),
    "logaddexp": (np.logaddexp, both), "logaddexp2": (np.logaddexp2, both),
    "copysign": (np.copysign, sep),
    "remainder": (np.remainder, away_from_jumps), "fmod": (np.fmod, away_from_jumps),
    "divmod": (lambda x, y: np.divmod(x, y)[1], away_from_jumps),
}


def primal_of(f, *args):
    """f(*args) as computed under forward-mode tracing."""
    seeded = [Duplicated(a, np.ones_like(a)) for a in args]
    return autodiff(ForwardWithPrimal, f, *seeded)[1]


def assert_primal_is_numpys(f, *args):
    expected = f(*args)
    got = primal_of(f, *args)
    np.testing.assert_array_equal(got, expected)
    assert np.shape(got) == np.shape(expected)


@pytest.mark.parametrize("name", UNARY)
@FEW
@given(x=arrays(max_dims=2))
def test_unary(name, x):
    f, prep = UNARY[name]
    if name == "heaviside":
        x = x.reshape(-1)[0:1].reshape(())
    x = prep(x)
    check_grads(f, x)
    assert_primal_is_numpys(f, x)


@pytest.mark.parametrize("name", BINARY)
@FEW
@given(xy=broadcastable_arrays(2))
def test_binary_broadcasting(name, xy):
    f, prep = BINARY[name]
    x, y = prep(*xy)
    check_grads(f, x, y)
    assert_primal_is_numpys(f, x, y)


@FEW
@given(xs=broadcastable_arrays(3))
def test_clip_array_bounds(xs):
    x, lo, hi = band(xs[0], 0.25), band(xs[1], 0.55) - 1.0, band(xs[2], 0.55) + 0.5
    check_grads(np.clip, x, lo, hi)
    check_grads(lambda x, lo: np.clip(x, lo, None), x, lo, order=1)
    check_grads(lambda x, hi: np.clip(x, min=None, max=hi), x, hi, order=1)
    assert_primal_is_numpys(np.clip, x, lo, hi)


@FEW
@given(x=arrays(shape=shapes(max_dims=2), low=0.2, high=2.0))
def test_power_scalar_exponents(x):
    for c in (2, 3, 0.5, -1.5, np.float64(2.5)):
        check_grads(lambda x: x ** c, x)
    check_grads(lambda y: 1.7 ** y, x - 1.0)


def test_python_scalars():
    check_grads(lambda x: np.sin(x) * x ** 2 + np.maximum(x, 0.1), 0.7)
    check_grads(lambda x, y: np.hypot(x, y) / np.logaddexp(x, y), 0.3, -1.2)


# -- documented conventions ------------------------------------------------------------------------
def grad(f, *args):
    return autodiff(Reverse, f, Active, *(Active(a) for a in args))[0]


def tangent(f, x, dx):
    return autodiff(Forward, f, Duplicated(x, dx))[0]


def second_derivative(f, x):
    return autodiff(Forward, lambda x: grad(f, x)[0], Duplicated(x, 1.0))[0]


def test_abs_at_zero_is_zero():
    x = np.array([-1.5, 0.0, -0.0, 2.0])
    for f in (np.abs, np.fabs):
        np.testing.assert_array_equal(grad(lambda x: np.sum(f(x)), x)[0], [-1, 0, 0, 1])
        np.testing.assert_array_equal(tangent(f, x, np.ones(4)), [-1, 0, 0, 1])


def test_abs_complex_follows_enzyme():
    # d|z|/dx + i d|z|/dy = z / |z| (docs/complex.md); 0 at 0.
    z = np.array([1 + 2j, -0.5 + 0.3j, 0j])
    g, = grad(lambda z: np.sum(np.abs(z)), z)
    np.testing.assert_allclose(g, [v / abs(v) if v else 0 for v in z], atol=1e-12)


@pytest.mark.parametrize("ufunc", [np.maximum, np.minimum, np.fmax, np.fmin])
def test_selection_ties_split_equally(ufunc):
    x, y = np.array([1.0, 2.0, 3.0]), np.array([1.0, 5.0, -3.0])
    gx, gy = grad(lambda x, y: np.sum(ufunc(x, y)), x, y)
    first = 1.0 if ufunc in (np.maximum, np.fmax) else 0.0
    np.testing.assert_array_equal(gx, [0.5, 1 - first, first])
    np.testing.assert_array_equal(gy, [0.5, first, 1 - first])
    assert grad(lambda x: np.sum(ufunc(x, x)), x)[0].tolist() == [1.0, 1.0, 1.0]
    both = autodiff(Forward, ufunc, Duplicated(x, np.ones(3)), Duplicated(y, np.zeros(3)))[0]
    np.testing.assert_array_equal(both, [0.5, 1 - first, first])
    relu_at_0, = grad(lambda x: ufunc(x, 0.0), 0.0)
    assert relu_at_0 == 0.5


def test_nan_conventions_of_selection():
    x, y = np.array([np.nan, 1.0]), np.array([2.0, np.nan])
    gx, gy = grad(lambda x, y: np.sum(np.fmax(x, y)), x, y)     # fmax returns the non-NaN
    assert gx.tolist() == [0.0, 1.0] and gy.tolist() == [1.0, 0.0]
    gx, gy = grad(lambda x, y: np.sum(np.maximum(x, y)), x, y)  # maximum returns the NaN
    assert gx.tolist() == [1.0, 0.0] and gy.tolist() == [0.0, 1.0]


def test_clip_conventions():
    x = np.array([-1.0, 0.0, 0.5, 1.0, 2.0])
    gx, glo, ghi = grad(lambda x, lo, hi: np.sum(np.clip(x, lo, hi)), x, 0.0, 1.0)
    np.testing.assert_array_equal(gx, [0, 1, 1, 1, 0])   # bounds included
    assert (glo, ghi) == (1.0, 1.0)
    gx, glo, ghi = grad(lambda x, lo, hi: np.sum(np.clip(x, lo, hi)), x, 3.0, 1.0)
    np.testing.assert_array_equal(gx, 0)                 # lo > hi: NumPy returns hi
    assert (glo, ghi) == (0.0, 5.0)


def test_singular_points():
    gx, gy = grad(lambda x, y: np.hypot(x, y) + np.arctan2(y, x), 0.0, 0.0)
    assert (gx, gy) == (0.0, 0.0)
    gx, gy = grad(lambda x, y: np.logaddexp(x, y) + np.logaddexp2(x, y), -np.inf, -np.inf)
    assert (gx, gy) == (1.0, 1.0)
    x, y = np.array([2.0, -2.0, 0.0, -0.0]), np.array([-1.0, -1.0, -3.0, 3.0])
    gx, gy = grad(lambda x, y: np.sum(np.copysign(x, y)), x, y)
    np.testing.assert_array_equal(gx, [-1, 1, -1, -1])
    np.testing.assert_array_equal(gy, 0)
    x, y = np.array([7.0, -7.0, 7.0]), np.array([2.0, 2.0, -2.0])
    np.testing.assert_array_equal(grad(lambda y: np.sum(np.remainder(x, y)), y)[0],
                                  -np.floor(x / y))
    np.testing.assert_array_equal(grad(lambda y: np.sum(np.fmod(x, y)), y)[0], -np.trunc(x / y))


def test_power_at_zero():
    assert grad(lambda x: x ** 2, 0.0) == (0.0,)
    assert second_derivative(lambda x: x ** 2, 0.0) == 2.0
    assert second_derivative(lambda x: x ** 1, 0.0) == 0.0
    assert grad(lambda x: x ** 0, 0.0) == (0.0,)
    assert grad(lambda y: 0.0 ** y, 2.0) == (0.0,)
    x, y = np.zeros(3), np.array([0.0, 1.0, 2.0])
    gx, gy = grad(lambda x, y: np.sum(x ** y), x, y)
    np.testing.assert_array_equal(gx, [0, 1, 0])
    np.testing.assert_array_equal(gy, 0)
    hessian_diag = autodiff(Forward, lambda x: grad(lambda x: np.sum(x ** y), x)[0],
                            Duplicated(x, np.ones(3)))[0]
    np.testing.assert_array_equal(hessian_diag, [0, 0, 2])


def test_sinc_near_zero():
    assert grad(np.sinc, 0.0) == (0.0,)
    np.testing.assert_allclose(second_derivative(np.sinc, 0.0), -np.pi ** 2 / 3, rtol=1e-12,
                               atol=1e-11)
    for x0 in (0.0, 3e-3, 0.00999, 0.01001, 0.3):   # both sides of the series threshold
        check_grads(np.sinc, np.array([x0, -x0]))


def test_nan_to_num_passes_only_finite_entries():
    x = np.array([1.0, np.nan, np.inf, -np.inf, -2.0])
    g, = grad(lambda x: np.sum(np.nan_to_num(x, nan=5.0, posinf=9.0, neginf=-9.0) * 3.0), x)
    np.testing.assert_array_equal(g, [3, 0, 0, 0, 3])
    np.testing.assert_array_equal(primal_of(lambda x: np.nan_to_num(x, posinf=9.0), x),
                                  np.nan_to_num(x, posinf=9.0))


def test_heaviside_differentiates_h0_only():
    gx, gh = grad(lambda x, h: np.sum(np.heaviside(x, h)), np.array([-1.0, 0.0, 1.0]), 0.3)
    assert gx is None or not np.any(gx)
    assert gh == 1.0


def test_complex_parts_follow_enzyme():
    # The derivative of a real f of z = x + iy is df/dx + i df/dy (docs/complex.md).
    z = np.array([1 + 2j, -0.5 + 0.3j])
    g, = grad(lambda z: np.sum(np.real(z) ** 2 + 3.0 * z.imag), z)
    np.testing.assert_allclose(g, 2 * z.real + 3j, atol=1e-11)
    w = np.array([0.2 - 1j, 3 + 1j])
    g, = grad(lambda z: np.sum(np.real(np.conj(z) * w)), z)
    np.testing.assert_allclose(g, w, atol=1e-12)
    np.testing.assert_allclose(grad(lambda z: np.sum(np.exp(z).real), z)[0], np.conj(np.exp(z)),
                               atol=1e-12)


# -- ufunc keyword arguments, inactive ufuncs, missing rules ---------------------------------------
def test_dtype_keyword_casts_inputs():
    x = np.array([0.3, -1.2])
    y = primal_of(lambda x: np.sin(x, dtype=np.float32), x)
    assert y.dtype == np.float32
    g, = grad(lambda x: np.sum(np.multiply(x, x, dtype=np.float32)), x)
    assert g.dtype == np.float64
    np.testing.assert_allclose(g, 2 * x, rtol=1e-6, atol=1e-6)


def test_where_keyword_is_refused_and_out_writes_a_buffer():
    x = np.array([0.3, -1.2])
    with pytest.raises(NotImplementedError, match="where="):
        grad(lambda x: np.sum(np.exp(x, where=x > 0)), x)

    def into_buffer(x):
        out = np.zeros_like(x)
        np.exp(x, out=out)
        return np.sum(out)
    np.testing.assert_allclose(grad(into_buffer, x)[0], np.exp(x), atol=1e-12)
    with pytest.raises(NonDifferentiableError):
        grad(lambda x: np.sum(np.exp(x, out=np.zeros(2))), x)


def test_inactive_ufuncs_carry_no_derivative():
    x = np.array([0.3, 1.7, -2.6])
    g, = grad(lambda x: np.sum(x * (np.floor(x) + np.round(x) + np.sign(x) + np.spacing(x))), x)
    np.testing.assert_allclose(g, np.floor(x) + np.round(x) + np.sign(x) + np.spacing(x),
                               atol=1e-11)


def test_ufunc_without_rule_raises():
    with pytest.raises(NotImplementedError, match="nextafter"):
        grad(lambda x: np.sum(np.nextafter(x, 2.0)), np.array([0.3]))


def test_logaddexp_partials_at_equal_infinities_are_half_and_quiet():
    # NumPy's logaddexp(inf, inf) and (-inf, -inf) come without a warning; so must their
    # partials (the limit along x = y: 1/2 each), even under np.errstate(invalid="raise").
    for v in (np.inf, -np.inf):
        with np.errstate(all="raise"):
            gx, gy = grad(lambda x, y: np.logaddexp(x, y) + np.logaddexp2(x, y), v, v)
        assert gx == gy == 1.0
