"""Loop programs (time stepping into buffers, stencils, soft-DTW, Newton loops, CG, row
loops, `x[i] += ...`) in float32 and mixed precision, with batched activities, checkpointed
step bodies and split mode.

- float32 / float16 / bfloat16 inputs: the primal has NumPy's dtype and value, the gradient
  the shadow's dtype and the float64 gradient's value to the precision's accuracy; eager,
  `tape.compile` and forward mode agree to that rounding;
- `BatchDuplicated`: W tangents (forward) or W seeds of an overwritten buffer (reverse) in one
  pass equal one pass per direction, eager and compiled;
- `tape.checkpoint` around a time step and around a Newton step gives the gradient of the
  program without it (Reverse and ReverseWithPrimal, eager and compiled);
- `autodiff_thunk`: one augmented forward, reversed with two seeds.
"""
from __future__ import annotations

import numpy as np
import pytest

import tape
from tape import (Active, BatchDuplicated, Const, Duplicated, Forward, ForwardWithPrimal,
                  Reverse, ReverseSplitWithPrimal, ReverseWithPrimal)

from test_loop_programs_redteam import PROGRAMS, BUFFER_PROGRAMS


def _dtype(v):
    return np.asarray(v).dtype


def _rel(got, want):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    return float(np.max(np.abs(got - want)) / max(1.0, float(np.max(np.abs(want)))))


# -- float32 versions of the float64 programs ------------------------------------------------
# Programs whose float32 run converges (scalar_newton_sqrt's tolerance 1e-12 * a is below
# float32's resolution: NumPy itself loops forever) and whose float64 gradient the float32 one
# should follow to ~1e-4 (no branch that flips with rounding).
F32_NAMES = ["euler_history", "heat_stencil_diff_iadd", "heat_stencil_slices", "wave_2d_buffer",
             "sor_2d_in_place", "soft_edit_distance", "dtw_logaddexp", "prefix_scans",
             "particles_verlet", "kepler_newton", "rk_tableau", "cg_matrix_free",
             "horner_entrywise", "rows_iteration", "rows_updated_through_iteration",
             "column_history", "double_buffer", "out_rows", "overlap_iadd", "muscl_burgers"]
ALL = {**PROGRAMS, **BUFFER_PROGRAMS}


@pytest.mark.parametrize("name", F32_NAMES)
def test_float32_program_primal_gradient_and_tangent(name):
    f, x0, _ = ALL[name]
    x = x0.astype(np.float32)
    want = f(x.copy())
    dx = np.zeros_like(x)
    _, value = tape.autodiff(ReverseWithPrimal, f, Active, Duplicated(x.copy(), dx))
    assert _dtype(value) == _dtype(want)
    np.testing.assert_array_equal(value, want)
    assert dx.dtype == np.float32
    dx64 = np.zeros_like(x0)
    tape.autodiff(Reverse, f, Active, Duplicated(x0.copy(), dx64))
    assert _rel(dx, dx64) < 2e-4, (dx, dx64)
    direction = np.cos(np.arange(x.size) + 0.5).astype(np.float32)
    (t,) = tape.autodiff(Forward, f, Duplicated(x.copy(), direction.copy()))
    assert _dtype(t) == _dtype(want)
    assert abs(float(t) - float(dx.astype(np.float64) @ direction)) <= 1e-4 * max(1.0, abs(float(t)))


@pytest.mark.parametrize("name", ["euler_history", "dtw_logaddexp", "kepler_newton",
                                  "horner_entrywise", "cg_matrix_free", "rows_iteration"])
