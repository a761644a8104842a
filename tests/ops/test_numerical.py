"""Everyday numerical routines on traced values: np.gradient, np.trapezoid, np.diff, np.interp,
np.cross, np.convolve, np.correlate, np.polyval, np.polyfit, np.unique, np.real_if_close,
np.kron and np.clip with traced bounds.

Primal results on traced input are compared with NumPy over random shapes, axes and keyword
values; derivatives with finite differences (forward, reverse and batch mode; second order in
the explicit cases). Interpolation points are drawn away from the sample points, where the
derivative has a kink.
"""
import warnings

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tape import Active, Duplicated, Forward, Reverse, autodiff
from tape.testing import arrays, check_grads, shapes, traced_value

FAST = settings(max_examples=20, deadline=None)


def traced(f, *args):
    """f's value on traced arguments: reverse mode's augmented primal rules (forward mode's
    rules for complex results, which reverse mode does not take as an Active return)."""
    leaves = f(*args)
    leaves = leaves if isinstance(leaves, tuple) else (leaves,)
    complex_result = any(np.iscomplexobj(y) for y in leaves)
    return traced_value(f, *args, mode="forward" if complex_result else "reverse")


def assert_matches(got, want, rtol=1e-12, atol=1e-12):
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            assert_matches(g, w, rtol, atol)
        return
    assert np.shape(got) == np.shape(want)
    assert np.result_type(got) == np.result_type(want)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def grad(f, *args):
    return autodiff(Reverse, f, Active, *map(Active, args))[0]


def coordinates(rng, n):
    """n increasing coordinates with gaps in [0.3, 1.3)."""
    return np.cumsum(rng.uniform(0.3, 1.3, n)) - 1.0


# -- np.gradient ------------------------------------------------------------------------------------
@st.composite
def gradient_case(draw):
    shape = draw(shapes(1, 3, min_side=3, max_side=5))
    f = draw(arrays(shape))
    ndim = len(shape)
    axis = draw(st.one_of(st.none(), st.integers(-ndim, ndim - 1),
                          st.lists(st.integers(0, ndim - 1), min_size=1, unique=True)
                          .map(tuple)))
    axes = range(ndim) if axis is None else [axis] if isinstance(axis, int) else axis
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    kind = draw(st.sampled_from(["none", "scalar", "per-axis"]))
    if kind == "none":
        spacing = ()
    elif kind == "scalar":
        spacing = (draw(st.floats(0.2, 3.0)),)
    else:   # coordinates, evenly spaced ones (NumPy's uniform path) or scalars per axis
        spacing = tuple(draw(st.sampled_from([
            coordinates(rng, shape[a]), np.arange(shape[a]) * 0.5, float(rng.uniform(0.2, 2))]))
            for a in axes)
    return f, spacing, axis, draw(st.sampled_from([1, 2]))


@FAST
@given(gradient_case())
def test_gradient_matches_numpy(case):
    f, spacing, axis, edge_order = case
    fn = lambda f, *h: np.gradient(f, *h, axis=axis, edge_order=edge_order)   # noqa: E731
    assert_matches(traced(fn, f, *spacing), fn(f, *spacing), rtol=1e-10, atol=1e-10)
    check_grads(fn, f, *spacing, order=1)


@pytest.mark.parametrize("edge_order", [1, 2])
def test_gradient_second_order_in_values_and_coordinates(edge_order):
    rng = np.random.default_rng(1)
    f, x = rng.standard_normal((4, 5)), coordinates(rng, 5)
    check_grads(lambda f, x: np.gradient(f * f, x, axis=1, edge_order=edge_order), f, x)
    check_grads(lambda f, h: np.gradient(f * f, h, 2.0 * h), f, 0.7)


def test_gradient_of_a_quadratic_is_exact_with_edge_order_2():
    # Second-order one-sided differences are exact for quadratics, on any spacing.
    x = np.array([0.0, 0.3, 1.0, 1.4, 2.5])
    got = traced(lambda x: np.gradient(x * x, x, edge_order=2), x)
    np.testing.assert_allclose(got, 2 * x, rtol=1e-12, atol=1e-12)
    # d/dx_k of sum(gradient(x**2, x)) = d/dx_k sum(2 x) = 2: the coordinates' derivative.
    g, = grad(lambda x: np.sum(np.gradient(x * x, x, edge_order=2)), x)
    np.testing.assert_allclose(g, 2.0, rtol=1e-10, atol=1e-12)


