"""`mpiexec -n 2 hecate train` against one process, each a real subprocess: the same losses
and parameters (float64), rank 0 alone touching the run directory, resume with another rank
count, a batch that does not divide, a rank that raises, a rank killed with SIGKILL, and
SIGTERM / Ctrl-C sent to mpiexec. Skipped when mpi4py or mpiexec is missing
(``pip install -e ".[distributed]"`` brings both)."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mpi4py")

from models.checkpoint import load_checkpoint  # noqa: E402
from models.distributed import launcher_variable  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# The launcher of the MPI that mpi4py was installed with (the `mpich` wheel puts it beside
# this interpreter); a system one on PATH otherwise.
MPIEXEC = next((str(p) for p in (Path(sys.executable).parent / "mpiexec",) if p.exists()),
               shutil.which("mpiexec"))
pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec (pip install -e "
                                                        "'.[distributed]')")
TINY = ["--d-model", "8", "--layers", "1", "--window", "4", "--seq-len", "8", "--levels", "2",
        "--batch-size", "4", "--no-progress", "--dtype", "float64"]

# Runs models.cli.main, first applying test-only faults named in argv[1] (comma-separated);
# HECATE_FAULT_RANK says which rank (PMI_RANK) gets them; every rank other than 0 refuses any
# file operation under the run directory (an audit hook), so a run that passes shows that
# rank 0 alone touched it.
WRAPPER = r"""
import os, signal, sys, time
faults, sys.argv = sys.argv[1].split(","), sys.argv[:1] + sys.argv[2:]
rank = int(os.environ.get("PMI_RANK", "0"))
run_dir = os.path.realpath(sys.argv[sys.argv.index("--run-dir") + 1])
if rank != 0:
    def audit(event, args):
        if event == "open" or event.startswith(("os.", "shutil.")):
            for a in args:
                path = os.path.realpath(os.fsdecode(a)) if isinstance(
                    a, (str, bytes, os.PathLike)) else ""
                if path == run_dir or path.startswith(run_dir + os.sep):
                    raise PermissionError(f"rank {rank} touched {a} ({event})")
    sys.addaudithook(audit)
from models.train_step import TrainStep
step, calls = TrainStep.__call__, [0]
def faulty(*a):
    calls[0] += 1
    if "slow" in faults:
        time.sleep(0.15)
    if rank == int(os.environ.get("HECATE_FAULT_RANK", "-1")) and calls[0] == 3:
        if "raise" in faults:
            raise RuntimeError("injected failure at the third step")
        if "kill" in faults:
            os.kill(os.getpid(), signal.SIGKILL)
    return step(*a)
TrainStep.__call__ = faulty
if "stop_after_3" in faults:      # end the run after 3 steps as if interrupted (a checkpoint)
    import models.train as t
    train = t.train
    t.train = lambda *a, **k: train(*a, stop_after=3, **k)
from models.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    f = tmp_path_factory.mktemp("data") / "corpus.txt"
    f.write_text("def add(a, b):\n    return a + b\n\nprint(add(1, 2))\n" * 40)
    return f


def _env(fault_rank=None):
    env = {k: v for k, v in os.environ.items() if launcher_variable({k: v}) is None}
    if fault_rank is not None:
        env["HECATE_FAULT_RANK"] = str(fault_rank)
    return env


def command(ranks, run, corpus, steps, *extra, faults="none"):
    args = ["train", "--run-dir", str(run), "--data", str(corpus), "--steps", str(steps),
            *TINY, *extra]
    one = [sys.executable, "-c", WRAPPER, faults, *args]
    return one if ranks == 1 else [MPIEXEC, "-n", str(ranks), *one]


def hecate(ranks, run, corpus, steps, *extra, faults="none", fault_rank=None, timeout=120):
    return subprocess.run(command(ranks, run, corpus, steps, *extra, faults=faults), cwd=ROOT,
                          env=_env(fault_rank), capture_output=True, text=True, timeout=timeout)


def metrics(run):
    path = Path(run) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def checkpoint(run):
    return load_checkpoint(Path(run) / "checkpoints" / "last.npz")


