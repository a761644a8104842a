"""Faults during `hecate train`, each against the real CLI in a subprocess: signals (SIGTERM,
first and second Ctrl-C), kill -9, resume checks (steps, data content, deleted config.json,
relative data paths), the run-directory lock, and a full or read-only disk.

Disk errors are injected (the machine may run the tests as root, for whom a chmod'ed directory
is still writable): the subprocess runs `models.cli.main` through `WRAPPER`, which first
replaces one function (numpy.savez, tempfile.mkstemp, os.open) with one that fails the way a full
or read-only disk does. The same wrapper slows steps or checkpoint writes down so that a signal
lands where the test wants it; signals are sent once metrics.jsonl shows the step they wait for.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from models.checkpoint import TEMP_RE, load_checkpoint

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--d-model", "8", "--layers", "1", "--window", "4", "--seq-len", "8", "--levels", "1",
        "--batch-size", "2", "--no-progress"]

WRAPPER = r"""
import errno, os, sys, tempfile, time
import numpy
patches, sys.argv = sys.argv[1].split(","), sys.argv[:1] + sys.argv[2:]
if "slow_step" in patches:        # each training step takes 0.2 s longer
    from models.train_step import TrainStep
    step = TrainStep.__call__
    TrainStep.__call__ = lambda *a: (time.sleep(0.2), step(*a))[1]
if "slow_save" in patches:        # a checkpoint write hangs half way through
    def savez(f, *a, **k):
        f.write(b"half a checkpoint"); f.flush(); time.sleep(60)
    numpy.savez = savez
if "enospc" in patches:           # the disk fills up during a checkpoint write
    def savez(f, *a, **k):
        f.write(b"half a checkpoint")
        raise OSError(errno.ENOSPC, "No space left on device")
    numpy.savez = savez
if "erofs_ckpt" in patches:       # checkpoints/ turns read-only during the run
    mkstemp = tempfile.mkstemp
    def ro_mkstemp(*a, dir=None, **k):
        if str(dir).endswith("checkpoints"):
            raise OSError(errno.EROFS, "Read-only file system", dir)
        return mkstemp(*a, dir=dir, **k)
    tempfile.mkstemp = ro_mkstemp
if "erofs_dir" in patches:        # the run directory is read-only from the start
    os_open = os.open
    def ro_open(path, flags, *a, **k):
        if str(path).endswith("hecate.lock"):
            raise OSError(errno.EROFS, "Read-only file system", path)
        return os_open(path, flags, *a, **k)
    os.open = ro_open
from models.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture
def corpus(tmp_path):
    f = tmp_path / "corpus.txt"
    f.write_text("def add(a, b):\n    return a + b\n\nprint(add(1, 2))\n" * 40)
    return f


def _cmd(args, patches=""):
    args = [str(a) for a in args]
    if patches:
        return [sys.executable, "-c", WRAPPER, patches, *args]
    return [sys.executable, "-m", "models.cli", *args]


