"""The periodic memories (`kernels.memory_periodic`, a CMS level of period p as one kernel
call): outputs and hand-written gradients equal a token-by-token NumPy program differentiated by
the tape, for both backends, periods that do and do not divide the sequence, sequences shorter
than a period, chunks longer and shorter than the memory width, batch and head axes, small and
zero retentions, finite differences (reverse and forward mode) and float32; and
`models.layers.level_forward` with the periodic kernel equals its per-firing path
(`force_reference`) over consecutive chunks that start at stream positions off the period,
pending tokens and state carried."""
import dataclasses

import numpy as np
import pytest

import kernels
import tokenwise
from weighted import grads, weights_for
from kernels import memory_periodic_chunked
from models import layers
from tape import Active, Reverse, autodiff, primal
from tape.testing import check_grads

KERNELS = {"delta": kernels.delta_rule_periodic, "hebbian": kernels.hebbian_rule_periodic,
           "titans": kernels.titans_rule_periodic}


def tokenwise_periodic(rule, period):
    """The periodic rule written token by token (one sequence): the per-token update over the
    whole chunks; token t reads the memory of its chunk's start, a chunk's last token the
    memory after its write, the tokens after the last whole chunk the last memory."""
    def run(k, v, q, *rest):
        gates, states = rest[:-(2 if rule == "titans" else 1)], rest[-(2 if rule == "titans"
                                                                        else 1):]
        M, S = states[0], (states[1] if rule == "titans" else None)
        whole = k.shape[0] // period * period
        ys, read = [], M
        for t in range(k.shape[0]):
            if t < whole:
                outer = v[t][:, None] * k[t][None, :]
                if rule == "hebbian":
                    M = (1 - gates[0][t]) * M + outer
                else:
                    e = M @ k[t] - v[t]
                    step = gates[1][t] * (e[:, None] * k[t][None, :])
                    if rule == "delta":
                        M = (1 - gates[0][t]) * M - step
                    else:
                        S = gates[2][t] * S - step
                        M = (1 - gates[0][t]) * M + S
                if t % period == period - 1:
                    read = M
            ys.append(read @ q[t])
        return (np.stack(ys), M) + ((S,) if rule == "titans" else ())
    return run


def per_sequence(fn, lead):
    """Apply a one-sequence function to every entry of the leading axes."""
    def run(*args):
        if not lead:
            return fn(*args)
        outs = [fn(*(a[i] for a in args)) for i in np.ndindex(*lead)]
        return tuple(np.reshape(np.stack([o[j] for o in outs]), lead + outs[0][j].shape)
                     for j in range(len(outs[0])))
    return run


def assert_close(got, want, rtol, atol):
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def kernel(rule, period, backend=None):
    return lambda *a: KERNELS[rule](*a, period=period, backend=backend)


@pytest.mark.parametrize("rule", KERNELS)
@pytest.mark.parametrize("backend", ["chunked", "reference"])
@pytest.mark.parametrize("s,period,d,lead", [
    (13, 4, 4, ()),          # a tail of 1 token, a chunk as long as the memory is wide
    (12, 3, 8, (2,)),        # whole chunks only, chunks shorter than d
    (3, 5, 4, (2,)),         # shorter than a period: no write
    (11, 1, 4, ()),          # period 1: the per-token rule
    (17, 2, 8, (2, 3)),      # batch and head axes
])
def test_periodic_equals_tokenwise_program(rule, backend, s, period, d, lead):
    args = tokenwise.memory_args(rule, s, d, lead=lead, seed=s + period)
    want_fn = per_sequence(tokenwise_periodic(rule, period), lead)
    want = want_fn(*args)
    got = kernel(rule, period, backend)(*args)
    assert_close(got, want, rtol=1e-12, atol=1e-14)
    w = weights_for(want)
    assert_close(grads(kernel(rule, period, backend), args, w), grads(want_fn, args, w),
                 rtol=1e-10, atol=1e-13)