def assert_same_run(a, b, rtol=1e-9):
    """Per-step losses, objectives and gradient norms, and every checkpoint array (parameters,
    AdamW moments, all rows' memory state) agree to `rtol`, at the same step."""
    ma, mb = metrics(a), metrics(b)
    assert [r["step"] for r in ma] == [r["step"] for r in mb]
    for key in ("loss", "objective", "grad_norm", "lr"):
        np.testing.assert_allclose([r[key] for r in mb], [r[key] for r in ma], rtol=rtol,
                                   atol=0, err_msg=key)
    (xa, ha), (xb, hb) = checkpoint(a), checkpoint(b)
    assert ha["step"] == hb["step"] and ha["data_state"] == hb["data_state"]
    assert sorted(xa) == sorted(xb)
    for name in xa:
        scale = max(float(np.abs(xa[name]).max(initial=0.0)), 1e-300)
        np.testing.assert_allclose(xb[name], xa[name], rtol=rtol, atol=rtol * scale,
                                   err_msg=name)


@pytest.fixture(scope="module")
def one_process(corpus, tmp_path_factory):
    run = tmp_path_factory.mktemp("one") / "run"
    proc = hecate(1, run, corpus, 6)
    assert proc.returncode == 0, proc.stderr
    return run


def test_two_ranks_train_the_same_model_as_one_process(one_process, corpus, tmp_path):
    run = tmp_path / "two"
    proc = hecate(2, run, corpus, 6)
    assert proc.returncode == 0, proc.stderr
    assert "2 MPI ranks: each takes 2 of the 4 rows of every batch" in proc.stderr
    assert proc.stderr.count("run directory") == 1 and proc.stdout.count("validation loss") == 1
    assert_same_run(one_process, run)
    files = sorted(p.relative_to(run).as_posix() for p in run.rglob("*"))
    assert files == sorted(p.relative_to(one_process).as_posix()
                           for p in one_process.rglob("*"))
    history = json.loads((run / "config.json").read_text())["history"]
    assert history[-1]["ranks"] == 2


def test_resume_on_another_rank_count_continues_the_same_run(one_process, corpus, tmp_path):
    run = tmp_path / "run"
    first = hecate(2, run, corpus, 6, faults="stop_after_3")
    assert first.returncode == 0, first.stderr
    assert checkpoint(run)[1]["step"] == 3
    second = hecate(1, run, corpus, 6, "--resume")   # 2 ranks -> 1 process
    assert second.returncode == 0, second.stderr
    assert_same_run(one_process, run)
    grown = tmp_path / "grown"
    assert hecate(1, grown, corpus, 6, faults="stop_after_3").returncode == 0
    again = hecate(2, grown, corpus, 6, "--resume")   # 1 process -> 2 ranks
    assert again.returncode == 0, again.stderr
    assert_same_run(one_process, grown)


def test_a_batch_that_does_not_divide_is_one_line(corpus, tmp_path):
    proc = hecate(2, tmp_path / "r", corpus, 2, "--batch-size", "3")
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert errors == ["hecate train: error: --batch-size 3 does not divide over 2 MPI ranks: "
                      "the global batch is split evenly by rows; use a multiple of 2 (e.g. 2 "
                      "or 4), or run on a number of ranks that divides 3"], proc.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("fault", ["raise", "kill"])
def test_a_failing_rank_ends_every_rank_within_seconds(fault, corpus, tmp_path):
    t0 = time.monotonic()
    proc = hecate(2, tmp_path / "r", corpus, 500, faults=fault, fault_rank=1, timeout=60)
    assert proc.returncode != 0 and time.monotonic() - t0 < 30, proc.stderr
    assert len(metrics(tmp_path / "r")) < 10   # it stopped at the fault, not at the end
    if fault == "raise":
        assert ("hecate train: error: rank 1 of 2: RuntimeError: injected failure at the third "
                "step") in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_to_mpiexec_checkpoints_and_ends_every_rank(sig, code, corpus, tmp_path):
    run = tmp_path / "r"
    proc = subprocess.Popen(command(2, run, corpus, 200, faults="slow"), cwd=ROOT,
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        end = time.monotonic() + 60
        while len(metrics(run)) < 2 and proc.poll() is None and time.monotonic() < end:
            time.sleep(0.02)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    steps = [r["step"] for r in metrics(run)]
    assert 2 <= steps[-1] < 200 and checkpoint(run)[1]["step"] == steps[-1], err
    assert err.count(f"stopped by {'SIGTERM' if sig == signal.SIGTERM else 'Ctrl-C'}") == 1
    assert not (run / "hecate.lock").exists()


def test_benchmark_runs_and_the_ranks_agree(quick_benchmark):
    stdout, data = quick_benchmark("distributed.py")
    assert [r["ranks"] for r in data["results"]] == [1, 2] and data["losses_equal"]
    assert "allreduce share" in stdout
