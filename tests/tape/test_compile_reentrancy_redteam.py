"""`tape.compile` under re-entrant calls, threads and unusual control flow: nested compiled
functions, recursion, a differentiation inside `f`, exceptions and per-branch return
structures, concurrent callers, copies of compiled functions and of their instances, and
`Const` numbers whose `__eq__` / `__hash__` are not the number's. Every call is compared with
eager `autodiff` (results, shadows and written buffers)."""
import copy
import threading

import numpy as np
import pytest

import tape
from tape import Active, Const, Duplicated, Reverse, ReverseWithPrimal, autodiff

RP = ReverseWithPrimal
RTOL, ATOL = 1e-12, 1e-14


def _outcome(call):
    try:
        return "ok", call()
    except Exception as e:   # noqa: BLE001
        return "raised", type(e), str(e)


def _assert_close(a, b):
    if isinstance(a, (tuple, list)):
        assert isinstance(b, (tuple, list)) and len(a) == len(b), (a, b)
        for x, y in zip(a, b):
            _assert_close(x, y)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), (a, b)
        for k in a:
            _assert_close(a[k], b[k])
    elif a is None or b is None or isinstance(a, (str, type)):
        assert a == b, (a, b)
    else:
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)


def _against_eager(g, f, ret, make):
    """Call `g` and eager autodiff on fresh arguments from `make()`: the same outcome (value,
    or exception type and message), shadows and argument values afterwards."""
    mine, theirs = make(), make()
    got = _outcome(lambda: g(*mine))
    want = _outcome(lambda: autodiff(g.mode, f, ret, *theirs))
    assert got[0] == want[0], (got, want)
    if got[0] == "raised":
        assert got[1:] == want[1:], (got, want)
    else:
        _assert_close(got[1], want[1])
    for a, b in zip(mine, theirs):
        _assert_close(a.val, b.val)
        _assert_close(getattr(a, "dval", None), getattr(b, "dval", None))
    return got


# -- nesting and recursion ----------------------------------------------------------------

@tape.compile(RP, Active, Active)
def _inner(v):
    return np.sum(np.sin(v) * v)


def _outer(x):
    (dv,), value = _inner(Active(x))   # on the outer trace's values: second order
    return np.sum(dv * x) + value


def test_a_compiled_function_called_on_the_traced_values_of_another():
    g = tape.compile(RP, _outer, Active, Duplicated)
    for k in range(3):
        x = np.array([0.3, 0.7]) + k
        _against_eager(g, _outer, Active, lambda: [Duplicated(x.copy(), np.zeros(2))])
    assert g.stats.traces == 0 and g.stats.eager_calls == 3, g.stats
    assert "differentiation inside the function" in g.stats.eager_reasons[-1]
    assert _inner.stats.eager_reasons == ["called inside another differentiation"]


def test_tape_gradient_inside_a_compiled_function_runs_eagerly():
    def f(x):
        (gr,) = tape.gradient(Reverse, lambda v: np.sum(v ** 3), tape.primal(x))
        return np.sum(gr * x)
    g = tape.compile(RP, f, Active, Duplicated)
    for k in range(3):
        x = np.array([0.3, 0.7]) + k
        _against_eager(g, f, Active, lambda: [Duplicated(x.copy(), np.zeros(2))])
    assert (g.stats.traces, g.stats.hits, g.stats.eager_calls) == (0, 0, 3), g.stats


def test_a_compiled_function_that_calls_itself_on_smaller_inputs():
    def f(x):
        if x.shape[0] <= 1:
            return np.sum(x * x)
        return np.sum(np.sin(x[:1])) + g(Active(x[1:]))[1]
    g = tape.compile(RP, f, Active, Active)
    for n in (1, 1, 1, 2, 3, 3, 4):
        x = np.linspace(0.1, 1.0, n)
        _against_eager(g, f, Active, lambda: [Active(x.copy())])
    assert g.stats.hits >= 1   # the base case replays; the others nest, so run eagerly


def test_recursion_through_an_inactive_helper_replays_one_level_per_call():
    @tape.inactive
    def rest(c):   # not traced by the caller: the inner calls compile on their own
        return np.float64(0.0) if c.shape[0] == 0 else np.float64(g(Active(c[1:].copy()))[1])

    def f(x):
        return np.sum(x * x) + rest(tape.primal(x))
    g = tape.compile(RP, f, Active, Active)
    for n in (1, 2, 3, 3, 3, 4, 4, 4):
        x = np.linspace(0.1, 1.0, n)
        _against_eager(g, f, Active, lambda: [Active(x.copy())])
    assert g.stats.hits >= 4, g.stats


