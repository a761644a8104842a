"""Per-op recording overhead and gradient/primal time ratios: Hecate against its peers.

Three workloads, each a scalar function of one float64 array, are written once against an array
namespace `xp` (NumPy, ``autograd.numpy``, ``torch`` or ``jax.numpy``), so that every tool
differentiates exactly the same operations:

- ``chain-10``: a 50-op chain of elementwise ops (sin, *0.5, +x, tanh, exp, repeated) on 10
  elements, then a sum. The arrays are so small that the arithmetic costs almost nothing and the
  time measures the machinery: recording, dispatch and the reverse sweep.
- ``chain-256x256``: the same chain on 256x256 arrays, where the arithmetic dominates.
- ``fan-16``: one input fanned out to 16 branches of 4 ops each, summed back, on 10 elements
  (many uses of one value: cotangent accumulation on the reverse sweep).

Every time is ``min(timeit.repeat(fn, number=N, repeat=R)) / N`` with N chosen so that one
measurement takes about ``--target-ms`` (25 ms by default). The README defines the reported
ratios. Run ``python benchmarks/overhead.py [--quick] [--json PATH] [--profile]`` from a
checkout, or ``python -m models.bench.overhead`` from any install; ``hecate bench overhead``
runs it with its defaults.
"""
from __future__ import annotations

import argparse
import cProfile
import functools
import importlib.metadata
import io
import json
import platform
import pstats
import sys
import timeit
from pathlib import Path

import numpy as np

from tape import Active, Const, Duplicated, Reverse, autodiff
from tape import compile as compile_

from ..validation import NON_NEGATIVE, POSITIVE_INT
from .allocator import prime_allocator

# --------------------------------------------------------------------------------------------
# Workloads


def chain(xp, x, cycles=10):
    """50 elementwise ops (10 cycles of 5) and a sum: 51 recorded ops."""
    y = x
    for _ in range(cycles):
        y = xp.sin(y)
        y = y * 0.5
        y = y + x
        y = xp.tanh(y)
        y = xp.exp(y)
    return xp.sum(y)


def fan(xp, x, branches=16):
    """One input used by `branches` branches of 4 ops, summed back: 16*4 + 15 + 1 = 80 ops."""
    total = None
    for k in range(1, branches + 1):
        branch = xp.tanh(xp.sin(x * (k / branches)) + x)
        total = branch if total is None else total + branch
    return xp.sum(total)


class Workload:
    __slots__ = ("name", "fn", "shape", "n_ops", "description")

    def __init__(self, name, fn, shape, n_ops, description):
        self.name, self.fn, self.shape = name, fn, shape
        self.n_ops, self.description = n_ops, description

    def input(self):
        rng = np.random.default_rng(0)
        return rng.uniform(-1.0, 1.0, self.shape)


WORKLOADS = [
    Workload("chain-10", chain, (10,), 51, "50-op elementwise chain + sum, 10 elements"),
    Workload("chain-256x256", chain, (256, 256), 51, "same chain, 256x256 elements"),
    Workload("fan-16", fan, (10,), 80, "fan-out to 16 branches of 4 ops, fan-in, 10 elements"),
]

# --------------------------------------------------------------------------------------------
# Tools: each builds a zero-argument callable computing the full gradient, and the gradient
# itself (as a NumPy array) for the cross-check.


def hecate_tool(fn, x):
    f = functools.partial(fn, np)
    dx = np.zeros_like(x)

    def step():
        # The shadow accumulates across calls (Enzyme semantics); that is harmless for timing.
        autodiff(Reverse, f, Active, Duplicated(x, dx))

    def gradient():
        g = np.zeros_like(x)
        autodiff(Reverse, f, Active, Duplicated(x, g))
        return g
    return step, gradient


def hecate_compiled_tool(fn, x):
    """The same gradient through `tape.compile`: traced on the first call, then replayed."""
    g = compile_(Reverse, functools.partial(fn, np), Active, Duplicated)
    dx = np.zeros_like(x)

    def step():
        g(Duplicated(x, dx))

    def gradient():
        out = np.zeros_like(x)
        g(Duplicated(x, out))
        return out
    return step, gradient


def autograd_tool(fn, x):
    import autograd
    import autograd.numpy as anp
    grad_f = autograd.grad(functools.partial(fn, anp))
    return (lambda: grad_f(x)), (lambda: np.asarray(grad_f(x)))


def torch_tool(fn, x):
    import torch
    xt = torch.from_numpy(x.copy()).requires_grad_(True)

    def step():
        xt.grad = None
        fn(torch, xt).backward()

    def gradient():
        step()
        return xt.grad.numpy().copy()
    return step, gradient


