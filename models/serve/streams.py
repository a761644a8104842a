"""Incremental decoding of a changing set of streams, each at its own position.

`models.decode.step` advances a batch of streams that all sit at the same position (one
``DecodeState.pos``). A server's streams start at different times, so here every stream keeps
its own position and the three things that depend on it are computed per stream:

- the ring-buffer slot a token's key and value go to (``pos % window``);
- which cache slots attention may read (slot j is filled iff ``j <= pos``; the others are
  masked out, which equals `models.decode`'s slicing to the first ``pos + 1`` slots);
- whether a CMS level fires at this token (``(pos + 1) % period == 0``; a firing stream's
  reads use the advanced shadow memory, the others keep their read memory).

Everything else is the arithmetic of `models.decode` (its rule update `_advance` is used as
is), so each row of `StreamBatch.step` equals `models.decode.step` for that stream alone, to
float rounding. Streams join (`add`: a fresh zero state, as `models.decode.init_state`) and
leave (`keep`) between steps; the arrays are rebuilt then, never while stepping.

>>> from models.config import ModelConfig
>>> from models.model import init_params
>>> cfg = ModelConfig(vocab=11, d_model=8, layers=1, window=4, seq_len=8, dtype="float64")
>>> batch = StreamBatch(init_params(cfg, seed=0), cfg)
>>> batch.add(), batch.add()
(0, 1)
>>> batch.step([3, 4]).shape
(2, 11)
>>> batch.add(); batch.positions.tolist()
2
[1, 1, 0]
"""
from __future__ import annotations

import math
from typing import Any, Callable, Optional, Sequence

import numpy as np

from ops import rms_norm, sigmoid, softplus
from tape import array_module

from .. import decode
from ..config import ModelConfig
from ..decode import BlockDecodeState, LevelDecodeState
from ..model import Params


def _map_level(fn: Callable, *levels: LevelDecodeState) -> LevelDecodeState:
    s_next = None if levels[0].s_next is None else fn(*(lv.s_next for lv in levels))
    return LevelDecodeState(m=fn(*(lv.m for lv in levels)),
                            m_next=fn(*(lv.m_next for lv in levels)), s_next=s_next)


def _map_block(fn: Callable, *blocks: BlockDecodeState) -> BlockDecodeState:
    """`fn` applied to each array of the blocks (same structure), giving a new block."""
    return BlockDecodeState(
        k_cache=fn(*(b.k_cache for b in blocks)), v_cache=fn(*(b.v_cache for b in blocks)),
        prev_h=fn(*(b.prev_h for b in blocks)),
        levels=[_map_level(fn, *lvs) for lvs in zip(*(b.levels for b in blocks))])


