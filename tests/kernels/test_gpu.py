"""(D) On a GPU: the CUDA backend against the reference.

Skipped unless CuPy is installed and a CUDA device is usable. The CUDA results (float32) are
compared with the reference computed in float64 from the same float32 inputs: forward within
1e-5 and backward within 1e-4 (relative to the largest reference value when that exceeds 1),
for seq_len 1, nonzero initial states and d = 16, 64 and 128; two runs must agree bit for bit.
The chunked memories (`kernels.cuda_memory_chunked`: cuBLAS products and the kernels of
memory_chunked.cu) are checked the same way in float32 and float64, from one chunk to 4096
tokens, kernel by kernel against NumPy, and through the default dispatch and the tape.
Run with `sh tests/kernels/gpu_check.sh` (this suite, then the GPU benchmark).
"""
import functools
import warnings

import numpy as np
import pytest

import tokenwise
import kernels
from kernels import attention, memory
from tape import Active, Reverse, autodiff
from tape.core import config_for

cp = pytest.importorskip("cupy")
if kernels.detect_gpu() is None:
    pytest.skip("no usable CUDA device", allow_module_level=True)


@pytest.fixture(autouse=True)
def not_forced():
    before = kernels.is_reference_forced()
    kernels.force_reference(False)
    yield
    kernels.force_reference(before)


def host(x):
    return np.asarray(cp.asnumpy(x) if isinstance(x, cp.ndarray) else x, np.float64)


def assert_close(got, want, tol):
    got, want = host(got), host(want)
    assert got.shape == want.shape
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    err = float(np.max(np.abs(got - want))) if want.size else 0.0
    assert err <= tol * scale, f"max error {err:.3g} > {tol} x {scale:.3g}"


def as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def rule_vjp(prim, args, params, cotangents):
    """Outputs and gradients through the primitive's own rules (no tape involved)."""
    cfg = config_for((True,) * len(args))
    out, saved = prim.augmented_primal(cfg, *args, **params)
    cts = tuple(cotangents) if prim.multiple_results else cotangents[0]
    return as_tuple(out), prim.reverse(cfg, saved, cts)


def check_pair(prim, args_np, params, seed=0):
    """CUDA on float32 GPU arrays vs the reference on float64 host arrays; returns the CUDA
    results (for determinism checks)."""
    rng = np.random.default_rng(seed)
    args32 = [a.astype(np.float32) for a in args_np]
    args64 = [a.astype(np.float64) for a in args32]
    ref_out = as_tuple(prim(*args64, **params, backend="reference"))
    cts64 = [rng.standard_normal(o.shape) for o in ref_out]
    want_out, want_grads = rule_vjp(prim, args64, {**params, "backend": "reference"}, cts64)
    got_out, got_grads = rule_vjp(prim, [cp.asarray(a) for a in args32],
                                  {**params, "backend": "cuda"},
                                  [cp.asarray(c, dtype=cp.float32) for c in cts64])
    for g, w in zip(got_out, want_out):
        assert isinstance(g, cp.ndarray) and g.dtype == cp.float32
        assert_close(g, w, 1e-5)
    for g, w in zip(got_grads, want_grads):
        assert_close(g, w, 1e-4)
    return got_out + tuple(got_grads)


memory_args = functools.partial(tokenwise.memory_args, lead=(3,))


PRIMS = {"delta": memory._delta, "titans": memory._titans, "hebbian": memory._hebbian}
PUBLIC = {"delta": kernels.delta_rule, "titans": kernels.titans_rule,
          "hebbian": kernels.hebbian_rule}


def test_detection_selects_cuda():
    gpu = kernels.detect_gpu()
    assert gpu.name and len(gpu.compute_capability) == 2
    assert kernels.select_backend(gpu) == "cuda"
    assert "kernel backend: cuda" in kernels.info()


