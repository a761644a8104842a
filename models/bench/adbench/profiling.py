"""Where Hecate's derivative time goes on an ADBench input (``hecate bench --profile``).

Two views of the same calls:

- a split by primitive: the time spent in each primitive's forward rule (``augmented_primal``:
  the NumPy arithmetic of the objective plus what the rule saves) and reverse rule, measured by
  wrapping every registered primitive for the duration of the profile. What is left of the
  total is the engine's own work: dispatch and recording, the sweep loop, adding cotangents
  that meet at one value, and the shadows;
- cProfile, top functions by own time. cProfile does not see NumPy's ufuncs as calls, so their
  time is part of the Python function that calls them.
"""
from __future__ import annotations

import cProfile
import collections
import contextlib
import io
import pstats
import sys
import time

from tape import Primitive


def _primitives():
    """Every primitive that a module of ops/, tape/ or the benchmarks holds at top level."""
    seen = {}
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(("ops", "tape", "kernels", "models.bench",
                                                    "benchmarks")):
            continue
        for value in list(vars(module).values()):
            if isinstance(value, Primitive):
                seen[id(value)] = value
    return list(seen.values())


@contextlib.contextmanager
def timed_rules():
    """Within the block, accumulate seconds per primitive name: {"forward": {...},
    "reverse": {...}, "calls": {...}}; the rules are restored on exit."""
    totals = {"forward": collections.defaultdict(float), "reverse": collections.defaultdict(float),
              "calls": collections.Counter()}
    saved = []

    def wrap(prim, attr, kind):
        rule = getattr(prim, attr)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return rule(*args, **kwargs)
            finally:
                totals[kind][prim.name] += time.perf_counter() - start
                if kind == "forward":
                    totals["calls"][prim.name] += 1
        saved.append((prim, attr, rule))
        setattr(prim, attr, timed)

    for prim in _primitives():
        if prim.augmented_primal is not None:
            wrap(prim, "augmented_primal", "forward")
        if prim.reverse is not None:
            wrap(prim, "reverse", "reverse")
    try:
        yield totals
    finally:
        for prim, attr, rule in saved:
            setattr(prim, attr, rule)


def profile(derivative, calls: int = 5, top: int = 12) -> str:
    """A text report of `calls` calls of `derivative` (a warmed-up zero-argument callable)."""
    start = time.perf_counter()
    for _ in range(calls):
        derivative()
    plain = (time.perf_counter() - start) / calls
    with timed_rules() as totals:
        start = time.perf_counter()
        for _ in range(calls):
            derivative()
        wrapped = (time.perf_counter() - start) / calls
    fwd = sum(totals["forward"].values()) / calls
    rev = sum(totals["reverse"].values()) / calls
    lines = [f"one derivative: {plain * 1e3:.2f} ms ({wrapped * 1e3:.2f} ms with the rules "
             f"timed); forward rules {fwd * 1e3:.2f} ms, reverse rules {rev * 1e3:.2f} ms, "
             f"engine (the rest) {(wrapped - fwd - rev) * 1e3:.2f} ms; "
             f"{sum(totals['calls'].values()) // calls} recorded ops",
             "", f"{'primitive':<16} {'ops':>7} {'forward ms':>11} {'reverse ms':>11}"]
    names = sorted(totals["calls"], key=lambda n: -(totals["forward"][n] + totals["reverse"][n]))
    for name in names[:top]:
        lines.append(f"{name:<16} {totals['calls'][name] // calls:>7} "
                     f"{totals['forward'][name] / calls * 1e3:>11.3f} "
                     f"{totals['reverse'][name] / calls * 1e3:>11.3f}")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        derivative()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).strip_dirs().sort_stats("tottime").print_stats(top)
    body = out.getvalue().strip().splitlines()
    start = next((i for i, line in enumerate(body) if "ncalls" in line), 0)
    heading = f"cProfile of {calls} derivatives, by own time:"
    return "\n".join(lines + ["", heading] + body[start:])
