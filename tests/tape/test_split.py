"""Split reverse mode: autodiff_thunk's forward and reverse, and the tape between them."""
import numpy as np
import pytest

from tape import (Active, ActivityError, BatchDuplicated, Const, Duplicated, Reverse,
                  ReverseSplitNoPrimal, ReverseSplitWithPrimal, ReverseWithPrimal,
                  TapeMutatedError, autodiff, autodiff_thunk, custom_rule,
                  OnceDifferentiableError, Forward)
from tape.testing import check_grads

A = np.array([[1.0, -2.0, 0.5], [0.3, 0.7, -1.1]])


def test_active_scalar_matches_autodiff():
    f = lambda x, c: c * np.sin(x) * x   # noqa: E731
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, f, Active, Active, Const)
    tape, primal, shadow = fwd(Active(0.7), Const(3.0))
    assert shadow is None
    assert primal == pytest.approx(f(0.7, 3.0))
    (d, dc), = rev(Active(0.7), Const(3.0), 1.0, tape)
    (expected, _), value = autodiff(ReverseWithPrimal, f, Active, Active(0.7), Const(3.0))
    assert d == pytest.approx(expected) and dc is None


def test_no_primal_mode_returns_none_for_the_primal():
    fwd, rev = autodiff_thunk(ReverseSplitNoPrimal, lambda x: x ** 3, Active, Active)
    tape, primal, _ = fwd(Active(2.0))
    assert primal is None
    assert rev(Active(2.0), 1.0, tape) == ((12.0,),)


def test_tape_is_reversed_many_times_with_different_seeds():
    f = lambda x: np.tanh(A @ x)          # noqa: E731
    x, dx = np.array([0.2, -0.4, 0.9]), np.zeros(3)
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, f, Duplicated, Duplicated)
    tape, y, dy = fwd(Duplicated(x, dx))
    np.testing.assert_allclose(y, f(x), atol=1e-12)
    rows = []
    for k in range(2):
        dx[:] = 0
        rev(Duplicated(x, dx), np.eye(2)[k], tape)
        rows.append(dx.copy())
    J = (1 - np.tanh(A @ x) ** 2)[:, None] * A
    np.testing.assert_allclose(np.array(rows), J, atol=1e-12)


def test_duplicated_return_seeded_through_its_shadow():
    f = lambda x: x * np.exp(x)           # noqa: E731
    x, dx = np.array([0.5, -1.0]), np.zeros(2)
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, f, Duplicated, Duplicated)
    tape, y, dy = fwd(Duplicated(x, dx))
    np.testing.assert_array_equal(dy, np.zeros(2))
    dy[:] = [2.0, 0.0]
    assert rev(Duplicated(x, dx), tape) == ((None,),)
    np.testing.assert_allclose(dx, [2.0 * (1 + 0.5) * np.exp(0.5), 0.0], atol=1e-11)


def test_shadows_accumulate_across_reversals():
    fwd, rev = autodiff_thunk(ReverseSplitNoPrimal, lambda x: np.sum(x ** 2), Active,
                              Duplicated)
    x, dx = np.array([1.0, 2.0]), np.zeros(2)
    tape, _, _ = fwd(Duplicated(x, dx))
    rev(Duplicated(x, dx), 1.0, tape)
    rev(Duplicated(x, dx), 1.0, tape)
    np.testing.assert_allclose(dx, [4.0, 8.0], atol=1e-11)


def test_in_place_function_overwrites_primal_in_forward_and_seeds_in_reverse():
    def f_(y, x):
        y[0] = x[0] ** 2 + x[1]
        y[1] = x[0] * x[1]
    x, dx, y, dy = np.array([2.0, 3.0]), np.zeros(2), np.zeros(2), np.array([1.0, 0.0])
    fwd, rev = autodiff_thunk(ReverseSplitNoPrimal, f_, Const, Duplicated, Duplicated)
    tape, _, _ = fwd(Duplicated(y, dy), Duplicated(x, dx))
    np.testing.assert_array_equal(y, [7.0, 6.0])        # forward did the write
    np.testing.assert_array_equal(dx, [0.0, 0.0])       # ...and no sweep yet
    rev(Duplicated(y, dy), Duplicated(x, dx), tape)
    np.testing.assert_array_equal(dx, [4.0, 1.0])
    np.testing.assert_array_equal(dy, [0.0, 0.0])       # the seed was consumed
    dy[:] = [0.0, 1.0]
    rev(Duplicated(y, dy), Duplicated(x, dx), tape)
    np.testing.assert_array_equal(dx, [4.0 + 3.0, 1.0 + 2.0])


def test_values_saved_before_an_overwrite_stay_valid():
    def f_(x):
        s = np.sum(np.sin(x))       # saves x
        x[:] = 0.0                  # then overwrites it
        return s
    x, dx = np.array([0.3, 1.2]), np.zeros(2)
    x0 = x.copy()
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, f_, Active, Duplicated)
    tape, s, _ = fwd(Duplicated(x, dx))
    np.testing.assert_array_equal(x, [0.0, 0.0])
    rev(Duplicated(x, dx), 1.0, tape)
    np.testing.assert_allclose(dx, np.cos(x0), atol=1e-12)


def test_batch_split_mode():
    f = lambda x: A @ np.sin(x)          # noqa: E731
    x = np.array([0.1, 0.2, 0.3])
    shadows = (np.zeros(3), np.zeros(3))
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, f, Duplicated, BatchDuplicated)
    tape, y, dys = fwd(BatchDuplicated(x, shadows))
    assert len(dys) == 2
    rev(BatchDuplicated(x, shadows), (np.array([1.0, 0.0]), np.array([0.0, 1.0])), tape)
    J = A * np.cos(x)
    np.testing.assert_allclose(np.array(shadows), J, atol=1e-12)


