"""`tape.compile` against eager `autodiff`, call by call, in the modes tested least elsewhere:
batch widths that change between calls of one compiled function, shadows given as lists or
aliasing each other, refusals of mixed activities, forward modes called from several threads
at once, and DuplicatedNoNeed / MixedDuplicated arguments of functions that write in place.
(tests/tape/forward_compare.py compares results, errors, values and shadows bit for bit.)
"""
import copy
import threading

import numpy as np
import pytest

import tape
from tape import (Active, BatchDuplicated, BatchDuplicatedNoNeed, Const, Duplicated,
                  DuplicatedNoNeed, Forward, ForwardWithPrimal, MixedDuplicated, Reverse,
                  ReverseWithPrimal, autodiff)

from forward_compare import identical, outcome, run_sequence

FORWARD = [(Forward, BatchDuplicated), (ForwardWithPrimal, BatchDuplicated),
           (Forward, BatchDuplicatedNoNeed), (ForwardWithPrimal, BatchDuplicatedNoNeed),
           (ForwardWithPrimal, Const)]
REVERSE = [(Reverse, Active), (ReverseWithPrimal, Active), (Reverse, Const)]


def _writes(out, x):
    """Writes a strided view of `out`, then reads it back (a value returned in every mode)."""
    out[1:] = np.sin(x[1:]) * x[:-1]
    out[0] *= x[0]
    return np.sum(out * x)


def _writes_vector(out, x):
    _writes(out, x)
    return out[::2] * 2.0


def _function(mode, ret):
    return _writes_vector if mode.kind == "forward" and ret is not Const else _writes


# -- widths, list shadows, aliased shadows, views ----------------------------------------------

@pytest.mark.parametrize("mode,ret", FORWARD + REVERSE,
                         ids=lambda v: getattr(v, "name", None) or v.__name__)
def test_the_width_changes_between_calls_with_views_lists_and_aliased_shadows(mode, ret):
    f = _function(mode, ret)
    x = np.linspace(0.2, 1.0, 4)

    def args(call):
        width, how = call
        base, store = np.arange(12.0).reshape(3, 4) + 1.0, np.ones((2 * width + 2, 4))
        seeds = [store[2 * k] * (k + 1) for k in range(width)]   # views of one array
        dxs = [np.full(4, k - 1.0) for k in range(width)]
        if how == "aliased":   # one array given as every shadow, of both arguments
            shared, other = np.ones(8), np.ones(8)
            seeds, dxs = [shared[:4]] * width, [other[2:6]] * width
        elif how == "overlapping":
            seeds = [store.ravel()[2 * k:2 * k + 4] for k in range(width)]
        pack = list if how == "list" else tuple
        return [BatchDuplicated(base[1], pack(seeds)), BatchDuplicated(x * width, pack(dxs))]
    calls = [(1, "tuple"), (3, "tuple"), (2, "list"), (3, "aliased"), (2, "overlapping"),
             (3, "list")]
    g = run_sequence(mode, f, ret, args, calls)
    assert g.stats.eager_calls == 0 and g.stats.traces == 3, g.stats


def test_aliased_shadows_and_seeds_in_reverse_add_every_direction():
    x = np.linspace(0.2, 1.0, 3)
    grad = np.cos(x) * x + np.sin(x)

    def f(x):
        return np.sum(np.sin(x) * x)

    def written(out, x):
        out[...] = np.sin(x) * x
    g = tape.compile(Reverse, f, Active, BatchDuplicated)
    h = tape.compile(Reverse, written, Const, BatchDuplicated, BatchDuplicated)
    for _ in range(2):
        s = np.ones(3)
        g(BatchDuplicated(x, (s, s, s)))   # each seed 1: three gradients into one array
        np.testing.assert_allclose(s, 1.0 + 3.0 * grad, rtol=1e-14)
        seed, dxs = np.ones(3), (np.zeros(3), np.zeros(3))
        h(BatchDuplicated(np.zeros(3), (seed, seed)), BatchDuplicated(x, dxs))
        np.testing.assert_allclose(dxs[0], grad, rtol=1e-14)   # read before being zeroed
        np.testing.assert_allclose(dxs[1], grad, rtol=1e-14)
        np.testing.assert_array_equal(seed, 0.0)
        seed = np.ones(3)   # a seed that is also the shadow it adds into
        d2 = np.zeros(3)
        h(BatchDuplicated(np.zeros(3), (seed, 2.0 * np.ones(3))), BatchDuplicated(x, (seed, d2)))
        np.testing.assert_allclose(seed, grad, rtol=1e-14)
        np.testing.assert_allclose(d2, 2.0 * grad, rtol=1e-14)
    assert g.stats.hits == 1 and h.stats.hits == 3 and h.stats.eager_calls == 0, h.stats


