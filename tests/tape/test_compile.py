"""`tape.compile`: a replayed program gives exactly what eager `autodiff` gives, on every call."""
import warnings

import numpy as np
import pytest

import tape
from tape import (Active, CompileWarning, Const, Duplicated, Forward, Reverse,
                  ReverseSplitWithPrimal, ReverseWithPrimal, autodiff)


def both(mode, f, ret, *make_args):
    """Calls compiled and eager on fresh copies of the arguments built by `make_args`; returns
    both results and both argument lists."""
    g = tape.compile(mode, f, ret, *[type(a) for a in make_args[0]()])
    return g


def check(g, mode, f, ret, args_fn, rtol=1e-12):
    a_args, e_args = args_fn(), args_fn()
    got = g(*a_args)
    want = autodiff(mode, f, ret, *e_args)
    _close(got, want, rtol)
    for a, e in zip(a_args, e_args):   # shadows and written buffers
        _close(a.val, e.val, rtol)
        if isinstance(a, Duplicated):
            _close(a.dval, e.dval, rtol)
    return got


def _close(a, b, rtol):
    if isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            _close(x, y, rtol)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _close(a[k], b[k], rtol)
    elif a is None or b is None:
        assert a is None and b is None
    else:
        assert type(a) is type(b), (type(a), type(b))
        np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-14)


def test_replays_and_matches_eager_with_a_branch_on_a_value():
    def f(x, c):
        y = np.sin(x) * c
        if y.sum() > 0:
            y = y * 2
        return np.sum(y ** 2)
    g = tape.compile(ReverseWithPrimal, f, Active, Duplicated, Const)
    x = np.array([0.5, 1.0, 2.0])
    for c in ([1.0, 2.0, 3.0], [-1.0, -2.0, -3.0], [2.0, 1.0, 0.5], [1.0, 2.0, 3.0]):
        check(g, ReverseWithPrimal, f, Active,
              lambda: [Duplicated(x.copy(), np.zeros(3)), Const(np.array(c))])
    s = g.stats
    assert s.traces == 2 and s.guard_failures >= 1 and s.hits >= 2 and s.eager_calls == 0
    assert "def run" in str(g)


def test_active_scalars_and_the_decorator():
    @tape.compile(ReverseWithPrimal, Active, Active, Active)
    def f(x, y):
        return x * np.exp(y) if x > y else x - y
    for x, y in [(3.0, 1.0), (0.5, 2.0), (4.0, 0.25)]:
        got = f(Active(x), Active(y))
        want = autodiff(ReverseWithPrimal, f.f, Active, Active(x), Active(y))
        _close(got, want, 1e-13)
    assert f.stats.traces == 2


def test_shape_and_dtype_changes_trace_again():
    g = tape.compile(Reverse, lambda x: np.sum(np.tanh(x) * x), Active, Duplicated)
    for shape, dtype in [((3,), np.float64), ((4,), np.float64), ((3,), np.float32),
                         ((3,), np.float64)]:
        x = np.linspace(-1, 1, shape[0]).astype(dtype)
        check(g, Reverse, g.f, Active, lambda: [Duplicated(x.copy(), np.zeros_like(x))],
              rtol=1e-5 if dtype == np.float32 else 1e-12)
    assert g.stats.traces == 3 and g.stats.hits == 1


def test_const_values_decide_loops_and_indices():
    def f(x, n, idx):
        y = x
        for _ in range(int(n[0])):
            y = np.sin(y) + x
        return np.sum(y[idx] ** 2) + y[int(np.argmax(y))]
    g = tape.compile(Reverse, f, Active, Duplicated, Const, Const)
    x = np.array([0.3, -0.2, 0.9, 0.1])
    for n, idx in [(2, [0, 2]), (3, [0, 2]), (2, [1, 3]), (2, [0, 2])]:
        check(g, Reverse, f, Active, lambda: [Duplicated(x.copy(), np.zeros(4)),
                                               Const(np.array([n])), Const(np.array(idx))])
    assert g.stats.eager_calls == 0


def test_integer_indices_targets_and_where_masks_are_read_at_each_call():
    """Indices whose contents decide no shape (integer gathers and scatters, class targets,
    an elementwise mask) are inputs of the program: new values replay without a new trace."""
    from ops.nn import cross_entropy

    def f(emb, tokens, targets, w):
        h = emb[tokens]                              # an embedding gather
        h = np.where(h > 0.1, h, 0.5 * h)            # a mask from the data
        h = h + np.take(emb, tokens[:, ::-1], axis=0)
        logits = h @ w
        return cross_entropy(logits, targets) + np.sum(np.take_along_axis(
            logits, targets[..., None], axis=-1) ** 2)
    g = tape.compile(ReverseWithPrimal, f, Active, Duplicated, Const, Const, Duplicated)
    rng = np.random.default_rng(0)
    emb, w = rng.standard_normal((7, 4)), rng.standard_normal((4, 5))
    for _ in range(5):
        tokens, targets = rng.integers(0, 7, (2, 3)), rng.integers(0, 5, (2, 3))
        check(g, ReverseWithPrimal, f, Active,
              lambda: [Duplicated(emb.copy(), np.zeros_like(emb)), Const(tokens),
                       Const(targets), Duplicated(w.copy(), np.zeros_like(w))])
    assert g.stats.traces == 1 and g.stats.guard_failures == 0 and g.stats.eager_calls == 0
    bad = rng.integers(0, 7, (2, 3))
    with pytest.raises(IndexError, match="targets must lie in"):
        g(Duplicated(emb.copy(), np.zeros_like(emb)), Const(bad), Const(bad + 5),
          Duplicated(w.copy(), np.zeros_like(w)))


