"""Numerical programs written the way people write them, fourth round: hand-written iterative
solvers whose loops stop on the values (conjugate gradients, Gauss-Seidel sweeps written entry
by entry, a backtracking line search inside a descent loop), dynamic-programming tables filled
one entry at a time (DTW with Python's min, soft-DTW, an HMM forward pass), segment statistics
through np.unique(return_inverse=True) and np.add.at, a function that normalises its argument
in place, and Jacobians of in-place programs in every mode and chunk size.

Each program runs in float64 against plain NumPy for the primal and central finite differences
for the derivative: eager Reverse and Forward (which must also agree with each other), and,
where the program is smooth, the Hessian (forward-over-reverse) against differences of the
reverse gradient and `tape.hvp` against the Hessian. The last two tests check that errors name
what the user wrote (a random draw with a traced parameter, `acc += value` on a plain array).
"""
from __future__ import annotations

import numpy as np
import pytest

import tape
from tape import Active, Duplicated, Forward, ForwardWithPrimal, Reverse, ReverseWithPrimal

from numeric_checks import close, fd_gradient


def _every_mode(f, x, tol=1e-6, second_order=True):
    want = f(x.copy())
    (g,), v = tape.autodiff(ReverseWithPrimal, f, Active, Active(x.copy()))
    np.testing.assert_allclose(v, want, rtol=1e-15, atol=0)
    fd = fd_gradient(f, x)
    close(g, fd, tol)
    direction = np.cos(np.arange(x.size) + 0.5)
    t, v = tape.autodiff(ForwardWithPrimal, f, Duplicated(x.copy(), direction.copy()))
    np.testing.assert_allclose(v, want, rtol=1e-15, atol=0)
    close(t, fd @ direction, tol)
    np.testing.assert_allclose(t, g @ direction, rtol=1e-12, atol=1e-12)
    if not second_order:
        return
    H = tape.hessian(f, x.copy())
    Hfd = np.column_stack([
        (tape.gradient(Reverse, f, x + e)[0] - tape.gradient(Reverse, f, x - e)[0]) / (2 * h)
        for e, h in ((np.eye(x.size)[i] * 1e-5 * max(1.0, abs(x[i])),
                      1e-5 * max(1.0, abs(x[i]))) for i in range(x.size))])
    close(H, Hfd, 1e-5)
    np.testing.assert_allclose(tape.hvp(f, x.copy(), direction.copy()), H @ direction,
                               rtol=1e-10, atol=1e-10)


_rng = np.random.default_rng(7)
_M = _rng.standard_normal((4, 4))
_SPD = _M @ _M.T + 4 * np.eye(4)


def conjugate_gradients(x):
    """Solve (SPD + diag(x[:4]**2)) s = x[4:] by CG until the residual is tiny; the number of
    iterations follows the values, and s, r are updated in place."""
    A = _SPD + np.diag(x[:4] ** 2)
    b = x[4:]
    s = np.zeros_like(b)
    r = b - A @ s
    p = r.copy()
    rs = r @ r
    while np.sqrt(rs) > 1e-13:
        Ap = A @ p
        alpha = rs / (p @ Ap)
        s += alpha * p
        r -= alpha * Ap
        rs_new = r @ r
        p = r + (rs_new / rs) * p
        rs = rs_new
    return s @ b


def gauss_seidel(x):
    """Sweeps written entry by entry: each s[i] reads the entries written before it."""
    A = _SPD + np.diag(x[:4])
    b = x[4:]
    s = np.zeros_like(b)
    for _ in range(30):
        for i in range(4):
            s[i] = (b[i] - A[i, :i] @ s[:i] - A[i, i + 1:] @ s[i + 1:]) / A[i, i]
    return np.sum(s ** 2)


def descent_with_armijo(x):
    """Gradient descent whose step halves until the Armijo condition holds: a while loop
    whose trip count follows the values, nested in a for loop."""
    def f(z):
        return np.sum((z - x[:3]) ** 2 * x[3:] ** 2) + np.sum(z ** 4)

    def grad(z):
        return 2 * (z - x[:3]) * x[3:] ** 2 + 4 * z ** 3
    z = np.zeros(3)
    for _ in range(20):
        d = -grad(z)
        t = 1.0
        while f(z + t * d) > f(z) - 1e-4 * t * (d @ d):
            t *= 0.5
        z = z + t * d
    return f(z)


@pytest.mark.parametrize("f, n, tol", [(conjugate_gradients, 8, 1e-6),
                                       (gauss_seidel, 8, 1e-6),
                                       (descent_with_armijo, 6, 1e-5)])
def test_iterative_solvers_that_stop_on_the_values(f, n, tol):
    _every_mode(f, np.random.default_rng(7 + n).standard_normal(n), tol)


def dtw(x):
    """Dynamic time warping of x[:4] against x[4:]; Python's min of three traced 0-d entries."""
    a, b = x[:4], x[4:]
    C = (a[:, None] - b[None, :]) ** 2
    D = np.full((5, 5), np.inf) + 0.0 * x[0]
    D[0, 0] = 0.0
    for i in range(1, 5):
        for j in range(1, 5):
            D[i, j] = C[i - 1, j - 1] + min(D[i - 1, j], D[i, j - 1], D[i - 1, j - 1])
    return D[4, 4]


def soft_dtw(x, gamma=0.5):
    a, b = x[:4], x[4:]
    C = (a[:, None] - b[None, :]) ** 2
    R = np.full((5, 5), np.inf) + 0 * x[0]
    R[0, 0] = 0.0
    for i in range(1, 5):
        for j in range(1, 5):
            r = -np.array([R[i - 1, j], R[i, j - 1], R[i - 1, j - 1]]) / gamma
            m = np.max(r)
            R[i, j] = C[i - 1, j - 1] - gamma * (m + np.log(np.sum(np.exp(r - m))))
    return R[4, 4]


