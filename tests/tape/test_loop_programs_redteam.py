"""Loop-heavy scientific programs written in plain NumPy: explicit time stepping into a
preallocated state buffer row by row, stencils on slices, SOR sweeps element by element,
dynamic programming with soft minima and maxima, prefix scans as loops, pairwise particle
forces with np.fill_diagonal, finite volumes with np.roll / np.diff / np.cumsum, interpolation
with np.searchsorted / np.interp, Newton loops that stop on the values, Runge-Kutta with a
tuple of stages, matrix-free conjugate gradients, Horner with `x[i] += ...`, `for row in M:`
and `np.stack(list(M))`.

Each program in float64: the primal against plain NumPy, the reverse gradient (into a
Duplicated shadow) against central differences, forward mode against reverse, and a compiled
function against eager on two inputs (where a traced decision changes between them).
"""
from __future__ import annotations

import numpy as np
import pytest

import tape
from tape import Active, Duplicated, Forward, Reverse, ReverseWithPrimal

from numeric_checks import close, fd_gradient


def _check(f, x0, x1, tol=1e-6):
    want = f(x0.copy())
    dx = np.zeros_like(x0)
    _, value = tape.autodiff(ReverseWithPrimal, f, Active, Duplicated(x0.copy(), dx))
    np.testing.assert_allclose(value, want, rtol=1e-12, atol=1e-12)
    close(dx, fd_gradient(f, x0.copy()), tol)
    direction = np.cos(np.arange(x0.size) + 0.5).reshape(x0.shape)
    (t,) = tape.autodiff(Forward, f, Duplicated(x0.copy(), direction.copy()))
    np.testing.assert_allclose(t, np.sum(dx * direction), rtol=1e-9, atol=1e-9)
    compiled = tape.compile(ReverseWithPrimal, f, Active, Duplicated)
    for x in (x0, x1, x0):
        d_eager = np.zeros_like(x)
        _, v_eager = tape.autodiff(ReverseWithPrimal, f, Active, Duplicated(x.copy(), d_eager))
        d_comp = np.zeros_like(x)
        _, v_comp = compiled(Duplicated(x.copy(), d_comp))
        np.testing.assert_allclose(v_comp, v_eager, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(d_comp, d_eager, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(v_comp, f(x.copy()), rtol=1e-12, atol=1e-12)
    return compiled


# -- explicit time stepping into a preallocated buffer ----------------------------------------
def euler_history(x):
    """U[t+1] = U[t] + dt * f(U[t]) into a buffer built with np.zeros_like(x, shape=...)."""
    T, n, dt = 12, x.size, 0.05
    U = np.zeros_like(x, shape=(T + 1, n))
    U[0] = x
    for t in range(T):
        U[t + 1] = U[t] + dt * (np.roll(U[t], 1) - U[t] ** 3)
    return np.sum(U[-1] ** 2) + np.sum(U[:, 0] * np.arange(T + 1))


def euler_tiled_history(x):
    """The buffer starts as copies of the initial state (np.tile), rows overwritten later."""
    T, dt = 10, 0.05
    U = np.tile(x, (T + 1, 1))
    for t in range(T):
        U[t + 1, :] = U[t, :] + dt * np.sin(U[t, ::-1])
    return np.sum(U * U[::-1])


def heat_stencil_slices(x):
    """u[1:-1] = u[1:-1] + r * (u[2:] - 2 u[1:-1] + u[:-2]) with a nonlinear source, in place."""
    u = x.copy()
    r = 0.3
    for _ in range(15):
        u[1:-1] = u[1:-1] + r * (u[2:] - 2 * u[1:-1] + u[:-2]) + 0.01 * np.tanh(u[1:-1])
        u[0] = u[1]            # Neumann boundary
        u[-1] = 0.5 * u[-2]
    return np.sum(u ** 2 * np.linspace(0.0, 1.0, u.size))


def heat_stencil_diff_iadd(x):
    """u[1:-1] += r * np.diff(u, 2): the right side reads the slice being updated."""
    u = x.copy()
    for _ in range(10):
        u[1:-1] += 0.25 * np.diff(u, 2)
        u *= 1.0 - 0.01 * u ** 2
    return np.sum(np.exp(-u) * u)


def wave_2d_buffer(x):
    """Two-level leapfrog on a 2D grid with a 5-point stencil on slices."""
    n = 4
    u0 = x.reshape(n, n)
    prev = u0.copy()
    cur = u0.copy()
    c2 = 0.2
    for _ in range(6):
        nxt = np.zeros_like(cur)
        nxt[1:-1, 1:-1] = (2 * cur[1:-1, 1:-1] - prev[1:-1, 1:-1]
                           + c2 * (cur[2:, 1:-1] + cur[:-2, 1:-1] + cur[1:-1, 2:]
                                   + cur[1:-1, :-2] - 4 * cur[1:-1, 1:-1]))
        prev, cur = cur, nxt
    return np.sum(cur ** 2) + np.sum(prev * cur)


# -- SOR sweeps -------------------------------------------------------------------------------
def sor_poisson_1d(x):
    """SOR for -u'' = f on a grid, element by element: u[i] reads u[i-1] written this sweep."""
    n = x.size + 2
    h2 = (1.0 / (n - 1)) ** 2
    u = np.zeros_like(x, shape=(n,))
    w = 1.5
    for _ in range(25):
        for i in range(1, n - 1):
            gs = 0.5 * (u[i - 1] + u[i + 1] + h2 * x[i - 1] ** 2)
            u[i] = (1 - w) * u[i] + w * gs
    return np.sum(u * np.sin(np.arange(n)))


def sor_2d_in_place(x):
    """A 2D Gauss-Seidel/SOR sweep u[i, j] = ... on the argument's copy, Dirichlet edges."""
    u = x.reshape(4, 4).copy()
    for _ in range(8):
        for i in range(1, 3):
            for j in range(1, 3):
                u[i, j] += 1.2 * (0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])
                                  - u[i, j])
    return np.sum(u[1:-1, 1:-1] ** 3)


