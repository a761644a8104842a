"""Batch mode: W directions or seeds in one pass, equal to W single passes."""
import numpy as np
import pytest
from hypothesis import given, settings

from tape import (Active, ActivityError, BatchDuplicated, BatchDuplicatedNoNeed, Const,
                  Duplicated, Forward, ForwardWithPrimal, MixedDuplicated, Reverse,
                  autodiff, custom_rule)
from tape.batching import Batched
from tape.testing import arrays

RNG = np.random.default_rng(3)
A = RNG.standard_normal((3, 4))

FUNCTIONS = {
    "elementwise": lambda x: np.sin(x) * np.exp(x) + x ** 2,
    "matmul": lambda x: np.tanh(A @ x),
    "vector_matmul": lambda x: x @ A.T,
    "reductions": lambda x: np.sum(x * x) * np.max(x) + np.mean(np.cumsum(x)),
    "shape": lambda x: np.concatenate([x[::-1], np.reshape(x, (2, 2)).T.ravel()]) * 2,
    "indexing": lambda x: x[np.array([0, 2, 2])] * x[1:3].sum(),
    "where": lambda x: np.where(x > 0, x ** 3, -x),
    "outer_einsum": lambda x: np.einsum("i,j->ij", x, np.sin(x)),
    "solve": lambda x: np.linalg.solve(np.eye(4) * 3 + np.outer(x, x), x),
    "softmax_like": lambda x: np.exp(x) / np.sum(np.exp(x)),
    "sort": lambda x: np.sort(x) * np.arange(4.0),
    "prod": lambda x: np.prod(x) + np.cumprod(x),
    "buffer": lambda x: _buffer(x),
}


def _buffer(x):
    out = np.zeros_like(x)
    out[0] = x[3]
    out[1:] = x[:-1] * 2
    return out * x


X = np.array([0.4, -1.3, 0.8, 1.9])


def _single_forward(f, x, d):
    return autodiff(Forward, f, Duplicated(x, d))[0]


