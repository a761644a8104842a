"""Common mistakes get an error that names the call, the argument and the fix; idioms that
only look like mistakes (a scratch buffer made from a Const argument) just work."""
import numpy as np
import pytest

from tape import (Active, ActivityError, Const, Duplicated, Forward, Reverse, ReverseWithPrimal,
                  autodiff)


def test_a_tuple_result_where_a_scalar_is_expected():
    for ret in ((Active,), ()):
        with pytest.raises(ActivityError, match=r"returned a tuple of 2 values\. Return one "
                                                r"scalar"):
            autodiff(Reverse, lambda x: (np.sum(x), np.max(x)), *ret, Active(np.ones(3)))
    # A tuple of constants carries no derivative: a Const return, as Enzyme guesses it.
    assert autodiff(Reverse, lambda x: (1.0, 2.0), Active(np.ones(2)))[0][0] is not None


def test_an_active_instance_as_the_return_activity():
    with pytest.raises(ActivityError, match=r"return activity must be a type, Active, not an "
                                            r"instance"):
        autodiff(Reverse, lambda x: np.sum(x), Active(1.0), Active(np.ones(2)))
    # An Active instance first is an ordinary argument when the function takes it.
    assert autodiff(Reverse, lambda a, b: a * np.sum(b), Active(2.0), Active(np.ones(2)))[0][0] \
        == 2.0


@pytest.mark.parametrize("make", [np.zeros_like, np.ones_like, np.empty_like, np.copy,
                                  lambda c: c.copy()])
def test_a_buffer_made_from_a_const_argument_receives_traced_values(make):
    def f(x, c):
        buf = make(c)
        buf[0] = x[0] * 2.0
        buf[1] = c[1]
        return np.sum(buf * c)
    x, c = np.array([1.5, 2.0]), np.array([3.0, 4.0])
    (gx, gc), value = autodiff(ReverseWithPrimal, f, Active, Active(x), Const(c))
    assert value == pytest.approx(1.5 * 2 * 3 + 16.0)
    np.testing.assert_allclose(gx, [6.0, 0.0])
    assert gc is None
    (tangent,) = autodiff(Forward, f, Duplicated(x, np.array([1.0, 0.0])), Const(c))
    assert tangent == pytest.approx(6.0)
    np.testing.assert_array_equal(c, [3.0, 4.0])   # the Const argument is untouched
