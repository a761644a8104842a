"""checkpoint(f): one record on the tape, recomputed in the reverse pass.

Gradients are compared with the same function without checkpointing and with finite differences
(float64, first and second order); the tape itself is inspected to show what is stored.
"""
import numpy as np
import pytest

from tape import (Active, CheckpointError, Const, Duplicated, Forward, Reverse,
                  ReverseHolomorphic, ReverseSplitWithPrimal, autodiff, autodiff_thunk,
                  checkpoint, checkpointed_scan, hvp, jacobian, set_nan_check, set_strong_zero)
from tape.core import ReverseTrace, primal
from tape.errors import NaNError
from tape.testing import check_grads

RNG = np.random.default_rng(7)
W = 0.5 * RNG.standard_normal((3, 3))
B = RNG.standard_normal(3)


def block(x, y):
    """Two inputs, a tuple of two outputs, a closure over Const arrays."""
    h = np.tanh(W @ x + y * B)
    return h * y, np.sum(np.sin(h) * x)


def loss_of(blk):
    def loss(x, y):
        a, b = blk(x, y)
        c, d = blk(a, y)
        return np.sum(c ** 2) + b * d
    return loss


def grads(f, *args):
    derivs, = autodiff(Reverse, f, Active, *[Active(a) for a in args])
    return derivs


def test_same_gradient_as_without_checkpointing():
    x, y = RNG.standard_normal(3), 0.7
    got = grads(loss_of(checkpoint(block)), x, y)
    want = grads(loss_of(block), x, y)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-13, atol=1e-14)
    assert got[1] == pytest.approx(want[1], rel=1e-13)


def test_finite_differences_first_and_second_order():
    # order=2 also checks forward-over-reverse and reverse-over-reverse through the checkpoint:
    # the outer level differentiates the recomputation and its sweep.
    check_grads(loss_of(checkpoint(block)), RNG.standard_normal(3), np.array(0.7))


def test_outside_autodiff_it_is_the_function():
    x = RNG.standard_normal(3)
    a, b = checkpoint(block)(x, 0.3)
    a0, b0 = block(x, 0.3)
    np.testing.assert_array_equal(a, a0)
    assert b == b0


def test_forward_mode_calls_the_function():
    x, dx = RNG.standard_normal(3), RNG.standard_normal(3)
    loss = loss_of(block)
    want, = autodiff(Forward, loss, Duplicated(x, dx), Const(0.7))
    got, = autodiff(Forward, loss_of(checkpoint(block)), Duplicated(x, dx), Const(0.7))
    assert got == pytest.approx(want, rel=1e-13)


def test_the_tape_holds_one_record_that_saves_only_the_inputs():
    calls = []

    def f(x):
        calls.append(1)
        return np.exp(np.sin(x) * 2.0) + x
    x = RNG.standard_normal(4)
    with ReverseTrace() as trace:
        leaf = trace.new_leaf(x)
        out = checkpoint(f)(leaf)
        assert len(trace.records) == 1
        prim, _, saved, in_slots, out_slots = trace.records[0]
        assert prim.name == "checkpoint(f)"
        assert in_slots == (leaf.slot,) and out_slots == (out.slot,)
        assert [v for _, v, _ in saved.inputs] == [x]   # the input itself, not a copy
        g, = prim.reverse(None, saved, (np.ones(4),))
    np.testing.assert_allclose(g, np.exp(np.sin(x) * 2) * 2 * np.cos(x) + 1, rtol=1e-13, atol=1e-12)
    assert len(calls) == 2   # the forward run and the recomputation


def test_closure_over_a_differentiated_value_gets_its_gradient():
    x = RNG.standard_normal(3)

    def loss(Wd, x):
        layer = checkpoint(lambda h: np.tanh(Wd @ h))   # Wd is read from the closure
        return np.sum(layer(layer(x)) ** 2)

    def plain(Wd, x):
        layer = lambda h: np.tanh(Wd @ h)
        return np.sum(layer(layer(x)) ** 2)
    got, want = grads(loss, W, x), grads(plain, W, x)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-14)
    check_grads(loss, W, x)


def test_duplicated_arguments_accumulate_into_their_shadows():
    x = RNG.standard_normal(3)
    dW, dW_plain = np.ones_like(W), np.ones_like(W)   # shadows are added to, not overwritten

    def loss(Wd, x):
        return np.sum(checkpoint(lambda h: np.sin(Wd @ h))(x))
    autodiff(Reverse, loss, Active, Duplicated(W, dW), Const(x))
    autodiff(Reverse, lambda Wd, x: np.sum(np.sin(Wd @ x)), Active, Duplicated(W, dW_plain),
             Const(x))
    np.testing.assert_allclose(dW, dW_plain, rtol=1e-13, atol=1e-13)


