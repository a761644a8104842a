"""Incremental decoding of the Nested-Learning model: a recurrent state and a one-token step.

`step` computes, for one new token per stream, exactly what `models.model.logits` computes at
that token's position when it is given the whole sequence so far in one call (fresh memory at
position 0): the same sliding-window attention, the same CMS levels and the same composition.
Its cost per token does not depend on how many tokens came before:

- attention keeps a ring buffer of the keys and values of the last ``window`` positions, per
  block (the full forward's token i attends to ``i - window < j <= i``);
- each CMS level keeps the memory its reads use (``m``: as of the level's last firing) and a
  *shadow* memory (``m_next``, plus Titans' momentum ``s_next``) that its rule advances by one
  update at every token. A level of period p fires at global token t when ``(t + 1) % p == 0``;
  the full forward then runs the rule over the p tokens since the previous firing, starting
  from ``m``: the shadow has run exactly those updates, in the same order, so at a firing
  ``m = m_next`` and the token reads after the write, as in `models.layers.level_forward`.
  Every update is spread over the tokens (one per token per level), so there is no spike of
  p updates at a slow level's firing. ``counters`` (``pos % period``) says how many updates
  the shadow holds beyond ``m``;
- with ``cfg.key_shift`` the memory key of token t is projected from the previous token's
  level input, zeros at position 0;
- with ``cfg.heads > 1`` every memory has a head axis after the batch axis (``[B, heads, dh,
  dh]``), and attention splits the cached keys and values into heads;
- with ``cfg.rotary`` the cache holds unrotated keys, and a cached key ``delta`` positions
  back is turned by ``-delta`` before its score: the same scores as rotating the query and
  key by their own positions (`models.layers.rotate`), with angles that stay below ``window``
  however long the stream (a fixed table, no loss of precision at large positions).

What "the full forward" means beyond one chunk. Training runs `logits` chunk by chunk
(``seq_len`` tokens) with the memory carried across chunks, but attention and ``key_shift``
restart at every chunk boundary (the attention of a chunk sees only that chunk). Decoding
follows one long sequence: attention always sees the last ``window`` tokens and the memory
runs on, which is what `logits` computes for the whole sequence in a single call. The two
agree on the first chunk (and the memory agrees everywhere); past it they differ by design.

The step updates `state` in place (the ring buffers and the shadow memories) and returns it;
`copy_state` gives an independent copy, e.g. to branch one prompt into several continuations.
Everything is plain NumPy / CuPy: no tape is involved.

>>> from models.config import ModelConfig
>>> from models.model import init_params
>>> cfg = ModelConfig(vocab=11, d_model=8, layers=1, window=4, seq_len=8, dtype="float64")
>>> params = init_params(cfg, seed=0)
>>> st = init_state(params, cfg, batch=2)
>>> out, st = step(params, cfg, st, np.array([1, 2]))
>>> out.shape, st.pos
((2, 11), 1)
"""
from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any, Iterator, Optional

import numpy as np

from ops import rms_norm, sigmoid, silu, softplus
from tape import array_module

from .config import ModelConfig
from .layers import _NORM_EPS, rotary_tables
from .model import Params, check_token_range, tempered


@dataclasses.dataclass
class LevelDecodeState:
    """One CMS level of one block: ``m [B, d, d]`` (what reads use: the memory as of the last
    firing), ``m_next [B, d, d]`` (the shadow, advanced at every token) and, for Titans,
    ``s_next [B, d, d]`` (the momentum, which only updates use). With ``heads > 1`` each is
    ``[B, heads, d / heads, d / heads]``."""
    m: Any
    m_next: Any
    s_next: Optional[Any]


@dataclasses.dataclass
class BlockDecodeState:
    """One block: attention's ring buffers ``k_cache, v_cache [B, window, d]`` (position j in
    slot ``j % window``), ``prev_h [B, d]`` (the last token's level input, for ``key_shift``)
    and one `LevelDecodeState` per CMS level."""
    k_cache: Any
    v_cache: Any
    prev_h: Any
    levels: list


@dataclasses.dataclass
class DecodeState:
    """The whole decoder: ``pos`` (tokens seen so far) and one `BlockDecodeState` per block."""
    pos: int
    blocks: list

    def counters(self, cfg: ModelConfig) -> tuple:
        """Per level, the updates the shadow memory holds beyond the read memory:
        ``pos % period`` (0 right after a firing).

        >>> DecodeState(pos=10, blocks=[]).counters(ModelConfig(levels=3))
        (0, 2, 10)
        """
        return tuple(self.pos % p for p in cfg.level_periods)


