"""The CUDA backend, run on the CPU: the kernels of kernels/cuda are compiled with g++ against a
small CUDA emulator (cuda_emulator.h) and launched by the CUDA backend's own host code, then
compared with the reference in float64.

This checks the kernels' logic (indexing, masks, online softmax, reductions, barriers, warp
shuffles, checkpoint slots) and the host code (layouts, buffers, launch geometry, shared
memory under 48 KiB). It does not replace the GPU run in test_gpu.py: timing, the memory model
and NVRTC are only exercised there.
"""
import functools

import numpy as np
import pytest

import tokenwise
import emulator
from kernels import attention, memory
from tape import Active, Reverse, autodiff

pytestmark = pytest.mark.skipif(not emulator.available(), reason="g++ is not installed")


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    out = tmp_path_factory.mktemp("cuda_emulator")
    libs = {name: emulator.build(name, out) for name in emulator.KERNELS}

    def run():
        return emulator.emulated(libs)
    return run


def assert_close(got, want, tol):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    err = float(np.max(np.abs(got - want))) if want.size else 0.0
    assert err <= tol * scale, f"max error {err:.3g} > {tol} x {scale:.3g}"


def value_and_grads(fn, args, weights):
    def loss(*a):
        total = 0.0
        for o, w in zip(fn(*a), weights):
            total = total + np.sum(o * w)
        return total
    outs = fn(*args)
    derivs, = autodiff(Reverse, loss, Active, *[Active(a) for a in args])
    return outs, derivs


def compare(prim, args32, params, n_out, seed=0):
    """CUDA (emulated, float32) against the reference (float64, same inputs)."""
    rng = np.random.default_rng(seed)
    args64 = [a.astype(np.float64) for a in args32]
    ref_fn = (lambda *a: as_tuple(prim(*a, **params, backend="reference")))
    weights = [rng.standard_normal(o.shape) for o in ref_fn(*args64)]
    want_out, want_grads = value_and_grads(ref_fn, args64, weights)
    cuda_fn = (lambda *a: as_tuple(prim(*a, **params, backend="cuda")))
    got_out, got_grads = value_and_grads(cuda_fn, args32,
                                         [w.astype(np.float32) for w in weights])
    for g, w in zip(got_out, want_out):
        assert g.dtype == np.float32
        assert_close(g, w, 1e-5)
    for g, w in zip(got_grads, want_grads):
        assert_close(g, w, 1e-4)
    return got_out, got_grads


def as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def test_kernel_table_matches_the_sources():
    for name, entries in emulator.KERNELS.items():
        assert emulator.kernel_names_in_source(name) == set(entries)


# -- sliding-window attention ----------------------------------------------------------------------

@pytest.mark.parametrize("lead,s,hd,window", [((), 1, 16, 1), ((2,), 21, 16, 5),
                                              ((), 19, 64, 100), ((), 12, 128, 4),
                                              ((2,), 40, 24, 33)])
def test_swa(emulated, lead, s, hd, window):
    rng = np.random.default_rng(s + hd)
    args = [rng.standard_normal(lead + (s, hd)).astype(np.float32) for _ in range(3)]
    with emulated() as launches:
        compare(attention._swa, args, {"window": window, "storage": "f32"}, 1)
    kernels_run = [name for name, *_ in launches.launches]
    assert kernels_run == ["swa_fwd_f32", "swa_fwd_f32", "swa_bwd_dq_f32", "swa_bwd_dkdv_f32"]


def test_swa_bf16_storage_matches_the_reference_rounding(emulated):
    rng = np.random.default_rng(1)
    args = [rng.standard_normal((2, 17, 32)).astype(np.float32) for _ in range(3)]
    rounded = [attention.round_bf16(np, a) for a in args]
    params = {"window": 6, "storage": "bf16"}
    with emulated() as launches:
        out_bf16, grads_bf16 = value_and_grads(
            lambda *a: (attention._swa(*a, **params, backend="cuda"),), args,
            [np.ones((2, 17, 32), np.float32)])
    assert {name for name, *_ in launches.launches} == {
        "swa_fwd_bf16", "swa_bwd_dq_bf16", "swa_bwd_dkdv_bf16"}
    want_out, want_grads = value_and_grads(
        lambda *a: (attention._swa(*a, window=6, backend="reference"),),
        [r.astype(np.float64) for r in rounded], [np.ones((2, 17, 32))])
    assert_close(out_bf16[0], want_out[0], 1e-5)
    for g, w in zip(grads_bf16, want_grads):
        assert_close(g, w, 1e-4)


