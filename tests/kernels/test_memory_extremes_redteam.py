"""Numerical extremes of the memory rules' default dispatch (chunkwise-parallel on NumPy) against
the sequential loop (`kernels.force_reference`) and central differences: retentions whose
product over a chunk leaves the dtype's normal range while the state they decay is large enough
for the loop's step-by-step products to stay normal; tokens that reset the state in the middle
of a chunk among learning rates of 0, 1e-8 and 1e3 and keys of norm 1e-6 and 1e3 on lengths off
the chunk grid; gradients of every input at gates of 0, 1e-12, 1 - 1e-3 and 1 (momentum)
against central differences. Tolerances as `test_memory_scale.compare` (each result's own
scale, NaN and inf in the same places).
"""
import numpy as np
import pytest

import kernels

from test_memory_scale import NAMES, compare, kernel
from weighted import grads, weighted, weights_for

RULES = ("delta", "hebbian", "titans")


def _args(rule, T, d, dtype, alpha, theta=0.5, eta=0.5, key_scale=1.0, m0_scale=0.3,
          s0_scale=0.3, v_scale=1.0, quiet_queries=0, lead=(), seed=0):
    rng = np.random.default_rng(seed)
    k, v, q = rng.standard_normal((3,) + lead + (T, d))
    k *= key_scale / np.linalg.norm(k, axis=-1, keepdims=True)
    v *= v_scale
    q[..., :quiet_queries, :] = 0
    shape = lead + (T,)

    def gate(g):
        return g(rng, shape) if callable(g) else np.full(shape, g)
    named = dict(k=k, v=v, q=q, alpha=gate(alpha), theta=gate(theta), eta=gate(eta),
                 m0=rng.standard_normal(lead + (d, d)) * m0_scale,
                 s0=rng.standard_normal(lead + (d, d)) * s0_scale)
    return tuple(np.asarray(named[n], dtype) for n in NAMES[rule])


# -- a large state under retentions whose product over the chunk underflows ----------------------

def _first(n, r):
    """alpha = 1 - r for the first n tokens, 0 after."""
    return lambda rng, shape: np.where(np.arange(shape[-1]) < n, 1 - r, 0.0)


# (period, dtype, d, T, tokens of small retention, r, |m0|): the chunk (or period) spans the
# small retentions; their product underflows (float32 1e-48, float64 1e-341) while the loop's
# state m0 * r * r * ... stays normal (1e-28, 1e-51).
UNDERFLOW = {
    "float32": (None, np.float32, 4, 16, 8, 1e-6, 1e20),
    "float32_period_16": (16, np.float32, 4, 16, 8, 1e-6, 1e20),
    "float64_d40": (None, np.float64, 40, 32, 22, 3 * 2.0 ** -53, 1e290),
    "float64_period_32": (32, np.float64, 4, 32, 22, 3 * 2.0 ** -53, 1e290),
}
# Periodic Titans in float64 (period 32) equals the loop on that call; its float32 form does not.


@pytest.mark.parametrize("rule,case", [(r, c) for c in UNDERFLOW for r in RULES
                                       if (r, c) != ("titans", "float64_period_32")])
def test_large_state_under_an_underflowing_chunk_decay(rule, case):
    """No values written (v = 0) and no learning (theta = 0, s0 = 0), queries 0 on the decaying
    tokens: every result is the initial state times the decay, which the loop keeps normal (the
    chunked forms check for it, `memory_chunk_precision.decays_underflow`, and run the loop)."""
    period, dtype, d, T, n, r, scale = UNDERFLOW[case]
    args = _args(rule, T, d, dtype, _first(n, r), theta=0.0, m0_scale=scale, s0_scale=0.0,
                 v_scale=0.0, quiet_queries=n)
    if case != "float64_period_32":
        assert compare(kernel(rule, period), args, NAMES[rule]) == {}
        return
    # Cut into sub-chunks of 16 tokens, no decay within one underflows: the chunked form runs,
    # and its dalpha is right where the loop's is not. The loop carries the final state's
    # cotangent back one retention at a time; past 21 of them it is 0, and the first token's
    # dalpha with it, where all 22 equal -M_T / r * weights (by symmetry, as the chunked form's).
    assert compare(kernel(rule, period), args, NAMES[rule], backward=False) == {}
    fn = kernel(rule, period)
    with np.errstate(all="ignore"):
        dalpha = grads(fn, args, weights_for(fn(*args), seed=1))[NAMES[rule].index("alpha")]
    np.testing.assert_allclose(dalpha[:n], dalpha[1], rtol=1e-12)
    assert dalpha[1] != 0


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("period", [None, 16])
def test_large_state_under_a_normal_chunk_decay(rule, period):
    """The same calls with 5 tokens of small retention (product 1e-30, normal): equal."""
    args = _args(rule, 16, 4, np.float32, _first(5, 1e-6), theta=0.0, m0_scale=1e20,
                 s0_scale=0.0, v_scale=0.0, quiet_queries=5)
    assert compare(kernel(rule, period), args, NAMES[rule]) == {}


