"""Checkpointing, split mode, user rules, nesting and mode modifiers on user-style programs.

Every program is compared across modes (reverse, forward, forward-over-reverse,
reverse-over-reverse, compiled, split) and with float64 central finite differences written
here in plain NumPy, and with the same program without the feature (no checkpoint, a traced
reference instead of the rule).
"""
from dataclasses import dataclass

import numpy as np
import pytest

import tape
from tape import (Active, CheckpointError, Const, Duplicated, Forward, Reverse,
                  ReverseSplitNoPrimal, ReverseSplitWithPrimal, RuleError, TapeMutatedError,
                  autodiff, autodiff_thunk, checkpoint, checkpointed_scan, custom_rule,
                  easy_rule, gradient, hessian, hvp, set_nan_check, set_runtime_activity,
                  set_strong_zero)
from tape.errors import NaNError
from tape.testing import check_rule

RNG = np.random.default_rng(20261125)
W = RNG.standard_normal((3, 3)) * 0.5
X0 = RNG.standard_normal(3)
XS = RNG.standard_normal((7, 3))
V = RNG.standard_normal(3)


def central_differences(f, x, eps=1e-6):
    x = np.asarray(x, dtype=float)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += eps
        down[i] -= eps
        g[i] = (f(up) - f(down)) / (2 * eps)
    return g


def reverse_gradient(f, x):
    (g,), = autodiff(Reverse, f, Active, Active(np.array(x, dtype=float)))
    return g


def forward_gradient(f, x):
    x = np.array(x, dtype=float)
    return np.array([autodiff(Forward, f, Duplicated(x, e))[0]
                     for e in np.eye(x.size)]).reshape(x.shape)


def reverse_over_reverse(f, x, v):
    return reverse_gradient(lambda z: np.sum(gradient(Reverse, f, z)[0] * v), x)


def close(got, want, rtol=1e-9, atol=1e-11):
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


# -- checkpointing -----------------------------------------------------------------------------


def _layer(h):
    return np.tanh(W @ h) * h


def _stack_of_layers(layer):
    def loss(x):
        h = x
        for _ in range(4):
            h = layer(h)
        return np.sum(h ** 2)
    return loss


def test_checkpointed_layers_in_a_loop_agree_in_every_mode():
    ck, plain = _stack_of_layers(checkpoint(_layer)), _stack_of_layers(_layer)
    g = reverse_gradient(plain, X0)
    close(reverse_gradient(ck, X0), g, rtol=1e-13, atol=1e-15)
    close(g, central_differences(plain, X0), rtol=1e-6, atol=1e-8)
    close(forward_gradient(ck, X0), g, rtol=1e-13, atol=1e-15)
    close(hvp(ck, X0, V), hvp(plain, X0, V), rtol=1e-12, atol=1e-14)
    close(reverse_over_reverse(ck, X0, V), hvp(plain, X0, V), rtol=1e-10, atol=1e-12)
    close(hessian(ck, X0), hessian(plain, X0), rtol=1e-12, atol=1e-14)


def _dict_step(c, x):
    h = np.tanh(W @ c["h"] + x)
    return {"h": h, "s": c["s"] + np.sum(h)}, h[0]


def _dict_scan_plain(x):
    c, ys = {"h": x, "s": 0.0 * x[0]}, []
    for t in range(len(XS)):
        c, y = _dict_step(c, XS[t])
        ys.append(y)
    return c["s"] + np.sum(np.stack(ys) ** 2)


@pytest.mark.parametrize("kw", [dict(every=1), dict(every=3), dict(every=7), dict(every=10),
                                dict(schedule="revolve", snapshots=1),
                                dict(schedule="revolve", snapshots=2)])
def test_scan_with_a_dict_carry_agrees_with_the_plain_loop(kw):
    def loss(x):
        c, ys = checkpointed_scan(_dict_step, {"h": x, "s": 0.0 * x[0]}, XS, **kw)
        return c["s"] + np.sum(ys ** 2)
    g = reverse_gradient(_dict_scan_plain, X0)
    close(reverse_gradient(loss, X0), g, rtol=1e-13, atol=1e-15)
    close(g, central_differences(_dict_scan_plain, X0), rtol=1e-6, atol=1e-8)
    close(forward_gradient(loss, X0), g, rtol=1e-12, atol=1e-14)
    close(hvp(loss, X0, V), hvp(_dict_scan_plain, X0, V), rtol=1e-12, atol=1e-14)


@dataclass
class _State:
    h: np.ndarray
    m: np.ndarray


