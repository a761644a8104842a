"""Arrays the function does not differentiate (closures, globals, workspaces, index arrays) may
be written in place after an operation used them. The reverse sweep must see the values the
operation used (`tape.residuals`), in every reverse mode, eager and compiled."""
from __future__ import annotations

import numpy as np
import pytest

import tape
from tape import Active, Duplicated, Reverse, ReverseWithPrimal, autodiff
from tape.residuals import caller_arrays, protect

A = np.array([[2.0, -1.0], [0.5, 3.0]])


def workspace_matmul(x):
    """A coefficient matrix scaled in place between uses."""
    W = A.copy()
    y = 0.0
    for _ in range(3):
        y = y + np.sum(np.sin(W @ x))
        W *= 0.5
    return y


def workspace_matmul_grad(x):
    g, W = np.zeros_like(x), A.copy()
    for _ in range(3):
        g += W.T @ np.cos(W @ x)
        W = W * 0.5
    return g


def incremented_index(x):
    idx = np.array([0, 1])
    y = 0.0
    for k in range(3):
        y = y + np.sum(x[idx] ** 2 * (k + 1))
        idx += 1
    return y


def incremented_index_grad(x):
    g = np.zeros_like(x)
    for k, idx in enumerate(([0, 1], [1, 2], [2, 3])):
        g[idx] += 2 * x[idx] * (k + 1)
    return g


MASK = np.array([True, False, True, False, True])


def overwritten_mask(x):
    m = MASK.copy()
    y = np.sum(np.where(m[:4], np.exp(x[:4]), 0.0))
    m[:] = ~m
    return y + np.sum(np.where(m[:4], x[:4], 0.0))


def overwritten_mask_grad(x):
    g = np.zeros_like(x)
    g[:4] = np.where(MASK[:4], np.exp(x[:4]), 0.0) + np.where(~MASK[:4], 1.0, 0.0)
    return g


SCALE = np.array([1.0, 2.0, -1.0, 0.5, 3.0])


def global_rewritten(x):
    c = SCALE.copy()
    y = np.sum(np.tanh(x) * c)
    c[1:3] = 10.0               # through a view of the saved operand's memory
    return y + np.sum(x * c[::2].sum())


def global_rewritten_grad(x):
    c2 = SCALE.copy()
    c2[1:3] = 10.0
    return SCALE / np.cosh(x) ** 2 + c2[::2].sum()


CASES = [(workspace_matmul, workspace_matmul_grad, 2),
         (incremented_index, incremented_index_grad, 5),
         (overwritten_mask, overwritten_mask_grad, 5),
         (global_rewritten, global_rewritten_grad, 5)]


@pytest.mark.parametrize("f, grad, n", CASES, ids=[c[0].__name__ for c in CASES])
def test_eager_reverse_sees_the_values_used(f, grad, n):
    x = np.random.default_rng(0).standard_normal(n)
    (dx,), = autodiff(Reverse, f, Active, Active(x))
    np.testing.assert_allclose(dx, grad(x), rtol=1e-12, atol=1e-14)
    dx = np.zeros_like(x)
    _, value = autodiff(ReverseWithPrimal, f, Active, Duplicated(x, dx))
    np.testing.assert_allclose(dx, grad(x), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(value, f(x), rtol=1e-14)


@pytest.mark.parametrize("f, grad, n", CASES, ids=[c[0].__name__ for c in CASES])
def test_compiled_reverse_sees_the_values_used(f, grad, n):
    g = tape.compile(Reverse, f, Active, Duplicated)
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal(n)
        dx = np.zeros_like(x)
        g(Duplicated(x, dx))
        np.testing.assert_allclose(dx, grad(x), rtol=1e-12, atol=1e-14)


def test_split_mode_reverse_after_the_write():
    # The forward pass ends (and the write happens) long before the reverse pass runs.
    x = np.random.default_rng(1).standard_normal(2)
    fwd, rev = tape.autodiff_thunk(tape.ReverseSplitWithPrimal, workspace_matmul, Active,
                                   Duplicated)
    dx = np.zeros_like(x)
    recorded, value, _ = fwd(Duplicated(x, dx))
    rev(Duplicated(x, dx), 2.0, recorded)
    np.testing.assert_allclose(value, workspace_matmul(x), rtol=1e-14)
    np.testing.assert_allclose(dx, 2.0 * workspace_matmul_grad(x), rtol=1e-12)


def test_nested_named_tuple_residuals_are_protected():
    from collections import namedtuple
    Pair = namedtuple("Pair", "a b")
    c = np.arange(4.0)
    kept = protect(Pair(c[1:], {"w": c}), [c])
    assert not np.shares_memory(kept.a, c) and not np.shares_memory(kept.b["w"], c)
    c[:] = -1
    np.testing.assert_array_equal(kept.a, [1.0, 2.0, 3.0])


def test_arrays_that_cannot_change_are_not_copied():
    frozen = np.arange(3.0)
    frozen.flags.writeable = False
    view_of_writeable = np.broadcast_to(np.arange(3.0), (2, 3))   # read-only view, base writeable
    assert caller_arrays((frozen, 2.0, "s"), {}) == []
    assert caller_arrays((view_of_writeable,), {"index": (np.arange(2), slice(None))})[0] \
        is view_of_writeable
    saved = (frozen,)
    assert protect(saved, caller_arrays(saved, {})) is saved


def test_compiled_refuses_a_stale_closure_alias_as_eager_does():
    # f writes its argument, then reads the caller's array through a global that is that array:
    # eager mode raises (the global still holds the values from before the write).
    shared = np.array([1.0, 2.0, 3.0])

    def f(a):
        a[0] = 10.0
        return np.sum(a * shared)

    with pytest.raises(tape.ActivityError, match="shares memory"):
        autodiff(ReverseWithPrimal, f, Active, Duplicated(shared, np.zeros(3)))
    g = tape.compile(ReverseWithPrimal, f, Active, Duplicated)
    for _ in range(2):
        with pytest.raises(tape.ActivityError, match="shares memory"):
            g(Duplicated(shared, np.zeros(3)))
