"""tape.scipy.signal: convolve and correlate against scipy.signal on traced input (N-d, every
mode and method, real and complex, either input larger), derivatives to second order against
finite differences (forward, reverse and batch mode), and SciPy's errors."""
import numpy as np
import pytest
import scipy.signal as ss
from hypothesis import given, settings
from hypothesis import strategies as st

import tape.scipy.signal as S
from tape import Reverse, gradient
from tape.testing import arrays, check_grads, traced_value

FAST = settings(max_examples=40, deadline=None)
FUNCTIONS = {"convolve": (S.convolve, ss.convolve), "correlate": (S.correlate, ss.correlate)}


@st.composite
def signal_pair(draw):
    """Two arrays of one dimensionality (1 to 3), each of sides 1 to 4, real or complex; in
    'valid' mode, shapes where one input covers the other in every dimension."""
    ndim = draw(st.integers(1, 3))
    mode = draw(st.sampled_from(["full", "valid", "same"]))
    s1 = tuple(draw(st.integers(1, 4)) for _ in range(ndim))
    s2 = tuple(draw(st.integers(1, 4)) for _ in range(ndim))
    if mode == "valid":
        big, small = (s1, s2) if draw(st.booleans()) else (s2, s1)
        small = tuple(min(a, b) for a, b in zip(big, small))
        s1, s2 = (big, small) if draw(st.booleans()) else (small, big)
    a, b = draw(arrays(s1)), draw(arrays(s2))
    if draw(st.booleans()):
        a = a + 1j * draw(arrays(s1))
        b = b + 1j * draw(arrays(s2))
    return a, b, mode


@FAST
@given(signal_pair(), st.sampled_from(sorted(FUNCTIONS)), st.sampled_from(["direct", "fft"]),
       st.sampled_from(["forward", "reverse"]))
def test_matches_scipy(pair, name, method, trace_mode):
    a, b, mode = pair
    ours, ref = FUNCTIONS[name]
    expected = ref(a, b, mode=mode, method=method)
    if np.iscomplexobj(a) and trace_mode == "reverse":   # reverse mode needs a real result
        got = traced_value(lambda a, b: ours(a, b, mode, method), a, b, mode="forward")
    else:
        got = traced_value(lambda a, b: ours(a, b, mode, method), a, b, mode=trace_mode)
    assert np.shape(got) == np.shape(expected)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


CASES = [((5,), (3,)), ((3,), (5,)), ((4, 3), (2, 2)), ((2, 2), (3, 4)), ((2, 3, 2), (2, 2, 1))]


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
@pytest.mark.parametrize("mode", ["full", "valid", "same"])
@pytest.mark.parametrize("shapes", CASES)
def test_second_order(name, mode, shapes):
    rng = np.random.default_rng(len(shapes[0]) + shapes[0][0])
    a, b = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
    f = FUNCTIONS[name][0]
    check_grads(lambda a, b: f(a, b, mode), a, b)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
@pytest.mark.parametrize("mode", ["full", "valid", "same"])
def test_second_order_complex(name, mode):
    rng = np.random.default_rng(1)
    a = rng.standard_normal(4) + 1j * rng.standard_normal(4)
    b = rng.standard_normal(3) + 1j * rng.standard_normal(3)
    check_grads(lambda a, b: FUNCTIONS[name][0](a, b, mode), a, b)


def test_one_argument_active_and_fft_method():
    a, b = np.array([1.0, 2.0, -1.0, 0.5]), np.array([0.5, -1.0])
    check_grads(lambda a: S.convolve(a, b, "same", method="fft"), a)
    check_grads(lambda b: S.correlate(a, b, "valid", method="fft"), b)
    g, = gradient(Reverse, lambda b: np.sum(S.correlate(a, b, "valid")), b)
    np.testing.assert_allclose(g, [np.sum(a[:3]), np.sum(a[1:])],
                               atol=1e-12)   # sum over the windows


def test_scalars_and_empty_as_scipy():
    assert S.convolve(2.0, 3.0) == ss.convolve(2.0, 3.0)
    assert np.shape(S.correlate(np.array([]), np.array([1.0]))) == (0,)


def test_errors_name_the_problem():
    a = np.ones((3, 2))
    with pytest.raises(ValueError, match="same dimensionality"):
        S.convolve(a, np.ones(2))
    with pytest.raises(ValueError, match="at least as large"):
        S.correlate(a, np.ones((2, 3)), mode="valid")
    with pytest.raises(ValueError, match="mode must be one of"):
        S.convolve(a, a, mode="circular")
    with pytest.raises(ValueError, match="method must be one of"):
        S.convolve(a, a, method="overlap-add")
