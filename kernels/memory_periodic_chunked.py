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

Each is ``X_C = X0 Lam + U^T Q`` with ``U = U0 - P^T X0^T``: a per-chunk scaling ``Lam`` and a
rank-C update (``P [w, C]``, ``Q [C, w]``, w the state width; Hebbian: ``U = V``). The state
crosses chunks in a Python loop of those two thin products per chunk; the reverse sweep carries
the state cotangent back the same way, adding at each boundary the cotangent of the reads of
that state, and then differentiates every chunk's transition in one batch. Gate gradients are
summed from span terms (`memory_chunked._log_gradient`), which keeps them accurate for small
retentions, and decay ratios over their own spans (`memory_chunked.span_decays`).

`kernels.memory_periodic` runs the sequential loop instead where `usable` or `growth` rule the
chunked form out (a retention that is not positive, a NaN or an inf among the inputs), and
re-runs a call with it when `forward` or `backward` report a result near overflow
(`_common.within_range`, as in `kernels.memory_chunked`) or `forward` a chunk transition that
cancels (`memory_chunk_precision.transitions_cancel`: the keys erase the state far faster than
the retention decays it, and ``Lam - P Q`` loses the small transition's relative precision) or
updates that cancel along their keys (`memory_chunk_precision.updates_cancel`: the tokens of a
chunk erase one direction while others only decay, and no value written keeps the chunk's
updates above that cancellation's error); it runs a float32 call in float64 where
`forward` reports transitions that grow against the decays
(`memory_chunk_precision.transitions_grow`) or, for the delta rule, triangular solves that sum
large terms of alternating signs (`memory_chunk_precision.solve_amplifies`).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tape.backend import array_module

from ._common import input_growth, max_abs, within_range
from . import memory_chunk_precision, memory_chunked_titans
from .memory_chunk_precision import (solve_amplifies, squared_norms, transitions_cancel,
                                     transitions_grow)
from .memory_chunked import (NumpyOps, _log_gradient, _tr, _triangles, normal_gates, row_dots,
                             shift_rows, span_decays)
from .memory_chunked_titans import _decays, _shift, transition_parts


# What `forward` returns as its residuals for a float32 call whose transitions grow against the
# decays (`memory_chunk_precision.transitions_grow`): the caller runs it in float64.
GROW = "grow"


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
    """Whether the chunked form applies: the retention (and Titans' momentum gate) finite and
    normal numbers (`memory_chunked.normal_gates`), so that its logarithm exists and the
    gradients formed through it keep their precision.

    >>> def gates(ret):
    ...     return Blocks(None, None, None, ret, None, None)
    >>> usable(gates(np.ones((1, 1, 2)))), usable(gates(np.zeros((1, 1, 2))))
    (True, False)
    """
    return normal_gates(array_module(b.ret), [a for a in (b.ret, b.eta) if a is not None])


def growth(b: Blocks, init: tuple) -> float:
    """`_common.input_growth` of the whole chunks' inputs: inf when one of them or an initial
    state holds a NaN or an inf (the chunked form is then not used).

    >>> ones = np.ones((1, 1, 2, 3))
    >>> growth(Blocks(ones, ones, ones, np.ones((1, 1, 2)), None, None), (np.eye(3)[None],))
    36.0
    """
    xp = array_module(b.k)
    if not all(bool(xp.all(xp.isfinite(m))) for m in init):
        return float("inf")
    return input_growth(xp, [b.k, b.v, b.q, b.th, b.eta], b.k.shape[-2], b.k.shape[-1])


class _DeltaHebbian:
    """Per-chunk quantities of the delta or Hebbian rule, all chunks at once."""

    def __init__(self, rule: str, b: Blocks, ops):
        xp = array_module(b.k)
        self.rule, self.K, self.V, self.r, self.th = rule, b.k, b.v, b.ret, b.th
        C = b.k.shape[-2]
        self.lower, self.strict = _triangles(xp, C)
        lr = xp.log(b.ret)
        l = xp.cumsum(lr, axis=-1)
        self.logs = (l,)          # for `decays_underflow`
        E = span_decays(lr, C)             # decay ratios summed over their own spans
        with np.errstate(under="ignore"):
            self.gC = xp.exp(l[..., -1])                                   # [B, N]
        self.D = E[..., -1, :]
        self.DK = self.Q = self.D[..., None] * b.k
        if rule == "hebbian":
            self.U0, self.P = b.v, None
            return
        with np.errstate(under="ignore"):
            self.gp = xp.exp(_shift(l, 0.0))
        self.Ep = shift_rows(E)
        self.A = self.Ep * (b.k @ _tr(b.k))
        self.T = ops.unit_lower_inverse(self.A, b.th)
        self.thgp = b.th * self.gp
        self.U0 = self.T @ (b.th[..., None] * b.v)
        self.W = self.T @ (self.thgp[..., None] * b.k)
        self.P = _tr(self.W)

    def mix(self, X, c, reverse: bool = False):
        """``X Lam`` (``X Lam^T`` if `reverse`) for chunk `c` (a slice or an index)."""
        gC = self.gC[:, c]
        return X * gC[..., None, None]

    def transition_parts(self) -> list:
        """The squared norm of ``Phi / gC``, ``Phi = gC I - P Q`` every chunk's transition, for
        `transitions_cancel` (none for the Hebbian rule, whose transition is the decay alone)."""
        if self.P is None:
            return []
        xp = array_module(self.K)
        eye = xp.eye(self.K.shape[-1], dtype=self.K.dtype)
        return [(squared_norms(self.gC[..., None, None] * eye - self.P @ self.Q, self.gC), 1.0)]

    def erased_tokens(self):
        """`memory_chunk_precision.erased_tokens` of every chunk's ``W`` (never for the Hebbian
        rule, whose updates do not depend on the state)."""
        return None if self.P is None else memory_chunk_precision.erased_tokens(
            self.W, self.th, self.gp, self.K)

    def updates_cancel(self, erased, X0, U) -> bool:
        """`memory_chunk_precision.updates_cancel` of the `erased` tokens, given the states
        entering the chunks `X0` and the updates `U` the carry made."""
        return memory_chunk_precision.updates_cancel(erased, self.th, self.gp, self.K, X0, U)

    def thin_transitions_grow(self) -> bool:
        """`memory_chunk_precision.thin_transitions_grow` of every chunk's transition (never for
        the Hebbian rule)."""
        return self.P is not None and memory_chunk_precision.thin_transitions_grow(
            self.W, self.DK, self.gC)

    def grads(self, M0, GC, U=None, dU=None):
        """Gradients of every chunk's transition given the states entering the chunks `M0`
        and the cotangents of the states leaving them `GC` (both ``[B, N, d, d]``), and the
        updates ``U`` and their cotangents ``dU = DK GC^T`` where the carry made them."""
        xp = array_module(M0)
        K, D = self.K, self.D
        C = K.shape[-2]
        pairs = xp.zeros(K.shape[:-1] + (C,), K.dtype)
        from0 = xp.zeros(K.shape[:-1], K.dtype)
        from0[..., -1] = self.gC * xp.einsum("bnij,bnij->bn", GC, M0)
        g = {}
        dU = self.DK @ _tr(GC) if dU is None else dU
        if self.rule == "hebbian":
            VG = self.V @ GC
            g["v"] = dU
            g["k"] = D[..., None] * VG
            pairs[..., -1, :] = D * row_dots(VG, K)
        else:
            U = self.U0 - self.W @ _tr(M0) if U is None else U
            UG = U @ GC
            dR = _tr(self.T) @ dU                          # U = T R
            dRM = dR @ M0
            dRX = row_dots(dRM, K)                 # dR_i . (M0 k_i)
            dL = -xp.where(self.strict, dR @ _tr(U), 0.0)
            dA = self.th[..., None] * dL
            dKK = dA * self.Ep
            g["v"] = self.th[..., None] * dR
            g["k"] = D[..., None] * UG + (dKK + _tr(dKK)) @ K - self.thgp[..., None] * dRM
            g["theta"] = (row_dots(dR, self.V) - self.gp * dRX
                          + row_dots(dL, self.A))
            pairs[..., -1, :] = D * row_dots(UG, K)
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
        lr, self.gr, self.Er = _decays(xp.log(b.ret))
        le, self.ge, self.Ee = _decays(xp.log(b.eta))
        self.logs = (lr, le)      # for `decays_underflow`
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
        self.coefs = tuple(a[..., -1] for a in (self.gr, self.c, self.ge))   # grC, cC, geC

    def mix(self, X, c, reverse: bool = False):
        """``X Lam`` (``X Lam^T`` if `reverse`), ``Lam = [[grC I, 0], [cC I, geC I]]``."""
        xp = array_module(X)
        grC, cC, geC = (a[:, c][..., None, None] for a in self.coefs)
        M, S = X[..., :self.d], X[..., self.d:]
        if reverse:
            return xp.concatenate([grC * M, cC * M + geC * S], -1)
        return xp.concatenate([grC * M + cC * S, geC * S], -1)

    def transition_parts(self) -> list:
        """`memory_chunked_titans.transition_parts` of ``Phi = Lam - P Q``."""
        xp = array_module(self.K)
        d = self.d
        grC, cC, geC = self.coefs
        Phi = -(self.P @ self.Q)
        eye = xp.eye(d, dtype=Phi.dtype)
        Phi[..., :d, :d] += grC[..., None, None] * eye
        Phi[..., d:, :d] += cC[..., None, None] * eye
        Phi[..., d:, d:] += geC[..., None, None] * eye
        return transition_parts(Phi, grC, cC, geC)

    def erased_tokens(self):
        """`memory_chunk_precision.erased_tokens` of the M0 half of every chunk's ``[WM WS]``."""
        return memory_chunk_precision.erased_tokens(_tr(self.P)[..., :self.d], self.th,
                                                    self.grp, self.K)

    def updates_cancel(self, erased, X0, U) -> bool:
        """`memory_chunk_precision.updates_cancel` of the `erased` tokens, given the joint
        states entering the chunks `X0` (their M half) and the updates `U` the carry made."""
        return memory_chunk_precision.updates_cancel(erased, self.th, self.grp, self.K,
                                                     X0[..., :self.d], U)

    def thin_transitions_grow(self) -> bool:
        """`memory_chunked_titans.thin_transitions_grow` of every chunk's transition."""
        return memory_chunked_titans.thin_transitions_grow(
            _tr(self.P), self.K, self.KK, self.W[..., -1, :], self.Ee[..., -1, :], *self.coefs)

    def grads(self, X0, G, U=None, dU=None):
        """Gradients of every chunk's transition given the joint states entering the chunks
        `X0` and the cotangents of those leaving them `G` (``[B, N, d, 2d]``), and the updates
        ``U`` and ``dU = [DWK DeK] G^T`` where the carry made them; the Titans backward of
        `kernels.memory_chunked_titans` without the reads inside a chunk."""
        xp = array_module(X0)
        d, K = self.d, self.K
        M0, S0, GM, GS = X0[..., :d], X0[..., d:], G[..., :d], G[..., d:]
        U = self.U0 - _tr(self.P) @ _tr(X0) if U is None else U
        UGM, UGS = U @ GM, U @ GS
        dR = _tr(self.T) @ (self.Q @ _tr(G) if dU is None else dU)
        dL = -xp.where(self.strict, dR @ _tr(U), 0.0)
        dA = self.th[..., None] * dL
        dKK = dA * self.Wp
        dRM, dRS = dR @ M0, dR @ S0
        dRXM, dRXS = row_dots(dRM, K), row_dots(dRS, K)
        thgrp, thcp = self.th * self.grp, self.th * self.cp
        dK = (self.W[..., -1, :, None] * UGM + self.Ee[..., -1, :, None] * UGS
              + (dKK + _tr(dKK)) @ K - thgrp[..., None] * dRM - thcp[..., None] * dRS)
        dtheta = (row_dots(dR, self.V) - self.grp * dRXM - self.cp * dRXS
                  + row_dots(dL, self.A))
        dW = dA * self.KK                                    # through Wp_ij = W_{i-1, j}
        dW = xp.concatenate([dW[..., 1:, :], row_dots(UGM, K)[..., None, :]], -2)
        dEe = xp.zeros_like(self.Ee)
        dEe[..., -1, :] = row_dots(UGS, K)
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


def _carry(ch, init, states):
    """Fill ``states [B, N + 1, d, w]`` with the state entering each chunk and the last one:
    ``X_{c+1} = X_c Lam_c + U_c^T Q_c`` with the updates ``U_c = U0_c - P_c^T X_c^T`` (two thin
    products per chunk; measured no slower than the dense ``[w, w]`` map even at ``C = w``,
    and they leave ``U`` for the backward). Returns ``U``, or None for the Hebbian rule, whose
    updates do not depend on the state."""
    xp = array_module(states)
    N = states.shape[1] - 1
    states[:, 0] = init
    if ch.P is None:
        adds = _tr(ch.U0) @ ch.Q
        for c in range(N):
            states[:, c + 1] = ch.mix(states[:, c], c) + adds[:, c]
        return None
    U, Pt = xp.empty_like(ch.U0), _tr(ch.P)
    for c in range(N):
        X = states[:, c]
        xp.subtract(ch.U0[:, c], Pt[:, c] @ _tr(X), out=U[:, c])
        states[:, c + 1] = ch.mix(X, c) + _tr(U[:, c]) @ ch.Q[:, c]
    return U


def _carry_back(ch, G, inject, ends):
    """The reverse sweep: from `G`, the cotangent of the last state, fill ``ends[:, c]`` with
    that of the state leaving chunk c, adding at each boundary the cotangent `inject` of the
    reads of its M: ``G_c = G_{c+1} Lam_c^T - dU_c^T P_c^T + inject_c`` with
    ``dU_c = Q_c G_{c+1}^T``. Returns ``(G_0, dU)`` (dU None for the Hebbian rule)."""
    xp = array_module(G)
    N, d = ends.shape[1], inject.shape[-1]
    dU = None if ch.P is None else xp.empty_like(ch.U0)
    Pt = None if ch.P is None else _tr(ch.P)
    for c in range(N - 1, -1, -1):
        ends[:, c] = G
        if dU is None:
            G = ch.mix(G, c, reverse=True)
        else:
            xp.matmul(ch.Q[:, c], _tr(G), out=dU[:, c])
            G = ch.mix(G, c, reverse=True) - _tr(dU[:, c]) @ Pt[:, c]
        G[..., :d] += inject[:, c]
    return G, dU


class Saved(NamedTuple):
    """Residuals of a chunked run: the chunk quantities, the states at every boundary and the
    updates (None where the carry did not make them)."""

    ch: object
    states: object        # [B, N + 1, d, w]: the joint state entering chunk 0..N-1, and the last
    U: object


def forward(rule: str, b: Blocks, init: tuple, ops=NumpyOps, grow: float = 1.0):
    """The states at every chunk boundary: ``(states, saved)`` with ``states`` a tuple (one
    per state of the rule) of ``[B, N + 1, d, d]`` arrays, index c the state entering chunk c
    (N: the final state); ``(None, None)`` when they come near overflow for the input growth
    `grow` (`growth`), or when a chunk's transition cancels (`transitions_cancel`; never with
    fewer tokens than d) or a token's updates cancel (`updates_cancel`, any chunk length, after
    the carry): the caller then runs the sequential loop; ``(None, GROW)`` for a float32 call to
    run in float64 (`transitions_grow`; with fewer tokens than d, where the transitions are not
    formed, `thin_transitions_grow`; for the delta rule also `solve_amplifies`)."""
    xp = array_module(b.k)
    B, N, C, d = b.k.shape
    ch = _Titans(b, ops) if rule == "titans" else _DeltaHebbian(rule, b, ops)
    if C >= d:
        parts = ch.transition_parts()
        if transitions_cancel(parts):
            return None, None
        if transitions_grow(parts[:3], d):      # Titans: not S_C's columns (as per token)
            return None, GROW
    elif ch.thin_transitions_grow():
        return None, GROW
    erased = ch.erased_tokens()
    if rule == "delta" and solve_amplifies(ch.T, ch.th, ch.K):
        return None, GROW
    X0 = xp.concatenate(init, -1) if rule == "titans" else init[0]
    states = xp.empty((B, N + 1) + X0.shape[1:], X0.dtype)
    U = _carry(ch, X0, states)
    if erased is not None and ch.updates_cancel(erased, states[:, :N], U):
        return None, None
    if memory_chunk_precision.decays_underflow(ch.logs, states[:, :N], states[:, 1:]):
        return None, None
    if not within_range(xp, (states, ch.U0, ch.P, U), grow, X0.dtype):
        return None, None
    split = (states[..., :d], states[..., d:]) if rule == "titans" else (states,)
    return split, Saved(ch, states, U)


def backward(saved: Saved, inject, final_s=None, grow: float = 1.0):
    """Gradients of the chunk transitions, in block layout, given `inject` ``[B, N + 1, d, d]``:
    the cotangent arriving at each boundary state M from outside the recurrence (its reads,
    and at N the final state's cotangent), plus `final_s`, that of Titans' final S (or None).
    Returns ``{"k", "v", "alpha", "theta", "eta" (where the rule has them), "init": tuple}``,
    or None when they come near overflow (see `forward`)."""
    xp = array_module(inject)
    ch, states, U = saved
    d = inject.shape[-1]
    N = inject.shape[1] - 1
    G = inject[:, N]
    if isinstance(ch, _Titans):
        last_s = xp.zeros_like(G) if final_s is None else xp.asarray(final_s, G.dtype)
        G = xp.concatenate([G, last_s], -1)
    ends = xp.empty(states[:, :N].shape, states.dtype)
    G, dU = _carry_back(ch, xp.array(G, copy=True), inject, ends)
    g = ch.grads(states[:, :N], ends, U, dU)
    if not within_range(xp, [G, ends, dU] + list(g.values()),
                        grow * max(1.0, max_abs(xp, states)), inject.dtype):
        return None
    g["init"] = (G[..., :d], G[..., d:]) if isinstance(ch, _Titans) else (G,)
    return g