# -- dynamic programming ----------------------------------------------------------------------
def _softmin(values, gamma):
    z = -np.array(values) / gamma
    m = np.max(z)
    return -gamma * (m + np.log(np.sum(np.exp(z - m))))


def soft_edit_distance(x):
    """Edit distance with a soft minimum (logsumexp) over insert, delete and substitute."""
    a, b = x[:4], x[4:]
    g = 0.3
    D = np.zeros_like(x, shape=(a.size + 1, b.size + 1))
    D[:, 0] = np.arange(a.size + 1)
    D[0, :] = np.arange(b.size + 1)
    for i in range(1, a.size + 1):
        for j in range(1, b.size + 1):
            D[i, j] = _softmin([D[i - 1, j] + 1.0, D[i, j - 1] + 1.0,
                                D[i - 1, j - 1] + (a[i - 1] - b[j - 1]) ** 2], g)
    return D[-1, -1]


_LOGA = np.log(np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4]]))
_OBS = np.array([0.3, -1.0, 0.8, 1.5, -0.2])


def viterbi_max(x):
    """Viterbi on a Gaussian-emission HMM with means x: max over predecessors, a path score."""
    means = x
    logB = -0.5 * (_OBS[:, None] - means[None, :]) ** 2
    delta = logB[0] + np.log(1.0 / 3)
    back = []
    for t in range(1, _OBS.size):
        scores = delta[:, None] + _LOGA
        back.append(np.argmax(scores, axis=0))
        delta = np.max(scores, axis=0) + logB[t]
    state = int(np.argmax(delta))
    path = [state]
    for bp in reversed(back):
        state = int(bp[state])
        path.append(state)
    return np.max(delta) + 0.1 * np.sum(means[np.array(path)])


def dtw_logaddexp(x):
    """Soft-DTW with the soft minimum written with np.logaddexp in a rolling row buffer."""
    a, b = x[:5], x[5:]
    g = 0.5
    prev = np.full_like(x, np.inf, shape=(b.size + 1,))
    prev[0] = 0.0
    for i in range(a.size):
        cur = np.full_like(x, np.inf, shape=(b.size + 1,))
        for j in range(b.size):
            c = (a[i] - b[j]) ** 2
            s = np.logaddexp(np.logaddexp(-prev[j] / g, -prev[j + 1] / g), -cur[j] / g)
            cur[j + 1] = c - g * s
        prev = cur
    return prev[-1]


