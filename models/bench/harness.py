"""`hecate bench`: Hecate side by side with its peers on ADBench's objectives and more.

    hecate bench [gmm|lstm|ba|overhead|kernels|train|checkpoint|peers|all ...] [--quick]
                 [--out DIR]

For every ADBench input and every installed tool (Hecate, HIPS autograd, PyTorch eager, JAX
without and with ``jit``) it measures, as ADBench does, the minimum over repeats of the
objective time and of the gradient (BA: Jacobian) time, and reports gradient/objective ratios
and Hecate/tool ratios from the same run. Every tool's derivative is first checked against
Hecate's with ADBench's metric rho. The results go to DIR (default benchmarks/results/ in a
checkout, hecate-bench-results/ in the current directory otherwise):
``report.md`` (Markdown tables and the targets), ``results.json`` and one PNG plot per problem.
``overhead`` runs `models.bench.overhead`; ``kernels``, ``train`` and ``checkpoint`` run the
repository's `benchmarks/<name>.py` (with ``--quick`` when asked) when the script exists, that
is from a checkout; an installed package reports them as not available. ``peers`` runs
`models.bench.lm_peers` (Hecate's language model against same-size PyTorch peers, trained on the
same data; minutes, so ``all`` leaves it out unless it is named too: ``hecate bench all peers``).

All tools run on one thread by default (``--threads``): the harness restarts itself with the
BLAS and XLA thread counts fixed, because they can only be set before the libraries load.
See benchmarks/README.md for the method and for how to reproduce every number.
"""
from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import timeit
from pathlib import Path

from . import PACKAGE_PARENT, checkout_root
from .allocator import ALLOCATOR_STATES, KEEP_TUNABLES, prime_allocator
from ..validation import NON_NEGATIVE, NON_NEGATIVE_INT, POSITIVE_INT, Parser

SECTIONS = ("gmm", "lstm", "ba", "overhead", "kernels", "train", "checkpoint", "peers")
# Sections that `all` leaves out (they take minutes), run only when named.
NAMED_ONLY = ("peers",)
ADBENCH = ("gmm", "lstm", "ba")
_CHILD = "HECATE_BENCH_CHILD"

# --------------------------------------------------------------------------------------------
# Measurement


def best_time(fn, target_s: float, repeat: int, time_limit_s: float) -> float:
    """Seconds per call of `fn`: the minimum over up to `repeat` measurements of N calls each,
    N the first of 1, 2, 5, 10, ... that makes one measurement last `target_s`; no new
    measurement starts once `time_limit_s` has been spent. The caller has warmed `fn` up."""
    timer = timeit.Timer(fn)      # timeit switches the garbage collector off while it measures
    for number in _counts():
        elapsed = timer.timeit(number)
        if elapsed >= target_s:
            break
    best, spent = elapsed / number, elapsed
    for _ in range(repeat - 1):
        if spent >= time_limit_s:
            break
        elapsed = timer.timeit(number)
        spent += elapsed
        best = min(best, elapsed / number)
    return best


def _counts():
    scale = 1
    while True:
        for k in (1, 2, 5):
            yield k * scale
        scale *= 10


def run_problem(problem, tools, settings, log):
    """Measure every tool on every size of `problem`; one row (a dict) per (size, tool)."""
    from .adbench import runners, suite

    rows = []
    sizes = problem.sizes[:1] if settings.quick else problem.sizes
    for size in sizes:
        inp, source = suite.load(problem, size, settings.generated)
        reference = None
        for tool in tools:
            row = {"problem": problem.name, "input": size.label, "source": source,
                   "tool": tool.name}
            try:
                prepared = tool.prepare(problem.name, inp)
                prepared.objective()                       # warm-up (and JAX's compilation)
                derivative = runners.flat(prepared.derivative())
                if tool.name == "hecate":                  # Hecate runs first
                    reference = derivative
                # against Hecate's derivative; None when Hecate itself failed
                row["rho"] = None if reference is None else runners.rho(derivative, reference)
                row["objective_s"] = best_time(prepared.objective, *settings.timing)
                row["derivative_s"] = best_time(prepared.derivative, *settings.timing)
            except Exception as exc:   # one tool failing must not stop the others
                row["error"] = f"{type(exc).__name__}: {exc}"
            rows.append(row)
            log(_progress(row))
    for row in rows:   # the ratios; Hecate/tool within the same input of the same run
        if "error" in row:
            continue
        row["ratio"] = row["derivative_s"] / row["objective_s"]
        mine = next((r for r in rows if r["input"] == row["input"] and r["tool"] == "hecate"
                     and "error" not in r), None)
        if mine is not None:
            row["hecate_over_tool_derivative"] = mine["derivative_s"] / row["derivative_s"]
            row["hecate_over_tool_objective"] = mine["objective_s"] / row["objective_s"]
    return rows


