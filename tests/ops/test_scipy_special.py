"""scipy.special's ufuncs called directly on traced values: primal values against SciPy's over
random shapes and broadcasting (forward and reverse tracing), first derivatives against finite
differences, the conventions at singular points, and the errors for arguments that cannot be
differentiated. Second order: tests/tape/second_order_scipy_special.py."""
import doctest
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings

sc = pytest.importorskip("scipy.special")

from ops.scipy_special import multigammaln, polygamma  # noqa: E402
from tape import (Active, Const, Duplicated, Forward, Reverse, autodiff,  # noqa: E402
                  gradient)
from tape.testing import arrays, broadcastable_arrays, check_grads, traced_value  # noqa: E402

FEW = settings(max_examples=12, deadline=None)


# -- domains: keep finite differences away from poles, kinks and domain ends ----------------------
def anything(x):
    return x


def positive(x):
    return np.abs(x) + 0.1


def nonzero(x):
    return np.copysign(np.abs(x) + 0.1, x)


def unit(x):
    return 0.45 * x               # inside (-0.9, 0.9)


def prob(x):
    return 0.5 + 0.22 * x         # inside (0.06, 0.94)


UNARY = {
    "gammaln": (sc.gammaln, positive), "digamma": (sc.digamma, positive),
    "gamma": (sc.gamma, positive), "rgamma": (sc.rgamma, anything),
    "loggamma": (sc.loggamma, positive),
    "erf": (sc.erf, anything), "erfc": (sc.erfc, anything), "erfcx": (sc.erfcx, anything),
    "erfinv": (sc.erfinv, unit), "erfcinv": (sc.erfcinv, lambda x: 1.0 + unit(x)),
    "ndtr": (sc.ndtr, anything), "ndtri": (sc.ndtri, prob), "log_ndtr": (sc.log_ndtr, anything),
    "logit": (sc.logit, prob), "expit": (sc.expit, anything),
    "log_expit": (sc.log_expit, anything), "entr": (sc.entr, positive),
    "i0": (sc.i0, anything), "i0e": (sc.i0e, nonzero), "i1": (sc.i1, anything),
    "i1e": (sc.i1e, nonzero), "k0": (sc.k0, positive), "k0e": (sc.k0e, positive),
    "k1": (sc.k1, positive), "k1e": (sc.k1e, positive), "j0": (sc.j0, anything),
    "j1": (sc.j1, anything), "y0": (sc.y0, positive), "y1": (sc.y1, positive),
    "np.i0": (np.i0, anything),
    "erfi": (sc.erfi, anything), "dawsn": (sc.dawsn, anything), "exp1": (sc.exp1, positive),
    "expi": (sc.expi, nonzero), "ndtri_exp": (sc.ndtri_exp, lambda x: -positive(x)),
    "exp2": (sc.exp2, anything), "exp10": (sc.exp10, anything), "expm1": (sc.expm1, anything),
    "log1p": (sc.log1p, unit), "cbrt": (sc.cbrt, nonzero), "cosm1": (sc.cosm1, anything),
}

# Both arguments traced; each pair is moved into the function's domain.
BINARY = {
    "beta": (sc.beta, lambda a, b: (positive(a), positive(b))),
    "betaln": (sc.betaln, lambda a, b: (positive(a), positive(b))),
    "xlogy": (sc.xlogy, lambda x, y: (x, positive(y))),
    "xlog1py": (sc.xlog1py, lambda x, y: (x, unit(y))),
    "rel_entr": (sc.rel_entr, lambda x, y: (positive(x), positive(y))),
    "kl_div": (sc.kl_div, lambda x, y: (positive(x), positive(y))),
}

def order(v):
    """Quarter-integer orders: SciPy's Bessel functions are wrong at subnormal orders (yv(5e-324,
    0.1) is 0 and kve(5e-324, 0.1) is inf), which hypothesis would otherwise find."""
    return np.round(4.0 * v) / 4.0


# The first argument is a constant (an order or shape parameter); x is traced.
WITH_PARAMETER = {
    "gammainc": (sc.gammainc, positive, positive),
    "gammaincc": (sc.gammaincc, positive, positive),
    "zeta": (sc.zeta, lambda s: positive(s) + 1.2, positive),
    "iv": (sc.iv, order, positive), "ive": (sc.ive, order, positive),
    "kv": (sc.kv, order, positive), "kve": (sc.kve, order, positive),
    "jv": (sc.jv, order, positive), "yv": (sc.yv, order, positive),
    "yn": (sc.yn, lambda n: np.round(2 * n).astype(np.int64), positive),
    "gammaincinv": (sc.gammaincinv, positive, prob),
    "gammainccinv": (sc.gammainccinv, positive, prob),
    "polygamma": (polygamma, lambda n: np.round(np.abs(n)).astype(np.int64), positive),
}