def test_gradient_errors():
    x = np.ones(3)
    with pytest.raises(ValueError, match="edge_order"):
        grad(lambda x: np.sum(np.gradient(x, edge_order=3)), x)
    with pytest.raises(ValueError, match="at least"):
        grad(lambda x: np.sum(np.gradient(x, edge_order=2)), np.ones(2))
    with pytest.raises(ValueError, match="must match the length"):
        grad(lambda x: np.sum(np.gradient(x, np.arange(4.0))), x)
    with pytest.raises(TypeError, match="invalid number"):
        grad(lambda x: np.sum(np.gradient(x, 1.0, 2.0)), x)


# -- np.trapezoid and np.diff -------------------------------------------------------------------------
@st.composite
def trapezoid_case(draw):
    shape = draw(shapes(1, 3, min_side=1, max_side=4))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    kind = draw(st.sampled_from(["dx", "x1", "xn"]))
    x = (draw(st.floats(0.1, 2.0)) if kind == "dx" else coordinates(rng, shape[axis])
         if kind == "x1" else rng.standard_normal(shape))
    return draw(arrays(shape)), kind, x, axis


@FAST
@given(trapezoid_case())
def test_trapezoid_matches_numpy(case):
    y, kind, x, axis = case
    fn = ((lambda y, x: np.trapezoid(y, dx=x, axis=axis)) if kind == "dx"
          else (lambda y, x: np.trapezoid(y, x, axis=axis)))
    assert_matches(traced(fn, y, x), fn(y, x))
    check_grads(fn, y, x)


@st.composite
def diff_case(draw):
    shape = draw(shapes(1, 3, min_side=1, max_side=4))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    edge = tuple(1 if i == axis % len(shape) else n for i, n in enumerate(shape))
    prepend = draw(st.one_of(st.none(), st.floats(-2, 2), arrays(edge)))
    append = draw(st.one_of(st.none(), st.floats(-2, 2), arrays(edge)))
    return draw(arrays(shape)), draw(st.integers(0, 3)), axis, prepend, append


@FAST
@given(diff_case())
def test_diff_with_traced_prepend_and_append(case):
    a, n, axis, prepend, append = case
    kw = {k: v for k, v in (("prepend", prepend), ("append", append)) if v is not None}
    args = [a] + list(kw.values())

    def fn(a, *edges):
        return np.diff(a, n=n, axis=axis, **dict(zip(kw, edges)))
    assert_matches(traced(fn, *args), fn(*args))
    check_grads(fn, *args)


