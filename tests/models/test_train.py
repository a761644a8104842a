"""The training loop on tiny configs: run directory, resume exactness, NaN stop, eval, sample."""
import json
import math

import numpy as np
import pytest

from models import train as train_mod
from models.checkpoint import CheckpointFileError, load_checkpoint
from models.config import ModelConfig
from models.train_step import TrainStep
from models.train import (RunError, TrainConfig, eval_run, load_run, resolve_configs,
                          sample_text, train)

CORPUS = b"def f(x):\n    return x + 1\n\nclass A:\n    pass\n" * 40
CFG = ModelConfig(d_model=8, layers=1, window=4, seq_len=8, levels=2)


def _tcfg(**kw):
    base = dict(steps=6, batch_size=2, lr=1e-2, warmup=2, eval_every=3, eval_batches=1,
                final_eval_batches=2, ckpt_every=2, sample_bytes=0)
    return TrainConfig(**{**base, **kw})


def test_run_directory_contents(tmp_path):
    result = train(CFG, _tcfg(sample_bytes=5), tmp_path / "run", progress=False, out=None,
                   corpus=CORPUS)
    run = tmp_path / "run"
    assert {p.name for p in run.iterdir()} >= {"config.json", "metrics.jsonl", "loss.png",
                                                "checkpoints"}
    assert {p.name for p in (run / "checkpoints").iterdir()} == {
        "last.npz", "step_000002.npz", "step_000004.npz", "step_000006.npz"}
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 7))
    assert set(rows[0]) >= {"step", "loss", "val_loss", "lr", "tokens_per_s", "grad_norm"}
    assert rows[2]["val_loss"] is not None and rows[0]["val_loss"] is None
    assert math.isfinite(result.val_loss) and result.unigram > 0
    assert result.sample.startswith("def ") and len(result.sample) >= 5
    config = json.loads((run / "config.json").read_text())
    assert config["model"] == CFG.to_dict() and config["train"]["steps"] == 6
    assert (run / "loss.png").read_bytes()[:4] == b"\x89PNG"


def test_resume_reproduces_the_uninterrupted_losses(tmp_path):
    full = train(CFG, _tcfg(), tmp_path / "a", progress=False, out=None, corpus=CORPUS)
    first = train(CFG, _tcfg(), tmp_path / "b", progress=False, out=None, corpus=CORPUS,
                  stop_after=3)
    assert first.step == 3
    second = train(CFG, _tcfg(), tmp_path / "b", resume=True, progress=False, out=None,
                   corpus=CORPUS)
    assert first.losses + second.losses == full.losses   # bit for bit
    rows = [json.loads(line) for line in (tmp_path / "b" / "metrics.jsonl").read_text()
            .splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 7))
    a, _ = load_checkpoint(tmp_path / "a" / "checkpoints" / "last.npz")
    b, _ = load_checkpoint(tmp_path / "b" / "checkpoints" / "last.npz")
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def test_existing_run_needs_resume_and_resume_needs_a_run(tmp_path):
    train(CFG, _tcfg(steps=2), tmp_path, progress=False, out=None, corpus=CORPUS)
    with pytest.raises(RunError, match="--resume"):
        train(CFG, _tcfg(steps=2), tmp_path, progress=False, out=None, corpus=CORPUS)
    with pytest.raises(RunError, match="no checkpoint"):
        train(CFG, _tcfg(), tmp_path / "new", resume=True, progress=False, out=None,
              corpus=CORPUS)


def test_incompatible_and_corrupt_checkpoints(tmp_path):
    train(CFG, _tcfg(steps=2), tmp_path, progress=False, out=None, corpus=CORPUS)
    with pytest.raises(CheckpointFileError, match="d_model: 8 .checkpoint. vs 16"):
        resolve_configs(tmp_path, True, {"d_model": 16}, {})
    cfg, tcfg = resolve_configs(tmp_path, True, {}, {"steps": 4})
    assert cfg == CFG and tcfg.steps == 4
    last = tmp_path / "checkpoints" / "last.npz"
    last.write_bytes(last.read_bytes()[:100])
    with pytest.raises(CheckpointFileError, match="last.npz is truncated or corrupt"):
        train(CFG, _tcfg(steps=4), tmp_path, resume=True, progress=False, out=None,
              corpus=CORPUS)


