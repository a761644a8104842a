"""The eager reverse sweep adds cotangents into arrays it made itself (`ReverseTrace.backward`,
getitem's `accumulate_into`, setitem's `reverse_in_place`): row loops, repeated reads,
setitem chains, mixed dtypes and every mode that runs the sweep must give the gradients of
central finite differences, and no array outside the sweep (a seed, a rule's constant, a
saved value, a shadow) may be written by it."""
import numpy as np
import pytest

import tape
from numeric_checks import fd_gradient
from tape import (Active, BatchDuplicated, Const, Duplicated, Forward, Reverse,
                  ReverseSplitWithPrimal, ReverseWithPrimal, autodiff, autodiff_thunk,
                  checkpoint, custom_rule, gradient, hessian, hvp, set_nan_check)

RNG = np.random.default_rng(20240611)
M0 = RNG.standard_normal((4, 3))


def check(f, x, rtol=1e-6, atol=1e-8):
    """Reverse (twice, no state between sweeps), ReverseWithPrimal, Forward and compiled
    Reverse against central differences."""
    want = fd_gradient(f, x)
    (g1,), = autodiff(Reverse, f, Active, Active(x.copy()))
    (g2,), = autodiff(Reverse, f, Active, Active(x.copy()))
    (g3,), y = autodiff(ReverseWithPrimal, f, Active, Active(x.copy()))
    gf, = gradient(Forward, f, x.copy())
    gc = tape.compile(Reverse, f, Active, Active)(Active(x.copy()))[0][0]
    np.testing.assert_allclose(y, f(x.copy()), rtol=1e-12)
    for g in (g1, g2, g3, gf, gc):
        np.testing.assert_allclose(g, want, rtol=rtol, atol=atol)
    return g1


# -- reads ------------------------------------------------------------------------------------
def rows_and_whole(M):
    s = 0.0
    for k, r in enumerate(M):           # row by row
        s = s + (k + 1.0) * np.sum(np.sin(r) * r)
    st = np.stack(list(M))              # every row again, stacked
    s = s + np.sum(st ** 3) + np.sum(M * M[0]) + np.sum(M[1]) * np.sum(M)   # and whole
    for k in range(M.shape[0]):
        s = s + np.sum(M[k] * M[k, ::-1])   # a row read twice, one reversed
    return s


def test_rows_read_one_by_one_twice_and_whole():
    check(rows_and_whole, M0)


def overlapping_reads(M):
    a = M[0:3] * 2.0
    b = M[1:4, ::-1]
    c = M[::-2, 1:]
    d = M[M > 0.0]                      # boolean mask
    e = M[..., None, 1]                 # Ellipsis and newaxis
    f = M[None, 2, ...]
    g = M[-1]
    h = M[[0, 2]]                       # integer list without repeats
    i = M[np.array([3, 3, 0])]          # repeats: the scatter path
    return (np.sum(a * b) + np.sum(np.cos(c)) + np.sum(d ** 2) + np.sum(e * f[..., 0])
            + np.sum(g * h) + np.sum(i ** 3) + np.sum(M[1, 2] * M[2, 1]))


@pytest.mark.parametrize("layout", ["C", "F", "strided", "transposed"])
def test_overlapping_slices_masks_and_layouts(layout):
    big = RNG.standard_normal((8, 6))
    x = {"C": M0, "F": np.asfortranarray(M0), "strided": big[::2, ::2][:, :3],
         "transposed": big[:3, :4].T}[layout]
    check(overlapping_reads, x)


def test_zero_d_argument_getitem_after_scalar_cotangent():
    # The 0-d cotangent becomes a NumPy scalar after `prev + c`, yet its slot is kept as the
    # sweep's own: a further `x[None]` read then writes into the scalar.
    def f(x):
        a = x[None]
        b = x * 2.0
        c = x[...]
        return np.sum(a) * 3.0 + b + c * 5.0
    (g,), = autodiff(Reverse, f, Active, Active(np.array(1.5)))
    assert float(g) == pytest.approx(10.0)


# -- writes -----------------------------------------------------------------------------------
def write_chain(x):
    buf = np.zeros_like(x, shape=6)
    buf[0] = x[0]
    for i in range(1, 6):
        buf[i] = buf[i - 1] * x[i % 3] + np.sin(buf[i - 1])    # read back before the next write
    buf[2] = buf[2] * buf[4]                                      # overwrite a read value
    buf[1:3] = buf[3:5] * x[:2]                                   # slice write of read values
    buf[[5, 0]] = buf[[0, 5]]                                     # swap by advanced index
    buf[buf > 0.5] = 0.5 * buf[buf > 0.5]                         # masked write
    buf[1:] = buf[:-1]                                            # shift: value aliases buffer
    buf[::-2] += x[1]                                             # augmented, negative step
    v = buf[2:]
    v[0] = v[1] * x[2]                                            # write through a view
    v[1:3] *= 2.0
    return np.sum(buf ** 2) + np.sum(v)


