"""The chunkwise-parallel memories (`kernels.memory_chunked`, `kernels.memory_chunked_titans`):
outputs and
hand-written gradients equal the sequential reference and the tape of a token-by-token program,
for chunk sizes that do and do not divide the sequence, sequences shorter than a chunk, nonzero
initial states, a cotangent on the final state, batch axes, small retentions and float32; and
the dispatch picks the chunked form by default on NumPy arrays, the loop under
`force_reference`."""
import numpy as np
import pytest

import kernels
import tokenwise
from weighted import grads, weights_for
from kernels import memory_chunked, memory_chunked_titans
from tape.testing import check_grads

KERNELS = {"delta": kernels.delta_rule, "hebbian": kernels.hebbian_rule,
           "titans": kernels.titans_rule}
TOKENWISE = {"delta": tokenwise.delta, "hebbian": tokenwise.hebbian, "titans": tokenwise.titans}
MODULE = {"delta": memory_chunked, "hebbian": memory_chunked, "titans": memory_chunked_titans}


@pytest.fixture
def chunk(monkeypatch):
    """Set the chunk size, and let the default dispatch use the chunked form for any length."""
    monkeypatch.setattr(memory_chunked, "MIN_TOKENS", 1)

    def set_chunk(c):
        monkeypatch.setattr(memory_chunked, "CHUNK", c)
    return set_chunk


def reference(rule):
    return lambda *a: KERNELS[rule](*a, backend="reference")


def assert_close(got, want, rtol, atol=0.0):
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


@pytest.mark.parametrize("rule", KERNELS)
@pytest.mark.parametrize("s,c", [(12, 4), (13, 4), (3, 8), (17, 5), (9, 1)])
@pytest.mark.parametrize("lead", [(), (2, 3)])
def test_chunked_equals_sequential_reference(rule, s, c, lead, chunk):
    chunk(c)
    args = tokenwise.memory_args(rule, s, 4, lead=lead, seed=s + c)
    kernel = KERNELS[rule]
    outs = kernel(*args)
    want = reference(rule)(*args)
    assert_close(outs, want, rtol=1e-12, atol=1e-14)
    w = weights_for(want)                        # a cotangent on y and on the final state
    assert_close(grads(kernel, args, w), grads(reference(rule), args, w), rtol=1e-10,
                 atol=1e-13)


@pytest.mark.parametrize("rule", KERNELS)
def test_chunked_backward_equals_tape_of_tokenwise_program(rule, chunk):
    chunk(3)
    args = tokenwise.memory_args(rule, 8, 4, lead=(), seed=3)
    w = weights_for(KERNELS[rule](*args))
    assert_close(grads(KERNELS[rule], args, w), grads(TOKENWISE[rule], args, w), rtol=1e-10,
                 atol=1e-13)


@pytest.mark.parametrize("rule", KERNELS)
@pytest.mark.parametrize("which", ["y only", "final state only"])
def test_cotangent_on_one_output(rule, which, chunk):
    chunk(4)
    args = tokenwise.memory_args(rule, 10, 3, lead=(2,), seed=7)
    w = weights_for(KERNELS[rule](*args))
    w = [w[0]] + [None] * (len(w) - 1) if which == "y only" else [None] + w[1:]
    assert_close(grads(KERNELS[rule], args, w), grads(reference(rule), args, w), rtol=1e-10,
                 atol=1e-13)


@pytest.mark.parametrize("rule", KERNELS)
def test_chunked_finite_differences(rule, chunk):
    chunk(3)
    args = tokenwise.memory_args(rule, 7, 3, lead=(2,), seed=11)
    check_grads(KERNELS[rule], *args, order=1, modes=("rev",))


@pytest.mark.parametrize("rule", KERNELS)
def test_small_retention_keeps_gate_gradients_accurate(rule, chunk):
    # r = 1 - alpha down to 1e-6: the decay products span many orders of magnitude inside a
    # chunk, and d alpha must not lose digits to cancellation.
    chunk(8)
    args = tokenwise.memory_args(rule, 16, 4, lead=(), seed=5)
    alpha = args[3]
    alpha[::3] = 1 - 1e-6
    alpha[1::5] = 1 - 1e-3
    if rule == "titans":
        args[5][2::4] = 1e-6                          # the momentum gate eta as well
    w = weights_for(KERNELS[rule](*args))
    got, want = grads(KERNELS[rule], args, w), grads(reference(rule), args, w)
    np.testing.assert_allclose(got[3], want[3], rtol=1e-9, atol=0)
    if rule == "titans":
        np.testing.assert_allclose(got[5], want[5], rtol=1e-9, atol=0)
    assert_close(got, want, rtol=1e-9, atol=1e-13)