def test_python_floats_and_pytrees_of_changing_width():
    def f(p, a):
        return np.sin(p["w"]) * a + p["b"][0] * a * a

    def args(width):
        p = {"w": np.linspace(0, 1, 3) * width, "b": [np.array([0.5 * width])]}
        dps = tuple({"w": np.full(3, k + 1.0), "b": [np.array([1.0 - k])]}
                    for k in range(width))
        return [BatchDuplicated(p, dps), BatchDuplicated(1.5 + width, tuple(
            0.5 * k for k in range(width)))]
    for mode in (Forward, ForwardWithPrimal):
        g = run_sequence(mode, f, BatchDuplicated, args, [1, 3, 2, 3])
        assert g.stats.eager_calls == 0 and g.stats.traces == 3, g.stats


# -- refusals --------------------------------------------------------------------------------------

def _same_error(g, mode, f, ret, args):
    mine = outcome(lambda: g(*copy.deepcopy(args)))[1]
    theirs = outcome(lambda: autodiff(mode, f, ret, *copy.deepcopy(args)))[1]
    assert theirs is not None and type(mine) is type(theirs) and str(mine) == str(theirs), (
        mine, theirs)
    return mine


@pytest.mark.parametrize("mode", [Forward, ForwardWithPrimal, Reverse, ReverseWithPrimal],
                         ids=lambda m: m.name)
def test_mixed_batched_and_unbatched_arguments_are_refused_as_eagerly(mode):
    def f(x, y):
        return x * y if mode.kind == "forward" else np.sum(x * y)
    ret = BatchDuplicated if mode.kind == "forward" else Active
    x = np.linspace(0.2, 1.0, 3)
    batch = BatchDuplicated(x, (np.zeros(3), np.ones(3)))
    for other in (Duplicated(x + 1, np.zeros(3)), DuplicatedNoNeed(x + 1, np.zeros(3)),
                  MixedDuplicated(x + 1, np.zeros(3))):
        for args in ([batch, other], [other, batch]):
            g = tape.compile(mode, f, ret, *[type(a) for a in args])
            for _ in range(2):
                e = _same_error(g, mode, f, ret, args)
                assert type(e) is tape.ActivityError and "batched shadows only" in str(e)


def test_a_duplicated_argument_beside_a_width_one_batch_gets_a_consistent_message():
    def f(x, y):
        return np.sum(x * y)
    args = [BatchDuplicated(np.ones(3), (np.zeros(3),)), Duplicated(np.ones(3), np.zeros(3))]
    g = tape.compile(Reverse, f, Active, BatchDuplicated, Duplicated)
    message = str(_same_error(g, Reverse, f, Active, args))
    assert "(width 1) but other arguments are BatchDuplicated with width 1" not in message


def test_a_python_float_batch_in_reverse_is_refused_under_its_own_name():
    def f(x):
        return x * x
    g = tape.compile(Reverse, f, Active, BatchDuplicated)
    message = str(_same_error(g, Reverse, f, Active, [BatchDuplicated(1.5, (1.0, 2.0))]))
    assert "is BatchDuplicated" in message, message


@pytest.mark.parametrize("mode", [Forward, Reverse], ids=lambda m: m.name)
def test_width_zero_is_refused_clearly(mode):
    def f(x):
        return x * 2.0 if mode.kind == "forward" else np.sum(x * 2.0)
    ret = BatchDuplicated if mode.kind == "forward" else Active
    with pytest.raises(TypeError, match="non-empty"):
        BatchDuplicated(np.ones(3), ())
    arg = BatchDuplicated(np.ones(3), (np.ones(3),))
    arg.dval = ()   # the slot is writable
    g = tape.compile(mode, f, ret, BatchDuplicated)
    e = _same_error(g, mode, f, ret, [arg])
    assert isinstance(e, (tape.ActivityError, TypeError, ValueError)), repr(e)


# -- forward modes from several threads -------------------------------------------------------------

_SCALE = np.array([1.0, 2.0, 3.0, 4.0])


def _branchy(y, x, c):
    if np.sum(x) > 0:
        y[...] = np.sin(x) * c
        return np.cumsum(y * _SCALE[:x.shape[0]])
    y[::-1] = x ** 3
    return y * c[0]


def _thread_args(rng, batched):
    n, width = int(rng.integers(1, 5)), int(rng.integers(1, 4))

    def shadows():
        return tuple(rng.normal(size=n) for _ in range(width))
    if batched:
        return [BatchDuplicated(np.zeros(n), shadows()),
                BatchDuplicated(rng.normal(size=n), shadows()), Const(rng.normal(size=n))]
    return [Duplicated(np.zeros(n), rng.normal(size=n)),
            Duplicated(rng.normal(size=n), rng.normal(size=n)), Const(rng.normal(size=n))]


