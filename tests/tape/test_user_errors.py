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
    np.testing.assert_allclose(gx, [6.0, 0.0], atol=1e-11)
    assert gc is None
    (tangent,) = autodiff(Forward, f, Duplicated(x, np.array([1.0, 0.0])), Const(c))
    assert tangent == pytest.approx(6.0)
    np.testing.assert_array_equal(c, [3.0, 4.0])   # the Const argument is untouched


def _x(x):
    return x * 1.0


@pytest.mark.parametrize("f,match", [
    (lambda x: float(x[0]) * x[1], r"float\(x\) of a traced value \(float64 of shape \(\)\).*"
                                   r"tape\.primal\(x\)"),
    (lambda x: int(x[0]) * x[1], r"int\(x\) of a traced value.*int\(tape\.primal\(x\)\)"),
    (lambda x: round(x[0]) * x[1], r"round\(x\) of a traced value.*np\.round\(x\)"),
    (lambda x: x[0].item() * x[1], r"x\.item\(\) of a traced value"),
    (lambda x: np.sum(_x(x).sort()), r"x\.sort\(\) sorts a traced value \(float64 of shape "
                                     r"\(2,\)\) in place.*np\.sort\(x"),
    (lambda x: x.flat[0], r"x\.flat of a traced value.*x\.ravel\(\)"),
    (lambda x: np.sum(np.vectorize(lambda a: a * 2)(x)), r"np\.vectorize calls its function "
                                                          r"on plain elements"),
    (lambda x: np.float64(x[0]) * x[1], r"np\.float64\(x\), np\.int64\(x\)"),
    (lambda x: np.int64(x[0]) * x[1], r"np\.float64\(x\), np\.int64\(x\)"),
])
def test_conversions_name_the_call_and_the_fix(f, match):
    from tape import NonDifferentiableError
    with pytest.raises(NonDifferentiableError, match=match):
        autodiff(Reverse, f, Active, Active(np.array([1.5, 2.0])))


def test_a_scipy_function_on_a_traced_value_names_its_replacement():
    scipy_stats = pytest.importorskip("scipy.stats")
    from tape import NonDifferentiableError
    with pytest.raises(NonDifferentiableError, match=r"scipy\.stats\.norm\.logpdf was called on "
                                                     r"a traced value.*tape\.scipy\.stats"):
        autodiff(Reverse, lambda x: np.sum(scipy_stats.norm.logpdf(x)), Active,
                 Active(np.array([0.5, 1.0])))