def assert_primal_is_scipys(f, *args):
    want = f(*args)
    for mode in ("forward", "reverse"):
        got = traced_value(f, *args, mode=mode)
        assert np.shape(got) == np.shape(want)
        # The same SciPy ufunc computes both: the values agree to the last bit.
        np.testing.assert_allclose(got, want, rtol=1e-15, atol=1e-300)


def test_called_directly_in_user_code():
    (g,), = autodiff(Reverse, lambda x: sc.gammaln(x), Active, Active(2.5))
    assert np.isclose(g, sc.digamma(2.5), rtol=1e-14)
    t, = autodiff(Forward, lambda x: sc.erf(x) * sc.iv(1.5, x), Duplicated(0.7, 1.0))
    want = (2 / np.sqrt(np.pi) * np.exp(-0.49) * sc.iv(1.5, 0.7)
            + sc.erf(0.7) * 0.5 * (sc.iv(0.5, 0.7) + sc.iv(2.5, 0.7)))
    assert np.isclose(t, want, rtol=1e-13)


@pytest.mark.parametrize("name", UNARY)
@FEW
@given(x=arrays(max_dims=3))
def test_unary(name, x):
    f, prep = UNARY[name]
    x = prep(x)
    assert_primal_is_scipys(f, x)
    check_grads(f, x, order=1)


@pytest.mark.parametrize("name", BINARY)
@FEW
@given(xy=broadcastable_arrays(2))
def test_binary_broadcasting(name, xy):
    f, prep = BINARY[name]
    x, y = prep(*xy)
    assert_primal_is_scipys(f, x, y)
    check_grads(f, x, y, order=1)


@pytest.mark.parametrize("name", WITH_PARAMETER)
@FEW
@given(vx=broadcastable_arrays(2))
def test_parameter_broadcasting(name, vx):
    f, prep_v, prep_x = WITH_PARAMETER[name]
    v, x = prep_v(vx[0]), prep_x(vx[1])
    assert_primal_is_scipys(lambda x: f(v, x), x)
    check_grads(lambda x: f(v, x), x, order=1)


@pytest.mark.parametrize("f", [sc.betainc, sc.betaincinv])
@FEW
@given(abx=broadcastable_arrays(3))
def test_betainc_broadcasting(f, abx):
    a, b, x = positive(abx[0]) + 0.5, positive(abx[1]) + 0.5, prob(abx[2])
    assert_primal_is_scipys(lambda x: f(a, b, x), x)
    check_grads(lambda x: f(a, b, x), x, order=1)


@FEW
@given(a=arrays(max_dims=2, low=1.6, high=4.0))
def test_multigammaln(a):
    for d in (1, 2, 4):
        want = sc.multigammaln(a, d)
        got = traced_value(lambda a: multigammaln(a, d), a)
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)   # summed differently
        check_grads(lambda a: multigammaln(a, d), a, order=1)


def test_polygamma_matches_scipy_and_its_derivative():
    x = np.array([0.4, 1.5, 3.0])
    for n in (0, 1, 2, 3):
        np.testing.assert_allclose(polygamma(n, x), sc.polygamma(n, x), rtol=1e-15, atol=1e-15)
        g, = gradient(Reverse, lambda x: np.sum(polygamma(n, x)), x)
        np.testing.assert_allclose(g, sc.polygamma(n + 1, x), rtol=1e-14, atol=1e-14)


def test_dtype_is_kept():
    x = np.array([0.5, 1.5], dtype=np.float32)
    g, = gradient(Reverse, lambda x: np.sum(sc.gammaln(x) + sc.erf(x) * sc.i0(x)), x)
    assert g.dtype == np.float32
    assert traced_value(sc.gammaln, x).dtype == np.float32