def init_state(params: Params, cfg: ModelConfig, batch: int) -> DecodeState:
    """An empty decoder for `batch` streams at position 0 (zero memories, empty caches), on the
    array module and dtype of `params`.

    >>> from models.model import init_params
    >>> cfg = ModelConfig(d_model=8, window=4, seq_len=8, rule="titans")
    >>> st = init_state(init_params(cfg, seed=0), cfg, batch=3)
    >>> st.blocks[0].k_cache.shape, st.blocks[0].levels[1].s_next.shape
    ((3, 4, 8), (3, 8, 8))
    """
    cfg.validate()
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"init_state: batch must be a positive int; got {batch!r}")
    xp = array_module(params.embed)
    d, dt = cfg.d_model, params.embed.dtype
    mem = (batch, cfg.head_dim, cfg.head_dim) if cfg.heads == 1 else (
        batch, cfg.heads, cfg.head_dim, cfg.head_dim)

    def zeros(*shape):
        return xp.zeros(shape, dtype=dt)

    blocks = []
    for _ in range(cfg.layers):
        levels = [LevelDecodeState(m=zeros(*mem), m_next=zeros(*mem),
                                   s_next=zeros(*mem) if cfg.rule == "titans" else None)
                  for _ in cfg.level_periods]
        blocks.append(BlockDecodeState(k_cache=zeros(batch, cfg.window, d),
                                       v_cache=zeros(batch, cfg.window, d),
                                       prev_h=zeros(batch, d), levels=levels))
    return DecodeState(pos=0, blocks=blocks)


def copy_state(state: DecodeState) -> DecodeState:
    """An independent copy of `state` (`step` updates its argument in place)."""
    return copy.deepcopy(state)


def _l2_normalise(xp, x):
    return x / xp.sqrt(xp.sum(x * x, axis=-1, keepdims=True) + _NORM_EPS)


def _outer(a, b):
    return a[..., :, None] * b[..., None, :]


def _mv(m, x):
    return (m @ x[..., None])[..., 0]


