"""Dtype and casting semantics of traced programs against plain NumPy 2 (NEP 50).

A traced program gives NumPy's primal dtype and value; a forward tangent has the primal's
dtype; a gradient has the dtype of the differentiated argument; `tape.compile` gives what
eager mode gives. Programs mix float16 / float32 / float64 arrays with Python scalars (weak),
NumPy scalars (strong), integer and bool arrays, reductions with `dtype=`, casts, linalg and
FFT on float32. Gradients are checked against float64 central differences where the program
has no float16 rounding in the way.

Two findings, fixed: float16 `mean` summed in float16 and divided by a float16 count (NumPy
accumulates in float32), and batch forward mode giving float64 tangents for a Python float
argument of a float32 program.
"""
import numpy as np
import pytest

import tape
from tape import (Active, BatchDuplicated, Const, Duplicated, Forward, ForwardWithPrimal,
                  ReverseWithPrimal, autodiff)

F32 = np.array([0.5, -1.25, 2.5], np.float32)
F16 = F32.astype(np.float16)
MASK = np.array([True, False, True])
IDX = np.array([1, 2, 3])
_A = np.array([[3.0, 0.5, -0.2], [0.1, 2.5, 0.4], [-0.3, 0.2, 4.0]])
A32 = _A.ravel().astype(np.float32)

