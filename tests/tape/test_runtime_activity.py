"""Runtime activity (`set_runtime_activity`): a value whose shadow is its primal is inactive.

Enzyme.jl decides at run time that a `Duplicated(c, c)` value, whose shadow is the primal's own
memory, is constant. Each test compares with the same call where the value is `Const`, and
with central differences in float64.
"""
import numpy as np
import pytest
from numeric_checks import fd_gradient

import tape
from tape import (Active, BatchDuplicated, Const, Duplicated, Forward, ForwardWithPrimal,
                  Reverse, ReverseSplitWithPrimal, autodiff, autodiff_thunk,
                  set_runtime_activity)
from tape.errors import ActivityError

X = np.array([0.3, 1.2, -0.7])
C = np.array([1.0, 2.0, 3.0])


def f(x, c):
    return np.sum(np.sin(x) * c)


def test_a_shadow_that_is_the_primal_makes_the_argument_const():
    c = C.copy()
    (gx, gc), = autodiff(set_runtime_activity(Reverse), f, Active, Active(X), Duplicated(c, c))
    np.testing.assert_allclose(gx, fd_gradient(lambda x: f(x, C), X), rtol=1e-8)
    (want, _), = autodiff(Reverse, f, Active, Active(X), Const(C))
    np.testing.assert_allclose(gx, want, rtol=1e-14)
    assert gc is None
    np.testing.assert_array_equal(c, C)


def test_without_the_modifier_the_same_call_is_refused():
    c = C.copy()
    with pytest.raises(ActivityError, match="shares memory with its primal"):
        autodiff(Reverse, f, Active, Active(X), Duplicated(c, c))
    np.testing.assert_array_equal(c, C)


def test_a_view_over_the_same_memory_counts_as_the_primal():
    c = C.copy()
    autodiff(set_runtime_activity(Reverse), f, Active, Active(X), Duplicated(c, c[...]))
    np.testing.assert_array_equal(c, C)
    # A shadow that only overlaps the primal is a mistake, not an inactive value.
    x2 = np.arange(6.0)
    with pytest.raises(ActivityError, match="shares memory"):
        autodiff(set_runtime_activity(Reverse), lambda a: np.sum(a * a), Active,
                 Duplicated(x2[:3], x2[1:4]))


def test_a_container_leaf_whose_shadow_is_itself_is_inactive_and_the_others_are_not():
    w, b = np.array([0.5, -1.5]), np.array([0.25, 2.0])
    db = np.zeros(2)

    def loss(p):
        return np.sum(np.tanh(p["w"] * p["b"]) ** 2)
    autodiff(set_runtime_activity(Reverse), loss, Active,
             Duplicated({"w": w, "b": b}, {"w": w, "b": db}))
    np.testing.assert_array_equal(w, [0.5, -1.5])   # nothing was added into w
    want = fd_gradient(lambda bb: loss({"w": w, "b": bb}), b)
    np.testing.assert_allclose(db, want, rtol=1e-8)


def test_writes_into_the_inactive_buffer_behave_as_for_const():
    def g(x, c):
        c[0] = 2.0 * c[1]
        return np.sum(np.cos(x) * c)
    c1, c2 = C.copy(), C.copy()
    (got, _), = autodiff(set_runtime_activity(Reverse), g, Active, Active(X), Duplicated(c1, c1))
    (want, _), = autodiff(Reverse, g, Active, Active(X), Const(c2))
    np.testing.assert_allclose(got, want, rtol=1e-14)
    np.testing.assert_array_equal(c1, c2)   # the primal write happened in both
    fd = fd_gradient(lambda x: g(x, C.copy()), X)
    np.testing.assert_allclose(got, fd, rtol=1e-7)


def test_an_active_value_written_into_the_inactive_buffer_is_refused_as_for_const():
    def g(x, c):
        c[0] = 2.0 * x[1]   # its derivative would be lost, as for a Const c
        return np.sum(np.cos(x) * c)
    c = C.copy()
    with pytest.raises(tape.errors.ConstWriteError, match="set_runtime_activity"):
        autodiff(set_runtime_activity(Reverse), g, Active, Active(X), Duplicated(c, c))


def test_split_mode_treats_it_the_same_way():
    fwd, rev = autodiff_thunk(set_runtime_activity(ReverseSplitWithPrimal), f, Active, Active,
                              Duplicated)
    x, c = X.copy(), C.copy()
    t, primal, _ = fwd(Active(x), Duplicated(c, c))
    np.testing.assert_allclose(primal, f(X, C), rtol=1e-15)
    (gx, gc), = rev(Active(x), Duplicated(c, c), 1.0, t)
    np.testing.assert_allclose(gx, np.cos(X) * C, rtol=1e-14)
    assert gc is None


def test_forward_mode_drops_the_direction_of_an_inactive_value():
    c = C.copy()
    got, value = autodiff(set_runtime_activity(ForwardWithPrimal), f,
                          Duplicated(X.copy(), np.ones(3)), Duplicated(c, c))
    np.testing.assert_allclose(value, f(X, C), rtol=1e-15)
    np.testing.assert_allclose(got, np.sum(np.cos(X) * C), rtol=1e-14)
    # Without the modifier, c is its own tangent: the direction (1, 1, 1; c).
    plain, = autodiff(Forward, f, Duplicated(X.copy(), np.ones(3)), Duplicated(c, c))
    np.testing.assert_allclose(plain, np.sum(np.cos(X) * C) + np.sum(np.sin(X) * C), rtol=1e-14)


def test_batched_forward_drops_only_the_directions_that_are_the_primal():
    c, dc = C.copy(), np.array([0.5, 0.0, -1.0])
    got, = autodiff(set_runtime_activity(Forward), f,
                    BatchDuplicated(X.copy(), (np.ones(3), np.zeros(3))),
                    BatchDuplicated(c, (c, dc)))
    np.testing.assert_allclose(got[0], np.sum(np.cos(X) * C), rtol=1e-14)
    np.testing.assert_allclose(got[1], np.sum(np.sin(X) * dc), rtol=1e-14)


def test_a_number_is_a_value_not_memory():
    v = 3.0
    got, = autodiff(set_runtime_activity(Forward), lambda a: a * a, Duplicated(v, v))
    assert got == pytest.approx(2 * 3.0 * 3.0)


def test_compiled_calls_decide_at_every_call():
    g = tape.compile(set_runtime_activity(Reverse), f, Active, Active, Duplicated)
    c, dc = C.copy(), np.zeros(3)
    for _ in range(3):   # trace, then replays
        (gx, gc), = g(Active(X), Duplicated(c, c))
        np.testing.assert_allclose(gx, np.cos(X) * C, rtol=1e-14)
        np.testing.assert_array_equal(c, C)
        g(Active(X), Duplicated(c, dc))
    np.testing.assert_allclose(dc, 3 * np.sin(X), rtol=1e-14)
    np.testing.assert_array_equal(c, C)
