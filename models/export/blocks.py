"""The subgraphs of one decode step: a CMS memory level, the sliding-window attention over its
ring buffer, one block. Each mirrors its NumPy counterpart in `models.decode` operation for
operation (same order of products and sums), so the float32 graph agrees with Hecate's float32
step to rounding.

Everything that depends on the position is computed in the graph from the ``pos`` input: the
ring-buffer slot ``pos % window`` (a one-hot `Where` write), the valid slots ``j <= pos``, the
zero key of ``key_shift`` at position 0, and each slow level's firing, from its counter.

Vectors are rows ``[1, d]`` (batch 1); memories are ``[1, d, d]`` as in `models.decode`, or
``[1, heads, dh, dh]`` with ``heads > 1`` (the head's vectors ``[1, heads, dh]``). Rotary
attention turns each cached key by minus its distance to the current token, from a constant
``[window, dh / 2]`` table (`models.decode._attend`), so no angle grows with the position.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional

import numpy as np

from ..config import ModelConfig
from ..layers import _NORM_EPS, rotary_tables
from .graph import GraphBuilder

# A masked attention score: exp(MASKED - max) is exactly 0 in float32, and unlike -inf it
# cannot turn into NaN in a backend whose Exp clamps or approximates at infinity.
MASKED = -1e30


@dataclasses.dataclass
class StepInputs:
    """The graph values one block's subgraphs read: ``pos`` int64 ``[1]``, the block's state
    inputs by short name (``k_cache``, ``l0_m``, ...) and the levels' firing flags (bool
    ``[1]``, None for a level of period 1, which fires at every token)."""
    pos: str
    state: dict
    fires: list
    is_first: str


def _lead(cfg: ModelConfig) -> list:
    """The axes before a head's vector or matrix: ``[1]``, or ``[1, heads]``."""
    return [1] if cfg.heads == 1 else [1, cfg.heads]


def _col(g: GraphBuilder, x: str, cfg: ModelConfig) -> str:
    return g.reshape(x, _lead(cfg) + [cfg.head_dim, 1])


def _row(g: GraphBuilder, x: str, cfg: ModelConfig) -> str:
    return g.reshape(x, _lead(cfg) + [1, cfg.head_dim])


def _scalar(g: GraphBuilder, x: str, cfg: ModelConfig) -> str:
    """A gate ``[1]`` / ``[1, heads]`` shaped to scale a memory ``[..., dh, dh]``."""
    return g.reshape(x, _lead(cfg) + [1, 1])


def _gate(g: GraphBuilder, c: str, w: str, b: str, cfg: ModelConfig) -> str:
    """``c . w + b`` (`models.decode._gate`): ``[1]``, or per head ``[1, heads]``."""
    if cfg.heads == 1:
        return g.op("Add", g.matmul(c, w), b)
    dot = g.matmul(g.reshape(c, [1, cfg.heads, 1, 2 * cfg.head_dim]),
                   g.reshape(w, [cfg.heads, 2 * cfg.head_dim, 1]))
    return g.op("Add", g.reshape(dot, [1, cfg.heads]), b)


def _heads(g: GraphBuilder, x: str, cfg: ModelConfig) -> str:
    return x if cfg.heads == 1 else g.reshape(x, [1, cfg.heads, cfg.head_dim])


