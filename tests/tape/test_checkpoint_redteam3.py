"""`tape.checkpoint` against state that the recomputation reads differently from the first run,
values that leave the checkpointed function other than through its results, and nested
differentiation around it. References: the same program without checkpointing (eager
autodiff), forward mode (where a checkpoint is the plain call) and central finite
differences, in float64.

A checkpointed function must give the plain function's gradient or raise; each xfail below
accepts a `CheckpointError` as its fix.
"""
import numpy as np
import pytest

from tape import (Active, CheckpointError, Duplicated, Forward, Reverse, autodiff,
                  checkpoint, checkpointed_scan, primal)

W = np.array([[0.5, -0.2, 0.1], [0.1, 0.3, -0.4], [0.2, 0.1, 0.6]])
X0 = np.array([0.3, -0.5, 0.8])


def plain(f):
    return f


def grads(f, *args):
    return autodiff(Reverse, f, Active, *[Active(np.array(a, dtype=float)) for a in args])[0]


def central(f, x, h=1e-6):
    g = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = h
        g[i] = (f(x + e) - f(x - e)) / (2 * h)
    return g


def same_or_refused(loss, *args):
    """The checkpointed gradient equals the plain one, or the checkpoint refuses."""
    want = grads(loss(plain), *args)
    try:
        got = grads(loss(checkpoint), *args)
    except CheckpointError:
        return
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


# -- silent wrong values ------------------------------------------------------------------------


def _aux_list(wrap):
    def f(x):
        aux = []   # an auxiliary loss collected by the layer (an MoE balancing term)

        def block(h):
            a = np.tanh(W @ h)
            aux.append(np.sum(a ** 2))
            return a
        y = wrap(block)(x)
        return np.sum(y) + aux[0]
    return f


def _cached_attribute(wrap):
    class Layer:
        def __call__(self, h):
            self.last = np.tanh(h)   # an activation kept on the module for a penalty
            return np.sin(h)
    layer = Layer()

    def f(x):
        y = wrap(layer)(x)
        return np.sum(y) + np.sum(layer.last ** 2)
    return f


def _scan_regulariser(wrap):
    xs = np.linspace(-1.0, 1.0, 12).reshape(4, 3)

    def f(x):
        reg = []

        def step(h, xt):
            h = np.tanh(W @ h + xt)
            reg.append(np.sum(h ** 2))   # a per-step activation penalty
            return h, None
        if wrap is plain:
            h = x
            for t in range(4):
                h, _ = step(h, xs[t])
        else:
            h, _ = checkpointed_scan(step, x, xs, every=2)
        return np.sum(h) + 0.1 * sum(reg[:4])
    return f


@pytest.mark.parametrize("loss", [_aux_list, _cached_attribute, _scan_regulariser],
                         ids=["closure-list", "attribute", "checkpointed_scan"])
def test_a_value_leaving_through_a_side_channel_keeps_its_derivative(loss):
    want = grads(loss(plain), X0)[0]
    np.testing.assert_allclose(want, central(loss(plain), X0), rtol=1e-6, atol=1e-8)
    # Forward mode, where checkpoint(f) is f, agrees with the plain reverse gradient.
    (d0,) = autodiff(Forward, loss(checkpoint), Duplicated(X0, np.array([1.0, 0.0, 0.0])))
    assert d0 == pytest.approx(want[0], rel=1e-12)
    same_or_refused(loss, X0)


def _mode_flag(wrap):
    class Quantiser:   # straight-through estimator while training, hard rounding in eval
        training = True

        def __call__(self, h):
            if self.training:
                return h + primal(np.round(h * 4) / 4 - h)
            return np.round(h * 4) / 4
    q = Quantiser()

    def f(x):
        y = wrap(q)(x)
        q.training = False   # back to eval mode before the reverse pass
        return np.sum(y * np.array([1.0, 2.0, 3.0]))
    return f


def test_a_mode_flag_switched_after_the_call():
    np.testing.assert_allclose(grads(_mode_flag(plain), X0)[0], [1.0, 2.0, 3.0], rtol=1e-14)
    same_or_refused(_mode_flag, X0)


def _closure_on_intermediate(write):
    def loss(wrap):
        def f(x):
            c = np.array([1.0, 2.0, 3.0])   # a workspace the caller refills after the call
            y = wrap(lambda h: np.sum(np.tanh(h) * c))(x)
            write(c)
            return y
        return f
    return loss


@pytest.mark.xfail(strict=True, reason="a plain array read by an operation on an intermediate "
                   "(tanh(h) * c, not h * c) is not digested; written after the call, the "
                   "recomputation uses its new values when the results come out equal (a "
                   "zero hidden state, or equal entries under a permutation)")
