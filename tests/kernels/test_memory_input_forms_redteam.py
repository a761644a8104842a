"""Input forms of the memory rules (`kernels.delta_rule`, `titans_rule`, `hebbian_rule` and their
``*_periodic`` levels) that the value fuzz leaves out, default dispatch (chunkwise-parallel on
NumPy) against the sequential loop (`kernels.force_reference`): memory layouts (read-only,
Fortran order, negative strides, zero-stride `broadcast_to` views of gates and states shared
across the batch, arguments that alias each other), lead shapes of zero to three axes with
lengths around the chunk, head dimensions beyond the chunk at a few tokens and 16384 tokens at
a small one, gates past their usual range on repeated keys, every input scaled to 1e+-30
(float64) or 1e+-15 (float32), `tape.compile` of a loss calling a rule (compiled against
eager, in both dispatches, and against central differences), byte orders and ndarray
subclasses. Outputs, final states and the gradient of every input must have the same dtype
and shape in both dispatches, and values within ``RTOL_EPS * eps * sqrt(T)`` of each result's
largest finite magnitude, NaN and inf in the same places.
"""
import numpy as np
import pytest

import kernels
from tape import Active, Reverse, autodiff, compile
from test_memory_scale import NAMES, kernel, make_args
from weighted import grads, weighted, weights_for

RULES = tuple(NAMES)
# Two orders of operations differ by rounding: the measured differences stay within
# 20 eps sqrt(T) of scale; 200 leaves a margin.
RTOL_EPS = 200


def tolerance(dtype, T):
    return RTOL_EPS * float(np.finfo(dtype).eps) * np.sqrt(max(T, 1))


def differences(got, want, rtol) -> list:
    """Descriptions of each result of `got` that differs from `want`: type, dtype, shape, the
    places of NaN / +inf / -inf, or finite values beyond `rtol` of the largest finite |want|
    (plus the smallest normal number: subnormal results carry no relative precision)."""
    out = []
    for i, (g, w) in enumerate(zip(got, want)):
        if type(g) is not type(w) or g.dtype != w.dtype or g.shape != w.shape:
            out.append(f"{i}: {type(g).__name__} {g.dtype} {g.shape} against "
                       f"{type(w).__name__} {w.dtype} {w.shape}")
            continue
        g64, w64 = np.asarray(g, np.float64), np.asarray(w, np.float64)
        for name, test in (("NaN", np.isnan), ("+inf", np.isposinf), ("-inf", np.isneginf)):
            if not np.array_equal(test(g64), test(w64)):
                out.append(f"{i}: {name} places differ")
        finite = np.isfinite(w64) & np.isfinite(g64)
        if finite.any():
            scale = float(np.max(np.abs(w64[finite])))
            err = float(np.max(np.abs(g64[finite] - w64[finite])))
            if err > rtol * scale + float(np.finfo(w.dtype).tiny):
                out.append(f"{i}: error {err:.3g} of scale {scale:.3g}")
    return out


def results(fn, args, weights=None):
    """Outputs and the gradients of every argument (random cotangents on every output)."""
    with np.errstate(all="ignore"):
        outs = list(fn(*args))
        if weights is None:
            weights = weights_for([np.asarray(o) for o in outs], dtype=np.asarray(outs[0]).dtype)
        return outs + list(grads(fn, args, weights)), weights


def dispatch_differences(fn, args, T=None):
    """`differences` of the default dispatch against the loop (the loop's cotangents)."""
    with kernels.force_reference():
        want, weights = results(fn, args)
    got, _ = results(fn, args, weights)
    dtype = np.asarray(want[0]).dtype
    return differences(got, want, tolerance(dtype, T or np.shape(args[0])[-2]))


def both_dispatches(fn, args):
    """("ok", results) or (error type, message) for the default dispatch and the loop."""
    out = []
    for forced in (False, True):
        with kernels.force_reference(forced):
            try:
                with np.errstate(all="ignore"):
                    out.append(("ok", [np.asarray(r) for r in fn(*args)]))
            except Exception as e:          # the comparison is of the failure itself
                out.append((type(e).__name__, str(e)))
    return out


# -- layouts -------------------------------------------------------------------------------------

def _read_only(a):
    a = a.copy()
    a.flags.writeable = False
    return a


def _negative_strides(a):
    return np.flip(np.flip(a, -1).copy(), -1)


def _transposed(a):
    return np.ascontiguousarray(np.swapaxes(a, 0, -1)).swapaxes(0, -1)


