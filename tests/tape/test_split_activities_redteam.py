"""Split reverse mode (`autodiff_thunk`) with the less common activities, against Enzyme.jl's
semantics: NoNeed and batch NoNeed arguments, MixedDuplicated, Duplicated returns, rules and
checkpoints inside a kept tape, functions that overwrite the arguments they read, and the
runtime-activity modifier. Values are checked against plain NumPy and float64 central
differences; the strict xfails are the places that fall short today.
"""
import numpy as np
import pytest
from numeric_checks import fd_gradient

from tape import (Active, BatchDuplicatedNoNeed, Duplicated, DuplicatedNoNeed, MixedDuplicated,
                  Reverse, ReverseHolomorphic, ReverseSplitNoPrimal, ReverseSplitWithPrimal, autodiff, autodiff_thunk,
                  checkpoint, custom_rule, easy_rule, set_runtime_activity)
from tape.errors import ActivityError

X0 = np.array([0.3, 1.2, -0.7])


def _fd_grad(f, x):
    """Central differences of a scalar f at a float64 copy of x (tests/numeric_checks.py)."""
    return fd_gradient(f, np.array(x, dtype=np.float64))


# --------------------------------------------------------------------------------------------
# An argument read through a view, then overwritten by f: forward writes its final values into
# the caller's array before reverse runs. Eager mode gets these right; a kept tape must too.


_VIEW_READS = {
    "slice": lambda x: np.sum(np.sin(x[1:])),
    "step": lambda x: np.sum(np.sin(x[::2])),
    "transpose": lambda x: np.sum(np.sin(x.T)),
    "reshape": lambda x: np.sum(x.reshape(3, 1) * x.reshape(3, 1)),
}


@pytest.mark.parametrize("read", list(_VIEW_READS))
def test_split_argument_read_through_a_view_then_overwritten_by_f(read):
    g = _VIEW_READS[read]

    def f(x):
        y = g(x)
        x[:] = 0.0
        return y
    x, dx = X0.copy(), np.zeros(3)
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, f, Active, Duplicated)
    t, y, _ = fwd(Duplicated(x, dx))
    assert y == pytest.approx(g(X0.copy()), rel=1e-14)
    np.testing.assert_array_equal(x, 0.0)
    rev(Duplicated(x, dx), 1.0, t)
    # The seed of x's final value (dx = 0) contributes nothing; dx gets d y / d x0.
    np.testing.assert_allclose(dx, _fd_grad(g, X0), rtol=1e-7, atol=1e-9)


def test_split_custom_rule_that_saves_a_view_of_an_argument_f_overwrites():
    sq = custom_rule(lambda x: x ** 2,
                     augmented_primal=lambda cfg, x: (x ** 2, (x[:],)),
                     reverse=lambda cfg, saved, g: (2 * saved[0] * g,))

    def f(x):
        y = np.sum(sq(x))
        x[:] = 0.0
        return y
    x, dx = X0.copy(), np.zeros(3)
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, f, Active, Duplicated)
    t, _, _ = fwd(Duplicated(x, dx))
    rev(Duplicated(x, dx), 1.0, t)
    np.testing.assert_allclose(dx, 2 * X0, rtol=1e-14)


def test_split_mixed_duplicated_leaf_read_through_a_view_then_overwritten():
    def h(d):
        s = d["a"] * np.sum(np.sin(d["w"][1:]))
        d["w"][:] = 0.0
        return s
    d, dd = {"a": 2.0, "w": X0.copy()}, {"a": 0.0, "w": np.zeros(3)}
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, h, Active, MixedDuplicated)
    t, _, _ = fwd(MixedDuplicated(d, dd))
    (ga,), = rev(MixedDuplicated(d, dd), 1.0, t)
    assert ga["a"] == pytest.approx(np.sum(np.sin(X0[1:])), rel=1e-14)
    want = np.zeros(3)
    want[1:] = 2.0 * np.cos(X0[1:])
    np.testing.assert_allclose(dd["w"], want, rtol=1e-14)


# --------------------------------------------------------------------------------------------
# Duplicated return of an immutable (a float) result


