"""Training data, with no network ever: byte-level text and a synthetic associative-recall task.

* `stdlib_corpus()`: the default corpus, the sources of a fixed list of Python standard-library
  modules read from this interpreter's install (every Python has them; a missing one is skipped).
* `load_text_file(path)`: any text file (`--data FILE`).
* `TextData`: a byte corpus (vocab 256) split into train (first 90%) and validation (last 10%),
  read as `batch` parallel streams: row b walks the training split chunk after chunk from a random
  start, so the model's memory state, carried across chunks, sees continuous text.
* `RecallTask`: multi-query associative recall, with an accuracy metric on the answer positions.

All randomness comes from one seeded `numpy.random.Generator`; `state()` / `set_state()` capture
it (and the stream positions) for checkpoints, so a resumed run draws the same batches.
`describe()` names the data for the run's config and checkpoint: for text, the file's absolute
path and the SHA-256 of its bytes, which `data_mismatch` compares when a run is resumed.

>>> data = TextData(b"hello world, " * 100, batch=2, seq_len=8, seed=0)
>>> data.next_batch().shape
(2, 9)
"""
from __future__ import annotations

import hashlib
import importlib.util
import math  # noqa: F401  (used by the doctests)
from pathlib import Path
from typing import Any

import numpy as np


class DataError(ValueError):
    """Unusable training data (missing file, empty or binary corpus, too short for seq_len)."""


# A fixed list, so the default corpus is the same on every run with the same Python version.
# Plain-Python modules that exist on CPython 3.10+ (missing ones are skipped, never an error).
STDLIB_MODULES = (
    "argparse", "ast", "bisect", "calendar", "collections", "configparser", "contextlib",
    "copy", "csv", "dataclasses", "datetime", "difflib", "enum", "fractions", "functools",
    "gettext", "heapq", "inspect", "ipaddress", "json.decoder", "json.encoder", "locale",
    "logging", "optparse", "pathlib", "pprint", "random", "shlex", "shutil", "statistics",
    "string", "tarfile", "tempfile", "textwrap", "threading", "tokenize", "traceback", "typing",
    "uuid", "zipfile",
)


def stdlib_corpus(modules: tuple = STDLIB_MODULES) -> bytes:
    """The concatenated sources of `modules` (found with `importlib.util.find_spec`).

    >>> len(stdlib_corpus(("textwrap",))) > 1000
    True
    """
    parts = []
    for name in modules:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        origin = getattr(spec, "origin", None) if spec else None
        if not origin or not origin.endswith(".py") or not Path(origin).is_file():
            continue
        parts.append(Path(origin).read_bytes())
    if not parts:
        raise DataError("none of the standard-library modules of the default corpus were found "
                        "in this Python install; pass a text file with --data FILE")
    return b"\n\n".join(parts)


def check_text(data: bytes, source: str) -> bytes:
    """Reject an empty or binary corpus, naming `source`.

    Binary means: a NUL byte in the first 64 KiB, or more than 30% of the bytes are control
    characters other than tab, newline, carriage return and form feed (text in any
    encoding passes; bytes >= 128 are fine).

    >>> check_text(b"", "x.txt")
    Traceback (most recent call last):
        ...
    models.data.DataError: x.txt is empty: there is no text to train on
    """
    if not data or not data.strip():
        raise DataError(f"{source} is empty: there is no text to train on")
    arr = np.frombuffer(data, dtype=np.uint8)
    control = (arr < 32) & ~np.isin(arr, (9, 10, 12, 13))
    if b"\x00" in data[:65536] or control.mean() > 0.3:
        raise DataError(f"{source} looks like a binary file ({control.mean():.0%} control "
                        f"bytes), not text: pass a text file with --data FILE")
    return data


def load_text_file(path: str | Path) -> bytes:
    """The bytes of a text file, with clear errors for a missing, empty or binary file."""
    p = Path(path)
    if not p.exists():
        raise DataError(f"data file not found: {p}")
    if not p.is_file():
        raise DataError(f"data path is not a file: {p}")
    return check_text(p.read_bytes(), str(p))


def unigram_entropy(tokens: np.ndarray, vocab: int = 256) -> float:
    """Entropy (nats) of the token frequencies of `tokens`: the loss of the best model that
    ignores context, the baseline a language model has to beat.

    >>> round(unigram_entropy(np.array([0, 1, 0, 1])), 6) == round(math.log(2), 6)
    True
    """
    counts = np.bincount(np.asarray(tokens, dtype=np.int64).ravel(), minlength=vocab)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def _rng_state(rng: np.random.Generator) -> dict:
    return rng.bit_generator.state


