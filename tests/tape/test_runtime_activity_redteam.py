"""Runtime activity (`set_runtime_activity`), probed further: split thunks whose forward and
reverse see different shadows, nested differentiation, batch widths, compiled forward mode,
MixedDuplicated, the same array in two argument slots, and views with other strides.

Each check compares with the same call where the value is `Const` (or a container leaf with a
zero shadow of its own), and with central differences in float64.
"""
import dataclasses

import numpy as np
import pytest
from numeric_checks import fd_gradient

import tape
from tape import (Active, BatchDuplicated, Const, Duplicated, ForwardWithPrimal,
                  MixedDuplicated, Reverse, ReverseSplitNoPrimal, ReverseSplitWithPrimal,
                  autodiff, autodiff_thunk, set_runtime_activity)
from tape.errors import ActivityError, HecateError

X = np.array([0.3, 1.2, -0.7])
C = np.array([1.0, 2.0, 3.0])
B = np.array([0.5, -1.0, 2.0])


def f(x, c):
    return np.sum(np.sin(x) * c)


# --------------------------------------------------------------------------------------------
# Findings


def test_split_reverse_never_adds_one_arguments_gradient_into_anothers_shadow():
    def g(a, b):
        return np.sum(np.sin(a) * b ** 2)
    fwd, rev = autodiff_thunk(set_runtime_activity(ReverseSplitWithPrimal), g, Active,
                              Duplicated, Duplicated)
    a, b, da, db = X.copy(), C.copy(), np.zeros(3), np.zeros(3)
    t, _, _ = fwd(Duplicated(a, a), Duplicated(b, db))        # a inactive, b active
    with pytest.raises(HecateError, match="argument 0 is active but was inactive in forward"):
        rev(Duplicated(a, da), Duplicated(b, b), 1.0, t)      # a active, b inactive
    np.testing.assert_array_equal(da, 0.0)   # (it used to receive df/db = 2 sin(a) b)
    np.testing.assert_array_equal(b, C)


def test_split_reverse_with_an_argument_forward_saw_as_inactive_is_a_clear_error():
    fwd, rev = autodiff_thunk(set_runtime_activity(ReverseSplitWithPrimal), f, Active, Active,
                              Duplicated)
    c, dc = C.copy(), np.zeros(3)
    t, _, _ = fwd(Active(X), Duplicated(c, c))
    with pytest.raises(HecateError, match="argument 1 is active but was inactive in forward"):
        rev(Active(X), Duplicated(c, dc), 1.0, t)
    np.testing.assert_array_equal(c, C)
    np.testing.assert_array_equal(dc, 0.0)


def test_nested_view_shadow_of_a_traced_value_is_inactive_and_leaves_the_input_alone():
    def inner(c, x):
        (gx, _), = autodiff(set_runtime_activity(Reverse), f, Active, Active(x),
                            Duplicated(c, c[...]))
        return np.sum(gx * gx)
    c = C.copy()
    (got, _), = autodiff(Reverse, inner, Active, Active(c), Const(X))
    np.testing.assert_allclose(got, 2 * np.cos(X) ** 2 * C, rtol=1e-12)
    np.testing.assert_array_equal(c, C)   # today c becomes C + sin(X)


def test_nested_own_shadow_without_the_modifier_is_refused_or_leaves_the_input_alone():
    def inner(c, x):
        (gx, _), = autodiff(Reverse, f, Active, Active(x), Duplicated(c, c))
        return np.sum(gx)
    c = C.copy()
    try:
        autodiff(Reverse, inner, Active, Active(c), Const(X))
    except ActivityError as e:
        assert "shares memory" in str(e)
        return
    np.testing.assert_array_equal(c, C)


def test_nested_container_leaf_that_is_its_own_shadow():
    def loss(p):
        return np.sum(np.tanh(p["w"] * p["b"]) ** 2)

    def outer(w, b):
        db = np.zeros_like(b)
        autodiff(set_runtime_activity(Reverse), loss, Active,
                 Duplicated({"w": w, "b": b}, {"w": w, "b": db}))
        return np.sum(db)

    def plain(w, b):
        db = np.zeros_like(b)
        autodiff(Reverse, loss, Active,
                 Duplicated({"w": w, "b": b}, {"w": np.zeros_like(w), "b": db}))
        return np.sum(db)
    (got, _), = autodiff(Reverse, outer, Active, Active(C.copy()), Const(B))
    (want, _), = autodiff(Reverse, plain, Active, Active(C.copy()), Const(B))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(got, fd_gradient(lambda w: plain(w, B), C),
                               rtol=1e-6, atol=1e-9)


_WIDTH_LOST = ("runtime_inactive makes a BatchDuplicated whose every shadow is the primal "
               "Const (tape/modifiers.py, `return Const(ann.val)`), so the call loses its "
               "batch width: the result's structure depends on which memory the shadows are")


