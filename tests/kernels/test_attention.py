"""Sliding-window attention, reference backend: (A) the hand-written backward equals the tape's
gradient of a token-by-token program, (B) finite differences, (C) stop-gradient barriers, plus
independent formulations, blocks, batch axes, bf16 storage and bad input."""
import numpy as np
import pytest

import kernels
import tokenwise
from kernels import attention
from tape import Active, Const, OnceDifferentiableError, Reverse, autodiff, inactive
from tape.testing import check_grads


def qkv(s=6, hd=4, lead=(), seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(lead + (s, hd)).astype(dtype) for _ in range(3)]


def grads(fn, args, weight):
    derivs, = autodiff(Reverse, lambda *a: np.sum(fn(*a) * weight), Active,
                       *[Active(a) for a in args])
    return derivs


@pytest.mark.parametrize("window", [1, 2, 4, 9])
def test_backward_equals_tape_of_tokenwise_program(window):
    args = qkv(s=7, hd=3)
    weight = np.random.default_rng(1).standard_normal((7, 3))
    got = grads(lambda *a: kernels.swa_attention(*a, window), args, weight)
    want = grads(lambda *a: tokenwise.swa(*a, window), args, weight)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(kernels.swa_attention(*args, window),
                               tokenwise.swa(*args, window), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("s,hd,window", [(1, 4, 1), (1, 4, 3), (6, 4, 3), (5, 16, 2),
                                         (3, 64, 2), (3, 128, 3)])
def test_finite_differences(s, hd, window):
    check_grads(lambda q, k, v: kernels.swa_attention(q, k, v, window), *qkv(s, hd, seed=s),
                order=1)


_stop = inactive(lambda x: x)


def test_stop_gradient_barrier_gives_exact_zero():
    args = qkv()
    weight = np.ones((6, 4))
    dq, dk, dv = grads(lambda q, k, v: kernels.swa_attention(q, _stop(k), v, 3), args, weight)
    assert not np.any(dk)
    full = grads(lambda *a: kernels.swa_attention(*a, 3), args, weight)
    np.testing.assert_allclose(dq, full[0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dv, full[2], rtol=1e-12, atol=1e-12)
    derivs, = autodiff(Reverse, lambda q, k, v: np.sum(_stop(kernels.swa_attention(q, k, v, 3)))
                       + 0.0 * np.sum(q), Active, *[Active(a) for a in args])
    assert all(g is None or not np.any(g) for g in derivs)
    derivs, = autodiff(Reverse, lambda q, k, v: np.sum(kernels.swa_attention(q, k, v, 3)),
                       Active, Active(args[0]), Const(args[1]), Const(args[2]))
    assert derivs[1] is None and derivs[2] is None and derivs[0].shape == (6, 4)


def test_full_window_is_causal_softmax_attention():
    q, k, v = qkv(s=9, hd=5)
    scores = q @ k.T / np.sqrt(5) + np.triu(np.full((9, 9), -np.inf), 1)
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    want = (p / p.sum(axis=1, keepdims=True)) @ v
    for window in (9, 50):
        np.testing.assert_allclose(kernels.swa_attention(q, k, v, window), want, rtol=1e-12,
                                   atol=1e-12)
    np.testing.assert_allclose(kernels.swa_attention(q, k, v, 1), v, atol=1e-12)


def test_blocks_cover_long_sequences():
    # Several query blocks, windows smaller and larger than a block.
    s = 2 * attention.block_rows(1024) + 37
    q, k, v = qkv(s=s, hd=3, seed=2)
    weight = np.random.default_rng(3).standard_normal((s, 3))
    for window in (5, 70, attention.block_rows(1024) + 10):
        assert attention.block_rows(window) < s / 2
        scores = q @ k.T / np.sqrt(3)
        i, j = np.indices((s, s))
        scores[(j > i) | (j <= i - window)] = -np.inf
        p = np.exp(scores - scores.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        np.testing.assert_allclose(kernels.swa_attention(q, k, v, window), p @ v, rtol=1e-11,
                                   atol=1e-13)
        dq, dk, dv = grads(lambda *a: kernels.swa_attention(*a, window), (q, k, v), weight)
        np.testing.assert_allclose(dv, p.T @ weight, rtol=1e-10, atol=1e-12)
        dS = p * (weight @ v.T - np.sum(weight * (p @ v), axis=1, keepdims=True))
        np.testing.assert_allclose(dq, dS @ k / np.sqrt(3), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(dk, dS.T @ q / np.sqrt(3), rtol=1e-9, atol=1e-12)


def test_forward_saves_the_log_sum_exp():
    q, k, v = (a[None] for a in qkv(s=5, hd=2))
    out, lse = attention.swa_forward(q, k, v, 2)
    scores = q[0] @ k[0].T / np.sqrt(2)
    for i in range(5):
        lo = max(0, i - 1)
        np.testing.assert_allclose(lse[0, i], np.log(np.sum(np.exp(scores[i, lo:i + 1]))),
                                   atol=1e-12)


def test_batch_and_head_axes():
    args = qkv(s=5, hd=3, lead=(2, 3))
    weight = np.random.default_rng(5).standard_normal((2, 3, 5, 3))
    out = kernels.swa_attention(*args, 2)
    g = grads(lambda *a: kernels.swa_attention(*a, 2), args, weight)
    for b in np.ndindex(2, 3):
        one = [a[b] for a in args]
        np.testing.assert_allclose(out[b], kernels.swa_attention(*one, 2), rtol=1e-13, atol=1e-13)
        for gb, w in zip(g, grads(lambda *a: kernels.swa_attention(*a, 2), one, weight[b])):
            np.testing.assert_allclose(gb[b], w, rtol=1e-12, atol=1e-14)


def test_bf16_storage_rounds_inputs_and_passes_gradients_through():
    q, k, v = qkv(s=6, hd=8, dtype=np.float32)
    r = [attention.round_bf16(np, a) for a in (q, k, v)]
    assert all(np.all((a.view(np.uint32) & 0xFFFF) == 0) for a in r)
    assert all(np.max(np.abs(a - b) / np.abs(b)) <= 2.0 ** -8 for a, b in zip(r, (q, k, v)))
    out = kernels.swa_attention(q, k, v, 3, storage="bf16")
    np.testing.assert_array_equal(out, kernels.swa_attention(*r, 3))
    weight = np.ones((6, 8), np.float32)
    got = grads(lambda *a: kernels.swa_attention(*a, 3, storage="bf16"), (q, k, v), weight)
    want = grads(lambda *a: kernels.swa_attention(*a, 3), r, weight)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    # ties round to even, NaN stays NaN
    x = np.array([1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, np.nan], np.float32)
    np.testing.assert_array_equal(attention.round_bf16(np, x)[:2], [1.0, 1 + 2.0 ** -6])
    assert np.isnan(attention.round_bf16(np, x)[2])


def test_float32_stays_float32():
    args = qkv(dtype=np.float32)
    assert kernels.swa_attention(*args, 2).dtype == np.float32
    assert all(g.dtype == np.float32 for g in grads(
        lambda *a: kernels.swa_attention(*a, 2), args, np.ones((6, 4), np.float32)))


def test_second_derivative_raises():
    q, k, v = qkv(s=3, hd=2)

    def grad_norm(q):
        (g,), = autodiff(Reverse, lambda q: np.sum(kernels.swa_attention(q, k, v, 2) ** 2),
                         Active, Active(q))
        return np.sum(g ** 2)
    with pytest.raises(OnceDifferentiableError):
        autodiff(Reverse, grad_norm, Active, Active(q))


def test_chain_rule_composition_matches_finite_differences():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((6, 5))
    W = [rng.standard_normal((5, 4)) * 0.5 for _ in range(4)]

    def model(x, W_q, W_k, W_v, W_g):
        out = kernels.swa_attention(x @ W_q, x @ W_k, x @ W_v, 3)
        gate = 1 / (1 + np.exp(-(x @ W_g)))
        return np.sum((gate * out) ** 2)
    check_grads(model, x, *W, order=1)


def test_bad_input_errors_are_clear():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="window must be >= 1"):
        kernels.swa_attention(q, k, v, 0)
    with pytest.raises(TypeError, match="window must be an int"):
        kernels.swa_attention(q, k, v, 2.0)
    with pytest.raises(ValueError, match=r"`k` must have shape \(6, 4\)"):
        kernels.swa_attention(q, k[:5], v, 2)
    with pytest.raises(ValueError, match="`v` must have shape"):
        kernels.swa_attention(q, k, v[..., :3], 2)
    with pytest.raises(TypeError, match="`v` has dtype float32 but `q` has float64"):
        kernels.swa_attention(q, k, v.astype(np.float32), 2)
    with pytest.raises(TypeError, match="storage='bf16' takes float32"):
        kernels.swa_attention(q, k, v, 2, storage="bf16")
    with pytest.raises(ValueError, match="storage must be"):
        kernels.swa_attention(q, k, v, 2, storage="fp8")
    with pytest.raises(ValueError, match=r"\[\.\.\., s, head_dim\]"):
        kernels.swa_attention(q[0], k[0], v[0], 2)