def test_scan_with_a_dataclass_carry_and_no_ys():
    def step(c, x):
        m = 0.9 * c.m + 0.1 * x
        return _State(np.sin(c.h + m), m), None

    def loss(checkpointed):
        def f(x):
            c = _State(x, x * 0.0 + 1.0)
            if checkpointed:
                c, ys = checkpointed_scan(step, c, XS, every=3)
                assert ys is None
            else:
                for t in range(len(XS)):
                    c, _ = step(c, XS[t])
            return np.sum(c.h * c.m)
        return f
    g = reverse_gradient(loss(False), X0)
    close(reverse_gradient(loss(True), X0), g, rtol=1e-13, atol=1e-15)
    close(g, central_differences(loss(False), X0), rtol=1e-6, atol=1e-8)


def test_scan_gradient_with_respect_to_xs_and_closed_over_weights():
    def loss_xs(xs):
        c, ys = checkpointed_scan(lambda h, x: (np.tanh(W @ h + x), h * x), X0, xs, every=3)
        return np.sum(c) + np.sum(ys)

    def plain_xs(xs):
        h, ys = X0, []
        for t in range(len(xs)):
            ys.append(h * xs[t])
            h = np.tanh(W @ h + xs[t])
        return np.sum(h) + np.sum(np.stack(ys))
    close(reverse_gradient(loss_xs, XS), reverse_gradient(plain_xs, XS), rtol=1e-13,
          atol=1e-15)
    close(reverse_gradient(loss_xs, XS), central_differences(plain_xs, XS), rtol=1e-6, atol=1e-8)

    def loss_w(w):
        c, _ = checkpointed_scan(lambda h, x: (np.tanh(w @ h + x), None), X0, XS, every=2)
        return np.sum(c ** 2)

    def plain_w(w):
        h = X0
        for t in range(len(XS)):
            h = np.tanh(w @ h + XS[t])
        return np.sum(h ** 2)
    close(reverse_gradient(loss_w, W), central_differences(plain_w, W), rtol=1e-6, atol=1e-8)
    direction = np.ones((3, 3))
    close(hvp(loss_w, W, direction), hvp(plain_w, W, direction), rtol=1e-12, atol=1e-14)


def _writes_into_its_own_buffer(h):
    out = np.zeros_like(h)
    out[0] = h[0] * h[1]
    out[1:] = np.sin(h[1:])
    out *= 2.0
    out[2] += h[0]
    return out


def test_checkpointed_function_writing_into_a_zeros_like_buffer_in_every_mode():
    # Under hvp the buffer must belong to the forward level: it receives that level's values.
    ck = checkpoint(_writes_into_its_own_buffer)
    f_ck = lambda x: np.sum(ck(ck(x)) ** 2)                               # noqa: E731
    f = lambda x: np.sum(_writes_into_its_own_buffer(_writes_into_its_own_buffer(x)) ** 2)  # noqa: E731,E501
    g = reverse_gradient(f, X0)
    close(reverse_gradient(f_ck, X0), g, rtol=1e-13, atol=1e-15)
    close(g, central_differences(f, X0), rtol=1e-6, atol=1e-8)
    close(forward_gradient(f_ck, X0), g, rtol=1e-13, atol=1e-15)
    close(hvp(f_ck, X0, V), hvp(f, X0, V), rtol=1e-12, atol=1e-14)
    close(reverse_over_reverse(f_ck, X0, V), hvp(f, X0, V), rtol=1e-10, atol=1e-12)
    close(hessian(f_ck, X0), hessian(f, X0), rtol=1e-12, atol=1e-14)


def test_checkpointed_function_writing_into_a_copy_of_a_const_argument_under_nesting():
    c0 = np.array([1.0, 2.0, 3.0])

    def body(h, c):
        b = c.copy()
        b[0] = h[0] * h[1]
        return b * h
    ck = checkpoint(body)
    results = [autodiff(Forward, lambda x, c: gradient(Reverse, lambda z: np.sum(fn(z, c) ** 2),
                                                        x)[0],
                        Duplicated(X0, V), Const(c0))[0] for fn in (body, ck)]
    reference = lambda x: np.sum(np.concatenate([(x[0] * x[1])[None], c0[1:]]) ** 2 * x ** 2)  # noqa: E731,E501
    close(results[1], results[0], rtol=1e-13, atol=1e-15)
    close(results[0], hvp(reference, X0, V), rtol=1e-12, atol=1e-14)


