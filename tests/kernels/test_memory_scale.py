"""The default dispatch of the memory rules (chunkwise-parallel on NumPy) against the sequential
loop (`kernels.force_reference`) at sequence scale and over the gates' whole range: outputs, final
states and gradients (random cotangents on every output, gradients of every input) agree to a
tolerance relative to each result's scale, and NaN / inf appear in exactly the same places
(inputs holding them, memories that overflow). Also the argument errors and strided inputs.

Run as a script for the larger sweep (T up to 16384, d up to 64, peak memory):
``python tests/kernels/test_memory_scale.py --help``.
"""
import argparse
import time
import tracemalloc

import numpy as np
import pytest

import kernels
from kernels import memory_chunked, memory_chunked_titans, memory_ref
from weighted import grads, weights_for

RULES = {"delta": kernels.delta_rule, "hebbian": kernels.hebbian_rule,
         "titans": kernels.titans_rule}
PERIODIC = {"delta": kernels.delta_rule_periodic, "hebbian": kernels.hebbian_rule_periodic,
            "titans": kernels.titans_rule_periodic}
NAMES = {"delta": ("k", "v", "q", "alpha", "theta", "m0"),
         "titans": ("k", "v", "q", "alpha", "theta", "eta", "m0", "s0"),
         "hebbian": ("k", "v", "q", "alpha", "m0")}
# Relative to the largest finite value of each result: rounding of two orders of operations.
RTOL = {np.float64: 1e-10, np.float32: 1e-4}


def _wipe(rng, shape, dtype):
    """Retention 1 - alpha at its smallest (one ulp of 1) for 48 tokens of every 64, ordinary
    after: cumulative log decays reach -800 (float32) inside a chunk."""
    tiny = 1 - float(np.finfo(dtype).epsneg)
    return np.where(np.arange(shape[-1]) % 64 < 48, tiny, rng.uniform(0.0, 0.1, shape))


def _mixed(rng, shape, dtype):
    """Per token: alpha exactly 0, exactly 1, one ulp below 1, 1e-12, or 0.5."""
    below_one = 1 - float(np.finfo(dtype).epsneg)
    return rng.choice(np.array([0.0, 1.0, below_one, 1e-12, 0.5]), size=shape)


def _uniform(lo, hi):
    return lambda rng, shape, dtype: rng.uniform(lo, hi, shape)


def _const(c):
    return lambda rng, shape, dtype: np.full(shape, c)


# Gate and key settings: each a dict of gate makers (alpha, theta, eta) and key options.
CASES = {
    "ordinary": {},
    "alpha_0": dict(alpha=_const(0.0)),
    "alpha_1": dict(alpha=_const(1.0)),
    "alpha_1e-12": dict(alpha=_const(1e-12)),
    "alpha_below_1": dict(alpha=lambda rng, s, dt: np.full(s, 1 - float(np.finfo(dt).epsneg))),
    "alpha_mixed": dict(alpha=_mixed),
    "alpha_wipe": dict(alpha=_wipe),
    "theta_0": dict(theta=_const(0.0)),
    "theta_0_to_3": dict(theta=_uniform(0.0, 3.0)),
    "theta_5_raw_keys": dict(theta=_const(5.0), unit_keys=False),
    "eta_0": dict(eta=_const(0.0)),
    "eta_near_1": dict(eta=lambda rng, s, dt: 1 - 10.0 ** rng.uniform(-7, -2, s)),
    "eta_1": dict(eta=_const(1.0)),
    "keys_0": dict(key_scale=0.0),
    "keys_1e3": dict(key_scale=1e3, theta=_const(1e-6)),
}


def make_args(rule, T, d, lead=(2, 2), dtype=np.float64, seed=0, alpha=None, theta=None,
              eta=None, unit_keys=True, key_scale=1.0):
    """Arguments of `rule` in `dtype`: unit keys and queries (as `models.layers` passes them)
    unless `unit_keys` is False, gates from the given makers (default sigmoid-like values)."""
    rng = np.random.default_rng(seed)
    k, v, q = rng.standard_normal((3,) + lead + (T, d))
    if unit_keys:
        k /= np.linalg.norm(k, axis=-1, keepdims=True)
        q /= np.linalg.norm(q, axis=-1, keepdims=True)
    shape = lead + (T,)

    def gate(maker):
        if maker is None:
            return rng.uniform(0.0, 0.3, shape)
        return np.asarray(maker(rng, shape, dtype), dtype=np.float64)
    named = {"k": k * key_scale, "v": v, "q": q, "alpha": gate(alpha), "theta": gate(theta),
             "eta": gate(eta), "m0": rng.standard_normal(lead + (d, d)) * 0.1,
             "s0": rng.standard_normal(lead + (d, d)) * 0.1}
    return tuple(named[n].astype(dtype) for n in NAMES[rule])


