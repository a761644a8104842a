"""`autodiff` and `autodiff_thunk` against Enzyme.jl's documented semantics (DESIGN §2.1-2.2).

Return layouts, shadows and the return-activity guess, checked against the docstrings of
Enzyme.jl's src/Enzyme.jl and src/analyses/activity.jl, including four deviations found and
fixed: forward mode's return guess, an annotated function Const(f), Active of a plain int, and
the forward-mode thunk.
"""
import numpy as np
import pytest

from tape import (Active, BatchDuplicated, Const, Duplicated, DuplicatedNoNeed, Forward,
                  ForwardWithPrimal, Reverse, ReverseSplitWithPrimal, ReverseWithPrimal,
                  autodiff, autodiff_thunk)


def _square(x):
    return x * x


def _write_first(y, x):
    y[0] = x[0] ** 2


def _layout(case):
    if case == "fwd Const":
        return autodiff(Forward, _square, Const, Duplicated(3.0, 1.0)), ()
    if case == "fwd+primal Const":
        return autodiff(ForwardWithPrimal, _square, Const, Duplicated(3.0, 1.0)), (9.0,)
    if case == "fwd+primal Duplicated":
        return autodiff(ForwardWithPrimal, _square, Duplicated, Duplicated(3.0, 1.0)), (6.0, 9.0)
    if case == "fwd+primal DuplicatedNoNeed":     # DESIGN §2.1: primal not returned
        return (autodiff(ForwardWithPrimal, _square, DuplicatedNoNeed, Duplicated(3.0, 1.0)),
                (6.0,))
    if case == "fwd+primal Duplicated return, batch args":   # Duplicated means W tangents
        return (autodiff(ForwardWithPrimal, _square, Duplicated,
                         BatchDuplicated(3.0, (1.0, 2.0))), ((6.0, 12.0), 9.0))
    if case == "rev+primal Const":
        return autodiff(ReverseWithPrimal, lambda x: 2.0 * x, Const, Active(1.0)), ((0.0,), 2.0)
    if case == "rev+primal in-place, no result":
        y, x = np.zeros(1), np.array([3.0])
        return (autodiff(ReverseWithPrimal, _write_first, Duplicated(y, np.zeros(1)),
                         Duplicated(x, np.zeros(1))), ((None, None), None))
    if case == "split Const return":
        fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, _square, Const, Active)
        tape, primal, shadow = fwd(Active(3.0))
        return (primal, shadow, rev(Active(3.0), tape)), (9.0, None, ((0.0,),))
    raise AssertionError(case)


@pytest.mark.parametrize("case", [
    "fwd Const", "fwd+primal Const", "fwd+primal Duplicated", "fwd+primal DuplicatedNoNeed",
    "fwd+primal Duplicated return, batch args", "rev+primal Const",
    "rev+primal in-place, no result", "split Const return"])
def test_return_layouts(case):
    got, want = _layout(case)
    assert got == want


def test_autodiff_thunk_docstring_example():
    """Enzyme.jl's autodiff_thunk example: A[1] read, then zeroed; result, dv, dA =
    (7.26, 2.2, [3.3])."""
    def f(A, v):
        res = A[0] * v
        A[0] = 0
        return res
    A, dA, v = np.array([2.2]), np.zeros(1), 3.3
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, f, Active, Duplicated, Active)
    tape, result, shadow = fwd(Duplicated(A, dA), Active(v))
    (dA_ret, dv), = rev(Duplicated(A, dA), Active(v), 1.0, tape)
    assert (shadow, dA_ret) == (None, None)
    np.testing.assert_allclose([result, dv], [7.26, 2.2], rtol=1e-14)
    np.testing.assert_allclose(dA, [3.3], rtol=1e-14)
    np.testing.assert_array_equal(A, [0.0])


def test_shadow_of_an_overwritten_input_is_its_seed_then_accumulates():
    """Enzyme's shadow memory: the incoming shadow of x[0], overwritten by a constant, is
    dropped; x[1] keeps its incoming 10 and gains d/dx1 sum(x**2) = 4."""
    def f(x):
        s = np.sum(x ** 2)
        x[0] = 5.0
        return s
    x, dx = np.array([1.0, 2.0]), np.array([10.0, 10.0])
    assert autodiff(ReverseWithPrimal, f, Active, Duplicated(x, dx)) == ((None,), 5.0)
    np.testing.assert_array_equal(x, [5.0, 2.0])
    np.testing.assert_allclose(dx, [2.0, 14.0], rtol=1e-14)


# -- deviations from Enzyme.jl ----------------------------------------------------------------

def _no_float_result(case):
    x = np.array([2.0, 3.0])
    if case == "None (in-place)":
        return lambda y, x: _write_first(y, x), (Duplicated(np.zeros(2), np.zeros(2)),
                                                 Duplicated(x, np.ones(2))), None
    if case == "int":
        return lambda x: 7, (Duplicated(x, np.ones(2)),), 7
    if case == "bool":
        return lambda x: bool(x[0] > 0), (Duplicated(x, np.ones(2)),), True
    raise AssertionError(case)


@pytest.mark.parametrize("mode", [Forward, ForwardWithPrimal], ids=["Forward", "WithPrimal"])
@pytest.mark.parametrize("case", ["None (in-place)", "int", "bool"])
def test_forward_guesses_const_for_a_result_without_float_data(case, mode):
    f, args, primal = _no_float_result(case)
    got = autodiff(mode, f, *args)
    assert got == ((primal,) if mode is ForwardWithPrimal else ())


@pytest.mark.parametrize("mode", [Reverse, Forward])
def test_autodiff_takes_an_annotated_function(mode):
    if mode is Reverse:
        assert autodiff(Reverse, Const(_square), Active, Active(3.0)) == ((6.0,),)
    else:
        assert autodiff(Forward, Const(_square), Duplicated(3.0, 1.0)) == (6.0,)


def test_active_plain_int_is_converted_to_float():
    (d,), = autodiff(Reverse, _square, Active, Active(3))
    assert d == 6.0 and isinstance(d, float)


def test_autodiff_thunk_in_forward_mode():
    fwd = autodiff_thunk(ForwardWithPrimal, _square, Duplicated, Duplicated)
    assert fwd(Duplicated(3.0, 1.0)) == (6.0, 9.0)
    fwd = autodiff_thunk(Forward, _square, Duplicated, Duplicated)
    assert fwd(Duplicated(3.0, 1.0)) == (6.0,)