def test_nested_checkpoints_second_order():
    def inner_fn(h):
        return np.exp(-h * h) + W @ h

    def outer_fn(inner):
        return lambda h: inner(inner(h)) * h
    inner = checkpoint(inner_fn)
    outer = checkpoint(outer_fn(inner))
    f_ck = lambda x: np.sum(outer(outer(x)))                              # noqa: E731
    f = lambda x: np.sum(outer_fn(inner_fn)(outer_fn(inner_fn)(x)))       # noqa: E731
    close(reverse_gradient(f_ck, X0), central_differences(f, X0), rtol=1e-6, atol=1e-8)
    close(hvp(f_ck, X0, V), hvp(f, X0, V), rtol=1e-12, atol=1e-13)
    close(hessian(f_ck, X0), hessian(f, X0), rtol=1e-12, atol=1e-13)


def test_checkpoint_under_compile_runs_eagerly_with_the_right_gradient():
    f = _stack_of_layers(checkpoint(_layer))
    compiled = tape.compile(Reverse, f, Active, Active)
    for x in (X0, X0 + 0.5, X0):
        (g,), = compiled(Active(x))
        close(g, reverse_gradient(_stack_of_layers(_layer), x), rtol=1e-13, atol=1e-15)


def test_random_draws_inside_a_checkpoint_are_replayed():
    # The recomputation draws the first run's numbers from np.random's global generator, and
    # leaves it where the plain call does.
    def loss(wrap):
        return lambda x: np.sum(wrap(lambda h: h * (np.random.rand(3) > 0.5))(x) ** 2) \
            + np.random.rand()
    np.random.seed(0)
    want = reverse_gradient(loss(lambda g: g), X0)
    after = np.random.rand()
    np.random.seed(0)
    close(reverse_gradient(loss(checkpoint), X0), want, rtol=1e-13, atol=1e-15)
    assert np.random.rand() == after


def test_closure_written_after_the_call_is_refused_when_results_change():
    def f(x):
        c = np.array([1.0, 2.0, 3.0])
        y = checkpoint(lambda h: h * c)(x)
        c[:] = c[::-1]
        return np.sum(y)
    with pytest.raises(CheckpointError, match="written after the call"):
        reverse_gradient(f, np.ones(3))


def test_closure_rewritten_without_changing_the_results_is_refused():
    # The results' digest cannot see a permutation under a sum; the digest of the arrays the
    # operations read does: the recomputation raises instead of giving the derivative at the
    # new values ([3, 2, 1] where the answer is [1, 2, 3]).
    def f(x):
        c = np.array([1.0, 2.0, 3.0])
        y = checkpoint(lambda h: np.sum(h * c))(x)
        c[:] = c[::-1]
        return y
    with pytest.raises(CheckpointError, match="written after the call"):
        reverse_gradient(f, np.ones(3))


@pytest.mark.parametrize("view", [lambda c: c[::-1], lambda c: c.reshape(3, 1)[:, 0],
                                  lambda c: c[None, :][0]])
def test_closure_read_through_a_fresh_view_and_rewritten_is_refused(view):
    # f makes a new view of the closed-over array at every run, so the view read in the
    # recomputation is another object than the first run's; the owner of its memory is not.
    def f(x):
        c = np.array([1.0, 2.0, 3.0])
        y = checkpoint(lambda h: np.sum(h * view(c)))(x)
        c[:] = c[::-1]
        return y
    with pytest.raises(CheckpointError, match="written after the call"):
        reverse_gradient(f, np.ones(3))


def test_other_views_of_one_array_unchanged_where_read_are_not_refused():
    # Two views of one buffer, read at two places; the caller then writes a part f never
    # read: the recomputation reads the same contents at the same places.
    buf = np.arange(8.0)

    def f(x):
        y = checkpoint(lambda h: np.sum(h * buf[0:3]) + np.sum(h * buf[3:6] ** 2))(x)
        buf[6:] = -1.0
        return y
    close(reverse_gradient(f, np.ones(3)), np.arange(3.0) + np.arange(3.0, 6.0) ** 2)


def test_a_workspace_rewritten_by_each_call_is_not_refused():
    # A closed-over workspace that f itself fills before reading it: later calls rewrite it,
    # and the recomputation fills it again with what the first run read.
    ws = np.zeros(3)

    def layer(h, k):
        ws[:] = np.arange(3.0) + k
        return np.sin(h * ws)

    def f(x):
        for k in range(3):
            x = checkpoint(layer)(x, float(k))
        return np.sum(x)

    def plain(x):
        for k in range(3):
            x = np.sin(x * (np.arange(3.0) + k))
        return np.sum(x)

    x = np.array([0.2, -0.4, 0.7])
    close(reverse_gradient(f, x), reverse_gradient(plain, x))


