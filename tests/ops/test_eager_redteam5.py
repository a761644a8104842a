"""Eager autodiff on the NumPy 2 surface: the array-API names and newer functions
(np.concat, permute_dims, matrix_transpose, astype, unstack, vecdot, linalg.matrix_norm,
cumulative_sum with include_initial, unique_all, reshape(copy=), x.device, ...), the rarer
older ones (np.pad modes, roll with tuples, rot90, tile/repeat with arrays, trim_zeros,
ediff1d, cross with axes, tensorsolve/tensorinv, nan-reductions with all-NaN slices), and
np.matrix / numpy.ma values, which are refused rather than misread.

Each program is compared with plain NumPy for the primal (value, dtype, shape) and with float64
central differences for the reverse gradient, forward tangents and BatchDuplicated forward
columns and reverse lanes (NaN outputs, from all-NaN slices, are left out of the comparison).
"""
from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest

from tape import (Active, BatchDuplicated, Const, Duplicated, Forward, ForwardWithPrimal,
                  Reverse, autodiff)
from tape.errors import ActivityError, NonDifferentiableError, TracerConversionError

X6 = np.array([0.5, -0.7, 1.3, 2.1, -0.2, 0.9])
X9 = np.array([2.0, 0.3, -0.1, 0.4, 1.5, 0.2, 0.1, -0.3, 1.8])
X12 = np.random.default_rng(3).normal(size=12)
ALL_NAN_ROW = np.array([[np.nan, np.nan, np.nan], [0.0, np.nan, 0.0]])


def _jacobian_fd(f, x, eps=1e-6):
    return np.array([(np.asarray(f(x + e)) - np.asarray(f(x - e))) / (2 * eps)
                     for e in np.eye(x.size).reshape(x.size, *x.shape) * eps])