def jax_tool(fn, x):
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    grad_f = jax.grad(functools.partial(fn, jnp))   # eager (op-by-op) dispatch: no jit
    xj = jnp.asarray(x)
    return (lambda: grad_f(xj).block_until_ready()), (lambda: np.asarray(grad_f(xj)))


def _version(module_name):
    try:
        __import__(module_name)
    except Exception:   # a broken install is treated like a missing one
        return None
    try:
        return importlib.metadata.version(module_name)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def available_tools():
    """(name, builder, version) for Hecate and every importable peer; the skipped ones."""
    tools, skipped = [("hecate", hecate_tool, "working tree"),
                      ("hecate-compiled", hecate_compiled_tool, "working tree")], []
    for name, module, builder in [("autograd", "autograd", autograd_tool),
                                  ("torch", "torch", torch_tool),
                                  ("jax", "jax", jax_tool)]:
        version = _version(module)
        if version is None:
            skipped.append(name)
        else:
            tools.append((name, builder, version))
    if any(name == "torch" for name, _, _ in tools):
        import torch
        torch.set_num_threads(1)   # NumPy's elementwise ops are single-threaded too
    return tools, skipped

# --------------------------------------------------------------------------------------------
# Measurement


def best_time(fn, target_s, repeat):
    """Seconds per call: the minimum over `repeat` measurements of N calls each, with N grown
    (1, 2, 5, 10, ...) until one measurement takes at least `target_s`."""
    fn()   # warm-up: caches, lazy imports, first-call allocations
    number = next(n for n in _steps() if timeit.timeit(fn, number=n) >= target_s)
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number


def _steps():
    scale = 1
    while True:
        for k in (1, 2, 5):
            yield k * scale
        scale *= 10


def run(workloads, target_s, repeat):
    tools, skipped = available_tools()
    results = []
    for w in workloads:
        x = w.input()
        primal = best_time(functools.partial(w.fn, np, x), target_s, repeat)
        reference = None
        for name, builder, _ in tools:
            step, gradient = builder(w.fn, x)
            g = gradient()
            if reference is None:
                reference, grad_ok = g, True
            else:
                grad_ok = bool(np.allclose(g, reference, rtol=1e-9, atol=1e-12))
            t = best_time(step, target_s, repeat)
            results.append({
                "workload": w.name, "tool": name, "shape": list(w.shape), "recorded_ops": w.n_ops,
                "primal_s": primal, "grad_s": t, "grad_over_primal": t / primal,
                "overhead_per_op_s": (t - primal) / w.n_ops, "grad_matches_hecate": grad_ok,
            })
    for w in workloads:   # Hecate's overhead relative to each tool's, in the same run
        rows = [r for r in results if r["workload"] == w.name]
        mine = next(r for r in rows if r["tool"] == "hecate")["overhead_per_op_s"]
        for r in rows:
            r["hecate_overhead_over_tool"] = mine / r["overhead_per_op_s"]
    meta = {
        "python": platform.python_version(), "numpy": np.__version__,
        "machine": platform.machine(), "processor": platform.processor() or "?",
        "tools": {name: version for name, _, version in tools}, "skipped": skipped,
        "torch_threads": 1 if any(n == "torch" for n, _, _ in tools) else None,
        "target_ms": target_s * 1e3, "repeat": repeat,
    }
    return meta, results

# --------------------------------------------------------------------------------------------
# Report


TARGETS = [
    # (label, workload, tool, key, limit)
    ("recorded-op overhead <= 0.6x autograd's (chain-10)", "chain-10", "autograd",
     "hecate_overhead_over_tool", 0.6),
    ("gradient/primal <= 2.5x (chain-256x256)", "chain-256x256", "hecate",
     "grad_over_primal", 2.5),
    ("gradient/primal <= 8x (chain-10; autograd ~19x)", "chain-10", "hecate",
     "grad_over_primal", 8.0),
    ("compiled gradient/primal <= 3x (chain-10)", "chain-10", "hecate-compiled",
     "grad_over_primal", 3.0),
    ("compiled gradient/primal <= 2.3x (chain-256x256)", "chain-256x256", "hecate-compiled",
     "grad_over_primal", 2.3),
]


def _us(seconds):
    return f"{seconds * 1e6:.1f}"


