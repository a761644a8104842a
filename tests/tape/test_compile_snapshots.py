"""What a compiled program bakes in and what it keeps: lists copied when a step uses them (and
in eager mode's residuals), closure arrays read by value where the function changed them
within the call, unused steps that may raise or warn kept, Python numbers of a copied Const
refused as in eager mode.

Each test checks eager `autodiff` against plain NumPy where eager mode had the bug too, and
the compiled function against eager call by call (tests/tape/compile_sequences.py).
"""
import warnings

import numpy as np
import pytest

import tape
from tape import Active, Const, Duplicated, NonDifferentiableError, ReverseWithPrimal, autodiff

from compile_sequences import sequences

RP = ReverseWithPrimal


def _dup(x):
    x = np.asarray(x, dtype=float)
    return Duplicated(x.copy(), np.zeros_like(x))


def _eager_gradient(f, x):
    arg = _dup(x)
    _, value = autodiff(RP, f, Active, arg)
    return value, arg.dval


# -- lists -----------------------------------------------------------------------------------

def test_eager_residuals_keep_a_list_operand_as_it_was_used():
    """The reverse of ``x * w`` used the list as changed later in the call (eager mode)."""
    def f(x):
        w = [1.0, 2.0]
        s = np.sum(x * w)
        w[0] = 5.0
        return s + np.sum(x * w)
    x = np.array([0.5, -1.5])
    value, dx = _eager_gradient(f, x)
    np.testing.assert_allclose(value, np.sum(x * [1.0, 2.0]) + np.sum(x * [5.0, 2.0]),
                               rtol=1e-14)
    np.testing.assert_allclose(dx, [6.0, 4.0], rtol=1e-14)


def test_eager_residuals_keep_an_index_list_as_it_was_used():
    """A gather's and a write's index lists, changed (grown) after the step."""
    def f(x):
        idx, s = [0], 0.0
        for t in range(3):
            s = s + np.sum(x[idx] * (t + 1))
            idx.append(t + 1)
        buf, where = np.zeros_like(x), [0]
        buf[where] = x[1] * 2.0
        where[0] = 1
        buf[where] = x[0] * 3.0
        return s + np.sum(buf ** 2)
    x = np.array([0.5, -1.5, 2.0, 0.25])
    _, dx = _eager_gradient(f, x)
    want = np.array([1.0 + 2.0 + 3.0, 2.0 + 3.0, 3.0, 0.0])   # the gathers
    want[0] += 18.0 * x[0]
    want[1] += 8.0 * x[1]
    np.testing.assert_allclose(dx, want, rtol=1e-14)


def test_a_nested_list_operand_changed_later_in_the_call():
    """A list of lists as an operand: the inner lists are copied too."""
    def f(x):
        w = [[1.0, 2.0], [3.0, 4.0]]
        a = np.sum(x * w)
        w[0][0] = 5.0
        return a + 10.0 * np.sum(x * w)
    x = np.array([[0.5, -1.5], [2.0, 0.25]])
    value, dx = _eager_gradient(f, x)
    first, second = np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[5.0, 2.0], [3.0, 4.0]])
    np.testing.assert_allclose(dx, first + 10.0 * second, rtol=1e-14)
    np.testing.assert_allclose(value, np.sum(x * first) + 10.0 * np.sum(x * second),
                               rtol=1e-14)
    sequences(lambda: (f, lambda c: [_dup(x + c)]), [0, 1, 2])


# -- closure arrays the function changes within the call -------------------------------------

def test_a_closure_array_changed_before_its_use_and_restored():
    """Used only with contents the function set (w * 2), restored at the end: read by value;
    a change the caller makes between calls is still seen, and the calls stay compiled."""
    def setup():
        w = np.ones(3)

        def f(x):
            w[...] *= 2.0
            y = np.sum(np.sin(x) * w)
            w[...] /= 2.0
            return y

        def make_args(c):
            if c == 3:
                w[1] = 4.0   # between calls
            return [_dup(np.arange(3.0) + c)]
        return f, make_args
    g = sequences(setup, [0, 1, 2, 3, 4, 5])
    assert g.stats.eager_calls == 0 and g.stats.hits >= 3


