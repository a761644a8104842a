"""Kernel pairs: tokens/s of forward + backward, Hecate against a PyTorch implementation.

For each pair (sliding-window attention, delta, Titans and Hebbian memories) at d = 64, 128 and
s = 512, 2048 (one sequence, float32), one timed step is a full gradient of
``L = sum(outputs * fixed weights)`` with respect to every input. Tools:

- ``hecate``: the reference backend (the sequential loop for the memories) through
  ``autodiff`` (all states kept);
- ``hecate-ckpt``: the same with ``checkpoint_every=64`` (memory rules only);
- ``hecate-chunked``: the default CPU dispatch, the chunkwise-parallel form of
  `kernels.memory_chunked` (memory rules only);
- ``torch``: PyTorch eager, written as a PyTorch user would: the memory rules as a Python loop
  over tokens whose ops autograd records (no hand-written backward), attention as
  ``scaled_dot_product_attention`` with a boolean band mask (dense s x s, what most users write).

NumPy's BLAS and PyTorch both run on one thread. Each time is the minimum over ``--repeat`` runs
after a warm-up. ``--gpu`` adds the CUDA backend against the reference on CuPy arrays and
PyTorch on CUDA, with the fraction of peak FP32 FLOP/s and memory bandwidth reached (README),
and a table of the chunked memories on the GPU (cuBLAS and memory_chunked.cu, the default
dispatch for long sequences) against the per-token CUDA kernels at d = 64 and s = 256, 1024,
4096, 16384 (``--quick``: s = 512): the crossover sets `cuda_memory_chunked.MIN_TOKENS`.
A second CPU table times the chunked form against the sequential loop at d = 64 and
s = 1024, 4096 (``--quick``: s = 512) and gives the speed-up. A third times a CMS level of
period p > 1 as one periodic kernel call (`kernels.delta_rule_periodic`, ...) against the
per-firing composition it replaces in `models.layers.level_forward` (per firing: a frozen
read of the segment, then one rule call over it), at the training step's shapes (batch 8,
s = 128, d = 64 and 4 heads of 16) and on one long sequence (s = 4096, d = 64).
Run ``python benchmarks/kernels.py [--quick] [--json PATH] [--gpu]``.
"""
from __future__ import annotations

import os

# One thread for NumPy's BLAS, set before NumPy loads it: the comparison is per core.
for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# Run as a script, this file's folder comes first on sys.path, where this file would shadow the
# `kernels` package it benchmarks: the checkout's root goes first (also when PYTHONPATH holds it).
sys.path.insert(0, str(ROOT))

import kernels  # noqa: E402
from kernels import memory, memory_chunked  # noqa: E402
from tape import Active, Reverse, autodiff  # noqa: E402

PAIRS = ("swa", "delta", "titans", "hebbian")
WINDOW = 256          # attention window in every run
CHECKPOINT = 64       # chunk of hecate-ckpt
N_GATES = {"delta": 2, "titans": 3, "hebbian": 1}
CHUNKED = ("delta", "hebbian", "titans")   # rules with a chunkwise-parallel CPU form

# --------------------------------------------------------------------------------------------
# Inputs and the functions every tool differentiates


def make_inputs(pair, s, d, lead=(), seed=0):
    """float32 NumPy inputs: q, k, v for attention; k, v, q, gates, states for the memories."""
    rng = np.random.default_rng(seed)
    if pair == "swa":
        arrays = [rng.standard_normal(lead + (s, d)) for _ in range(3)]
    else:
        k = rng.standard_normal(lead + (s, d))
        k /= np.linalg.norm(k, axis=-1, keepdims=True)          # L2-normalised, as in the model
        q = rng.standard_normal(lead + (s, d))
        q /= np.linalg.norm(q, axis=-1, keepdims=True)
        v = rng.standard_normal(lead + (s, d)) / math.sqrt(d)
        gates = [rng.uniform(0.0, 0.1, lead + (s,)), rng.uniform(0.05, 0.5, lead + (s,)),
                 rng.uniform(0.5, 0.9, lead + (s,))][:N_GATES[pair]]
        states = [np.zeros(lead + (d, d))] * (2 if pair == "titans" else 1)
        arrays = [k, v, q] + gates + states
    return [a.astype(np.float32) for a in arrays]


def output_weights(pair, s, d, lead=(), seed=1):
    rng = np.random.default_rng(seed)
    shapes = [lead + (s, d)] + ([] if pair == "swa" else
                                [lead + (d, d)] * (2 if pair == "titans" else 1))
    return [rng.standard_normal(sh).astype(np.float32) for sh in shapes]


