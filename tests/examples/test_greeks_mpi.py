"""The Greeks over MPI ranks (examples/greeks/mpi_greeks.py): in one process equal to the
serial `greeks.py` estimators over the same paths; under ``mpiexec -n 2`` (skipped without
mpi4py / mpiexec) equal to one process to rounding."""
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

from models.distributed import World, launcher_variable

HERE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "greeks"


def _load(name, filename):
    spec = importlib.util.spec_from_file_location(name, HERE / filename)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


greeks = _load("greeks_serial", "greeks.py")
mpi_greeks = _load("greeks_mpi", "mpi_greeks.py")
PATHS, SEED, BLOCKS = 40_000, 7, 16
KW = dict(K=100.0, r=0.01, T=1.0)


@pytest.fixture(scope="module")
def one_process():
    return mpi_greeks.run(World(), PATHS, SEED, BLOCKS)


def test_blocks_are_the_same_paths_whatever_the_rank_count():
    full = mpi_greeks.normals(SEED, 1000, BLOCKS)
    assert full.shape == (1000,)
    for size in (2, 3, 5):
        parts = [mpi_greeks.normals(SEED, 1000, BLOCKS, r, size) for r in range(size)]
        assert sum(len(p) for p in parts) == 1000
        np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.sort(full))
    # the streams of two blocks are independent children, not shifted copies
    a, b = (mpi_greeks.block_normals(SEED, 1000, BLOCKS, i) for i in (0, 1))
    assert abs(np.corrcoef(a[:60], b[:60])[0, 1]) < 0.5 and not np.isin(a, b).any()


def test_one_process_equals_the_serial_estimators(one_process):
    Z = mpi_greeks.normals(SEED, PATHS, BLOCKS)
    serial = greeks.pathwise_greeks(greeks.european_price, 100.0, 0.2, Z, **KW)
    gamma, gamma_se = greeks.pathwise_gamma(greeks.european_price, 100.0, 0.2, Z, smooth=0.5,
                                            **KW)
    for k in ("price", "delta", "vega"):
        assert one_process[k] == pytest.approx(serial[k], rel=1e-12), k
    for k in ("delta", "vega"):
        assert one_process[k + "_se"] == pytest.approx(serial[k + "_se"], rel=1e-10), k
    assert one_process["gamma"] == pytest.approx(gamma, rel=1e-12)
    assert one_process["gamma_se"] == pytest.approx(gamma_se, rel=1e-10)
    bs = greeks.black_scholes(100.0, 0.2, **KW)
    for k in ("delta", "vega", "gamma"):
        assert abs(one_process[k] - bs[k]) < 4 * one_process[k + "_se"], k


MPIEXEC = next((str(p) for p in (pathlib.Path(sys.executable).parent / "mpiexec",)
                if p.exists()), shutil.which("mpiexec"))


@pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec (pip install -e '.[distributed]')")
def test_two_ranks_reproduce_one_process(one_process, tmp_path):
    pytest.importorskip("mpi4py")
    out = tmp_path / "greeks.json"
    env = {k: v for k, v in os.environ.items() if launcher_variable({k: v}) is None}
    proc = subprocess.run([MPIEXEC, "-n", "2", sys.executable, str(HERE / "mpi_greeks.py"),
                           "--paths", str(PATHS), "--seed", str(SEED), "--blocks",
                           str(BLOCKS), "--json", str(out)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("European call") == 1   # rank 0 alone reports
    two = json.loads(out.read_text())
    assert two["ranks"] == 2
    for k in mpi_greeks.GREEKS:
        assert two[k] == pytest.approx(one_process[k], rel=1e-12, abs=1e-15), k
        assert two[k + "_se"] == pytest.approx(one_process[k + "_se"], rel=1e-10), k


def test_docstring_examples():
    import doctest
    result = doctest.testmod(mpi_greeks)
    assert result.failed == 0 and result.attempted > 0