def test_setitem_chain_reads_before_overwrites():
    check(write_chain, np.array([0.7, -0.4, 1.3]))


def matrix_rows_written(M):
    out = np.zeros_like(M)
    for k in range(M.shape[0]):
        out[k] = np.tanh(M[k]) * M[k - 1]
        out[k, 0] += out[k - 1, 1]
    total = np.sum(out * M)
    out[:, 1] = 0.0
    return total + np.sum(out ** 2)


def test_row_writes_and_element_updates():
    check(matrix_rows_written, M0)


def test_augmented_assignment_into_copy_of_argument():
    def f(x, y):
        z = x.copy()
        for i in range(3):
            z[i] += y * z[i - 1]
            z[i] *= z[(i + 1) % 3]
        return np.sum(z)
    x, y = np.array([0.3, -1.2, 0.8]), 0.6
    (gx, gy), = autodiff(Reverse, f, Active, Active(x.copy()), Active(y))
    np.testing.assert_allclose(gx, fd_gradient(lambda t: f(t, y), x), rtol=1e-6)
    assert gy == pytest.approx(fd_gradient(lambda t: f(x, float(t)), np.array(y)), rel=1e-6)


# -- dtypes -----------------------------------------------------------------------------------
def mixed(M):
    c64 = np.linspace(0.5, 1.5, M.shape[1])          # float64 constant
    s = 0.0
    for r in M:
        s = s + np.sum(r * c64) + np.sum(r.astype(np.float64) ** 2)
    buf = np.zeros_like(M[0])
    buf[0] = M[0, 0] * 2.0                             # a float32 buffer, float64 arithmetic
    buf[1:] = M[1, 1:] * c64[1:]
    return s + np.sum(buf * M[2]) + np.sum(M[3].astype(np.float16).astype(np.float32))


def test_float32_input_with_float64_constants():
    x32 = M0.astype(np.float32)
    (g32,), = autodiff(Reverse, mixed, Active, Active(x32.copy()))
    assert g32.dtype == np.float32
    (g64,), = autodiff(Reverse, mixed, Active, Active(x32.astype(np.float64)))
    np.testing.assert_allclose(g32, g64, rtol=2e-3, atol=2e-3)   # float16 round trip
    (g32b,), = autodiff(Reverse, mixed, Active, Active(x32.copy()))
    np.testing.assert_array_equal(g32, g32b)


def test_complex_rows_and_writes():
    def f(z):
        s = 0.0
        for r in z:
            s = s + np.sum(np.abs(r * (1.0 + 0.5j)) ** 2)
        buf = np.zeros_like(z, shape=3)
        buf[0] = z[0, 0] * z[1, 1]
        buf[1:] = np.conj(z[2, 1:])
        buf[2] += 1j * z[3, 2]
        return np.real(s + np.sum(buf * buf) + np.sum(z[1] * z[3]))
    z = M0 + 1j * RNG.standard_normal(M0.shape)
    (g,), = autodiff(Reverse, f, Active, Active(z.copy()))
    # The convention of `gradient`: df/dRe + 1j df/dIm.
    want = (fd_gradient(lambda a: f(a + 1j * z.imag), z.real)
            + 1j * fd_gradient(lambda b: f(z.real + 1j * b), z.imag))
    np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-8)


def test_real_input_through_complex_intermediates_and_integer_buffer():
    def f(x):
        buf = np.zeros_like(x, shape=3, dtype=complex)
        for i in range(3):
            buf[i] = x[i] * np.exp(1j * x[i + 1])
        counts = np.zeros(3, dtype=int)
        counts[1] = 4                                   # an integer buffer, no derivative
        return (np.sum(np.abs(buf) ** 2 * counts) + np.real(np.sum(buf * buf))
                + np.sum(x[1:] * x[:-1]))
    check(f, np.array([0.4, -0.9, 1.1, 0.3]))


