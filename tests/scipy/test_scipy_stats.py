"""tape.scipy.stats, univariate: norm, t, beta, gamma, chi2 and poisson against scipy.stats on
traced input (random broadcast shapes, points inside and outside the support, invalid
parameters), every method's derivatives to second order against finite differences, and the
clear errors for the shape parameters that have no closed-form CDF derivative and for counts."""
import numpy as np
import pytest
import scipy.stats as ss
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tape.scipy.stats as S
from tape import Forward, Reverse, gradient
from tape.testing import arrays, check_grads, traced_value

FAST = settings(max_examples=20, deadline=None)
METHODS = ["logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"]
DENSITIES = ["logpdf", "pdf"]

# name -> (number of shape parameters, range of x, range of the shape parameters, interior
# point x, interior shape parameters)
CONTINUOUS = {
    "norm": (0, (-4.0, 4.0), None, np.array([0.3, -1.2, 2.0]), ()),
    "t": (1, (-4.0, 4.0), (0.5, 8.0), np.array([0.3, -1.2, 2.0]), (2.5,)),
    "gamma": (1, (-0.5, 6.0), (0.5, 5.0), np.array([0.4, 1.2, 2.5]), (1.7,)),
    "chi2": (1, (-0.5, 8.0), (0.5, 6.0), np.array([0.4, 1.2, 2.5]), (3.0,)),
    "beta": (2, (-0.2, 1.2), (0.5, 5.0), np.array([0.3, 0.5, 0.7]), (1.7, 2.5)),
}


def assert_same(got, expected):
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)   # NaN == NaN, inf == inf


@st.composite
def continuous_case(draw, name):
    """(x, shape parameters, loc, scale) of broadcastable shapes; parameters are sometimes
    invalid (scale <= 0, a shape parameter <= 0), x sometimes outside the support."""
    n_shape, x_range, p_range = CONTINUOUS[name][:3]
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=3 + n_shape, max_dims=2,
                                                    max_side=3)).input_shapes
    x = draw(arrays(shapes[0], low=x_range[0], high=x_range[1]))
    params = tuple(draw(arrays(s, low=p_range[0] - 0.6, high=p_range[1]))
                   for s in shapes[1:1 + n_shape])
    loc = draw(arrays(shapes[-2], low=-0.3, high=0.3))
    scale = draw(arrays(shapes[-1], low=-0.2, high=2.0))
    return x, params, loc, scale


@pytest.mark.parametrize("name", sorted(CONTINUOUS))
@pytest.mark.parametrize("method", METHODS)
def test_continuous_matches_scipy(name, method):
    ours, ref = getattr(getattr(S, name), method), getattr(getattr(ss, name), method)

    @FAST
    @given(continuous_case(name), st.sampled_from(["forward", "reverse"]))
    def check(case, mode):
        x, params, loc, scale = case
        with np.errstate(all="ignore"):
            expected = ref(x, *params, loc=loc, scale=scale)
            if method in DENSITIES:   # every argument traced
                got = traced_value(lambda x, l, s, *p: ours(x, *p, l, s), x, loc, scale,
                                   *params, mode=mode)
            else:                      # a CDF is not differentiable in its shape parameters
                got = traced_value(lambda x, l, s: ours(x, *params, l, s), x, loc, scale,
                                   mode=mode)
        assert_same(got, expected)
    check()


@pytest.mark.parametrize("name", sorted(CONTINUOUS))
@pytest.mark.parametrize("method", METHODS)
def test_continuous_second_order(name, method):
    """Derivatives in x, loc, scale (and the shape parameters for the densities), forward and
    reverse mode, first and second order."""
    dist, (_, _, _, x, params) = getattr(S, name), CONTINUOUS[name]
    f = getattr(dist, method)
    loc, scale = 0.1, np.array([1.2, 0.9, 1.1])
    if method in DENSITIES:
        check_grads(lambda x, l, s, *p: f(x, *p, l, s), x, loc, scale, *params)
    else:
        check_grads(lambda x, l, s: f(x, *params, l, s), x, loc, scale)


def test_derivatives_in_the_tails_and_at_the_centre():
    check_grads(lambda x: S.norm.logcdf(x), np.array([-30.0, -8.0, 6.0]))
    check_grads(lambda x: S.norm.logsf(x), np.array([30.0, 8.0, -6.0]))
    check_grads(lambda x: S.t.cdf(x, 3.0), np.array([0.0, 1e-9, -40.0]))   # exactly the centre
    check_grads(lambda x, df: S.t.logpdf(x, df), np.array([0.0, 1.5]), np.array([1e8, 4.0]))


