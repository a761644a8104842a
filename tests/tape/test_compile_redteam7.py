"""Compile red team, round 7: generated NumPy programs (tests/tape/compile_program_generator.py)
compiled and called several times with changing values, Const values, closure contents,
layouts, shapes and dtypes, each call against eager autodiff on copies of its arguments
(primal, derivatives, shadows, written arguments, closures, the global generator, errors),
and the reproducers of what that found.

A trace that fails part-way (a write into a Const argument, an error the function raises)
leaves the call to eager autodiff, which runs `f` a second time: what `f` changed in its
closure, its globals or an object it reads was changed twice in that call."""
import collections
import math
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import tape
from tape import Active, Const, Duplicated, Forward, Reverse, ReverseWithPrimal

from compile_program_generator import cases, run_case


def _failing_trace_calls(mode, ret, f, calls=3):
    g = tape.compile(mode, f, ret, Duplicated, Const)
    for _ in range(calls):
        try:
            g(Duplicated(np.ones(2), np.ones(2)), Const(np.ones(2)))
        except tape.NonDifferentiableError:
            pass
    return g


class _Counter:
    def __init__(self):
        self.n = 0


@pytest.mark.parametrize("mode, ret", [(Reverse, Active), (Forward, Duplicated)])
@pytest.mark.parametrize("state", ["closure array", "closure dict", "closure Counter",
                                   "nonlocal", "attribute", "global list"])
@pytest.mark.parametrize("failure", ["const write", "float of a traced value"])
def test_side_effects_happen_once_when_the_trace_fails(mode, ret, state, failure):
    counts, calls, box, seen = np.zeros(1), {"n": 0}, _Counter(), []
    tally = collections.Counter()   # put back with dict's own update, not Counter's counting
    n = 0

    def f(x, c):
        nonlocal n
        if state == "closure array":
            counts[0] += 1.0
        elif state == "closure dict":
            calls["n"] += 1
        elif state == "closure Counter":
            tally["calls"] += 1
        elif state == "nonlocal":
            n += 1
        elif state == "attribute":
            box.n += 1
        else:
            _SEEN.append(1)
        if failure == "const write":
            c[0] = 0.5
        else:
            float(np.sum(x))
        y = x * c
        return np.sum(y) if ret is Active else y

    _SEEN.clear()
    g = _failing_trace_calls(mode, ret, f)
    got = {"closure array": counts[0], "closure dict": calls["n"], "nonlocal": n,
           "attribute": box.n, "global list": len(_SEEN), "closure Counter": tally["calls"]}[state]
    assert set(tally) <= {"calls"}, tally
    assert got == 3, (got, g.stats)   # three calls; the trace of the first made it 4
    del seen


_SEEN: list = []


_MASK_PROGRAMS = {
    "~mask": lambda x, c, k: np.sum(np.where(~(x > 0), x, 0.0) ** 2),
    "mask & mask": lambda x, c, k: np.sum(np.where((x > 0) & (x < 2.5), x, 0.0) ** 2),
    "mask | mask": lambda x, c, k: np.sum(np.where((x > 2) | (c < 0), x, 0.0) ** 2),
    "mask ^ mask": lambda x, c, k: np.sum(np.where((x > 0) ^ (c > 0), x * c, 0.0)),
    "Python bool & mask": lambda x, c, k: np.sum(np.where(True & (x > 0), x, 1.0) ** 2),
    "k & 1": lambda x, c, k: np.sum(x[k & 1] * c),
    "k >> 1, 1 << k": lambda x, c, k: np.sum(x[k >> 1] * (1 << k)),
    "round(c[0])": lambda x, c, k: np.sum(x * round(c[0])),
    "round(c[0], 1)": lambda x, c, k: np.sum(x * round(c[0], 1)),
    "math.trunc(c[1])": lambda x, c, k: np.sum(x * math.trunc(c[1])),
    "complex(c[0])": lambda x, c, k: np.sum(x * complex(c[0]).real),
}


