"""Indexing, assignment and gathers, and Enzyme's in-place semantics: primal equals NumPy,
derivatives agree with finite differences (forward and reverse, first and second order)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from tape import (Active, Const, Duplicated, Forward, ForwardWithPrimal, NonDifferentiableError,
                  Reverse, autodiff)
from tape.pytree import flatten
from tape.testing import arrays, check_grads, shapes

FEW = settings(max_examples=20, deadline=None)


def check(f, *args):
    """f on traced arguments computes NumPy's values, and its derivatives are right."""
    expected = f(*args)
    _, got = autodiff(ForwardWithPrimal, f, *[Duplicated(a, np.ones_like(a)) for a in args])
    exp_leaves, exp_tree = flatten(expected)
    got_leaves, got_tree = flatten(got)
    assert exp_tree == got_tree
    for e, g in zip(exp_leaves, got_leaves):
        assert np.shape(g) == np.shape(e) and np.result_type(g) == np.result_type(e)
        np.testing.assert_array_equal(g, e)
    check_grads(f, *args)
    return expected


# -- index strategies ------------------------------------------------------------------------------

@st.composite
def basic_index(draw, shape):
    """ints, slices (negative steps, out-of-range bounds), None and Ellipsis."""
    items = []
    for n in shape:
        kind = draw(st.sampled_from(["int", "slice", "all"]))
        if kind == "int":
            items.append(draw(st.integers(-n, n - 1)))
        elif kind == "slice":
            bound = st.none() | st.integers(-n - 1, n + 1)
            step = draw(st.sampled_from([None, 1, 2, -1, -2]))
            items.append(slice(draw(bound), draw(bound), step))
        else:
            items.append(slice(None))
    if draw(st.booleans()):
        items.insert(draw(st.integers(0, len(items))), None)
    if draw(st.booleans()):
        items = items[:draw(st.integers(0, len(items)))] + [Ellipsis]
    return tuple(items)


@st.composite
def advanced_index(draw, shape):
    """Integer arrays (repeats and negative entries) mixed with slices; one or two arrays."""
    ndim = len(shape)
    picks = draw(st.lists(st.integers(0, ndim - 1), min_size=1, max_size=2, unique=True))
    idx_shape = draw(shapes(min_dims=1, max_dims=2, max_side=3))
    items = []
    for d, n in enumerate(shape):
        if d in picks:
            items.append(draw(hnp.arrays(np.intp, idx_shape, elements=st.integers(-n, n - 1))))
        else:
            items.append(draw(st.sampled_from([slice(None), slice(None, None, -1),
                                               slice(1, None)])))
    return tuple(items)


@st.composite
def value_shape(draw, target):
    """A shape that broadcasts to `target` (what an assignment accepts)."""
    k = draw(st.integers(0, len(target)))
    return tuple(draw(st.sampled_from([1, n])) for n in target[len(target) - k:])


def points(shape):
    return arrays(shape, low=0.2, high=2.0)


# -- x[index] --------------------------------------------------------------------------------------

@FEW
@given(st.data())
def test_getitem_basic(data):
    x = data.draw(points(data.draw(shapes(min_dims=1))))
    index = data.draw(basic_index(x.shape))
    check(lambda x: x[index], x)
    check(lambda x: np.sin(x[index]) * x[index], x)


@FEW
@given(st.data())
def test_getitem_advanced_with_repeats(data):
    x = data.draw(points(data.draw(shapes(min_dims=1))))
    index = data.draw(advanced_index(x.shape))
    check(lambda x: x[index] ** 2, x)
    check(lambda x: x[None][(slice(None),) + index], x)


@FEW
@given(st.data())
def test_getitem_boolean_mask(data):
    x = data.draw(points(data.draw(shapes(min_dims=1))))
    k = data.draw(st.integers(1, x.ndim))
    mask = data.draw(hnp.arrays(bool, x.shape[:k]))
    check(lambda x: x[mask] * x[mask], x)
    check(lambda x: x[..., None][mask], x)


def test_repeated_indices_accumulate():
    x = np.array([1.0, 2.0, 3.0])
    (g,), = autodiff(Reverse, lambda x: np.sum(x[[0, 0, 2, 0]] * np.array([1.0, 2.0, 3.0, 4.0])),
                     Active, Active(x))
    np.testing.assert_array_equal(g, [7.0, 0.0, 3.0])


def test_mixed_index_moves_advanced_axes_like_numpy():
    x = np.arange(24.0).reshape(2, 3, 4) / 10
    y = check(lambda x: x[[1, 0, 1], :, [3, 3, -1]], x)   # separated arrays: their axis first
    assert y.shape == (3, 3)
    check(lambda x: x[None, ..., [2, 2], ::-2], x)
    check(lambda x: x[1, np.array([[True, False, True], [False, True, True]])[0]], x)