@pytest.mark.parametrize("result", ["float", "float leaf of a tuple"])
def test_split_duplicated_return_of_a_float_is_refused_unless_seeded_explicitly(result):
    # The return shadow is the seed, written in place; a float there cannot be, and used as
    # it is it would seed zero: reverse refuses it and names Active, or takes dret explicitly.
    f = ((lambda x: np.sum(x ** 2)) if result == "float"
         else (lambda x: (x * 0.0, np.sum(x ** 2))))
    x, dx = X0.copy(), np.zeros(3)
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, f, Duplicated, Duplicated)
    t, _, shadow = fwd(Duplicated(x, dx))
    with pytest.raises(ActivityError, match="Active"):
        rev(Duplicated(x, dx), t)
    seed = 1.0 if result == "float" else (np.zeros(3), 1.0)
    rev(Duplicated(x, dx), seed, t)
    np.testing.assert_allclose(dx, 2 * X0, rtol=1e-14)


def test_split_duplicated_return_dict_float_leaf_is_seeded_by_assignment():
    # A mutable container's float leaf can be set in the returned shadow: it is the seed.
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, lambda x: {"a": x * 2, "b": np.sum(x)},
                              Duplicated, Duplicated)
    x, dx = X0.copy(), np.zeros(3)
    t, y, s = fwd(Duplicated(x, dx))
    np.testing.assert_array_equal(y["a"], X0 * 2)
    s["a"][:] = [1.0, 0.0, 2.0]
    s["b"] = 5.0
    rev(Duplicated(x, dx), t)
    np.testing.assert_allclose(dx, [7.0, 5.0, 9.0], rtol=1e-14)


# --------------------------------------------------------------------------------------------
# Seeds


def test_split_seed_of_a_non_numeric_type_names_the_type():
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, np.sin, Active, Active)
    x = X0.copy()
    t, _, _ = fwd(Active(x))
    with pytest.raises(ActivityError, match=r"\bstr\b"):
        rev(Active(x), "1.0", t)


# --------------------------------------------------------------------------------------------
# NoNeed, batch NoNeed and MixedDuplicated arguments on a kept tape


def test_split_no_need_arguments_accumulate_over_reversals_with_other_seeds():
    def f(a, x):
        return a * np.sum(np.sin(x) * x)
    want = _fd_grad(lambda v: f(2.0, v), X0)
    fwd, rev = autodiff_thunk(ReverseSplitNoPrimal, f, Active, Active, DuplicatedNoNeed)
    x, dx = X0.copy(), np.zeros(3)
    t, y, s = fwd(Active(2.0), DuplicatedNoNeed(x, dx))
    assert y is None and s is None
    (ga, _), = rev(Active(2.0), DuplicatedNoNeed(x, dx), 1.0, t)
    (gb, _), = rev(Active(2.0), DuplicatedNoNeed(x, dx), -3.0, t)
    np.testing.assert_allclose(dx, -2.0 * want, rtol=1e-7)
    assert ga == pytest.approx(f(1.0, X0), rel=1e-14)
    assert gb == pytest.approx(-3.0 * f(1.0, X0), rel=1e-14)

    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, f, Active, Active, BatchDuplicatedNoNeed)
    d1, d2 = np.zeros(3), np.zeros(3)
    t, y, _ = fwd(Active(2.0), BatchDuplicatedNoNeed(x, (d1, d2)))
    assert y == pytest.approx(f(2.0, X0), rel=1e-14)
    (ga, _), = rev(Active(2.0), BatchDuplicatedNoNeed(x, (d1, d2)), (1.0, 3.0), t)
    np.testing.assert_allclose(d1, want, rtol=1e-7)
    np.testing.assert_allclose(d2, 3.0 * want, rtol=1e-7)
    assert ga == pytest.approx((f(1.0, X0), 3.0 * f(1.0, X0)), rel=1e-14)


