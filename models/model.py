"""Hecate's Nested-Learning language model (DESIGN §5).

``embed -> blocks -> rms_norm -> unembed -> mean cross-entropy``. Each block reads the residual
stream through a pre-norm ``h = rms_norm(x) * norm``, then

- MAG: ``out = swa(h) * sigmoid(cms(h))``: the memory read gates the attention output;
- MAL: ``out = swa(h + cms(h))``: the memory branch runs first and feeds the attention;

and adds ``out @ w_o`` to the stream, then, with ``cfg.mlp``, a pre-norm SiLU MLP sublayer
``x + silu(rms_norm(x) @ w_in) @ w_out``. With ``levels=0`` there is no memory branch and
``out = swa(h)``: a plain sliding-window transformer, the baseline that shows what memory
buys. ``swa`` is causal sliding-window attention (`kernels.swa_attention`, within the chunk)
with its own q, k, v projections, split into ``cfg.heads`` heads, with rotary positions
(local to the chunk) when ``cfg.rotary``; ``cms`` is the continuum memory system of
`models.layers` (its exact semantics, and its per-head memories, are documented there).
docs/model.md measures each option. The
memory state (`State`) carries across chunks without gradient: `loss` and `logits` return a new
state of plain arrays.

The parameters are a pytree of dataclasses, so one reverse pass gives the whole gradient:

>>> import numpy as np
>>> from tape import autodiff, Reverse, Active, Duplicated, Const, make_zero
>>> from models.config import ModelConfig
>>> cfg = ModelConfig(vocab=11, d_model=8, layers=1, window=4, seq_len=8, dtype="float64")
>>> params, state = init_params(cfg, seed=0), init_state(cfg, batch=2)
>>> tokens = np.random.default_rng(0).integers(0, 11, size=(2, 9))
>>> grads = make_zero(params)
>>> _ = autodiff(Reverse, lambda p, t: loss(p, t, state, cfg)[0], Active,
...              Duplicated(params, grads), Const(tokens))
>>> grads.blocks[0].memory[0].w_k.shape
(8, 8)
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional

import numpy as np

import kernels
from ops import cross_entropy, rms_norm, sigmoid, silu
from tape import array_module, primal
from tape.core import Tracer, nondiff_value, peek
from tape.backend import add_or_none

from .config import ModelConfig
from .layers import (cms_forward, init_level, init_level_state, merge_heads, rotary_tables,
                     rotate, split_heads)


@dataclasses.dataclass
class Attention:
    """Projections of the sliding-window attention branch, each ``[d, d]``."""
    w_q: Any
    w_k: Any
    w_v: Any


@dataclasses.dataclass
class MLP:
    """The MLP sublayer: pre-norm weight ``[d]``, ``w_in [d, mlp d]``, ``w_out [mlp d, d]``."""
    norm: Any
    w_in: Any
    w_out: Any


@dataclasses.dataclass
class Block:
    """One block: pre-norm weight ``[d]``, attention, CMS levels, output projection ``[d, d]``,
    and the MLP sublayer (None when ``cfg.mlp == 0``)."""
    norm: Any
    attn: Attention
    memory: list
    w_o: Any
    mlp: Optional[MLP] = None


@dataclasses.dataclass
class Params:
    """All parameters: ``embed [vocab, d]``, blocks, ``final_norm [d]``, ``unembed [d, vocab]``."""
    embed: Any
    blocks: list
    final_norm: Any
    unembed: Any


@dataclasses.dataclass
class State:
    """Carried memory: ``pos`` (global tokens seen, drives the CMS conductor) and, per block and
    level, a `models.layers.LevelState` of plain arrays."""
    pos: int
    blocks: list


def init_params(cfg: ModelConfig, seed: int, xp: Any = np) -> Params:
    """Seeded random parameters (float `cfg.dtype`, on `xp`: numpy or cupy).

    >>> cfg = ModelConfig(d_model=8, layers=2, levels=3, window=4, seq_len=8)
    >>> p = init_params(cfg, seed=0)
    >>> len(p.blocks), len(p.blocks[0].memory), p.embed.shape
    (2, 3, (256, 8))
    >>> [float(lv.b_a[0]) for lv in p.blocks[0].memory]
    [3.0, 4.0, 4.5]
    """
    cfg.validate()
    rng = np.random.default_rng(seed)
    d, dt = cfg.d_model, cfg.dtype

    def mat(rows, cols, scale=1.0):
        return (rng.standard_normal((rows, cols)) * scale / math.sqrt(rows)).astype(dt)

    blocks = []
    for _ in range(cfg.layers):
        attn = Attention(w_q=mat(d, d), w_k=mat(d, d), w_v=mat(d, d))
        memory = [init_level(rng, d, i, dt, cfg.alpha_bias_shift, cfg.theta_bias_shift,
                             cfg.shared_qk_init, cfg.heads) for i in range(cfg.levels)]
        # Scaled down with depth so the residual stream does not grow with the layer count.
        depth = 1.0 / math.sqrt(2 * cfg.layers * (2 if cfg.mlp else 1))
        w_o = mat(d, d, depth)
        mlp = None
        if cfg.mlp:
            hidden = cfg.mlp * d
            mlp = MLP(norm=np.ones(d, dtype=dt), w_in=mat(d, hidden),
                      w_out=mat(hidden, d, depth))
        blocks.append(Block(norm=np.ones(d, dtype=dt), attn=attn, memory=memory, w_o=w_o,
                            mlp=mlp))
    params = Params(embed=rng.standard_normal((cfg.vocab, d)).astype(dt), blocks=blocks,
                    final_norm=np.ones(d, dtype=dt), unembed=mat(d, cfg.vocab))
    if xp is not np:
        params = _to_module(params, xp)
    return params


def _to_module(tree: Any, xp: Any) -> Any:
    """Move every array leaf of a Params/State tree to `xp`."""
    if dataclasses.is_dataclass(tree):
        return type(tree)(**{f.name: _to_module(getattr(tree, f.name), xp)
                             for f in dataclasses.fields(tree)})
    if isinstance(tree, (list, tuple)):
        return type(tree)(_to_module(t, xp) for t in tree)
    if isinstance(tree, np.ndarray):
        return xp.asarray(tree)
    return tree


def init_state(cfg: ModelConfig, batch: int, xp: Any = np) -> State:
    """Fresh memory for a batch of `batch` streams: zero matrices, position 0.

    >>> st = init_state(ModelConfig(d_model=8, window=4, seq_len=8), batch=3)
    >>> st.pos, st.blocks[0][0].m.shape
    (0, (3, 8, 8))
    """
    cfg.validate()
    return State(pos=0, blocks=[[init_level_state(batch, cfg.d_model, cfg.rule, p, xp, cfg.dtype,
                                                  cfg.heads)
                                 for p in cfg.level_periods] for _ in range(cfg.layers)])


def _attention(attn: Attention, a_in, cfg: ModelConfig):
    """Sliding-window attention of ``a_in [B, T, d]`` with ``cfg.heads`` heads, rotary
    positions (local to the chunk: attention restarts at every chunk) when ``cfg.rotary``."""
    q, k, v = a_in @ attn.w_q, a_in @ attn.w_k, a_in @ attn.w_v
    if cfg.heads == 1 and not cfg.rotary:
        return kernels.swa_attention(q, k, v, cfg.window)
    q, k, v = (split_heads(t, cfg.heads) for t in (q, k, v))
    if cfg.rotary:
        cos, sin = rotary_tables(np.arange(q.shape[-2]), cfg.head_dim,
                                 array_module(q), str(peek(q).dtype))
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
    return merge_heads(kernels.swa_attention(q, k, v, cfg.window), cfg.heads)


def _mlp(mlp: MLP, x):
    """The MLP sublayer's residual update: ``silu(rms_norm(x) @ w_in) @ w_out``."""
    return silu(rms_norm(x, mlp.norm) @ mlp.w_in) @ mlp.w_out


