"""The PyTorch language models that `models.bench.lm_peers` trains beside Hecate's model.

This module imports torch at load time; `models.bench.lm_peers` imports it only after checking
that torch is installed, so nothing else in the package needs torch.

Every model maps a ``[batch, seq_len + 1]`` int64 chunk of bytes to the mean next-byte
cross-entropy over its ``seq_len`` positions, as `models.model.loss` does, and returns the state
to carry to the next chunk of the same streams (None for a model that carries nothing):

- `CausalTransformer`: pre-norm (RMSNorm) blocks of 4-head causal self-attention with rotary
  positions on the queries and keys, and a GELU MLP; untied embedding and unembedding, as in
  Hecate's model. Its context is the chunk.
- `GRULanguageModel`: an embedding, a stack of GRU layers, a linear head. With
  ``carry_state`` its hidden state runs on from chunk to chunk (each batch row of
  `models.data.TextData` is one continuous stream), the way Hecate carries its memory.

>>> import torch
>>> net = CausalTransformer(vocab=256, d_model=16, layers=1, heads=2, mlp=32, seq_len=8)
>>> loss, state = net.chunk_loss(torch.randint(0, 256, (2, 9)), None)
>>> loss.shape, state is None
(torch.Size([]), True)
"""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import nn
from torch.nn import functional as F


def rotary_tables(seq_len: int, head_dim: int, base: float = 10000.0):
    """cos and sin, each ``[seq_len, head_dim // 2]``, of RoPE's position angles.

    >>> cos, sin = rotary_tables(4, 8)
    >>> tuple(cos.shape), float(cos[0, 0]), float(sin[0, 0])
    ((4, 4), 1.0, 0.0)
    """
    inv = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.arange(seq_len, dtype=torch.float32)[:, None] * inv[None, :]
    return torch.cos(angles), torch.sin(angles)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on ``x [batch, heads, T, head_dim]``: the two halves of each head as pairs."""
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


class Block(nn.Module):
    """``x + attn(norm(x))``, then ``x + mlp(norm(x))``; no biases."""

    def __init__(self, d_model: int, heads: int, mlp: int, layers: int) -> None:
        super().__init__()
        self.heads = heads
        self.attn_norm = nn.RMSNorm(d_model, eps=1e-6)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)
        self.mlp_norm = nn.RMSNorm(d_model, eps=1e-6)
        self.up = nn.Linear(d_model, mlp, bias=False)
        self.down = nn.Linear(mlp, d_model, bias=False)
        # GPT-2's initialisation: N(0, 0.02), the projections back into the residual stream
        # scaled by 1/sqrt(2 * layers) so the stream's variance does not grow with depth.
        for lin in (self.qkv, self.up):
            nn.init.normal_(lin.weight, std=0.02)
        for lin in (self.out, self.down):
            nn.init.normal_(lin.weight, std=0.02 / math.sqrt(2 * layers))

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).split(d, dim=-1)
        q, k, v = (z.view(B, T, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        q, k = rotate(q, cos[:T], sin[:T]), rotate(k, cos[:T], sin[:T])
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(B, T, d))
        return x + self.down(F.gelu(self.up(self.mlp_norm(x))))


class CausalTransformer(nn.Module):
    """A byte-level causal transformer with rotary positions (no learned position table)."""

    carry_state = False

    def __init__(self, vocab: int = 256, d_model: int = 64, layers: int = 2, heads: int = 4,
                 mlp: int = 192, seq_len: int = 128) -> None:
        super().__init__()
        if d_model % heads or (d_model // heads) % 2:
            raise ValueError(f"CausalTransformer: d_model {d_model} must split into {heads} "
                             f"heads of an even size (rotary pairs)")
        self.embed = nn.Embedding(vocab, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads, mlp, layers) for _ in range(layers))
        self.final_norm = nn.RMSNorm(d_model, eps=1e-6)
        self.unembed = nn.Linear(d_model, vocab, bias=False)
        nn.init.normal_(self.embed.weight, std=0.02)
        nn.init.normal_(self.unembed.weight, std=0.02)
        cos, sin = rotary_tables(seq_len, d_model // heads)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def chunk_loss(self, tokens: torch.Tensor, state: None) -> tuple:
        """Mean cross-entropy of the chunk's next bytes; the state is always None."""
        x = self.embed(tokens[:, :-1])
        for block in self.blocks:
            x = block(x, self.cos, self.sin)
        logits = self.unembed(self.final_norm(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                               tokens[:, 1:].reshape(-1)), None


class GRULanguageModel(nn.Module):
    """Embedding, ``layers`` GRU layers of width `hidden`, linear head; PyTorch's default
    initialisation. With `carry_state` the hidden state runs on across chunks (detached: no
    gradient flows into the previous chunk, as with Hecate's memory)."""

    def __init__(self, vocab: int = 256, embed: int = 64, hidden: int = 120, layers: int = 1,
                 carry_state: bool = False) -> None:
        super().__init__()
        self.carry_state = carry_state
        self.embed = nn.Embedding(vocab, embed)
        self.gru = nn.GRU(embed, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def chunk_loss(self, tokens: torch.Tensor, state: Optional[torch.Tensor]) -> tuple:
        """Mean cross-entropy of the chunk's next bytes, and the final hidden state (detached)
        when the state is carried, else None. `state` None starts from zeros."""
        out, last = self.gru(self.embed(tokens[:, :-1]), state if self.carry_state else None)
        logits = self.head(out)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        return loss, last.detach() if self.carry_state else None


def parameter_count(net: nn.Module) -> int:
    """Trainable parameters of `net`.

    >>> parameter_count(GRULanguageModel(hidden=120, layers=1))
    114320
    """
    return sum(p.numel() for p in net.parameters() if p.requires_grad)


__all__ = ["CausalTransformer", "GRULanguageModel", "Block", "rotary_tables", "rotate",
           "parameter_count"]