def test_boolean_masks_decide_shapes_and_stay_guarded():
    def f(x, keep):
        return np.sum(x[keep] ** 2) * x[keep].shape[0]
    g = tape.compile(Reverse, f, Active, Duplicated, Const)
    x = np.array([1.0, 2.0, 3.0])
    for keep in ([True, False, True], [True, True, True], [False, True, False]):
        check(g, Reverse, f, Active, lambda: [Duplicated(x.copy(), np.zeros(3)),
                                               Const(np.array(keep))])
    assert g.stats.traces == 3


def test_masks_and_argmax_of_active_values_are_recomputed():
    def f(x):
        return np.sum(x[x > 0] ** 3) + x[np.argmax(x)] * x.max()
    g = tape.compile(ReverseWithPrimal, f, Active, Duplicated)
    for x in ([1.0, -2.0, 3.0], [-1.0, 2.0, 0.5], [0.2, 0.1, -0.3]):
        check(g, ReverseWithPrimal, f, Active,
              lambda: [Duplicated(np.array(x), np.zeros(3))])


def test_python_number_consts_are_part_of_the_signature():
    g = tape.compile(Reverse, lambda x, k: np.sum(x ** k), Active, Duplicated, Const)
    x = np.array([1.0, 2.0])
    for k in (2, 3, 2.5, 2):
        check(g, Reverse, g.f, Active, lambda: [Duplicated(x.copy(), np.zeros(2)), Const(k)])
    assert g.stats.traces == 3


def test_in_place_function_writes_and_zeroes_seeds():
    def f_(y, x):
        y[0] = x[0] ** 2 + x[1]
        y[1] = x[0] * x[1]
    g = tape.compile(Reverse, f_, Const, Duplicated, Duplicated)
    for xv in ([2.0, 3.0], [-1.0, 0.5]):
        got = check(g, Reverse, f_, Const, lambda: [Duplicated(np.zeros(2), np.array([1.0, 0.0])),
                                                     Duplicated(np.array(xv), np.zeros(2))])
        assert got == ((None, None),)


def test_shadows_accumulate_across_calls():
    g = tape.compile(Reverse, lambda w: np.sum(w ** 2), Active, Duplicated)
    w, dw = np.array([1.0, 2.0]), np.zeros(2)
    g(Duplicated(w, dw))
    g(Duplicated(w, dw))
    np.testing.assert_allclose(dw, 4 * w)


def test_closure_arrays_changed_in_place_are_seen():
    scale = np.array([1.0, 2.0])

    def f(x):
        doubled = scale * 2          # a plain NumPy value derived from the closure
        return np.sum(x * doubled)
    g = tape.compile(Reverse, f, Active, Duplicated)
    x = np.array([1.0, 1.0])
    for new in ([1.0, 2.0], [5.0, -1.0]):
        scale[:] = new
        dx = np.zeros(2)
        g(Duplicated(x, dx))
        np.testing.assert_allclose(dx, 2 * np.array(new))


def test_closure_rebinding_and_globals_are_seen():
    k = 2.0

    def f(x):
        return np.sum(x ** k)
    g = tape.compile(Reverse, f, Active, Duplicated)
    x = np.array([1.5, 2.0])
    for k in (2.0, 3.0):   # noqa: B007  (rebinds the closure variable)
        dx = np.zeros(2)
        g(Duplicated(x, dx))
        np.testing.assert_allclose(dx, k * x ** (k - 1))


def test_random_draws_are_fresh_at_every_call():
    rng = np.random.default_rng(0)

    def f(x):
        return np.sum(x * rng.normal(size=x.shape))
    g = tape.compile(Reverse, f, Active, Duplicated)
    x = np.ones(3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        grads = []
        for _ in range(3):
            dx = np.zeros(3)
            g(Duplicated(x, dx))
            grads.append(dx)
    assert any(issubclass(w.category, CompileWarning) for w in caught)
    assert not np.allclose(grads[1], grads[2])
    same = np.random.default_rng(0)   # each call draws from the generator as eager would
    for dx in grads:
        np.testing.assert_allclose(dx, same.normal(size=3), rtol=1e-15)
    assert g.stats.eager_calls == 3


def test_global_random_state_runs_eagerly():
    g = tape.compile(Reverse, lambda x: np.sum(x * np.random.rand(*x.shape)), Active, Duplicated)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompileWarning)
        np.random.seed(1)
        dx = np.zeros(2)
        g(Duplicated(np.ones(2), dx))
        np.random.seed(1)
        want = np.random.rand(2)
    np.testing.assert_allclose(dx, want)   # the call's own draw, not a traced one
    assert "random" in g.stats.eager_reasons[0]