LAYOUTS = {
    "read_only": lambda n, a: _read_only(a),
    "fortran": lambda n, a: np.asfortranarray(a),
    "negative_strides": lambda n, a: _negative_strides(a),
    "transposed": lambda n, a: _transposed(a),
    # gates and states shared across the batch: zero strides, read-only
    "broadcast_gates_states": lambda n, a: a if n in ("k", "v", "q")
    else np.broadcast_to(a[0], a.shape),
    # one key for every token: a zero stride along time
    "broadcast_key_over_time": lambda n, a: np.broadcast_to(a[:, :1], a.shape) if n == "k"
    else a,
}


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("period", [None, 7])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_layouts_equal_the_loop_and_leave_inputs_intact(rule, period, dtype):
    base = make_args(rule, 50, 4, lead=(3,), dtype=dtype, seed=1)
    fn = kernel(rule, period)
    for layout, make in LAYOUTS.items():
        args = [make(n, a) for n, a in zip(NAMES[rule], base)]
        copies = [a.copy() for a in args]
        assert dispatch_differences(fn, args) == [], layout
        assert all(np.array_equal(a, c) for a, c in zip(args, copies)), layout


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("period", [None, 7])
def test_aliased_arguments(rule, period):
    """The same array passed as keys and queries (and, for Titans, as both initial states and
    as every gate): each argument still gets its own gradient, as in the loop."""
    args = list(make_args(rule, 40, 4, lead=(2,), seed=2))
    idx = {n: i for i, n in enumerate(NAMES[rule])}
    args[idx["q"]] = args[idx["k"]]
    if rule == "titans":
        args[idx["s0"]] = args[idx["m0"]]
        args[idx["theta"]] = args[idx["eta"]] = args[idx["alpha"]]
    assert dispatch_differences(kernel(rule, period), args) == []


# -- shapes and lengths ----------------------------------------------------------------------------

@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("period", [None, 5])
def test_lead_shapes_and_lengths_around_the_chunk(rule, period):
    """Lead shapes (), (1,), (2, 1), (1, 2, 3) with T = 1, a chunk minus / plus one (chunks of
    16 at d = 3), two chunks minus one and a prime, float32 and float64."""
    fn = kernel(rule, period)
    for lead, T, dtype in [((), 1, np.float64), ((), 17, np.float32), ((1,), 15, np.float64),
                           ((1,), 16, np.float32), ((2, 1), 31, np.float64),
                           ((2, 1), 97, np.float32), ((1, 2, 3), 17, np.float64),
                           ((1, 2, 3), 33, np.float32)]:
        args = make_args(rule, T, 3, lead=lead, dtype=dtype, seed=T)
        assert dispatch_differences(fn, args) == [], (lead, T, dtype)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("d,T", [(128, 17), (256, 16)])
def test_large_head_dim_few_tokens(rule, d, T):
    args = make_args(rule, T, d, lead=(1,), dtype=np.float32, seed=d)
    assert dispatch_differences(kernel(rule), args) == []


@pytest.mark.parametrize("rule,period", [("delta", None), ("hebbian", None), ("titans", None),
                                         ("delta", 64)])
def test_16384_tokens_small_head_dim(rule, period):
    """16384 tokens at d = 2 (1024 chunks carried in the Python loop), float64."""
    args = make_args(rule, 16384, 2, lead=(), seed=5)
    assert dispatch_differences(kernel(rule, period), args) == []


# -- gates past their range, repeated keys, magnitudes ---------------------------------------------

def _with(rule, args, **values):
    args = list(args)
    for n, val in values.items():
        if n in NAMES[rule]:
            i = NAMES[rule].index(n)
            a = val(args[i]) if callable(val) else np.full(args[i].shape, val)
            args[i] = np.asarray(a, dtype=args[i].dtype)
    return args


def _one_key(a):
    return np.broadcast_to(a[..., :1, :], a.shape).copy()


GATE_CASES = {
    "alpha_plus_theta_above_1": dict(alpha=0.7, theta=0.9),
    "every_gate_1": dict(alpha=1.0, theta=1.0, eta=1.0),
    "one_key_theta_1": dict(k=_one_key, alpha=0.0, theta=1.0),
    "one_key_theta_2": dict(k=_one_key, alpha=0.0, theta=2.0),
    "zero_queries": dict(q=0.0),
}


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("period", [None, 7])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gate_edges_on_repeated_keys(rule, period, dtype):
    base = make_args(rule, 70, 4, lead=(2,), dtype=dtype, seed=3)
    for case, values in GATE_CASES.items():
        assert dispatch_differences(kernel(rule, period), _with(rule, base, **values)) == [], case


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("period", [None, 7])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_huge_and_tiny_magnitudes(rule, period, dtype):
    """Values and states times 1e+-30 (float64) or 1e+-15 (float32), keys times 1e-30 /
    1e-15, queries times 1e30 / 1e15: every product stays in range, the results scale."""
    big = 1e30 if dtype == np.float64 else 1e15
    base = make_args(rule, 70, 4, lead=(2,), dtype=dtype, seed=4)
    cases = {"big": dict(v=lambda a: a * big, m0=lambda a: a * big, s0=lambda a: a * big),
             "tiny": dict(v=lambda a: a / big, m0=lambda a: a / big, s0=lambda a: a / big),
             "tiny_keys": dict(k=lambda a: a / big),
             "big_queries": dict(q=lambda a: a * big)}
    for case, values in cases.items():
        assert dispatch_differences(kernel(rule, period), _with(rule, base, **values)) == [], case


