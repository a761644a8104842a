"""`tape.compile` against eager `autodiff`, second round: Python state the function changes,
its own error state, and values of Const arguments only.

Each test runs a sequence of calls through the compiled function and the same sequence through
eager `autodiff`, each from fresh state (the function's counters, generators, buffers), and
compares every call: result, shadows, arguments. Each was a difference once: a first call ran
`f` three times (two traces, then eagerly), so counters, appended lists, iterators and
buffers updated in place inside `f` moved three times; steps under `np.errstate` or
`warnings.simplefilter("error")` inside `f` replayed under the caller's settings; a value of
Const arguments only came back as a Python float and traced again at every call.
"""
import itertools
import random
import warnings

import numpy as np
import pytest

import tape
from tape import Active, CompileWarning, Const, Duplicated, Reverse, ReverseWithPrimal, autodiff

from compile_sequences import same as _same, sequences as _sequences

RP = ReverseWithPrimal
X = [np.random.default_rng(k).normal(size=4) for k in range(6)]


def _dup(c):
    return Duplicated(X[c % len(X)].copy(), np.zeros(4))


CALLS = [0, 1, 2, 3, 0, 1]


# -- Python state the function changes: f runs once per call, as in eager mode ----------------

def test_a_counter_in_a_closure_dict_counts_calls():
    def setup():
        state = {"calls": 0}

        def f(x):
            state["calls"] += 1
            return np.sum(np.sin(x)) * state["calls"]
        return f, lambda c: [_dup(c)]
    g = _sequences(setup, CALLS)
    assert g.stats.eager_calls == len(CALLS)   # f changes what it reads: never replayed


def test_a_global_counter_deciding_a_branch():
    def setup():
        global CALLS_MADE
        CALLS_MADE = 0

        def f(x):
            global CALLS_MADE
            CALLS_MADE += 1
            return np.sum(x) if CALLS_MADE % 3 == 1 else np.sum(x ** 2)
        return f, lambda c: [_dup(c)]
    _sequences(setup, CALLS)


def test_a_list_appended_to_inside_f():
    def setup():
        log = []

        def f(x):
            log.append(tape.primal(x).copy())
            return np.sum(x ** 2) * len(log)
        return f, lambda c: [_dup(c)]
    _sequences(setup, CALLS)


@pytest.mark.parametrize("make_counter", [lambda: iter(range(100)), lambda: itertools.count(1)],
                         ids=["iterator", "itertools.count"])
def test_next_of_an_iterator_it_does_not_watch(make_counter):
    """Nothing watched changes: the second call's trace differs from the first's, so the
    signature runs eagerly from there on; each call still ran f once."""
    def setup():
        counter = make_counter()
        return (lambda x: np.sum(np.tanh(x)) * next(counter)), lambda c: [_dup(c)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompileWarning)
        g = _sequences(setup, CALLS)
    assert g.stats.traces == 1 and g.stats.eager_calls == len(CALLS) - 1


def test_an_attribute_counter_of_a_callable_object():
    class Model:
        def __init__(self):
            self.w, self.calls = np.linspace(0.5, 1.5, 4), 0

        def __call__(self, x):
            self.calls += 1
            return np.sum(x * self.w) * self.calls

    def setup():
        return Model(), lambda c: [_dup(c)]
    _sequences(setup, CALLS)


def test_a_closure_buffer_updated_in_place_before_use():
    def setup():
        running = np.zeros(4)

        def f(x):
            running[:] = 0.5 * running + 1.0
            return np.sum(x * running)
        return f, lambda c: [_dup(c)]
    _sequences(setup, CALLS)


def test_stateful_draws_follow_the_eager_sequence():
    """Python's random module and NumPy's global generator: every call draws once, as eager."""
    def setup():
        random.seed(3)
        np.random.seed(4)

        def f(x):
            return np.sum(x * np.random.rand(4)) * random.random()
        return f, lambda c: [_dup(c)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompileWarning)
        _sequences(setup, CALLS)