def test_a_closure_array_unchanged_within_the_call_is_read_by_reference():
    def setup():
        w = np.ones(3)

        def f(x):
            return np.sum(x * w) + np.sum(np.sin(x) * w)

        def make_args(c):
            w[c % 3] += 1.0
            return [_dup(np.arange(3.0) - c)]
        return f, make_args
    g = sequences(setup, [0, 1, 2, 3])
    w = g.f.__closure__[0].cell_contents
    assert any(v is w for v in g._last.run.__globals__.values())   # the array itself


# -- unused steps that may raise or warn ---------------------------------------------------

def _unused(check, good, bad):
    def setup():
        def f(x, c):
            check(x, c)
            return np.sum(x ** 2)
        return f, lambda k: [_dup(np.ones(3) * (k + 1)), Const(bad if k == 2 else good)]
    return sequences(setup, [0, 1, 2, 0])


def test_an_unused_step_under_the_callers_errstate_raises():
    """The error state is the caller's, set around the call, not inside the function."""
    with np.errstate(invalid="raise", divide="raise"):
        _unused(lambda x, c: np.log(x * c), np.ones(3), -np.ones(3))
        _unused(lambda x, c: x / c, np.ones(3), np.zeros(3))


def test_an_unused_step_that_may_only_warn_runs_where_warnings_raise():
    """Where warnings only show, the unused step is dropped (its warning is missing: an
    unused gate of a model would cost its full price at every call); where the caller's
    settings make them raise, it runs and raises as in eager mode."""
    def f(x, c):
        np.sqrt(x * c)
        return np.sum(x ** 2)
    g = tape.compile(RP, f, Active, Duplicated, Const)
    for _ in range(3):
        g(_dup(np.ones(3)), Const(np.ones(3)))
    assert "if strict: " in str(g)
    hits = g.stats.hits
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        g(_dup(np.ones(3)), Const(-np.ones(3)))
    assert seen == [] and g.stats.hits == hits + 1
    bad = lambda: [_dup(np.ones(3)), Const(-np.ones(3))]   # noqa: E731
    with np.errstate(invalid="raise"):
        for call in (lambda: autodiff(RP, f, Active, *bad()), lambda: g(*bad())):
            with pytest.raises(FloatingPointError):
                call()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for call in (lambda: autodiff(RP, f, Active, *bad()), lambda: g(*bad())):
            with pytest.raises(RuntimeWarning):
                call()
    handled = []
    previous = np.seterrcall(lambda kind, flag: handled.append(kind))
    try:
        with np.errstate(invalid="call"):
            autodiff(RP, f, Active, *bad())
            eager = len(handled)
            g(*bad())
    finally:
        np.seterrcall(previous)
    assert eager >= 1 and len(handled) == 2 * eager   # the replayed step called it too


def test_unused_steps_that_cannot_raise_are_still_dropped():
    def f(x):
        np.reshape(x, (3, 2)).T[0]   # unused, and only moves values
        return np.sum(np.sin(x))
    g = tape.compile(RP, f, Active, Duplicated)
    g(_dup(np.ones(6)))
    assert g._last.n_kept < g._last.n_steps


# -- copies of a Const -------------------------------------------------------------------------

@pytest.mark.parametrize("probe", [
    lambda c: float(c.copy()[0]),
    lambda c: int(np.copy(c[1:])[0] > 0) + float(np.copy(c)[1] * 2.0),
    lambda c: float(tape.primal(np.copy(c))[0]),
])
def test_plain_values_of_a_copied_const_as_in_eager_mode(probe):
    def setup():
        def f(x, c):
            return np.sum(x) * probe(c)
        return f, lambda k: [_dup(np.arange(3.0) + k), Const(np.arange(3.0) - k)]
    sequences(setup, [0, 1, 2])


def test_a_copied_const_filled_with_differentiated_values_stays_compiled():
    def setup():
        def f(x, c):
            buf = np.copy(c)
            buf[0] = x[1] * 2.0
            return np.sum(buf * x) + float(c[2])
        return f, lambda k: [_dup(np.arange(3.0) + k), Const(np.arange(3.0) - k)]
    g = sequences(setup, [0, 1, 2, 3])
    assert g.stats.eager_calls == 0


def test_eager_float_of_a_copied_const_raises():
    """The behaviour the compiled function follows (tape/constbuffer.py)."""
    with pytest.raises(NonDifferentiableError):
        autodiff(RP, lambda x, c: np.sum(x) * float(np.copy(c)[0]), Active, _dup(np.ones(2)),
                 Const(np.ones(2)))
