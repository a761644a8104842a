"""`tape.compile` in batched reverse mode (BatchDuplicated arguments: W seeds in one sweep)
against eager batched `autodiff`, bit for bit.

The generated programs of tests/tape/test_compile_programs.py run with W = 1, 2 and 5 seeds
and changing values, each call compared with eager batch mode on copies of the same arguments
(tests/tape/forward_compare.py compares any mode): primal, returned derivatives (W-tuples for
Active arguments), every shadow, buffers written (their W shadows are the W seeds), errors.
Then Python floats, pytrees, float32, complex numbers, in-place functions, the rules that run
once per direction (a built-in one and a user's), guards, the width in the signature,
MixedDuplicated, and each direction against a one-direction Reverse call and against central
finite differences.
"""
import itertools
import re

import numpy as np
import pytest

import tape
from tape.core import Primitive
from tape import (Active, BatchDuplicated, Const, Duplicated, MixedDuplicated, Reverse,
                  ReverseWithPrimal, autodiff)

from batched_arguments import directions, program_args
from forward_compare import outcome, run_sequence
from test_compile_programs import STEPS, make_function

RV, RVP = Reverse, ReverseWithPrimal


def _specs(n, seed=8765):
    rng = np.random.default_rng(seed)
    names = sorted(STEPS)
    for k in range(n):
        yield {"steps": tuple(rng.choice(names, size=int(rng.integers(1, 5)))),
               "width": (1, 2, 5)[k % 3],
               "mode": [RV, RVP][int(rng.integers(2))],
               "ret": [Active, Active, Const][int(rng.integers(3))],
               "a_kind": ["float", "array"][int(rng.integers(2))],
               "a_active": bool(rng.integers(3)),
               "W_active": bool(rng.integers(2)),
               "p_kind": ["dict", "list"][int(rng.integers(2))],
               "seed": int(rng.integers(2 ** 31))}


@pytest.mark.parametrize("spec", list(_specs(36)),
                         ids=lambda s: f"W{s['width']}-" + "-".join(s["steps"]))
def test_generated_programs_equal_eager_batch_mode(spec):
    # An Active return is a scalar (seeded 1 in every direction); a Const one returns x, and
    # only the buffers the program writes are seeded (differently per direction).
    f = make_function(spec["steps"], spec["ret"])
    rng = np.random.default_rng(spec["seed"])
    calls = [program_args(spec, rng, Active) for _ in range(3)]
    calls[1][0].val[...] = -calls[0][0].val   # the opposite x flips branches on sums, masks
    calls.append(calls[0])
    g = run_sequence(spec["mode"], f, spec["ret"], lambda c: calls[c], range(len(calls)))
    stats = g.stats
    assert not [r for r in stats.eager_reasons if r.startswith("tracing failed")], stats
    assert stats.eager_calls == 0, stats
    assert stats.hits >= 1, stats


# -- each direction is a one-direction Reverse call, and a finite difference --------------------

def _chain(x, w, c):
    y = np.tanh(x @ w) * c + np.log1p(x * x).sum(axis=1, keepdims=True)
    z = y / (1.0 + np.exp(-x[:, :1])) - np.maximum(x, 0.1)[:, 1:2] ** 3
    return z * z + np.sum(x, axis=0)


def _written(out, x, w, c):
    out[...] = _chain(x, w, c)   # the W shadows of `out` are the W seeds