def test_split_mixed_duplicated_returns_float_derivatives_and_accumulates_arrays():
    def h(d):
        return d["a"] * np.sum(d["w"] ** 2) + d["a"] ** 2
    d, dd = {"a": 1.5, "w": np.array([1.0, 2.0])}, {"a": 0.0, "w": np.zeros(2)}
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, h, Active, MixedDuplicated)
    t, y, _ = fwd(MixedDuplicated(d, dd))
    assert y == pytest.approx(9.75, rel=1e-14)
    (g1,), = rev(MixedDuplicated(d, dd), 1.0, t)
    (g2,), = rev(MixedDuplicated(d, dd), 2.0, t)
    assert g1["w"] is None and g2["w"] is None
    assert g1["a"] == pytest.approx(5.0 + 3.0, rel=1e-14)
    assert g2["a"] == pytest.approx(2 * 8.0, rel=1e-14)
    assert dd["a"] == 0.0          # the float leaf's derivative is returned, not accumulated
    np.testing.assert_allclose(dd["w"], 3 * 2 * 1.5 * d["w"], rtol=1e-14)


# --------------------------------------------------------------------------------------------
# Rules and checkpoints inside a kept tape, in both precisions


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_split_tape_with_a_checkpointed_custom_and_easy_rule_reversed_twice(dtype):
    myexp = custom_rule(lambda v: np.exp(v),
                        augmented_primal=lambda cfg, v: (np.exp(v), (np.exp(v),)),
                        reverse=lambda cfg, saved, g: (g * saved[0],))
    cube = easy_rule(lambda v: v ** 3, partials=lambda v: 3 * v ** 2)
    seg = checkpoint(lambda v: myexp(v) * cube(v))

    def f(v):
        return np.sum(np.sin(seg(v)))
    x, dx = X0.astype(dtype), np.zeros(3, dtype)
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, f, Active, Duplicated)
    t, y, _ = fwd(Duplicated(x, dx))
    assert y == pytest.approx(f(X0), rel=1e-5 if dtype == np.float32 else 1e-14)
    rev(Duplicated(x, dx), 1.0, t)
    rev(Duplicated(x, dx), 2.0, t)
    assert dx.dtype == dtype
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(dx, 3.0 * _fd_grad(f, X0), **tol)


def test_holomorphic_custom_and_easy_rules_on_complex64_duplicated():
    myexp = custom_rule(lambda v: np.exp(v),
                        augmented_primal=lambda cfg, v: (np.exp(v), (np.exp(v),)),
                        reverse=lambda cfg, saved, g: (g * saved[0],))
    sq = easy_rule(lambda v: v * v, partials=lambda v: 2 * v)

    def f(z):
        return np.sum(myexp(z) * sq(z))
    z = np.array([0.3 + 0.4j, -1.1 + 0.2j])
    # f is holomorphic: f'(z) is the derivative along the real axis.
    h = 1e-6
    want = np.array([(f(z + h * e) - f(z - h * e)) / (2 * h) for e in np.eye(2)])
    z64, dz = z.astype(np.complex64), np.zeros(2, np.complex64)
    autodiff(ReverseHolomorphic, f, Active, Duplicated(z64, dz))
    assert dz.dtype == np.complex64
    np.testing.assert_allclose(dz, want, rtol=1e-5)


# --------------------------------------------------------------------------------------------
# Runtime activity


@pytest.mark.parametrize("split", [False, True])
def test_runtime_activity_treats_a_shadow_equal_to_its_primal_as_const(split):
    def f(x, c):
        return np.sum(np.sin(x) * c)
    c = np.array([1.0, 2.0, 3.0])
    if split:
        fwd, rev = autodiff_thunk(set_runtime_activity(ReverseSplitWithPrimal), f, Active,
                                  Active, Duplicated)
        x = X0.copy()
        t, _, _ = fwd(Active(x), Duplicated(c, c))
        (gx, gc), = rev(Active(x), Duplicated(c, c), 1.0, t)
    else:
        (gx, gc), = autodiff(set_runtime_activity(Reverse), f, Active, Active(X0.copy()),
                             Duplicated(c, c))
    np.testing.assert_allclose(gx, np.cos(X0) * [1.0, 2.0, 3.0], rtol=1e-14)
    assert gc is None
    np.testing.assert_array_equal(c, [1.0, 2.0, 3.0])