def test_repr_lists_the_records():
    fwd, _ = autodiff_thunk(ReverseSplitWithPrimal, lambda x, c: np.sin(x) * c, Active, Active,
                            Const)
    tape, _, _ = fwd(Active(1.0), Const(2.0))
    text = repr(tape)
    assert "2 records" in text
    assert "sin(%0)" in text and "multiply(%1, const)" in text and "return %2" in text
    assert len(tape) == 2


# -- errors ------------------------------------------------------------------------------------
def test_reversing_after_an_argument_changed_raises():
    fwd, rev = autodiff_thunk(ReverseSplitNoPrimal, lambda x: np.sum(np.sin(x)), Active,
                              Duplicated)
    x, dx = np.array([0.3, 1.2]), np.zeros(2)
    tape, _, _ = fwd(Duplicated(x, dx))
    x[0] = 5.0
    with pytest.raises(TapeMutatedError, match="modified after the forward pass"):
        rev(Duplicated(x, dx), 1.0, tape)


def test_reversing_after_a_saved_array_changed_raises():
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, lambda x: np.exp(x), Duplicated,
                              Duplicated)
    x, dx = np.array([0.3, 1.2]), np.zeros(2)
    tape, y, dy = fwd(Duplicated(x, dx))    # exp saves its output, which the caller holds
    y[1] = 0.0
    dy[:] = 1.0
    with pytest.raises(TapeMutatedError, match=r"record #0 \(`exp`\)"):
        rev(Duplicated(x, dx), tape)


def test_seed_of_the_wrong_shape_raises():
    fwd, rev = autodiff_thunk(ReverseSplitNoPrimal, lambda x: A @ x, Active, Duplicated)
    x, dx = np.ones(3), np.zeros(3)
    tape, _, _ = fwd(Duplicated(x, dx))
    with pytest.raises(ActivityError, match=r"seed has shape \(3,\) but the result has shape "
                                            r"\(2,\)"):
        rev(Duplicated(x, dx), np.ones(3), tape)
    np.testing.assert_array_equal(dx, 0.0)      # nothing was written


def test_wrong_activities_and_tapes_are_refused():
    fwd, rev = autodiff_thunk(ReverseSplitNoPrimal, lambda x: x * 2.0, Active, Active)
    with pytest.raises(ActivityError, match="argument 0 is Duplicated but autodiff_thunk was "
                                            "told Active"):
        fwd(Duplicated(np.ones(1), np.zeros(1)))
    tape, _, _ = fwd(Active(1.0))
    _, other_rev = autodiff_thunk(ReverseSplitNoPrimal, lambda x: x * 2.0, Active, Active)
    with pytest.raises(ActivityError, match="another autodiff_thunk"):
        other_rev(Active(1.0), 1.0, tape)
    with pytest.raises(ActivityError, match="needs a seed"):
        rev(Active(1.0), tape)
    with pytest.raises(ActivityError, match="ReverseSplitWithPrimal, ReverseSplitNoPrimal"):
        autodiff_thunk(Reverse, lambda x: x, Active, Active)
    with pytest.raises(ActivityError, match="takes activity types"):
        autodiff_thunk(ReverseSplitNoPrimal, lambda x: x, Active, type("Odd", (), {}))


def test_second_derivative_through_a_once_differentiable_rule_raises():
    def cube(x):
        return x ** 3
    cube = custom_rule(cube, augmented_primal=lambda cfg, x: (x ** 3, x),
                       reverse=lambda cfg, x, g: (3 * x ** 2 * g,),
                       forward=lambda cfg, xs, ts: (xs[0] ** 3, 3 * xs[0] ** 2 * ts[0]))

    def grad(x):
        return autodiff(Reverse, cube, Active, Active(x))[0][0]
    assert grad(2.0) == 12.0
    with pytest.raises(OnceDifferentiableError, match="cube"):
        autodiff(Forward, grad, Duplicated(2.0, 1.0))
    with pytest.raises(OnceDifferentiableError, match="cube"):
        autodiff(Reverse, grad, Active, Active(2.0))


def test_split_gradient_matches_finite_differences():
    def via_split(x):
        fwd, rev = autodiff_thunk(ReverseSplitNoPrimal, lambda v: np.sum(np.sin(v) * v),
                                  Active, Active)
        tape, _, _ = fwd(Active(x))
        return rev(Active(x), 1.0, tape)[0][0]
    x = np.array([0.3, -0.8, 1.4])
    np.testing.assert_allclose(via_split(x), np.sin(x) + x * np.cos(x), atol=1e-12)
    check_grads(via_split, x, modes=("fwd",), order=1)


def test_residuals_may_hold_modules_and_other_objects():
    double = custom_rule(lambda x: 2 * x, augmented_primal=lambda c, x: (2 * x, (np, "note")),
                         reverse=lambda c, s, g: (2 * g,))
    fwd, rev = autodiff_thunk(ReverseSplitNoPrimal, lambda x: np.sum(double(x)), Active,
                              Duplicated)
    x, dx = np.ones(3), np.zeros(3)
    tape, _, _ = fwd(Duplicated(x, dx))
    rev(Duplicated(x, dx), 1.0, tape)
    np.testing.assert_array_equal(dx, [2.0, 2.0, 2.0])
