"""ADBench input files: where they are, how to read them and how to write them.

The formats are ADBench's (one whitespace-separated text file per instance):

- GMM: ``D K N``; K alphas; K x D means; K x D(D+1)/2 icf (D log-diagonal entries, then the
  strictly-lower entries of L column by column); N x D points (or one row, replicated N times,
  in the 2.5M "replicate point" files); ``gamma m`` (the Wishart prior).
- LSTM: ``l c b``; 2l x 4b main parameters (per layer a weight row then a bias row, each
  [forget | ingate | outgate | change]); 3 x b extra parameters (in weight, out weight, out
  bias); 2l x b state (per layer h then c); c x b sequence of 0/1 bits.
- BA: ``n m p``; then ONE camera (11), ONE point (3), ONE weight and ONE feature (2), which are
  replicated to n cameras, m points, p weights and features; observation i uses camera
  i mod n and point i mod m.

Because line breaks carry no information beyond the counts in the header, the readers parse
the files as a flat stream of numbers.

The standard inputs are not part of the repository: `data_dir()` finds them (the
``HECATE_ADBENCH`` environment variable, else ``../shared/adbench`` next to the repository)
and returns None when they are absent, so every caller can fall back on generated inputs.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ENV_VAR = "HECATE_ADBENCH"


def data_dir() -> Path | None:
    """The folder holding ADBench's input files (``$HECATE_ADBENCH``, else ``../shared/adbench``
    next to a checkout), or None when it is not available."""
    from .. import checkout_root

    override = os.environ.get(ENV_VAR)
    root = checkout_root()
    if override:
        path = Path(override)
    elif root is not None:
        path = root.parent / "shared" / "adbench"
    else:
        return None
    return path if path.is_dir() else None


def _numbers(path) -> np.ndarray:
    return np.array(Path(path).read_text().split(), dtype=np.float64)


# --------------------------------------------------------------------------------------------
# GMM


@dataclass
class GMMInput:
    """One GMM instance: K components in d dimensions, n points, a Wishart prior (gamma, m)."""
    alphas: np.ndarray      # (K,)
    means: np.ndarray       # (K, d)
    icf: np.ndarray         # (K, d(d+1)/2): log-diagonal entries, then L column by column
    x: np.ndarray           # (n, d)
    gamma: float
    m: int

    @property
    def sizes(self):
        return {"d": self.x.shape[1], "K": self.alphas.shape[0], "n": self.x.shape[0]}


def read_gmm(path) -> GMMInput:
    """Read an ADBench GMM file. A file holding a single point (the 2.5M "replicate point"
    files) gives that point replicated N times."""
    v = _numbers(path)
    d, K, n = (int(t) for t in v[:3])
    icf_size = d * (d + 1) // 2
    pos = 3
    alphas = v[pos:pos + K]
    pos += K
    means = v[pos:pos + K * d].reshape(K, d)
    pos += K * d
    icf = v[pos:pos + K * icf_size].reshape(K, icf_size)
    pos += K * icf_size
    points = v[pos:-2]
    if points.size == d:               # replicate-point mode
        x = np.tile(points, (n, 1))
    elif points.size == n * d:
        x = points.reshape(n, d)
    else:
        raise ValueError(f"{path}: expected {n} x {d} or 1 x {d} points, found {points.size} "
                         "numbers")
    return GMMInput(alphas.copy(), means.copy(), icf.copy(), x.copy(), float(v[-2]), int(v[-1]))


def write_gmm(path, inp: GMMInput) -> None:
    """Write `inp` in ADBench's GMM format (all n points, never replicate-point mode)."""
    d, K, n = inp.sizes["d"], inp.sizes["K"], inp.sizes["n"]
    lines = [f"{d} {K} {n}"]
    lines += [_row(inp.alphas[k:k + 1]) for k in range(K)]
    lines += [_row(row) for row in inp.means]
    lines += [_row(row) for row in inp.icf]
    lines += [_row(row) for row in inp.x]
    lines.append(f"{inp.gamma!r} {inp.m}")
    Path(path).write_text("\n".join(lines) + "\n")