def test_a_deterministic_function_is_replayed_after_a_confirming_call():
    calls = []

    def f(x):
        calls.append(1)   # not read back: a side effect that replays skip
        return np.sum(np.sin(x) ** 2)
    g = tape.compile(RP, f, Active, Duplicated)
    for c in CALLS:
        _same(g(_dup(c)), autodiff(RP, lambda x: np.sum(np.sin(x) ** 2), Active, _dup(c)))
    # `calls` is a closure list that f changes: the signature runs eagerly, f once per call
    assert len(calls) == len(CALLS)

    def h(x):
        return np.sum(np.sin(x) ** 2)
    g = tape.compile(RP, h, Active, Duplicated)
    for c in CALLS:
        _same(g(_dup(c)), autodiff(RP, h, Active, _dup(c)))
    assert (g.stats.traces, g.stats.hits, g.stats.eager_calls) == (1, len(CALLS) - 1, 0)


# -- the function's own error state and warning filters ----------------------------------------

POSITIVE_THEN_NOT = [np.array([1.0, 2.0]), np.array([1.0, 0.0]), np.array([1.0, -1.0])]


def _value(c):
    return [Duplicated(POSITIVE_THEN_NOT[c].copy(), np.zeros(2))]


def test_errstate_raise_inside_f_raises_in_the_replay():
    def setup():
        def f(x):
            with np.errstate(divide="raise", invalid="raise"):
                return np.sum(np.log(x))
        return f, _value
    _sequences(setup, [0, 1, 0, 2, 0])


def test_errstate_ignore_inside_f_under_raise_outside():
    def setup():
        def f(x):
            with np.errstate(all="ignore"):
                y = np.log(x)
            return np.sum(np.where(np.isfinite(y), y, 0.0))
        return f, _value
    with np.errstate(all="raise"):   # the log's derivative at 0 raises in both sweeps
        g = _sequences(setup, [0, 1, 0, 2, 0])
    assert g.stats.hits == 3 and "_step_context" in str(g)


def test_warnings_as_errors_inside_f():
    def setup():
        def f(x):
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                return np.sum(np.sqrt(x))
        return f, _value
    _sequences(setup, [0, 2, 0, 2])


# -- values of Const arguments only ------------------------------------------------------------

def test_a_result_of_const_arguments_only_is_returned_as_eager_and_replayed():
    def setup():
        return (lambda x, c: np.sum(c)), lambda c: [_dup(c), Const(X[(c + 1) % 6].copy())]
    g = _sequences(setup, CALLS)
    assert g.stats.traces == 1 and g.stats.eager_calls == 0   # no guard on its value


def test_a_seeded_generator_inside_f_compiles():
    def setup():
        def f(x):
            rng = np.random.default_rng(0)
            return np.sum(x * rng.normal(size=4))
        return f, lambda c: [_dup(c)]
    g = _sequences(setup, CALLS)
    assert g.stats.eager_calls == 0


def test_reverse_mode_sequences_with_guards_and_shapes():
    def setup():
        def f(x, c):
            y = np.sin(x) if np.sum(x) > 0 else np.cos(x)
            return np.sum(y[c > 0] ** 2) + x[np.argmax(c)]
        return f, lambda c: [_dup(c), Const(X[(c + 3) % 6].copy())]
    _sequences(setup, [0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5], mode=Reverse)


def test_a_closure_array_changed_between_calls_after_the_program_is_confirmed():
    w = np.linspace(0.5, 1.5, 4)

    def f(x):
        h = x
        for _ in range(3):   # the same closure array baked at each step
            h = np.tanh(h * w)
        return np.sum(h)
    g = tape.compile(RP, f, Active, Duplicated)
    for k, c in enumerate(CALLS + CALLS):
        _same(g(_dup(c)), autodiff(RP, f, Active, _dup(c)), f"call {k}")
        if k == len(CALLS):
            w *= 2.0   # in place, between calls
    assert g.stats.hits >= len(CALLS) and g.stats.eager_calls == 0
