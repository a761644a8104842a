"""The findings of the second eager red team (test_eager_redteam2.py), fixed: results that
depend on memory layout (ravel/reshape/flatten with 'A'/'K', Fortran-ordered copies, negative
strides), float32 statistics in NumPy's dtype, det of singular matrices, error messages that
name an existing fix, ndarray methods of traced arrays.

Primals are compared with plain NumPy, reverse gradients with central finite differences
(float64), forward JVPs with the reverse gradient.
"""
from __future__ import annotations

import importlib
import re
import warnings

import numpy as np
import pytest
import scipy.integrate
import scipy.linalg
import scipy.optimize
import scipy.stats

import tape
from tape import (Active, Duplicated, Forward, ForwardWithPrimal, Reverse, ReverseHolomorphic,
                  ReverseWithPrimal, autodiff)
from tape.scipy import stats as tstats

from test_eager_redteam2 import check


# -- memory layout: what ravel/reshape/flatten with 'A'/'K' read follows NumPy -------------------
def test_reshape_order_a_of_a_transposed_array():
    # The reverse gradient was [1,3,5,2,4,6] (the cotangent reshaped with 'A' = C again).
    grad = check(lambda a: np.reshape(a.reshape(2, 3).T, 6, order="A") @ np.arange(1.0, 7.0),
                 np.arange(6.0))
    np.testing.assert_allclose(grad, np.arange(1.0, 7.0), atol=1e-6)


@pytest.mark.parametrize("make_fortran", [
    lambda m: np.asfortranarray(m), lambda m: np.array(m, order="F"), lambda m: m.copy(order="F"),
    lambda m: m.astype(np.float64, order="F"), lambda m: np.asarray(m, order="F"),
    lambda m: np.copy(m.T).T, lambda m: np.array([m[0], m[1]], order="F")],
    ids=["asfortranarray", "array", "copy", "astype", "asarray", "np.copy-keeps", "list"])
def test_fortran_ordered_copies_keep_their_layout(make_fortran):
    # asfortranarray(...).ravel('K') was [0,1,2,3,4,5] traced, [0,3,1,4,2,5] in NumPy.
    check(lambda a: make_fortran(a.reshape(2, 3)).ravel("K") @ np.arange(1.0, 7.0), np.arange(6.0))


def test_contiguous_copies_of_a_fortran_array():
    check(lambda a: np.ascontiguousarray(a.reshape(3, 2).T).ravel("K") @ np.arange(1.0, 7.0),
          np.arange(6.0))
    check(lambda a: a.reshape(3, 2).T.copy().ravel("A") @ np.arange(1.0, 7.0), np.arange(6.0))


def test_ravel_k_of_a_view_with_negative_strides():
    check(lambda a: a.reshape(3, 4).T[:, ::-1].ravel("K") @ np.arange(1.0, 13.0), np.arange(12.0))


VIEWS = {"transposed": lambda a: a.reshape(2, 3, 4).T,
         "permuted": lambda a: a.reshape(2, 3, 4).transpose(1, 0, 2),
         "reversed": lambda a: a.reshape(2, 3, 4)[::-1, :, ::-2],
         "broadcast": lambda a: np.broadcast_to(a[:6], (4, 6)).T,
         "strided": lambda a: a.reshape(4, 6)[::2, 1:]}
LAYOUT_READS = {"ravel-K": lambda v: np.ravel(v, "K"), "ravel-A": lambda v: v.ravel("A"),
                "reshape-A": lambda v: np.reshape(v, -1, order="A"),
                "flatten-K": lambda v: v.flatten("K"), "flatten-F": lambda v: v.flatten(order="F")}


@pytest.mark.parametrize("view", sorted(VIEWS))
@pytest.mark.parametrize("read", sorted(LAYOUT_READS))
def test_layout_dependent_reads_follow_numpy_for_any_strides(view, read):
    f = lambda a: LAYOUT_READS[read](VIEWS[view](a))   # noqa: E731
    weights = np.cos(np.arange(f(np.ones(24)).size))
    check(lambda a: f(a) @ weights, np.arange(24.0) + 1.0)


