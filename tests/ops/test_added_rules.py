"""Rules for NumPy functions that user programs reach: segment reductions (add/multiply
.reduceat), scatter extrema (maximum.at / minimum.at), weighted histograms, polyder / polyint,
np.unwrap and the statistic and ramp modes of np.pad.

Each is checked three ways: the primal against NumPy's own call (value, dtype and shape, bit
for bit), derivatives against finite differences (`check_grads`: forward, reverse and batch
modes, second order where the rule is smooth), and a compiled program against the eager one.
"""
import numpy as np
import pytest

import tape
from ops.segments import add_reduceat, multiply_reduceat
from tape import Active, Reverse, ReverseWithPrimal
from tape.testing import check_grads

rng = np.random.default_rng(3)
X6 = rng.standard_normal(6)
X63 = rng.standard_normal((6, 3))
X47 = rng.standard_normal((4, 7))


def _same(value, expected):
    """The traced call's primal is NumPy's: same dtype, shape and bits (NaN where NumPy's)."""
    value, expected = np.asarray(tape.primal(value)), np.asarray(expected)
    assert value.dtype == expected.dtype, (value.dtype, expected.dtype)
    assert value.shape == expected.shape, (value.shape, expected.shape)
    np.testing.assert_array_equal(value, expected)


def _primal_of(f, *args):
    """f's value as the engine computes it while recording (reverse mode with primal)."""
    activities = [Active(np.array(a, copy=True)) for a in args]
    _, value = tape.autodiff(ReverseWithPrimal, lambda *xs: f(*xs), Active, *activities)
    return value


def _traced_value(f, *args):
    """f(*args) with the arguments traced; the value itself is returned (not reduced)."""
    box = []

    def scalar(*xs):
        out = f(*xs)
        box.append(tape.primal(out))
        return np.sum(out * 0.0)

    tape.gradient(Reverse, scalar, *[np.array(a, copy=True) for a in args])
    return box[0]


def _compiled_agrees(f, *calls):
    """A compiled gradient of sum(f(x)**2) equals the eager one on each of the calls."""
    loss = lambda *xs: np.sum(f(*xs) ** 2)  # noqa: E731
    compiled = tape.compile(ReverseWithPrimal, loss, Active, *[Active] * len(calls[0]))
    for args in calls:
        eager = tape.autodiff(ReverseWithPrimal, loss, Active,
                              *[Active(np.array(a, copy=True)) for a in args])
        got = compiled(*[Active(np.array(a, copy=True)) for a in args])
        for e, g in zip(eager[0], got[0]):
            np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(got[1], eager[1], rtol=1e-12)


# -- np.add.reduceat / np.multiply.reduceat ---------------------------------------------------------
REDUCEAT_CASES = [
    (X6, [0, 2], 0), (X6, [3, 1, 1, 5], 0), (X6, [5], 0), (X6, [0, 0, 0], 0),
    (X6, [4, 2, 2, 0], 0), (X6, [0, 1, 2, 3, 4, 5], 0), (X6, [2, 2, 5, 5], 0),
    (X63, [0, 2], 0), (X63, [1, 0, 4], 0), (X63, [0, 1, 1], 1), (X63, [2], -1),
    (X47, [0, 3, 3, 6], 1), (X47, [3, 0], 0), (X47, [6, 6], -1),
    (np.array([0.5, np.nan, 2.0, 1.5]), [0, 2], 0), (rng.standard_normal(200), [0, 150], 0),
    (X6.astype(np.float32), [0, 3], 0), (X63, np.array([], dtype=int), 0),
    (X63.astype(np.float32), [2, 1], 1), (rng.standard_normal((3, 40)), [0, 17, 30], 1),
]


@pytest.mark.parametrize("which", ["add", "multiply"])
@pytest.mark.parametrize("case", range(len(REDUCEAT_CASES)))
def test_reduceat_primal_is_numpys(which, case):
    x, indices, axis = REDUCEAT_CASES[case]
    rule, ufunc = {"add": (add_reduceat, np.add), "multiply": (multiply_reduceat,
                                                               np.multiply)}[which]
    expected = ufunc.reduceat(x, np.asarray(indices, dtype=int), axis=axis)
    _same(_traced_value(lambda a: rule(a, indices, axis=axis), x), expected)
    _same(_traced_value(lambda a: ufunc.reduceat(a, np.asarray(indices, dtype=int), axis),
                        x), expected)