def _block(block: Block, x, states: list, pos: int, cfg: ModelConfig,
           gate_margin: Optional[float] = None) -> tuple:
    """One block; returns ``(x + out @ w_o [+ mlp], new level states, gate excess or None)``."""
    h = rms_norm(x, block.norm)
    new_states, excess = [], None
    if not block.memory:
        # levels=0: no memory branch at all, so the block is exactly pre-norm sliding-window
        # attention (not a gate stuck at sigmoid(0) = 1/2): the SWA-only baseline.
        out = _attention(block.attn, h, cfg)
    else:
        mem, new_states, excess = cms_forward(block.memory, h, states, cfg.level_periods, pos,
                                              cfg.rule, cfg.key_shift, gate_margin,
                                              cfg.eta_max, cfg.heads, cfg.bounded_theta)
        a = _attention(block.attn, h + mem if cfg.composition == "MAL" else h, cfg)
        out = a * sigmoid(mem) if cfg.composition == "MAG" else a
    x = x + out @ block.w_o
    if block.mlp is not None:
        x = x + _mlp(block.mlp, x)
    return x, new_states, excess


def token_array(tokens: Any, xp: Any) -> Any:
    """Integer `tokens` as an array of `xp`. Inside a compiled training step they arrive traced
    (a Const argument) and stay so: the program reads each call's tokens.

    >>> token_array([[1, 2]], np).shape
    (1, 2)
    """
    t = nondiff_value(tokens)
    return t if isinstance(t, Tracer) else xp.asarray(t)


