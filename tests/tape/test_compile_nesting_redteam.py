"""`tape.compile` inside and around other differentiations: compiled functions called on the
values of an outer eager `autodiff` (reverse, forward, batched, the Hessian and Jacobian
helpers), `Const` arguments and shadows that belong to the outer level, user rules whose
reverse calls a compiled gradient, checkpoints and stateful rules inside a compiled function,
and float32 through second order. Every value is compared with eager `autodiff` and with
central finite differences in float64, over calls with new values and a new shape."""
import numpy as np
import pytest

import tape
from tape import (Active, BatchDuplicated, Const, Duplicated, Forward, Reverse,
                  ReverseWithPrimal, autodiff)

RP = ReverseWithPrimal
NESTED = "called inside another differentiation"
POINTS = (np.array([0.3, 0.7, -1.1]), np.array([0.8, -0.2, 0.4]), np.array([0.5, 1.3]))


def _fd(f, x, h=1e-6):
    """Central differences of f (array or scalar valued) at float64 x: shape f(x).shape + x.shape."""
    x = np.asarray(x, dtype=float)
    cols = []
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = h
        cols.append((np.asarray(f(x + e)) - np.asarray(f(x - e))) / (2 * h))
    out = np.stack(cols, axis=-1)
    return out.reshape(np.shape(f(x)) + x.shape)


def _close(a, b, rtol=1e-6, atol=1e-8):
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def _f(x):
    return np.sum(np.sin(x) * x ** 2)


# -- a compiled reverse function called on the values of an outer differentiation ---------------

def test_outer_reverse_and_forward_differentiate_both_results_of_a_compiled_call():
    g = tape.compile(RP, _f, Active, Active)

    def h(x):   # the derivative and the primal the compiled call returns both feed h
        (d,), v = g(Active(x))
        return 2.0 * v + np.sum(d * d)

    for x in POINTS:
        h(x), h(x)   # traced, confirmed and replayed outside any differentiation
        want = _fd(h, x)
        (rev,), = autodiff(Reverse, h, Active, Active(x))
        _close(rev, want)
        v = np.linspace(1.0, -0.5, x.size)
        _close(autodiff(Forward, h, Duplicated, Duplicated(x, v))[0], want @ v)
    assert g.stats.eager_reasons == [NESTED] and g.stats.traces == 2, g.stats


def test_hessian_jacobian_and_hvp_helpers_through_a_compiled_gradient():
    cg = tape.compile(tape.Reverse, _f, Active, Active)
    grad = lambda z: cg(Active(z))[0][0]   # noqa: E731
    for x in POINTS:
        grad(x), grad(x)
        H = _fd(grad, x)
        v = np.linspace(1.0, -0.5, x.size)
        _close(tape.jacobian(Reverse, grad, x)[0], H)
        _close(tape.jacobian(Forward, grad, x)[0], H)
        _close(autodiff(Forward, grad, Duplicated, Duplicated(x, v))[0], H @ v)
        np.testing.assert_allclose(tape.jacobian(Forward, grad, x)[0], tape.hessian(_f, x),
                                   rtol=1e-12, atol=1e-14)
    assert cg.stats.eager_reasons == [NESTED], cg.stats


def test_a_const_argument_holding_an_outer_tracer_stays_differentiated():
    """`Const(x)` with x traced by the outer level: the compiled call differentiates nothing
    with respect to it, but its primal and its derivative (with respect to the Active `w`)
    depend on x, which the outer level must see."""
    g = tape.compile(RP, lambda w, c: np.sum(np.sin(w) * c ** 2), Active, Active, Const)
    w0 = np.array([0.3, 0.9])
    g(Active(w0), Const(w0)), g(Active(w0), Const(w0))
    for h in (lambda x: g(Active(w0), Const(x))[1],
              lambda x: np.sum(g(Active(w0), Const(x))[0][0] ** 2)):
        for x in (np.array([1.0, 2.0]), np.array([0.5, -1.0])):
            want = _fd(h, x)
            _close(autodiff(Reverse, h, Active, Active(x))[0][0], want)
            _close(autodiff(Forward, h, Duplicated, Duplicated(x, np.array([0.0, 1.0])))[0],
                   want[1])


