"""The training loop behind `hecate train`. Its configuration (`TrainConfig`, the recall presets,
`resolve_configs`) is in `models.train_config` and the `sample` / `eval` helpers (`evaluate`,
`sample_text`, `load_run`, `eval_run`, `array_module_for`) in `models.evaluation`; every name
listed in `__all__` is importable from here.

One step: draw a batch, one reverse pass for the whole gradient
``autodiff(ReverseWithPrimal, lambda p, t: model.training_loss(p, t, state, cfg)[0], Active,
Duplicated(params, grads), Const(tokens))`` (the cross-entropy plus the gate-saturation
penalty; by default replayed as one `tape.compile`d program, see `models.train_step`), clip by
global norm, AdamW with a warmup + cosine schedule, and carry the memory state
(returned by the loss as plain arrays) to the next chunk.

A run directory holds ``config.json`` (model and training configs), ``metrics.jsonl`` (one line
per step: step, loss (the cross-entropy), objective (with the gate penalty), lr, grad_norm,
tokens_per_s, and val_loss on evaluation steps),
``loss.png`` (train and validation curves) and ``checkpoints/`` (``last.npz`` plus
``step_<N>.npz`` every `ckpt_every` steps; format in `models.checkpoint`). ``last.npz`` is also
written every `checkpoint_minutes` minutes of training, at the end, and when the run is stopped.
Everything a step depends on (params, AdamW moments, memory state, data RNG and stream
positions, step) is in a checkpoint, so ``resume=True`` reproduces the losses of an
uninterrupted run exactly; the header also carries config.json (`models.rundir`), so a deleted
config.json is rebuilt.

Under an MPI launcher (``mpiexec -n N hecate train``) the same loop runs data-parallel: each
rank takes its rows of every global batch, one allreduce averages the gradients, and rank 0
alone writes the run directory (`models.distributed`, docs/distributed.md).

Faults: SIGTERM or Ctrl-C stops at the next step boundary with a checkpoint, and a second
Ctrl-C at once (`models.signals`); one trainer per run directory (`models.runlock`); orphan
temporary files of killed writes are removed at the next start; a full or read-only disk stops
the run with one line and the previous checkpoint intact; a resume refuses other data (by
SHA-256) or another model config unless forced, and refuses ``--steps`` below its step.

>>> import tempfile
>>> from models.config import ModelConfig
>>> cfg = ModelConfig(d_model=8, layers=1, window=4, seq_len=8, levels=1)
>>> tcfg = TrainConfig(steps=2, batch_size=2, eval_every=2, eval_batches=1, sample_bytes=0)
>>> result = train(cfg, tcfg, tempfile.mkdtemp(), progress=False, out=None,
...                corpus=b"hello world. " * 50)
>>> result.step, len(result.losses)
(2, 2)
"""
from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np

from tape import make_zero_

from . import model
from .distributed import (NullLog, StepBuffer, World, current_world, gather_state, local_rows,
                          share_start)
from .checkpoint import CheckpointFileError, atomic_write
from .config import ModelConfig
from .data import (DataError, RecallTask, TextData, absolute_path, data_mismatch, make_data,
                   unigram_entropy)
from .evaluation import array_module_for, eval_run, evaluate, load_run, sample_text
from .optim import AdamW, clip_by_global_norm, warmup_cosine
from .rundir import (METRICS, RunError, ckpt_path, disk_error, history_entry, load_run_config,
                     read_history, remove_orphans, resume_command, write_json)
from .runlock import LockError, RunLock
from .runstate import Checkpointer, plot_losses, restore, state_arrays
from .signals import StopSignals
from .train_config import RECALL_MODEL, RECALL_TRAIN, TrainConfig, resolve_configs
from .train_step import TrainStep


