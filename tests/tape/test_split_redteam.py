"""Red team of split mode (`autodiff_thunk(ReverseSplit*, ...)`) and the forward thunk, on
recurrent steps, layers with buffers, pytrees and threads.

The reference is eager `autodiff(Reverse, ...)` on the same values (or NumPy's closed form);
a tape reversed after the point it was recorded at changed must raise `TapeMutatedError`."""
from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import pytest

from tape import (Active, ActivityError, BatchDuplicated, Const, Duplicated, Forward,
                  ForwardWithPrimal, Reverse, ReverseSplitNoPrimal, ReverseSplitWithPrimal,
                  TapeMutatedError, autodiff, autodiff_thunk, custom_rule, make_zero)

RNG = np.random.default_rng(7)
W = RNG.standard_normal((4, 4)) * 0.5
U = RNG.standard_normal((4, 3))
XS = RNG.standard_normal((3, 3))
H0 = RNG.standard_normal(4)


def close(a, b, rtol=1e-13, atol=1e-15):
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


# --------------------------------------------------------------------------------------------
# Silent wrong values: a pytree's number leaves changed between the passes


def _dict_loss(p):
    return np.sum(p["w"] ** 2) * p["b"]


def test_an_active_dict_whose_float_leaf_changed_after_forward_raises():
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, _dict_loss, Active, Active)
    p = {"w": np.array([1.0, 2.0]), "b": 1.5}
    tp, _, _ = fwd(Active(p))
    p["b"] = 4.0       # the caller moves the point; the tape holds d/dw at b = 1.5
    with pytest.raises(TapeMutatedError):
        rev(Active(p), 1.0, tp)


@dataclass
class _Dense:
    w: np.ndarray
    scale: float


def _dense_loss(m, x):
    return np.sum(np.tanh(m.w @ x) * m.scale)


def test_a_duplicated_dataclass_whose_float_field_changed_after_forward_raises():
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, _dense_loss, Active, Duplicated, Const)
    m = _Dense(np.array([[1.0, 2.0], [0.5, -1.0]]), 2.0)
    dm, x = make_zero(m), np.array([0.3, 0.4])
    tp, _, _ = fwd(Duplicated(m, dm), Const(x))
    m.scale = 5.0      # dm.w would come out 2.5 times too small, with no error
    with pytest.raises(TapeMutatedError):
        rev(Duplicated(m, dm), Const(x), 1.0, tp)


def test_a_const_list_of_numbers_written_in_place_after_forward_raises():
    # A Const array written in place raises; a Const list of hyperparameters does not.
    f = lambda x, c: np.sum(np.sin(x) * np.array(c))      # noqa: E731
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, f, Active, Active, Const)
    x, c = np.array([0.1, 0.2]), [1.0, 2.0]
    tp, _, _ = fwd(Active(x), Const(c))
    c[0] = 5.0
    with pytest.raises((TapeMutatedError, ActivityError)):
        rev(Active(x), Const(c), 1.0, tp)


def test_a_const_array_written_in_place_after_forward_raises():
    f = lambda x, c: np.sum(np.sin(x) * c)                 # noqa: E731
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, f, Active, Active, Const)
    x, c = np.array([0.1, 0.2]), np.array([1.0, 2.0])
    tp, _, _ = fwd(Active(x), Const(c))
    c[0] = 5.0
    with pytest.raises(TapeMutatedError):
        rev(Active(x), Const(c), 1.0, tp)


def test_a_dict_array_leaf_replaced_by_a_number_after_forward_raises():
    # The arrays found now are fewer than at forward: the fingerprints are zipped, so the
    # last one is never compared.
    f = lambda p: np.sum(p["w"] ** 2) * p["b"] * p["a"]     # noqa: E731
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, f, Active, Active)
    p = {"a": np.array(1.5), "w": np.array([1.0, 2.0]), "b": np.array(2.0)}
    tp, _, _ = fwd(Active(p))
    p["b"] = 4.0
    with pytest.raises(TapeMutatedError):
        rev(Active(p), 1.0, tp)


# --------------------------------------------------------------------------------------------
# Silent wrong values: one tape reversed from two threads at once


