"""Training checkpoints: one `.npz` file, written atomically, verified when read.

Format (version 1). A NumPy ``.npz`` archive (a zip of ``.npy`` files) with these entries:

* ``params/<path>``: each parameter leaf, under its pytree path (``params.blocks[0].attn.w_q``);
* ``opt/m/<path>``, ``opt/v/<path>``: AdamW's moments for that leaf;
* ``state/<path>``: the memory state carried across chunks (``state[0]...``);
* ``__header__``: UTF-8 JSON as a uint8 array: ``{"format": "hecate-checkpoint", "version": 1,
  "step": int, "opt_step": int, "model": ModelConfig.to_dict(), "train": {...},
  "data_state": {...RNG state and stream positions...}, "checksum": "<sha256 hex>"}``.

The checksum is SHA-256 over every array entry in sorted name order (name, dtype, shape and
bytes), so a flipped bit anywhere is caught, not only a truncated zip. Writing goes to a
temporary file in the same directory (``<name>.<8 random chars>.tmp``, `TEMP_RE`), flushed and
fsynced, then `os.replace`d over the target: a crash leaves either the old checkpoint or the new
one, never half of one, and a write needs one checkpoint's worth of free space beyond the old
file (never two copies plus a temporary file). An exception during the write removes the
temporary file; a process killed mid-write leaves it behind, and `remove_orphans` (called when
a run starts) deletes such files. `atomic_write` is the same writer for any file; `link_copy`
adds a second name for a finished checkpoint (``step_<N>.npz``) without copying its bytes.

>>> import tempfile, os, numpy as np
>>> d = tempfile.mkdtemp()
>>> path = os.path.join(d, "last.npz")
>>> save_checkpoint(path, {"params/w": np.ones(2)}, {"step": 3})
>>> arrays, header = load_checkpoint(path)
>>> header["step"], arrays["params/w"].tolist()
(3, [1.0, 1.0])
"""
from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import re
import tempfile
import zipfile
from pathlib import Path
from typing import Any, BinaryIO, Callable, Optional

import numpy as np

from tape.pytree import flatten_with_paths, format_path, unflatten

FORMAT = "hecate-checkpoint"
VERSION = 1


class CheckpointFileError(ValueError):
    """A checkpoint that cannot be used: unreadable, corrupt, or from another configuration."""


def to_numpy(x: Any) -> np.ndarray:
    """A host copy of a NumPy or CuPy array (CuPy arrays have `.get()`)."""
    return x.get() if hasattr(x, "get") and not isinstance(x, np.ndarray) else np.asarray(x)


def tree_arrays(tree: Any, prefix: str, root: str) -> dict:
    """``{f"{prefix}/{path}": leaf}`` for the leaves of a pytree, paths written from `root`.

    >>> tree_arrays({"a": np.zeros(1)}, "params", "p")
    {"params/p['a']": array([0.])}
    """
    leaves, paths, _ = flatten_with_paths(tree)
    return {f"{prefix}/{format_path(p, root)}": leaf for p, leaf in zip(paths, leaves)}


def fill_tree(template: Any, arrays: dict, prefix: str, root: str, source: str,
              xp: Any = np) -> Any:
    """A pytree shaped like `template` whose leaves come from `arrays` (by path), checked for
    missing entries and shapes; the error names `source`."""
    leaves, paths, td = flatten_with_paths(template)
    out = []
    for p, leaf in zip(paths, leaves):
        key = f"{prefix}/{format_path(p, root)}"
        if key not in arrays:
            raise CheckpointFileError(f"{source}: no entry {key!r}: the checkpoint was written "
                                      f"for a different model structure")
        value = arrays[key]
        if tuple(value.shape) != tuple(np.shape(leaf)):
            raise CheckpointFileError(f"{source}: {key!r} has shape {tuple(value.shape)}, the "
                                      f"current model expects {tuple(np.shape(leaf))}")
        if isinstance(leaf, (int, float)) and not hasattr(leaf, "dtype"):
            out.append(type(leaf)(value))   # Python scalars (a position counter) stay scalars
        else:
            out.append(xp.asarray(value, dtype=getattr(leaf, "dtype", value.dtype)))
    return unflatten(td, out)


def _checksum(arrays: dict) -> str:
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


# The temporary files `atomic_write` creates: `tempfile.mkstemp` names, 8 characters from
# [a-z0-9_] between the target's name and ".tmp".
TEMP_RE = re.compile(r"^(?P<target>.+)\.[a-z0-9_]{8}\.tmp$")