@pytest.mark.parametrize("width", [1, 2, 5])
def test_each_direction_equals_a_one_direction_call_and_finite_differences(width):
    rng = np.random.default_rng(width)
    x, w, c = rng.normal(size=(3, 4)), rng.normal(size=(4, 4)), 0.7
    g = tape.compile(RV, _written, Const, BatchDuplicated, BatchDuplicated,
                     BatchDuplicated, Const)
    one = tape.compile(RV, _written, Const, Duplicated, Duplicated, Duplicated, Const)
    for scale in (1.0, -0.6, 1.0):
        seeds = directions(rng, width, (3, 4))
        out = np.zeros((3, 4))
        dxs, dws = directions(rng, width, (3, 4)), directions(rng, width, (4, 4))
        start, start_w = [d.copy() for d in dxs], [d.copy() for d in dws]
        g(BatchDuplicated(out, tuple(s.copy() for s in seeds)),
          BatchDuplicated(x * scale, dxs), BatchDuplicated(w, dws), Const(c))
        np.testing.assert_allclose(out, _chain(x * scale, w, c), rtol=1e-15)
        for k in range(width):
            dx, dw = start[k].copy(), start_w[k].copy()
            one(Duplicated(np.zeros((3, 4)), seeds[k].copy()), Duplicated(x * scale, dx),
                Duplicated(w, dw), Const(c))
            np.testing.assert_allclose(dxs[k], dx, rtol=1e-13, atol=1e-13)
            np.testing.assert_allclose(dws[k], dw, rtol=1e-13, atol=1e-13)
            # <seed_k, chain(x + h v, w + h u)>' at h = 0 is <dx_k, v> + <dw_k, u>
            v, u, h = rng.normal(size=(3, 4)), rng.normal(size=(4, 4)), 1e-6
            fd = (np.sum(seeds[k] * _chain(x * scale + h * v, w + h * u, c))
                  - np.sum(seeds[k] * _chain(x * scale - h * v, w - h * u, c))) / (2 * h)
            np.testing.assert_allclose(np.sum((dxs[k] - start[k]) * v)
                                       + np.sum((dws[k] - start_w[k]) * u),
                                       fd, rtol=1e-6, atol=1e-7)
    assert g.stats.eager_calls == 0 and g.stats.hits >= 1, g.stats


def test_zero_d_and_column_values_broadcast_with_the_batch_axis():
    def f(x, s, col):
        # cotangents of (3,), 0-d and (3, 1) values, broadcasting against each other
        y = np.sin(x) * s + col * x + np.exp(s) * np.sum(x * col.T)
        return np.sum(y * y) + s * s
    rng = np.random.default_rng(0)

    def args(k):
        return [BatchDuplicated(rng.normal(size=3), directions(rng, 4, (3,))),
                Active(np.float64(0.3 + k)),
                BatchDuplicated(rng.normal(size=(3, 1)), directions(rng, 4, (3, 1)))]
    g = run_sequence(RVP, f, Active, args, [0, 1, 2])
    assert g.stats.eager_calls == 0 and g.stats.hits == 2, g.stats


# -- numbers and structures -----------------------------------------------------------------------

def test_active_python_floats_give_w_tuples_of_python_floats():
    def f(x, y, v):
        return x * x * y + np.sin(x) + np.sum(v * v) * y
    g = run_sequence(RVP, f, Active,
                     lambda k: [Active(1.0 + k), Active(2.0),
                                BatchDuplicated(np.arange(3.0) + k, (np.ones(3), np.zeros(3)))],
                     [0, 1, 2])
    (dx, dy, _), primal = g(Active(3.0), Active(2.0), BatchDuplicated(np.ones(3),
                                                                     (np.ones(3),) * 2))
    assert type(primal) is float and len(dx) == 2 and all(type(d) is float for d in dx + dy)
    assert g.stats.eager_calls == 0, g.stats


def test_pytrees():
    def f(p, c):
        h = np.tanh(p["w"] @ c + p["b"][0])
        return np.sum(h * h) + p["b"][1][0] * np.sum(p["w"])

    def args(k):
        p = {"w": np.arange(6.0).reshape(2, 3) / (k + 1), "b": [np.ones(2) * k, np.ones(1)]}
        dps = tuple({"w": np.ones((2, 3)) * (j + 1), "b": [np.array([1.0, -1.0]) * j,
                                                           np.full(1, 0.5)]} for j in range(3))
        return [BatchDuplicated(p, dps), Const(np.array([0.5, -1.0, 2.0]))]
    g = run_sequence(RVP, f, Active, args, [0, 1, 1])
    assert g.stats.eager_calls == 0, g.stats


def test_float32_programs():
    def f(x, w):
        return np.sum(np.tanh(x @ w) * np.float32(0.5) + x * 2.0) + np.sum(x[0] * x[1])

    def args(k):
        rng = np.random.default_rng(k)
        return [BatchDuplicated(rng.normal(size=(3, 4)).astype(np.float32),
                                directions(rng, 2, (3, 4), np.float32)),
                BatchDuplicated(rng.normal(size=(4, 4)).astype(np.float32),
                                directions(rng, 2, (4, 4), np.float32))]
    g = run_sequence(RVP, f, Active, args, [0, 1, 2])
    assert g.stats.eager_calls == 0, g.stats


