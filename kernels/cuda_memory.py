"""Host side of the CUDA memory rules (`cuda/memory.cu`).

Same interface and layout as `kernels.memory_ref` (time-major ``[s, B, d]`` float32 inputs,
``[s, B, 1]`` gates, ``[B, d, d]`` states), so `kernels.memory` calls either one. Blocks of
512 threads run the recurrence, each on a group of rows of one batch entry's state: G groups
per entry (`row_groups`), so that a small batch still occupies many of the GPU's
multiprocessors. The backward's column sums (dk, dq) and gate gradients come back per group
and are summed here.

States: ``ck[j]`` is the state at token ``j * C`` and ``ck[n_chunks]`` the final one. C = 1
keeps every state (the default); ``checkpoint_every=C`` keeps one per chunk and the backward
re-runs each chunk into a ``[C + 1, B, d, d]`` scratch buffer.
"""
from __future__ import annotations

from typing import NamedTuple

from tape.backend import array_module

from .cuda_loader import i32, launch
from .memory_ref import Rule, Seq

NWARP = 16          # warps per block, as in memory.cu
BLOCK = NWARP * 32
TARGET_BLOCKS = 256   # about two blocks per multiprocessor of a large GPU (132 on an H100)


def row_groups(B: int, d: int) -> int:
    """Row groups per batch entry: enough blocks for the GPU (about `TARGET_BLOCKS` in all),
    at most one per NWARP rows of the state.

    >>> row_groups(16, 64), row_groups(16, 128), row_groups(1024, 64), row_groups(1, 16)
    (4, 8, 1, 1)
    """
    return max(1, min(-(-d // NWARP), TARGET_BLOCKS // max(B, 1)))


class CudaSaved(NamedTuple):
    x: Seq
    C: int
    ckM: object
    ckS: object
    E: object


def _dummy(xp):
    return xp.zeros((1,), xp.float32)


def _chunk(checkpoint_every, s: int) -> int:
    return checkpoint_every if checkpoint_every is not None and checkpoint_every < s else 1


def forward(rule: Rule, x: Seq, init: tuple, checkpoint_every):
    xp = array_module(x.k)
    s, B, d = x.k.shape
    f = xp.float32
    C = _chunk(checkpoint_every, s)
    n_chunks = -(-s // C)
    ckM = xp.empty((n_chunks + 1, B, d, d), f)
    ckM[0] = init[0]
    ckS = _dummy(xp)
    if rule.n_states == 2:
        ckS = xp.empty((n_chunks + 1, B, d, d), f)
        ckS[0] = init[1]
    y = xp.empty((s, B, d), f)
    E = xp.empty((s, B, d), f) if rule.uses_error else _dummy(xp)
    if s and B:
        th = x.th if x.th is not None else _dummy(xp)
        eta = x.eta if x.eta is not None else _dummy(xp)
        launch("memory.cu", f"memory_forward_{rule.name}", (B, row_groups(B, d)), (BLOCK,),
               (x.k, x.v, x.q, x.ret, th, eta, ckM, ckS, y, E, i32(s), i32(B), i32(d),
                i32(C)))
    finals = (ckM[n_chunks].copy(),) + ((ckS[n_chunks].copy(),) if rule.n_states == 2 else ())
    return y, finals, CudaSaved(x, C, ckM, ckS, E)


def backward(rule: Rule, saved: CudaSaved, dy, dfinals: tuple, need: frozenset):
    x = saved.x
    xp = array_module(x.k)
    s, B, d = x.k.shape
    f = xp.float32

    def state_cotangent(g):
        # A fresh C-ordered copy: the kernel overwrites it with the initial state's cotangent.
        return xp.zeros((B, d, d), f) if g is None else xp.array(g, dtype=f, copy=True,
                                                                  order="C")

    GM = state_cotangent(dfinals[0])
    GS = state_cotangent(dfinals[1]) if rule.n_states == 2 else _dummy(xp)
    dy = xp.zeros((s, B, d), f) if dy is None else xp.ascontiguousarray(dy, dtype=f)
    scr_shape = (saved.C + 1, B, d, d)
    scrM = xp.empty(scr_shape, f) if saved.C > 1 else _dummy(xp)
    scrS = xp.empty(scr_shape, f) if saved.C > 1 and rule.n_states == 2 else _dummy(xp)
    G = row_groups(B, d)
    # Per row group: the column sums and the gate gradients, summed over the groups below.
    dk, dq = (xp.empty((G, s, B, d), f) for _ in range(2))
    dv = xp.empty((s, B, d), f)
    dalpha = xp.empty((G, s, B), f)
    dth = xp.empty((G, s, B), f) if x.th is not None else _dummy(xp)
    deta = xp.empty((G, s, B), f) if x.eta is not None else _dummy(xp)
    if s and B:
        th = x.th if x.th is not None else _dummy(xp)
        eta = x.eta if x.eta is not None else _dummy(xp)
        launch("memory.cu", f"memory_backward_{rule.name}", (B, G), (BLOCK,),
               (x.k, x.v, x.q, x.ret, th, eta, saved.E, saved.ckM, saved.ckS, scrM, scrS, dy,
                GM, GS, dk, dv, dq, dalpha, dth, deta, i32(s), i32(B), i32(d), i32(saved.C)))

    def over_groups(a):
        if a.ndim == 1:   # a placeholder for a gate this rule does not have
            return a
        return a[0] if G == 1 else a.sum(axis=0)

    dk, dq, dalpha, dth, deta = (over_groups(a) for a in (dk, dq, dalpha, dth, deta))
    g = {"k": dk, "v": dv, "q": dq, "alpha": dalpha, "theta": dth, "eta": deta}
    g = {n: a for n, a in g.items() if n in need}
    g["init"] = (GM,) + ((GS,) if rule.n_states == 2 else ())
    return g