# -- what the sweep must not write ------------------------------------------------------------
def test_split_mode_seed_and_second_sweep_untouched():
    def f(M):
        return np.stack([np.sin(M[k]) * M[k - 1] for k in range(M.shape[0])])
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, f, Duplicated, Active)
    M = M0.copy()
    tp, y, _ = fwd(Active(M))
    seed = RNG.standard_normal(y.shape)
    kept = seed.copy()
    (g1,), = rev(Active(M), seed, tp)
    (g2,), = rev(Active(M), 2.0 * seed, tp)
    np.testing.assert_array_equal(seed, kept)
    want = fd_gradient(lambda m: np.sum(f(m) * kept), M0)
    np.testing.assert_allclose(g1, want, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(g2, 2.0 * want, rtol=1e-6, atol=1e-8)


def test_duplicated_shadow_and_return_seed_accumulate():
    def f(M, out):
        for k in range(M.shape[0]):
            out[k] = M[k] * M[k - 1]
        out[0] += M[3]
        return None
    M, dM = M0.copy(), np.full_like(M0, 0.25)           # a shadow that already holds values
    out, seed = np.zeros_like(M0), RNG.standard_normal(M0.shape)
    kept = seed.copy()
    autodiff(Reverse, f, Const, Duplicated(M, dM), Duplicated(out, seed))
    want = fd_gradient(lambda m: np.sum(_rows_product(m) * kept), M0)
    np.testing.assert_allclose(dM, 0.25 + want, rtol=1e-6, atol=1e-8)


def _rows_product(m):
    o = np.stack([m[k] * m[k - 1] for k in range(m.shape[0])])
    o[0] += m[3]
    return o


CONST_CT = np.array([1.0, -2.0, 0.5])


def _twice(x):
    return 2.0 * x


twice_const = custom_rule(_twice, augmented_primal=lambda cfg, x: (2.0 * x, None),
                          reverse=lambda cfg, saved, g: (CONST_CT,))   # deliberately wrong
passthrough = custom_rule(lambda x: x * 1.0, augmented_primal=lambda cfg, x: (x * 1.0, None),
                          reverse=lambda cfg, saved, g: (g,))
share = custom_rule(lambda x, y: x + y, augmented_primal=lambda cfg, x, y: (x + y, None),
                    reverse=lambda cfg, saved, g: (g, g))


def test_custom_rules_returning_constants_or_their_cotangent_are_not_written():
    kept = CONST_CT.copy()

    def f(M):
        s = 0.0
        t = twice_const(M[0])           # M[0]'s cotangent is CONST_CT itself
        for k in range(M.shape[0]):
            s = s + np.sum(M[k] * np.arange(3.0))
        p = passthrough(M[1])
        q = share(M[2], M[3])           # one array for two inputs
        return s + np.sum(t) + np.sum(p * 3.0) + np.sum(q * M[2]) + np.sum(M[0] * M[2])
    for _ in range(3):
        (g,), = autodiff(Reverse, f, Active, Active(M0.copy()))
        np.testing.assert_array_equal(CONST_CT, kept)
    want = np.tile(np.arange(3.0), (4, 1))
    want[0] += CONST_CT + M0[2]
    want[1] += 3.0
    want[2] += 2 * M0[2] + M0[3] + M0[0]
    want[3] += M0[2]
    np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-12)


def test_batched_seeds_through_row_loop_and_writes():
    def f(M, out):
        for k in range(M.shape[0]):
            out[k] = np.cos(M[k]) * M[k, ::-1]
        out[1, 2] = out[2, 1] * M[0, 0]
        return None
    seeds = tuple(RNG.standard_normal(M0.shape) for _ in range(3))
    kept = tuple(s.copy() for s in seeds)
    shadows = tuple(np.zeros_like(M0) for _ in range(3))

    def ref(m):
        o = np.stack([np.cos(m[k]) * m[k, ::-1] for k in range(4)])
        o[1, 2] = o[2, 1] * m[0, 0]
        return o
    autodiff(Reverse, f, Const, BatchDuplicated(M0.copy(), shadows),
             BatchDuplicated(np.zeros_like(M0), seeds))
    for sh, s in zip(shadows, kept):
        np.testing.assert_allclose(sh, fd_gradient(lambda m: np.sum(ref(m) * s), M0),
                                   rtol=1e-6, atol=1e-8)


# -- second order, checkpoints ----------------------------------------------------------------
def second(x):
    s = 0.0
    for k in range(x.shape[0]):
        s = s + np.sum(x[k] ** 2 * x[k - 1])
    buf = np.zeros_like(x, shape=3)
    buf[0] = x[0, 0] * x[1, 1]
    buf[1] = buf[0] * x[2, 2]
    buf[2] = np.sum(x[3])
    return s + np.sum(buf ** 2) + 2.0 * np.sum(x[2]) + np.sum(x * x[1])


def test_hessian_hvp_and_reverse_over_reverse():
    x = M0[:, :3]
    n = x.size
    grad = lambda y: gradient(Reverse, second, y)[0]
    H_fd = np.stack([fd_gradient(lambda y: grad(y).ravel()[i], x).ravel() for i in range(n)])
    np.testing.assert_allclose(hessian(second, x).reshape(n, n), H_fd, rtol=1e-5, atol=1e-6)
    v = RNG.standard_normal(x.shape)
    np.testing.assert_allclose(hvp(second, x, v).ravel(), H_fd @ v.ravel(), rtol=1e-5, atol=1e-6)
    rr = gradient(Reverse, lambda y: np.sum(grad(y) * v), x)[0]
    np.testing.assert_allclose(rr.ravel(), H_fd.T @ v.ravel(), rtol=1e-5, atol=1e-6)


