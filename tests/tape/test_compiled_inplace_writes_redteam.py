"""A compiled adjoint writes into cotangents it owns: ``ct += term``, ``ct[index] += g`` for
gathers and, for ``y[index] = v``, the written entries of the buffer's cotangent zeroed in
place (`setitem_rev_in_place`). Programs whose value cotangent is a view of the buffer's
cotangent (overlapping slices), writes through views of a buffer, NumPy's in-place functions,
indices that change per call, 0-d buffers, lower precisions, writes into `Duplicated`
arguments (their shadows are seeds), batch and split modes: compiled results equal eager ones
(bit for bit in float64), central differences, at every one of several calls with new
inputs, and no caller array is written except the shadows the API accumulates into."""
import numpy as np
import pytest

import tape
from numeric_checks import fd_gradient_of
from tape import (Active, BatchDuplicated, Const, Duplicated, Reverse, ReverseSplitWithPrimal,
                  autodiff, autodiff_thunk)

RNG = np.random.default_rng(7)


def _check(f, shapes, dtype=np.float64, in_place=True, calls=3):
    """Compiled Reverse against eager Reverse and central differences, `calls` times."""
    g = tape.compile(Reverse, f, Active, *[Duplicated] * len(shapes))
    for _ in range(calls):
        xs = [RNG.standard_normal(s).astype(dtype) for s in shapes]
        kept = [x.copy() for x in xs]
        got = [np.zeros_like(x) for x in xs]
        want = [np.zeros_like(x) for x in xs]
        g(*[Duplicated(x, d) for x, d in zip(xs, got)])
        autodiff(Reverse, f, Active, *[Duplicated(x.copy(), d) for x, d in zip(kept, want)])
        for x, k in zip(xs, kept):
            np.testing.assert_array_equal(x, k)   # f does not write its arguments
        for i in range(len(xs)):
            if dtype == np.float64:
                np.testing.assert_array_equal(got[i], want[i])
                fd = fd_gradient_of(f, [k.copy() for k in kept], i)
                np.testing.assert_allclose(got[i], fd, rtol=1e-5, atol=1e-6)
            else:
                np.testing.assert_allclose(got[i], want[i], rtol=1e-3, atol=1e-3)
    assert g.stats.eager_calls == 0
    if in_place:
        assert "setitem_rev_in_place" in str(g)
    return g


# -- the value's cotangent is a view of the buffer's ---------------------------------------------
def overlapping(x):
    y = x * 2.0
    y[1:3] = y[0:2]                    # the value read from the buffer written
    y[0] = np.sum(y * y)
    z = y * y
    z[::2] = z[1::2] * x[:2]           # strided, the value a view of the other half
    return np.sum(z * z)


def loop_of_overlapping_writes(x):
    y = x * 1.0
    for k in range(5):
        y[k % 3] = y[(k + 1) % 3] * y[(k + 2) % 3]
        y[(k + 1) % 3:] = y[(k + 1) % 3:] * 0.9   # a slice written with itself scaled
    return np.sum(y * y)


def indices_of_every_kind(x):
    y = np.sin(x)
    y[[0, 0, 2]] = x[1:4] * 3.0        # repeated: NumPy keeps the last
    y[-1] = x[0] ** 2                  # negative
    y[x > 0] = 0.5 * x[x > 0] ** 2     # boolean
    z = y * y
    z[np.array([3, 1])] = z[np.array([1, 3])]   # fancy, the value a copy
    return np.sum(z * x)


def ellipsis_and_newaxis(x):
    y = x * 1.0
    y[...] = y[..., ::-1]
    y[None, 0] = x[None, 1]
    y[..., 1:] = y[..., :-1]
    z = y * y
    z[..., None, 2] = x[:, :1] * 2.0
    return np.sum(z * x)


@pytest.mark.parametrize("f, shape", [(overlapping, (4,)), (loop_of_overlapping_writes, (3,)),
                                      (indices_of_every_kind, (5,)),
                                      (ellipsis_and_newaxis, (2, 3))])
