"""``python benchmarks/rule_ratios.py [--quick] [--only SUBSTR] [--compiled] [--json PATH]``:
gradient/primal ratio of Hecate's eager reverse-mode rules, one operation at a time, to find
performance cliffs.

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

``--compiled`` also compiles each case's loss with ``tape.compile(Reverse, loss, Active,
Duplicated, ..., Const, ...)`` at the row's size (the large one) and checks it against eager
``autodiff`` before timing it: a first call (it traces) on the case's inputs, a second on other
inputs (new values of the same shapes: it traces again to confirm the program), a third on the
first inputs again (a replay), each compared with eager autodiff on the same inputs
(``np.allclose`` with rtol 1e-12, and whether the shadows are equal bit for bit). Then the
compiled gradient is timed as the eager one, on replays. A second table lists the compiled
gradient, its ratio to the primal and to the eager gradient, and flags

- ``COMPILE-ERROR``: a compiled call raised where eager autodiff did not;
- ``EAGER``: the compiled function ran a call eagerly (``g.stats.eager_calls``; the reason is
  listed, with whether a ``CompileWarning`` said so);
- ``MISMATCH``: a compiled gradient differs from the eager one (beyond rtol 1e-12);
- ``RETRACE``: a call traced anew or a guard failed (``traces`` > 1 or ``guard_failures``);
- ``SLOWER``: the compiled gradient took more than 1.2x the eager one.

The weight ``w`` is read from the loss's closure, as a user's loss would read it: a compiled
call compares such arrays with the traced ones at each call (a watched array changed in place
traces again), which costs a few passes over ``w`` that eager calls do not make (about 3 ms at
n = 1e6), so cheap elementwise cases show compiled/eager above 1 at the large size. A case
whose rule guards its inputs' values (``RETRACE``) is timed replaying the program specialised
to the first input: its compiled time is not what a new input costs.

The second inputs draw every argument afresh; where that changes the output's shape (a mask, a
count, a ``Const`` that decides a shape), the ``Const`` arguments are kept and only the
differentiated ones are drawn afresh, or, failing that, scaled by 1.01 (signs, order and ties
kept).
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
import warnings
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
import tape  # noqa: E402
from tape import (Active, Const, CompileWarning, Duplicated, Reverse, autodiff,  # noqa: E402
                  keep_freed_memory)

FLAG_RATIO = 8.0
FLAG_EXPONENT = 0.4                 # gradient time ~ n^(primal's exponent + this): flagged
SLOW_SMALL_S = 0.25                 # a gradient this slow at the small size: grow 3x, not 10x
REPEAT_BUDGET_S = 1.5               # one time of one case: stop repeating past this
TIMEOUT_S = 60.0                    # one size of one case: give up past this
FLAG_SLOWER = 1.2                   # --compiled: compiled gradient / eager gradient above this
COMPILED_RTOL = 1e-12               # --compiled: compiled against eager gradient


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


def _loss_and_args(c: Case, size):
    """The case's arguments at `size` and its scalar loss (with its fixed weight)."""
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
    return loss, args


def _specs(c: Case, args):
    return [Duplicated(a, np.zeros_like(a)) if k in c.active else Const(a)
            for k, a in enumerate(args)]


def measure(c: Case, size, target_s, repeat):
    """(primal s, gradient s) of one case at one size."""
    loss, args = _loss_and_args(c, size)
    specs = _specs(c, args)
    primal = best_time(lambda: loss(*args), target_s, repeat, REPEAT_BUDGET_S)
    grad = best_time(lambda: autodiff(Reverse, loss, Active, *specs), target_s, repeat,
                     REPEAT_BUDGET_S)
    return primal, grad


# ----------------------------------------------------------------------------- --compiled

def _second_input(c: Case, size, args, loss):
    """Arguments of the shapes and dtypes of `args` with other values, for which the loss keeps
    its output shape and eager autodiff runs (see the module's docstring)."""
    fresh = c.make(size, np.random.default_rng(1))
    candidates = [
        tuple(fresh),
        tuple(fresh[k] if k in c.active else a for k, a in enumerate(args)),
        tuple(a * 1.01 if k in c.active else a for k, a in enumerate(args))]
    shape = np.shape(c.op(*args))
    for cand in candidates:
        if any(np.shape(a) != np.shape(b) or np.result_type(a) != np.result_type(b)
               for a, b in zip(cand, args)):
            continue
        try:
            if np.shape(c.op(*cand)) != shape or not np.all(np.isfinite(loss(*cand))):
                continue
        except Exception:   # noqa: BLE001 - another candidate
            continue
        return cand
    raise RuntimeError("no second input keeps the output's shape")