def test_writes_into_const_arguments_run_eagerly():
    def f(x, c):
        c[0] = 7.0
        return np.sum(x * c)
    g = tape.compile(ReverseWithPrimal, f, Active, Duplicated, Const)
    c = np.ones(2)
    out = g(Duplicated(np.ones(2), np.zeros(2)), Const(c))
    assert c[0] == 7.0 and out[1] == 8.0 and g.stats.eager_calls == 1


def test_buffers_made_inside_are_fresh_each_replay():
    def f(x):
        buf = np.zeros_like(x)
        buf[0] = x[0] * 2
        buf[1:] += x[1:] ** 2
        return np.sum(buf * x)
    g = tape.compile(ReverseWithPrimal, f, Active, Duplicated)
    for xv in ([1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [1.0, 2.0, 3.0]):
        check(g, ReverseWithPrimal, f, Active, lambda: [Duplicated(np.array(xv), np.zeros(3))])


def test_pytree_arguments_and_dead_code():
    def loss(p, x):
        unused = np.exp(p["w"]) * 3   # noqa: F841  (dead: runs only where warnings raise)
        h = np.tanh(x @ p["w"] + p["b"])
        return np.mean(h ** 2)
    g = tape.compile(ReverseWithPrimal, loss, Active, Duplicated, Const)
    rng = np.random.default_rng(3)
    p = {"w": rng.normal(size=(3, 2)), "b": rng.normal(size=2)}
    for _ in range(2):
        x = rng.normal(size=(4, 3))
        check(g, ReverseWithPrimal, loss, Active,
              lambda: [Duplicated({k: v.copy() for k, v in p.items()},
                                  {k: np.zeros_like(v) for k, v in p.items()}), Const(x)])
    primal, adjoint = str(g).split("# primal")[1].split("# adjoint")
    assert all(line.startswith("    if strict: ") for line in primal.splitlines()
               if "exp" in line) and "exp" not in adjoint


def test_wrong_activity_types_are_named():
    g = tape.compile(Reverse, lambda x: np.sum(x), Active, Duplicated)
    with pytest.raises(tape.ActivityError, match="compiled as Duplicated"):
        g(Active(np.ones(2)))


def test_other_modes_run_eagerly_and_agree():
    g = tape.compile(Forward, lambda x: np.sin(x), Duplicated)
    assert g(Duplicated(1.0, 1.0)) == autodiff(Forward, lambda x: np.sin(x), Duplicated(1.0, 1.0))
    fwd, rev = tape.compile(ReverseSplitWithPrimal, lambda x: x * x, Active, Active)
    tp, y, _ = fwd(Active(3.0))
    assert rev(Active(3.0), 1.0, tp) == ((6.0,),)


def test_cache_is_bounded():
    g = tape.compile(Reverse, lambda x: np.sum(x ** 2), Active, Duplicated, max_programs=3)
    for n in range(1, 7):
        g(Duplicated(np.ones(n), np.zeros(n)))
    assert g.stats.programs <= 3 and g.stats.traces == 6


@pytest.mark.parametrize("f", [
    lambda x: np.sum(x * np.where(x > 0, 1.0, -1.0)),              # scalar branches
    lambda x: np.sum(x * np.where(x > 0.5, np.ones(3), np.arange(3.0))),   # constant arrays
    lambda x: np.sum(x * np.where(np.abs(x) < 1, 0.5, np.float32(2))),   # mixed scalar types
    lambda x: np.sum(x ** 2 * (x > 0)),                           # a traced mask as a factor
], ids=["where-scalars", "where-constants", "where-mixed-scalars", "mask-factor"])
def test_a_traced_condition_on_constant_branches_replays(f):
    """The traced condition is the only traced value of such a step: it is recorded (it used to
    recurse until Python's limit, and every call ran eagerly), replayed with each call's
    condition."""
    g = tape.compile(Reverse, f, Active, Active)
    for x in ([1.0, -2.0, 0.7], [-1.0, 3.0, 0.2], [0.1, 0.2, -5.0]):
        got = g(Active(np.array(x)))
        want = autodiff(Reverse, f, Active, Active(np.array(x)))
        np.testing.assert_allclose(got[0][0], want[0][0], rtol=1e-12)
    assert g.stats.eager_calls == 0 and g.stats.traces == 1, g.stats