def memory_level(g: GraphBuilder, level: Any, prefix: str, h: str, key_in: str,
                 inp: StepInputs, index: int, cfg: ModelConfig, out: dict) -> str:
    """One CMS level (`models.decode._memory` and `_advance`): projections and gates, one
    rule update of the shadow memory, the firing, the read ``M q``. Writes the level's new
    state into `out` (short names) and returns the read ``[1, d]``."""
    d = cfg.d_model
    used = ("w_k", "w_v", "w_q", "w_a", "b_a") + {"hebbian": (), "delta": ("w_t", "b_t")}.get(
        cfg.rule, ("w_t", "b_t", "w_e", "b_e"))     # a rule's unused gates are left out
    w = {name: g.weight(f"{prefix}.{name}", getattr(level, name)) for name in used}
    k = g.l2_normalise(_heads(g, g.matmul(key_in, w["w_k"]), cfg), _NORM_EPS)
    v = _heads(g, g.matmul(h, w["w_v"]), cfg)
    q = g.l2_normalise(_heads(g, g.matmul(h, w["w_q"]), cfg), _NORM_EPS)
    c = g.op("Concat", k, v, axis=-1)
    za = _gate(g, c, w["w_a"], w["b_a"], cfg)                     # [1] or [1, heads]
    decay = g.op("Sigmoid", g.op("Neg", za))                       # the forget rate 1 - alpha
    retain = _scalar(g, g.op("Sub", g.const_f32(1.0), decay), cfg)

    short = f"l{index}_"
    fires = inp.fires[index]
    m_read = inp.state[short + "m"]
    m = m_read if fires is None else inp.state[short + "m_next"]
    k_col, k_row, v_col = _col(g, k, cfg), _row(g, k, cfg), _col(g, v, cfg)
    if cfg.rule == "hebbian":
        m_new = g.op("Add", g.op("Mul", m, retain), g.op("Mul", v_col, k_row))
    else:
        zt = _gate(g, c, w["w_t"], w["b_t"], cfg)
        theta = g.op("Sigmoid", zt) if cfg.bounded_theta else g.softplus(zt)
        e = g.op("Sub", g.matmul(m, k_col), v_col)                   # M k - v, [.., dh, 1]
        upd = g.op("Mul", g.op("Mul", e, _scalar(g, theta, cfg)), k_row)
        if cfg.rule == "delta":
            m_new = g.op("Sub", g.op("Mul", m, retain), upd)
        else:
            eta = g.op("Sigmoid", _gate(g, c, w["w_e"], w["b_e"], cfg))
            if cfg.eta_max != 1.0:
                eta = g.op("Mul", eta, g.const_f32(cfg.eta_max))
            s_new = g.op("Sub", g.op("Mul", inp.state[short + "s_next"],
                                     _scalar(g, eta, cfg)), upd)
            out[short + "s_next"] = s_new
            m_new = g.op("Add", g.op("Mul", m, retain), s_new)
    if fires is None:                    # period 1: the read memory is the advanced one
        out[short + "m"] = m_read = m_new
    else:                                # reads see the shadow only once the level fires
        out[short + "m_next"] = m_new
        out[short + "m"] = m_read = g.op("Where", fires, m_new, m_read)
    return g.reshape(g.matmul(m_read, _col(g, q, cfg)), [1, d])


def memory(g: GraphBuilder, block: Any, prefix: str, h: str, inp: StepInputs,
           cfg: ModelConfig, out: dict) -> str:
    """The CMS read of one block: the sum of its levels' reads, times 1/sqrt(k) for k > 2."""
    key_in = h
    if cfg.key_shift:            # the previous token's level input; zeros at position 0
        key_in = g.op("Where", inp.is_first, g.const_f32(0.0), inp.state["prev_h"])
        out["prev_h"] = h
    total: Optional[str] = None
    for i, level in enumerate(block.memory):
        y = memory_level(g, level, f"{prefix}.l{i}", h, key_in, inp, i, cfg, out)
        total = y if total is None else g.op("Add", total, y)
    if len(block.memory) > 2:
        total = g.op("Mul", total, g.const_f32(1.0 / math.sqrt(len(block.memory))))
    return total