# -- np.interp --------------------------------------------------------------------------------------
@st.composite
def interp_case(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    n = draw(st.integers(1, 6))
    xp = coordinates(rng, n)
    fp = rng.standard_normal(n)
    if draw(st.booleans()):
        fp = fp + 1j * rng.standard_normal(n)
    x = rng.uniform(xp[0] - 1.5, xp[-1] + 1.5, draw(st.sampled_from([(), (3,), (2, 3)])))
    left, right = draw(st.one_of(st.none(), st.floats(-2, 2))), draw(st.one_of(
        st.none(), st.floats(-2, 2)))
    period = draw(st.one_of(st.none(), st.floats(0.5, 4.0), st.floats(-4.0, -0.5)))
    return x, xp, fp, left, right, period


def _away_from_knots(x, xp, period):
    """Whether every x is at least 1e-3 from every sample point (also after wrapping)."""
    if period is not None:
        x, xp = np.mod(x, abs(period)), np.mod(xp, abs(period))
        knots = np.concatenate([xp, xp - abs(period), xp + abs(period)])
    else:
        knots = xp
    return np.min(np.abs(np.subtract.outer(np.ravel(x), knots))) > 1e-3


@FAST
@given(interp_case())
def test_interp_matches_numpy(case):
    x, xp, fp, left, right, period = case
    assume(period is None or len(np.unique(np.mod(xp, abs(period)).round(6))) == len(xp))
    fn = lambda x, xp, fp: np.interp(x, xp, fp, left=left, right=right,   # noqa: E731
                                     period=period)
    want = fn(x, xp, fp)
    assert_matches(traced(fn, x, xp, fp), want, rtol=1e-10, atol=1e-10)
    assert_matches(traced(lambda fp: fn(x, xp, fp), fp), want, rtol=1e-10, atol=1e-10)
    if _away_from_knots(x, xp, period):
        check_grads(fn, x, xp, fp, order=1)


def test_interp_second_order_and_edges():
    xp, fp = np.array([0.0, 1.0, 2.5, 3.0]), np.array([1.0, -1.0, 2.0, 0.5])
    x = np.array([-0.5, 0.4, 1.7, 2.8, 3.5])
    check_grads(lambda x, xp, fp: np.interp(x * x, xp, fp * fp), np.sqrt(np.abs(x)), xp, fp)
    # left/right are not among NumPy's dispatch arguments: fp is traced so the rule runs.
    check_grads(lambda l, r, fp: np.interp(x, xp, fp, left=l * l, right=r), 0.3, -0.8, fp)
    # Outside the samples the value is the end value (or left/right): no derivative in x.
    g, = grad(lambda x: np.sum(np.interp(x, xp, fp)), x)
    np.testing.assert_allclose(g, [0.0, -2.0, 2.0, -3.0, 0.0], atol=1e-12)
    # At a sample point: the slope of the segment to its right (to the left at the last one).
    g, = grad(lambda x: np.sum(np.interp(x, xp, fp)), np.array([1.0, 3.0]))
    np.testing.assert_allclose(g, [2.0, -3.0], atol=1e-12)


def test_interp_errors():
    with pytest.raises(ValueError, match="same length"):
        grad(lambda f: np.interp(0.5, np.arange(3.0), f), np.ones(2))
    with pytest.raises(ValueError, match="empty"):
        grad(lambda f: np.interp(0.5, np.zeros(0), f), np.zeros(0))
    with pytest.raises(ValueError, match="period"):
        grad(lambda f: np.interp(0.5, np.arange(2.0), f, period=0), np.ones(2))


# -- np.cross --------------------------------------------------------------------------------------
@st.composite
def cross_case(draw):
    from hypothesis.extra import numpy as hnp
    base = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=3))
    na, nb = draw(st.sampled_from([3, 2])), draw(st.sampled_from([3, 2]))
    shape_a, shape_b = base.input_shapes
    ia, ib = draw(st.integers(0, len(shape_a))), draw(st.integers(0, len(shape_b)))
    shape_a = shape_a[:ia] + (na,) + shape_a[ia:]
    shape_b = shape_b[:ib] + (nb,) + shape_b[ib:]
    axisa = draw(st.sampled_from([ia, ia - len(shape_a)]))
    axisb = draw(st.sampled_from([ib, ib - len(shape_b)]))
    out_ndim = len(base.result_shape) + 1
    axisc = draw(st.integers(-out_ndim, out_ndim - 1))
    return draw(arrays(shape_a)), draw(arrays(shape_b)), axisa, axisb, axisc


@FAST
@given(cross_case())
def test_cross_matches_numpy(case):
    a, b, axisa, axisb, axisc = case
    fn = lambda a, b: np.cross(a, b, axisa=axisa, axisb=axisb, axisc=axisc)   # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)   # 2-vectors
        assert_matches(traced(fn, a, b), fn(a, b))
        check_grads(fn, a, b)


def test_cross_axis_keyword_and_errors():
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((3, 2)), rng.standard_normal((3, 2))
    assert_matches(traced(lambda a, b: np.cross(a, b, axis=0), a, b), np.cross(a, b, axis=0))
    check_grads(lambda a, b: np.cross(a * a, b, axis=0), a, b)
    with pytest.raises(ValueError, match="dimension must be 2 or 3"):
        grad(lambda a: np.sum(np.cross(a, a)), np.ones(4))
    with pytest.warns(DeprecationWarning):
        grad(lambda a: np.sum(np.cross(a, a)), np.ones(2))


# -- np.convolve, np.correlate ------------------------------------------------------------------------
@st.composite
def conv_case(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))

    def vec(n):
        v = rng.standard_normal(n)
        return v + 1j * rng.standard_normal(n) if draw(st.booleans()) else v
    return (vec(draw(st.integers(1, 6))), vec(draw(st.integers(1, 6))),
            draw(st.sampled_from(["full", "same", "valid"])))


@FAST
@given(conv_case())
def test_convolve_and_correlate_match_numpy(case):
    a, v, mode = case
    for np_fn in (np.convolve, np.correlate):
        fn = lambda a, v: np_fn(a, v, mode=mode)   # noqa: E731
        assert_matches(traced(fn, a, v), fn(a, v))
        assert_matches(traced(lambda v: fn(a, v), v), fn(a, v))
        check_grads(fn, a, v, order=1)