# -- resets inside a chunk among extreme learning rates and key norms ----------------------------

def _resets(rng, shape):
    """alpha uniform in [0, 0.3], exactly 1 (a reset) at tokens 5, 21, 37, ... (mid-chunk)."""
    a = rng.uniform(0, 0.3, shape)
    a[..., 5::16] = 1.0
    return a


@pytest.mark.parametrize("rule", ["delta", "titans"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("period", [None, 5])
def test_mid_chunk_resets_with_extreme_rates_and_keys(rule, dtype, period):
    """37 tokens (off the chunk grid), lead (2,): every pair of theta in {0, 1e-8, 1e3} and
    key norm in {1e-6, 1e3} (theta |k|^2 from 1e-20 to 1e9: nothing learnt, or the state
    blown past overflow, where both dispatches must give the loop's inf and NaN)."""
    for theta in (0.0, 1e-8, 1e3):
        for key_scale in (1e-6, 1e3):
            args = _args(rule, 37, 4, dtype, _resets, theta=theta, key_scale=key_scale,
                         eta=lambda rng, s: rng.choice([0.0, 1e-12, 1.0], size=s), lead=(2,),
                         seed=1)
            assert compare(kernel(rule, period), args, NAMES[rule]) == {}, (theta, key_scale)


# -- gradients at extreme gates against central differences -------------------------------------

@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("period", [None, 4])
def test_gradients_at_extreme_gates_match_central_differences(rule, period):
    """19 tokens (chunked by default), d = 4, float64: alpha per token from {0, 1e-12, 0.5,
    0.9, 1 - 1e-3}, eta from {0, 1e-12, 0.5, 1 - 1e-3, 1}, theta up to 1.5; the gradient of
    every input at a few entries against central differences (every result is a polynomial in
    the gates, so steps across 0 and 1 are fine)."""
    args = _args(rule, 19, 4, np.float64,
                 lambda rng, s: rng.choice([0.0, 1e-12, 0.5, 0.9, 1 - 1e-3], size=s),
                 theta=lambda rng, s: rng.uniform(0, 1.5, s),
                 eta=lambda rng, s: rng.choice([0.0, 1e-12, 0.5, 1 - 1e-3, 1.0], size=s),
                 lead=(2,), seed=2)
    fn = kernel(rule, period)
    w = weights_for(fn(*args))
    got = grads(fn, args, w)
    rng = np.random.default_rng(3)
    h = 1e-6
    for i, name in enumerate(NAMES[rule]):
        scale = float(np.max(np.abs(got[i])))
        for _ in range(3):
            idx = tuple(int(rng.integers(0, s)) for s in args[i].shape)
            plus, minus = list(args), list(args)
            plus[i], minus[i] = args[i].copy(), args[i].copy()
            plus[i][idx] += h
            minus[i][idx] -= h
            fd = (float(weighted(fn(*plus), w)) - float(weighted(fn(*minus), w))) / (2 * h)
            assert abs(fd - got[i][idx]) <= 1e-6 * scale + 1e-12, (name, idx, fd, got[i][idx])


@pytest.mark.parametrize("rule", RULES)
def test_an_ordinary_state_under_an_underflowing_decay_keeps_the_chunked_form(rule, monkeypatch):
    """Where the decayed state is below the rounding of what the chunk writes (a state of 1e8
    under retentions of 1e-6: 1e-34 after seven, values written), the chunked form runs, not
    the loop."""
    import kernels.memory_chunked as chunked
    import kernels.memory_chunked_titans as chunked_titans

    def refuse(*args, **kwargs):
        raise AssertionError("the sequential loop ran")
    args = _args(rule, 16, 4, np.float32, _first(8, 1e-6), m0_scale=1e8)
    with np.errstate(all="ignore"), kernels.force_reference():
        want = kernel(rule)(*args)
    for module in (chunked, chunked_titans):
        monkeypatch.setattr(module, "sequential_forward", refuse)
    got = kernel(rule)(*args)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5 * np.abs(w).max())