# -- scans written as loops -------------------------------------------------------------------
def prefix_scans(x):
    """Running sum, running product and an exponential moving average, one entry at a time."""
    s = np.empty_like(x)
    p = np.empty_like(x)
    m = np.empty_like(x)
    s[0] = p[0] = m[0] = x[0]
    for i in range(1, x.size):
        s[i] = s[i - 1] + x[i]
        p[i] = p[i - 1] * (1.0 + 0.1 * x[i])
        m[i] = 0.8 * m[i - 1] + 0.2 * x[i]
    return np.sum(s * p) + np.sum(m ** 2) + np.sum((s - np.cumsum(x)) ** 2)


def running_max_python(x):
    """m[i] = max(m[i-1], x[i]) with Python's max: the branch follows the values."""
    m = np.empty_like(x)
    m[0] = x[0]
    for i in range(1, x.size):
        m[i] = max(m[i - 1], x[i])
    return np.sum(m * np.arange(1, x.size + 1))


# -- particles --------------------------------------------------------------------------------
def particles_verlet(x):
    """Velocity Verlet for soft-core pairwise forces via broadcasting and np.fill_diagonal."""
    pos = x.reshape(4, 2).copy()
    vel = np.zeros_like(pos)
    dt = 0.01

    def forces(q):
        d = q[:, None, :] - q[None, :, :]
        r2 = np.sum(d ** 2, axis=-1) + 0.1
        np.fill_diagonal(r2, 1.0)
        inv = r2 ** -1.5
        np.fill_diagonal(inv, 0.0)
        return np.sum(d * inv[:, :, None], axis=1)

    f = forces(pos)
    for _ in range(5):
        vel += 0.5 * dt * f
        pos += dt * vel
        f = forces(pos)
        vel += 0.5 * dt * f
    d = pos[:, None, :] - pos[None, :, :]
    r = np.sqrt(np.sum(d ** 2, axis=-1) + 0.1)
    np.fill_diagonal(r, np.inf)
    return np.sum(vel ** 2) + np.sum(1.0 / r)


# -- finite volumes ---------------------------------------------------------------------------
def _minmod(a, b):
    return np.where(a * b > 0, np.sign(a) * np.minimum(np.abs(a), np.abs(b)), 0.0)


def muscl_burgers(x):
    """Periodic MUSCL with a minmod limiter and Rusanov flux via np.roll and np.diff."""
    u = x.copy()
    dt_dx = 0.2
    for _ in range(4):
        slope = _minmod(u - np.roll(u, 1), np.roll(u, -1) - u)
        uL = u + 0.5 * slope
        uR = np.roll(u - 0.5 * slope, -1)
        a = np.maximum(np.abs(uL), np.abs(uR))
        flux = 0.25 * (uL ** 2 + uR ** 2) - 0.5 * a * (uR - uL)
        u = u - dt_dx * np.diff(np.concatenate([flux[-1:], flux]))
    mass = np.cumsum(u)
    return np.sum(u ** 3) + mass[-1] ** 2 + np.sum(mass * np.arange(u.size))


# -- interpolation ----------------------------------------------------------------------------
_U = np.array([0.05, 0.3, 0.55, 0.8, 0.97])


def inverse_cdf(x):
    """Sample by inverting a CDF built from softmax weights: searchsorted, then np.interp."""
    w = np.exp(x - np.max(x))
    cdf = np.concatenate([[0.0], np.cumsum(w / np.sum(w))])
    grid = np.linspace(0.0, 1.0, cdf.size) + 0.1 * np.concatenate([[0.0], x])
    k = np.searchsorted(cdf, _U)
    lo = cdf[k - 1]
    frac = (_U - lo) / (cdf[k] - lo)
    manual = grid[k - 1] + frac * (grid[k] - grid[k - 1])
    return np.sum(manual ** 2) + np.sum(np.interp(_U, cdf, grid) * _U)


# -- Newton iterations ------------------------------------------------------------------------
def kepler_newton(x):
    """Solve E - e sin E = M for each M by Newton while max |r| > tol."""
    e = 0.3 + 0.2 * np.tanh(x[0])
    M = x[1:]
    E = M.copy()
    r = E - e * np.sin(E) - M
    while np.max(np.abs(r)) > 1e-13:
        E = E - r / (1 - e * np.cos(E))
        r = E - e * np.sin(E) - M
    return np.sum(np.cos(E) * M)


