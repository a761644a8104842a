"""Batch mode on user programs: a BatchDuplicated call must equal W separate Duplicated calls
(one per tangent or seed) in the primal, the returned derivatives and every shadow written."""
import copy
import dataclasses

import numpy as np
import pytest

import tape
import tape.scipy.linalg as tsl
import tape.scipy.special as tss
from tape import (Active, ActivityError, Annotation, BatchDuplicated, BatchDuplicatedNoNeed,
                  Const, Duplicated, DuplicatedNoNeed, Forward, ForwardWithPrimal, Reverse,
                  ReverseWithPrimal, autodiff, custom_rule)
from tape.pytree import flatten

RNG = np.random.default_rng(20240611)
RTOL = 1e-13


def _dirs(shape, width):
    return tuple(RNG.standard_normal(shape) for _ in range(width))


def _zeros(shape, width):
    return tuple(np.zeros(shape) for _ in range(width))


def _one_lane(ann, w):
    if isinstance(ann, BatchDuplicatedNoNeed):
        return DuplicatedNoNeed(copy.deepcopy(ann.val), copy.deepcopy(ann.dval[w]))
    if isinstance(ann, BatchDuplicated):
        return Duplicated(copy.deepcopy(ann.val), copy.deepcopy(ann.dval[w]))
    if isinstance(ann, Annotation):
        return type(ann)(copy.deepcopy(ann.val))
    return copy.deepcopy(ann)


def _close(got, want, what):
    got_leaves, want_leaves = flatten(got)[0], flatten(want)[0]
    assert len(got_leaves) == len(want_leaves), what
    for g, v in zip(got_leaves, want_leaves):
        assert (g is None) == (v is None), what
        if g is not None:
            assert np.shape(g) == np.shape(v), what
            np.testing.assert_allclose(g, v, rtol=RTOL, atol=1e-13, err_msg=what)


def assert_lanes_equal(mode, f, *args, ret=None):
    """Run `f` once in batch mode and once per lane unbatched; compare everything."""
    if args and isinstance(args[0], type):
        ret, args = args[0], args[1:]
    pre = () if ret is None else (ret,)
    batched = copy.deepcopy(args)
    result = autodiff(mode, f, *pre, *batched)
    width = next(a.width for a in args if isinstance(a, BatchDuplicated))
    for w in range(width):
        single = [_one_lane(a, w) for a in copy.deepcopy(args)]
        want = autodiff(mode, f, *pre, *single)
        if mode.kind == "forward":
            if not result:   # a result without float data: Const, guessed
                assert want == ()
            elif ret is not Const and result[0] is None:
                assert want[0] is None
            elif ret is not Const:
                _close(result[0][w], want[0], f"tangent of lane {w}")
            if len(result) > 1:
                _close(result[1], want[1], "primal")
        else:
            for i, (d, s) in enumerate(zip(result[0], want[0])):
                if isinstance(args[i], Active):
                    _close(d[w], s, f"derivative of argument {i}, lane {w}")
            if mode.with_primal:
                _close(result[1], want[1], "primal")
        for i, (b, s) in enumerate(zip(batched, single)):
            if isinstance(b, BatchDuplicated):
                _close(b.dval[w], s.dval, f"shadow {w} of argument {i}")
                _close(b.val, s.val, f"primal of argument {i}")
    return result


# --------------------------------------------------------------------------------------------
# Findings, fixed: np.add.reduce in a batched rule (axis 0, not every axis), forward solve
# against a constant stack of matrices, a read-only tangent shadow of a written buffer


def _bias_add(reduce_rows):
    """x + b (b broadcast over rows) with a hand-written reverse rule (vectorized: the default)."""
    return custom_rule(lambda x, b: x + b,
                       augmented_primal=lambda cfg, x, b: (x + b, None),
                       reverse=lambda cfg, saved, g: (g, reduce_rows(g)),
                       forward=lambda cfg, xs, ts: (xs[0] + xs[1], ts[0] + ts[1]),
                       name="bias_add")


def test_rule_reducing_with_ufunc_reduce_gives_each_lane_its_gradient():
    bias = _bias_add(lambda g: np.add.reduce(g))    # the same as g.sum(0) for every ndarray

    def layer(y, x, b):
        y[...] = np.tanh(bias(x, b))
    x, b = RNG.standard_normal((4, 3)), RNG.standard_normal(3)
    assert_lanes_equal(Reverse, layer, Const, BatchDuplicated(np.zeros((4, 3)), _dirs((4, 3), 2)),
                       BatchDuplicated(x, _zeros((4, 3), 2)), BatchDuplicated(b, _zeros(3, 2)))