@pytest.mark.parametrize("x, write", [
    (np.zeros(3), lambda c: c.__setitem__(slice(None), [5.0, 6.0, 7.0])),
    (np.full(3, 0.5), lambda c: c.__setitem__(slice(None), c[::-1].copy())),
], ids=["zero-state", "permuted"])
def test_a_closure_read_on_an_intermediate_and_written_after_the_call(x, write):
    loss = _closure_on_intermediate(write)
    np.testing.assert_allclose(grads(loss(plain), x)[0], (1 - np.tanh(x) ** 2) * [1, 2, 3],
                               rtol=1e-14)
    same_or_refused(loss, x)


_GENERATOR_REDRAWS = pytest.mark.xfail(
    strict=True, reason="a dropout mask applied to an intermediate is drawn again from a "
    "Generator by the recomputation and is not digested: at a zero state the results agree "
    "and the gradient takes the second mask (np.random's global generator is replayed)")


@pytest.mark.parametrize("source", [pytest.param("generator", marks=_GENERATOR_REDRAWS),
                                    "global"])
def test_dropout_on_an_intermediate_at_a_zero_state(source):
    state = np.random.get_state()

    def loss(wrap):
        def f(x):
            rng = np.random.default_rng(0) if source == "generator" else np.random
            return wrap(lambda h: np.sum(np.tanh(h) * (rng.random(3) > 0.5)))(x)
        return f
    np.random.seed(1)
    first = (np.random.default_rng(0) if source == "generator" else np.random).random(3) > 0.5
    np.random.seed(1)
    np.testing.assert_array_equal(grads(loss(plain), np.zeros(3))[0], first)
    np.random.seed(1)
    try:
        (g,), = autodiff(Reverse, loss(checkpoint), Active, Active(np.zeros(3)))
    except CheckpointError:
        return
    finally:
        np.random.set_state(state)
    np.testing.assert_array_equal(g, first)


def test_a_float_attribute_changed_after_the_call():
    class Layer:
        scale = 2.0

    def loss(wrap):
        layer = Layer()

        def f(x):
            y = wrap(lambda h: np.sum(np.sin(h * layer.scale)))(x)
            layer.scale = 3.0   # an annealing schedule stepped inside the loss
            return y
        return f
    np.testing.assert_allclose(grads(loss(plain), np.zeros(3))[0], [2.0, 2.0, 2.0], rtol=1e-14)
    same_or_refused(loss, np.zeros(3))
    with pytest.raises(CheckpointError):   # away from 0 the results' digest sees it
        grads(loss(checkpoint), X0)


# -- passing coverage ---------------------------------------------------------------------------


def _inner_gradient(wrap, mode):
    """A checkpoint inside an inner differentiation that closes over an outer-level value."""
    v = np.array([1.0, 0.5, -0.3])

    def outer(x):
        y = np.sin(x)   # traced by the outer level only

        def inner(h):
            return np.sum(wrap(lambda u: np.tanh(W @ u) * y)(h) ** 2)
        if mode is Forward:
            return np.sum(autodiff(Forward, inner, Duplicated(x, v)))
        (g,), = autodiff(Reverse, inner, Active, Active(x))
        return np.sum(g * np.array([1.0, -1.0, 2.0]))
    return outer


@pytest.mark.parametrize("mode", [Reverse, Forward], ids=["reverse-over-reverse",
                                                          "reverse-over-forward"])
def test_reverse_over_an_inner_differentiation_through_a_checkpoint(mode):
    want = grads(_inner_gradient(plain, mode), X0)[0]
    np.testing.assert_allclose(grads(_inner_gradient(checkpoint, mode), X0)[0], want,
                               rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(want, central(_inner_gradient(plain, mode), X0), rtol=1e-6,
                               atol=1e-8)


def test_recursive_and_looped_nested_checkpoints_closing_over_the_outer_segment():
    def loss(wrap):
        def rec(h, n):
            return h if n == 0 else wrap(rec)(np.tanh(W @ h), n - 1) * 1.1

        def f(x, U):
            h = rec(x, 3)
            for _ in range(2):
                def segment(h):
                    z = np.sin(h)   # an intermediate of the outer segment, read inside
                    inner = wrap(lambda u: np.tanh(U @ u + z))
                    return inner(inner(h)) * z
                h = wrap(segment)(h)
            return np.sum(h ** 2)
        return f
    got, want = grads(loss(checkpoint), X0, W), grads(loss(plain), X0, W)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(want[0], central(lambda x: loss(plain)(x, W), X0), rtol=1e-6,
                               atol=1e-8)


def test_an_error_raised_only_by_the_recomputation_propagates_and_restores_the_tracers():
    calls = []

    def flaky(h):
        calls.append(1)
        if len(calls) == 2:
            raise ValueError("second call")
        return np.tanh(W @ h)
    loss = lambda x: np.sum(checkpoint(flaky)(x) ** 2)   # noqa: E731
    with pytest.raises(ValueError, match="second call"):
        grads(loss, X0)
    want = grads(lambda x: np.sum(np.tanh(W @ x) ** 2), X0)[0]
    np.testing.assert_allclose(grads(loss, X0)[0], want, rtol=1e-13, atol=1e-15)