@pytest.mark.parametrize("case", [0, 1, 3, 4, 7, 9, 12, 13])
def test_reduceat_derivatives(case):
    x, indices, axis = REDUCEAT_CASES[case]
    indices = np.asarray(indices, dtype=int)
    check_grads(lambda a: np.add.reduceat(a * a, indices, axis=axis), x)
    check_grads(lambda a: np.multiply.reduceat(a, indices, axis=axis), x)


def test_multiply_reduceat_with_a_zero():
    x = np.array([0.3, 0.0, 1.7, -0.4, 0.9])
    check_grads(lambda a: multiply_reduceat(a, [0, 3, 1]), x)


def test_reduceat_refuses_bad_indices_as_numpy():
    with pytest.raises(IndexError, match="-1 out-of-bounds in add.reduceat"):
        _traced_value(lambda a: add_reduceat(a, [-1, 2]), X6)
    with pytest.raises(IndexError, match="6 out-of-bounds in multiply.reduceat"):
        _traced_value(lambda a: multiply_reduceat(a, [0, 6]), X6)


def test_reduceat_compiles():
    f = lambda a: add_reduceat(a, [0, 3, 3, 1]) + multiply_reduceat(a, [1, 4])[0]  # noqa: E731
    _compiled_agrees(f, (X6,), (X6 * 1.5 - 0.2,))


# -- np.maximum.at / np.minimum.at -------------------------------------------------------------------
def _scatter_extremum(ufunc, fill, index, shape=(3,)):
    def f(v):
        out = np.full_like(v, fill, shape=shape)
        ufunc.at(out, index, v)
        return out
    return f


def _scatter_into(ufunc, index):
    def f(a, v):
        out = a * 1.0
        ufunc.at(out, index, v)
        return out
    return f


AT_CASES = [   # (buffer, index, values)
    (np.array([0.1, 0.5, -0.3]), np.array([0, 1, 0, 2]), np.array([0.7, 0.2, 0.4, -1.0])),
    (np.array([0.1, 0.5, -0.3]), np.array([2, 2, 2]), np.array([0.7, -0.2, 0.9])),
    (np.array([0.1, 0.5, -0.3]), np.array([-1, 0]), np.array([0.3, 0.05])),
    (np.array([0.1, 0.5, -0.3]), np.array([1]), np.array([0.5])),            # a tie
    (np.array([0.1, 0.5, -0.3]), np.array([0, 0]), np.array([0.8, 0.8])),    # tied values
    (np.array([0.1, np.nan, -0.3]), np.array([1, 0, 1]), np.array([2.0, np.nan, 1.0])),
    (np.array([0.1, 0.5, -0.3]), np.array([], dtype=int), np.array([])),
    (np.array([0.1, 0.5, -0.3]), slice(0, 2), np.array([0.3, 0.2])),
    (np.array([0.1, 0.5, -0.3]), np.array([0, 1]), np.array(0.25)),          # broadcast value
    (X63, (np.array([0, 5, 0]), np.array([1, 2, 1])), np.array([3.0, -4.0, 2.0])),
    (X63, np.array([1, 4, 1]), rng.standard_normal((3, 3))),
]


@pytest.mark.parametrize("ufunc", [np.maximum, np.minimum], ids=["maximum", "minimum"])
@pytest.mark.parametrize("case", range(len(AT_CASES)))
def test_extremum_at_primal_is_numpys(ufunc, case):
    a, index, v = AT_CASES[case]
    expected = a.copy()
    with np.errstate(invalid="ignore"):
        ufunc.at(expected, index, v)
    _same(_traced_value(_scatter_into(ufunc, index), a, v), expected)