def agrees(row) -> bool:
    """Whether a row measured a derivative that matches Hecate's (ADBench's tolerance)."""
    return "error" not in row and row["rho"] is not None and row["rho"] <= 1e-8


def profile_problem(problem, rows, settings, log) -> str:
    """The profile (`adbench.profiling`) of Hecate's derivative on each input of `rows`."""
    from .adbench import profiling, suite

    parts = []
    for size in (s for s in problem.sizes if any(r["input"] == s.label for r in rows)):
        mine = next(r for r in rows if r["input"] == size.label and r["tool"] == "hecate")
        if "error" in mine:
            continue
        log(f"  profiling Hecate on {size.label}")
        inp, _ = suite.load(problem, size, settings.generated)
        prepared = suite.TOOLS[0].prepare(problem.name, inp)
        prepared.derivative()
        calls = max(1, min(20, int(1.0 / mine["derivative_s"])))
        parts.append(f"### {problem.name} {size.label} (objective "
                     f"{mine['objective_s'] * 1e3:.3f} ms)\n\n"
                     + profiling.profile(prepared.derivative, calls))
    return "\n\n".join(parts)


def _progress(row):
    if "error" in row:
        return f"  {row['input']:<28} {row['tool']:<9} FAILED: {row['error']}"
    return (f"  {row['input']:<28} {row['tool']:<9} objective {row['objective_s'] * 1e3:9.3f} ms"
            f"  derivative {row['derivative_s'] * 1e3:9.3f} ms")

# --------------------------------------------------------------------------------------------
# Targets (from the issue) and the report


# The limits on derivative/objective, per problem.
RATIO_LIMITS = {"gmm": 3.0, "lstm": 4.0, "ba": 3.0}


def adbench_targets(rows):
    """(label, measured, limit) for each target the ADBench rows can decide: the
    derivative/objective limit of each problem, and for GMM the gradient time against PyTorch
    eager's at every size, each for eager and compiled Hecate.

    >>> rows = [{"problem": "gmm", "input": "d2_K5", "tool": "hecate", "ratio": 3.5,
    ...          "derivative_s": 2.0}, {"problem": "gmm", "input": "d2_K5", "tool": "torch",
    ...          "ratio": 2.2, "derivative_s": 1.6}]
    >>> for label, value, limit in adbench_targets(rows):
    ...     print(f"{label}: {value:.2f}")
    GMM d2_K5: Hecate gradient/objective <= 3: 3.50
    GMM d2_K5: Hecate gradient time <= PyTorch eager's: 1.25
    """
    ok = [r for r in rows if "error" not in r]
    targets = []
    for row in ok:
        problem, tool = row["problem"], row["tool"]
        if tool not in ("hecate", "hecate-compiled") or problem not in RATIO_LIMITS:
            continue
        name = "Hecate" if tool == "hecate" else "Hecate compiled"
        what = "Jacobian" if problem == "ba" else "gradient"
        limit = RATIO_LIMITS[problem]
        targets.append((f"{problem.upper()} {row['input']}: {name} {what}/objective <= {limit:g}",
                        row["ratio"], limit))
        torch = next((r for r in ok if r["problem"] == problem and r["input"] == row["input"]
                      and r["tool"] == "torch"), None)
        if problem == "gmm" and torch is not None:
            targets.append((f"GMM {row['input']}: {name} gradient time <= PyTorch eager's",
                            row["derivative_s"] / torch["derivative_s"], 1.0))
    return targets


def format_adbench(problem, rows) -> str:
    what = problem.derivative
    lines = [f"| input | tool | objective (ms) | {what} (ms) | {what}/objective "
             f"| Hecate/tool {what} | Hecate/tool objective | rho vs Hecate |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['input']} | {r['tool']} | failed: {r['error']} | | | | | |")
            continue
        check = "n/a" if r["rho"] is None else (
            f"{r['rho']:.1e}" + ("" if agrees(r) else " MISMATCH"))
        lines.append(
            f"| {r['input']} | {r['tool']} | {r['objective_s'] * 1e3:.3f} "
            f"| {r['derivative_s'] * 1e3:.3f} | {r['ratio']:.2f} "
            f"| {_ratio(r, 'hecate_over_tool_derivative')} "
            f"| {_ratio(r, 'hecate_over_tool_objective')} | {check} |")
    sources = sorted({r["source"] for r in rows})
    lines += ["", "Inputs: " + "; ".join(sources) + "."]
    return "\n".join(lines)


