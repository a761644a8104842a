"""Batch mode over the rule tables: for each primitive, lane w of a BatchDuplicated forward
(reverse) call equals the Duplicated call with tangent (seed) w, for widths 1, 2 and 5 and the
dtypes the rule supports; the compiled batched calls equal eager batch mode."""
import copy
import zlib

import numpy as np
import pytest

import tape
import tape.scipy.linalg as tsl
import tape.scipy.special as tss
from tape import (Active, BatchDuplicated, Const, Duplicated, Forward, ForwardWithPrimal, Reverse,
                  ReverseWithPrimal, autodiff)

WIDTHS = (1, 2, 5)
TOL = {np.float64: (1e-10, 1e-12), np.float32: (2e-4, 2e-5), np.complex128: (1e-10, 1e-12)}
F64, F32, C128 = np.float64, np.float32, np.complex128
REAL, ALL = (F64, F32), (F64, F32, C128)


def _rng(*key):
    return np.random.default_rng([zlib.crc32(str(k).encode()) for k in key])


def _draw(rng, shape, dtype):
    x = rng.uniform(-1.0, 1.0, shape)
    if dtype == C128:
        x = x + 1j * rng.uniform(-1.0, 1.0, shape)
    return x.astype(dtype)


def _close(got, want, dtype, what):
    rtol, atol = TOL[dtype]
    assert np.shape(got) == np.shape(want), what
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what)


# --------------------------------------------------------------------------------------------
# The cases: name -> (f of one array, make(rng, dtype) -> x, dtypes)

M = np.random.default_rng(7).uniform(-1, 1, (3, 3))
V4 = np.random.default_rng(8).uniform(-1, 1, 4)
IDX = np.array([2, 0, 2, 1])
MASK = np.array([[True, False, True], [False, True, True], [True, True, False], [False] * 3])


def _x(shape, lo=-1.0, hi=1.0):
    def make(rng, dtype):
        x = rng.uniform(lo, hi, shape)
        if dtype == C128:
            x = x + 1j * rng.uniform(lo, hi, shape)
        return x.astype(dtype)
    return make


def _ties(rng, dtype):
    """A 4x3 array with ties along both axes (maximum/minimum/max/sort at ties)."""
    return np.array([[0.5, 0.5, -0.2], [0.5, 0.1, -0.2], [0.3, 0.3, 0.3], [-1., 0.7, 0.7]],
                    dtype) + 0 * rng.uniform()


def _spd(rng, dtype):
    a = rng.uniform(-1, 1, (3, 3))
    if dtype == C128:
        a = a + 1j * rng.uniform(-1, 1, (3, 3))
    return (a @ a.conj().T + 3 * np.eye(3)).astype(dtype)


def _well(rng, dtype):
    return (_x((3, 3))(rng, dtype) + 3 * np.eye(3)).astype(dtype)


def _pos(shape, lo=0.3, hi=2.0):
    return lambda rng, dtype: rng.uniform(lo, hi, shape).astype(dtype)


def _addat(x):
    out = np.zeros_like(x[:3])
    np.add.at(out, IDX, x)
    return out * x[:3]


def _take_sorted(x):
    order = np.argsort(x[:, 0])
    return np.take_along_axis(x, np.argsort(x, axis=0), axis=0) * 2 + x[order]


def _stack_split(x):
    a, b = np.split(x, [1], axis=1)
    parts = np.array_split(x, 3, axis=0)
    return np.concatenate([np.stack([a[:, 0], b[:, 1]], axis=-1), parts[0][:1, :2] * a[:1]],
                          axis=0).ravel() + np.hstack([parts[1].ravel()[:3],
                                                       parts[2].ravel()[:3]]).sum()


def _nonadjacent(x):
    return x[[0, 2], :, [1, 0]] * x[1, [0, 1], 1:][..., 0]