# name: (f, x, whether float64 central differences of f are the reference for the gradient)
PROGRAMS = {
    "np.float64 scalar * float32 (strong)": (lambda x: np.float64(2.0) * x, F32, True),
    "float16 + np.float32 scalar, * Python int": (lambda x: (x + np.float32(1.5)) * 3, F16, True),
    "float32 * bool mask + int64 index": (lambda x: x * MASK + x * IDX, F32, True),
    "float16 + int32 array": (lambda x: x * x + IDX.astype(np.int32), F16, True),
    "where(mask, float32, 0) and np.float64 fill": (
        lambda x: np.where(MASK, x, 0) * np.where(MASK, x, np.float64(1)), F32, True),
    "float32 // and % by a Python float": (lambda x: x // 0.7 + x % 0.7 * x, F32, True),
    "true_divide of int arrays times float16": (lambda x: np.true_divide(IDX, 2) * x, F16, True),
    "comparisons as weights": (lambda x: (x > 0) * x * x + (x < 1) * 2, F16, True),
    "floor and round: zero derivative, same dtype": (
        lambda x: np.floor(x * 3.3) + np.round(x * 1.7) + x, F32, False),
    "astype float16 round trip inside a loss": (
        lambda x: (x.astype(np.float16) * 3).astype(np.float32) * x, F32, False),
    "sum(dtype=float64) of float32": (lambda x: np.sum(x * x, dtype=np.float64), F32, True),
    "mean(dtype=float64) of float16": (lambda x: np.mean(x * x, dtype=np.float64), F16, False),
    "cumsum / cumprod dtype=float64": (
        lambda x: np.cumsum(x, dtype=np.float64) * np.cumprod(x, dtype=np.float64), F32, True),
    "clip float32 with np.float64 bounds": (
        lambda x: np.clip(x, np.float64(-1.0), np.float64(1.0)) * x, F32, True),
    "power with an int exponent array": (lambda x: np.power(x, IDX) + x ** np.int64(2), F32,
                                         True),
    "float_power of float32 (always float64)": (lambda x: np.float_power(x, 2), F32, True),
    "exp(dtype=float64) of float32": (lambda x: np.exp(x, dtype=np.float64), F32, True),
    "matmul / einsum float32 with float64 and int": (
        lambda x: x @ np.ones((3, 2)) + np.einsum("i,ij->j", x, np.ones((3, 2), int)), F32,
        True),
    "float32 + 1j (complex64) then real": (lambda x: np.real((x + 1j) * (x + 2j)), F32, True),
    "inv, det, solve of float32": (
        lambda x: np.linalg.inv(x.reshape(3, 3)).sum(0) * np.linalg.det(x.reshape(3, 3))
        + np.linalg.solve(x.reshape(3, 3), np.ones(3, np.float32)), A32, True),
    "eigvalsh and svd of float32": (
        lambda x: np.linalg.eigvalsh(x.reshape(3, 3) + x.reshape(3, 3).T)
        * np.linalg.svd(x.reshape(3, 3), compute_uv=False), A32, True),
    "fft / rfft / irfft of float32 (complex64 inside)": (
        lambda x: np.abs(np.fft.fft(x)) + np.fft.irfft(np.fft.rfft(x) * 2, n=9), A32, True),
    "interp of float32 (float64 result)": (
        lambda x: np.interp(x, [0.0, 1.0, 3.0], [1.0, 2.0, 5.0]), F32, True),
}


def _fd_grad(f, x, eps=1e-6):
    x = x.astype(np.float64)
    grad = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = eps
        grad.flat[i] = (np.sum(f(x + e)) - np.sum(f(x - e))) / (2 * eps)
    return grad


def _tol(dtype):
    return {np.dtype(np.float16): 2e-2, np.dtype(np.float32): 2e-4}.get(np.dtype(dtype), 1e-7)


@pytest.mark.parametrize("name", PROGRAMS)
def test_mixed_dtype_programs_match_numpy_in_every_mode(name):
    f, x, fd_reference = PROGRAMS[name]
    want = np.asarray(f(x.copy()))
    tol = _tol(want.dtype)
    ones = np.ones_like(x)
    tangent, primal = autodiff(ForwardWithPrimal, f, Duplicated(x.copy(), ones))
    assert np.asarray(primal).dtype == want.dtype == np.asarray(tangent).dtype
    np.testing.assert_allclose(np.asarray(primal), want, rtol=tol, atol=tol)
    columns = autodiff(Forward, f, BatchDuplicated(x.copy(), (ones, 2 * ones)))[0]
    assert [np.asarray(c).dtype for c in columns] == [want.dtype] * 2
    np.testing.assert_allclose(np.asarray(columns[1]), 2 * np.asarray(tangent),
                               rtol=tol, atol=tol)

    loss = lambda z: np.sum(f(z))   # noqa: E731
    (grad,), value = autodiff(ReverseWithPrimal, loss, Active, Active(x.copy()))
    assert grad.dtype == x.dtype
    assert np.asarray(value).dtype == np.asarray(loss(x.copy())).dtype
    np.testing.assert_allclose(np.sum(np.asarray(grad, np.float64)),
                               np.asarray(tangent, np.float64).sum(), rtol=1e-2, atol=1e-2)
    if fd_reference:
        np.testing.assert_allclose(np.asarray(grad, np.float64), _fd_grad(f, x),
                                   rtol=_tol(x.dtype), atol=_tol(x.dtype))

    compiled = tape.compile(ReverseWithPrimal, loss, Active, Active)
    for _ in range(2):
        (cgrad,), cvalue = compiled(Active(x.copy()))
    assert compiled.stats.eager_calls == 0
    assert cgrad.dtype == grad.dtype
    assert np.asarray(cvalue).dtype == np.asarray(value).dtype
    np.testing.assert_allclose(np.asarray(cgrad, np.float64), np.asarray(grad, np.float64),
                               rtol=tol, atol=tol)
    compiled = tape.compile(ForwardWithPrimal, f, Duplicated, Duplicated)
    for _ in range(2):
        ctangent, cprimal = compiled(Duplicated(x.copy(), ones))
    assert np.asarray(cprimal).dtype == np.asarray(ctangent).dtype == want.dtype


def test_python_float_argument_keeps_a_float32_program_float32():
    """A Python float argument is weak in NumPy (0.5 * float32 is float32): traced, it stays
    weak in reverse and forward mode, eagerly and compiled."""
    a = np.array([1.5, 2.0, -0.5], np.float32)
    (gs, _), value = autodiff(ReverseWithPrimal, lambda s, b: np.sum(s * b), Active,
                              Active(0.5), Const(a))
    assert type(gs) is float and gs == pytest.approx(3.0)
    assert np.asarray(value).dtype == np.float32
    tangent, primal = autodiff(ForwardWithPrimal, lambda s, b: s * b, Duplicated(0.5, 1.0),
                               Const(a))
    assert primal.dtype == tangent.dtype == np.float32
    compiled = tape.compile(ForwardWithPrimal, lambda s, b: s * b, Duplicated, Duplicated,
                            Const)
    for _ in range(2):
        tangent, primal = compiled(Duplicated(0.5, 1.0), Const(a))
    assert primal.dtype == tangent.dtype == np.float32


# --------------------------------------------------------------------------------------------
# Findings


def _mean_modes(f, x):
    """Primal and tangent (forward), primal (reverse), primal (compiled reverse)."""
    tangent, primal = autodiff(ForwardWithPrimal, f, Duplicated(x.copy(), np.ones_like(x)))
    _, rev = autodiff(ReverseWithPrimal, f, Active, Active(x.copy()))
    compiled = tape.compile(ReverseWithPrimal, f, Active, Active)
    for _ in range(2):
        _, comp = compiled(Active(x.copy()))
    return tangent, primal, rev, comp


MEANS = {
    "np.mean": np.mean,
    "x.mean()": lambda z: z.mean(),
    "np.average": np.average,
    "np.mean where=": lambda z: np.mean(z, where=np.ones(z.shape, bool)),
}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name", MEANS)
def test_float16_mean_accumulates_in_float32_as_numpy(name):
    f = MEANS[name]
    x = np.array([40000.0, 40000.0], np.float16)
    want = f(x)
    assert want == np.float16(40000.0) and want.dtype == np.float16
    tangent, *primals = _mean_modes(f, x)
    for got in primals:
        assert np.asarray(got).dtype == np.float16
        np.testing.assert_allclose(np.float64(got), 40000.0, rtol=1e-3)
    assert np.asarray(tangent).dtype == np.float16 and tangent == 1.0


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name", MEANS)
def test_float16_mean_of_more_than_65504_entries(name):
    f = MEANS[name]
    x = np.full(70000, 0.001, np.float16)
    want = f(x)
    np.testing.assert_allclose(np.float64(want), 0.001, rtol=1e-3)
    tangent, *primals = _mean_modes(f, x)
    for got in primals:
        assert np.asarray(got).dtype == np.float16
        np.testing.assert_allclose(np.float64(got), np.float64(want), rtol=1e-2)
    np.testing.assert_allclose(np.float64(tangent), 1.0, rtol=1e-2)


@pytest.mark.parametrize("compiled", [False, True])
def test_batch_forward_tangents_of_a_python_float_keep_the_primal_dtype(compiled):
    a = np.array([1.5, 2.0, -0.5], np.float32)
    f = lambda s, b: s * b   # noqa: E731
    want = f(0.5, a)
    assert want.dtype == np.float32
    args = (BatchDuplicated(0.5, (1.0, 2.0)), Const(a))
    if compiled:
        g = tape.compile(Forward, f, Duplicated, BatchDuplicated, Const)
        for _ in range(2):
            columns, = g(*args)
    else:
        columns, = autodiff(Forward, f, *args)
    np.testing.assert_allclose(columns[1], 2 * a)
    assert [np.asarray(c).dtype for c in columns] == [np.float32, np.float32]