def test_shadows_and_written_buffers_of_the_outer_level():
    g = tape.compile(tape.Reverse, _f, Active, Duplicated)

    def h(x):   # a shadow made from the outer level's value: a buffer of that level
        dx = np.zeros_like(x)
        g(Duplicated(x, dx))
        return np.sum(dx * x)

    def into(y, x):
        y[...] = np.sin(x) * x

    w = tape.compile(tape.Reverse, into, Const, Duplicated, Duplicated)

    def k(x):   # a buffer the compiled function writes, its seed and the shadow: all outer
        y, dy, dx = np.zeros_like(x), np.ones_like(x), np.zeros_like(x)
        w(Duplicated(y, dy), Duplicated(x, dx))
        return np.sum(y * dx) + np.sum(dy)

    for x in POINTS:
        for fn in (h, k):
            fn(x), fn(x)
            _close(autodiff(Reverse, fn, Active, Active(x))[0][0], _fd(fn, x))
    assert w.stats.eager_reasons == [NESTED] and w.stats.hits >= 3, w.stats

    def plain_shadow(x):   # a plain array cannot carry what depends on the outer level
        g(Duplicated(x, np.zeros(x.shape)))
        return np.sum(x)
    with pytest.raises(tape.ActivityError, match="plain array"):
        autodiff(Reverse, plain_shadow, Active, Active(POINTS[0]))


def test_a_pytree_active_argument_of_a_compiled_call_inside_an_outer_differentiation():
    c = np.array([[1.0, 0.5], [0.2, -0.3], [0.1, 0.4]])

    def loss(p, c):
        return np.sum(np.tanh(c @ p["w"]) ** 2) + p["b"] ** 2 * np.sum(p["w"])
    g = tape.compile(RP, loss, Active, Active, Const)

    def h(w):
        (gp, _), v = g(Active({"w": w, "b": 0.7}), Const(c))
        return v + np.sum(gp["w"] ** 2) + gp["b"] ** 2

    for w in (np.array([0.3, -0.2]), np.array([0.5, 0.1]), np.array([0.5, 0.1])):
        h(w)
        want = _fd(h, w)
        _close(autodiff(Reverse, h, Active, Active(w))[0][0], want)
        _close(autodiff(Forward, h, Duplicated, Duplicated(w, np.array([1.0, 0.0])))[0], want[0])
        H = tape.hessian(lambda z: g(Active({"w": z, "b": 0.7}), Const(c))[1], w)
        _close(H, _fd(lambda z: g(Active({"w": z, "b": 0.7}), Const(c))[0][0]["w"], w))
    assert g.stats.hits >= 3, g.stats


def test_batched_compiled_calls_inside_outer_differentiations():
    rev = tape.compile(tape.Reverse, _f, Active, BatchDuplicated)

    def h(x):   # two reverse seeds at once, under an outer forward pass (Jacobian columns)
        d1, d2 = np.zeros_like(x), np.zeros_like(x)
        rev(BatchDuplicated(x, (d1, d2)))
        return d1 + 2.0 * d2

    fwd = tape.compile(Forward, _f, BatchDuplicated, BatchDuplicated)

    def k(x):   # two tangents at once, under an outer reverse pass
        t1, t2 = fwd(BatchDuplicated(x, (np.ones_like(x), x.copy())))[0]
        return t1 * t2

    for x in POINTS:
        h(x), h(x), k(x), k(x)
        J = tape.jacobian(Forward, h, x)[0]
        _close(J, _fd(h, x))
        np.testing.assert_allclose(J, 3.0 * tape.hessian(_f, x), rtol=1e-12, atol=1e-14)
        _close(autodiff(Reverse, k, Active, Active(x))[0][0], _fd(k, x))
    assert rev.stats.hits >= 3 and fwd.stats.hits >= 3, (rev.stats, fwd.stats)


# -- user rules and checkpoints ------------------------------------------------------------------

