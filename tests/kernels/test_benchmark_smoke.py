"""benchmarks/kernels.py runs end to end on its smallest size. Timings are never asserted."""
import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "kernels.py"


def test_kernel_benchmark_quick_run(tmp_path):
    out = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "| pair | d | s | tool | fwd+bwd (ms) | tokens/s |" in proc.stdout
    assert "MISMATCH" not in proc.stdout   # every tool's gradient agrees with Hecate's
    rows = json.loads(out.read_text())["cpu"]
    assert {r["pair"] for r in rows} == {"swa", "delta", "titans", "hebbian"}
    assert {(r["d"], r["s"]) for r in rows} == {(64, 512)}
    assert all(r["tokens_per_s"] > 0 for r in rows)
    ckpt = {r["pair"]: r["peak_mib"] for r in rows if r["tool"] == "hecate-ckpt"}
    full = {r["pair"]: r["peak_mib"] for r in rows if r["tool"] == "hecate"}
    assert all(ckpt[p] < full[p] for p in ckpt)   # checkpointing keeps fewer states
