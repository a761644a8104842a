"""Reductions: sum, mean, prod, max/min, ptp, var/std, average, nan*-reductions, cumsum/cumprod."""
import warnings

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tape.errors import NonDifferentiableError
from tape import (Active, Duplicated, Forward, ForwardWithPrimal, Reverse, ReverseWithPrimal, Tracer,
                  autodiff)
from tape.testing import check_grads, shapes, traced_value

FEW = settings(max_examples=30, deadline=None)

# Elements: generic floats; well-separated distinct values (max/min/ptp/std are smooth there,
# so finite differences apply); values bounded away from 0 in magnitude for long products.
GENERIC = st.floats(-2, 2, allow_nan=False, width=64)
DISTINCT = st.integers(-600, 600).map(lambda i: i / 300)
MODERATE = st.floats(-1.5, 1.5, allow_nan=False, width=64)


@st.composite
def axes_for(draw, ndim):
    """None, an int or a tuple of distinct axes, each possibly negative."""
    if ndim == 0:
        return draw(st.sampled_from([None, ()]))
    signed = lambda a: st.sampled_from([a, a - ndim])  # noqa: E731
    one = st.integers(0, ndim - 1).flatmap(signed)
    many = st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim).flatmap(
        lambda axs: st.tuples(*[signed(a) for a in axs]))
    return draw(st.one_of(st.none(), one, many))


@st.composite
def reduction_case(draw, elements=GENERIC, max_side=4, unique=False):
    shape = draw(shapes(0, 3, max_side=max_side))
    x = draw(hnp.arrays(np.float64, shape, elements=elements, unique=unique))
    return x, draw(axes_for(len(shape))), draw(st.booleans())


def count(x, axis):
    axes = range(x.ndim) if axis is None else np.atleast_1d(axis)
    return int(np.prod([x.shape[a] for a in axes]))


def traced_primal(f, x):
    """f evaluated on a traced x (forward mode), returned as a plain value."""
    return traced_value(f, x)


def assert_matches_numpy(f, x):
    got, want = traced_primal(f, x), f(x)
    assert np.shape(got) == np.shape(want)
    assert np.result_type(got) == np.result_type(want)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def grad(f, x):
    return autodiff(Reverse, f, Active, Active(x))[0][0]


def tangent(f, x, t):
    return autodiff(Forward, f, Duplicated(x, t))[0]


def hessian(f, x):
    """Forward-over-reverse Hessian, one column per basis direction."""
    cols = [tangent(lambda y: grad(f, y), x, e.reshape(x.shape)) for e in np.eye(x.size)]
    return np.stack([np.ravel(c) for c in cols], axis=1)


