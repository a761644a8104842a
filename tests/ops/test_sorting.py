"""Sorting and selection: np.sort, np.partition, np.select, np.quantile/percentile/median.

Primal values are compared with NumPy; derivatives with finite differences (forward and
reverse, first and second order). Values are drawn well apart so that a finite-difference step
never reorders them; ties are tested separately against the documented convention.
"""
import warnings

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tape
from tape import Active, Duplicated, Forward, Reverse, autodiff
from tape.testing import arrays, check_grads, shapes, traced_value

FAST = settings(max_examples=15, deadline=None)


@st.composite
def distinct(draw, min_dims=1, max_dims=3, min_side=1):
    """A float64 array whose entries are pairwise at least 0.4 apart, in random order."""
    shape = draw(shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    size = int(np.prod(shape))
    return (rng.permutation(size) + rng.uniform(-0.3, 0.3, size)).reshape(shape) - size / 2


@st.composite
def distinct_and_axis(draw, allow_none=True):
    x = draw(distinct())
    choices = list(range(-x.ndim, x.ndim)) + ([None] if allow_none else [])
    return x, draw(st.sampled_from(choices))


# -- sort --------------------------------------------------------------------------------------------
@FAST
@given(distinct_and_axis())
def test_sort(xa):
    x, axis = xa
    f = lambda x: np.sort(x, axis=axis)   # noqa: E731
    np.testing.assert_array_equal(_traced_primal(f, x), np.sort(x, axis=axis))
    check_grads(f, x)


@FAST
@given(distinct_and_axis())
def test_sort_gradient_is_the_inverse_permutation(xa):
    x, axis = xa

    def f(x):
        return np.sum(np.sort(x, axis=axis) * weights)
    weights = np.random.default_rng(0).standard_normal(np.sort(x, axis=axis).shape)
    (g,), = autodiff(Reverse, f, Active, Active(x))
    # The cotangent of sorted position k lands on the entry that was sorted to position k.
    flat, ax = (x.ravel(), 0) if axis is None else (x, axis)
    order = np.argsort(flat, axis=ax)
    expected = np.zeros_like(flat)
    np.put_along_axis(expected, order, weights, axis=ax)
    np.testing.assert_array_equal(g, expected.reshape(x.shape))


def test_sort_ties_follow_stable_order():
    x = np.array([1.0, 1.0, 0.0, 1.0])
    (g,), = autodiff(Reverse, lambda x: np.sum(np.sort(x) * np.array([10.0, 20.0, 30.0, 40.0])),
                     Active, Active(x))
    # Sorted: 0 (index 2), then the 1s in index order 0, 1, 3.
    np.testing.assert_array_equal(g, [20.0, 30.0, 10.0, 40.0])
    t, = autodiff(Forward, np.sort, Duplicated(x, np.array([1.0, 2.0, 3.0, 4.0])))
    np.testing.assert_array_equal(t, [3.0, 1.0, 2.0, 4.0])


def test_sort_rejects_order_and_bad_axis():
    with pytest.raises(NotImplementedError):
        autodiff(Reverse, lambda x: np.sum(np.sort(x, order="a")), Active, Active(np.ones(2)))
    with pytest.raises(np.exceptions.AxisError):
        autodiff(Reverse, lambda x: np.sum(np.sort(x, axis=1)), Active, Active(np.ones(2)))


# -- partition ----------------------------------------------------------------------------------------
@FAST
@given(distinct_and_axis(), st.integers(0, 100))
def test_partition(xa, k):
    x, axis = xa
    n = x.size if axis is None else x.shape[axis]
    k = k % n
    f = lambda x: np.partition(x, k, axis=axis)   # noqa: E731
    got = _traced_primal(f, x)
    want = np.partition(x, k, axis=axis)
    ax = 0 if axis is None else axis
    np.testing.assert_array_equal(np.take(got, k, axis=ax), np.take(want, k, axis=ax))
    np.testing.assert_array_equal(np.sort(got, axis=ax), np.sort(want, axis=ax))
    check_grads(f, x)


def _traced_primal(f, *args):
    """f's value computed on traced arguments (through the rules, not NumPy's own function)."""
    return traced_value(f, *args, mode="reverse")


# -- select ---------------------------------------------------------------------------------------------
@st.composite
def select_case(draw):
    shapes_ = draw(hnp.mutually_broadcastable_shapes(num_shapes=5, max_dims=3, max_side=3))
    s = shapes_.input_shapes
    conds = [draw(hnp.arrays(np.bool_, s[0])), draw(hnp.arrays(np.bool_, s[1]))]
    choices = [draw(arrays(s[2])), draw(arrays(s[3]))]
    default = draw(st.one_of(arrays(s[4]), st.floats(-2, 2)))
    return conds, choices, default


@FAST
@given(select_case())
def test_select(case):
    conds, choices, default = case
    f = lambda a, b, d: np.select(conds, [a, b], d)   # noqa: E731
    np.testing.assert_array_equal(_traced_primal(f, *choices, default),
                                  np.select(conds, choices, default))
    check_grads(f, *choices, default)
    check_grads(lambda a: np.select(conds, [a, choices[1]]), choices[0])


def test_select_first_true_condition_wins():
    a, b = np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0])
    conds = [np.array([True, False, False]), np.array([True, True, False])]
    (ga, gb, gd), = autodiff(Reverse, lambda a, b, d: np.sum(np.select(conds, [a, b], d)),
                             Active, Active(a), Active(b), Active(7.0))
    np.testing.assert_array_equal(ga, [1.0, 0.0, 0.0])
    np.testing.assert_array_equal(gb, [0.0, 1.0, 0.0])
    assert gd == 1.0
    with pytest.raises(TypeError):
        autodiff(Reverse, lambda a: np.sum(np.select([np.ones(3)], [a])), Active, Active(a))