# -- arguments that cannot be differentiated ------------------------------------------------------
NOT_DIFFERENTIABLE = [
    # (function, arguments, index of the differentiated argument, its name)
    (sc.iv, (1.5, 2.0), 0, "v"), (sc.ive, (1.5, 2.0), 0, "v"), (sc.kv, (1.5, 2.0), 0, "v"),
    (sc.kve, (1.5, 2.0), 0, "v"), (sc.jv, (1.5, 2.0), 0, "v"), (sc.yv, (1.5, 2.0), 0, "v"),
    (sc.yn, (2.0, 2.0), 0, "n"),
    (sc.gammainc, (1.5, 2.0), 0, "a"), (sc.gammaincc, (1.5, 2.0), 0, "a"),
    (sc.betainc, (1.5, 2.5, 0.3), 0, "a"), (sc.betainc, (1.5, 2.5, 0.3), 1, "b"),
    (sc.zeta, (2.5, 2.0), 0, "x"), (sc.zeta, (2.5,), 0, "x"), (polygamma, (2.0, 1.5), 0, "n"),
    (sc.gammaincinv, (1.5, 0.3), 0, "a"), (sc.gammainccinv, (1.5, 0.3), 0, "a"),
    (sc.betaincinv, (1.5, 2.5, 0.3), 0, "a"), (sc.betaincinv, (1.5, 2.5, 0.3), 1, "b"),
]


@pytest.mark.parametrize("f, args, i, arg", NOT_DIFFERENTIABLE,
                         ids=[f"{getattr(c[0], '__name__', c[0])}{len(c[1])}-{c[3]}"
                              for c in NOT_DIFFERENTIABLE])
def test_no_derivative_raises(f, args, i, arg):
    name = "zeta" if f is sc.zeta else f.__name__
    reverse = [Active(a) if k == i else Const(a) for k, a in enumerate(args)]
    with pytest.raises(NotImplementedError, match=rf"{name}.*`{arg}`"):
        autodiff(Reverse, f, Active, *reverse)
    forward = [Duplicated(a, 1.0) if k == i else Const(a) for k, a in enumerate(args)]
    with pytest.raises(NotImplementedError, match=rf"{name}.*`{arg}`"):
        autodiff(Forward, f, *forward)
    # The other arguments stay differentiable.
    last = len(args) - 1
    if last == i:
        return
    reverse = [Active(a) if k == last else Const(a) for k, a in enumerate(args)]
    (*_, g), = autodiff(Reverse, f, Active, *reverse)
    assert np.isfinite(g)


@pytest.mark.parametrize("f", [sc.gammaln, sc.gamma, sc.digamma, sc.loggamma, sc.ndtr,
                               sc.log_ndtr, lambda z: sc.iv(1.0, z), lambda z: sc.jv(0.5, z)])
def test_complex_input_is_refused(f):
    z = np.array([0.5 + 0.5j, 1.5 - 0.2j])
    with pytest.raises(NotImplementedError, match="complex"):
        gradient(Reverse, lambda z: np.sum(np.abs(f(z))), z)
    with pytest.raises(NotImplementedError, match="complex"):
        autodiff(Forward, f, Duplicated(z, np.ones_like(z)))


@pytest.mark.parametrize("f", [sc.erf, sc.erfc, sc.erfcx, lambda z: sc.xlogy(z, z + 2.0),
                               lambda z: sc.xlog1py(z * z, z), sc.erfi, sc.dawsn, sc.expm1,
                               sc.log1p])
def test_holomorphic_ones_take_complex_input(f):
    check_grads(f, np.array([0.3 + 0.4j, -0.6 + 0.2j]), order=1)


# -- conventions at singular points ---------------------------------------------------------------
def grads(f, *args):
    return autodiff(Reverse, f, Active, *(Active(a) for a in args))[0]


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")   # log(0) = -inf
def test_xlogy_at_zero():
    assert sc.xlogy(0.0, 0.0) == 0.0
    x, y = np.zeros(3), np.array([0.0, 0.5, 2.0])
    gx, gy = gradient(Reverse, lambda x, y: np.sum(sc.xlogy(x, y)), x, y)
    np.testing.assert_array_equal(gy, [0.0, 0.0, 0.0])      # x / y is 0 wherever x is
    np.testing.assert_array_equal(gx, np.log(y))            # log y: -inf at y = 0
    gx, gy = gradient(Reverse, lambda x, y: np.sum(sc.xlog1py(x, y)), x, y - 1.0)
    np.testing.assert_array_equal(gy, [0.0, 0.0, 0.0])
    # The mixed second derivative d/dx (x / y) = 1 / y survives the convention at x = 0.
    mixed, = autodiff(Forward, lambda x: grads(lambda x, y: sc.xlogy(x, y), x, 2.0)[1],
                      Duplicated(0.0, 1.0))
    assert mixed == 0.5


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")
def test_entropies_at_zero():
    g, = grads(lambda x: sc.entr(x), 0.0)
    assert g == np.inf                                       # -log(x) - 1 -> +inf
    assert grads(lambda x: sc.entr(x), 1.0) == (-1.0,)
    gx, gy = grads(lambda x, y: sc.rel_entr(x, y), 0.0, 0.7)
    assert (gx, gy) == (-np.inf, 0.0)
    gx, gy = grads(lambda x, y: sc.kl_div(x, y), 0.0, 0.7)
    assert (gx, gy) == (-np.inf, 1.0)
    with np.errstate(invalid="ignore"):
        gx, gy = grads(lambda x, y: sc.kl_div(x, y), 0.0, 0.0)
    assert np.isnan(gx) and gy == 1.0          # kl_div(x, 0) = inf for x > 0: no x-slope
    with np.errstate(invalid="ignore"):   # outside the domain: NaN, never a number
        assert all(np.isnan(grads(lambda x, y: sc.kl_div(x, y), -1.0, 1.0)))
        assert all(np.isnan(grads(lambda x, y: sc.rel_entr(x, y), 1.0, -1.0)))


