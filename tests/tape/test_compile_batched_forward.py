"""`tape.compile` in batched forward mode (BatchDuplicated arguments: W tangents in one pass)
against eager batched `autodiff`, bit for bit.

The generated programs of tests/tape/test_compile_programs.py run with W = 1, 2 and 5
directions and changing values, each call compared with eager batch mode on copies of the same
arguments (tests/tape/forward_compare.py): primal, the W-tuple of tangents, buffers written
and their W shadows, errors. Then return activities, Python floats, pytrees, float32, complex
numbers, in-place functions, the rules that run once per direction (a built-in one and a
user's), guards, and each direction against a one-direction Forward call and against central
finite differences.
"""
import itertools
import re

import numpy as np
import pytest

import tape
from tape import (BatchDuplicated, BatchDuplicatedNoNeed, Const, Duplicated, Forward,
                  ForwardWithPrimal, autodiff)

from batched_arguments import directions, program_args
from forward_compare import identical, outcome, run_sequence
from test_compile_programs import STEPS, Active, make_function

FW, FWP = Forward, ForwardWithPrimal


def _specs(n, seed=4321):
    rng = np.random.default_rng(seed)
    names = sorted(STEPS)
    for k in range(n):
        yield {"steps": tuple(rng.choice(names, size=int(rng.integers(1, 5)))),
               "width": (1, 2, 5)[k % 3],
               "mode": [FW, FWP][int(rng.integers(2))],
               "ret": [BatchDuplicated, BatchDuplicated, Duplicated, Const,
                       BatchDuplicatedNoNeed][int(rng.integers(5))],
               "scalar": bool(rng.integers(2)),
               "a_kind": ["float", "array"][int(rng.integers(2))],
               "a_active": bool(rng.integers(3)),
               "W_active": bool(rng.integers(2)),
               "p_kind": ["dict", "list"][int(rng.integers(2))],
               "seed": int(rng.integers(2 ** 31))}


@pytest.mark.parametrize("spec", list(_specs(36)),
                         ids=lambda s: f"W{s['width']}-" + "-".join(s["steps"]))
def test_generated_programs_equal_eager_batch_mode(spec):
    f = make_function(spec["steps"], Active if spec["scalar"] else None)
    rng = np.random.default_rng(spec["seed"])
    calls = [program_args(spec, rng) for _ in range(3)]
    calls[1][0].val[...] = -calls[0][0].val   # the opposite x flips branches on sums, masks
    calls.append(calls[0])
    g = run_sequence(spec["mode"], f, spec["ret"], lambda c: calls[c], range(len(calls)))
    stats = g.stats
    assert not [r for r in stats.eager_reasons if r.startswith("tracing failed")], stats
    assert stats.eager_calls == 0, stats
    assert stats.hits >= 1, stats


# -- each direction is a one-direction Forward call, and a finite difference --------------------

def _chain(x, w, c):
    y = np.tanh(x @ w) * c + np.log1p(x * x).sum(axis=1, keepdims=True)
    z = y / (1.0 + np.exp(-x[:, :1])) - np.maximum(x, 0.1)[:, 1:2] ** 3
    return np.sum(z * z, axis=0) + np.sum(x)   # a reduction over the batch's logical axes


@pytest.mark.parametrize("width", [1, 2, 5])
def test_each_direction_equals_a_one_direction_call_and_finite_differences(width):
    rng = np.random.default_rng(width)
    x, w, c = rng.normal(size=(3, 4)), rng.normal(size=(4, 4)), 0.7
    vs, ws = directions(rng, width, (3, 4)), directions(rng, width, (4, 4))
    g = tape.compile(FWP, _chain, BatchDuplicated, BatchDuplicated, BatchDuplicated, Const)
    one = tape.compile(FWP, _chain, Duplicated, Duplicated, Duplicated, Const)
    for scale in (1.0, -0.6, 1.0):
        tangents, primal = g(BatchDuplicated(x * scale, vs), BatchDuplicated(w, ws), Const(c))
        assert type(tangents) is tuple and len(tangents) == width
        np.testing.assert_allclose(primal, _chain(x * scale, w, c), rtol=1e-15)
        for k in range(width):
            single, _ = one(Duplicated(x * scale, vs[k]), Duplicated(w, ws[k]), Const(c))
            np.testing.assert_allclose(tangents[k], single, rtol=1e-13, atol=1e-13)
            h = 1e-6
            fd = (_chain(x * scale + h * vs[k], w + h * ws[k], c)
                  - _chain(x * scale - h * vs[k], w - h * ws[k], c)) / (2 * h)
            np.testing.assert_allclose(tangents[k], fd, rtol=1e-6, atol=1e-7)
    assert g.stats.eager_calls == 0 and g.stats.hits >= 1, g.stats