def test_non_finite_loss_stops_naming_the_step(tmp_path, monkeypatch):
    real = TrainStep.__call__
    calls = []

    def poisoned(self, params, grads, tokens, state):
        ce, value, st = real(self, params, grads, tokens, state)
        calls.append(1)
        if len(calls) == 5:
            value, ce = value * float("nan"), ce * float("nan")
        return ce, value, st
    monkeypatch.setattr(TrainStep, "__call__", poisoned)
    with pytest.raises(RunError, match="non-finite loss .* at step 5.*last good checkpoint"):
        train(CFG, _tcfg(eval_every=100), tmp_path, progress=False, out=None, corpus=CORPUS)
    _, header = load_checkpoint(tmp_path / "checkpoints" / "last.npz")
    assert header["step"] == 4   # the good checkpoint is kept, not overwritten


def test_seq_len_shorter_than_window_is_an_error(tmp_path):
    bad = ModelConfig(d_model=8, layers=1, window=16, seq_len=8)
    with pytest.raises(RunError, match="seq_len .8. must be >= window .16."):
        train(bad, _tcfg(), tmp_path, progress=False, out=None, corpus=CORPUS)


def test_eval_and_sample_from_a_run(tmp_path):
    result = train(CFG, _tcfg(steps=3), tmp_path, progress=False, out=None, corpus=CORPUS)
    ev = eval_run(tmp_path, batches=2, corpus=CORPUS)
    assert ev["step"] == 3 and ev["val_loss"] == pytest.approx(result.val_loss)
    assert ev["bits_per_byte"] == pytest.approx(ev["val_loss"] / math.log(2))
    cfg, _, params, _, xp = load_run(tmp_path)
    text = sample_text(params, cfg, "class", 4, seed=1, xp=xp)
    assert text.startswith("class") and len(text.encode("utf-8", "replace")) >= 9


def test_recall_task_trains_and_reports_accuracy(tmp_path):
    cfg = ModelConfig(d_model=8, layers=1, window=4, seq_len=16, levels=1)
    result = train(cfg, _tcfg(steps=2, task="recall", pairs=2), tmp_path, progress=False,
                   out=None)
    assert result.accuracy is not None and 0.0 <= result.accuracy <= 1.0
    assert result.unigram is None


def test_memory_solves_recall_and_sliding_window_attention_alone_does_not(tmp_path):
    # The --task recall defaults at a smaller size (4 pairs in 32 tokens, window 8: the least
    # key-query distance, 18, is beyond the window), 500 steps: a few seconds each.
    from models.train import RECALL_MODEL, RECALL_TRAIN
    accuracy = {}
    for levels in (1, 0):
        cfg = ModelConfig.from_dict({**ModelConfig().to_dict(), **RECALL_MODEL, "seq_len": 32,
                                     "window": 8, "levels": levels})
        tcfg = TrainConfig(**{**TrainConfig().to_dict(), **RECALL_TRAIN, "task": "recall",
                              "pairs": 4, "steps": 500, "eval_every": 10**9,
                              "ckpt_every": 10**9, "sample_bytes": 0})
        result = train(cfg, tcfg, tmp_path / str(levels), progress=False, out=None)
        accuracy[levels] = result.accuracy
    assert accuracy[1] > 0.9, accuracy       # chance is 1/64
    assert accuracy[0] < 0.1, accuracy


def test_gpu_without_gpu_is_a_clear_error(monkeypatch):
    import kernels.dispatch as dispatch
    monkeypatch.setattr(dispatch, "detect_gpu", lambda: None)
    with pytest.raises(RunError, match="--device gpu: no GPU available: kernels.detect_gpu"):
        train_mod.array_module_for("gpu")


