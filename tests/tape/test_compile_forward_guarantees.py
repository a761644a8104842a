"""The guarantees of `tape.compile` in forward mode, each against eager forward mode bit for bit:
guards that fail and trace again, closure arrays changed between calls, random draws (eager,
with a CompileWarning), user rules and inactive functions run once per call, unused steps
that raise, error states set inside the function, errors, the cache bound and the stats."""
import itertools
import re
import warnings

import numpy as np
import pytest

import tape
from tape import (Active, CompileWarning, Const, Duplicated, Forward, ForwardWithPrimal,
                  autodiff, custom_rule)

from forward_compare import identical, run_sequence

FW, FWP = Forward, ForwardWithPrimal


def _dup(x, dx=None):
    x = np.array(x, dtype=float)
    return Duplicated(x, np.ones_like(x) if dx is None else np.array(dx, dtype=float))


# -- guards -------------------------------------------------------------------------------------

def test_branches_masks_and_argmax_follow_the_values():
    signs = [np.array([1., -1, 1, -1]), np.array([-1., 1, -1, -1]), np.array([1., 1, 1, -1])]

    def f(x, c):
        y = x[c > 0]                      # a mask: its count decides a shape (guarded)
        k = np.argmax(c * x)              # an index: an input of the program
        z = np.sum(y ** 2) + x[k] * 3
        if z > 1.0:                       # a branch on a value (guarded)
            return np.sin(z) * x
        return z * x + int(c[0])          # a Python number of a Const (guarded)
    g = run_sequence(FWP, f, Duplicated,
                     lambda k: [_dup(np.linspace(-1, 2, 4) * (k - 1), [1., 2., 0.5, -1.]),
                                Const(signs[k % 3])], [0, 1, 2, 0, 1, 2, 3])
    assert g.stats.traces >= 2 and g.stats.guard_failures >= 1 and g.stats.hits >= 2, g.stats
    assert g.stats.eager_calls == 0, g.stats


def test_loops_whose_count_comes_from_a_const():
    def f(x, n, w):
        for _ in range(int(n[0])):
            x = np.tanh(x @ w) + 0.5 * x
        return x
    run_sequence(FW, f, Duplicated, lambda k: [_dup(np.ones((2, 3)) * k), Const(np.array([k % 3])),
                                               _dup(np.eye(3) * 0.5)], [0, 1, 2, 1, 0])


def test_past_max_traces_it_runs_eagerly():
    def f(x):
        return x * float(np.round(np.sum(tape.primal(x))))
    g = tape.compile(FW, f, Duplicated, Duplicated, max_traces=2)
    run_sequence(FW, f, Duplicated, lambda k: [_dup([k, 1.0])], [0, 1, 2, 3], g=g)
    assert g.stats.traces == 2 and g.stats.eager_calls >= 1
    assert "more than 2 traces" in g.stats.eager_reasons[-1]


# -- what the function reads --------------------------------------------------------------------

def test_closure_arrays_changed_between_calls_are_seen():
    w = np.array([1.0, 2.0, 3.0])
    scale = [2.0]

    def f(x):
        return np.sin(x * w) * scale[0]

    def change(k):
        w[k % 3] += 1.0
        if k == 1:
            scale[0] = -1.0
    g = run_sequence(FWP, f, Duplicated, lambda k: [_dup([0.1, 0.2, 0.3])], [0, 1, 2, 3],
                     between=change)
    assert g.stats.eager_calls == 0 and g.stats.traces >= 3


def test_random_draws_run_eagerly_with_a_warning():
    def f(x):
        return x * np.random.normal(size=3)
    g = tape.compile(FWP, f, Duplicated, Duplicated)
    for seed in range(3):
        np.random.seed(seed)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = g(_dup([1.0, 2.0, 3.0]))
        np.random.seed(seed)
        identical(got, autodiff(FWP, f, Duplicated, _dup([1.0, 2.0, 3.0])))
        if seed == 0:
            assert any(issubclass(w.category, CompileWarning) for w in caught)
    assert g.stats.eager_calls >= 2 and "random" in g.stats.eager_reasons[0]


def test_writes_into_const_arguments_run_eagerly():
    def f(x, c):
        c[0] = 5.0
        return x * c
    run_sequence(FWP, f, Duplicated, lambda k: [_dup([1.0, 2.0]), Const(np.array([1.0, k]))],
                 [0, 1])


# -- user code runs once per call ---------------------------------------------------------------

class Counted:
    """A rule with a forward rule and an inactive function, both counting their runs; the
    rule's factor grows with its runs, so a run too many changes every later value."""

    def __init__(self):
        self.runs = {k: itertools.count() for k in ("impl", "fwd", "inactive")}

        def ticked(x):
            return x * (1.0 + next(self.runs["impl"]))

        def ticked_forward(cfg, primals, tangents):
            factor = 1.0 + next(self.runs["fwd"])
            return primals[0] * factor, tangents[0] * factor

        self.rule = custom_rule(ticked, augmented_primal=lambda cfg, x: (x * 2.0, None),
                                reverse=lambda cfg, s, g: (g * 2.0,), forward=ticked_forward,
                                check_primal=False)

        @tape.inactive
        def scale(x):
            next(self.runs["inactive"])
            return np.float64(1.5) + 0.0 * np.sum(x)
        self.scale = scale

    def counts(self):
        return {k: int(re.search(r"\d+", repr(c)).group()) for k, c in self.runs.items()}


