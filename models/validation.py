"""Checks of the `hecate` command line's numeric flags, made while the command line is parsed.

Every numeric flag gets an argparse ``type`` built here (`Integer`, `Number`): it parses the text
and checks the range in one go, so a bad value ends the command before anything runs, with
argparse's one-line message and exit status 2::

    hecate train: error: argument --steps: must be a positive integer, got -5

Checks that involve several flags, or the defaults the flags fall back on (``--seq-len`` at
least ``--window``, the recall task's minimum ``--seq-len``, and the memory a training run would
need against the memory available), are made by `check_train` right after parsing.

>>> Integer(1)("12")
12
>>> Integer(1)("0")
Traceback (most recent call last):
    ...
argparse.ArgumentTypeError: must be a positive integer, got 0
>>> Number(0, open_low=True)("nan")
Traceback (most recent call last):
    ...
argparse.ArgumentTypeError: must be a finite number > 0, got nan
>>> format_bytes(32 * 2 ** 40)
'32.0 TiB'
"""
from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path
from typing import Any, Optional

from .distributed import launcher_rank


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, ``<prog>: error: <message>``, exit status 2
    (argparse prints the whole usage block first; ``--help`` still shows it). Under an MPI
    launcher every rank parses the same command line: rank 0 alone prints."""

    def error(self, message: str):   # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")

    def _print_message(self, message: str, file: Any = None) -> None:
        if launcher_rank() == 0:
            super()._print_message(message, file)


class Integer:
    """An argparse ``type``: an integer in ``[low, high]`` (``high`` None: no upper bound)."""

    def __init__(self, low: int, high: Optional[int] = None) -> None:
        self.low, self.high = low, high
        self.__name__ = "integer"        # argparse names the type in some of its messages

    def describe(self) -> str:
        """The accepted values in words, for messages and ``--help``.

        >>> Integer(0).describe(), Integer(0, 4).describe()
        ('a non-negative integer', 'an integer from 0 to 4')
        """
        if self.high is not None:
            return f"an integer from {self.low} to {self.high}"
        return {1: "a positive integer", 0: "a non-negative integer"}.get(
            self.low, f"an integer >= {self.low}")

    def __call__(self, text: str) -> int:
        try:
            value = int(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"must be {self.describe()}, got {text!r}") from None
        if value < self.low or (self.high is not None and value > self.high):
            raise argparse.ArgumentTypeError(f"must be {self.describe()}, got {value}")
        return value


class Number:
    """An argparse ``type``: a finite float above ``low`` (``open_low``: strictly above)."""

    def __init__(self, low: float, open_low: bool = False) -> None:
        self.low, self.open_low = low, open_low
        self.__name__ = "number"

    def describe(self) -> str:
        """The accepted values in words.

        >>> Number(0).describe()
        'a finite number >= 0'
        """
        return f"a finite number {'>' if self.open_low else '>='} {self.low:g}"

    def __call__(self, text: str) -> float:
        try:
            value = float(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"must be {self.describe()}, got {text!r}") from None
        if not math.isfinite(value) or value < self.low or (self.open_low and value == self.low):
            raise argparse.ArgumentTypeError(f"must be {self.describe()}, got {value:g}")
        return value


POSITIVE_INT = Integer(1)
NON_NEGATIVE_INT = Integer(0)
SEED = Integer(0)             # NumPy's generators take non-negative seeds only
LEVELS = Integer(0, 4)        # DESIGN §5 gives gate biases for four CMS levels
POSITIVE = Number(0, open_low=True)
NON_NEGATIVE = Number(0)

# --------------------------------------------------------------------------------------------
# Memory


def format_bytes(n: float) -> str:
    """``n`` bytes in binary units, one decimal."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"   # pragma: no cover


def available_memory() -> Optional[tuple[int, str]]:
    """``(bytes, source)``: the memory this process can still allocate, or None when unknown.

    Linux: ``MemAvailable`` of /proc/meminfo, lowered to the cgroup's remaining allowance when a
    cgroup (v2) limit is set; elsewhere the free physical pages (``os.sysconf``).
    """
    found: Optional[tuple[int, str]] = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found = (int(line.split()[1]) * 1024, "MemAvailable in /proc/meminfo")
                break
    except (OSError, ValueError, IndexError):
        pass
    if found is None:
        try:
            found = (os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"),
                     "free physical memory")
        except (AttributeError, ValueError, OSError):
            return None
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            used = int(Path("/sys/fs/cgroup/memory.current").read_text())
            left = int(limit) - used
            if left < found[0]:
                found = (max(left, 0), "the cgroup's memory.max less memory.current")
    except (OSError, ValueError):
        pass
    return found if found[0] > 0 else None


def parameter_count(cfg: Any) -> int:
    """Parameters of a `ModelConfig` (`models.model.init_params`), without allocating them.

    >>> from models.config import ModelConfig
    >>> from models.model import init_params
    >>> from tape.pytree import flatten
    >>> cfg = ModelConfig(d_model=8, layers=2, levels=3, window=4, seq_len=8)
    >>> parameter_count(cfg) == sum(x.size for x in flatten(init_params(cfg, 0))[0])
    True
    """
    d, v = cfg.d_model, cfg.vocab
    level = 3 * d * d + 3 * 2 * d + 3 * cfg.heads   # w_k, w_v, w_q; gate weights, biases per head
    block = 4 * d * d + d + cfg.levels * level  # w_q, w_k, w_v, w_o, norm, the levels
    block += (d + 2 * cfg.mlp * d * d) if cfg.mlp else 0    # the MLP: norm, w_in, w_out
    return cfg.layers * block + 2 * v * d + d   # embed, unembed, final norm