@pytest.mark.parametrize("rule", KERNELS)
@pytest.mark.parametrize("a", [1.0, 1.5])
def test_retention_zero_or_negative_falls_back_to_the_loop(rule, a, chunk):
    chunk(4)
    args = tokenwise.memory_args(rule, 9, 3, lead=(), seed=2)
    args[3][4] = a                                    # r = 0 or r < 0: no logarithm
    w = weights_for(KERNELS[rule](*args))
    assert_close(KERNELS[rule](*args), reference(rule)(*args), rtol=0, atol=0)
    assert_close(grads(KERNELS[rule], args, w), grads(reference(rule), args, w), rtol=0, atol=0)


@pytest.mark.parametrize("rule", KERNELS)
def test_float32_matches_float64_reference(rule):
    args = tokenwise.memory_args(rule, 40, 8, lead=(2,), seed=4)      # default chunk, 1 chunk
    args32 = [a.astype(np.float32) for a in args]
    outs = KERNELS[rule](*args32)
    assert all(o.dtype == np.float32 for o in outs)
    want = reference(rule)(*args)
    for o, r in zip(outs, want):
        np.testing.assert_allclose(o, r, rtol=1e-4, atol=1e-4 * np.max(np.abs(r)))
    w = weights_for(want)
    got = grads(KERNELS[rule], args32, [x.astype(np.float32) for x in w])
    for g, r in zip(got, grads(reference(rule), args, w)):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4 * np.max(np.abs(r)))


def test_only_chunk_starts_are_kept():
    args = tokenwise.memory_args("delta", 20, 3, lead=(2,), seed=1)
    x, init, _ = kernels.memory._inputs("delta", args)
    _, _, saved = memory_chunked.forward(kernels.memory_ref.RULES["delta"], x, init, chunk=8)
    assert saved.starts.shape == (2, 3, 3, 3)           # [B, ceil(20 / 8), d, d]


@pytest.mark.parametrize("rule", KERNELS)
def test_dispatch_chunked_by_default_loop_when_forced(rule, monkeypatch):
    calls = []
    real = MODULE[rule].forward

    def spy(*a, **kw):
        calls.append(1)
        return real(*a, **kw)
    monkeypatch.setattr(MODULE[rule], "forward", spy)
    long_args = tokenwise.memory_args(rule, memory_chunked.MIN_TOKENS, 3, lead=(), seed=0)
    short_args = tokenwise.memory_args(rule, memory_chunked.MIN_TOKENS - 1, 3, lead=(), seed=0)
    KERNELS[rule](*long_args)
    assert len(calls) == 1
    KERNELS[rule](*short_args)                           # too short to gain: the loop
    KERNELS[rule](*long_args, backend="reference")
    with kernels.force_reference():
        KERNELS[rule](*long_args)
    assert len(calls) == 1


@pytest.mark.parametrize("rule", ["delta", "titans"])
def test_zero_gates_and_long_sequence(rule, chunk):
    # theta = 0 (no write) and several chunks with a short tail
    chunk(16)
    args = tokenwise.memory_args(rule, 70, 5, lead=(2,), seed=9)
    args[4][:, 10:30] = 0.0
    w = weights_for(KERNELS[rule](*args))
    assert_close(KERNELS[rule](*args), reference(rule)(*args), rtol=1e-12, atol=1e-14)
    assert_close(grads(KERNELS[rule], args, w), grads(reference(rule), args, w), rtol=1e-10,
                 atol=1e-13)


def test_benchmark_section_runs_and_gradients_agree():
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "kernels.py"
    spec = importlib.util.spec_from_file_location("kernel_benchmark", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = bench.run_chunked([40], 1, d=8)
    assert {r["pair"] for r in rows} == {"delta", "hebbian", "titans"}
    assert all(r["grad_check"] and r["speedup"] > 0 for r in rows)