def test_t_with_infinite_df_is_normal():
    x = np.array([-1.0, 0.3, 2.0])
    for method in METHODS:
        assert_same(getattr(S.t, method)(x, np.inf), getattr(ss.t, method)(x, np.inf))
    check_grads(lambda x: S.t.cdf(x, np.array([np.inf, 3.0, np.inf])), x)


SHAPE_CDFS = [("t", lambda p: S.t.cdf(0.5, p)), ("t", lambda p: S.t.logsf(0.5, p)),
              ("beta", lambda p: S.beta.cdf(0.3, p, 2.0)),
              ("beta", lambda p: S.beta.sf(0.3, 2.0, p)),
              ("gamma", lambda p: S.gamma.logcdf(1.5, p)), ("gamma", lambda p: S.gamma.sf(1.5, p)),
              ("chi2", lambda p: S.chi2.cdf(1.5, p))]


@pytest.mark.parametrize("mode", [Reverse, Forward])
@pytest.mark.parametrize("case", range(len(SHAPE_CDFS)))
def test_cdf_in_a_shape_parameter_raises(case, mode):
    """No closed form: a clear error naming the parameter, never a zero derivative."""
    name, f = SHAPE_CDFS[case]
    with pytest.raises(NotImplementedError, match="has no closed form"):
        gradient(mode, f, 2.5)


def test_cdf_shape_parameter_may_be_constant_in_a_traced_program():
    df = 2.5
    g, = gradient(Reverse, lambda x: S.t.cdf(x, df), 0.7)
    assert np.isclose(g, ss.t.pdf(0.7, df))


# -- poisson ---------------------------------------------------------------------------------------
@FAST
@given(st.data(), st.sampled_from(["forward", "reverse"]),
       st.sampled_from(["logpmf", "pmf", "cdf", "logcdf", "sf", "logsf"]))
def test_poisson_matches_scipy(data, mode, method):
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=3))
    k_shape, mu_shape = shapes.input_shapes
    k = data.draw(hnp.arrays(np.float64, k_shape, elements=st.sampled_from(
        [-1.0, 0.0, 1.0, 2.0, 3.0, 7.0, 2.5])))
    mu = data.draw(arrays(mu_shape, low=-0.5, high=6.0))
    loc = data.draw(st.sampled_from([0, 1, -2]))
    ours, ref = getattr(S.poisson, method), getattr(ss.poisson, method)
    with np.errstate(all="ignore"):
        assert_same(traced_value(lambda mu: ours(k, mu, loc), mu, mode=mode),
                    ref(k, mu, loc=loc))


@pytest.mark.parametrize("method", ["logpmf", "pmf", "cdf", "logcdf", "sf", "logsf"])
def test_poisson_second_order(method):
    k = np.array([0, 1, 3, 7])
    check_grads(lambda mu: getattr(S.poisson, method)(k, mu), np.array([0.5, 1.3, 2.0, 4.0]))


@pytest.mark.parametrize("method", ["logpmf", "cdf", "sf"])
def test_poisson_count_and_shift_have_no_derivative(method):
    f = getattr(S.poisson, method)
    with pytest.raises(NotImplementedError, match="'k' is discrete"):
        gradient(Reverse, lambda k: f(k, 2.0), 3.0)
    with pytest.raises(NotImplementedError, match="'loc' is discrete"):
        gradient(Forward, lambda loc: f(3, 2.0, loc), 1.0)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("loc,scale", [(-5e-324, 0.375), (-5e-324, 1.0), (5e-324, 1.0)])
def test_chi2_standardizes_as_scipy_at_subnormal_offsets(loc, scale):
    """chi2 as gamma(df / 2) of (x - loc) / (2 scale) rounded a subnormal z to 0: +inf where
    SciPy gives a finite log density, or -inf (outside the support)."""
    for method in METHODS:
        expected = getattr(ss.chi2, method)(0.0, 1.0, loc=loc, scale=scale)
        got = traced_value(lambda x, l, s: getattr(S.chi2, method)(x, 1.0, l, s),
                           np.array(0.0), np.array(loc), np.array(scale))
        assert_same(got, expected)