def test_zero_d_and_column_primals_broadcast_with_the_batch_axis():
    def f(x, s, col):
        # A (3,) tangent against a 0-d and a (3, 1) primal, a reduction to 0-d, and back.
        y = np.sin(x) * s + col * x + np.exp(s) * np.sum(x * col.T)
        return y, np.sum(y * y), s * s
    rng = np.random.default_rng(0)

    def args(k):
        return [BatchDuplicated(rng.normal(size=3), directions(rng, 4, (3,))),
                BatchDuplicated(np.float64(0.3 + k), tuple(np.float64(v) for v in
                                                           rng.normal(size=4))),
                BatchDuplicated(rng.normal(size=(3, 1)), directions(rng, 4, (3, 1)))]
    g = run_sequence(FWP, f, BatchDuplicated, args, [0, 1, 2])
    assert g.stats.eager_calls == 0 and g.stats.hits == 2, g.stats


# -- numbers and structures -----------------------------------------------------------------------

def test_python_floats_give_python_floats_per_direction():
    def f(x, y):
        return x * x * y + np.sin(x)
    g = run_sequence(FWP, f, BatchDuplicated,
                     lambda k: [BatchDuplicated(1.0 + k, (1.0, 0.0, -2.0)),
                                BatchDuplicated(2.0, (0.5 * k, 1.0, 0.0))], [0, 1, 2])
    tangents, primal = g(BatchDuplicated(3.0, (1.0, 2.0, 3.0)), BatchDuplicated(2.0, (0.0,) * 3))
    assert type(primal) is float and all(type(t) is float for t in tangents), (tangents, primal)
    assert g.stats.eager_calls == 0, g.stats


def test_pytrees_in_and_out():
    def f(p, c):
        h = np.tanh(p["w"] @ c + p["b"])
        return {"h": h, "sum": np.sum(h * h), "const": c[0], "n": 3}

    def args(k):
        p = {"w": np.arange(6.0).reshape(2, 3) / (k + 1), "b": np.ones(2) * k}
        dps = tuple({"w": np.ones((2, 3)) * (j + 1), "b": np.array([1.0, -1.0]) * j}
                    for j in range(3))
        return [BatchDuplicated(p, dps), Const(np.array([0.5, -1.0, 2.0]))]
    g = run_sequence(FWP, f, BatchDuplicated, args, [0, 1, 1])
    assert g.stats.eager_calls == 0, g.stats


def test_float32_programs():
    def f(x, w):
        return np.tanh(x @ w) * np.float32(0.5) + x.sum() * 2.0

    def args(k):
        rng = np.random.default_rng(k)
        return [BatchDuplicated(rng.normal(size=(3, 4)).astype(np.float32),
                                directions(rng, 2, (3, 4), np.float32)),
                BatchDuplicated(rng.normal(size=(4, 4)).astype(np.float32),
                                directions(rng, 2, (4, 4), np.float32))]
    g = run_sequence(FWP, f, BatchDuplicated, args, [0, 1, 2])
    assert g.stats.eager_calls == 0, g.stats


def test_complex_numbers():
    def f(z, x):
        w = z * z * np.exp(1j * x) + np.conj(z)   # a real input's tangent made complex
        return w * (x + 2.0j)

    def args(k):
        z = np.array([1 + 2j, -0.5j, 3.0]) * (k + 1)
        return [BatchDuplicated(z, (np.array([1.0, 1j, 0.5 - 0.5j]), np.array([0j, 1, 2]))),
                BatchDuplicated(np.array([0.1, 0.2, -0.3]), (np.ones(3), np.arange(3.0)))]
    g = run_sequence(FWP, f, BatchDuplicated, args, [0, 1, 1])
    assert g.stats.eager_calls == 0, g.stats


# -- in-place functions ---------------------------------------------------------------------------

def test_in_place_function_writes_primal_and_every_shadow():
    def f(y, z, x, c):
        y[0] = x[0] ** 2 + x[1]
        y[1] = x[0] * x[1]
        z[:] = c * 2.0        # a value with no tangent: z's shadows are zeroed, as eagerly
        y[2:] += np.sin(x[2:]) * c[2:]

    def args(k):
        return [BatchDuplicated(np.zeros(4), (np.full(4, 7.0), np.full(4, -1.0))),
                BatchDuplicated(np.ones(4), (np.ones(4), np.ones(4))),
                BatchDuplicated(np.arange(4.0) + k, (np.array([1.0, 0.0, 0.5, -1.0]),
                                                     np.arange(4.0))),
                Const(np.linspace(0, 1, 4))]
    for ret in (Const, BatchDuplicated):
        for mode in (FW, FWP):
            g = run_sequence(mode, f, ret, args, [0, 1, 2])
            assert g.stats.eager_calls == 0, g.stats


