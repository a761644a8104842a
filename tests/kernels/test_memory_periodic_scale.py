"""The periodic memories (`kernels.delta_rule_periodic`, ...; a CMS level of period p as one
call) by the default dispatch against the sequential loop (`kernels.force_reference`), as
`test_memory_scale` does for the per-token rules: outputs, final states and the gradients of
every input (random cotangents on every output) at sequence scale, periods 2 to 128 with
sequences that do and do not fill their last chunk or are shorter than one, batch and head axes,
float32 and float64, the gates' whole range, overflow, NaN and inf in inputs and cotangents,
strided inputs and argument errors. Tolerances: `test_memory_scale.RTOL` of each result's scale.
"""
import numpy as np
import pytest

import kernels
import test_memory_scale as scale
from test_memory_scale import (CASES, NAMES, RTOL, compare, grad_mismatches, kernel,
                               make_args, mismatch, with_bad_entry)
from weighted import grads, weights_for

RULES = tuple(NAMES)
PERIODS = (2, 3, 8, 16, 64, 128)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("T,d,period,lead,dtype", [
    (1024, 16, 16, (2, 2), np.float64),
    (1024, 8, 3, (2,), np.float32),
    (1000, 16, 128, (2, 2), np.float32),      # 7 whole chunks and a tail of 104 tokens
    (1030, 32, 64, (), np.float64),
])
def test_default_equals_reference_at_scale(rule, T, d, period, lead, dtype):
    args = make_args(rule, T, d, lead=lead, dtype=dtype)
    assert compare(kernel(rule, period), args, NAMES[rule]) == {}


@pytest.mark.parametrize("rule", RULES)
def test_default_equals_reference_at_4096_tokens(rule):
    args = make_args(rule, 4096, 8, lead=(2, 3), dtype=np.float32, alpha=scale._wipe,
                     theta=scale._uniform(0.0, 3.0), eta=scale._uniform(0.0, 0.999))
    assert compare(kernel(rule, 64), args, NAMES[rule]) == {}


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("period", PERIODS)
def test_lengths_around_the_period(rule, dtype, period):
    """Shorter than a period (nothing written), one token short of it, exactly it, one past,
    several chunks and a tail; no leading axes, one, and two."""
    for T in sorted({max(1, period - 1), period, period + 1, 3 * period + 1}):
        for lead in ((), (3,), (2, 3)):
            args = make_args(rule, T, 8, lead=lead, dtype=dtype, seed=T + period)
            assert compare(kernel(rule, period), args, NAMES[rule]) == {}, (T, lead)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("period", [2, 16, 128])
def test_default_equals_reference_over_gate_range(rule, dtype, case, period):
    """float32 Titans with raw keys of 1e3 at period 128 is the case where the gradient of s0
    (scale 5e-12 against 10 for m0) is carried only by a transition that erases the state:
    one chunk of 128 tokens lost it to cancellation (sub-chunks of 16 keep it)."""
    scale.test_default_equals_reference_over_gate_range(rule, dtype, case, period)


@pytest.mark.parametrize("rule", ["delta", "titans"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("how", ["theta_50_raw_keys", "keys_1e3", "project_back"])
@pytest.mark.parametrize("period", [3, 96])      # 96: two whole chunks of the 200 tokens
def test_overflow_gives_the_reference_nan_and_inf(rule, dtype, how, period):
    scale.test_overflow_gives_the_reference_nan_and_inf(rule, dtype, how, period)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("period", [3, 64])
def test_nan_and_inf_inputs_spread_as_in_the_reference(rule, bad, period):
    """One bad entry in each argument in turn: in the first token, inside a whole chunk, at
    a chunk's last token, and in the tail that writes nothing."""
    T = 2 * period + period // 2 + 1
    for name in NAMES[rule]:
        for t in (0, period + 1, 2 * period - 1, T - 1):
            args = with_bad_entry(make_args(rule, T, 4, lead=(2,), seed=t), NAMES[rule], name,
                                  t, bad)
            assert compare(kernel(rule, period), args, NAMES[rule]) == {}, (name, t)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("period", [3, 64])
@pytest.mark.parametrize("where", ["read in a chunk", "chunk's last read", "tail read",
                                   "final state"])
def test_nan_cotangent_spreads_as_in_the_reference(rule, period, where):
    T = 3 * period + 2
    args = make_args(rule, T, 8, lead=(2,))
    fn = kernel(rule, period)
    weights = weights_for(fn(*args), seed=2)
    at = {"read in a chunk": (0, (1, period + 1, 2)), "chunk's last read": (0, (1, period - 1, 2)),
          "tail read": (0, (1, T - 1, 2)), "final state": (len(weights) - 1, (1, 2, 3))}[where]
    weights[at[0]][at[1]] = np.nan
    with np.errstate(all="ignore"):
        assert grad_mismatches(fn, args, weights, NAMES[rule], 1e-10) == {}


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("which", ["reads only", "final states only"])
def test_cotangent_on_some_outputs(rule, which):
    """Cotangents on the reads alone, or on the final states alone (then only the recurrence
    carries them back)."""
    args = make_args(rule, 8 * 16 + 5, 8, lead=(2,))
    fn = kernel(rule, 16)
    weights = weights_for(fn(*args), seed=3)
    weights = ([weights[0]] + [None] * (len(weights) - 1) if which == "reads only"
               else [None] + weights[1:])
    assert grad_mismatches(fn, args, weights, NAMES[rule], RTOL[np.float64]) == {}


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("period", [3, 16])
def test_strided_inputs_equal_contiguous_ones(rule, period):
    args = make_args(rule, 100, 8, lead=(2,))
    strided = scale.strided_views(args)
    strided[2] = np.ascontiguousarray(args[2][:, ::-1])[:, ::-1]    # negative strides
    assert not strided[0].flags.c_contiguous and strided[2].strides[1] < 0
    fn = kernel(rule, period)
    with kernels.force_reference():
        want = fn(*args)
        weights = weights_for(want)
        want_g = grads(fn, args, weights)
    for g, w in zip(fn(*strided), want):
        assert mismatch(g, w, 1e-12) is None
    for n, g, w in zip(NAMES[rule], grads(fn, strided, weights), want_g):
        assert mismatch(g, w, 1e-10) is None, n


@pytest.mark.parametrize("rule", RULES)
def test_argument_errors_equal_the_reference(rule):
    scale.test_argument_errors_equal_the_reference(rule, period=8)


# -- transitions that decay far faster than the retention ----------------------------------------

@pytest.mark.filterwarnings("ignore:divide by zero")
@pytest.mark.parametrize("rule,dtype", [("delta", np.float32), ("delta", np.float64),
                                        ("titans", np.float32), ("titans", np.float64)])
def test_transition_that_decays_within_a_long_chunk(rule, dtype):
    """d = 1 and zero values at period 128: every token's key hits the one direction, so the
    memory M0 is erased far faster than the retention decays it; the final state is tiny, and
    the loop computes it to full relative precision. The chunked form as one WY chunk of 128
    tokens computed it as a difference that cancels (errors 0.2x to 1e13x of its size);
    cotangents on the final states alone reach the initial states only through it."""
    args = list(make_args(rule, 2 * 128 + 3, 1, lead=(2,), dtype=dtype))
    args[1] = args[1] * 0
    fn = kernel(rule, 128)
    assert compare(fn, tuple(args), NAMES[rule]) == {}
    with np.errstate(all="ignore"):
        weights = weights_for(fn(*args), seed=4, dtype=dtype)
        assert grad_mismatches(fn, tuple(args), [None] + weights[1:], NAMES[rule],
                               RTOL[dtype]) == {}