def test_float32_program_compiled_reverse_and_forward_against_eager(name):
    f, x0, x1 = ALL[name]
    rev = tape.compile(ReverseWithPrimal, f, Active, Duplicated)
    fwd = tape.compile(ForwardWithPrimal, f, Duplicated)
    for x in (x0.astype(np.float32), x1.astype(np.float32), x0.astype(np.float32)):
        d_e, d_c = np.zeros_like(x), np.zeros_like(x)
        _, v_e = tape.autodiff(ReverseWithPrimal, f, Active, Duplicated(x.copy(), d_e))
        _, v_c = rev(Duplicated(x.copy(), d_c))
        assert _dtype(v_c) == _dtype(v_e) and d_c.dtype == np.float32
        np.testing.assert_allclose(v_c, v_e, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(d_c, d_e, rtol=1e-5, atol=1e-5)
        direction = np.sin(np.arange(x.size) + 1.0).astype(np.float32)
        t_e, p_e = tape.autodiff(ForwardWithPrimal, f, Duplicated(x.copy(), direction.copy()))
        t_c, p_c = fwd(Duplicated(x.copy(), direction.copy()))
        assert _dtype(t_c) == _dtype(t_e) == _dtype(p_e) == _dtype(p_c)
        np.testing.assert_allclose(t_c, t_e, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(p_c, p_e, rtol=1e-6, atol=1e-6)


# -- mixed precision: promotion inside loops -------------------------------------------------
_W64 = np.linspace(0.5, 1.5, 5)
_IDX = np.arange(1, 6)


def stencil_f32_constants(x):
    """Python floats and np.float32 constants: a float32 program stays float32."""
    u = x.copy()
    for _ in range(6):
        u[1:-1] += 0.25 * np.diff(u, 2) + np.float32(0.01) * u[1:-1] ** 2
        u = u * 0.99
    return np.sum(u * u)


def recurrence_f64_written_into_buffer(x):
    """float64 values written (and added in place) into a float32 buffer: cast on the write."""
    u = np.zeros_like(x)
    u[0] = x[0]
    for i in range(1, x.size):
        u[i] = u[i - 1] * _W64[i] + x[i]
        u[i] += np.float64(0.3) * u[i - 1]
    return np.sum(u ** 2)


def int_array_weights(x):
    """An int64 array promotes the iterate to float64 from the first step."""
    acc = x.copy()
    for k in range(3):
        acc = acc + _IDX * np.sin(acc) / (k + 1)
    return np.sum(acc * acc)


def newton_f64_scalar(x):
    """A float64 NumPy scalar (strong under NEP 50) promotes."""
    s = x.copy()
    for _ in range(4):
        s = s - np.float64(0.1) * (s ** 3 - 1)
    return np.sum(s)


def inplace_f64_rhs(x):
    """`s[i] += float64 * ...` and `s *= np.float64(...)`: the buffer keeps its dtype."""
    s = x.copy()
    for i in range(s.size):
        s[i] += np.float64(0.5) * s[i - 1] ** 2
        s *= np.float64(0.9)
    return s @ s


def python_max_rows(x):
    """Python max() over the entries of a float32 array, a Python float accumulator."""
    m = x[0]
    tot = 0.0
    for v in x[1:]:
        m = max(m, v) * 0.9
        tot = tot + m
    return tot


MIXED = [stencil_f32_constants, recurrence_f64_written_into_buffer, int_array_weights,
         newton_f64_scalar, inplace_f64_rhs, python_max_rows]
_XM = np.array([0.3, -0.5, 0.8, 0.2, 0.6])


@pytest.mark.parametrize("dtype,tol", [(np.float32, 2e-5), (np.float16, 1e-2)],
                         ids=["float32", "float16"])
@pytest.mark.parametrize("f", MIXED, ids=lambda f: f.__name__)
def test_mixed_precision_loop(f, dtype, tol):
    x = _XM.astype(dtype)
    want = f(x.copy())
    dx = np.zeros_like(x)
    _, value = tape.autodiff(ReverseWithPrimal, f, Active, Duplicated(x.copy(), dx))
    assert _dtype(value) == _dtype(want)
    np.testing.assert_array_equal(np.asarray(value, np.float64), np.asarray(want, np.float64))
    assert dx.dtype == dtype
    g64 = np.zeros(x.size)
    tape.autodiff(Reverse, f, Active, Duplicated(x.astype(np.float64), g64))
    assert _rel(dx, g64) < tol, (dx, g64)
    (t,) = tape.autodiff(Forward, f, Duplicated(x.copy(), np.ones_like(x)))
    assert _dtype(t) == _dtype(want)
    assert abs(float(t) - float(np.sum(g64))) <= 5 * tol * max(1.0, abs(float(t)))
    compiled = tape.compile(ReverseWithPrimal, f, Active, Duplicated)
    for xx in (x, (x * 1.2).astype(dtype)):
        d_c, d_e = np.zeros_like(xx), np.zeros_like(xx)
        _, v_c = compiled(Duplicated(xx.copy(), d_c))
        _, v_e = tape.autodiff(ReverseWithPrimal, f, Active, Duplicated(xx.copy(), d_e))
        assert _dtype(v_c) == _dtype(v_e) and d_c.dtype == dtype
        np.testing.assert_array_equal(np.asarray(v_c, np.float64), np.asarray(v_e, np.float64))
        np.testing.assert_allclose(d_c.astype(np.float64), d_e.astype(np.float64),
                                   rtol=tol, atol=tol)


def _tiled_history(x):
    T, dt = 10, 0.05
    U = np.tile(x, (T + 1, 1))
    for t in range(T):
        U[t + 1, :] = U[t, :] + dt * np.sin(U[t, ::-1])
    return U


def test_float32_tiled_history_sums_as_numpy():
    f, x0, _ = PROGRAMS["euler_tiled_history"]
    x = x0.astype(np.float32)
    _, value = tape.autodiff(ReverseWithPrimal, f, Active,
                             Duplicated(x.copy(), np.zeros_like(x)))
    np.testing.assert_array_equal(value, f(x.copy()))


_W9 = np.arange(9.0).reshape(3, 3)


def _write_through_ravel(build):
    def f(x):
        U = build(x)
        V = U.ravel()
        V[4] = 7.0 * x[0]           # NumPy: V is a view of the fresh array U
        return np.sum(U * _W9)
    return f


@pytest.mark.parametrize("build", [lambda x: np.tile(x, (3, 1)),
                                   lambda x: np.repeat(x[None], 3, axis=0)],
                         ids=["tile", "repeat"])
def test_write_through_ravel_of_tile_or_repeat(build):
    f = _write_through_ravel(build)
    x = np.array([1.0, 2.0, 3.0])
    dx = np.zeros_like(x)
    _, value = tape.autodiff(ReverseWithPrimal, f, Active, Duplicated(x.copy(), dx))
    assert value == f(x.copy())          # 98.0; traced: 78.0
    np.testing.assert_allclose(dx, [37.0, 8.0, 15.0])


def test_write_through_ravel_of_stacked_rows_reaches_the_buffer():
    f = _write_through_ravel(lambda x: np.stack([x, x, x]))
    x = np.array([1.0, 2.0, 3.0])
    dx = np.zeros_like(x)
    _, value = tape.autodiff(ReverseWithPrimal, f, Active, Duplicated(x.copy(), dx))
    assert value == f(x.copy())
    np.testing.assert_allclose(dx, [37.0, 8.0, 15.0])


def test_bfloat16_argument_is_differentiated_or_refused_clearly():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = _XM.astype(ml_dtypes.bfloat16)
    dx = np.zeros_like(x)
    try:
        _, value = tape.autodiff(ReverseWithPrimal, stencil_f32_constants, Active,
                                 Duplicated(x.copy(), dx))
    except tape.HecateError as e:
        assert "integer and boolean" not in str(e), str(e)
        return
    assert _dtype(value) == _dtype(stencil_f32_constants(x.copy()))
    g64 = np.zeros(x.size)
    tape.autodiff(Reverse, stencil_f32_constants, Active, Duplicated(x.astype(float), g64))
    assert _rel(dx, g64) < 5e-2


# -- batched activities on loop programs -----------------------------------------------------
def heat_into(x, out):
    """Stencil steps on a copy, then written into the caller's buffer."""
    u = x.copy()
    for _ in range(6):
        u[1:-1] += 0.25 * np.diff(u, 2)
        u *= 1.0 - 0.05 * u ** 2
    out[:] = u


def soft_dtw_rows_into(x, out):
    """Soft-DTW rows written into the caller's (3, 3) buffer row by row."""
    a, b = x[:3], x[3:]
    prev = np.full_like(x, np.inf, shape=(b.size + 1,))
    prev[0] = 0.0
    for i in range(a.size):
        cur = np.full_like(x, np.inf, shape=(b.size + 1,))
        for j in range(b.size):
            s = np.logaddexp(np.logaddexp(-prev[j] / 0.5, -prev[j + 1] / 0.5), -cur[j] / 0.5)
            cur[j + 1] = (a[i] - b[j]) ** 2 - 0.5 * s
        out[i] = cur[1:]
        prev = cur


INTO = {"heat_into": (heat_into, (6,)), "soft_dtw_rows_into": (soft_dtw_rows_into, (3, 3))}
_XB = np.array([0.3, -0.5, 0.8, 0.2, 0.6, -0.1])


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("name", sorted(INTO))
def test_batch_reverse_seeds_of_an_overwritten_buffer(name, dtype):
    f, oshape = INTO[name]
    x = _XB.astype(dtype)
    seeds = [np.cos(np.arange(np.prod(oshape)) * (k + 1.0)).reshape(oshape).astype(dtype)
             for k in range(3)]
    want = []
    for s in seeds:
        dx, out = np.zeros_like(x), np.zeros(oshape, dtype)
        tape.autodiff(Reverse, f, Const, Duplicated(x.copy(), dx), Duplicated(out, s.copy()))
        want.append(dx)
    assert _rel(want[0], want[1]) > 1e-2
    expected_out = np.zeros(oshape, dtype)
    f(x.copy(), expected_out)
    compiled = tape.compile(Reverse, f, Const, BatchDuplicated, BatchDuplicated)
    for run in (None, compiled, compiled):
        dxs = tuple(np.zeros_like(x) for _ in seeds)
        out, sc = np.zeros(oshape, dtype), tuple(s.copy() for s in seeds)
        args = BatchDuplicated(x.copy(), dxs), BatchDuplicated(out, sc)
        if run is None:
            tape.autodiff(Reverse, f, Const, *args)
        else:
            run(*args)
        np.testing.assert_array_equal(out, expected_out)
        for got, w, s in zip(dxs, want, sc):
            assert got.dtype == dtype and not np.any(s)
            np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("name", sorted(INTO))
def test_batch_forward_into_an_overwritten_buffer(name, dtype):
    f, oshape = INTO[name]
    x = _XB.astype(dtype)
    dirs = tuple(np.sin(np.arange(x.size) * (k + 1.0)).astype(dtype) for k in range(3))
    want = []
    for d in dirs:
        out, dout = np.zeros(oshape, dtype), np.zeros(oshape, dtype)
        tape.autodiff(Forward, f, Const, Duplicated(x.copy(), d.copy()), Duplicated(out, dout))
        want.append(dout)
    compiled = tape.compile(Forward, f, Const, BatchDuplicated, BatchDuplicated)
    for run in (None, compiled, compiled):
        out, douts = np.zeros(oshape, dtype), tuple(np.zeros(oshape, dtype) for _ in dirs)
        args = BatchDuplicated(x.copy(), dirs), BatchDuplicated(out, douts)
        if run is None:
            tape.autodiff(Forward, f, Const, *args)
        else:
            run(*args)
        for got, w in zip(douts, want):
            assert got.dtype == dtype
            np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("name", ["kepler_newton", "dtw_logaddexp", "cg_matrix_free",
                                  "horner_entrywise", "rows_updated_through_iteration"])
def test_batch_forward_tangents_of_a_scalar_program(name, dtype):
    f, x0, x1 = ALL[name]
    dirs = tuple(np.cos(np.arange(x0.size) * (k + 0.5)).astype(dtype) for k in range(3))
    compiled = tape.compile(Forward, f, BatchDuplicated)
    for x in (x0.astype(dtype), x1.astype(dtype)):
        want = [tape.autodiff(Forward, f, Duplicated(x.copy(), d.copy()))[0] for d in dirs]
        for run in (None, compiled):
            if run is None:
                (got,) = tape.autodiff(Forward, f, BatchDuplicated(x.copy(), dirs))
            else:
                (got,) = run(BatchDuplicated(x.copy(), dirs))
            assert len(got) == 3
            for g, w in zip(got, want):
                assert _dtype(g) == _dtype(w)
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


# -- tape.checkpoint around a time step and a Newton step ------------------------------------
def _euler_step(u):
    return u + 0.05 * (np.roll(u, 1) - u ** 3)


_euler_step_cp = tape.checkpoint(_euler_step)


def _euler_buffer(step):
    def f(x):
        T = 8
        U = np.zeros_like(x, shape=(T + 1, x.size))
        U[0] = x
        for t in range(T):
            U[t + 1] = step(U[t])
        return np.sum(U[-1] ** 2) + np.sum(U[:, 0] * np.arange(T + 1))
    return f


def _kepler_step(E, e, M):
    r = E - e * np.sin(E) - M
    return E - r / (1 - e * np.cos(E)), np.max(np.abs(r))


_kepler_step_cp = tape.checkpoint(_kepler_step)


def _kepler(step):
    def f(x):
        e = 0.3 + 0.2 * np.tanh(x[0])
        M = x[1:]
        E = M.copy()
        E, res = step(E, e, M)
        while res > 1e-13:
            E, res = step(E, e, M)
        return np.sum(np.cos(E) * M)
    return f


CHECKPOINTED = {
    "euler_buffer": (_euler_buffer(_euler_step), _euler_buffer(_euler_step_cp),
                     np.array([0.3, -0.7, 1.1, 0.4, -0.2])),
    "kepler_newton": (_kepler(_kepler_step), _kepler(_kepler_step_cp),
                      np.array([0.2, 0.5, 1.5, 2.5])),
}


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-12), (np.float32, 1e-5)],
                         ids=["float64", "float32"])