def hmm_log_likelihood(x):
    """Forward algorithm of a two-state Gaussian HMM, log-sum-exp written by hand."""
    T = np.exp(x[:4].reshape(2, 2))
    T = T / T.sum(axis=1, keepdims=True)
    mu = x[4:6]
    obs = np.array([0.1, 1.5, -0.3, 0.8, 2.0])
    la = np.log(np.array([0.5, 0.5])) - 0.5 * (obs[0] - mu) ** 2
    for o in obs[1:]:
        m = la.max()
        la = m + np.log(np.exp(la - m) @ T) - 0.5 * (o - mu) ** 2
    m = la.max()
    return m + np.log(np.sum(np.exp(la - m)))


@pytest.mark.parametrize("f, n", [(dtw, 8), (soft_dtw, 8), (hmm_log_likelihood, 6)])
def test_dynamic_programming_tables_filled_entry_by_entry(f, n):
    _every_mode(f, np.random.default_rng(9).standard_normal(n))


def segment_statistics(x):
    """Per-key means through np.unique(return_inverse, return_counts) and np.add.at into a
    zeros_like buffer; a rank lookup through np.searchsorted with a sorter."""
    keys = np.array([0.5, 0.1, 0.5, 0.9, 0.1, 0.5])
    u, inv, cnt = np.unique(keys, return_inverse=True, return_counts=True)
    s = np.zeros_like(x[:u.size])
    np.add.at(s, inv, x)
    m = s / cnt
    order = np.argsort(x)
    i = np.searchsorted(x, np.array([0.0, 1.0]), sorter=order)
    return np.sum(m ** 2 * u) + np.sum((x - m[inv]) ** 2) + np.sum(x[order][i] ** 2)


def test_segment_statistics_from_unique_inverse_and_sorted_lookup():
    _every_mode(segment_statistics, np.array([1.2, -0.3, 2.5, 0.7, -1.1, 0.4]))


def normalise_in_place(x):
    x -= np.mean(x)
    x /= np.std(x)
    return np.sum(x ** 3 * np.arange(6))


def test_a_function_that_normalises_its_argument_in_place():
    x = np.array([1.2, -0.3, 2.5, 0.7, -1.1, 0.4])
    _every_mode(normalise_in_place, x)
    # the write reaches the caller's array, as calling the function does
    mine, theirs = x.copy(), x.copy()
    normalise_in_place(theirs)
    tape.autodiff(Reverse, normalise_in_place, Active, Active(mine))
    np.testing.assert_allclose(mine, theirs, rtol=1e-15)


def scatter_in_a_loop(x):
    y = np.zeros_like(x)
    for i in range(6):
        y[(i * 2) % 6] += x[i] * y[(i + 1) % 6] + x[i] ** 2
    return y


def heat_steps_in_place(x):
    u = x.copy()
    for _ in range(3):
        u[1:-1] = u[1:-1] + 0.1 * (u[2:] - 2 * u[1:-1] + u[:-2])
        u[0] = u[-1] ** 2
    return u


def newton_square_roots(x):
    y = np.ones_like(x) * 2
    dx = np.ones_like(x)
    while np.max(np.abs(dx)) > 1e-12:
        dx = (y * y - np.abs(x) - 1) / (2 * y)
        y = y - dx
    return y


def repeated_index_updates(x):
    y = x.copy()
    y[[0, 0, 3]] += x[[1, 2, 4]]
    y[y > 1] *= 2
    out = np.zeros_like(x[:3])
    np.add.at(out, np.array([0, 2, 2, 1, 0, 2]), x ** 2)
    return np.concatenate([y, out * x[:3]])


@pytest.mark.parametrize("f", [scatter_in_a_loop, heat_steps_in_place, newton_square_roots,
                               repeated_index_updates])
def test_jacobians_of_in_place_programs_in_every_mode_and_chunk(f):
    x = np.array([1.2, -0.3, 2.5, 0.7, -1.1, 0.4])
    y = f(x.copy())
    fd = np.column_stack([(f(x + e) - f(x - e)) / 2e-6 for e in np.eye(6) * 1e-6])
    for mode in (Reverse, Forward):
        for chunk in (None, 1, 4):
            J = tape.jacobian(mode, f, x.copy(), chunk=chunk)[0]
            assert J.shape == y.shape + x.shape
            close(J, fd, 1e-6)


def test_generator_normal_with_a_traced_mean_is_differentiated_or_named():
    def f(p):
        rng = np.random.default_rng(0)
        return np.mean(rng.normal(p[0], np.exp(p[1]), size=50) ** 2)

    p = np.array([0.3, -0.2])
    try:
        g = tape.gradient(Reverse, f, p.copy())[0]
    except Exception as e:   # a refusal must say which call refused, and the way out
        assert "rng.normal(p[0]" in str(e) and "rng.standard_normal" in str(e), str(e)
        return
    close(g, fd_gradient(f, p))   # NumPy draws loc + scale * standard_normal


def test_a_plain_accumulator_updated_with_plus_equals_names_the_operator():
    def f(x):
        acc = np.array(0.0)
        for v in x:
            acc += v ** 2
        return acc

    with pytest.raises(tape.NonDifferentiableError, match=r"\+=|in place|in-place"):
        tape.gradient(Reverse, f, np.array([1.0, 2.0]))