def test_reverse_batch_width_is_kept_when_every_shadow_is_the_primal():
    c = C.copy()
    (gx, gc), = autodiff(set_runtime_activity(Reverse), f, Active, Active(X),
                         BatchDuplicated(c, (c, c)))
    assert isinstance(gx, tuple) and len(gx) == 2   # as with BatchDuplicated(c, (c, dc))
    for g in gx:
        np.testing.assert_allclose(g, np.cos(X) * C, rtol=1e-14)
    np.testing.assert_array_equal(c, C)


def test_forward_batch_width_is_kept_when_every_shadow_is_the_primal():
    c = C.copy()
    got, value = autodiff(set_runtime_activity(ForwardWithPrimal), f, Const(X),
                          BatchDuplicated(c, (c, c)))
    np.testing.assert_allclose(value, f(X, C), rtol=1e-15)
    assert isinstance(got, tuple) and len(got) == 2   # today: array(0.)
    np.testing.assert_array_equal(got, [0.0, 0.0])


def test_split_batch_width_is_kept_when_every_shadow_is_the_primal():
    fwd, rev = autodiff_thunk(set_runtime_activity(ReverseSplitWithPrimal), f, Active, Active,
                              BatchDuplicated)
    c = C.copy()
    t, _, _ = fwd(Active(X), BatchDuplicated(c, (c, c)))
    (gx, _), = rev(Active(X), BatchDuplicated(c, (c, c)), (1.0, 2.0), t)
    np.testing.assert_allclose(gx[0], np.cos(X) * C, rtol=1e-14)
    np.testing.assert_allclose(gx[1], 2 * np.cos(X) * C, rtol=1e-14)


# --------------------------------------------------------------------------------------------
# Coverage


def test_forward_writes_into_the_inactive_buffer_behave_as_for_const():
    def g(x, c):
        c[:] = 5.0
        c[1] = 7.0
        return np.sum(np.sin(x) * c ** 2)
    c1, c2 = C.copy(), C.copy()
    got, v1 = autodiff(set_runtime_activity(ForwardWithPrimal), g,
                       Duplicated(X, np.ones(3)), Duplicated(c1, c1))
    want, v2 = autodiff(ForwardWithPrimal, g, Duplicated(X, np.ones(3)), Const(c2))
    np.testing.assert_allclose(got, want, rtol=1e-14)
    np.testing.assert_allclose(v1, v2, rtol=1e-15)
    np.testing.assert_array_equal(c1, [5.0, 7.0, 5.0])
    fd = fd_gradient(lambda x: g(x, C.copy()), X) @ np.ones(3)
    np.testing.assert_allclose(got, fd, rtol=1e-7)


def test_the_same_array_inactive_in_one_slot_and_active_in_another():
    def g(a, b):
        return np.sum(a * b * np.sin(a))
    want = C * np.sin(C) + C * C * np.cos(C)   # d/da with b held at c
    c, da = C.copy(), np.zeros(3)
    autodiff(set_runtime_activity(Reverse), g, Active, Duplicated(c, da), Duplicated(c, c))
    np.testing.assert_allclose(da, want, rtol=1e-13)
    np.testing.assert_array_equal(c, C)
    np.testing.assert_allclose(da, fd_gradient(lambda a: g(a, C), C), rtol=1e-7)
    compiled = tape.compile(set_runtime_activity(Reverse), g, Active, Duplicated, Duplicated)
    for k in (1.0, 2.0, 1.0):
        c[:] = k * C
        da = np.zeros(3)
        compiled(Duplicated(c, da), Duplicated(c, c))
        np.testing.assert_allclose(da, c * np.sin(c) + c * c * np.cos(c), rtol=1e-13)
        np.testing.assert_array_equal(c, k * C)


def test_compiled_forward_decides_at_every_call_with_changed_contents():
    g = tape.compile(set_runtime_activity(ForwardWithPrimal), f, Duplicated, Duplicated,
                     Duplicated)
    c = C.copy()
    for k in (1.0, 2.0, 3.0):
        c[:] = k * C
        d, v = g(Duplicated(X, np.ones(3)), Duplicated(c, c))
        np.testing.assert_allclose(d, np.sum(np.cos(X) * c), rtol=1e-14)
        np.testing.assert_allclose(v, f(X, c), rtol=1e-15)
        d, _ = g(Duplicated(X, np.ones(3)), Duplicated(c, np.ones(3)))
        np.testing.assert_allclose(d, np.sum(np.cos(X) * c) + np.sum(np.sin(X)), rtol=1e-14)
    np.testing.assert_array_equal(c, 3 * C)
    assert g.stats.traces == 2 and g.stats.hits == 4 and g.stats.eager_calls == 0


def test_compiled_container_with_a_leaf_that_is_its_own_shadow():
    def loss(x, p):
        return np.sum(np.tanh(p["w"] * p["b"] * x) ** 2)
    g = tape.compile(set_runtime_activity(Reverse), loss, Active, Const, Duplicated)
    w = C.copy()
    for k in (1.0, 2.0):
        w[:] = k * C
        db, dw = np.zeros(3), np.zeros(3)
        g(X, Duplicated({"w": w, "b": B}, {"w": w, "b": db}))
        np.testing.assert_array_equal(w, k * C)
        want = fd_gradient(lambda b: loss(X, {"w": k * C, "b": b}), B)
        np.testing.assert_allclose(db, want, rtol=1e-6, atol=1e-8)
        g(X, Duplicated({"w": w, "b": B}, {"w": dw, "b": np.zeros(3)}))
        np.testing.assert_allclose(
            dw, fd_gradient(lambda ww: loss(X, {"w": ww, "b": B}), k * C),
            rtol=1e-6, atol=1e-8)
    assert g.stats.traces == 1   # the throwaway shadow keeps the signature