def _ratio(row, key):
    return f"{row[key]:.2f}" if key in row else "n/a"


def format_targets(targets) -> str:
    lines = ["| target (from the issue) | measured | status |", "|---|---:|---|"]
    for label, value, limit in targets:
        lines.append(f"| {label} | {value:.2f} | {'met' if value <= limit else 'not met'} |")
    return "\n".join(lines)


def plot(problem, rows, path) -> bool:
    """Derivative time and derivative/objective ratio per tool and input, as a PNG. Returns
    False, writing nothing, when matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    import numpy as np

    ok = [r for r in rows if "error" not in r]
    inputs = list(dict.fromkeys(r["input"] for r in ok))
    tools = list(dict.fromkeys(r["tool"] for r in ok))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    width = 0.8 / max(len(tools), 1)
    for k, tool in enumerate(tools):
        by_input = {r["input"]: r for r in ok if r["tool"] == tool}
        xs = np.arange(len(inputs)) + (k - (len(tools) - 1) / 2) * width
        for ax, key, scale in ((axes[0], "derivative_s", 1e3), (axes[1], "ratio", 1.0)):
            values = [by_input[i][key] * scale if i in by_input else np.nan for i in inputs]
            ax.bar(xs, values, width, label=tool)
    limit = {"gmm": 3.0, "lstm": 4.0}.get(problem.name)
    if limit:
        axes[1].axhline(limit, color="k", linestyle="--", linewidth=1, label=f"target {limit:g}")
    axes[0].set_ylabel(f"{problem.derivative} time (ms, log scale)")
    axes[1].set_ylabel(f"{problem.derivative} time / objective time (log scale)")
    for ax in axes:
        ax.set_yscale("log")
        plain = matplotlib.ticker.FormatStrFormatter("%g")   # 3, not 3 x 10^0
        ax.yaxis.set_major_formatter(plain)
        low, high = ax.get_ylim()
        if high / low < 30:   # within about a decade, label the minor ticks too
            ax.yaxis.set_minor_formatter(plain)
        ax.set_xticks(np.arange(len(inputs)), inputs, rotation=20, ha="right", fontsize=8)
    axes[1].legend(fontsize=8)
    fig.suptitle(f"ADBench {problem.name.upper()}: minimum over repeats, same run")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True

# --------------------------------------------------------------------------------------------
# The other sections


def run_overhead(quick: bool, log):
    """`models.bench.overhead` with its own defaults, so its numbers match running it alone."""
    from . import overhead

    log("overhead: recorded-op overhead against the peers")
    meta, results = overhead.run(overhead.WORKLOADS, (1.0 if quick else 25.0) / 1e3,
                                 1 if quick else 7)
    return overhead.format_report(meta, results), {"meta": meta, "results": results}


def run_peers(quick: bool, log):
    """`models.bench.lm_peers`: (markdown, results), or a note and None without PyTorch (a
    missing peer is skipped, not a failure)."""
    from . import lm_peers

    if not lm_peers.torch_available():
        message = f"The `peers` section was skipped: {lm_peers.TORCH_MISSING}."
        log(message)
        return message, None
    data = lm_peers.run(quick=quick, log=log)
    return lm_peers.format_report(data), data


def run_script(name: str, quick: bool, log):
    """Run the repository's `benchmarks/<name>.py` if it exists. Returns (markdown, ok): a
    missing script is reported as not available, which is not a failure."""
    root = checkout_root()
    if root is None:
        message = (f"The `{name}` benchmark is not available in an installed package: it runs "
                   f"from a checkout of the repository (benchmarks/{name}.py).")
        log(message)
        return message, True
    script = root / "benchmarks" / f"{name}.py"
    if not script.is_file():
        message = f"The `{name}` benchmark is not available yet (no benchmarks/{name}.py)."
        log(message)
        return message, True
    log(f"{name}: running benchmarks/{name}.py")
    proc = subprocess.run([sys.executable, str(script)] + (["--quick"] if quick else []),
                          cwd=root, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        return (f"benchmarks/{name}.py failed (exit status {proc.returncode}):\n\n"
                f"```\n{tail}\n```"), False
    return proc.stdout.strip(), True

# --------------------------------------------------------------------------------------------
# Command line


def _versions(tools):
    versions = {"python": platform.python_version()}
    for package in ["numpy"] + [t.package for t in tools if t.package]:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = "?"
    return versions


class Settings:
    """What the measurements need from the command line."""

    def __init__(self, args):
        self.quick, self.generated = args.quick, args.generated
        repeat = args.repeat or (1 if args.quick else 5)
        target_ms = args.target_ms if args.target_ms is not None else (0 if args.quick else 50)
        self.timing = (target_ms / 1e3, repeat, args.time_limit)


def default_out() -> Path:
    """benchmarks/results/ in a checkout (git ignores it), else ./hecate-bench-results."""
    root = checkout_root()
    return root / "benchmarks" / "results" if root else Path("hecate-bench-results")


def parse_args(argv):
    parser = Parser(
        prog="hecate bench", description=__doc__.splitlines()[0],
        epilog="Method and reproduction: benchmarks/README.md in the repository")
    parser.add_argument("sections", nargs="*", metavar="SECTION",
                        help=f"any of {', '.join(SECTIONS)}, all (default: all, which "
                             f"leaves out {', '.join(NAMED_ONLY)} unless named too)")
    parser.add_argument("--out", default=str(default_out()), metavar="DIR",
                        help="results directory (default: benchmarks/results/ in a checkout, "
                             "which git ignores; ./hecate-bench-results in an installed "
                             "package)")
    parser.add_argument("--quick", action="store_true",
                        help="smallest input of each problem, one repeat: a smoke test, not a "
                             "result")
    parser.add_argument("--tools", help="comma-separated subset of "
                        "hecate,autograd,torch,jax,jax-jit (Hecate always runs)")
    parser.add_argument("--generated", action="store_true",
                        help="use generated inputs even where ADBench's files are available")
    parser.add_argument("--repeat", type=POSITIVE_INT, metavar="N",
                        help="measurements per time (default 5; quick 1); a positive integer")
    parser.add_argument("--target-ms", type=NON_NEGATIVE, metavar="MS",
                        help="length of one measurement (default 50 ms; quick: one call); a "
                             "finite number >= 0")
    parser.add_argument("--time-limit", type=NON_NEGATIVE, default=10.0, metavar="S",
                        help="no new repeat of a measurement after S seconds (default 10); a "
                             "finite number >= 0")
    parser.add_argument("--profile", action="store_true",
                        help="also write where Hecate's derivative time goes, per input "
                             "(profile_<problem>.txt)")
    parser.add_argument("--threads", type=NON_NEGATIVE_INT, default=1, metavar="N",
                        help="threads for BLAS, PyTorch and XLA (default 1; 0 leaves the "
                             "libraries' defaults)")
    parser.add_argument("--debug", action="store_true",
                        help="show the full traceback of an error (`hecate --debug bench` too)")
    parser.add_argument("--allocator", choices=ALLOCATOR_STATES, default="primed",
                        help="glibc's state (see benchmarks/README.md): primed (default), cold, "
                             "or keep (a what-if without page faults)")
    args = parser.parse_args(argv)
    unknown = set(args.sections) - set(SECTIONS) - {"all"}
    if unknown:
        parser.error(f"unknown section(s) {', '.join(sorted(unknown))}; choose from "
                     f"{', '.join(SECTIONS)}, all")
    if not args.sections or "all" in args.sections:
        named = [s for s in args.sections if s in NAMED_ONLY]
        args.sections = [s for s in SECTIONS if s not in NAMED_ONLY or s in named]
    return args


def _restart(argv, threads: int, keep_memory: bool) -> int:
    """Run the harness again in a child process whose BLAS and XLA use `threads` threads
    (those libraries read their thread counts only when they load), and whose glibc keeps
    freed memory when `keep_memory`."""
    env = dict(os.environ, **{_CHILD: "1"})
    if keep_memory:
        env["GLIBC_TUNABLES"] = ":".join(p for p in (env.get("GLIBC_TUNABLES"), KEEP_TUNABLES)
                                         if p)
    if threads:
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS"):
            env[var] = str(threads)
    if threads == 1:
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false "
                            "intra_op_parallelism_threads=1").strip()
    # the child imports this very package (a checkout run without installing included)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_PARENT), env.get("PYTHONPATH"))
                                        if p)
    return subprocess.call([sys.executable, "-m", "models.bench.harness", *argv], env=env)


def main(argv=None) -> int:
    """Entry point of `hecate bench` (and of ``python -m models.bench.harness``, and of the
    repository's ``benchmarks/harness.py``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    try:   # before the child starts, so that a bad --out is one line, not the child's traceback
        Path(args.out).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"hecate bench: error: --out {args.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    if (args.threads or args.allocator == "keep") and os.environ.get(_CHILD) != "1":
        return _restart(argv, args.threads, args.allocator == "keep")
    if args.allocator == "primed":
        prime_allocator()

    from .adbench import suite

    names = None if not args.tools else {"hecate", *args.tools.split(",")}
    unknown = (names or set()) - {t.name for t in suite.TOOLS}
    if unknown:
        print(f"hecate bench: error: unknown tool(s) {', '.join(sorted(unknown))}; choose from "
              f"{', '.join(t.name for t in suite.TOOLS)}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    settings = Settings(args)
    tools, skipped = suite.available_tools(names)
    if args.threads and any(t.name == "torch" for t in tools):
        import torch
        torch.set_num_threads(args.threads)

    def log(line):
        print(line, file=sys.stderr, flush=True)

    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
            "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
            "cpus": os.cpu_count(), "threads": args.threads or "library defaults",
            "allocator": {"primed": "glibc primed (a 24 MB array freed before measuring)",
                          "cold": "glibc as the process started",
                          "keep": "glibc keeps all freed memory (what-if)"}[args.allocator],
            "versions": _versions(tools), "skipped": skipped, "quick": args.quick,
            "target_ms": settings.timing[0] * 1e3, "repeat": settings.timing[1],
            "time_limit_s": settings.timing[2]}
    report = [f"# hecate bench, {meta['date']}", "", _describe(meta), ""]
    data = {"meta": meta, "adbench": [], "targets": []}
    ok = True
    for section in args.sections:
        if section in ADBENCH:
            problem = suite.PROBLEMS[section]
            log(f"{section}: {problem.derivative} of ADBench {section.upper()}")
            rows = run_problem(problem, tools, settings, log)
            data["adbench"] += rows
            ok &= all(agrees(r) for r in rows)
            plotted = plot(problem, rows, out / f"{section}.png")
            report += [f"## ADBench {section.upper()}", "", format_adbench(problem, rows), "",
                       f"![{section}]({section}.png)" if plotted
                       else "(No plot: matplotlib is not installed.)", ""]
            if args.profile:
                (out / f"profile_{section}.txt").write_text(
                    profile_problem(problem, rows, settings, log) + "\n")
                report += [f"Profile of Hecate's {problem.derivative}: "
                           f"[profile_{section}.txt](profile_{section}.txt).", ""]
        elif section == "peers":
            text, data["peers"] = run_peers(args.quick, log)
            report += ["## Language model against PyTorch peers (models/bench/lm_peers.py)", "",
                       text, ""]
        elif section == "overhead":
            text, data["overhead"] = run_overhead(args.quick, log)
            report += ["## Recorded-op overhead (benchmarks/overhead.py)", "", text, ""]
        else:
            text, script_ok = run_script(section, args.quick, log)
            ok &= script_ok
            report += [f"## {section}", "", text, ""]
    targets = adbench_targets(data["adbench"])
    data["targets"] = [{"target": t, "measured": v, "limit": lim, "met": v <= lim}
                       for t, v, lim in targets]
    if targets:
        report += ["## ADBench targets", "", format_targets(targets), ""]
    text = "\n".join(report)
    (out / "report.md").write_text(text)
    (out / "results.json").write_text(json.dumps(data, indent=2))
    print(text)
    log(f"results in {out.resolve()}")
    return 0 if ok else 1


def _describe(meta) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in meta["versions"].items())
    lines = [f"{meta['machine']}, {meta['cpus']} CPUs; threads per tool: {meta['threads']}; "
             f"allocator: {meta['allocator']}. "
             f"{versions}.",
             f"Times: minimum over up to {meta['repeat']} measurements of at least "
             f"{meta['target_ms']:g} ms each (at most {meta['time_limit_s']:g} s per time), "
             "after one warm-up call." + (" QUICK RUN: a smoke test, not a result."
                                          if meta["quick"] else "")]
    lines += [f"Skipped {s}." for s in meta["skipped"]]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