@dataclasses.dataclass
class TrainResult:
    run_dir: Path
    step: int
    losses: list
    val_loss: float
    bits_per_byte: float
    unigram: Optional[float]
    accuracy: Optional[float]
    seconds: float
    sample: str = ""
    stopped_by: Optional[int] = None   # the signal that stopped the run early (SIGINT, SIGTERM)

    @property
    def exit_code(self) -> int:
        """0, or 128 + the stopping signal (130 for Ctrl-C, 143 for SIGTERM)."""
        return 0 if self.stopped_by is None else 128 + int(self.stopped_by)


def train(cfg: ModelConfig, tcfg: TrainConfig, run_dir: str | Path, resume: bool = False,
          progress: bool = True, out: Any = "stdout", corpus: Optional[bytes] = None,
          stop_after: Optional[int] = None, force: bool = False,
          argv: Optional[list] = None, world: Optional[World] = None,
          compile_step: bool = True) -> TrainResult:
    """Train `cfg` under `tcfg`, writing the run directory; see the module docstring.

    `corpus` (bytes) replaces the default corpus for the text task (tests); `stop_after` ends
    the run after that many steps as if interrupted, with a checkpoint (tests of `resume`).
    `out` is where the summary goes: ``"stdout"`` (looked up at call time), a file, or None
    (None also silences the notes and the stop message, which go to stderr). `force` resumes
    despite other data or model fields; `argv` is recorded in the config history (default
    ``sys.argv[1:]``). A run stopped by SIGTERM/SIGINT returns with `TrainResult.stopped_by`
    set; a second SIGINT raises KeyboardInterrupt.

    `world` (default: `models.distributed.current_world`, found from the MPI launcher's
    environment) splits every global batch of ``tcfg.batch_size`` rows over its ranks; rank 0
    alone writes the run directory, prints and shows the progress bar.

    `compile_step` (the default) differentiates each step by replaying one `tape.compile`d
    program (`models.train_step`); False runs eager `autodiff`. Both give the same values.
    """
    world = world if world is not None else current_world()
    if not world.is_root:
        out, progress = None, False
    out = sys.stdout if isinstance(out, str) and out == "stdout" else out

    def note(msg: str) -> None:
        if out is not None:
            print(f"hecate train: {msg}", file=sys.stderr)

    try:
        cfg.validate()
    except ValueError as e:
        raise RunError(str(e)) from None
    if not (math.isfinite(tcfg.checkpoint_minutes) and tcfg.checkpoint_minutes >= 0):
        raise RunError(f"--checkpoint-minutes must be a finite number >= 0 (0: off); got "
                       f"{tcfg.checkpoint_minutes}")
    world.rows(tcfg.batch_size)   # the batch must split evenly over the ranks
    world.bind_device(tcfg.device)
    xp = array_module_for(tcfg.device)
    if tcfg.data:
        tcfg = dataclasses.replace(tcfg, data=str(absolute_path(tcfg.data)))
    run_dir = Path(run_dir)
    last = ckpt_path(run_dir)
    if not world.is_root:   # the run directory is rank 0's alone: no lock, no files
        with StopSignals() as stop:
            return _run(cfg, tcfg, run_dir, resume, False, None, corpus, stop_after, force,
                        argv, xp, world.stop_view(stop), note, world, compile_step)
    if resume and not last.exists():
        raise RunError(f"--resume: no checkpoint at {last}")
    created = not run_dir.exists()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise disk_error(e, run_dir, "nothing was written", "run the same command again") \
            from None
    lock = RunLock(run_dir)
    try:
        taken = lock.acquire()
        if taken:
            note(taken)
        removed = remove_orphans(run_dir)
        if removed:
            note(f"removed {len(removed)} temporary file(s) left by an interrupted write: "
                 f"{', '.join(removed)}")
        with StopSignals() as stop:
            try:
                return _run(cfg, tcfg, run_dir, resume, progress, out, corpus, stop_after,
                            force, argv, xp, world.stop_view(stop), note, world,
                            compile_step)
            except KeyboardInterrupt:
                kept = f"the last complete checkpoint is kept: {last}; continue with: " \
                    f"{resume_command(run_dir)}" if last.exists() else "no checkpoint written"
                note(f"interrupted again: stopped at once; {kept}")
                raise
    finally:
        lock.release()
        if created:
            try:
                run_dir.rmdir()   # only when nothing was written into it
            except OSError:
                pass