# -- x[index] = value ------------------------------------------------------------------------------

def assign(index, value_fn):
    def f(x, v):
        y = x.copy()
        y[index] = value_fn(v)
        return np.sin(y) * y
    return f


@FEW
@given(st.data())
def test_setitem_basic_broadcasting(data):
    x = data.draw(points(data.draw(shapes(min_dims=1))))
    index = data.draw(basic_index(x.shape))
    target = x[index].shape
    v = data.draw(points(data.draw(value_shape(target))))
    check(assign(index, lambda v: 2.0 * v), x, v)
    check(assign(index, lambda v: 0.5), x, v)                       # plain scalar
    check(assign(index, lambda v: v.sum()), x, v)                   # traced scalar


@FEW
@given(st.data())
def test_setitem_advanced_and_boolean(data):
    x = data.draw(points(data.draw(shapes(min_dims=1))))
    index = data.draw(advanced_index(x.shape))
    target = x[index].shape
    v = data.draw(points(data.draw(value_shape(target))))
    # With repeated indices NumPy keeps one of the values; only that one gets a derivative.
    check(assign(index, lambda v: v * v), x, v)
    mask = data.draw(hnp.arrays(bool, x.shape))
    check(assign(mask, lambda v: v.sum()), x, v)
    w = data.draw(points((int(mask.sum()),)))
    check(assign(mask, lambda w: w ** 2), x, w)


def test_setitem_repeated_index_last_value_wins():
    x, v = np.ones(3), np.array([2.0, 3.0])
    f = assign(([1, 1],), lambda v: v)
    assert check(f, x, v)[1] == np.sin(3.0) * 3.0
    (_, gv), = autodiff(Reverse, lambda x, v: f(x, v).sum(), Active, Active(x), Active(v))
    assert gv[0] == 0.0 and gv[1] != 0.0


def test_setitem_list_of_traced_scalars():
    x = np.array([0.5, 1.5, 2.5])
    check(lambda x: assign(slice(0, 2), lambda x: [x[2], x[0] * x[1]])(x, x), x)


# -- gathers ---------------------------------------------------------------------------------------

@FEW
@given(st.data())
def test_take(data):
    x = data.draw(points(data.draw(shapes(min_dims=1))))
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    n = x.shape[axis]
    idx = data.draw(hnp.arrays(np.intp, data.draw(shapes(min_dims=0, max_dims=2)),
                               elements=st.integers(-n, n - 1)))
    far = data.draw(hnp.arrays(np.intp, 4, elements=st.integers(-3 * n, 3 * n)))
    check(lambda x: np.take(x, idx, axis=axis), x)
    check(lambda x: x.take(far, axis=axis, mode="wrap") * x.take(far, axis, mode="clip"), x)
    check(lambda x: np.take(x, idx % x.size), x)


@FEW
@given(st.data())
def test_take_and_put_along_axis(data):
    x = data.draw(points(data.draw(shapes(min_dims=1))))
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    n = x.shape[axis]
    shape = list(x.shape)
    shape[axis] = data.draw(st.integers(1, 4))
    idx = data.draw(hnp.arrays(np.intp, tuple(shape), elements=st.integers(-n, n - 1)))
    order = np.argsort(data.draw(hnp.arrays(np.float64, x.shape, unique=True,
                                            elements=st.floats(-9, 9))), axis=axis)
    check(lambda x: np.take_along_axis(x, idx, axis=axis), x)
    check(lambda x: np.take_along_axis(x, order, axis), x)

    def put(x):
        y = np.zeros_like(x)
        np.put_along_axis(y, order, x ** 2, axis)
        return y
    check(put, x)


@FEW
@given(st.data())
def test_diagonal_trace_diag(data):
    x = data.draw(points(data.draw(shapes(min_dims=2))))
    a1, a2 = data.draw(st.lists(st.integers(-x.ndim, x.ndim - 1), min_size=2, max_size=2,
                                unique_by=lambda a: a % x.ndim))
    k = data.draw(st.integers(-4, 4))
    check(lambda x: np.diagonal(x, k, a1, a2), x)
    check(lambda x: (np.trace(x, k, a1, a2), x.trace(), x.diagonal(k)), x)
    m, v = x.reshape(x.shape[0], -1), x.ravel()
    check(lambda m: np.diag(m, k), m)
    check(lambda v: np.diag(v, k), v)
    check(lambda v: np.diag(np.diag(v, k) * 2, k), v)