def atomic_write(path: str | Path, write: Callable[[BinaryIO], None]) -> None:
    """Call ``write(f)`` on a temporary file next to `path`, fsync it, then rename it over
    `path`. On any exception (including KeyboardInterrupt) the temporary file is removed and
    `path` is left as it was.

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "x.txt")
    >>> atomic_write(p, lambda f: f.write(b"hi")); open(p).read()
    'hi'
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def remove_orphans(directory: str | Path, targets: re.Pattern) -> list[str]:
    """Delete the temporary files of `atomic_write` in `directory` whose target name matches
    `targets` (files a killed process left behind); returns their names. Nothing else is
    touched. Call it only while holding the directory's lock, so no live writer is in the way.
    """
    removed = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return removed
    for name in names:
        m = TEMP_RE.match(name)
        if m and targets.match(m.group("target")) and os.path.isfile(os.path.join(directory,
                                                                                  name)):
            try:
                os.unlink(os.path.join(directory, name))
                removed.append(name)
            except FileNotFoundError:
                pass
    return removed


def link_copy(src: str | Path, dst: str | Path) -> None:
    """Give the finished file `src` the second name `dst` (a hard link: no bytes copied, and
    a later `os.replace` over `src` leaves `dst` as it was); falls back to an atomic copy
    where the file system has no hard links."""
    src, dst = Path(src), Path(dst)
    tmp = dst.with_name(f"{dst.name}.{os.getpid() % 10**8:08d}.tmp")
    try:
        if tmp.exists():
            tmp.unlink()
        os.link(src, tmp)
        os.replace(tmp, dst)
    except OSError as e:
        if tmp.exists():
            tmp.unlink()
        if e.errno not in (errno.EPERM, errno.EXDEV, errno.EMLINK, errno.ENOTSUP,
                           getattr(errno, "EOPNOTSUPP", errno.ENOTSUP)):
            raise
        data = src.read_bytes()
        atomic_write(dst, lambda f: f.write(data))


def estimate_size(arrays: dict, header: Optional[dict] = None) -> int:
    """Bytes a checkpoint of `arrays` takes on disk (uncompressed .npz: the array bytes plus
    per-entry zip and .npy headers), for a free-space check before writing."""
    total = sum(int(a.nbytes) if hasattr(a, "nbytes") else np.asarray(a).nbytes
                for a in arrays.values())
    return total + 512 * (len(arrays) + 1) + len(json.dumps(header or {})) + 4096


def save_checkpoint(path: str | Path, arrays: dict, header: dict) -> None:
    """Write `arrays` (name -> NumPy/CuPy array) and `header` (JSON-ready) to `path` atomically.

    The header gets ``format``, ``version`` and ``checksum`` fields added.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    host = {name: to_numpy(a) for name, a in arrays.items()}
    header = dict(header, format=FORMAT, version=VERSION, checksum=_checksum(host))
    blob = np.frombuffer(json.dumps(header, sort_keys=True).encode(), dtype=np.uint8)
    atomic_write(path, lambda f: np.savez(f, __header__=blob, **host))


def load_checkpoint(path: str | Path) -> tuple[dict, dict]:
    """Read and verify a checkpoint: ``(arrays, header)``.

    Raises `CheckpointFileError` naming the file when it is missing, truncated, not a
    checkpoint, of another format version, or when its checksum does not match.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointFileError(f"checkpoint not found: {path}")
    try:
        raw = path.read_bytes()
        with np.load(io.BytesIO(raw), allow_pickle=False) as z:
            arrays = {name: z[name] for name in z.files}
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError) as e:
        raise CheckpointFileError(f"checkpoint {path} is truncated or corrupt "
                                  f"({type(e).__name__}: {e}); delete it or pass another run "
                                  f"directory") from None
    if "__header__" not in arrays:
        raise CheckpointFileError(f"{path} is not a Hecate checkpoint (no __header__ entry)")
    try:
        header = json.loads(arrays.pop("__header__").tobytes().decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointFileError(f"checkpoint {path} has a corrupt header ({e})") from None
    if header.get("format") != FORMAT:
        raise CheckpointFileError(f"{path} is not a Hecate checkpoint "
                                  f"(format {header.get('format')!r})")
    if header.get("version") != VERSION:
        raise CheckpointFileError(f"checkpoint {path} has format version "
                                  f"{header.get('version')}; this Hecate reads version {VERSION}")
    if _checksum(arrays) != header.get("checksum"):
        raise CheckpointFileError(f"checkpoint {path} is corrupt: its checksum does not match "
                                  f"its contents")
    return arrays, header


def config_differences(saved: dict, current: dict) -> list[str]:
    """The fields where two config dicts differ, as ``"name: saved -> current"``.

    >>> config_differences({"d_model": 64, "rule": "delta"}, {"d_model": 32, "rule": "delta"})
    ['d_model: 64 (checkpoint) vs 32 (this run)']
    """
    out = []
    for key in sorted(set(saved) | set(current)):
        a, b = saved.get(key), current.get(key)
        if a != b:
            out.append(f"{key}: {a!r} (checkpoint) vs {b!r} (this run)")
    return out


def check_compatible(path: str | Path, header: dict, model_config: dict, hint: str = "") -> None:
    """Raise `CheckpointFileError` naming every differing model-config field (`hint` is
    appended to the message). Fields the checkpoint predates (added to `ModelConfig` later)
    count as their defaults, or as their older behaviour for those in `PREDATING`."""
    from .config import PREDATING, ModelConfig
    saved = dict(header.get("model", {}))
    if saved:
        defaults = {**ModelConfig().to_dict(), **PREDATING}
        saved.update({k: defaults[k] for k in model_config if k not in saved and k in defaults})
    diffs = config_differences(saved, model_config)
    if diffs:
        raise CheckpointFileError(f"checkpoint {path} was written for another model "
                                  f"configuration; differing fields: " + "; ".join(diffs) + hint)


__all__ = ["CheckpointFileError", "save_checkpoint", "atomic_write", "remove_orphans",
           "link_copy", "estimate_size", "TEMP_RE", "load_checkpoint", "check_compatible",
           "config_differences", "tree_arrays", "fill_tree", "to_numpy", "FORMAT", "VERSION"]