def hecate_fn(pair, checkpoint_every=None, backend=None):
    if pair == "swa":
        return lambda q, k, v: (kernels.swa_attention(q, k, v, WINDOW, backend=backend),)
    kernel = {"delta": kernels.delta_rule, "titans": kernels.titans_rule,
              "hebbian": kernels.hebbian_rule}[pair]
    return lambda *a: kernel(*a, checkpoint_every=checkpoint_every, backend=backend)


def prim_fn(pair, backend):
    """The memory rule's primitive with an internal backend name ("cuda-chunked" is what the
    default dispatch picks on long sequences; it is not a public `backend` choice)."""
    prim = {"delta": memory._delta, "titans": memory._titans, "hebbian": memory._hebbian}[pair]
    return lambda *a: prim(*a, backend=backend)


def hecate_step(pair, args, weights, prim_backend=None, **kw):
    fn = prim_fn(pair, prim_backend) if prim_backend else hecate_fn(pair, **kw)
    return loss_step(fn, args, weights)


def torch_memory(pair, torch, k, v, q, *rest):
    """The recurrence as a PyTorch user writes it: a loop over tokens, autograd records it.
    Leading batch axes ride along (k: [..., s, d], gates: [..., s], states: [..., d, d])."""
    gates, states = rest[:N_GATES[pair]], list(rest[N_GATES[pair]:])
    alpha = gates[0]
    M = states[0]
    S = states[1] if pair == "titans" else None

    def outer(a, b):
        return a[..., :, None] * b[..., None, :]

    def scale(g, t):
        return g[..., t, None, None]

    ys = []
    for t in range(k.shape[-2]):
        kt = k[..., t, :]
        if pair == "hebbian":
            M = (1 - scale(alpha, t)) * M + outer(v[..., t, :], kt)
        else:
            upd = scale(gates[1], t) * outer((M @ kt[..., None])[..., 0] - v[..., t, :], kt)
            if pair == "delta":
                M = (1 - scale(alpha, t)) * M - upd
            else:
                S = scale(gates[2], t) * S - upd
                M = (1 - scale(alpha, t)) * M + S
        ys.append((M @ q[..., t, :, None])[..., 0])
    return (torch.stack(ys, -2), M) + ((S,) if pair == "titans" else ())


def torch_attention(torch, q, k, v):
    s = q.shape[-2]
    i = torch.arange(s, device=q.device)
    band = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - WINDOW)
    out = torch.nn.functional.scaled_dot_product_attention(q[..., None, :, :], k[..., None, :, :],
                                                           v[..., None, :, :], attn_mask=band)
    return (out[..., 0, :, :],)


def torch_step(pair, args, weights, device="cpu"):
    import torch
    ts = [torch.tensor(a, device=device, requires_grad=True) for a in args]
    ws = [torch.tensor(w, device=device) for w in weights]

    def step():
        for t in ts:
            t.grad = None
        outs = torch_attention(torch, *ts) if pair == "swa" else torch_memory(pair, torch, *ts)
        sum(((o * w).sum() for o, w in zip(outs, ws))).backward()
        if device != "cpu":
            torch.cuda.synchronize()
        return [t.grad for t in ts]    # copied to the host by `host`, outside the timing
    return step


def host(x):
    """A gradient as a NumPy array: from NumPy, CuPy or a PyTorch tensor (CPU or CUDA)."""
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    if hasattr(x, "__cuda_array_interface__"):
        import cupy as cp
        return cp.asnumpy(x)
    return np.asarray(x)


def torch_version(cuda=False):
    try:
        import torch
    except Exception:   # a broken install is treated like a missing one
        return None
    if cuda and not torch.cuda.is_available():
        return None
    torch.set_num_threads(1)
    return torch.__version__


# --------------------------------------------------------------------------------------------
# Measurement


def best_time(step, repeat, sync=None):
    step()   # warm-up: caches, first-call allocations, CUDA compilation
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        step()
        if sync is not None:
            sync()
        times.append(time.perf_counter() - t0)
    return min(times)


def grads_agree(got, want):
    return all(np.allclose(np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=2e-3,
                           atol=2e-3 * max(1.0, float(np.max(np.abs(w)))))
               for g, w in zip(got, want))


def peak_mib(step):
    """Peak bytes NumPy allocates during one step (tracemalloc sees NumPy's buffers)."""
    tracemalloc.start()
    step()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2 ** 20


