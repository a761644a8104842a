"""``python benchmarks/rule_ratios.py [--quick] [--only SUBSTR] [--json PATH]``: gradient/primal
ratio of Hecate's eager reverse-mode rules, one operation at a time, to find performance cliffs.

Each case is a scalar loss of a few arrays built around one NumPy operation: ``np.sum(op(x) * w)``
with a fixed random weight ``w`` of the output's shape (or the natural scalar loss of a reduction,
``op(x)`` itself). Two times are taken in the same process:

- **primal**: the loss evaluated on plain ndarrays (the operation plus the weighting, so that a
  view such as ``x[::2]`` still has a cost to compare with);
- **gradient**: one ``autodiff(Reverse, loss, Active, Duplicated(x, dx), Const(...))`` call
  (recording forward pass plus reverse sweep).

Every time is the minimum over R measurements (R = 5; 1 with ``--quick``) of N calls each, N
grown until one measurement takes at least 10 ms (2 ms with ``--quick``), the garbage collector
off while measuring (fewer measurements once 1.5 s is spent on one time; a single call of over
1 s is taken as it is). A rule that saves its residual and runs an O(primal) reverse pass lands at
about 2-5x; the table is sorted by the ratio at the large size, and flags

- ``RATIO``: gradient/primal above 8x at the large size;
- ``SCALING``: from the small to the large size the gradient time grew faster than the primal
  time, by more than n^0.4 (the "excess exponent" column: log(gradient growth / primal growth) /
  log(element growth); an O(n^2) rule for an O(n) operation shows +1).

Sizes are chosen so that per-call overhead does not dominate: 1-D cases run at n = 1e5 and 1e6,
matrix cases at 316x316 and 1000x1000 (10x the elements), cubic linear algebra at 300x300 and
600x600, scipy.special at n = 3e4 and 3e5 (its functions cost 10-50x more per element than
np.sin). A case whose gradient already takes over 0.25 s at the small size is measured at a
10x smaller size instead of the large one, so that an O(n^2) rule does not take minutes (its
row then shows the small size). ``--quick`` runs one smaller size (n = 1e4, 100x100), one
repeat: a smoke test, not a result (per-call overhead dominates there). A case whose
gradient raises is listed under the table with its error.
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

if __name__ == "__main__":
    # One BLAS thread, as NumPy's elementwise loops have: the comparison is about the rules'
    # arithmetic, and threads fighting other jobs on a shared machine only add noise.
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from benchmarks.rule_ratio_cases import CASES, QUICK, SPECIAL, VEC, Case, vec  # noqa: E402
from tape import Active, Const, Duplicated, Reverse, autodiff  # noqa: E402

FLAG_RATIO = 8.0
FLAG_EXPONENT = 0.4                 # gradient time ~ n^(primal's exponent + this): flagged
SLOW_SMALL_S = 0.25                 # a gradient this slow at the small size: grow 3x, not 10x
REPEAT_BUDGET_S = 1.5               # one time of one case: stop repeating past this
TIMEOUT_S = 60.0                    # one size of one case: give up past this


# ----------------------------------------------------------------------------- timing

class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def best_time(fn, target_s, repeat, cap_s):
    """Seconds per call: the minimum over `repeat` measurements of N calls each, N grown until
    one measurement takes at least `target_s`; stops repeating once `cap_s` is spent."""
    start = time.perf_counter()
    fn()                                        # warm-up
    first = time.perf_counter() - start
    if first > 1.0:                             # a slow call: one is enough to show a cliff
        return first
    number = max(1, min(10_000, int(target_s / max(first, 1e-7))))
    best = first
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeat):
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            best = min(best, (time.perf_counter() - t0) / number)
            if time.perf_counter() - start > cap_s:
                break
    finally:
        gc.enable()
    return best


def measure(c: Case, size, target_s, repeat):
    """(primal s, gradient s) of one case at one size."""
    rng = np.random.default_rng(0)
    args = c.make(size, rng)
    out = c.op(*args)
    w = rng.standard_normal(np.shape(out)) if np.ndim(out) else None

    if w is None:
        def loss(*a):
            return c.op(*a)
    else:
        def loss(*a):
            return np.sum(c.op(*a) * w)

    specs = [Duplicated(a, np.zeros_like(a)) if k in c.active else Const(a)
             for k, a in enumerate(args)]
    primal = best_time(lambda: loss(*args), target_s, repeat, REPEAT_BUDGET_S)
    grad = best_time(lambda: autodiff(Reverse, loss, Active, *specs), target_s, repeat,
                     REPEAT_BUDGET_S)
    return primal, grad


def _elements(c: Case, size):
    return size if c.sizes in (VEC, SPECIAL) else size * size


def run(cases, quick):
    target_s, repeat = (2e-3, 1) if quick else (10e-3, 5)
    rows, errors = [], []
    signal.signal(signal.SIGALRM, _alarm)
    for c in cases:
        sizes = [QUICK[c.sizes]] if quick else list(c.sizes)
        res = []
        case_start = time.perf_counter()
        try:
            while sizes:
                s = sizes.pop(0)
                signal.setitimer(signal.ITIMER_REAL, TIMEOUT_S)
                try:
                    res.append((s,) + measure(c, s, target_s, repeat))
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                if sizes and res[-1][2] > SLOW_SMALL_S:
                    # Already slow: a 10x larger input could take minutes (an O(n^2) rule is
                    # just what this looks for), so the scaling comes from a 10x smaller one.
                    sizes = []
                    small = s // 10 if c.sizes in (VEC, SPECIAL) else int(round(s / 10 ** 0.5))
                    res.insert(0, (small,) + measure(c, small, target_s, repeat))
        except _Timeout:
            errors.append((c, f"timed out after {TIMEOUT_S:.0f} s at {c.label(s)}"))
            continue
        except Exception as e:             # noqa: BLE001 - a failing rule is a finding
            msg = str(e).splitlines()[0][:120] if str(e) else ""
            errors.append((c, f"{type(e).__name__}: {msg}"))
            continue
        s, p, g = res[-1]
        row = dict(name=c.name, group=c.group, size=c.label(s), primal_s=p, grad_s=g,
                   ratio=g / p)
        if len(res) > 1:
            s0, p0, g0 = res[0]
            growth = _elements(c, s) / _elements(c, s0)
            row.update(small=c.label(s0), ratio_small=g0 / p0, elements_growth=growth,
                       primal_growth=p / p0, grad_growth=g / g0,
                       excess_exponent=math.log((g / g0) / (p / p0)) / math.log(growth))
        flags = []
        if row["ratio"] > FLAG_RATIO:
            flags.append("RATIO")
        if row.get("excess_exponent", 0) > FLAG_EXPONENT:
            flags.append("SCALING")
        row["flags"] = flags
        rows.append(row)
        print(f"  {c.group:13s} {c.name:34s} {row['ratio']:8.2f}x "
              f"{time.perf_counter() - case_start:6.2f} s", file=sys.stderr, flush=True)
    return rows, errors


def _ms(t):
    return f"{t * 1e3:.3f}" if t < 0.1 else f"{t * 1e3:.1f}"


def table(rows):
    lines = ["| # | case | group | size | primal (ms) | gradient (ms) | grad/primal | "
             "grad/primal small | growth: elements, primal, gradient | excess exponent | flags |",
             "|---:|---|---|---|---:|---:|---:|---:|---|---:|---|"]
    for k, r in enumerate(sorted(rows, key=lambda r: -r["ratio"]), 1):
        small = f"{r['ratio_small']:.2f}x ({r['small']})" if "ratio_small" in r else ""
        scaling = (f"{r['elements_growth']:.0f}x, {r['primal_growth']:.1f}x, "
                   f"{r['grad_growth']:.1f}x | {r['excess_exponent']:+.2f}"
                   if "excess_exponent" in r else " | ")
        lines.append(f"| {k} | {r['name']} | {r['group']} | {r['size']} | {_ms(r['primal_s'])} "
                     f"| {_ms(r['grad_s'])} | {r['ratio']:.2f}x | {small} | {scaling} "
                     f"| {' '.join(r['flags'])} |")
    return "\n".join(lines)


def keep_freed_memory():
    """Ask glibc's malloc to keep freed memory instead of giving it back to the system.

    By default a freed temporary of 128 KB to 32 MB is unmapped (or trimmed off the heap), and
    the next one of its size page-faults its memory in again: on a VM that costs about 2.5 us
    per 4 KB page, 2 ms for a 1e5-element float64 temporary re-faulted a few times. A gradient
    keeps more temporaries alive than its primal, so this cost, which is the allocator's and
    not the rule's, would dominate every cheap elementwise case (``multiply`` at n = 1e5:
    2.4 ms with the default settings, 0.34 ms without the faults, against 0.065 ms primal).
    Returns whether the settings were applied."""
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        return bool(libc.mallopt(m_mmap_threshold, 32 * 1024 * 1024)
                    and libc.mallopt(m_trim_threshold, 2 ** 31 - 1))
    except (OSError, AttributeError):
        return False


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small size, one repeat: smoke test")
    ap.add_argument("--only", default=None, help="run the cases whose name or group contains this")
    ap.add_argument("--system-malloc", action="store_true",
                    help="keep malloc's default settings (see keep_freed_memory)")
    ap.add_argument("--json", default=None, help="also write every row as JSON")
    a = ap.parse_args(argv)
    np.seterr(all="ignore")
    kept = False if a.system_malloc else keep_freed_memory()
    gc.collect()
    gc.freeze()         # what is alive now is never garbage: later collections skip it
    cases = [c for c in CASES
             if a.only is None or a.only in c.name or a.only in c.group]
    t0 = time.perf_counter()
    floor = measure(Case("floor", "floor", vec(), lambda x: x, sizes=(10,)), 10,
                    2e-3 if a.quick else 10e-3, 1 if a.quick else 5)[1]
    rows, errors = run(cases, a.quick)
    print(f"\nGradient/primal of one eager autodiff(Reverse, ...) call per operation "
          f"({len(rows)} cases, {time.perf_counter() - t0:.0f} s"
          f"{', --quick: one smaller size, one repeat' if a.quick else ''}); flags: RATIO > "
          f"{FLAG_RATIO:g}x, SCALING: gradient time grows as n^(primal's exponent + more "
          f"than {FLAG_EXPONENT:g}).\n"
          f"Fixed cost of one call (sum(x * w) on 10 elements): {floor * 1e3:.3f} ms; a case whose "
          f"gradient takes a few times that is dominated by it. malloc: "
          f"{'freed memory kept (mallopt)' if kept else 'default settings'}.\n")
    print(table(rows))
    if errors:
        print("\nCases whose gradient failed:\n")
        for c, msg in errors:
            print(f"- {c.group} / {c.name}: {msg}")
    if a.json:
        Path(a.json).write_text(json.dumps(dict(rows=rows, errors=[
            dict(name=c.name, group=c.group, error=m) for c, m in errors]), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