# -- every reduction: primal equals NumPy, derivatives match finite differences (order 2) --------
REDUCTIONS = {
    "sum": (lambda x, ax, kd: np.sum(x, axis=ax, keepdims=kd), GENERIC),
    "sum_method": (lambda x, ax, kd: x.sum(axis=ax, keepdims=kd), GENERIC),
    "mean": (lambda x, ax, kd: np.mean(x, axis=ax, keepdims=kd), GENERIC),
    "mean_method": (lambda x, ax, kd: x.mean(ax, keepdims=kd), GENERIC),
    "prod": (lambda x, ax, kd: np.prod(x, axis=ax, keepdims=kd), MODERATE),
    "prod_method": (lambda x, ax, kd: x.prod(axis=ax, keepdims=kd), MODERATE),
    "max": (lambda x, ax, kd: np.max(x, axis=ax, keepdims=kd), DISTINCT),
    "min": (lambda x, ax, kd: np.min(x, axis=ax, keepdims=kd), DISTINCT),
    "amax": (lambda x, ax, kd: np.amax(x, axis=ax, keepdims=kd), DISTINCT),
    "amin": (lambda x, ax, kd: np.amin(x, axis=ax, keepdims=kd), DISTINCT),
    "max_method": (lambda x, ax, kd: x.max(ax, keepdims=kd), DISTINCT),
    "ptp": (lambda x, ax, kd: np.ptp(x, axis=ax, keepdims=kd), DISTINCT),
    "var": (lambda x, ax, kd: np.var(x, axis=ax, keepdims=kd), GENERIC),
    "std": (lambda x, ax, kd: np.std(x, axis=ax, keepdims=kd), DISTINCT),
    "nansum": (lambda x, ax, kd: np.nansum(x, axis=ax, keepdims=kd), GENERIC),
    "nanmean": (lambda x, ax, kd: np.nanmean(x, axis=ax, keepdims=kd), GENERIC),
    "nanprod": (lambda x, ax, kd: np.nanprod(x, axis=ax, keepdims=kd), MODERATE),
    "average": (lambda x, ax, kd: np.average(x, axis=ax, keepdims=kd), GENERIC),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@FEW
@given(data=st.data())
def test_reduction(name, data):
    fn, elements = REDUCTIONS[name]
    x, axis, keepdims = data.draw(reduction_case(elements, max_side=3 if "prod" in name else 4,
                                                 unique=elements is DISTINCT))
    f = lambda x: fn(x, axis, keepdims)  # noqa: E731
    assert_matches_numpy(f, x)
    check_grads(f, x)


@pytest.mark.parametrize("ddof", [1, 2])
@FEW
@given(case=reduction_case(DISTINCT, unique=True))
def test_var_std_ddof(ddof, case):
    x, axis, keepdims = case
    assume(count(x, axis) > ddof)
    for f in (lambda x: np.var(x, axis=axis, ddof=ddof, keepdims=keepdims),
              lambda x: x.std(axis, ddof=ddof, keepdims=keepdims)):
        assert_matches_numpy(f, x)
        check_grads(f, x)


@FEW
@given(case=reduction_case(GENERIC), data=st.data())
def test_average_weights(case, data):
    a, axis, keepdims = case
    if isinstance(axis, int) and data.draw(st.booleans()):
        wshape = (a.shape[axis],)        # 1-D weights along one axis
    else:
        wshape = a.shape
    w = data.draw(hnp.arrays(np.float64, wshape, elements=st.floats(0.5, 2.0)))
    f = lambda a, w: np.average(a, axis=axis, weights=w, keepdims=keepdims)  # noqa: E731
    assert_matches_numpy(lambda a: f(a, w), a)
    assert_matches_numpy(lambda w: f(a, w), w)
    check_grads(f, a, w)


@st.composite
def scan_case(draw, elements):
    shape = draw(shapes(0, 3, max_side=4))
    x = draw(hnp.arrays(np.float64, shape, elements=elements))
    axis = draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1))) if shape else None
    return x, axis


SCANS = {
    "cumsum": (lambda x, ax: np.cumsum(x, axis=ax), GENERIC),
    "cumsum_method": (lambda x, ax: x.cumsum(ax), GENERIC),
    "cumprod": (lambda x, ax: np.cumprod(x, axis=ax), MODERATE),
    "cumprod_method": (lambda x, ax: x.cumprod(axis=ax), MODERATE),
}


@pytest.mark.parametrize("name", sorted(SCANS))
@FEW
@given(data=st.data())
def test_scan(name, data):
    fn, elements = SCANS[name]
    x, axis = data.draw(scan_case(elements))
    f = lambda x: fn(x, axis)  # noqa: E731
    assert_matches_numpy(f, x)
    check_grads(f, x)


# -- ufunc spellings and array-API names -----------------------------------------------------------
X = np.array([[0.3, -1.2, 0.7], [1.1, 0.4, -0.5]])

SPELLINGS = [
    lambda x: np.add.reduce(x),                     # axis=0 by default, unlike np.sum
    lambda x: np.add.reduce(x, axis=None),
    lambda x: np.add.reduce(x, axis=-1, keepdims=True, dtype=np.float64),
    lambda x: np.multiply.reduce(x, axis=(0, 1)),
    lambda x: np.multiply.reduce(x, axis=1, initial=2.0),
    lambda x: np.maximum.reduce(x, axis=1, keepdims=True),
    lambda x: np.minimum.reduce(x),
    lambda x: np.maximum.reduce(x, axis=0, initial=0.5),
    lambda x: np.add.accumulate(x),
    lambda x: np.multiply.accumulate(x, axis=1),
    lambda x: np.sum(x, axis=0, initial=1.5),
    lambda x: np.cumulative_sum(x, axis=1),
    lambda x: np.cumulative_prod(x, axis=0),
]


@pytest.mark.parametrize("f", SPELLINGS)
def test_spellings(f):
    assert_matches_numpy(f, X)
    check_grads(f, X)


