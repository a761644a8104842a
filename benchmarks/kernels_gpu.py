"""The GPU tables of `benchmarks/kernels.py --gpu`: the CUDA backend against the reference on
CuPy arrays and PyTorch on CUDA, with the fraction of peak FP32 FLOP/s and memory bandwidth
reached, and the chunked memories against the per-token CUDA kernels."""
from __future__ import annotations

from kernels import memory_chunked

from .kernel_steps import (CHECKPOINT, CHUNKED, PAIRS, WINDOW, best_time, grads_agree,
                           hecate_step, host, make_inputs, output_weights, torch_step,
                           torch_version)


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