def test_pytree_results_with_passthrough_and_integer_leaves():
    def f(x, y):
        return {"same": x, "both": (x * y, np.cos(y)), "count": 3}

    def loss(fn):
        def inner(x, y):
            out = fn(x, y)
            assert out["count"] == 3
            return np.sum(out["same"] * out["both"][0]) + np.sum(out["both"][1])
        return inner
    x, y = RNG.standard_normal(3), RNG.standard_normal(3)
    got, want = grads(loss(checkpoint(f)), x, y), grads(loss(f), x, y)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-12)


def test_nested_checkpoints():
    inner = checkpoint(lambda h: np.sin(W @ h))
    outer = checkpoint(lambda h: inner(inner(h)) * h)
    loss = lambda x: np.sum(outer(outer(x)) ** 2)
    plain_inner = lambda h: np.sin(W @ h)
    plain = lambda x: np.sum((lambda h: plain_inner(plain_inner(h)) * h)(
        plain_inner(plain_inner(x)) * x) ** 2)
    x = RNG.standard_normal(3)
    np.testing.assert_allclose(grads(loss, x)[0], grads(plain, x)[0], rtol=1e-13, atol=1e-17)
    check_grads(loss, x)


def test_autodiff_inside_a_checkpointed_function():
    def inner_grad(x):   # a gradient computed inside the segment: its recomputation is nested
        (g,), = autodiff(Reverse, lambda y: np.sum(np.sin(W @ y) * y), Active, Active(x))
        return g
    x = RNG.standard_normal(3)
    loss = lambda f: lambda x: np.sum(f(x) ** 2)
    np.testing.assert_allclose(grads(loss(checkpoint(inner_grad)), x)[0],
                               grads(loss(inner_grad), x)[0], rtol=1e-13, atol=1e-14)
    check_grads(loss(checkpoint(inner_grad)), x, order=1)


def test_values_written_after_the_call_do_not_reach_the_recomputation():
    def loss(fn):
        def inner(x):
            buf = x * 1.0
            y = fn(buf)
            buf[0] = 10.0   # after the call: the recomputation must see the old buf
            return np.sum(y) + np.sum(buf ** 2)
        return inner
    x = RNG.standard_normal(3)
    np.testing.assert_allclose(grads(loss(checkpoint(np.sin)), x)[0],
                               grads(loss(np.sin), x)[0], rtol=1e-13, atol=1e-13)


