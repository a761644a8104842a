"""The two ways the chunked Titans memory carries the pair ``[M S]`` across chunks on NumPy
(`memory_chunked_titans._by_transition`: the ``[2d, 2d]`` transition matrices where d <= C,
the per-chunk updates elsewhere), each forced in turn and compared with the sequential loop:
over the gates' whole range, at overflow and with NaN inputs (the cases of
`test_memory_scale`), and at d = 64 with a shorter last chunk. The default dispatch picks one
form by the dimension, so without forcing, the small-d edge cases would test one form only."""
import numpy as np
import pytest

import kernels
from kernels import memory_chunked_titans, memory_ref
from kernels.memory_chunked import NumpyOps
from test_memory_scale import CASES, NAMES, compare, make_args

TITANS = kernels.titans_rule


@pytest.fixture(params=[True, False], ids=["transition", "updates"])
def form(request, monkeypatch):
    """Force one carry form on NumPy (an ops with its own carry keeps the transition)."""
    monkeypatch.setattr(memory_chunked_titans, "_by_transition",
                        lambda ops, C, d: ops is not NumpyOps or request.param)
    return request.param


def test_the_forced_form_is_the_one_run(form):
    args = make_args("titans", 40, 8, lead=(2,))
    x, init, _ = kernels.memory._inputs("titans", args)
    _, _, saved = memory_chunked_titans.forward(memory_ref.RULES["titans"], x, init)
    assert all((ch.Phi is not None) == form for ch in saved.blocks)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", CASES)
def test_each_form_equals_reference_over_gate_range(form, dtype, case):
    args = make_args("titans", 200, 8, lead=(2,), dtype=dtype, **CASES[case])
    assert compare(TITANS, args, NAMES["titans"]) == {}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_each_form_gives_the_reference_overflow(form, dtype):
    args = make_args("titans", 200, 8, lead=(2,), dtype=dtype, key_scale=1e3)
    with np.errstate(all="ignore"), kernels.force_reference():
        assert not all(np.isfinite(o).all() for o in TITANS(*args))     # it does overflow
    assert compare(TITANS, args, NAMES["titans"]) == {}


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_each_form_spreads_nan_and_inf_as_the_reference(form, bad):
    args = list(make_args("titans", 150, 8, lead=(2,)))
    args[1] = args[1].copy()
    args[1][1, 70, 3] = bad
    assert compare(TITANS, tuple(args), NAMES["titans"]) == {}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_each_form_at_d_64_with_a_shorter_last_chunk(form, dtype):
    args = make_args("titans", 130, 64, lead=(2,), dtype=dtype)
    assert compare(TITANS, args, NAMES["titans"]) == {}
