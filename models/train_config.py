"""A run's training configuration: `TrainConfig` (everything about a run that is not the model),
the recall task's presets (`RECALL_MODEL`, `RECALL_TRAIN`) and `resolve_configs`, which builds
the model and training configs of a run from the defaults, a saved run and the flags.
`models.train` imports every name here, so ``from models.train import TrainConfig`` works too.

>>> TrainConfig.from_dict({"steps": 10}).steps
10
>>> cfg, tcfg = resolve_configs(None, False, {}, {"task": "recall"})
>>> cfg.composition, tcfg.steps
('MAG', 1000)
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

from .checkpoint import check_compatible, load_checkpoint
from .config import ModelConfig, train_defaults
from .rundir import RunError, ckpt_path, load_run_config
from .runstate import FORCE_HINT


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Everything about a run that is not the model: optimizer, schedule, data, logging."""
    steps: int = 800               # text task: about 1 minute on 2 CPU cores (recall: RECALL_TRAIN)
    batch_size: int = 8
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup: int = 30
    weight_decay: float = 0.01
    clip: float = 1.0
    seed: int = 0
    task: str = "text"
    data: Optional[str] = None
    pairs: int = 8                 # recall task: key-value pairs per sequence
    device: str = "cpu"
    eval_every: int = 100
    eval_batches: int = 4
    final_eval_batches: int = 16
    ckpt_every: int = 200
    checkpoint_minutes: float = 5.0   # also write last.npz this often (0: only every ckpt_every)
    sample_bytes: int = 200

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise RunError(f"TrainConfig: unknown key(s) {unknown}")
        return cls(**d)


# `hecate train --task recall` starts from these instead of the text defaults (explicit flags
# still win). Measured in benchmarks/README.md (training section): one MAG block whose memory
# keys come from the previous token (attention has no positional signal, so it cannot bind a
# value to the key before it), retention and inner-learning-rate biases raised so a key
# written ~40 tokens before its query survives the filler (alpha ~0.9933 per token) and is
# written in one step (theta ~0.69), and the memory's query projection starting equal to its
# key projection: without that, 1 seed in 2 at lr 1e-2 and 0 of 4 at lr 3e-3 ever left chance
# level; with it, 7 of 7 seeds solved the task within 500 steps. The SWA-only baseline is the
# same with ``--levels 0``.
RECALL_MODEL = {"layers": 1, "levels": 1, "seq_len": 64, "window": 16, "composition": "MAG",
                "key_shift": True, "alpha_bias_shift": 2.0, "theta_bias_shift": 4.6,
                "shared_qk_init": True}
RECALL_TRAIN = {"steps": 1000, "batch_size": 16, "lr": 3e-3, "warmup": 20, "pairs": 8,
                "eval_every": 250, "eval_batches": 4, "final_eval_batches": 8}


def resolve_configs(run_dir: Optional[str | Path], resume: bool, model_flags: dict,
                    train_flags: dict, force: bool = False) -> tuple[ModelConfig, TrainConfig]:
    """Configs for a run: the defaults (`RECALL_MODEL` / `RECALL_TRAIN` over them for
    ``task="recall"``; with `resume`, the run's saved config, rebuilt from the checkpoint when
    config.json is gone) with the explicitly given flags on top. A model flag that contradicts
    the checkpoint is an error naming every differing field, unless `force`."""
    model_base, train_base = train_defaults(train_flags.get("task")), TrainConfig().to_dict()
    if train_flags.get("task") == "recall":
        model_base, train_base = {**model_base, **RECALL_MODEL}, {**train_base, **RECALL_TRAIN}
    if resume:
        saved = load_run_config(run_dir)
        model_base, train_base = saved["model"], saved["train"]
    try:
        cfg = ModelConfig.from_dict({**model_base, **model_flags})
        tcfg = TrainConfig.from_dict({**train_base, **train_flags})
    except (TypeError, ValueError) as e:
        raise RunError(str(e)) from None
    if resume and not force:
        _, header = load_checkpoint(ckpt_path(Path(run_dir)))
        check_compatible(ckpt_path(Path(run_dir)), header, cfg.to_dict(), hint=FORCE_HINT)
    return cfg, tcfg