def attention(g: GraphBuilder, attn: Any, prefix: str, a_in: str, inp: StepInputs,
              cfg: ModelConfig, out: dict) -> str:
    """Sliding-window attention of one token over the ring buffers (`models.decode._attend`):
    write k, v at slot ``pos % window``, attend over the slots ``j <= pos`` (all of them once
    the buffer is full), per head; rotary turns each cached key by minus its distance."""
    d, window, H, dh = cfg.d_model, cfg.window, cfg.heads, cfg.head_dim
    q = g.matmul(a_in, g.weight(f"{prefix}.w_q", attn.w_q))
    k = g.matmul(a_in, g.weight(f"{prefix}.w_k", attn.w_k))
    v = g.matmul(a_in, g.weight(f"{prefix}.w_v", attn.w_v))
    slots = g.const_i64(list(range(window)))
    slot = g.op("Mod", inp.pos, g.const_i64([window]))
    write = g.reshape(g.op("Equal", slots, slot), [1, window, 1])
    keys = g.op("Where", write, g.reshape(k, [1, 1, d]), inp.state["k_cache"])
    vals = g.op("Where", write, g.reshape(v, [1, 1, d]), inp.state["v_cache"])
    out["k_cache"], out["v_cache"] = keys, vals
    keys = g.op("Transpose", g.reshape(keys, [1, window, H, dh]), perm=[0, 2, 1, 3])
    vals = g.op("Transpose", g.reshape(vals, [1, window, H, dh]), perm=[0, 2, 1, 3])
    if cfg.rotary:                       # [1, H, window, dh], slot j is (slot - j) % window back
        cos, sin = rotary_tables(np.arange(window), dh, np, "float32")
        back = g.op("Mod", g.op("Add", g.op("Sub", slot, slots), g.const_i64([window])),
                    g.const_i64([window]))
        c = g.op("Gather", g.const_f32(cos), back, axis=0)            # [window, dh / 2]
        s = g.op("Gather", g.const_f32(sin), back, axis=0)
        k1, k2 = g.slice_last(keys, 0, dh // 2), g.slice_last(keys, dh // 2, dh)
        keys = g.op("Concat", g.op("Add", g.op("Mul", k1, c), g.op("Mul", k2, s)),
                    g.op("Sub", g.op("Mul", k2, c), g.op("Mul", k1, s)), axis=-1)
    scores = g.op("Mul", g.reshape(g.matmul(keys, g.reshape(q, [1, H, dh, 1])), [1, H, window]),
                  g.const_f32(1.0 / math.sqrt(dh)))
    valid = g.op("LessOrEqual", slots, inp.pos)                    # [window]
    scores = g.op("Where", valid, scores, g.const_f32(MASKED))
    top = g.op("ReduceMax", scores, axes=[-1], keepdims=1)
    weights = g.op("Exp", g.op("Sub", scores, top))               # [1, H, window]
    num = g.reshape(g.matmul(g.reshape(weights, [1, H, 1, window]), vals), [1, H, dh])
    den = g.op("ReduceSum", weights, g.const_i64([-1]), keepdims=1)
    return g.reshape(g.op("Div", num, den), [1, d])


def mlp(g: GraphBuilder, m: Any, prefix: str, x: str) -> str:
    """The MLP sublayer's residual update ``silu(rms_norm(x) @ w_in) @ w_out``."""
    hid = g.matmul(g.rms_norm(x, g.weight(f"{prefix}.norm", m.norm)),
                   g.weight(f"{prefix}.w_in", m.w_in))
    return g.matmul(g.op("Mul", hid, g.op("Sigmoid", hid)), g.weight(f"{prefix}.w_out", m.w_out))


def block(g: GraphBuilder, blk: Any, prefix: str, x: str, inp: StepInputs,
          cfg: ModelConfig, out: dict) -> str:
    """One block (`models.decode.step`): pre-norm, the memory branch and attention composed as
    MAG or MAL (attention alone without levels), plus the residual, then the MLP sublayer.
    Returns the new stream."""
    h = g.rms_norm(x, g.weight(f"{prefix}.norm", blk.norm))
    if not blk.memory:
        o = attention(g, blk.attn, f"{prefix}.attn", h, inp, cfg, out)
    else:
        mem = memory(g, blk, prefix, h, inp, cfg, out)
        a_in = g.op("Add", h, mem) if cfg.composition == "MAL" else h
        a = attention(g, blk.attn, f"{prefix}.attn", a_in, inp, cfg, out)
        o = g.op("Mul", a, g.op("Sigmoid", mem)) if cfg.composition == "MAG" else a
    x = g.op("Add", x, g.matmul(o, g.weight(f"{prefix}.w_o", blk.w_o)))
    if blk.mlp is not None:
        x = g.op("Add", x, mlp(g, blk.mlp, f"{prefix}.mlp", x))
    return x
