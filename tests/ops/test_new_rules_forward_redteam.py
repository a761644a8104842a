"""Red team of the newer NumPy rules (where= reductions, quantile methods, np.polynomial,
np.emath, reduceat / maximum.at / minimum.at, weighted histograms, polyder / polyint, np.unwrap,
np.pad's modes) in the modes other tests use least: Forward and ForwardWithPrimal, eager and
`tape.compile`d over calls whose data-dependent choices change, BatchDuplicated tangents,
float32 / float16 / complex inputs (dtype and bits against NumPy) and traced values in the
other argument positions (initial=, q, constant_values, k, weights).

Primals are compared with NumPy's own call; tangents with central finite differences in
float64 (complex: along a complex direction), at points away from ties and kinks.
"""
import warnings

import numpy as np
import pytest

import tape
from tape import BatchDuplicated, Duplicated, Forward, ForwardWithPrimal, Reverse

rng = np.random.default_rng(11)
P = np.polynomial


def _fd(f, xs, dxs, eps=1e-6):
    plus = f(*[x + eps * d for x, d in zip(xs, dxs)])
    minus = f(*[x - eps * d for x, d in zip(xs, dxs)])
    return (np.asarray(plus) - np.asarray(minus)) / (2 * eps)


def _forward(f, *xs, dxs=None):
    """(tangent, primal) of f at xs along dxs (random directions by default)."""
    if dxs is None:
        dxs = [np.asarray(rng.standard_normal(np.shape(x))
                          + (1j * rng.standard_normal(np.shape(x)) if np.iscomplexobj(x) else 0)
                          ).astype(np.asarray(x).dtype) for x in xs]
    t, v = tape.autodiff(ForwardWithPrimal, f,
                         *[Duplicated(np.array(x, copy=True), np.array(d, copy=True))
                           for x, d in zip(xs, dxs)])
    return t, v, dxs


def _same(value, expected):
    value, expected = np.asarray(value), np.asarray(expected)
    assert value.dtype == expected.dtype, (value.dtype, expected.dtype)
    assert value.shape == expected.shape, (value.shape, expected.shape)
    np.testing.assert_array_equal(value, expected)


def _same_dtype_close(value, expected):
    """Same dtype and shape; values within a few roundings of that dtype (another summation
    order than NumPy's)."""
    value, expected = np.asarray(value), np.asarray(expected)
    assert value.dtype == expected.dtype, (value.dtype, expected.dtype)
    assert value.shape == expected.shape, (value.shape, expected.shape)
    np.testing.assert_allclose(value, expected, rtol=4 * np.finfo(expected.dtype).eps)


def _primal(f, *xs):
    return _forward(f, *xs)[1]


def _check_forward(f, *xs, rtol=1e-7, atol=1e-9):
    """Forward tangent against finite differences, primal against NumPy (float64)."""
    t, v, dxs = _forward(f, *xs)
    np.testing.assert_allclose(v, f(*[np.array(x, copy=True) for x in xs]), rtol=1e-13,
                               atol=1e-15)
    np.testing.assert_allclose(t, _fd(f, xs, dxs), rtol=rtol, atol=atol)


def _check_compiled_forward(f, *calls, rtol=1e-7, atol=1e-9):
    """A compiled ForwardWithPrimal program against NumPy and finite differences on each call
    (the calls move the data-dependent choices: winners, NaN slices, unwrap corrections)."""
    compiled = tape.compile(ForwardWithPrimal, f, Duplicated, *[Duplicated] * len(calls[0]))
    dxs = [rng.standard_normal(np.shape(x)) for x in calls[0]]
    for xs in calls:
        xs = [np.asarray(x, dtype=float) for x in xs]
        t, v = compiled(*[Duplicated(x.copy(), d.copy()) for x, d in zip(xs, dxs)])
        np.testing.assert_allclose(v, f(*[x.copy() for x in xs]), rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(t, _fd(f, xs, dxs), rtol=rtol, atol=atol)


# == silent wrong values, fixed: formerly strict xfails ===========================================
@pytest.mark.parametrize("val", [P.polynomial.polyval, P.chebyshev.chebval, P.legendre.legval,
                                 P.hermite.hermval, P.laguerre.lagval],
                         ids=lambda v: v.__name__)
def test_polynomial_val_of_traced_points_with_2d_coefficients(val):
    x = np.array([0.3, -0.7])
    c = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])   # two polynomials, in the columns
    _same(_primal(lambda a: val(a, c), x), val(x, c))    # NumPy: shape (2, 2)