@FEW
@given(st.data())
def test_pad(data):
    x = data.draw(points(data.draw(shapes(min_dims=1))))
    widths = data.draw(hnp.arrays(np.intp, (x.ndim, 2), elements=st.integers(0, 3)))
    mode = data.draw(st.sampled_from(["edge", "reflect", "symmetric", "wrap"]))
    if mode == "reflect":
        widths = np.minimum(widths, np.array(x.shape)[:, None] - 1)
    check(lambda x: np.pad(x, widths), x)
    check(lambda x: np.pad(x, widths, constant_values=2.5), x)
    check(lambda x: np.pad(x, widths, mode=mode), x)
    check(lambda x, c: np.pad(x, widths, constant_values=c[0]), x, np.array([1.5]))
    if mode != "reflect" or min(x.shape) > 1:
        check(lambda x: np.pad(x, 1, mode=mode), x)


def test_pad_unsupported_mode_names_it():
    x = np.ones(3)
    for mode in ("empty",):   # linear_ramp and the statistics: tests/ops/test_added_rules.py
        with pytest.raises(NotImplementedError, match=mode):
            autodiff(Forward, lambda x: np.pad(x, 1, mode=mode), Duplicated(x, x))
    with pytest.raises(NotImplementedError, match="odd"):
        autodiff(Forward, lambda x: np.pad(x, 1, mode="reflect", reflect_type="odd"),
                 Duplicated(x, x))


# -- Enzyme in-place semantics: writes into Duplicated arrays --------------------------------------

def numeric_jacobian(g, y, x, wrt, eps=1e-6):
    args = [y, x]
    base = args[wrt]
    cols = []
    for i in range(base.size):
        e = np.zeros(base.size)
        e[i] = eps
        plus, minus = list(args), list(args)
        plus[wrt] = base + e.reshape(base.shape)
        minus[wrt] = base - e.reshape(base.shape)
        cols.append((g(*plus) - g(*minus)) / (2 * eps))
    return np.stack(cols, axis=1)


def write_elements(y, x):
    y[0] = x[0] ** 2 + x[1]
    y[-1] = x[0] * x[1]


def write_everything(y, x):
    y[:] = np.sin(x) * y


def augmented_assignment(y, x):
    y += x * x
    y *= y[0]
    y[1:] -= x[:-1]


def write_shifted(y, x):
    y[1:] = x[:-1] * y[:-1]


def write_advanced_and_mask(y, x):
    y[[2, 0]] = x[:2] * y[1]
    y[np.array([True, False, True, False])] /= x[2:] + 2.0


def copy_into(y, x):
    np.copyto(y, x * y, where=np.array([True, False, True, True]))


IN_PLACE = [write_elements, write_everything, augmented_assignment, write_shifted,
            write_advanced_and_mask, copy_into]


def functional(f_):
    def g(y, x):
        y = y.copy()
        f_(y, x)
        return y
    return g