class StreamBatch:
    """The decode state of ``len(self)`` streams (rows), each at its own position
    (``positions``), over one model's parameters; see the module docstring."""

    def __init__(self, params: Params, cfg: ModelConfig) -> None:
        cfg.validate()
        self.params, self.cfg = params, cfg
        self.xp = array_module(params.embed)
        self.blocks: Optional[list] = None       # BlockDecodeState per block; None when empty
        self.positions = np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.positions)

    def add(self) -> int:
        """Append a fresh stream (position 0, zero memories and caches); returns its row."""
        fresh = decode.init_state(self.params, self.cfg, batch=1).blocks
        if self.blocks is None:
            self.blocks = fresh
        else:
            cat = lambda a, b: self.xp.concatenate([a, b], axis=0)   # noqa: E731
            self.blocks = [_map_block(cat, old, new) for old, new in zip(self.blocks, fresh)]
        self.positions = np.append(self.positions, 0)
        return len(self) - 1

    def keep(self, rows: Sequence[int]) -> None:
        """Keep only the streams at `rows` (in that order; they become rows 0, 1, ...).

        >>> from models.config import ModelConfig
        >>> from models.model import init_params
        >>> cfg = ModelConfig(vocab=5, d_model=4, layers=1, window=2, seq_len=2)
        >>> b = StreamBatch(init_params(cfg, seed=0), cfg)
        >>> _ = [b.add() for _ in range(3)]; b.positions[:] = [7, 8, 9]
        >>> b.keep([2, 0]); b.positions.tolist()
        [9, 7]
        """
        rows = [int(r) for r in rows]
        if any(r < 0 or r >= len(self) for r in rows) or len(set(rows)) != len(rows):
            raise ValueError(f"StreamBatch.keep: rows must be distinct ints in [0, {len(self)}); "
                             f"got {rows}")
        if not rows:
            self.blocks, self.positions = None, np.zeros(0, dtype=np.int64)
            return
        index = self.xp.asarray(np.asarray(rows, dtype=np.int64))
        self.blocks = [_map_block(lambda a: a[index], b) for b in self.blocks]
        self.positions = self.positions[rows]

    def step(self, tokens: Any) -> Any:
        """Feed one token per stream (``[len(self)]`` ints); returns the next-token logits
        ``[len(self), vocab]`` (on the parameters' array module) and advances every stream by
        one position. Row i equals `models.decode.step` run on stream i alone."""
        cfg, params, xp = self.cfg, self.params, self.xp
        tok = np.asarray(tokens)
        if tok.ndim != 1 or tok.shape[0] != len(self) or not len(self):
            raise ValueError(f"StreamBatch.step: tokens must have shape [{len(self)}] (one per "
                             f"stream, at least one stream); got {tuple(tok.shape)}")
        if not np.issubdtype(tok.dtype, np.integer) or tok.min() < 0 or tok.max() >= cfg.vocab:
            raise ValueError(f"StreamBatch.step: tokens must be ints in [0, {cfg.vocab}); got "
                             f"{tok.tolist()}")
        pos = self.positions
        x = params.embed[xp.asarray(tok.astype(np.int64))]
        for block, bst in zip(params.blocks, self.blocks):
            h = rms_norm(x, block.norm)
            if not block.memory:
                out = _attend(block, bst, h, pos, cfg.window)
            else:
                mem = _memory(block, bst, h, pos, cfg)
                a_in = h + mem if cfg.composition == "MAL" else h
                a = _attend(block, bst, a_in, pos, cfg.window)
                out = a * sigmoid(mem) if cfg.composition == "MAG" else a
            x = x + out @ block.w_o
        self.positions = pos + 1
        return rms_norm(x, params.final_norm) @ params.unembed


def _memory(block, bst: BlockDecodeState, h, pos: np.ndarray, cfg: ModelConfig):
    """`models.decode._memory` with a firing decision per stream."""
    xp = array_module(h)
    total = None
    key_in = bst.prev_h if cfg.key_shift else h
    for level, st, p in zip(block.memory, bst.levels, cfg.level_periods):
        k = decode._l2_normalise(xp, key_in @ level.w_k)
        v = h @ level.w_v
        q = decode._l2_normalise(xp, h @ level.w_q)
        c = xp.concatenate([k, v], axis=-1)
        decay = sigmoid(-(c @ level.w_a + level.b_a))
        theta = softplus(c @ level.w_t + level.b_t) if cfg.rule != "hebbian" else None
        eta = None
        if cfg.rule == "titans":
            eta = sigmoid(c @ level.w_e + level.b_e)
            if cfg.eta_max != 1.0:
                eta = eta * cfg.eta_max
        decode._advance(cfg.rule, st, k, v, decay, theta, eta)
        fires = (pos + 1) % p == 0
        if fires.all():
            st.m = st.m_next
        elif fires.any():
            st.m = xp.where(xp.asarray(fires)[:, None, None], st.m_next, st.m)
        y = decode._mv(st.m, q)
        total = y if total is None else total + y
    if len(block.memory) > 2:
        total = total * (1.0 / math.sqrt(len(block.memory)))
    bst.prev_h = h
    return total


def _attend(block, bst: BlockDecodeState, a_in, pos: np.ndarray, window: int):
    """Sliding-window attention of one token per stream over its cached last `window`
    positions; slots a stream has not filled yet are masked out."""
    xp = array_module(a_in)
    q, k, v = a_in @ block.attn.w_q, a_in @ block.attn.w_k, a_in @ block.attn.w_v
    rows = xp.arange(len(pos))
    slots = xp.asarray(pos % window)
    bst.k_cache[rows, slots] = k
    bst.v_cache[rows, slots] = v
    filled = xp.arange(window)[None, :] <= xp.asarray(pos)[:, None]     # [B, window]
    scores = (bst.k_cache @ q[:, :, None])[:, :, 0] * (1.0 / math.sqrt(q.shape[-1]))
    scores = xp.where(filled, scores, -xp.inf)
    w = xp.exp(scores - scores.max(axis=-1, keepdims=True))
    return (w[:, None, :] @ bst.v_cache)[:, 0, :] / w.sum(axis=-1, keepdims=True)


__all__ = ["StreamBatch"]