def test_chebval2d_of_traced_points():
    x, c = np.array([0.3, -0.7]), np.array([[1.0, 2.0], [3.0, 4.0]])
    f = lambda a: P.chebyshev.chebval2d(a, a[::-1], c)  # noqa: E731
    t, v, dxs = _forward(f, x)
    np.testing.assert_allclose(v, f(x), rtol=1e-13)       # NumPy [-0.34, -1.34]
    np.testing.assert_allclose(t, _fd(f, [x], dxs), rtol=1e-7)


@pytest.mark.parametrize("c", [-np.inf, np.inf, np.nan])
def test_pad_with_traced_nonfinite_constant(c):
    x = np.array([1.0, 2.0, 3.0])
    f = lambda a, v: np.pad(a, 1, constant_values=v)  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        t, v, _ = _forward(f, x, np.array(c), dxs=[np.ones(3), np.array(1.0)])
    _same(v, np.pad(x, 1, constant_values=c))
    np.testing.assert_array_equal(t, [1.0, 1.0, 1.0, 1.0, 1.0])


def test_pad_float32_with_traced_float64_constant_keeps_float32():
    x = np.array([0.1, -1.3, 2.2], np.float32)
    f = lambda a, v: np.pad(a, 2, constant_values=v)  # noqa: E731
    _same(_primal(f, x, np.float64(0.1)), f(x, np.float64(0.1)))


def test_pad_plain_array_with_traced_constant():
    x = np.array([1.0, 2.0, 3.0])
    t, v, _ = _forward(lambda c: np.pad(x, 2, constant_values=c), np.array(0.5),
                       dxs=[np.array(1.0)])
    _same(v, np.pad(x, 2, constant_values=0.5))
    np.testing.assert_array_equal(t, [1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0])


@pytest.mark.parametrize("fn", [np.sum, np.prod, np.nansum], ids=lambda f: f.__name__)
@pytest.mark.parametrize("where", [None, np.array([True, False, True, True])],
                         ids=["all", "where"])
def test_float32_reduction_with_float64_initial_stays_float32(fn, where):
    x = np.array([0.3, -1.2, 2.5, 0.7], np.float32)
    kwargs = {} if where is None else {"where": where}
    f = lambda a: fn(a, initial=np.float64(0.1), **kwargs)  # noqa: E731
    _same_dtype_close(_primal(f, x), f(x))


@pytest.mark.parametrize("fn", [np.emath.sqrt, np.emath.log, np.emath.arcsin],
                         ids=lambda f: f.__name__)
def test_emath_float16_outside_the_domain_is_complex128(fn):
    x = np.array([0.3, -0.5, 1.7, 2.5], np.float16)
    expected = fn(x)
    assert expected.dtype == np.complex128   # NumPy's own behaviour
    value = _primal(fn, x)
    assert value.dtype == expected.dtype
    np.testing.assert_allclose(value, expected, rtol=1e-12)


@pytest.mark.parametrize("x, q", [
    (np.array([0.3, -1.2, 2.5, 0.7, 1.1, 4.0], np.float32), [0.3, 0.6]),
    (np.array([0.3, -1.2, 2.5, 0.7, 1.1, 4.0], np.float16), np.float64(0.3)),
], ids=["float32-list", "float16-float64"])
def test_quantile_midpoint_dtype_follows_q(x, q):
    f = lambda a: np.quantile(a, q, method="midpoint")  # noqa: E731
    _same(_primal(f, x), f(x))


@pytest.mark.parametrize("q", [np.float32(0.3), np.array([0.3], np.float32), [0, 1]],
                         ids=["f32-scalar", "f32-array", "int-list"])
def test_quantile_linear_float32_with_float32_q_stays_float32(q):
    x = np.array([0.3, -1.2, 2.5, 0.7, 1.1, 4.0], np.float32)
    f = lambda a: np.quantile(a, q)  # noqa: E731
    _same(_primal(f, x), f(x))


# == unclear errors ================================================================================
def test_polyval2d_traces_or_names_itself():
    x, c = np.array([0.3, -0.7]), np.array([[1.0, 2.0], [3.0, 4.0]])
    f = lambda a: P.polynomial.polyval2d(a, a[::-1], c)  # noqa: E731
    try:
        value = _primal(f, x)
    except NotImplementedError as e:
        assert "numpy.polynomial" in str(e)
    else:
        np.testing.assert_allclose(value, f(x), rtol=1e-13)


# == new passing coverage ==========================================================================
M34 = np.array([[True, False, True, True], [False, True, True, False], [True, True, True, True]])


@pytest.mark.parametrize("fn", [np.sum, np.prod, np.mean, np.var, np.std, np.nansum,
                                np.nanmean], ids=lambda f: f.__name__)
