"""Host side of the CUDA sliding-window attention (`cuda/swa.cu`).

Arrays are ``[BH, s, hd]`` float32 on the GPU. With bf16 storage, q, k and v are rounded once
to bfloat16 and kept as raw 16-bit words: the kernels read half the bytes, and the residuals
kept for the backward are half the size. Output, log-sum-exp and gradients are float32.
"""
from __future__ import annotations

import math

from tape.backend import array_module

from ._common import round_bf16
from .cuda_loader import f32, i32, launch

ROWS = 8            # warps per block, one row each (must match swa.cu)
TILE = 32           # rows per shared-memory tile (must match swa.cu)
WARP = 32


def to_bf16_bits(xp, a):
    """float32 -> bfloat16 words (uint16), rounded to nearest even like `round_bf16`."""
    return (round_bf16(xp, a).view(xp.uint32) >> 16).astype(xp.uint16)


def _stored(xp, a, storage):
    if storage == "bf16":
        return to_bf16_bits(xp, a)
    return xp.ascontiguousarray(a, dtype=xp.float32)


def _geometry(s, BH):
    if BH > 65535:   # CUDA's limit on grid.y
        raise ValueError(f"swa_attention: the CUDA kernels take at most 65535 sequences "
                         f"(batch x heads) per call, got {BH}; split the batch")
    return ((s + ROWS - 1) // ROWS, BH), (ROWS * WARP,)


def swa_forward(q, k, v, window: int, storage: str):
    """``(out, saved)``; `saved` is what `swa_backward` needs."""
    xp = array_module(q)
    BH, s, hd = q.shape
    qs, ks, vs = (_stored(xp, a, storage) for a in (q, k, v))
    out = xp.empty((BH, s, hd), xp.float32)
    lse = xp.empty((BH, s), xp.float32)
    suffix = "bf16" if storage == "bf16" else "f32"
    window = min(window, s)
    if s and BH:
        grid, block = _geometry(s, BH)
        smem = (2 * TILE * (hd + 1) + ROWS * hd) * 4
        launch("swa.cu", f"swa_fwd_{suffix}", grid, block,
               (qs, ks, vs, out, lse, i32(s), i32(hd), i32(window), f32(1 / math.sqrt(hd))),
               smem)
    return out, (qs, ks, vs, out, lse, suffix)


def swa_backward(saved, dout, window: int, need: tuple):
    """``(dq, dk, dv)`` from the saved residuals and the output cotangent ``[BH, s, hd]``."""
    qs, ks, vs, out, lse, suffix = saved
    xp = array_module(out)
    BH, s, hd = out.shape
    dout = xp.ascontiguousarray(dout, dtype=xp.float32)
    D = (dout * out).sum(axis=-1)           # D_i = dO_i . O_i, one fused reduction
    D = xp.ascontiguousarray(D, dtype=xp.float32)
    window = min(window, s)
    scale = f32(1 / math.sqrt(hd))
    grid, block = _geometry(s, BH)
    dq = xp.zeros((BH, s, hd), xp.float32) if need[0] else None
    dk = xp.zeros((BH, s, hd), xp.float32) if need[1] or need[2] else None
    dv = xp.zeros((BH, s, hd), xp.float32) if need[1] or need[2] else None
    if s and BH:
        if need[0]:
            smem = (2 * TILE * (hd + 1) + 2 * ROWS * hd) * 4
            launch("swa.cu", f"swa_bwd_dq_{suffix}", grid, block,
                   (qs, ks, vs, lse, D, dout, dq, i32(s), i32(hd), i32(window), scale), smem)
        if need[1] or need[2]:
            smem = (2 * TILE * (hd + 1) + 2 * ROWS * hd + 2 * TILE) * 4
            launch("swa.cu", f"swa_bwd_dkdv_{suffix}", grid, block,
                   (qs, ks, vs, lse, D, dout, dk, dv, i32(s), i32(hd), i32(window), scale),
                   smem)
    return dq, dk if need[1] else None, dv if need[2] else None
