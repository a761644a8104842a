"""`hecate bench --quick` runs end to end: every ADBench problem on its smallest input, one
repeat, with the installed peers. It checks that the harness works and that every tool's
derivative agrees with Hecate's; timings are never asserted. JAX runs with jit only: without
jit, JAX compiles every op on its first call, which would take most of the test's time for
code that the jit variant runs too."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_quick_run_writes_the_report_and_plots(tmp_path):
    out = tmp_path / "results"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.run(
        [sys.executable, "-m", "models.cli", "bench", "gmm", "lstm", "ba", "--quick",
         "--tools", "autograd,torch,jax-jit", "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    report = (out / "report.md").read_text()
    for problem in ("GMM", "LSTM", "BA"):
        assert f"## ADBench {problem}" in report
    assert "| target (from the issue) | measured | status |" in report
    if importlib.util.find_spec("matplotlib") is not None:   # the plots need it
        for name in ("gmm.png", "lstm.png", "ba.png"):
            assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    data = json.loads((out / "results.json").read_text())
    rows = data["adbench"]
    assert {r["problem"] for r in rows} == {"gmm", "lstm", "ba"}
    assert all("error" not in r for r in rows), [r for r in rows if "error" in r]
    assert all(r["rho"] <= 1e-8 for r in rows)         # every peer agrees with Hecate
    assert all(r["objective_s"] > 0 and r["derivative_s"] > 0 for r in rows)
    assert rows[0]["tool"] == "hecate"


def test_a_benchmark_script_that_does_not_exist_yet_is_reported_not_failed():
    from benchmarks import harness

    text, ok = harness.run_script("no_such_benchmark", quick=True, log=lambda line: None)
    assert ok and "not available yet" in text