def scalar_newton_sqrt(x):
    """A scalar `while np.abs(r) > tol` per entry, written into a result buffer."""
    out = np.zeros_like(x)
    for i in range(x.size):
        a = x[i] ** 2 + 1.0
        y = a
        r = y * y - a
        while np.abs(r) > 1e-12 * a:
            y = y - r / (2 * y)
            r = y * y - a
        out[i] = y
    return np.sum(out * np.arange(1, x.size + 1))


# -- Runge-Kutta with a tuple of stages -------------------------------------------------------
_A_RK = ((), (0.5,), (0.0, 0.5), (0.0, 0.0, 1.0))
_B_RK = (1 / 6, 1 / 3, 1 / 3, 1 / 6)


def rk_tableau(x):
    """Classical RK4 from its Butcher tableau; the stages are a growing tuple and the
    combinations are Python sum() over generators (an int 0 start)."""
    k0 = x[0]
    y = x[1:].copy()

    def rhs(v):
        return np.array([v[1], -k0 * np.sin(v[0])]) if v.size == 2 else -k0 * v

    h = 0.1
    for _ in range(8):
        ks = ()
        for row in _A_RK:
            yi = y + h * sum(a * kj for a, kj in zip(row, ks))
            ks = ks + (rhs(yi),)
        y = y + h * sum(b * k for b, k in zip(_B_RK, ks))
    return y[0] ** 2 + np.sin(y[1])


# -- matrix-free conjugate gradients ----------------------------------------------------------
def cg_matrix_free(x):
    """CG for (-Laplacian + diag(1 + x^2)) s = b with the operator applied by slicing."""
    n = x.size
    diag = 1.0 + x ** 2
    b = np.cos(np.arange(n)) + 0.5 * x

    def apply(v):
        out = (2.0 + diag) * v
        out[1:] -= v[:-1]
        out[:-1] -= v[1:]
        return out

    s = np.zeros_like(b)
    r = b - apply(s)
    p = r.copy()
    rs = r @ r
    it = 0
    while rs > 1e-26 and it < 50:
        Ap = apply(p)
        alpha = rs / (p @ Ap)
        s = s + alpha * p
        r = r - alpha * Ap
        rs_new = r @ r
        p = r + (rs_new / rs) * p
        rs = rs_new
        it += 1
    return s @ b


# -- Horner and row iteration -----------------------------------------------------------------
_COEF = np.array([0.5, -1.0, 0.25, 2.0, -0.3])


def horner_entrywise(x):
    """Horner evaluated entry by entry with y[i] = y[i] * x[i] + c, then y[i] += ..."""
    y = np.zeros_like(x)
    for i in range(x.size):
        for c in _COEF:
            y[i] = y[i] * x[i] + c
        y[i] += 0.1 * x[i] ** 2
    return np.sum(y ** 2)


def rows_iteration(x):
    """`for row in M:`, zip(M, M[1:]) and np.stack(list(M))."""
    M = x.reshape(3, 4)
    acc = 0.0
    for row in M:
        acc = acc + np.tanh(row) @ row
    for r0, r1 in zip(M, M[1:]):
        acc = acc + np.sum(r0 * r1)
    S = np.stack(list(M))
    T = np.stack([row[::-1] for row in M], axis=1)
    return acc + np.sum(S ** 2 * M) + np.sum(T[0] * T[-1])


def rows_updated_through_iteration(x):
    """`for row in U: row *= ...` writes through the row views into U."""
    U = x.reshape(3, 4).copy()
    for row in U:
        row *= 1.5
        row[1:] += row[:-1] ** 2
    return np.sum(U ** 2 * np.arange(12).reshape(3, 4))


def column_history(x):
    """The state history stored column by column, U[:, t + 1] = ..."""
    T = 6
    U = np.zeros_like(x, shape=(x.size, T + 1))
    U[:, 0] = x
    for t in range(T):
        U[:, t + 1] = U[:, t] + 0.1 * np.sin(U[::-1, t])
    return np.sum(U[:, -1] ** 2) + np.sum(U * np.arange(T + 1))


