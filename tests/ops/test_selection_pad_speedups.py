"""Quantiles by partition (median, quantile, percentile) and np.pad's gather modes by slices.

Primal values against NumPy, derivatives against central finite differences (float64), and the
modes (Reverse, Forward, compiled, batched) against each other, ties included: the partition
must give each tied value's derivative to the entry a stable sort gives it to.
"""
import warnings

import numpy as np
import pytest

import ops.indexing
import ops.sorting
import tape
from ops.pad_modes import pad_by_slices
from tape import Active, BatchDuplicated, Duplicated, Forward, Reverse, autodiff
from tape.testing import check_grads

RNG = np.random.default_rng(7)
X = RNG.permutation(35).reshape(7, 5) + RNG.uniform(-0.3, 0.3, (7, 5))   # entries far apart


def _no_sort(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a full sort was used")
    monkeypatch.setattr(ops.sorting, "sort", refuse)


def _grad(f, x):
    return autodiff(Reverse, f, Active, Active(x.copy()))[0][0]


def _stable_gradient(x, k):
    """The derivative of the k-th order statistic along axis 0 under the stable-sort
    convention: one 1 per column, at the entry np.argsort(kind='stable') puts at k."""
    g = np.zeros_like(x)
    g[np.argsort(x, axis=0, kind="stable")[k], np.arange(x.shape[1])] = 1.0
    return g


# -- quantiles ------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["linear", "lower", "higher", "nearest", "midpoint"])
def test_quantile_by_partition_matches_numpy_and_differences(method, monkeypatch):
    _no_sort(monkeypatch)
    q = np.array([[0.0, 0.37], [0.5, 1.0]])
    for axis, keepdims in [(None, False), (0, True), ((0, 1), False), (-1, True)]:
        def f(x):
            return np.quantile(x, q, axis=axis, method=method, keepdims=keepdims)
        np.testing.assert_allclose(f(X.copy()), np.quantile(X, q, axis=axis, method=method,
                                                            keepdims=keepdims), rtol=1e-14)
        check_grads(f, X, order=1 if method != "linear" else 2)


def test_median_percentile_and_traced_q_by_partition(monkeypatch):
    _no_sort(monkeypatch)
    a = X.reshape(7, 5, 1) * np.array([1.0, -0.5])
    for f in (lambda x: np.median(x, axis=(0, 2)), lambda x: np.median(x, axis=1, keepdims=True),
              lambda x: np.percentile(x, [10.0, 55.0], axis=0)):
        np.testing.assert_allclose(f(a.copy()), f(tape.primal(a)), rtol=1e-14)
        check_grads(f, a)
    check_grads(lambda x, q: np.quantile(x, q, axis=0), X, np.array([0.23, 0.61]))
    x32 = X.astype(np.float32)   # a Python-number q keeps float32 (weak promotion)
    assert autodiff(Forward, lambda x: np.quantile(x, 0.3, axis=0),
                    Duplicated(x32.copy(), np.ones_like(x32)))[0].dtype == np.float32


def test_quantile_partition_nan_slices_leak_no_nan_into_derivatives():
    x = X.copy()
    x[2, 1] = x[6, 3] = np.nan
    q = np.array([0.2, 0.9])
    want = np.quantile(x, q, axis=0)

    def f(x, q):
        return np.nan_to_num(np.quantile(x, q, axis=0), nan=0.0)
    (gx, gq), = autodiff(Reverse, lambda x, q: np.sum(f(x, q) * [[1.0], [2.0]]), Active,
                         Active(x.copy()), Active(q.copy()))
    assert np.all(np.isfinite(gx)) and np.all(np.isfinite(gq))
    assert np.all(gx[:, [1, 3]] == 0)
    np.testing.assert_array_equal(np.isnan(np.quantile(x, q, axis=0)), np.isnan(want))
    clean = np.delete(x, [1, 3], axis=1)
    check_grads(lambda c, q: np.quantile(c, q, axis=0), clean, q)


def test_ties_follow_the_stable_sort_in_every_mode():
    x = RNG.integers(0, 4, (41, 6)).astype(float)   # many ties in every column
    k = 20                                           # the median of 41 entries
    want = _stable_gradient(x, k)

    def f(x):
        return np.sum(np.median(x, axis=0))
    np.testing.assert_array_equal(_grad(f, x), want)
    compiled = tape.compile(Reverse, f, Active, Active)
    for _ in range(2):
        np.testing.assert_array_equal(compiled(Active(x.copy()))[0][0], want)
    for direction in np.eye(x.size)[::37]:
        v = direction.reshape(x.shape)
        assert autodiff(Forward, f, Duplicated(x.copy(), v))[0] == pytest.approx(np.sum(want * v))
    vs = np.stack([np.eye(x.size)[i].reshape(x.shape) for i in range(0, x.size, 23)])
    got = autodiff(Forward, f, BatchDuplicated(x.copy(), tuple(vs)))[0]
    np.testing.assert_allclose(np.asarray(got), [np.sum(want * v) for v in vs], rtol=1e-12)
    # q = 1 and q = 0 hit the last and the first of the tied extremes
    for q, kk in ((1.0, 40), (0.0, 0)):
        g = _grad(lambda x: np.sum(np.quantile(x, q, axis=0)), x)
        np.testing.assert_array_equal(g, _stable_gradient(x, kk))


def test_compiled_quantile_replays_a_new_partition():
    f = lambda x: np.sum(np.quantile(x, [0.3, 0.5], axis=1) * [[1.0], [3.0]])  # noqa: E731
    compiled = tape.compile(Reverse, f, Active, Active)
    for x in (X, X[::-1] * 1.5, np.round(X / 4)):
        np.testing.assert_allclose(compiled(Active(x.copy()))[0][0], _grad(f, x), rtol=1e-12,
                                   atol=1e-15)


# -- np.pad: edge, reflect, symmetric, wrap -------------------------------------------------------
PAD_CASES = [((2, 3), ((0, 1), (4, 2))), ((3, 1), ((7, 9), (0, 0))), ((1, 4), ((3, 3), (2, 9))),
             ((5,), ((11, 2),))]


@pytest.mark.parametrize("mode", ["edge", "reflect", "symmetric", "wrap"])
def test_pad_by_slices_matches_numpy_and_differences(mode):
    for shape, widths in PAD_CASES:
        if mode == "reflect" and 1 in [s for s, w in zip(shape, widths) if any(w)]:
            continue   # NumPy reflects a length-1 axis as edge: covered below
        x = RNG.normal(size=shape)
        np.testing.assert_array_equal(pad_by_slices(x, widths, mode), np.pad(x, widths, mode))
        check_grads(lambda x: np.pad(x, widths, mode=mode), x)
        check_grads(lambda x: pad_by_slices(x, widths, mode), x)
    z = RNG.normal(size=(3, 2)) + 1j * RNG.normal(size=(3, 2))
    np.testing.assert_array_equal(pad_by_slices(z, ((4, 1), (2, 3)), mode),
                                  np.pad(z, ((4, 1), (2, 3)), mode))
    check_grads(lambda z: np.abs(np.pad(z, ((4, 1), (2, 3)), mode=mode)) ** 2, z, order=1)


def test_pad_by_slices_edge_cases():
    x = RNG.normal(size=(1, 3))
    np.testing.assert_array_equal(pad_by_slices(x, ((2, 2), (0, 0)), "reflect"),
                                  np.pad(x, ((2, 2), (0, 0)), "reflect"))
    with pytest.raises(ValueError):   # NumPy's own refusal: an empty axis cannot be extended
        pad_by_slices(np.zeros((0, 2)), ((1, 0), (0, 0)), "wrap")
    empty = np.zeros((0, 2))
    assert pad_by_slices(empty, ((0, 0), (1, 2)), "edge").shape == (0, 5)


def test_pad_modes_compiled_forward_and_reverse_agree():
    x = RNG.normal(size=(4, 3))
    w = np.cos(np.arange(9 * 10)).reshape(9, 10)
    for mode in ("edge", "reflect", "symmetric", "wrap"):
        def f(x):
            return np.sum(np.pad(x, ((2, 3), (5, 2)), mode=mode) * w)
        g = _grad(f, x)
        compiled = tape.compile(Reverse, f, Active, Active)
        np.testing.assert_allclose(compiled(Active(x.copy()))[0][0], g, rtol=1e-13)
        v = np.sin(np.arange(x.size)).reshape(x.shape)
        assert autodiff(Forward, f, Duplicated(x.copy(), v))[0] == pytest.approx(np.sum(g * v))


def test_pad_gather_modes_reverse_uses_no_scatter_add(monkeypatch):
    """The border's cotangent is folded back by slices: np.add.at (one scattered add per
    entry) is not used."""
    def refuse(*args):
        raise AssertionError("np.add.at used")
    monkeypatch.setattr(ops.indexing, "add_at", refuse)
    x = RNG.normal(size=(5, 6))
    for mode in ("edge", "reflect", "symmetric", "wrap"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            g = _grad(lambda x: np.sum(np.pad(x, 3, mode=mode) ** 2), x)
        want = np.zeros_like(x)
        np.add.at(want, np.ix_(np.pad(np.arange(5), 3, mode=mode),
                               np.pad(np.arange(6), 3, mode=mode)), 2 * np.pad(x, 3, mode=mode))
        np.testing.assert_allclose(g, want, rtol=1e-13)