def _heads(x, heads: int):
    """``[B, d] -> [B, heads, d / heads]`` (unchanged for one head)."""
    return x if heads == 1 else x.reshape(x.shape[0], heads, x.shape[-1] // heads)


def _gate(c, w, b, heads: int):
    """A gate pre-activation (`models.layers._gate` for one token): ``[B]`` or ``[B, heads]``."""
    return c @ w + b if heads == 1 else (c[..., None, :] @ w[:, :, None])[..., 0, 0] + b


def _advance(rule: str, st: LevelDecodeState, k, v, decay, theta, eta) -> None:
    """One rule update of the shadow memory (the arithmetic of `kernels.memory_ref`, which
    retains ``1 - decay`` of the memory per update; `decay` is the forget rate)."""
    m = st.m_next
    r = (1 - decay)[..., None, None]
    if rule == "hebbian":
        st.m_next = m * r + _outer(v, k)
        return
    e = _mv(m, k) - v
    upd = _outer(e * theta[..., None], k)
    if rule == "delta":
        st.m_next = m * r - upd
    else:
        st.s_next = st.s_next * eta[..., None, None] - upd
        st.m_next = m * r + st.s_next


def _memory(block, bst: BlockDecodeState, h, pos: np.ndarray, cfg: ModelConfig):
    """The CMS read of one token ``h [B, d]`` per stream at global positions `pos` ``[B]``:
    every level's projections and gates (`models.layers._projections`), one shadow update,
    the read (each stream's level fires at its own position)."""
    xp = array_module(h)
    total = None
    key_in = bst.prev_h if cfg.key_shift else h
    H = cfg.heads
    for level, st, p in zip(block.memory, bst.levels, cfg.level_periods):
        k = _l2_normalise(xp, _heads(key_in @ level.w_k, H))
        v = _heads(h @ level.w_v, H)
        q = _l2_normalise(xp, _heads(h @ level.w_q, H))
        c = xp.concatenate([k, v], axis=-1)
        za = _gate(c, level.w_a, level.b_a, H)
        decay = sigmoid(-za)
        theta = None
        if cfg.rule != "hebbian":
            zt = _gate(c, level.w_t, level.b_t, H)
            theta = sigmoid(zt) if cfg.bounded_theta else softplus(zt)
        eta = None
        if cfg.rule == "titans":
            eta = sigmoid(_gate(c, level.w_e, level.b_e, H))
            if cfg.eta_max != 1.0:
                eta = eta * cfg.eta_max
        _advance(cfg.rule, st, k, v, decay, theta, eta)
        fires = (pos + 1) % p == 0      # a level that fires: its reads see the advanced memory
        if fires.all():
            st.m = st.m_next
        elif fires.any():
            st.m = xp.where(xp.asarray(fires).reshape((-1,) + (1,) * (st.m.ndim - 1)),
                            st.m_next, st.m)
        y = _mv(st.m, q).reshape(h.shape)
        total = y if total is None else total + y
    if len(block.memory) > 2:
        total = total * (1.0 / math.sqrt(len(block.memory)))
    bst.prev_h = h
    return total


def _attend(block, bst: BlockDecodeState, a_in, pos: np.ndarray, cfg: ModelConfig):
    """Sliding-window attention of one token per stream over its cached last ``window``
    positions, per head (`pos` ``[B]``: each stream's position; slots a stream has not filled
    yet are masked out); with ``cfg.rotary`` the cached keys turn by minus their distance
    (module docstring)."""
    xp = array_module(a_in)
    window, H, dh = cfg.window, cfg.heads, cfg.head_dim
    q, k, v = a_in @ block.attn.w_q, a_in @ block.attn.w_k, a_in @ block.attn.w_v
    B = a_in.shape[0]
    slot = pos % window
    bst.k_cache[xp.arange(B), xp.asarray(slot)] = k
    bst.v_cache[xp.arange(B), xp.asarray(slot)] = v
    keys = bst.k_cache.reshape(B, window, H, dh).transpose(0, 2, 1, 3)  # [B, H, window, dh]
    vals = bst.v_cache.reshape(B, window, H, dh).transpose(0, 2, 1, 3)
    if cfg.rotary:
        back = (slot[:, None] - np.arange(window)[None, :]) % window       # [B, window]
        cos, sin = rotary_tables(back.reshape(-1), dh, xp, str(a_in.dtype))
        cos = cos.reshape(B, 1, window, dh // 2)
        sin = sin.reshape(B, 1, window, dh // 2)
        half = dh // 2
        k1, k2 = keys[..., :half], keys[..., half:]
        keys = xp.concatenate([k1 * cos + k2 * sin, k2 * cos - k1 * sin], axis=-1)
    scores = (keys @ q.reshape(B, H, dh, 1))[..., 0] * (1.0 / math.sqrt(dh))  # [B, H, window]
    filled = xp.asarray(np.arange(window)[None, :] <= pos[:, None])            # [B, window]
    scores = xp.where(filled[:, None, :], scores, -xp.inf)
    w = xp.exp(scores - scores.max(axis=-1, keepdims=True))
    out = (w[..., None, :] @ vals)[..., 0, :] / w.sum(axis=-1, keepdims=True)  # [B, H, dh]
    return out.reshape(B, H * dh)


def step(params: Params, cfg: ModelConfig, state: DecodeState, tokens: Any) -> tuple:
    """Feed one token per stream (`tokens`: ``[batch]`` ints) and return ``(logits
    [batch, vocab], state)``: the next-token logits at position ``state.pos``, equal to
    `models.model.logits` over the whole sequence so far, and the advanced state (updated in
    place; see the module docstring)."""
    xp = array_module(params.embed)
    tok = xp.asarray(np.asarray(tokens) if not hasattr(tokens, "__cuda_array_interface__")
                     else tokens)
    batch = state.blocks[0].k_cache.shape[0] if state.blocks else None
    if tok.ndim != 1 or (batch is not None and tok.shape[0] != batch):
        raise ValueError(f"step: tokens must have shape [batch] = [{batch}] (one token per "
                         f"stream of the state); got {tuple(tok.shape)}")
    check_token_range(tok, cfg.vocab, "step")
    out = step_streams(params, cfg, state.blocks, tok, np.full(tok.shape[0], state.pos))
    state.pos += 1
    return out, state


def step_streams(params: Params, cfg: ModelConfig, blocks: list, tokens: Any,
                 positions: np.ndarray) -> Any:
    """The model of `step` for streams that sit at positions of their own: feed ``tokens
    [B]`` (ints on the parameters' array module, already checked) to the streams whose
    `BlockDecodeState` rows are `blocks` and whose positions are ``positions [B]`` (NumPy
    ints); returns the logits ``[B, vocab]`` and advances `blocks` in place. Row i equals
    `step` run on stream i alone; the caller keeps the positions (``positions + 1`` after).
    A batching server uses it to decode streams that joined at different times.

    >>> from models.model import init_params
    >>> cfg = ModelConfig(vocab=11, d_model=8, layers=1, window=4, seq_len=8)
    >>> params = init_params(cfg, seed=0)
    >>> st = init_state(params, cfg, batch=2)
    >>> step_streams(params, cfg, st.blocks, np.array([1, 2]), np.array([0, 0])).shape
    (2, 11)
    """
    pos = np.asarray(positions, dtype=np.int64)
    x = params.embed[tokens]
    for block, bst in zip(params.blocks, blocks):
        h = rms_norm(x, block.norm)
        if not block.memory:
            out = _attend(block, bst, h, pos, cfg)
        else:
            mem = _memory(block, bst, h, pos, cfg)
            a_in = h + mem if cfg.composition == "MAL" else h
            a = _attend(block, bst, a_in, pos, cfg)
            out = a * sigmoid(mem) if cfg.composition == "MAG" else a
        x = x + out @ block.w_o
        if block.mlp is not None:
            x = x + silu(rms_norm(x, block.mlp.norm) @ block.mlp.w_in) @ block.mlp.w_out
    return rms_norm(x, params.final_norm) @ params.unembed


def _pick(last: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    """The next token from float64 logits: argmax where `tempered` says greedy, else a draw
    from ``softmax(last / temperature)`` (the rule of `models.model.generate`)."""
    prob = tempered(last, temperature)
    if prob is None:
        return int(np.argmax(last))
    return int(rng.choice(len(prob), p=prob / prob.sum()))


def generate(params: Params, prompt_tokens: Any, cfg: ModelConfig, n_new: int,
             temperature: float = 1.0, seed: int = 0) -> np.ndarray:
    """Sample `n_new` tokens after `prompt_tokens` (a 1-D int sequence) by incremental
    decoding; returns the whole sequence (prompt + new) as a NumPy int64 array.
    ``temperature=0`` is greedy. Every token conditions on the whole history (the memory
    since the first token, attention over the last ``window``), at a cost per token that does
    not grow with the length. `models.model.generate` (the older sampler) instead recomputes
    the last ``seq_len`` tokens from fresh memory at every step: the two agree while the
    sequence fits in ``seq_len`` tokens, and differ beyond.

    >>> from models.model import init_params
    >>> cfg = ModelConfig(vocab=11, d_model=8, layers=1, window=4, seq_len=8)
    >>> out = generate(init_params(cfg, seed=0), [1, 2, 3], cfg, n_new=4, seed=0)
    >>> out.shape, bool(out.max() < 11)
    ((7,), True)
    """
    seq = [int(t) for t in np.asarray(prompt_tokens).reshape(-1)]
    seq += sampled_tokens(params, seq, cfg, n_new, temperature, seed)
    return np.asarray(seq, dtype=np.int64)


def sampled_tokens(params: Params, prompt_tokens: Any, cfg: ModelConfig, n_new: int,
                   temperature: float = 1.0, seed: int = 0) -> Iterator[int]:
    """The `n_new` tokens `generate` samples after `prompt_tokens`, one at a time as each is
    drawn (`hecate sample` prints them as they come).

    >>> from models.model import init_params
    >>> cfg = ModelConfig(vocab=11, d_model=8, layers=1, window=4, seq_len=8)
    >>> len(list(sampled_tokens(init_params(cfg, seed=0), [1, 2], cfg, n_new=3)))
    3
    """
    if isinstance(n_new, bool) or not isinstance(n_new, (int, np.integer)) or n_new < 0:
        raise ValueError(f"generate: n_new must be an int >= 0; got {n_new!r}")
    seq = [int(t) for t in np.asarray(prompt_tokens).reshape(-1)]
    if not seq:
        raise ValueError("generate: prompt_tokens must hold at least one token")
    return _sampled(params, seq, cfg, n_new, temperature, seed)


def _sampled(params, seq, cfg, n_new, temperature, seed):
    rng = np.random.default_rng(seed)
    state = init_state(params, cfg, batch=1)
    out = None
    for t in seq:
        out, state = step(params, cfg, state, np.array([t], dtype=np.int64))
    for i in range(n_new):
        last = np.asarray(_to_numpy(out[0]), dtype=np.float64)
        token = _pick(last, temperature, rng)
        yield token
        if i + 1 < n_new:
            out, state = step(params, cfg, state, np.array([token], dtype=np.int64))


def _to_numpy(a: Any) -> np.ndarray:
    return a.get() if hasattr(a, "get") else np.asarray(a)