# -- quantile, percentile, median -------------------------------------------------------------------------
@st.composite
def reduce_axes(draw, x):
    kind = draw(st.sampled_from(["none", "int", "tuple"]))
    if kind == "none":
        return None
    if kind == "int":
        return draw(st.integers(-x.ndim, x.ndim - 1))
    return tuple(draw(st.lists(st.integers(0, x.ndim - 1), min_size=1, max_size=x.ndim,
                               unique=True)))


@FAST
@given(st.data())
def test_median(data):
    x = data.draw(distinct())
    axis = data.draw(reduce_axes(x))
    keepdims = data.draw(st.booleans())
    f = lambda x: np.median(x, axis=axis, keepdims=keepdims)   # noqa: E731
    got = _traced_primal(f, x)
    np.testing.assert_allclose(got, np.median(x, axis=axis, keepdims=keepdims), rtol=1e-14,
                               atol=1e-13)
    assert np.shape(got) == np.shape(np.median(x, axis=axis, keepdims=keepdims))
    check_grads(f, x)


@FAST
@given(st.data())
def test_quantile_and_percentile(data):
    x = data.draw(distinct(min_side=2))
    axis = data.draw(reduce_axes(x))
    keepdims = data.draw(st.booleans())
    q = data.draw(st.one_of(st.floats(0, 1), hnp.arrays(np.float64, shapes(max_dims=2),
                                                       elements=st.floats(0, 1))))
    for fn, qq in ((np.quantile, q), (np.percentile, np.multiply(q, 100))):
        f = lambda x: fn(x, qq, axis=axis, keepdims=keepdims)   # noqa: E731
        got = _traced_primal(f, x)
        want = fn(x, qq, axis=axis, keepdims=keepdims)
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)
        assert np.shape(got) == np.shape(want)
        check_grads(f, x)


@FAST
@given(st.data())
def test_quantile_is_differentiable_in_q(data):
    x = data.draw(distinct(min_side=2, max_dims=2))
    n = x.shape[-1]
    # Positions q * (n - 1) strictly between two sorted values: away from the kinks.
    k = data.draw(st.integers(0, n - 2))
    frac = data.draw(st.floats(0.1, 0.9))
    q = np.array([(k + frac) / (n - 1), (k + 1 - frac) / (n - 1)])
    check_grads(lambda q: np.quantile(x, q, axis=-1), q)
    check_grads(lambda x, q: np.quantile(x, q, axis=-1), x, q)
    check_grads(lambda p: np.percentile(x, p, axis=-1), q * 100)


def test_quantile_errors_and_unsupported_methods():
    def grad(f):
        return autodiff(Reverse, lambda x: np.sum(f(x)), Active, Active(np.arange(4.0)))
    with pytest.raises(ValueError):
        grad(lambda x: np.quantile(x, 1.5))
    with pytest.raises(ValueError):
        grad(lambda x: np.percentile(x, -1))
    with pytest.raises(NotImplementedError):
        grad(lambda x: np.quantile(x, 0.5, method="weibull"))
    (g,), = grad(lambda x: np.median(x))
    np.testing.assert_array_equal(g, [0.0, 0.5, 0.5, 0.0])