def test_correlate_conjugates_its_second_argument():
    a, v = np.array([1.0 + 2j, -0.5j, 0.3]), np.array([0.2 - 1j, 1.5 + 0.5j])
    # The reverse rule of v -> correlate(a, v) depends on v only through conj(v): the
    # derivative of |c|^2 must match finite differences in the real and imaginary parts.
    check_grads(lambda a, v: np.correlate(a, v, "full"), a, v)
    check_grads(lambda v: np.abs(np.correlate(a, v, "same")) ** 2, v)
    assert_matches(traced(lambda v: np.correlate(a, v, "full"), v),
                   np.convolve(a, np.conj(v[::-1]), "full"))


def test_convolve_errors():
    with pytest.raises(ValueError, match="empty"):
        grad(lambda a: np.sum(np.convolve(a, np.zeros(0))), np.ones(2))
    with pytest.raises(ValueError, match="one-dimensional"):
        grad(lambda a: np.sum(np.convolve(a, np.ones(2))), np.ones((2, 2)))
    with pytest.raises(ValueError, match="mode"):
        grad(lambda a: np.sum(np.convolve(a, np.ones(2), mode="wide")), np.ones(2))


# -- np.polyval, np.polyfit ---------------------------------------------------------------------------
@FAST
@given(arrays(shapes(1, 1, max_side=5)), arrays(shapes(0, 2)))
def test_polyval_matches_numpy(p, x):
    assert_matches(traced(np.polyval, p, x), np.polyval(p, x))
    assert_matches(traced(lambda x: np.polyval(list(p), x), x), np.polyval(p, x))
    check_grads(np.polyval, p, x)


@st.composite
def polyfit_case(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    deg = draw(st.integers(0, 3))
    n = draw(st.integers(deg + 2, 7))
    x = coordinates(rng, n)
    y = rng.standard_normal((n,) if draw(st.booleans()) else (n, 2))
    w = rng.uniform(0.5, 2.0, n) if draw(st.booleans()) else None
    return x, y, deg, w


@FAST
@given(polyfit_case())
def test_polyfit_matches_numpy(case):
    x, y, deg, w = case
    args = (x, y) if w is None else (x, y, w)

    def fit(x, y, w=None, **kw):
        return np.polyfit(x, y, deg, w=w, **kw)
    assert_matches(traced(fit, *args), fit(*args), rtol=1e-9, atol=1e-9)
    for kw in ({"full": True}, {"cov": True}, {"cov": "unscaled"}):
        if kw.get("cov") is True and len(x) <= deg + 2:
            continue   # NumPy's scaled covariance needs more points than coefficients + 2
        got, want = traced(lambda *a: fit(*a, **kw), *args), fit(*args, **kw)
        for g, w_ in zip(got, want):
            np.testing.assert_allclose(g, w_, rtol=1e-8, atol=1e-9)
    check_grads(fit, *args, order=1)


def test_polyfit_second_order_and_exact_fit():
    x = np.array([-1.0, 0.0, 0.5, 1.5, 2.0])
    y = 2.0 - x + 0.5 * x ** 2
    np.testing.assert_allclose(traced(lambda y: np.polyfit(x, y, 2), y), [0.5, -1.0, 2.0],
                               atol=1e-12)
    check_grads(lambda x, y: np.polyfit(x, y, 2), x, y + np.sin(x))
    check_grads(lambda y, w: np.polyfit(x, y, 1, w=w), y, 1.0 + x * x)


# -- np.unique, np.real_if_close ----------------------------------------------------------------------
@st.composite
def unique_case(draw):
    shape = draw(shapes(1, 2, max_side=5))
    values = draw(st.sampled_from([np.array([0.5, -1.25, 2.0, 3.5]),
                                   np.array([0.5, np.nan, 2.0, -1.0])]))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    axis = draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)))
    return rng.choice(values, size=shape), axis, draw(st.booleans()), draw(st.booleans())


@FAST
@given(unique_case())
def test_unique_matches_numpy(case):
    x, axis, flags, equal_nan = case
    assume(axis is None or not np.isnan(x).any())
    kw = dict(return_index=flags, return_inverse=flags, return_counts=flags, axis=axis,
              equal_nan=equal_nan)
    got, want = traced(lambda x: np.unique(x, **kw), x), np.unique(x, **kw)
    got, want = (got, want) if flags else ((got,), (want,))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
        assert np.result_type(g) == np.result_type(w)
    if axis is None:
        for fn in (np.unique_values, lambda x: np.unique_counts(x).counts,
                   lambda x: np.unique_inverse(x).inverse_indices,
                   lambda x: np.unique_all(x).indices):
            np.testing.assert_array_equal(traced(fn, x), fn(x))