# -- memory rules ----------------------------------------------------------------------------------

memory_args = functools.partial(tokenwise.memory_args, lead=(2,), dtype=np.float32)


PRIMS = {"delta": memory._delta, "titans": memory._titans, "hebbian": memory._hebbian}


@pytest.mark.parametrize("rule", PRIMS)
@pytest.mark.parametrize("s,d,checkpoint_every", [(1, 16, None), (6, 16, None), (7, 16, 3),
                                                  (5, 20, 2)])
def test_memory_rules(emulated, rule, s, d, checkpoint_every):
    args = memory_args(rule, s, d, seed=s * d)
    with emulated() as launches:
        compare(PRIMS[rule], args, {"checkpoint_every": checkpoint_every}, 2)
    assert [name for name, *_ in launches.launches] == [
        f"memory_forward_{rule}", f"memory_forward_{rule}", f"memory_backward_{rule}"]


@pytest.mark.parametrize("rule", PRIMS)
@pytest.mark.parametrize("d", [64, 128])
def test_memory_rules_wide(emulated, rule, d):
    args = memory_args(rule, 3, d, lead=(), seed=d)
    with emulated():
        compare(PRIMS[rule], args, {"checkpoint_every": 2}, 2)


@pytest.mark.parametrize("rule", PRIMS)
@pytest.mark.parametrize("checkpoint_every", [None, 2])
def test_memory_rules_over_several_row_groups(emulated, rule, checkpoint_every):
    # d = 40: three groups of rows per batch entry (16, 16 and 8 rows), partial sums of dk,
    # dq and the gates added up over the groups on the host.
    args = memory_args(rule, 6, 40, seed=40)
    with emulated() as launches:
        compare(PRIMS[rule], args, {"checkpoint_every": checkpoint_every}, 2)
    assert {grid for _, grid, *_ in launches.launches} == {(2, 3)}


def test_memory_cotangent_on_the_final_state_only(emulated):
    args = memory_args("titans", 5, 16)
    with emulated():
        got, = autodiff(Reverse, lambda *a: np.sum(memory._titans(*a, backend="cuda")[2]),
                        Active, *[Active(a) for a in args])
    want, = autodiff(Reverse, lambda *a: np.sum(memory._titans(*a, backend="reference")[2]),
                     Active, *[Active(a.astype(np.float64)) for a in args])
    for g, w in zip(got, want):
        assert_close(g, w, 1e-4)


def test_runs_are_deterministic(emulated):
    args = memory_args("delta", 6, 16)
    with emulated():
        a = value_and_grads(lambda *x: memory._delta(*x, backend="cuda"), args,
                            [np.ones((2, 6, 16), np.float32), np.ones((2, 16, 16), np.float32)])
        b = value_and_grads(lambda *x: memory._delta(*x, backend="cuda"), args,
                            [np.ones((2, 6, 16), np.float32), np.ones((2, 16, 16), np.float32)])
    for x, y in zip(a[0] + a[1], b[0] + b[1]):
        np.testing.assert_array_equal(x, y)


def test_transposed_cotangent_of_the_final_state(emulated):
    # The cotangent of m_final arrives as a transposed view; the kernel needs C order.
    args = memory_args("delta", 4, 16)
    W = np.random.default_rng(0).standard_normal((2, 16, 16))

    def loss(backend):
        return lambda *a: np.sum(np.swapaxes(memory._delta(*a, backend=backend)[1], -1, -2) * W)
    with emulated():
        got, = autodiff(Reverse, loss("cuda"), Active, *[Active(a) for a in args])
    want, = autodiff(Reverse, loss("reference"), Active,
                     *[Active(a.astype(np.float64)) for a in args])
    for g, w in zip(got, want):
        assert_close(g, w, 1e-4)