def test_split_mode_checkpoint_closure_rewritten_between_forward_and_reverse():
    c = np.array([1.0, 2.0, 3.0])
    x = np.ones(3)
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal,
                              lambda z: checkpoint(lambda h: np.sum(h * c))(z), Active, Active)
    tp, _, _ = fwd(Active(x))
    c[:] = c[::-1]
    try:
        (g,), = rev(Active(x), 1.0, tp)
    except (CheckpointError, TapeMutatedError):
        return
    close(g, [1.0, 2.0, 3.0])


# -- split mode --------------------------------------------------------------------------------

A = RNG.standard_normal((2, 3))


def _split_f(x):
    return np.tanh(A @ x) * x[:2]


def _jacobian_by_differences(x):
    return np.stack([central_differences(lambda z, k=k: _split_f(z)[k], x) for k in range(2)])


def test_split_reversed_twice_with_different_seeds_gives_jacobian_rows():
    fwd, rev = autodiff_thunk(ReverseSplitNoPrimal, _split_f, Duplicated, Duplicated)
    x, dx = X0.copy(), np.zeros(3)
    tp, y, dy = fwd(Duplicated(x, dx))
    assert y is None and not np.any(dy)
    J = _jacobian_by_differences(X0)
    for k in range(2):
        dx[:] = 0
        rev(Duplicated(x, dx), np.eye(2)[k], tp)
        close(dx, J[k], rtol=1e-7, atol=1e-9)
    dx[:] = 1.0          # a shadow the user set between the passes is added to
    rev(Duplicated(x, dx), np.ones(2), tp)
    close(dx, 1.0 + J.sum(0), rtol=1e-7, atol=1e-9)


def test_split_refuses_inputs_mutated_after_forward():
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, _split_f, Duplicated, Duplicated)
    x, dx = X0.copy(), np.zeros(3)
    tp, _, _ = fwd(Duplicated(x, dx))
    x[0] += 1.0
    with pytest.raises(TapeMutatedError):
        rev(Duplicated(x, dx), np.ones(2), tp)


def test_split_keeps_a_closure_written_between_forward_and_reverse():
    B = A.copy()
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, lambda x: np.sum(np.tanh(B @ x)),
                              Active, Active)
    tp, _, _ = fwd(Active(X0))
    B[:] = 0.0
    (g,), = rev(Active(X0), 1.0, tp)
    close(g, A.T @ (1 - np.tanh(A @ X0) ** 2), rtol=1e-13, atol=1e-15)


def test_split_with_a_duplicated_buffer_written_in_f_reversed_twice():
    def f_(y, x):
        y[0] = x[0] ** 2 + x[1]
        y[1] = x[0] * x[1] * y[0]
        y *= 2.0
        return np.sum(y * x[:2])

    def plain(x):
        return f_(np.zeros(2), x)
    x, dx, y, dy = np.array([2.0, 3.0]), np.zeros(2), np.zeros(2), np.zeros(2)
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, f_, Active, Duplicated, Duplicated)
    tp, value, _ = fwd(Duplicated(y, dy), Duplicated(x, dx))
    assert value == pytest.approx(plain(np.array([2.0, 3.0])), rel=1e-14)
    rev(Duplicated(y, dy), Duplicated(x, dx), 1.0, tp)
    once = dx.copy()
    close(once, central_differences(plain, np.array([2.0, 3.0])), rtol=1e-7, atol=1e-9)
    rev(Duplicated(y, dy), Duplicated(x, dx), 1.0, tp)
    close(dx, 2 * once, rtol=1e-14, atol=1e-15)


def test_split_seeded_through_a_written_buffers_shadow_twice():
    def f_(y, x):
        y[:] = x ** 2
    x, dx, y, dy = np.array([2.0, 3.0]), np.zeros(2), np.zeros(2), np.zeros(2)
    fwd, rev = autodiff_thunk(ReverseSplitNoPrimal, f_, Const, Duplicated, Duplicated)
    tp, _, _ = fwd(Duplicated(y, dy), Duplicated(x, dx))
    dy[:] = [1.0, 0.0]
    rev(Duplicated(y, dy), Duplicated(x, dx), tp)
    close(dx, [4.0, 0.0])
    dy[:] = [0.0, 1.0]
    rev(Duplicated(y, dy), Duplicated(x, dx), tp)
    close(dx, [4.0, 6.0])


