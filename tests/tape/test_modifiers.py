"""Mode modifiers: strong zero, NaN check and runtime activity (tape.modifiers)."""
import numpy as np
import pytest

from tape import (Active, Const, Duplicated, Forward, ForwardWithPrimal, NaNError, Reverse,
                  ReverseSplitNoPrimal, ReverseWithPrimal, autodiff, autodiff_thunk,
                  clear_strong_zero, set_nan_check, set_runtime_activity, set_strong_zero)
from tape.modifiers import strong_zero_enabled
from tape.testing import check_grads

# 1/0 and 0 * inf are the point of these tests: their warnings are expected.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def min_of_reciprocal(x):
    """Enzyme.jl's strong-zero example: finite at 0, but the unused branch 1/x is inf."""
    return np.minimum(1.0, 1.0 / x)


def grad(mode, f, x):
    return autodiff(mode, f, Active, Active(x))[0][0]


# -- strong zero ----------------------------------------------------------------------------------
def test_enzyme_example_is_nan_by_ieee_and_zero_with_strong_zero():
    # IEEE: d/dx (1/x) = -inf at 0, times the zero cotangent minimum gives the unused branch.
    assert np.isnan(grad(Reverse, min_of_reciprocal, 0.0))
    assert grad(set_strong_zero(Reverse), min_of_reciprocal, 0.0) == 0.0
    # Away from the singularity the modifier changes nothing.
    for x in (0.5, 2.0):
        assert grad(set_strong_zero(Reverse), min_of_reciprocal, x) == grad(
            Reverse, min_of_reciprocal, x)


def test_python_min_never_differentiates_the_unused_branch():
    # Python's min compares values and returns one object: at 0 that is the constant 1.0, so no
    # derivative path reaches 1/x and the gradient is 0 in both modes.
    f = lambda x: min(1.0, 1.0 / x)  # noqa: E731
    assert grad(Reverse, f, 0.0) == 0.0
    assert grad(set_strong_zero(Reverse), f, 0.0) == 0.0
    assert grad(Reverse, f, 2.0) == -0.25


def test_where_with_sqrt_at_zero():
    x = np.array([0.0, 4.0, -1.0])
    f = lambda x: np.sum(np.where(x > 0, np.sqrt(x), 0.0))  # noqa: E731
    plain = grad(Reverse, f, x)
    assert np.isnan(plain[0]) and plain[1] == 0.25
    np.testing.assert_array_equal(grad(set_strong_zero(Reverse), f, x), [0.0, 0.25, 0.0])


def test_product_with_an_infinite_constant():
    # x * c with c = inf where the result is masked out: 0 * inf in the rule of multiply.
    c = np.array([np.inf, 2.0])
    f = lambda x, c: np.sum(np.where(np.isfinite(c), x * c, 0.0))  # noqa: E731
    x = np.array([1.0, 3.0])
    plain = autodiff(Reverse, f, Active, Active(x), Const(c))[0][0]
    strong = autodiff(set_strong_zero(Reverse), f, Active, Active(x), Const(c))[0][0]
    assert np.isnan(plain[0])
    np.testing.assert_array_equal(strong, [0.0, 2.0])


def test_forward_mode_zero_tangent_times_inf():
    # Enzyme.jl's forward test: the tangent of A * Inf in direction zero.
    a, da = np.ones(3), np.zeros(3)
    assert np.all(np.isnan(autodiff(Forward, lambda a: a * np.inf, Duplicated(a, da))[0]))
    np.testing.assert_array_equal(
        autodiff(set_strong_zero(Forward), lambda a: a * np.inf, Duplicated(a, da))[0], 0.0)
    tangent = autodiff(set_strong_zero(Forward),
                       lambda x: np.sum(np.where(x > 0, np.sqrt(x), 0.0)),
                       Duplicated(np.array([0.0, 4.0]), np.array([0.0, 1.0])))[0]
    assert tangent == 0.25


@pytest.mark.parametrize("f, bad, good", [
    (np.log, 0.0, 1.5), (np.sqrt, 0.0, 1.5), (np.arcsin, 1.0, 0.5), (np.arccosh, 1.0, 1.5),
    (lambda v: v ** 0.5, 0.0, 1.5), ("erf", np.nan, 1.5), (np.tanh, np.nan, 1.5)])
