"""The benchmarks run end to end. It checks that the script works, not how fast
anything is: timings are never asserted."""
import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "overhead.py"


def test_overhead_benchmark_quick_run(tmp_path):
    out = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "| workload | ops | tool | primal (us) | gradient (us) |" in proc.stdout
    assert "| target (from the issue) | measured | status |" in proc.stdout
    assert "MISMATCH" not in proc.stdout   # every peer's gradient agrees with Hecate's

    data = json.loads(out.read_text())
    rows = data["results"]
    assert {r["workload"] for r in rows} == {"chain-10", "chain-256x256", "fan-16"}
    assert all(r["grad_s"] > 0 and r["primal_s"] > 0 for r in rows)
    assert [r["tool"] for r in rows if r["workload"] == "chain-10"][0] == "hecate"


def test_checkpoint_benchmark_quick_run(tmp_path):
    out = tmp_path / "results.json"
    script = SCRIPT.with_name("checkpoint.py")
    proc = subprocess.run([sys.executable, str(script), "--quick", "--json", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "| variant | stored carries | time (s) | time / plain | peak memory (MB) " in proc.stdout
    assert "MISMATCH" not in proc.stdout   # checkpointed gradients agree with the plain loop
    rows = json.loads(out.read_text())["results"]
    assert [r["variant"] for r in rows] == ["plain", "every=8", "revolve s=16"]
    assert all(r["peak_bytes"] > 0 and r["time_s"] > 0 for r in rows)