# -- conventions ----------------------------------------------------------------------------------
def test_max_ties_split_equally():
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]])
    want = np.array([[0, 0.5, 0.5], [0.5, 0.5, 0]])
    np.testing.assert_allclose(grad(lambda x: np.sum(np.max(x, axis=1)), x), want, atol=1e-12)
    np.testing.assert_allclose(grad(lambda x: np.sum(np.amin(-x, axis=-1)), x), -want, atol=1e-12)
    t = np.array([[1.0, 2.0, 4.0], [8.0, 16.0, 32.0]])
    np.testing.assert_allclose(tangent(lambda x: np.max(x, axis=1), x, t), [3.0, 12.0], atol=1e-11)
    np.testing.assert_allclose(grad(lambda x: np.max(x), np.full((2, 2), 7.0)),
                               np.full((2, 2), .25), atol=1e-12)
    # ptp of a constant slice: the max and min conventions cancel
    np.testing.assert_allclose(grad(lambda x: np.ptp(x), np.ones(3)), np.zeros(3), atol=1e-12)


def test_max_initial():
    x = np.array([1.0, 3.0, 2.0])
    np.testing.assert_allclose(grad(lambda x: np.max(x, initial=5.0), x), [0, 0, 0], atol=1e-12)
    np.testing.assert_allclose(grad(lambda x: np.max(x, initial=3.0), x), [0, 1, 0], atol=1e-12)
    np.testing.assert_allclose(grad(lambda x: np.min(x, initial=0.0), x), [0, 0, 0], atol=1e-12)


def prod_gradient(x):
    return np.array([np.prod(np.delete(x, i)) for i in range(x.size)])


def prod_hessian(x):
    n = x.size
    return np.array([[0.0 if i == j else np.prod(np.delete(x, [i, j])) for j in range(n)]
                     for i in range(n)])


@pytest.mark.parametrize("x", [np.array([2.0, 0.0, 3.0, 4.0]), np.array([2.0, 0.0, 3.0, 0.0]),
                               np.array([0.0, 0.0, 0.0]), np.array([0.0])])
def test_prod_with_zeros_is_exact(x):
    with np.errstate(divide="raise", invalid="raise"):
        np.testing.assert_allclose(grad(np.prod, x), prod_gradient(x), atol=1e-11)
        np.testing.assert_allclose(hessian(np.prod, x), prod_hessian(x), atol=1e-11)
        np.testing.assert_allclose(tangent(np.prod, x, np.arange(1.0, x.size + 1)),
                                   prod_gradient(x) @ np.arange(1.0, x.size + 1), atol=1e-10)
    check_grads(np.prod, x, order=3)


def test_prod_with_zeros_over_several_axes():
    x = np.array([[[2.0, 0.0], [3.0, 1.5]], [[-1.0, 2.0], [0.0, 0.0]]])
    with np.errstate(divide="raise", invalid="raise"):
        g = grad(lambda x: np.sum(np.prod(x, axis=(0, -1)) * np.array([1.0, 2.0])), x)
    want = np.zeros_like(x)
    for j, w in enumerate([1.0, 2.0]):
        want[:, j, :] = w * prod_gradient(x[:, j, :].ravel()).reshape(2, 2)
    np.testing.assert_allclose(g, want, atol=1e-11)
    check_grads(lambda x: np.prod(x, axis=(0, 2)), x)


@pytest.mark.parametrize("x", [np.array([2.0, 0.0, 3.0, -1.5]), np.array([0.0, 2.0, 0.0, 3.0])])
def test_cumprod_with_zeros_is_exact(x):
    n = x.size
    jac = np.array([[np.prod(np.delete(x[:k + 1], i)) if i <= k else 0.0 for i in range(n)]
                    for k in range(n)])
    with np.errstate(divide="raise", invalid="raise"):
        for k in range(n):
            np.testing.assert_allclose(grad(lambda x: np.cumprod(x)[k], x), jac[k], atol=1e-11)
            np.testing.assert_allclose(tangent(np.cumprod, x, np.eye(n)[k]), jac[:, k], atol=1e-11)
    check_grads(np.cumprod, x, order=3)
    check_grads(lambda x: np.cumprod(x.reshape(2, 2), axis=0), x)