CASES = {
    # ufuncs
    "sin_exp": (lambda x: np.sin(x) * np.exp(x) + np.tanh(x) ** 2, _x(5), ALL),
    "log_sqrt_pos": (lambda x: np.log(x) + np.sqrt(x) + np.cbrt(x) + np.log1p(x), _pos(5), REAL),
    "arctan2_hypot": (lambda x: np.arctan2(x, V4[:1] + x[::-1]) + np.hypot(x, 0.5), _x(4), REAL),
    "power_pairs": (lambda x: np.power(np.abs(x) + 0.5, x) + x ** 3 + 2.0 ** x, _x(4), REAL),
    "complex_power": (lambda x: x ** 2.5 + np.power(x, x[::-1]), _x(4), (C128,)),
    "logaddexp": (lambda x: np.logaddexp(x, x[::-1]) + np.logaddexp2(x, 0.3), _x(4), REAL),
    "maximum_ties": (lambda x: np.maximum(x, x[:, ::-1]) + np.minimum(x, 0.5)
                     + np.fmax(x, x[::-1]) - np.fmin(x, 0.3), _ties, REAL),
    "abs_sign": (lambda x: np.abs(x) * np.sign(x) + np.abs(x) ** 2, _x(5), ALL),
    "divide_mod": (lambda x: x / (x[::-1] + 2.0) + np.remainder(x, 0.3) + np.floor_divide(x, 0.3)
                   + np.fmod(x, 0.4), _x(5), REAL),
    "conj_real_imag": (lambda x: np.conj(x) * x + np.real(x) * np.imag(x) + np.angle(x),
                       _x(4), (C128,)),
    "expm1_sinh_arcsinh": (lambda x: np.expm1(x) * np.sinh(x) + np.arcsinh(x) + np.arctanh(x / 2),
                           _x(5), ALL),
    # reductions
    "sum_axis_keepdims": (lambda x: x * np.sum(x, axis=(0,), keepdims=True)
                          + np.sum(x ** 2, axis=-1, keepdims=True), _x((4, 3)), ALL),
    "mean_where": (lambda x: np.mean(x, axis=1, where=MASK | [True, False, False]) + np.sum(
        x, where=MASK, axis=0).sum(), _x((4, 3)), ALL),
    "max_keepdims_ties": (lambda x: np.max(x, axis=0, keepdims=True) * x
                          + np.min(x, axis=1, keepdims=True) + np.amax(x), _ties, REAL),
    "min_where_initial": (lambda x: np.min(x, axis=1, where=MASK | np.array([True, False, False]),
                                           initial=5.0), _x((4, 3)), REAL),
    "prod_var_std": (lambda x: np.prod(x, axis=1) + np.var(x, axis=1, ddof=1)
                     + np.std(x, axis=1), _x((4, 3)), REAL),
    "complex_var": (lambda x: np.var(x, axis=0) + np.prod(x, axis=0), _x((4, 3)), (C128,)),
    "nan_reductions": (lambda x: np.nansum(x, axis=0) + np.nanmean(x, axis=0)
                       + np.nanmax(x, axis=0) + np.nanprod(x, axis=0), _x((4, 3)), REAL),
    "median_quantile": (lambda x: np.median(x, axis=0) + np.quantile(x, 0.3, axis=0)
                        + np.percentile(x, 70, axis=0), _x((4, 3)), REAL),
    "average_ptp": (lambda x: np.average(x, axis=0, weights=[1., 2., 3., 4.]) + np.ptp(x, axis=0),
                    _x((4, 3)), REAL),
    "ufunc_reduce": (lambda x: np.add.reduce(x, axis=1) + np.multiply.reduce(x, axis=1)
                     + np.maximum.reduce(x, axis=1), _x((4, 3)), REAL),
    # cumulative
    "cumsum_axes": (lambda x: np.cumsum(x, axis=0) * np.cumprod(x, axis=1)
                    + np.cumsum(x).reshape(4, 3), _x((4, 3)), ALL),
    "accumulate": (lambda x: np.maximum.accumulate(x, axis=0) + np.add.accumulate(x, axis=1)
                   + np.nancumsum(x, axis=1), _x((4, 3)), REAL),
    "diff_ediff_trapz": (lambda x: np.concatenate([np.diff(x, n=2), np.ediff1d(x),
                                                   [np.trapezoid(x)]]), _x(6), REAL),
    # sorting
    "sort_partition": (lambda x: np.sort(x, axis=0) + np.partition(x, 1, axis=1), _x((4, 3)), REAL),
    "argsort_take": (_take_sorted, _x((4, 3)), REAL),
    "sort_ties": (lambda x: np.sort(x, axis=1) * np.sort(x, axis=None).reshape(4, 3), _ties, REAL),
    # indexing
    "fancy_getitem": (lambda x: x[[0, 2, 2], [1, 1, 0]] + x[:, [2, 0]].sum(0)[0]
                      + x[IDX % 3][:3, 0], _x((4, 3)), ALL),
    "boolean_getitem": (lambda x: x[MASK] * x[MASK[:, 0]].sum() + x[x.real > 0].sum(),
                        _x((4, 3)), ALL),
    "nonadjacent_advanced": (_nonadjacent, _x((3, 2, 2)), ALL),
    "newaxis_ellipsis": (lambda x: (x[..., None] * x[:, None, 1:2])[1:, ..., 0]
                         + x[::-2][:, None, 0].sum(), _x((4, 3)), ALL),
    "take_compress_choose": (lambda x: np.take(x, IDX, axis=0)[:, 1] + np.compress(
        [True, False, True, True], x, axis=0)[0, 0] + np.choose([0, 1, 0], x[:2]).sum(),
        _x((4, 3)), REAL),
    "add_at": (_addat, _x(4), ALL),
    "where_clip": (lambda x: np.where(x > 0, x ** 2, -x) + np.clip(x, -0.3, 0.4)
                   + np.clip(x, x[::-1], None), _x(6), REAL),
    "clip_ties": (lambda x: np.clip(x, 0.3, 0.5) * x, _ties, REAL),
    # contractions
    "einsum_forms": (lambda x: np.einsum("ij,jk->ik", x, M) + np.einsum("ii->", x) * x
                     + np.einsum("ij,ij->i", x, x)[:, None] + np.einsum("...ij->...ji", x),
                     _x((3, 3)), ALL),
    "einsum_implicit": (lambda x: np.einsum("ij,jk", x, x) + np.einsum("ji", x), _x((3, 3)), REAL),
    "matmul_dot_tensordot": (lambda x: x @ M + np.dot(x, M[0]) + np.tensordot(x, M, axes=([1], [0]))
                             + np.tensordot(M, x, axes=1) + x.T @ x, _x((3, 3)), ALL),
    "stacked_matmul": (lambda x: (x @ x.swapaxes(-1, -2)).ravel()[:6]
                       + np.matmul(M[0], x).ravel()[:6],
                       _x((2, 3, 3)), ALL),
    "inner_outer_kron_vdot": (lambda x: np.outer(x, V4).ravel() + np.inner(x, x) + np.kron(
        x[:2], x[2:]).sum() + np.vdot(x, V4) + np.cross(x[:3], x[1:]).sum(), _x(4), ALL),
    "trace_diag_triu": (lambda x: np.trace(x) + np.diagonal(x) @ x + np.diag(np.diag(x)).ravel()[:3]
                        + np.triu(x, 1).sum(0) + np.tril(x).sum(1), _x((3, 3)), ALL),
    # linalg
    "solve_inv": (lambda x: np.linalg.solve(x, V4[:3]) + np.linalg.inv(x)[0]
                  + np.linalg.solve(x, M).ravel()[:3], _well, ALL),
    "solve_against_x": (lambda x: np.linalg.solve(M + 3 * np.eye(3), x).ravel(), _x((3, 2)), ALL),
    "det_slogdet": (lambda x: np.linalg.det(x) * x[0] + np.linalg.slogdet(x)[1], _well, REAL),
    "complex_det": (lambda x: np.linalg.det(x) * x[0] + np.linalg.slogdet(x)[1], _well, (C128,)),
    "eigh": (lambda x: np.linalg.eigh(x)[0] + np.abs(np.linalg.eigh(x)[1][0])
             + np.linalg.eigvalsh(x), _spd, REAL),
    "svd": (lambda x: np.linalg.svd(x, compute_uv=False) + np.abs(np.linalg.svd(x)[0][:, 0])
            + np.linalg.norm(x, "nuc") + np.linalg.norm(x, 2), _well, REAL),
    "cholesky_qr": (lambda x: np.linalg.cholesky(x).ravel() + np.linalg.qr(x)[1].ravel(),
                    _spd, ALL),
    "lstsq_pinv": (lambda x: np.linalg.lstsq(x, V4, rcond=None)[0]
                   + np.linalg.pinv(x).sum(axis=1), _x((4, 3)), REAL),
    "norms": (lambda x: np.linalg.norm(x, axis=1) + np.linalg.norm(x) + np.linalg.norm(x, "fro")
              + np.linalg.norm(x, 1, axis=1) + np.linalg.norm(x, np.inf, axis=1), _x((4, 3)), ALL),
    "matrix_power_multi_dot": (lambda x: np.linalg.matrix_power(x, 3) + np.linalg.multi_dot(
        [x, M, x]), _x((3, 3)), ALL),
    "stacked_solve_det": (lambda x: np.linalg.solve(x, x[..., :1]).ravel()
                          + np.repeat(np.linalg.det(x), 3), _x((2, 3, 3), 0.2, 1.5), REAL),
    # fft
    "fft_ifft": (lambda x: np.fft.ifft(np.fft.fft(x) * V4[0]) + np.fft.fft(x, n=6)[:4], _x(4),
                 ALL),
    "rfft_irfft": (lambda x: np.fft.irfft(np.fft.rfft(x) * 2j, n=6) + np.abs(np.fft.rfft(x)).sum(),
                   _x(6), REAL),
    "fft2_rfftn_shift": (lambda x: np.real(np.fft.fft2(x)) + np.fft.fftshift(x, axes=0)
                         + np.abs(np.fft.rfftn(x)).sum() + np.real(np.fft.ifftn(x, axes=(1,))),
                         _x((4, 4)), REAL),
    "hfft": (lambda x: np.fft.hfft(x, n=6) + np.fft.ihfft(np.real(x)).real.sum(), _x(4), (C128,)),
    # joins, moves, pads
    "pad_modes": (lambda x: np.concatenate([np.pad(x, 2), np.pad(x, (1, 2), mode="reflect"),
                                            np.pad(x, 1, mode="edge"), np.pad(x, 2, mode="wrap"),
                                            np.pad(x, 1, mode="symmetric")]), _x(4), ALL),
    "pad_2d": (lambda x: np.pad(x, ((1, 0), (0, 2)), mode="constant", constant_values=0.5).ravel()
               + np.pad(x, 1, mode="edge").sum(), _x((2, 3)), ALL),
    "roll_flip_rot90": (lambda x: np.roll(x, 1, axis=1) + np.roll(x, -2) + np.flip(x, 0)
                        + np.rot90(x, 2), _x((3, 3)), ALL),
    "stack_split": (_stack_split, _x((3, 3)), ALL),
    "concat_const": (lambda x: np.concatenate([x, M[:2]], axis=1).ravel()[:9]
                     + np.vstack([x, M[0]]).ravel(), _x((2, 3)), ALL),
    "tile_repeat_broadcast": (lambda x: np.tile(x, 2)[:6] * np.repeat(x, 2)[::-1]
                              + np.broadcast_to(x, (2, 3)).ravel()[:6].sum(), _x(3), ALL),
    "moves": (lambda x: np.moveaxis(x, 0, -1).ravel() + np.swapaxes(x, 0, 2).ravel()
              + np.expand_dims(x, 1).squeeze().ravel() + x.transpose(1, 2, 0).ravel(),
              _x((2, 3, 2)), ALL),
    "sliding_window": (lambda x: np.lib.stride_tricks.sliding_window_view(x, 3).sum(axis=1),
                       _x(6), REAL),
    # scipy
    "special_gamma": (lambda x: tss.gammaln(x) + tss.digamma(x) + tss.polygamma(1, x)
                      + tss.betaln(x, x[::-1]) + tss.gamma(x), _pos(4, 0.5, 2.5), REAL),
    "special_erf_ndtr": (lambda x: tss.erf(x) + tss.erfc(x) + tss.ndtr(x) + tss.log_ndtr(x)
                         + tss.expit(x) + tss.erfinv(x / 2), _x(5), REAL),
    "special_entr": (lambda x: tss.xlogy(x, x[::-1]) + tss.xlog1py(x, x) + tss.entr(x)
                     + tss.rel_entr(x, 0.5) + tss.kl_div(x, 0.4) + tss.logit(x / 3),
                     _pos(4, 0.1, 1.5), REAL),
    "special_bessel": (lambda x: tss.i0(x) + tss.i0e(x) + tss.i1(x) + tss.j0(x), _x(5), REAL),
    "logsumexp_softmax": (lambda x: tss.logsumexp(x, axis=1)[:, None] + tss.softmax(x, axis=0)
                          + tss.log_softmax(x, axis=1), _x((4, 3)), REAL),
    "complex_logsumexp": (lambda x: tss.logsumexp(x, axis=0) * x[0], _x((4, 3)), (C128,)),
    "scipy_linalg_solvers": (lambda x: tsl.solve_triangular(np.triu(x), V4[:3])
                             + tsl.solve(x, V4[:3])
                             + tsl.lu_solve(tsl.lu_factor(x), V4[1:]) + tsl.inv(x)[1]
                             + tsl.det(x), _well, REAL),
    "scipy_linalg_spd": (lambda x: tsl.cho_solve(tsl.cho_factor(x), V4[:3]) + tsl.cholesky(x)[2]
                         + tsl.eigh(x)[0] + tsl.eigvalsh(x) + tsl.svdvals(x), _spd, REAL),
    "scipy_linalg_matfuncs": (lambda x: tsl.expm(x / 3).ravel() + tsl.sqrtm(x).real.ravel()
                              + tsl.qr(x)[1].ravel() + tsl.norm(x), _spd, REAL),
    "scipy_sylvester": (lambda x: tsl.solve_sylvester(x, M + 3 * np.eye(3), M).ravel()
                        + tsl.solve_continuous_lyapunov(-x, M @ M.T).ravel(), _spd, REAL),
}