def test_complex_numbers():
    def f(z, x):
        w = z * z * np.exp(1j * x) + np.conj(z)   # a real input's cotangent comes back complex
        return np.sum(np.abs(w * (x + 2.0j)) ** 2)

    def args(k):
        z = np.array([1 + 2j, -0.5j, 3.0]) * (k + 1)
        return [BatchDuplicated(z, (np.array([1.0, 1j, 0.5 - 0.5j]), np.array([0j, 1, 2]))),
                BatchDuplicated(np.array([0.1, 0.2, -0.3]), (np.ones(3), np.arange(3.0)))]
    g = run_sequence(RVP, f, Active, args, [0, 1, 1])
    assert g.stats.eager_calls == 0, g.stats


# -- in-place functions: the W shadows of a written buffer are its W seeds ----------------------

def test_in_place_function_writes_primal_and_seeds_with_every_shadow():
    def f(y, z, x, c):
        y[0] = x[0] ** 2 + x[1]
        y[1] = x[0] * x[1]
        z[:] = c * 2.0        # a value with no derivative: z's shadows are zeroed, as eagerly
        y[2:] += np.sin(x[2:]) * c[2:]
        return np.sum(y * x)

    def args(k):
        return [BatchDuplicated(np.zeros(4), (np.full(4, 7.0), np.full(4, -1.0))),
                BatchDuplicated(np.ones(4), (np.ones(4), np.ones(4))),
                BatchDuplicated(np.arange(4.0) + k, (np.array([1.0, 0.0, 0.5, -1.0]),
                                                     np.arange(4.0))),
                Const(np.linspace(0, 1, 4))]
    for ret in (Const, Active):
        for mode in (RV, RVP):
            g = run_sequence(mode, f, ret, args, [0, 1, 2])
            assert g.stats.eager_calls == 0, g.stats


# -- rules that cannot take batched cotangents run once per direction, as eagerly ---------------

def test_a_built_in_rule_that_runs_once_per_direction():
    def f(x):
        y = x * 1.0
        y[[0, 1], [1, 2]] = x[0, :2] ** 2   # fancy-index write
        return np.sum(np.cumprod(y, axis=1) * x[[2, 0, 2]])   # cumprod's reverse: per direction

    def args(k):
        rng = np.random.default_rng(k)
        return [BatchDuplicated(rng.normal(size=(3, 4)), directions(rng, 3, (3, 4)))]
    g = run_sequence(RVP, f, Active, args, [0, 1, 2])
    assert g.stats.eager_calls == 0 and g.stats.hits == 2, g.stats
    assert "_reverse_batched(cumprod_rev" in str(g), str(g)


class _Runs:
    """Counts of a rule's reverse runs, on a batched cotangent and on one direction's
    (`itertools.count`: state the compiled function does not watch as a value it reads)."""

    def __init__(self):
        self.batched, self.single = itertools.count(), itertools.count()

    def counts(self):
        return tuple(int(re.search(r"\d+", repr(c)).group())
                     for c in (self.batched, self.single))


def _scalar_only_rule(runs):
    """A user's rule whose reverse cannot take a batched cotangent (`np.asarray(g)`)."""
    def rev(cfg, x, g):
        next(runs.batched if type(g).__name__ == "Batched" else runs.single)
        return (np.cos(x) * np.asarray(g),)   # a batched cotangent cannot become one array
    return tape.custom_rule(lambda x: np.sin(x), augmented_primal=lambda cfg, x: (np.sin(x), x),
                            reverse=rev)


def test_a_user_rule_that_runs_once_per_direction_runs_as_often_as_eagerly():
    def make(runs):
        rule = _scalar_only_rule(runs)

        def f(y, x):
            y[...] = rule(x) * x   # the W seeds differ
            return np.sum(rule(y))
        return f

    def args(k):
        return [BatchDuplicated(np.zeros(3), tuple(np.full(3, float(j)) for j in range(3))),
                BatchDuplicated(np.arange(3.0) + k, tuple(np.ones(3) for _ in range(3)))]
    mine, theirs = _Runs(), _Runs()
    g = tape.compile(RVP, make(mine), Active, BatchDuplicated, BatchDuplicated)
    run_sequence(RVP, make(theirs), Active, args, [0, 1, 2], g=g)
    # the batched attempt, then once per direction, for both calls of the rule, per call
    assert mine.counts() == theirs.counts() == (6, 18), (mine.counts(), theirs.counts())
    assert g.stats.eager_calls == 0 and g.stats.hits == 2, g.stats
    assert "_reverse_batched(" in str(g), str(g)