def test_split_pytree_argument_and_pytree_result():
    g = lambda p: np.sum(p["w"] ** 2 * p["b"]) + p["b"] ** 3          # noqa: E731
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, g, Active, Active)
    p = {"w": np.array([1.0, 2.0]), "b": 1.5}
    tp, _, _ = fwd(Active(p))
    (gp,), = rev(Active(p), 2.0, tp)
    close(gp["w"], 2 * 2 * p["w"] * 1.5)
    assert gp["b"] == pytest.approx(2 * (5.0 + 3 * 1.5 ** 2))
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, lambda x: {"a": x * 2, "b": np.sum(x)},
                              Active, Active)
    x = np.array([1.0, 2.0])
    tp, y, _ = fwd(Active(x))
    (gx,), = rev(Active(x), {"a": np.array([1.0, 0.0]), "b": 1.0}, tp)
    close(gx, [3.0, 1.0])


def test_split_of_a_checkpointed_scan_reversed_twice_and_xs_mutation_refused():
    xs = XS[:5].copy()

    def loss(h0):
        c, ys = checkpointed_scan(lambda h, x: (np.tanh(W @ h + x), np.sum(h)), h0, xs, every=2)
        return np.sum(c) + np.sum(ys)

    def plain(h0):
        h, s = h0, 0.0
        for t in range(5):
            s = s + np.sum(h)
            h = np.tanh(W @ h + xs[t])
        return np.sum(h) + s
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, loss, Active, Active)
    tp, _, _ = fwd(Active(X0))
    (g1,), = rev(Active(X0), 1.0, tp)
    (g3,), = rev(Active(X0), 3.0, tp)
    close(g1, central_differences(plain, X0), rtol=1e-6, atol=1e-8)
    close(g3, 3 * g1, rtol=1e-14, atol=1e-15)
    xs[0] += 1.0
    with pytest.raises(TapeMutatedError):
        rev(Active(X0), 1.0, tp)


# -- user rules --------------------------------------------------------------------------------


def _softmax(x):
    e = np.exp(x - np.max(x))
    return e / np.sum(e)


def _softmax_augmented(cfg, x):
    y = _softmax(x)
    return y, y


def _softmax_reverse(cfg, y, g):
    return (y * (g - np.sum(g * y)),)


def _softmax_forward(cfg, primals, tangents):
    (x,), (t,) = primals, tangents
    y = _softmax(x)
    return y, y * (t - np.sum(t * y))


FUSED_SOFTMAX = custom_rule(_softmax, augmented_primal=_softmax_augmented,
                            reverse=_softmax_reverse, forward=_softmax_forward,
                            differentiable=True, name="fused_softmax")
X4 = RNG.standard_normal(4)
U4 = RNG.standard_normal(4)


def _softmax_loss(softmax):
    return lambda x: np.sum(U4 * softmax(x)) + np.sum(softmax(x) ** 2)


def test_fused_softmax_rule_in_every_mode_nested_checkpointed_and_compiled():
    rule, ref = _softmax_loss(FUSED_SOFTMAX), _softmax_loss(_softmax)
    g = central_differences(ref, X4)
    close(reverse_gradient(rule, X4), g, rtol=1e-6, atol=1e-8)
    close(forward_gradient(rule, X4), reverse_gradient(ref, X4), rtol=1e-13, atol=1e-15)
    close(hvp(rule, X4, U4), hvp(ref, X4, U4), rtol=1e-12, atol=1e-14)
    close(reverse_over_reverse(rule, X4, U4), hvp(ref, X4, U4), rtol=1e-12, atol=1e-14)
    close(hessian(rule, X4), hessian(ref, X4), rtol=1e-12, atol=1e-14)
    in_checkpoint = _softmax_loss(checkpoint(FUSED_SOFTMAX))
    close(hvp(in_checkpoint, X4, U4), hvp(ref, X4, U4), rtol=1e-12, atol=1e-14)
    compiled = tape.compile(Reverse, rule, Active, Active)
    for x in (X4, X4 + 1.0, X4):
        (gc,), = compiled(Active(x))
        close(gc, reverse_gradient(ref, x), rtol=1e-13, atol=1e-15)
    assert check_rule(FUSED_SOFTMAX, X4) > 0


