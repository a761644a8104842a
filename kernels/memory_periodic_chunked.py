"""Chunked form of the periodic memories (`kernels.memory_periodic`): the state at every chunk
boundary in a few batched products, forward and backward.

A periodic memory writes once per chunk of C tokens and is read only at chunk boundaries, so
only the transition of one whole chunk is needed, never the states inside it. Arrays are in
block layout ``[B, N, C, ...]`` (batch, chunk, token in the chunk). Per chunk, with the
notation of `kernels.memory_chunked` (``M0`` the state entering the chunk, ``l`` the cumulative
log retentions, ``gC = exp(l_{C-1})``, ``D_j = exp(l_{C-1} - l_j)``):

- Hebbian: ``M_C = gC M0 + V^T (D * K)``.
- Delta (WY form): ``U = U0 - W M0^T`` (``U0 = T (theta * V)``, ``W = T (theta * gp * K)``,
  ``T = (I + diag(theta) A)^-1``), ``M_C = gC M0 + U^T (D * K)``.
- Titans: the joint state ``X = [M S]`` as in `kernels.memory_chunked_titans`,
  ``X_C = X0 Lam + U^T [DWK DeK]`` with ``U = U0 - [WM WS] X0^T``.

Each is ``X_C = X0 Lam + adds - (X0 P) Q`` with a per-chunk scaling ``Lam`` and a rank-C
correction (``P [w, C]``, ``Q [C, w]``, w the state width). The state crosses chunks in a
Python loop, either through those two thin products (when ``2 C < w``) or through the dense
``[w, w]`` map ``Lam - P Q`` formed for all chunks at once (`NumpyOps.carry`). The reverse
sweep carries the state cotangent back the same way, adding at each boundary the cotangent of
the reads of that state, and then differentiates every chunk's transition in one batch. Gate
gradients are summed from span terms (`memory_chunked._log_gradient`), which keeps them
accurate for small retentions.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tape.backend import array_module

from .memory_chunked import NumpyOps, _log_gradient, _tr, _triangles
from .memory_chunked_titans import _decays, _shift


class Blocks(NamedTuple):
    """Inputs of the whole chunks in block layout: ``k, v, q [B, N, C, d]``, the retention
    ``ret = 1 - alpha`` and ``th``, ``eta`` ``[B, N, C]`` (None where the rule has none)."""

    k: object
    v: object
    q: object
    ret: object
    th: object
    eta: object


def usable(b: Blocks) -> bool:
    """Whether the chunked form applies: the retention (and Titans' momentum gate) positive
    and finite, so that its logarithm exists.

    >>> one = np.ones((1, 1, 2))
    >>> usable(Blocks(None, None, None, one, None, None)), usable(Blocks(None, None, None, 0 * one, None, None))
    (True, False)
    """
    xp = array_module(b.ret)
    return all(bool(xp.all(xp.isfinite(a)) and xp.all(a > 0))
               for a in (b.ret, b.eta) if a is not None)


class _DeltaHebbian:
    """Per-chunk quantities of the delta or Hebbian rule, all chunks at once."""

    def __init__(self, rule: str, b: Blocks, ops):
        xp = array_module(b.k)
        self.rule, self.K, self.V, self.r, self.th = rule, b.k, b.v, b.ret, b.th
        C = b.k.shape[-2]
        self.lower, self.strict = _triangles(xp, C)
        l = xp.cumsum(xp.log(b.ret), axis=-1)
        with np.errstate(under="ignore"):
            self.gC = xp.exp(l[..., -1])                                   # [B, N]
            self.D = xp.exp(l[..., -1:] - l)
        self.DK = self.D[..., None] * b.k
        if rule == "hebbian":
            self.adds = _tr(b.v) @ self.DK
            self.P = self.Q = None
            return
        lp = _shift(l, 0.0)
        with np.errstate(under="ignore"):
            self.gp = xp.exp(lp)
            self.Ep = xp.exp(xp.where(self.strict, lp[..., :, None] - l[..., None, :], -np.inf))
        self.A = self.Ep * (b.k @ _tr(b.k))
        self.T = ops.unit_lower_inverse(self.A, b.th)
        self.thgp = b.th * self.gp
        self.U0 = self.T @ (b.th[..., None] * b.v)
        self.W = self.T @ (self.thgp[..., None] * b.k)
        self.adds = _tr(self.U0) @ self.DK
        self.P, self.Q = _tr(self.W), self.DK

    def mix(self, X, c, reverse: bool = False):
        """``X Lam`` (``X Lam^T`` if `reverse`) for chunk `c` (a slice or an index)."""
        gC = self.gC[:, c]
        return X * gC[..., None, None]

    def grads(self, M0, GC):
        """Gradients of every chunk's transition given the states entering the chunks `M0`
        and the cotangents of the states leaving them `GC` (both ``[B, N, d, d]``)."""
        xp = array_module(M0)
        K, D = self.K, self.D
        C = K.shape[-2]
        pairs = xp.zeros(K.shape[:-1] + (C,), K.dtype)
        from0 = xp.zeros(K.shape[:-1], K.dtype)
        from0[..., -1] = self.gC * xp.einsum("bnij,bnij->bn", GC, M0)
        g = {}
        if self.rule == "hebbian":
            VG = self.V @ GC
            g["v"] = self.DK @ _tr(GC)
            g["k"] = D[..., None] * VG
            pairs[..., -1, :] = D * xp.sum(VG * K, axis=-1)
        else:
            U = self.U0 - self.W @ _tr(M0)
            UG = U @ GC
            dR = _tr(self.T) @ (self.DK @ _tr(GC))          # U = T R, dU = DK GC^T
            dRM = dR @ M0
            dRX = xp.sum(dRM * K, axis=-1)                 # dR_i . (M0 k_i)
            dL = -xp.where(self.strict, dR @ _tr(U), 0.0)
            dA = self.th[..., None] * dL
            dKK = dA * self.Ep
            g["v"] = self.th[..., None] * dR
            g["k"] = D[..., None] * UG + (dKK + _tr(dKK)) @ K - self.thgp[..., None] * dRM
            g["theta"] = (xp.sum(dR * self.V, axis=-1) - self.gp * dRX
                          + xp.sum(dL * self.A, axis=-1))
            pairs[..., -1, :] = D * xp.sum(UG * K, axis=-1)
            pairs[..., :-1, :] += (dA * self.A)[..., 1:, :]        # Ep_ij: span (j, i-1]
            from0[..., :-1] -= (self.thgp * dRX)[..., 1:]          # gp_i: span [0, i-1]
        g["alpha"] = -_log_gradient(pairs, from0) / self.r
        return g


class _Titans:
    """Per-chunk quantities of the Titans rule (joint state ``[M S]``), all chunks at once."""

    def __init__(self, b: Blocks, ops):
        xp = array_module(b.k)
        self.K, self.V, self.r, self.eta, self.th = b.k, b.v, b.ret, b.eta, b.th
        C, d = b.k.shape[-2:]
        self.d = d
        self.lower, self.strict = _triangles(xp, C)
        with np.errstate(under="ignore"):
            self.gr, self.Er = _decays(xp.log(b.ret), self.lower)
            self.ge, self.Ee = _decays(xp.log(b.eta), self.lower)
        self.W = self.Er @ self.Ee
        self.c = (self.Er @ self.ge[..., None])[..., 0]
        self.Wp = xp.where(self.strict, _tr(_shift(_tr(self.W), 0.0)), 0.0)   # W_{i-1, j}
        self.grp, self.cp = _shift(self.gr, 1.0), _shift(self.c, 0.0)
        self.KK = b.k @ _tr(b.k)
        self.A = self.Wp * self.KK
        self.T = ops.unit_lower_inverse(self.A, b.th)
        self.U0 = self.T @ (b.th[..., None] * b.v)
        WM = self.T @ ((b.th * self.grp)[..., None] * b.k)
        WS = self.T @ ((b.th * self.cp)[..., None] * b.k)
        self.P = _tr(xp.concatenate([WM, WS], -1))                      # [B, N, 2d, C]
        self.Q = xp.concatenate([self.W[..., -1, :, None] * b.k,
                                 self.Ee[..., -1, :, None] * b.k], -1)   # [DWK DeK]
        self.adds = _tr(self.U0) @ self.Q
        self.coefs = tuple(a[..., -1] for a in (self.gr, self.c, self.ge))   # grC, cC, geC

    def mix(self, X, c, reverse: bool = False):
        """``X Lam`` (``X Lam^T`` if `reverse`), ``Lam = [[grC I, 0], [cC I, geC I]]``."""
        xp = array_module(X)
        grC, cC, geC = (a[:, c][..., None, None] for a in self.coefs)
        M, S = X[..., :self.d], X[..., self.d:]
        if reverse:
            return xp.concatenate([grC * M, cC * M + geC * S], -1)
        return xp.concatenate([grC * M + cC * S, geC * S], -1)

    def grads(self, X0, G):
        """Gradients of every chunk's transition given the joint states entering the chunks
        `X0` and the cotangents of those leaving them `G` (``[B, N, d, 2d]``); the Titans
        backward of `kernels.memory_chunked_titans` without the reads inside a chunk."""
        xp = array_module(X0)
        d, K = self.d, self.K
        M0, S0, GM, GS = X0[..., :d], X0[..., d:], G[..., :d], G[..., d:]
        U = self.U0 - _tr(self.P) @ _tr(X0)
        UGM, UGS = U @ GM, U @ GS
        dR = _tr(self.T) @ (self.Q @ _tr(G))                 # dU = DWK GM^T + DeK GS^T
        dL = -xp.where(self.strict, dR @ _tr(U), 0.0)
        dA = self.th[..., None] * dL
        dKK = dA * self.Wp
        dRM, dRS = dR @ M0, dR @ S0
        dRXM, dRXS = xp.sum(dRM * K, axis=-1), xp.sum(dRS * K, axis=-1)
        thgrp, thcp = self.th * self.grp, self.th * self.cp
        dK = (self.W[..., -1, :, None] * UGM + self.Ee[..., -1, :, None] * UGS
              + (dKK + _tr(dKK)) @ K - thgrp[..., None] * dRM - thcp[..., None] * dRS)
        dtheta = (xp.sum(dR * self.V, axis=-1) - self.grp * dRXM - self.cp * dRXS
                  + xp.sum(dL * self.A, axis=-1))
        dW = dA * self.KK                                    # through Wp_ij = W_{i-1, j}
        dW = xp.concatenate([dW[..., 1:, :], xp.sum(UGM * K, axis=-1)[..., None, :]], -2)
        dEe = xp.zeros_like(self.Ee)
        dEe[..., -1, :] = xp.sum(UGS * K, axis=-1)
        dgr = xp.zeros_like(self.gr)
        dc = xp.zeros_like(self.c)
        dge = xp.zeros_like(self.ge)
        dgr[..., -1] = xp.einsum("bnij,bnij->bn", GM, M0)
        dc[..., -1] = xp.einsum("bnij,bnij->bn", GM, S0)
        dge[..., -1] = xp.einsum("bnij,bnij->bn", GS, S0)
        dgr[..., :-1] -= (self.th * dRXM)[..., 1:]           # grp_i = gr_{i-1}
        dc[..., :-1] -= (self.th * dRXS)[..., 1:]            # cp_i = c_{i-1}
        # W = Er Ee, c = Er ge
        dW = xp.where(self.lower, dW, 0.0)
        dEr = xp.where(self.lower, dW @ _tr(self.Ee) + dc[..., :, None] * self.ge[..., None, :],
                       0.0)
        dEe = xp.where(self.lower, dEe + _tr(self.Er) @ dW, 0.0)
        dge += (_tr(self.Er) @ dc[..., None])[..., 0]
        dlogr = _log_gradient(dEr * self.Er, dgr * self.gr)
        dloge = _log_gradient(dEe * self.Ee, dge * self.ge)
        return {"alpha": -dlogr / self.r, "eta": dloge / self.eta, "theta": dtheta, "k": dK,
                "v": self.th[..., None] * dR}


def _thin(ch) -> bool:
    """Whether the state crosses a chunk faster through the two thin products ``(X P) Q``
    (``2 w C`` multiply-adds per state row) than through the dense map (``w^2``)."""
    return ch.P is not None and 2 * ch.P.shape[-1] < ch.P.shape[-2]


def _carry(ch, init, adds, ops, reverse: bool = False):
    """The state (the cotangent, if `reverse`) across chunks: for each chunk c in turn
    (descending if `reverse`) ``records[:, c] = X``, then ``X = X Lam_c + adds_c - (X P_c) Q_c``
    (``X Lam_c^T + adds_c - (X Q_c^T) P_c^T`` if `reverse`). Returns ``(records, final)``."""
    xp = array_module(adds)
    N = adds.shape[1]
    if ch.P is None:                                         # Hebbian: a scaling only
        return ops.carry(init, adds, scale=ch.gC, reverse=reverse)
    if not _thin(ch):
        w = ch.P.shape[-2]
        Phi = ch.mix(xp.eye(w, dtype=adds.dtype), slice(None)) - ch.P @ ch.Q
        return ops.carry(init, adds, P=Phi, transpose=reverse, reverse=reverse)
    left, right = (_tr(ch.Q), _tr(ch.P)) if reverse else (ch.P, ch.Q)
    records = xp.empty(adds.shape, adds.dtype)
    X = init
    for c in (range(N - 1, -1, -1) if reverse else range(N)):
        records[:, c] = X
        X = ch.mix(X, c, reverse) + adds[:, c] - (X @ left[:, c]) @ right[:, c]
    return records, X


class Saved(NamedTuple):
    """Residuals of a chunked run: the chunk quantities and the states at every boundary."""

    ch: object
    states: object        # [B, N + 1, d, w]: the joint state entering chunk 0..N-1, and the last


def forward(rule: str, b: Blocks, init: tuple, ops=NumpyOps):
    """The states at every chunk boundary: ``(states, saved)`` with ``states`` a tuple (one
    per state of the rule) of ``[B, N + 1, d, d]`` arrays, index c the state entering chunk c
    (N: the final state)."""
    xp = array_module(b.k)
    d = b.k.shape[-1]
    ch = _Titans(b, ops) if rule == "titans" else _DeltaHebbian(rule, b, ops)
    X0 = xp.concatenate(init, -1) if rule == "titans" else init[0]
    records, final = _carry(ch, X0, ch.adds, ops)
    states = xp.concatenate([records, final[:, None]], 1)
    split = (states[..., :d], states[..., d:]) if rule == "titans" else (states,)
    return split, Saved(ch, states)


def backward(saved: Saved, inject, final_s=None, ops=NumpyOps) -> dict:
    """Gradients of the chunk transitions, in block layout, given `inject` ``[B, N + 1, d, d]``:
    the cotangent arriving at each boundary state M from outside the recurrence (its reads,
    and at N the final state's cotangent), plus `final_s`, that of Titans' final S (or None).
    Returns ``{"k", "v", "alpha", "theta", "eta" (where the rule has them), "init": tuple}``."""
    xp = array_module(inject)
    ch, states = saved
    d = inject.shape[-1]
    N = inject.shape[1] - 1
    if isinstance(ch, _Titans):
        zero = xp.zeros_like(inject[:, :N])
        adds = xp.concatenate([inject[:, :N], zero], -1)
        last_s = xp.zeros_like(inject[:, N]) if final_s is None else final_s
        G = xp.concatenate([inject[:, N], xp.asarray(last_s, inject.dtype)], -1)
    else:
        adds, G = inject[:, :N], inject[:, N]
    ends, G = _carry(ch, G, adds, ops, reverse=True)
    g = ch.grads(states[:, :N], ends)
    g["init"] = (G[..., :d], G[..., d:]) if isinstance(ch, _Titans) else (G,)
    return g
