"""Forward, batch, split and checkpointed modes on user-style NumPy code, against plain NumPy
and central finite differences in float64; and `tape.testing` on right and wrong user rules.

The cases that once returned a wrong number (or refused valid input) say so in their names:
batch reverse mode dropping the gradient of a float leaf of a shadow container, refusing a
tuple of arrays, checkpointed segments recomputed from arrays written after the call, and
check_rule's float32 finite differences.
"""
import numpy as np
import pytest

from tape import (Active, BatchDuplicated, CheckpointError, Const, Duplicated, Forward,
                  ForwardWithPrimal, OnceDifferentiableError, PytreeError, Reverse,
                  ReverseSplitNoPrimal, ReverseSplitWithPrimal, autodiff, autodiff_thunk,
                  checkpoint, checkpointed_scan, custom_rule)
from tape.testing import GradientCheckError, check_grads, check_rule

RNG = np.random.default_rng(20)


def fd_jvp(f, xs, dxs, eps=1e-6):
    """Central difference of `f` at `xs` along `dxs` (None: not moved)."""
    plus = [x + eps * d if d is not None else x for x, d in zip(xs, dxs)]
    minus = [x - eps * d if d is not None else x for x, d in zip(xs, dxs)]
    return (np.asarray(f(*plus)) - np.asarray(f(*minus))) / (2 * eps)


def fd_grad(f, x, eps=1e-6):
    return np.array([fd_jvp(f, [x], [e], eps) for e in np.eye(x.size)]).reshape(x.shape)


# --------------------------------------------------------------------------------------------
# Forward mode: in-place writes, views, output buffers, pytrees


def _writes(y, x):
    """An f!(y, x) that writes through a transpose, a reshape and a slice, then scales."""
    y.T[0, :] = x[:2] * 2            # column 0 of y
    y.reshape(-1)[3] = x[2] ** 2
    y[1] *= np.sin(x[1])
    y += np.outer(x[:2], x[1:3])


def _writes_copy(y, x):
    y = y.copy()
    _writes(y, x)
    return y


@pytest.mark.parametrize("mode", [Forward, ForwardWithPrimal])
def test_forward_writes_through_views_into_a_duplicated_buffer(mode):
    x0, dx0 = np.array([0.4, -1.2, 0.8]), np.array([1.0, 0.3, -2.0])
    y0, dy0 = np.arange(4.0).reshape(2, 2), np.full((2, 2), 0.7)
    y, dy, x, dx = y0.copy(), dy0.copy(), x0.copy(), dx0.copy()
    autodiff(mode, _writes, Const, Duplicated(y, dy), Duplicated(x, dx))
    np.testing.assert_allclose(y, _writes_copy(y0, x0), rtol=1e-14)
    np.testing.assert_allclose(dy, fd_jvp(_writes_copy, [y0, x0], [dy0, dx0]), rtol=1e-7)
    np.testing.assert_array_equal(x, x0)      # inputs untouched
    np.testing.assert_array_equal(dx, dx0)


def test_forward_overwritten_input_gets_its_new_tangent_in_every_lane():
    def f(x):
        x[1:] = x[:2] * x[1:]
        x *= 2
        return np.sum(x)

    def new_x(x):
        x = x.copy()
        f(x)
        return x
    x0 = np.array([0.5, -1.0, 2.0])
    dirs = (np.array([1.0, 0.0, 0.5]), np.array([0.0, 1.0, 0.0]))
    x, shadows = x0.copy(), tuple(d.copy() for d in dirs)
    tangents, = autodiff(Forward, f, BatchDuplicated(x, shadows))
    np.testing.assert_allclose(x, new_x(x0))
    for w, d in enumerate(dirs):
        np.testing.assert_allclose(shadows[w], fd_jvp(new_x, [x0], [d]), rtol=1e-7)
        np.testing.assert_allclose(tangents[w], np.sum(fd_jvp(new_x, [x0], [d])), rtol=1e-7)


def test_forward_pytrees_ints_masks_and_const():
    x, dx = np.array([0.3, -0.5, 1.1, 2.0]), np.array([1.0, -1.0, 0.5, 0.25])
    p = {"w": x, "b": 0.5, "l": [x[:2] * 1.0, 2.0]}
    dp = {"w": dx, "b": 0.3, "l": [dx[:2] * 1.0, -1.0]}
    idx, mask, c = np.array([0, 2, 2]), x > 0, np.array([1.0, 2.0, 3.0, 4.0])

    def f(p, idx, mask, c):
        return (np.sum(p["w"][idx] ** 2) * p["b"] + np.sum(p["l"][0]) * p["l"][1]
                + np.sum(np.tanh(p["w"][mask]) * c[mask]))
    tangent, value = autodiff(ForwardWithPrimal, f, Duplicated(p, dp), idx, mask, Const(c))

    def flat(w, b, l0, l1):
        return f({"w": w, "b": b, "l": [l0, l1]}, idx, mask, c)
    want = fd_jvp(flat, [x, 0.5, x[:2], 2.0], [dx, 0.3, dx[:2], -1.0])
    np.testing.assert_allclose(tangent, want, rtol=1e-7)
    assert value == pytest.approx(f(p, idx, mask, c), rel=1e-14)