def test_split_mode_tape_reversed_twice():
    f = lambda Wd: np.sum(checkpoint(lambda h: np.tanh(Wd @ h))(B))
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, f, Active, Active)
    tape, y, _ = fwd(Active(W))
    assert "checkpoint(<lambda>)" in repr(tape)
    (g1,), = rev(Active(W), 1.0, tape)
    (g3,), = rev(Active(W), 3.0, tape)
    want = grads(lambda Wd: np.sum(np.tanh(Wd @ B)), W)[0]
    np.testing.assert_allclose(g1, want, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(g3, 3 * want, rtol=1e-13, atol=1e-13)


def test_complex_inputs():
    z = np.array([0.3 + 0.2j, -0.5 + 1.0j])
    inner = lambda z: z ** 2 * np.exp(z)
    for mode, loss in [(ReverseHolomorphic, lambda f: lambda z: np.sum(f(z))),
                       (Reverse, lambda f: lambda z: np.sum(np.abs(f(z)) ** 2))]:
        (got,), = autodiff(mode, loss(checkpoint(inner)), Active, Active(z))
        (want,), = autodiff(mode, loss(inner), Active, Active(z))
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


def test_batched_reverse_and_hvp_through_checkpoints():
    x, v = RNG.standard_normal(3), RNG.standard_normal(3)
    layer = lambda h: np.tanh(W @ h) * h
    jac = lambda f: jacobian(Reverse, f, x, chunk=2)[0]   # BatchDuplicated reverse passes
    np.testing.assert_allclose(jac(checkpoint(layer)), jac(layer), rtol=1e-13, atol=1e-13)
    loss = lambda f: lambda h: np.sum(f(f(h)) ** 2)
    np.testing.assert_allclose(hvp(loss(checkpoint(layer)), x, v), hvp(loss(layer), x, v),
                               rtol=1e-12, atol=1e-15)


def test_an_error_inside_the_function_leaves_the_trace_usable():
    def f(x):
        raise KeyError("boom")

    def loss(x):
        with pytest.raises(KeyError):
            checkpoint(f)(x)
        return np.sum(np.sin(x))   # recorded as usual again
    x = RNG.standard_normal(3)
    np.testing.assert_allclose(grads(loss, x)[0], np.cos(x), rtol=1e-14, atol=1e-14)


# The recomputation's sweep runs under the mode modifiers of the tape it stands in for.
ZERO_TIMES_INF = lambda x: np.sum(checkpoint(lambda x: np.sqrt(x) * 0.0)(x))   # sqrt'(0) = inf


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_nan_check_covers_the_recomputed_sweep():
    with pytest.raises(NaNError, match="sqrt"):
        autodiff(set_nan_check(Reverse), ZERO_TIMES_INF, Active, Active(np.array([1.0, 0.0])))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_strong_zero_covers_the_recomputed_sweep():
    (g,), = autodiff(set_strong_zero(Reverse), ZERO_TIMES_INF, Active,
                     Active(np.array([1.0, 0.0])))
    np.testing.assert_array_equal(g, [0.0, 0.0])


# -- errors --------------------------------------------------------------------------------------


def test_non_callable_is_refused():
    with pytest.raises(TypeError, match="checkpoint needs a callable"):
        checkpoint(3)


def test_writing_into_an_input_is_refused():
    def f(x):
        x[0] = 0.0
        return x * 2

    with pytest.raises(CheckpointError, match="writes into an array it did not create"):
        grads(lambda x: np.sum(checkpoint(f)(x * 1.0)), RNG.standard_normal(3))


def test_writing_into_a_view_of_an_input_is_refused():
    def f(x):
        head = x[:2]
        head[0] = 0.0
        return x * 2

    with pytest.raises(ValueError, match="read-only"):
        grads(lambda x: np.sum(checkpoint(f)(x)), RNG.standard_normal(3))


def test_a_function_reading_other_values_when_recomputed_is_refused():
    def loss(a, b):
        state = iter([a, b])
        f = checkpoint(lambda x: x * next(state))   # a on the first call, b on the second
        return np.sum(f(a))

    with pytest.raises(CheckpointError, match="did not read when it first ran"):
        grads(loss, RNG.standard_normal(3), RNG.standard_normal(3))


def test_a_result_of_another_structure_when_recomputed_is_refused():
    calls = []

    def f(x):
        calls.append(1)
        return (x * 2,) if len(calls) == 1 else (x * 2, x)

    with pytest.raises(CheckpointError, match="different structure"):
        grads(lambda x: np.sum(checkpoint(f)(x)[0]), RNG.standard_normal(3))


# -- checkpointed_scan ---------------------------------------------------------------------------


def rnn_loss(scan):
    """An RNN whose step reads its weights U from the enclosing function (a closure)."""
    def loss(U, h0, xs):
        step = lambda h, x: (np.tanh(U @ h + x), np.sum(h * x))
        h, ys = scan(step, h0, xs)
        return np.sum(h ** 2) + np.sum(ys * ys)
    return loss


def python_loop(step, carry, xs):
    ys = []
    for x in xs:
        carry, y = step(carry, x)
        ys.append(y)
    return carry, np.stack(ys)


N = 10
XS = RNG.standard_normal((N, 3))
H0 = RNG.standard_normal(3)
PLAIN = grads(rnn_loss(python_loop), W, H0, XS)


@pytest.mark.parametrize("kw", [dict(every=1), dict(every=3), dict(every=4), dict(every=N),
                                dict(every=N + 5), dict(), dict(schedule="revolve", snapshots=1),
                                dict(schedule="revolve", snapshots=2),
                                dict(schedule="revolve", snapshots=N)])
def test_scan_gradients_equal_the_plain_loop(kw):
    got = grads(rnn_loss(lambda *a: checkpointed_scan(*a, **kw)), W, H0, XS)
    for name, g, want in zip(("U (closure)", "h0", "xs"), got, PLAIN):
        np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-11, err_msg=name)


@pytest.mark.parametrize("kw", [dict(every=3), dict(schedule="revolve", snapshots=2)])
def test_scan_finite_differences_first_and_second_order(kw):
    xs = RNG.standard_normal((7, 3))
    check_grads(rnn_loss(lambda *a: checkpointed_scan(*a, **kw)), W, H0, xs)