# -- exceptions and control flow ----------------------------------------------------------

def test_a_raising_call_writes_nothing_and_the_next_call_replays():
    def f(x, y):
        y[...] = x * 2.0
        if np.sum(x) > 5:
            raise ValueError("too big")
        return np.sum(np.sin(y) * x)
    g = tape.compile(RP, f, Active, Duplicated, Duplicated)
    for xs in ([0.1, 0.2], [0.3, 0.4], [4.0, 3.0], [0.5, 0.6], [9.0, 9.0], [0.7, 0.8],
               [4.0, 4.0], [0.9, 1.0]):
        x = np.array(xs)
        _against_eager(g, f, Active, lambda: [Duplicated(x.copy(), np.ones(2)),
                                              Duplicated(np.zeros(2), np.ones(2))])
    s = g.stats
    assert (s.traces, s.hits, s.eager_calls) == (1, 4, 3), s   # the raising calls eager


def test_try_except_around_an_op_that_raises_for_some_values():
    def f(a):
        try:
            r = np.linalg.inv(a)
        except np.linalg.LinAlgError:
            r = a * 2.0
        return np.sum(r * a)
    g = tape.compile(RP, f, Active, Duplicated)
    for a in (2.0, 3.0, 4.0, 0.0, 5.0, 0.0, 1.0):
        m = np.eye(2) * a
        _against_eager(g, f, Active, lambda: [Duplicated(m.copy(), np.ones((2, 2)))])


def test_early_returns_of_different_structures_per_branch():
    def f(x):
        if x[0] > 0:
            return np.sum(x)
        if x[1] > 0:
            return (np.sum(x * x), 3.0)
        return {"a": np.sum(x ** 3), "b": [x * 2.0]}
    g = tape.compile(RP, f, Const, Duplicated)
    for xs in ([1.0, 2.0], [1.0, 3.0], [-1.0, 2.0], [-1.0, 3.0], [-1.0, -2.0], [-1.0, -3.0],
               [-2.0, -3.0], [2.0, 3.0], [-1.0, 5.0]):
        x = np.array(xs)
        _against_eager(g, f, Const, lambda: [Duplicated(x.copy(), np.ones(2))])
    assert g.stats.traces == 3 and g.stats.eager_calls == 0, g.stats


# -- threads ------------------------------------------------------------------------------

_W = np.array([1.0, 2.0, 3.0, 4.0])


def _branchy(x, c):
    if np.sum(x) > 0:
        return np.sum(np.sin(x) * c * _W[:x.shape[0]])
    return np.sum(x ** 3) * c[0]


def test_threads_with_different_shapes_and_branches_agree_with_eager_per_call():
    n_threads, n_calls = 6, 8
    g = tape.compile(RP, _branchy, Active, Duplicated, Const, max_traces=2, max_programs=3)
    work = []
    for i in range(n_threads):
        r = np.random.default_rng(i)
        calls = []
        for _ in range(n_calls):
            n = int(r.integers(1, 4))
            x, c = r.normal(size=n), r.normal(size=n)
            dx = np.zeros(n)
            calls.append((x, c, autodiff(RP, _branchy, Active, Duplicated(x.copy(), dx),
                                         Const(c.copy())), dx))
        work.append(calls)
    errors, start = [], threading.Barrier(n_threads)

    def worker(calls):
        start.wait()
        for x, c, want, want_dx in calls:
            dx = np.zeros_like(x)
            try:
                got = g(Duplicated(x.copy(), dx), Const(c.copy()))
                _assert_close(got, want)
                _assert_close(dx, want_dx)
            except Exception as e:   # noqa: BLE001
                errors.append(e)
    threads = [threading.Thread(target=worker, args=(w,)) for w in work]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    s = g.stats
    assert s.traces + s.hits + s.eager_calls == n_threads * n_calls, s
    assert s.programs <= 3, s