def _run(cfg: ModelConfig, tcfg: TrainConfig, run_dir: Path, resume: bool, progress: bool,
         out: Any, corpus: Optional[bytes], stop_after: Optional[int], force: bool,
         argv: Optional[list], xp: Any, stop: StopSignals, note: Any,
         world: World, compile_step: bool = True) -> TrainResult:
    """`train` with the run directory locked (on rank 0) and the stop handlers installed."""
    last = ckpt_path(run_dir)
    root = world.is_root
    if root and not resume and last.exists():
        raise RunError(f"{run_dir} already holds a run (checkpoint {last}): pass --resume to "
                       f"continue it, or another --run-dir")
    if corpus is not None and tcfg.task == "text":
        data = TextData(corpus, tcfg.batch_size, cfg.seq_len, tcfg.seed, source="corpus")
    else:
        # Rank 0 loads first, so that an error every rank would meet (a missing or binary
        # data file) is one line from rank 0; the other ranks then load their own copy.
        def load() -> Any:
            return make_data(tcfg.task, tcfg.batch_size, cfg.seq_len, tcfg.seed, tcfg.data,
                             pairs=tcfg.pairs)
        loaded: list = []
        world.from_root(lambda: loaded.append(load()))
        data = loaded[0] if loaded else load()
    if isinstance(data, RecallTask) and cfg.vocab < 129:
        raise RunError(f"--task recall needs vocab >= 129; got {cfg.vocab}")
    baseline = unigram_entropy(data.train) if isinstance(data, TextData) else None

    history_cfg: list = []
    if resume and root:
        saved = load_run_config(run_dir, note)
        params, opt, state, header = restore(last, cfg, tcfg, xp, force, note)
        start = int(header["step"])
        if tcfg.steps < start:
            raise RunError(f"--steps {tcfg.steps} is below the run's current step {start} "
                           f"({last}): pass --steps {start} or more to continue it, or "
                           f"another --run-dir")
        mismatch = data_mismatch(header.get("data") or {}, data.describe())
        if mismatch and not force:
            raise RunError(f"{mismatch}; pass --force to resume on this data anyway")
        if mismatch:
            note(f"--force: {mismatch}")
        data.set_state(header["data_state"])
        history_cfg = list(saved.get("history") or header.get("history") or [])
    else:
        params = model.init_params(cfg, tcfg.seed, xp)
        opt = AdamW(params, lr=tcfg.lr, weight_decay=tcfg.weight_decay)
        state = model.init_state(cfg, tcfg.batch_size, xp)
        start = 0
    # Every rank starts from rank 0's parameters, moments, data order and global memory, then
    # keeps its own rows of that memory.
    params, opt, state, start = share_start(world, params, opt, state, start, data, xp)
    state = local_rows(world, state, tcfg.batch_size)
    if world.size > 1:
        note(f"{world.describe()}: each takes {tcfg.batch_size // world.size} of the "
             f"{tcfg.batch_size} rows of every batch")
    history_cfg.append(dict(history_entry(start, tcfg.steps, argv), ranks=world.size))
    config = {"model": cfg.to_dict(), "train": tcfg.to_dict(), "data": data.describe(),
              "unigram_entropy": baseline, "history": history_cfg}
    ckpt = Checkpointer(run_dir, tcfg.ckpt_every, tcfg.checkpoint_minutes,
                        start if resume else None)
    metrics_path = run_dir / METRICS
    history = read_history(metrics_path, start) if root else []
    try:
        if root:
            write_json(run_dir / "config.json", config)
            text = "".join(json.dumps(h) + "\n" for h in history).encode()
            atomic_write(metrics_path, lambda f: f.write(text))
            last.parent.mkdir(exist_ok=True)
        log = metrics_path.open("a") if root else NullLog()
    except OSError as e:
        raise disk_error(e, getattr(e, "filename", None) or run_dir, ckpt.kept(),
                         resume_command(run_dir) if resume else "run the same command "
                                                                "again") from None

    buffer = StepBuffer(params, world)   # the gradient leaves are views of one flat array
    grads, rows = buffer.grads, world.rows(tcfg.batch_size)
    tokens_per_step = tcfg.batch_size * cfg.seq_len
    # The compiled step (tape.compile) gives the eager step's values; calls with CuPy arrays
    # run eagerly in tape.compile anyway (docs/compile.md), so GPU runs use the eager step.
    train_step = TrainStep(cfg, compiled=compile_step and xp is np)
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=tcfg.steps, initial=start, unit="step", dynamic_ncols=True,
                   file=sys.stderr)
    t_start = time.perf_counter()
    losses, step, ev = [], start, None
    at_once = False   # a second Ctrl-C: leave without the plot
    def save(names):
        full = gather_state(world, state, params)   # every rank's memory rows, on rank 0
        if not root:
            ckpt.saved_step = step
            return
        header = {"step": step, "opt_step": opt.t, **config, "data_state": data.state()}
        ckpt.save(names, step, state_arrays(params, opt, full), header)

    try:
        while step < tcfg.steps and not stop.requested:
            t0 = time.perf_counter()
            tokens = xp.asarray(data.next_batch()[rows])   # this rank's rows of the batch
            if isinstance(data, RecallTask):
                # Recall sequences are independent episodes (as in `evaluate`): memory
                # carried over from the previous batch would hold the same keys bound to
                # other values, a conflict the model could not resolve.
                state = model.init_state(cfg, rows.stop - rows.start, xp)
            make_zero_(grads)
            # The cross-entropy is what is reported; a non-finite gate term still stops.
            value, total, new_state = train_step(params, grads, tokens, state)
            # The mean over the ranks (one allreduce); the clip sees the global gradient.
            value, total, timed = buffer.reduce(value, total, stop, ckpt)
            norm = clip_by_global_norm(grads, tcfg.clip)
            if not (math.isfinite(value) and math.isfinite(total) and math.isfinite(norm)):
                kept = f"last good checkpoint kept: {last}" if last.exists() else \
                    "no checkpoint was written before it"
                raise world.agreed(RunError(f"non-finite loss ({value}), objective ({total}) "
                                            f"or gradient norm ({norm}) at step {step + 1}; "
                                            f"training stopped; {kept}"))
            lr = warmup_cosine(step, tcfg.lr, tcfg.warmup, tcfg.steps, tcfg.min_lr_ratio)
            opt.step(params, grads, lr)
            state = new_state
            step += 1
            losses.append(value)
            tps = tokens_per_step / (time.perf_counter() - t0)
            row = {"step": step, "loss": value, "objective": total, "lr": lr,
                   "grad_norm": norm, "tokens_per_s": tps, "val_loss": None}
            if root and (step % tcfg.eval_every == 0 or step == tcfg.steps):
                batches = tcfg.final_eval_batches if step == tcfg.steps else tcfg.eval_batches
                ev = evaluate(params, cfg, data, xp, batches)
                row["val_loss"] = ev["val_loss"]
                if ev["accuracy"] is not None:
                    row["val_accuracy"] = ev["accuracy"]
            try:
                log.write(json.dumps(row) + "\n")
                log.flush()
            except OSError as e:
                raise disk_error(e, metrics_path, ckpt.kept(), resume_command(run_dir)) \
                    from None
            history.append(row)
            stopping = stop.requested or (stop_after is not None and step - start >= stop_after)
            final = step == tcfg.steps
            names = ckpt.due(step, final, stopping) if timed is None else \
                ckpt.due(step, final, stopping, timed=timed)   # on MPI: rank 0's timer
            if names:
                save(names)
            if bar is not None:
                bar.set_postfix(loss=f"{value:.3f}", tok_s=f"{tps:,.0f}", refresh=False)
                bar.update(1)
            if stopping:
                break
        if stop.requested and step > start and ckpt.saved_step != step:
            # The signal came after this step's checkpoint decision: the stop still saves.
            save(ckpt.due(step, step == tcfg.steps, True))
    except KeyboardInterrupt:
        at_once = True
        raise
    finally:
        if bar is not None:
            bar.close()
        try:
            log.close()
        except OSError:
            pass
        if root and history and not at_once:
            try:
                plot_losses(run_dir, history, baseline)
            except OSError as e:
                note(f"could not write {run_dir / 'loss.png'}: {e.strerror}")
    seconds = time.perf_counter() - t_start
    if stop.requested:
        if ckpt.saved_step is None:
            note(f"stopped by {stop.name} before the first step: nothing to resume; run the "
                 f"same command again")
        else:
            note(f"stopped by {stop.name} at step {step}; checkpoint {last} (step "
                 f"{ckpt.saved_step}); resume with: {resume_command(run_dir)}")
        nan = float("nan")
        return TrainResult(run_dir, step, losses, ev["val_loss"] if ev else nan,
                           ev["bits_per_byte"] if ev else nan, baseline,
                           ev["accuracy"] if ev else None, seconds, "", stop.signum)
    if not root:
        nan = float("nan")
        return TrainResult(run_dir, step, losses, nan, nan, baseline, None, seconds)
    if ev is None or (history and history[-1]["val_loss"] is None):
        # (a resumed run that was already finished: the final evaluation's batches, so that it
        # reports what the run reported when it finished)
        ev = evaluate(params, cfg, data, xp,
                      tcfg.final_eval_batches if step >= tcfg.steps else tcfg.eval_batches)
    if not math.isfinite(ev["val_loss"]):   # the last update made a parameter inf or NaN
        raise RunError(f"non-finite validation loss ({ev['val_loss']}) after step {step}: the "
                       "parameters diverged; lower --lr (the checkpoint holds them as they are)")
    text = ""
    if tcfg.sample_bytes and isinstance(data, TextData) and step >= tcfg.steps:
        text = sample_text(params, cfg, "def ", tcfg.sample_bytes, seed=tcfg.seed, xp=xp)
    result = TrainResult(run_dir, step, losses, ev["val_loss"], ev["bits_per_byte"], baseline,
                         ev["accuracy"], seconds, text)
    if out is not None:
        print(summary(result), file=out)
    return result


def summary(r: TrainResult) -> str:
    """The lines `hecate train` ends with."""
    lines = [f"run {r.run_dir}: step {r.step}, {r.seconds:.1f} s",
             f"validation loss {r.val_loss:.4f} nats/token ({r.bits_per_byte:.4f} bits per byte)"]
    if r.unigram is not None:
        lines.append(f"unigram baseline (train split entropy) {r.unigram:.4f} nats/token "
                     f"({r.unigram / math.log(2):.4f} bits per byte)")
    if r.accuracy is not None:
        lines.append(f"recall accuracy at answer positions {r.accuracy:.3f} (chance 0.016)")
    if r.sample:
        lines.append("sample:\n" + r.sample)
    return "\n".join(lines)


__all__ = ["RECALL_MODEL", "RECALL_TRAIN", "TrainConfig", "TrainResult", "RunError", "train",
           "evaluate", "resolve_configs", "load_run", "load_run_config", "restore", "eval_run",
           "sample_text", "summary", "array_module_for", "DataError", "CheckpointFileError",
           "LockError"]