def test_unary_and_special_rules_use_strong_zero(f, bad, good):
    # The first entry is discarded by np.where; its partial derivative is inf or NaN.
    if f == "erf":
        from ops.special import erf as f
    keep = np.array([False, True])
    g = lambda x: np.sum(np.where(keep, f(x), 0.0))  # noqa: E731
    x = np.array([bad, good])
    plain, strong = grad(Reverse, g, x), grad(set_strong_zero(Reverse), g, x)
    assert np.isnan(plain[0]) and strong[0] == 0.0
    assert strong[1] == plain[1] and np.isfinite(strong[1])


def test_strong_zero_keeps_finite_gradients_and_second_order():
    x = np.array([0.3, -1.2, 2.0])
    f = lambda x: np.sum(np.sin(x) * np.exp(x) / (1.0 + x * x))  # noqa: E731
    np.testing.assert_allclose(grad(set_strong_zero(Reverse), f, x), grad(Reverse, f, x),
                               atol=1e-12)
    hvp_plain = autodiff(Forward, lambda x: grad(Reverse, f, x), Duplicated(x, np.ones(3)))[0]
    hvp_strong = autodiff(set_strong_zero(Forward), lambda x: grad(set_strong_zero(Reverse), f, x),
                          Duplicated(x, np.ones(3)))[0]
    np.testing.assert_allclose(hvp_strong, hvp_plain, atol=1e-12)


def test_strong_zero_keeps_float32():
    x = np.array([0.0, 4.0], dtype=np.float32)
    g = grad(set_strong_zero(Reverse), lambda x: np.sum(np.where(x > 0, np.sqrt(x), 0)), x)
    assert g.dtype == np.float32


def test_strong_zero_is_scoped_to_its_call():
    assert not strong_zero_enabled()
    seen = []

    def f(x):
        seen.append(strong_zero_enabled())
        return x * x
    grad(set_strong_zero(Reverse), f, 1.0)
    grad(Reverse, f, 1.0)
    assert seen == [True, False] and not strong_zero_enabled()
    with pytest.raises(ZeroDivisionError):
        grad(set_strong_zero(Reverse), lambda x: 1 / 0, 1.0)
    assert not strong_zero_enabled()
    # An enclosing strong-zero call keeps it on in the calls it nests.
    inner = []

    def outer(x):
        grad(Reverse, lambda y: inner.append(strong_zero_enabled()) or y * x, 2.0)
        return x * x
    grad(set_strong_zero(Reverse), outer, 1.0)
    assert inner == [True]
    assert not clear_strong_zero(set_strong_zero(Reverse)).strong_zero


# -- NaN check ------------------------------------------------------------------------------------
def test_nan_check_names_the_op_record_and_argument():
    with pytest.raises(NaNError, match=r"`divide` \(record 0 of 2 on the tape.*argument 1.*"
                                       r"rule made the NaN.*set_strong_zero") as info:
        grad(set_nan_check(Reverse), min_of_reciprocal, 0.0)
    err = info.value
    assert (err.op, err.index, err.total, err.argument, err.incoming) == ("divide", 0, 2, 1,
                                                                         False)


def test_nan_check_position_counts_records_in_execution_order():
    def f(x):
        y = np.sin(x) * 2.0          # records 0, 1
        z = np.minimum(1.0, 1.0 / y)  # records 2, 3
        return np.sum(z + x)          # records 4, 5
    with pytest.raises(NaNError) as info:
        grad(set_nan_check(Reverse), f, np.array([0.0, 1.0]))
    assert (info.value.op, info.value.index, info.value.total) == ("divide", 2, 6)


def test_nan_check_reports_a_nan_that_came_in():
    # Two uses of y whose cotangents are +inf and -inf: their sum, reaching `multiply`
    # (which made y), is NaN though no rule made one.
    def f(x):
        y = x * 1.0
        return np.sum(y * np.inf) + np.sum(y * -np.inf)
    with pytest.raises(NaNError, match="already holds NaN") as info:
        grad(set_nan_check(Reverse), f, np.array([1.0]))
    assert info.value.incoming and info.value.argument is None
    assert (info.value.op, info.value.index) == ("multiply", 0)