class TextData:
    """A byte corpus as `batch` streams of chunks of ``seq_len + 1`` tokens (inputs and the next
    token), with a held-out validation split (the last `val_fraction` of the bytes).

    Consecutive batches continue each row's stream (chunks overlap by one token, the target of
    one chunk's last input); a row that reaches the end of the split restarts at a random place.
    """

    def __init__(self, corpus: bytes, batch: int, seq_len: int, seed: int,
                 val_fraction: float = 0.1, source: str = "corpus"):
        tokens = np.frombuffer(corpus, dtype=np.uint8).astype(np.int64)
        n_val = max(int(len(tokens) * val_fraction), seq_len + 2)
        if len(tokens) - n_val < seq_len + 2:
            raise DataError(f"{source} has {len(tokens)} bytes: too short for seq_len {seq_len} "
                            f"(need at least {2 * (seq_len + 2)} bytes for a train and a "
                            f"validation chunk)")
        self.train, self.val = tokens[:-n_val], tokens[-n_val:]
        self.batch, self.seq_len, self.source = batch, seq_len, source
        self.sha256 = hashlib.sha256(corpus).hexdigest()
        self.rng = np.random.default_rng(seed)
        self.cursors = self._starts(batch)

    def _starts(self, n: int) -> np.ndarray:
        return self.rng.integers(0, len(self.train) - self.seq_len - 1, size=n)

    def next_batch(self) -> np.ndarray:
        """The next [batch, seq_len + 1] int64 chunk of the training streams."""
        end = len(self.train) - self.seq_len - 1
        over = self.cursors > end
        if over.any():
            self.cursors[over] = self._starts(int(over.sum()))
        idx = self.cursors[:, None] + np.arange(self.seq_len + 1)
        self.cursors = self.cursors + self.seq_len
        return self.train[idx]

    def val_batches(self, max_batches: int | None = None):
        """Validation chunks in order: up to `batch` parallel streams over the validation split
        (each row a contiguous slice), so an evaluation can carry memory state from chunk to
        chunk. Deterministic: it does not touch the training RNG."""
        n = len(self.val) - 1
        rows = max(min(self.batch, n // self.seq_len), 1)
        per_row = n // rows
        n_chunks = per_row // self.seq_len
        if max_batches is not None:
            n_chunks = min(n_chunks, max_batches)
        starts = np.arange(rows) * per_row
        for c in range(n_chunks):
            yield self.val[starts[:, None] + c * self.seq_len + np.arange(self.seq_len + 1)]

    def state(self) -> dict:
        """JSON-ready: the generator's state and the stream positions."""
        return {"rng": _rng_state(self.rng), "cursors": [int(c) for c in self.cursors]}

    def set_state(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.cursors = np.asarray(state["cursors"], dtype=np.int64)

    def describe(self) -> dict:
        return {"task": "text", "source": self.source, "train_bytes": int(len(self.train)),
                "val_bytes": int(len(self.val)), "sha256": self.sha256}


class RecallTask:
    """Multi-query associative recall.

    Each sequence of ``seq_len + 1`` tokens starts with `pairs` key-value pairs (distinct keys,
    drawn from tokens 0..63, values from 64..127), then filler (token 128, predictable), and ends
    with the same keys in a new random order, each followed by its value. The queries sit at
    least ``seq_len + 1 - 4 * pairs`` tokens after their pairs: a sliding window shorter than
    that cannot see the answer, a memory can. The metric is accuracy of the argmax prediction at
    the answer positions (chance: 1 / 64).

    >>> task = RecallTask(batch=2, seq_len=64, seed=0, pairs=4)
    >>> toks = task.next_batch(); toks.shape
    (2, 65)
    >>> int(task.answer_mask().sum(axis=1)[0])
    4
    """

    N_KEYS, N_VALUES, FILLER = 64, 64, 128

    def __init__(self, batch: int, seq_len: int, seed: int, pairs: int = 8):
        if 4 * pairs + 1 > seq_len + 1:
            raise DataError(f"--task recall: seq_len {seq_len} is too short for {pairs} pairs "
                            f"(needs at least {4 * pairs})")
        self.batch, self.seq_len, self.pairs = batch, seq_len, pairs
        self.rng = np.random.default_rng(seed)
        self.source = "recall"

    @property
    def min_distance(self) -> int:
        """The least distance between a pair and its query: a window must exceed it to cheat."""
        return self.seq_len + 1 - 4 * self.pairs + 1

    def _sequences(self, rng: np.random.Generator, n: int) -> np.ndarray:
        out = np.full((n, self.seq_len + 1), self.FILLER, dtype=np.int64)
        q0 = self.seq_len + 1 - 2 * self.pairs
        for b in range(n):
            keys = rng.choice(self.N_KEYS, size=self.pairs, replace=False)
            values = self.N_KEYS + rng.integers(0, self.N_VALUES, size=self.pairs)
            out[b, 0:2 * self.pairs:2], out[b, 1:2 * self.pairs:2] = keys, values
            order = rng.permutation(self.pairs)
            out[b, q0::2], out[b, q0 + 1::2] = keys[order], values[order]
        return out

    def next_batch(self) -> np.ndarray:
        return self._sequences(self.rng, self.batch)

    def answer_mask(self) -> np.ndarray:
        """[batch, seq_len] booleans over the *input* positions whose next token is an answer."""
        mask = np.zeros((self.batch, self.seq_len), dtype=bool)
        q0 = self.seq_len + 1 - 2 * self.pairs
        mask[:, q0:self.seq_len:2] = True   # the query key sits here; its value comes next
        return mask

    def val_batches(self, max_batches: int | None = None):
        """A fixed validation set (its own seed), the same for every run."""
        rng = np.random.default_rng(12345)
        for _ in range(max_batches or 4):
            yield self._sequences(rng, self.batch)

    @staticmethod
    def accuracy(logits: np.ndarray, tokens: np.ndarray, mask: np.ndarray) -> float:
        """Share of answer positions where argmax(logits) is the next token."""
        pred = np.asarray(logits).argmax(axis=-1)
        return float((pred == tokens[:, 1:])[mask].mean())

    def state(self) -> dict:
        return {"rng": _rng_state(self.rng)}

    def set_state(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]

    def describe(self) -> dict:
        return {"task": "recall", "pairs": self.pairs, "min_distance": self.min_distance}


def make_data(task: str, batch: int, seq_len: int, seed: int, data_path: str | None = None,
              pairs: int = 8) -> Any:
    """`TextData` over `data_path` (or the stdlib corpus), or a `RecallTask`."""
    if task == "recall":
        return RecallTask(batch, seq_len, seed, pairs=pairs)
    if task != "text":
        raise DataError(f"unknown task {task!r}; expected 'text' or 'recall'")
    if data_path:
        return TextData(load_text_file(data_path), batch, seq_len, seed,
                        source=str(absolute_path(data_path)))
    return TextData(stdlib_corpus(), batch, seq_len, seed, source="stdlib")


def absolute_path(path: str | Path) -> Path:
    """`path` made absolute against the current directory (``~`` expanded, symlinks kept), so
    a run's config names its data file from any working directory.

    >>> absolute_path("/a/../b.txt").as_posix()
    '/b.txt'
    """
    import os
    return Path(os.path.abspath(os.path.expanduser(str(path))))


def data_mismatch(saved: dict, current: dict) -> str | None:
    """One line naming how the data of a run (`saved`, from its checkpoint) differs from the
    data found now (`current`, both from `describe()`), or None when the content is the same.
    Only the content counts (a moved file with the same bytes is the same data); a checkpoint
    written before hashes were stored is not compared.

    >>> a = {"task": "text", "source": "/d/a.txt", "sha256": "1" * 64, "train_bytes": 9}
    >>> data_mismatch(a, dict(a, source="/e/a.txt")) is None
    True
    >>> print(data_mismatch(a, dict(a, sha256="2" * 64)))
    the training data differs from the checkpoint's: sha256 11111111... (/d/a.txt, 9 train bytes) at the checkpoint vs 22222222... (/d/a.txt, 9 train bytes) now
    """
    if saved.get("task") != current.get("task"):
        return (f"the task differs from the checkpoint's: {saved.get('task')!r} at the checkpoint "
                f"vs {current.get('task')!r} now")
    old, new = saved.get("sha256"), current.get("sha256")
    if old is None or new is None or old == new:
        return None

    def name(d: dict) -> str:
        return f"{d['sha256'][:8]}... ({d.get('source')}, {d.get('train_bytes')} train bytes)"
    return f"the training data differs from the checkpoint's: sha256 {name(saved)} at the " \
           f"checkpoint vs {name(current)} now"


__all__ = ["DataError", "TextData", "RecallTask", "make_data", "stdlib_corpus",
           "load_text_file", "check_text", "unigram_entropy", "STDLIB_MODULES", "absolute_path",
           "data_mismatch"]