def test_clipped_gradient_rule_is_used_as_written_and_forward_mode_says_it_has_none():
    clipped = custom_rule(lambda x: x * 1.0, augmented_primal=lambda cfg, x: (x * 1.0, None),
                          reverse=lambda cfg, s, g: (np.clip(g, -1.0, 1.0),),
                          name="clip_gradient")
    close(reverse_gradient(lambda x: np.sum(5.0 * clipped(x)), X4), np.ones(4))
    with pytest.raises(NotImplementedError, match="clip_gradient"):
        forward_gradient(lambda x: np.sum(clipped(x)), X4)


def test_check_rule_catches_a_forward_rule_that_disagrees_with_the_reverse_rule():
    disagreeing = custom_rule(lambda x: x ** 2, augmented_primal=lambda cfg, x: (x ** 2, x),
                              reverse=lambda cfg, x, g: (2 * x * g,),
                              forward=lambda cfg, p, t: (p[0] ** 2, 3 * p[0] * t[0]),
                              name="disagreeing_square")
    with pytest.raises(Exception, match="disagreeing_square"):
        check_rule(disagreeing, X4)


def _product_rule(name, **rules):
    rules.setdefault("augmented_primal", lambda cfg, x, y: (x * y, (x, y)))
    rules.setdefault("reverse", lambda cfg, s, g: (g * s[1], g * s[0]))
    return custom_rule(lambda x, y: x * y, name=name, **rules)


A3, B3 = np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0])


@pytest.mark.parametrize("rules, match", [
    (dict(reverse=lambda cfg, s, g: (np.ones(2), g * s[0])), "shape"),
    (dict(reverse=lambda cfg, s, g: (None, g * s[0])), "None"),
    (dict(reverse=lambda cfg, s, g: (np.ones(3, int), g * s[0])), "dtype int"),
    (dict(reverse=lambda cfg, s, g: (g * s[1],)), "2 cotangents"),
    (dict(augmented_primal=lambda cfg, x, y: x * y), "pair"),
    (dict(augmented_primal=lambda cfg, x, y: (x + y, (x, y))), "disagrees"),
    (dict(augmented_primal=lambda cfg, x, y: (np.sum(x * y), (x, y))), "shape"),
    (dict(augmented_primal=lambda cfg, x, y: ((x * y).astype(int), (x, y))), "dtype int64"),
])
def test_wrong_reverse_rules_raise_rule_errors_naming_the_rule(rules, match):
    rule = _product_rule("user_product", **rules)
    with pytest.raises(RuleError, match="user_product") as info:
        autodiff(Reverse, lambda x, y: np.sum(rule(x, y) * np.arange(3.0)), Active, Active(A3),
                 Active(B3))
    assert match in str(info.value)


@pytest.mark.parametrize("forward, match", [
    (lambda cfg, p, t: (p[0] * p[1], np.ones(2)), "shape"),
    (lambda cfg, p, t: p[0] * p[1], "pair"),
    (lambda cfg, p, t: (p[0] * p[1], (t[0], t[1])), "tuple"),
    (lambda cfg, p, t: (p[0] * p[1], np.ones(3, int)), "dtype int64"),
])
def test_wrong_forward_rules_raise_rule_errors_naming_the_rule(forward, match):
    rule = _product_rule("user_product_fwd", forward=forward)
    with pytest.raises(RuleError, match="user_product_fwd") as info:
        autodiff(Forward, rule, Duplicated(A3, np.ones(3)), Const(B3))
    assert match in str(info.value)


def test_rule_with_a_const_argument_and_a_static_keyword():
    rule = custom_rule(lambda x, c, *, p: x ** p * c,
                       augmented_primal=lambda cfg, x, c, *, p: (x ** p * c, (x, c)),
                       reverse=lambda cfg, s, g: (g * s[1] * 2 * s[0], None), name="power_c")
    (gx, gc), = autodiff(Reverse, lambda x, c: np.sum(rule(x, c, p=2)), Active, Active(X4),
                         Const(U4))
    assert gc is None
    close(gx, 2 * X4 * U4)
    with pytest.raises(RuleError, match="power_c.*argument 1"):
        autodiff(Reverse, lambda x, c: np.sum(rule(x, c, p=2)), Active, Active(X4), Active(U4))


@easy_rule(partials=lambda out, x: 1 - out ** 2, with_output=True)
def _easy_tanh(x):
    return np.tanh(x)


@easy_rule(partials=lambda x, y: (y * np.cos(x * y), x * np.cos(x * y)))
def _easy_sin_product(x, y):
    return np.sin(x * y)


def _easy_program(x):
    return np.sum(_easy_tanh(x) ** 2 * _easy_sin_product(x, x[::-1]))


def _easy_reference(x):
    return np.sum(np.tanh(x) ** 2 * np.sin(x * x[::-1]))