@pytest.mark.parametrize("mode", [Reverse, ReverseWithPrimal], ids=["Reverse", "WithPrimal"])
@pytest.mark.parametrize("name", sorted(CHECKPOINTED))
def test_checkpointed_step_gives_the_plain_gradient(name, mode, dtype, tol):
    plain, ckpt, x0 = CHECKPOINTED[name]
    x = x0.astype(dtype)
    d_plain = np.zeros_like(x)
    r_plain = tape.autodiff(mode, plain, Active, Duplicated(x.copy(), d_plain))
    if dtype is np.float64:
        g = np.zeros_like(x)
        for i in range(x.size):
            e = np.zeros_like(x)
            e[i] = 1e-6
            g[i] = (plain(x + e) - plain(x - e)) / 2e-6
        np.testing.assert_allclose(d_plain, g, rtol=1e-6, atol=1e-6)
    compiled = tape.compile(mode, ckpt, Active, Duplicated)
    for run in (None, compiled, compiled):
        d = np.zeros_like(x)
        if run is None:
            r = tape.autodiff(mode, ckpt, Active, Duplicated(x.copy(), d))
        else:
            r = run(Duplicated(x.copy(), d))
        assert d.dtype == dtype
        np.testing.assert_allclose(d, d_plain, rtol=tol, atol=tol)
        if mode is ReverseWithPrimal:
            assert _dtype(r[1]) == _dtype(r_plain[1])
            np.testing.assert_allclose(r[1], r_plain[1], rtol=tol, atol=tol)