def upwind_diff_prepend(x):
    """Periodic conservative update with the ghost flux given by np.diff(prepend=...)."""
    u = x.copy()
    for _ in range(4):
        flux = 0.5 * u ** 2
        u = u - 0.2 * np.diff(flux, prepend=flux[-1:])
    return np.sum(u ** 3) + np.sum(np.cumsum(u)[::2])


_R = np.random.default_rng(3)
PROGRAMS = {
    "euler_history": (euler_history, _R.normal(size=5), None),
    "euler_tiled_history": (euler_tiled_history, _R.normal(size=4), None),
    "heat_stencil_slices": (heat_stencil_slices, _R.normal(size=7), None),
    "heat_stencil_diff_iadd": (heat_stencil_diff_iadd, _R.normal(size=6), None),
    "wave_2d_buffer": (wave_2d_buffer, _R.normal(size=16), None),
    "sor_poisson_1d": (sor_poisson_1d, _R.normal(size=5), None),
    "sor_2d_in_place": (sor_2d_in_place, _R.normal(size=16), None),
    "soft_edit_distance": (soft_edit_distance, _R.normal(size=7), None),
    "viterbi_max": (viterbi_max, np.array([-1.0, 0.2, 1.1]), np.array([0.0, 1.5, -1.0])),
    "dtw_logaddexp": (dtw_logaddexp, _R.normal(size=9), None),
    "prefix_scans": (prefix_scans, _R.normal(size=6), None),
    "running_max_python": (running_max_python, np.array([0.3, -0.2, 0.9, 0.1, 1.4, 0.5]),
                           np.array([1.5, 0.2, -0.3, 0.4, 0.1, 2.0])),
    "particles_verlet": (particles_verlet, np.array([0., 0., 1., 0.1, 0.2, 1.1, 1.3, 0.9]),
                         None),
    "muscl_burgers": (muscl_burgers, _R.normal(size=8), None),
    "inverse_cdf": (inverse_cdf, _R.normal(size=5), None),
    "kepler_newton": (kepler_newton, np.array([0.2, 0.5, 1.5, 2.5]),
                      np.array([-2.0, 0.5, 1.5, 2.5])),
    "scalar_newton_sqrt": (scalar_newton_sqrt, _R.normal(size=4), None),
    "rk_tableau": (rk_tableau, np.array([1.3, 0.4, -0.2]), np.array([0.7, 1.0, 0.5])),
    "cg_matrix_free": (cg_matrix_free, _R.normal(size=6), None),
    "horner_entrywise": (horner_entrywise, _R.normal(size=4), None),
    "rows_iteration": (rows_iteration, _R.normal(size=12), None),
    "rows_updated_through_iteration": (rows_updated_through_iteration,
                                       np.linspace(-1.0, 1.0, 12), None),
    "column_history": (column_history, _R.normal(size=4), None),
    "upwind_diff_prepend": (upwind_diff_prepend, 0.5 + 0.3 * _R.random(6), None),
}
# A second input where none is given: scaled and shifted.
PROGRAMS = {k: (f, x0, x0 * 1.3 + 0.1 if x1 is None else x1)
            for k, (f, x0, x1) in PROGRAMS.items()}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_in_every_mode(name):
    f, x0, x1 = PROGRAMS[name]
    _check(f, x0, x1)


# -- buffers: histories that alias, double buffering, out=, overlapping in-place updates,
# -- adaptive steps and events that branch on the state ----------------------------------


def hist_alias(x):
    """Every entry of the history is the same array, updated in place (NumPy's aliasing)."""
    u = x.copy()
    hist = []
    for _ in range(3):
        u += 0.1 * np.sin(u)
        hist.append(u)
    return np.sum(np.stack(hist) ** 2 * np.arange(3)[:, None])


def double_buffer(x):
    """Two buffers swapped every step; the new one is overwritten on slices."""
    u = x.copy()
    un = np.zeros_like(x)
    for _ in range(5):
        un[1:-1] = u[1:-1] + 0.3 * (u[2:] - 2 * u[1:-1] + u[:-2]) - 0.05 * u[1:-1] ** 3
        un[0] = u[0]
        un[-1] = u[-1] * 0.9
        u, un = un, u
    return np.sum(u ** 2 * np.arange(1, u.size + 1)) + np.sum(un)


