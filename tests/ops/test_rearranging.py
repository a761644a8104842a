"""np.delete, insert, resize, compress, extract, choose, block, vander, bincount, cov and
corrcoef on traced values: the primal equals NumPy's over random shapes and arguments, and
derivatives match finite differences (second order in tests/tape/second_order_rearranging.py)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tape.errors import NonDifferentiableError
import tape
from tape import Active, Const, Duplicated, Reverse, ReverseWithPrimal, autodiff
from tape.testing import arrays, check_grads, shapes, traced_value

FAST = settings(max_examples=25, deadline=None)


def _same(got, want):
    assert np.shape(got) == np.shape(want) and np.result_type(got) == np.result_type(want)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


@FAST
@given(a=arrays(shapes(1, 3, max_side=4)), data=st.data())
def test_delete_and_insert_match_numpy(a, data):
    axis = data.draw(st.sampled_from([None] + list(range(a.ndim))))
    n = a.size if axis is None else a.shape[axis]
    obj = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=3))
    for f in (lambda a: np.delete(a, obj, axis=axis),
              lambda a: np.insert(a, obj[0], 2.5, axis=axis)):
        for mode in ("forward", "reverse"):
            _same(traced_value(f, a, mode=mode), f(a))
        check_grads(f, a, order=1)


@FAST
@given(a=arrays(shapes(1, 2, max_side=4)),
       shape=st.lists(st.integers(1, 4), min_size=1, max_size=2))
def test_resize_and_compress_match_numpy(a, shape):
    f = lambda a: np.resize(a, tuple(shape))   # noqa: E731
    _same(traced_value(f, a), f(a))
    check_grads(f, a, order=1)
    mask = a.reshape(-1) > 0
    g = lambda a: np.compress(mask, a)   # noqa: E731
    _same(traced_value(g, a), g(a))
    h = lambda a: np.extract(a > 0, a)   # noqa: E731
    _same(traced_value(h, a), h(a))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # constant rows: corrcoef is NaN
@FAST
@given(m=arrays(shapes(2, 2, min_side=2, max_side=4)), bias=st.booleans(),
       rowvar=st.booleans())
def test_cov_and_corrcoef_match_numpy(m, bias, rowvar):
    f = lambda m: np.cov(m, rowvar=rowvar, bias=bias)   # noqa: E731
    _same(traced_value(f, m), f(m))
    check_grads(f, m, order=1)
    g = lambda m: np.corrcoef(m, rowvar=rowvar)   # noqa: E731
    np.testing.assert_allclose(traced_value(g, m), g(m), rtol=1e-12, atol=1e-12)


def test_block_and_choose_match_numpy():
    a, b = np.arange(4.0).reshape(2, 2), np.ones((2, 3))
    for f in (lambda a, b: np.block([a, b]), lambda a, b: np.block([[a, b], [b[:, :2], a, b[:, :1]]])):
        _same(traced_value(f, a, b), f(a, b))
        check_grads(f, a, b, order=1)
    c = lambda a, b: np.choose(np.array([[0, 1], [1, 0]]), [a, 2.0 * a + b[:, :2]])   # noqa: E731
    _same(traced_value(c, a, b), c(a, b))


def test_bincount_weights_are_differentiated_and_counts_are_not():
    idx = np.array([0, 2, 2, 1, 0])
    (g,), = autodiff(Reverse, lambda w: np.sum(np.bincount(idx, w) ** 2), Active,
                     Active(np.arange(1.0, 6.0)))
    np.testing.assert_allclose(g, 2 * np.bincount(idx, np.arange(1.0, 6.0))[idx], atol=1e-11)
    with pytest.raises(NonDifferentiableError, match="out="):
        autodiff(Reverse, lambda x: np.sum(np.compress([True], x, out=np.zeros(1))), Active,
                 Active(np.ones(1)))


@pytest.mark.parametrize("x", [[0.0, 1.7, 2.2], [True, False, True], np.array([2, 0, 2], np.uint8)],
                         ids=["float-list", "bool-list", "uint8"])
def test_bincount_reads_its_bins_as_numpy_does(x):
    """NumPy casts a list of floats or booleans to bins; the weights' gradient follows."""
    w = np.array([1.0, 2.0, 3.0])
    with np.testing.suppress_warnings() as sup:   # NumPy deprecates non-integer lists
        sup.filter(DeprecationWarning)
        want = np.bincount(x, w)
        (g,), value = autodiff(ReverseWithPrimal, lambda v: np.sum(np.bincount(x, v) ** 2),
                               Active, Active(w))
    bins = np.asarray(x).astype(np.intp)
    np.testing.assert_allclose(value, np.sum(want ** 2), rtol=1e-14)
    np.testing.assert_allclose(g, 2 * want[bins], rtol=1e-14)


@pytest.mark.parametrize("x, match", [
    ([-1, 0, 1], "negative"),                       # a negative bin was added at the end
    ([0, 1], "`weights` has shape \\(3,\\) and `x` has shape \\(2,\\)"),
    ([[0, 1, 2]], "1-d"),
])
def test_bincount_with_traced_weights_refuses_what_numpy_refuses(x, match):
    with pytest.raises(ValueError, match=match):
        autodiff(Reverse, lambda v: np.sum(np.bincount(x, v)), Active, Active(np.ones(3)))


def test_compiled_bincount_and_choose_use_each_calls_index_array():
    """The index arrays are read at each call: new bins replay, a new bin count (the result's
    shape) traces again, and a negative bin raises as NumPy does."""
    def loss(w, bins, which):
        picked = np.choose(which, [w[:3], 2 * w[:3]])
        return np.sum(np.bincount(bins, w) ** 2) + np.sum(picked ** 3)

    g = tape.compile(Reverse, loss, Active, Duplicated, Const, Const)
    w = np.array([0.5, 1.5, 2.0, 3.0])
    for bins, which in [([0, 1, 1, 3], [0, 1, 0]), ([3, 0, 2, 1], [1, 1, 0]),
                        ([3, 3, 0, 0], [0, 0, 1]), ([1, 0, 0, 1], [1, 0, 1])]:
        bins, which = np.array(bins), np.array(which)
        got, want = np.zeros(4), np.zeros(4)
        g(Duplicated(w, got), Const(bins), Const(which))
        autodiff(Reverse, loss, Active, Duplicated(w, want), Const(bins), Const(which))
        np.testing.assert_array_equal(got, want)
        expected = 2 * np.bincount(bins, w)[bins]
        expected[:3] += 3 * np.where(which == 0, 1.0, 8.0) * w[:3] ** 2
        np.testing.assert_allclose(got, expected, rtol=1e-14)
    assert g.stats.traces == 2 and g.stats.guard_failures == 1   # the last: two bins
    with pytest.raises(ValueError, match="negative"):
        g(Duplicated(w, np.zeros(4)), Const(np.array([0, -1, 1, 1])), Const(which))
