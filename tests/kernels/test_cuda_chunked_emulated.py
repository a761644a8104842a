"""The chunked memories' GPU path without a GPU: the kernels of kernels/cuda/memory_chunked.cu run
in the CPU emulator (cuda_emulator.h) and the host code of `kernels.cuda_memory_chunked` runs on
NumPy arrays (its array module is then NumPy, every matrix product NumPy's instead of cuBLAS).

- each kernel against a plain NumPy computation written here (`np.linalg.inv`, a loop over
  chunks), float64 and float32, for chunk sizes and state widths at and around the kernels'
  tile and thread boundaries;
- the whole path (`backend="cuda-chunked"`) against the sequential reference in float64,
  forward and backward: equal to rounding in float64, within float32 rounding in float32;
- the fallbacks (per-token CUDA kernels, reference) and the default dispatch, with a fake CuPy.

Timing, the memory model and cuBLAS are only exercised on a GPU (test_gpu.py).
"""
import sys
import types

import numpy as np
import pytest

import emulator
import tokenwise
import kernels
from kernels import cuda_memory_chunked, memory, memory_chunked
from kernels.cuda_memory_chunked import CudaOps
from tape import Active, Reverse, autodiff

pytestmark = pytest.mark.skipif(not emulator.available(), reason="g++ is not installed")

PRIMS = {"delta": memory._delta, "titans": memory._titans, "hebbian": memory._hebbian}
SUFFIX = {np.float32: "f32", np.float64: "f64"}


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    out = tmp_path_factory.mktemp("cuda_chunked_emulator")
    libs = {name: emulator.build(name, out) for name in ("memory.cu", "memory_chunked.cu")}
    return lambda: emulator.emulated(libs)


def relative_error(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    if not want.size:
        return 0.0
    return float(np.max(np.abs(got - want))) / max(1.0, float(np.max(np.abs(want))))


# -- the kernels -----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-13), (np.float32, 2e-6)])
@pytest.mark.parametrize("C", [1, 2, 7, 32, 63, 64])
def test_unit_lower_inverse_kernel(emulated, dtype, tol, C):
    rng = np.random.default_rng(C)
    A = np.tril(rng.standard_normal((2, 3, C, C)), -1) / np.sqrt(C)
    A += np.triu(rng.standard_normal((C, C)))            # ignored: only j < i is read
    th = rng.uniform(0.0, 1.0, (2, 3, C))
    with emulated() as run:
        got = CudaOps.unit_lower_inverse(A.astype(dtype), th.astype(dtype))
    assert [name for name, *_ in run.launches] == [f"chunk_unit_lower_inverse_{SUFFIX[dtype]}"]
    assert run.launches[0][1] == (6, 1)                  # one block per chunk matrix
    assert got.dtype == dtype
    L = np.eye(C) + th[..., None] * np.tril(A, -1)
    assert relative_error(got, np.linalg.inv(L)) <= tol * C


def test_unit_lower_inverse_beyond_the_kernel_uses_the_blocked_form(emulated):
    C = cuda_memory_chunked.MAX_CHUNK + 1
    rng = np.random.default_rng(0)
    A = np.tril(rng.standard_normal((1, C, C)), -1) / C
    th = rng.uniform(0.0, 1.0, (1, C))
    with emulated() as run:
        got = CudaOps.unit_lower_inverse(A, th)
    assert run.launches == []
    assert relative_error(got, np.linalg.inv(np.eye(C) + th[..., None] * A)) <= 1e-13


def carry_loop(init, adds, P, scale, transpose, reverse):
    """The carried state, one chunk at a time, in float64."""
    X = np.asarray(init, np.float64)
    records = np.zeros(adds.shape)
    N = adds.shape[1]
    for c in (reversed(range(N)) if reverse else range(N)):
        records[:, c] = X
        if P is None:
            X = X * scale[:, c, None, None] + adds[:, c]
        else:
            Pc = np.swapaxes(P[:, c], -1, -2) if transpose else P[:, c]
            X = np.einsum("brk,bkj->brj", X, Pc) + adds[:, c]
    return records, X


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-13), (np.float32, 3e-6)])
@pytest.mark.parametrize("mode", ["matrix", "matrix_t", "scale"])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("R,D", [(1, 1), (3, 5), (16, 16), (7, 40), (6, 129), (5, 256)])
def test_carry_kernel(emulated, dtype, tol, mode, reverse, R, D):
    rng = np.random.default_rng(R * D)
    B, N = 2, 3
    init = rng.standard_normal((B, R, D))
    adds = rng.standard_normal((B, N, R, D))
    P = rng.standard_normal((B, N, D, D)) / np.sqrt(D) if mode != "scale" else None
    scale = rng.uniform(0.0, 1.0, (B, N))
    cast = (lambda a: None if a is None else a.astype(dtype))
    with emulated() as run:
        records, final = CudaOps.carry(cast(init), cast(adds), cast(P), cast(scale),
                                       transpose=mode == "matrix_t", reverse=reverse)
    assert [name for name, *_ in run.launches] == [f"chunk_carry_{SUFFIX[dtype]}"]
    assert records.dtype == final.dtype == dtype
    want_records, want_final = carry_loop(init, adds, P, scale, mode == "matrix_t", reverse)
    assert relative_error(records, want_records) <= tol * np.sqrt(D)
    assert relative_error(final, want_final) <= tol * np.sqrt(D)