def test_writes_through_a_keep_order_view_reach_the_base():
    def f(a):
        m = (a.reshape(2, 3, 4) * 1.0).transpose(1, 0, 2)
        flat = m.ravel("K")    # a view in NumPy (the memory is contiguous in another order)
        flat[1] = 7.0 * a[3]
        return np.sum(m * np.arange(24.0).reshape(3, 2, 4))
    check(f, np.linspace(0.1, 2.4, 24))


# -- float32 statistics: NumPy's result dtype and value ------------------------------------------
X32 = np.array([0.5, 1.5, -0.2, 0.7], dtype=np.float32)


@pytest.mark.parametrize("f", [
    lambda x: np.quantile(x, 0.3), lambda x: np.median(x), lambda x: np.nanpercentile(x, 30.0),
    lambda x: np.percentile(x, 85), lambda x: np.quantile(x, [0.3, 0.8]),
    lambda x: np.nanmedian(np.stack([x, x[::-1] + 1.0, np.where(x > 1, np.nan, x)]), axis=0),
    lambda x: np.nanquantile(np.where(x > 1, np.nan, x), 0.7),
    lambda x: np.polyval([1.0, 2.0], x), lambda x: np.cov(np.stack([x, x ** 2])),
    lambda x: np.corrcoef(np.stack([x, x ** 2]))],
    ids=["quantile", "median", "nanpercentile", "percentile-int", "quantile-array",
         "nanmedian", "nanquantile", "polyval-list", "cov", "corrcoef"])
def test_float32_statistics_have_numpys_dtype(f):
    # quantile/median/percentile were float64, polyval/cov/corrcoef float32.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = f(X32.copy())
        value = autodiff(ForwardWithPrimal, f, Duplicated(X32.copy(), np.ones(4, np.float32)))[1]
    assert np.asarray(value).dtype == want.dtype
    np.testing.assert_array_equal(value, want)


# -- det of singular matrices: the cofactor matrix, without an inverse ---------------------------
def _cofactor_by_minors(a):
    n = a.shape[0]
    return np.array([[(-1) ** (i + j) * np.linalg.det(np.delete(np.delete(a, i, 0), j, 1))
                      for j in range(n)] for i in range(n)])


@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_det_of_a_singular_matrix(mode):
    # Both modes raised LinAlgError('Singular matrix').
    A = np.array([[1.0, 2.0], [2.0, 4.0]])
    adjugate_t = np.array([[4.0, -2.0], [-2.0, 1.0]])
    if mode == "reverse":
        (g,), value = autodiff(ReverseWithPrimal, np.linalg.det, Active, Active(A.copy()))
        np.testing.assert_allclose(g, adjugate_t, atol=1e-12)
    else:
        t, value = autodiff(ForwardWithPrimal, np.linalg.det, Duplicated(A.copy(), np.eye(2)))
        assert t == pytest.approx(5.0)
    assert value == 0.0


RNG = np.random.default_rng(3)


@pytest.mark.parametrize("a", [
    np.outer([1.0, 2.0, 3.0], [1.0, 0.0, 2.0]) + np.outer([0.0, 1.0, 1.0], [2.0, 1.0, 0.0]),
    np.outer([1.0, 2.0, 3.0], [1.0, 0.0, 2.0]),
    RNG.standard_normal((4, 3)) @ RNG.standard_normal((3, 4)),
    np.array([[1.0, 2.0], [2.0, 4.0 + 1e-9]]), RNG.standard_normal((3, 3)), np.eye(3)],
    ids=["rank2of3", "rank1of3", "rank3of4", "near-singular", "random", "identity"])
def test_det_gradient_is_the_cofactor_matrix(a):
    want = _cofactor_by_minors(a)
    scale = max(np.max(np.abs(want)), 1.0)
    (g,), = autodiff(Reverse, np.linalg.det, Active, Active(a.copy()))
    np.testing.assert_allclose(g, want, rtol=0, atol=1e-13 * scale)
    v = np.cos(np.arange(a.size)).reshape(a.shape)
    t, = autodiff(Forward, np.linalg.det, Duplicated(a.copy(), v))
    assert t == pytest.approx(np.sum(want * v), abs=1e-13 * scale * a.size)


