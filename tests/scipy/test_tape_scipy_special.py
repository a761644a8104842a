"""tape.scipy.special: logsumexp (b=, return_sign, keepdims), softmax and log_softmax against
SciPy on traced input over random shapes and axes, derivatives to second order against finite
differences, and the re-exported ufuncs."""
import numpy as np
import pytest
import scipy.special as sc
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tape.scipy.special as S
from tape import Reverse, gradient
from tape.testing import arrays, arrays_and_axes, check_grads, traced_value
from tape.tracer import UFUNC_RULES

FAST = settings(max_examples=30, deadline=None)



def assert_same(ours, ref):
    """Traced results against SciPy's: same shape, values to rounding (different code paths)."""
    ours, ref = np.asarray(ours), np.asarray(ref)
    assert ours.shape == ref.shape
    np.testing.assert_allclose(ours, ref, rtol=1e-12, atol=1e-13)


# -- logsumexp -------------------------------------------------------------------------------------
@FAST
@given(arrays_and_axes(), st.booleans(), st.booleans(), st.sampled_from(["forward", "reverse"]))
def test_logsumexp_matches_scipy(xa, keepdims, return_sign, mode):
    x, axis = xa
    f = lambda x: S.logsumexp(x, axis=axis, keepdims=keepdims, return_sign=return_sign)  # noqa
    ref = sc.logsumexp(x, axis=axis, keepdims=keepdims, return_sign=return_sign)
    got = traced_value(f, x, mode=mode)
    if return_sign:
        assert_same(got[0], ref[0])
        assert_same(got[1], ref[1])
    else:
        assert_same(got, ref)


@st.composite
def weighted(draw):
    """a and weights b of broadcastable shapes (b of either sign, some zero) and an axis of
    the broadcast shape."""
    shapes_ = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=1, max_dims=3,
                                                     max_side=3))
    a = draw(arrays(shapes_.input_shapes[0]))
    b = draw(arrays(shapes_.input_shapes[1], low=-1.0, high=2.0))
    ndim = len(shapes_.result_shape)
    axis = draw(st.one_of(st.none(), st.integers(-ndim, ndim - 1)))
    return a, b, axis


@FAST
@given(weighted(), st.booleans(), st.booleans(), st.sampled_from(["forward", "reverse"]))
def test_weighted_logsumexp_matches_scipy(abx, keepdims, return_sign, mode):
    a, b, axis = abx
    f = lambda a, b: S.logsumexp(a, axis=axis, b=b, keepdims=keepdims,  # noqa: E731
                                 return_sign=return_sign)
    with np.errstate(invalid="ignore", divide="ignore"):
        ref = sc.logsumexp(a, axis=axis, b=b, keepdims=keepdims, return_sign=return_sign)
        got = traced_value(f, a, b, mode=mode)
    if return_sign:
        assert_same(got[1], ref[1])
        got, ref = got[0], ref[0]
    # log|s| of a sum that cancels to ~0 is ill-conditioned: compare the sums' magnitudes.
    np.testing.assert_allclose(np.exp(got), np.exp(ref), rtol=1e-10, atol=1e-12)
    assert np.shape(got) == np.shape(ref)


A23 = np.array([[0.3, -1.2, 0.5], [1.0, 0.2, -0.4]])


@pytest.mark.parametrize("kwargs", [{}, {"axis": 1}, {"axis": (0, 1), "keepdims": True},
                                    {"axis": 0, "keepdims": True}])
def test_logsumexp_second_order(kwargs):
    check_grads(lambda a: S.logsumexp(a, **kwargs), A23)


def test_weighted_logsumexp_second_order():
    b = np.array([1.0, 0.5, 2.0])
    check_grads(lambda a, b: S.logsumexp(a, axis=1, b=b), A23, b)
    check_grads(lambda a, b: S.logsumexp(a, axis=0, b=b, keepdims=True), A23, b[:, None][:2])
    # a mixed-sign sum with return_sign: the derivative of log|s|
    mixed = np.array([1.0, -0.5, 2.0])
    check_grads(lambda a, b: S.logsumexp(a, axis=1, b=b, return_sign=True)[0], A23, mixed)


