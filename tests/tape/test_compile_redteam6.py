"""Compile red team, round 6: compiled Forward / ForwardWithPrimal against eager forward mode,
call after call, bit for bit (tests/tape/forward_compare.py): the earlier rounds' bug classes
(lists, closure arrays changed within a call, Python views of Const values, unused steps that
raise), user rules with forward rules, tangent work that eager mode does and a program may
skip, return and argument kinds, signatures switching, the cache bound, and a long program
replayed cut under tracemalloc."""
import collections
import dataclasses
import itertools
import tracemalloc
import warnings

import numpy as np
import pytest

import tape
from tape import (Const, Duplicated, DuplicatedNoNeed, Forward, ForwardWithPrimal, autodiff,
                  custom_rule)

from forward_compare import identical, run_sequence

FW, FWP = Forward, ForwardWithPrimal


def _dup(x, dx=None):
    x = np.array(x, dtype=float)
    return Duplicated(x, np.ones_like(x) if dx is None else np.array(dx, dtype=float))


def _outcome(call):
    try:
        return call(), None
    except Exception as e:   # noqa: BLE001  (compared)
        return None, e


def _same_outcome(g, mode, f, ret, make_args):
    got, error = _outcome(lambda: g(*make_args()))
    want, want_error = _outcome(lambda: autodiff(mode, f, ret, *make_args()))
    assert type(error) is type(want_error) and str(error) == str(want_error), (
        error, want_error, got, g.stats)
    if want_error is None:
        identical(got, want)


# -- user rules with a forward rule -------------------------------------------------------------

def _doubling_rule(forward):
    return custom_rule(lambda x: x * 2.0, augmented_primal=lambda cfg, x: (x * 2.0, None),
                       reverse=lambda cfg, s, g: (g * 2.0,), forward=forward,
                       check_primal=False)


def test_a_custom_forward_rule_replays():
    rule = _doubling_rule(lambda cfg, p, t: (p[0] * 2.0, t[0] * 2.0))

    def f(x):
        return np.sin(rule(x)) * 3.0
    g = run_sequence(FWP, f, Duplicated, lambda k: [_dup(np.arange(3.0) + k)], [0, 1, 2, 3])
    assert g.stats.eager_calls == 0 and g.stats.traces == 1, g.stats


def test_a_forward_rule_that_gives_no_tangent_for_some_values():
    def forward(cfg, p, t):
        return p[0] * 2.0, (None if np.all(p[0] < 0) else t[0] * 2.0)
    rule = _doubling_rule(forward)

    def f(x):
        return np.sin(rule(x)) * 3.0
    for ret in (Duplicated, DuplicatedNoNeed, Const):
        g = run_sequence(FWP, f, ret, lambda k: [_dup(np.arange(3.0) + (-10 if k else 1))],
                         [1, 1, 0, 0, 1, 0, 1])
        assert g.stats.eager_calls == 0, g.stats


def test_user_code_runs_once_per_call_in_a_long_program_replayed_cut():
    """A 150-step loop with a user rule, an inactive function, an error state, a guard and an
    argmax index (a program of more than 400 statements): compiled (cut into segments under
    tracemalloc, whole without it) against eager, and the user code's run counts."""
    runs = itertools.count()

    def forward(cfg, p, t):
        next(runs)
        return p[0] * 1.01, t[0] * 1.01
    rule = custom_rule(lambda x: x * 1.01, augmented_primal=lambda cfg, x: (x * 1.01, None),
                       reverse=lambda cfg, s, g: (g * 1.01,), forward=forward,
                       check_primal=False)

    @tape.inactive
    def one(x):
        next(runs)
        return np.float64(1.0)

    def f(x, c):
        for i in range(150):
            x = rule(x)
            with np.errstate(divide="ignore"):
                x = x / c[i % 3] + np.sin(x) * 0.1
            if np.sum(x) > 1e6:
                x = x * 0.5
            x = x + x[np.argmax(x)] * 0.01 * one(x)
        return x

    def make_args(k):
        return [_dup(np.arange(3.0) + k), Const(np.array([1.0, 2.0, 3.0 + k]))]
    for tracing in (False, True):
        if tracing:
            tracemalloc.start()
        try:
            g = run_sequence(FWP, f, Duplicated, make_args, [0, 1, 2])
            assert g.stats.traces == 1 and g.stats.eager_calls == 0, g.stats
            counts = []
            for call in (g, lambda *a: autodiff(FWP, f, Duplicated, *a)):
                start = next(runs)
                call(*make_args(0))
                counts.append(next(runs) - start - 1)
            assert counts == [300, 300]
        finally:
            if tracing:
                tracemalloc.stop()


