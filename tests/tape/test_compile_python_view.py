"""`tape.compile` against eager `autodiff`: what Python code sees of Const values and of the
results of inactive functions while traced (hashing, formatting, isinstance), and user code
(custom rules, `tape.inactive` functions) called on untraced values only.

Every comparison runs a sequence of calls compiled and the same calls through eager `autodiff`
on fresh state (tests/tape/compile_sequences.py).
"""
import collections
import functools
import itertools

import numpy as np
import pytest

import tape
from tape import Active, Const, Duplicated, ReverseWithPrimal, autodiff

from compile_sequences import sequences

RP = ReverseWithPrimal


def _dup(x):
    x = np.asarray(x, dtype=float)
    return Duplicated(x.copy(), np.zeros_like(x))


def _probe(probe, ints=True, calls=(0, 1, 0, 1, 2, 0)):
    """`f(x, c) = sum(x) * probe(x, c)` with a Const int (or float) array `c` and `x` made
    from the call's number: calls with equal numbers decide alike (a replay)."""
    def setup():
        def f(x, c):
            return np.sum(x) * probe(x, c)

        def make_args(k):
            rng = np.random.default_rng(k + 7)
            c = rng.integers(0, 3, size=4) if ints else rng.normal(size=4)
            return [_dup(np.random.default_rng(k).normal(size=4)), Const(c)]
        return f, make_args
    return sequences(setup, list(calls))


WEIGHTS = {0: 1.0, 1: 2.0, 2: 3.0}


@pytest.mark.parametrize("probe", [
    lambda x, c: WEIGHTS[c[1]] + WEIGHTS.get(c[2] + 1, -1.0),
    lambda x, c: float(frozenset([c[0], c[1]]) == frozenset({0, 1})),
    lambda x, c: float(sum(n * k for k, n in collections.Counter(c).items())),
    lambda x, c: float(len(dict.fromkeys(c))),
    lambda x, c: WEIGHTS.get(np.argmax(x), 0.5) + WEIGHTS.get(np.sum(c > 0), 0.5),
    lambda x, c: float(c[0] in {WEIGHTS[2] - 3.0, 2}),
], ids=["getitem", "frozenset", "counter", "fromkeys", "argmax-and-count", "float-key"])
def test_hashing_a_const_element_or_an_inactive_result_decides_as_eager(probe):
    g = _probe(probe)
    assert g.stats.traces >= 2 and g.stats.hits >= 1   # compiled, with guards on the keys


def test_a_users_cache_keyed_on_const_elements():
    """A dict the function fills keeps its keys across calls (a trace's keys among them);
    later lookups, compiled or eager, find them as eager mode's NumPy scalars."""
    def setup():
        cache = {}

        @functools.lru_cache(maxsize=None)
        def weight(k):
            return 1.0 + int(k)

        def f(x, c):
            k = c[0]
            if k not in cache:
                cache[k] = 2.0 * int(k)
            return np.sum(x) * (cache[k] + weight(c[1]))

        return f, lambda k: [_dup(np.arange(3.0) + k), Const(np.array([k % 2, k % 3]))]
    sequences(setup, [0, 1, 2, 3, 4, 5])


def test_hashing_arrays_raises_as_eager():
    _probe(lambda x, c: float(len({c: 1})))
    _probe(lambda x, c: float(len({x > 0: 1})))
    _probe(lambda x, c: float(len({c[1:]: 1})))


def test_a_caught_unhashable_error_runs_eagerly():
    def probe(x, c):
        try:
            return float(hash(c))
        except TypeError as e:
            return float(len(str(e)))   # eager mode names ConstBuffer
    g = _probe(probe)
    assert g.stats.eager_calls == 6


@pytest.mark.parametrize("probe", [
    lambda x, c: float(len(str(c)) + len(f"{c[0]}|{c[1]:.2f}|{c}")),
    lambda x, c: float(len(repr(c[0]) + repr(np.argmax(x)) + repr(x > 0))),
    lambda x, c: float(len(format(np.sum(c), ">8")) + len("%s %r" % (c[0], c[1]))),
    lambda x, c: float(len(repr([c[0], c[2]]))),
], ids=["str-and-fstring", "repr", "format-and-percent", "repr-of-a-list"])
def test_str_repr_and_format_are_the_numpy_values(probe):
    g = _probe(probe)
    assert g.stats.hits >= 1


def test_repr_of_a_differentiated_value_is_eager_modes():
    _probe(lambda x, c: float(len(repr(x[0]) + str(x[1]))), calls=[0, 0, 1])


def test_repr_of_a_const_array_runs_eagerly():
    """Eager mode shows a Const argument and its slices as ConstBuffer(...), but what NumPy's
    functions make from it as array(...); a trace cannot tell them apart."""
    g = _probe(lambda x, c: float(len(repr(c[1:]))))
    assert g.stats.eager_calls == 6 and "repr()" in g.stats.eager_reasons[0]
    _probe(lambda x, c: float(len(repr(c + 1) + repr(c))))