def test_easy_rules_in_every_mode_nested_and_compiled():
    g = reverse_gradient(_easy_reference, X4)
    close(reverse_gradient(_easy_program, X4), central_differences(_easy_reference, X4),
          rtol=1e-6, atol=1e-8)
    close(forward_gradient(_easy_program, X4), g, rtol=1e-13, atol=1e-15)
    H = hessian(_easy_reference, X4)
    close(hvp(_easy_program, X4, U4), H @ U4, rtol=1e-12, atol=1e-14)
    close(reverse_over_reverse(_easy_program, X4, U4), H @ U4, rtol=1e-12, atol=1e-14)
    close(hessian(_easy_program, X4), H, rtol=1e-12, atol=1e-14)
    compiled = tape.compile(Reverse, _easy_program, Active, Active)
    for x in (X4, 2 * X4, X4):
        (gc,), = compiled(Active(x))
        close(gc, reverse_gradient(_easy_reference, x), rtol=1e-13, atol=1e-15)
    (gx, gy), = autodiff(Reverse, lambda x, y: np.sum(_easy_sin_product(x, y)), Active,
                         Active(X4), Const(U4))
    assert gy is None
    close(gx, np.cos(X4 * U4) * U4, rtol=1e-14, atol=1e-15)


def test_easy_rule_mistakes_give_errors_naming_the_rule():
    @easy_rule(partials=lambda x, y: (None, x))
    def none_partial(x, y):
        return x * y
    with pytest.raises(RuleError, match="none_partial.*None"):
        reverse_gradient(lambda x: np.sum(none_partial(x, x)), X4)
    with pytest.raises(RuleError, match="none_partial.*None"):
        forward_gradient(lambda x: np.sum(none_partial(x, x)), X4)

    @easy_rule(partials=lambda x: np.ones(7))
    def wrong_shape(x):
        return x * 1.0
    with pytest.raises(RuleError, match="wrong_shape.*shape"):
        reverse_gradient(lambda x: np.sum(wrong_shape(x)), X4)
    with pytest.raises(TypeError, match="_easy_sin_product.*functools.partial"):
        reverse_gradient(lambda x: np.sum(_easy_sin_product(x, y=x)), X4)
    with pytest.raises(TypeError, match="_easy_sin_product.*functools.partial"):
        forward_gradient(lambda x: np.sum(_easy_sin_product(x, y=x)), X4)


# -- nesting and modifiers ---------------------------------------------------------------------


def _piecewise_program(x):
    b = np.zeros_like(x)
    b[1:] = x[:-1] * x[1:]
    b[0] = np.max(x)
    b += np.where(x > 0, x ** 3, -x)
    s = np.sort(x * b)
    return np.sum(s * np.arange(x.size, dtype=float)) + np.max(b) ** 2


def test_second_order_of_buffers_where_sort_and_max_agree_across_nestings():
    x, v = RNG.standard_normal(5), RNG.standard_normal(5)
    h = hvp(_piecewise_program, x, v)
    close(reverse_over_reverse(_piecewise_program, x, v), h, rtol=1e-12, atol=1e-13)
    eps = 1e-5
    by_differences = (reverse_gradient(_piecewise_program, x + eps * v)
                      - reverse_gradient(_piecewise_program, x - eps * v)) / (2 * eps)
    close(h, by_differences, rtol=1e-6, atol=1e-7)
    close(hessian(_piecewise_program, x) @ v, h, rtol=1e-12, atol=1e-13)
    vhv = autodiff(Forward, lambda z: autodiff(Forward, _piecewise_program,
                                               Duplicated(z, v))[0], Duplicated(x, v))[0]
    assert vhv == pytest.approx(v @ h, rel=1e-10, abs=1e-12)


def _masked_sqrt(x):
    return np.sum(np.where(x > 0, np.sqrt(x), 0.0))   # sqrt'(0) = inf meets a zero cotangent