def test_one_tape_reversed_from_two_threads_adds_each_gradient_into_its_own_shadow():
    barrier = threading.Barrier(2, timeout=0.5)

    def reverse_rule(cfg, saved, g):
        try:            # both sweeps are under way here (or, reversals serialised, neither)
            barrier.wait()
        except threading.BrokenBarrierError:
            pass
        return (2.0 * g,)
    double = custom_rule(lambda x: 2.0 * x, augmented_primal=lambda cfg, x: (2.0 * x, None),
                         reverse=reverse_rule)
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, lambda x: np.sum(np.sin(double(x))),
                              Active, Duplicated)
    x = np.array([0.1, 0.2, 0.3])
    tp, _, _ = fwd(Duplicated(x, np.zeros(3)))
    shadows, errors = (np.zeros(3), np.zeros(3)), []

    def run(dx, seed):
        try:
            rev(Duplicated(x, dx), seed, tp)
        except Exception as e:      # noqa: BLE001 (reported below)
            errors.append(e)
    threads = [threading.Thread(target=run, args=(shadows[0], 1.0)),
               threading.Thread(target=run, args=(shadows[1], 3.0))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not errors
    close(shadows[0], 2 * np.cos(2 * x))
    close(shadows[1], 6 * np.cos(2 * x))


def test_two_tapes_reversed_in_two_threads_at_once():
    barrier = threading.Barrier(2, timeout=5)

    def reverse_rule(cfg, saved, g):
        barrier.wait()
        return (2.0 * g,)
    double = custom_rule(lambda x: 2.0 * x, augmented_primal=lambda cfg, x: (2.0 * x, None),
                         reverse=reverse_rule)
    f = lambda x: np.sum(np.sin(double(x)))                 # noqa: E731
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, f, Active, Duplicated)
    xs = (np.array([0.1, 0.2, 0.3]), np.array([0.5, 0.6, 0.7]))
    tapes = [fwd(Duplicated(x, np.zeros(3)))[0] for x in xs]
    shadows = (np.zeros(3), np.zeros(3))
    threads = [threading.Thread(target=rev, args=(Duplicated(x, dx), s, tp))
               for x, dx, s, tp in zip(xs, shadows, (1.0, 3.0), tapes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    close(shadows[0], 2 * np.cos(2 * xs[0]))
    close(shadows[1], 6 * np.cos(2 * xs[1]))


# --------------------------------------------------------------------------------------------
# Crashes on valid input, unclear errors


def test_forward_thunk_takes_an_unannotated_value_for_a_const_argument():
    # autodiff and the split thunk take a plain value as Const; the forward thunk refuses it.
    f = lambda x, c: np.sin(x) * c                          # noqa: E731
    x = np.array([0.1, 0.2])
    jvp = autodiff_thunk(Forward, f, Duplicated, Duplicated, Const)
    (dy,) = jvp(Duplicated(x, np.ones(2)), 3.0)
    close(dy, 3.0 * np.cos(x))


def test_a_none_seed_for_one_result_is_accepted_or_named_in_the_error():
    # Seeding one result of several: the error says the seed is a tuple "not the structure of
    # the function's result", which is a tuple too.
    f = lambda x: (np.sum(x ** 2), np.sin(x))                # noqa: E731
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, f, Active, Active)
    x = np.array([0.3, 0.6])
    tp, _, _ = fwd(Active(x))
    try:
        (g,), = rev(Active(x), (1.0, None), tp)
    except ActivityError as e:
        assert "None" in str(e) or "leaf 1" in str(e), str(e)
    else:
        close(g, 2 * x)


# --------------------------------------------------------------------------------------------
# Passing checks: realistic programs against eager autodiff


def _step(h, x):
    return np.tanh(W @ h + U @ x)


def test_rnn_step_tapes_chained_backwards_give_the_unrolled_gradient():
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, _step, Active, Active, Const)
    kept, h = [], H0
    for t in range(3):
        tp, h_next, _ = fwd(Active(h), Const(XS[t]))
        kept.append((tp, h, XS[t]))
        h = h_next
    g = np.ones(4)
    for tp, h, x in reversed(kept):
        (g, dx), = rev(Active(h), Const(x), g, tp)
        assert dx is None

    def unrolled(h0):
        for t in range(3):
            h0 = _step(h0, XS[t])
        return np.sum(h0)
    (expected,), = autodiff(Reverse, unrolled, Active, Active(H0))
    close(g, expected)


