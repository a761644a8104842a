"""User programs built on cholesky (Gaussian-process likelihood, Kalman filter, factor edited in
place, complex Hermitian Hessian-vector products), differentiated in the ways users combine
them: compiled reverse and forward called with new values, split mode, Hessians, checkpoints.
cholesky's rules take SciPy's triangular solves on plain matrices and general solves otherwise;
these programs reach both (second order and batched tangents take the general path). Every
derivative is checked against central differences in float64."""
import numpy as np
import pytest

from tape import (Active, BatchDuplicated, Const, Duplicated, Forward, Reverse,
                  ReverseSplitWithPrimal, autodiff, autodiff_thunk, checkpoint, compile,
                  hessian, hvp)

pytest.importorskip("scipy")
from tape.scipy import linalg as tsl  # noqa: E402

RNG = np.random.default_rng(11)


def _fd(f, x, eps=1e-6):
    """Central differences; for complex x, df/dx + i df/dy (docs/complex.md)."""
    x = np.asarray(x)
    g = np.zeros(x.shape, dtype=np.complex128 if x.dtype.kind == "c" else np.float64)
    for i in np.ndindex(x.shape):
        for d in ([1.0, 1j] if x.dtype.kind == "c" else [1.0]):
            e = np.zeros_like(x)
            e[i] = d * eps
            g[i] += d * (f(x + e) - f(x - e)) / (2 * eps)
    return g


# -- Gaussian-process negative log marginal likelihood ---------------------------------------
_X = RNG.standard_normal((6, 2))
_Y = RNG.standard_normal(6)


def _nlml(theta, dtype=np.float64):
    x, y = _X.astype(dtype), _Y.astype(dtype)
    d = x[:, None, :] - x[None, :, :]
    k = (np.exp(2 * theta[1]) * np.exp(-0.5 * np.sum(d ** 2, -1) / np.exp(2 * theta[0]))
         + np.exp(2 * theta[2]) * np.eye(6, dtype=dtype))
    chol = np.linalg.cholesky(k)
    alpha = tsl.solve_triangular(chol, y, lower=True)
    return 0.5 * alpha @ alpha + np.sum(np.log(np.diag(chol))) + 3 * np.log(2 * np.pi)


def _nlml_numpy(theta):
    d = _X[:, None, :] - _X[None, :, :]
    k = (np.exp(2 * theta[1]) * np.exp(-0.5 * np.sum(d ** 2, -1) / np.exp(2 * theta[0]))
         + np.exp(2 * theta[2]) * np.eye(6))
    return 0.5 * _Y @ np.linalg.solve(k, _Y) + 0.5 * np.linalg.slogdet(k)[1] + 3 * np.log(2 * np.pi)


def test_gp_likelihood_in_every_mode():
    theta = np.array([0.3, -0.1, -1.0])
    assert np.isclose(_nlml(theta), _nlml_numpy(theta), rtol=1e-12)
    ref = _fd(_nlml, theta)
    (g,), = autodiff(Reverse, _nlml, Active, Active(theta))
    np.testing.assert_allclose(g, ref, rtol=1e-6, atol=1e-7)
    jvps, = autodiff(Forward, _nlml, BatchDuplicated(theta, tuple(np.eye(3))))
    np.testing.assert_allclose(jvps, ref, rtol=1e-6, atol=1e-7)
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, _nlml, Active, Active)
    tape_, value, _ = fwd(Active(theta))
    assert np.isclose(value, _nlml_numpy(theta), rtol=1e-12)
    (gs,), = rev(Active(theta), 1.0, tape_)
    np.testing.assert_allclose(gs, g, rtol=1e-12, atol=1e-12)
    (gc,), = autodiff(Reverse, checkpoint(_nlml), Active, Active(theta))
    np.testing.assert_allclose(gc, g, rtol=1e-12, atol=1e-12)


def test_gp_likelihood_compiled_with_new_hyperparameters():
    rev = compile(Reverse, _nlml, Active, Active)
    fwd = compile(Forward, _nlml, Duplicated, Duplicated)
    for shift in (0.0, 0.2, -0.3):
        theta = np.array([0.3, -0.1, -1.0]) + shift
        ref = _fd(_nlml, theta)
        (g,), = rev(Active(theta))
        np.testing.assert_allclose(g, ref, rtol=1e-6, atol=1e-7)
        v = np.array([1.0, -2.0, 0.5])
        jvp, = fwd(Duplicated(theta, v))
        np.testing.assert_allclose(jvp, ref @ v, rtol=1e-6, atol=1e-7)


def test_gp_likelihood_hessian_and_hvp_match_differences_of_the_gradient():
    theta = np.array([0.3, -0.1, -1.0])
    grad = lambda t: autodiff(Reverse, _nlml, Active, Active(t))[0][0]   # noqa: E731
    ref = np.array([_fd(lambda t: grad(t)[i], theta) for i in range(3)])
    h = hessian(_nlml, theta)
    np.testing.assert_allclose(h, ref, rtol=1e-6, atol=1e-6)
    v = np.array([1.0, 0.5, -1.0])
    np.testing.assert_allclose(hvp(_nlml, theta, v), ref @ v, rtol=1e-6, atol=1e-6)