@pytest.mark.parametrize("ufunc", [np.maximum, np.minimum], ids=["maximum", "minimum"])
@pytest.mark.parametrize("case", [0, 1, 2, 7, 8, 9, 10])
def test_extremum_at_derivatives(ufunc, case):
    a, index, v = AT_CASES[case]
    check_grads(_scatter_into(ufunc, index), a, v)


@pytest.mark.parametrize("ufunc", [np.maximum, np.minimum], ids=["maximum", "minimum"])
def test_extremum_at_ties_go_to_the_old_value_then_the_first_scattered(ufunc):
    a, index, v = AT_CASES[4]   # two scattered 0.8 into position 0 (old 0.1)
    f = lambda a, v: np.sum(_scatter_into(ufunc, index)(a, v) * [1.0, 2.0, 3.0])  # noqa: E731
    ga, gv = tape.gradient(Reverse, f, a.copy(), v.copy())
    if ufunc is np.maximum:   # the first 0.8 won position 0
        np.testing.assert_array_equal(ga, [0.0, 2.0, 3.0])
        np.testing.assert_array_equal(gv, [1.0, 0.0])
    else:                     # the old 0.1 stays
        np.testing.assert_array_equal(ga, [1.0, 2.0, 3.0])
        np.testing.assert_array_equal(gv, [0.0, 0.0])
    a, index, v = AT_CASES[3]   # 0.5 scattered onto an old 0.5: the old value keeps it
    ga, gv = tape.gradient(Reverse, f, a.copy(), v.copy())
    np.testing.assert_array_equal(ga, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(gv, [0.0])


def test_extremum_at_into_a_plain_buffer_is_refused():
    def f(v):
        out = np.zeros(3)
        np.maximum.at(out, [0, 1], v)
        return out
    with pytest.raises(tape.NonDifferentiableError, match="numpy.maximum.at"):
        tape.gradient(Reverse, lambda v: np.sum(f(v)), np.array([1.0, 2.0]))


def test_extremum_at_compiles():
    f = _scatter_extremum(np.maximum, -1e9, np.array([0, 1, 0, 2]))
    _compiled_agrees(f, (np.array([0.3, -0.7, 0.5, 1.2]),), (np.array([0.9, -0.7, 0.5, 1.2]),))


# -- weighted histograms -------------------------------------------------------------------------
DATA9 = np.array([0.1, 0.4, 0.35, 0.8, 0.9, 0.55, 1.0, 0.0, 0.3])
W9 = rng.standard_normal(9)
HIST_CASES = [   # (data, weights, keywords)
    (DATA9, W9, dict(bins=3, range=(0, 1))),
    (DATA9, W9, dict(bins=3, range=(0, 1), density=True)),
    (DATA9, W9, dict(bins=[0.0, 0.3, 0.5, 1.0])),                # given edges: 0.3 on an edge
    (DATA9, W9, dict(bins=[0.0, 0.3, 0.5, 1.0], density=True)),
    (DATA9, W9, dict(bins=4)),                                    # range from the data
    (DATA9, W9, dict(bins=2, range=(0.2, 0.6))),                  # points outside the range
    (np.append(DATA9, np.nan), np.append(W9, 0.7), dict(bins=3, range=(0, 1))),   # a NaN point
    (DATA9, W9.astype(np.float32), dict(bins=3, range=(0, 1))),   # float32 weights
    (DATA9.reshape(3, 3), W9.reshape(3, 3), dict(bins=5, range=(0, 1))),   # 2-d data, flattened
    (np.array([0.5, 0.5, 0.5]), np.array([1.0, 2.0, 3.0]), dict(bins=3)),   # one value
    (rng.random(300), rng.standard_normal(300), dict(bins=np.linspace(0, 1, 11) ** 2)),
    (np.array([]), np.array([]), dict(bins=3, range=(0, 1))),
]


@pytest.mark.parametrize("case", range(len(HIST_CASES)))
def test_histogram_primal_is_numpys(case):
    data, w, kw = HIST_CASES[case]
    expected, edges = np.histogram(data, weights=w, **kw)
    _same(_traced_value(lambda v: np.histogram(data, weights=v, **kw)[0], w), expected)
    got_edges = []
    _traced_value(lambda v: got_edges.append(np.histogram(data, weights=v, **kw)[1]) or v, w)
    _same(got_edges[0], edges)


@pytest.mark.parametrize("case", [0, 1, 2, 3, 5, 6, 8, 10])
def test_histogram_derivatives(case):
    data, w, kw = HIST_CASES[case]
    check_grads(lambda v: np.histogram(data, weights=v * v, **kw)[0], w)


SAMPLE = rng.random((12, 2))
W12 = rng.standard_normal(12)
HISTDD_CASES = [
    dict(bins=(2, 3)), dict(bins=2, range=[(0, 1), (0.2, 0.8)]), dict(bins=(2, 3), density=True),
    dict(bins=[np.array([0.0, 0.5, 1.0]), np.array([0.0, 0.1, 0.7, 1.0])]),
]


@pytest.mark.parametrize("case", range(len(HISTDD_CASES)))
def test_histogramdd_and_histogram2d(case):
    kw = HISTDD_CASES[case]
    _same(_traced_value(lambda v: np.histogramdd(SAMPLE, weights=v, **kw)[0], W12),
          np.histogramdd(SAMPLE, weights=W12, **kw)[0])
    x, y = SAMPLE.T
    _same(_traced_value(lambda v: np.histogram2d(x, y, weights=v, **kw)[0], W12),
          np.histogram2d(x, y, weights=W12, **kw)[0])
    check_grads(lambda v: np.histogramdd(SAMPLE, weights=v * v, **kw)[0], W12)
    check_grads(lambda v: np.histogram2d(x, y, weights=v, **kw)[0], W12, order=1)


def test_histogram_of_traced_data_is_refused_naming_the_argument():
    with pytest.raises(NotImplementedError, match="numpy.histogram of a traced `a`"):
        tape.gradient(Reverse, lambda x: np.sum(np.histogram(x, weights=x)[0]), DATA9)
    with pytest.raises(NotImplementedError, match="numpy.histogram2d of a traced `y`"):
        tape.gradient(Reverse, lambda v: np.sum(np.histogram2d(DATA9, v)[0]), DATA9)


def test_histogram_compiles():
    f = lambda v: np.histogram(DATA9, bins=3, range=(0, 1), weights=v, density=True)[0]  # noqa
    _compiled_agrees(f, (W9,), (W9 * 2.0 - 0.1,))


@pytest.mark.parametrize("kw", [dict(bins=4), dict(bins=[0.0, 0.3, 0.5, 1.0], density=True),
                                dict(bins=3, range=(0.2, 0.9), density=True)],
                         ids=["edges-from-data", "given-edges-density", "range-density"])
def test_histogram_of_const_data_compiles_and_bins_each_calls_data(kw):
    """Const data and its edges are read at each call (one trace); the edges returned are
    that call's, and values equal eager mode's bit for bit."""
    def loss(w, data):
        hist, edges = np.histogram(data, weights=w, **kw)
        return np.sum(hist ** 2) + np.sum(edges)

    g = tape.compile(ReverseWithPrimal, loss, Active, tape.Duplicated, tape.Const)
    for k in range(3):
        data = rng.random(15) * (1 + k)
        w = rng.standard_normal(15)
        got, want = np.zeros(15), np.zeros(15)
        (_, value) = g(tape.Duplicated(w, got), tape.Const(data))
        (_, eager) = tape.autodiff(ReverseWithPrimal, loss, Active, tape.Duplicated(w, want),
                                   tape.Const(data))
        assert value == eager == loss(w, data)
        np.testing.assert_array_equal(got, want)
    assert g.stats.traces == 1 and g.stats.eager_calls == 0


def test_histogramdd_of_const_sample_compiles_with_each_calls_sample():
    def loss(w, sample):
        return np.sum(np.histogramdd(sample, bins=(2, 3), weights=w)[0] ** 2)

    g = tape.compile(Reverse, loss, Active, tape.Duplicated, tape.Const)
    for k in range(2):
        sample, w = rng.random((12, 2)) * (1 + k), rng.standard_normal(12)
        got, want = np.zeros(12), np.zeros(12)
        g(tape.Duplicated(w, got), tape.Const(sample))
        tape.autodiff(Reverse, loss, Active, tape.Duplicated(w, want), tape.Const(sample))
        np.testing.assert_array_equal(got, want)
    assert g.stats.eager_calls == 0


# -- polyder, polyint -------------------------------------------------------------------------------
P4 = np.array([0.5, -1.2, 2.0, 0.3])
POLY_CASES = [   # (function, coefficients, keywords)
    (np.polyder, P4, {}), (np.polyder, P4, dict(m=2)), (np.polyder, P4, dict(m=3)),
    (np.polyder, P4, dict(m=5)), (np.polyder, P4, dict(m=0)), (np.polyder, P4[:1], {}),
    (np.polyder, P4.astype(np.float32), dict(m=2)), (np.polyder, np.array([np.nan, 1.0]), {}),
    (np.polyint, P4, {}), (np.polyint, P4, dict(m=2)), (np.polyint, P4, dict(m=2, k=1.5)),
    (np.polyint, P4, dict(m=3, k=[0.1, -0.2, 0.3])), (np.polyint, P4, dict(m=0)),
    (np.polyint, P4[:1], dict(k=[2.0])), (np.polyint, P4.astype(np.float32), {}),
    (np.polyint, P4, dict(m=1, k=[1, 2, 3])), (np.polyint, P4, dict(k=np.array([4]))),
]


@pytest.mark.parametrize("case", range(len(POLY_CASES)))
def test_poly_primal_is_numpys(case):
    fn, p, kw = POLY_CASES[case]
    _same(_traced_value(lambda c: fn(c, **kw), p), fn(p, **kw))


@pytest.mark.parametrize("case", [0, 1, 2, 8, 9, 10, 11])
def test_poly_derivatives(case):
    fn, p, kw = POLY_CASES[case]
    check_grads(lambda c: fn(c * c, **kw), p)


def test_polyint_traced_constants():
    check_grads(lambda c, k: np.polyint(c, m=2, k=k * k), P4, np.array([0.4, -0.9]))
    check_grads(lambda c, k: np.polyint(c, m=3, k=k), P4, np.array(0.7))


def test_poly_bad_orders_raise_as_numpy():
    with pytest.raises(ValueError, match="Order of derivative must be positive"):
        _traced_value(lambda c: np.polyder(c, -1), P4)
    with pytest.raises(ValueError, match="k must be a scalar or a rank-1 array"):
        _traced_value(lambda c: np.polyint(c, 3, k=[1.0, 2.0]), P4)


def test_poly_compiles():
    f = lambda c: np.polyval(np.polyder(c), 0.3) + np.polyint(c, k=c[0])  # noqa: E731
    _compiled_agrees(f, (P4,), (P4[::-1].copy(),))


# -- np.unwrap --------------------------------------------------------------------------------------
PHASE = np.array([0.0, 3.0, 6.5, 0.2, -3.5, -9.0, 2.0])
UNWRAP_CASES = [   # (phase, keywords)
    (PHASE, {}), (PHASE, dict(discont=4.0)), (PHASE, dict(discont=1.0)),
    (PHASE, dict(period=4.0)), (PHASE, dict(period=5.0, discont=1.0)),
    (PHASE.astype(np.float32), {}), (np.array([0.0, np.pi, 0.0, -np.pi]), {}),   # boundary
    (np.array([0.0, np.nan, 7.0, 1.0]), {}), (np.array([1.5]), {}), (np.array([]), {}),
    (rng.uniform(-10, 10, (3, 6)), {}), (rng.uniform(-10, 10, (3, 6)), dict(axis=0)),
    (rng.uniform(-10, 10, (2, 3, 4)), dict(axis=1, period=3.0)),
    (np.cumsum(rng.uniform(0, 2.5, 40)), dict(period=2.0)),
]


@pytest.mark.parametrize("case", range(len(UNWRAP_CASES)))
def test_unwrap_primal_is_numpys(case):
    p, kw = UNWRAP_CASES[case]
    _same(_traced_value(lambda v: np.unwrap(v, **kw), p), np.unwrap(p, **kw))


@pytest.mark.parametrize("case", [0, 1, 3, 4, 10, 11, 12])
def test_unwrap_derivatives(case):
    p, kw = UNWRAP_CASES[case]
    check_grads(lambda v: np.unwrap(v * 1.5, **kw), p)


def test_unwrap_traced_period_is_refused():
    with pytest.raises(NotImplementedError, match="traced `period`"):
        tape.gradient(Reverse, lambda v: np.sum(np.unwrap(PHASE * v, period=v)), 4.0)


def test_unwrap_compiles():
    _compiled_agrees(np.unwrap, (PHASE,), (PHASE[::-1].copy(),))


# -- np.pad: statistic modes and linear_ramp ---------------------------------------------------------
PAD_CASES = [   # (mode, keywords)
    ("maximum", {}), ("minimum", dict(stat_length=2)), ("mean", dict(stat_length=((1, 2), (3, 1)))),
    ("median", {}), ("median", dict(stat_length=2)), ("mean", {}), ("maximum", dict(stat_length=9)),
    ("minimum", dict(stat_length=((1, 1), (4, 2)))), ("mean", dict(stat_length=1.6)),
    ("linear_ramp", {}), ("linear_ramp", dict(end_values=((1, 2), (-1, 0.5)))),
    ("linear_ramp", dict(end_values=3.0)),
]
PAD_WIDTHS = [((1, 2), (2, 0)), 2, ((0, 0), (1, 3))]


@pytest.mark.parametrize("width", range(len(PAD_WIDTHS)))
@pytest.mark.parametrize("case", range(len(PAD_CASES)))
def test_pad_mode_primal_is_numpys(case, width):
    mode, kw = PAD_CASES[case]
    w = PAD_WIDTHS[width]
    # float32 ramps from a table of Python-float end values: see the xfail below
    float32 = () if (mode, case) == ("linear_ramp", 10) else (X47.astype(np.float32),)
    for x in (X47,) + float32:
        _same(_traced_value(lambda v: np.pad(v, w, mode=mode, **kw), x),
              np.pad(x, w, mode=mode, **kw))
    check_grads(lambda v: np.pad(v * v, w, mode=mode, **kw), X47, order=1)


def test_float32_linspace_from_a_python_float_is_numpys():
    # the Python float start was made a float64 array: computed in float64, an ulp off
    stop = np.array([0.4085805, -0.3], np.float32)
    f = lambda v: np.linspace(1.0, v, 3, endpoint=False, dtype=np.float32)  # noqa: E731
    _same(_traced_value(f, stop), f(stop))


def test_pad_mode_edge_cases():
    x = np.array([1.0, np.nan, 3.0, 2.0])
    for mode in ("maximum", "mean", "median", "linear_ramp"):
        _same(_traced_value(lambda v: np.pad(v, (2, 1), mode=mode), x),
              np.pad(x, (2, 1), mode=mode))
    with pytest.warns(RuntimeWarning):   # the mean of no values: NaN, as NumPy
        expected = np.pad(X6, 1, "mean", stat_length=0)
    with pytest.warns(RuntimeWarning):
        _same(_traced_value(lambda v: np.pad(v, 1, "mean", stat_length=0), X6), expected)
    with pytest.raises(ValueError, match="stat_length of 0"):
        _traced_value(lambda v: np.pad(v, 1, "maximum", stat_length=0), X6)
    with pytest.raises(ValueError, match="can't extend empty axis 1"):
        _traced_value(lambda v: np.pad(v[:, :0], 1, "minimum"), X47)
    check_grads(lambda v: np.pad(v, ((1, 1), (2, 1)), "median", stat_length=3), X47, order=1)


def test_pad_mode_compiles():
    f = lambda v: np.pad(v, 2, "maximum", stat_length=2) + np.pad(v, 2, "linear_ramp")  # noqa
    _compiled_agrees(f, (X47,), (X47[::-1].copy(),))
