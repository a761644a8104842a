"""Incremental decoding of a changing set of streams, each at its own position.

`models.decode.step` advances a batch of streams that all sit at the same position (one
``DecodeState.pos``). A server's streams start at different times, so `StreamBatch` keeps a
position per stream and steps them all with `models.decode.step_streams`, whose row i equals
`models.decode.step` run on stream i alone (to float rounding). Streams join (`add`: a fresh
zero state, as `models.decode.init_state`) and leave (`keep`) between steps; the arrays are
rebuilt then, never while stepping.

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

from typing import Any, Callable, Optional, Sequence

import numpy as np

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
        cfg = self.cfg
        tok = np.asarray(tokens)
        if tok.ndim != 1 or tok.shape[0] != len(self) or not len(self):
            raise ValueError(f"StreamBatch.step: tokens must have shape [{len(self)}] (one per "
                             f"stream, at least one stream); got {tuple(tok.shape)}")
        if not np.issubdtype(tok.dtype, np.integer) or tok.min() < 0 or tok.max() >= cfg.vocab:
            raise ValueError(f"StreamBatch.step: tokens must be ints in [0, {cfg.vocab}); got "
                             f"{tok.tolist()}")
        logits = decode.step_streams(self.params, cfg, self.blocks,
                                     self.xp.asarray(tok.astype(np.int64)), self.positions)
        self.positions = self.positions + 1
        return logits


__all__ = ["StreamBatch"]
