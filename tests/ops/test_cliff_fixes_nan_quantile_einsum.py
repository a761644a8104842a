"""nanquantile / nanmedian reducing every axis (one slice: a partition, not a sort) and the
reverse of einsum with a repeated letter (a scatter onto the diagonal, not an identity tensor)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from tape import (Active, Duplicated, Forward, ForwardWithPrimal, Reverse, autodiff, gradient,
                  hessian)
from tape.testing import check_grads


def _with_nans(shape, seed=0, frac=0.2):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    x[rng.random(shape) < frac] = np.nan
    return x


def _grad(f, x):
    dx = np.zeros_like(x)
    autodiff(Reverse, f, Active, Duplicated(x.copy(), dx))
    return dx


# -- nan quantiles over one slice ------------------------------------------------------------------
ONE_SLICE = [
    (None, False), ((0, 1), False), ((1, 0), True), (None, True), ((-1, 0), False),
]


@pytest.mark.parametrize("axis,keepdims", ONE_SLICE)
@pytest.mark.parametrize("fn,args", [
    (np.nanmedian, ()), (np.nanquantile, (0.3,)), (np.nanquantile, ([0.0, 0.45, 1.0],)),
    (np.nanpercentile, (70.0,))])
def test_one_slice_values_and_gradients(fn, args, axis, keepdims):
    x = _with_nans((5, 7))
    want = fn(x, *args, axis=axis, keepdims=keepdims)
    f = lambda v: fn(v, *args, axis=axis, keepdims=keepdims)   # noqa: E731
    _, primal_out = autodiff(ForwardWithPrimal, f, Duplicated(x, np.zeros_like(x)))
    np.testing.assert_allclose(primal_out, want, rtol=1e-13)
    assert np.shape(primal_out) == np.shape(want)
    # NaN entries replaced by finite values keep the NaN pattern (and so the positions) fixed
    # under the finite-difference steps; the NaN entries themselves get no derivative.
    mask = np.isnan(x)
    filler = np.where(mask, np.nan, 0.0)
    check_grads(lambda v: np.sum(fn(v + filler, *args, axis=axis, keepdims=keepdims) ** 2),
                np.where(mask, 0.0, x), order=1)
    g = _grad(lambda v: np.sum(f(v)), x)
    assert np.all(g[mask] == 0)


@pytest.mark.parametrize("method", ["linear", "lower", "higher", "nearest", "midpoint"])
def test_one_slice_methods_and_q_derivative(method):
    x = _with_nans((40,), seed=1)
    q = np.array([0.1, 0.37, 0.9])
    np.testing.assert_allclose(np.nanquantile(x.copy(), q, method=method),
                               np.asarray(_plain_nanquantile(x, q, method)), rtol=1e-13)
    mask = np.isnan(x)
    filler = np.where(mask, np.nan, 0.0)
    check_grads(lambda v, q: np.sum(np.nanquantile(v + filler, q, method=method) ** 2),
                np.where(mask, 0.0, x), q, order=2 if method == "linear" else 1)


def _plain_nanquantile(x, q, method):
    return np.nanquantile(np.asarray(x), q, method=method)


def test_one_slice_ties_follow_the_sort_convention():
    # Ties: the k-th sorted value takes its derivative from the k-th tied entry in index order,
    # as the per-slice (sorting) path of the same data gives it.
    x = np.array([[2.0, np.nan, 1.0], [2.0, 2.0, np.nan], [3.0, 2.0, 0.0]])
    for fn, args in [(np.nanmedian, ()), (np.nanquantile, (0.5,)),
                     (np.nanquantile, (np.array([0.25, 0.6, 0.8]),))]:
        w = np.arange(1.0, 1.0 + np.size(fn(x, *args)))
        g = _grad(lambda v: np.sum(fn(v, *args) * w), x)
        # two identical columns reduced along axis 0: the sorting path, one column read
        ref = _grad(lambda v: np.sum(fn(np.stack([np.ravel(v), np.ravel(v)], axis=1), *args,
                                        axis=0)[..., 0] * w), x)
        np.testing.assert_array_equal(g, ref)
        assert g.sum() == pytest.approx(w.sum())


def test_one_slice_all_nan_and_single_column():
    x = np.full((3, 1), np.nan)
    with pytest.warns(RuntimeWarning, match="All-NaN"):
        g = _grad(lambda v: np.nan_to_num(np.nanmedian(v)), x)
    np.testing.assert_array_equal(g, 0.0)
    col = _with_nans((9, 1), seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = np.nanquantile(col, 0.4, axis=0)
    fwd, = autodiff(Forward, lambda v: np.nanquantile(v, 0.4, axis=0),
                    Duplicated(col, np.ones_like(col)))
    np.testing.assert_allclose(np.nanquantile(col, 0.4, axis=0), out)
    np.testing.assert_allclose(fwd, 1.0)   # a convex combination of two entries
    g = _grad(lambda v: np.sum(np.nanquantile(v, 0.4, axis=0)), col)
    np.testing.assert_allclose(g.sum(), 1.0)
    assert np.count_nonzero(g) == 2


def test_one_slice_float32_and_second_order():
    x = _with_nans((6, 5), seed=4).astype(np.float32)
    assert np.nanmedian(x).dtype == np.float32
    g = _grad(lambda v: np.nanquantile(v, 0.3), x)
    assert g.dtype == np.float32
    x64 = _with_nans((4, 4), seed=5)
    mask = np.isnan(x64)
    clean = np.where(mask, 0.0, x64)
    filler = np.where(mask, np.nan, 0.0)
    f = lambda v: np.nanquantile(v + filler, 0.3) ** 2   # noqa: E731
    h = hessian(f, clean)
    (gq,) = gradient(Reverse, lambda v: np.nanquantile(v + filler, 0.3), clean)
    np.testing.assert_allclose(h.reshape(16, 16), 2 * np.outer(gq, gq).reshape(16, 16),
                               atol=1e-12)


# -- einsum with repeated letters ------------------------------------------------
EINSUMS = [
    ("ii->i", [(4, 4)]), ("ii->", [(4, 4)]), ("ii", [(3, 3)]), ("iij->ij", [(3, 3, 2)]),
    ("iji->j", [(3, 2, 3)]), ("iji->ji", [(3, 2, 3)]), ("iii->i", [(3, 3, 3)]),
    ("iik->", [(3, 3, 2)]), ("ijij->ij", [(2, 3, 2, 3)]), ("ijij->ji", [(2, 3, 2, 3)]),
    ("bii->bi", [(2, 3, 3)]), ("ii,i->i", [(3, 3), (3,)]), ("iij,jk->ik", [(3, 3, 2), (2, 4)]),
    ("ii,jj->ij", [(3, 3), (2, 2)]),
]


@pytest.mark.parametrize("subscripts,shapes", EINSUMS)
def test_einsum_repeated_letter_gradients(subscripts, shapes):
    rng = np.random.default_rng(len(subscripts))
    ops = [rng.standard_normal(s) for s in shapes]
    out = np.einsum(subscripts, *ops)
    w = rng.standard_normal(np.shape(out))
    check_grads(lambda *a: np.sum(np.einsum(subscripts, *a) * w) ** 2 / 2, *ops)


def test_einsum_diagonal_gradient_is_zero_off_the_diagonal():
    a = np.arange(16.0).reshape(4, 4)
    w = np.array([1.0, 2.0, 3.0, 4.0])
    g = _grad(lambda x: np.sum(np.einsum("ii->i", x) * w), a)
    np.testing.assert_array_equal(g, np.diag(w))
    g = _grad(lambda x: np.einsum("ii->", x), a)
    np.testing.assert_array_equal(g, np.eye(4))


def test_einsum_diagonal_view_write_reaches_base():
    a = np.arange(9.0).reshape(3, 3)

    def f(x):
        y = x * 1.0
        d = np.einsum("ii->i", y)
        d[1] = 10.0 * d[0]          # writes through the view into y
        return np.sum(y * np.arange(1.0, 10.0).reshape(3, 3))

    g = _grad(f, a)
    want = np.arange(1.0, 10.0).reshape(3, 3)
    want[1, 1] = 0.0
    want[0, 0] += 10.0 * 5.0
    np.testing.assert_allclose(g, want)
    check_grads(f, a, order=1)
