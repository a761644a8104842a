"""`tape.checkpoint` and `tape.checkpointed_scan` under the modes, nestings and argument kinds
a user would try, against plain NumPy (primal), the same program without checkpointing and
central finite differences in float64 (gradients).

The first tests were silent wrong values and crashes on valid input, now fixed: a
recomputation that read other values than the first run without the checks noticing (a closed-over array
rewritten after passing through a plain temporary, a late-bound loop variable, random draws
next to an infinite or NaN result), results that alias an input which the caller wrote
afterwards, and an argument list the caller appended to after the call.
"""
import tracemalloc

import numpy as np
import pytest

import tape
from tape import (Active, BatchDuplicated, CheckpointError, Const, Duplicated, Forward,
                  ForwardWithPrimal, Reverse, ReverseSplitWithPrimal, ReverseWithPrimal,
                  autodiff, autodiff_thunk, checkpoint, checkpointed_scan, hessian, hvp)
from tape.split import TapeMutatedError

W = np.array([[0.5, -0.2, 0.1], [0.1, 0.3, -0.4], [0.2, 0.1, 0.6]])
X0 = np.array([0.3, -0.5, 0.8])


def grads(f, *args, mode=Reverse):
    return autodiff(mode, f, Active, *[Active(np.array(a, dtype=float)) for a in args])[0]


def central(f, x, h=1e-6):
    x = np.array(x, dtype=float)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = h
        g[i] = (f(x + e) - f(x - e)) / (2 * h)
    return g


def plain(f):
    return f


def loop(step, carry, xs):
    ys = []
    for t in range(len(xs)):
        carry, y = step(carry, xs[t])
        ys.append(y)
    if isinstance(ys[0], tuple):
        return carry, tuple(np.stack(col) for col in zip(*ys))
    return carry, np.stack(ys)


# -- silent wrong values ------------------------------------------------------------------------


@pytest.mark.parametrize("derive", [lambda c: c * 1.0, lambda c: c[[0, 1, 2]]],
                         ids=["c*1.0", "c[[0,1,2]]"])
def test_closure_rewritten_after_the_call_through_a_plain_temporary(derive):
    def f(x):
        c = np.array([1.0, 2.0, 3.0])
        y = checkpoint(lambda h: np.sum(h * derive(c)))(x)
        c[:] = c[::-1]   # the same results at x = ones, another derivative
        return y
    try:
        (g,) = grads(f, np.ones(3))
    except CheckpointError:
        return   # refusing is an acceptable fix
    np.testing.assert_allclose(g, [1.0, 2.0, 3.0], rtol=1e-14)


def test_late_bound_loop_variable_in_a_checkpointed_lambda():
    def loss(wrap):
        def f(b, x):
            h = x
            for i in range(3):
                h = wrap(lambda h: np.tanh(W @ h + b[i]))(h)
            return np.sum(h * np.array([1.0, 2.0, 3.0]))
        return f
    b = np.zeros((3, 3))   # biases initialised to zero: every b[i] holds the same values
    want = grads(loss(plain), b, X0)[0]
    np.testing.assert_allclose(want, central(lambda b: loss(plain)(b, X0), b), rtol=1e-6,
                               atol=1e-8)
    try:
        got = grads(loss(checkpoint), b, X0)[0]
    except CheckpointError:
        return
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("fill", [-np.inf, np.nan], ids=["-inf", "nan"])
def test_random_draws_next_to_an_infinite_or_nan_result(fill):
    keep = np.array([True, True, False, True])   # an attention-style mask

    def f(x, rng):
        def block(h):
            drop = rng.random(4) > 0.5
            return np.where(keep, h * drop, fill)
        out = checkpoint(block)(x)
        return np.sum(np.exp(np.where(keep, out, 0.0)))
    x = np.array([1.0, 2.0, 3.0, 4.0])
    first = np.random.default_rng(0).random(4) > 0.5   # the mask of the forward run
    assert not np.array_equal(first, np.random.default_rng(0).random(8)[4:] > 0.5)
    try:
        (g, _), = autodiff(Reverse, f, Active, Active(x), Const(np.random.default_rng(0)))
    except CheckpointError:
        return
    np.testing.assert_allclose(g, np.exp(x * first) * first * keep, rtol=1e-14)