def _shadows(c: Case, specs):
    return [s.dval for k, s in enumerate(specs) if k in c.active]


def _same(ref, got):
    """(allclose at COMPILED_RTOL, bit-equal, largest relative difference) of two gradients."""
    close, exact, worst = True, True, 0.0
    for a, b in zip(ref, got):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            return False, False, math.inf
        close &= bool(np.allclose(b, a, rtol=COMPILED_RTOL, atol=0.0, equal_nan=True))
        exact &= bool(np.array_equal(a, b, equal_nan=True))
        finite = np.isfinite(a) & np.isfinite(b)
        if finite.any():
            scale = max(float(np.max(np.abs(a[finite]))), 1e-300)
            worst = max(worst, float(np.max(np.abs(a[finite] - b[finite]))) / scale)
    return close, exact, worst


def _same_returns(ref, got):
    if isinstance(ref, (tuple, list)):
        return (isinstance(got, (tuple, list)) and len(ref) == len(got)
                and all(_same_returns(a, b) for a, b in zip(ref, got)))
    if ref is None or got is None:
        return ref is None and got is None
    return _same([ref], [got])[0]


def measure_compiled(c: Case, size, target_s, repeat, eager_grad_s):
    """Check `tape.compile` of the case's loss against eager autodiff on two inputs, then time
    its replays. Returns a dict of the compiled columns and flags of the row."""
    loss, args = _loss_and_args(c, size)
    res = dict(compiled_flags=[])
    flags, notes = res["compiled_flags"], []
    try:
        args_b = _second_input(c, size, args, loss)
    except RuntimeError as e:
        args_b = None
        notes.append(str(e))
    activities = [Duplicated if k in c.active else Const for k in range(len(args))]
    g = tape.compile(Reverse, loss, Active, *activities)
    calls = [("first", args), ("second", args_b), ("first again", args)]
    exact_all, worst = True, 0.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CompileWarning)
        for label, a in calls:
            if a is None:
                continue
            ref_specs, got_specs = _specs(c, a), _specs(c, a)
            ref_ret = autodiff(Reverse, loss, Active, *ref_specs)
            try:
                got_ret = g(*got_specs)
            except Exception as e:   # noqa: BLE001 - eager autodiff ran: a finding
                flags.append("COMPILE-ERROR")
                msg = str(e).splitlines()[0][:120] if str(e) else ""
                notes.append(f"{label} call raised {type(e).__name__}: {msg}")
                break
            close, exact, diff = _same(_shadows(c, ref_specs), _shadows(c, got_specs))
            close &= _same_returns(ref_ret, got_ret)
            exact_all &= exact
            worst = max(worst, diff)
            if not close and "MISMATCH" not in flags:
                flags.append("MISMATCH")
                notes.append(f"{label} call: relative difference {diff:.2e}")
    stats = g.stats
    res.update(exact=exact_all, max_rel_diff=worst, compile_s=stats.compile_seconds)
    if "COMPILE-ERROR" not in flags:
        specs = _specs(c, args)
        t = best_time(lambda: g(*specs), target_s, repeat, REPEAT_BUDGET_S)
        res.update(compiled_grad_s=t)
        if t > FLAG_SLOWER * eager_grad_s:
            flags.append("SLOWER")
        stats = g.stats
    res.update(stats=dict(traces=stats.traces, hits=stats.hits,
                          guard_failures=stats.guard_failures,
                          eager_calls=stats.eager_calls, programs=stats.programs))
    if stats.eager_calls:
        warned = any(issubclass(w.category, CompileWarning) for w in caught)
        flags.append("EAGER")
        notes.append(f"{stats.eager_calls} eager call(s), "
                     f"{'with' if warned else 'no'} CompileWarning: "
                     + "; ".join(r[:160] for r in stats.eager_reasons))
    if stats.traces > 1 or stats.guard_failures:
        flags.append("RETRACE")
        notes.append(f"traces={stats.traces}, guard_failures={stats.guard_failures}")
    res["compiled_notes"] = notes
    return res