def test_unique_derivative_goes_to_the_first_occurrence():
    x = np.array([2.0, 1.0, 2.0, 3.0, 1.0])
    weights = np.array([1.0, 10.0, 100.0])     # for the unique values 1, 2, 3
    g, = grad(lambda x: np.sum(np.unique(x) * weights), x)
    np.testing.assert_array_equal(g, [10.0, 1.0, 0.0, 100.0, 0.0])
    t, = autodiff(Forward, np.unique, Duplicated(x, np.arange(5.0)))
    np.testing.assert_array_equal(t, [1.0, 0.0, 3.0])
    rows = np.array([[1.0, 2.0], [0.0, 1.0], [1.0, 2.0]])
    g, = grad(lambda r: np.sum(np.unique(r, axis=0) * np.array([[1.0, 2.0], [3.0, 4.0]])), rows)
    np.testing.assert_array_equal(g, [[3.0, 4.0], [1.0, 2.0], [0.0, 0.0]])
    # The index outputs are plain integer arrays.
    _, index, inverse, counts = traced(lambda x: np.unique(x, True, True, True), x)
    np.testing.assert_array_equal(counts, [2, 2, 1])
    assert index.dtype.kind == inverse.dtype.kind == "i"
    check_grads(lambda x: np.unique(x * x), np.array([0.3, -0.9, 1.2, 0.6]))


def test_real_if_close():
    z = np.array([1.0 + 1e-17j, -2.0 + 0j])
    got = traced(np.real_if_close, z)
    assert got.dtype == np.float64 and np.array_equal(got, [1.0, -2.0])
    z2 = np.array([1.0 + 1e-3j, 2.0])
    assert traced(np.real_if_close, z2).dtype == np.complex128
    x = np.array([0.5, -1.5])
    assert_matches(traced(np.real_if_close, x), x)
    check_grads(lambda x: np.real_if_close(x * x + 0j), x)
    check_grads(lambda z: np.real_if_close(z * z), z2)
    # Python complex scalars
    check_grads(np.real_if_close, 0.4 + 0.1j)
    assert autodiff(Forward, np.real_if_close, Duplicated(0.4 + 0j, 1 + 0j)) == (1.0,)


# -- np.kron and np.clip with traced bounds ----------------------------------------------------------
@FAST
@given(arrays(shapes(0, 3, max_side=3)), arrays(shapes(0, 3, max_side=3)))
def test_kron_matches_numpy(a, b):
    assert_matches(traced(np.kron, a, b), np.kron(a, b))
    check_grads(np.kron, a, b, order=1)


@st.composite
def clip_case(draw):
    from hypothesis.extra import numpy as hnp
    s = draw(hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=2, max_side=3))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    # Values on a grid of step 0.25, bounds offset by 0.1: never equal (no kink under the step).
    x = rng.integers(-8, 9, s.input_shapes[0]) / 4
    lo = rng.integers(-8, 9, s.input_shapes[1]) / 4 + 0.1
    hi = rng.integers(-8, 9, s.input_shapes[2]) / 4 - 0.1
    return x, draw(st.sampled_from([lo, None])), draw(st.sampled_from([hi, None]))


@FAST
@given(clip_case())
def test_clip_with_traced_bounds(case):
    x, lo, hi = case
    assume(lo is not None or hi is not None)
    args = [v for v in (x, lo, hi) if v is not None]

    def fn(*args):
        it = iter(args)
        return np.clip(next(it), None if lo is None else next(it), None if hi is None else next(it))
    assert_matches(traced(fn, *args), fn(*args))
    check_grads(fn, *args)


def test_clip_gradient_flows_to_the_active_bound():
    x = np.array([-2.0, 0.5, 3.0])
    lo, hi = np.array([-1.0, -1.0, -1.0]), 2.0
    gx, glo, ghi = grad(lambda x, lo, hi: np.sum(np.clip(x, lo, hi) * np.array([1.0, 2.0, 3.0])),
                        x, lo, hi)
    np.testing.assert_array_equal(gx, [0.0, 2.0, 0.0])
    np.testing.assert_array_equal(glo, [1.0, 0.0, 0.0])
    assert ghi == 3.0
    # lo > hi: NumPy returns hi, so hi gets the derivative.
    gx, glo, ghi = grad(lambda x, lo, hi: np.clip(x, lo, hi), 0.0, 1.0, -1.0)
    assert (gx, glo, ghi) == (0.0, 0.0, 1.0)
    check_grads(lambda x, hi: np.clip(x * x, None, hi), x, 2.5)
