"""NumPy's view/copy rules, followed exactly: random sequences of reads, views and writes run
on plain arrays and on traced ones must give the same primal values, and gradients that match
finite differences of the plain program.

NumPy's rules (https://numpy.org/doc/stable/user/basics.indexing.html): basic slicing gives a
view; an integer on every axis gives a scalar (a copy); advanced indexing (integer arrays,
lists, boolean masks, 0-d arrays) gives a copy; reshape/ravel (of contiguous data), transpose,
`.T`, swapaxes, flip and `.real` are views. A wrong rule shows up as a wrong primal.
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tape import (ActivityError, Active, Const, Duplicated, Forward, ForwardWithPrimal, Reverse, ReverseWithPrimal,
                  autodiff)

SHAPE = (3, 4)
_rows, _cols = st.integers(0, SHAPE[0] - 1), st.integers(0, SHAPE[1] - 1)
_slices = st.tuples(st.integers(0, 2), st.integers(1, 3)).map(lambda p: slice(p[0], p[0] + p[1]))
_masks = st.lists(st.booleans(), min_size=SHAPE[1], max_size=SHAPE[1])
_coef = st.sampled_from([-1.5, -0.5, 0.25, 0.75, 2.0])

# A step is (name, *arguments). `pool` holds what the program has read so far (scalars,
# copies and views); the result adds them all up with fixed weights, so any stale or
# wrongly-aliased value changes it.
STEPS = st.one_of(
    st.tuples(st.just("read_element"), _rows, _cols),
    st.tuples(st.just("read_element_negative"), _rows, _cols),
    st.tuples(st.just("read_row"), _rows),                      # a view
    st.tuples(st.just("read_column"), _cols),                   # a view
    st.tuples(st.just("read_block"), _slices, _slices),         # a view
    st.tuples(st.just("read_ellipsis_element"), _rows, _cols),  # a 0-d view
    st.tuples(st.just("read_transpose")),                       # a view
    st.tuples(st.just("read_ravel")),                           # a view (contiguous)
    st.tuples(st.just("read_fancy"), _rows, _rows),             # a copy
    st.tuples(st.just("read_mask"), _masks),                    # a copy
    st.tuples(st.just("write_element"), _rows, _cols, _coef),
    st.tuples(st.just("add_element"), _rows, _cols, _coef),
    st.tuples(st.just("product_element"), _rows, _cols, _rows, _cols),
    st.tuples(st.just("swap_through_temporary"), _rows, _cols, _rows, _cols),
    st.tuples(st.just("swap_fancy"), _rows, _rows),
    st.tuples(st.just("write_mask"), _masks, _coef),
    st.tuples(st.just("scale_row"), _rows, _coef),
    st.tuples(st.just("write_into_view"), _cols, _coef),
    st.tuples(st.just("add_into_view"), _coef),
    st.tuples(st.just("write_through_transpose"), _rows, _cols, _coef),
    st.tuples(st.just("write_through_ravel"), st.integers(0, 11), _coef),
    st.tuples(st.just("add_whole"), _coef),
    st.tuples(st.just("write_through_asarray"), _rows, _cols, _coef),   # the same array
    st.tuples(st.just("write_into_array_copy"), _rows, _cols, _coef),   # a copy
    st.tuples(st.just("multiply_out"), _coef),                          # ufunc out=y
    st.tuples(st.just("add_out_into_row"), _rows, _coef),               # out= a view
    st.tuples(st.just("read_swapaxes"),),                               # a view
)


def _last_view(pool):
    views = [v for v in pool if np.ndim(v) >= 1 and np.shape(v)[-1:] != (0,)]
    return views[-1] if views else None


def run(program, y):
    """Run `program` on the buffer `y` (shape SHAPE), written in place; returns the pool."""
    pool = []
    for step in program:
        name, args = step[0], step[1:]
        if name == "read_element":
            pool.append(y[args[0], args[1]])
        elif name == "read_element_negative":
            pool.append(y[args[0] - SHAPE[0], args[1] - SHAPE[1]])
        elif name == "read_row":
            pool.append(y[args[0]])
        elif name == "read_column":
            pool.append(y[:, args[0]])
        elif name == "read_block":
            pool.append(y[args[0], args[1]])
        elif name == "read_ellipsis_element":
            pool.append(y[args[0], ..., args[1]])
        elif name == "read_transpose":
            pool.append(y.T)
        elif name == "read_ravel":
            pool.append(y.ravel())
        elif name == "read_fancy":
            pool.append(y[[args[0], args[1]]])
        elif name == "read_mask":
            pool.append(y[:, np.array(args[0])])
        elif name == "write_element":
            y[args[0], args[1]] = args[2] * y[args[0], args[1]] + 1.0
        elif name == "add_element":
            y[args[0], args[1]] += args[2]
        elif name == "product_element":
            v = y[args[0], args[1]]
            y[args[2], args[3]] *= 0.5
            y[args[0], args[1]] = v * y[args[2], args[3]]
        elif name == "swap_through_temporary":
            t = y[args[0], args[1]]
            y[args[0], args[1]] = y[args[2], args[3]]
            y[args[2], args[3]] = t
        elif name == "swap_fancy":
            i, p = args
            y[[i, p]] = y[[p, i]]
        elif name == "write_mask":
            mask = np.array(args[0])
            y[:, mask] = args[1] * y[:, mask]
        elif name == "scale_row":
            y[args[0]] *= args[1]
        elif name == "write_into_view":
            view = _last_view(pool)
            if view is not None:
                view[..., min(args[0], np.shape(view)[-1] - 1)] = args[1]
        elif name == "add_into_view":
            view = _last_view(pool)
            if view is not None:
                view += args[0] * view
        elif name == "write_through_transpose":
            t = y.T
            t[args[1], args[0]] = args[2] * t[args[1], args[0]] - 0.5
        elif name == "write_through_ravel":
            r = y.ravel()
            r[args[0]] *= args[1]
        elif name == "add_whole":
            y += args[0]
        elif name == "write_through_asarray":
            a = np.asarray(y)
            a[args[0], args[1]] = args[2] * a[args[0], args[1]] + 0.25
        elif name == "write_into_array_copy":
            a = np.array(y)
            a[args[0], args[1]] = args[2]
            pool.append(a)
        elif name == "multiply_out":
            np.multiply(y, args[0], out=y)
        elif name == "add_out_into_row":
            row = y[args[0]]
            np.add(row, args[1] * row, out=row)
        elif name == "read_swapaxes":
            pool.append(np.swapaxes(y, 0, 1))
    return pool


def program_value(program, x):
    """A scalar function of x: copy x into a buffer, run the program, add everything up."""
    y = x * 1.0
    pool = run(program, y)
    total = np.sum(y * np.arange(1.0, 13.0).reshape(SHAPE))
    for k, v in enumerate(pool):
        total = total + (0.3 + 0.1 * k) * np.sum(v * v) + np.sum(v)
    return total


def _finite_difference_gradient(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        g[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


X = np.arange(1.0, 13.0).reshape(SHAPE) / 7.0 - 0.6


@settings(max_examples=150, deadline=None)
@given(program=st.lists(STEPS, min_size=1, max_size=8))
def test_random_reads_views_and_writes(program):
    f = lambda x: program_value(program, x)   # noqa: E731
    want = f(X)
    (grad,), value = autodiff(ReverseWithPrimal, f, Active, Active(X))
    np.testing.assert_allclose(value, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(grad, _finite_difference_gradient(f, X), rtol=1e-6, atol=1e-6)
    direction = np.cos(np.arange(12.0)).reshape(SHAPE)
    tangent, value = autodiff(ForwardWithPrimal, f, Duplicated(X, direction))
    np.testing.assert_allclose(value, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tangent, np.sum(grad * direction), rtol=1e-8, atol=1e-8)


@settings(max_examples=60, deadline=None)
@given(program=st.lists(STEPS, min_size=1, max_size=6))
def test_random_writes_into_a_duplicated_buffer(program):
    """The same programs run directly on a Duplicated argument: the buffer really holds NumPy's
    values afterwards, and the gradient seeded through its shadow is the VJP."""
    plain = X.copy()
    run(program, plain)
    y, dy = X.copy(), np.ones(SHAPE)
    autodiff(Reverse, lambda y: run(program, y) and None, Duplicated(y, dy))
    np.testing.assert_allclose(y, plain, rtol=1e-12, atol=1e-12)

    def final(x):
        buffer = x * 1.0
        run(program, buffer)
        return np.sum(buffer)
    np.testing.assert_allclose(dy, _finite_difference_gradient(final, X), rtol=1e-6, atol=1e-6)


# -- the idioms the rules exist for, spelled out --------------------------------------------------
def _swap(x):
    y = x * 1.0
    t = y[1]
    y[1] = y[3]
    y[3] = t
    return np.sum(y * np.arange(4.0))


def _bubble_sort(x):
    y = x * 1.0
    n = len(y)
    for i in range(n):
        for j in range(n - 1 - i):
            if y[j] > y[j + 1]:
                t = y[j]
                y[j] = y[j + 1]
                y[j + 1] = t
    return np.sum(y * np.arange(1.0, n + 1))


def _read_then_add(x):
    y = x * 1.0
    v = y[1]
    y[1] += 5.0
    return v * y[1]


def _zero_d_view(x):
    y = x * 1.0
    v = y[..., 1]          # Ellipsis: a 0-d view, which sees the write below
    y[1] = 10.0 * y[1]
    return v * 1.0


@pytest.mark.parametrize("f", [_swap, _bubble_sort, _read_then_add, _zero_d_view])
def test_idioms_match_numpy(f):
    x = np.array([0.7, -1.2, 2.5, 0.4])
    (grad,), value = autodiff(ReverseWithPrimal, f, Active, Active(x))
    assert value == pytest.approx(f(x), rel=1e-14)
    np.testing.assert_allclose(grad, _finite_difference_gradient(f, x), rtol=1e-7, atol=1e-7)
    (tangent,) = autodiff(Forward, f, Duplicated(x, np.ones(4)))
    assert tangent == pytest.approx(np.sum(grad), rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("index,is_view", [
    (1, True), ((1, 2), False), ((np.int64(1), 2), False), ((1, Ellipsis), True),
    ((Ellipsis, 1, 2), True), ((1, 2, None), True), ((), True), (np.array(1), False),
    (True, False), ((1, slice(None)), True), ([0, 1], False), ((slice(None), [2]), False)])
def test_view_or_copy_as_numpy_decides(index, is_view):
    base = np.arange(12.0).reshape(SHAPE)
    plain = base.copy()
    read = plain[index]
    assert (isinstance(read, np.ndarray) and np.shares_memory(read, plain)) == is_view

    def f(x):
        y = x * 1.0
        r = y[index]
        y[...] = -1.0
        return np.sum(r)
    plain_read = base.copy()[index]
    expected = -np.size(plain_read) if is_view else np.sum(plain_read)
    assert f(base) == expected
    (_, value) = autodiff(ForwardWithPrimal, f, Duplicated(base, np.zeros(SHAPE)))
    assert value == expected
    (_, value) = autodiff(ReverseWithPrimal, f, Active, Active(base))
    assert value == expected


def test_real_part_is_a_view():
    def f(z):
        w = z * 1.0
        r = w.real
        r[0] = 5.0 * r[1]
        return np.sum(np.abs(w) ** 2)
    z = np.array([1.0 + 2.0j, 0.5 - 1.0j])
    want = f(z.copy())
    (_, value) = autodiff(ReverseWithPrimal, f, Active, Active(z))
    assert value == pytest.approx(want, rel=1e-13)


# -- aliased arguments: the same array, or overlapping views, in two positions -------------------
def _product(a, b):
    return np.sum(a * b)


def test_aliased_arguments_that_are_only_read_give_partial_derivatives():
    x = np.array([1.0, 2.0, 3.0])
    (ga, gb), = autodiff(Reverse, _product, Active, Active(x), Active(x))
    np.testing.assert_allclose(ga, x, atol=1e-12)
    np.testing.assert_allclose(gb, x, atol=1e-12)
    d = np.zeros(3)   # one shadow for both positions: the total derivative
    autodiff(Reverse, _product, Active, Duplicated(x, d), Duplicated(x, d))
    np.testing.assert_allclose(d, 2 * x, atol=1e-11)
    (tangent,) = autodiff(Forward, _product, Duplicated(x, np.ones(3)), Duplicated(x, np.ones(3)))
    assert tangent == pytest.approx(2 * np.sum(x))


def _write_then_read(y, x):
    y[0] = 2.0 * x[1]
    return np.sum(x * y)


@pytest.mark.parametrize("make", [
    lambda a, da: (Duplicated(a, da), Duplicated(a, da)),
    lambda a, da: (Duplicated(a, da), Const(a)),
    lambda a, da: (Const(a), Duplicated(a, da)),
    lambda a, da: (Duplicated(a[0:3], da[0:3]), Duplicated(a[1:4], da[1:4])),
    lambda a, da: (Duplicated(a.reshape(2, 2)[0], da[:2]), Duplicated(a[::-1], da)),
])
def test_a_write_into_an_aliased_argument_is_refused_naming_both(make):
    a, da = np.array([1.0, 2.0, 3.0, 4.0]), np.zeros(4)
    before = a.copy()
    with pytest.raises(ActivityError, match=r"argument 0 \(`y`\) shares memory with argument "
                                            r"1 \(`x`\)|argument 1 \(`x`\) shares memory with "
                                            r"argument 0 \(`y`\)"):
        autodiff(Reverse, _write_then_read, Active, *make(a, da))
    np.testing.assert_array_equal(a, before)   # nothing was written
    with pytest.raises(ActivityError, match="shares memory"):
        autodiff(Forward, _write_then_read, *[Duplicated(arg.val, np.ones_like(arg.val))
                                               if isinstance(arg, Duplicated) else arg
                                               for arg in make(a, da)])


def test_disjoint_views_of_one_array_may_be_written():
    a, da = np.array([1.0, 2.0, 3.0, 4.0]), np.zeros(4)
    autodiff(Reverse, _write_then_read, Active, Duplicated(a[:2], da[:2]),
             Duplicated(a[2:], da[2:]))
    np.testing.assert_allclose(a, [8.0, 2.0, 3.0, 4.0], atol=1e-11)
    even, odd = np.arange(6.0)[::2], np.arange(6.0)[1::2]   # interleaved: no shared element
    autodiff(Reverse, _write_then_read, Active, Duplicated(even, np.zeros(3)),
             Duplicated(odd, np.zeros(3)))


def test_aliased_leaves_inside_one_pytree_are_named_by_path():
    shared = np.array([1.0, 2.0])
    params = {"a": shared, "b": shared}

    def f(p):
        p["a"][0] = 3.0 * p["b"][1]
        return np.sum(p["a"] * p["b"])
    with pytest.raises(ActivityError, match=r"p\['a'\].*shares memory with p\['b'\]|"
                                            r"p\['b'\].*shares memory with p\['a'\]"):
        autodiff(Reverse, f, Active, Duplicated(params, {"a": np.zeros(2), "b": np.zeros(2)}))
