"""Sliding-window attention called as a user would: forward mode, compiled replays, aliased
and non-contiguous arguments, mixed Active/Const, head_dim 1 across several blocks, large
scores, bad arguments, and non-finite tokens a query never attends to. The oracle is a plain
NumPy causal window softmax (query t sees keys max(0, t - window + 1)..t, scale
1/sqrt(head_dim)) and central differences in float64."""
import warnings

import numpy as np
import pytest

import kernels
from kernels import attention
from tape import (Active, BatchDuplicated, Const, Duplicated, Forward, ForwardWithPrimal,
                  Reverse, autodiff, compile)


def oracle(q, k, v, window):
    s, hd = q.shape[-2:]
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(hd)
    i, j = np.indices((s, s))
    scores = np.where((j <= i) & (j > i - window), scores, -np.inf)
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v


def oracle_rows(q, k, v, window):
    """Row by row over the window only (no masked products at all)."""
    s, hd = q.shape
    out = np.empty_like(q)
    for t in range(s):
        lo = max(0, t - window + 1)
        sc = k[lo:t + 1] @ q[t] / np.sqrt(hd)
        p = np.exp(sc - sc.max())
        out[t] = (p / p.sum()) @ v[lo:t + 1]
    return out


def rnd(shape, seed, scale=1.0):
    return np.random.default_rng(seed).standard_normal(shape) * scale


def directional_fd(f, args, dirs, h=1e-6):
    plus = [a + h * d for a, d in zip(args, dirs)]
    minus = [a - h * d for a, d in zip(args, dirs)]
    return (f(*plus) - f(*minus)) / (2 * h)


def check_reverse(fn, args, window, weight, active=(True, True, True), tol=1e-7):
    """Reverse-mode gradient of sum(fn * weight) against central differences of the oracle
    along random directions of the active arguments."""
    ann = [Active(a) if on else Const(a) for a, on in zip(args, active)]
    g, = autodiff(Reverse, lambda q, k, v: np.sum(fn(q, k, v) * weight), Active, *ann)
    loss = lambda q, k, v: np.sum(oracle(q, k, v, window) * weight)   # noqa: E731
    for seed in range(2):
        dirs = [rnd(a.shape, 100 + 10 * seed + i) if on else np.zeros(a.shape)
                for i, (a, on) in enumerate(zip(args, active))]
        want = directional_fd(loss, args, dirs)
        got = sum(np.sum(gi * d) for gi, d, on in zip(g, dirs, active) if on)
        assert abs(got - want) <= tol * max(1.0, abs(want)), (got, want)
    for gi, on in zip(g, active):
        assert (gi is None) != on


def check_forward(fn, args, window, active=(True, True, True), tol=1e-7):
    tans = [rnd(a.shape, 50 + i) for i, a in enumerate(args)]
    ann = [Duplicated(a, t) if on else Const(a) for a, t, on in zip(args, tans, active)]
    tout, = autodiff(Forward, fn, *ann)
    dirs = [t if on else np.zeros(a.shape) for a, t, on in zip(args, tans, active)]
    want = directional_fd(lambda q, k, v: oracle(q, k, v, window), args, dirs)
    np.testing.assert_allclose(tout, want, rtol=tol, atol=tol)


# -- shapes at the edges of the blocks ---------------------------------------------------------

@pytest.mark.parametrize("s,hd,window", [(70, 1, 33), (37, 1, 1), (37, 2, 37), (1, 1, 5)])
def test_head_dim_one_and_ragged_blocks(s, hd, window):
    # 70 rows in blocks of 32 (a ragged last block), head_dim 1, windows 1, = s and > s.
    args = [rnd((s, hd), i) for i in range(3)]
    fn = lambda q, k, v: kernels.swa_attention(q, k, v, window)   # noqa: E731
    np.testing.assert_allclose(fn(*args), oracle_rows(*args, window), rtol=1e-12, atol=1e-12)
    check_reverse(fn, args, window, rnd((s, hd), 9))
    check_forward(fn, args, window)


def test_three_leading_axes_forward_and_reverse():
    args = [rnd((2, 1, 3, 5, 2), i) for i in range(3)]
    fn = lambda q, k, v: kernels.swa_attention(q, k, v, 2)   # noqa: E731
    np.testing.assert_allclose(fn(*args), oracle(*args, 2), rtol=1e-12, atol=1e-12)
    check_reverse(fn, args, 2, rnd((2, 1, 3, 5, 2), 9))
    check_forward(fn, args, 2)


# -- forward mode, compiled replays ------------------------------------------------------------

@pytest.mark.parametrize("active", [(True, False, False), (False, True, False),
                                    (False, False, True), (False, True, True)])