def test_logsumexp_sign_is_constant_and_negative_sums_are_nan():
    a, b = np.array([1.0, 2.0]), np.array([1.0, -2.0])
    out, sign = S.logsumexp(a, b=b, return_sign=True)
    assert sign == -1.0 and np.isclose(out, sc.logsumexp(a, b=b, return_sign=True)[0])
    with np.errstate(invalid="ignore"):
        assert np.isnan(S.logsumexp(a, b=b))
        g, = gradient(Reverse, lambda a: S.logsumexp(a, b=b), a)
    assert np.all(np.isnan(g))   # never a finite derivative of a NaN value


def test_logsumexp_zero_and_empty():
    assert S.logsumexp(np.array([1.0, 2.0]), b=np.zeros(2), return_sign=True)[1] == 0.0
    assert S.logsumexp(np.array([])) == sc.logsumexp(np.array([]))


def test_logsumexp_bad_axis():
    with pytest.raises(np.exceptions.AxisError):
        S.logsumexp(A23, axis=2, b=np.ones(3))


# -- softmax and log_softmax -----------------------------------------------------------------------
@FAST
@given(arrays_and_axes(), st.sampled_from(["forward", "reverse"]))
def test_softmax_family_matches_scipy(xa, mode):
    x, axis = xa
    assert_same(traced_value(lambda x: S.softmax(x, axis=axis), x, mode=mode),
                sc.softmax(x, axis=axis))
    assert_same(traced_value(lambda x: S.log_softmax(x, axis=axis), x, mode=mode),
                sc.log_softmax(x, axis=axis))


@pytest.mark.parametrize("axis", [None, 0, -1, (0, 1)])
def test_softmax_family_second_order(axis):
    check_grads(lambda x: S.softmax(x, axis=axis), A23)
    check_grads(lambda x: S.log_softmax(x, axis=axis), A23)


def test_softmax_defaults_to_every_axis_as_scipy():
    assert_same(S.softmax(A23), sc.softmax(A23))
    assert np.isclose(np.sum(S.softmax(A23)), 1.0)


# -- re-exported ufuncs and functions --------------------------------------------------------------
def _rule_of(name):
    obj = getattr(S, name)
    if name == "zeta":   # a Python wrapper of the ufunc _zeta
        from scipy.special import _ufuncs
        obj = _ufuncs._zeta
    return UFUNC_RULES.get(obj)


@pytest.mark.parametrize("name", S.UFUNCS)
def test_every_reexported_ufunc_is_differentiable(name):
    rule = _rule_of(name)
    assert rule is not None and not getattr(rule, "__hecate_inactive__", False), name


def test_every_differentiable_scipy_ufunc_is_reachable():
    """The listed names, and through the module's __getattr__ any other ufunc with a rule."""
    missing = [k.__name__ for k, rule in UFUNC_RULES.items()
               if isinstance(k, np.ufunc) and getattr(np, k.__name__, None) is not k
               and not getattr(rule, "__hecate_inactive__", False)
               and not k.__name__.startswith("_")   # SciPy's private ufuncs (_zeta, ...)
               and getattr(S, k.__name__, None) is not k]
    assert not missing, f"differentiable scipy.special ufuncs not reachable: {missing}"
    with pytest.raises(AttributeError, match="not a differentiable ufunc"):
        S.gammasgn   # registered, but inactive
    with pytest.raises(AttributeError):
        S.no_such_function


def test_reexports_second_order():
    x = np.array([0.7, 1.6, 2.9])
    check_grads(lambda x: S.gammaln(x) * S.expit(x), x)
    check_grads(lambda x: S.polygamma(1, x), x)
    check_grads(lambda x: S.multigammaln(x + 2.0, 3), x)
    assert_same(S.polygamma(2, x), sc.polygamma(2, x))
    assert_same(S.multigammaln(4.5, 3), sc.multigammaln(4.5, 3))