def test_where_reductions_batch_forward(fn):
    x = rng.standard_normal((3, 4))
    f = lambda a: fn(a, axis=1, where=M34)  # noqa: E731
    d1, d2 = rng.standard_normal((2, 3, 4))
    (t1, t2), = tape.autodiff(Forward, f, BatchDuplicated(x.copy(), (d1, d2)))
    np.testing.assert_allclose(t1, _fd(f, [x], [d1]), rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(t2, _fd(f, [x], [d2]), rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("fn", [np.sum, np.prod, np.nansum], ids=lambda f: f.__name__)
def test_traced_initial_of_sum_and_prod(fn):
    x = rng.standard_normal(5)
    where = np.array([True, False, True, True, True])
    _check_forward(lambda a, i: fn(a, where=where, initial=i), x, np.array(1.7))


@pytest.mark.parametrize("fn", [np.max, np.min], ids=lambda f: f.__name__)
def test_where_max_min_with_initial_compiled_forward_across_winners(fn):
    x = np.array([[0.3, 2.0, -0.4, 1.1], [0.5, -0.2, 0.9, 0.1], [1.5, -1.0, 0.2, 0.7]])
    f = lambda a: fn(a, axis=1, where=M34, initial=0.25)  # noqa: E731
    # the second call moves the winner of each row, and the initial value wins one row
    _check_compiled_forward(f, [x], [x[:, ::-1] * np.array([[1.0], [-1.0], [1.0]])])


@pytest.mark.parametrize("method", ["lower", "higher", "nearest", "midpoint", "linear"])
def test_quantile_traced_q_forward_and_compiled(method):
    x = np.array([0.3, -1.2, 2.5, 0.7, 1.1, 4.0, -0.6])
    q = np.array([0.13, 0.61, 0.9])   # positions away from the integers and halves
    f = lambda a, qq: np.quantile(a, qq, method=method)  # noqa: E731
    _check_forward(f, x, q)
    _check_compiled_forward(f, [x, q], [x[::-1] * 1.3, q])


def test_nanquantile_compiled_forward_when_the_nan_moves():
    x = np.array([[0.3, np.nan, 2.5, 0.7], [1.1, 4.0, -0.6, np.nan]])
    moved = np.array([[np.nan, 0.2, 2.5, 0.7], [1.1, np.nan, np.nan, 0.4]])
    for method in ("nearest", "midpoint"):
        _check_compiled_forward(lambda a: np.nanquantile(a, [0.3, 0.8], axis=1,
                                                         method=method), [x], [moved])


@pytest.mark.parametrize("ufunc", [np.maximum, np.minimum], ids=lambda u: u.__name__)
def test_extremum_at_compiled_forward_when_the_winners_change(ufunc):
    def f(a, b):
        a = a * 1.0
        ufunc.at(a, [0, 1, 0, 3], b)
        return a
    a1, b1 = np.array([0.3, -0.5, 1.7, 2.5]), np.array([0.5, 0.1, 2.0, -4.0])
    a2, b2 = np.array([3.0, 0.5, 1.7, -5.0]), np.array([-0.5, -0.1, 4.0, 4.0])
    _check_compiled_forward(f, [a1, b1], [a2, b2], [a1, b1])


def test_extremum_at_batch_forward():
    def f(a, b):
        a = a * 1.0
        np.maximum.at(a, (np.array([0, 1, 0]), np.array([1, 2, 1])), b)
        return a
    a, b = rng.standard_normal((3, 4)), np.array([5.0, -5.0, 7.0])
    da, db = [rng.standard_normal((3, 4)) for _ in range(2)], [rng.standard_normal(3)
                                                               for _ in range(2)]
    (t1, t2), = tape.autodiff(Forward, f, BatchDuplicated(a.copy(), tuple(da)),
                              BatchDuplicated(b.copy(), tuple(db)))
    np.testing.assert_allclose(t1, _fd(f, [a, b], [da[0], db[0]]), rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(t2, _fd(f, [a, b], [da[1], db[1]]), rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
def test_reduceat_of_complex_values(dtype):
    z = (rng.standard_normal(6) + 1j * rng.standard_normal(6)).astype(dtype)
    for ufunc in (np.add, np.multiply):
        f = lambda a, u=ufunc: u.reduceat(a, [0, 2, 2, 5, 1])  # noqa: E731
        t, v, dxs = _forward(f, z)
        _same(v, f(z.copy()))
        if dtype == np.complex128:
            np.testing.assert_allclose(t, _fd(f, [z], dxs), rtol=1e-7, atol=1e-9)


def test_weighted_histogram_complex_weights_and_compiled_forward():
    data = np.array([0.1, 0.5, 0.55, 0.9, 1.2, -0.3])
    w = rng.standard_normal(6) + 1j * rng.standard_normal(6)
    f = lambda ww: np.histogram(data, 3, weights=ww, density=True)[0]  # noqa: E731
    t, v, dxs = _forward(f, w)
    _same(v, f(w))
    np.testing.assert_allclose(t, _fd(f, [w], dxs), rtol=1e-7, atol=1e-9)
    g = lambda ww: np.histogram2d(data, data[::-1], [2, 3], weights=ww,  # noqa: E731
                                  density=True)[0]
    w2 = np.abs(w.real) + 0.1
    _check_compiled_forward(g, [w2], [w2[::-1]])


def test_polyint_traced_constants_forward():
    c = rng.standard_normal(5)
    _check_forward(lambda cc, k: np.polyint(cc, 3, k=k), c, np.array([0.1, 0.2, 0.3]))
    _check_forward(lambda cc, k: np.polyint(cc, 2, k=k), c, np.array(0.7))


def test_unwrap_compiled_forward_when_the_corrections_change():
    p1 = np.cumsum([0.5, 2.0, 2.3, 1.7, 2.9, 0.3])
    p2 = np.cumsum([0.5, -2.9, 3.5, 0.2, -3.3, 0.3])
    _check_compiled_forward(lambda p: np.unwrap(p, period=5.0), [p1], [p2])


@pytest.mark.parametrize("fn", [np.emath.sqrt, np.emath.log10, np.emath.arccos,
                                np.emath.arctanh], ids=lambda f: f.__name__)
def test_emath_compiled_forward_when_an_entry_leaves_the_domain(fn):
    inside, outside = np.array([0.3, 0.5, 0.8]), np.array([0.3, -1.5, 2.5])
    for first, second in ((inside, outside), (outside, inside)):
        compiled = tape.compile(ForwardWithPrimal, fn, Duplicated, Duplicated)
        for x in (first, second, first):
            d = np.array([0.7, -0.4, 1.1])
            t, v = compiled(Duplicated(x.copy(), d.copy()))
            assert np.asarray(v).dtype == fn(x).dtype
            np.testing.assert_allclose(v, fn(x), rtol=1e-14, atol=1e-15)
            np.testing.assert_allclose(t, _fd(fn, [x], [d]), rtol=1e-7, atol=1e-9)


PAD_MODES = ["constant", "edge", "linear_ramp", "maximum", "mean", "median", "minimum",
             "reflect", "symmetric", "wrap"]


@pytest.mark.parametrize("mode", PAD_MODES)
def test_pad_modes_float32_and_complex(mode):
    x = rng.standard_normal((3, 4))
    for a in (x.astype(np.float32), x + 1j * rng.standard_normal((3, 4))):
        f = lambda v: np.pad(v, ((1, 2), (2, 1)), mode=mode)  # noqa: E731
        t, v, dxs = _forward(f, a)
        _same(v, f(a.copy()))
        assert np.asarray(t).dtype == a.dtype
        if a.dtype == np.complex128:
            np.testing.assert_allclose(t, _fd(f, [a], dxs), rtol=1e-7, atol=1e-9)


def test_pad_statistic_modes_compiled_forward_when_the_winner_moves():
    x1 = np.array([[0.3, 2.0, -0.4, 1.1], [0.5, -0.2, 0.9, 0.1]])
    for mode in ("maximum", "minimum", "median"):
        f = lambda a: np.pad(a, ((1, 2), (2, 1)), mode=mode, stat_length=3)  # noqa: E731
        _check_compiled_forward(f, [x1], [-x1[:, ::-1]])


def test_pad_traced_finite_constant_and_float32_array_with_a_python_float():
    x = rng.standard_normal(5)
    _check_forward(lambda a, c: np.pad(a, (2, 3), constant_values=c), x, np.array(1.5))
    x32 = x.astype(np.float32)
    f = lambda a: np.pad(a, 2, mode="linear_ramp", end_values=np.float64(0.1))  # noqa: E731
    _same(_primal(f, x32), f(x32))


@pytest.mark.parametrize("fn", [np.emath.sqrt, np.emath.log2, np.emath.arcsin],
                         ids=lambda f: f.__name__)
def test_emath_float32_and_complex64(fn):
    x = np.array([0.3, -0.5, 1.7, 2.5], np.float32)
    for a in (x, (x + 0.5j).astype(np.complex64)):
        _same(_primal(fn, a), fn(a))


def test_hvp_through_where_reduction_and_reduceat():
    def f(x):
        return (np.sum(np.sin(np.var(x, axis=1, where=M34)))
                + np.sum(np.add.reduceat(x.ravel() ** 3, [0, 5, 5, 9])))
    x, v = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    grad = lambda y: tape.gradient(Reverse, f, y)[0]  # noqa: E731
    np.testing.assert_allclose(tape.hvp(f, x.copy(), v), _fd(grad, [x], [v], eps=1e-5),
                               rtol=1e-6, atol=1e-8)