@pytest.mark.parametrize("width", [1, 3])
def test_forward_solve_against_a_constant_stack_of_matrices(width):
    stack = RNG.standard_normal((3, 4, 4)) + 4 * np.eye(4)
    assert_lanes_equal(ForwardWithPrimal, lambda b: np.linalg.solve(stack, b),
                       BatchDuplicated(RNG.standard_normal((4, 2)), _dirs((4, 2), width)))


def test_forward_refuses_a_read_only_shadow_of_a_written_buffer_clearly():
    def f(y, x):
        y[...] = np.tanh(x) * 2
    y = np.zeros(4)
    shadows = (np.zeros(4), np.broadcast_to(np.zeros(1), (4,)))
    with pytest.raises(ActivityError, match="read-only"):
        autodiff(Forward, f, BatchDuplicated(y, shadows), BatchDuplicated(np.ones(4),
                                                                          _dirs(4, 2)))
    assert not y.any() and not shadows[0].any()


# --------------------------------------------------------------------------------------------
# Coverage: realistic programs, each lane equal to its unbatched call


def _triangle(x):
    y = np.zeros_like(x)
    for i in range(x.shape[0]):
        y[i:] = y[i:] + x[i] * x[:x.shape[0] - i]
    x *= 2
    return y * x


@pytest.mark.parametrize("width", [1, 5])
def test_slice_writes_in_a_loop_and_an_overwritten_input(width):
    x = RNG.standard_normal(5)
    assert_lanes_equal(ForwardWithPrimal, _triangle, BatchDuplicated(x, _dirs(5, width)))

    def into(out, x):
        out[:] = _triangle(x)
    assert_lanes_equal(ReverseWithPrimal, into, Const,
                       BatchDuplicated(np.zeros(5), _dirs(5, width)),
                       BatchDuplicated(x, _dirs(5, width)))


def test_output_buffer_with_const_and_active_scalar_arguments():
    def f(y, x, c, n):
        for i in range(n):
            y[i] = c * np.tanh(x[i]) ** 2 + y[i - 1]
        y[::2] *= x[::2]
    x = RNG.standard_normal(5)
    dc, = [d for d in assert_lanes_equal(
        Reverse, f, Const, BatchDuplicated(np.zeros(5), _dirs(5, 3)),
        BatchDuplicated(x, _zeros(5, 3)), Active(1.3), Const(5))[0] if d is not None]
    assert isinstance(dc, tuple) and len(dc) == 3 and all(type(d) is float for d in dc)
    assert_lanes_equal(Forward, f, BatchDuplicated(np.zeros(5), _zeros(5, 3)),
                       BatchDuplicated(x, _dirs(5, 3)), Const(1.3), 5)


def _linalg(a, b):
    w, v = np.linalg.eigh(a)
    u, s, vt = np.linalg.svd(a)
    return (np.linalg.solve(a, b) + np.linalg.inv(a)[0] + w * v[0] ** 2 + s
            + np.abs(u[:, 0]) + np.real(np.fft.ifft(np.fft.fft(b) * np.fft.fft(w))))


def test_linalg_and_fft():
    m = RNG.standard_normal((4, 4))
    a, b = m @ m.T + 4 * np.eye(4), RNG.standard_normal(4)
    assert_lanes_equal(ForwardWithPrimal, _linalg, BatchDuplicated(a, _dirs((4, 4), 3)),
                       BatchDuplicated(b, _dirs(4, 3)))

    def into(y, a, b):
        y[:] = _linalg(a, b)
    assert_lanes_equal(Reverse, into, Const, BatchDuplicated(np.zeros(4), _dirs(4, 3)),
                       BatchDuplicated(a, _zeros((4, 4), 3)), BatchDuplicated(b, _zeros(4, 3)))


def _statistics(x):
    m = x.mean(axis=1, keepdims=True)
    s = x.std(axis=0, keepdims=True)
    order = np.argsort(x[:, 0])
    top = x[np.argmax(x[:, 1])]
    safe = np.where(x > 0, np.sqrt(np.where(x > 0, x, 1.0)), np.nan)
    return ((x - m) / s + np.max(x, axis=1, keepdims=True) * top + x[order][::-1]
            + np.nan_to_num(safe) + np.einsum("ij,kj->ik", x, x)[:, :3] + np.sort(x, axis=0))


def test_keepdims_sorting_argmax_einsum_and_where_with_nan_branch():
    x = RNG.standard_normal((4, 3))
    assert_lanes_equal(ForwardWithPrimal, _statistics, BatchDuplicated(x, _dirs((4, 3), 3)))

    def into(y, x):
        y[...] = _statistics(x)
    assert_lanes_equal(Reverse, into, Const, BatchDuplicated(np.zeros((4, 3)), _dirs((4, 3), 3)),
                       BatchDuplicated(x, _zeros((4, 3), 3)))