@pytest.mark.parametrize("f_", IN_PLACE, ids=lambda f: f.__name__)
def test_writes_into_duplicated_reverse(f_):
    rng = np.random.default_rng(1)
    y0, x, u = rng.uniform(0.5, 1.5, 4), rng.uniform(0.5, 1.5, 4), rng.standard_normal(4)
    g = functional(f_)
    y, dy, dx = y0.copy(), u.copy(), np.zeros(4)
    autodiff(Reverse, f_, Const, Duplicated(y, dy), Duplicated(x, dx))
    np.testing.assert_allclose(y, g(y0, x), atol=1e-12)           # the primal really changed
    np.testing.assert_allclose(dx, numeric_jacobian(g, y0, x, 1).T @ u, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(dy, numeric_jacobian(g, y0, x, 0).T @ u, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("f_", IN_PLACE, ids=lambda f: f.__name__)
def test_writes_into_duplicated_forward(f_):
    rng = np.random.default_rng(2)
    y0, x, ty0, tx = (rng.uniform(0.5, 1.5, 4) for _ in range(4))
    g = functional(f_)
    y, ty = y0.copy(), ty0.copy()
    autodiff(Forward, f_, Duplicated(y, ty), Duplicated(x, tx.copy()))
    np.testing.assert_allclose(y, g(y0, x), atol=1e-11)
    expected = numeric_jacobian(g, y0, x, 0) @ ty0 + numeric_jacobian(g, y0, x, 1) @ tx
    np.testing.assert_allclose(ty, expected, rtol=1e-6, atol=1e-8)   # tangent overwrites shadow


def test_design_example():
    def f_(y, x):
        y[0] = x[0] ** 2 + x[1]
        y[1] = x[0] * x[1]
    x, dx, y, dy = np.array([2.0, 3.0]), np.zeros(2), np.zeros(2), np.array([1.0, 0.0])
    autodiff(Reverse, f_, Const, Duplicated(y, dy), Duplicated(x, dx))
    assert y.tolist() == [7.0, 6.0] and dx.tolist() == [4.0, 1.0] and dy.tolist() == [0.0, 0.0]
    y, ty = np.zeros(2), np.full(2, 9.0)
    autodiff(Forward, f_, Duplicated(y, ty), Duplicated(x, np.array([1.0, 0.5])))
    assert y.tolist() == [7.0, 6.0] and ty.tolist() == [4.5, 4.0]


# -- local buffers ---------------------------------------------------------------------------------

BUFFERS = {
    "zeros_like": (np.zeros_like, lambda x: 0.0 * x[:1]),
    "ones_like": (np.ones_like, lambda x: 1.0 + 0.0 * x[:1]),
    "full_like": (lambda x: np.full_like(x, 3.0), lambda x: 3.0 + 0.0 * x[:1]),
    "full_like_traced": (lambda x: np.full_like(x, x[2]), lambda x: x[2:3]),
    "copy": (lambda x: x.copy(), lambda x: x[:1]),
    "np.copy": (np.copy, lambda x: x[:1]),
    "empty_like": (np.empty_like, None),
}


@pytest.mark.parametrize("name", BUFFERS)
def test_local_buffer_matches_functional_formulation(name):
    make, first = BUFFERS[name]

    def with_buffer(x):
        out = make(x)
        if first is None:
            out[0] = x[-1]        # empty_like: every element is written
        out[1:] = x[:-1] * 2
        return np.sum(out * out * x)

    def functional_version(x):
        head = x[-1:] if first is None else first(x)
        out = np.concatenate([head, x[:-1] * 2])
        return np.sum(out * out * x)

    x = np.array([0.3, -1.2, 0.8, 1.1])
    assert with_buffer(x) == functional_version(x)
    check_grads(with_buffer, x)
    (g,), = autodiff(Reverse, with_buffer, Active, Active(x))
    (g_ref,), = autodiff(Reverse, functional_version, Active, Active(x))
    np.testing.assert_allclose(g, g_ref, atol=1e-11)
    t, = autodiff(Forward, with_buffer, Duplicated(x, np.ones(4)))
    np.testing.assert_allclose(t, g_ref.sum(), atol=1e-11)


# -- saved values are protected from later writes --------------------------------------------------

def test_later_write_does_not_corrupt_saved_value():
    def f(y, x):
        z = y * x
        y[0] = 5.0
        return z.sum()
    y0, x = np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0])
    y, dy = y0.copy(), np.zeros(3)
    (_, gx), = autodiff(Reverse, f, Active, Duplicated(y, dy), Active(x))
    np.testing.assert_array_equal(gx, y0)            # d(sum(y*x))/dx uses y before the write
    np.testing.assert_array_equal(dy, x)             # gradient w.r.t. the initial y
    np.testing.assert_array_equal(y, [5.0, 2.0, 3.0])
    y, ty = y0.copy(), np.zeros(3)
    t, = autodiff(Forward, f, Duplicated(y, ty), Duplicated(x, np.ones(3)))
    assert t == y0.sum() and ty.tolist() == [0.0, 0.0, 0.0]


def test_later_write_into_local_buffer():
    def f(x):
        b = x.copy()
        z = b * b
        b[0] = 5.0
        b += x
        return np.sum(z) + np.sum(b * x)
    x = np.array([0.5, -1.5, 2.0])
    check_grads(f, x)
    (g,), = autodiff(Reverse, f, Active, Active(x))
    # sum(x**2) + sum([5 + x0, 2 x1, 2 x2] * x)
    np.testing.assert_allclose(g, 2 * x + np.array([5 + 2 * x[0], 4 * x[1], 4 * x[2]]), atol=1e-11)


# -- writing into plain arrays ---------------------------------------------------------------------

def _expect_plain_write_error(f, mode):
    x = np.array([1.0, 2.0, 3.0])
    with pytest.raises((NonDifferentiableError, ValueError)) as info:
        if mode == "rev":
            autodiff(Reverse, f, Active, Active(x))
        else:
            autodiff(Forward, f, Duplicated(x, np.ones(3)))
    err = info.value
    if not isinstance(err, NonDifferentiableError):
        err = err.__cause__
        assert isinstance(err, NonDifferentiableError)
    assert "zeros_like" in str(err)


@pytest.mark.parametrize("mode", ["rev", "fwd"])
def test_writing_traced_value_into_plain_array_raises(mode):
    def element(x):
        buf = np.zeros(3)
        buf[0] = x[0]
        return buf.sum()

    def whole(x):
        buf = np.zeros(3)
        buf[:] = x * 2
        return buf.sum()

    def copyto(x):
        buf = np.zeros(3)
        np.copyto(buf, x)
        return buf.sum()

    def put(x):
        buf = np.zeros(3)
        np.put_along_axis(buf, np.array([2, 0, 1]), x, axis=0)
        return buf.sum()

    for f in (element, whole, copyto, put):
        _expect_plain_write_error(f, mode)
