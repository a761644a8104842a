"""Fixed examples of `tape.compile` against eager `tape.autodiff`: retracing on new shapes and
dtypes, guard failures, shadows accumulating, closures changed between calls, random draws
(each call draws as eager mode would from the same generator state) and the printed program.
The generated-program property lives in test_compile_programs.py."""
from __future__ import annotations

import functools
import time
import types
import warnings

import numpy as np
import pytest

import tape
from tape import Active, Duplicated, Reverse, ReverseWithPrimal

RTOL, ATOL = 1e-10, 1e-12


def assert_same(got, want, where="result"):
    """Same structure, types, shapes, dtypes, and values to float64 tolerances."""
    if isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want), f"{where}: {got!r} {want!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{where}[{i}]")
    elif want is None:
        assert got is None, f"{where}: {got!r} against None"
    else:
        assert type(got) is type(want), f"{where}: {type(got)} against {type(want)}"
        if isinstance(want, np.ndarray):
            assert (got.shape, got.dtype) == (want.shape, want.dtype), where
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=where)



def _compare_simple(g, f, mode, ret, make_args):
    """One call of `g` and of eager autodiff on fresh arguments from `make_args()`."""
    compiled_args, eager_args = make_args(), make_args()
    got = g(*compiled_args)
    want = tape.autodiff(mode, f, ret, *eager_args)
    assert_same(got, want)
    for a, b in zip(compiled_args, eager_args):
        assert_same(a.val, b.val, "argument")
        if isinstance(b, Duplicated):
            assert_same(a.dval, b.dval, "shadow")
    return got


def test_array_times_its_own_sum():
    def f(x):
        return np.sum(x * np.sum(x))
    g = tape.compile(Reverse, f, Active, Duplicated)
    x = np.array([[0.5, 2.0], [1.0, -1.0]])
    _compare_simple(g, f, Reverse, Active, lambda: [Duplicated(x.copy(), np.zeros((2, 2)))])


def test_array_times_active_float():
    def f(x, a):
        return np.sum(x * a)
    g = tape.compile(Reverse, f, Active, Duplicated, Active)
    x = np.array([0.5, 2.0, 1.0])
    _compare_simple(g, f, Reverse, Active, lambda: [Duplicated(x.copy(), np.zeros(3)),
                                                    Active(1.5)])


def test_shape_and_dtype_changes_retrace():
    def f(x):
        return np.sum(np.sin(x) * x)
    g = tape.compile(ReverseWithPrimal, f, Active, Duplicated)
    for k, x in enumerate([np.linspace(-1, 1, 3), np.linspace(-1, 2, 3),   # a hit
                           np.linspace(-1, 1, 5),                        # a new shape
                           np.linspace(-1, 1, 5).astype(np.float32)]):   # a new dtype
        _compare_simple(g, f, ReverseWithPrimal, Active,
                        lambda: [Duplicated(x.copy(), np.ones_like(x))])
        assert g.stats.traces == [1, 1, 2, 3][k]
    assert g.stats.hits == 1 and g.stats.eager_calls == 0


def test_failed_guard_traces_again_and_is_counted():
    def f(x):
        if x.sum() > 0:
            return np.sum(np.sin(x))
        return np.sum(x ** 2)
    g = tape.compile(Reverse, f, Active, Duplicated)
    expected = [(1, 0), (2, 1), (2, 1), (2, 2)]   # (traces, guard_failures) after each call
    for sign, (traces, failures) in zip([1, -1, 1, -1], expected):
        x = sign * np.array([0.5, 1.0, 0.25])
        _compare_simple(g, f, Reverse, Active, lambda: [Duplicated(x.copy(), np.zeros(3))])
        assert (g.stats.traces, g.stats.guard_failures) == (traces, failures)