def mismatch(got, want, rtol):
    """None if `got` matches `want`: the same NaN, +inf and -inf entries, and the finite ones
    within `rtol` times the largest finite |want| (plus the smallest normal number of their
    dtype: subnormal results have no relative precision); otherwise a description."""
    tiny = float(np.finfo(np.asarray(want).dtype).tiny)
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    for name, test in (("NaN", np.isnan), ("+inf", np.isposinf), ("-inf", np.isneginf)):
        if not np.array_equal(test(got), test(want)):
            return f"{name} at {int(np.sum(test(got)))} entries, reference {int(np.sum(test(want)))}"
    finite = np.isfinite(want)
    if not finite.any():
        return None
    scale = np.max(np.abs(want[finite]))
    err = np.max(np.abs(got[finite] - want[finite]))
    return None if err <= rtol * scale + tiny else f"max error {err:.3g}, {err / scale:.3g} of scale {scale:.3g}"


def compare(fn, args, names, backward=True, weight_seed=1):
    """{result name: relative error or a description of the difference} of the default
    dispatch against `force_reference`, for the outputs and (with `backward`) the gradients."""
    dtype = args[0].dtype.type
    with np.errstate(all="ignore"):
        got = fn(*args)
        with kernels.force_reference():
            want = fn(*args)
        results = [(f"out{i}", g, w) for i, (g, w) in enumerate(zip(got, want))]
    found = {n: m for n, g, w in results if (m := mismatch(g, w, RTOL[dtype])) is not None}
    if backward:
        with np.errstate(all="ignore"):
            weights = weights_for(want, seed=weight_seed, dtype=dtype)
            wrong = grad_mismatches(fn, args, weights, names, RTOL[dtype])
        found.update(("d" + n, m) for n, m in wrong.items())
    return found


def grad_mismatches(fn, args, weights, names, rtol):
    """{argument name: difference} of the gradients (cotangents `weights` on the results) by
    the default dispatch against `force_reference`."""
    got = grads(fn, args, weights)
    with kernels.force_reference():
        want = grads(fn, args, weights)
    return {n: m for n, g, w in zip(names, got, want) if (m := mismatch(g, w, rtol)) is not None}


def has_gate(rule, case):
    """Whether `rule` has the gate that the gate case `case` (of CASES) sets."""
    return not ((case.startswith("theta") and rule == "hebbian")
                or (case.startswith("eta") and rule != "titans"))


def with_bad_entry(args, names, name, t, bad):
    """`args` with `bad` at token t of the argument `name` (in one entry of a state)."""
    args = list(args)
    i = names.index(name)
    a = args[i].copy()
    a[(1, t, 3) if name in ("k", "v", "q") else (1, t) if a.ndim == 2 else (1, 2, 3)] = bad
    args[i] = a
    return tuple(args)


def strided_views(args) -> list:
    """Views of the same values with non-unit strides (the keys in transposed layout)."""
    strided = []
    for a in args:
        wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
        wide[..., ::2] = a
        strided.append(wide[..., ::2])
    strided[0] = np.ascontiguousarray(np.swapaxes(args[0], -1, -2)).swapaxes(-1, -2)
    return strided


def kernel(rule, period=None):
    if period is None:
        return RULES[rule]
    return lambda *a: PERIODIC[rule](*a, period=period)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("T,d", [(1024, 16), (1000, 8), (40, 32), (130, 64)])
def test_default_equals_reference_at_scale(rule, dtype, T, d):
    assert compare(kernel(rule), make_args(rule, T, d, dtype=dtype), NAMES[rule]) == {}