def test_a_rule_error_that_is_not_about_batching_raises_as_eagerly():
    rule = tape.custom_rule(lambda x: np.sin(x), augmented_primal=lambda cfg, x: (np.sin(x), x),
                            reverse=lambda cfg, x, g: (_fails(x, g),))

    def _fails(x, g):
        raise ValueError("this rule has no reverse here")

    def f(x):
        return np.sum(rule(x))
    g = run_sequence(RV, f, Active,
                     lambda k: [BatchDuplicated(np.ones(2) * k, (np.ones(2),) * 2)], [0, 1, 2])
    assert g.stats.eager_calls >= 1, g.stats   # the replay raised: eager mode raises it


def test_a_cotangent_of_another_shape_than_its_value_broadcasts_as_eagerly():
    """A primitive's rule may return a cotangent that only broadcasts to its argument's shape
    (a 0-d one for a (3,) array; `custom_rule` broadcasts it itself, a bare `Primitive` does
    not): the inline terms of the steps before it must broadcast it with the batch axis aside,
    as the rules do, even where W equals the array's length."""
    total = Primitive("total", lambda x: np.sum(x * x),
                      augmented_primal=lambda cfg, x: (np.sum(x * x), x),
                      reverse=lambda cfg, x, g: (g * np.sum(x),))   # 0-d: it broadcasts

    def f(x):
        return total(np.sin(x)) + np.sum(x)   # sin: an inline step
    g = run_sequence(RVP, f, Active, lambda k: [BatchDuplicated(
        np.linspace(0.1, 1.0, 3) * (k + 1), tuple(np.full(3, j + 1.0) for j in range(3)))],
        [0, 1, 2])
    assert g.stats.eager_calls == 0 and g.stats.hits == 2, g.stats


# -- guards, signatures, MixedDuplicated ----------------------------------------------------------

def test_guards_that_fail_trace_again():
    def f(x, c):
        y = np.sin(x) * c + x ** 2
        if x.sum() > 0:
            return np.sum(np.tanh(y) * 0.5)
        return np.sum(y / 3.0)

    def args(k):
        x = np.linspace(0.1, 1, 5) * (1 if k % 2 else -3)
        return [BatchDuplicated(x, (np.full(5, 0.3), np.arange(5.0))), Const(np.arange(5.0))]
    g = run_sequence(RVP, f, Active, args, [0, 1, 0, 1, 2])
    assert g.stats.eager_calls == 0 and g.stats.guard_failures >= 1, g.stats
    assert g.stats.programs == 2, g.stats


def test_the_width_is_part_of_the_signature():
    def f(y, x):
        y[...] = np.sin(x) * x
    g = tape.compile(RV, f, Const, BatchDuplicated, BatchDuplicated)
    for width in (2, 3, 2, 1, 3):
        def args(k):
            return [BatchDuplicated(np.zeros(3), tuple(np.full(3, float(j + 1))
                                                       for j in range(width))),
                    BatchDuplicated(np.linspace(0, 1, 3), tuple(np.zeros(3)
                                                                for _ in range(width)))]
        run_sequence(RV, f, Const, args, [0], g=g)
    assert g.stats.traces == 3 and g.stats.eager_calls == 0, g.stats


def test_a_width_mismatch_raises_as_eagerly():
    def f(x, y):
        return np.sum(x * y)
    g = tape.compile(RV, f, Active, BatchDuplicated, BatchDuplicated)
    args = [BatchDuplicated(np.ones(2), (np.zeros(2),) * 2),
            BatchDuplicated(np.ones(2), (np.zeros(2),) * 3)]
    mine = outcome(lambda: g(*args))[1]
    theirs = outcome(lambda: autodiff(RV, f, Active, *args))[1]
    assert type(mine) is tape.ActivityError and str(mine) == str(theirs)
    assert "batch width mismatch" in str(mine)


def test_mixed_duplicated_is_compiled():
    def f(p, x):
        return np.sum(np.sin(p["a"]) * p["b"] * x) + p["b"] ** 2

    def args(k):
        return [MixedDuplicated({"a": np.arange(3.0) + k, "b": 2.0 + k},
                                {"a": np.ones(3), "b": 1.0}),
                Duplicated(np.ones(3) * k, np.zeros(3))]
    for mode in (RV, RVP):
        g = run_sequence(mode, f, Active, args, [0, 1, 2])
        assert g.stats.eager_calls == 0 and g.stats.hits == 2, g.stats
