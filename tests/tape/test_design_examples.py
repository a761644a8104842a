"""The examples of DESIGN §2.2, verbatim, with their documented results."""
import numpy as np

from tape import (Active, Const, Duplicated, Forward, ForwardWithPrimal, Reverse,
                  ReverseWithPrimal, autodiff)


def test_reverse_scalar():
    assert autodiff(Reverse, lambda x: x**2, Active, Active(3.0)) == ((6.0,),)


def test_reverse_scalar_returns_python_float():
    (d,), = autodiff(Reverse, lambda x: x**2, Active, Active(3.0))
    assert type(d) is float


def test_reverse_with_primal():
    assert autodiff(ReverseWithPrimal, lambda x: x**2, Active, Active(3.0)) == ((6.0,), 9.0)


def test_const_argument_gives_none():
    assert autodiff(Reverse, lambda x, c: c*x**2, Active, Active(2.0), Const(3.0)) == ((12.0, None),)


def test_duplicated_accumulates():
    A = np.array([1., 2., 3.])
    dA = np.zeros(3)
    assert autodiff(Reverse, lambda A: np.sum(A**2), Active, Duplicated(A, dA)) == ((None,),)
    np.testing.assert_array_equal(dA, [2., 4., 6.])
    autodiff(Reverse, lambda A: np.sum(A**2), Active, Duplicated(A, dA))
    np.testing.assert_array_equal(dA, [4., 8., 12.])   # call twice, get twice


def test_forward():
    assert autodiff(Forward, lambda x: x**2, Duplicated(3.0, 1.0)) == (6.0,)


def test_forward_with_primal():
    assert autodiff(ForwardWithPrimal, lambda x: x**2, Duplicated(3.0, 1.0)) == (6.0, 9.0)


def f_(y, x):
    y[0] = x[0]**2 + x[1]
    y[1] = x[0] * x[1]


def test_inplace_vjp_by_seeding_the_output_shadow():
    x, dx, y, dy = np.array([2., 3.]), np.zeros(2), np.zeros(2), np.array([1., 0.])
    autodiff(Reverse, f_, Const, Duplicated(y, dy), Duplicated(x, dx))
    np.testing.assert_array_equal(y, [7., 6.])
    np.testing.assert_array_equal(dx, [4., 1.])
    np.testing.assert_array_equal(dy, [0., 0.])


def test_inplace_second_seed_row():
    x, dx, y, dy = np.array([2., 3.]), np.zeros(2), np.zeros(2), np.array([0., 1.])
    autodiff(Reverse, f_, Const, Duplicated(y, dy), Duplicated(x, dx))
    np.testing.assert_array_equal(dx, [3., 2.])   # d(x0 x1)/dx


def test_inplace_forward_tangents_overwrite_shadows():
    x, dx, y, dy = np.array([2., 3.]), np.array([1., 0.]), np.zeros(2), np.full(2, 99.0)
    autodiff(Forward, f_, Const, Duplicated(y, dy), Duplicated(x, dx))
    np.testing.assert_array_equal(y, [7., 6.])
    np.testing.assert_array_equal(dy, [4., 3.])   # J[:, 0]
    np.testing.assert_array_equal(dx, [1., 0.])   # x was not written: its seed is untouched


def test_return_activity_is_optional():
    assert autodiff(Reverse, lambda x: x**2, Active(3.0)) == ((6.0,),)


def test_const_return_gives_zero_derivative():
    assert autodiff(Reverse, lambda x: x**2, Const, Active(3.0)) == ((0.0,),)