# -- rules that cannot take batched tangents run once per direction, as eagerly -----------------

def test_a_built_in_rule_that_runs_once_per_direction():
    def f(x):
        y = x * 1.0
        y[[0, 1], [1, 2]] = x[0, :2] ** 2   # fancy-index write: per direction in eager mode
        return np.cumprod(y, axis=1)        # cumprod's forward rule too
    rng = np.random.default_rng(1)
    g = run_sequence(FWP, f, BatchDuplicated,
                     lambda k: [BatchDuplicated(rng.normal(size=(3, 4)),
                                                directions(rng, 3, (3, 4)))], [0, 1, 2])
    assert g.stats.eager_calls == 0 and g.stats.hits == 2, g.stats
    assert "_forward_batched(setitem_fwd" in str(g) and "_forward_batched(cumprod_fwd" in str(g)


class _Runs:
    """Counts of a rule's forward runs, on a batched tangent and on one direction's
    (`itertools.count`: state the compiled function does not watch as a value it reads)."""

    def __init__(self):
        self.batched, self.single = itertools.count(), itertools.count()

    def counts(self):
        return tuple(int(re.search(r"\d+", repr(c)).group())
                     for c in (self.batched, self.single))


def _scalar_only_rule(runs):
    """A user's rule whose forward cannot take a batched tangent (`np.asarray(t)`)."""
    def fwd(cfg, primals, tangents):
        (x,), (t,) = primals, tangents
        next(runs.batched if type(t).__name__ == "Batched" else runs.single)
        return np.sin(x), np.cos(x) * np.asarray(t)   # a batched tangent cannot become one
    return tape.custom_rule(lambda x: np.sin(x), forward=fwd,
                            augmented_primal=lambda cfg, x: (np.sin(x), x),
                            reverse=lambda cfg, x, g: (np.cos(x) * g,))


def test_a_user_rule_that_runs_once_per_direction_runs_as_often_as_eagerly():
    def args(k):
        return [BatchDuplicated(np.float64(0.5 + k), (np.float64(1.0), np.float64(-2.0),
                                                     np.float64(0.25)))]
    mine, theirs = _Runs(), _Runs()
    rule = _scalar_only_rule(mine)
    g = tape.compile(FWP, lambda x: rule(x) * x, BatchDuplicated, BatchDuplicated)
    eager_rule = _scalar_only_rule(theirs)
    for k in (0, 1, 2):
        identical(g(*args(k)), autodiff(FWP, lambda x: eager_rule(x) * x, BatchDuplicated,
                                        *args(k)))
        # the batched attempt, then once per direction
        assert mine.counts() == theirs.counts() == (k + 1, 3 * (k + 1)), (mine.counts(),
                                                                           theirs.counts())
    assert g.stats.eager_calls == 0 and g.stats.hits == 2, g.stats
    assert "_user_forward_batched(calls" in str(g), str(g)


def test_a_replay_whose_guard_fails_after_a_per_direction_rule_runs_it_once():
    def make(runs):
        rule = _scalar_only_rule(runs)

        def f(x):
            y = rule(x)
            return y * 2.0 if y > 0 else y - 1.0   # a guard after the user's rule
        return f
    mine, theirs = _Runs(), _Runs()
    g = tape.compile(FWP, make(mine), BatchDuplicated, BatchDuplicated)
    eager = make(theirs)
    for v in (0.5, 0.6, -0.5, 0.7, -0.4, -0.3):
        a = BatchDuplicated(np.float64(v), (np.float64(1.0), np.float64(3.0)))
        b = BatchDuplicated(np.float64(v), (np.float64(1.0), np.float64(3.0)))
        identical(g(a), autodiff(FWP, eager, BatchDuplicated, b))
        assert mine.counts() == theirs.counts(), (v, mine.counts(), theirs.counts())
    assert g.stats.guard_failures >= 1 and g.stats.eager_calls == 0, g.stats


# -- guards, signatures and what stays eager ------------------------------------------------------