def test_scan_forward_mode_and_no_autodiff():
    loss = rnn_loss(lambda *a: checkpointed_scan(*a, every=4))
    assert loss(W, H0, XS) == pytest.approx(rnn_loss(python_loop)(W, H0, XS), rel=1e-14)
    dW = RNG.standard_normal(W.shape)
    got, = autodiff(Forward, loss, Duplicated(W, dW), Const(H0), Const(XS))
    want, = autodiff(Forward, rnn_loss(python_loop), Duplicated(W, dW), Const(H0), Const(XS))
    assert got == pytest.approx(want, rel=1e-12)


def test_scan_stores_every_kth_carry_and_runs_each_step_twice():
    n, k, calls = 10, 3, []

    def step(h, x):
        calls.append(1)
        return np.sin(h) + x, None
    with ReverseTrace() as trace:
        h0 = trace.new_leaf(H0)
        h, ys = checkpointed_scan(step, h0, XS[:n], every=k)
        assert ys is None
        records = trace.records
        assert [r[0].name for r in records] == ["checkpoint(run)"] * 4   # ceil(10 / 3)
        carries = [v for r in records for obj, v, _ in r[2].inputs]
        want, c = [], H0
        for i in range(n):
            if i % k == 0:
                want.append(c)
            c = np.sin(c) + XS[i]
        for got, w in zip(carries, want):
            np.testing.assert_allclose(got, w, rtol=1e-15, atol=1e-15)
        assert len(carries) == len(want)
        trace.backward({h.slot: np.ones(3)}, [h0.slot])
    assert len(calls) == 2 * n


def test_revolve_runs_each_step_at_most_t_plus_1_times():
    n, s, runs = 40, 3, np.zeros(40, dtype=int)

    def loss(U, h0):
        def step(h, x):
            runs[int(primal(x)[0])] += 1   # x[0] is the step's index
            return np.tanh(U @ h + 0.01 * x), None
        xs = np.arange(n, dtype=float)[:, None] * np.ones(3)
        return np.sum(checkpointed_scan(step, h0, xs, schedule="revolve", snapshots=s)[0])
    got = grads(loss, W, H0)
    want = grads(lambda U, h0: np.sum(python_loop(
        lambda h, x: (np.tanh(U @ h + 0.01 * x), 0.0), h0,
        np.arange(n, dtype=float)[:, None] * np.ones(3))[0]), W, H0)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    t = 5   # the least t with C(s + t, s) >= 40: C(3 + 4, 3) = 35, C(3 + 5, 3) = 56
    assert runs.max() == t + 1 and runs[-1] == 1   # the last step is taped directly
    assert runs.sum() < n * (t + 1)                # most steps run fewer times
    with ReverseTrace() as trace:
        h0 = trace.new_leaf(H0)
        checkpointed_scan(lambda h, x: (np.sin(h) + x, None), h0, XS, schedule="revolve",
                          snapshots=s)
        stored = [r for r in trace.records if r[0].name.startswith("checkpoint")]
        assert len(stored) <= s


def test_scan_pytree_carry_xs_and_ys():
    def loss(scan):
        def inner(U, h0, c0, xs, zs):
            def step(carry, inp):
                h, c = carry["h"], carry["c"]
                x, z = inp
                c = c * np.tanh(z) + np.sin(U @ h)
                h = np.tanh(c) * x
                return {"h": h, "c": c}, (np.sum(h), c * 2.0)
            out, (a, b) = scan(step, {"h": h0, "c": c0}, (xs, zs))
            return np.sum(out["h"] * out["c"]) + np.sum(a ** 2) + np.sum(b[-1])
        return inner
    args = W, H0, RNG.standard_normal(3), XS, RNG.standard_normal((N, 3))
    want = grads(loss(python_loop_tree), *args)
    got = grads(loss(lambda *a: checkpointed_scan(*a, every=4)), *args)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-11)


def python_loop_tree(step, carry, xs):
    ys = []
    for i in range(len(xs[0])):
        carry, y = step(carry, tuple(a[i] for a in xs))
        ys.append(y)
    return carry, tuple(np.stack(col) for col in zip(*ys))