def test_nan_entries_get_zero_gradient():
    x = np.array([[1.0, np.nan, 3.0], [np.nan, np.nan, 2.0]])
    nan = np.isnan(x)
    np.testing.assert_array_equal(grad(np.nansum, x), np.where(nan, 0.0, 1.0))
    np.testing.assert_allclose(grad(lambda x: np.sum(np.nanmean(x, axis=1)), x),
                               [[0.5, 0, 0.5], [0, 0, 1.0]], atol=1e-12)
    np.testing.assert_allclose(grad(np.nanprod, x), [[6, 0, 2], [0, 0, 3]], atol=1e-11)
    t = np.arange(1.0, 7.0).reshape(2, 3)
    np.testing.assert_allclose(tangent(lambda x: np.nansum(x, axis=0), x, t), [1, 0, 9], atol=1e-11)
    np.testing.assert_allclose(tangent(lambda x: np.nanmean(x), x, t), (1 + 3 + 6) / 3, atol=1e-11)
    assert traced_primal(np.nanmean, x) == np.nanmean(x)


def test_std_of_constant_slice_has_zero_gradient():
    x = np.array([[2.0, 2.0, 2.0], [1.0, 2.0, 4.0]])
    with np.errstate(divide="raise", invalid="raise"):
        g = grad(lambda x: np.sum(np.std(x, axis=1)), x)
        t = tangent(lambda x: np.std(x, axis=1), x, np.ones_like(x) + np.arange(2)[:, None])
        h = hessian(lambda x: np.std(x[0]), x)
    np.testing.assert_array_equal(g[0], 0.0)
    np.testing.assert_allclose(g[1], (x[1] - x[1].mean()) / (3 * np.std(x[1])), atol=1e-12)
    np.testing.assert_allclose(t, 0.0, atol=1e-15)
    assert np.all(np.isfinite(h))


# -- dtypes and non-differentiable results -----------------------------------------------------------
@pytest.mark.parametrize("f", [np.sum, np.mean, np.prod, np.max, np.ptp, np.var, np.std,
                               np.cumsum, np.cumprod, np.nansum, np.nanmean,
                               lambda x: np.average(x, weights=np.ones(3, np.float32)),
                               lambda x: np.max(x, axis=0, keepdims=True)])
def test_float32_is_kept(f):
    x = np.array([0.5, -1.0, 2.0], dtype=np.float32)
    out = traced_primal(f, x)
    assert np.result_type(out) == np.result_type(f(x)) == np.float32
    g = grad(lambda x: np.sum(f(x)), x)
    assert g.dtype == np.float32


def test_sum_dtype_gives_cotangent_in_input_dtype():
    x = np.array([0.5, -1.0, 2.0], dtype=np.float32)
    g = grad(lambda x: np.sum(x, dtype=np.float64), x)
    assert g.dtype == np.float32
    np.testing.assert_array_equal(g, 1.0)


def test_integer_results_carry_no_derivative():
    seen = []

    def f(x):
        seen.extend([np.sum(x, dtype=np.int64), np.cumsum(x, dtype=np.int64),
                     np.prod(x, dtype=np.int32), np.max(x > 0)])
        return np.sum(x)

    x = np.array([1.5, 2.5, -3.0])
    grad(f, x)
    assert not any(isinstance(v, Tracer) for v in seen)
    assert seen[0] == np.sum(x, dtype=np.int64) and seen[3]
    np.testing.assert_array_equal(seen[1], np.cumsum(x, dtype=np.int64))


def test_unsupported_arguments_raise():
    x = np.ones(3)
    with pytest.raises(NotImplementedError):
        grad(lambda x: np.nanvar(x, where=np.array([True, False, True])), x)
    with pytest.raises(NonDifferentiableError, match="np.mean.*out="):
        grad(lambda x: np.mean(x, out=np.zeros(())), x)
    with pytest.raises(NotImplementedError):
        grad(lambda x: np.average(x, weights=x, returned=True)[0], x)
    with pytest.raises(ZeroDivisionError):
        grad(lambda x: np.average(x, weights=x - 1), x)
    with pytest.raises(np.exceptions.AxisError):
        grad(lambda x: np.sum(x, axis=1), x)