@dataclasses.dataclass
class _Layer:
    w: np.ndarray
    scale: float


def test_pytrees_with_float_leaves():
    p = {"w": RNG.standard_normal((3, 2)), "b": 0.7, "l": [RNG.standard_normal(2), 1.5]}

    def lanes(zero):
        return tuple({"w": np.zeros((3, 2)) if zero else RNG.standard_normal((3, 2)),
                      "b": 0.0 if zero else float(RNG.standard_normal()),
                      "l": [np.zeros(2) if zero else RNG.standard_normal(2),
                            0.0 if zero else float(RNG.standard_normal())]} for _ in range(3))

    def model(p, layer, x):
        h = np.tanh(p["w"] @ p["l"][0] + p["b"]) * p["l"][1]
        return np.sum(h * x[:3]) ** 2 * layer.scale + np.sum(np.sin(layer.w * x[:2]))
    layer, x = _Layer(np.array([0.3, 0.4]), 2.0), RNG.standard_normal(5)
    assert_lanes_equal(ForwardWithPrimal, model, BatchDuplicated(p, lanes(False)),
                       BatchDuplicated(layer, tuple(_Layer(RNG.standard_normal(2), 0.5 * w)
                                                    for w in range(3))), Const(x))
    assert_lanes_equal(ReverseWithPrimal, model, Active, BatchDuplicated(p, lanes(True)),
                       BatchDuplicated(layer, tuple(_Layer(np.zeros(2), 0.0) for _ in range(3))),
                       BatchDuplicated(x, _zeros(5, 3)))


def test_complex_arguments_and_an_active_complex_scalar():
    def lanes():
        return tuple(RNG.standard_normal(4) + 1j * RNG.standard_normal(4) for _ in range(3))
    z = lanes()[0]
    assert_lanes_equal(ForwardWithPrimal, lambda z: np.abs(z * np.exp(1j * z.real)) ** 2
                       + np.conj(z) * z.imag, BatchDuplicated(z, lanes()))
    assert_lanes_equal(ReverseWithPrimal, lambda z, a: np.sum(np.abs(z * a) ** 2), Active,
                       BatchDuplicated(z, tuple(np.zeros(4, complex) for _ in range(3))),
                       Active(1.0 + 0.5j))


def test_scipy_special_and_linalg():
    x = np.abs(RNG.standard_normal(4)) + 0.5
    m = RNG.standard_normal((4, 4))
    a = m @ m.T + 4 * np.eye(4)

    def f(y, a, x):
        c = tsl.cholesky(a, lower=True)
        y[:] = (tsl.solve_triangular(c, x, lower=True) + tsl.expm(a / 10) @ x
                + tsl.eigh(a)[0] + tsl.det(a) * tsl.inv(a)[0] + tss.logsumexp(x) * tss.softmax(x)
                + tss.gammaln(x) + tss.erf(x) * tss.digamma(x))
    assert_lanes_equal(Forward, f, BatchDuplicated(np.zeros(4), _zeros(4, 3)),
                       BatchDuplicated(a, _dirs((4, 4), 3)), BatchDuplicated(x, _dirs(4, 3)))
    assert_lanes_equal(Reverse, f, Const, BatchDuplicated(np.zeros(4), _dirs(4, 3)),
                       BatchDuplicated(a, _zeros((4, 4), 3)), BatchDuplicated(x, _zeros(4, 3)))


@pytest.mark.parametrize("vectorized", [True, False])
def test_custom_rule_that_allocates_plain_buffers(vectorized):
    """Rules writing tangents into np.zeros buffers: the engine must loop over the lanes."""
    def forward(cfg, xs, ts):
        out = np.zeros(np.shape(xs[0]))
        out[:] = 3 * xs[0] ** 2 * ts[0]
        return xs[0] ** 3, out

    def reverse(cfg, a, g):
        out = np.empty(a.shape)
        out[...] = 3 * a ** 2 * np.asarray(g)
        return (out,)
    cube = custom_rule(lambda a: a ** 3, augmented_primal=lambda cfg, a: (a ** 3, a),
                       reverse=reverse, forward=forward, vectorized=vectorized)

    def f(y, x):
        y[:] = np.sin(cube(x)) * x
    x = RNG.standard_normal(5)
    assert_lanes_equal(Forward, f, BatchDuplicated(np.zeros(5), _zeros(5, 3)),
                       BatchDuplicated(x, _dirs(5, 3)))
    assert_lanes_equal(Reverse, f, Const, BatchDuplicated(np.zeros(5), _dirs(5, 3)),
                       BatchDuplicated(x, _zeros(5, 3)))


A = RNG.standard_normal((4, 4))


def _loss(x):
    return np.sum(np.tanh(A @ x) ** 2) + np.prod(np.sin(x))


