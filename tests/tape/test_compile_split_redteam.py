"""Red team of `tape.compile` in the split modes: `compile(ReverseSplitWithPrimal, f, ...)`
returns `autodiff_thunk`'s `(forward, reverse)`, so each check runs the compiled pair and the
eager pair side by side and compares both with eager `autodiff(Reverse, ...)` or finite
differences: several tapes alive at once, tapes reversed twice, index arrays changed between
the passes, and the arguments `reverse` takes that `forward` did not see (new shadows, seeds).
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import tape
from tape import (Active, ActivityError, BatchDuplicated, Const, Duplicated, Reverse,
                  ReverseSplitNoPrimal, ReverseSplitWithPrimal, autodiff, autodiff_thunk)

from numeric_checks import fd_gradient

S = ReverseSplitWithPrimal
RNG = np.random.default_rng(11)
A = RNG.standard_normal((3, 3))
X0 = RNG.standard_normal((3, 3))


def pairs(f, *types, mode=S):
    """The compiled pair and the eager pair of `f`."""
    return [tape.compile(mode, f, *types), autodiff_thunk(mode, f, *types)]


def close(a, b, rtol=1e-10, atol=1e-12):
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def eager_gradient(f, x, seed):
    dx = np.zeros_like(x)
    autodiff(Reverse, lambda z: np.sum(f(z) * seed), Active, Duplicated(x.copy(), dx))
    return dx


# --------------------------------------------------------------------------------------------
# Checks that hold today


def _scale_in_place(y, x):
    y *= x
    return np.sum(y ** 2)


@pytest.mark.parametrize("which", ["compiled", "eager"])
def test_tapes_of_buffers_written_in_place_reversed_in_the_opposite_order(which):
    fwd, rev = pairs(_scale_in_place, Active, Duplicated, Duplicated)[which == "eager"]
    x, dx = np.array([1.0, 2.0]), np.zeros(2)
    y0s = [np.array([3.0, 4.0]), np.array([5.0, 6.0]), np.array([-1.0, 0.5])]
    ys = [y.copy() for y in y0s]
    dys = [np.zeros(2) for _ in ys]
    tapes = [fwd(Duplicated(y, dy), Duplicated(x, dx)) for y, dy in zip(ys, dys)]
    for y, y0, (_, p, _) in zip(ys, y0s, tapes):
        close(y, y0 * x)                      # the forward wrote the primal
        close(p, np.sum((y0 * x) ** 2))
    for k in (2, 0, 1):
        rev(Duplicated(ys[k], dys[k]), Duplicated(x, dx), 1.0, tapes[k][0])
    for y0, dy in zip(y0s, dys):
        close(dy, 2 * y0 * x ** 2)            # the seed of y's final value is its zeroed shadow
    close(dx, sum(2 * y0 ** 2 * x for y0 in y0s))


_TWICE = {
    "inv": lambda x: np.linalg.inv(x + 3 * np.eye(3)),
    "solve": lambda x: np.linalg.solve(x + 3 * np.eye(3), A),
    "cholesky": lambda x: np.linalg.cholesky(x @ x.T + np.eye(3)),
    "eigh": lambda x: np.linalg.eigh(x + x.T)[0],
    "cumprod": lambda x: np.cumprod(x, axis=0),
    "sort": lambda x: np.sort(x, axis=1),
    "softmax": lambda x: np.exp(x) / np.sum(np.exp(x), axis=1, keepdims=True),
    "setitem": lambda x: (lambda z: (z.__setitem__((slice(None), 0), x[:, 1] ** 2), z)[1])(
        x.copy()),
}


@pytest.mark.parametrize("name", sorted(_TWICE))
def test_a_tape_reversed_twice_gives_the_same_gradient_as_eager_autodiff(name):
    op = _TWICE[name]
    seed = RNG.standard_normal(np.shape(op(X0)))
    want = eager_gradient(op, X0, seed)
    for fwd, rev in pairs(op, Active, Duplicated):
        x, dx = X0.copy(), np.zeros((3, 3))
        tp, y, _ = fwd(Duplicated(x, dx))
        close(y, op(X0))
        rev(Duplicated(x, dx), seed, tp)
        close(dx, want)
        rev(Duplicated(x, dx), seed, tp)      # no rule changed what the tape saved
        close(dx, 2 * want)


def _gather(idx):
    return lambda x: np.sum(x[idx] ** 2 * np.arange(1.0, 3.0))


def _scatter(idx):
    def f(x):
        z = np.zeros_like(x)
        z[idx] = x[:2]
        return np.sum(z * x)
    return f


def _add_at(idx):
    def f(x):
        z = np.zeros_like(x)
        np.add.at(z, idx, x[:2])
        return np.sum(z * x)
    return f


@pytest.mark.parametrize("make", [_gather, _scatter, _add_at])
def test_a_closure_index_array_changed_between_the_passes_keeps_forwards_indices(make):
    idx = np.array([0, 1])
    f = make(idx)
    x0 = np.arange(1.0, 5.0)
    want = fd_gradient(f, x0.copy())
    for fwd, rev in pairs(f, Active, Duplicated):
        idx[:] = [0, 1]
        x, dx = x0.copy(), np.zeros(4)
        tp, _, _ = fwd(Duplicated(x, dx))
        idx[:] = [2, 3]
        try:
            rev(Duplicated(x, dx), 1.0, tp)
        except tape.TapeMutatedError:
            continue                          # refusing is right too
        close(dx, want, rtol=1e-6, atol=1e-7)


# --------------------------------------------------------------------------------------------
# Findings


@pytest.mark.parametrize("which", ["compiled", "eager"])
def test_an_object_array_const_argument_is_taken_as_autodiff_takes_it(which):
    def f(x, names):
        return np.sum(x ** 2) * len(names)
    names = np.array(["a", 1], dtype=object)
    fwd, rev = pairs(f, Active, Active, Const)[which == "eager"]
    x = np.array([1.0, 2.0])
    tp, y, _ = fwd(Active(x), Const(names))
    assert y == 10.0
    close(rev(Active(x), Const(names), 1.0, tp)[0][0], 4 * x)


@pytest.mark.parametrize("n", [1, 3])
def test_a_batch_reverse_with_another_number_of_shadows_than_forward_is_refused(n):
    def f(x):
        return np.sum(x ** 3)
    for fwd, rev in pairs(f, Active, BatchDuplicated):
        x = np.array([1.0, 2.0])
        tp, _, _ = fwd(BatchDuplicated(x, (np.zeros(2), np.zeros(2))))
        shadows = tuple(np.zeros(2) for _ in range(n))
        with pytest.raises(ActivityError):
            rev(BatchDuplicated(x, shadows), (1.0, 2.0), tp)
        for s in shadows:
            close(s, 0.0)


def test_reverse_refuses_a_shadow_that_shares_memory_with_its_primal():
    def f(x):
        return np.sum(x ** 3)
    for fwd, rev in pairs(f, Active, Duplicated):
        x = np.array([1.0, 2.0])
        tp, _, _ = fwd(Duplicated(x, np.zeros(2)))
        with pytest.raises(ActivityError, match="shares memory"):
            rev(Duplicated(x, x), 1.0, tp)
        close(x, [1.0, 2.0])


def test_reverse_refuses_a_read_only_shadow_before_writing_any():
    def f(p):
        return np.sum(p[0] ** 2) + np.sum(p[1] ** 2)
    for fwd, rev in pairs(f, Active, Duplicated):
        p = [np.ones(2), np.ones(2)]
        tp, _, _ = fwd(Duplicated(p, [np.zeros(2), np.zeros(2)]))
        frozen = np.zeros(2)
        frozen.flags.writeable = False
        shadow = [np.zeros(2), frozen]
        with pytest.raises(ActivityError, match="read-only"):
            rev(Duplicated(p, shadow), 1.0, tp)
        close(shadow[0], 0.0)


@pytest.mark.parametrize("ret", [Active, Duplicated])
def test_jacobian_rows_from_a_refilled_seed_buffer_stay_distinct(ret):
    def f(x):
        return x + 1.0
    for fwd, rev in pairs(f, ret, Active):
        x = np.array([1.0, 2.0, 3.0])
        tp, _, shadow = fwd(Active(x))
        seed = shadow if ret is Duplicated else np.zeros(3)
        rows = []
        for k in range(3):
            seed[...] = np.eye(3)[k]
            args = (Active(x), tp) if ret is Duplicated else (Active(x), seed, tp)
            rows.append(rev(*args)[0][0])
        close(np.array(rows), np.eye(3))


@pytest.mark.parametrize("shape", [(), (2,)])
def test_a_complex_seed_for_a_real_result_is_refused_or_kept(shape):
    def f(x):
        return np.sin(x) if shape else np.sum(np.sin(x))
    seed = np.full(shape, 1.0 + 2.0j)
    for fwd, rev in pairs(f, Active, Active, mode=ReverseSplitNoPrimal):
        x = np.array([0.5, 1.0])
        tp, _, _ = fwd(Active(x))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                (g,), = rev(Active(x), seed, tp)
            except ActivityError:
                continue
        close(g, np.cos(x) * seed)