def test_only_some_arguments_carry_tangents_or_gradients(active):
    args = [rnd((9, 3), i) for i in range(3)]
    fn = lambda q, k, v: kernels.swa_attention(q, k, v, 4)   # noqa: E731
    check_reverse(fn, args, 4, rnd((9, 3), 9), active=active)
    check_forward(fn, args, 4, active=active)


def test_compiled_reverse_and_forward_replay_new_values_and_windows():
    weight = rnd((8, 3), 9)
    grad = compile(Reverse, lambda q, k, v, w: np.sum(kernels.swa_attention(q, k, v, w) * weight),
                   Active, Active, Active, Active, Const)
    jvp = compile(ForwardWithPrimal, lambda q, k, v: kernels.swa_attention(q, k, v, 3),
                  Duplicated, Duplicated, Const, Duplicated)
    for seed, window in ((0, 3), (10, 3), (20, 6)):
        q, k, v = (rnd((8, 3), seed + i) for i in range(3))
        g, = grad(Active(q), Active(k), Active(v), Const(window))
        loss = lambda q, k, v: np.sum(oracle(q, k, v, window) * weight)   # noqa: E731
        dirs = [rnd((8, 3), 40 + i) for i in range(3)]
        want = directional_fd(loss, (q, k, v), dirs)
        assert abs(sum(np.sum(a * d) for a, d in zip(g, dirs)) - want) < 1e-7 * max(1, abs(want))
        tq, tv = rnd((8, 3), 60), rnd((8, 3), 61)
        tout, out = jvp(Duplicated(q, tq), Const(k), Duplicated(v, tv))
        np.testing.assert_allclose(out, oracle(q, k, v, 3), rtol=1e-12, atol=1e-12)
        want = directional_fd(lambda q, k, v: oracle(q, k, v, 3), (q, k, v),
                              (tq, np.zeros((8, 3)), tv))
        np.testing.assert_allclose(tout, want, rtol=1e-7, atol=1e-7)
    assert grad.stats.traces == 2 and jvp.stats.traces == 1


# -- aliasing and memory layout ----------------------------------------------------------------

