"""User code (custom rules, `tape.inactive` functions) runs as often per call compiled as in
eager mode when a call runs the function more than once: a replay whose guard fails after user
code ran, then another program's replay or a new trace; a replay that raises, then an eager
call. The later runs take what the earlier ones' user code returned for the same inputs.

Every test compares each call with eager `autodiff` from fresh state (results, errors,
shadows: tests/tape/compile_sequences.py) and how often each piece of user code ran
(tests/tape/compile_user_code.py); `Counted.tick`'s result depends on how often it ran, so a
run too many changes values and derivatives too.
"""
import itertools

import numpy as np
import pytest

import tape
from tape import Active, Const, Duplicated, Reverse, ReverseWithPrimal, autodiff, custom_rule
from tape.user_calls import UserCalls

from compile_sequences import sequences
from compile_user_code import Counted, counted_sequences, runs_per_call

RP = ReverseWithPrimal
# signs of the argument per call: every change of sign fails the guard of the program before
SIGNS = [1, 1, -1, -1, 1, -1, 1, 1, -1, -1]


def _signed(c):
    x = np.random.default_rng(c).uniform(0.5, 1.5, size=3) * SIGNS[c]
    return [Duplicated(x, np.zeros(3))]


def test_a_rule_before_a_failing_guard_runs_once_with_eager_values_and_gradients():
    def make_f(counted):
        def f(x):
            y = counted.tick(x) * counted.rule(x)
            if np.sum(x) > 0:
                return np.sum(y * y)
            return np.sum(np.sin(y))
        return f
    g = counted_sequences(make_f, _signed, range(len(SIGNS)))
    assert g.stats.guard_failures > 0 and g.stats.eager_calls == 0, g.stats


def test_a_rule_whose_result_feeds_the_guard():
    def make_f(counted):
        def f(x):
            y = counted.tick(x)
            if np.sum(y) > 0:
                return np.sum(x * y)
            return np.sum(np.cos(x))
        return f
    g = counted_sequences(make_f, _signed, range(len(SIGNS)))
    assert g.stats.guard_failures > 0 and g.stats.eager_calls == 0, g.stats


def test_two_rules_the_second_after_the_guard():
    """The replay ran the first rule, not the second: the trace takes the first and runs the
    second."""
    def make_f(counted):
        def f(x):
            y = counted.rule(x)
            if np.sum(x) > 0:
                return np.sum(counted.tick(y) * y)
            return np.sum(counted.tick(y * 3.0))
        return f
    g = counted_sequences(make_f, _signed, range(len(SIGNS)))
    assert g.stats.guard_failures > 0, g.stats


def test_a_rule_called_twice_with_the_same_inputs_takes_its_results_in_order():
    def make_f(counted):
        def f(x):
            y = counted.tick(x) + 2.0 * counted.tick(x)   # 1 + n, then 2 + n
            if np.sum(x) > 0:
                return np.sum(y * y)
            return np.sum(y)
        return f
    counted_sequences(make_f, _signed, range(len(SIGNS)))


def test_a_rule_on_const_arguments_before_a_failing_guard():
    def make_f(counted):
        def f(x, c):
            k = counted.tick(c)
            if np.sum(x) > 0:
                return np.sum(x * k)
            return np.sum(x * x * k)
        return f
    counted_sequences(make_f, lambda c: _signed(c) + [Const(np.arange(3.0) + c)],
                      range(len(SIGNS)))


def test_an_inactive_function_with_a_side_effect_before_a_failing_guard():
    def make_f(counted):
        seen = itertools.count()

        @tape.inactive
        def weight(x):   # a weight that changes at each run: a second run changes the results
            return np.float64(1.0 + next(seen)) + 0.0 * np.sum(x)

        def f(x):
            y = x * counted.scale(x) * weight(x)
            if np.sum(x) > 0:
                return np.sum(y * y)
            return np.sum(y)
        return f
    compiled, eager, stats = runs_per_call(make_f, [Duplicated], _signed, range(len(SIGNS)))
    assert compiled == eager and stats.guard_failures > 0, (compiled, eager, stats)
    counted_sequences(make_f, _signed, range(len(SIGNS)))


def test_user_code_whose_results_nothing_reads_runs_as_in_eager_mode():
    """A rule whose result is unused, or only decides a branch: eager mode runs its augmented
    primal all the same (the replay ran none, or its plain primal instead)."""
    def make_f(counted):
        def f(x):
            counted.rule(x)
            counted.scale(x)
            if np.sum(counted.rule(x)) > 100.0:
                return np.sum(x)
            return np.sum(x * x)
        return f
    compiled, eager, stats = runs_per_call(make_f, [Duplicated], _signed, range(5))
    assert compiled == eager and stats.hits == 4, (compiled, eager, stats)