def test_det_gradient_batched_complex_and_second_order():
    a = RNG.standard_normal((2, 3, 3))
    a[1] = np.outer([1.0, 2.0, 3.0], [1.0, 1.0, 1.0]) + np.outer([1.0, 0.0, 0.0], [0.0, 1.0, 0.0])
    (g,), = autodiff(Reverse, lambda m: np.linalg.det(m) @ np.array([1.0, 2.0]), Active,
                     Active(a.copy()))
    np.testing.assert_allclose(g, [_cofactor_by_minors(a[0]), 2 * _cofactor_by_minors(a[1])],
                               atol=1e-13)
    z = np.outer([1.0, 2j, 3.0], [1.0, 0.0, 2.0 + 1j]) + np.outer([0.0, 1.0, 1j], [2.0, 1.0, 0.0])
    (g,), = autodiff(ReverseHolomorphic, np.linalg.det, Active, Active(z.copy()))
    np.testing.assert_allclose(g, _cofactor_by_minors(z), atol=1e-13)
    # Second order (at an invertible matrix): forward-over-reverse and reverse-over-reverse.
    m, v = RNG.standard_normal((3, 3)), RNG.standard_normal((3, 3))
    f = lambda b: np.linalg.det(b) ** 2 + np.linalg.det(b)   # noqa: E731

    def grad(b):
        return autodiff(Reverse, f, Active, Active(b.copy()))[0][0]
    want = (grad(m + 1e-5 * v) - grad(m - 1e-5 * v)) / 2e-5
    scale = np.max(np.abs(want))
    np.testing.assert_allclose(tape.hvp(f, m.copy(), v), want, rtol=0, atol=1e-7 * scale)
    twice = autodiff(Reverse, lambda b: np.sum(grad(b) * v), Active, Active(m.copy()))[0][0]
    np.testing.assert_allclose(twice, want, rtol=0, atol=1e-7 * scale)


# -- errors that say what to do ------------------------------------------------------------------
def _suggested_replacement_exists(message: str, function: str) -> bool:
    found = re.search(r"tape\.(scipy(?:\.\w+)?)", message)
    if found is None:
        return False
    try:
        module = importlib.import_module("tape." + found.group(1))
    except ImportError:
        return False
    return hasattr(module, function)


@pytest.mark.parametrize("call, function", [
    (lambda a: scipy.linalg.cholesky(np.eye(3) + np.outer(a, a)), "cholesky"),
    (lambda a: scipy.integrate.trapezoid(a), "trapezoid")], ids=["cholesky", "trapezoid"])
def test_scipy_refusals_name_an_existing_replacement(call, function):
    # cholesky was named "scipy.wrapper"; trapezoid pointed to tape.scipy.integrate (odeint only).
    with pytest.raises(tape.NonDifferentiableError) as info:
        autodiff(Reverse, lambda a: np.sum(call(a)), Active, Active(np.array([1.0, 2.0, 0.5])))
    assert f".{function} was called" in str(info.value)
    assert _suggested_replacement_exists(str(info.value), function)


def test_scipy_refusal_without_a_replacement_suggests_none():
    # scipy.optimize.rosen pointed to tape.scipy.optimize, which does not exist.
    with pytest.raises(tape.NonDifferentiableError) as info:
        autodiff(Reverse, scipy.optimize.rosen, Active, Active(np.array([1.0, 2.0, 0.5])))
    message = str(info.value)
    assert "scipy.optimize.rosen" in message and "custom_rule" in message
    assert "Use the differentiable tape.scipy" not in message


def test_scipy_integrate_trapezoid_matches_scipy():
    x = np.array([0.0, 0.3, 1.0, 1.2])
    check(lambda y: tape.scipy.integrate.trapezoid(y ** 2, x), np.array([1.0, -0.5, 2.0, 0.3]))
    y = np.array([1.0, -0.5, 2.0, 0.3])
    assert tape.scipy.integrate.trapezoid(y, x) == scipy.integrate.trapezoid(y, x)


def test_frozen_distribution_from_tape_scipy_stats():
    x = np.array([0.1, 1.2, -0.5])
    (g,), = autodiff(Reverse, lambda a: np.sum(tstats.norm(0.0, 1.0).logpdf(a)), Active,
                     Active(x.copy()))
    np.testing.assert_allclose(g, -x)
    frozen = tstats.t(3.0, loc=0.5, scale=2.0)
    np.testing.assert_allclose(frozen.logpdf(x), scipy.stats.t(3.0, loc=0.5, scale=2.0).logpdf(x),
                               rtol=1e-12)
    check(lambda s: np.sum(tstats.norm(s[0], np.exp(s[1])).logcdf(x)), np.array([0.2, -0.1]))
    with pytest.raises(AttributeError, match="logpdf"):
        frozen.rvs(3)


