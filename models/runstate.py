"""What the training loop saves and restores: the arrays of a checkpoint, the `Checkpointer`
that decides when to write one (every N steps, every few minutes, at the end, on a stop) and
turns a full or read-only disk into a one-line error that keeps the previous checkpoint, and
the loss-curve plot.

A checkpoint is written as ``last.npz`` (atomically, after a free-space check: the disk must
hold one new checkpoint beside the old one, never more); the numbered ``step_<N>.npz``
snapshots are hard links to it, so they cost no space or time of their own.
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from . import model
from .checkpoint import (CheckpointFileError, atomic_write, check_compatible, estimate_size,
                         fill_tree, link_copy, load_checkpoint, save_checkpoint, to_numpy,
                         tree_arrays)
from .optim import AdamW
from .rundir import RunError, ckpt_path, disk_error, resume_command

FORCE_HINT = "; pass --force to resume anyway (the parameters must still fit)"


def state_arrays(params: Any, opt: AdamW, state: Any) -> dict:
    """The arrays of a checkpoint: parameters, AdamW moments, memory state (host copies)."""
    arrays = tree_arrays(params, "params", "params")
    arrays.update({f"opt/{k}": v for k, v in opt.state_arrays().items()})
    arrays.update({k: np.asarray(to_numpy(v)) for k, v in
                   tree_arrays(state, "state", "state").items()})
    return arrays


def restore(path: Path, cfg: Any, tcfg: Any, xp: Any, force: bool = False,
            note: Optional[Callable[[str], None]] = None) -> tuple:
    """``(params, opt, state, header)`` from the checkpoint at `path`, verified against `cfg`
    (with `force`, differing model fields are only noted; the arrays must still fit)."""
    arrays, header = load_checkpoint(path)
    try:
        check_compatible(path, header, cfg.to_dict(), hint=FORCE_HINT)
    except CheckpointFileError as e:
        if not force:
            raise
        if note is not None:
            note(f"--force: {str(e).replace(FORCE_HINT, '')}")
    params = fill_tree(model.init_params(cfg, 0, xp), arrays, "params", "params", str(path), xp)
    state = fill_tree(model.init_state(cfg, tcfg.batch_size, xp), arrays, "state", "state",
                      str(path), xp)
    opt = AdamW(params, lr=tcfg.lr, weight_decay=tcfg.weight_decay)
    try:
        opt.load_state_arrays({k[4:]: v for k, v in arrays.items() if k.startswith("opt/")},
                              header["opt_step"])
    except (KeyError, ValueError) as e:
        raise CheckpointFileError(f"checkpoint {path}: {e}") from None
    return params, opt, state, header


class Checkpointer:
    """Writes ``last.npz`` when one is due (`due`) and says what survives a failed write."""

    def __init__(self, run_dir: Path, every_steps: int, minutes: float,
                 saved_step: Optional[int]):
        self.run_dir, self.every, self.minutes = Path(run_dir), every_steps, minutes
        self.last = ckpt_path(self.run_dir)
        self.saved_step = saved_step
        self._t = time.monotonic()

    def kept(self) -> str:
        """What is on disk now, for a message."""
        if self.saved_step is None:
            return "no checkpoint had been written yet"
        return f"the previous checkpoint (step {self.saved_step}) is kept: {self.last}"

    def timer_expired(self) -> bool:
        """Whether `minutes` have passed since the last write (0 minutes: never)."""
        return self.minutes > 0 and time.monotonic() - self._t >= 60.0 * self.minutes

    def due(self, step: int, final: bool, stopping: bool,
            timed: Optional[bool] = None) -> list:
        """The names to write after `step`: [] or ``["last"]`` plus ``step_<N>`` snapshots.
        `timed` overrides this process's own timer (ranks follow rank 0's)."""
        timed = self.timer_expired() if timed is None else timed
        snapshot = step % self.every == 0
        if not (snapshot or final or stopping or timed):
            return []
        return ["last"] + ([f"step_{step:06d}"] if snapshot else [])

    def save(self, names: list, step: int, arrays: dict, header: dict) -> None:
        """Write ``last.npz`` and link the snapshots; a full or read-only disk is a `RunError`
        that leaves the previous checkpoint as it was."""
        then = resume_command(self.run_dir)
        need = estimate_size(arrays, header)
        try:
            free = shutil.disk_usage(self.last.parent).free
        except OSError:
            free = None
        if free is not None and free < need:
            raise RunError(f"not enough free space for a checkpoint in {self.last.parent}: it "
                           f"needs about {need / 2**20:.1f} MiB, {free / 2**20:.1f} MiB are "
                           f"free; {self.kept()}; free some space, then: {then}")
        try:
            save_checkpoint(self.last, arrays, header)
            self.saved_step = step
            for name in names[1:]:
                link_copy(self.last, ckpt_path(self.run_dir, name))
        except OSError as e:
            raise disk_error(e, self.last if self.saved_step != step else
                             ckpt_path(self.run_dir, names[-1]), self.kept(), then) from None
        self._t = time.monotonic()


def plot_losses(run_dir: Path, history: list, baseline: Optional[float]) -> None:
    """``loss.png``: train and validation curves (and the unigram baseline), atomically."""
    import matplotlib
    matplotlib.use("Agg")   # no display: write a file, never open a window
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    steps = [h["step"] for h in history]
    ax.plot(steps, [h["loss"] for h in history], lw=0.8, label="train")
    val = [(h["step"], h["val_loss"]) for h in history if h.get("val_loss") is not None]
    if val:
        ax.plot(*zip(*val), "o-", label="validation")
    if baseline is not None:
        ax.axhline(baseline, color="grey", ls="--", label=f"unigram ({baseline:.2f})")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.legend()
    fig.tight_layout()
    try:
        atomic_write(Path(run_dir) / "loss.png", lambda f: fig.savefig(f, format="png", dpi=100))
    finally:
        plt.close(fig)


__all__ = ["state_arrays", "restore", "Checkpointer", "plot_losses", "FORCE_HINT"]