def format_report(meta, results) -> str:
    lines = ["| workload | ops | tool | primal (us) | gradient (us) | gradient/primal "
             "| overhead/op (us) | Hecate overhead / tool's | grad check |",
             "|---|---:|---|---:|---:|---:|---:|---:|---|"]
    for r in results:
        lines.append(
            f"| {r['workload']} | {r['recorded_ops']} | {r['tool']} | {_us(r['primal_s'])} "
            f"| {_us(r['grad_s'])} | {r['grad_over_primal']:.2f}x "
            f"| {_us(r['overhead_per_op_s'])} | {r['hecate_overhead_over_tool']:.2f}x "
            f"| {'ok' if r['grad_matches_hecate'] else 'MISMATCH'} |")
    lines += ["", "| target (from the issue) | measured | status |", "|---|---:|---|"]
    for label, workload, tool, key, limit in TARGETS:
        row = next((r for r in results if r["workload"] == workload and r["tool"] == tool), None)
        if row is None:
            lines.append(f"| {label} | n/a | {tool} not measured |")
        else:
            value = row[key]
            lines.append(f"| {label} | {value:.2f}x | {'met' if value <= limit else 'not met'} |")
    tools = ", ".join(f"{k} {v}" for k, v in meta["tools"].items())
    lines += ["", f"Tools: {tools}; NumPy {meta['numpy']}, Python {meta['python']}, "
              f"{meta['machine']}. min over {meta['repeat']} repeats of ~{meta['target_ms']:g} ms."]
    if "allocator" in meta:
        lines.append(f"glibc allocator: {meta['allocator']}"
                     + (" (a 24 MB array freed before measuring)." if meta["allocator"] == "primed"
                        else "."))
    if meta["torch_threads"]:
        lines.append("PyTorch eager with torch.set_num_threads(1).")
    for name in meta["skipped"]:
        lines.append(f"Skipped {name}: not installed.")
    return "\n".join(lines)


def split_hecate(workload, target_s, repeat) -> str:
    """Where Hecate's gradient time goes per recorded op: the NumPy arithmetic of the primal,
    the forward pass with recording (a Const return records the tape but runs no sweep), and
    the reverse sweep (the rest)."""
    x = workload.input()
    dx = np.zeros_like(x)
    f = functools.partial(workload.fn, np)
    primal = best_time(functools.partial(f, x), target_s, repeat)
    record = best_time(lambda: autodiff(Reverse, f, Const, Duplicated(x, dx)), target_s, repeat)
    grad = best_time(lambda: autodiff(Reverse, f, Active, Duplicated(x, dx)), target_s, repeat)
    def total(v):
        return np.sum(v)
    fixed = best_time(lambda: autodiff(Reverse, total, Active, Duplicated(x, dx)), target_s, repeat)
    n = workload.n_ops
    return (f"Hecate on {workload.name}, per recorded op: plain NumPy primal {_us(primal / n)} us; "
            f"forward with recording {_us(record / n)} us; "
            f"reverse sweep {_us((grad - record) / n)} us; whole gradient {_us(grad / n)} us. "
            f"(The gradient of np.sum alone, i.e. autodiff's fixed cost plus one op, takes "
            f"{_us(fixed)} us.)")


def profile_hecate(workload, calls=2000, top=15) -> str:
    """cProfile of Hecate's gradient on `workload`, top functions by own (tottime) time."""
    step, _ = hecate_tool(workload.fn, workload.input())
    step()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        step()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).strip_dirs().sort_stats("tottime").print_stats(top)
    return f"cProfile of {calls} Hecate gradients of {workload.name}:\n{out.getvalue()}"


def main(argv=None) -> int:
    """Entry point of ``python benchmarks/overhead.py`` / ``python -m models.bench.overhead``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="one short repeat per measurement: a smoke test, not a result")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--repeat", type=POSITIVE_INT,
                        help="measurements per time (default 7; quick 1)")
    parser.add_argument("--target-ms", type=NON_NEGATIVE,
                        help="length of one measurement (default 25 ms; quick 1 ms)")
    parser.add_argument("--workload", action="append", choices=[w.name for w in WORKLOADS],
                        help="run only this workload (repeatable)")
    parser.add_argument("--profile", action="store_true",
                        help="also print a cProfile summary of Hecate on chain-10")
    parser.add_argument("--allocator", choices=("primed", "cold"), default="primed",
                        help="glibc's state, as for `hecate bench` (benchmarks/README.md): "
                             "primed (a 24 MB array freed first, the default) or cold")
    args = parser.parse_args(argv)
    if args.allocator == "primed":
        prime_allocator()

    repeat = args.repeat or (1 if args.quick else 7)
    target_s = (args.target_ms or (1.0 if args.quick else 25.0)) / 1e3
    workloads = [w for w in WORKLOADS if not args.workload or w.name in args.workload]
    meta, results = run(workloads, target_s, repeat)
    meta["quick"] = args.quick
    meta["allocator"] = args.allocator
    print(format_report(meta, results))
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    if args.profile:
        print()
        print(split_hecate(WORKLOADS[0], target_s, repeat))
        print()
        print(profile_hecate(WORKLOADS[0], calls=100 if args.quick else 2000))
    return 0


if __name__ == "__main__":
    sys.exit(main())