def test_inactive_index_functions():
    x = np.array([3.0, 1.0, 2.0])
    seen = []

    def f(x):
        seen.append((np.argpartition(x, 1), np.lexsort((x,))))
        return np.sum(x)
    autodiff(Reverse, f, Active, Active(x))
    np.testing.assert_array_equal(seen[0][1], [1, 2, 0])
    assert seen[0][0][1] == 2


# -- argsort is inactive; sorts along every axis --------------------------------------------------------
@FAST
@given(distinct_and_axis())
def test_argsort_is_inactive_and_matches_numpy(xa):
    x, axis = xa
    seen = []

    def f(x):
        order = np.argsort(x, axis=axis)
        seen.append((order, x.argsort(axis=axis)))
        flat, ax = (np.ravel(x), 0) if axis is None else (x, axis)
        return np.take_along_axis(flat, order, axis=ax)   # sort by hand: derivative via the gather
    got = _traced_primal(f, x)
    np.testing.assert_array_equal(seen[0][0], np.argsort(x, axis=axis))
    np.testing.assert_array_equal(seen[0][1], np.argsort(x, axis=axis))
    assert type(seen[0][0]) is np.ndarray
    np.testing.assert_array_equal(got, np.sort(x, axis=axis))
    check_grads(f, x, order=1)


def test_sort_and_partition_on_every_axis_second_order():
    x = np.random.default_rng(3).permutation(24).reshape(2, 3, 4) * 0.5
    for axis in (None, 0, 1, 2, -1, -2, -3):
        check_grads(lambda x: np.sort(x * x, axis=axis), x - 5.3)
        n = x.size if axis is None else x.shape[axis]
        check_grads(lambda x: np.partition(x * x, n - 1, axis=axis), x - 5.3)


# -- NaN in quantiles: NaN slices give NaN; the nan* versions skip NaN entries ------------------------
@st.composite
def with_nans(draw, min_side=1):
    """A `distinct` array with NaN at random positions (whole slices may be NaN)."""
    x = draw(distinct(min_side=min_side))
    mask = draw(hnp.arrays(np.bool_, x.shape))
    return np.where(mask, np.nan, x)


@FAST
@given(st.data())
def test_quantile_of_slices_with_nan_is_nan(data):
    x = data.draw(with_nans(min_side=2))
    axis = data.draw(reduce_axes(x))
    q = data.draw(st.one_of(st.floats(0, 1), hnp.arrays(np.float64, (2,), elements=st.floats(0, 1))))
    for f in (lambda x: np.median(x, axis=axis), lambda x: np.quantile(x, q, axis=axis),
              lambda x: np.percentile(x, np.multiply(q, 100), axis=axis, keepdims=True)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            want = f(x)
            got = _traced_primal(f, x)
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)   # NaN where NumPy has NaN
        assert np.shape(got) == np.shape(want)


@FAST
@given(st.data())
def test_nan_quantiles_match_numpy(data):
    x = data.draw(with_nans())
    axis = data.draw(reduce_axes(x))
    keepdims = data.draw(st.booleans())
    q = data.draw(st.one_of(st.floats(0, 1), hnp.arrays(np.float64, shapes(max_dims=2),
                                                       elements=st.floats(0, 1))))
    # NumPy's nanquantile misplaces a q of 2 or more dimensions with several axes (its shape
    # is not q's shape + the kept axes, as np.quantile's is): see the test below.
    assume(not (np.ndim(q) > 1 and isinstance(axis, tuple) and len(axis) > 1))
    fns = (lambda x: np.nanmedian(x, axis=axis, keepdims=keepdims),
           lambda x: np.nanquantile(x, q, axis=axis, keepdims=keepdims),
           lambda x: np.nanpercentile(x, np.multiply(q, 100), axis=axis, keepdims=keepdims))
    for f in fns:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)   # all-NaN slices
            want = f(x)
            got = _traced_primal(f, x)
            np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)
            assert np.shape(got) == np.shape(want)
            undefined = np.isnan(want)   # finite differences cannot check NaN outputs
            check_grads(lambda x: np.where(undefined, 0.0, f(x)), x, order=1)