def check_token_range(tokens: Any, vocab: int, who: str) -> None:
    """Refuse token ids outside ``[0, vocab)``: NumPy's indexing would read a negative id as
    one counted from the end of the embedding table, a silent wrong row.

    >>> check_token_range(np.array([[0, 12]]), 13, "logits")
    >>> check_token_range(np.array([[-1, 2]]), 13, "logits")
    Traceback (most recent call last):
    ...
    ValueError: logits: tokens must lie in [0, 13); got values from -1 to 2
    """
    if tokens.size and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab):
        raise ValueError(f"{who}: tokens must lie in [0, {vocab}); got values from "
                         f"{int(tokens.min())} to {int(tokens.max())}")


def _forward(params: Params, tokens: Any, state: Optional[State], cfg: ModelConfig,
             gate_margin: Optional[float] = None) -> tuple:
    """``(logits, new state, summed gate excess or None)``: `logits` with the gate term."""
    xp = array_module(params.embed)
    tokens = token_array(tokens, xp)
    if tokens.ndim != 2:
        raise ValueError(f"logits: tokens must have shape [batch, s]; got {tokens.shape}")
    if state is None:
        state = init_state(cfg, tokens.shape[0], xp)
    check_token_range(peek(tokens), cfg.vocab, "logits")
    x = params.embed[tokens]
    new_blocks, excess = [], None
    for block, states in zip(params.blocks, state.blocks):
        x, ns, e = _block(block, x, states, state.pos, cfg, gate_margin)
        new_blocks.append(ns)
        excess = add_or_none(excess, e)
    out = rms_norm(x, params.final_norm) @ params.unembed
    return out, State(pos=state.pos + tokens.shape[1], blocks=new_blocks), excess


def logits(params: Params, tokens: Any, state: Optional[State], cfg: ModelConfig) -> tuple:
    """Next-token logits ``[batch, s, vocab]`` for integer `tokens` ``[batch, s]``, and the new
    (gradient-free) state. ``state=None`` starts from fresh memory.

    >>> cfg = ModelConfig(vocab=11, d_model=8, layers=1, window=4, seq_len=8)
    >>> p = init_params(cfg, seed=0)
    >>> out, st = logits(p, np.zeros((2, 5), dtype=np.int64), None, cfg)
    >>> out.shape, st.pos
    ((2, 5, 11), 5)
    """
    out, new_state, _ = _forward(params, tokens, state, cfg)
    return out, new_state


def loss(params: Params, tokens: Any, state: Optional[State], cfg: ModelConfig) -> tuple:
    """Mean cross-entropy of predicting ``tokens[:, 1:]`` from ``tokens[:, :-1]`` (tokens
    ``[batch, seq_len + 1]``), and the new state (plain arrays: no gradient reaches it).

    >>> cfg = ModelConfig(vocab=11, d_model=8, layers=1, window=4, seq_len=8)
    >>> p, st = init_params(cfg, seed=0), init_state(cfg, batch=2)
    >>> value, st = loss(p, np.zeros((2, 9), dtype=np.int64), st, cfg)
    >>> bool(0 < float(value) < 10), st.pos
    (True, 8)
    """
    xp = array_module(params.embed)
    tokens = token_array(tokens, xp)
    out, new_state = logits(params, tokens[:, :-1], state, cfg)
    return cross_entropy(out, tokens[:, 1:]), new_state


