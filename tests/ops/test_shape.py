"""Shape and layout ops: primal equals NumPy, derivatives agree with finite differences
(forward and reverse, first and second order)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tape.errors import NonDifferentiableError
from tape import Duplicated, ForwardWithPrimal, autodiff
from tape.pytree import flatten
from tape.testing import arrays, check_grads, shapes

FEW = settings(max_examples=20, deadline=None)


def check(f, *args):
    """f on traced arguments computes NumPy's values (shapes, dtypes), and its derivatives are
    right. Returns NumPy's result."""
    expected = f(*args)
    tangents = [Duplicated(a, np.ones_like(a)) for a in args]
    _, got = autodiff(ForwardWithPrimal, f, *tangents)
    exp_leaves, exp_tree = flatten(expected)
    got_leaves, got_tree = flatten(got)
    assert exp_tree == got_tree
    for e, g in zip(exp_leaves, got_leaves):
        assert np.shape(g) == np.shape(e)
        assert np.result_type(g) == np.result_type(e)
        np.testing.assert_array_equal(g, e)
    check_grads(f, *args)
    return expected


@st.composite
def array_axis(draw, min_dims=1, max_dims=3):
    x = draw(arrays(shapes(min_dims=min_dims, max_dims=max_dims)))
    return x, draw(st.integers(-x.ndim, x.ndim - 1))


# -- reshape / transpose family --------------------------------------------------------------------

@FEW
@given(arrays(shapes(min_dims=0)), st.sampled_from("CF"))
def test_reshape_ravel(x, order):
    check(lambda x: np.ravel(x, order=order), x)
    check(lambda x: np.reshape(x, x.shape[::-1] + (1,), order=order), x)
    check(lambda x: x.ravel() * x.flatten(), x)


@FEW
@given(st.data())
def test_transpose_moveaxis_swapaxes(data):
    x = data.draw(arrays(shapes(min_dims=1)))
    ax = st.integers(-x.ndim, x.ndim - 1)
    perm = data.draw(st.permutations(range(x.ndim)))
    a, b, start = data.draw(ax), data.draw(ax), data.draw(st.integers(-x.ndim, x.ndim))
    check(lambda x: np.transpose(x, perm), x)
    check(lambda x: (x.T, x.transpose(), x.transpose(*perm)), x)
    check(lambda x: np.moveaxis(x, a, b), x)
    check(lambda x: np.moveaxis(x, list(range(x.ndim)), perm), x)
    check(lambda x: (np.swapaxes(x, a, b), x.swapaxes(b, a)), x)
    check(lambda x: np.rollaxis(x, a, start), x)


@FEW
@given(arrays(shapes(min_dims=2)))
def test_matrix_transpose(x):
    check(lambda x: (np.matrix_transpose(x), x.mT), x)


@FEW
@given(arrays(shapes(min_dims=0, max_dims=2)), st.integers(0, 2))
def test_expand_dims_squeeze(x, extra):
    axes = tuple(range(-1, -2 - extra, -1))
    check(lambda x: np.expand_dims(x, axes), x)
    check(lambda x: np.expand_dims(x, 0), x)
    check(lambda x: np.squeeze(np.expand_dims(x, axes)), x)
    check(lambda x: np.expand_dims(x, (0, -1)).squeeze(axis=(0, -1)), x)


@FEW
@given(arrays(shapes(min_dims=0, max_dims=3)))
def test_atleast(x):
    check(lambda x: (np.atleast_1d(x), np.atleast_2d(x), np.atleast_3d(x)), x)
    check(lambda x: np.atleast_2d(x, 2.0 * x), x)   # several arguments give a tuple


# -- joining ---------------------------------------------------------------------------------------

@st.composite
def joinable(draw, count=3):
    """Arrays whose shapes agree except along `axis`."""
    base = list(draw(shapes(min_dims=1)))
    axis = draw(st.integers(-len(base), len(base) - 1))
    out = []
    for _ in range(count):
        base[axis] = draw(st.integers(1, 3))
        out.append(draw(arrays(tuple(base))))
    return out, axis


@FEW
@given(joinable())
def test_concatenate_mixes_traced_and_plain(xs_axis):
    (x, c, y), axis = xs_axis
    check(lambda x, y: np.concatenate([x, c, y, x], axis=axis), x, y)
    check(lambda x: np.concatenate((c, x), axis=None), x)
    check(lambda x: np.append(x, c, axis=axis), x)
    check(lambda x: np.append(c, x), x)


@FEW
@given(arrays(shapes(min_dims=0)), st.data())
def test_stack(x, data):
    axis = data.draw(st.integers(-x.ndim - 1, x.ndim))
    c = np.ones_like(x)
    check(lambda x, y: np.stack([x, c, y], axis=axis), x, 2 * x)
    check(lambda x: np.stack((x, x), axis), x)


@FEW
@given(arrays(shapes(min_dims=0, max_dims=3)))
def test_hstack_vstack_dstack_column_stack(x):
    c = np.full(x.shape, 0.5)
    check(lambda x: np.vstack([x, c, x]), x)
    check(lambda x: np.dstack([c, x]), x)
    if x.ndim > 0:
        check(lambda x: np.hstack([x, c, x]), x)
    if x.ndim <= 2:
        check(lambda x: np.column_stack([x, c]), x)