def test_guards_that_fail_trace_again():
    def f(x, c):
        y = np.sin(x) * c + x ** 2
        if x.sum() > 0:
            return np.tanh(y) * 0.5
        return y / 3.0

    def args(k):
        x = np.linspace(0.1, 1, 5) * (1 if k % 2 else -3)
        return [BatchDuplicated(x, (np.full(5, 0.3), np.arange(5.0))), Const(np.arange(5.0))]
    g = run_sequence(FWP, f, BatchDuplicated, args, [0, 1, 0, 1, 2])
    assert g.stats.eager_calls == 0 and g.stats.guard_failures >= 1, g.stats
    assert g.stats.programs == 2, g.stats


def test_the_width_is_part_of_the_signature():
    g = tape.compile(FW, lambda x: np.sin(x) * x, BatchDuplicated, BatchDuplicated)
    x = np.linspace(0, 1, 3)
    for width in (2, 3, 2, 1, 3):
        dxs = tuple(np.full(3, float(k + 1)) for k in range(width))
        got = g(BatchDuplicated(x, dxs))
        identical(got, autodiff(FW, lambda x: np.sin(x) * x, BatchDuplicated,
                                BatchDuplicated(x, dxs)))
        assert len(got[0]) == width
    assert g.stats.traces == 3 and g.stats.eager_calls == 0, g.stats


def test_a_width_mismatch_raises_as_eagerly():
    def f(x, y):
        return x * y
    g = tape.compile(FW, f, BatchDuplicated, BatchDuplicated, BatchDuplicated)
    args = [BatchDuplicated(np.ones(2), (np.ones(2),) * 2),
            BatchDuplicated(np.ones(2), (np.ones(2),) * 3)]
    with pytest.raises(tape.ActivityError, match="batch width mismatch") as mine:
        g(*args)
    with pytest.raises(tape.ActivityError) as theirs:
        autodiff(FW, f, BatchDuplicated, *args)
    assert str(mine.value) == str(theirs.value)


def test_batched_reverse_and_mixed_activities_are_compiled_too():
    def f(x):
        return np.sum(np.sin(x) * x)
    x = np.linspace(0, 1, 3)
    g = tape.compile(tape.Reverse, f, tape.Active, BatchDuplicated)
    shadows, eager_shadows = (np.zeros(3), np.zeros(3)), (np.zeros(3), np.zeros(3))
    identical(g(BatchDuplicated(x, shadows)),
              autodiff(tape.Reverse, f, tape.Active, BatchDuplicated(x, eager_shadows)))
    identical(shadows, eager_shadows)
    assert g.stats.eager_calls == 0 and g.stats.traces == 1, g.stats   # (tests in
    # tests/tape/test_compile_batched_reverse.py)
    h = tape.compile(FWP, lambda p: p["a"] * p["b"], Duplicated, tape.MixedDuplicated)
    p = {"a": np.ones(2), "b": 2.0}
    identical(h(tape.MixedDuplicated(p, {"a": np.ones(2), "b": 1.0})),
              autodiff(FWP, lambda p: p["a"] * p["b"], Duplicated,
                       tape.MixedDuplicated(p, {"a": np.ones(2), "b": 1.0})))
    assert h.stats.eager_calls == 0 and h.stats.traces == 1, h.stats


def test_a_replay_that_raises_after_a_per_direction_rule_runs_it_once():
    """The eager call that answers a replay that raised takes what the user's rule returned
    in the replay, batched attempt and directions alike."""
    def make(runs):
        rule = _scalar_only_rule(runs)

        def f(x, c):
            return rule(x) * np.linalg.solve(c, x)   # c singular at odd calls: raises
        return f
    mine, theirs = _Runs(), _Runs()
    g = tape.compile(FWP, make(mine), BatchDuplicated, BatchDuplicated, Const)
    eager = make(theirs)

    def args(k):
        return [BatchDuplicated(np.arange(2.0) + k, (np.ones(2), np.array([1.0, -1.0]))),
                Const(np.eye(2) * (1.0 + k) * (k % 2 == 0))]
    for k in (0, 2, 1, 4, 3):
        got = outcome(lambda: g(*args(k)))
        want = outcome(lambda: autodiff(FWP, eager, BatchDuplicated, *args(k)))
        if want[1] is not None or got[1] is not None:
            assert type(got[1]) is type(want[1]) and str(got[1]) == str(want[1]), (got, want)
        else:
            identical(got[0], want[0])
        assert mine.counts() == theirs.counts(), (k, mine.counts(), theirs.counts())
    assert g.stats.hits >= 1 and g.stats.eager_calls == 2, g.stats