def training_loss(params: Params, tokens: Any, state: Optional[State],
                  cfg: ModelConfig) -> tuple:
    """The training objective: `loss` plus ``cfg.gate_penalty`` times the gate excess of every
    level of every block (`models.layers.gate_excess` at ``cfg.gate_margin``), which keeps the
    sigmoid gates out of saturation. Returns ``(objective, new state, cross-entropy)``; the
    cross-entropy is the value to report, the objective the one to differentiate.

    >>> cfg = ModelConfig(vocab=11, d_model=8, layers=1, window=4, seq_len=8)
    >>> p, st = init_params(cfg, seed=0), init_state(cfg, batch=2)
    >>> tokens = np.zeros((2, 9), dtype=np.int64)
    >>> objective, _, ce = training_loss(p, tokens, st, cfg)
    >>> bool(objective == ce)   # fresh gates sit at their biases, within the margin
    True
    """
    xp = array_module(params.embed)
    tokens = token_array(tokens, xp)
    margin = cfg.gate_margin if cfg.gate_penalty > 0 and cfg.levels > 0 else None
    out, new_state, excess = _forward(params, tokens[:, :-1], state, cfg, margin)
    ce = cross_entropy(out, tokens[:, 1:])
    objective = ce if excess is None else ce + cfg.gate_penalty * excess
    return objective, new_state, ce


def generate(params: Params, prompt_tokens: Any, cfg: ModelConfig, n_new: int,
             temperature: float = 1.0, seed: int = 0, xp: Any = np) -> np.ndarray:
    """Sample `n_new` tokens after `prompt_tokens` (a 1-D int sequence); returns the whole
    sequence (prompt + new) as a NumPy int64 array. Naive: each step recomputes the logits of
    the last `cfg.seq_len` tokens from fresh memory. ``temperature=0`` is greedy.

    >>> cfg = ModelConfig(vocab=11, d_model=8, layers=1, window=4, seq_len=8)
    >>> out = generate(init_params(cfg, seed=0), [1, 2, 3], cfg, n_new=4, seed=0)
    >>> out.shape, bool(out.max() < 11)
    ((7,), True)
    """
    if isinstance(n_new, bool) or not isinstance(n_new, (int, np.integer)) or n_new < 0:
        raise ValueError(f"generate: n_new must be an int >= 0; got {n_new!r}")
    rng = np.random.default_rng(seed)
    seq = [int(t) for t in np.asarray(prompt_tokens).reshape(-1)]
    if not seq:
        raise ValueError("generate: prompt_tokens must hold at least one token")
    for _ in range(n_new):
        window = xp.asarray(np.asarray(seq[-cfg.seq_len:], dtype=np.int64)[None, :])
        out, _ = logits(params, window, None, cfg)
        last = np.asarray(_to_numpy(primal(out)[0, -1]), dtype=np.float64)
        prob = tempered(last, temperature)
        nxt = (int(np.argmax(last)) if prob is None
               else int(rng.choice(len(prob), p=prob / prob.sum())))
        seq.append(nxt)
    return np.asarray(seq, dtype=np.int64)


def tempered(logits: np.ndarray, temperature: float) -> np.ndarray | None:
    """``exp(z - max z)`` with ``z = logits / temperature`` (unnormalised probabilities), or
    None where the pick is greedy: ``temperature <= 0``, or a temperature so small that the
    logits divided by it overflow (the limit; exp(inf - inf) would give NaN probabilities).

    >>> tempered(np.array([0.0, np.log(3.0)]), 1.0).round(6).tolist(), tempered(np.ones(2), 0)
    ([0.333333, 1.0], None)
    """
    if temperature <= 0:
        return None
    with np.errstate(over="ignore"):
        z = logits / temperature
    if not np.isfinite(z).all():
        return None
    return np.exp(z - z.max())


def _to_numpy(a: Any) -> np.ndarray:
    return a.get() if hasattr(a, "get") else np.asarray(a)