def _cases(dtypes=ALL):
    return [pytest.param(name, d, id=f"{name}-{np.dtype(d).name}")
            for name, (f, make, supported) in CASES.items() for d in supported if d in dtypes]


def _forward_lanes(f, x, dirs, dtype):
    xb = x.copy()
    got = autodiff(Forward, f, BatchDuplicated(xb, tuple(d.copy() for d in dirs)))[0]
    assert isinstance(got, tuple) and len(got) == len(dirs)
    for w, d in enumerate(dirs):
        want = autodiff(Forward, f, Duplicated(x.copy(), d.copy()))[0]
        _close(got[w], want, dtype, f"tangent of lane {w}")
    return got


def _into(f):
    def into(y, x):
        y[...] = f(x)
    return into


def _reverse_lanes(f, x, seeds, dtype):
    width = len(seeds)
    y = np.zeros_like(seeds[0])
    ys, xs = tuple(s.copy() for s in seeds), tuple(np.zeros_like(x) for _ in range(width))
    autodiff(Reverse, _into(f), Const, BatchDuplicated(y, ys), BatchDuplicated(x.copy(), xs))
    for w in range(width):
        dy, dx = seeds[w].copy(), np.zeros_like(x)
        autodiff(Reverse, _into(f), Const, Duplicated(np.zeros_like(y), dy),
                 Duplicated(x.copy(), dx))
        _close(xs[w], dx, dtype, f"gradient of lane {w}")
        _close(ys[w], dy, dtype, f"output seed of lane {w} (zeroed)")
    return xs


