"""On a GPU: the periodic memory kernels and the model's training loss on CuPy arrays.

Skipped unless CuPy is installed and a CUDA device is usable. The periodic kernels
(`kernels.delta_rule_periodic`, ...) are written against the arrays' own module; here their
outputs and gradients (through the tape, both backends) on CuPy are compared with the same
calls on NumPy, in float64 (tight) and float32. Then the model's loss and gradient on CuPy,
where the CMS levels of period > 1 run as periodic kernels, are compared with NumPy's.
"""
import numpy as np
import pytest

import kernels
from tape import Active, Duplicated, Reverse, ReverseWithPrimal, autodiff, make_zero, tree_map
from tape.pytree import flatten
from tokenwise import memory_args

cp = pytest.importorskip("cupy")
if kernels.detect_gpu() is None:
    pytest.skip("no usable CUDA device", allow_module_level=True)

PERIODIC = {"delta": kernels.delta_rule_periodic, "titans": kernels.titans_rule_periodic,
            "hebbian": kernels.hebbian_rule_periodic}


def _host(x):
    return cp.asnumpy(x) if isinstance(x, cp.ndarray) else np.asarray(x)


def _gradients(rule, args, period, backend):
    """The gradient of a weighted sum of the reads and the final memory, on the host."""
    xp = cp if isinstance(args[0], cp.ndarray) else np
    w_y = xp.asarray(np.cos(np.arange(args[0].size) * 0.37).reshape(args[0].shape),
                     dtype=args[0].dtype)
    w_m = xp.asarray(np.sin(np.arange(args[-1].size) * 0.53).reshape(args[-1].shape),
                     dtype=args[0].dtype)

    def loss(*a):
        y, m = PERIODIC[rule](*a, period=period, backend=backend)[:2]
        return np.sum(y * w_y) + np.sum(m * w_m)

    grads, = autodiff(Reverse, loss, Active, *[Active(a) for a in args])
    return [_host(g) for g in grads]


@pytest.mark.parametrize("backend", ["chunked", "reference"])
@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-10), (np.float32, 2e-4)])
@pytest.mark.parametrize("period", [2, 8])
@pytest.mark.parametrize("rule", sorted(PERIODIC))
def test_periodic_kernels_on_cupy_match_numpy(rule, period, dtype, rtol, backend):
    args = memory_args(rule, 37, 16, lead=(2, 3), seed=period, dtype=dtype)
    dev = [cp.asarray(a) for a in args]
    got = PERIODIC[rule](*dev, period=period, backend=backend)
    want = PERIODIC[rule](*args, period=period, backend=backend)
    for g, w in zip(got, want):
        assert isinstance(g, cp.ndarray) and g.dtype == w.dtype
        np.testing.assert_allclose(cp.asnumpy(g), w, rtol=rtol, atol=rtol * np.abs(w).max())
    got = _gradients(rule, dev, period, backend)
    want = _gradients(rule, args, period, backend)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * max(1.0, np.abs(w).max()))


@pytest.mark.parametrize("rule", ["delta", "titans", "hebbian"])
def test_model_loss_and_gradient_on_cupy_match_numpy(rule):
    from models import model
    from models.config import ModelConfig

    cfg = ModelConfig(d_model=32, layers=2, window=8, seq_len=12, levels=3, heads=2,
                      rule=rule, dtype="float64")
    tokens = np.random.default_rng(1).integers(0, cfg.vocab, (2, cfg.seq_len + 1))
    results = []
    for xp in (np, cp):
        params = tree_map(xp.asarray, model.init_params(cfg, 0))
        state = model.init_state(cfg, 2, xp)
        values, grads = [], []
        for _ in range(2):   # 12 tokens a chunk: the second starts mid-period (pending tokens)
            box = []

            def objective(p, state=state):
                value, new_state, _ = model.training_loss(p, xp.asarray(tokens), state, cfg)
                box.append(new_state)
                return value

            shadow = make_zero(params)
            _, value = autodiff(ReverseWithPrimal, objective, Active,
                                Duplicated(params, shadow))
            values.append(float(value))
            grads += [_host(g) for g in flatten(shadow)[0]]
            state = box[-1]
        results.append((values, grads))
    (np_values, np_grads), (cp_values, cp_grads) = results
    np.testing.assert_allclose(cp_values, np_values, rtol=1e-10)
    for g, w in zip(cp_grads, np_grads):
        np.testing.assert_allclose(g, w, rtol=1e-8, atol=1e-11)