def out_rows(x):
    T = 5
    U = np.zeros_like(x, shape=(T + 1, x.size))
    U[0] = x
    for t in range(T):
        np.add(U[t], 0.1 * np.tanh(U[t][::-1]), out=U[t + 1])
        np.multiply(U[t + 1], 1.01, out=U[t + 1])
    return np.sum(U ** 2 * np.arange(T + 1)[:, None])


def copyto_rows(x):
    T = 4
    U = np.zeros_like(x, shape=(T + 1, x.size))
    U[0] = x
    for t in range(T):
        np.copyto(U[t + 1], U[t] - 0.1 * U[t] ** 3)
    return np.sum(U[-1] * U[1])


def chained_row_write(x):
    T = 4
    U = np.zeros_like(x, shape=(T + 1, x.size))
    U[0][:] = x
    for t in range(T):
        U[t + 1][1:-1] = U[t][1:-1] + 0.2 * (U[t][2:] - 2 * U[t][1:-1] + U[t][:-2])
        row = U[t + 1]
        row[0] = row[1] ** 2
        row[-1] = U[t][-1]
    return np.sum(U ** 2)


def cfl_adaptive(x):
    """A CFL step size from the state: the number of steps follows the values."""
    u = x.copy()
    t, T = 0.0, 0.5
    while t < T:
        dt = min(0.2, 0.4 / np.max(np.abs(u)))
        dt = min(dt, T - t)
        u = u - dt * u * (u - np.roll(u, 1))
        t = t + dt
    return np.sum(u ** 2) + t


def bounce(x):
    """A bouncing ball: the state is written in place, and reflected where it crosses 0."""
    y = x.copy()
    dt, e = 0.05, 0.8
    for _ in range(30):
        y[1] -= 9.81 * dt
        y[0] += dt * y[1]
        if y[0] < 0:
            y[0] = -y[0]
            y[1] = -e * y[1]
    return y[0] + 0.1 * y[1] ** 2


def positivity_mask(x):
    u = x.copy()
    for _ in range(4):
        u = u - 0.3 * (u - np.roll(u, 1)) - 0.2
        u[u < 0] = 0.0
        u[u > 1] = 1.0 + 0.1 * u[u > 1]
    return np.sum(u ** 2 * np.arange(u.size))


def overlap_iadd(x):
    """Overlapping in-place updates: NumPy reads the old values of the overlap."""
    u = x.copy()
    for _ in range(3):
        u[1:] += 0.5 * u[:-1]
        u[::-1] += 0.1 * u
        u[:-1] = u[1:] * 1.1
    return np.sum(u ** 2 * np.arange(1, u.size + 1))


def ufunc_inplace_overlap(x):
    u = x.copy()
    np.add(u[:-1], u[1:], out=u[1:])
    np.multiply(u[::-1], u, out=u)
    return np.sum(u ** 2 * np.arange(1, u.size + 1))


def fill_diag_view(x):
    q = x.reshape(4, 2)
    d = q[:, None] - q[None]
    r2 = np.sum(d ** 2, -1)
    np.fill_diagonal(r2[:3, :3], 1.0)
    np.fill_diagonal(r2[::-1], 2.0)
    return np.sum(np.log(r2 + 0.1) * np.arange(16).reshape(4, 4))


def searchsorted_loop_interp(x):
    xp = np.cumsum(np.exp(x[:4])); fp = np.cos(x[4:])
    q = np.linspace(0.5, 5.0, 6)
    out = np.zeros_like(x, shape=q.shape)
    for j, qq in enumerate(q):
        k = np.searchsorted(xp, qq)
        if k == 0:
            out[j] = fp[0]
        elif k == xp.size:
            out[j] = fp[-1]
        else:
            w = (qq - xp[k - 1]) / (xp[k] - xp[k - 1])
            out[j] = (1 - w) * fp[k - 1] + w * fp[k]
    return np.sum(out ** 2) + np.sum(np.abs(out - np.interp(q, xp, fp)))