# -- the whole path against the sequential reference -----------------------------------------------

def outputs_and_grads(fn, args, weights):
    def loss(*a):
        total = 0.0
        for o, w in zip(fn(*a), weights):
            if w is not None:
                total = total + np.sum(o * w)
        return total
    outs = fn(*args)
    grads, = autodiff(Reverse, loss, Active, *[Active(a) for a in args])
    return list(outs) + list(grads)


def compare_with_reference(emulated, rule, args, weights, tol_out, tol_grad):
    """`backend="cuda-chunked"` on `args` against the reference in float64; returns the
    kernels launched."""
    dtype = args[0].dtype
    args64 = [a.astype(np.float64) for a in args]
    want = outputs_and_grads(lambda *a: PRIMS[rule](*a, backend="reference"), args64, weights)
    cast = [None if w is None else w.astype(dtype) for w in weights]
    with emulated() as run:
        got = outputs_and_grads(lambda *a: PRIMS[rule](*a, backend="cuda-chunked"), args, cast)
    n_out = len(weights)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == dtype
        err = relative_error(g, w)
        assert err <= (tol_out if i < n_out else tol_grad), (i, err)
    return {name for name, *_ in run.launches}


def random_weights(rule, args, seed=1):
    rng = np.random.default_rng(seed)
    outs = PRIMS[rule](*[a.astype(np.float64) for a in args], backend="reference")
    return [rng.standard_normal(o.shape) for o in outs]


TOLERANCES = {np.float64: (1e-12, 1e-10), np.float32: (1e-5, 1e-4)}