# -- a replay that raises --------------------------------------------------------------------

def _matrix_args(c):
    """A singular Const matrix at calls 2 and 5."""
    m = np.eye(3) + 0.1 * np.random.default_rng(c).normal(size=(3, 3))
    if c in (2, 5):
        m[2] = m[0]
    return [Duplicated(np.arange(1.0, 4.0) + c, np.zeros(3)), Const(m)]


def test_a_replay_that_raises_after_user_code_ran():
    """np.linalg.solve raises in the replay after the rule ran: the eager call takes the
    rule's result and raises the same error as eager mode."""
    def make_f(counted):
        def f(x, m):
            y = counted.tick(x) * counted.scale(x)
            return np.sum(np.linalg.solve(m, y) ** 2)
        return f
    g = counted_sequences(make_f, _matrix_args, range(7))
    assert g.stats.eager_calls == 2, g.stats


def test_a_replay_that_raises_where_the_function_catches_it():
    def make_f(counted):
        def f(x, m):
            y = counted.tick(x)
            try:
                z = np.linalg.solve(m, y)
            except np.linalg.LinAlgError:
                z = y * 3.0
            return np.sum(z ** 2)
        return f
    g = counted_sequences(make_f, _matrix_args, range(7))
    assert g.stats.eager_calls == 2, g.stats


def test_user_code_that_raises_in_a_replay_raises_once():
    """The inactive function raises in the replay: the eager call raises that same error
    rather than run it again."""
    runs = itertools.count()

    @tape.inactive
    def checked(x):
        next(runs)
        if np.any(x > 4.5):
            raise ValueError("too large")
        return x * 0.5

    def make_f(counted):
        def f(x, m):
            return np.sum(counted.tick(x) * checked(x))
        return f
    seen = [next(runs)]

    def make_args(c):
        seen.append(next(runs))
        return _matrix_args(c)
    counted_sequences(make_f, make_args, range(6))   # x > 4.5 from call 3 on: errors
    ran = np.diff(seen + [next(runs)]) - 1
    # before the types' arguments, then the compiled calls, then the eager ones
    assert list(ran[2:8]) == list(ran[8:]) == [1] * 6, ran


def test_the_replay_error_is_kept_when_the_eager_call_raises():
    def make_f(counted):
        def f(x, m):
            return np.sum(np.linalg.solve(m, counted.rule(x)))
        return f
    counted = Counted()
    g = tape.compile(RP, make_f(counted), Active, Duplicated, Const)
    for c in (0, 1):
        g(*_matrix_args(c))
    with pytest.raises(np.linalg.LinAlgError) as raised:
        g(*_matrix_args(2))
    chain, e = [], raised.value
    while e is not None and len(chain) < 5:
        chain.append(e)
        e = e.__cause__ or e.__context__
    assert any("the replay raised LinAlgError" in str(e) for e in chain), chain
    assert counted.snapshot()["aug"] == 3


# -- nested compiled calls, and the pieces ------------------------------------------------

def test_a_compiled_function_called_by_user_code_before_a_failing_guard():
    """The inactive helper calls another compiled function (its rule counted): one run of
    each per call, as eager mode (where the inner one runs eagerly). (The outer function
    sees the inner one's state change, and runs eagerly after its first calls.)"""
    def make_f(counted):
        inner = tape.compile(RP, lambda v: np.sum(counted.tick(v) ** 2), Active, Duplicated)

        @tape.inactive
        def inner_value(v):
            return np.float64(inner(Duplicated(v.copy(), np.zeros_like(v)))[1])

        def f(x):
            y = x * inner_value(x) * counted.rule(x)
            if np.sum(x) > 0:
                return np.sum(y * y)
            return np.sum(y)
        return f
    counted_sequences(make_f, _signed, range(len(SIGNS)))


def test_a_compiled_function_called_again_from_its_own_user_code():
    def make_f(counted):
        depth = itertools.count()

        @tape.inactive
        def again(v):   # the compiled function itself, one level down (no user code there)
            if next(depth) % 2:
                return np.float64(0.0)
            return np.float64(g(Duplicated(v.copy(), np.zeros_like(v)))[1])

        def f(x):
            y = counted.tick(x) + again(x)
            if np.sum(x) > 0:
                return np.sum(y * y)
            return np.sum(y)
        g = tape.compile(RP, f, Active, Duplicated)
        return f
    compiled, eager, _ = runs_per_call(make_f, [Duplicated], _signed, range(len(SIGNS)))
    assert compiled == eager, (compiled, eager)