@pytest.mark.parametrize("mode,ret,batched", [
    (Forward, Duplicated, False), (ForwardWithPrimal, DuplicatedNoNeed, False),
    (ForwardWithPrimal, BatchDuplicated, True), (Forward, BatchDuplicatedNoNeed, True)],
    ids=["fw", "fwp-noneed", "fwp-batch", "fw-batch-noneed"])
def test_threads_calling_one_forward_function_agree_with_eager_per_call(mode, ret, batched):
    n_threads, n_calls = 6, 8
    kinds = (BatchDuplicated if batched else Duplicated,) * 2 + (Const,)
    g = tape.compile(mode, _branchy, ret, *kinds, max_traces=3, max_programs=4)
    work = []
    for i in range(n_threads):
        rng = np.random.default_rng(i)
        calls = []
        for _ in range(n_calls):
            args = _thread_args(rng, batched)
            theirs = copy.deepcopy(args)
            calls.append((args, autodiff(mode, _branchy, ret, *theirs), theirs))
        work.append(calls)
    errors, start = [], threading.Barrier(n_threads)

    def worker(calls):
        start.wait()
        for args, want, theirs in calls:
            mine = copy.deepcopy(args)
            try:
                identical(g(*mine), want)
                for a, b in zip(mine, theirs):
                    identical(a.val, b.val, "value")
                    if isinstance(b, Duplicated):
                        identical(a.dval, b.dval, "shadow")
            except Exception as e:   # noqa: BLE001
                errors.append(e)
    threads = [threading.Thread(target=worker, args=(w,)) for w in work]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    s = g.stats
    assert s.traces + s.hits + s.eager_calls == n_threads * n_calls, s
    assert s.programs <= 4 and s.hits >= 1, s


# -- DuplicatedNoNeed and MixedDuplicated arguments of functions that write in place ------------

def _in_place(out, x, y):
    out[...] = np.sin(x) * y
    out[1] += x[0] * out[0]
    x[0] *= 3.0   # overwrites an input
    return np.sum(out * x)


def _in_place_vector(out, x, y):
    _in_place(out, x, y)
    return out[::2] * x[0]


@pytest.mark.parametrize("mode,ret", [(Forward, Duplicated), (ForwardWithPrimal, Duplicated),
                                      (Forward, DuplicatedNoNeed),
                                      (ForwardWithPrimal, DuplicatedNoNeed),
                                      (ForwardWithPrimal, Const), (Reverse, Active),
                                      (ReverseWithPrimal, Active), (ReverseWithPrimal, Const)],
                         ids=lambda v: getattr(v, "name", None) or v.__name__)
def test_duplicated_no_need_arguments_written_in_place(mode, ret):
    f = _in_place_vector if mode.kind == "forward" and ret is not Const else _in_place
    x, y = np.linspace(0.2, 1.0, 3), np.array([1.5, -0.5, 2.0])
    reverse = mode.kind == "reverse"

    def args(k):
        seed = np.ones(3) * (k + 2)
        return [DuplicatedNoNeed(np.zeros(3), seed),
                DuplicatedNoNeed(x * (1 - 2 * (k % 2)), np.zeros(3) if reverse else np.ones(3)),
                (Duplicated if k < 2 else DuplicatedNoNeed)(y, np.zeros(3) if reverse
                                                            else np.arange(3.0))]
    g = tape.compile(mode, f, ret, DuplicatedNoNeed, DuplicatedNoNeed, Duplicated)
    run_sequence(mode, f, ret, args, [0, 1, 0, 1], g=g)
    assert g.stats.eager_calls == 0 and g.stats.hits >= 2, g.stats


def _mixed_writes(p, x):
    p["a"][1:] *= p["b"]
    p["b"] = p["b"] * 2.0   # rebinds a float leaf of the container
    return np.sum(p["a"] * x) * p["b"]


def _mixed_writes_vector(p, x):
    _mixed_writes(p, x)
    return p["a"] * x * p["b"]


@pytest.mark.parametrize("mode,ret", [(Forward, Duplicated), (ForwardWithPrimal, Duplicated),
                                      (ForwardWithPrimal, DuplicatedNoNeed), (Reverse, Active),
                                      (ReverseWithPrimal, Active), (ReverseWithPrimal, Const)],
                         ids=lambda v: getattr(v, "name", None) or v.__name__)
def test_mixed_duplicated_containers_written_in_place(mode, ret):
    f = _mixed_writes_vector if mode.kind == "forward" and ret is not Const else _mixed_writes
    reverse = mode.kind == "reverse"

    def args(k):
        return [MixedDuplicated({"a": np.arange(3.0) + k, "b": 2.0 - k},
                                {"a": np.ones(3) * (k + 1), "b": 1.0 + k}),
                Duplicated(np.ones(3) * (k - 1), np.zeros(3) if reverse else np.full(3, 0.5))]
    g = run_sequence(mode, f, ret, args, [0, 1, 2, 1])
    assert g.stats.eager_calls == 0 and g.stats.hits == 3, g.stats