@pytest.mark.parametrize("name,dtype", _cases())
def test_forward_lanes_equal_single_tangents(name, dtype):
    f, make, _ = CASES[name]
    rng = _rng(name, "forward", np.dtype(dtype).name)
    x = make(rng, dtype)
    for width in WIDTHS:
        _forward_lanes(f, x, tuple(_draw(rng, x.shape, dtype) for _ in range(width)), dtype)


@pytest.mark.parametrize("name,dtype", _cases())
def test_reverse_lanes_equal_single_sweeps(name, dtype):
    f, make, _ = CASES[name]
    rng = _rng(name, "reverse", np.dtype(dtype).name)
    x = make(rng, dtype)
    out = np.asarray(f(x))
    for width in WIDTHS:
        _reverse_lanes(f, x, tuple(_draw(rng, out.shape, out.dtype.type) for _ in range(width)),
                       dtype)


@pytest.mark.parametrize("name,dtype", _cases((F64,)))
def test_batched_forward_and_reverse_are_adjoint_and_match_differences(name, dtype):
    """<seed_w, J dir_w> from the batched forward equals <J^T seed_w, dir_w> from the batched
    reverse, and lane 0's tangent is the central difference: the lanes are not only equal to the
    unbatched call but right."""
    f, make, _ = CASES[name]
    rng = _rng(name, "adjoint")
    x = make(rng, dtype)
    out = np.asarray(f(x))
    dirs = tuple(_draw(rng, x.shape, dtype) for _ in range(2))
    seeds = tuple(_draw(rng, out.shape, out.dtype.type) for _ in range(2))
    tangents = autodiff(Forward, f, BatchDuplicated(x.copy(), copy.deepcopy(dirs)))[0]
    xs = tuple(np.zeros_like(x) for _ in range(2))
    autodiff(Reverse, _into(f), Const, BatchDuplicated(np.zeros_like(out), copy.deepcopy(seeds)),
             BatchDuplicated(x.copy(), xs))
    for t, d, s, g in zip(tangents, dirs, seeds, xs):
        assert np.isclose(np.real(np.vdot(s, t)), np.real(np.vdot(g, d)), rtol=1e-9, atol=1e-11)
    if name.endswith("ties"):
        return   # not differentiable at the ties: the lanes' equality is what is checked
    h = 1e-6
    fd = (np.asarray(f(x + h * dirs[0])) - np.asarray(f(x - h * dirs[0]))) / (2 * h)
    np.testing.assert_allclose(tangents[0], fd, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------------------------
# Compiled batched calls equal eager batch mode, over the whole sweep (float64 or the case's
# first dtype), the width changing between calls


@pytest.mark.parametrize("name", list(CASES))
def test_compiled_batched_calls_equal_eager(name):
    f, make, supported = CASES[name]
    dtype = F64 if F64 in supported else supported[0]
    rng = _rng(name, "compiled")
    forward = tape.compile(Forward, f, BatchDuplicated, BatchDuplicated)
    reverse = tape.compile(Reverse, _into(f), Const, BatchDuplicated, BatchDuplicated)
    for width in (2, 2, 5):
        x = make(rng, dtype)
        out = np.asarray(f(x))
        dirs = tuple(_draw(rng, x.shape, dtype) for _ in range(width))
        want = autodiff(Forward, f, BatchDuplicated(x.copy(), copy.deepcopy(dirs)))[0]
        got = forward(BatchDuplicated(x.copy(), copy.deepcopy(dirs)))[0]
        for w in range(width):
            _close(got[w], want[w], dtype, f"compiled tangent of lane {w}")
        seeds = tuple(_draw(rng, out.shape, out.dtype.type) for _ in range(width))
        eager, replayed = (tuple(np.zeros_like(x) for _ in range(width)) for _ in range(2))
        autodiff(Reverse, _into(f), Const,
                 BatchDuplicated(np.zeros_like(out), copy.deepcopy(seeds)),
                 BatchDuplicated(x.copy(), eager))
        reverse(BatchDuplicated(np.zeros_like(out), copy.deepcopy(seeds)),
                BatchDuplicated(x.copy(), replayed))
        for w in range(width):
            _close(replayed[w], eager[w], dtype, f"compiled gradient of lane {w}")
    assert forward.stats.eager_calls == 0 and reverse.stats.eager_calls == 0


# --------------------------------------------------------------------------------------------
# In-place writes into the batched argument itself, and Const/Active arguments beside it


def _assert_lanes(mode, f, ret, args):
    """Batched call vs one Duplicated call per lane: returns, primals and every shadow."""
    batched = copy.deepcopy(args)
    pre = () if ret is None else (ret,)
    result = autodiff(mode, f, *pre, *batched)
    width = next(len(a.dval) for a in args if isinstance(a, BatchDuplicated))
    for w in range(width):
        single = [Duplicated(copy.deepcopy(a.val), copy.deepcopy(a.dval[w]))
                  if isinstance(a, BatchDuplicated) else copy.deepcopy(a) for a in args]
        want = autodiff(mode, f, *pre, *single)
        if mode in (Forward, ForwardWithPrimal):
            if want and want[0] is not None:
                _close(result[0][w], want[0], F64, f"tangent of lane {w}")
            else:
                assert not result or result[0] is None
        else:
            for i, (d, s) in enumerate(zip(result[0], want[0])):
                if isinstance(args[i], Active):
                    _close(d[w], s, F64, f"derivative of argument {i}, lane {w}")
        if mode in (ForwardWithPrimal, ReverseWithPrimal) and len(want) > 1:
            _close(result[1], want[1], F64, "primal")
        for i, (b, s) in enumerate(zip(batched, single)):
            if isinstance(b, BatchDuplicated):
                _close(b.dval[w], s.dval, F64, f"shadow {w} of argument {i}")
                _close(b.val, s.val, F64, f"primal of argument {i}")


def _weighted(write):
    def f(x):
        write(x)
        return np.sum(x * np.arange(1.0, x.size + 1).reshape(x.shape) ** 2)
    return f


IN_PLACE = {
    "repeated_fancy_set": (lambda x: x.__setitem__([0, 0, 2], x[[1, 2, 3]] * 2), 4),
    "mask_set": (lambda x: x.__setitem__(x > 0, x[x > 0] ** 2), 5),
    "copyto_where": (lambda x: np.copyto(x, np.sin(x), where=x > 0), 5),
    "put": (lambda x: np.put(x, [0, 3], x[1:3] ** 2), 5),
    "put_along_axis": (lambda x: np.put_along_axis(x, np.array([[0], [1]]), x[:, 2:] * 3, axis=1),
                       (2, 3)),
    "fill_diagonal": (lambda x: np.fill_diagonal(x, x[0, 1] * 2), (3, 3)),
    "putmask": (lambda x: np.putmask(x, x > 0, x ** 2), 5),
    "sin_out_self": (lambda x: np.sin(x, out=x), 5),
    "add_out_overlapping_view": (lambda x: np.add(x[:2], x[2:4], out=x[1:3]), 5),
    "multiply_out_where": (lambda x: np.multiply(x, x, out=x, where=x > 0), 5),
    "cumsum_out_view": (lambda x: np.cumsum(x[:3], out=x[2:]), 5),
    "add_at_self": (lambda x: np.add.at(x, [0, 0, 1], x[2:] ** 2), 5),
    "maximum_at_self": (lambda x: np.maximum.at(x, [0, 0, 1], x[2:]), 5),
    "transposed_view_write": (lambda x: x.T.__setitem__(0, x[:, 1] * 3), (3, 3)),
    "ravel_view_write": (lambda x: x.ravel().__setitem__(slice(None, None, 2), x.ravel()[1::2]),
                         (2, 2)),
    "nonadjacent_set": (lambda x: x.__setitem__(([0, 2], slice(None), [1, 0]),
                                                x[[1, 0], :, [0, 1]] * 2), (3, 2, 2)),
    "swap_rows": (lambda x: x.__setitem__([0, 1], x[[1, 0]]), (3, 2)),
    "ipow_idiv": (lambda x: (x.__ipow__(2), x.__itruediv__(x[::-1] + 3)), 4),
}


@pytest.mark.parametrize("name", list(IN_PLACE))
@pytest.mark.parametrize("mode", [ForwardWithPrimal, ReverseWithPrimal], ids=["fwd", "rev"])
def test_in_place_writes_into_the_batched_argument(name, mode):
    write, shape = IN_PLACE[name]
    rng = _rng(name, "in_place")
    x = rng.uniform(-1, 1, shape)
    shadows = tuple(rng.uniform(-1, 1, shape) for _ in range(3))   # seeds of the written x too
    _assert_lanes(mode, _weighted(write), None if mode is ForwardWithPrimal else Active,
                  [BatchDuplicated(x, shadows)])


M3 = M + 3 * np.eye(3)


def _mixed(x, a, c, k):
    y = np.linalg.solve(a + 3 * np.eye(3), x) * c
    return np.sum(np.sort(y)[k:] ** 2) + np.sum(a * np.outer(x, x))


def _mixed_into(y, x, a, c, write):
    y[...] = a @ np.tanh(x) * c
    y[1] += np.linalg.det(a)
    if write:                    # the batched argument written after it was read
        x[0] = y[2] * x[1]


@pytest.mark.parametrize("width", WIDTHS)
def test_batched_beside_active_arrays_scalars_and_consts(width):
    rng = _rng("mixed", width)
    x = rng.uniform(-1, 1, 3)

    def lanes(shape, zero=False):
        return tuple(np.zeros(shape) if zero else rng.uniform(-1, 1, shape) for _ in range(width))
    _assert_lanes(ReverseWithPrimal, _mixed, Active,
                  [BatchDuplicated(x, lanes(3)), Active(M.copy()), Active(1.5), Const(1)])
    _assert_lanes(Reverse, _mixed_into, Const, [BatchDuplicated(np.zeros(3), lanes(3)),
                                                BatchDuplicated(x, lanes(3)), Active(M3.copy()),
                                                Active(0.7), True])
    _assert_lanes(Reverse, _mixed_into, Const, [BatchDuplicated(np.zeros(3), lanes(3)),
                                                Const(x.copy()),
                                                BatchDuplicated(M3.copy(), lanes((3, 3), True)),
                                                Const(0.7), False])
    _assert_lanes(ForwardWithPrimal, _mixed_into, None,
                  [BatchDuplicated(np.zeros(3), lanes(3, True)), BatchDuplicated(x, lanes(3)),
                   Const(M3.copy()), Const(0.7), True])


# --------------------------------------------------------------------------------------------
# Findings


@pytest.mark.parametrize("index", [(np.array([0, 2]), slice(None), 1),
                                   (1, slice(None), np.array([0, 1])),
                                   (np.array([True, False, True]), slice(None), 0)],
                         ids=["list_slice_int", "int_slice_list", "mask_slice_int"])
@pytest.mark.parametrize("width", [2, 3])
def test_forward_integer_and_array_indices_split_by_a_slice(index, width):
    rng = _rng("split_index", width, str(index))
    x = rng.uniform(-1, 1, (3, 2, 2))
    _forward_lanes(lambda x: x[index] * 2, x, tuple(rng.uniform(-1, 1, x.shape)
                                                    for _ in range(width)), F64)


def test_forward_write_with_integer_and_array_indices_split_by_a_slice():
    rng = _rng("split_index_write")
    x = rng.uniform(-1, 1, (3, 2, 2))

    def f(x):
        x[[0, 2], :, 1] = x[[1, 0], :, 0] * 2
        return x * x
    _forward_lanes(f, x, tuple(rng.uniform(-1, 1, x.shape) for _ in range(3)), F64)


def _double_where_positive():
    def reverse(cfg, x, g):
        out = g.copy()
        np.multiply(g, 2.0, out=out, where=x > 0)     # out keeps g where x <= 0
        return (out,)

    def forward(cfg, xs, ts):
        out = ts[0].copy()
        np.multiply(ts[0], 2.0, out=out, where=xs[0] > 0)
        return np.where(xs[0] > 0, 2 * xs[0], xs[0]), out
    return tape.custom_rule(lambda x: np.where(x > 0, 2 * x, x),
                            augmented_primal=lambda cfg, x: (np.where(x > 0, 2 * x, x), x),
                            reverse=reverse, forward=forward, name="double_where_positive")


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_rule_writing_into_a_batched_buffer_with_where(mode):
    rule = _double_where_positive()
    x = np.array([0.5, -1.0, 2.0, -0.3, 1.5, -2.0])
    rng = _rng("out_where", mode)
    lanes = tuple(rng.uniform(-1, 1, 6) for _ in range(3))
    factor = np.where(x > 0, 2.0, 1.0)
    if mode == "forward":
        got = autodiff(Forward, rule, BatchDuplicated(x, copy.deepcopy(lanes)))[0]
    else:
        got = tuple(np.zeros(6) for _ in range(3))
        autodiff(Reverse, _into(rule), Const, BatchDuplicated(np.zeros(6), copy.deepcopy(lanes)),
                 BatchDuplicated(x, got))
    for w in range(3):
        _close(got[w], lanes[w] * factor, F64, f"lane {w}")


def test_reverse_mask_and_integer_split_by_a_slice():
    rng = _rng("split_index_reverse")
    x = rng.uniform(-1, 1, (3, 2, 2))
    f = lambda x: x[np.array([True, False, True]), :, 0] * 2   # noqa: E731
    _reverse_lanes(f, x, tuple(rng.uniform(-1, 1, (2, 2)) for _ in range(2)), F64)


def test_rule_broadcasting_a_row_into_a_larger_batched_buffer():
    # np.multiply(row, 2, out=matrix): every row of the (2, 3) buffer gets the lane's row; with
    # the batch axis in front the row must broadcast behind it, not across the lanes
    def reverse(cfg, x, g):
        out = np.zeros((2,) + g.shape[-1:], dtype=g.dtype) + 0 * g    # a batched (2, 3) buffer
        np.multiply(g, 2.0, out=out)
        return (np.sum(out, axis=0),)

    rule = tape.custom_rule(lambda x: 4 * x, augmented_primal=lambda cfg, x: (4 * x, None),
                            reverse=reverse, name="twice_doubled")
    x = np.array([0.5, -1.0, 2.0])
    rng = _rng("out_broadcast")
    lanes = tuple(rng.uniform(-1, 1, 3) for _ in range(2))
    got = tuple(np.zeros(3) for _ in range(2))
    autodiff(Reverse, _into(rule), Const, BatchDuplicated(np.zeros(3), copy.deepcopy(lanes)),
             BatchDuplicated(x, got))
    for w in range(2):
        _close(got[w], 4 * lanes[w], F64, f"lane {w}")