@pytest.mark.parametrize("rule", PRIMS)
@pytest.mark.parametrize("d", [16, 64, 128])
@pytest.mark.parametrize("s,checkpoint_every", [(1, None), (37, None), (37, 8)])
def test_memory_rules_match_reference(rule, d, s, checkpoint_every):
    a = check_pair(PRIMS[rule], memory_args(rule, s, d, seed=d + s),
                   {"checkpoint_every": checkpoint_every})
    b = check_pair(PRIMS[rule], memory_args(rule, s, d, seed=d + s),
                   {"checkpoint_every": checkpoint_every})
    for x, y in zip(a, b):
        assert bool(cp.array_equal(x, y)), "two runs differ"


@pytest.mark.parametrize("hd", [16, 64, 128])
@pytest.mark.parametrize("s,window", [(1, 1), (37, 5), (300, 64), (70, 1000)])
def test_swa_matches_reference(hd, s, window):
    rng = np.random.default_rng(hd + s)
    args = [rng.standard_normal((2, 3, s, hd)) for _ in range(3)]
    a = check_pair(attention._swa, args, {"window": window, "storage": "f32"})
    b = check_pair(attention._swa, args, {"window": window, "storage": "f32"})
    for x, y in zip(a, b):
        assert bool(cp.array_equal(x, y)), "two runs differ"


@pytest.mark.parametrize("hd", [64, 128])
def test_swa_bf16_matches_reference_rounding(hd):
    rng = np.random.default_rng(hd)
    args = [rng.standard_normal((2, 45, hd)).astype(np.float32) for _ in range(3)]
    rounded = [attention.round_bf16(np, a).astype(np.float64) for a in args]
    cts = [rng.standard_normal((2, 45, hd))]
    want_out, want_grads = rule_vjp(attention._swa, rounded,
                                    {"window": 9, "backend": "reference"}, cts)
    got_out, got_grads = rule_vjp(attention._swa, [cp.asarray(a) for a in args],
                                  {"window": 9, "storage": "bf16", "backend": "cuda"},
                                  [cp.asarray(cts[0], dtype=cp.float32)])
    assert_close(got_out[0], want_out[0], 1e-5)
    for g, w in zip(got_grads, want_grads):
        assert_close(g, w, 1e-4)


def assert_gpu_gradients_match(model, x, W):
    """The gradients of `model(m0, x, *W)` with float32 CuPy inputs are CuPy arrays equal to
    the float64 NumPy ones within float32 accuracy."""
    want, = autodiff(Reverse, lambda *a: model(np.zeros((32, 32)), *a), Active,
                     *map(Active, [x] + W))
    gpu_args = [cp.asarray(a, dtype=cp.float32) for a in [x] + W]
    m0 = cp.zeros((32, 32), dtype=cp.float32)
    got, = autodiff(Reverse, lambda *a: model(m0, *a), Active, *map(Active, gpu_args))
    for g, w in zip(got, want):
        assert isinstance(g, cp.ndarray)
        assert_close(g, w, 1e-4)


def test_public_api_picks_cuda_and_differentiates_through_the_tape():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((12, 32))
    W = [rng.standard_normal((32, 32)) * 0.2 for _ in range(3)]

    # Plain NumPy calls: on traced values they dispatch to the primal's module (CuPy here).
    def model(m0, x, W_q, W_k, W_v):
        q, k, v = x @ W_q, x @ W_k, x @ W_v
        out = kernels.swa_attention(q, k, v, 4)
        gates = 1 / (1 + np.exp(-out[:, 0]))
        y, m = kernels.delta_rule(k, v, q, gates * 0.1, gates * 0.5, m0)
        return np.sum(out * out) + np.sum(y * y) + np.sum(m)

    assert_gpu_gradients_match(model, x, W)


