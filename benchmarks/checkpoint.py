"""Peak memory and time of a long recurrence, differentiated with and without checkpointing.

The workload is an RNN of ``--steps`` steps (4096) and width ``--dim`` (128),
``h = tanh(W @ h + x_t)`` with a scalar readout ``y_t = sum(h)`` per step and the loss
``sum(h_T) + 0.5 * sum(y**2)``, differentiated with respect to `W` (which the step reads from
its closure) and `h0`. Three ways of running the loop are compared:

- ``plain``: a Python loop; the tape stores every step's residuals.
- ``every=k``: `checkpointed_scan(step, h0, xs, every=k)`, k about sqrt(steps): the tape stores
  every k-th carry, and each segment is recomputed in the reverse pass.
- ``revolve s``: `checkpointed_scan(..., schedule="revolve", snapshots=s)`.

Peak memory is `tracemalloc`'s peak during one gradient call, above what was allocated before it
(NumPy reports its array allocations to tracemalloc, so it counts arrays and Python objects).
"tape arrays" is the memory the tape's residuals keep alive when the forward pass ends. Times
are the minimum over ``--repeat`` gradient calls, without tracemalloc, the variants taking turns.
Run ``python benchmarks/checkpoint.py [--quick] [--json PATH] [--steps N] [--dim D]``.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:   # run as a script from a checkout, without installing
    sys.path.insert(0, str(ROOT))

from tape import Active, Const, Reverse, autodiff, checkpointed_scan  # noqa: E402
from tape.core import ReverseTrace, Tracer  # noqa: E402

# Targets from the issue: at least 4x less peak memory at no more than 1.6x the time.
MEMORY_TARGET, TIME_TARGET = 4.0, 1.6


def rnn_step(W):
    def step(h, x):
        h = np.tanh(W @ h + x)
        return h, np.sum(h)
    return step


def plain_loss(W, h0, xs):
    step, h, ys = rnn_step(W), h0, []
    for x in xs:
        h, y = step(h, x)
        ys.append(y)
    return np.sum(h) + 0.5 * np.sum(np.stack(ys) ** 2)


def scan_loss(**schedule):
    def loss(W, h0, xs):
        h, ys = checkpointed_scan(rnn_step(W), h0, xs, **schedule)
        return np.sum(h) + 0.5 * np.sum(ys ** 2)
    return loss


def gradient(loss, W, h0, xs):
    (dW, dh0, _), = autodiff(Reverse, loss, Active, Active(W), Active(h0), Const(xs))
    return dW, dh0


def peak_bytes(loss, args) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        gradient(loss, *args)
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def tape_bytes(loss, W, h0, xs) -> int:
    """Bytes of memory the tape's residuals keep alive when the forward pass ends, beyond the
    inputs: each residual array is traced to the array that owns its memory (a view keeps its
    base alive), and each such owner is counted once."""
    with ReverseTrace() as trace:
        loss(trace.new_leaf(W), trace.new_leaf(h0), xs)
        found: dict = {}
        for record in trace.records:
            _arrays(record[2], found, depth=0)
    inputs = {id(W), id(h0), id(xs)}
    return sum(a.nbytes for key, a in found.items() if key not in inputs)


def _arrays(saved, found, depth):
    if depth > 6:
        return
    if isinstance(saved, Tracer):
        saved = saved.value
    if isinstance(saved, np.ndarray):
        while isinstance(saved.base, np.ndarray):
            saved = saved.base
        found.setdefault(id(saved), saved)
    elif isinstance(saved, (tuple, list)):
        for v in saved:
            _arrays(v, found, depth + 1)
    elif isinstance(saved, dict):
        for v in saved.values():
            _arrays(v, found, depth + 1)


def run(steps, dim, repeat, every, snapshots):
    rng = np.random.default_rng(0)
    W = rng.standard_normal((dim, dim)) / math.sqrt(dim)
    h0, xs = rng.standard_normal(dim), rng.standard_normal((steps, dim))
    args = (W, h0, xs)
    every = every or max(1, math.isqrt(steps))
    variants = [("plain", plain_loss, steps),
                (f"every={every}", scan_loss(every=every), math.ceil(steps / every)),
                (f"revolve s={snapshots}", scan_loss(schedule="revolve", snapshots=snapshots),
                 snapshots)]
    reference = gradient(plain_loss, *args)
    results = []
    for name, loss, stored in variants:
        got = gradient(loss, *args)   # also the warm-up call
        ok = all(np.allclose(g, r, rtol=1e-9, atol=1e-12) for g, r in zip(got, reference))
        results.append({"variant": name, "stored_carries": stored, "grad_check": ok,
                        "peak_bytes": peak_bytes(loss, args),
                        "tape_bytes": tape_bytes(loss, *args), "times": []})
    for _ in range(repeat):   # the variants take turns, so a busy moment hits all of them
        for (_, loss, _), row in zip(variants, results):
            start = time.perf_counter()
            gradient(loss, *args)
            row["times"].append(time.perf_counter() - start)
    base = results[0]
    for row in results:
        row["time_s"] = min(row.pop("times"))
        row["time_ratio"] = row["time_s"] / base["time_s"]
        row["memory_ratio"] = base["peak_bytes"] / max(row["peak_bytes"], 1)
    meta = {"steps": steps, "dim": dim, "repeat": repeat, "numpy": np.__version__,
            "python": platform.python_version(), "machine": platform.machine()}
    return meta, results


def format_report(meta, results) -> str:
    lines = [f"RNN h = tanh(W h + x_t), {meta['steps']} steps, width {meta['dim']}; gradient "
             "with respect to W (read by the step from its closure) and h0.", "",
             "| variant | stored carries | time (s) | time / plain | peak memory (MB) "
             "| plain / peak | tape arrays after forward (MB) | grad check |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in results:
        lines.append(f"| {r['variant']} | {r['stored_carries']} | {r['time_s']:.3f} | "
                     f"{r['time_ratio']:.2f}x | {r['peak_bytes'] / 1e6:.2f} | "
                     f"{r['memory_ratio']:.1f}x | {r['tape_bytes'] / 1e6:.2f} | "
                     f"{'ok' if r['grad_check'] else 'MISMATCH'} |")
    every = results[1]
    lines += ["", "| target (from the issue) | measured | status |", "|---|---:|---|"]
    met = every["memory_ratio"] >= MEMORY_TARGET
    lines.append(f"| peak memory >= {MEMORY_TARGET:g}x less ({every['variant']}) | "
                 f"{every['memory_ratio']:.1f}x | {'met' if met else 'not met'} |")
    met = every["time_ratio"] <= TIME_TARGET
    lines.append(f"| time <= {TIME_TARGET:g}x plain ({every['variant']}) | "
                 f"{every['time_ratio']:.2f}x | {'met' if met else 'not met'} |")
    lines += ["", f"NumPy {meta['numpy']}, Python {meta['python']}, {meta['machine']}; "
              f"time: min over {meta['repeat']} gradient calls."]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="64 steps of width 8, one repeat: a smoke test, not a result")
    parser.add_argument("--steps", type=int, help="length of the recurrence (default 4096)")
    parser.add_argument("--dim", type=int, help="width of the carry (default 128)")
    parser.add_argument("--repeat", type=int, help="timed gradient calls (default 5)")
    parser.add_argument("--every", type=int, help="segment length (default about sqrt(steps))")
    parser.add_argument("--snapshots", type=int, default=16,
                        help="snapshots of the revolve variant (default 16)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    steps = args.steps or (64 if args.quick else 4096)
    dim = args.dim or (8 if args.quick else 128)
    repeat = args.repeat or (1 if args.quick else 5)
    meta, results = run(steps, dim, repeat, args.every, args.snapshots)
    meta["quick"] = args.quick
    print(format_report(meta, results))
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