def test_nested_autodiff_inside_batched_calls():
    x = RNG.standard_normal(4)

    def gradient_of_loss(x):
        (g,), = autodiff(Reverse, _loss, Active, Active(x))
        return g

    def two_jvps(x):
        ts, = autodiff(Forward, _loss, BatchDuplicated(x, (np.ones(4), np.arange(4.0))))
        return ts[0] * ts[1]

    def two_vjps(x):
        shadows = (np.zeros_like(x), np.zeros_like(x))

        def h(y, x):
            y[:] = np.sin(A @ x) * x
        autodiff(Reverse, h, Const, BatchDuplicated(np.zeros_like(x), (np.ones(4), np.arange(4.0))),
                 BatchDuplicated(x, shadows))
        return shadows[0] * shadows[1]
    assert_lanes_equal(ForwardWithPrimal, gradient_of_loss, BatchDuplicated(x, _dirs(4, 3)))
    assert_lanes_equal(Reverse, two_jvps, Active, BatchDuplicated(x, _zeros(4, 3)))

    def into(y, x):
        y[:] = two_vjps(x)
    assert_lanes_equal(Reverse, into, Const, BatchDuplicated(np.zeros(4), _dirs(4, 3)),
                       BatchDuplicated(x, _zeros(4, 3)))
    assert_lanes_equal(Forward, lambda x: tape.hessian(_loss, x) @ x,
                       BatchDuplicated(x, _dirs(4, 2)))


def test_view_shadows_strided_and_transposed():
    x = RNG.standard_normal((4, 4))

    def f(y, x):
        y[...] = np.tanh(x) @ x
        y[:, 0] += x[0]
    bases = [np.zeros((4, 8)) for _ in range(3)]
    strided = tuple(b[:, ::2] for b in bases)
    transposed = tuple(np.zeros((4, 4)).T for _ in range(3))
    assert_lanes_equal(Forward, f, BatchDuplicated(np.zeros((4, 4)), strided),
                       BatchDuplicated(x, _dirs((4, 4), 3)))
    assert not any(b[:, 1::2].any() for b in bases)
    seeds = _dirs((4, 4), 3)
    for s, seed in zip(strided, seeds):
        s[...] = seed
    assert_lanes_equal(Reverse, f, Const, BatchDuplicated(np.zeros((4, 4)), strided),
                       BatchDuplicated(x, transposed))


def test_reverse_refuses_a_read_only_shadow_before_running():
    ran = []

    def f(x):
        ran.append(1)
        return np.sum(x ** 2)
    with pytest.raises(ActivityError, match="shadow 1 of argument 0 .* read-only"):
        autodiff(Reverse, f, Active, BatchDuplicated(np.ones(3), (
            np.zeros(3), np.broadcast_to(np.zeros(1), (3,)))))
    assert not ran


def test_compiled_batch_modes_over_changing_inputs_and_widths():
    def f(y, x, a, k):
        y[:] = 0
        for i in range(k):
            y[i] = a * np.tanh(x[i:] @ A[i:, i]) + y[i - 1] * x[i]
        y *= 2
        return np.sum(y ** 2)
    forward = tape.compile(ForwardWithPrimal, f, Duplicated, BatchDuplicated, BatchDuplicated,
                           BatchDuplicated, Const)
    reverse = tape.compile(ReverseWithPrimal, f, Active, BatchDuplicated, BatchDuplicated,
                           Active, Const)
    for a, k, width in [(0.5, 4, 3), (1.5, 4, 3), (0.5, 3, 3), (-2.0, 4, 1), (0.7, 4, 5)]:
        x = RNG.standard_normal(4)
        y = np.zeros(4)
        fargs = (BatchDuplicated(y, _zeros(4, width)), BatchDuplicated(x, _dirs(4, width)),
                 BatchDuplicated(a, tuple(float(v) for v in RNG.standard_normal(width))), Const(k))
        rargs = (BatchDuplicated(y, _dirs(4, width)), BatchDuplicated(x, _zeros(4, width)),
                 Active(a), Const(k))
        for compiled, mode, args, ret in [(forward, ForwardWithPrimal, fargs, Duplicated),
                                          (reverse, ReverseWithPrimal, rargs, Active)]:
            assert_lanes_equal(mode, f, *args, ret=ret)
            eager, replayed = copy.deepcopy(args), copy.deepcopy(args)
            want = autodiff(mode, f, ret, *eager)
            _close(compiled(*replayed), want, f"compiled {mode}")
            for e, r in zip(eager, replayed):
                if isinstance(e, BatchDuplicated):
                    _close(r.val, e.val, "compiled primal")
                    _close(r.dval, e.dval, "compiled shadows")
    assert forward.stats.eager_calls == 0 and reverse.stats.eager_calls == 0