def test_checkpointed_row_loop():
    def body(M):
        out = np.zeros(M.shape[1])
        for r in M:
            out = out + np.tanh(r) * r
        M2 = M.copy()
        M2[0] = out
        return M2

    def f(M):
        return np.sum(checkpoint(body)(M) ** 2) + np.sum(M[0] * M[3])
    check(f, M0)


def test_nan_check_mode_row_loop():
    def f(M):
        return sum(np.sum(r * r) for r in M) + np.sum(M[0] * M[1])
    (g,), = autodiff(set_nan_check(Reverse), f, Active, Active(M0.copy()))
    want = 2 * M0
    want[0] += M0[1]
    want[1] += M0[0]
    np.testing.assert_allclose(g, want, rtol=1e-12)


def test_outer_tracer_cotangents_mixed_with_owned_plain_ones():
    # Inner sweep of reverse-over-reverse and forward-over-reverse: x's cotangent is first a
    # plain scatter (the sweep's own), then a sum with an outer tracer, then gets a plain
    # row and a plain full-size contribution added.
    w = np.array([[1.0, -2.0], [0.5, 3.0], [2.0, 1.0]])

    def f(x):
        d = np.sum(x * w)
        a = x[2]
        b = np.sum(x * x * x[1])
        c = x[0]
        return d + 2.0 * np.sum(a) + b + 3.0 * np.sum(c)
    x = np.array([[0.3, -1.0], [0.7, 1.2], [-0.4, 0.9]])
    v = np.array([[1.0, 0.5], [-1.0, 2.0], [0.3, -0.7]])
    grad = lambda y: gradient(Reverse, f, y)[0]
    want = fd_gradient(lambda y: np.sum(grad(y) * v), x)
    np.testing.assert_allclose(gradient(Reverse, lambda y: np.sum(grad(y) * v), x)[0], want,
                               rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(hvp(f, x, v), want, rtol=1e-6, atol=1e-8)


def test_rule_constant_cotangent_in_a_batched_sweep():
    # A plain cotangent (the rule's constant) meets batched ones at one slot.
    def f(M, out):
        out[0] = np.sum(twice_const(M[1]))
        out[1] = np.sum(M * M)
        out[2] = np.sum(twice_const(M[0]))
        return None
    kept = CONST_CT.copy()
    seeds = tuple(np.eye(3)[i] for i in range(3))
    shadows = tuple(np.zeros_like(M0) for _ in range(3))
    autodiff(Reverse, f, Const, BatchDuplicated(M0.copy(), shadows),
             BatchDuplicated(np.zeros(3), tuple(s.copy() for s in seeds)))
    for sh, s in zip(shadows, seeds):
        dM = np.zeros_like(M0)
        autodiff(Reverse, f, Const, Duplicated(M0.copy(), dM), Duplicated(np.zeros(3), s.copy()))
        np.testing.assert_allclose(sh, dM, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(CONST_CT, kept)


def test_overwritten_duplicated_argument_rows():
    def f(x):
        for k in range(1, 3):
            x[k] = x[k] * x[k - 1] + np.sin(x[k, ::-1])
        x[0, 1] += x[2, 2]
        return np.sum(x ** 2)

    def final(m):
        m = m.copy()
        f(m)
        return m
    x0 = M0[:3].copy()
    x, dx = x0.copy(), np.full_like(x0, 0.5)     # the shadow seeds the overwritten buffer
    autodiff(Reverse, f, Active, Duplicated(x, dx))
    np.testing.assert_allclose(x, final(x0), rtol=1e-12)
    want = fd_gradient(lambda m: f(m.copy()) + np.sum(0.5 * final(m)), x0)
    np.testing.assert_allclose(dx, want, rtol=1e-6, atol=1e-8)


def test_holomorphic_sweeps_share_one_tape():
    def h(z):
        s = 0
        for k in range(3):
            s = s + np.sum(z[k] ** 2 * z[k - 1])
        b = np.zeros_like(z[0])
        b[1] = z[1, 1] * z[0, 2]
        b[0] = b[1] * z[2, 0]
        return s + np.sum(b * b)
    z = M0[:3] + 1j * M0[1:]
    (d,), = autodiff(tape.ReverseHolomorphic, h, Active, Active(z.copy()))
    fd = np.zeros_like(z)
    for i in np.ndindex(z.shape):
        e = np.zeros_like(z)
        e[i] = 1e-6
        fd[i] = (h(z + e) - h(z - e)) / 2e-6
    np.testing.assert_allclose(d, fd, rtol=1e-6, atol=1e-8)