def training_bytes(cfg: Any, batch_size: int) -> dict:
    """An estimate, from below, of the memory one training step needs: parameters, gradients
    and the two AdamW moments, plus what the reverse pass keeps per token (the memory matrices
    ``[batch, seq_len, d, d]`` of every level, twice for Titans' momentum, and a few
    ``d``-vectors per token and layer). Measured on this model it is within 10-25% below the
    peak resident memory of a step.
    """
    item = 4 if cfg.dtype == "float32" else 8
    weights = 4 * parameter_count(cfg) * item
    tokens = batch_size * cfg.seq_len
    per_token = cfg.layers * (cfg.levels * cfg.d_model ** 2 // cfg.heads
                              * (2 if cfg.rule == "titans" else 1)
                              + (32 + 4 * cfg.mlp) * cfg.d_model + cfg.window * cfg.heads)
    activations = tokens * per_token * item
    return {"weights": weights, "activations": activations, "total": weights + activations}

# --------------------------------------------------------------------------------------------
# Checks across flags


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _saved_run(run_dir: Optional[str]) -> Optional[dict]:
    """The config.json of a run directory, or None when it cannot be read (the resume itself
    then reports why)."""
    try:
        return json.loads((Path(run_dir or ".") / "config.json").read_text())
    except (OSError, ValueError):
        return None


def check_train(parser: argparse.ArgumentParser, args: argparse.Namespace,
                model_flags: dict, train_flags: dict) -> None:
    """The checks of `hecate train` that involve several flags or their defaults; each failure
    is a `parser.error` (one line, exit status 2). `model_flags` / `train_flags` are the flags
    given on the command line (name -> value)."""
    from .config import PREDATING, ModelConfig, train_defaults
    from .train import RECALL_MODEL, RECALL_TRAIN, TrainConfig

    origin = "default"
    model, train = train_defaults(train_flags.get("task")), TrainConfig().to_dict()
    if train_flags.get("task") == "recall":
        model, train, origin = {**model, **RECALL_MODEL}, {**train, **RECALL_TRAIN}, \
            "--task recall default"
    data = getattr(args, "data", None)
    if data is not None and not str(data).strip():
        parser.error("--data is empty: give the path of a text file to train on, or leave "
                     "the flag out for the built-in corpus")
    if data is not None and train_flags.get("task") == "recall":
        parser.error("--data is a text file, but --task recall generates its own sequences; "
                     "leave out --data, or --task (the text task reads the file)")
    if getattr(args, "resume", False):
        saved = _saved_run(args.run_dir)
        if not isinstance(saved, dict) or not isinstance(saved.get("model"), dict) or \
                not isinstance(saved.get("train", {}), dict):
            return     # the resume reports the missing or unreadable run itself
        model = {**model, **PREDATING}     # fields the run's config predates: older model
        model, train, origin = {**model, **saved["model"]}, {**train, **saved.get("train", {})}, \
            "the run's config.json"
    model, train = {**model, **model_flags}, {**train, **train_flags}

    def shown(name: str) -> str:
        value = model.get(name, train.get(name))
        given = name in model_flags or name in train_flags
        return f"{_flag(name)} {value}" if given else f"{_flag(name)} ({origin}: {value})"

    for name in ("seq_len", "window"):
        if isinstance(model.get(name), bool) or not isinstance(model.get(name), int):
            parser.error(f"{shown(name)} is not a whole number; fix {origin} or give the flag")
    if model["seq_len"] < model["window"]:
        parser.error(f"{shown('seq_len')} must be >= {shown('window')}: attention looks back "
                     f"over at most one chunk; raise --seq-len or lower --window")
    if train["task"] == "recall" and model["seq_len"] < 4 * train["pairs"]:
        parser.error(f"{shown('seq_len')} is too short for --task recall: {train['pairs']} "
                     f"key-value pairs need --seq-len >= {4 * train['pairs']}")
    try:
        cfg = ModelConfig.from_dict(model)
    except (TypeError, ValueError) as e:
        parser.error(str(e))
    if getattr(args, "resume", False) or train.get("device", "cpu") != "cpu":
        return   # a resumed model already exists; GPU memory is not what /proc/meminfo counts
    need = training_bytes(cfg, train["batch_size"])
    have = available_memory()
    if have is not None and need["total"] > have[0]:
        sizes = ", ".join(shown(n) for n in ("d_model", "layers", "levels", "batch_size",
                                             "seq_len"))
        parser.error(f"this model needs about {format_bytes(need['total'])} of memory to train "
                     f"({parameter_count(cfg):,} parameters with their gradients and AdamW "
                     f"moments: {format_bytes(need['weights'])}; activations: "
                     f"{format_bytes(need['activations'])}) but {format_bytes(have[0])} is "
                     f"available ({have[1]}); {sizes}: lower one of them")


__all__ = ["Parser", "Integer", "Number", "POSITIVE_INT", "NON_NEGATIVE_INT", "SEED", "LEVELS",
           "POSITIVE", "NON_NEGATIVE", "available_memory", "parameter_count", "training_bytes",
           "format_bytes", "check_train"]