def _check_every_mode(f, x, tol=1e-6):
    """Primal, dtype and shape against NumPy; reverse, forward, batch forward and batch
    reverse against central differences, at the finite outputs."""
    want = np.asarray(f(x.copy()))
    tangent, got = autodiff(ForwardWithPrimal, f, Duplicated(x.copy(), np.ones_like(x)))
    got = np.asarray(got)
    assert (got.dtype, got.shape) == (want.dtype, want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    finite = np.isfinite(want)
    jac = np.where(finite, _jacobian_fd(f, x), 0.0)
    weights = np.random.default_rng(0).normal(size=want.shape) * finite
    scalar = lambda z: np.sum(np.where(finite, f(z), 0.0) * weights)   # noqa: E731
    want_grad = np.tensordot(jac, weights, axes=weights.ndim)
    np.testing.assert_allclose(autodiff(Reverse, scalar, Active, Active(x.copy()))[0][0],
                               want_grad, rtol=tol, atol=tol)
    np.testing.assert_allclose(np.where(finite, tangent, 0.0), jac.sum(0), rtol=tol, atol=tol)
    columns = autodiff(Forward, f, BatchDuplicated(x.copy(), tuple(np.eye(x.size))))[0]
    np.testing.assert_allclose(np.where(finite, np.array(columns), 0.0), jac, rtol=tol,
                               atol=tol)
    lanes = (np.zeros_like(x), np.ones_like(x))
    autodiff(Reverse, scalar, Active, BatchDuplicated(x.copy(), lanes))
    np.testing.assert_allclose(lanes[0], want_grad, rtol=tol, atol=tol)
    np.testing.assert_allclose(lanes[1] - 1, want_grad, rtol=tol, atol=tol)


def _square(x):
    return (np.eye(6) * 3 + np.outer(x, x) * 0.1)


def _nan_rows(x):
    return x.reshape(2, 3) + ALL_NAN_ROW


PROGRAMS = {
    # array-API names (NumPy 2)
    "concat, concat axis=None": (lambda x: np.concatenate([
        np.concat([x[:2], x[3:]]), np.concat([x[:4].reshape(2, 2), x[4:]], axis=None)]), X6),
    "permute_dims, matrix_transpose, mT": (lambda x: np.permute_dims(
        x.reshape(1, 2, 3), (2, 0, 1)).ravel() + np.matrix_transpose(x.reshape(2, 3)).ravel()
        * x.reshape(3, 2).mT.T.ravel(), X6),
    "unstack": (lambda x: np.unstack(x.reshape(2, 3))[1] * np.unstack(x.reshape(2, 3),
                                                                     axis=1)[0][0], X6),
    "pow, acos, asin, atan, atan2, acosh, asinh, atanh": (lambda x: np.pow(np.abs(x) + 1, x)
        + np.acos(x * 0.4) + np.asin(x * 0.4) + np.atan(x) + np.atan2(x, x[::-1])
        + np.acosh(np.abs(x) + 1.5) + np.asinh(x) + np.atanh(x * 0.4)
        + x * np.bitwise_left_shift(np.arange(6), 2), X6),
    "vecdot, matvec, vecmat, linalg.vecdot": (lambda x: np.concatenate([
        np.vecdot(x[:6].reshape(2, 3), x[6:9]), np.matvec(x[:6].reshape(2, 3), x[6:9]),
        np.vecmat(x[:2], x[:6].reshape(2, 3)),
        np.linalg.vecdot(x[:6].reshape(3, 2), x[6:9, None], axis=0)]), X9),
    "linalg.matrix_norm every ord": (lambda x: np.stack([np.linalg.matrix_norm(
        x.reshape(3, 3), ord=o) for o in ("fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf)]), X9),
    "linalg.vector_norm ords, axes, keepdims": (lambda x: np.concatenate([
        [np.linalg.vector_norm(x), np.linalg.vector_norm(x.reshape(3, 3), axis=(0, 1), ord=3)],
        np.linalg.vector_norm(x.reshape(3, 3), axis=1, ord=np.inf, keepdims=True).ravel(),
        np.linalg.vector_norm(x.reshape(3, 3), axis=0, ord=0.5),
        np.linalg.vector_norm(x.reshape(3, 3), axis=0, ord=-1)]), X9),
    "linalg.diagonal, trace, outer, cross, svdvals": (lambda x: np.concatenate([
        np.linalg.diagonal(x.reshape(3, 3), offset=1),
        np.linalg.trace(x[:8].reshape(2, 2, 2), offset=-1),
        np.linalg.outer(x[:3], x[3:5]).ravel(), np.linalg.cross(x[:6].reshape(2, 3),
                                                               x[6:9]).ravel(),
        np.linalg.svdvals(x.reshape(3, 3))]), X9),
    "linalg.matmul, linalg.tensordot": (lambda x: np.linalg.matmul(
        x[:6].reshape(2, 3), x.reshape(3, 3)).ravel() + np.linalg.tensordot(
        x[:6].reshape(2, 3), x[3:9].reshape(3, 2), axes=1).sum(), X9),
    "cumulative_sum / cumulative_prod": (lambda x: np.cumulative_sum(x.reshape(2, 3), axis=1)
                                         + np.cumulative_prod(x.reshape(2, 3), axis=0), X6),
    "cumulative_sum include_initial": (lambda x: np.cumulative_sum(
        x, include_initial=True), X6),
    "cumulative_prod include_initial along axis 1": (lambda x: np.cumulative_prod(
        x.reshape(2, 3), axis=1, include_initial=True), X6),
    "cumulative_sum include_initial along axis 0, complex dtype": (lambda x: np.cumulative_sum(
        x.reshape(2, 3), axis=0, dtype=complex, include_initial=True).real, X6),
    "unique_values / counts / inverse / all": (lambda x: np.concatenate([
        np.unique_values(x), np.unique_counts(x).values * np.unique_all(x).counts,
        np.unique_inverse(x).values[np.unique_inverse(x).inverse_indices]]), X6),
    "sort / argsort stable=": (lambda x: np.sort(x, stable=True) + x[np.argsort(x, stable=True)]
                               + np.sort(x.reshape(2, 3), axis=0, stable=False).ravel(), X6),
    "np.astype": (lambda x: np.astype(x, np.complex128).real * np.astype(x > 0, np.float64), X6),
    "reshape(copy=True/False/None)": (lambda x: np.reshape(x, shape=(2, 3), copy=True).ravel()
                                      * np.reshape(x, (3, 2), copy=False).ravel()
                                      + x.reshape((3, 2), order="F", copy=None).ravel(), X6),
    # older, rarer functions
    "pad constant/edge/reflect/symmetric/wrap": (lambda x: np.concatenate([
        np.pad(x.reshape(2, 3), ((1, 2), (2, 1)), mode=m).ravel()
        for m in ("constant", "edge", "reflect", "symmetric", "wrap")]
        + [np.pad(x, (7, 8), mode="wrap"), np.pad(x[:4], 2, constant_values=(1.5, -2.0))]), X6),
    "roll with tuples, rot90": (lambda x: np.concatenate([
        np.roll(x.reshape(2, 3), (1, -1), axis=(0, 1)).ravel(),
        np.roll(x.reshape(2, 3), (1, 2), axis=(1, 1)).ravel(), np.roll(x, -13),
        np.rot90(x.reshape(1, 2, 3), -3, axes=(2, 1)).ravel(),
        np.rot90(x.reshape(2, 3), 5).ravel()]), X6),
    "tile, repeat with arrays": (lambda x: np.concatenate([
        np.tile(x.reshape(2, 3), (2, 1, 2)).ravel(), np.repeat(x, [1, 0, 2, 3, 0, 1]),
        np.repeat(x.reshape(2, 3), [2, 0, 1], axis=1).ravel(),
        x.reshape(2, 3).repeat([1, 2], axis=0).ravel()]), X6),
    "trim_zeros, ediff1d, diff prepend": (lambda x: np.concatenate([
        np.trim_zeros(x * np.array([0, 0, 1, 1, 0, 0.]), "f"),
        np.ediff1d(x.reshape(2, 3), to_begin=[-1, 2], to_end=3.0),
        np.diff(x.reshape(2, 3), n=2, prepend=1.5).ravel()]), X6),
    "cross with axisa/axisb/axisc, axis, broadcast": (lambda x: np.concatenate([
        np.cross(x[:6].reshape(3, 2), x[6:12].reshape(2, 3), axisa=0, axisb=1,
                 axisc=0).ravel(),
        np.cross(x[:6].reshape(3, 2), x[6:12].reshape(3, 2), axis=0).ravel(),
        np.cross(x[:6].reshape(2, 3), x[6:9]).ravel()]), X12),
    "tensorsolve, tensorinv": (lambda x: np.concatenate([
        np.linalg.tensorsolve(_square(x).reshape(2, 3, 6), x.reshape(2, 3)).ravel(),
        np.linalg.tensorinv(_square(x).reshape(6, 2, 3), ind=1).ravel()]), X6),
    "matrix_rank (a constant factor)": (lambda x: x * np.linalg.matrix_rank(
        x.reshape(3, 2), rtol=0.5), X6),
    "nan-reductions with an all-NaN slice": (lambda x: np.concatenate([
        f(_nan_rows(x), axis=a) for f in (np.nansum, np.nanprod, np.nanmean, np.nanvar,
                                          np.nanstd, np.nanmax, np.nanmin, np.nanmedian)
        for a in (0, 1)] + [np.nanpercentile(_nan_rows(x), 30, axis=1),
                            np.nanvar(_nan_rows(x), axis=1, ddof=1),
                            np.nancumsum(_nan_rows(x), axis=1).ravel()]), X6),
    # ndarray methods
    "x.clip, x.round, x.cumsum, x.trace, x.dot": (lambda x: np.concatenate([
        x.clip(-0.5, 1.0), x.clip(max=x[0]), x.round(1) + x, x.reshape(3, 3).cumsum(axis=1)
        .ravel(), [x.reshape(3, 3).trace(1)], x.reshape(3, 3).dot(x[:3])]), X9),
    "x.compress, x.repeat, x.swapaxes, x.squeeze, x.var(ddof=)": (lambda x: np.concatenate([
        x.compress([True, False, True, True]), x.repeat(2),
        x[:6].reshape(1, 2, 3).swapaxes(0, 2).ravel(),
        x[:6].reshape(1, 2, 1, 3).squeeze(axis=(0, 2)).ravel(),
        x.reshape(3, 3).var(axis=1, ddof=1), np.std(x.reshape(3, 3), axis=0, correction=1)]), X9),
}


@pytest.mark.parametrize("name", PROGRAMS)
def test_every_mode_matches_numpy_and_finite_differences(name):
    f, x = PROGRAMS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # NumPy's all-NaN slice warnings
        _check_every_mode(f, x)


def _grad(f, x):
    return autodiff(Reverse, f, Active, Active(np.asarray(x, float)))[0][0]


MASK = np.array([False, True, False, False, True, False])


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
@pytest.mark.parametrize("f", [
    lambda x: np.matrix(2 * np.ones((2, 2))) * x[:4].reshape(2, 2),   # NumPy: a matrix product
    lambda x: x[:4].reshape(2, 2) * np.matrix(2 * np.ones((2, 2))),
    lambda x: np.dot(x[:4].reshape(2, 2), np.matrix(np.eye(2))),
])
def test_an_np_matrix_meeting_a_traced_value_is_refused(f):
    """`A * x` with A an np.matrix is a matrix product in NumPy; the traced product was
    elementwise: a silent wrong primal (and the reverse pass crashed in matrix.sum)."""
    with pytest.raises(NonDifferentiableError, match="np.matrix"):
        autodiff(ForwardWithPrimal, f, Duplicated(X6.copy(), np.ones(6)))
    with pytest.raises(NonDifferentiableError, match="np.matrix"):
        _grad(lambda x: np.sum(f(x)), X6)


def test_a_masked_constant_meeting_a_traced_value_is_refused():
    """x * m with m a masked array: the gradient came back as a masked array whose masked
    entries held m's data (np.asarray(grad) = [2, 1, 2, 2, 1, 2], not [2, 0, 2, 2, 0, 2])."""
    m = np.ma.array(2 * np.ones(6), mask=MASK)
    for f in (lambda x: (x * m).sum(), lambda x: np.sum(np.multiply(x, m))):
        with pytest.raises(NonDifferentiableError, match="masked array"):
            _grad(f, X6)
    with pytest.raises(NonDifferentiableError, match="masked array"):
        autodiff(Reverse, lambda x, c: np.sum(x * c), Active, Active(X6.copy()), Const(m))


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")   # np.matrix's own
@pytest.mark.parametrize("kind", ["masked", "matrix"])
def test_a_masked_or_matrix_argument_is_refused(kind):
    """Active(masked array): np.mean's primal was 0.8 (all six entries) where NumPy gives 1.2,
    and np.sum's gradient was 1 at the masked entries; an np.matrix argument made x * x.T
    a broadcast error where NumPy multiplies matrices."""
    value = (np.ma.array(X6.copy(), mask=MASK) if kind == "masked"
             else np.matrix(X6.reshape(2, 3)))
    with pytest.raises(ActivityError, match="argument 0"):
        autodiff(Reverse, np.mean, Active, Active(value))
    with pytest.raises(ActivityError, match="argument 0"):
        autodiff(Forward, np.mean, Duplicated(value, np.ones(value.shape)))


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
@pytest.mark.parametrize("f, named", [
    (lambda x: np.ma.array(x, mask=MASK).sum(), "numpy.ma.array .*masked arrays"),
    (lambda x: np.ma.masked_where(x < 0, x).sum(), "numpy.ma.masked_where"),
    (lambda x: (np.ma.array(np.ones(6), mask=MASK) + x).sum(), "masked arrays"),
    (lambda x: np.matrix(x.reshape(2, 3)).sum(), "numpy.matrixlib.* np.matrix"),
])
def test_making_a_masked_array_or_matrix_of_a_traced_value_names_them(f, named):
    with pytest.raises(TracerConversionError, match=named):
        _grad(f, X6)


def _written(make_view):
    def f(x):
        y = x * 1.0
        view = make_view(y)
        view[(0,) * np.ndim(view)] = 5.0 * x[2]
        return y
    return f


@pytest.mark.parametrize("name, make_view", [
    ("np.reshape(copy=True): a copy", lambda y: np.reshape(y, shape=(2, 3), copy=True)),
    ("x.reshape(copy=True): a copy", lambda y: y.reshape((3, 2), copy=True)),
    ("np.reshape(copy=False): a view", lambda y: np.reshape(y, (2, 3), copy=False)),
    ("np.astype(copy=False), no cast: y itself", lambda y: np.astype(y, np.float64, copy=False)),
    ("np.astype: a copy", lambda y: np.astype(y, np.float64)),
])
def test_copy_keywords_follow_numpys_view_semantics(name, make_view):
    """reshape(copy=...) raised TypeError and np.astype had no rule."""
    _check_every_mode(_written(make_view), X6)


def test_reshape_copy_false_refuses_as_numpy_does():
    with pytest.raises(ValueError, match="avoid creating a copy"):
        _grad(lambda x: np.sum(np.reshape(x.reshape(2, 3).T, (6,), copy=False)), X6)


def test_the_array_api_attributes_and_python_protocols():
    """x.device, x.to_device, x.__array_namespace__ (AttributeError before), f"{x:.3f}"
    (TypeError), copy.deepcopy(x) (cannot pickle a context token); x.ptp is gone in NumPy 2."""
    seen = []

    def f(x):
        assert x.device == "cpu"
        seen.append(f"{x[0]:.3f}")
        xp = x.__array_namespace__()
        return xp.sin(x.to_device("cpu")) * copy.deepcopy(x)
    np.testing.assert_allclose(_grad(lambda x: np.sum(f(x)), X6),
                               np.cos(X6) * X6 + np.sin(X6))
    assert seen == ["0.500"]
    with pytest.raises(ValueError, match="to_device"):
        _grad(lambda x: np.sum(x.to_device("gpu")), X6)
    if not hasattr(np.ndarray, "ptp"):
        with pytest.raises(AttributeError, match="ptp"):
            _grad(lambda x: x.ptp(), X6)