def run_cpu(sizes, repeat, measure_memory=True):
    have_torch = torch_version() is not None
    results = []
    for pair in PAIRS:
        for d, s in sizes:
            args, weights = make_inputs(pair, s, d), output_weights(pair, s, d)
            tools = [("hecate", hecate_step(pair, args, weights, backend="reference"))]
            if pair != "swa":
                tools.append(("hecate-ckpt", hecate_step(pair, args, weights, backend="reference",
                                                         checkpoint_every=CHECKPOINT)))
            if pair in CHUNKED:
                tools.append(("hecate-chunked", hecate_step(pair, args, weights)))
            if have_torch:
                tools.append(("torch", torch_step(pair, args, weights)))
            reference = None
            for name, step in tools:
                got = [host(g) for g in step()]
                reference = got if reference is None else reference
                row = {"pair": pair, "d": d, "s": s, "tool": name,
                       "seconds": best_time(step, repeat), "grad_check": grads_agree(got,
                                                                                    reference)}
                row["tokens_per_s"] = s / row["seconds"]
                if measure_memory and name.startswith("hecate"):
                    row["peak_mib"] = peak_mib(step)
                results.append(row)
    return results


def run_chunked(lengths, repeat, d=64):
    """The chunked form (default dispatch) against the sequential loop (all states kept), one
    float32 sequence, forward + backward; `speedup` is sequential time / chunked time."""
    rows = []
    for pair in CHUNKED:
        for s in lengths:
            args, weights = make_inputs(pair, s, d), output_weights(pair, s, d)
            seq = hecate_step(pair, args, weights, backend="reference")
            chunked = hecate_step(pair, args, weights)
            row = {"pair": pair, "d": d, "s": s, "chunk": memory_chunked.chunk_size(d),
                   "grad_check": grads_agree(chunked(), seq()),
                   "sequential_s": best_time(seq, repeat),
                   "chunked_s": best_time(chunked, repeat)}
            row["speedup"] = row["sequential_s"] / row["chunked_s"]
            rows.append(row)
    return rows


def print_chunked(rows):
    print("\n| pair | d | s | chunk | sequential (ms) | chunked (ms) | speed-up | grad check |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['pair']} | {r['d']} | {r['s']} | {r['chunk']} | "
              f"{1e3 * r['sequential_s']:.1f} | {1e3 * r['chunked_s']:.1f} | "
              f"{r['speedup']:.1f}x | {'ok' if r['grad_check'] else 'MISMATCH'} |")


PERIODIC = {"delta": kernels.delta_rule_periodic, "titans": kernels.titans_rule_periodic,
            "hebbian": kernels.hebbian_rule_periodic}
# (lead axes, s, d, period): the training step's level shapes (batch 8, one head of 64 or
# 4 heads of 16), then one long sequence.
PERIODIC_CASES = [((8,), 128, 64, 8), ((8, 4), 128, 16, 8), ((8,), 128, 64, 64),
                  ((), 4096, 64, 8), ((), 4096, 64, 64)]


def per_firing_fn(pair, period):
    """A level of period `period` as `models.layers.level_forward` ran it before the periodic
    kernels: per firing, the segment's tokens but the last read the frozen memory, then one
    rule call (default dispatch) over the segment. `s` must be a multiple of `period`."""
    rule = hecate_fn(pair)
    n_gates = N_GATES[pair]

    def fn(k, v, q, *rest):
        gates, states = rest[:n_gates], rest[n_gates:]
        outs = []
        for t0 in range(0, k.shape[-2], period):
            seg = slice(t0, t0 + period)
            if period > 1:
                outs.append(kernels.memory_read(q[..., t0:t0 + period - 1, :], states[0]))
            y, *states = rule(k[..., seg, :], v[..., seg, :], q[..., seg, :],
                              *(g[..., seg] for g in gates), *states)
            outs.append(y[..., -1:, :])
        return (np.concatenate(outs, axis=-2),) + tuple(states)
    return fn


def loss_step(fn, args, weights):
    def loss(*a):
        total = 0.0
        for o, w in zip(fn(*a), weights):
            total = total + (o * w).sum()
        return total

    def step():
        derivs, = autodiff(Reverse, loss, Active, *[Active(a) for a in args])
        return derivs
    return step