def test_reverse_batch_drops_only_the_seeds_whose_shadow_is_the_primal():
    c, dc = C.copy(), np.zeros(3)
    dxs = (np.zeros(3), np.zeros(3))
    autodiff(set_runtime_activity(Reverse), f, Active, BatchDuplicated(X.copy(), dxs),
             BatchDuplicated(c, (c, dc)))
    for dx in dxs:
        np.testing.assert_allclose(dx, np.cos(X) * C, rtol=1e-14)
    np.testing.assert_allclose(dc, np.sin(X), rtol=1e-14)
    np.testing.assert_array_equal(c, C)


def test_mixed_duplicated_array_leaf_that_is_its_own_shadow():
    def h(p):
        return p["s"] * np.sum(np.sin(p["a"]))
    a = np.array([0.1, 0.2])
    (got,), = autodiff(set_runtime_activity(Reverse), h, Active,
                       MixedDuplicated({"s": 2.0, "a": a}, {"s": 2.0, "a": a}))
    assert got["a"] is None
    assert got["s"] == pytest.approx(np.sum(np.sin([0.1, 0.2])), rel=1e-14)
    np.testing.assert_array_equal(a, [0.1, 0.2])


def test_dataclass_leaf_that_is_its_own_shadow():
    @dataclasses.dataclass
    class P:
        w: np.ndarray
        b: np.ndarray

    def loss(p):
        return np.sum(np.tanh(p.w * p.b) ** 2)
    w, db = C.copy(), np.zeros(3)
    autodiff(set_runtime_activity(Reverse), loss, Active, Duplicated(P(w, B), P(w, db)))
    np.testing.assert_array_equal(w, C)
    np.testing.assert_allclose(db, fd_gradient(lambda b: loss(P(C, b)), B),
                               rtol=1e-6, atol=1e-8)


def test_a_view_with_other_strides_over_the_same_memory_is_not_the_primal():
    m = np.array([[1.0, 2.0], [3.0, 4.0]])   # m.T starts at the same address
    a = np.array([[0.1, 0.2], [0.3, 0.4]])

    def g(a, m):
        return np.sum(np.sin(a) * m)
    with pytest.raises(ActivityError, match="shares memory"):
        autodiff(set_runtime_activity(Reverse), g, Active, Active(a), Duplicated(m, m.T))
    with pytest.raises(ActivityError, match="shares memory"):
        autodiff(set_runtime_activity(Reverse), lambda p: g(a, p["m"]) * np.sum(p["b"]),
                 Active, Duplicated({"m": m, "b": np.ones(2)}, {"m": m.T, "b": np.zeros(2)}))
    np.testing.assert_array_equal(m, [[1.0, 2.0], [3.0, 4.0]])


@pytest.mark.parametrize("mode", [ReverseSplitWithPrimal, ReverseSplitNoPrimal])
def test_split_returning_a_view_of_the_inactive_buffer_is_as_for_const(mode):
    def g(x, c):
        return c[::2] * 1.0 + 0.0 * x[:2]

    def run(ann):
        fwd, rev = autodiff_thunk(set_runtime_activity(mode), g, Duplicated, Duplicated,
                                  type(ann))
        x, dx = X.copy(), np.zeros(3)
        t, primal, dret = fwd(Duplicated(x, dx), ann)
        dret[...] = 1.0
        rev(Duplicated(x, dx), ann, t)
        return primal, dx
    c1, c2 = C.copy(), C.copy()
    p1, dx1 = run(Duplicated(c1, c1))
    p2, dx2 = run(Const(c2))
    if mode is ReverseSplitWithPrimal:
        np.testing.assert_array_equal(p1, [1.0, 3.0])
        np.testing.assert_array_equal(p1, p2)
    np.testing.assert_array_equal(dx1, dx2)
    np.testing.assert_array_equal(c1, C)


def test_forward_thunks_drop_the_direction_of_an_inactive_value():
    thunk = autodiff_thunk(set_runtime_activity(ForwardWithPrimal), f, Duplicated, Duplicated,
                           Duplicated)
    c = C.copy()
    d, v = thunk(Duplicated(X.copy(), np.ones(3)), Duplicated(c, c))
    np.testing.assert_allclose(d, np.sum(np.cos(X) * C), rtol=1e-14)
    np.testing.assert_allclose(v, f(X, C), rtol=1e-15)
    d, _ = thunk(Duplicated(X.copy(), np.ones(3)), Duplicated(c, np.ones(3)))
    np.testing.assert_allclose(d, np.sum(np.cos(X) * C) + np.sum(np.sin(X)), rtol=1e-14)
    np.testing.assert_array_equal(c, C)