def _runs_per_call(make_f, make_args, calls, mode=FWP):
    per_call = []
    for compiled in (True, False):
        counted = Counted()
        f = make_f(counted)
        g = tape.compile(mode, f, Duplicated, *[type(a) for a in make_args(calls[0])])
        counts, results = [counted.counts()], []
        for c in calls:
            args = make_args(c)
            try:
                results.append(g(*args) if compiled else autodiff(mode, f, Duplicated, *args))
            except Exception as e:   # noqa: BLE001  (compared)
                results.append((type(e), str(e)))
            counts.append(counted.counts())
        per_call.append(([{k: b[k] - a[k] for k in b} for a, b in zip(counts, counts[1:])],
                         results))
    (mine, got), (theirs, want) = per_call
    assert mine == theirs
    for a, b in zip(got, want):
        identical(a, b)


def test_user_rules_and_inactive_functions_run_once_per_call():
    def make_f(counted):
        def f(x, c):
            y = counted.rule(x) * counted.scale(c)    # forward rule with a tangent
            z = counted.rule(c)                       # impl on a Const: a step too
            if np.sum(y) > 0:                         # a guard after user code ran
                return y + z
            return y - z
        return f
    _runs_per_call(make_f, lambda k: [_dup(np.arange(3.0) * (-1) ** k), Const(np.ones(3))],
                   [0, 0, 1, 1, 0, 2])


def test_user_rules_whose_results_nothing_reads_still_run():
    def make_f(counted):
        def f(x):
            counted.rule(x)
            counted.scale(x)
            return np.sin(x)
        return f
    _runs_per_call(make_f, lambda k: [_dup(np.arange(3.0) + k)], [0, 1, 2], mode=FW)


# -- errors -------------------------------------------------------------------------------------

def test_unused_steps_that_raise_still_run():
    def f(x, c):
        np.linalg.cholesky(c)     # a check: LinAlgError for an indefinite matrix
        return np.sin(x)
    run_sequence(FWP, f, Duplicated, lambda k: [_dup([1.0, 2.0]),
                                               Const(np.eye(2) * (1 - 2 * (k % 2)))],
                 [0, 1, 0, 1])


def test_error_states_set_inside_the_function_replay():
    def f(x, c):
        with np.errstate(divide="raise"):
            y = x / c
        return y * 2.0
    run_sequence(FWP, f, Duplicated, lambda k: [_dup([1.0, 2.0]), Const(np.array([1.0, k]))],
                 [1, 2, 0, 1])


def test_argument_errors_are_eager_mode_s():
    def f(x):
        return x * 2.0
    g = tape.compile(FW, f)   # (compiled with activity types, it names the type it wants)
    g(_dup([1.0, 2.0]))
    for bad in (Duplicated(np.ones(2), np.ones(3)), Active(np.ones(2))):
        with pytest.raises(Exception) as mine:
            g(bad)
        with pytest.raises(Exception) as theirs:
            autodiff(FW, f, Duplicated, bad)
        assert type(mine.value) is type(theirs.value) and str(mine.value) == str(theirs.value)
    with pytest.raises(Exception) as mine:
        tape.compile(FW, f, Active, Duplicated)(_dup([1.0]))
    assert "forward mode" in str(mine.value)


def test_a_replay_that_raises_gives_eager_mode_s_error():
    def f(x, c):
        return np.linalg.solve(c, x)
    run_sequence(FWP, f, Duplicated, lambda k: [_dup([1.0, 2.0]),
                                               Const(np.eye(2) * (k % 2))], [1, 0, 1])


# -- stats and the cache ------------------------------------------------------------------------

def test_plain_calls_replay_without_eager_calls():
    def f(x, w):
        return np.tanh(x @ w).sum(axis=0)
    g = tape.compile(FWP, f, Duplicated, Duplicated, Const)
    w = np.ones((3, 2))
    for k in range(5):
        x, dx = np.full((4, 3), 0.1 * k), np.ones((4, 3))
        identical(g(Duplicated(x, dx), Const(w)),
                  autodiff(FWP, f, Duplicated, Duplicated(x, dx), Const(w)))
    s = g.stats
    assert (s.traces, s.hits, s.eager_calls, s.programs) == (1, 4, 0, 1), s


def test_the_cache_is_bounded():
    g = tape.compile(FW, lambda x: np.sin(x) * x, Duplicated, Duplicated, max_programs=3)
    for n in range(1, 7):
        g(_dup(np.ones(n)))
    assert g.stats.programs == 3 and g.stats.traces == 6


def test_user_code_before_a_replay_that_raises_runs_once():
    def make_f(counted):
        def f(x, c):
            y = counted.rule(x) * counted.scale(c)
            return np.linalg.solve(c, y)          # singular on odd calls: eager raises
        return f
    _runs_per_call(make_f, lambda k: [_dup(np.arange(2.0) + k), Const(np.eye(2) * (k % 2 - 1))],
                   [0, 0, 1, 0, 1])