def test_writes_whose_value_reads_the_buffer(f, shape):
    _check(f, [shape])


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_overlapping_writes_in_lower_precision(dtype):
    _check(overlapping, [(4,)], dtype=dtype)


# -- writes through views of a buffer --------------------------------------------------------------
def through_views(x):
    y = np.cos(x) * 1.0
    y[0][1] = x[1, 2] * 3.0
    y.T[2] = x[0] * 2.0
    y.reshape(-1)[4] = x[0, 0] ** 2
    r = y.ravel()
    r[5] = x[2, 1] * r[0]
    return np.sum(y * y) + np.sum(r * 3.0)


def through_a_view_after_a_read(x):
    y = np.zeros_like(x)
    v = y[0:3]
    v[0] = x[0]
    s = np.sin(y)                      # y saved as it is now
    v[1] = x[1] * 2.0                  # then written through the older view
    t = y.reshape(2, 2).T
    t[0, 1] = s[3] * x[3]
    return np.sum(s * y)


@pytest.mark.parametrize("f, shape", [(through_views, (3, 3)),
                                      (through_a_view_after_a_read, (4,))])
def test_writes_through_views_of_a_buffer(f, shape):
    _check(f, [shape])


def numpy_in_place_functions(x):
    y = np.sin(x) * 1.0
    np.add.at(y, [0, 0, 2], x[:3] ** 2)
    z = y * y
    np.put(z, [1, 3], x[1:3])
    np.copyto(z, x * 3.0, where=x > 0)
    w = z * x
    np.putmask(w, x < -0.5, x * 2.0)
    w[1:3] = w[0:2]
    return np.sum(w * w)


def test_numpy_in_place_functions_then_a_write():
    _check(numpy_in_place_functions, [(4,)])


def stacked_and_concatenated(x):
    s = np.stack([x, x * 2.0])
    t = s * s
    t[0, 1] = s[1, 0]
    c = np.concatenate([t[0], t[1], x])
    c[2:5] = c[0:3] * x[:3]
    b = np.broadcast_to(x, (2, 3)) * 1.0
    b[0] = c[1:4]
    return np.sum(c * c) + np.sum(b * b)


def test_writes_into_stacks_concatenations_and_broadcasts():
    _check(stacked_and_concatenated, [(3,)])


def dynamic_indices(x):
    y = np.sin(x)
    y[(x > 0).astype(np.intp)] = x * 3.0      # which entries repeat changes per call
    z = y * y
    z[np.argmax(x)] = x[0]
    z[np.argsort(x)[:2]] = z[np.argsort(x)[2:4]]
    return np.sum(z * x)


def test_indices_computed_from_each_calls_values():
    """The index arrays (an integer cast of a comparison, argmax, argsort) are recorded
    nondiff steps, read at each call: one trace serves every call."""
    g = _check(dynamic_indices, [(5,)], calls=6)
    assert g.stats.traces == 1 and g.stats.guard_failures == 0, g.stats


def zero_d_buffers(x):
    y = np.zeros_like(x[0])
    y[()] = x[0] * x[1]
    w = np.zeros_like(y)
    w[...] = y * y
    w[...] = w * 2.0
    v = x * 1.0
    v[1] = w
    v[2] = v[1] * v[0]
    return np.sum(v * v) * x[2]


def test_zero_dimensional_buffers_and_their_writes():
    _check(zero_d_buffers, [(3,)])