XZ = np.array([0.0, 1.0, 4.0, -1.0])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_strong_zero_on_masked_sqrt_in_every_mode():
    want = np.array([0.0, 0.5, 0.25, 0.0])
    (plain,), = autodiff(Reverse, _masked_sqrt, Active, Active(XZ))
    assert np.isnan(plain[0]) and np.allclose(plain[1:3], want[1:3])
    strong = set_strong_zero(Reverse)
    close(autodiff(strong, _masked_sqrt, Active, Active(XZ))[0][0], want)
    close(autodiff(strong, checkpoint(_masked_sqrt), Active, Active(XZ))[0][0], want)
    compiled = tape.compile(strong, _masked_sqrt, Active, Active)
    close(compiled(Active(XZ))[0][0], want)
    fwd, rev = autodiff_thunk(set_strong_zero(ReverseSplitWithPrimal), _masked_sqrt, Active,
                              Active)
    tp, _, _ = fwd(Active(XZ))
    close(rev(Active(XZ), 1.0, tp)[0][0], want)
    tangents = [autodiff(set_strong_zero(Forward), _masked_sqrt, Duplicated(XZ, e))[0]
                for e in np.eye(4)]
    close(tangents, want)
    rows = [autodiff(set_strong_zero(Forward),
                     lambda z: gradient(strong, _masked_sqrt, z)[0], Duplicated(XZ, e))[0]
            for e in np.eye(4)]
    close(np.array(rows), np.diag([0.0, -0.25, -0.25 / 8, 0.0]), rtol=1e-13, atol=1e-15)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_strong_zero_and_nan_check_on_zero_times_inf_and_easy_rules():
    f = lambda x: np.sum(0.0 * np.exp(x * 1000.0))                        # noqa: E731
    x = np.array([1.0, 0.0])
    assert np.isnan(autodiff(Reverse, f, Active, Active(x))[0][0][0])
    close(autodiff(set_strong_zero(Reverse), f, Active, Active(x))[0][0], [0.0, 0.0])
    with pytest.raises(NaNError, match="exp"):
        autodiff(set_nan_check(Reverse), f, Active, Active(x))
    fwd, rev = autodiff_thunk(set_nan_check(ReverseSplitWithPrimal), _masked_sqrt, Active,
                              Active)
    tp, _, _ = fwd(Active(XZ))
    with pytest.raises(NaNError, match="sqrt"):
        rev(Active(XZ), 1.0, tp)

    @easy_rule(partials=lambda x: 0.5 / np.sqrt(x))
    def my_sqrt(x):
        return np.sqrt(x)
    g = lambda x: np.sum(np.where(x > 0, my_sqrt(x), 0.0))               # noqa: E731
    close(autodiff(set_strong_zero(Reverse), g, Active, Active(XZ))[0][0], [0, 0.5, 0.25, 0])
    clipped_log = lambda x: np.sum(np.log(np.clip(x, 1e-300, None)) * (x > 0))  # noqa: E731
    xl = np.array([0.0, 0.5, 2.0])
    for mode in (Reverse, set_nan_check(Reverse), set_nan_check(set_strong_zero(Reverse))):
        close(autodiff(mode, clipped_log, Active, Active(xl))[0][0], [0.0, 2.0, 0.5])


def test_runtime_activity_with_aliasing_arguments():
    x, dx = np.array([1.0, 2.0]), np.zeros(2)
    autodiff(set_runtime_activity(Reverse), lambda a, b: np.sum(a * b), Active,
             Duplicated(x, dx), Duplicated(x, dx))
    close(dx, 2 * x)
    dx2 = np.zeros(2)
    autodiff(set_runtime_activity(Reverse), lambda a, b: np.sum(a * b), Active,
             Duplicated(x, dx2), Const(x))
    close(dx2, x)

    def writes_a(a, b):
        a[0] = b[1] * 2
        return np.sum(a * b)
    with pytest.raises(tape.ActivityError, match="shares memory"):
        autodiff(set_runtime_activity(Reverse), writes_a, Active, Duplicated(x, dx),
                 Duplicated(x, dx))


def test_a_buffer_filled_inside_nested_checkpoints_under_hvp():
    # A checkpoint inside a checkpoint: the inner one's buffers, made while the outer one is
    # recomputed, belong to no enclosing level (the outer sweep is not one); under hvp they
    # belong to the forward trace.
    def f(x):
        z = np.zeros_like(x)
        z[:] = x
        z[0] = 3.0 * z[1] * z[2]
        return np.sum(np.sin(z) * z)

    x, v = np.array([0.3, -0.5, 0.8, 1.1]), np.array([1.0, -2.0, 0.5, 0.3])
    eps = 1e-6
    want = (tape.gradient(Reverse, f, x + eps * v)[0]
            - tape.gradient(Reverse, f, x - eps * v)[0]) / (2 * eps)
    for g in (checkpoint(f), checkpoint(checkpoint(f))):
        close(tape.gradient(Reverse, g, x)[0], tape.gradient(Reverse, f, x)[0])
        np.testing.assert_allclose(tape.hvp(g, x, v), want, rtol=1e-6, atol=1e-8)