def test_sigterm_stops_at_a_step_boundary_and_restores_the_handlers(tmp_path, monkeypatch):
    import os
    import signal
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    real, calls = TrainStep.__call__, []

    def signalled(*args):
        calls.append(1)
        if len(calls) == 3:   # mid-step: the step still completes
            os.kill(os.getpid(), signal.SIGTERM)
        return real(*args)
    monkeypatch.setattr(TrainStep, "__call__", signalled)
    stopped = train(CFG, _tcfg(), tmp_path / "b", progress=False, out=None, corpus=CORPUS)
    monkeypatch.setattr(TrainStep, "__call__", real)
    assert stopped.stopped_by == signal.SIGTERM and stopped.exit_code == 143
    assert stopped.step == 3 and load_checkpoint(tmp_path / "b" / "checkpoints" /
                                                 "last.npz")[1]["step"] == 3
    assert {s: signal.getsignal(s) for s in before} == before
    assert not (tmp_path / "b" / "hecate.lock").exists()
    rest = train(CFG, _tcfg(), tmp_path / "b", resume=True, progress=False, out=None,
                 corpus=CORPUS)
    full = train(CFG, _tcfg(), tmp_path / "a", progress=False, out=None, corpus=CORPUS)
    assert stopped.losses + rest.losses == full.losses and rest.exit_code == 0


def test_a_signal_after_the_checkpoint_decision_still_checkpoints(tmp_path, monkeypatch):
    """SIGTERM between a step's checkpoint decision and the next step: the loop leaves, and
    the stop must still write the checkpoint of the last completed step."""
    import os
    import signal
    from models import runstate
    real_due = runstate.Checkpointer.due

    def due_then_signal(self, step, final, stopping):
        names = real_due(self, step, final, stopping)
        if step == 3:   # not a snapshot step (ckpt_every=2): nothing is due
            os.kill(os.getpid(), signal.SIGTERM)
        return names
    monkeypatch.setattr(runstate.Checkpointer, "due", due_then_signal)
    stopped = train(CFG, _tcfg(), tmp_path / "b", progress=False, out=None, corpus=CORPUS)
    assert stopped.exit_code == 143 and stopped.step == 3
    assert load_checkpoint(tmp_path / "b" / "checkpoints" / "last.npz")[1]["step"] == 3


def test_checkpoint_every_few_minutes(tmp_path, monkeypatch):
    from models import runstate
    clock = {"t": 0.0}

    class FakeTime:   # 30 s pass between two readings of the clock (one per step and one
        @staticmethod  # after each write)
        def monotonic():
            clock["t"] += 30.0
            return clock["t"]
    monkeypatch.setattr(runstate, "time", FakeTime)
    saved = []
    real = runstate.save_checkpoint
    monkeypatch.setattr(runstate, "save_checkpoint",
                        lambda path, arrays, header: (saved.append(header["step"]),
                                                      real(path, arrays, header)))
    train(CFG, _tcfg(ckpt_every=1000, checkpoint_minutes=1.0), tmp_path / "a", progress=False,
          out=None, corpus=CORPUS)
    assert saved == [2, 4, 6]   # a minute after each write, and at the end
    saved.clear()
    train(CFG, _tcfg(ckpt_every=1000, checkpoint_minutes=0.0), tmp_path / "b", progress=False,
          out=None, corpus=CORPUS)
    assert saved == [6]
    with pytest.raises(RunError, match="--checkpoint-minutes must be a finite number >= 0"):
        train(CFG, _tcfg(checkpoint_minutes=-1.0), tmp_path / "c", progress=False, out=None,
              corpus=CORPUS)


