"""Test-wide settings. On CI (CI=true) hypothesis draws the same examples on every run, so a
red run always means a change broke something; locally it keeps exploring new examples."""
import json
import os
import subprocess
import sys
from pathlib import Path

# One BLAS thread per test process (and the `hecate` / `mpiexec` processes tests start, which
# inherit it). The models' matrices are small, so a second thread gains little, while on a busy
# machine OpenBLAS's spinning threads make a 512x64x256 matmul 40x slower (16 ms against
# 0.4 ms measured), which turned a 30 s test into 150 s. Set before NumPy loads: OpenBLAS reads
# it once. A value the caller exported is kept.
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def quick_benchmark(tmp_path):
    """Run ``benchmarks/<name> --quick --json FILE`` in a fresh folder; fail on a non-zero exit
    or a gradient mismatch the script reports; return ``(stdout, parsed JSON)``. Timings are
    never asserted."""
    def run(name: str, timeout: int = 120) -> tuple:
        out = tmp_path / "results.json"
        proc = subprocess.run([sys.executable, str(BENCHMARKS / name), "--quick", "--json",
                               str(out)], capture_output=True, text=True, timeout=timeout,
                              cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert "MISMATCH" not in proc.stdout   # every peer's gradient agrees with Hecate's
        return proc.stdout, json.loads(out.read_text())
    return run