@pytest.mark.parametrize("inner", [lambda u: u, lambda u: u[1:], lambda u: u.reshape(3, 1)],
                         ids=["itself", "u[1:]", "reshape"])
def test_a_result_aliasing_an_input_that_the_caller_writes_afterwards(inner):
    def loss(wrap):
        def f(x):
            buf = x * 1.0
            a = wrap(inner)(buf)
            buf[1] = 10.0   # in NumPy, a sees the write
            return np.sum(a * a) + np.sum(np.sin(buf))
        return f
    x = np.array([1.0, 2.0, 3.0])
    want = loss(plain)(x)
    assert loss(checkpoint)(x) == want   # no autodiff: checkpoint(f) is f
    (g_eager,), y_eager = autodiff(ReverseWithPrimal, loss(plain), Active, Active(x))
    assert y_eager == pytest.approx(want, rel=1e-14)
    np.testing.assert_allclose(g_eager, central(loss(plain), x), rtol=1e-6, atol=1e-8)
    try:
        (g,), y = autodiff(ReverseWithPrimal, loss(checkpoint), Active, Active(x))
    except CheckpointError:
        return
    assert y == pytest.approx(want, rel=1e-14)
    np.testing.assert_allclose(g, g_eager, rtol=1e-13, atol=1e-14)


# -- crashes on valid input ---------------------------------------------------------------------


def test_an_argument_list_appended_to_after_the_call():
    def loss(wrap):
        def f(x):
            features = [x]
            for _ in range(3):
                features.append(wrap(lambda fs: np.tanh(W @ fs[-1]) + 0.5 * fs[0])(features))
            return np.sum(features[-1] ** 2)
        return f
    want = grads(loss(plain), X0)[0]
    np.testing.assert_allclose(grads(loss(checkpoint), X0)[0], want, rtol=1e-13, atol=1e-14)


# -- new passing coverage -----------------------------------------------------------------------


def _branchy(h):
    if np.sum(h) > 0:   # Python control flow on a traced value
        return np.sin(h) * 2.0
    return np.cos(h) * h


@pytest.mark.parametrize("x", [X0, -X0], ids=["sin-branch", "cos-branch"])
def test_python_control_flow_on_traced_values_inside(x):
    loss = lambda wrap: lambda x: np.sum(wrap(_branchy)(x) ** 2)   # noqa: E731
    got = grads(loss(checkpoint), x)[0]
    np.testing.assert_allclose(got, grads(loss(plain), x)[0], rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(got, central(loss(plain), x), rtol=1e-6, atol=1e-8)


def test_traced_keyword_argument_and_integer_bool_results():
    def block(h, scale=1.0):
        a = np.tanh(W @ h) * scale
        return a, int(np.argmax(h)), h > 0, np.sum(h > 0)

    def loss(wrap):
        def f(x, s):
            a, i, positive, count = wrap(block)(x, scale=s)
            assert isinstance(i, int)
            return np.sum(a * positive) * a[i] + count
        return f
    got, want = grads(loss(checkpoint), X0, 0.7), grads(loss(plain), X0, 0.7)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-14, atol=1e-15)
    assert got[1] == pytest.approx(want[1], rel=1e-14)
    np.testing.assert_allclose(got[0], central(lambda x: loss(plain)(x, 0.7), X0), rtol=1e-6,
                               atol=1e-8)