# -- tangent work eager mode does: its errors ----------------------------------------------------

def test_an_error_state_set_in_f_raises_in_tangent_work_nothing_reads():
    """sqrt's value is returned, its tangent not (a Const return): eager mode's forward rule
    divides by 2 sqrt(0) under f's own errstate and raises."""
    def f(x):
        with np.errstate(divide="raise"):
            return np.sqrt(x)
    run_sequence(FWP, f, Const, lambda k: [_dup(np.arange(3.0) + k)], [1, 1, 0, 1])


@pytest.mark.parametrize("ret", [Const, Duplicated])
def test_the_caller_s_error_state_raises_in_tangent_work_nothing_reads(ret):
    def f(x):
        np.sqrt(x)                 # unused: its forward rule divides by 2 sqrt(x)
        return x * 2.0
    g = tape.compile(FWP, f, ret, Duplicated)
    for k in (1, 1, 0, 1):
        with np.errstate(divide="raise"):
            _same_outcome(g, FWP, f, ret, lambda: [_dup(np.arange(3.0) + k)])
        _same_outcome(g, FWP, f, ret, lambda: [_dup(np.arange(3.0) + k)])


def test_warnings_as_errors_raise_in_tangent_work_nothing_reads():
    def f(x):
        return np.sqrt(x)
    g = tape.compile(FW, f, DuplicatedNoNeed, Duplicated)
    for k in (1, 1, 0):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            _same_outcome(g, FW, f, DuplicatedNoNeed, lambda: [_dup(np.arange(3.0) + k)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = tape.compile(FW, f, Const, Duplicated)
        for k in (1, 1, 0):
            _same_outcome(g, FW, f, Const, lambda: [_dup(np.arange(3.0) + k)])


# -- earlier rounds' bug classes, in forward mode -----------------------------------------------

def test_a_list_operand_changed_later_in_the_call():
    def f(x):
        w = [1.0, 2.0]
        s = np.sum(x * w)
        w[0] = 5.0
        rows = [0, 1]
        a = x[rows]
        rows[0] = 1
        return s + np.sum(x * w) + np.sum(a * x[rows])
    run_sequence(FWP, f, Duplicated, lambda k: [_dup(np.arange(2.0) + k)], [0, 1, 2, 3])


def test_a_closure_array_changed_and_restored_within_the_call():
    w = np.ones(3)

    def f(x):
        a = np.sum(x * w)
        w[...] *= 2.0
        b = np.sum(x * w)
        w[...] /= 2.0
        return a + b
    run_sequence(FWP, f, Duplicated, lambda k: [_dup(np.arange(3.0) + k)], [0, 1, 2])


def test_python_views_of_const_values_and_inactive_results():
    labels = {0: 1.0, 1: 2.0, 2: 3.0}

    def f(x, c):
        y = x * labels.get(c[0], -1.0) * len(set(c)) * len(collections.Counter(c))
        y = y * labels.get(np.argmax(x), -1.0) + len(str(c))
        return y * (2.0 if isinstance(c, np.ndarray) and isinstance(c[0], np.integer) else 3.0)
    run_sequence(FWP, f, Duplicated, lambda k: [_dup(np.roll(np.arange(3.0), k)),
                                               Const(np.array([k % 3, 2, 1]))],
                 [1, 1, 2, 0, 1])


def test_unused_steps_that_raise_still_raise():
    def f(x, c, i):
        np.linalg.cholesky(c)
        x[i]
        with np.errstate(invalid="raise"):
            np.log(x * c[0, 0])
        return x ** 2
    run_sequence(FWP, f, Duplicated, lambda k: [
        _dup(np.arange(3.0) + 1), Const((-1 if k == 2 else 2) * np.eye(3)),
        Const(np.array([5 if k == 3 else 1]))], [0, 0, 2, 0, 3, 0])


# -- return and argument kinds -------------------------------------------------------------------

Pair = collections.namedtuple("Pair", "a b")


@dataclasses.dataclass
class Box:
    a: object
    b: object


_RESULTS = {
    "identity": lambda x: x,
    "None": lambda x: None,
    "python float": lambda x: 3.0,
    "scalar": lambda x: x[0] * 2.0,
    "sum": lambda x: np.sum(x * x),
    "tuple with a constant": lambda x: (x, x * 2, 3.0, np.argmax(x)),
    "dict": lambda x: {"a": x[0], "b": [x, 1]},
    "namedtuple": lambda x: Pair(np.sin(x), x[1]),
    "dataclass": lambda x: Box(x * 2, np.cos(x[0])),
    "complex of a real input": lambda x: np.exp(1j * x),
    "real part": lambda x: (x * (1 + 2j)).real,
    "float32": lambda x: x.astype(np.float32) * np.float32(2.5),
    "a Python float times a float32": lambda x: x.astype(np.float32)[0] * 2.0,
    "mask": lambda x: x[x > 1.5],
    "where": lambda x: np.where(x > 2, x, x ** 2),
}


@pytest.mark.parametrize("ret", [Duplicated, DuplicatedNoNeed, Const])
@pytest.mark.parametrize("mode", [FW, FWP], ids=["FW", "FWP"])
def test_results(mode, ret):
    for f in _RESULTS.values():
        run_sequence(mode, f, ret, lambda k: [_dup(np.arange(3.0) + 0.6 * k)], [0, 1, 2, 0])


def test_python_number_and_scalar_arguments():
    for x, dx in ((1.5, 1.0), (np.float64(1.5), np.float64(1.0)), (np.array(1.5), np.array(1.0)),
                  (np.float32(1.5), np.float32(1.0)), (1.5 + 1j, 1.0 + 0j)):
        run_sequence(FWP, lambda x, n: x ** 2 * n, Duplicated,
                     lambda k: [Duplicated(x + k, dx), Const(3)], [0, 1, 2])


def test_pytree_arguments_written_and_returned():
    def f(p, y):
        y[...] = np.sin(p["w"]) * p["b"][0]
        p["w"][1:] = p["w"][:2] * 3.0
        return p["b"][1] * 2.0, y[1:]
    run_sequence(FWP, f, Duplicated, lambda k: [
        Duplicated({"w": np.arange(3.0) + k, "b": [2.0, np.ones(3)]},
                   {"w": np.ones(3), "b": [1.0, np.ones(3)]}), _dup(np.zeros(3))], [0, 1, 2])


@pytest.mark.parametrize("ret", [Duplicated, DuplicatedNoNeed, Const])
def test_in_place_functions(ret):
    def write(y, x):
        y[...] = np.sin(x)
        return y

    def write_constant(y, x):
        y[0] = 5.0
        return np.sum(x * 2)

    def scale(x, c):
        x *= c
        return None
    for f in (write, write_constant):
        run_sequence(FWP, f, ret, lambda k: [_dup(np.zeros(3)), _dup(np.arange(3.0) + k)],
                     [0, 1, 2])
    run_sequence(FW, scale, ret, lambda k: [_dup(np.arange(3.0) + k), Const(np.arange(3) - k)],
                 [0, 1, 2])


def test_the_same_array_passed_twice_and_overlapping_views():
    def same(k):
        a, da = np.arange(3.0) + k, np.ones(3)
        return [Duplicated(a, da), Duplicated(a, da)]

    def overlapping(k):
        a, da = np.arange(6.0) + k, np.ones(6)
        return [Duplicated(a[:3], da[:3]), Duplicated(a[2:5], da[2:5])]

    def product(x, y):
        return x * y

    def write(x, y):
        x[...] = y * 2.0
        return x
    for make_args in (same, overlapping):
        for f in (product, write):
            run_sequence(FWP, f, Duplicated, make_args, [0, 1, 2])


def test_signatures_switching_and_the_cache_bound():
    def f(x):
        return np.sin(x) * x.shape[0]

    def make_args(k):
        return [_dup(np.arange(k + 1.0)) if k < 5 else
                Duplicated(np.arange(3, dtype=np.float32), np.ones(3, np.float32))]
    run_sequence(FWP, f, Duplicated, make_args, [0, 1, 0, 1, 5, 0, 5, 2])
    g = tape.compile(FWP, f, Duplicated, Duplicated, max_programs=2)
    run_sequence(FWP, f, Duplicated, make_args, [0, 1, 2, 0, 1, 2, 0, 0], g=g)
    assert g.stats.programs == 2


def test_errors_raised_on_some_calls_and_caught_errors():
    def raises(x):
        if np.sum(x) > 4:
            raise ValueError("too big")
        return x * 2

    def catches(x):
        try:
            return np.linalg.inv(x) * 2
        except np.linalg.LinAlgError:
            return x
    run_sequence(FWP, raises, Duplicated, lambda k: [_dup(np.arange(3.0) + k)], [0, 1, 2, 0, 3])
    run_sequence(FWP, catches, Duplicated, lambda k: [_dup(np.eye(2) * (k % 2))],
                 [1, 0, 1, 0, 1])