def _elements(c: Case, size):
    return size if c.sizes in (VEC, SPECIAL) else size * size


def run(cases, quick, compiled=False):
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
        if compiled:
            signal.setitimer(signal.ITIMER_REAL, TIMEOUT_S)
            try:
                row.update(measure_compiled(c, s, target_s, repeat, g))
            except _Timeout:
                row.update(compiled_flags=["COMPILE-ERROR"], compiled_notes=[
                    f"timed out after {TIMEOUT_S:.0f} s"])
            except Exception as e:   # noqa: BLE001 - outside the compiled calls: the script's
                msg = str(e).splitlines()[0][:120] if str(e) else ""
                row.update(compiled_flags=["COMPILE-ERROR"],
                           compiled_notes=[f"{type(e).__name__}: {msg}"])
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            if "compiled_grad_s" in row:
                row.update(compiled_ratio=row["compiled_grad_s"] / p,
                           compiled_vs_eager=row["compiled_grad_s"] / g)
        rows.append(row)
        extra = ""
        if compiled:
            extra = (f" compiled {row['compiled_ratio']:8.2f}x" if "compiled_ratio" in row
                     else " compiled      -  ") + f" {' '.join(row['compiled_flags'])}"
        print(f"  {c.group:13s} {c.name:34s} {row['ratio']:8.2f}x"
              f"{extra} {time.perf_counter() - case_start:6.2f} s", file=sys.stderr, flush=True)
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


def compiled_table(rows):
    """The --compiled columns, sorted by compiled / eager gradient time."""
    lines = ["| # | case | size | primal (ms) | eager gradient (ms) | eager grad/primal | "
             "compiled gradient (ms) | compiled grad/primal | compiled / eager | bit-equal | "
             "compile (ms) | flags |",
             "|---:|---|---|---:|---:|---:|---:|---:|---:|---|---:|---|"]
    key = lambda r: -r.get("compiled_vs_eager", math.inf)   # noqa: E731
    for k, r in enumerate(sorted(rows, key=key), 1):
        if "compiled_grad_s" in r:
            comp = (f"{_ms(r['compiled_grad_s'])} | {r['compiled_ratio']:.2f}x | "
                    f"{r['compiled_vs_eager']:.2f}")
        else:
            comp = " |  | "
        exact = ("yes" if r["exact"] else f"no ({r['max_rel_diff']:.1e})") if "exact" in r else ""
        cost = _ms(r["compile_s"]) if "compile_s" in r else ""
        lines.append(f"| {k} | {r['name']} | {r['size']} | {_ms(r['primal_s'])} | "
                     f"{_ms(r['grad_s'])} | {r['ratio']:.2f}x | {comp} | {exact} | {cost} | "
                     f"{' '.join(r['compiled_flags'])} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small size, one repeat: smoke test")
    ap.add_argument("--only", default=None, help="run the cases whose name or group contains this")
    ap.add_argument("--system-malloc", action="store_true",
                    help="keep malloc's default settings (see tape.allocator)")
    ap.add_argument("--json", default=None, help="also write every row as JSON")
    ap.add_argument("--compiled", action="store_true",
                    help="also check and time tape.compile of each loss against eager autodiff")
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
    rows, errors = run(cases, a.quick, a.compiled)
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
    if a.compiled:
        flagged = [r for r in rows if r["compiled_flags"]]
        print(f"\nCompiled gradient (tape.compile, replayed) against the eager one, checked on "
              f"two inputs (allclose rtol {COMPILED_RTOL:g}); flags: COMPILE-ERROR, EAGER "
              f"(ran eagerly), MISMATCH, RETRACE, SLOWER (> {FLAG_SLOWER:g}x eager). "
              f"{sum(r.get('exact', False) for r in rows)} of {len(rows)} bit-equal, "
              f"{len(flagged)} flagged.\n")
        print(compiled_table(rows))
        if flagged:
            print("\nFlagged by --compiled:\n")
            for r in flagged:
                print(f"- {r['group']} / {r['name']} ({r['size']}): "
                      f"{' '.join(r['compiled_flags'])}"
                      + (f": {'; '.join(r['compiled_notes'])}" if r["compiled_notes"] else ""))
    if a.json:
        Path(a.json).write_text(json.dumps(dict(rows=rows, errors=[
            dict(name=c.name, group=c.group, error=m) for c, m in errors]), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