def test_scan_with_duplicated_weights_and_a_checkpoint_inside_the_step():
    def loss(U, h0, xs):
        cell = checkpoint(lambda h, x: np.tanh(U @ h + x))
        return np.sum(checkpointed_scan(lambda h, x: (cell(h, x), None), h0, xs, every=3)[0])

    def plain(U, h0, xs):
        return np.sum(python_loop(lambda h, x: (np.tanh(U @ h + x), 0.0), h0, xs)[0])
    dU, dU_plain = np.zeros_like(W), np.zeros_like(W)
    autodiff(Reverse, loss, Active, Duplicated(W, dU), Const(H0), Const(XS))
    autodiff(Reverse, plain, Active, Duplicated(W, dU_plain), Const(H0), Const(XS))
    np.testing.assert_allclose(dU, dU_plain, rtol=1e-12, atol=1e-12)


def test_scan_without_xs():
    def loss(a):
        return checkpointed_scan(lambda c, _: (c * a + 1.0, None), 1.0, None, every=2,
                                 length=5)[0]
    c = 1.0
    for _ in range(5):
        c = c * 0.9 + 1.0
    assert loss(0.9) == pytest.approx(c)
    (g,), = autodiff(Reverse, loss, Active, Active(0.9))
    assert g == pytest.approx(sum(k * 0.9 ** (k - 1) for k in range(1, 6)), rel=1e-12)
    check_grads(loss, 0.9)


# -- scan errors ---------------------------------------------------------------------------------


def add_step(h, x):
    return h + x, None


@pytest.mark.parametrize("every, error, match", [
    (0, ValueError, "every must be at least 1"), (-2, ValueError, "every must be at least 1"),
    (1.5, TypeError, "every must be a positive int"), (True, TypeError, "positive int")])
def test_scan_rejects_bad_every(every, error, match):
    with pytest.raises(error, match=match):
        checkpointed_scan(add_step, H0, XS, every=every)


def test_scan_rejects_xs_of_different_lengths():
    with pytest.raises(ValueError, match=r"different leading lengths \(xs\[0\]: 10, xs\[1\]: 9\)"):
        checkpointed_scan(add_step, H0, (XS, XS[:9]))


@pytest.mark.parametrize("xs, match", [(1.0, "xs is a scalar"), (None, "pass length=n"),
                                       (np.zeros((0, 3)), "leading length 0")])
def test_scan_rejects_xs_without_steps(xs, match):
    with pytest.raises(ValueError, match=match):
        checkpointed_scan(add_step, H0, xs)


@pytest.mark.parametrize("step, match", [
    (lambda h, x: h + x, r"step must return a pair \(carry, y\); at step 0 it returned ndarray"),
    (lambda h, x: ((h, h), None), "changed the structure of the carry at step 0"),
    (lambda h, x: (np.append(h, 1.0), None), r"shape of carry at step 0 from \(3,\) to \(4,\)"),
    (lambda h, x: (h.astype(np.float32), None), "dtype of carry at step 0 from float64 to"),
    (lambda h, x: (h, np.zeros(int(x[0] > 0) + 1)), "shapes"),
])
def test_scan_rejects_a_step_that_changes_shapes(step, match):
    xs = np.array([[1.0], [-1.0], [1.0]])
    with pytest.raises(TypeError, match=match):
        grads(lambda h: np.sum(checkpointed_scan(step, h, xs * np.ones(3), every=2)[0]), H0)


def test_scan_names_the_carry_leaf_at_fault():
    step = lambda c, x: ({"h": c["h"] + x, "n": c["n"][:1]}, None)
    with pytest.raises(TypeError, match=r"carry\['n'\] at step 0"):
        checkpointed_scan(step, {"h": H0, "n": np.zeros(2)}, XS)


def test_scan_rejects_bad_schedules():
    with pytest.raises(ValueError, match="schedule must be 'every' or 'revolve'"):
        checkpointed_scan(add_step, H0, XS, schedule="binomial")
    with pytest.raises(ValueError, match="snapshots= is a parameter of schedule='revolve'"):
        checkpointed_scan(add_step, H0, XS, every=2, snapshots=3)
    with pytest.raises(ValueError, match="every= is a parameter of schedule='every'"):
        checkpointed_scan(add_step, H0, XS, every=2, schedule="revolve")
    with pytest.raises(ValueError, match="snapshots=1 is too few for 100 steps"):
        checkpointed_scan(add_step, H0, np.zeros((100, 3)), schedule="revolve", snapshots=1)
    with pytest.raises(TypeError, match="needs a callable step"):
        checkpointed_scan(None, H0, XS)