def test_nan_quantile_of_a_2d_q_over_several_axes_has_quantile_s_layout():
    # q's dimensions first, then the kept axes, as np.quantile documents (NumPy 2.4's own
    # nanquantile gives (1, 4, 2) here).
    x = np.random.default_rng(0).random((2, 3, 4))
    q = np.array([[0.1], [0.5]])
    for f in (lambda x: np.nanquantile(x, q, axis=(0, 1)),
              lambda x: np.nanpercentile(x, q * 100, axis=(0, 1))):
        got = _traced_primal(f, x)
        np.testing.assert_allclose(got, np.quantile(x, q, axis=(0, 1)), rtol=1e-13)
        assert got.shape == (2, 1, 4)


def test_nan_quantile_derivatives():
    x = np.array([[0.3, np.nan, 1.7, -0.4], [np.nan, np.nan, np.nan, np.nan],
                  [2.0, 0.9, np.nan, 1.1]])
    with pytest.warns(RuntimeWarning, match="All-NaN"):
        (g,), = autodiff(Reverse, lambda x: np.nansum(np.nanmedian(x, axis=1)), Active, Active(x))
    # Row 0: the median of (0.3, 1.7, -0.4) is 0.3; row 2: of (2.0, 0.9, 1.1) is 1.1.
    np.testing.assert_array_equal(g, [[1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 1]])
    clean = np.where(np.isnan(x), np.nan, x)[[0, 2]]
    check_grads(lambda x: np.nanquantile(x, 0.3, axis=1), clean)
    check_grads(lambda x, q: np.nanquantile(x, q, axis=1), clean, np.array([0.3, 0.7]))
    # q's derivative is finite (0) on an all-NaN slice; its value is NaN.
    with pytest.warns(RuntimeWarning):
        (gx, gq), = autodiff(Reverse, lambda x, q: np.nansum(np.nanquantile(x, q, axis=1)),
                             Active, Active(x), Active(0.3))
    assert np.isfinite(gq) and np.all(np.isfinite(gx))


def test_median_with_nan_gives_nan_and_finite_derivatives():
    x = np.array([[1.0, np.nan, 3.0], [2.0, 0.5, 4.0]])
    got = _traced_primal(lambda x: np.median(x, axis=1), x)
    np.testing.assert_array_equal(got, [np.nan, 2.0])
    (gx, gq), = autodiff(Reverse, lambda x, q: np.nansum(np.quantile(x, q, axis=1)), Active,
                         Active(x), Active(0.25))
    np.testing.assert_allclose(gx, [[0, 0, 0], [0.5, 0.5, 0]], atol=1e-12)
    assert gq == pytest.approx(1.5 * 2)   # row 1: d/dq of sorted[0] + 2q (sorted[1]-sorted[0])


@pytest.mark.parametrize("shape, kth, axis", [((1000,), 500, -1), ((1000,), [3, 700], 0),
                                              ((40, 300), 150, 1), ((300, 40), [0, 299], 0),
                                              ((20, 50), 400, None)])
def test_partition_primal_is_numpys_own_arrangement(shape, kth, axis):
    """np.partition's entries beside kth are in NumPy's own order (which np.argpartition
    may not give: a SIMD selection on float64), so a loss that weights positions matches plain
    NumPy, in every mode and compiled."""
    x = np.random.default_rng(0).uniform(-2, 2, shape)
    w = np.random.default_rng(1).standard_normal(np.partition(x, kth, axis=axis).shape)
    np.testing.assert_array_equal(traced_value(lambda v: np.partition(v, kth, axis=axis), x),
                                  np.partition(x, kth, axis=axis))
    f = lambda v: np.sum(np.partition(v, kth, axis=axis) * w)  # noqa: E731
    compiled = tape.compile(tape.ReverseWithPrimal, f, Active, Active)
    for z in (x, x[::-1].copy() if x.ndim == 1 else x * 1.5):
        (g,), value = compiled(Active(z))
        assert value == f(z)
        want = np.zeros_like(z)   # the weight of the position each entry lands on
        np.put_along_axis(want.reshape(-1) if axis is None else want,
                          _numpy_order(z, kth, axis), w.reshape(-1) if axis is None else w,
                          axis=0 if axis is None else axis)
        np.testing.assert_array_equal(g, want)


def _numpy_order(z, kth, axis):
    """Where each entry of np.partition(z, kth, axis)'s result comes from (distinct values)."""
    flat = z.reshape(-1) if axis is None else z
    part = np.partition(flat, kth, axis=0 if axis is None else axis)
    along = 0 if axis is None else axis
    order = np.argsort(flat, axis=along)
    rank_of_result = np.argsort(np.argsort(part, axis=along), axis=along)
    return np.take_along_axis(order, rank_of_result, axis=along)
