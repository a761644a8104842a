"""NumPy ufunc methods (reduce, accumulate, outer, reduceat, at) and ufunc keyword arguments
on traced values: the cases not covered elsewhere (outer of 0-d and n-d operands on either
side, reductions of 0-d arrays and over empty axes, the binary ufuncs whose reduce has no
rule), and the cases where Hecate crashes on valid input or disagrees with itself.

Each passing check compares the primal with plain NumPy, reverse mode with central finite
differences in float64, forward mode with a directional difference, and `tape.compile` on two
inputs.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import tape
from tape import (Active, Duplicated, Forward, Reverse, ReverseWithPrimal, autodiff)
from tape.testing import traced_value
from numeric_checks import check_all_modes as check, fd_gradient_of, fixed_weights

X = np.array([[0.31, 1.22, 2.03], [0.74, 0.52, 1.37]])
A3 = np.array([0.4, 1.3, 0.9])


def _gradient(f, x):
    x = np.asarray(x, dtype=float)
    shadow = np.zeros_like(x)
    autodiff(Reverse, f, Active, Duplicated(x.copy(), shadow))
    return shadow


# -- ufunc.outer: 0-d and n-d operands, traced on either or both sides ---------------------------
OUTER_UFUNCS = [np.subtract, np.divide, np.power, np.maximum, np.minimum, np.arctan2, np.hypot,
                np.logaddexp]
OUTER_SHAPES = {
    "traced left, plain right": lambda uf: lambda x: uf.outer(x, A3),
    "plain left, traced right": lambda uf: lambda x: uf.outer(A3, x),
    "both traced": lambda uf: lambda x: uf.outer(x, x[0]),
    "0-d traced left": lambda uf: lambda x: uf.outer(x[0, 1], x),
    "0-d traced right": lambda uf: lambda x: uf.outer(x, x[1, 2]),
    "both 0-d": lambda uf: lambda x: uf.outer(x[0, 0], x[1, 2]),
    "plain scalar left": lambda uf: lambda x: uf.outer(0.7, x),
}


@pytest.mark.parametrize("shape", list(OUTER_SHAPES))
@pytest.mark.parametrize("ufunc", OUTER_UFUNCS, ids=lambda u: u.__name__)
def test_outer_of_traced_operands(ufunc, shape):
    check(OUTER_SHAPES[shape](ufunc), X)


# -- ufunc.reduce: 0-d input, empty axes, axis=() ------------------------------------------------
REDUCE_CASES = {
    "0-d default axis": (lambda uf: lambda x: uf.reduce(x[1, 1]), X),
    "0-d axis=-1": (lambda uf: lambda x: uf.reduce(x[1, 1], axis=-1), X),
    "0-d axis=()": (lambda uf: lambda x: uf.reduce(x[1, 1], axis=()), X),
    "axis=()": (lambda uf: lambda x: uf.reduce(x, axis=()), X),
    "axis=(-1, 0)": (lambda uf: lambda x: uf.reduce(x, axis=(-1, 0)), X),
    "3-d axis=(0, 2) keepdims": (lambda uf: lambda x: uf.reduce(
        x.reshape(1, 2, 3), axis=(0, 2), keepdims=True), X),
    "empty axis, initial": (lambda uf: lambda x: uf.reduce(
        x[:, :0], axis=1, initial=0.25) + x[:, 0], X),
}


@pytest.mark.parametrize("case", list(REDUCE_CASES))
@pytest.mark.parametrize("ufunc", [np.add, np.multiply, np.maximum, np.minimum],
                         ids=lambda u: u.__name__)
def test_reduce_shapes(ufunc, case):
    make, x = REDUCE_CASES[case]
    check(make(ufunc), x)


def test_reduce_over_an_empty_axis_gives_the_identity():
    for ufunc in (np.add, np.multiply):
        check(lambda x: ufunc.reduce(x[:0], axis=0) + x[0], X)


# -- the binary ufuncs whose reduce / accumulate has no rule refuse, naming the method ----------
@pytest.mark.parametrize("method", ["reduce", "accumulate"])
@pytest.mark.parametrize("ufunc", [np.subtract, np.divide, np.power, np.hypot, np.arctan2,
                                   np.fmax, np.fmin], ids=lambda u: u.__name__)
def test_unsupported_reduce_and_accumulate_name_the_method(ufunc, method):
    with pytest.raises(NotImplementedError, match=rf"numpy\.{ufunc.__name__}\.{method}"):
        _gradient(lambda x: np.sum(getattr(ufunc, method)(x)), X)


# -- findings -------------------------------------------------------------------------------------
@pytest.mark.parametrize("call", [
    "np.divide(x, list)", "np.power(x, list)", "np.float_power(x, list)",
    "np.arctan2(list, x)", "np.divide.outer(x, list)"])
@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_binary_ufunc_with_a_list_operand(call, mode):
    lst = [0.5, 1.5, 0.8]
    f = {"np.divide(x, list)": lambda x: np.divide(x, lst),
         "np.power(x, list)": lambda x: np.power(x, lst),
         "np.float_power(x, list)": lambda x: np.float_power(x, lst),
         "np.arctan2(list, x)": lambda x: np.arctan2(lst, x),
         "np.divide.outer(x, list)": lambda x: np.divide.outer(x, lst[:2])}[call]
    w = fixed_weights(np.shape(f(X)))
    loss = lambda a: np.sum(f(a) * w)   # noqa: E731
    grad = fd_gradient_of(loss, [X.copy()], 0)
    if mode == "reverse":
        np.testing.assert_allclose(_gradient(loss, X), grad, rtol=1e-6, atol=1e-6)
    else:
        d = np.ones_like(X)
        tangent, = autodiff(Forward, loss, Duplicated(X.copy(), d))
        np.testing.assert_allclose(tangent, np.sum(grad * d), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("ufunc", [np.logaddexp, np.logaddexp2], ids=lambda u: u.__name__)
def test_logaddexp_reduce_of_a_0d_array(ufunc):
    x = np.array(0.7)
    assert float(traced_value(lambda a: ufunc.reduce(a), x, mode="reverse")) == 0.7
    np.testing.assert_allclose(_gradient(lambda a: ufunc.reduce(a) * 2.0, x), 2.0)


@pytest.mark.parametrize("ufunc", [np.logaddexp, np.logaddexp2], ids=lambda u: u.__name__)
def test_logaddexp_reduce_over_an_empty_axis(ufunc):
    x = np.zeros((0, 3))
    got = traced_value(lambda a: ufunc.reduce(a, axis=0), x, mode="reverse")
    np.testing.assert_array_equal(got, ufunc.reduce(x, axis=0))   # [-inf, -inf, -inf]


@pytest.mark.parametrize("x", [[np.inf, 0.5], [-np.inf, -np.inf]], ids=["+inf", "all -inf"])
@pytest.mark.parametrize("ufunc", [np.logaddexp, np.logaddexp2], ids=lambda u: u.__name__)
def test_logaddexp_reduce_derivative_agrees_with_the_pairwise_ufunc(ufunc, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        pairwise = _gradient(lambda a: ufunc(a[0], a[1]), x)
        reduced = _gradient(lambda a: ufunc.reduce(a), x)
    np.testing.assert_array_equal(reduced, pairwise)


def test_frexp_with_where_and_a_plain_integer_exponent_buffer():
    mask = np.array([True, False, True])

    def f(x):
        m = np.zeros_like(x) + 0.5
        e = np.zeros(x.shape, dtype=np.int32)
        np.frexp(x, out=(m, e), where=mask)
        return m * (1 + e)

    check(f, X)


def test_outer_broadcasts_into_a_larger_out():
    def f(x):
        out = np.zeros((3, 3)) + x[0, 0]
        np.add.outer(x[0], x[1, :1], out=out)
        return out

    check(f, X)


def test_add_reduceat_with_float_index_list():
    check(lambda x: np.add.reduceat(x, [0.0, 2.0], axis=1), X)


@pytest.mark.parametrize("spelling", ["x / list", "list ** x", "x - tuple with a traced entry",
                                      "np.divide(x, list with a traced entry)"])
def test_operators_and_ufuncs_take_lists_as_numpy_does(spelling):
    """A list or tuple operand is made an array, as NumPy makes it (one holding traced
    entries too), for the operators as for the ufunc calls, in every mode."""
    f = {"x / list": lambda x: np.sum(np.sin(x / [0.5, 1.5, 0.8])),
         "list ** x": lambda x: np.sum([1.5, 2.0, 3.0] ** x),
         "x - tuple with a traced entry": lambda x: np.sum((x - (1.0, 2, x[0])) ** 2),
         "np.divide(x, list with a traced entry)":
             lambda x: np.sum(np.divide(x, [x[1], 2.0, 3.0]))}[spelling]
    x = np.array([1.0, 2.0, 3.0])
    (g,), value = autodiff(ReverseWithPrimal, f, Active, Active(x))
    assert value == f(x)
    fd = np.array([(f(x + e) - f(x - e)) / 2e-6 for e in np.eye(3) * 1e-6])
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)
    jvp = [autodiff(Forward, f, Duplicated(x, e))[0] for e in np.eye(3)]
    np.testing.assert_allclose(jvp, fd, rtol=1e-6, atol=1e-8)
    compiled = tape.compile(Reverse, f, Active, Active)
    for z in (x, x + 0.5):
        np.testing.assert_array_equal(compiled(Active(z))[0][0],
                                      autodiff(Reverse, f, Active, Active(z))[0][0])