def test_joining_plain_lists_and_int_arrays():
    v = np.array([0.5, -1.0])
    f = lambda v: np.hstack([v, [1.0, 2.0], np.arange(2)])
    assert check(f, v).tolist() == [0.5, -1.0, 1.0, 2.0, 0.0, 1.0]
    check(lambda v: np.column_stack([v, [3.0, 4.0]]), v)
    with pytest.raises(ValueError, match="same shape"):
        autodiff(ForwardWithPrimal, lambda v: np.stack([v, np.ones(3)]), Duplicated(v, v))


# -- splitting -------------------------------------------------------------------------------------

@FEW
@given(array_axis(), st.integers(1, 4))
def test_split_array_split(xa, sections):
    x, axis = xa
    check(lambda x: np.array_split(x, sections, axis=axis), x)
    n = x.shape[axis]
    check(lambda x: np.split(x, n, axis=axis), x)
    check(lambda x: np.split(x, [1, -1], axis=axis)[::2], x)   # some pieces unused
    check(lambda x: np.unstack(x, axis=axis), x)


def test_split_with_unsorted_indices_overlaps_like_numpy():
    x = np.arange(10.0) / 3
    # pieces x[0:6], x[6:2] (empty) and x[2:10] overlap: cotangents add up where they overlap
    pieces = check(lambda x: np.split(x, [6, 2]), x)
    assert [len(p) for p in pieces] == [6, 0, 8]
    check(lambda x: np.split(x * x, [6, 2])[2] ** 2, x)


@FEW
@given(arrays(shapes(min_dims=3, max_dims=3)))
def test_hsplit_vsplit_dsplit(x):
    check(lambda x: np.hsplit(x, [1]), x)
    check(lambda x: np.vsplit(x, x.shape[0]), x)
    check(lambda x: np.dsplit(x, [2]), x)
    check(lambda x: np.hsplit(x[0, 0], x.shape[2]), x)


def test_split_errors_like_numpy():
    x = np.ones((3, 4))
    with pytest.raises(ValueError, match="equal division"):
        autodiff(ForwardWithPrimal, lambda x: np.split(x, 2), Duplicated(x, x))
    with pytest.raises(ValueError, match="2 or more"):
        autodiff(ForwardWithPrimal, lambda x: np.vsplit(x[0], 2), Duplicated(x, x))


# -- flips, rotations, rolls -----------------------------------------------------------------------

@FEW
@given(array_axis(), st.integers(-3, 5))
def test_flip_rot90_roll(xa, k):
    x, axis = xa
    check(lambda x: (np.flip(x), np.flip(x, axis), np.flipud(x)), x)
    check(lambda x: np.roll(x, k, axis=axis), x)
    check(lambda x: np.roll(x, k), x)
    if x.ndim >= 2:
        plane = (axis, (axis + 1) % x.ndim)
        check(lambda x: (np.fliplr(x), np.rot90(x, k), np.rot90(x, k, axes=plane)), x)
        check(lambda x: np.roll(x, (k, 1), axis=(0, -1)), x)


def test_rot90_errors():
    x = np.ones((2, 3))
    with pytest.raises(ValueError, match="different"):
        autodiff(ForwardWithPrimal, lambda x: np.rot90(x, 1, (1, -1)), Duplicated(x, x))


# -- repetition ------------------------------------------------------------------------------------

@FEW
@given(array_axis(), st.integers(0, 3), st.data())
def test_repeat_tile(xa, r, data):
    x, axis = xa
    counts = data.draw(st.lists(st.integers(0, 3), min_size=x.shape[axis],
                                max_size=x.shape[axis]))
    reps = data.draw(st.lists(st.integers(1, 3), min_size=0, max_size=4))
    check(lambda x: np.repeat(x, r, axis=axis), x)
    check(lambda x: x.repeat(counts, axis=axis), x)
    check(lambda x: np.repeat(x, r + 1), x)
    check(lambda x: np.tile(x, reps), x)
    check(lambda x: np.tile(x, r + 1), x)


def test_repeat_with_zero_counts_gives_zero_gradient():
    from tape import Active, Reverse
    x = np.array([1.0, 2.0, 3.0])
    (g,), = autodiff(Reverse, lambda x: np.sum(np.repeat(x, [2, 0, 3]) ** 2), Active, Active(x))
    np.testing.assert_allclose(g, [4.0, 0.0, 18.0], atol=1e-11)


# -- triangles, differences ------------------------------------------------------------------------

@FEW
@given(arrays(shapes(min_dims=1, max_dims=3)), st.integers(-3, 3))
def test_triu_tril(x, k):
    check(lambda x: (np.triu(x, k), np.tril(x, k)), x)
    check(lambda x: np.triu(x * x), x)


@FEW
@given(array_axis(), st.integers(0, 3))
def test_diff(xa, n):
    x, axis = xa
    check(lambda x: np.diff(x, n=n, axis=axis), x)
    edge = np.ones_like(np.take(x, [0], axis=axis))
    check(lambda x: np.diff(x, axis=axis, prepend=0.5, append=edge), x)
    check(lambda x, y: np.diff(x, n, axis=axis, prepend=y), x, 2 * edge)


def test_unsupported_out_raises():
    x = np.ones(2)
    with pytest.raises(NonDifferentiableError, match="out="):
        autodiff(ForwardWithPrimal, lambda x: np.concatenate([x, x], out=np.zeros(4)),
                 Duplicated(x, x))