@pytest.mark.parametrize("probe", [
    lambda x, c: float(isinstance(c, np.ndarray)) + 2.0 * isinstance(c[0], np.integer),
    lambda x, c: float(np.isscalar(c[0])) + 2.0 * isinstance(c[0], (int, float)),
    lambda x, c: float(isinstance(x > 0, np.ndarray)) + 2.0 * isinstance(np.argmax(x),
                                                                         np.generic),
    lambda x, c: float(isinstance(x, np.ndarray)) + 2.0 * isinstance(x[0], np.floating),
    lambda x, c: float(c.__class__ is np.ndarray or c.__class__.__name__ == "ConstBuffer"),
], ids=["const", "isscalar", "inactive", "differentiated", "dunder-class"])
def test_isinstance_answers_for_the_numpy_value(probe):
    g = _probe(probe)
    assert g.stats.hits >= 1


def test_the_engine_still_sees_tracers():
    """NumPy code the user calls still computes on the values (through the tracer), and a
    compiled gradient that branches on isinstance agrees with eager mode."""
    def probe(x, c):
        scale = np.mean(c) if isinstance(c, np.ndarray) else 0.0
        mask = x > 0
        return np.sum(np.where(mask, x, 0.0) * scale) if isinstance(mask, np.ndarray) else 0.0
    _probe(probe, ints=False)


# -- user code on untraced values -------------------------------------------------------------
# Eager mode runs a custom rule or an inactive function called on constants at every call; a
# replay runs it too (it is a step of the program), so a counter it keeps advances alike.

def _runs(make_f, calls):
    """Compiled, then eager: `f = make_f(tick)` where `tick()` counts (state that the
    function's watch cannot see). Returns the compiled function and how many ticks each
    sequence made."""
    counters = []

    def setup():
        count = itertools.count(1)
        counters.append(count)
        return make_f(lambda: next(count)), lambda k: [_dup(np.arange(3.0) + k)]
    g = sequences(setup, list(calls))
    return g, [next(c) - 1 for c in counters[1:]]   # (counters[0]: the argument types)


def _rule(impl):
    """`impl` as a custom rule (its derivative is never asked for here)."""
    return tape.custom_rule(impl, augmented_primal=lambda cfg, w: (impl(w), None),
                            reverse=lambda cfg, saved, g: (g,))


USER_CODE = pytest.mark.parametrize("wrap", [tape.inactive, _rule],
                                    ids=["inactive", "custom-rule"])


@USER_CODE
def test_user_code_of_constants_runs_at_every_call(wrap):
    def make_f(tick):
        weights = wrap(lambda w: w * 2.0 + 0.0 * tick())
        w = np.arange(3.0)
        return lambda x: np.sum(x * weights(w))
    g, runs = _runs(make_f, range(5))
    assert g.stats.hits >= 1 and runs == [5, 5]


@USER_CODE
def test_user_code_of_constants_with_a_state_dependent_result(wrap):
    def make_f(tick):
        weights = wrap(lambda w: w * float(tick() % 3))
        return lambda x: np.sum(x * weights(np.ones(3)))
    g, runs = _runs(make_f, range(6))
    assert g.stats.hits >= 1 and runs == [6, 6]


def test_a_stateful_inactive_function_of_no_arguments_gives_each_calls_value():
    def make_f(tick):
        scale = tape.inactive(lambda: float(tick() % 2 + 1))
        return lambda x: np.sum(x) * scale()
    g, runs = _runs(make_f, range(6))
    assert runs == [6, 6]


def test_user_code_on_constants_inside_user_code_runs_once():
    """An inactive function that calls a rule on constants: the rule is its own business (run
    by the inactive function's step), not a second step."""
    def make_f(tick):
        rule = _rule(lambda w: w + 1.0 + 0.0 * tick())
        outer = tape.inactive(lambda w: rule(w) * 2.0)
        return lambda x: np.sum(x * outer(np.ones(3)))
    g, runs = _runs(make_f, range(4))
    assert g.stats.hits >= 1 and runs == [4, 4]


def test_a_failed_replay_after_user_code_of_constants_does_not_run_it_twice():
    """A guard on x fails after the inactive function ran in the replay: the new trace takes
    its result instead of running it again."""
    def make_f(tick):
        @tape.inactive
        def weights():
            tick()
            return np.arange(3.0)

        def f(x):
            w = weights()
            return np.sum(x * w) if x[0] > 1.5 else np.sum(x * x * w)
        return f
    g, runs = _runs(make_f, [0, 0, 1, 2, 2, 0, 3])
    assert g.stats.guard_failures >= 1 and runs == [7, 7]


def test_eager_autodiff_is_unchanged_for_untraced_user_code():
    runs = []
    rule = tape.custom_rule(lambda w: runs.append(1) or w * 2.0,
                            augmented_primal=lambda cfg, w: (w * 2.0, None),
                            reverse=lambda cfg, saved, g: (2.0 * g,))
    (dx,), y = autodiff(RP, lambda x: np.sum(x * rule(np.ones(2))), Active, Active(np.ones(2)))
    assert y == 4.0 and runs == [1]
    np.testing.assert_allclose(dx, [2.0, 2.0])