def test_forward_python_float_gives_python_float_tangent():
    # The primal came back as a float and the tangent as np.float64 (through np.exp).
    tangent, value = autodiff(ForwardWithPrimal, lambda z: np.exp(z) * z, Duplicated(0.7, 2.0))
    assert type(tangent) is float and type(value) is float
    assert tangent == pytest.approx(2.0 * np.exp(0.7) * 1.7, rel=1e-14)
    (t0, t1), = autodiff(Forward, lambda z: np.sin(z), BatchDuplicated(0.7, (1.0, 2.0)))
    assert type(t0) is float and t1 == pytest.approx(2 * np.cos(0.7), rel=1e-14)


def test_forward_complex_non_holomorphic():
    z, dz = np.array([1 + 2j, 0.5 - 1j]), np.array([0.3 + 0.1j, -1j])

    def f(z):
        return np.abs(z) ** 2 * z + np.conj(z) * z.real
    tangent, = autodiff(Forward, f, Duplicated(z, dz))
    np.testing.assert_allclose(tangent, fd_jvp(f, [z], [dz]), rtol=1e-7)


# --------------------------------------------------------------------------------------------
# Batch mode: each lane equals the unbatched result


BATCH_FUNCTIONS = {
    "tanh_matvec": lambda x: np.tanh(np.arange(12.0).reshape(3, 4) / 10 @ x),
    "sort_times_x": lambda x: np.sort(x) * x,
    "norm_scaled": lambda x: np.linalg.norm(x) * x,
    "gather_repeat": lambda x: x[[0, 0, 3]] * 2,
    "inverse": lambda x: np.linalg.inv(np.diag(x) + 5 * np.eye(4)) @ x,
}


