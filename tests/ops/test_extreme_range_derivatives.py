"""Derivatives of the elementwise rules at extreme magnitudes (float64): where the true derivative,
or its product with the cotangent that reaches the rule, is a normal number and NumPy's primal is
accurate, the rule must not return 0, inf or NaN because a partial derivative formed on its own
under- or overflows, or because a difference such as 1 - tanh(x)**2 cancels.

Expected values are closed forms evaluated stably in NumPy. The strict xfails are open findings:
derivatives below about 1e-16 in saturated tails (tanh, sigmoid, logaddexp, log_softmax) and
the power, arctan and prod partials at the ends of the range."""
import warnings

import numpy as np
import pytest
import scipy.special as sc

from ops.nn import log_softmax, sigmoid, softplus
from tape import Active, Duplicated, Forward, Reverse, autodiff, hessian


def reverse(f, x):
    (g,), = autodiff(Reverse, f, Active, Active(np.float64(x)))
    return float(g)


def forward(f, x):
    t, = autodiff(Forward, f, Duplicated(np.array(x), np.array(1.0)))
    return float(np.asarray(t))


def second(f, x):
    """d2 f / dx2 by the public Hessian (forward over reverse)."""
    return float(hessian(lambda v: np.sum(f(v)), np.array([x]))[0, 0])


MODES = [pytest.param(reverse, id="reverse"), pytest.param(forward, id="forward")]


