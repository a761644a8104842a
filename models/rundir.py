"""The run directory around the training loop: config.json (with its history, rebuilt from the
last checkpoint when it is missing), metrics.jsonl, orphan temporary files, and one-line
messages for disk errors.

Every file is written with `models.checkpoint.atomic_write` (a temporary file renamed over the
target), so a kill leaves the old or the new version and at most a ``<name>.<8 chars>.tmp``
orphan, which `remove_orphans` deletes at the next start. config.json holds::

    {"model": {...}, "train": {...}, "data": {...TextData.describe(): absolute source, sha256},
     "unigram_entropy": float | null,
     "history": [{"time": ISO-8601 UTC, "start_step": int, "steps": int, "argv": [...]}, ...]}

one history entry per `hecate train` invocation on the run (a fresh start or a resume), so
extending ``--steps`` on resume is on record. The same dictionary travels in every checkpoint
header, which is how a deleted config.json is rebuilt.
"""
from __future__ import annotations

import datetime
import errno
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any, Callable, Optional

from .checkpoint import CheckpointFileError, atomic_write, load_checkpoint
from .checkpoint import remove_orphans as _remove_orphans


class RunError(ValueError):
    """A training/eval request that cannot run (bad flags, no GPU, existing run, NaN loss)."""


CONFIG = "config.json"
METRICS = "metrics.jsonl"
# The files of a run directory that are written atomically: only their temporary files are
# ever deleted as orphans.
RUN_FILES = re.compile(r"^(last\.npz|step_\d+\.npz|config\.json|metrics\.jsonl|loss\.png)$")
CONFIG_KEYS = ("model", "train", "data", "unigram_entropy", "history")


def ckpt_path(run_dir: Path, name: str = "last") -> Path:
    """``run_dir/checkpoints/<name>.npz``."""
    return Path(run_dir) / "checkpoints" / f"{name}.npz"


def resume_command(run_dir: Path) -> str:
    """The command that continues the run in `run_dir` (absolute, shell-quoted)."""
    return f"hecate train --run-dir {shlex.quote(str(Path(run_dir).absolute()))} --resume"


def remove_orphans(run_dir: Path) -> list[str]:
    """Delete the temporary files that killed writes left in `run_dir` and its checkpoints/
    folder (only names `atomic_write` makes for the run's own files); returns them."""
    removed = _remove_orphans(run_dir, RUN_FILES)
    removed += [f"checkpoints/{n}" for n in _remove_orphans(Path(run_dir) / "checkpoints",
                                                            RUN_FILES)]
    return removed


def write_json(path: Path, obj: Any) -> None:
    """`obj` as indented JSON at `path`, atomically."""
    text = json.dumps(obj, indent=2).encode()
    atomic_write(path, lambda f: f.write(text))


def history_entry(start_step: int, steps: int, argv: Optional[list]) -> dict:
    """One config-history record: when, from which step, to how many steps, with which argv."""
    return {"time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "start_step": int(start_step), "steps": int(steps),
            "argv": list(sys.argv[1:] if argv is None else argv)}


def config_from_header(header: dict) -> dict:
    """The config.json content a checkpoint header carries."""
    return {k: header.get(k) for k in CONFIG_KEYS if k in header}


def load_run_config(run_dir: Optional[str | Path],
                    note: Optional[Callable[[str], None]] = None) -> dict:
    """The run's config.json; when it is missing but the run has a checkpoint, the config is
    rebuilt from the checkpoint's header and written back (where the directory is writable),
    with a note."""
    run_dir = Path(run_dir or ".")
    path = run_dir / CONFIG
    if not path.is_file():
        last = ckpt_path(run_dir)
        if not last.is_file():
            raise RunError(f"no run at {run_dir}: {path} not found")
        _, header = load_checkpoint(last)
        if "model" not in header or "train" not in header:
            raise CheckpointFileError(f"{path} is missing and checkpoint {last} does not carry "
                                      f"the run's config (written by an older Hecate)")
        config = config_from_header(header)
        config.setdefault("history", [])
        try:
            write_json(path, config)
            done = f"rebuilt it from {last}"
        except OSError as e:
            done = f"using the config in {last} (could not write it back: {e.strerror})"
        (note or _stderr)(f"note: {path} was missing; {done}")
        return config
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise RunError(f"{path} is not valid JSON ({e}); delete it to rebuild it from the "
                       f"last checkpoint") from None
    if not (isinstance(config, dict) and isinstance(config.get("model"), dict)
            and isinstance(config.get("train"), dict)):
        raise RunError(f"{path} does not describe a run (it needs \"model\" and \"train\" "
                       f"objects); delete it to rebuild it from the last checkpoint")
    return config


def read_history(path: Path, upto: int) -> list:
    """Metrics lines with step <= `upto` (lines past the last checkpoint are dropped on resume:
    the resumed run writes them again). A torn last line (a kill mid-append) is skipped."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and row.get("step", upto + 1) <= upto:
            rows.append(row)
    return rows


_REASONS = {errno.ENOSPC: "no space left on the device", errno.EROFS: "read-only file system",
            errno.EACCES: "permission denied", errno.EPERM: "permission denied",
            errno.EDQUOT: "disk quota exceeded"}


def disk_error(e: OSError, what: Path | str, kept: str, then: str = "") -> RunError:
    """A one-line `RunError` for a failed write of `what`, saying what was kept (`kept`), the
    fix, and the command to run after it (`then`).

    >>> print(disk_error(OSError(errno.ENOSPC, "No space left on device"), "c.npz", "old kept"))
    cannot write c.npz: no space left on the device ([Errno 28] No space left on device); old kept; free some space
    """
    reason = _REASONS.get(e.errno, e.strerror or type(e).__name__)
    fix = ("free some space" if e.errno in (errno.ENOSPC, errno.EDQUOT) else
           "make it writable" if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM) else
           "fix the cause")
    return RunError(f"cannot write {what}: {reason} ([Errno {e.errno}] {e.strerror}); {kept}; "
                    f"{fix}" + (f", then: {then}" if then else ""))


def _stderr(msg: str) -> None:
    print(f"hecate: {msg}", file=sys.stderr)


__all__ = ["RunError", "CONFIG", "METRICS", "RUN_FILES", "ckpt_path", "resume_command",
           "remove_orphans", "write_json", "history_entry", "config_from_header",
           "load_run_config", "read_history", "disk_error"]