def test_two_tapes_sharing_a_shadow_reversed_in_the_opposite_order():
    f = lambda w, x: np.sum(np.tanh(w @ x) ** 2)             # noqa: E731
    fwd, rev = autodiff_thunk(ReverseSplitNoPrimal, f, Active, Duplicated, Const)
    w, dw = W[:, :3].copy(), np.zeros((4, 3))
    first, _, _ = fwd(Duplicated(w, dw), Const(XS[0]))
    second, _, _ = fwd(Duplicated(w, dw), Const(XS[1]))
    rev(Duplicated(w, dw), Const(XS[1]), 2.0, second)
    rev(Duplicated(w, dw), Const(XS[0]), 1.0, first)
    expected = np.zeros_like(w)
    autodiff(Reverse, f, Active, Duplicated(w, expected), Const(XS[0]))
    autodiff(Reverse, lambda w, x: 2.0 * f(w, x), Active, Duplicated(w, expected), Const(XS[1]))
    close(dw, expected)
    with pytest.raises(ActivityError, match="Const argument 1 holds other values"):
        rev(Duplicated(w, dw), Const(XS[1]), 1.0, first)


def test_layer_writing_into_a_duplicated_output_buffer_reversed_twice():
    def layer_(out, x):
        np.matmul(W[:, :3], x, out=out)
        np.tanh(out, out=out)
        out *= 2.0
    fwd, rev = autodiff_thunk(ReverseSplitNoPrimal, layer_, Const, Duplicated, Duplicated)
    x, dx, out, dout = XS[2].copy(), np.zeros(3), np.zeros(4), np.zeros(4)
    tp, primal, shadow = fwd(Duplicated(out, dout), Duplicated(x, dx))
    assert primal is None and shadow is None
    close(out, 2.0 * np.tanh(W[:, :3] @ x))
    seeds = (np.array([1.0, 0.0, -2.0, 0.5]), np.array([0.0, 3.0, 1.0, 0.0]))
    for s in seeds:
        dout[:] = s
        rev(Duplicated(out, dout), Duplicated(x, dx), tp)
        assert not np.any(dout)                               # each seed is consumed
    expected = np.zeros(3)
    for s in seeds:
        autodiff(Reverse, layer_, Const, Duplicated(np.zeros(4), s.copy()),
                 Duplicated(x, expected))
    close(dx, expected)


def test_batch_duplicated_result_seeded_through_its_returned_shadows():
    A = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, lambda x: np.tanh(A @ x),
                              BatchDuplicated, BatchDuplicated)
    x, shadows = np.array([0.1, 0.2]), (np.zeros(2), np.zeros(2), np.zeros(2))
    tp, y, dys = fwd(BatchDuplicated(x, shadows))
    assert len(dys) == 3
    close(y, np.tanh(A @ x))
    for k in range(3):
        dys[k][k] = 1.0
    assert rev(BatchDuplicated(x, shadows), tp) == ((None,),)
    close(np.array(shadows), (1 - np.tanh(A @ x) ** 2)[:, None] * A)


def test_split_inside_an_outer_reverse_gives_a_hessian_vector_product():
    f = lambda x: np.sum(np.sin(x) ** 2)                    # noqa: E731
    fwd, rev = autodiff_thunk(ReverseSplitNoPrimal, f, Active, Active)
    v = np.array([1.0, 2.0])

    def directional_gradient(x):
        tp, _, _ = fwd(Active(x))
        (g,), = rev(Active(x), 1.0, tp)
        return np.sum(g * v)
    x = np.array([0.3, 0.5])
    (hv,), = autodiff(Reverse, directional_gradient, Active, Active(x))
    close(hv, 2 * np.cos(2 * x) * v)


def test_forward_thunk_in_batch_mode_matches_autodiff():
    f = lambda x, c: np.sin(x) * c                          # noqa: E731
    x, dirs = np.array([0.1, 0.2]), (np.ones(2), np.array([1.0, 0.0]))
    jvp = autodiff_thunk(ForwardWithPrimal, f, BatchDuplicated, BatchDuplicated, Const)
    (t1, t2), y = jvp(BatchDuplicated(x, dirs), Const(2.0))
    expected = autodiff(ForwardWithPrimal, f, BatchDuplicated, BatchDuplicated(x, dirs),
                        Const(2.0))
    close(y, expected[1])
    close(t1, expected[0][0])
    close(t2, expected[0][1])
    close(t2, [2.0 * np.cos(0.1), 0.0])