def hecate(*args, patches="", cwd=ROOT):
    """Run the CLI to completion: CompletedProcess with text output."""
    return subprocess.run(_cmd(args, patches), cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def start(*args, patches=""):
    return subprocess.Popen(_cmd(args, patches), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def train_args(run, corpus, steps, *extra):
    return ["train", "--run-dir", run, "--data", corpus, "--steps", steps, *TINY, *extra]


def wait_for(predicate, proc=None, timeout=60.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process ended early (rc {proc.returncode}): "
                                 f"{proc.communicate()}")
        time.sleep(0.02)
    raise AssertionError("timed out")


def metrics(run):
    path = Path(run) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def at_step(run, n):
    return lambda: len(metrics(run)) >= n


def temp_files(run):
    return [p for p in Path(run).rglob("*") if TEMP_RE.match(p.name)]


def ckpt_step(run):
    return load_checkpoint(Path(run) / "checkpoints" / "last.npz")[1]["step"]


def one_line_error(proc, *needles):
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    err = proc.stderr.strip().splitlines()[-1]
    assert "Traceback" not in proc.stderr and err.startswith("hecate train: error:"), proc.stderr
    for needle in needles:
        assert needle in err, err
    return err


def test_sigterm_checkpoints_and_resume_continues_with_identical_losses(tmp_path, corpus):
    ref, run = tmp_path / "ref", tmp_path / "run"
    assert hecate(*train_args(ref, corpus, 60)).returncode == 0
    proc = start(*train_args(run, corpus, 60), patches="slow_step")
    wait_for(at_step(run, 2), proc)
    # a second trainer on the same directory is refused, naming the owner
    second = hecate(*train_args(run, corpus, 60))
    one_line_error(second, "in use by PID", str(proc.pid))
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    stopped = metrics(run)[-1]["step"]
    assert 2 <= stopped < 60 and ckpt_step(run) == stopped
    assert f"hecate train --run-dir {run} --resume" in err and "SIGTERM" in err
    assert not (run / "hecate.lock").exists() and not temp_files(run)
    resumed = hecate("train", "--run-dir", run, "--resume", "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    got, want = metrics(run), metrics(ref)
    assert [r["step"] for r in got] == list(range(1, 61))
    for key in ("loss", "objective", "grad_norm", "lr", "val_loss"):
        assert [r[key] for r in got] == [r[key] for r in want], key   # bit for bit


def test_first_ctrl_c_checkpoints_second_exits_at_once(tmp_path, corpus):
    run = tmp_path / "run"
    proc = start(*train_args(run, corpus, 500), patches="slow_step")
    wait_for(at_step(run, 2), proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    first = ckpt_step(run)
    assert first == metrics(run)[-1]["step"] and "resume with: hecate train" in err
    # second Ctrl-C while the stop checkpoint is being written: exit now, old one intact
    before = (run / "checkpoints" / "last.npz").read_bytes()
    proc = start("train", "--run-dir", run, "--resume", "--no-progress",
                 patches="slow_step,slow_save")
    wait_for(at_step(run, first + 1), proc)
    proc.send_signal(signal.SIGINT)
    wait_for(lambda: temp_files(run), proc)   # the checkpoint write has begun (and hangs)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert time.monotonic() - t0 < 10 and "Traceback" not in err
    assert "stopped at once" in err
    assert (run / "checkpoints" / "last.npz").read_bytes() == before and ckpt_step(run) == first
    assert not temp_files(run) and not (run / "hecate.lock").exists()


def test_kill_9_leaves_temp_files_and_a_stale_lock_that_the_next_start_cleans(tmp_path,
                                                                             corpus):
    run = tmp_path / "run"
    assert hecate(*train_args(run, corpus, 2)).returncode == 0
    (run / "notes.tmp").write_text("not ours")   # a file the cleanup must not touch
    proc = start("train", "--run-dir", run, "--resume", "--steps", "500", "--no-progress",
                 patches="slow_step,slow_save")
    wait_for(at_step(run, 3), proc)
    proc.send_signal(signal.SIGTERM)
    wait_for(lambda: temp_files(run), proc)
    proc.kill()
    proc.communicate()
    assert temp_files(run) and (run / "hecate.lock").exists()
    nxt = hecate("train", "--run-dir", run, "--resume", "--steps", "5", "--no-progress")
    assert nxt.returncode == 0, nxt.stderr
    assert "removed 1 temporary file" in nxt.stderr
    assert "stale lock" in nxt.stderr and f"PID {proc.pid}" in nxt.stderr
    assert not temp_files(run) and not (run / "hecate.lock").exists()
    assert (run / "notes.tmp").exists() and ckpt_step(run) == 5


def test_resume_steps_shrink_is_an_error_extend_is_recorded(tmp_path, corpus):
    run = tmp_path / "run"
    assert hecate(*train_args(run, corpus, 4)).returncode == 0
    one_line_error(hecate("train", "--run-dir", run, "--resume", "--steps", "2"),
                   "--steps 2 is below the run's current step 4")
    longer = hecate("train", "--run-dir", run, "--resume", "--steps", "6", "--no-progress")
    assert longer.returncode == 0, longer.stderr
    config = json.loads((run / "config.json").read_text())
    assert config["train"]["steps"] == 6
    assert [(h["start_step"], h["steps"]) for h in config["history"]] == [(0, 4), (4, 6)]
    assert "--resume" in config["history"][1]["argv"]
    assert [r["step"] for r in metrics(run)] == list(range(1, 7)) and ckpt_step(run) == 6


def test_resume_on_changed_data_is_refused_unless_forced(tmp_path, corpus):
    run = tmp_path / "run"
    assert hecate(*train_args(run, corpus, 2)).returncode == 0
    corpus.write_text(corpus.read_text().replace("add", "sub"))   # same name, other bytes
    one_line_error(hecate("train", "--run-dir", run, "--resume", "--steps", "3"),
                   "training data differs", "sha256", "--force")
    forced = hecate("train", "--run-dir", run, "--resume", "--steps", "3", "--force",
                    "--no-progress")
    assert forced.returncode == 0, forced.stderr
    assert "--force: the training data differs" in forced.stderr and ckpt_step(run) == 3


def test_relative_data_path_and_deleted_config(tmp_path, corpus):
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    (work / "data.txt").write_text(corpus.read_text())
    done = hecate("train", "--run-dir", "run", "--data", "data.txt", "--steps", "2", *TINY,
                  cwd=work)
    assert done.returncode == 0, done.stderr
    run = work / "run"
    config = json.loads((run / "config.json").read_text())
    assert config["train"]["data"] == str(work / "data.txt")
    assert config["data"]["source"] == str(work / "data.txt")
    ev = hecate("eval", "--run", run, "--batches", "1", cwd=elsewhere)
    assert ev.returncode == 0 and "bits per byte" in ev.stdout, ev.stderr
    # config.json deleted: eval, sample and train --resume rebuild it from the checkpoint
    for argv in (["eval", "--run", run, "--batches", "1"],
                 ["sample", "--run", run, "--length", "3"],
                 ["train", "--run-dir", run, "--resume", "--steps", "3", "--no-progress"]):
        (run / "config.json").unlink()
        proc = hecate(*argv, cwd=elsewhere)
        assert proc.returncode == 0, (argv, proc.stderr)
        assert "config.json was missing; rebuilt it from" in proc.stderr, proc.stderr
        rebuilt = json.loads((run / "config.json").read_text())
        assert rebuilt["model"] == config["model"], argv
    assert ckpt_step(run) == 3
    assert [h["steps"] for h in json.loads((run / "config.json").read_text())["history"]] == \
        [2, 3]
    # a config.json that is not a run's: one line naming the file and the fix, exit 2
    for bad in ('[]', '{"model": {"d_model": "x"}, "train": {}}', '{"model": '):
        (run / "config.json").write_text(bad)
        for argv in (["eval", "--run", run, "--batches", "1"], ["sample", "--run", run]):
            proc = hecate(*argv, cwd=elsewhere)
            assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
            line = proc.stderr.strip().splitlines()[-1]
            assert "config.json" in line and "delete it to rebuild it" in line, line


def test_full_and_read_only_disk_keep_the_previous_checkpoint(tmp_path, corpus):
    run = tmp_path / "run"
    assert hecate(*train_args(run, corpus, 2)).returncode == 0
    before = (run / "checkpoints" / "last.npz").read_bytes()
    resume = ["train", "--run-dir", run, "--resume", "--steps", "3", "--no-progress"]
    full = hecate(*resume, patches="enospc")   # the write at the last step fails
    err = one_line_error(full, "no space left on the device", "last.npz",
                         "previous checkpoint (step 2) is kept",
                         f"hecate train --run-dir {run} --resume")
    assert "free some space" in err
    ro = hecate(*resume, patches="erofs_ckpt")
    one_line_error(ro, "read-only file system", "previous checkpoint (step 2) is kept")
    ro_dir = hecate(*resume, patches="erofs_dir")
    one_line_error(ro_dir, "lock file", "read-only file system", "nothing was changed")
    assert (run / "checkpoints" / "last.npz").read_bytes() == before
    assert not temp_files(run) and not (run / "hecate.lock").exists()
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["last.npz"]


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0,
                    reason="root writes into a read-only directory anyway")
def test_really_read_only_run_directory(tmp_path, corpus):
    run = tmp_path / "run"
    assert hecate(*train_args(run, corpus, 2)).returncode == 0
    os.chmod(run, 0o555)
    try:
        proc = hecate("train", "--run-dir", run, "--resume", "--steps", "3")
        one_line_error(proc, "permission denied")
    finally:
        os.chmod(run, 0o755)
    assert ckpt_step(run) == 2
