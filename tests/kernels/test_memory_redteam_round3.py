"""The memory rules' default dispatch (chunkwise-parallel on NumPy, periodic levels in the chunked
form) against the sequential loop (`kernels.force_reference`) on inputs the other kernel tests
leave out: momentum gates in the subnormal range, empty batches with sequences long enough to be
chunked, keys that erase one direction of the memory while another keeps its decay, batches
whose entries differ in scale by many orders, and dtypes other than float32 / float64.
Comparisons use `test_memory_scale.compare` (tolerance relative to each result's scale) or,
where a finding is judged, a float64 / long double run of the loop as the exact answer.
"""
import numpy as np
import pytest

import kernels
from test_memory_scale import NAMES, RTOL, compare, kernel, make_args, mismatch
from weighted import grads, weights_for


def _const(c):
    return lambda rng, shape, dtype: np.full(shape, c)


def errors(results, exact, dtype) -> list:
    """Each result's largest error against `exact`, relative to the exact result's scale
    (errors below the smallest normal number of `dtype` count as 0)."""
    tiny = float(np.finfo(dtype).tiny)
    out = []
    for got, want in zip(results, exact):
        got, want = np.asarray(got, np.longdouble), np.asarray(want, np.longdouble)
        err = max(0.0, float(np.max(np.abs(got - want), initial=0.0)) - tiny)
        out.append(err / max(float(np.max(np.abs(want), initial=0.0)), tiny))
    return out


def against_exact(rule, period, args, exact_dtype):
    """{result: (default's error, loop's error)}, both relative to the scale of the loop's
    result in `exact_dtype` on the same inputs (outputs, final states, every gradient)."""
    wide = tuple(a.astype(exact_dtype) for a in args)
    fn = kernel(rule, period)
    with np.errstate(all="ignore"):
        with kernels.force_reference():
            exact = list(fn(*wide))
            weights = weights_for(exact, seed=1)
            exact += grads(fn, wide, [w.astype(exact_dtype) for w in weights])
            narrow = [w.astype(args[0].dtype) for w in weights]
            loop = list(fn(*args)) + list(grads(fn, args, narrow))
        default = list(fn(*args)) + list(grads(fn, args, narrow))
    names = [f"out{i}" for i in range(len(exact) - len(args))] + ["d" + n for n in NAMES[rule]]
    return dict(zip(names, zip(errors(default, exact, args[0].dtype),
                              errors(loop, exact, args[0].dtype))))


# -- findings ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("period", [None, 16])
def test_subnormal_momentum_gate_gradient(period):
    """eta = 1e-44 in float32 (a sigmoid of a logit near -101): positive and finite, so the
    chunked form runs. Measured: deta 3e-2 of its scale from the float64 loop, the float32 loop
    6e-8."""
    args = make_args("titans", 100, 8, lead=(2,), dtype=np.float32, eta=_const(1e-44))
    errs = against_exact("titans", period, args, np.float64)
    assert {n: e for n, e in errs.items() if e[0] > 8 * e[1] + 1e-6} == {}


def test_titans_empty_batch_backward():
    """lead (2, 0) with 40 tokens: the loop returns empty gradients, the default raises
    ValueError (zero-size array to reduction operation maximum)."""
    args = make_args("titans", 40, 8, lead=(2, 0))
    assert compare(kernel("titans"), args, NAMES["titans"]) == {}


def one_direction_args(rule, T, d, dtype, seed=0):
    """Every key is e_1, values 0, queries e_1, ``theta = (1 - alpha) u`` with u in [0.9, 1]:
    each token scales the memory's first column by ``1 - alpha - theta < 0.1 (1 - alpha)``, the
    others only decay. The reads and (for Titans) the momentum are the erased column: tiny,
    and the loop computes them to full relative precision."""
    rng = np.random.default_rng(seed)
    named = dict(zip(NAMES[rule], make_args(rule, T, d, lead=(2,), seed=seed)))
    lead = (2,)
    k = np.zeros(lead + (T, d))
    k[..., 0] = 1.0
    named.update(k=k, v=np.zeros(lead + (T, d)), q=k.copy(),
                 alpha=rng.uniform(0.0, 0.3, lead + (T,)))
    named["theta"] = (1 - named["alpha"]) * rng.uniform(0.9, 1.0, lead + (T,))
    if rule == "titans":
        named["eta"] = rng.uniform(0.0, 0.3, lead + (T,))
    return tuple(named[n].astype(dtype) for n in NAMES[rule])