# -- split mode: one augmented forward, two reversals ----------------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("name", ["heat_stencil_diff_iadd", "soft_edit_distance",
                                  "kepler_newton", "horner_entrywise"])
def test_split_mode_reversed_with_two_seeds(name, dtype):
    f, x0, _ = ALL[name]
    x = x0.astype(dtype)
    dx = np.zeros_like(x)
    _, want_value = tape.autodiff(ReverseWithPrimal, f, Active, Duplicated(x.copy(), dx))
    fwd, rev = tape.autodiff_thunk(ReverseSplitWithPrimal, f, Active, Duplicated)
    xs = x.copy()
    saved, value, shadow = fwd(Duplicated(xs, np.zeros_like(x)))
    assert shadow is None
    assert _dtype(value) == _dtype(want_value)
    np.testing.assert_array_equal(value, want_value)
    for seed in (1.0, -2.5):
        d = np.zeros_like(x)
        rev(Duplicated(xs, d), seed, saved)
        assert d.dtype == dtype
        np.testing.assert_allclose(d, seed * dx, rtol=1e-6, atol=1e-6)


def test_split_mode_duplicated_return_of_a_time_stepper_two_seeds():
    def history(x):
        T = 5
        U = np.zeros_like(x, shape=(T + 1, x.size))
        U[0] = x
        for t in range(T):
            U[t + 1] = U[t] + 0.1 * np.sin(U[t][::-1])
            U[t + 1, 1:] += 0.05 * U[t, :-1]
        return U
    x = np.array([0.3, -0.7, 1.1], np.float32)
    fwd, rev = tape.autodiff_thunk(ReverseSplitWithPrimal, history, Duplicated, Duplicated)
    dx = np.zeros_like(x)
    saved, U, dU = fwd(Duplicated(x, dx))
    np.testing.assert_array_equal(U, history(x.copy()))
    assert U.dtype == dU.dtype == np.float32
    for k in range(2):
        seed = np.cos(np.arange(U.size) * (k + 1.0)).reshape(U.shape).astype(np.float32)
        dx[:] = 0
        dU[:] = seed
        rev(Duplicated(x, dx), saved)
        want = np.zeros_like(x)
        _, vjp = tape.autodiff(ReverseWithPrimal, lambda v: np.sum(history(v) * seed), Active,
                               Duplicated(x.copy(), want))
        np.testing.assert_allclose(dx, want, rtol=1e-5, atol=1e-6)


def _steps_into(step):
    def f(x, out):
        u = x.copy()
        for _ in range(5):
            u = step(u)
        out[:] = u
    return f


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16],
                         ids=["float64", "float32", "float16"])
def test_batch_reverse_through_checkpointed_steps(dtype):
    x = np.array([0.3, -0.7, 1.1, 0.4, -0.2], dtype)
    seeds = tuple(np.cos(np.arange(5) * (k + 1.0)).astype(dtype) for k in range(2))
    results = []
    for step in (_euler_step, _euler_step_cp):
        dxs = tuple(np.zeros_like(x) for _ in seeds)
        tape.autodiff(Reverse, _steps_into(step), Const, BatchDuplicated(x.copy(), dxs),
                      BatchDuplicated(np.zeros_like(x), tuple(s.copy() for s in seeds)))
        results.append(dxs)
    for plain, ckpt in zip(*results):
        assert ckpt.dtype == dtype
        np.testing.assert_allclose(ckpt.astype(float), plain.astype(float), rtol=1e-3,
                                   atol=1e-3 if dtype is np.float16 else 1e-6)