def test_run_directory_lock(tmp_path):
    import os
    import socket
    import subprocess
    import sys
    from models.runlock import LockError
    run = tmp_path / "run"
    run.mkdir()
    lock = run / "hecate.lock"
    host = socket.gethostname()
    lock.write_text(json.dumps({"pid": os.getppid(), "host": host, "started": "then"}))
    with pytest.raises(LockError, match=f"in use by PID {os.getppid()} .since then"):
        train(CFG, _tcfg(steps=1), run, progress=False, out=None, corpus=CORPUS)
    assert lock.exists() and not (run / "config.json").exists()
    lock.write_text(json.dumps({"pid": 1234, "host": "elsewhere"}))
    with pytest.raises(LockError, match="PID 1234 on host elsewhere"):
        train(CFG, _tcfg(steps=1), run, progress=False, out=None, corpus=CORPUS)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock.write_text(json.dumps({"pid": dead.pid, "host": host}))
    train(CFG, _tcfg(steps=1), run, progress=False, out=None, corpus=CORPUS)
    assert not lock.exists()


def test_force_resumes_despite_a_model_field(tmp_path, capsys):
    train(CFG, _tcfg(steps=2), tmp_path, progress=False, out=None, corpus=CORPUS)
    with pytest.raises(CheckpointFileError, match="gate_penalty.*pass --force"):
        resolve_configs(tmp_path, True, {"gate_penalty": 0.5}, {"steps": 3})
    cfg, tcfg = resolve_configs(tmp_path, True, {"gate_penalty": 0.5}, {"steps": 3}, force=True)
    with pytest.raises(CheckpointFileError, match="gate_penalty"):
        train(cfg, tcfg, tmp_path, resume=True, progress=False, out=None, corpus=CORPUS)
    result = train(cfg, tcfg, tmp_path, resume=True, progress=False, corpus=CORPUS, force=True)
    assert result.step == 3 and "--force: checkpoint" in capsys.readouterr().err
    with pytest.raises(RunError, match="training data differs.*--force"):
        train(cfg, _tcfg(steps=4), tmp_path, resume=True, progress=False, out=None,
              corpus=CORPUS + b"#", force=False)


def test_not_enough_free_space_is_checked_before_writing(tmp_path, monkeypatch):
    import collections
    from models import runstate
    train(CFG, _tcfg(steps=2), tmp_path, progress=False, out=None, corpus=CORPUS)
    last = tmp_path / "checkpoints" / "last.npz"
    before, size = last.read_bytes(), last.stat().st_size
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(runstate.shutil, "disk_usage", lambda p: usage(10**9, 0, size // 2))
    with pytest.raises(RunError, match=r"not enough free space.*previous checkpoint \(step 2\) "
                                       r"is kept.*--resume"):
        train(CFG, _tcfg(steps=4), tmp_path, resume=True, progress=False, out=None,
              corpus=CORPUS)
    assert last.read_bytes() == before
    # one checkpoint's worth of free space (the estimate) is enough
    monkeypatch.setattr(runstate.shutil, "disk_usage", lambda p: usage(10**9, 0, 2 * size))
    train(CFG, _tcfg(steps=4), tmp_path, resume=True, progress=False, out=None, corpus=CORPUS)


def test_snapshots_are_hard_links_and_a_torn_metrics_line_is_skipped(tmp_path):
    import os
    run = tmp_path / "run"
    train(CFG, _tcfg(steps=4), run, progress=False, out=None, corpus=CORPUS)
    ck = run / "checkpoints"
    assert os.stat(ck / "last.npz").st_ino == os.stat(ck / "step_000004.npz").st_ino
    assert os.stat(ck / "step_000002.npz").st_ino != os.stat(ck / "last.npz").st_ino
    assert load_checkpoint(ck / "step_000002.npz")[1]["step"] == 2
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"step": 5, "loss": 1.')   # a kill in the middle of a line
    result = train(CFG, _tcfg(steps=5), run, resume=True, progress=False, out=None,
                   corpus=CORPUS)
    assert result.step == 5
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()] \
        == [1, 2, 3, 4, 5]