def run_periodic(cases, repeat):
    """The periodic kernel against the per-firing composition, float32, forward + backward;
    `speedup` is per-firing time / periodic time."""
    rows = []
    for pair in CHUNKED:
        for lead, s, d, period in cases:
            args, weights = make_inputs(pair, s, d, lead), output_weights(pair, s, d, lead)
            per_firing = loss_step(per_firing_fn(pair, period), args, weights)
            periodic = loss_step(lambda *a: PERIODIC[pair](*a, period=period), args, weights)
            row = {"pair": pair, "lead": list(lead), "d": d, "s": s, "period": period,
                   "grad_check": grads_agree(periodic(), per_firing()),
                   "per_firing_s": best_time(per_firing, repeat),
                   "periodic_s": best_time(periodic, repeat)}
            row["speedup"] = row["per_firing_s"] / row["periodic_s"]
            rows.append(row)
    return rows


def print_periodic(rows):
    print("\n| pair | batch x heads | d | s | period | per-firing (ms) | periodic (ms) | "
          "speed-up | grad check |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        lead = " x ".join(map(str, r["lead"])) or "1"
        print(f"| {r['pair']} | {lead} | {r['d']} | {r['s']} | {r['period']} | "
              f"{1e3 * r['per_firing_s']:.1f} | {1e3 * r['periodic_s']:.1f} | "
              f"{r['speedup']:.1f}x | {'ok' if r['grad_check'] else 'MISMATCH'} |")


# --------------------------------------------------------------------------------------------
# GPU: CUDA backend vs the reference on CuPy arrays vs PyTorch on CUDA

_FP32_LANES_PER_SM = {(8, 0): 64, (6, 0): 64, (7, 0): 64}   # otherwise 128 (sm_75, 86, 89, 90)


def gpu_peaks(cp):
    p = cp.cuda.runtime.getDeviceProperties(0)
    lanes = _FP32_LANES_PER_SM.get((p["major"], p["minor"]), 128)
    flops = p["multiProcessorCount"] * lanes * 2 * p["clockRate"] * 1e3
    bandwidth = 2 * p["memoryClockRate"] * 1e3 * p["memoryBusWidth"] / 8
    return flops, bandwidth


def work_estimate(pair, s, d, B, checkpointed=False):
    """(FLOPs, bytes) one forward + backward needs at least: the accounting of the README."""
    if pair == "swa":
        w_eff = min(WINDOW, s) - min(WINDOW, s) ** 2 / (2 * s)
        flops = 14 * s * w_eff * d            # fwd 4 s w d, bwd 10 s w d (FlashAttention's)
        nbytes = 4 * s * d * 10               # q k v out read/written, dq dk dv dout, twice
        return B * flops, B * nbytes
    per_state = 2 if pair == "titans" else 1
    flops = 22 * d * d * s * per_state
    state_passes = 2 if checkpointed else 3   # full: write every state, read it twice
    nbytes = 4 * d * d * s * per_state * state_passes / (CHECKPOINT if checkpointed else 1)
    return B * flops, B * (nbytes + 4 * s * d * 8)


def run_gpu(sizes, repeat, batch):
    import cupy as cp
    sync = cp.cuda.Device().synchronize
    peak_flops, peak_bw = gpu_peaks(cp)
    have_torch = torch_version(cuda=True) is not None
    results = []
    for pair in PAIRS:
        for d, s in sizes:
            lead = (batch,)
            args = [cp.asarray(a) for a in make_inputs(pair, s, d, lead)]
            weights = [cp.asarray(w) for w in output_weights(pair, s, d, lead)]
            tools = [("cuda", hecate_step(pair, args, weights, backend="cuda"), False),
                     ("reference", hecate_step(pair, args, weights, backend="reference"),
                      False)]
            if pair != "swa":
                tools.insert(1, ("cuda-ckpt", hecate_step(pair, args, weights, backend="cuda",
                                                          checkpoint_every=CHECKPOINT), True))
            if have_torch:   # the same batch of sequences, batched in every PyTorch op
                tools.append(("torch-cuda", torch_step(
                    pair, [cp.asnumpy(a) for a in args], [cp.asnumpy(w) for w in weights],
                    "cuda"), False))
            reference = None
            for name, step, ckpt in tools:
                got = [host(g) for g in step()]
                n_seq = batch
                if reference is None:
                    reference = got
                want = reference
                t = best_time(step, repeat, sync)
                flops, nbytes = work_estimate(pair, s, d, n_seq, ckpt)
                results.append({
                    "pair": pair, "d": d, "s": s, "batch": n_seq, "tool": name, "seconds": t,
                    "tokens_per_s": n_seq * s / t, "grad_check": grads_agree(got, want),
                    "flops_fraction": flops / t / peak_flops,
                    "bandwidth_fraction": nbytes / t / peak_bw})
    return results, peak_flops, peak_bw


_CHUNK_MATRICES = {"delta": 5, "hebbian": 2, "titans": 9}   # C x C per chunk, kept for backward


def chunked_work_estimate(pair, s, d, B, C=None):
    """(FLOPs, bytes) of one chunked forward + backward, estimated from the algorithm's
    products and the least traffic it needs: token vectors in and out (10 s d: k, v, q, y
    forward; k, v, q, dy in and dk, dv, dq out backward), the state entering each chunk and its
    cotangent (written, then read: 4 N d D with D = d, or 2d for Titans' [M S]), the per-chunk
    transition (written, read forward and backward: 3 N D^2, none for the Hebbian scalar decay)
    and the C x C chunk matrices kept for the backward (written, then read). FLOPs: the
    forward's batched products per chunk, times 3 for forward plus backward."""
    C = min(s, memory_chunked.chunk_size(d)) if C is None else C
    N = -(-s // C)
    D = 2 * d if pair == "titans" else d
    fwd = {"hebbian": 4 * C * C * d + 4 * C * d * d,
           "delta": 12 * C * C * d + 6 * C * d * d + 2 * d ** 3,
           "titans": 24 * C * C * d + 12 * C * d * d + 2 * d * D * D}[pair]
    floats = (10 * s * d + 4 * N * d * D + (0 if pair == "hebbian" else 3 * N * D * D)
              + 2 * _CHUNK_MATRICES[pair] * N * C * C)
    return B * 3 * N * fwd, B * 4 * floats


def run_gpu_chunked(lengths, repeat, batch, d=64):
    """The chunked memories on the GPU against the per-token CUDA kernels (all states kept),
    float32, `batch` sequences per call; `speedup` is per-token time / chunked time."""
    import cupy as cp
    sync = cp.cuda.Device().synchronize
    peak_flops, peak_bw = gpu_peaks(cp)
    rows = []
    for pair in CHUNKED:
        for s in lengths:
            lead = (batch,)
            args = [cp.asarray(a) for a in make_inputs(pair, s, d, lead)]
            weights = [cp.asarray(w) for w in output_weights(pair, s, d, lead)]
            per_token = hecate_step(pair, args, weights, backend="cuda")
            chunked = hecate_step(pair, args, weights, prim_backend="cuda-chunked")
            got = [cp.asnumpy(g) for g in chunked()]
            want = [cp.asnumpy(g) for g in per_token()]
            row = {"pair": pair, "d": d, "s": s, "batch": batch,
                   "chunk": memory_chunked.chunk_size(d),
                   "grad_check": grads_agree(got, want),
                   "per_token_s": best_time(per_token, repeat, sync),
                   "chunked_s": best_time(chunked, repeat, sync)}
            row["speedup"] = row["per_token_s"] / row["chunked_s"]
            row["tokens_per_s"] = batch * s / row["chunked_s"]
            flops, nbytes = work_estimate(pair, s, d, batch)
            row["per_token_bandwidth_fraction"] = nbytes / row["per_token_s"] / peak_bw
            row["per_token_flops_fraction"] = flops / row["per_token_s"] / peak_flops
            flops, nbytes = chunked_work_estimate(pair, s, d, batch)
            row["chunked_bandwidth_fraction"] = nbytes / row["chunked_s"] / peak_bw
            row["chunked_flops_fraction"] = flops / row["chunked_s"] / peak_flops
            rows.append(row)
    return rows


def print_gpu_chunked(rows):
    print("\n| pair | d | s | batch | per-token (ms) | chunked (ms) | speed-up | tokens/s | "
          "% bandwidth per-token / chunked | % FP32 per-token / chunked | grad check |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['pair']} | {r['d']} | {r['s']} | {r['batch']} | "
              f"{1e3 * r['per_token_s']:.2f} | {1e3 * r['chunked_s']:.2f} | "
              f"{r['speedup']:.1f}x | {r['tokens_per_s']:,.0f} | "
              f"{100 * r['per_token_bandwidth_fraction']:.1f} / "
              f"{100 * r['chunked_bandwidth_fraction']:.1f} | "
              f"{100 * r['per_token_flops_fraction']:.2f} / "
              f"{100 * r['chunked_flops_fraction']:.2f} | "
              f"{'ok' if r['grad_check'] else 'MISMATCH'} |")


# --------------------------------------------------------------------------------------------
# Report


def print_cpu(rows):
    print("| pair | d | s | tool | fwd+bwd (ms) | tokens/s | vs torch | peak MiB | grad check |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---|")
    torch_t = {(r["pair"], r["d"], r["s"]): r["seconds"] for r in rows if r["tool"] == "torch"}
    for r in rows:
        base = torch_t.get((r["pair"], r["d"], r["s"]))
        ratio = f"{base / r['seconds']:.2f}x" if base else "-"
        mem = f"{r['peak_mib']:.1f}" if "peak_mib" in r else "-"
        print(f"| {r['pair']} | {r['d']} | {r['s']} | {r['tool']} | {1e3 * r['seconds']:.1f} | "
              f"{r['tokens_per_s']:,.0f} | {ratio} | {mem} | "
              f"{'ok' if r['grad_check'] else 'MISMATCH'} |")


def print_gpu(rows, peak_flops, peak_bw):
    print(f"\nGPU peaks used: {peak_flops / 1e12:.1f} TFLOP/s FP32, {peak_bw / 1e9:.0f} GB/s")
    print("| pair | d | s | batch | tool | fwd+bwd (ms) | tokens/s | % FP32 peak | "
          "% bandwidth | grad check |")
    print("|---|---:|---:|---:|---|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['pair']} | {r['d']} | {r['s']} | {r['batch']} | {r['tool']} | "
              f"{1e3 * r['seconds']:.2f} | {r['tokens_per_s']:,.0f} | "
              f"{100 * r['flops_fraction']:.2f} | {100 * r['bandwidth_fraction']:.1f} | "
              f"{'ok' if r['grad_check'] else 'MISMATCH'} |")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="smallest size (d=64, s=512), one repeat: a smoke test")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write every number to this file")
    parser.add_argument("--gpu", action="store_true",
                        help="also run the CUDA backend (needs CuPy and a GPU)")
    parser.add_argument("--gpu-batch", type=int, default=16,
                        help="sequences per call on the GPU (one CUDA block each)")
    parser.add_argument("--no-cpu", action="store_true", help="skip the CPU comparison")
    parser.add_argument("--device", choices=("cpu", "gpu"),
                        help="gpu: the GPU runs alone (--gpu --no-cpu), as benchmarks/train.py "
                             "--device gpu; cpu: the CPU runs alone")
    args = parser.parse_args(argv)
    if args.device == "gpu":
        args.gpu, args.no_cpu = True, True
    if args.gpu and kernels.detect_gpu() is None:
        print("benchmarks/kernels.py: error: --gpu needs CuPy and a usable CUDA GPU "
              "(pip install -e '.[cuda]'); none was found", file=sys.stderr)
        return 2
    sizes = [(64, 512)] if args.quick else [(64, 512), (64, 2048), (128, 512), (128, 2048)]
    repeat = 1 if args.quick else args.repeat
    print(f"# Kernel pairs, forward + backward; Python {platform.python_version()}, NumPy "
          f"{np.__version__}, PyTorch {torch_version() or 'not installed'}, "
          f"{platform.machine()}; window {WINDOW}, checkpoint every {CHECKPOINT}\n")
    out = {"window": WINDOW, "checkpoint_every": CHECKPOINT}
    if not args.no_cpu:
        out["cpu"] = run_cpu(sizes, repeat)
        print_cpu(out["cpu"])
        out["cpu_chunked"] = run_chunked([512] if args.quick else [1024, 4096], repeat)
        print_chunked(out["cpu_chunked"])
        out["cpu_periodic"] = run_periodic(PERIODIC_CASES[:1] if args.quick else PERIODIC_CASES,
                                           repeat)
        print_periodic(out["cpu_periodic"])
    if args.gpu:
        print(f"\n{kernels.info()}")
        rows, peak_flops, peak_bw = run_gpu(sizes, repeat, 1 if args.quick else args.gpu_batch)
        out["gpu"] = rows
        out["gpu_peaks"] = {"fp32_flops": peak_flops, "bandwidth_bytes_per_s": peak_bw}
        print_gpu(rows, peak_flops, peak_bw)
        out["gpu_chunked"] = run_gpu_chunked([512] if args.quick else [256, 1024, 4096, 16384],
                                             repeat, 1 if args.quick else args.gpu_batch)
        print_gpu_chunked(out["gpu_chunked"])
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