def test_duplicated_shadows_accumulate_over_calls():
    def f(x):
        return np.sum(np.tanh(x) * x)
    g = tape.compile(Reverse, f, Active, Duplicated)
    x, dx = np.array([0.3, -1.2, 2.0]), np.zeros(3)
    g(Duplicated(x, dx))
    once = dx.copy()
    g(Duplicated(x, dx))
    np.testing.assert_allclose(dx, 2 * once, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(once, np.tanh(x) + x / np.cosh(x) ** 2, rtol=1e-12, atol=ATOL)


def _closure_cases():
    """(name, f, change(k)): f reads a value that change(k) alters between calls."""
    W = np.ones(3)
    table = {"s": 1.0, "v": np.ones(3)}
    box = [np.ones(3)]
    scale = 1.0

    def rebound(x):
        return np.sum(x * scale)

    def rebind(k):
        nonlocal scale
        scale = 1.0 + k

    def set_table(k):
        table["s"] = 1.0 + k
        table["v"][...] = 2.0 + k
    return [
        ("array changed in place", lambda x: np.sum(x * W),
         lambda k: W.__setitem__(Ellipsis, 1.0 + k)),
        ("variable rebound", rebound, rebind),
        ("dict entries changed", lambda x: np.sum(x * table["s"] * table["v"]), set_table),
        ("array in a list changed in place", lambda x: np.sum(x * box[0]),
         lambda k: box[0].__setitem__(Ellipsis, 3.0 - k)),
    ]


@pytest.mark.parametrize("name, f, change", [pytest.param(*case, id=case[0])
                                             for case in _closure_cases()])
def test_closure_changes_between_calls_are_seen(name, f, change):
    g = tape.compile(ReverseWithPrimal, f, Active, Duplicated)
    x = np.array([0.5, -1.0, 2.0])
    for k in range(3):
        if k:
            change(k)
        _compare_simple(g, f, ReverseWithPrimal, Active,
                        lambda: [Duplicated(x.copy(), np.zeros(3))])


class _Scaled:
    def __init__(self):
        self.scale, self.weight = 1.0, np.ones(3)

    def __call__(self, x):
        return np.sum(x * self.weight * self.scale)


def _stale_cases():
    layer, bound, module = _Scaled(), _Scaled(), types.ModuleType("settings")
    module.scale = 1.0
    weight = np.ones(3)
    partial = functools.partial(lambda x, w: np.sum(x * w), w=weight)
    return [
        ("callable object, float attribute rebound", layer,
         lambda k: setattr(layer, "scale", 1.0 + k)),
        ("bound method, array attribute rebound", bound.__call__,
         lambda k: setattr(bound, "weight", np.full(3, 1.0 + k))),
        ("module attribute rebound", lambda x: np.sum(x * module.scale),
         lambda k: setattr(module, "scale", 1.0 + k)),
        ("functools.partial array changed in place", partial,
         lambda k: weight.__setitem__(Ellipsis, 1.0 + k)),
    ]


@pytest.mark.parametrize("name, f, change", [pytest.param(*case, id=case[0])
                                             for case in _stale_cases()])
def test_attribute_changes_between_calls_are_seen(name, f, change):
    test_closure_changes_between_calls_are_seen(name, f, change)


def _random_calls(f, reseed, calls=3):
    """The results of `calls` compiled calls, then of as many eager calls, each series
    starting from the generator state `reseed()` sets."""
    g = tape.compile(ReverseWithPrimal, f, Active, Duplicated)
    x = np.array([0.5, -1.0, 2.0])
    series = []
    for run in (lambda dx: g(Duplicated(x.copy(), dx)),
                lambda dx: tape.autodiff(ReverseWithPrimal, f, Active,
                                         Duplicated(x.copy(), dx))):
        reseed()
        results = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", tape.CompileWarning)
            for _ in range(calls):
                dx = np.zeros(3)
                results.append((run(dx), dx))
        series.append(results)
    compiled, eager = series
    assert_same(compiled, eager)
    draws = [r[0][1] for r in compiled]
    assert len(set(draws)) == calls, "each call draws afresh"
    return g


def test_closure_generator_draws_as_eager():
    rng = np.random.default_rng(0)

    def f(x):
        return np.sum(x * rng.normal(size=3))
    g = _random_calls(f, lambda: setattr(rng.bit_generator, "state",
                                         np.random.default_rng(7).bit_generator.state))
    assert g.stats.eager_calls == 3 and g.stats.hits == 0


def test_global_numpy_random_draws_as_eager():
    def f(x):
        return np.sum(x * np.random.normal(size=3)) + np.random.rand()
    state = np.random.get_state()
    try:
        g = _random_calls(f, lambda: np.random.seed(3))
    finally:
        np.random.set_state(state)
    assert g.stats.eager_calls == 3


class _Noisy:
    def __init__(self):
        self.rng = np.random.default_rng(0)

    def __call__(self, x):
        return np.sum(x * self.rng.normal(size=3))


@pytest.mark.parametrize("holder", ["object attribute", "RandomState"])
def test_held_generator_draws_as_eager(holder):
    if holder == "object attribute":
        noisy = _Noisy()
        _random_calls(noisy, lambda: setattr(noisy.rng.bit_generator, "state",
                                             np.random.default_rng(7).bit_generator.state))
    else:
        legacy = np.random.RandomState(0)
        _random_calls(lambda x: np.sum(x * legacy.normal(size=3)), lambda: legacy.seed(5))


def test_unused_draw_advances_the_generator_as_eager():
    rng = np.random.default_rng(0)

    def f(x):
        rng.normal()
        return np.sum(x * 2.0)
    g = tape.compile(Reverse, f, Active, Duplicated)
    after = []
    for run in (lambda: g(Duplicated(np.ones(3), np.zeros(3))),
                lambda: tape.autodiff(Reverse, f, Active, Duplicated(np.ones(3), np.zeros(3)))):
        rng.bit_generator.state = np.random.default_rng(7).bit_generator.state
        for _ in range(3):
            run()
        after.append(rng.normal())
    assert after[0] == after[1]


def test_printed_program_shows_the_generated_function():
    g = tape.compile(Reverse, lambda x: np.sum(np.exp(x) * x), Active, Duplicated)
    assert "not traced" in str(g)
    g(Duplicated(np.ones(3), np.zeros(3)))
    text = str(g)
    assert "def run" in text and "# adjoint" in text


def test_primal_of_a_differentiated_value_is_checked_at_each_call():
    """`tape.primal(x)` used in a computation was baked in as the traced value; a replay with
    another x returned the old product."""
    def f(x):
        return np.sum(x * tape.primal(x))
    g = tape.compile(ReverseWithPrimal, f, Active, Duplicated)
    for v in ([1.0, 2.0], [3.0, 4.0], [1.0, 2.0]):
        _compare_simple(g, f, ReverseWithPrimal, Active,
                        lambda: [Duplicated(np.array(v), np.zeros(2))])


def test_aliasing_between_written_and_other_arguments_runs_eagerly():
    """A written buffer overlapping another argument (a view of it passed Const) runs
    eagerly, which refuses the write as eager autodiff does; Const arguments sharing memory
    among themselves replay."""
    def f_(y, x, c, d):
        y[...] = x * c + d
        return np.sum(y * x)
    g = tape.compile(Reverse, f_, Active, Duplicated, Duplicated, tape.Const, tape.Const)
    shared = np.ones(3)

    def args(y, c):
        return [Duplicated(y, np.zeros_like(y)), Duplicated(np.ones(3), np.zeros(3)),
                tape.Const(c), tape.Const(shared)]
    for _ in range(2):
        _compare_simple(g, f_, Reverse, Active, lambda: args(np.zeros(3), shared))
    assert g.stats.eager_calls == 0
    for view in (lambda b: b[1:4], lambda b: b[::2]):
        for call in (g, functools.partial(tape.autodiff, Reverse, f_, Active)):
            base = np.arange(6.0)
            with pytest.raises(tape.ActivityError, match="shares memory"):
                call(*args(base[:3], view(base)))
            np.testing.assert_array_equal(base, np.arange(6.0))
    assert g.stats.eager_calls == 2


def test_repeated_plain_calls_check_what_the_general_path_checks():
    """After a replay with plain array arguments, later calls of the same kinds skip the
    general path's checks; a new shape, a shadow of another dtype, a failed guard, an
    evicted program and a nested differentiation still go the general way."""
    def f(x):
        if x.sum() > 0:
            return np.sum(np.sin(x) * x)
        return np.sum(x ** 3)
    g = tape.compile(Reverse, f, Active, Duplicated, max_programs=1)
    for x in ([0.5, 1.0, 0.25], [0.5, 1.0, 0.25], [-0.5, 1.0, -0.75], [-0.5, 1.0, -0.75],
              [0.5, 1.0], [0.5, 1.0, 0.25], [-0.5, -1.0], [-0.5, -1.0]):
        x = np.array(x)
        _compare_simple(g, f, Reverse, Active, lambda: [Duplicated(x.copy(), np.zeros_like(x))])
    assert (g.stats.traces, g.stats.programs) == (6, 1), g.stats
    x = np.array([-0.5, -1.0])
    for shadow in (np.zeros(2, dtype=np.float32), np.zeros(3)):
        try:
            want = tape.autodiff(Reverse, f, Active, Duplicated(x, shadow.copy()))
        except Exception as e:   # noqa: BLE001  (whatever eager mode does, compiled does)
            with pytest.raises(type(e)):
                g(Duplicated(x, shadow.copy()))
        else:
            assert_same(g(Duplicated(x, shadow.copy())), want)
    inner = np.zeros(2)

    def outer(y):
        g(Duplicated(x, inner))
        return np.sum(y * y)
    tape.autodiff(Reverse, outer, Active, Active(x))
    assert g.stats.eager_reasons[-1] == "called inside another differentiation"
    np.testing.assert_allclose(inner, 3 * x ** 2, rtol=RTOL, atol=ATOL)


def test_a_signature_that_runs_eagerly_can_evict_the_last_replayed_one():
    def f(x):
        if x.size == 2:   # draws that its first trace cannot see (a generator seeded by the
            # clock, not by the OS's entropy): its program is built, then found to differ
            return np.sum(x * np.random.default_rng(time.time_ns()).uniform())
        return np.sum(np.tanh(x))
    g = tape.compile(Reverse, f, Active, Duplicated, max_programs=1)
    x3, x2 = np.array([0.5, 1.0, 0.25]), np.array([0.5, 1.0])
    for x in (x3, x3, x2, x3, x3):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", tape.CompileWarning)
            g(Duplicated(x, np.zeros_like(x)))
    # x2's first call is answered by its own trace (a program too), which evicts x3's
    assert (g.stats.traces, g.stats.programs) == (3, 1), g.stats


@pytest.mark.parametrize("change", ["replace array", "negate zero", "dict value"])
def test_watched_container_items_are_compared_at_each_call(change):
    params = [np.array([1.0, 2.0, 3.0]), 0.0]
    named = {"scale": 2.0}

    def f(x):
        return np.sum(x * params[0] * named["scale"]) + np.sum(np.sin(x) * params[1])
    g = tape.compile(ReverseWithPrimal, f, Active, Duplicated)
    make = lambda: [Duplicated(np.array([0.5, -1.0, 2.0]), np.zeros(3))]   # noqa: E731
    _compare_simple(g, f, ReverseWithPrimal, Active, make)
    _compare_simple(g, f, ReverseWithPrimal, Active, make)
    if change == "replace array":
        params[0] = np.array([3.0, 2.0, 1.0])
    elif change == "negate zero":
        params[1] = -0.0
    else:
        named["scale"] = 5.0
    _compare_simple(g, f, ReverseWithPrimal, Active, make)
    assert g.stats.traces == 2, g.stats   # -0.0 == 0.0, but the program baked the old sign