@pytest.mark.parametrize("name", FUNCTIONS)
def test_batch_forward_equals_single_directions(name):
    f = FUNCTIONS[name]
    dirs = tuple(RNG.standard_normal(4) for _ in range(3))
    tangents, primal = autodiff(ForwardWithPrimal, f, BatchDuplicated(X, dirs))
    assert isinstance(tangents, tuple) and len(tangents) == 3
    np.testing.assert_allclose(primal, f(X), atol=1e-11)
    for t, d in zip(tangents, dirs):
        np.testing.assert_allclose(t, _single_forward(f, X, d), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_batch_reverse_equals_single_sweeps(name):
    f = FUNCTIONS[name]
    y = f(X)
    seeds = tuple(RNG.standard_normal(y.shape) for _ in range(3))

    def f_(out, x):
        out[...] = f(x)
    outs, shadows = np.zeros_like(y), tuple(np.zeros(4) for _ in range(3))
    autodiff(Reverse, f_, Const, BatchDuplicated(outs, tuple(s.copy() for s in seeds)),
             BatchDuplicated(X.copy(), shadows))
    for seed, got in zip(seeds, shadows):
        (g,), = autodiff(Reverse, lambda x: np.sum(f(x) * seed), Active, Active(X))
        np.testing.assert_allclose(got, g, rtol=1e-12, atol=1e-12)


def test_active_arguments_get_w_tuples_in_batch_reverse():
    def f(y, x, c):
        y[:] = np.sin(x) * c
    y, x = np.zeros(2), np.array([0.2, 0.9])
    seeds = (np.array([1.0, 0.0]), np.array([0.0, 2.0]))
    shadows = (np.zeros(2), np.zeros(2))
    (_, _, dc), = autodiff(Reverse, f, Const, BatchDuplicated(y, seeds),
                           BatchDuplicated(x, shadows), Active(3.0))
    assert isinstance(dc, tuple) and len(dc) == 2
    np.testing.assert_allclose(dc, [np.sin(0.2), 2 * np.sin(0.9)], atol=1e-12)
    np.testing.assert_allclose(shadows[0], [3 * np.cos(0.2), 0.0], atol=1e-12)
    np.testing.assert_allclose(shadows[1], [0.0, 6 * np.cos(0.9)], atol=1e-11)


def test_batch_forward_writes_w_tangents_into_overwritten_buffers():
    def f(y, x):
        y[:] = x ** 2
    y, x = np.zeros(2), np.array([1.0, 3.0])
    dys = (np.full(2, 7.0), np.full(2, 7.0))
    autodiff(Forward, f, BatchDuplicated(y, dys), BatchDuplicated(x, (np.ones(2), np.eye(2)[1])))
    np.testing.assert_array_equal(y, [1.0, 9.0])
    np.testing.assert_array_equal(dys[0], [2.0, 6.0])
    np.testing.assert_array_equal(dys[1], [0.0, 6.0])


def test_batch_no_need_returns_only_tangents():
    out = autodiff(ForwardWithPrimal, lambda x: x * 2.0, BatchDuplicatedNoNeed,
                   BatchDuplicated(np.ones(2), (np.ones(2), np.zeros(2))))
    assert len(out) == 1
    np.testing.assert_array_equal(out[0][0], [2.0, 2.0])


def test_scalar_batch_forward():
    (t,) = autodiff(Forward, lambda x: x ** 3, BatchDuplicated(2.0, (1.0, 0.5)))
    assert t == (12.0, 6.0)


def test_opaque_rule_runs_once_per_direction():
    calls = []

    def fwd(cfg, xs, ts):
        calls.append(type(ts[0]))
        return np.asarray(xs[0]) ** 2, 2 * np.asarray(xs[0]) * np.asarray(ts[0])
    square = custom_rule(lambda x: x ** 2, augmented_primal=lambda cfg, x: (x ** 2, x),
                         reverse=lambda cfg, x, g: (2 * x * g,), forward=fwd)
    (t,) = autodiff(Forward, lambda x: np.sum(square(x)),
                    BatchDuplicated(X, (np.ones(4), np.eye(4)[0])))
    np.testing.assert_allclose(t, [np.sum(2 * X), 2 * X[0]], atol=1e-11)


@settings(max_examples=10, deadline=None)
@given(arrays(shape=(2, 3)))
def test_batched_value_shape_semantics(data):
    b = Batched(np.stack([data, 2 * data]))
    assert b.shape == (2, 3) and b.ndim == 2 and b.width == 2
    np.testing.assert_allclose(np.sum(b, axis=-1).data[1], 2 * data.sum(axis=-1), atol=1e-11)
    np.testing.assert_array_equal(np.transpose(b).data[0], data.T)
    np.testing.assert_allclose((b @ np.ones(3)).data[1], 2 * data @ np.ones(3), atol=1e-11)
    np.testing.assert_allclose((np.ones((4, 2)) @ b).data[0], np.ones((4, 2)) @ data, atol=1e-12)
    np.testing.assert_array_equal(np.reshape(b, (3, 2)).data[1], 2 * data.reshape(3, 2))
    np.testing.assert_array_equal(b[:, 1].data[0], data[:, 1])
    np.testing.assert_array_equal(b[np.array([1, 0]), np.array([0, 2])].data[1],
                               2 * data[np.array([1, 0]), np.array([0, 2])])


def test_mixed_duplicated_returns_immutable_leaves_and_accumulates_arrays():
    params = {"w": np.array([1.0, 2.0]), "scale": 3.0}
    shadow = {"w": np.zeros(2), "scale": 0.0}
    f = lambda p: p["scale"] * np.sum(p["w"] ** 2)    # noqa: E731
    (d,), = autodiff(Reverse, f, Active, MixedDuplicated(params, shadow))
    np.testing.assert_allclose(shadow["w"], [6.0, 12.0], atol=1e-11)
    assert d["scale"] == pytest.approx(5.0) and d["w"] is None
    assert shadow["scale"] == 0.0


def test_mixed_duplicated_tuple_of_float_and_array():
    x = (2.0, np.array([1.0, -1.0]))
    dx = (0.0, np.zeros(2))
    (d,), = autodiff(Reverse, lambda t: t[0] * np.sum(t[1] * 3.0), Active,
                     MixedDuplicated(x, dx))
    assert d[0] == pytest.approx(0.0) and d[1] is None
    np.testing.assert_allclose(dx[1], [6.0, 6.0], atol=1e-11)


# -- errors ------------------------------------------------------------------------------------
def test_mixed_widths_raise():
    with pytest.raises(ActivityError, match="batch width mismatch: argument 0 .* width 2, "
                                            "argument 1 .* width 3"):
        autodiff(Forward, lambda x, y: x * y, BatchDuplicated(np.ones(2), (np.ones(2),) * 2),
                 BatchDuplicated(np.ones(2), (np.ones(2),) * 3))
    with pytest.raises(ActivityError, match="argument 1 .* is Duplicated \\(one shadow\\) beside "
                                            "BatchDuplicated arguments \\(width 2\\)"):
        autodiff(Reverse, lambda x, y: np.sum(x * y), Active,
                 BatchDuplicated(np.ones(2), (np.zeros(2),) * 2), Duplicated(np.ones(2),
                                                                             np.zeros(2)))


def test_batch_shadow_of_wrong_shape_names_the_direction():
    with pytest.raises(ActivityError, match="shadow 1 of argument 0 .* has shape \\(3,\\)"):
        autodiff(Forward, lambda x: x * 2, BatchDuplicated(np.ones(2), (np.ones(2), np.ones(3))))


def test_batch_duplicated_needs_a_tuple():
    with pytest.raises(TypeError, match="tuple of shadows"):
        BatchDuplicated(np.ones(2), np.ones(2))


def test_stack_of_batched_values_on_a_negative_axis_while_tracing():
    """The batched np.stack must recognise itself while np.stack is wrapped (tracing)."""
    from tape import Active, Reverse, autodiff
    from tape.batching import Batched
    a = Batched(np.arange(6.0).reshape(2, 3))
    b = Batched(np.arange(6.0, 12.0).reshape(2, 3))
    shapes = []

    def f(x):
        shapes.append(np.stack([a, b], axis=-1).data.shape)
        return np.sum(x)
    autodiff(Reverse, f, Active, Active(np.ones(2)))
    assert shapes == [(2, 3, 2)] and np.stack([a, b], axis=-1).data.shape == (2, 3, 2)