def test_user_calls_take_equal_inputs_in_order_and_run_others():
    runs = []

    def tick(x):
        runs.append(x)
        return x * len(runs)
    calls = UserCalls()
    first = [calls.call(tick, (np.ones(2),), {}), calls.call(tick, (np.ones(2),), {})]
    calls.rewind()
    again = [calls.call(tick, (np.ones(2),), {}), calls.call(tick, (np.ones(2),), {})]
    assert [a is b for a, b in zip(first, again)] == [True, True] and len(runs) == 2
    calls.rewind()
    calls.call(tick, (np.ones(2, dtype=np.float32),), {})   # another dtype: another call
    calls.call(tick, (np.ones(2),), {})   # the first float64 call: taken
    assert len(runs) == 3
    calls.rewind()
    calls.call(tick, (-np.zeros(2),), {})   # -0.0 is not 0.0 for user code
    assert len(runs) == 4


def test_a_taken_rule_result_keeps_its_reverse_rule_in_an_eager_call():
    """The eager call after a replay raised takes the rule's result; its reverse rule still
    runs in the sweep (the gradient is eager's, not zero)."""
    aug, rev = itertools.count(), itertools.count()

    def cube_aug(cfg, x):
        next(aug)
        return x ** 3, x

    def cube_rev(cfg, x, g):
        next(rev)
        return (3.0 * x ** 2 * g,)
    cube = custom_rule(lambda x: x ** 3, augmented_primal=cube_aug, reverse=cube_rev,
                       check_primal=False)

    def f(x, m):
        y = cube(x)
        try:
            return np.sum(np.linalg.solve(m, y))
        except np.linalg.LinAlgError:
            return np.sum(y * 2.0)
    g = tape.compile(RP, f, Active, Duplicated, Const)
    for c in (0, 1, 2):
        x, dx = np.arange(1.0, 4.0) + c, np.zeros(3)
        m = _matrix_args(c)[1].val
        got = g(Duplicated(x, dx), Const(m))
        dx_eager = np.zeros(3)
        want = autodiff(RP, f, Active, Duplicated(x, dx_eager), Const(m))
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
        np.testing.assert_allclose(dx, dx_eager, rtol=1e-12)
    np.testing.assert_allclose(dx, 6.0 * x ** 2)
    assert g.stats.eager_calls == 1
    # three calls compiled, three eager: one augmented primal and one reverse rule each
    assert next(aug) == 6 and next(rev) == 6


def test_a_rule_on_const_arguments_before_a_replay_that_raises():
    def make_f(counted):
        def f(x, m):
            return np.sum(np.linalg.solve(m, x * counted.tick(np.diagonal(m))))
        return f
    counted_sequences(make_f, _matrix_args, range(4))


def test_user_code_that_draws_before_a_failing_trace_draws_as_eager(recwarn):
    """The trace fails after an inactive function drew: the generators are set back and the
    eager call draws again (rather than take the trace's draw): later calls draw what eager
    mode draws."""
    draw = tape.inactive(lambda v: np.random.normal(size=v.shape))

    def setup():
        np.random.seed(7)

        def f(x):
            y = x * draw(x)
            if np.sum(x) > 4.0:
                raise ValueError("too large")
            return np.sum(y * y)
        return f, lambda c: [Duplicated(np.full(3, 2.0 - 0.5 * c), np.zeros(3))]
    sequences(setup, range(5))


def test_an_adjoint_that_raises_raises_as_eager_and_the_replay_holds_nothing_after_its_primal():
    """A replay lets go of what user code got once its primal is over (a kernel's inputs are
    not held through the adjoint); a reverse rule that raises then makes the eager call that
    follows raise the same error (user code runs again there: the call raises anyway)."""
    def double_aug(cfg, x):
        return x * 2.0, None

    def double_rev(cfg, saved, g):
        if np.sum(g) > 100:
            raise FloatingPointError("reverse refused")
        return (g * 2.0,)
    rule = custom_rule(lambda x: x * 2.0, augmented_primal=double_aug, reverse=double_rev,
                            check_primal=False)

    def f(x, s):
        return np.sum(rule(x) * s)
    g = tape.compile(Reverse, f, Active, Duplicated, Const)
    for s in (np.ones(3), np.ones(3), np.ones(3), np.full(3, 1000.0), np.ones(3)):
        results = []
        for run in (lambda *a: autodiff(Reverse, f, Active, *a), g):
            dx = np.zeros(3)
            try:
                run(Duplicated(np.ones(3), dx), Const(s))
                results.append(("ok", dx.tolist()))
            except FloatingPointError as e:
                results.append(("raised", str(e)))
        assert results[0] == results[1], results
    assert "calls.primal_done()" in str(g)
    calls = UserCalls()
    calls.call(rule, (np.ones(2),), {})
    calls.primal_done()
    assert not calls