def test_a_rule_whose_reverse_calls_a_compiled_gradient_inside_a_compiled_function():
    cg = tape.compile(tape.Reverse, lambda v: np.sum(np.cos(v) * v), Active, Active)

    def energy(x):
        return np.sum(np.cos(x) * x)
    rule = tape.custom_rule(energy, augmented_primal=lambda cfg, x: (energy(x), x),
                            reverse=lambda cfg, x, g: (g * cg(Active(x))[0][0],))

    def outer(x, c):
        return rule(x * c) ** 2
    co = tape.compile(RP, outer, Active, Active, Const)
    c = np.array([1.0, 2.0, 0.5])
    for k in range(4):
        x = np.array([0.3, -0.4, 1.2]) + 0.1 * k
        got = co(Active(x), Const(c))
        want = autodiff(RP, outer, Active, Active(x), Const(c))
        np.testing.assert_allclose(got[0][0], want[0][0], rtol=1e-12, atol=1e-14)
        assert got[1] == pytest.approx(want[1], rel=1e-14)
        _close(got[0][0], _fd(lambda z: outer(z, c), x))
    assert co.stats.hits == 3 and co.stats.eager_calls == 0, co.stats
    assert cg.stats.hits >= 3, cg.stats   # the replay's adjoint calls it with plain values


def test_a_differentiable_rule_whose_reverse_calls_a_compiled_gradient_under_hessian():
    cg = tape.compile(tape.Reverse, lambda v: np.sum(v ** 4) / 4, Active, Active)

    def p(x):
        return np.sum(x ** 4) / 4
    rule = tape.custom_rule(p, augmented_primal=lambda cfg, x: (p(x), x),
                            reverse=lambda cfg, x, g: (g * cg(Active(x))[0][0],),
                            differentiable=True)

    def f(x):
        return rule(x) * np.sum(x)
    compiled = tape.compile(tape.Reverse, f, Active, Active)
    for x in (np.array([0.5, -1.0]), np.array([0.3, 0.2, 0.1])):
        grad = lambda z: compiled(Active(z))[0][0]   # noqa: E731
        grad(x), grad(x)
        H = tape.hessian(f, x)
        _close(H, _fd(grad, x))
        np.testing.assert_allclose(tape.jacobian(Forward, grad, x)[0], H, rtol=1e-12,
                                   atol=1e-14)


def test_a_stateful_rule_and_a_checkpoint_inside_a_compiled_function_run_as_eagerly():
    """The checkpoint stops the trace part-way; the eager call that follows takes what the
    rule returned in the trace, and runs the rule inside the checkpoint (and its re-run in the
    sweep) as eager mode does: the same calls on the same values."""
    log = []

    def double(x):
        return x * 2.0

    def aug(cfg, x):
        log.append(np.array(tape.primal(x)).tolist())
        return x * 2.0, None
    rule = tape.custom_rule(double, augmented_primal=aug,
                            reverse=lambda cfg, s, g: (2.0 * g,), check_primal=False)

    def f(x):
        z = tape.checkpoint(lambda v: np.sin(rule(v)))(rule(x))
        return np.sum(z * x)
    g = tape.compile(RP, f, Active, Active)
    for x in (np.array([0.1, 0.2]), np.array([0.2, 0.4]), np.array([0.3, 0.1, 0.5])):
        log.clear()
        got = g(Active(x))
        ours = list(log)
        log.clear()
        want = autodiff(RP, f, Active, Active(x))
        assert ours == log
        np.testing.assert_allclose(got[0][0], want[0][0], rtol=1e-12, atol=1e-14)
        assert got[1] == pytest.approx(want[1], rel=1e-14)
        _close(got[0][0], _fd(f, x))
    assert g.stats.traces == 0, g.stats