def test_a_failing_trace_does_not_rewind_another_thread_s_draws():
    """The process-wide generators are rewound after a failed trace only while no other thread
    runs (a single-threaded call then draws what eager autodiff would)."""
    # Plain locks: the watch restores what it reaches after a failed trace (an Event's flag
    # too), a lock's state it cannot reach.
    once, inside, drawn = threading.Lock(), threading.Lock(), threading.Lock()
    finished = threading.Lock()   # the other thread lives on (a worker of a pool, say)
    inside.acquire()
    drawn.acquire()
    finished.acquire()

    def f(x):
        if once.acquire(blocking=False):   # the other thread draws while this trace runs
            inside.release()
            drawn.acquire(timeout=5)
        raise ValueError("bad input")   # the trace fails; the eager call raises too
    g = tape.compile(Reverse, f, Active, Duplicated)
    state = np.random.get_state()
    try:
        np.random.seed(0)
        want = list(np.random.random(2))
        np.random.seed(0)
        got = []

        def other():
            inside.acquire(timeout=5)
            got.append(np.random.random())
            drawn.release()
            finished.acquire(timeout=5)
        t = threading.Thread(target=other)
        t.start()
        with pytest.raises(ValueError, match="bad input"):
            g(Duplicated(np.ones(2), np.zeros(2)))
        finished.release()
        t.join()
        got.append(np.random.random())
    finally:
        np.random.set_state(state)
    assert got == want


# -- copies -------------------------------------------------------------------------------

class _Model:
    def __init__(self, scale):
        self.scale = scale
        self.w = np.ones(2) * scale

    @tape.compile(RP, Active, Duplicated)
    def loss(self, x):
        return np.sum(x ** 2) * self.scale

    def plain_loss(self, x):
        return np.sum(x ** 2) * self.scale

    def linear(self, x):
        return np.sum(x * self.w)


def test_a_shallow_copy_of_an_instance_computes_with_its_own_attributes():
    m = _Model(2.0)
    x = np.ones(3)
    for _ in range(3):
        m.loss(Duplicated(x, np.zeros(3)))
    twin = copy.copy(m)
    twin.scale = 10.0
    dx, want_dx = np.zeros(3), np.zeros(3)
    got = twin.loss(Duplicated(x, dx))
    want = autodiff(RP, twin.plain_loss, Active, Duplicated(x, want_dx))
    assert got[1] == want[1] == 30.0
    np.testing.assert_array_equal(dx, want_dx)


def test_a_shallow_copy_of_a_compiled_function_shares_its_programs():
    f = lambda x: np.sum(np.sin(x) * x)   # noqa: E731
    g = tape.compile(RP, f, Active, Duplicated)
    x = np.array([0.3, 0.5])
    for _ in range(2):
        g(Duplicated(x, np.zeros(2)))
    twin = copy.copy(g)
    for h in (twin, g, twin):
        _against_eager(h, f, Active, lambda: [Duplicated(x.copy(), np.zeros(2))])
    assert twin.stats.traces == 1


def test_a_deep_copy_of_a_model_holding_a_compiled_gradient():
    m = _Model(2.0)
    m.grad = tape.compile(RP, m.linear, Active, Duplicated)
    x = np.array([0.3, 0.5])
    for _ in range(3):
        m.grad(Duplicated(x, np.zeros(2)))
    twin = copy.deepcopy(m)
    twin.w[:] = 5.0
    for model, w in ((twin, 5.0), (m, 2.0)):
        dx = np.zeros(2)
        got = model.grad(Duplicated(x, dx))
        assert got[1] == pytest.approx(w * 0.8, rel=1e-12)
        np.testing.assert_array_equal(dx, [w, w])


# -- Python-number Consts with their own __eq__ / __hash__ --------------------------------

class _AllEqual(float):
    """Equal to everything, one hash: `Const(_AllEqual(2.0))` is still the number 2.0."""
    def __eq__(self, other):
        return True

    __ne__ = lambda self, other: False   # noqa: E731

    def __hash__(self):
        return 0


class _Unhashable(float):
    __hash__ = None


def _times(x, c):
    return np.sum(x * c)


def test_a_float_const_whose_eq_says_equal_to_everything():
    g = tape.compile(RP, _times, Active, Duplicated, Const)
    x = np.ones(3)
    for c in (1.0, 1.0, 2.0, 3.0):
        _against_eager(g, _times, Active,
                       lambda: [Duplicated(x.copy(), np.zeros(3)), Const(_AllEqual(c))])


def test_an_unhashable_float_const_runs_as_eager_mode_runs_it():
    g = tape.compile(RP, _times, Active, Duplicated, Const)
    x = np.ones(3)
    for c in (1.0, 2.0):
        _against_eager(g, _times, Active,
                       lambda: [Duplicated(x.copy(), np.zeros(3)), Const(_Unhashable(c))])
