"""``python benchmarks/overhead.py [--quick] [--json PATH] [--profile]``: the recorded-op overhead
benchmark from a checkout, without installing. The benchmark itself is `models.bench.overhead`
(part of the installed package, so that `hecate bench overhead` runs from any install).

A second table follows, for forward mode: the tangent (JVP) of the same workloads along one
direction, eager ``autodiff(Forward, ...)`` against ``tape.compile(Forward, ...)`` and PyTorch's
``torch.func.jvp`` (when torch is importable), each with its ratio to the plain NumPy primal;
the "W=4" rows push 4 directions in one pass (BatchDuplicated), eager and compiled. A third
table gives the gradient (reverse mode) of the same workloads with W = 4 seeds in one sweep
(BatchDuplicated: every Duplicated shadow comes four times), eager and compiled, beside the
one-seed gradient.
"""
import functools
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from models.bench.overhead import WORKLOADS, _us, _version, best_time, main  # noqa: E402
from tape import Active, BatchDuplicated, Duplicated, Forward, Reverse, autodiff  # noqa: E402
from tape import compile as compile_  # noqa: E402


def _forward_tools(fn, x, v):
    """(name, zero-argument callable computing the tangent, the tangent) per tool."""
    f = functools.partial(fn, np)
    compiled = compile_(Forward, f, Duplicated, Duplicated)
    tools = [("hecate", lambda: autodiff(Forward, f, Duplicated, Duplicated(x, v))[0]),
             ("hecate-compiled", lambda: compiled(Duplicated(x, v))[0])]
    # Batch mode: W = 4 directions in one pass (v the first), eager and compiled.
    vs = (v,) + tuple(np.random.default_rng(2).normal(size=(3,) + x.shape))
    batched = compile_(Forward, f, BatchDuplicated, BatchDuplicated)
    tools += [("hecate W=4", lambda: autodiff(Forward, f, BatchDuplicated,
                                              BatchDuplicated(x, vs))[0][0]),
              ("hecate-compiled W=4", lambda: batched(BatchDuplicated(x, vs))[0][0])]
    if _version("torch") is not None:
        import torch
        torch.set_num_threads(1)
        xt, vt = torch.from_numpy(x.copy()), torch.from_numpy(v.copy())
        tf = functools.partial(fn, torch)
        tools.append(("torch.func.jvp", lambda: torch.func.jvp(tf, (xt,), (vt,))[1]))
    return tools


def forward_report(target_s: float, repeat: int, names=("chain-10", "chain-256x256",
                                                         "fan-16")) -> str:
    """The forward-mode table: tangent time per tool and its ratio to the primal."""
    lines = ["| workload | tool | primal (us) | tangent (us) | tangent/primal | tangent check |",
             "|---|---|---:|---:|---:|---|"]
    for w in (w for w in WORKLOADS if w.name in names):
        x = w.input()
        v = np.random.default_rng(1).normal(size=x.shape)
        primal = best_time(functools.partial(w.fn, np, x), target_s, repeat)
        reference = None
        for name, step in _forward_tools(w.fn, x, v):
            tangent = float(step())
            reference = tangent if reference is None else reference
            ok = np.isclose(tangent, reference, rtol=1e-9, atol=1e-12)
            t = best_time(step, target_s, repeat)
            lines.append(f"| {w.name} | {name} | {_us(primal)} | {_us(t)} | {t / primal:.2f}x "
                         f"| {'ok' if ok else 'MISMATCH'} |")
    return "\n".join(lines)


def _reverse_tools(fn, x):
    """(name, zero-argument callable computing a gradient's first element) per tool: one seed
    and W = 4 seeds, eager and compiled (shadows accumulate across calls, as they would)."""
    f = functools.partial(fn, np)
    dx, dxs = np.zeros_like(x), tuple(np.zeros_like(x) for _ in range(4))
    one = compile_(Reverse, f, Active, Duplicated)
    batched = compile_(Reverse, f, Active, BatchDuplicated)
    return [("hecate", lambda: autodiff(Reverse, f, Active, Duplicated(x, dx))),
            ("hecate-compiled", lambda: one(Duplicated(x, dx))),
            ("hecate W=4", lambda: autodiff(Reverse, f, Active, BatchDuplicated(x, dxs))),
            ("hecate-compiled W=4", lambda: batched(BatchDuplicated(x, dxs)))]


def reverse_batched_report(target_s: float, repeat: int, names=("chain-10", "fan-16")) -> str:
    """The batched reverse-mode table: gradient time per tool and its ratio to the primal."""
    lines = ["| workload | tool | primal (us) | gradient (us) | gradient/primal |",
             "|---|---|---:|---:|---:|"]
    for w in (w for w in WORKLOADS if w.name in names):
        x = w.input()
        primal = best_time(functools.partial(w.fn, np, x), target_s, repeat)
        for name, step in _reverse_tools(w.fn, x):
            step()
            t = best_time(step, target_s, repeat)
            lines.append(f"| {w.name} | {name} | {_us(primal)} | {_us(t)} | {t / primal:.2f}x |")
    return "\n".join(lines)


if __name__ == "__main__":
    status = main()
    quick = "--quick" in sys.argv
    print()
    print("Forward mode (one tangent direction; W=4 rows: four):")
    print(forward_report((1.0 if quick else 25.0) / 1e3, 1 if quick else 7))
    print()
    print("Reverse mode with W = 4 seeds in one sweep (BatchDuplicated; the first rows: one):")
    print(reverse_batched_report((1.0 if quick else 25.0) / 1e3, 1 if quick else 7))
    sys.exit(status)