@pytest.mark.parametrize("rule,dtype,period,d", [
    # measured before `memory_chunk_precision.updates_cancel` (default against the loop):
    ("titans", np.float64, None, 2),     # s_final 4e-10 of scale (loop 4e-15)
    ("delta", np.float64, 16, 2),        # dtheta 1e5 times its scale (loop 4e-15)
    ("titans", np.float64, 16, 2),       # s_final 3e-10, dalpha 2e-11, ds0 8e-12 (loop < 1e-15)
    ("titans", np.float32, 16, 2),       # s_final 0.66, dtheta 3e-2 of scale (loop 3e-6, 3e-7)
    ("titans", np.float32, None, 2),     # s_final 0.41 (loop 3e-6)
    ("delta", np.float32, 16, 2),        # dtheta 3e13 times its scale, dalpha 1e-2 (loop 3e-6)
    # chunks of 32 tokens, fewer than d: the transitions are not checked there
    ("delta", np.float64, 64, 64),       # dtheta 1e63 times its scale (loop 9e-13)
    ("titans", np.float32, None, 64),    # s_final 12 times its scale (loop 0)
])
def test_keys_erasing_one_direction(rule, dtype, period, d):
    """The whole transition keeps the decaying directions' norm (the Frobenius check passes);
    the updates along the erased key cancel (`memory_chunk_precision.updates_cancel`)."""
    args = one_direction_args(rule, 64 if d == 2 else 128, d, dtype)
    errs = against_exact(rule, period, args, np.longdouble)
    worse = {n: e for n, e in errs.items() if e[0] > 8 * e[1] + RTOL[dtype] / 10}
    assert worse == {}


@pytest.mark.parametrize("rule,period", [("delta", None), ("delta", 16), ("titans", None),
                                         ("titans", 16)])
def test_erased_keys_writing_values_stay_chunked(rule, period):
    """Every key e_1 with theta near 1 - alpha (the updates' WY coefficients cancel) but random
    values written: the updates are of the values' size, the cancellation's error is rounding
    next to them, and the call stays chunked (no sequential loop) with the loop's results."""
    args = list(one_direction_args(rule, 64, 2, np.float64))
    i = NAMES[rule].index("v")
    args[i] = np.random.default_rng(3).standard_normal(args[i].shape)
    fn = kernel(rule, period)
    calls = []
    real = kernels.memory_chunk_precision.updates_cancel

    def spy(erased, *a, **k):
        calls.append((erased is not None, real(erased, *a, **k)))
        return calls[-1][1]
    with pytest.MonkeyPatch.context() as mp:
        for mod in (kernels.memory_chunk_precision, kernels.memory_chunked,
                    kernels.memory_chunked_titans):
            mp.setattr(mod, "updates_cancel", spy)
        assert compare(fn, tuple(args), NAMES[rule]) == {}
    assert calls and all(erased for erased, _ in calls) and not any(c for _, c in calls)


# -- coverage ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("rule", ["delta", "hebbian"])
@pytest.mark.parametrize("period", [None, 16])
def test_empty_batch_with_a_chunked_length(rule, period):
    for lead in ((0,), (3, 0)):
        assert compare(kernel(rule, period), make_args(rule, 40, 8, lead=lead),
                       NAMES[rule]) == {}, lead


@pytest.mark.parametrize("dtype,eta", [(np.float32, 1e-38), (np.float64, 1e-300)])
@pytest.mark.parametrize("period", [None, 16])
def test_tiny_normal_momentum_gate(dtype, eta, period):
    """The smallest normal momentum gates keep deta as accurate as the loop's."""
    args = make_args("titans", 100, 8, lead=(2,), dtype=dtype, eta=_const(eta))
    assert compare(kernel("titans", period), args, NAMES["titans"]) == {}


@pytest.mark.parametrize("rule", list(NAMES))
@pytest.mark.parametrize("period", [None, 16])
def test_batch_entries_of_very_different_scales(rule, period):
    """One batch entry's values and initial states 1e-20 times the other's: every entry of
    every result agrees with the loop relative to that entry's own scale."""
    args = list(make_args(rule, 200, 8, lead=(2,)))
    for i, n in enumerate(NAMES[rule]):
        if n in ("v", "m0", "s0"):
            args[i] = args[i] * np.array([1e-20, 1.0]).reshape(2, 1, 1)
    fn = kernel(rule, period)
    got = list(fn(*args))
    weights = weights_for(got, seed=1)
    got += grads(fn, args, weights)
    with kernels.force_reference():
        want = list(fn(*args)) + list(grads(fn, args, weights))
    for j, (g, w) in enumerate(zip(got, want)):
        for b in range(2):
            assert mismatch(g[b], w[b], 1e-9) is None, (j, b)


@pytest.mark.parametrize("dtype", [np.float16, np.longdouble])
@pytest.mark.parametrize("rule", list(NAMES))
@pytest.mark.parametrize("period", [None, 8])
def test_other_float_dtypes_equal_the_loop(dtype, rule, period):
    """float16 and long double arguments are accepted; the default dispatch returns the
    loop's dtype and values (float16: within its rounding)."""
    args = make_args(rule, 40, 4, lead=(2,), dtype=dtype)
    fn = kernel(rule, period)
    with np.errstate(all="ignore"):
        got = list(fn(*args))
        weights = weights_for(got, dtype=dtype)
        got += grads(fn, args, weights)
        with kernels.force_reference():
            want = list(fn(*args)) + list(grads(fn, args, weights))
    rtol = 2e-2 if dtype == np.float16 else 1e-12
    for j, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype == dtype, j
        assert mismatch(g.astype(np.float64), w.astype(np.float64), rtol) is None, j