def test_period_one_equals_the_per_token_kernels():
    args = tokenwise.memory_args("titans", 9, 4, lead=(2,), seed=2)
    assert_close(kernels.titans_rule_periodic(*args, period=1), kernels.titans_rule(*args),
                 rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("rule", KERNELS)
@pytest.mark.parametrize("which", ["y only", "final state only"])
def test_cotangent_on_one_output(rule, which):
    args = tokenwise.memory_args(rule, 10, 6, lead=(2,), seed=7)
    w = weights_for(kernel(rule, 3)(*args))
    w = [w[0]] + [None] * (len(w) - 1) if which == "y only" else [None] + w[1:]
    assert_close(grads(kernel(rule, 3), args, w),
                 grads(kernel(rule, 3, "reference"), args, w), rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("rule", KERNELS)
@pytest.mark.parametrize("period", [2, 3])
def test_finite_differences(rule, period):
    args = tokenwise.memory_args(rule, 8, 3, lead=(2,), seed=11)
    check_grads(kernel(rule, period), *args, order=1, modes=("rev", "fwd"))


@pytest.mark.parametrize("rule", KERNELS)
def test_small_retention_keeps_gate_gradients_accurate(rule):
    args = tokenwise.memory_args(rule, 16, 4, lead=(), seed=5)
    args[3][::3] = 1 - 1e-6                  # r = 1 - alpha down to 1e-6 inside a chunk
    args[3][1::5] = 1 - 1e-3
    if rule == "titans":
        args[5][2::4] = 1e-6                 # the momentum gate as well
    w = weights_for(kernel(rule, 8)(*args))
    got, want = grads(kernel(rule, 8), args, w), grads(kernel(rule, 8, "reference"), args, w)
    np.testing.assert_allclose(got[3], want[3], rtol=1e-9, atol=0)
    assert_close(got, want, rtol=1e-9, atol=1e-13)


@pytest.mark.parametrize("rule", KERNELS)
def test_zero_retention_runs_the_loop(rule, monkeypatch):
    args = tokenwise.memory_args(rule, 9, 3, lead=(), seed=2)
    args[3][4] = 1.0                          # r = 0: no logarithm
    monkeypatch.setattr(memory_periodic_chunked, "forward", None)   # must not be reached
    w = weights_for(kernel(rule, 4, "reference")(*args))
    assert_close(kernel(rule, 4)(*args), kernel(rule, 4, "reference")(*args), rtol=0, atol=0)
    assert_close(grads(kernel(rule, 4), args, w), grads(kernel(rule, 4, "reference"), args, w),
                 rtol=0, atol=0)


@pytest.mark.parametrize("rule", KERNELS)
def test_float32_matches_float64(rule):
    args = tokenwise.memory_args(rule, 40, 8, lead=(2,), seed=4)
    want = kernel(rule, 8, "reference")(*args)
    args32 = [a.astype(np.float32) for a in args]
    got = kernel(rule, 8)(*args32)
    for o, r in zip(got, want):
        assert o.dtype == np.float32
        np.testing.assert_allclose(o, r, rtol=1e-4, atol=1e-4 * np.max(np.abs(r)))
    w = weights_for(want)
    for g, r in zip(grads(kernel(rule, 8), args32, [x.astype(np.float32) for x in w]),
                    grads(kernel(rule, 8, "reference"), args, w)):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4 * np.max(np.abs(r)))


def test_bad_arguments_are_named():
    args = tokenwise.memory_args("delta", 6, 3, lead=(), seed=0)
    with pytest.raises(ValueError, match="period must be an int >= 1, got 0"):
        kernels.delta_rule_periodic(*args, period=0)
    with pytest.raises(ValueError, match="backend must be None, 'reference' or 'chunked'"):
        kernels.delta_rule_periodic(*args, period=2, backend="cuda")
    with pytest.raises(ValueError, match="`theta` must have shape"):
        kernels.delta_rule_periodic(*args[:4], args[4][:3], args[5], period=2)


# -- the CMS level: periodic kernel against the per-firing path -----------------------------------

def run_level(rule, period, pos, T, heads, forced, chunks=3, d=8, B=2):
    """`chunks` consecutive calls of `level_forward` from stream position `pos`, the state
    carried; per call the read, the gradients of sum(y * w) in the parameters and x, and the
    new state."""
    rng = np.random.default_rng(period + pos + T)
    lv = layers.init_level(rng, d, 1, "float64", heads=heads)
    for f in dataclasses.fields(lv):         # gates away from their biases: a varied memory
        if f.name.startswith(("w_a", "w_t", "w_e")):
            setattr(lv, f.name, getattr(lv, f.name) * 20)
    st = layers.init_level_state(B, d, rule, period, heads=heads)
    st.m[...] = rng.standard_normal(st.m.shape) * 0.3
    if st.s is not None:
        st.s[...] = rng.standard_normal(st.s.shape) * 0.3
    pend = tuple(a.copy() for a in st.pend)
    for a in pend:                            # pending tokens of an unfinished segment
        a[...] = rng.uniform(0.05, 0.6, a.shape) if a.ndim == st.m.ndim - 1 else \
            rng.standard_normal(a.shape) * 0.3
    st = layers.LevelState(m=st.m, s=st.s, pend=pend)
    results = []
    for _ in range(chunks):
        x, w = rng.standard_normal((2, B, T, d))
        out = {}

        def loss(lv, x):
            with kernels.force_reference(forced):
                y, new, _ = layers.level_forward(lv, x, st, period, pos, rule, heads=heads)
            out["y"], out["st"] = primal(y), new
            return np.sum(y * w)
        (g_lv, g_x), = autodiff(Reverse, loss, Active, Active(lv), Active(x))
        results.append((out["y"], g_lv, g_x, out["st"]))
        st, pos = out["st"], pos + T
    return results


def state_arrays(st):
    return [st.m] + ([st.s] if st.s is not None else []) + list(st.pend)


@pytest.mark.parametrize("rule", KERNELS)
@pytest.mark.parametrize("period,pos,T,heads", [
    (4, 3, 10, 1),       # pending tokens at the start, a tail at the end
    (3, 0, 9, 2),        # aligned chunks, two heads
    (8, 5, 3, 1),        # a chunk shorter than the period: firings in some chunks only
    (8, 7, 16, 2),       # the first token fires
])
def test_level_periodic_kernel_equals_per_firing_path(rule, period, pos, T, heads):
    new = run_level(rule, period, pos, T, heads, forced=False)
    ref = run_level(rule, period, pos, T, heads, forced=True)
    for (y, g_lv, g_x, st), (y0, g_lv0, g_x0, st0) in zip(new, ref):
        scale = np.max(np.abs(y0))
        np.testing.assert_allclose(y, y0, rtol=1e-11, atol=1e-13 * scale)
        for f in dataclasses.fields(g_lv):
            a, b = getattr(g_lv, f.name), getattr(g_lv0, f.name)
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12 * np.max(np.abs(b)),
                                       err_msg=f.name)
        np.testing.assert_allclose(g_x, g_x0, rtol=1e-9, atol=1e-12 * np.max(np.abs(g_x0)))
        for a, b in zip(state_arrays(st), state_arrays(st0)):
            assert a.shape == b.shape and type(a) is np.ndarray
            np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-13)


def test_level_runs_the_periodic_kernel_by_default(monkeypatch):
    calls = []
    real = kernels.delta_rule_periodic

    def spy(*a, **kw):
        calls.append(kw["period"])
        return real(*a, **kw)
    monkeypatch.setattr(kernels, "delta_rule_periodic", spy)
    run_level("delta", 4, 1, 6, 1, forced=False, chunks=1)
    assert calls == [4]
    run_level("delta", 4, 1, 6, 1, forced=True, chunks=1)       # force_reference: per firing
    assert calls == [4]


def test_benchmark_section_runs_and_gradients_agree():
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "kernels.py"
    spec = importlib.util.spec_from_file_location("kernel_benchmark", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = bench.run_periodic([((2,), 12, 4, 3)], 1)
    assert {r["pair"] for r in rows} == {"delta", "hebbian", "titans"}
    assert all(r["grad_check"] and r["speedup"] > 0 for r in rows)