def test_reference_forced_runs_on_gpu_arrays():
    args = memory_args("titans", 9, 16)
    want = kernels.titans_rule(*args)
    with kernels.force_reference():
        got = kernels.titans_rule(*[cp.asarray(a) for a in args])          # float64 on GPU
        got32 = kernels.titans_rule(*[cp.asarray(a, dtype=cp.float32) for a in args])
        q = cp.asarray(args[0], dtype=cp.float32)
        out = kernels.swa_attention(q, q, q, 3)
    for g, g32, w in zip(got, got32, want):
        assert isinstance(g, cp.ndarray)
        assert_close(g, w, 1e-12)
        assert_close(g32, w, 1e-5)
    assert_close(out, kernels.swa_attention(args[0], args[0], args[0], 3), 1e-5)


def test_float64_gpu_arrays_use_the_reference():
    args = memory_args("delta", 5, 16)
    got = kernels.delta_rule(*[cp.asarray(a) for a in args])
    for g, w in zip(got, kernels.delta_rule(*args)):
        assert g.dtype == cp.float64
        assert_close(g, w, 1e-12)


def test_head_dim_over_the_maximum_falls_back_with_a_warning():
    rng = np.random.default_rng(1)
    q = rng.standard_normal((7, 160)).astype(np.float32)
    with pytest.warns(RuntimeWarning, match="exceeds the CUDA kernels' maximum"):
        out = kernels.swa_attention(*[cp.asarray(q)] * 3, 3)
    assert_close(out, kernels.swa_attention(q, q, q, 3), 1e-5)
    with pytest.raises(ValueError, match="exceeds"):
        kernels.swa_attention(*[cp.asarray(q)] * 3, 3, backend="cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kernels.swa_attention(*[cp.asarray(q[:, :128])] * 3, 3)


def test_memory_read_on_gpu():
    rng = np.random.default_rng(2)
    q, m = rng.standard_normal((2, 9, 64)), rng.standard_normal((2, 64, 64))
    got = kernels.memory_read(cp.asarray(q, dtype=cp.float32), cp.asarray(m, dtype=cp.float32))
    assert_close(got, kernels.memory_read(q, m), 1e-5)


# -- the chunked memories: cuBLAS products and the kernels of memory_chunked.cu --------------------

# float32: 30x or more the error of NumPy's chunked float32 run against the float64 reference at
# these sizes (<= 8e-7 forward, <= 2e-6 backward); float64: 100x its error (<= 8e-15).
CHUNKED_TOL = {np.float32: (1e-5, 1e-4), np.float64: (1e-12, 1e-11)}


def check_chunked(rule, args_np, dtype, seed=0):
    """backend="cuda-chunked" on GPU arrays of `dtype` against the reference on float64 host
    arrays (the same rounded inputs); returns the GPU results."""
    rng = np.random.default_rng(seed)
    args = [a.astype(dtype) for a in args_np]
    args64 = [a.astype(np.float64) for a in args]
    cts64 = [rng.standard_normal(o.shape) for o in PRIMS[rule](*args64, backend="reference")]
    want_out, want_grads = rule_vjp(PRIMS[rule], args64, {"backend": "reference"}, cts64)
    got_out, got_grads = rule_vjp(PRIMS[rule], [cp.asarray(a) for a in args],
                                  {"backend": "cuda-chunked"},
                                  [cp.asarray(c, dtype=dtype) for c in cts64])
    tol_out, tol_grad = CHUNKED_TOL[dtype]
    for g, w in zip(got_out, want_out):
        assert isinstance(g, cp.ndarray) and g.dtype == dtype
        assert_close(g, w, tol_out)
    for g, w in zip(got_grads, want_grads):
        assert isinstance(g, cp.ndarray) and g.dtype == dtype
        assert_close(g, w, tol_grad)
    return got_out + tuple(got_grads)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rule", PRIMS)
@pytest.mark.parametrize("d", [16, 64, 128])
@pytest.mark.parametrize("s", [1, 37, 300, 1024])
def test_chunked_memory_rules_match_reference(dtype, rule, d, s):
    # s = 300: several chunks and a shorter tail; two runs must agree bit for bit.
    a = check_chunked(rule, memory_args(rule, s, d, seed=d + s), dtype)
    b = check_chunked(rule, memory_args(rule, s, d, seed=d + s), dtype)
    for x, y in zip(a, b):
        assert bool(cp.array_equal(x, y)), "two runs differ"


@pytest.mark.parametrize("rule", PRIMS)
def test_chunked_at_sequence_scale(rule):
    check_chunked(rule, memory_args(rule, 4096, 64, lead=(2,), seed=5), np.float32)


@pytest.mark.parametrize("dtype,tol", [(np.float32, 2e-6), (np.float64, 1e-13)])
def test_chunked_kernels_match_numpy(dtype, tol):
    from kernels.cuda_memory_chunked import CudaOps
    rng = np.random.default_rng(0)
    for C in (1, 7, 64):
        A = np.tril(rng.standard_normal((3, 5, C, C)), -1) / np.sqrt(C)
        th = rng.uniform(0, 1, (3, 5, C))
        got = CudaOps.unit_lower_inverse(cp.asarray(A, dtype), cp.asarray(th, dtype))
        assert_close(got, np.linalg.inv(np.eye(C) + th[..., None] * A), tol * C)
    for D, P_on, transpose in ((5, False, False), (64, True, False), (64, True, True),
                               (256, True, True)):
        init, adds = rng.standard_normal((3, 6, D)), rng.standard_normal((3, 4, 6, D))
        P = rng.standard_normal((3, 4, D, D)) / np.sqrt(D)
        scale = rng.uniform(0, 1, (3, 4))
        for reverse in (False, True):
            X, want = init, np.zeros(adds.shape)
            for c in (range(3, -1, -1) if reverse else range(4)):
                want[:, c] = X
                Pc = np.swapaxes(P[:, c], -1, -2) if transpose else P[:, c]
                X = (X @ Pc if P_on else X * scale[:, c, None, None]) + adds[:, c]
            got, final = CudaOps.carry(cp.asarray(init, dtype), cp.asarray(adds, dtype),
                                       cp.asarray(P, dtype) if P_on else None,
                                       cp.asarray(scale, dtype), transpose, reverse)
            assert_close(got, want, tol * np.sqrt(D))
            assert_close(final, X, tol * np.sqrt(D))


def test_default_dispatch_runs_long_sequences_chunked(monkeypatch):
    from kernels import cuda_memory_chunked
    calls = []
    real = cuda_memory_chunked.forward

    def spy(*a, **kw):
        calls.append(1)
        return real(*a, **kw)
    monkeypatch.setattr(cuda_memory_chunked, "forward", spy)
    s = cuda_memory_chunked.MIN_TOKENS["titans"]
    long_args = [cp.asarray(a, dtype=cp.float32) for a in memory_args("titans", s, 32)]
    short_args = [cp.asarray(a, dtype=cp.float32) for a in memory_args("titans", s - 1, 32)]
    got = kernels.titans_rule(*long_args)
    assert len(calls) == 1
    kernels.titans_rule(*short_args)                        # the per-token kernels
    kernels.titans_rule(*long_args, backend="cuda")
    with kernels.force_reference():
        want = kernels.titans_rule(*long_args)
    assert len(calls) == 1
    for g, w in zip(got, want):
        assert_close(g, w, 1e-5)


def test_public_chunked_rule_differentiates_through_the_tape():
    from kernels import cuda_memory_chunked
    rng = np.random.default_rng(3)
    s = cuda_memory_chunked.MIN_TOKENS["delta"] + 37   # the default dispatch runs it chunked
    x = rng.standard_normal((s, 32)) * 0.5
    W = [rng.standard_normal((32, 32)) * 0.2 for _ in range(3)]

    def model(m0, x, W_q, W_k, W_v):
        q, k, v = x @ W_q, x @ W_k, x @ W_v
        k = k / np.sqrt(np.sum(k * k, axis=-1, keepdims=True))
        gates = 1 / (1 + np.exp(-q[:, 0]))
        y, m = kernels.delta_rule(k, v, q, gates * 0.1, gates * 0.5, m0)
        return np.sum(y * y) + np.sum(m)

    assert_gpu_gradients_match(model, x, W)