# -- nan-reductions with NaN at random positions (whole slices may be NaN) ---------------------------
NAN_REDUCTIONS = {
    "nansum": lambda x, ax, kd: np.nansum(x, axis=ax, keepdims=kd),
    "nanmean": lambda x, ax, kd: np.nanmean(x, axis=ax, keepdims=kd),
    "nanprod": lambda x, ax, kd: np.nanprod(x, axis=ax, keepdims=kd),
    "nanmax": lambda x, ax, kd: np.nanmax(x, axis=ax, keepdims=kd),
    "nanmin": lambda x, ax, kd: np.nanmin(x, axis=ax, keepdims=kd),
    "nanvar": lambda x, ax, kd: np.nanvar(x, axis=ax, keepdims=kd),
    "nanvar_ddof": lambda x, ax, kd: np.nanvar(x, axis=ax, ddof=1, keepdims=kd),
    "nanstd": lambda x, ax, kd: np.nanstd(x, axis=ax, keepdims=kd),
    "nancumsum": lambda x, ax, kd: np.nancumsum(x, axis=ax if isinstance(ax, int) else None),
    "nancumprod": lambda x, ax, kd: np.nancumprod(x, axis=ax if isinstance(ax, int) else None),
}


@pytest.mark.parametrize("name", sorted(NAN_REDUCTIONS))
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_nan_reduction_with_nan_entries(name, data):
    fn = NAN_REDUCTIONS[name]
    x, axis, keepdims = data.draw(reduction_case(DISTINCT, max_side=3, unique=True))
    x = np.where(data.draw(hnp.arrays(np.bool_, x.shape)), np.nan, x)
    f = lambda x: fn(x, axis, keepdims)  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # all-NaN slices, dof <= 0
        want, got = f(x), traced_primal(f, x)
        assert np.shape(got) == np.shape(want)
        assert np.result_type(got) == np.result_type(want)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)   # NaN where NumPy's is
        undefined = np.isnan(want)   # finite differences cannot check NaN outputs
        check_grads(lambda x: np.where(undefined, 0.0, f(x)), x, order=1)


def test_nan_extrema_and_variance_derivatives():
    x = np.array([[1.0, np.nan, 3.0], [np.nan, np.nan, np.nan], [2.0, -1.0, np.nan]])
    with pytest.warns(RuntimeWarning, match="All-NaN"):
        g = grad(lambda x: np.nansum(np.nanmax(x, axis=1) + 2 * np.nanmin(x, axis=1)), x)
    np.testing.assert_array_equal(g, [[2, 0, 1], [0, 0, 0], [1, 2, 0]])
    # nanvar of the non-NaN entries: d/dx_i = 2 (x_i - mean) / (n - ddof).
    g = grad(lambda x: np.nanvar(x[0], ddof=1), x)
    np.testing.assert_allclose(g[0], [-2.0, 0.0, 2.0], atol=1e-12)
    with pytest.warns(RuntimeWarning, match="Degrees of freedom"):
        v = traced_primal(lambda x: np.nanvar(x, axis=1, ddof=2), x)
    np.testing.assert_array_equal(v, [np.nan, np.nan, np.nan])
    # nanstd'(0) = 0 on a constant slice, as std.
    g = grad(lambda x: np.nanstd(x), np.array([2.0, np.nan, 2.0]))
    np.testing.assert_array_equal(g, [0.0, 0.0, 0.0])
    clean = np.array([[0.3, np.nan, 1.7, -0.4], [1.1, 0.2, np.nan, 0.6]])
    for f in (lambda x: np.nanvar(x, axis=1), lambda x: np.nanstd(x, axis=1, ddof=1),
              lambda x: np.nanmax(x, axis=0) ** 2, lambda x: np.nancumprod(x, axis=1)):
        # (NaN entries enter no product: x * x would give them the derivative 0 * nan.)
        check_grads(f, clean)


def test_nan_reductions_keep_float32_and_refuse_out():
    x = np.array([[1.0, np.nan, 3.0], [2.0, 1.0, np.nan]], dtype=np.float32)
    for f in (lambda x: np.nanmax(x, axis=0), lambda x: np.nanvar(x, axis=1),
              lambda x: np.nanstd(x, axis=0), np.nancumsum):
        got = traced_primal(lambda x: f(x.astype(np.float32)), x.astype(np.float64))
        assert np.result_type(got) == np.result_type(f(x)) == np.float32
    with pytest.raises(NonDifferentiableError, match="np.nanmax.*out="):
        grad(lambda x: np.nanmax(x, out=np.zeros(())), np.ones(2))


