"""cholesky's rules solve with the factor by SciPy's triangular solves when they are given
plain matrices, and by general (differentiable) solves otherwise: a stack of one matrix takes
the general path, so the two are compared here, and both with central differences."""
import numpy as np
import pytest

from tape import Active, Duplicated, Forward, Reverse, autodiff, hessian

pytest.importorskip("scipy")

RNG = np.random.default_rng(7)
N = 5


def _spd(dtype):
    a = RNG.standard_normal((N, N))
    if np.dtype(dtype).kind == "c":
        a = a + 1j * RNG.standard_normal((N, N))
    return (a @ a.conj().T + N * np.eye(N)).astype(dtype)


def _loss(w, upper):
    def f(a):
        return np.sum(np.real(np.linalg.cholesky(a, upper=upper) * w))
    return f


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.float32])
def test_reverse_matches_the_general_path_and_differences(dtype, upper):
    a = _spd(dtype)
    w = RNG.standard_normal((N, N)).astype(np.float64)
    f = _loss(w, upper)
    (fast,), = autodiff(Reverse, f, Active, Active(a))
    (general,), = autodiff(Reverse, f, Active, Active(a[None]))
    tol = 1e-4 if dtype == np.float32 else 1e-12
    assert fast.dtype == a.dtype
    np.testing.assert_allclose(fast, general[0], rtol=tol, atol=tol * np.abs(general).max())
    if dtype == np.float32:
        return
    eps, fd = 1e-6, np.zeros_like(a)
    directions = [1.0] if dtype == np.float64 else [1.0, 1j]
    for i in range(N):
        for j in range(N):
            for d in directions:
                e = np.zeros_like(a)
                e[i, j] = d * eps
                fd[i, j] += d * (f(a + e) - f(a - e)) / (2 * eps)   # df/dx + i df/dy
    np.testing.assert_allclose(fast, fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_forward_matches_the_general_path_and_differences(dtype, upper):
    a, da = _spd(dtype), _spd(dtype) - N * np.eye(N)
    fast, = autodiff(Forward, lambda x: np.linalg.cholesky(x, upper=upper), Duplicated(a, da))
    general, = autodiff(Forward, lambda x: np.linalg.cholesky(x, upper=upper),
                        Duplicated(a[None], da[None]))
    np.testing.assert_allclose(fast, general[0], rtol=1e-12, atol=1e-12)
    eps = 1e-6
    fd = (np.linalg.cholesky(a + eps * da, upper=upper)
          - np.linalg.cholesky(a - eps * da, upper=upper)) / (2 * eps)
    np.testing.assert_allclose(fast, fd, rtol=1e-6, atol=1e-8)


def test_second_order_takes_the_differentiable_path():
    a = _spd(np.float64)
    f = _loss(RNG.standard_normal((N, N)), False)
    h = hessian(f, a).reshape(N * N, N * N)
    eps = 1e-5
    g = lambda x: autodiff(Reverse, f, Active, Active(x))[0][0].ravel()   # noqa: E731
    fd = np.stack([(g(a + eps * e.reshape(N, N)) - g(a - eps * e.reshape(N, N))) / (2 * eps)
                   for e in np.eye(N * N)], axis=1)
    np.testing.assert_allclose(h, fd, rtol=1e-5, atol=1e-7)