@pytest.mark.parametrize("name", sorted(_MASK_PROGRAMS))
def test_bitwise_operators_and_python_numbers_of_masks_and_consts_compile(name):
    """Eager mode hands the function masks and Const arrays as NumPy arrays; while traced
    they were tracers without `~ & | ^ << >>`, `round` or `math.trunc` (`complex` asked
    np.float64 for a __complex__ it lacks): the trace failed and every call of the signature
    ran eagerly. Compiled equals eager, and replays."""
    f = _MASK_PROGRAMS[name]
    g = tape.compile(ReverseWithPrimal, f, Active, Duplicated, Const, Const)
    rng = np.random.default_rng(7)
    for call in range(4):
        x = rng.uniform(-3, 3, 4)
        c = np.array([2.26, -1.5, 0.5, 3.7]) * (1 if call % 2 else -1)
        k = rng.permutation(4)
        dx, dx_eager = np.zeros(4), np.zeros(4)
        got = g(Duplicated(x.copy(), dx), Const(c.copy()), Const(k.copy()))
        want = tape.autodiff(ReverseWithPrimal, f, Active, Duplicated(x.copy(), dx_eager),
                             Const(c.copy()), Const(k.copy()))
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
        np.testing.assert_allclose(dx, dx_eager, rtol=1e-12, atol=1e-15)
    assert g.stats.eager_calls == 0 and g.stats.hits >= 1, g.stats


def test_bitwise_operators_of_a_differentiated_value_raise_as_eager():
    def f(x):
        return np.sum(x[~x])
    g = tape.compile(Reverse, f, Active, Duplicated)
    with pytest.raises(TypeError) as compiled:
        g(Duplicated(np.ones(3), np.zeros(3)))
    with pytest.raises(TypeError) as eager:
        tape.autodiff(Reverse, f, Active, Duplicated(np.ones(3), np.zeros(3)))
    assert str(compiled.value) == str(eager.value)


def test_an_error_of_the_first_call_s_values_does_not_make_the_signature_eager():
    """An index out of bounds in the first call's trace made every later call of the
    signature run eagerly; now it takes a second failing trace."""
    def f(x, k):
        return np.sum(x[int(k[0])] ** 2) + np.sum(x * k[1])
    g = tape.compile(Reverse, f, Active, Duplicated, Const)
    for row in (5, 0, 1, 2, 0, 1):
        dx, dx_eager = np.zeros(3), np.zeros(3)
        k = np.array([row, 2])
        try:
            g(Duplicated(np.arange(3.0), dx), Const(k.copy()))
            error = None
        except IndexError as e:
            error = e
        try:
            tape.autodiff(Reverse, f, Active, Duplicated(np.arange(3.0), dx_eager), Const(k))
            want_error = None
        except IndexError as e:
            want_error = e
        assert (error is None) == (want_error is None)
        np.testing.assert_allclose(dx, dx_eager, rtol=1e-12)
    assert g.stats.hits >= 2 and g.stats.eager_calls == 1, g.stats


def test_a_buffer_from_empty_like_filled_whole_compiles():
    def f(x):
        y = np.empty_like(x)
        y[...] = np.tanh(x)
        return np.sum(y * y)
    g = tape.compile(Reverse, f, Active, Duplicated)
    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tape.CompileWarning)
        for _ in range(4):
            x = rng.normal(size=300)
            dx = np.zeros(300)
            g(Duplicated(x, dx))
            np.testing.assert_allclose(dx, 2 * np.tanh(x) * (1 - np.tanh(x) ** 2), rtol=1e-12)
    assert g.stats.eager_calls == 0, g.stats


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=cases())
def test_generated_programs_compiled_equal_eager(case):
    """Each generated program, seven calls, each against eager autodiff (the generator's
    docstring says what changes between calls and what is compared). `case.source` is the
    program."""
    run_case(case)