_X4 = np.array([0.3, -0.7, 1.1, 0.4])
_Y4 = np.array([0.5, 0.1, -1.0, 0.2])
BUFFER_PROGRAMS = {
    "hist_alias": (hist_alias, np.array([0.3, -0.7, 1.1]), np.array([0.5, 0.1, -1.0])),
    "double_buffer": (double_buffer, np.linspace(-1, 1.2, 6), np.linspace(0.5, -1, 6)),
    "out_rows": (out_rows, np.array([0.3, -0.7, 1.1]), np.array([0.5, 0.1, -1.0])),
    "copyto_rows": (copyto_rows, np.array([0.3, -0.7, 1.1]), np.array([0.5, 0.1, -1.0])),
    "chained_row_write": (chained_row_write, np.linspace(-1, 1.2, 5), np.linspace(0.5, -1, 5)),
    "cfl_adaptive": (cfl_adaptive, np.array([0.5, 1.0, 1.5, 0.8]),
                     np.array([2.5, 1.0, 3.5, 0.8])),
    "bounce": (bounce, np.array([1.0, 0.3]), np.array([0.7, 1.3])),
    "positivity_mask": (positivity_mask, np.array([0.5, 1.3, 0.9, 0.25, 2.0]),
                        np.array([1.5, 0.3, 0.9, 0.4, 0.1])),
    "overlap_iadd": (overlap_iadd, _X4, _Y4),
    "ufunc_inplace_overlap": (ufunc_inplace_overlap, _X4, _Y4),
    "fill_diag_view": (fill_diag_view, np.array([0., 0., 1., 0.1, 0.2, 1.1, 1.3, 0.9]),
                       np.array([0., 0.5, 1., 0.1, 0.2, 1.1, -1.3, 0.9])),
    "searchsorted_loop_interp": (searchsorted_loop_interp,
                                 np.array([-1.0, 0.2, -0.3, 0.1, 0.3, 0.5, 0.7, 0.9]),
                                 np.array([0.5, 0.2, -0.3, 0.1, 0.3, 0.5, 0.7, 0.9])),
}


@pytest.mark.parametrize("name", sorted(BUFFER_PROGRAMS))
def test_buffer_program_in_every_mode(name):
    f, x0, x1 = BUFFER_PROGRAMS[name]
    _check(f, x0, x1)


@pytest.mark.parametrize("name", ["soft_edit_distance", "rk_tableau", "particles_verlet",
                                  "kepler_newton", "cg_matrix_free"])
def test_hessian_against_differences_of_the_gradient(name):
    f, x, _ = PROGRAMS[name]
    H = tape.hessian(f, x.copy())
    columns = []
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = 1e-5 * max(1.0, abs(x[i]))
        columns.append((tape.gradient(Reverse, f, x + e)[0]
                        - tape.gradient(Reverse, f, x - e)[0]) / (2 * e[i]))
    close(H, np.column_stack(columns), 1e-6)


@pytest.mark.parametrize("name", ["kepler_newton", "viterbi_max", "sor_2d_in_place"])
def test_compiled_forward_against_eager_forward(name):
    f, x0, x1 = PROGRAMS[name]
    compiled = tape.compile(Forward, f, Duplicated)
    direction = np.sin(np.arange(x0.size) + 1.0)
    for x in (x0, x1, x0):
        (want,) = tape.autodiff(Forward, f, Duplicated(x.copy(), direction.copy()))
        (got,) = compiled(Duplicated(x.copy(), direction.copy()))
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_decisions_change_between_the_compiled_calls():
    """The second inputs above take another Viterbi path, another Newton iteration count,
    other running maxima: each compiled function retraced on its guards."""
    for name in ("viterbi_max", "kepler_newton", "running_max_python", "scalar_newton_sqrt"):
        f, x0, x1 = PROGRAMS[name]
        compiled = tape.compile(Reverse, f, Active, Duplicated)
        for x in (x0, x1):
            compiled(Duplicated(x.copy(), np.zeros_like(x)))
        assert compiled.stats.guard_failures >= 1 or compiled.stats.eager_calls >= 1, name


def test_soft_dtw_with_infinite_padding_under_errstate_raise():
    f, x, _ = PROGRAMS["dtw_logaddexp"]
    want = fd_gradient(f, x.copy())
    with np.errstate(invalid="raise"):
        f(x.copy())                      # NumPy itself runs the program
        (g,) = tape.gradient(Reverse, f, x.copy())
    close(g, want, 1e-6)