def test_one_array_as_query_key_and_value_sums_every_path():
    x, weight = rnd((7, 3), 0), rnd((7, 3), 9)
    f = lambda x: np.sum(kernels.swa_attention(x, x, x, 3) * weight)   # noqa: E731
    (g,), = autodiff(Reverse, f, Active, Active(x))
    d = rnd((7, 3), 5)
    want = directional_fd(lambda x: np.sum(oracle(x, x, x, 3) * weight), (x,), (d,))
    assert abs(np.sum(g * d) - want) < 1e-7 * max(1, abs(want))
    tout, = autodiff(Forward, lambda x: kernels.swa_attention(x, x, x, 3), Duplicated(x, d))
    np.testing.assert_allclose(
        tout, directional_fd(lambda x: oracle(x, x, x, 3), (x,), (d,)), rtol=1e-7, atol=1e-7)
    # The same array as q and k, each with its own shadow: each gets its own path only.
    dq, dk = np.zeros_like(x), np.zeros_like(x)
    v = rnd((7, 3), 2)
    autodiff(Reverse, lambda q, k: np.sum(kernels.swa_attention(q, k, v, 3) * weight), Active,
             Duplicated(x, dq), Duplicated(x, dk))
    (gq, gk, _), = autodiff(Reverse, lambda q, k, v: np.sum(kernels.swa_attention(q, k, v, 3)
                                                            * weight),
                            Active, Active(x.copy()), Active(x.copy()), Const(v))
    np.testing.assert_allclose(dq, gq, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(dk, gk, rtol=1e-12, atol=1e-14)
    assert np.max(np.abs(dq - dk)) > 1e-3


def test_transposed_and_reversed_views_with_view_shadows():
    q = rnd((3, 8), 0).T                        # transposed
    k = rnd((8, 3), 1)[::-1]                    # negative row stride
    v = rnd((8, 6), 2)[::-1, ::-2]              # both strides negative, step 2
    weight = rnd((8, 3), 9)
    dq, dk, dv = np.zeros((3, 8)).T, np.zeros((8, 3))[::-1], np.zeros((8, 6))[:, ::2]
    autodiff(Reverse, lambda q, k, v: np.sum(kernels.swa_attention(q, k, v, 3) * weight),
             Active, Duplicated(q, dq), Duplicated(k, dk), Duplicated(v, dv))
    plain = [np.ascontiguousarray(a) for a in (q, k, v)]
    (gq, gk, gv), = autodiff(Reverse, lambda q, k, v: np.sum(kernels.swa_attention(q, k, v, 3)
                                                             * weight),
                             Active, *[Active(a) for a in plain])
    for got, want in ((dq, gq), (dk, gk), (dv, gv)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    check_reverse(lambda q, k, v: kernels.swa_attention(q, k, v, 3), [q, k, v], 3, weight)
    check_forward(lambda q, k, v: kernels.swa_attention(q, k, v, 3), [q, k, v], 3)
    tq = rnd((3, 8), 7).T
    t, = autodiff(Forward, lambda q: kernels.swa_attention(q, k, v, 3),
                  BatchDuplicated(q, (tq, tq[::-1])))
    for ti, d in zip(t, (tq, tq[::-1])):
        want = directional_fd(lambda q, k, v: oracle(q, k, v, 3), plain,
                              (d, np.zeros((8, 3)), np.zeros((8, 3))))
        np.testing.assert_allclose(ti, want, rtol=1e-7, atol=1e-7)


# -- large scores --------------------------------------------------------------------------------

def test_scores_near_a_thousand_do_not_overflow():
    # Every score is 1000 + O(1): exp would overflow without the max shift; the softmax is
    # still spread over the window, so the gradients are O(1) and checkable.
    s, hd, window = 10, 4, 4
    u = np.full(hd, 1 / np.sqrt(hd))
    q = 1000 * np.sqrt(hd) * u + 0.5 * rnd((s, hd), 0)
    k = u + 5e-4 * rnd((s, hd), 1)
    v, weight = rnd((s, hd), 2), rnd((s, hd), 9)
    scores = q @ k.T / np.sqrt(hd)
    assert scores.min() > 990
    fn = lambda q, k, v: kernels.swa_attention(q, k, v, window)   # noqa: E731
    np.testing.assert_allclose(fn(q, k, v), oracle_rows(q, k, v, window), rtol=1e-12, atol=1e-12)
    g, = autodiff(Reverse, lambda q, k, v: np.sum(fn(q, k, v) * weight), Active,
                  Active(q), Active(k), Active(v))
    loss = lambda q, k, v: np.sum(oracle(q, k, v, window) * weight)   # noqa: E731
    for i, h in enumerate((1e-3, 1e-7, 1e-4)):      # a score moves by ~1000 h along k
        d = [np.zeros((s, hd))] * 3
        d[i] = rnd((s, hd), 30 + i)
        want = directional_fd(loss, (q, k, v), d, h=h)
        terms = np.sqrt(np.sum((g[i] * d[i]) ** 2))
        assert abs(np.sum(g[i] * d[i]) - want) < 1e-6 * terms, (i, want)
    f32 = [a.astype(np.float32) for a in (q, k, v)]
    out32 = fn(*f32)
    assert out32.dtype == np.float32 and np.all(np.isfinite(out32))
    want32 = oracle_rows(*[a.astype(np.float64) for a in f32], window)
    # float32 scores of ~1000 carry an absolute error of ~1e-4: the weights move by as much.
    np.testing.assert_allclose(out32, want32, atol=2e-3)


# -- bad arguments -------------------------------------------------------------------------------

@pytest.mark.parametrize("window,error,match", [
    (-3, ValueError, "window must be >= 1"), (True, TypeError, "window must be an int"),
    (None, TypeError, "window must be an int"), ("3", TypeError, "window must be an int"),
    (np.float64(2.0), TypeError, "window must be an int")])
def test_bad_windows_are_named(window, error, match):
    q = rnd((4, 2), 0)
    with pytest.raises(error, match=match):
        kernels.swa_attention(q, q, q, window)


def test_numpy_integer_window_is_accepted():
    q, k, v = (rnd((5, 2), i) for i in range(3))
    np.testing.assert_allclose(kernels.swa_attention(q, k, v, np.int32(2)), oracle(q, k, v, 2),
                               rtol=1e-12, atol=1e-12)


def test_bad_arrays_are_named():
    q = rnd((2, 4, 2), 0)
    with pytest.raises(TypeError, match="`k` has dtype int64"):
        kernels.swa_attention(q, q.astype(np.int64), q, 2)
    with pytest.raises(ValueError, match=r"`v` must have shape \(2, 4, 2\).*got \(1, 4, 2\)"):
        kernels.swa_attention(q, q, q[:1], 2)       # no broadcasting over leading axes
    with pytest.raises(TypeError, match="`q` must be a floating-point array"):
        kernels.swa_attention(q.tolist(), q, q, 2)


# -- non-finite tokens a query does not attend to ------------------------------------------------
# A query only sees its window, so a NaN or inf in a later token (or one that has left the
# window) must not reach it. A block multiplies its whole band by the weights, masked ones
# zero, and 0 * inf = NaN would carry the non-finite value into every row of the block.

def _future_nan(which, s=4, hd=2):
    args = [rnd((s, hd), i) for i in range(3)]
    args[which][-1] = np.nan
    return args


def test_future_value_nan_does_not_reach_earlier_outputs():
    q, k, v = _future_nan(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        out = kernels.swa_attention(q, k, v, 4)
    np.testing.assert_allclose(out[:3], oracle_rows(q, k, v, 4)[:3], rtol=1e-12, atol=1e-12)


def test_value_out_of_the_window_does_not_reach_later_outputs():
    s, window = 80, 2
    q, k, v = (rnd((s, 2), i) for i in range(3))
    v[0] = np.inf
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        out = kernels.swa_attention(q, k, v, window)
    assert attention.block_rows(window) == 32
    bad = np.flatnonzero(~np.all(np.isfinite(out), axis=-1))
    assert bad.tolist() == [0, 1]       # only the queries whose window holds token 0


def test_future_key_nan_does_not_reach_earlier_query_gradients():
    q, k, v = _future_nan(1)
    weight = np.ones((4, 2))
    weight[-1] = 0.0                    # the loss reads the first three outputs only
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        (dq,), = autodiff(Reverse, lambda q: np.sum(kernels.swa_attention(q, k, v, 4) * weight),
                          Active, Active(q))
    loss = lambda q, k, v: np.sum(oracle_rows(q, k, v, 4)[:3])   # noqa: E731
    d = rnd((4, 2), 7)
    d[-1] = 0.0
    want = directional_fd(loss, (q, k, v), (d, np.zeros((4, 2)), np.zeros((4, 2))))
    assert np.all(np.isfinite(dq[:3]))
    assert abs(np.sum(dq[:3] * d[:3]) - want) < 1e-7 * max(1, abs(want))


def test_future_key_nan_does_not_reach_earlier_tangents():
    q, k, v = _future_nan(1)
    tq = rnd((4, 2), 7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        tout, = autodiff(Forward, lambda q: kernels.swa_attention(q, k, v, 4), Duplicated(q, tq))
    want = directional_fd(lambda q, k, v: oracle_rows(q, k, v, 4), (q, k, v),
                          (tq, np.zeros((4, 2)), np.zeros((4, 2))))
    np.testing.assert_allclose(tout[:3], want[:3], rtol=1e-7, atol=1e-7)


def test_value_out_of_the_window_does_not_reach_later_gradients():
    # v[0] = inf reaches outputs 0 and 1 only; the loss does not read them, so the gradients
    # of every later token are those of any finite v[0] (the rows of other blocks bit for bit).
    s, window = 80, 2
    q, k, v = (rnd((s, 2), i) for i in range(3))
    weight = rnd((s, 2), 9)
    weight[:2] = 0.0
    f = lambda q, k, v: np.sum(kernels.swa_attention(q, k, v, window) * weight)   # noqa: E731
    (want,), = [autodiff(Reverse, f, Active, Active(q), Active(k), Active(v))]
    v[0] = np.inf
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        (got,), = [autodiff(Reverse, f, Active, Active(q), Active(k), Active(v))]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g[2:], w[2:], rtol=1e-12, atol=1e-14)
        np.testing.assert_array_equal(g[32:], w[32:])
    assert not np.all(np.isfinite(got[1][:2]))      # dk of tokens 0, 1: 0 * inf in D_0, D_1


def test_non_finite_block_leaves_the_other_blocks_bit_identical():
    s, hd, window = 80, 3, 5
    q, k, v, tq = (rnd((2, s, hd), i) for i in range(4))
    dout = rnd((2, s, hd), 9)
    fin = attention.swa_forward(q, k, v, window)
    fin_b = attention.swa_backward(q, k, v, *fin, dout, window, (True, True, True))
    fin_t = attention.swa_jvp(q, k, v, tq, None, None, window)
    k[1, 70] = np.nan                   # sequence 1, last block (rows 64..79, keys 60..79)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        nan = attention.swa_forward(q, k, v, window)
        nan_b = attention.swa_backward(q, k, v, *nan, dout, window, (True, True, True))
        nan_t = attention.swa_jvp(q, k, v, tq, None, None, window)
    for a, b in zip(fin + fin_b + fin_t, nan + nan_b + nan_t):
        np.testing.assert_array_equal(a[:, :60], b[:, :60])     # the blocks before it
        np.testing.assert_allclose(a[0], b[0], rtol=1e-12, atol=1e-14)    # walked row by row
        # (dk, dv of keys 66..69 are NaN: queries 70..74 attend them with a NaN row.)
        np.testing.assert_allclose(a[1, 60:66], b[1, 60:66], rtol=1e-12, atol=1e-14)
    assert np.all(np.isnan(nan[0][1, 70:75])) and np.all(np.isfinite(nan[0][1, 75:]))
    rows = oracle_rows(q[1], k[1], v[1], window)
    np.testing.assert_allclose(nan[0][1, 75:], rows[75:], rtol=1e-12, atol=1e-12)