def quiet(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return fn(*args)


def _sech2(x):
    return 1.0 / np.cosh(x) ** 2


def _logistic_slope(x):
    """expit'(x) = expit(x) expit(-x) without cancellation."""
    e = np.exp(-abs(x))
    return e / (1.0 + e) ** 2


# -- rules that are accurate at the extremes (coverage: these points are not tested elsewhere) ---
ACCURATE = [
    ("sqrt subnormal", np.sqrt, 1e-310, 0.5 / np.sqrt(1e-310)),
    ("cbrt subnormal", np.cbrt, 1e-310, 1.0 / (3.0 * np.cbrt(1e-310) ** 2)),
    ("log1p next to -1", np.log1p, -1.0 + 2.0 ** -52, 2.0 ** 52),
    ("arctanh next to 1", np.arctanh, 1.0 - 2.0 ** -53, 1.0 / (2.0 ** -53 * (2.0 - 2.0 ** -53))),
    ("arcsin next to -1", np.arcsin, -1.0 + 2.0 ** -53,
     1.0 / np.sqrt(2.0 ** -53 * (2.0 - 2.0 ** -53))),
    ("arccosh next to 1", np.arccosh, 1.0 + 2.0 ** -52,
     1.0 / np.sqrt(2.0 ** -52 * (2.0 + 2.0 ** -52))),
    ("arccosh huge", np.arccosh, 1e308, 1e-308),
    ("sin huge", np.sin, 1e300, np.cos(1e300)),
    ("cos huge", np.cos, 1e22, -np.sin(1e22)),
    ("hypot tiny", lambda x: np.hypot(x, 1e-300), 1e-300, np.sqrt(0.5)),
    ("1e300 / x", lambda x: 1e300 / x, 1e300, -1e-300),
    ("expit right tail", sc.expit, 40.0, _logistic_slope(40.0)),
    ("log_expit right tail", sc.log_expit, 40.0, _logistic_slope(40.0) / sc.expit(40.0)),
    ("exp1 at 700", sc.exp1, 700.0, -np.exp(-700.0) / 700.0),
    ("logaddexp left", lambda x: np.logaddexp(x, 0.0), -40.0, np.exp(-40.0) / (1 + np.exp(-40.0))),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,f,x,expected", ACCURATE, ids=[c[0] for c in ACCURATE])
def test_first_derivative_at_extremes(mode, name, f, x, expected):
    np.testing.assert_allclose(quiet(mode, f, x), expected, rtol=1e-13)


def test_second_derivative_of_expit_in_its_tail():
    # expit'' = expit' (1 - 2 expit): the rule's expit(-x) factor keeps the tail
    np.testing.assert_allclose(second(sc.expit, 40.0), -_logistic_slope(40.0), rtol=1e-13)


# -- findings: partials that under- or overflow on their own ---------------------------------------
@pytest.mark.parametrize("f,x,expected", [
    (lambda x: np.log(np.reciprocal(x)), 1e300, -1e-300),
    (lambda x: 1e-300 * np.reciprocal(x), 1e-160, -1e20),
], ids=["log(1/x) at 1e300", "1e-300/x at 1e-160"])
def test_reciprocal_partial_applied_to_the_cotangent(f, x, expected):
    np.testing.assert_allclose(quiet(reverse, f, x), expected, rtol=1e-13)


@pytest.mark.xfail(strict=True, reason="x**y's partial in x, y * x**(y - 1), under- or "
                   "overflows where x**y and g * y * x**y / x are normal "
                   "(ops/elementwise.py _power_partials.d_base)")
@pytest.mark.parametrize("f,x,expected", [
    (lambda x: np.log(x ** -1.0), 1e300, -1e-300),
    (lambda x: np.log(x ** -1.0), 1e-200, -1e200),
    (lambda x: np.log(np.power(x, np.array(-3.0))), 1e100, -3e-100),
    (lambda x: np.log(np.float_power(x, -0.5)), 1e300, -5e-301),
], ids=["x**-1 at 1e300", "x**-1 at 1e-200", "array exponent", "float_power"])
def test_power_partial_in_the_base(f, x, expected):
    np.testing.assert_allclose(quiet(reverse, f, x), expected, rtol=1e-13)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("f,x,expected", [
    (lambda y: np.arctan2(y, 1e-170), 3e-170, 1e169),
    (lambda x: np.arctan2(3e-170, x), 1e-170, -3e169),
    (lambda y: np.arctan2(y, 1e200), 1e200, 5e-201),
], ids=["tiny, in y", "tiny, in x", "huge"])
def test_arctan2_partials_at_extreme_radii(mode, f, x, expected):
    np.testing.assert_allclose(quiet(mode, f, x), expected, rtol=1e-13)


@pytest.mark.xfail(strict=True, reason="arctan's partial 1 / (1 + x**2) underflows beyond "
                   "|x| = 1e154 before it meets a large tangent or cotangent "
                   "(ops/elementwise.py arctan)")
@pytest.mark.parametrize("mode", MODES)
def test_arctan_of_a_scaled_argument(mode):
    # d/dx arctan(c x) = c / (1 + c^2 x^2) = 1e-200 at c = 1e200, x = 1
    np.testing.assert_allclose(quiet(mode, lambda x: np.arctan(1e200 * x), 1.0), 1e-200,
                               rtol=1e-13)


def test_expi_derivative_past_exp_overflow():
    np.testing.assert_allclose(quiet(reverse, sc.expi, 712.0), np.exp(712.0 - np.log(712.0)),
                               rtol=1e-13)


@pytest.mark.xfail(strict=True, reason="prod's partial, the product of the other entries, "
                   "overflows where g * prod / x_i is normal (ops/reductions.py _prod_reverse)")
def test_log_prod_gradient_with_an_overflowing_cofactor():
    v = np.array([1e-300, 1e300, 1e10])   # prod 1e10; the other entries of v[0] give 1e310
    (g,), = quiet(autodiff, Reverse, lambda v: np.log(np.prod(v)), Active, Active(v))
    np.testing.assert_allclose(g, 1.0 / v, rtol=1e-13)


# -- findings: partials that cancel ---------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fn", [np.expm1, sc.expm1], ids=["numpy", "scipy"])
def test_expm1_derivative_in_the_left_tail(mode, fn):
    np.testing.assert_allclose(mode(fn, -40.0), np.exp(-40.0), rtol=1e-13)


@pytest.mark.xfail(strict=True, reason="tanh's derivative is written 1 - ans**2, which is 0 "
                   "from |x| = 19.1 on (true 1.7e-17 at 20); relative error 1e-8 at 10, 2e-4 at 15 "
                   "(ops/elementwise.py tanh)")
@pytest.mark.parametrize("mode", MODES)
def test_tanh_derivative_in_the_tail(mode):
    np.testing.assert_allclose(mode(np.tanh, 20.0), _sech2(20.0), rtol=1e-13)


@pytest.mark.xfail(strict=True, reason="the fused sigmoid's derivative is written y (1 - y), 0 "
                   "beyond x = 37 (ops/activations.py _sigmoid; scipy's expit rule uses "
                   "expit(x) expit(-x))")
@pytest.mark.parametrize("mode", MODES)
def test_sigmoid_derivative_in_the_right_tail(mode):
    np.testing.assert_allclose(mode(sigmoid, 40.0), _logistic_slope(40.0), rtol=1e-13)


@pytest.mark.xfail(strict=True, reason="softplus'' is the fused sigmoid's derivative, "
                   "y (1 - y): 0 beyond x = 37 (ops/activations.py _sigmoid)")
def test_softplus_second_derivative_in_the_right_tail():
    np.testing.assert_allclose(second(softplus, 40.0), _logistic_slope(40.0), rtol=1e-13)


@pytest.mark.xfail(strict=True, reason="logaddexp's partial exp(x - ans), differentiated, "
                   "gives exp(x - ans) (1 - exp(x - ans)), 0 where x >> y "
                   "(ops/elementwise_more.py _logaddexp_partials)")
def test_logaddexp_second_derivative_of_the_larger_argument():
    np.testing.assert_allclose(second(lambda x: np.logaddexp(x, 0.0), 40.0),
                               _logistic_slope(40.0), rtol=1e-13)


@pytest.mark.xfail(strict=True, reason="log_softmax's cotangent g - exp(y) sum(g) cancels for "
                   "the dominant entry (1 - p with p = 1.0) (ops/nn.py _log_softmax_reverse)")
def test_log_softmax_gradient_of_the_dominant_entry():
    # d/dx0 log_softmax([x0, 0])[0] = 1 - p0 = expit(-x0)
    g = reverse(lambda x: log_softmax(np.stack([x, np.float64(0.0)]))[0], 40.0)
    np.testing.assert_allclose(g, np.exp(-40.0) / (1.0 + np.exp(-40.0)), rtol=1e-13)