def test_compiled_in_every_mode_equals_eager_after_the_closure_changes():
    c = np.array([1.0, 2.0, 3.0])
    f = lambda x: np.sum(checkpoint(lambda h: np.tanh(W @ h) * c)(x) ** 2)   # noqa: E731
    p = lambda x: np.sum((np.tanh(W @ x) * c) ** 2)                           # noqa: E731
    compiled = {m: tape.compile(m, f, Active, Active) for m in (Reverse, ReverseWithPrimal)}
    compiled.update({m: tape.compile(m, f, Duplicated) for m in (Forward, ForwardWithPrimal)})
    batched = tape.compile(Reverse, f, Active, BatchDuplicated)
    for k in range(3):
        c[0] = 1.0 + k   # a closed-over array written between calls
        x = X0 + 0.1 * k
        for m in (Reverse, ReverseWithPrimal):
            got, want = compiled[m](Active(x)), autodiff(m, p, Active, Active(x))
            np.testing.assert_allclose(got[0][0], want[0][0], rtol=1e-13, atol=1e-14)
            if m is ReverseWithPrimal:
                assert got[1] == pytest.approx(want[1], rel=1e-14)
        for m in (Forward, ForwardWithPrimal):
            got = compiled[m](Duplicated(x, np.ones(3)))
            want = autodiff(m, p, Duplicated(x, np.ones(3)))
            np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-14)
        shadows, expected = (np.zeros(3), np.zeros(3)), (np.zeros(3), np.zeros(3))
        batched(BatchDuplicated(x, shadows))
        autodiff(Reverse, p, Active, BatchDuplicated(x, expected))
        for s, e in zip(shadows, expected):
            np.testing.assert_allclose(s, e, rtol=1e-13, atol=1e-14)


def test_split_mode_refuses_inputs_or_closures_written_between_the_passes():
    c = np.array([1.0, 2.0, 3.0])
    f = lambda x: np.sum(checkpoint(lambda h: np.tanh(W @ h) * c)(x) ** 2)   # noqa: E731
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, f, Active, Duplicated)
    x, dx = X0.copy(), np.zeros(3)
    saved, _, _ = fwd(Duplicated(x, dx))
    x += 1.0
    with pytest.raises(TapeMutatedError, match="checkpoint"):
        rev(Duplicated(x, dx), 1.0, saved)
    x, dx = X0.copy(), np.zeros(3)
    saved, _, _ = fwd(Duplicated(x, dx))
    c[1] = 7.0
    with pytest.raises(CheckpointError, match="written after the call"):
        rev(Duplicated(x, dx), 1.0, saved)


@pytest.mark.parametrize("n", [1, 2, 5])
@pytest.mark.parametrize("kw", [dict(), dict(every=1), dict(every=3), dict(every=100),
                                dict(schedule="revolve", snapshots=2),
                                dict(schedule="revolve", snapshots=50)],
                         ids=["default", "every1", "every3", "every100", "revolve2",
                              "revolve50"])
def test_short_scans_with_an_integer_counter_in_the_carry(n, kw):
    xs = np.outer(np.arange(n) + 1.0, [1.0, 0.5, -0.2])

    def loss(scan):
        def f(U, h0):
            def step(c, x):
                h = np.tanh(U @ c["h"] + x)
                return ({"h": h, "k": c["k"] + 1, "s": c["s"] + np.sum(c["h"])},
                        (c["h"][0] * 1.0, c["k"]))
            c, (first, ks) = scan(step, {"h": h0, "k": 0, "s": 0.0}, xs)
            assert c["k"] == n and list(ks) == list(range(n))
            return np.sum(c["h"]) * c["s"] + np.sum(first ** 2)
        return f
    got = grads(loss(lambda *a: checkpointed_scan(*a, **kw)), W, X0)
    want = grads(loss(loop), W, X0)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(want[1], central(lambda h: loss(loop)(W, h), X0), rtol=1e-6,
                               atol=1e-8)


def test_scan_keeps_float32_and_takes_integer_xs():
    xs_int = np.arange(12).reshape(4, 3)

    def loss(scan):
        def f(U, h):
            return np.sum(scan(lambda h, x: (np.tanh(U @ h + 0.1 * x), 0.0), h, xs_int)[0])
        return f
    got = grads(loss(lambda *a: checkpointed_scan(*a, every=3)), W, X0)
    for g, w in zip(got, grads(loss(loop), W, X0)):
        np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-14)
    W32, x32, xs32 = W.astype(np.float32), X0.astype(np.float32), np.ones((5, 3), np.float32)
    (gW, gh), = autodiff(Reverse, lambda U, h: np.sum(checkpointed_scan(
        lambda h, x: (np.tanh(U @ h + x), None), h, xs32, every=2)[0]), Active, Active(W32),
        Active(x32))
    assert gW.dtype == np.float32 and gh.dtype == np.float32