@pytest.mark.parametrize("rule", RULES)
def test_default_equals_reference_at_4096_tokens(rule):
    args = make_args(rule, 4096, 8, lead=(2, 3), dtype=np.float32, alpha=_wipe,
                     theta=_uniform(0.0, 3.0), eta=_uniform(0.0, 0.999))
    assert compare(kernel(rule), args, NAMES[rule]) == {}


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("period", [None, 64, 7])
def test_default_equals_reference_over_gate_range(rule, dtype, case, period):
    if not has_gate(rule, case):
        pytest.skip("the rule has no such gate")
    args = make_args(rule, 200, 8, lead=(2,), dtype=dtype, **CASES[case])
    assert compare(kernel(rule, period), args, NAMES[rule]) == {}


@pytest.mark.parametrize("rule", ["delta", "titans"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("how", ["theta_50_raw_keys", "keys_1e3", "project_back"])
@pytest.mark.parametrize("period", [None, 64])
def test_overflow_gives_the_reference_nan_and_inf(rule, dtype, how, period):
    """Memories that overflow, or grow inside a chunk and are projected back: the default
    dispatch returns the loop's values, inf and NaN included, never finite values in their
    place (nor NaN where the loop is finite)."""
    if how == "theta_50_raw_keys":
        args = make_args(rule, 200, 8, lead=(2,), dtype=dtype, theta=_const(50.0),
                         unit_keys=False)
    elif how == "keys_1e3":
        args = make_args(rule, 200, 8, lead=(2,), dtype=dtype, key_scale=1e3)
    else:   # token pairs with one key: theta 1e3 grows the memory along it, theta 1 removes it
        args = list(make_args(rule, 256, 8, lead=(2,), dtype=dtype))
        k = args[0].copy()
        k[..., 1::2, :] = k[..., 0::2, :]
        theta = np.ones(k.shape[:-1], dtype)
        theta[..., 0::2] = 1e3
        args[0], args[4] = k, theta
    with np.errstate(all="ignore"), kernels.force_reference():
        overflowed = not all(np.isfinite(o).all() for o in kernel(rule, period)(*args))
    if how != "project_back":
        assert overflowed           # the case is what it claims to be
    assert compare(kernel(rule, period), tuple(args), NAMES[rule]) == {}


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("period", [None, 16])
def test_nan_and_inf_inputs_spread_as_in_the_reference(rule, bad, period):
    for name in NAMES[rule]:
        args = with_bad_entry(make_args(rule, 150, 8, lead=(2,)), NAMES[rule], name, 70, bad)
        assert compare(kernel(rule, period), args, NAMES[rule]) == {}, name


@pytest.mark.parametrize("rule", RULES)
def test_nan_cotangent_spreads_as_in_the_reference(rule):
    args = make_args(rule, 300, 8, lead=(2,))
    fn = kernel(rule)
    weights = weights_for(fn(*args), seed=2)
    weights[0][1, 150, 2] = np.nan
    with np.errstate(all="ignore"):
        assert grad_mismatches(fn, args, weights, NAMES[rule], 1e-10) == {}


@pytest.mark.parametrize("rule", RULES)
def test_ordinary_inputs_stay_chunked_and_bad_ones_fall_back(rule):
    """The fallback is not taken for ordinary inputs (the chunked speed stays), and is for a
    NaN input and for an exact alpha of 1."""
    module = memory_chunked_titans if rule == "titans" else memory_chunked
    args = make_args(rule, 300, 8, lead=(2,))
    x, init, _ = kernels.memory._inputs(rule, args)
    spec = memory_ref.RULES[rule]
    assert isinstance(module.forward(spec, x, init)[2], memory_chunked.Saved)
    for bad in (x._replace(k=np.where(np.arange(300)[:, None, None] == 5, np.nan, x.k)),
                x._replace(ret=np.where(np.arange(300)[:, None, None] == 5, 0.0, x.ret))):
        with np.errstate(invalid="ignore", divide="ignore"):
            assert isinstance(module.forward(spec, bad, init)[2], memory_ref.Saved)


def test_span_decays_keep_relative_precision_after_small_retentions():
    """float32 ratios of decays after 40 retentions of 1.2e-7 (exponents near -640) equal the
    float64 products: a difference of cumulative log sums would lose about 1e-4 here."""
    rng = np.random.default_rng(0)
    r = np.where(np.arange(64) < 40, np.float32(2.0 ** -23), rng.uniform(0.5, 1.0, 64))
    E = memory_chunked.span_decays(np.log(r.astype(np.float32)), 64)
    want = np.zeros((64, 64))
    for j in range(64):
        want[j:, j] = np.cumprod(np.concatenate([[1.0], r[j + 1:].astype(np.float64)]))
    late = (np.arange(64)[:, None] >= np.arange(64)[None, :]) & (np.arange(64) >= 40)[None, :]
    np.testing.assert_allclose(E[late], want[late], rtol=2e-6)


@pytest.mark.parametrize("rule", RULES)
def test_argument_errors_equal_the_reference(rule, period=None):
    good = make_args(rule, 64, 4)
    cases = {"mixed dtype": (1, good[1].astype(np.float32)),
             "wrong shape": (2, good[2][..., :-1]),
             "integer keys": (0, good[0].astype(np.int64)),
             "gate shape": (3, good[3][..., None])}
    for what, (i, bad) in cases.items():
        args = list(good)
        args[i] = bad
        errors = []
        for forced in (False, True):
            with kernels.force_reference(forced), pytest.raises((TypeError, ValueError)) as e:
                kernel(rule, period)(*args)
            errors.append((type(e.value), str(e.value)))
        kernels.force_reference(False)
        assert errors[0] == errors[1], what


@pytest.mark.parametrize("rule", RULES)
def test_strided_inputs_equal_contiguous_ones(rule):
    args = make_args(rule, 300, 8, lead=(2,))
    strided = strided_views(args)
    assert not strided[0].flags.c_contiguous
    with kernels.force_reference():
        want = RULES[rule](*args)
    for g, w in zip(RULES[rule](*strided), want):
        assert mismatch(g, w, 1e-12) is None


# -- the larger sweep, as a script -----------------------------------------------------------------

def _sweep(Ts, ds, dtypes, cases, periods, lead):
    print("rule      dtype    T      d   period case                 worst        time default/ref")
    for T in Ts:
        for d in ds:
            for dtype in dtypes:
                for rule in RULES:
                    for period in periods:
                        for case in cases:
                            if (case.startswith("theta") and rule == "hebbian") or (
                                    case.startswith("eta") and rule != "titans"):
                                continue
                            args = make_args(rule, T, d, lead=lead, dtype=dtype, **CASES[case])
                            t0 = time.perf_counter()
                            bad = compare(kernel(rule, period), args, NAMES[rule])
                            print(f"{rule:9s} {np.dtype(dtype).name:8s} {T:6d} {d:3d} "
                                  f"{str(period):6s} {case:20s} {bad or 'ok'} "
                                  f"({time.perf_counter() - t0:.1f} s)", flush=True)


def _peak(rule, T, d, lead, dtype):
    """Peak traced memory (MiB) of one default forward + backward."""
    args = make_args(rule, T, d, lead=lead, dtype=dtype)
    fn = kernel(rule)
    weights = weights_for(fn(*args), dtype=dtype)
    tracemalloc.start()
    t0 = time.perf_counter()
    grads(fn, args, weights)
    seconds = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1] / 2 ** 20
    tracemalloc.stop()
    return peak, seconds


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--T", default="1024,4096", help="sequence lengths, comma-separated")
    p.add_argument("--d", default="8,64", help="head dimensions, comma-separated")
    p.add_argument("--cases", default="ordinary,alpha_wipe,theta_0_to_3,alpha_mixed")
    p.add_argument("--periods", default="none,64,7")
    p.add_argument("--peak", default="", help="T,d: only measure the peak memory of every rule")
    a = p.parse_args(argv)
    lead = (2, 2)
    if a.peak:
        T, d = (int(x) for x in a.peak.split(","))
        for rule in RULES:
            for dtype in (np.float32, np.float64):
                peak, seconds = _peak(rule, T, d, lead, dtype)
                print(f"{rule} {np.dtype(dtype).name} T={T} d={d} lead={lead}: peak "
                      f"{peak:.0f} MiB, forward + backward {seconds:.1f} s", flush=True)
        return
    _sweep([int(x) for x in a.T.split(",")], [int(x) for x in a.d.split(",")],
           (np.float64, np.float32), a.cases.split(","),
           [None if x == "none" else int(x) for x in a.periods.split(",")], lead)


if __name__ == "__main__":
    main()