def test_rgamma_at_the_poles_of_gamma():
    # 1/gamma(x) = (-1)^n n! (x + n) + ... near x = -n.
    for n in range(4):
        g, = grads(lambda x: sc.rgamma(x), float(-n))
        assert np.isclose(g, (-1) ** n * sc.factorial(n), rtol=1e-13)
    check_grads(sc.rgamma, np.array([-3.0, -1.0, 0.0, 0.4999, 0.5]), order=2)


def test_log_ndtr_tails():
    g, = grads(lambda x: sc.log_ndtr(x), -40.0)
    assert np.isclose(g, 40.0249, rtol=1e-5)                 # pdf/cdf ~ -x - 1/x
    g, = grads(lambda x: sc.log_ndtr(x), 40.0)
    assert g == 0.0
    second, = autodiff(Forward, lambda x: grads(lambda x: np.sum(sc.log_ndtr(x)), x)[0],
                       Duplicated(np.array([-40.0, 0.0, 40.0]), np.ones(3)))
    assert np.all(np.isfinite(second))


def test_scaled_bessel_kink_at_zero():
    # e^-|x| I_0(x) has slopes -+1 either side of 0; the derivative there is their average.
    assert grads(lambda x: sc.i0e(x), 0.0) == (0.0,)
    assert grads(lambda x: sc.i1e(x), 0.0) == (0.5,)


def test_loggamma_of_negative_real_is_nan():
    assert np.isnan(sc.loggamma(-1.5))
    assert np.isnan(grads(lambda x: sc.loggamma(x), -1.5)[0])
    assert np.isclose(grads(lambda x: sc.gammaln(x), -1.5)[0], sc.digamma(-1.5))


def test_step_like_functions_are_inactive():
    x = np.array([-1.5, 0.7, 2.3])
    g, = gradient(Reverse, lambda x: np.sum(sc.gammasgn(x) * x + sc.round(x) * x), x)
    np.testing.assert_array_equal(g, sc.gammasgn(x) + sc.round(x))


def test_multigammaln_errors():
    with pytest.raises(ValueError, match="d should be a positive integer"):
        multigammaln(3.0, 1.5)
    with pytest.raises(ValueError, match=r"a > 0.5 \* \(d - 1\)"):
        gradient(Reverse, lambda a: multigammaln(a, 5), 1.5)


def test_without_scipy_nothing_is_registered():
    script = (
        "import sys; sys.modules['scipy'] = None\n"   # `import scipy.special` now fails
        "import numpy as np, tape, ops.scipy_special as s\n"
        "from tape.tracer import UFUNC_RULES, FUNCTION_RULES\n"
        "assert np.i0 not in FUNCTION_RULES\n"
        "names = {getattr(k, '__name__', '') for k in UFUNC_RULES}\n"
        "assert not names & {'gammaln', 'erfcx', 'jv', 'xlogy', 'gammasgn'}, names\n"
        "try:\n    s.polygamma(1, 1.0)\nexcept ImportError as e:\n    print('ok', e)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok") and "scipy" in done.stdout


@pytest.mark.parametrize("module", ["ops.scipy_special", "ops.scipy_special_rules",
                                    "ops.scipy_special_gamma", "ops.scipy_special_erf",
                                    "ops.scipy_special_info", "ops.scipy_special_bessel",
                                    "ops.scipy_special_more"])
def test_docstring_examples_run(module):
    import importlib
    result = doctest.testmod(importlib.import_module(module), extraglobs={"np": np})
    assert result.failed == 0
