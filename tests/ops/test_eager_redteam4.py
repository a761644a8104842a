"""Eager autodiff on NumPy code users write: ufunc methods and keywords, in-place writes through
views, special points, dtypes (float16, longdouble, NEP 50), 0-size and 0-d arrays, and the
less common NumPy functions.

Each program is compared with plain NumPy for the primal (value, dtype, shape) and with float64
central differences for the reverse gradient, forward tangents and BatchDuplicated forward
columns and reverse lanes. Kinks are checked against the stated convention.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided, sliding_window_view

from tape import (Active, BatchDuplicated, Const, Duplicated, Forward, ForwardWithPrimal,
                  Reverse, autodiff)
from tape.errors import NonDifferentiableError

X6 = np.array([0.5, -0.7, 1.3, 2.1, -0.2, 0.9])
X9 = np.array([2.0, 0.3, -0.1, 0.4, 1.5, 0.2, 0.1, -0.3, 1.8])
Y3 = np.array([1.5, 0.2, -0.4])


def _jacobian_fd(f, x, eps=1e-6):
    return np.array([(np.asarray(f(x + e)) - np.asarray(f(x - e))) / (2 * eps)
                     for e in np.eye(x.size).reshape(x.size, *x.shape) * eps])


def _check_every_mode(f, x, tol=1e-6):
    """Primal, dtype and shape against NumPy; reverse, forward, batch forward and batch
    reverse against central differences."""
    want = np.asarray(f(x.copy()))
    tangent, got = autodiff(ForwardWithPrimal, f, Duplicated(x.copy(), np.ones_like(x)))
    got = np.asarray(got)
    assert (got.dtype, got.shape) == (want.dtype, want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    jac = _jacobian_fd(f, x)
    weights = np.random.default_rng(0).normal(size=want.shape)
    scalar = lambda z: np.sum(f(z) * weights)   # noqa: E731
    want_grad = np.tensordot(jac, weights, axes=weights.ndim)
    np.testing.assert_allclose(autodiff(Reverse, scalar, Active, Active(x.copy()))[0][0],
                               want_grad, rtol=tol, atol=tol)
    np.testing.assert_allclose(tangent, jac.sum(0), rtol=tol, atol=tol)
    columns = autodiff(Forward, f, BatchDuplicated(x.copy(), tuple(np.eye(x.size))))[0]
    np.testing.assert_allclose(np.array(columns), jac, rtol=tol, atol=tol)
    lanes = (np.zeros_like(x), np.ones_like(x))
    autodiff(Reverse, scalar, Active, BatchDuplicated(x.copy(), lanes))
    np.testing.assert_allclose(lanes[0], want_grad, rtol=tol, atol=tol)
    np.testing.assert_allclose(lanes[1] - 1, want_grad, rtol=tol, atol=tol)


def _writes(z, *steps):
    for step in steps:
        step(z)
    return z


def _add_at(buffer, index, values, op=np.add):
    op.at(buffer, index, values)
    return buffer


def _stack(x):
    return x[:18].reshape(2, 3, 3) + 3 * np.eye(3)


def _spd(x):
    a = x[:18].reshape(2, 3, 3)
    return a @ np.swapaxes(a, -1, -2) + 2 * np.eye(3)


PROGRAMS = {
    # ufunc methods and keywords
    "add.outer": (lambda x: np.add.outer(x[:3], Y3), X6),
    "multiply.outer of itself": (lambda x: np.multiply.outer(x[:3], x[3:]), X6),
    "power.outer": (lambda x: np.power.outer(np.abs(x[:3]), x[3:]), X6),
    "multiply.reduce axis": (lambda x: np.multiply.reduce(x.reshape(2, 3), axis=1), X6),
    "add.reduce keepdims initial": (lambda x: np.add.reduce(x.reshape(2, 3), axis=0,
                                                            keepdims=True, initial=5.0), X6),
    "multiply.reduce initial": (lambda x: np.multiply.reduce(x, initial=2.0), X6),
    "maximum.reduce axis": (lambda x: np.maximum.reduce(x.reshape(3, 2), axis=1), X6),
    "minimum.reduce initial": (lambda x: np.minimum.reduce(x, initial=0.0), X6),
    "add/multiply.accumulate": (lambda x: np.add.accumulate(np.multiply.accumulate(
        x.reshape(2, 3), axis=1)), X6),
    "add.at repeated, 2-d tuple index": (lambda x: _add_at(x.reshape(2, 3) * 1.0,
                                                           ([0, 0, 1], [2, 2, 0]), x[:3]), X6),
    "subtract.at repeated, values from the buffer": (
        lambda x: _add_at(x * 1.0, [1, 1, -1], x[3:], np.subtract), X6),
    "ufunc out= aliasing an input": (lambda x: _writes(x * 2, lambda z: np.multiply(
        z, z, out=z)), X6),
    "ufunc out= overlapping views": (lambda x: _writes(x * 1.0, lambda z: np.add(
        z[1:], z[:-1], out=z[1:])), X6),
    "ufunc where= with out=": (lambda x: _writes(x * 1.0, lambda z: np.exp(
        x, out=z, where=x > 0)), X6),
    "cumsum out=self": (lambda x: _writes(x * 1.0, lambda z: np.cumsum(z, out=z)), X6),
    # in-place writes through views
    "z[::2] += z[1::2] * z[::2]": (lambda x: _writes(x * 1.0, lambda z: z.__setitem__(
        slice(None, None, 2), z[::2] + z[1::2] * z[::2])), X6),
    "z[mask] *= z[mask]": (lambda x: _writes(x * 1.0, lambda z: z.__setitem__(
        z > 0.6, z[z > 0.6] * z[z > 0.6])), X6),
    "z.T[1:, :] = sin(...)": (lambda x: _writes(x.reshape(2, 3) * 1.0, lambda z: z.T.__setitem__(
        (slice(1, None), slice(None)), np.sin(z.T[1:, :]))), X6),
    "z[..., None] write": (lambda x: _writes(x * 1.0, lambda z: z[..., None].__setitem__(
        slice(2, 4), 7.0 * x[:2, None])), X6),
    "z[a], z[b] = z[b], z[a] on rows (NumPy's view aliasing)": (lambda x: _writes(
        x.reshape(2, 3) * 1.0, lambda z: z.__setitem__(slice(None), np.stack([z[1], z[0]]))), X6),
    # functions
    "take wrap / clip": (lambda x: np.take(x, [0, 7, -8], mode="wrap")
                         * np.take(x, [7, -8, 2], mode="clip"), X6),
    "diag / diagonal / trace with offsets": (lambda x: np.concatenate([
        np.diag(x.reshape(3, 3), k=1), np.diagonal(x.reshape(3, 3), -1, 1, 0),
        [np.trace(x.reshape(3, 3), offset=-1)]]), X9),
    "tril / triu with k": (lambda x: np.tril(x.reshape(3, 3), -1) + np.triu(x.reshape(3, 3), 1)
                           ** 2, X9),
    "kron of mixed dims": (lambda x: np.kron(x[:2], x[2:6].reshape(2, 2)), X9),
    "tensordot axes pairs": (lambda x: np.tensordot(x[:8].reshape(2, 2, 2), x[:4].reshape(2, 2),
                                                    axes=([0, 2], [1, 0])), X9),
    "tensordot 0 and negative axes": (lambda x: np.tensordot(x[:2], x[2:5], 0).sum() * np.tensordot(
        x[:6].reshape(2, 3), x[3:9].reshape(2, 3), axes=([-1], [-1])), X9),
    "einsum 'ii->i', 'ii', uppercase, implicit": (lambda x: np.concatenate([
        np.einsum("ii->i", x.reshape(3, 3)), [np.einsum("ii", x.reshape(3, 3))],
        np.einsum("Ab,bC", x.reshape(3, 3), x.reshape(3, 3)).ravel()]), X9),
    "einsum repeated operand, optimize": (lambda x: np.einsum(
        "i,ij,j->", x[:3], x.reshape(3, 3), x[:3], optimize="greedy")
        + np.einsum("...ij,...jk", x[:8].reshape(2, 2, 2), x[:8].reshape(2, 2, 2),
                    optimize=True).sum(), X9),
    "multi_dot": (lambda x: np.linalg.multi_dot([x[:3], x.reshape(3, 3), x.reshape(3, 3).T,
                                                 x[3:6]]), X9),
    "matrix_power -3 of a stack": (lambda x: np.linalg.matrix_power(
        np.stack([x.reshape(3, 3) + 3 * np.eye(3), x.reshape(3, 3).T + 3 * np.eye(3)]), -3), X9),
    "cumsum / cumprod dtype= and zeros": (lambda x: np.cumprod(x * [1, 0, 1, 0, 1, 1]) + np.cumsum(
        x, dtype=np.longdouble).astype(float), X6),
    "diff prepend/append, gradient with spacing": (lambda x: np.concatenate([
        np.diff(x[:4], prepend=0.0, append=x[4:]),
        np.gradient(x, np.array([0., 1., 1.5, 3., 3.2, 4.]), edge_order=2)]), X6),
    "convolve / correlate modes": (lambda x: np.concatenate([
        np.convolve(x[:4], x[4:], m) for m in ("full", "same", "valid")]
        + [np.correlate(x[:2], x[2:], "full")]), X6),
    "bincount weights, interp fp": (lambda x: np.concatenate([
        np.bincount([0, 2, 2, 1, 0, 2], weights=x, minlength=4),
        np.interp([0., 1., 2.5], [0., 1., 2., 3.], x[:4])]), X6),
    "round/floor/ceil/trunc/rint (zero derivative)": (lambda x: sum(
        f(x * 3.1) for f in (np.round, np.floor, np.ceil, np.trunc, np.rint)) + x, X6),
    "fmod / remainder": (lambda x: np.fmod(x[:3], x[3:] + 3.0) + np.remainder(x[:3], 0.4), X6),
    "select": (lambda x: np.select([x < 0, x > 1], [x ** 2, np.sin(x)], default=x), X6),
    # batched (stacked) linear algebra
    "stacked solve, inv, det, slogdet": (lambda x: np.concatenate([
        np.linalg.solve(_stack(x), np.ones((2, 3, 2))).ravel(), np.linalg.inv(_stack(x)).ravel(),
        np.linalg.det(_stack(x)), np.linalg.slogdet(_stack(x) - 6 * np.eye(3))[1]]),
        np.random.default_rng(1).normal(size=18) * 0.3),
    "stacked eigh, cholesky, svd": (lambda x: np.concatenate([
        np.linalg.eigh(_spd(x))[0].ravel(), np.linalg.cholesky(_spd(x)).ravel(),
        np.linalg.svd(_stack(x), compute_uv=False).ravel(),
        np.linalg.eigvalsh(_stack(x), UPLO="U").ravel()]),
        np.random.default_rng(1).normal(size=18) * 0.3),
    # dtypes and shapes
    "int and bool arrays mixed in": (lambda x: x * (x > 0) + x * np.arange(6) + np.floor(
        x).astype(int), X6),
    "0-size arrays": (lambda x: np.sum(x[:0].reshape(0, 3), axis=0)
                      + np.max(x[:0].reshape(0, 3), axis=0, initial=0.0)
                      + (x[:0].reshape(0, 3).T @ x[:0].reshape(0, 3))[0]
                      + np.cumsum(x[:0]).sum() + x[:3], X6),
    # functions that now have rules
    "maximum/minimum.accumulate": (lambda x: np.maximum.accumulate(x.reshape(2, 3), axis=1)
                                   + np.minimum.accumulate(x.reshape(2, 3)), X6),
    "sliding_window_view": (lambda x: sliding_window_view(x.reshape(2, 3), (2, 2))
                            * np.arange(4.).reshape(2, 2), X6),
    "piecewise": (lambda x: np.piecewise(x, [x < 0, x > 1], [lambda v: -v, np.sin,
                                                             lambda v: v ** 2]), X6),
    "apply_along_axis": (lambda x: np.apply_along_axis(lambda r: r * r.sum(), 1,
                                                       x.reshape(2, 3)), X6),
    "diagflat": (lambda x: np.diagflat(x[:4].reshape(2, 2), k=1), X6),
}


@pytest.mark.parametrize("name", PROGRAMS)
def test_every_mode_matches_numpy_and_finite_differences(name):
    f, x = PROGRAMS[name]
    _check_every_mode(f, x)


def _grad(f, x):
    return autodiff(Reverse, f, Active, Active(np.asarray(x, float)))[0][0]


def _tangents(f, x):
    x = np.asarray(x, float)
    return np.array(autodiff(Forward, f, BatchDuplicated(x, tuple(np.eye(x.size))))[0])


# (program, point, the derivative by the convention): every mode gives the same.
CONVENTIONS = {
    "prod, one zero: the product of the others": (np.prod, [2., 0., 3.], [0., 6., 0.]),
    "prod, two zeros: all zero": (np.prod, [2., 0., 0.], [0., 0., 0.]),
    "cumprod with zeros": (lambda x: np.cumprod(x) @ [1., 2., 3., 4.], [2., 0., 3., 5.],
                           [1., 142., 0., 0.]),
    "x**0 at 0": (lambda x: np.sum(x ** 0), [0., 2.], [0., 0.]),
    "power(x, 2.5) at 0": (lambda x: np.sum(np.power(x, 2.5)), [0., 1.], [0., 2.5]),
    "0**x": (lambda x: np.sum(0.0 ** x), [0., 2.], [0., 0.]),
    "abs, sign at 0": (lambda x: np.sum(np.abs(x) + np.sign(x) * x), [0., -1.], [0., -2.]),
    "hypot, arctan2 at the origin": (lambda x: np.hypot(x[0], x[1]) + np.arctan2(x[0], x[1]),
                                     [0., 0.], [0., 0.]),
    "norm of a zero vector": (np.linalg.norm, [0., 0.], [0., 0.]),
    "max ties split evenly (as JAX, torch.amax)": (np.max, [1., 3., 3.], [0., .5, .5]),
    "maximum.reduce ties split evenly": (np.maximum.reduce, [3., 3., 3.], [1 / 3] * 3),
    "x[argmax] takes the first": (lambda x: x[np.argmax(x)], [1., 3., 3.], [0., 1., 0.]),
    "sort ties in stable order": (lambda x: np.sort(x) @ [1., 2., 3.], [2., 1., 2.], [2., 1., 3.]),
    "unique sends a tie to its first occurrence": (lambda x: np.unique(x) @ [1., 2.],
                                                   [2., 1., 2.], [2., 1., 0.]),
    "clip: bounds inclusive, to x": (lambda x: np.sum(np.clip(x[:2], x[2:], 1.0)),
                                     [0.5, 0.2, 0.5, 0.3], [1., 0., 0., 1.]),
    "maximum(x, x)": (lambda x: np.sum(np.maximum(x, x)), [1., 2.], [1., 1.]),
    "where(x > 0, x, 0) at 0": (lambda x: np.sum(np.where(x > 0, x, 0)), [0., 1.], [0., 1.]),
    "sinc at 0": (lambda x: np.sum(np.sinc(x)), [0.], [0.]),
    "interp at a knot: the right segment (as JAX)": (
        lambda x: np.interp(x[0], [0., 1., 2.], [0., 1., 4.]), [1.], [3.]),
    "max tied with initial= goes to the entry": (lambda x: np.max(x, initial=1.3),
                                                 [0.5, 1.3], [0., 1.]),
}


@pytest.mark.parametrize("name", CONVENTIONS)
def test_derivatives_at_special_points_follow_the_convention(name):
    f, x, want = CONVENTIONS[name]
    np.testing.assert_allclose(_grad(f, x), want, atol=1e-12)
    np.testing.assert_allclose(_tangents(f, x), want, atol=1e-12)


def test_writes_into_the_callers_buffers_reach_them_with_their_derivatives():
    """f!(y, x) through out=, ufunc.at, slices and views: y as NumPy writes it; the reverse
    shadow of x is J^T seed and the forward tangent of y is J v."""
    a = np.array([[1., 2., 0.5], [0.3, -1., 2.]])
    programs = [
        lambda y, x: np.multiply(x, 3.0, out=y, where=x > 0),
        lambda y, x: np.add.at(y, [0, 0, 2], x),
        lambda y, x: np.exp(x[:2], out=y[::2]),
        lambda y, x: np.einsum("ij,i->j", a, x[:2], out=y),
        lambda y, x: np.put_along_axis(y, np.array([2, 0]), x[:2] * 3, axis=0),
        lambda y, x: np.add(y, x, out=y),
        lambda y, x: y.reshape(3, 1).T.__setitem__(Ellipsis, x ** 2),
        lambda y, x: np.cumprod(x, out=y),
    ]
    x0, y0 = np.array([0.5, -0.7, 1.3]), np.array([0.2, 0.4, -0.3])

    def plain(f, x):
        y = y0.copy()
        f(y, x)
        return y
    for f in programs:
        jac = _jacobian_fd(lambda x: plain(f, x), x0)     # (x, y)
        seed, v = np.array([1.0, -2.0, 0.5]), np.array([0.3, 1.0, -0.5])
        y, dy, dx = y0.copy(), seed.copy(), np.zeros(3)
        autodiff(Reverse, f, Const, Duplicated(y, dy), Duplicated(x0.copy(), dx))
        np.testing.assert_allclose(y, plain(f, x0), rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(dx, jac @ seed, atol=1e-6)
        y, ty = y0.copy(), np.zeros(3)
        autodiff(Forward, f, Const, Duplicated(y, ty), Duplicated(x0.copy(), v))
        np.testing.assert_allclose(y, plain(f, x0), rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(ty, jac.T @ v, atol=1e-6)


DTYPES = {
    "float16": (lambda x: np.exp(x) * x + np.linalg.norm(x), np.float16),
    "longdouble": (lambda x: np.tanh(x) * np.sum(x ** 2), np.longdouble),
    "float32 with Python scalars (weak)": (lambda x: x * 2.0 + np.maximum(x, 0) + 2 ** 40,
                                           np.float32),
    "float32 with NumPy scalars (strong)": (lambda x: x + np.int64(2) + x * np.float64(2.0),
                                            np.float32),
    "float32 plus an int array": (lambda x: x + np.arange(3), np.float32),
    "float16 plus np.float32": (lambda x: x + np.float32(1.0), np.float16),
    "float32 where with np.float64": (lambda x: np.where(x > 0, x, np.float64(1)), np.float32),
    "complex64 plus complex128": (lambda x: x + np.complex128(1j), np.complex64),
    "float32 bincount weights (NumPy sums in float64)": (
        lambda x: np.bincount([0, 1, 1], weights=x), np.float32),
}


@pytest.mark.parametrize("name", DTYPES)
def test_primal_and_tangent_have_numpys_dtype(name):
    f, dtype = DTYPES[name]
    x = np.array([0.5, -1.25, 2.0]).astype(dtype)
    want = np.asarray(f(x.copy()))
    tangent, got = autodiff(ForwardWithPrimal, f, Duplicated(x.copy(), np.ones_like(x)))
    assert np.asarray(got).dtype == want.dtype == np.asarray(tangent).dtype
    column = autodiff(Forward, f, BatchDuplicated(x.copy(), (np.ones_like(x),)))[0][0]
    assert np.asarray(column).dtype == want.dtype
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-3)
    if x.dtype.kind == "f":
        (g,), = autodiff(Reverse, lambda z: np.sum(f(z)), Active, Active(x.copy()))
        assert g.dtype == x.dtype


def test_division_by_a_python_zero_gives_numpys_inf():
    x = np.array([1.0, -2.0])
    with np.errstate(divide="ignore"):
        for f in (lambda z: z / 0.0, lambda z: np.divide(z, 0), lambda z: z / -0.0):
            tangent, value = autodiff(ForwardWithPrimal, f, Duplicated(x.copy(), np.ones(2)))
            np.testing.assert_array_equal(value, f(x))
            np.testing.assert_array_equal(tangent, f(np.ones(2)))
            np.testing.assert_array_equal(_grad(lambda z: np.sum(f(z)), x), f(np.ones(2)))


def test_mean_of_an_empty_slice_is_nan_as_in_numpy():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        tangent, value = autodiff(ForwardWithPrimal, lambda x: np.mean(x, axis=0),
                                  Duplicated(np.zeros((0, 3)), np.zeros((0, 3))))
        assert value.shape == (3,) and np.isnan(value).all()
        np.testing.assert_array_equal(_grad(lambda x: np.mean(x[:0]) * 0 + np.sum(x), X6),
                                      np.ones(6))   # the empty slice gets no cotangent


def test_ufunc_reduce_of_a_zero_dimensional_value():
    f = lambda x: np.add.reduce(x[0]) * np.maximum.reduce(x[1], axis=-1)   # noqa: E731
    np.testing.assert_allclose(_grad(f, [2.0, 3.0]), [3.0, 2.0])


def test_hessians_through_ufunc_methods_and_stacked_linalg():
    def f(x):
        buffer = np.zeros_like(x)
        np.add.at(buffer, [0, 0, 1, 3], x * x)
        stack = np.stack([np.diag(x[:2]) + 3, np.outer(x[2:], x[:2]) + 3 * np.eye(2)])
        return (np.sum(buffer ** 3) + np.sum(np.linalg.inv(stack))
                + np.cumprod(x * [1, 0, 1, 1]) @ np.arange(1., 5.)
                + np.maximum.accumulate(x) @ np.arange(4.) ** 2)
    x = np.array([0.5, -0.7, 1.3, 2.1])
    grad = lambda z: _grad(f, z)   # noqa: E731
    want = _jacobian_fd(grad, x, 1e-5)
    np.testing.assert_allclose(_tangents(grad, x), want, rtol=1e-5, atol=1e-5)
    rows = [autodiff(Reverse, lambda z: grad(z)[i], Active, Active(x.copy()))[0][0]
            for i in range(4)]
    np.testing.assert_allclose(rows, want, rtol=1e-5, atol=1e-5)


REFUSED = {
    "as_strided": (lambda x: as_strided(x, shape=(2, 3), strides=(8, 8)), "as_strided"),
    "np.vectorize": (lambda x: np.vectorize(lambda a: a * a)(x), "np.vectorize"),
    "np.histogram": (lambda x: np.histogram(x, bins=3)[0] * x[:3], "numpy.histogram"),
    "plain out= buffer": (lambda x: np.multiply(x, x, out=np.zeros(6)), "np.zeros_like"),
    "in-place sort": (lambda x: _writes(x * 1.0, lambda z: z.sort()), "np.sort"),
    "sliding_window_view(writeable=True)": (
        lambda x: sliding_window_view(x, 2, writeable=True), "writeable=True"),
}


@pytest.mark.parametrize("name", REFUSED)
def test_what_cannot_be_followed_is_refused_naming_it(name):
    f, named = REFUSED[name]
    with pytest.raises((NonDifferentiableError, NotImplementedError), match=named):
        _grad(lambda x: np.sum(f(x)), X6)


@pytest.mark.xfail(strict=True, reason="forward x**y with a negative base: the exponent's "
                   "zero tangent times log(x) = nan makes the tangent nan where reverse mode "
                   "gives the x-derivative (JAX and PyTorch do the same)")
def test_forward_power_with_a_negative_base_and_an_exponent_tangent_of_zero():
    f = lambda x: x[0] ** x[1]   # noqa: E731
    x = np.array([-2.0, 3.0])
    assert _grad(f, x)[0] == 12.0
    assert autodiff(Forward, f, Duplicated(x.copy(), np.array([1.0, 0.0])))[0] == 12.0


def test_vectorize_with_a_signature_is_refused_naming_vectorize():
    """It converts its arguments in a generator expression, whose frame has lost its caller
    by the time the message is read: the message named 'numpy.lib.<genexpr>'."""
    f = np.vectorize(lambda r: r.sum(), signature="(n)->()")
    with pytest.raises(NonDifferentiableError, match="np.vectorize"):
        _grad(lambda x: np.sum(f(x.reshape(2, 3))), X6)