def _row(values) -> str:
    # repr keeps every bit of a float64, so a written file reads back exactly
    return " ".join(repr(float(v)) for v in values)


# --------------------------------------------------------------------------------------------
# LSTM


@dataclass
class LSTMInput:
    """One LSTM instance: l layers, a sequence of c characters of b bits."""
    main_params: np.ndarray    # (2l, 4b)
    extra_params: np.ndarray   # (3, b)
    state: np.ndarray          # (2l, b)
    sequence: np.ndarray       # (c, b)

    @property
    def sizes(self):
        return {"l": self.main_params.shape[0] // 2, "c": self.sequence.shape[0],
                "b": self.sequence.shape[1]}


def read_lstm(path) -> LSTMInput:
    """Read an ADBench LSTM file."""
    v = _numbers(path)
    l, c, b = (int(t) for t in v[:3])
    sizes = [(2 * l, 4 * b), (3, b), (2 * l, b), (c, b)]
    parts, pos = [], 3
    for rows, cols in sizes:
        parts.append(v[pos:pos + rows * cols].reshape(rows, cols).copy())
        pos += rows * cols
    if pos != v.size:
        raise ValueError(f"{path}: expected {pos} numbers, found {v.size}")
    return LSTMInput(*parts)


def write_lstm(path, inp: LSTMInput) -> None:
    """Write `inp` in ADBench's LSTM format (blank lines between the sections, as ADBench)."""
    s = inp.sizes
    blocks = [[f"{s['l']} {s['c']} {s['b']}"],
              [_row(r) for r in inp.main_params],
              [_row(r) for r in inp.extra_params],
              [_row(r) for r in inp.state],
              [" ".join(str(int(bit)) for bit in r) for r in inp.sequence]]
    Path(path).write_text("\n\n".join("\n".join(b) for b in blocks) + "\n")


# --------------------------------------------------------------------------------------------
# BA


@dataclass
class BAInput:
    """One bundle-adjustment instance: n cameras, m points, p observations."""
    cams: np.ndarray     # (n, 11): rotation (angle-axis, 3), centre (3), f, u0, v0, k1, k2
    X: np.ndarray        # (m, 3)
    w: np.ndarray        # (p,)
    obs: np.ndarray      # (p, 2) int: camera index, point index
    feats: np.ndarray    # (p, 2)

    @property
    def sizes(self):
        return {"n": self.cams.shape[0], "m": self.X.shape[0], "p": self.w.shape[0]}


def replicate_ba(n: int, m: int, p: int, cam, point, weight: float, feat) -> BAInput:
    """ADBench's expansion of the "one of each" BA file into n cameras, m points and p
    observations (observation i: camera i mod n, point i mod m)."""
    idx = np.arange(p)
    return BAInput(np.tile(np.asarray(cam, dtype=np.float64), (n, 1)),
                   np.tile(np.asarray(point, dtype=np.float64), (m, 1)),
                   np.full(p, float(weight)),
                   np.stack([idx % n, idx % m], axis=1),
                   np.tile(np.asarray(feat, dtype=np.float64), (p, 1)))


def read_ba(path) -> BAInput:
    """Read an ADBench BA file (one camera, point, weight and feature, replicated)."""
    v = _numbers(path)
    n, m, p = (int(t) for t in v[:3])
    if v.size != 3 + 11 + 3 + 1 + 2:
        raise ValueError(f"{path}: expected 20 numbers, found {v.size}")
    return replicate_ba(n, m, p, v[3:14], v[14:17], v[17], v[18:20])


def write_ba(path, n: int, m: int, p: int, cam, point, weight: float, feat) -> None:
    """Write one BA instance in ADBench's "one of each" format."""
    lines = [f"{n} {m} {p}", _row(cam), _row(point), repr(float(weight)), _row(feat)]
    Path(path).write_text("\n".join(lines) + "\n")