@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_cumprod_with_several_zeros(data):
    shape = data.draw(shapes(1, 2, max_side=4))
    x = data.draw(hnp.arrays(np.float64, shape, elements=st.sampled_from([0.0, 0.5, -1.5, 2.0])))
    axis = data.draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)))
    f = lambda x: np.cumprod(x, axis=axis)  # noqa: E731
    assert_matches_numpy(f, x)
    with np.errstate(divide="raise", invalid="raise"):   # no division by an entry
        check_grads(f, x)


@pytest.mark.parametrize("fn", [np.sum, np.prod, np.mean, np.var, np.std, np.nansum, np.nanmean,
                                np.max, np.min])
@pytest.mark.parametrize("shape, axis, keepdims", [((5,), None, False), ((3, 4), 1, False),
                                                   ((3, 4), 0, True), ((2, 3, 4), (0, 2), False)])
def test_reductions_with_where_match_numpy_and_finite_differences(fn, shape, axis, keepdims):
    # where= was refused on traced values; the masked-out entries get no derivative
    rng = np.random.default_rng(len(shape) + 7 * (axis is None))
    x = rng.standard_normal(shape) + 1.5
    mask = rng.random(shape[-1:]) > 0.3       # broadcast against x, as NumPy allows
    mask[0] = True
    extra = {"ddof": 1} if fn in (np.var, np.std) else {}
    if fn in (np.max, np.min):   # NumPy needs an initial value with a mask here
        extra = {"initial": -10.0 if fn is np.max else 10.0}
    call = lambda v: fn(v, axis=axis, keepdims=keepdims, where=mask, **extra)   # noqa: E731
    with np.errstate(all="ignore"):
        want = call(x)
        (g,), value = autodiff(ReverseWithPrimal, lambda v: np.nansum(call(v)), Active,
                               Active(x.copy()))
        tangent, primal_value = autodiff(ForwardWithPrimal, call,
                                         Duplicated(x.copy(), np.ones_like(x)))
        np.testing.assert_allclose(primal_value, want, rtol=1e-12, equal_nan=True)
        assert np.shape(primal_value) == np.shape(want)
        h = 1e-6
        fd = np.zeros_like(x)
        for i in np.ndindex(x.shape):
            e = np.zeros_like(x)
            e[i] = h
            fd[i] = (np.nansum(call(x + e)) - np.nansum(call(x - e))) / (2 * h)
        np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-7)
        assert np.all(g[..., ~mask] == 0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16, np.complex128])
@pytest.mark.parametrize("shape, axis", [((6, 130), 0), ((3, 4, 64), 1), ((5, 2, 70), -3)])
def test_scans_along_a_leading_axis_are_numpys_bits(shape, axis, dtype):
    """cumsum / cumprod along a leading axis with long slices scan one slice at a time
    (ops/reductions.py `_scan_along`): the primal is NumPy's bit for bit, zeros, NaN and inf
    included, and the reverse scan (the cotangent of cumsum) too."""
    rng = np.random.default_rng(3)
    x = (rng.random(shape) + 0.5).astype(dtype)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.random(shape)
    x.flat[[5, 77, 140]] = [0, np.nan, np.inf]
    with np.errstate(invalid="ignore"):
        for fn in (np.cumsum, np.cumprod):
            got = traced_value(lambda v: fn(v, axis=axis), x)
            np.testing.assert_array_equal(got, fn(x, axis=axis))
            assert got.dtype == fn(x, axis=axis).dtype
    w = rng.random(shape)
    (g,), = autodiff(Reverse, lambda v: np.sum(np.cumsum(v, axis=axis) * w), Active,
                     Active(rng.random(shape)))
    np.testing.assert_array_equal(g, np.flip(np.cumsum(np.flip(w, axis), axis=axis), axis))


def test_prod_and_cumprod_gradients_along_a_leading_axis_with_zeros():
    rng = np.random.default_rng(4)
    x = rng.random((4, 130)) + 0.5
    x[1, 3] = x[2, 3] = x[0, 9] = 0.0    # two zeros in one slice, one in another
    check_grads(lambda v: np.prod(v, axis=0), x, order=1)
    check_grads(lambda v: np.cumprod(v, axis=0), x, order=1)