def test_a_traced_scalar_written_into_a_plain_buffer_explains_the_fix():
    def f(x):
        b = np.zeros(3)
        b[0] = x[0]
        return np.sum(b)
    with pytest.raises(tape.NonDifferentiableError, match="zeros_like"):
        autodiff(Reverse, f, Active, Active(np.array([1.0, 2.0, 3.0])))
    # NumPy's item assignment hides the explanation behind "setting an array element with a
    # sequence."; the trace raises the explanation itself, in every mode.
    with pytest.raises(tape.NonDifferentiableError, match="zeros_like"):
        autodiff(Forward, f, Duplicated(np.array([1.0, 2.0, 3.0]), np.ones(3)))


def test_a_write_keeps_a_fortran_buffer_fortran_ordered():
    # The write copied the buffer in C order, so ravel("K") read it in another order: 75
    # where NumPy gives 70 (and a wrong gradient).
    w = np.arange(1.0, 7.0)

    def f(x):
        m = np.asfortranarray(x.reshape(2, 3)) * 1.0
        m[0, 0] = 5.0 * x[1]
        return m.ravel("K") @ w

    x = np.arange(6.0) + 0.5
    dx = np.zeros(6)
    _, value = autodiff(ReverseWithPrimal, f, Active, Duplicated(x.copy(), dx))
    np.testing.assert_allclose(value, f(x), rtol=1e-13)
    np.testing.assert_allclose(dx, [0.0, 8.0, 5.0, 2.0, 4.0, 6.0], rtol=1e-13)
    tangent, = autodiff(Forward, f, Duplicated(x.copy(), np.ones(6)))
    np.testing.assert_allclose(tangent, 25.0, rtol=1e-13)


@pytest.mark.parametrize("reduction, fix", [
    (lambda a: np.nanvar(a, where=a > 1.5), r"np\.where"),
    (lambda a: np.nanmax(a, where=a > 1.5, initial=0.0), r"np\.where")])
def test_reductions_with_where_suggest_np_where(reduction, fix):
    with pytest.raises(NotImplementedError, match=fix):
        autodiff(Reverse, reduction, Active, Active(np.array([1.0, 3.0, 2.0])))


# -- ndarray methods of traced arrays ------------------------------------------------------------
@pytest.mark.parametrize("method", [
    lambda a: a.reshape(2, 3).flatten("F"), lambda a: a.reshape(2, 3).flatten(order="F"),
    lambda a: a.compress([True, False, True]), lambda a: a[np.sort(a).searchsorted(0.5) % 6],
    lambda a: divmod(a, 0.3)[1], lambda a: divmod(2.0, a)[0] + a,
    lambda a: (lambda b: (b.put([0, 1], 3 * a[:2]), b)[1])(a.copy())],
    ids=["flatten-F", "flatten-order", "compress", "searchsorted", "divmod", "rdivmod", "put"])
def test_ndarray_methods_on_traced_arrays(method):
    # Each raised TypeError or AttributeError. The input keeps clear of divmod's and
    # searchsorted's jumps (multiples of 0.3, the value 0.5).
    x = np.linspace(0.1, 1.1, 6) + 0.013
    check(lambda a: np.sum(method(a) * np.arange(1.0, np.size(method(x)) + 1.0)), x)


def test_ndarray_attributes_and_in_place_resize_of_traced_arrays():
    seen = {}

    def f(a):
        m = a.reshape(2, 3)
        seen.update(nbytes=m.nbytes, itemsize=m.itemsize, strides=m.T.strides)
        return np.sum(m)
    autodiff(Reverse, f, Active, Active(np.ones(6)))
    plain = np.ones((2, 3))
    assert seen == dict(nbytes=plain.nbytes, itemsize=plain.itemsize, strides=plain.T.strides)
    with pytest.raises(tape.NonDifferentiableError, match=r"np\.resize"):
        autodiff(Reverse, lambda a: (a.resize(8), np.sum(a))[1], Active, Active(np.ones(6)))