def test_gp_likelihood_in_float32_keeps_float32_and_float64_digits():
    theta = np.array([0.2, 0.1, -1.0])
    (g32,), = autodiff(Reverse, lambda t: _nlml(t, np.float32), Active,
                       Active(theta.astype(np.float32)))
    (g64,), = autodiff(Reverse, _nlml, Active, Active(theta))
    assert g32.dtype == np.float32
    np.testing.assert_allclose(g32, g64, rtol=1e-3, atol=1e-3 * np.abs(g64).max())


# -- Kalman filter: cho_factor / cho_solve in a loop ------------------------------------------
_F = np.eye(3) + 0.1 * RNG.standard_normal((3, 3))
_H = RNG.standard_normal((2, 3))
_YS = RNG.standard_normal((4, 2))


def _kalman(q, r):
    big_q = q @ q.T + 0.1 * np.eye(3)
    x, p, ll = np.zeros(3), np.eye(3), 0.0
    for y in _YS:
        x, p = _F @ x, _F @ p @ _F.T + big_q
        s = _H @ p @ _H.T + np.diag(r ** 2)
        c, low = tsl.cho_factor(s, lower=True)
        v = y - _H @ x
        ll = ll - 0.5 * v @ tsl.cho_solve((c, low), v) - np.sum(np.log(np.diag(c)))
        gain = tsl.cho_solve((c, low), _H @ p).T
        x = x + gain @ v
        p = p - gain @ s @ gain.T
    return ll


def test_kalman_filter_compiled_reverse_and_batched_forward():
    q0, r = RNG.standard_normal((3, 3)), np.array([0.5, 0.8])
    rev = compile(Reverse, _kalman, Active, Duplicated, Active)
    fwd = compile(Forward, _kalman, BatchDuplicated, BatchDuplicated, Const)
    for shift in (0.0, 0.1):
        q = q0 + shift
        dq = np.zeros_like(q)
        (_, gr), = rev(Duplicated(q, dq), Active(r))
        ref_q = _fd(lambda a: _kalman(a, r), q)
        np.testing.assert_allclose(dq, ref_q, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(gr, _fd(lambda b: _kalman(q, b), r), rtol=1e-6, atol=1e-7)
        (j1, j2), = fwd(BatchDuplicated(q, (np.ones_like(q), q)), Const(r))
        np.testing.assert_allclose([j1, j2], [ref_q.sum(), np.sum(ref_q * q)], rtol=1e-6,
                                   atol=1e-7)


# -- the factor edited in place after the call --------------------------------------------------
_W = RNG.standard_normal((4, 4))
_A = RNG.standard_normal((4, 4))
_S = _A @ _A.T + 4 * np.eye(4)


def _scaled_in_place(a):
    low = np.linalg.cholesky(a)
    s = np.sum(low * _W)
    low *= 2.0                      # overwrites the array cholesky returned
    return s + np.sum(low ** 2)


def _row_zeroed(a):
    up = np.linalg.cholesky(a, upper=True)
    s = np.sum(up * _W)
    up[0] = 0.0
    return s + np.sum(up ** 2 * _W)


@pytest.mark.parametrize("f", [_scaled_in_place, _row_zeroed])
def test_editing_the_returned_factor_keeps_the_derivative(f):
    ref = _fd(f, _S)
    (g,), = autodiff(Reverse, f, Active, Active(_S.copy()))
    np.testing.assert_allclose(g, ref, rtol=1e-6, atol=1e-7)
    t, = autodiff(Forward, f, BatchDuplicated(_S.copy(), tuple(np.eye(16).reshape(16, 4, 4))))
    np.testing.assert_allclose(np.reshape(t, (4, 4)), ref, rtol=1e-6, atol=1e-7)
    rev = compile(Reverse, f, Active, Active)
    for shift in (0.0, 1.0):
        (gc,), = rev(Active(_S + shift * np.eye(4)))
        np.testing.assert_allclose(gc, _fd(f, _S + shift * np.eye(4)), rtol=1e-6, atol=1e-7)


# -- complex Hermitian: hvp through cholesky(upper=True) ----------------------------------------
def test_hvp_of_a_complex_hermitian_log_det_matches_differences_of_the_gradient():
    c = RNG.standard_normal((3, 3)) + 1j * RNG.standard_normal((3, 3))
    h = c @ c.conj().T + 3 * np.eye(3)

    def f(a):
        return np.sum(np.log(np.real(np.diag(np.linalg.cholesky(a, upper=True)))))

    grad = lambda a: autodiff(Reverse, f, Active, Active(a))[0][0]   # noqa: E731
    np.testing.assert_allclose(grad(h), _fd(f, h), rtol=1e-6, atol=1e-8)
    v = RNG.standard_normal((3, 3)) + 1j * RNG.standard_normal((3, 3))
    ref = (grad(h + 1e-6 * v) - grad(h - 1e-6 * v)) / 2e-6
    np.testing.assert_allclose(hvp(f, h, v), ref, rtol=1e-5, atol=1e-8)