@pytest.mark.parametrize("rule", PRIMS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("s,chunk,lead", [(21, 8, (2,)), (16, 8, (2, 3)), (5, 8, ()),
                                          (70, 64, (2,))])
def test_chunked_gpu_path_equals_the_sequential_reference(emulated, monkeypatch, rule, dtype, s,
                                                          chunk, lead):
    monkeypatch.setattr(memory_chunked, "CHUNK", chunk)
    args = tokenwise.memory_args(rule, s, 8, lead=lead, seed=s + chunk, dtype=dtype)
    launched = compare_with_reference(emulated, rule, args, random_weights(rule, args),
                                      *TOLERANCES[dtype])
    sfx = SUFFIX[dtype]
    want = {f"chunk_carry_{sfx}"} | (set() if rule == "hebbian"
                                     else {f"chunk_unit_lower_inverse_{sfx}"})
    assert launched == want


@pytest.mark.parametrize("rule", PRIMS)
@pytest.mark.parametrize("which", ["y only", "final state only"])
def test_cotangent_on_one_output(emulated, monkeypatch, rule, which):
    monkeypatch.setattr(memory_chunked, "CHUNK", 4)
    args = tokenwise.memory_args(rule, 10, 5, lead=(2,), seed=7)
    w = random_weights(rule, args)
    w = [w[0]] + [None] * (len(w) - 1) if which == "y only" else [None] + w[1:]
    compare_with_reference(emulated, rule, args, w, *TOLERANCES[np.float64])


@pytest.mark.parametrize("rule", ["delta", "titans"])
def test_wide_states_and_small_retentions(emulated, monkeypatch, rule):
    # d = 64: titans carries [M S], 128 columns; retentions down to 1e-6 inside a chunk keep the
    # gate gradients exact (the span sums of `memory_chunked._log_gradient` on this path too).
    monkeypatch.setattr(memory_chunked, "CHUNK", 8)
    args = tokenwise.memory_args(rule, 19, 64, lead=(), seed=3)
    args[3][::3] = 1 - 1e-6
    if rule == "titans":
        args[5][2::4] = 1e-6
    compare_with_reference(emulated, rule, args, random_weights(rule, args), 1e-12, 1e-9)


@pytest.mark.parametrize("rule", PRIMS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_zero_retention_falls_back(emulated, rule, dtype):
    # r = 0 has no logarithm: float32 runs the per-token CUDA kernels, float64 the reference.
    args = tokenwise.memory_args(rule, 9, 8, lead=(2,), seed=2, dtype=dtype)
    args[3][:, 4] = 1.0
    launched = compare_with_reference(emulated, rule, args, random_weights(rule, args),
                                      *TOLERANCES[dtype])
    assert launched == ({f"memory_forward_{rule}", f"memory_backward_{rule}"}
                        if dtype == np.float32 else set())


def test_runs_are_deterministic(emulated, monkeypatch):
    monkeypatch.setattr(memory_chunked, "CHUNK", 8)
    args = tokenwise.memory_args("titans", 20, 8, dtype=np.float32)
    weights = [w.astype(np.float32) for w in random_weights("titans", args)]
    fn = (lambda *a: memory._titans(*a, backend="cuda-chunked"))
    with emulated():
        a = outputs_and_grads(fn, args, weights)
        b = outputs_and_grads(fn, args, weights)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


# -- the default dispatch (a fake CuPy: no arrays are computed) ------------------------------------

class FakeDeviceArray:
    """Quacks like a CuPy array for the dispatch code."""
    __cuda_array_interface__ = {}

    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, np.dtype(dtype)


@pytest.fixture
def fake_gpu(monkeypatch):
    runtime = types.SimpleNamespace(
        getDeviceCount=lambda: 1,
        getDeviceProperties=lambda i: {"name": b"Fake GPU", "major": 9, "minor": 0})
    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(runtime=runtime)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    kernels.dispatch.detect_gpu.cache_clear()
    before = kernels.is_reference_forced()
    kernels.force_reference(False)
    yield
    kernels.force_reference(before)
    kernels.dispatch.detect_gpu.cache_clear()


def chosen_backend(rule, s, d, dtype, **kw):
    n_gates = {"delta": 2, "titans": 3, "hebbian": 1}[rule]
    n_states = 2 if rule == "titans" else 1
    args = ([FakeDeviceArray((2, s, d), dtype)] * 3 + [FakeDeviceArray((2, s), dtype)] * n_gates
            + [FakeDeviceArray((2, d, d), dtype)] * n_states)
    seen = []
    memory._call(rule, lambda *a, **params: seen.append(params["backend"]), tuple(args), None,
                 kw.get("backend"))
    return seen[0]


@pytest.mark.parametrize("rule", PRIMS)
def test_default_gpu_dispatch(fake_gpu, rule):
    long_s = cuda_memory_chunked.MIN_TOKENS[rule]
    assert chosen_backend(rule, long_s, 64, np.float32) == "cuda-chunked"
    assert chosen_backend(rule, long_s, 64, np.float64) == "cuda-chunked"
    assert chosen_backend(rule, long_s - 1, 64, np.float32) == "cuda"      # per-token kernels
    # float64 has no per-token CUDA kernel: chunked from memory_chunked's length on
    assert chosen_backend(rule, long_s - 1, 64, np.float64) == "cuda-chunked"
    short = memory_chunked.MIN_TOKENS
    assert chosen_backend(rule, short, 64, np.float64) == "cuda-chunked"
    assert chosen_backend(rule, short - 1, 64, np.float64) == "reference"
    assert chosen_backend(rule, long_s, 64, np.float32, backend="cuda") == "cuda"
    assert chosen_backend(rule, long_s, 64, np.float32, backend="reference") == "reference"
    with pytest.warns(RuntimeWarning, match="exceeds"):
        assert chosen_backend(rule, long_s, 160, np.float32) == "reference"
    with kernels.force_reference():
        assert chosen_backend(rule, long_s, 64, np.float32) == "reference"
        assert chosen_backend(rule, long_s, 64, np.float64) == "reference"


def test_numpy_dispatch_is_unchanged(fake_gpu):
    # a GPU is "present", but NumPy arrays stay on the CPU
    args = tokenwise.memory_args("delta", 300, 4)
    seen = []
    memory._call("delta", lambda *a, **p: seen.append(p["backend"]), tuple(args), None, None)
    assert seen == ["chunked"]