# -- tape.compile ----------------------------------------------------------------------------------

@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("period", [None, 5])
def test_compiled_gradient_equals_eager_and_finite_differences(rule, period):
    """A compiled reverse pass of a loss calling the rule (17 tokens: chunked by default):
    equal to the eager gradient in both dispatches, replayed on new values too, retraced under
    `force_reference`; and against central differences along a random direction per argument
    (float64), initial states included."""
    fn = kernel(rule, period)
    args = make_args(rule, 17, 2, lead=(2,), seed=6)
    weights = weights_for(fn(*args), seed=7)

    def loss(*a):
        return weighted(fn(*a), weights)
    compiled = compile(Reverse, loss, Active, *[Active] * len(args))
    rtol = tolerance(np.float64, 17)
    for forced in (False, True):
        with kernels.force_reference(forced):
            for scale in (1.0, 1.01):
                a = [x * scale for x in args]
                (eager,), = [autodiff(Reverse, loss, Active, *[Active(x) for x in a])]
                got, = compiled(*[Active(x) for x in a])
                assert differences(list(got), list(eager), rtol) == [], (forced, scale)
                if scale == 1.0 and not forced:
                    default = got
    assert compiled.stats.traces == 2          # the switch is part of the trace's guard
    rng = np.random.default_rng(8)
    h = 1e-6
    for i, (a, g) in enumerate(zip(args, default)):
        u = rng.standard_normal(a.shape)
        plus, minus = list(args), list(args)
        plus[i], minus[i] = a + h * u, a - h * u
        fd = (loss(*plus) - loss(*minus)) / (2 * h)
        assert abs(fd - np.sum(g * u)) <= 1e-6 * (1 + abs(fd)), NAMES[rule][i]


# -- findings --------------------------------------------------------------------------------------

@pytest.mark.parametrize("rule", RULES)
def test_big_endian_inputs_are_refused_by_both_dispatches(rule):
    """A non-native byte order: the chunked forms returned native results, the loop (and the
    default below 16 tokens) the input's byte order. Both refuse it now, naming the fix."""
    args = [a.astype(">f8") for a in make_args(rule, 40, 4, lead=(2,))]
    for ok, got in both_dispatches(kernel(rule), args):
        assert ok == "TypeError" and "byte order" in got and "newbyteorder" in got, (ok, got)


@pytest.mark.parametrize("rule,period", [("titans", None), ("delta", 7), ("hebbian", 7),
                                         ("titans", 7)])
def test_masked_arrays_are_refused_by_both_dispatches(rule, period):
    """np.ma arrays: the chunked forms crashed in numpy.ma's matmul where the loop ran (and
    ignored any mask). Both refuse them now, naming np.asarray."""
    args = make_args(rule, 40, 4, lead=(2,))
    for ok, got in both_dispatches(kernel(rule, period), [np.ma.asarray(a) for a in args]):
        assert ok == "TypeError" and "MaskedArray" in got and "np.asarray" in got, (ok, got)


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
@pytest.mark.parametrize("rule", ["delta", "hebbian"])
def test_matrix_inputs_work_or_are_refused_clearly(rule):
    args = make_args(rule, 40, 4, lead=())
    mats = [np.asmatrix(a) if a.ndim == 2 else a for a in args]
    outcomes = both_dispatches(kernel(rule), mats)
    with kernels.force_reference():
        want = [np.asarray(r) for r in kernel(rule)(*args)]
    for ok, got in outcomes:
        if ok == "ok":
            assert differences([np.asarray(r) for r in got], want, 1e-12) == []
        else:
            assert ok == "TypeError" and f"{rule}_rule" in got, (ok, got)


def test_list_gate_is_named_as_a_list():
    args = list(make_args("delta", 40, 4, lead=(2,)))
    args[3] = args[3].tolist()
    with pytest.raises(TypeError, match="alpha.*list"):
        kernels.delta_rule(*args)