def test_nan_check_off_by_default_and_silent_without_nan():
    assert np.isnan(grad(Reverse, min_of_reciprocal, 0.0))
    assert grad(set_strong_zero(set_nan_check(Reverse)), min_of_reciprocal, 0.0) == 0.0
    x = np.array([0.3, -1.2])
    f = lambda x: np.sum(np.tanh(x) ** 2)  # noqa: E731
    np.testing.assert_array_equal(grad(set_nan_check(Reverse), f, x), grad(Reverse, f, x))
    # A NaN in the primal that np.where discards is not a derivative problem.
    g = lambda x: np.sum(np.where(x > 0, np.log(x), 0.0))  # noqa: E731
    np.testing.assert_array_equal(grad(set_nan_check(Reverse), g, np.array([-1.0, 2.0])),
                                  [0.0, 0.5])


def test_nan_check_in_forward_mode():
    a, da = np.ones(2), np.zeros(2)
    with pytest.raises(NaNError, match=r"`multiply` \(op 0 of the forward pass.*rule made it"):
        autodiff(set_nan_check(Forward), lambda a: np.sin(a * np.inf), Duplicated(a, da))
    with pytest.raises(NaNError, match="input tangents already held NaN") as info:
        autodiff(set_nan_check(Forward), lambda a: np.sin(a) * 2.0,
                 Duplicated(a, np.array([np.nan, 0.0])))
    assert info.value.incoming and info.value.op == "sin" and info.value.total is None
    np.testing.assert_array_equal(
        autodiff(set_nan_check(ForwardWithPrimal), np.sin, Duplicated(a, np.ones(2)))[0],
        np.cos(a))


def test_nan_check_with_primal_and_second_order():
    x = np.array([0.5, 1.5])
    d, y = autodiff(set_nan_check(ReverseWithPrimal), lambda x: np.sum(x ** 3), Active,
                    Active(x))
    np.testing.assert_allclose(d[0], 3 * x ** 2, atol=1e-11)
    assert y == np.sum(x ** 3)
    check_grads(lambda x: grad(set_nan_check(Reverse), lambda v: np.sum(np.sin(v) * v), x), x,
                order=1)


def test_modifiers_apply_to_split_mode():
    results = {}
    for mode in (ReverseSplitNoPrimal, set_strong_zero(ReverseSplitNoPrimal)):
        fwd, rev = autodiff_thunk(mode, min_of_reciprocal, Active, Active)
        tape, _, _ = fwd(Active(0.0))
        results[mode.strong_zero] = rev(Active(0.0), 1.0, tape)[0][0]
    assert np.isnan(results[False]) and results[True] == 0.0
    fwd, rev = autodiff_thunk(set_nan_check(ReverseSplitNoPrimal), min_of_reciprocal, Active,
                              Active)
    tape, _, _ = fwd(Active(0.0))
    with pytest.raises(NaNError, match="`divide`"):
        rev(Active(0.0), 1.0, tape)


# -- runtime activity -----------------------------------------------------------------------------
def pick(cond, active_var, constant_var):
    """Enzyme.jl's activity-unstable example: returns an active or a constant array."""
    return active_var if cond else constant_var


@pytest.mark.parametrize("cond", [True, False])
def test_runtime_activity_is_accepted_and_changes_nothing(cond):
    x, dx, y = np.array([1.0]), np.array([2.0]), np.array([3.0])
    results = []
    for mode in (ForwardWithPrimal, set_runtime_activity(ForwardWithPrimal)):
        tangent, value = autodiff(mode, pick, Const(cond), Duplicated(x, dx), Const(y))
        results.append((np.asarray(tangent).copy(), value))
    for tangent, value in results:
        np.testing.assert_array_equal(tangent, dx if cond else 0.0)
        np.testing.assert_array_equal(value, x if cond else y)
    for mode in (Reverse, set_runtime_activity(Reverse)):
        gx = np.zeros(1)
        autodiff(mode, lambda c, a, b: np.sum(pick(c, a, b) ** 2), Active, Const(cond),
                 Duplicated(x, gx), Const(y))
        np.testing.assert_array_equal(gx, 2 * x if cond else 0.0)
    assert repr(set_runtime_activity(Reverse)) == "set_runtime_activity(Reverse)"