# -- writes into Duplicated arguments: their shadows are seeds -----------------------------------
def _check_writes(f, shapes, ret):
    """f writes into some of its arguments: compiled and eager give the same buffers and
    shadows, and the shadows equal central differences of ret + sum(seed * new buffer)."""
    g = tape.compile(Reverse, f, ret, *[Duplicated] * len(shapes))
    for _ in range(3):
        xs = [RNG.standard_normal(s) for s in shapes]
        seeds = [RNG.standard_normal(s) for s in shapes]
        news = [x.copy() for x in xs]
        f(*news)
        written = [not np.array_equal(a, b) for a, b in zip(news, xs)]

        def loss(*a):
            a = [v.copy() for v in a]
            r = f(*a)
            return (float(r) if ret is Active else 0.0) + sum(
                np.sum(seeds[i] * a[i]) for i in range(len(a)) if written[i])
        xc, xe = [x.copy() for x in xs], [x.copy() for x in xs]
        dc, de = [s.copy() for s in seeds], [s.copy() for s in seeds]
        g(*[Duplicated(a, b) for a, b in zip(xc, dc)])
        autodiff(Reverse, f, ret, *[Duplicated(a, b) for a, b in zip(xe, de)])
        for i in range(len(xs)):
            np.testing.assert_array_equal(xc[i], news[i])
            np.testing.assert_array_equal(xe[i], news[i])
            np.testing.assert_array_equal(dc[i], de[i])
            fd = fd_gradient_of(loss, [x.copy() for x in xs], i)
            np.testing.assert_allclose(dc[i], fd if written[i] else seeds[i] + fd,
                                       rtol=1e-5, atol=1e-6)
    assert g.stats.eager_calls == 0


def transpose_itself(y, x):
    y[...] = y.T                       # the seed reaches y's old value through a view
    return np.sum(x * y)


def reverse_itself(y, x):
    y[...] = y[::-1]
    y[1:3] = y[0:2]
    return np.sum(x * y)


def shift_and_views(y, x):
    s = np.sin(y)
    y[1:] = y[:-1] * x[1:]
    r = y.ravel()
    r[0] = s[1]
    return np.sum(s * y)


def both_written(y, x):
    y[...] = x
    x[0] = y[1] * 2.0
    y[[0, 0, 1]] = x[:3]
    return np.sum(y * x)


@pytest.mark.parametrize("f, shapes", [(transpose_itself, [(3, 3), (3, 3)]),
                                       (reverse_itself, [(4,), (4,)]),
                                       (shift_and_views, [(4,), (4,)]),
                                       (both_written, [(3,), (3,)])])
def test_writes_into_duplicated_arguments_seeded_by_their_shadows(f, shapes):
    _check_writes(f, shapes, Active)


def written_only(y, x):
    y[...] = y.reshape(2, 2).T.reshape(4)
    y[:] = y + x
    y[1] = y[2]


def test_an_in_place_function_with_a_const_return():
    _check_writes(written_only, [(4,), (4,)], Const)


# -- batch and split modes -------------------------------------------------------------------------
def test_batch_mode_shadows_through_overlapping_writes():
    g = tape.compile(Reverse, overlapping, Active, BatchDuplicated)
    for _ in range(3):
        x = RNG.standard_normal(4)
        base = RNG.standard_normal(4)
        got = (np.zeros(4), base.copy())
        want = (np.zeros(4), base.copy())
        g(BatchDuplicated(x.copy(), got))
        autodiff(Reverse, overlapping, Active, BatchDuplicated(x.copy(), want))
        fd = fd_gradient_of(overlapping, [x.copy()], 0)
        for a, b, start in zip(got, want, (0.0, base)):
            np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)
            np.testing.assert_allclose(a, start + fd, rtol=1e-5, atol=1e-5)


def array_result(x):
    y = x * 2.0
    y[1:3] = y[0:2] * x[2:4]
    z = y * y
    z[0] = x[3]
    z[2:] = z[1:3]
    return z


def test_split_mode_seed_is_not_written_and_a_second_sweep_repeats():
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, array_result, Duplicated, Duplicated)
    for _ in range(3):
        x, dx = RNG.standard_normal(4), np.zeros(4)
        tp, _, _ = fwd(Duplicated(x, dx))
        seed = RNG.standard_normal(4)
        kept = seed.copy()
        rev(Duplicated(x, dx), seed, tp)
        once = dx.copy()
        rev(Duplicated(x, dx), seed, tp)
        np.testing.assert_array_equal(seed, kept)
        fd = fd_gradient_of(lambda v: np.sum(kept * array_result(v)), [x.copy()], 0)
        np.testing.assert_allclose(once, fd, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(dx, 2 * once, rtol=1e-14)
