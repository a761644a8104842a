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
import platform  # noqa: E402
import sys  # noqa: E402
import tracemalloc  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# Run as a script, this file's folder comes first on sys.path, where this file would shadow the
# `kernels` package it benchmarks: the checkout's root goes first (also when PYTHONPATH holds it).
sys.path.insert(0, str(ROOT))

import kernels  # noqa: E402
from benchmarks.kernel_steps import (CHECKPOINT, CHUNKED, N_GATES, PAIRS, WINDOW,  # noqa: E402
                                     best_time, grads_agree, hecate_fn, hecate_step, host,
                                     loss_step, make_inputs, output_weights, torch_step,
                                     torch_version)
from benchmarks.kernels_gpu import (print_gpu, print_gpu_chunked, run_gpu,  # noqa: E402
                                    run_gpu_chunked)
from kernels import memory_chunked  # noqa: E402

# --------------------------------------------------------------------------------------------
# CPU tables


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
