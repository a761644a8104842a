"""Float32 calls whose chunk transitions grow against the retention's decay (``theta |k|^2`` above
``2 (1 - alpha)``: the inner learning rate is a softplus, unbounded): the default dispatch runs
them in float64 (`memory_chunk_precision.transitions_grow`) and must be no less accurate than the
float32 loop (`kernels.force_reference`), both measured against the loop in float64 on the same
float32 inputs, relative to each result's own scale. Measured before the float64 run: the chunked
form 5e-5 of scale from exact against 5e-6 for the loop (delta, d = 64).
"""
import numpy as np
import pytest

import kernels
from kernels import memory_chunk_precision, memory_chunked
from test_memory_scale import NAMES, _uniform, kernel, make_args
from weighted import grads, weights_for


def growing_args(rule, T, d, seed=0):
    """Keys clustered around one direction, theta 1.5 to 2, alpha 0 to 0.9 (float32)."""
    args = list(make_args(rule, T, d, lead=(2,), dtype=np.float32, seed=seed,
                          theta=_uniform(1.5, 2.0), alpha=_uniform(0.0, 0.9)))
    rng = np.random.default_rng(seed + 7)
    k = rng.standard_normal(d) + 0.3 * rng.standard_normal(args[0].shape)
    args[0] = (k / np.linalg.norm(k, axis=-1, keepdims=True)).astype(np.float32)
    return tuple(args)


def errors(results, exact) -> list:
    """Each result's largest error against `exact`, relative to the exact result's scale
    (errors below the smallest normal float32 count as 0: subnormals have no precision)."""
    tiny = float(np.finfo(np.float32).tiny)
    out = []
    for got, want in zip(results, exact):
        got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
        err = max(0.0, float(np.max(np.abs(got - want))) - tiny)
        out.append(err / max(float(np.max(np.abs(want))), tiny))
    return out


def worse_than_the_loop(rule, period, args, factor) -> dict:
    """{result: (default's error, loop's error)} for the results (outputs, final states, the
    gradients of every input) where the default dispatch is more than `factor` times (plus
    1e-6 of scale) less accurate than the float32 loop, both against the float64 loop."""
    wide = tuple(a.astype(np.float64) for a in args)
    fn = kernel(rule, period)
    with np.errstate(all="ignore"):
        with kernels.force_reference():
            exact = list(fn(*wide))
            weights = weights_for(exact, seed=1)
            exact += grads(fn, wide, weights)
            narrow = [w.astype(np.float32) for w in weights]
            loop = errors(list(fn(*args)) + list(grads(fn, args, narrow)), exact)
        default = errors(list(fn(*args)) + list(grads(fn, args, narrow)), exact)
    names = [f"out{i}" for i in range(len(exact) - len(args))] + ["d" + n for n in NAMES[rule]]
    return {n: (f"{a:.2g}", f"{b:.2g}") for n, a, b in zip(names, default, loop)
            if a > factor * b + 1e-6}


@pytest.mark.parametrize("rule,period,d,T,seed", [("delta", None, 64, 512, 0),
                                                  ("delta", None, 32, 256, 1)])
def test_growing_transitions_are_as_accurate_as_the_loop(rule, period, d, T, seed):
    assert worse_than_the_loop(rule, period, growing_args(rule, T, d, seed), factor=2) == {}


def test_ordinary_gates_do_not_grow():
    """theta |k|^2 <= 2 (1 - alpha) bounds every transition by its decay: no float64 run."""
    x = kernels.memory._inputs("delta", make_args("delta", 256, 16, lead=(2,),
                                                  dtype=np.float32))[0]
    ch = memory_chunked._Chunks("delta", x, 16, memory_chunked.NumpyOps)
    assert not memory_chunk_precision.transitions_grow(
        [(memory_chunk_precision.squared_norms(ch.PhiT, ch.gC), 1.0)], 16)
