"""Chunk transitions that decay far faster than the retention alone: every token's key erases
the memory along a few directions (d = 1 or 2, ``theta |k|^2`` near ``1 - alpha``, values 0),
so the state after a chunk is many orders below the retention's decay of it. The WY form
computes that transition as the decay minus the delta corrections, a difference that cancels;
the default dispatch must still agree with the sequential loop (`kernels.force_reference`) to
`test_memory_scale.RTOL` of each result's own scale: the final states, and the gradients with
cotangents on every output or on the final states only (then the initial states' gradients
are carried by the transitions alone). Per-token rules (chunks of 16) and periodic ones
(sub-chunks of a long period), delta and Titans.

Also: ordinary inputs keep the chunked form (the check for cancellation does not send them
to the loop), and long periods are cut into sub-chunks.
"""
import numpy as np
import pytest

from kernels import memory, memory_chunked, memory_chunked_titans, memory_periodic, memory_ref
from test_memory_scale import NAMES, RTOL, compare, grad_mismatches, kernel, make_args
from weighted import weights_for


def erasing_args(rule, T, d, dtype, seed=0):
    """Unit keys, zero values, ``theta`` in [0.7, 1] against ``1 - alpha`` in [0.7, 1]: each
    token scales the memory along its key by ``1 - alpha - theta`` (|.| < 0.3)."""
    args = list(make_args(rule, T, d, lead=(2,), dtype=dtype, seed=seed,
                          theta=lambda rng, shape, dt: rng.uniform(0.7, 1.0, shape)))
    args[1] = args[1] * 0
    return tuple(args)


@pytest.mark.parametrize("rule", ["delta", "titans"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("d", [1, 2])
@pytest.mark.parametrize("period", [None, 16, 128])
def test_erasing_keys_equal_the_reference(rule, dtype, d, period):
    """Measured before the check for cancellation: relative errors up to 1e9 (float64) and inf
    (float32: the loop underflows to 0 where the chunked form left 1e-30) at d = 1, 1e-9 to
    1e32 at d = 2, already in chunks of 16 tokens."""
    args = erasing_args(rule, 100 if period is None else 2 * period + 3, d, dtype)
    fn = kernel(rule, period)
    assert compare(fn, args, NAMES[rule]) == {}
    with np.errstate(all="ignore"):
        weights = weights_for(fn(*args), seed=2, dtype=dtype)
        assert grad_mismatches(fn, args, [None] + weights[1:], NAMES[rule], RTOL[dtype]) == {}


def _per_token_chunked(rule, args) -> bool:
    """Whether the default dispatch runs the per-token rule `rule` in the chunked form."""
    module = memory_chunked_titans if rule == "titans" else memory_chunked
    x, init, _ = memory._inputs(rule, args)
    with np.errstate(all="ignore"):
        saved = module.forward(memory_ref.RULES[rule], x, init)[2]
    return isinstance(saved, memory_chunked.Saved)


def _periodic_chunked(rule, args, period) -> bool:
    """Whether the default dispatch runs the periodic rule `rule` in the chunked form."""
    lay = memory_periodic._Layout(rule, args, period)
    with np.errstate(all="ignore"):
        return memory_periodic._states(rule, lay, "chunked")[2] == "chunked"


@pytest.mark.parametrize("rule", ["delta", "titans"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_ordinary_inputs_keep_the_chunked_form(rule, dtype):
    """Unit keys and the default gates at d = 8 and 16 (chunks of 16 tokens, not fewer than
    d, so the transitions are checked), periods of 64 and 128 cut into sub-chunks, and the
    default model's level (d = 16 per head, period 8, fewer tokens than d: never checked)."""
    for d in (8, 16):
        assert _per_token_chunked(rule, make_args(rule, 256, d, lead=(2,), dtype=dtype)), d
    for d, period in ((8, 128), (16, 64), (16, 8)):
        args = make_args(rule, 2 * period + 3, d, lead=(8, 4) if period == 8 else (2,),
                         dtype=dtype)
        assert _periodic_chunked(rule, args, period), (d, period)


@pytest.mark.parametrize("rule", ["delta", "titans"])
def test_erasing_keys_run_the_loop(rule):
    """Where chunks of 16 tokens already cancel (d = 1, ``theta`` near ``1 - alpha``), the
    default dispatch runs the sequential loop, per-token and periodic."""
    args = erasing_args(rule, 100, 1, np.float64)
    assert not _per_token_chunked(rule, args)
    assert not _periodic_chunked(rule, args, 32)


def test_long_periods_are_cut_into_sub_chunks():
    """A sub-chunk is at most `memory_chunked.chunk_size(d)` tokens and divides the period;
    a period with no such divisor of a useful length stays whole."""
    for d in (1, 8, 16, 64, 128):
        longest = memory_chunked.chunk_size(d)
        for period in (2, 8, 16, 31, 64, 96, 100, 128, 127, 512):
            m = memory_periodic.sub_chunks(period, d)
            assert period % m == 0
            assert period // m <= longest or m == 1, (d, period, m)
            if period <= longest:
                assert m == 1
    assert memory_periodic.sub_chunks(128, 8) == 8
    assert memory_periodic.sub_chunks(127, 8) == 1