def test_checkpointed_scan_inside_a_compiled_function_with_new_values_and_shapes():
    def step(h, x):
        h = np.tanh(h * x + 0.1 * h)
        return h, np.sum(h)

    def f(h0, xs):
        h, ys = tape.checkpointed_scan(step, h0, xs, every=2)
        return np.sum(h ** 2) + np.sum(ys)
    g = tape.compile(RP, f, Active, Active, Const)
    for n, T in ((3, 5), (3, 5), (3, 5), (2, 4)):
        h0 = np.linspace(0.1, 0.6, n) + T * 0.01
        xs = np.linspace(-0.5, 0.9, T * n).reshape(T, n)
        got = g(Active(h0), Const(xs))
        want = autodiff(RP, f, Active, Active(h0), Const(xs))
        np.testing.assert_allclose(got[0][0], want[0][0], rtol=1e-12, atol=1e-14)
        assert got[1] == pytest.approx(want[1], rel=1e-14)
        _close(got[0][0], _fd(lambda z: f(z, xs), h0))


# -- compiled functions calling compiled functions -------------------------------------------------

def test_a_compiled_call_inside_an_inactive_helper_of_a_compiled_function_sees_its_closure():
    W = np.array([1.0, 2.0, 3.0])
    inner = tape.compile(RP, lambda v: np.sum(np.sin(v * W)), Active, Active)

    @tape.inactive
    def weights(c):
        (d,), _ = inner(Active(c.copy()))
        return d

    def f(x, c):
        return np.sum(x * weights(c))
    g = tape.compile(RP, f, Active, Active, Const)
    c = np.array([0.1, 0.2, 0.3])
    for k in range(6):
        if k == 3:
            W[...] = [3.0, 1.0, -1.0]   # read by `inner`, which the helper calls
        x = np.array([0.5, 1.0, 1.5]) + k
        got = g(Active(x), Const(c))
        want = autodiff(RP, f, Active, Active(x), Const(c))
        np.testing.assert_allclose(got[0][0], want[0][0], rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(got[0][0], W * np.cos(c * W), rtol=1e-12)
        assert got[1] == pytest.approx(want[1], rel=1e-14)
    assert g.stats.hits >= 2, g.stats


def test_differentiating_a_compiled_function_itself_refuses_clearly():
    """A compiled function takes annotated arguments; handing it to autodiff or a helper
    passes it the traced value as a Const, which it refuses by name."""
    for mode, acts in ((RP, (Active, Active)), (Forward, (Duplicated, Duplicated))):
        g = tape.compile(mode, _f, *acts)
        x = POINTS[0]
        for call in (lambda: tape.gradient(Reverse, g, x), lambda: tape.hessian(g, x),
                     lambda: tape.jacobian(Forward, g, x),
                     lambda: autodiff(Reverse, g, Active, Active(x))):
            with pytest.raises(tape.ActivityError, match="compiled as .* but passed as Const"):
                call()


# -- float32 through second order ------------------------------------------------------------------

def test_float32_second_order_through_compiled_calls_follows_eager_dtypes():
    def f(x):
        return np.sum(np.tanh(x) ** 2 * x)
    g = tape.compile(RP, f, Active, Active)
    cg = tape.compile(tape.Reverse, f, Active, Active)
    grad = lambda z: cg(Active(z))[0][0]   # noqa: E731
    for x in (np.array([0.3, 0.5], np.float32), np.array([0.3, 0.5, -0.2], np.float32)):
        for _ in range(3):
            got, want = g(Active(x)), autodiff(RP, f, Active, Active(x))
            assert got[0][0].dtype == want[0][0].dtype == np.float32
            assert type(got[1]) is type(want[1])
            np.testing.assert_allclose(got[0][0], want[0][0], rtol=1e-6)
        v = np.ones_like(x)
        H_eager = tape.hessian(f, x)
        H64 = tape.hessian(f, x.astype(np.float64))
        for H in (tape.hessian(lambda z: g(Active(z))[1], x), tape.jacobian(Forward, grad, x)[0],
                  tape.jacobian(Reverse, grad, x)[0]):
            assert H.dtype == H_eager.dtype, (H.dtype, H_eager.dtype)
            np.testing.assert_allclose(H, H64, rtol=1e-4, atol=1e-5)
        hv = autodiff(Forward, grad, Duplicated, Duplicated(x, v))[0]
        assert hv.dtype == tape.hvp(f, x, v).dtype
        np.testing.assert_allclose(hv, H64 @ v, rtol=1e-4, atol=1e-5)
