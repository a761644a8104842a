"""AdamW, clipping and the schedule against hand computations and torch.optim.AdamW."""
import math

import numpy as np
import pytest

from models.optim import AdamW, clip_by_global_norm, global_norm, warmup_cosine


def _hand_adamw(p, grads, lr, b1, b2, eps, wd):
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        p = p * (1 - lr * wd)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        p = p - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
    return p


def test_adamw_matches_hand_computation_on_a_pytree():
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((3, 4)), "b": [rng.standard_normal(4)]}
    start = {"w": params["w"].copy(), "b": params["b"][0].copy()}
    grads = [{"w": rng.standard_normal((3, 4)), "b": [rng.standard_normal(4)]} for _ in range(4)]
    opt = AdamW(params, lr=0.05, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1)
    for g in grads:
        opt.step(params, g)
    # weight decay only on matrices by default
    w = _hand_adamw(start["w"], [g["w"] for g in grads], 0.05, 0.9, 0.99, 1e-8, 0.1)
    b = _hand_adamw(start["b"], [g["b"][0] for g in grads], 0.05, 0.9, 0.99, 1e-8, 0.0)
    np.testing.assert_allclose(params["w"], w, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(params["b"][0], b, rtol=1e-12, atol=1e-12)
    assert opt.t == 4


def test_adamw_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    p = rng.standard_normal((5, 3))
    grads = [rng.standard_normal((5, 3)) for _ in range(5)]
    lrs = [0.01, 0.02, 0.03, 0.02, 0.01]
    tp = torch.tensor(p.copy(), requires_grad=True)
    topt = torch.optim.AdamW([tp], lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.05)
    params = {"p": p.copy()}
    opt = AdamW(params, lr=0.01, weight_decay=0.05, decay=None)
    for g, lr in zip(grads, lrs):
        for group in topt.param_groups:
            group["lr"] = lr
        tp.grad = torch.tensor(g)
        topt.step()
        opt.step(params, {"p": g}, lr=lr)
    np.testing.assert_allclose(params["p"], tp.detach().numpy(), rtol=1e-10, atol=1e-12)


def test_adamw_keeps_float32():
    params = {"w": np.ones((2, 2), np.float32)}
    AdamW(params, lr=0.1).step(params, {"w": np.ones((2, 2), np.float32)})
    assert params["w"].dtype == np.float32


def test_state_arrays_round_trip():
    params = {"w": np.ones((2, 2))}
    opt = AdamW(params, lr=0.1)
    opt.step(params, {"w": np.full((2, 2), 0.3)})
    other = AdamW({"w": np.ones((2, 2))}, lr=0.1)
    other.load_state_arrays(opt.state_arrays(), opt.t)
    np.testing.assert_array_equal(other.m[0], opt.m[0])
    assert other.t == 1
    with pytest.raises(ValueError, match="shape"):
        AdamW({"w": np.ones(3)}).load_state_arrays(opt.state_arrays(), 1)


def test_clipping():
    g = {"a": np.array([3.0, 0.0]), "b": np.array([[4.0]])}
    assert clip_by_global_norm(g, 10.0) == 5.0
    np.testing.assert_array_equal(g["a"], [3.0, 0.0])   # under the limit: untouched
    assert clip_by_global_norm(g, 1.0) == 5.0
    assert math.isclose(global_norm(g), 1.0)
    bad = {"a": np.array([np.nan])}
    assert math.isnan(clip_by_global_norm(bad, 1.0))


def test_schedule_shape():
    lrs = [warmup_cosine(s, 1.0, 10, 100, 0.1) for s in range(101)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert max(lrs) == pytest.approx(1.0)
    assert all(a >= b - 1e-12 for a, b in zip(lrs[10:], lrs[11:]))   # monotone decay
    assert lrs[100] == pytest.approx(0.1)
    assert warmup_cosine(500, 1.0, 10, 100, 0.1) == pytest.approx(0.1)