@pytest.mark.parametrize("width", [1, 2, 4])
@pytest.mark.parametrize("name", sorted(BATCH_FUNCTIONS))
def test_batch_lanes_equal_single_forward_and_split_reverse(name, width):
    f = BATCH_FUNCTIONS[name]
    x = np.array([0.3, -0.8, 1.2, 0.5])
    dirs = tuple(RNG.standard_normal(4) for _ in range(width))
    tangents, = autodiff(Forward, f, BatchDuplicated(x.copy(), tuple(d.copy() for d in dirs)))
    seeds = tuple(RNG.standard_normal(np.shape(f(x))) for _ in range(width))
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, f, Duplicated, BatchDuplicated)
    shadows = tuple(np.zeros(4) for _ in range(width))
    tape, _, _ = fwd(BatchDuplicated(x, shadows))
    rev(BatchDuplicated(x, shadows), seeds, tape)
    for w in range(width):
        single, = autodiff(Forward, f, Duplicated(x.copy(), dirs[w].copy()))
        np.testing.assert_allclose(tangents[w], single, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(single, fd_jvp(f, [x], [dirs[w]]), rtol=1e-6, atol=1e-9)
        fwd1, rev1 = autodiff_thunk(ReverseSplitNoPrimal, f, Duplicated, Duplicated)
        dx = np.zeros(4)
        tape1, _, _ = fwd1(Duplicated(x, dx))
        rev1(Duplicated(x, dx), seeds[w], tape1)
        np.testing.assert_allclose(shadows[w], dx, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("container", ["dict", "list"])
def test_batch_reverse_adds_into_float_leaves_of_each_shadow(container):
    # Was: the float leaf's shadow stayed 0.0 in every lane (`+=` rebound a local), no error.
    x = np.array([0.3, -0.7, 1.1])
    if container == "dict":
        p = {"w": x, "b": 0.5}
        shadows = ({"w": np.zeros(3), "b": 0.25}, {"w": np.zeros(3), "b": 0.0})

        def f(p):
            return np.sum(np.sin(p["w"])) * p["b"]

        def float_shadow(s):
            return s["b"]
    else:
        p = [x, 0.5]
        shadows = ([np.zeros(3), 0.25], [np.zeros(3), 0.0])

        def f(p):
            return np.sum(np.sin(p[0])) * p[1]

        def float_shadow(s):
            return s[1]
    autodiff(Reverse, f, Active, BatchDuplicated(p, shadows))
    assert float_shadow(shadows[0]) == pytest.approx(0.25 + np.sum(np.sin(x)), rel=1e-14)
    assert float_shadow(shadows[1]) == pytest.approx(np.sum(np.sin(x)), rel=1e-14)
    # Split mode, seeds 1 and -2: the same accumulation per lane.
    fresh = ({"w": np.zeros(3), "b": 0.0}, {"w": np.zeros(3), "b": 0.0}) if container == "dict" \
        else ([np.zeros(3), 0.0], [np.zeros(3), 0.0])
    fwd, rev = autodiff_thunk(ReverseSplitNoPrimal, f, Active, BatchDuplicated)
    tape, _, _ = fwd(BatchDuplicated(p, fresh))
    rev(BatchDuplicated(p, fresh), (1.0, -2.0), tape)
    assert float_shadow(fresh[1]) == pytest.approx(-2 * np.sum(np.sin(x)), rel=1e-14)


def test_batch_reverse_takes_a_tuple_of_arrays_and_refuses_a_float_in_a_tuple():
    # Was: a tuple of arrays was refused as if its leaves were immutable numbers.
    x = np.array([0.3, -0.7, 1.1])
    shadows = ((np.zeros(3), np.zeros(3)), (np.zeros(3), np.zeros(3)))
    autodiff(Reverse, lambda p: np.sum(p[0] * p[1]), Active,
             BatchDuplicated((x, 2 * x), shadows))
    for lane in shadows:
        np.testing.assert_allclose(lane[0], 2 * x, rtol=1e-14)
        np.testing.assert_allclose(lane[1], x, rtol=1e-14)
    with pytest.raises(PytreeError, match=r"p\[1\].*tuple"):
        autodiff(Reverse, lambda p: np.sum(p[0]) * p[1], Active,
                 BatchDuplicated((x, 0.5), ((np.zeros(3), 0.0), (np.zeros(3), 0.0))))


# --------------------------------------------------------------------------------------------
# Split mode


def test_split_in_place_function_reversed_twice_after_overwriting_its_input():
    def f(y, x):
        y[0] = x[0] ** 2 + x[1]
        y[1] = x[0] * x[1]
        x[0] = 0.0              # the input is overwritten after its use
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, f, Const, Duplicated, Duplicated)
    x, dx, y, dy = np.array([2.0, 3.0]), np.zeros(2), np.zeros(2), np.zeros(2)
    tape, _, _ = fwd(Duplicated(y, dy), Duplicated(x, dx))
    np.testing.assert_array_equal(y, [7.0, 6.0])
    np.testing.assert_array_equal(x, [0.0, 3.0])
    for seed, want in (([1.0, 0.0], [4.0, 1.0]), ([0.0, 2.0], [6.0, 4.0])):
        dy[:] = seed
        dx[:] = 0.0
        rev(Duplicated(y, dy), Duplicated(x, dx), tape)
        np.testing.assert_allclose(dx, want, rtol=1e-14)
        np.testing.assert_array_equal(dy, [0.0, 0.0])


# --------------------------------------------------------------------------------------------
# checkpoint: plain arrays the segment reads, written before the reverse pass


def _closure_workspace(x):
    c = np.ones(3)
    y = checkpoint(lambda x: np.sin(x) * c)(x)
    c[:] = 5.0
    return np.sum(y * y)


def _plain_argument(x):
    c = np.ones(3)
    y = checkpoint(lambda x, c: np.sin(x) * c)(x, c)
    c *= 3.0
    return np.sum(y * c)


def _index_array(x):
    idx = np.array([0, 1])
    y = checkpoint(lambda h: h[idx] * 3)(x)
    idx[:] = 2
    return np.sum(y ** 2)


def _scanned_xs(x):
    W = np.array([[0.5, -0.2, 0.1], [0.1, 0.3, 0.0], [0.0, 0.2, -0.4]])
    xs = np.ones((10, 3))
    ys = checkpointed_scan(lambda h, xt: (np.tanh(W @ h + xt),) * 2, x, xs, every=3)[1]
    xs[:] = 0.0
    return np.sum(ys ** 2)


@pytest.mark.parametrize("loss", [_closure_workspace, _plain_argument, _index_array,
                                  _scanned_xs])
def test_checkpoint_refuses_a_recomputation_from_arrays_written_after_the_call(loss):
    # Was: the recomputation read the new values and returned their gradient, no error.
    with pytest.raises(CheckpointError, match="written after the call"):
        autodiff(Reverse, loss, Active, Active(np.array([0.3, -0.7, 1.1])))


def test_checkpoint_refuses_a_const_argument_written_after_the_call():
    def loss(x, c):
        y = checkpoint(lambda x: np.sin(x) * c)(x)
        c[:] = 5.0
        return np.sum(y)
    with pytest.raises(CheckpointError, match="Const argument"):
        autodiff(Reverse, loss, Active, Active(np.array([0.3, -0.7])), Const(np.ones(2)))


def test_checkpoint_with_in_place_code_inside_and_outside_matches_finite_differences():
    def segment(h):
        y = np.zeros(3) + h
        y[0] = h[1] * h[2]
        y *= 2
        y[1:] += np.sin(h[:2])
        return y

    def loss(x):
        h = x * 1.0
        out = checkpoint(segment)(h)
        h[1] = 7.0              # the segment's input is written after the call
        h += out
        return np.sum(h ** 2) + np.sum(checkpoint(segment)(h[::-1]))
    x = np.array([0.3, -0.7, 1.1])
    (g,), = autodiff(Reverse, loss, Active, Active(x.copy()))
    np.testing.assert_allclose(g, fd_grad(loss, x), rtol=1e-6)
    tangent, = autodiff(Forward, loss, Duplicated(x.copy(), np.array([1.0, 2.0, 3.0])))
    np.testing.assert_allclose(tangent, fd_grad(loss, x) @ [1.0, 2.0, 3.0], rtol=1e-6)


# --------------------------------------------------------------------------------------------
# Second order: forward over reverse and reverse over forward


SECOND_ORDER = {
    "logsumexp": lambda x: np.log(np.sum(np.exp(x))),
    "slogdet": lambda x: np.linalg.slogdet(np.eye(4) * 2 + np.outer(x, x[::-1]))[1],
    "cumprod": lambda x: np.sum(np.cumprod(x)),
    "fft": lambda x: np.sum(np.abs(np.fft.fft(x)) ** 3),
    "setitem": lambda x: np.sum(np.concatenate([x[1:2] * x[2:3], np.sin(x[:-1]) * x[1:]]) ** 2),
}


@pytest.mark.parametrize("name", sorted(SECOND_ORDER))
def test_forward_over_reverse_and_reverse_over_forward(name):
    f = SECOND_ORDER[name]
    x, v = np.array([0.4, 0.9, 0.2, 1.1]), np.array([1.0, -0.5, 0.3, 2.0])

    def grad(x):
        return autodiff(Reverse, f, Active, Active(x))[0][0]

    def jvp(x):
        return autodiff(Forward, f, Duplicated(x, v))[0]
    want = fd_jvp(grad, [x], [v], eps=1e-5)
    hv, = autodiff(Forward, grad, Duplicated(x.copy(), v.copy()))
    (hv_rof,), = autodiff(Reverse, jvp, Active, Active(x.copy()))
    np.testing.assert_allclose(hv, want, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(hv_rof, want, rtol=1e-6, atol=1e-8)   # the Hessian is symmetric


# --------------------------------------------------------------------------------------------
# tape.testing on user rules


def _sine_rule(scale=1.0, differentiable=False):
    return custom_rule(
        lambda x: np.sin(x), augmented_primal=lambda cfg, x: (np.sin(x), x),
        reverse=lambda cfg, x, g: (np.cos(x) * g * x.dtype.type(scale),),
        forward=lambda cfg, p, t: (np.sin(p[0]), np.cos(p[0]) * t[0]),
        differentiable=differentiable)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
def test_check_rule_passes_a_right_rule_and_catches_a_wrong_one_in_each_precision(dtype):
    # Was: float32 arguments got float32 finite differences (noise) and a right rule failed.
    x = np.linspace(-1.0, 1.3, 5).astype(dtype)
    assert check_rule(_sine_rule(), x) == 12
    with pytest.raises(GradientCheckError, match="derivative of argument 0"):
        check_rule(_sine_rule(scale=1.001), x)


def test_check_grads_catches_a_wrong_reverse_rule_and_explains_once_differentiable():
    x = np.linspace(-1.0, 1.3, 5)
    with pytest.raises(GradientCheckError, match="reverse mode"):
        check_grads(_sine_rule(scale=1.01), x, order=1)
    check_grads(_sine_rule(), x, order=1)
    check_grads(_sine_rule(differentiable=True), x)
    with pytest.raises(OnceDifferentiableError, match=r"differentiable=True.*order=1"):
        check_grads(_sine_rule(), x)
    with pytest.raises(ValueError, match=r"float32.*astype\(np.float64\)"):
        check_grads(_sine_rule(), x.astype(np.float32))