def test_hessian_and_hvp_of_a_checkpoint_around_a_checkpointed_scan():
    xs = np.outer(np.arange(5.0), [1.0, 0.5, -0.2]) / 5

    def loss(U, h0, checkpointed):
        if checkpointed:
            def run(h0):
                return checkpointed_scan(lambda h, x: (np.tanh(U @ h + x), np.sum(h)), h0, xs,
                                         schedule="revolve", snapshots=2)
            h, ys = checkpoint(run)(h0)
        else:
            h, ys = loop(lambda h, x: (np.tanh(U @ h + x), np.sum(h)), h0, xs)
        return np.sum(h ** 2) + np.sum(ys ** 2)
    np.testing.assert_allclose(hessian(lambda h: loss(W, h, True), X0),
                               hessian(lambda h: loss(W, h, False), X0), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(hvp(lambda U: loss(U, X0, True), W, W),
                               hvp(lambda U: loss(U, X0, False), W, W), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(grads(lambda h: loss(W, h, True), X0)[0],
                               central(lambda h: loss(W, h, False), X0), rtol=1e-6, atol=1e-8)


def test_scan_peak_memory_is_below_the_plain_loop():
    # Enough steps that the residuals, not U's gradient, set the plain loop's peak; each peak
    # is the smaller of two calls, so that first-call caches count for neither.
    rng = np.random.default_rng(0)
    d, n = 64, 800
    U = rng.standard_normal((d, d)) * 0.9 / np.sqrt(d)
    xs = rng.standard_normal((n, d))

    def plain_loop(U):
        h = np.zeros(d)
        for t in range(n):
            h = np.tanh(U @ h + xs[t])
        return np.sum(h)

    def scanned(U):
        return np.sum(checkpointed_scan(lambda h, x: (np.tanh(U @ h + x), None), np.zeros(d),
                                        xs, every=30)[0])

    def peak(f):
        tracemalloc.start()
        try:
            (g,), = autodiff(Reverse, f, Active, Active(U))
            return g, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    (g_plain, m_plain), (g_scan, m_scan) = (
        min((peak(f) for _ in range(2)), key=lambda r: r[1]) for f in (plain_loop, scanned))
    np.testing.assert_allclose(g_scan, g_plain, rtol=1e-12, atol=1e-14)
    assert m_scan * 2 < m_plain, (m_scan, m_plain)


# -- the recomputation's checks raise on nothing a deterministic function does ----------------


def test_no_false_alarm_from_temporaries_conversions_and_long_loops():
    c, d = np.array([1.0, 2.0, 3.0]), np.array([0.5, -1.0, 2.0])

    def block(h):
        out = h * (c * 1.0) + h * (d * 2.0)          # two temporaries of one kind
        out = out + h * (np.asarray(np.tanh(h)) * 1.0)   # a converted intermediate
        for k in range(40):                            # more temporaries than are kept
            out = out + h * (c * (0.01 * k))
        return np.sum(out * (np.asarray(h) > 0))

    def loss(wrap):
        return lambda x: wrap(block)(x) * 2.0
    x = np.array([0.3, -0.5, 0.8])
    want = grads(loss(plain), x)[0]
    np.testing.assert_allclose(grads(loss(checkpoint), x)[0], want, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(want, central(loss(plain), x), rtol=1e-6, atol=1e-8)


def test_a_result_viewing_an_input_refuses_a_later_write_into_either():
    def f(x):
        buf = x * 1.0
        a = checkpoint(lambda u: u[1:])(buf)
        a[0] = 5.0   # NumPy would write into buf too
        return np.sum(a) + np.sum(buf)
    with pytest.raises(CheckpointError, match="view of one of its inputs"):
        grads(f, X0)
