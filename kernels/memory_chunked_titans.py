"""Chunkwise-parallel form of the Titans memory (NumPy), forward and backward.

Titans keeps two states: ``S_i = eta_i S_{i-1} + u_i k_i^T``, ``M_i = r_i M_{i-1} + S_i`` with
``u_i = -theta_i e_i = theta_i (v_i - M_{i-1} k_i)``. Inside a chunk (notation of
`kernels.memory_chunked`, with ``lr, le`` the cumulative log decays of ``r`` and ``eta``,
``Er_il = exp(lr_i - lr_l)``, ``Ee_lj = exp(le_l - le_j)``, ``gr = exp(lr)``, ``ge = exp(le)``)::

    S_i = ge_i S0 + sum_{j<=i} Ee_ij u_j k_j^T
    M_i = gr_i M0 + c_i S0 + sum_{j<=i} W_ij u_j k_j^T,   W = Er Ee,  c = Er ge

The updates solve the unit lower-triangular system ``(I + diag(theta) A) U = R`` with
``A_ij = W_{i-1,j} k_i . k_j`` (j < i) and ``R = theta * (V - gr_{i-1} K M0^T - c_{i-1} K S0^T)``;
the pair ``[M S]`` crosses a chunk through one ``[2d, 2d]`` linear map. The backward
differentiates the chunk function by hand; the gate gradients go through ``W = Er Ee`` and
``c = Er ge`` to terms that each span one range of tokens (see `memory_chunked`). Decay
ratios are summed over their own spans (`memory_chunked.span_decays`), and calls fall back to
the sequential reference as in `memory_chunked` (its module docstring).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from tape.backend import array_module

from . import memory_ref as ref
from . import memory_chunked
from ._common import max_abs, within_range
from .memory_chunked import (NumpyOps, Saved, _blocks, _log_gradient, _tr, _triangles,
                             _unblocks, growth, sequential_backward, sequential_forward,
                             span_decays)


def usable(x: ref.Seq) -> bool:
    """Whether the chunked form applies: a non-empty sequence whose retention and momentum
    decay are positive and finite."""
    xp = array_module(x.ret)
    return x.k.shape[0] > 0 and all(bool(xp.all(xp.isfinite(a)) and xp.all(a > 0))
                                    for a in (x.ret, x.eta))


def _decays(lg):
    """log decays ``[..., C]`` -> (g, E): ``g_i = exp(l_i)`` with the cumulative sums ``l`` and
    ``E_ij = exp(l_i - l_j)`` for j <= i, summed over its own span (`span_decays`)."""
    xp = array_module(lg)
    with np.errstate(under="ignore"):
        return xp.exp(xp.cumsum(lg, axis=-1)), span_decays(lg, lg.shape[-1])


def _shift(a, first):
    """a_{i-1} along the last axis (a_{-1} = first)."""
    xp = array_module(a)
    return xp.concatenate([xp.full(a[..., :1].shape, first, a.dtype), a[..., :-1]], axis=-1)


class _Chunks:
    def __init__(self, x: ref.Seq, C: int, ops):
        xp = array_module(x.k)
        s = x.k.shape[0]
        self.C, self.ops = C, ops
        self.K, self.V, self.Q = (_blocks(a, s, C) for a in (x.k, x.v, x.q))
        self.r = _blocks(x.ret[..., 0], s, C, 1.0)
        self.eta = _blocks(x.eta[..., 0], s, C, 1.0)
        self.th = _blocks(x.th[..., 0], s, C)
        lower, self.strict = _triangles(xp, C)
        self.lower = lower
        d = self.K.shape[-1]
        eye = xp.eye(d, dtype=self.K.dtype)
        self.gr, self.Er = _decays(xp.log(self.r))
        self.ge, self.Ee = _decays(xp.log(self.eta))
        self.W = self.Er @ self.Ee
        self.c = (self.Er @ self.ge[..., None])[..., 0]
        self.Wp = xp.where(self.strict, _shift(self.W.swapaxes(-1, -2), 0.0)
                           .swapaxes(-1, -2), 0.0)                 # W_{i-1, j}, j < i
        self.grp, self.cp = _shift(self.gr, 1.0), _shift(self.c, 0.0)
        self.KK = self.K @ _tr(self.K)
        self.QK = self.Q @ _tr(self.K)
        self.A = self.Wp * self.KK
        self.T = ops.unit_lower_inverse(self.A, self.th)
        self.U0 = self.T @ (self.th[..., None] * self.V)
        self.WM = self.T @ ((self.th * self.grp)[..., None] * self.K)
        self.WS = self.T @ ((self.th * self.cp)[..., None] * self.K)
        self.Pm = self.W * self.QK
        self.DWK = self.W[..., -1, :, None] * self.K
        self.DeK = self.Ee[..., -1, :, None] * self.K
        grC, cC, geC = (a[..., -1, None, None] for a in (self.gr, self.c, self.ge))
        # [M_C S_C] = [M0 S0] Phi + [U0^T DWK  U0^T DeK]
        self.Phi = xp.concatenate([
            xp.concatenate([grC * eye - _tr(self.WM) @ self.DWK, -_tr(self.WM) @ self.DeK], -1),
            xp.concatenate([cC * eye - _tr(self.WS) @ self.DWK,
                            geC * eye - _tr(self.WS) @ self.DeK], -1)], -2)
        self.PsiM = self.gr[..., None] * self.Q - self.Pm @ self.WM
        self.PsiS = self.c[..., None] * self.Q - self.Pm @ self.WS


def _parts(s: int, C: int):
    """Spans run with one chunk size each: the whole chunks, then the rest as one shorter
    chunk (padding is no identity for Titans: an idle token still adds S to M)."""
    whole = s - s % C
    return [(t0, t1, c) for t0, t1, c in ((0, whole, C), (whole, s, s - whole)) if t1 > t0]


def _slice(x: ref.Seq, t0: int, t1: int) -> ref.Seq:
    return ref.Seq(*(None if a is None else a[t0:t1] for a in x))


def forward(spec: ref.Rule, x: ref.Seq, init: tuple, checkpoint_every: Optional[int] = None,
            chunk: Optional[int] = None, ops=NumpyOps):
    """Run Titans chunkwise: ``(y, (m_final, s_final), saved)`` like `memory_ref.forward`, or
    the sequential loop where `memory_chunked` falls back to it."""
    xp = array_module(x.k)
    s, _, d = x.k.shape
    C = max(1, min(memory_chunked.chunk_size(d) if chunk is None else chunk, s))
    grow = growth(x, init, C) if usable(x) else np.inf
    if not grow < np.inf:
        return sequential_forward(spec, x, init, checkpoint_every, C)
    MS = xp.concatenate(init, -1)
    ys, all_starts, all_chunks = [], [], []
    for t0, t1, c in _parts(s, C):
        ch = _Chunks(_slice(x, t0, t1), c, ops)
        adds = xp.concatenate([_tr(ch.U0) @ ch.DWK, _tr(ch.U0) @ ch.DeK], -1)   # [B, N, d, 2d]
        starts, MS = ops.carry(MS, adds, P=ch.Phi)
        M0, S0 = starts[..., :d], starts[..., d:]
        ys.append(_unblocks(ch.PsiM @ _tr(M0) + ch.PsiS @ _tr(S0) + ch.Pm @ ch.U0, t1 - t0))
        all_starts.append(starts)
        all_chunks.append(ch)
    y = xp.concatenate(ys, 0)
    made = [y, MS] + all_starts + [a for ch in all_chunks for a in (ch.U0, ch.WM, ch.WS)]
    if not within_range(xp, made, grow, x.k.dtype):
        return sequential_forward(spec, x, init, checkpoint_every, C)
    finals = (xp.ascontiguousarray(MS[..., :d]), xp.ascontiguousarray(MS[..., d:]))
    return y, finals, Saved(x, C, all_starts, all_chunks, tuple(init), grow)


def backward(spec: ref.Rule, saved, dy, dfinals: tuple, need: frozenset):
    """Gradients of a chunked Titans run, in the format of `memory_ref.backward`."""
    if isinstance(saved, ref.Saved):
        return ref.backward(spec, saved, dy, dfinals, need)
    x, C, all_starts, all_chunks = saved[:4]
    xp = array_module(x.k)
    s, B, d = x.k.shape
    G = xp.concatenate([xp.zeros((B, d, d), x.k.dtype) if g is None else
                        xp.asarray(g, x.k.dtype) for g in dfinals], -1)
    parts, made = [], [G]
    for (t0, t1, _), starts, ch in reversed(list(zip(_parts(s, C), all_starts, all_chunks))):
        dy_part = None if dy is None else dy[t0:t1]
        g, G, ends = _backward_part(ch, starts, dy_part, G, t1 - t0, d)
        parts.insert(0, g)
        made += [ends, G] + list(g.values())
    scale = max([1.0] + [max_abs(xp, a) for a in all_starts])
    if not within_range(xp, made, saved.growth * scale, x.k.dtype):
        return sequential_backward(spec, saved, dy, dfinals, need)
    g = {n: xp.concatenate([p[n] for p in parts], 0)
         for n in ("alpha", "eta", "theta", "k", "v", "q")}
    g["q"] = g["q"] if "q" in need else None
    g["init"] = (xp.ascontiguousarray(G[..., :d]), xp.ascontiguousarray(G[..., d:]))
    return g


def _backward_part(ch: _Chunks, starts, dy, G, s: int, d: int):
    """One span of equal chunks: its time-major gradients and the cotangent entering it."""
    xp = array_module(ch.K)
    C = ch.C
    dY = xp.zeros_like(ch.Q) if dy is None else _blocks(dy, s, C)
    adds = xp.concatenate([_tr(dY) @ ch.PsiM, _tr(dY) @ ch.PsiS], -1)
    ends, G = ch.ops.carry(G, adds, P=ch.Phi, transpose=True, reverse=True)
    M0, S0, GM, GS = starts[..., :d], starts[..., d:], ends[..., :d], ends[..., d:]
    XM, XS = ch.K @ _tr(M0), ch.K @ _tr(S0)
    U = ch.U0 - ch.WM @ _tr(M0) - ch.WS @ _tr(S0)
    dU = _tr(ch.Pm) @ dY + ch.DWK @ _tr(GM) + ch.DeK @ _tr(GS)
    dPm = xp.where(ch.lower, dY @ _tr(U), 0.0)
    dW = dPm * ch.QK
    dQK = dPm * ch.W
    dYM, dYS = dY @ M0, dY @ S0
    dQ = ch.gr[..., None] * dYM + ch.c[..., None] * dYS + dQK @ ch.K
    UGM, UGS = U @ GM, U @ GS
    dK = _tr(dQK) @ ch.Q + ch.W[..., -1, :, None] * UGM + ch.Ee[..., -1, :, None] * UGS
    dgr = xp.sum(dYM * ch.Q, axis=-1)
    dc = xp.sum(dYS * ch.Q, axis=-1)
    dge = xp.zeros_like(dgr)
    dEe = xp.zeros_like(ch.Ee)
    dgr[..., -1] += xp.einsum("bnij,bnij->bn", GM, M0)
    dc[..., -1] += xp.einsum("bnij,bnij->bn", GM, S0)
    dge[..., -1] += xp.einsum("bnij,bnij->bn", GS, S0)
    dW[..., -1, :] += xp.sum(UGM * ch.K, axis=-1)
    dEe[..., -1, :] += xp.sum(UGS * ch.K, axis=-1)
    dR = _tr(ch.T) @ dU
    dL = -xp.where(ch.strict, dR @ _tr(U), 0.0)
    dA = ch.th[..., None] * dL
    dWp = dA * ch.KK
    dKK = dA * ch.Wp
    dRM, dRS = dR @ M0, dR @ S0
    dRXM, dRXS = xp.sum(dRM * ch.K, axis=-1), xp.sum(dRS * ch.K, axis=-1)
    thgrp, thcp = ch.th * ch.grp, ch.th * ch.cp
    dK += (dKK + _tr(dKK)) @ ch.K - thgrp[..., None] * dRM - thcp[..., None] * dRS
    dV = ch.th[..., None] * dR
    dtheta = (xp.sum(dR * ch.V, axis=-1) - ch.grp * dRXM - ch.cp * dRXS
              + xp.sum(dL * ch.A, axis=-1))
    # the shifted copies: Wp_ij = W_{i-1,j}, grp_i = gr_{i-1}, cp_i = c_{i-1}
    dW[..., :-1, :] += dWp[..., 1:, :]
    dgr[..., :-1] -= (ch.th * dRXM)[..., 1:]
    dc[..., :-1] -= (ch.th * dRXS)[..., 1:]
    # W = Er Ee, c = Er ge
    dW = xp.where(ch.lower, dW, 0.0)
    dEr = xp.where(ch.lower, dW @ _tr(ch.Ee) + dc[..., :, None] * ch.ge[..., None, :], 0.0)
    dEe = xp.where(ch.lower, dEe + _tr(ch.Er) @ dW, 0.0)
    dge += (_tr(ch.Er) @ dc[..., None])[..., 0]
    dlogr = _log_gradient(dEr * ch.Er, dgr * ch.gr)
    dloge = _log_gradient(dEe * ch.Ee, dge * ch.ge)
    g = {"alpha": -dlogr / ch.r, "eta": dloge / ch.eta, "theta": dtheta, "k": dK, "v": dV,
         "q": dQ}
    return {n: _unblocks(a, s) for n, a in g.items()}, G, ends
