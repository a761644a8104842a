"""Chunkwise-parallel form of the Titans memory (NumPy), forward and backward.

Titans keeps two states: ``S_i = eta_i S_{i-1} + u_i k_i^T``, ``M_i = r_i M_{i-1} + S_i`` with
``u_i = -theta_i e_i = theta_i (v_i - M_{i-1} k_i)``. Inside a chunk (notation of
`kernels.memory_chunked`, with ``lr, le`` the cumulative log decays of ``r`` and ``eta``,
``Er_il = exp(lr_i - lr_l)``, ``Ee_lj = exp(le_l - le_j)``, ``gr = exp(lr)``, ``ge = exp(le)``)::

    S_i = ge_i S0 + sum_{j<=i} Ee_ij u_j k_j^T
    M_i = gr_i M0 + c_i S0 + sum_{j<=i} W_ij u_j k_j^T,   W = Er Ee,  c = Er ge

The updates solve the unit lower-triangular system ``(I + diag(theta) A) U = R`` with
``A_ij = W_{i-1,j} k_i . k_j`` (j < i) and ``R = theta * (V - gr_{i-1} K M0^T - c_{i-1} K S0^T)``,
i.e. ``U = U0 - Wms [M0 S0]^T`` with ``U0 = T (theta * V)`` and ``Wms = T (theta * [gr_{i-1} K,
c_{i-1} K])``. The pair ``X = [M0 S0]`` crosses a chunk as::

    X_C = [gr_C M0 + c_C S0, ge_C S0] + U^T Dk,   Dk = [W_{C-1,j} k_j, Ee_{C-1,j} k_j]

and the outputs are ``Y = Qg X^T + (W * Q K^T) U`` with ``Qg = [gr * Q, c * Q]``. On NumPy,
for d > C, the carry is a loop over chunks of two ``[C, 2d]``-sized products (``U``, then
``U^T Dk``): ``O(C d^2)`` per chunk, where multiplying by the chunk's ``[2d, 2d]`` transition
matrix costs ``O(d^3)`` and forming it ``O(C d^2)`` more. For d <= C, and for an `ops` object
with its own carry (the CUDA kernels of `kernels.cuda_memory_chunked`, one launch per sweep),
the pair goes through those matrices instead (`_by_transition`).
The backward differentiates the chunk function by hand; the gate gradients go through
``W = Er Ee`` and ``c = Er ge`` to terms that each span one range of tokens (see
`memory_chunked`). Decay ratios are summed over their own spans (`memory_chunked.span_decays`),
and calls fall back to the sequential reference as in `memory_chunked` (its module docstring),
a chunk transition that cancels included (`transition_parts`), and updates that cancel along
their keys in a chunk whose updates are all that small (`memory_chunk_precision.updates_cancel`,
after the carry); float32 calls whose transitions grow
against the decays run in float64 (`memory_chunk_precision.transitions_grow`).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from tape.backend import array_module

from . import memory_ref as ref
from . import memory_chunked
from ._common import max_abs, within_range
from .memory_chunk_precision import (decays_underflow, erased_tokens, growth_limit,
                                     transitions_cancel, transitions_grow, updates_cancel)
from .memory_chunked import (NumpyOps, Promoted, Saved, _blocks, _log_gradient, _tr, leaving,
                             _triangles, _unblocks, growth, normal_gates, promoted_backward,
                             promoted_forward, row_dots, sequential_backward,
                             sequential_forward, shift_rows, span_decays)


def usable(x: ref.Seq) -> bool:
    """Whether the chunked form applies: a non-empty sequence whose retention and momentum
    decay are finite and normal numbers (`memory_chunked.normal_gates`: the gradients are
    formed as ``d log eta / eta``, which a subnormal eta makes imprecise)."""
    return x.k.shape[0] > 0 and normal_gates(array_module(x.ret), (x.ret, x.eta))


def _decays(lg):
    """log decays ``[..., C]`` -> (l, g, E): the cumulative sums ``l``, ``g_i = exp(l_i)`` and
    ``E_ij = exp(l_i - l_j)`` for j <= i, summed over its own span (`span_decays`)."""
    xp = array_module(lg)
    l = xp.cumsum(lg, axis=-1)
    with np.errstate(under="ignore"):
        return l, xp.exp(l), span_decays(lg, lg.shape[-1])


def _shift(a, first):
    """a_{i-1} along the last axis (a_{-1} = first)."""
    xp = array_module(a)
    return xp.concatenate([xp.full(a[..., :1].shape, first, a.dtype), a[..., :-1]], axis=-1)


def transition_parts(Phi, grC, cC, geC) -> list:
    """The parts of the pair's transitions ``Phi [B, N, 2d, 2d]`` (``[M_C S_C] = [M0 S0] Phi +
    ...``) that `memory_chunk_precision.transitions_cancel` checks, each with the 2-norm of the
    decays it holds (``grC, cC, geC [B, N]``: ``Phi`` without updates is
    ``[[grC I, 0], [cC I, geC I]]``): the rows of M0 and of S0 (their cotangents), the columns
    of M_C and of S_C (the states). Titans' S0 reaches the outputs only through small terms,
    so each part is checked on its own scale. One pass over ``Phi``: its four blocks' squared
    norms, divided by the chunk's largest decay.

    >>> I, Z = np.eye(2), np.zeros((2, 2))
    >>> Phi = np.block([[0.5 * I, Z], [0.1 * I, 0.25 * I]])[None, None]
    >>> one = lambda a: np.full((1, 1), a)
    >>> transitions_cancel(transition_parts(Phi, one(0.5), one(0.1), one(0.25)))
    False
    >>> transitions_cancel(transition_parts(Phi * 1e-6, one(0.5), one(0.1), one(0.25)))
    True
    """
    xp = array_module(Phi)
    B, N, w = Phi.shape[:3]
    d = w // 2
    scale = xp.maximum(xp.maximum(grC, cC), geC)
    with np.errstate(all="ignore"):      # a scale of 0 (underflow) gives NaN: no cancellation
        squares = Phi / scale[..., None, None]
        squares *= squares
        q = xp.sum(xp.reshape(xp.sum(xp.reshape(squares, (B, N, w, 2, d)), axis=-1),
                              (B, N, 2, d, 2)), axis=-2)                    # [B, N, 2, 2]
        return [(q[..., 0, 0] + q[..., 0, 1], grC / scale),
                (q[..., 1, 0] + q[..., 1, 1], xp.hypot(cC, geC) / scale),
                (q[..., 0, 0] + q[..., 1, 0], xp.hypot(grC, cC) / scale),
                (q[..., 0, 1] + q[..., 1, 1], geC / scale)]


def thin_transitions_grow(Wms, K, KK, w_last, e_last, grC, cC, geC) -> bool:
    """`memory_chunk_precision.transitions_grow` of the pair's transitions ``Phi = Lam - Wms^T
    Dk`` on the parts that `transition_parts` gives it (M0's rows, S0's rows, M_C's columns),
    without forming ``Phi`` (``O(C d^2)`` per chunk), for chunks of fewer tokens than d, where
    the forward run does not form it. ``Wms [B, N, C, 2d]``; ``Dk = [w_last * K, e_last * K]``
    from the keys ``K [B, N, C, d]``, their products ``KK = K K^T`` and ``w_last, e_last [B, N,
    C]``; ``Lam = [[grC I, 0], [cC I, geC I]]`` (decays ``[B, N]``). Over a part's blocks
    ``Lam_ab I - Wa^T Db`` (``Wa, Db`` the halves), ``|Phi|_F^2 - |Lam|_F^2 = sum |Wa^T Db|_F^2
    - 2 Lam_ab <Wa, Db>``, with ``|Wa^T Db|_F^2 = <Wa Wa^T, Db Db^T>`` from ``[C, C]`` Gram
    matrices (``O(C^2 d)``). Float32 only.

    >>> one = np.ones((1, 1), np.float32)
    >>> K = np.zeros((1, 1, 2, 2), np.float32); K[..., 0, 0] = 1.0
    >>> Wms = np.zeros((1, 1, 2, 4), np.float32); Wms[..., 0, 0] = 2.0
    >>> grows = lambda Wms: thin_transitions_grow(Wms, K, K @ K.swapaxes(-1, -2), one[..., None]
    ...                                           * [1, 0], 0 * K[..., 0], one, 0 * one, one)
    >>> grows(Wms)                                  # M0's rows: diag(-1, 1)
    False
    >>> grows(9 * Wms / 2)                          # diag(-8, 1)
    True
    """
    if Wms.dtype != np.float32:
        return False
    xp = array_module(Wms)
    d = Wms.shape[-1] // 2
    WM, WS = Wms[..., :d], Wms[..., d:]

    def quad(G, u, v):                                 # u^T G v per chunk
        return xp.sum((G @ v[..., None])[..., 0] * u, axis=-1)
    with np.errstate(all="ignore"):
        xM, xS = ((a @ _tr(a)) * KK for a in (WM, WS))           # (Wa Wa^T) * K K^T
        cMM, cMS = quad(xM, w_last, w_last), quad(xM, e_last, e_last)     # |Wa^T Db|_F^2
        cSM, cSS = quad(xS, w_last, w_last), quad(xS, e_last, e_last)
        pM, pS = (xp.einsum("bnci,bnci->bnc", a, K) for a in (WM, WS))
        tMM, tSM, tSS = (row_dots(a, b) for a, b in ((pM, w_last), (pS, w_last),
                                                      (pS, e_last)))   # <Wa, Db>
        extra = growth_limit(d) - d
        # |part|_F^2 less d |decays|^2, against `extra` |decays|^2 (NaN: no growth)
        grows = ((cMM + cMS - 2 * grC * tMM > extra * grC * grC)                       # M0's rows
                 | (cSM + cSS - 2 * (cC * tSM + geC * tSS) > extra * (cC * cC + geC * geC))
                 | (cMM + cSM - 2 * (grC * tMM + cC * tSM) > extra * (grC * grC + cC * cC)))
        return bool(xp.any(grows))


def _by_transition(ops, C: int, d: int) -> bool:
    """Whether the pair crosses chunks through the ``[2d, 2d]`` transition matrices rather than
    through the updates: always for an `ops` with its own carry (one launch per sweep), and on
    NumPy where ``d <= C``: there the product with the transition (``8 d^3`` per chunk) costs no
    more than the two through the updates (``8 C d^2``) and takes fewer calls per chunk.
    Measured (float32, forward plus reverse, chunks of `chunk_size(d)`): at d = 16 the
    transition is 1.2x to 1.3x faster on one sequence of 1024 to 4096 tokens, at d = 64 the
    updates are 1.25x to 1.4x faster.

    >>> _by_transition(NumpyOps, 16, 16), _by_transition(NumpyOps, 32, 64)
    (True, False)
    """
    return ops is not NumpyOps or d <= C


class _Chunks:
    """Per-chunk quantities of one span of equal chunks (shapes ``[B, N, C, ...]``); pairs
    ``[M-part S-part]`` share one array along the last axis, with views for each half."""

    def __init__(self, x: ref.Seq, C: int, ops):
        xp = array_module(x.k)
        s = x.k.shape[0]
        self.C, self.ops = C, ops
        self.K, self.V, self.Q = (_blocks(a, s, C) for a in (x.k, x.v, x.q))
        self.r = _blocks(x.ret[..., 0], s, C, 1.0)
        self.eta = _blocks(x.eta[..., 0], s, C, 1.0)
        self.th = _blocks(x.th[..., 0], s, C)
        self.lower, self.strict = _triangles(xp, C)
        d = self.K.shape[-1]
        lr, self.gr, self.Er = _decays(xp.log(self.r))
        le, self.ge, self.Ee = _decays(xp.log(self.eta))
        self.logs = (lr, le)      # for `decays_underflow`
        self.W = self.Er @ self.Ee
        self.c = (self.Er @ self.ge[..., None])[..., 0]
        self.grp, self.cp = _shift(self.gr, 1.0), _shift(self.c, 0.0)
        self.KK = self.K @ _tr(self.K)
        self.QK = self.Q @ _tr(self.K)
        self.T = ops.unit_lower_inverse(self.shifted_w() * self.KK, self.th)
        self.U0 = self.T @ (self.th[..., None] * self.V)
        thK = self.th[..., None] * self.K
        # [Qg; Wms] stacked along the tokens (views of one array): the reverse carry on NumPy
        # takes both in one product
        self.QW = xp.empty(self.K.shape[:2] + (2 * C, 2 * d), self.K.dtype)
        self.Qg, self.Wms = self.QW[..., :C, :], self.QW[..., C:, :]
        for half, g, gp in zip((slice(None, d), slice(d, None)), (self.gr, self.c),
                               (self.grp, self.cp)):
            xp.multiply(g[..., None], self.Q, out=self.Qg[..., half])
            xp.multiply(gp[..., None], thK, out=self.Wms[..., half])
        self.Wms[...] = self.T @ self.Wms
        self.Pm, self.Dk = self.W * self.QK, self.decayed_keys()
        # the chunk's last decays: c_C [B, N, 1, 1] and the row [gr_C ... ge_C ...] [B, N, 1, 2d]
        self.grC, self.cC, self.geC = (a[..., -1, None, None] for a in (self.gr, self.c, self.ge))
        self.decay_row = xp.concatenate([xp.broadcast_to(a, a.shape[:-1] + (d,))
                                         for a in (self.grC, self.geC)], -1)
        self.Phi = self._transition() if _by_transition(ops, C, d) else None
        self.U = None               # the updates, set by the forward run
        self.erased = None          # the tokens whose updates cancel (`transition_check`)

    def transition_check(self) -> Optional[str]:
        """``"cancel"`` where a chunk's transition lost its relative precision to cancellation
        (`memory_chunk_precision.transitions_cancel`; never with fewer tokens than d),
        ``"grow"`` where a float32 call should run in float64
        (`memory_chunk_precision.transitions_grow`, on the parts of M0's rows and S0's rows and
        M_C's columns: S_C's columns against the momentum's decay alone are far above it for
        ordinary gates; with fewer tokens than d, where the transition is not formed on NumPy,
        by `thin_transitions_grow`), else None. Keeps in ``erased`` the tokens whose updates
        cancel along their keys (`memory_chunk_precision.erased_tokens` of the M0 half of
        ``Wms``, chunks of any length) for `updates_cancel` after the carry."""
        C, d = self.K.shape[-2:]
        decays = tuple(a[..., 0, 0] for a in (self.grC, self.cC, self.geC))
        if C < d and self.Phi is None:
            grow = thin_transitions_grow(self.Wms, self.K, self.KK, self.W[..., -1, :],
                                         self.Ee[..., -1, :], *decays)
        else:
            Phi = self._transition() if self.Phi is None else self.Phi
            parts = transition_parts(Phi, *decays)
            if C >= d and transitions_cancel(parts):
                return "cancel"
            grow = transitions_grow(parts[:3], d)
        self.erased = erased_tokens(self.Wms[..., :d], self.th, self.grp, self.K)
        return "grow" if grow else None

    def updates_cancel(self, starts) -> bool:
        """`memory_chunk_precision.updates_cancel` of the tokens `transition_check` found
        erased, given the pairs entering the chunks `starts` (their M0 half) and the updates
        ``U`` the carry made."""
        d = self.K.shape[-1]
        return updates_cancel(self.erased, self.th, self.grp, self.K, starts[..., :d], self.U)

    def shifted_w(self):
        """``Wp_ij = W_{i-1, j}``: 0 for j >= i, as W is lower triangular."""
        return shift_rows(self.W)

    def decayed_keys(self):
        """``Dk = [W_{C-1, j} k_j, Ee_{C-1, j} k_j]`` ``[B, N, C, 2d]``."""
        xp = array_module(self.K)
        return xp.concatenate([self.W[..., -1, :, None] * self.K,
                               self.Ee[..., -1, :, None] * self.K], -1)

    def release(self):
        """Drop what only the forward needs or the backward recomputes at little cost: the
        residuals' memory is touched afresh by every call."""
        self.U0 = self.Pm = self.Dk = self.logs = None

    def _transition(self):
        """``Phi [B, N, 2d, 2d]`` with ``[M_C S_C] = [M0 S0] Phi + U0^T Dk``, for an `ops`
        whose carry multiplies by it."""
        xp = array_module(self.K)
        d = self.K.shape[-1]
        eye = xp.eye(d, dtype=self.K.dtype)
        zero = xp.zeros(self.grC.shape[:-2] + (d, d), self.K.dtype)
        decay = xp.concatenate([xp.concatenate([self.grC * eye, zero], -1),
                                xp.concatenate([self.cC * eye, self.geC * eye], -1)], -2)
        return decay - _tr(self.Wms) @ self.Dk

    def carry(self, X):
        """``(starts [B, N, d, 2d], U [B, N, C, d], final)``: the pair entering every chunk,
        the chunk's updates and the pair leaving the last chunk."""
        if self.Phi is not None:
            starts, X = self.ops.carry(X, _tr(self.U0) @ self.Dk, P=self.Phi)
            return starts, self.U0 - self.Wms @ _tr(starts), X
        xp = array_module(X)
        B, N, C, d = self.K.shape
        states = xp.empty((B, N + 1, d, 2 * d), X.dtype)
        U = xp.empty_like(self.U0)
        states[:, 0] = X
        for n in range(N):
            X, nxt, u = states[:, n], states[:, n + 1], U[:, n]
            xp.matmul(self.Wms[:, n], _tr(X), out=u)
            xp.subtract(self.U0[:, n], u, out=u)
            xp.matmul(_tr(u), self.Dk[:, n], out=nxt)
            nxt += X * self.decay_row[:, n]                 # [gr_C M0, ge_C S0]
            nxt[..., :d] += self.cC[:, n] * X[..., d:]       # + c_C S0
        return states[:, :N], U, states[:, N]

    def carry_back(self, G, dY):
        """``(ends [B, N, d, 2d], dU [B, N, C, d], first)``: the cotangent of the pair leaving
        every chunk, that of the chunk's updates and the cotangent entering the first chunk."""
        Pm, Dk = self.W * self.QK, self.decayed_keys()
        if self.Phi is not None:
            ends, G = self.ops.carry(G, _tr(dY) @ (self.Qg - Pm @ self.Wms), P=self.Phi,
                                     transpose=True, reverse=True)
            return ends, _tr(Pm) @ dY + Dk @ _tr(ends), G
        xp = array_module(G)
        B, N, C, d = self.K.shape
        cts = xp.empty((B, N + 1, d, 2 * d), G.dtype)
        cts[:, N] = G
        # per chunk [dY; -dU] against [Qg; Wms]: G_prev = dY^T Qg - dU^T Wms + decays
        Z = xp.empty((B, N, 2 * C, d), G.dtype)
        Z[..., :C, :] = dY
        ndU = xp.matmul(_tr(Pm), dY, out=Z[..., C:, :])
        xp.negative(ndU, out=ndU)
        del Pm
        for n in range(N - 1, -1, -1):
            G, prev, nd = cts[:, n + 1], cts[:, n], ndU[:, n]
            nd -= Dk[:, n] @ _tr(G)
            xp.matmul(_tr(Z[:, n]), self.QW[:, n], out=prev)
            prev += G * self.decay_row[:, n]                # [gr_C GM, ge_C GS]
            prev[..., d:] += self.cC[:, n] * G[..., :d]      # + c_C GM
        return cts[:, 1:], xp.negative(ndU), cts[:, 0].copy()


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
        check = ch.transition_check()
        if check == "cancel":
            return sequential_forward(spec, x, init, checkpoint_every, C)
        if check == "grow":
            return promoted_forward(forward, spec, x, init, checkpoint_every, C, grow, ops)
        starts, ch.U, MS = ch.carry(MS)
        if ch.updates_cancel(starts):
            return sequential_forward(spec, x, init, checkpoint_every, C)
        Y = ch.Qg @ _tr(starts) + ch.Pm @ ch.U
        if decays_underflow(ch.logs, starts, leaving(starts, MS), Y):
            return sequential_forward(spec, x, init, checkpoint_every, C)
        ys.append(_unblocks(Y, t1 - t0))
        all_starts.append(starts)
        all_chunks.append(ch)
    y = ys[0] if len(ys) == 1 else xp.concatenate(ys, 0)
    made = [y, MS] + all_starts + [a for ch in all_chunks for a in (ch.U0, ch.Wms)]
    if not within_range(xp, made, grow, x.k.dtype):
        return sequential_forward(spec, x, init, checkpoint_every, C)
    for ch in all_chunks:
        ch.release()
    finals = (xp.ascontiguousarray(MS[..., :d]), xp.ascontiguousarray(MS[..., d:]))
    return y, finals, Saved(x, C, all_starts, all_chunks, tuple(init), grow)


def backward(spec: ref.Rule, saved, dy, dfinals: tuple, need: frozenset):
    """Gradients of a chunked Titans run, in the format of `memory_ref.backward`."""
    if isinstance(saved, ref.Saved):
        return ref.backward(spec, saved, dy, dfinals, need)
    if isinstance(saved, Promoted):
        return promoted_backward(backward, spec, saved, dy, dfinals, need)
    x, C, all_starts, all_chunks = saved[:4]
    xp = array_module(x.k)
    s, B, d = x.k.shape
    G = xp.concatenate([xp.zeros((B, d, d), x.k.dtype) if g is None else
                        xp.asarray(g, x.k.dtype) for g in dfinals], -1)
    parts, made = [], [G]
    for (t0, t1, _), starts, ch in reversed(list(zip(_parts(s, C), all_starts, all_chunks))):
        dy_part = None if dy is None else dy[t0:t1]
        g, G, ends_range = _backward_part(ch, starts, dy_part, G, t1 - t0)
        parts.insert(0, g)
        made += [ends_range, G] + list(g.values())
    scale = max([1.0] + [max_abs(xp, a) for a in all_starts])
    if not within_range(xp, made, saved.growth * scale, x.k.dtype):
        return sequential_backward(spec, saved, dy, dfinals, need)
    g = {n: parts[0][n] if len(parts) == 1 else xp.concatenate([p[n] for p in parts], 0)
         for n in ("alpha", "eta", "theta", "k", "v", "q")}
    g["q"] = g["q"] if "q" in need else None
    g["init"] = (xp.ascontiguousarray(G[..., :d]), xp.ascontiguousarray(G[..., d:]))
    return g


def _backward_part(ch: _Chunks, starts, dy, G, s: int):
    """One span of equal chunks: its time-major gradients, the cotangent entering it and the
    extremes of the cotangents leaving its chunks (for the range check). The largest
    temporaries are released as soon as they are used: the peak of the forward's residuals plus
    the backward's temporaries is memory the next call touches afresh."""
    xp = array_module(ch.K)
    C, d = ch.C, ch.K.shape[-1]
    dY = xp.zeros_like(ch.Q) if dy is None else _blocks(dy, s, C)
    ends, dU, G = ch.carry_back(G, dY)
    ends_range = (xp.stack([xp.max(ends), xp.min(ends)]) if ends.size else
                  xp.zeros(2, ends.dtype))   # (an empty batch)
    M0, S0 = starts[..., :d], starts[..., d:]
    dgr_end = xp.einsum("bnij,bnij->bn", ends[..., :d], M0)
    dc_end = xp.einsum("bnij,bnij->bn", ends[..., :d], S0)
    dge_end = xp.einsum("bnij,bnij->bn", ends[..., d:], S0)
    U = ch.U
    UG = U @ ends                                       # [U GM, U GS]
    del ends
    UGM, UGS = UG[..., :d], UG[..., d:]
    dK = ch.W[..., -1, :, None] * UGM
    dK += ch.Ee[..., -1, :, None] * UGS
    dW_end = row_dots(UGM, ch.K)
    dEe_end = row_dots(UGS, ch.K)
    del UG, UGM, UGS
    dPm = xp.where(ch.lower, dY @ _tr(U), 0.0)
    dW = dPm * ch.QK
    dQK = dPm * ch.W
    del dPm
    dYX = dY @ starts                                   # [dY M0, dY S0]
    dYM, dYS = dYX[..., :d], dYX[..., d:]
    dQ = ch.gr[..., None] * dYM
    dQ += ch.c[..., None] * dYS
    dQ += dQK @ ch.K
    dK += _tr(dQK) @ ch.Q
    dgr = row_dots(dYM, ch.Q)
    dc = row_dots(dYS, ch.Q)
    del dYX, dYM, dYS, dQK
    dge = xp.zeros_like(dgr)
    dEe = xp.zeros_like(ch.Ee)
    dgr[..., -1] += dgr_end
    dc[..., -1] += dc_end
    dge[..., -1] += dge_end
    dW[..., -1, :] += dW_end
    dEe[..., -1, :] += dEe_end
    dR = _tr(ch.T) @ dU
    del dU
    dL = -xp.where(ch.strict, dR @ _tr(U), 0.0)
    dA = ch.th[..., None] * dL
    dLK = dL * ch.KK
    Wp = ch.shifted_w()
    dWp = ch.th[..., None] * dLK                        # dA * KK
    dKK = dA * Wp
    dRX = dR @ starts                                   # [dR M0, dR S0]
    dRM, dRS = dRX[..., :d], dRX[..., d:]
    dRXM, dRXS = row_dots(dRM, ch.K), row_dots(dRS, ch.K)
    thgrp, thcp = ch.th * ch.grp, ch.th * ch.cp
    dK -= thgrp[..., None] * dRM
    dK -= thcp[..., None] * dRS
    del dRX, dRM, dRS
    dKK += _tr(dKK)
    dK += dKK @ ch.K
    del dKK
    dV = ch.th[..., None] * dR
    dtheta = (row_dots(dR, ch.V) - ch.grp * dRXM - ch.cp * dRXS
              + row_dots(dLK, Wp))                # dL . A, A = Wp * KK
    del dR, dL, dA, dLK, Wp
    # the shifted copies: Wp_ij = W_{i-1,j}, grp_i = gr_{i-1}, cp_i = c_{i-1}
    dW[..., :-1, :] += dWp[..., 1:, :]
    del dWp
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
    return {n: _unblocks(a, s) for n, a in g.items()}, G, ends_range
