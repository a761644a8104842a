"""Chunkwise-parallel forms of the delta and Hebbian memories (NumPy), forward and backward;
Titans is in `kernels.memory_chunked_titans`, which shares the helpers here.

The sequence is cut into chunks of C tokens (the last one padded with identity tokens:
``k = v = q = 0``, ``r = 1``, ``theta = 0``). Inside a chunk everything is a batch of matrix
products over all chunks at once; only the carried state crosses chunks, in a Python loop of
one ``[d, d] @ [d, d]`` product per chunk (forward and reverse). The results equal the
sequential recurrence of `kernels.memory_ref` up to rounding.

The code is written against the arrays' own module (NumPy, or CuPy, where every batched
product is one cuBLAS call over batch x chunks). Its two sequential parts, the triangular
inverse of each chunk and the state carried across chunks, go through an `ops` object:
`NumpyOps` below (blocked inverse, a Python loop of one batched product per chunk) or the
custom CUDA kernels of `kernels.cuda_memory_chunked`.

Notation per chunk (tokens ``i, j = 0..C-1``, rows of ``K, V, Q`` are tokens, ``M0`` the state
entering the chunk, ``M`` maps k-space to v-space). Log decays ``l_i = sum_{m<=i} log r_m``,
``g_i = exp(l_i)``, ``gp_i = exp(l_{i-1})``, ``D_j = exp(l_{C-1} - l_j)`` and the masked ratio
matrices ``E_ij = exp(l_i - l_j)`` (j <= i), ``Ep_ij = exp(l_{i-1} - l_j)`` (j < i): decays
are only ever formed as ratios inside a chunk, never as a division by a cumulative product,
and a ratio's exponent is summed over its own span (`span_decays`), never taken as a
difference ``l_i - l_j`` of cumulative sums (which loses ``eps |l_j|`` after small retentions:
1e-4 relative in float32 after a few retentions of 1e-7).

- Hebbian (gated linear attention): ``M_C = g_C M0 + V^T (D * K)``,
  ``Y = (g * Q) M0^T + (E * Q K^T) V``.
- Delta (gated delta rule, WY form): with ``A = Ep * K K^T`` and ``T = (I + diag(theta) A)^-1``
  (unit lower triangular), the per-token updates ``u_i = -theta_i e_i`` are
  ``U = U0 - W M0^T`` with ``U0 = T (theta * V)``, ``W = T (theta * gp * K)``;
  ``M_C = M0 Phi^T + U0^T (D * K)`` with ``Phi^T = g_C I - W^T (D * K)`` and
  ``Y = Psi M0^T + (E * Q K^T) U0`` with ``Psi = g * Q - (E * Q K^T) W``.

The reverse sweep carries the state cotangent G back across chunks (``G_0 = G_C Phi + dY^T Psi``)
and then differentiates every chunk in one batch. Gate gradients are accumulated pair by pair:
each term carries the product of decays over a span ``(j, i]`` of tokens and contributes to
``d log r_m`` exactly for the m in that span; summing those terms (only additions, no
differences of cumulative sums) keeps ``d r_m = d log r_m / r_m`` accurate when ``r`` is small.

Memory: the inputs, one state per chunk and ``O(s C + s d)`` for the chunk matrices (kept
from the forward run for the backward), i.e.
``O(s d + (s / C) d^2)`` for ``C ~ d``.

Fallback to the sequential reference (`memory_ref`, with a checkpoint every chunk, so memory
stays ``O((s / C + C) d^2)``): calls that are empty, whose retention ``r = 1 - alpha`` is not
positive and finite (no logarithm) or whose inputs hold a NaN or an inf; and runs whose
results come near overflow (`_common.within_range`): there the two orders of operations
overflow, or spread a NaN, in different places, and the loop's values are the ones to return.
The backward falls back in the same way when its gradients do. Calls where some chunk's
transition decays far faster than the retention alone (`transitions_cancel`) run the loop too:
there the WY form's difference cancels and loses the small transition's relative precision;
so do calls where the tokens of a chunk erase the direction of a later token's key while other
directions only decay (`erased_tokens`: the delta rule's ``W``) and the chunk writes no values
that keep its updates above that cancellation's error (`updates_cancel`, after the carry).
Float32 calls run in float64 where a chunk's transition grows against the decay
(`transitions_grow`) or, for the delta rule, where its triangular solve sums many terms of
alternating signs (`solve_amplifies`: tokens that reflect the state along clustered keys).
Those checks and their thresholds are in `kernels.memory_chunk_precision`.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from tape.backend import array_module

from . import memory_ref as ref
from ._common import input_growth, max_abs, within_range
from .memory_chunk_precision import (decays_underflow, erased_tokens, solve_amplifies,
                                     squared_norms, transitions_cancel, transitions_grow,
                                     updates_cancel)

CHUNK: Optional[int] = None   # None: `chunk_size` decides; an int forces every call's chunk
RULES = ("delta", "hebbian", "titans")     # titans: `kernels.memory_chunked_titans`
MIN_TOKENS = 16     # below this the sequential loop is as fast (measured at d = 16 and 64)


def chunk_size(d: int) -> int:
    """Tokens per chunk for keys of dimension `d` (unless `CHUNK` forces one): about ``d``, as
    the ``O(C^2 d + C d^2)`` work per chunk and the ``s / C`` sequential steps balance there.
    Measured on CPU (forward plus reverse, float32): at d = 16 (the default model's heads)
    chunks of 16 run the delta rule 2.1x faster than chunks of 64, at d = 64 chunks of 32 are
    1.1x to 1.2x faster than 64 for delta and Hebbian, 1.2x for Titans (1024 and 4096
    tokens).

    >>> chunk_size(16), chunk_size(32), chunk_size(64), chunk_size(128)
    (16, 16, 32, 64)
    """
    if CHUNK is not None:
        return CHUNK
    return 16 if d <= 32 else 32 if d <= 64 else 64


def preferred(rule: str, s: int) -> bool:
    """Whether the default NumPy dispatch runs `rule` on `s` tokens in the chunked form.

    >>> preferred("delta", 1024), preferred("delta", 4), preferred("titans", 1024)
    (True, False, True)
    """
    return rule in RULES and s >= MIN_TOKENS


class Saved(NamedTuple):
    """Residuals of a chunked forward run: the inputs and the state entering every chunk."""

    x: ref.Seq
    chunk: int
    starts: object        # [B, N, d, d]
    blocks: object        # the `_Chunks` of the forward run (O(s d + s C) numbers)
    init: tuple           # the initial states, to re-run the loop if the backward falls back
    growth: float         # `_common.input_growth` of the inputs


def growth(x: ref.Seq, init: tuple, C: int) -> float:
    """`_common.input_growth` of a call's tokens (inf when an input or an initial state holds
    a NaN or an inf)."""
    xp = array_module(x.k)
    if not all(bool(xp.all(xp.isfinite(m))) for m in init):
        return float("inf")
    return input_growth(xp, [x.k, x.v, x.q, x.th, x.eta], C, x.k.shape[-1])


def sequential_forward(spec: ref.Rule, x: ref.Seq, init: tuple, checkpoint_every, C: int):
    """The fallback: the reference loop, checkpointed every chunk unless told otherwise."""
    return ref.forward(spec, x, init, checkpoint_every or max(1, C))


def sequential_backward(spec: ref.Rule, saved: Saved, dy, dfinals: tuple, need: frozenset):
    """The backward's fallback: the reference loop, re-run from the initial states."""
    run = sequential_forward(spec, saved.x, saved.init, None, saved.chunk)[2]
    return ref.backward(spec, run, dy, dfinals, need)


def span_decays(lr, C: int):
    """``E_ij = exp(lr_{j+1} + ... + lr_i)`` for ``j <= i`` (0 above the diagonal) from the log
    retentions ``lr [..., C]``. Every entry sums the logs of its own span only, so its relative
    precision does not depend on the tokens before ``j`` (``exp(l_i - l_j)`` with cumulative
    sums ``l`` does: it loses ``eps |l_j|``). The running sums are a product with a triangle
    of ones (`running_sums`), whose products by 0 and 1 are exact: each entry still adds the
    terms of its span, and nothing else.

    >>> span_decays(np.log(np.array([0.5, 1e-30, 0.25])), 3).round(3).tolist()
    [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.25, 1.0]]
    """
    xp = array_module(lr)
    terms = lr[..., :, None] * xp.tri(C, k=-1, dtype=lr.dtype)      # [m, j]: lr_m for m > j
    spans = running_sums(terms)                        # [i, j]: the sum over j < m <= i
    with np.errstate(under="ignore"):
        return xp.exp(spans) * xp.tri(C, dtype=lr.dtype)     # spans above the diagonal are 0


# NumPy reduces a short axis (a chunk's C = 16 tokens) with one slow inner loop per row: a sum
# or a running sum over it is 3x to 9x faster as a matrix product with ones (measured on
# [32, 8, 16, 16] float32 blocks). The products by 1 and 0 are exact, so every result is still
# a sum of its own terms; only the order of the additions may differ. Finite inputs only (the
# chunked forms run on finite tokens and check their results): 0 * inf would be a NaN.
def row_dots(a, b):
    """``(a * b).sum(axis=-1)``, the dot products of matching rows, as a matrix-vector
    product.

    >>> row_dots(np.ones((2, 3)), np.arange(6.0).reshape(2, 3)).tolist()
    [3.0, 12.0]
    """
    return (a * b) @ array_module(a).ones(a.shape[-1], a.dtype)


def running_sums(a):
    """``cumsum(a, axis=-2)``, down the rows, as a product with a lower triangle of ones.

    >>> running_sums(np.array([[1.0, 2.0], [3.0, 4.0]])).tolist()
    [[1.0, 2.0], [4.0, 6.0]]
    """
    return array_module(a).tri(a.shape[-2], dtype=a.dtype) @ a


def shift_rows(E):
    """``E_{i-1, j}`` (row -1 zero): with E from `span_decays`, ``exp(l_{i-1} - l_j)`` for
    ``j < i`` and 0 elsewhere."""
    xp = array_module(E)
    return xp.concatenate([xp.zeros_like(E[..., :1, :]), E[..., :-1, :]], axis=-2)


class Promoted(NamedTuple):
    """Residuals of a float32 call run in float64 (`transitions_grow`)."""

    x: ref.Seq            # the call's inputs (their dtype and shapes, as in `Saved`)
    saved: object         # the float64 run's residuals
    init: tuple           # the initial states, to re-run the loop if the backward falls back
    chunk: int
    growth: float


def promoted_forward(run, spec: ref.Rule, x: ref.Seq, init: tuple, checkpoint_every, C: int,
                     grow: float, ops):
    """`run` (a chunked `forward`) on float64 copies of a float32 call, its results cast back;
    the float32 loop where they come near the float32 overflow (`_common.within_range`), as a
    float32 chunked run would."""
    xp = array_module(x.k)
    wide = ref.Seq(*(None if a is None else a.astype(xp.float64) for a in x))
    y, finals, saved = run(spec, wide, tuple(m.astype(xp.float64) for m in init),
                           checkpoint_every, C, ops)
    if not within_range(xp, (y,) + tuple(finals), grow, x.k.dtype):
        return sequential_forward(spec, x, init, checkpoint_every, C)
    return (y.astype(x.k.dtype), tuple(m.astype(x.k.dtype) for m in finals),
            Promoted(x, saved, tuple(init), C, grow))


def promoted_backward(run, spec: ref.Rule, saved: Promoted, dy, dfinals: tuple,
                      need: frozenset):
    """`run` (the chunked `backward`) of a `promoted_forward` run, the gradients cast back (or
    the float32 loop's where they come near the float32 overflow)."""
    xp = array_module(saved.x.k)
    dtype = saved.x.k.dtype
    wide = None if dy is None else dy.astype(np.float64)
    g = run(spec, saved.saved, wide, tuple(None if a is None else a.astype(np.float64)
                                           for a in dfinals), need)
    made = [a for n, a in g.items() if n != "init" and a is not None] + list(g["init"])
    if not within_range(xp, made, saved.growth, dtype):
        return sequential_backward(spec, Saved(saved.x, saved.chunk, None, None, saved.init,
                                               saved.growth), dy, dfinals, need)
    return {n: (tuple(m.astype(dtype) for m in a) if n == "init" else
                None if a is None else a.astype(dtype)) for n, a in g.items()}


def _blocks(a, s: int, C: int, fill: float = 0.0):
    """Time-major ``[s, B, ...]`` -> ``[B, N, C, ...]``, padded with `fill` to ``N C`` tokens."""
    xp = array_module(a)
    N = -(-s // C)
    pad = N * C - s
    if pad:
        a = xp.concatenate([a, xp.full((pad,) + a.shape[1:], fill, a.dtype)], axis=0)
    a = a.reshape((N, C) + a.shape[1:])
    return xp.moveaxis(a, 2, 0)                               # [B, N, C, ...]


def _unblocks(a, s: int):
    """``[B, N, C, ...]`` -> time-major ``[s, B, ...]`` (drops the padding)."""
    xp = array_module(a)
    B, N, C = a.shape[:3]
    a = xp.moveaxis(a, 0, 2).reshape((N * C, B) + a.shape[3:])
    return xp.ascontiguousarray(a[:s])


def _tr(a):
    return a.swapaxes(-1, -2)


def _triangles(xp, C: int):
    """The ``[C, C]`` masks ``j <= i`` and ``j < i`` on the module `xp`."""
    i = xp.arange(C)
    return i[:, None] >= i[None, :], i[:, None] > i[None, :]


def usable(x: ref.Seq) -> bool:
    """Whether the chunked form applies: a non-empty sequence whose retention is finite and at
    least the dtype's smallest normal number (its logarithm exists, and the gradient, formed as
    ``d log r / r``, keeps its precision: a subnormal r has lost it)."""
    return x.k.shape[0] > 0 and normal_gates(array_module(x.ret), (x.ret,))


def normal_gates(xp, gates) -> bool:
    """Every gate finite and at least its dtype's smallest normal number.

    >>> normal_gates(np, (np.array([0.5, 1.0]),)), normal_gates(np, (np.array([1e-310]),))
    (True, False)
    """
    return all(bool(xp.all(xp.isfinite(a)) and xp.all(a >= xp.finfo(a.dtype).tiny))
               for a in gates)


def _log_gradient(pairs, starts):
    """``d log r_m`` from span terms: ``pairs[..., i, j]`` carries the decays over tokens
    ``(j, i]`` (j <= i), ``starts[..., i]`` those over ``[0, i]``; each term counts for every m in
    its span. Only additions of terms that all contain ``r_m`` (no differences of cumulative
    sums), so ``d log r_m / r_m`` keeps its precision when ``r_m`` is small."""
    xp = array_module(pairs)
    C = pairs.shape[-1]
    covered = starts[..., None] + pairs @ xp.tri(C, k=-1, dtype=pairs.dtype).T  # [i, m]: j < m
    lower = xp.tri(C, dtype=pairs.dtype)
    return xp.ones(C, pairs.dtype) @ (covered * lower)                          # i >= m


def _unit_lower_inverse(L):
    """Inverse of a batch of unit lower-triangular matrices ``[..., n, n]`` by 2 x 2 blocks:
    ``[[A, 0], [B, C]]^-1 = [[A^-1, 0], [-C^-1 B A^-1, C^-1]]`` (batched products only)."""
    xp = array_module(L)
    n = L.shape[-1]
    if n <= 8:
        out = xp.zeros_like(L)
        for i in range(n):          # forward substitution, one row at a time
            out[..., i, i] = 1
            if i:
                out[..., i, :i] = -xp.einsum("...j,...jk->...k", L[..., i, :i], out[..., :i, :i])
        return out
    h = n // 2
    Ai = _unit_lower_inverse(L[..., :h, :h])
    Ci = _unit_lower_inverse(L[..., h:, h:])
    out = xp.zeros_like(L)
    out[..., :h, :h] = Ai
    out[..., h:, h:] = Ci
    out[..., h:, :h] = -(Ci @ (L[..., h:, :h] @ Ai))
    return out


class NumpyOps:
    """The sequential parts on the arrays' own module: the blocked inverse above and a Python
    loop of one batched product per chunk. `kernels.cuda_memory_chunked.CudaOps` has the same
    two methods as CUDA kernels."""

    @staticmethod
    def unit_lower_inverse(A, th):
        """``(I + diag(th) A)^-1`` for ``A [..., C, C]`` zero on and above the diagonal.

        >>> A = np.array([[0.0, 0.0], [2.0, 0.0]])
        >>> NumpyOps.unit_lower_inverse(A, np.array([1.0, 0.5]))
        array([[ 1.,  0.],
               [-1.,  1.]])
        """
        C = A.shape[-1]
        return _unit_lower_inverse(array_module(A).eye(C, dtype=A.dtype) + th[..., None] * A)

    @staticmethod
    def carry(init, adds, P=None, scale=None, transpose: bool = False, reverse: bool = False):
        """The state carried across chunks: for each chunk c in turn (descending if `reverse`),
        ``records[:, c] = X`` and then ``X = X P_c + adds_c`` (``X P_c^T + adds_c`` if
        `transpose`), or ``X = scale_c X + adds_c`` when `P` is None. ``init [B, R, D]``,
        ``adds [B, N, R, D]``, ``P [B, N, D, D]``, ``scale [B, N]``; returns
        ``(records, final)``.

        >>> records, final = NumpyOps.carry(np.ones((1, 1, 1)), np.ones((1, 2, 1, 1)),
        ...                                 scale=np.full((1, 2), 0.5))
        >>> records.ravel().tolist(), final.ravel().tolist()
        ([1.0, 1.5], [1.75])
        """
        N = adds.shape[1]
        records = array_module(adds).empty(adds.shape, adds.dtype)
        X = init
        for c in (range(N - 1, -1, -1) if reverse else range(N)):
            records[:, c] = X
            if P is None:
                X = X * scale[:, c, None, None] + adds[:, c]
            else:
                X = X @ (_tr(P[:, c]) if transpose else P[:, c]) + adds[:, c]
        return records, X


def leaving(starts, final):
    """The states leaving every chunk, ``[B, N, ...]``, from those entering them and the
    last one."""
    return array_module(starts).concatenate([starts[:, 1:], final[:, None]], axis=1)


class _Chunks:
    """Per-chunk quantities of one call, for all chunks at once (shapes ``[B, N, C, ...]``)."""

    def __init__(self, rule: str, x: ref.Seq, C: int, ops):
        xp = array_module(x.k)
        s = x.k.shape[0]
        self.rule, self.s, self.C, self.ops = rule, s, C, ops
        self.K, self.V, self.Q = (_blocks(a, s, C) for a in (x.k, x.v, x.q))
        self.r = _blocks(x.ret[..., 0], s, C, 1.0)                       # [B, N, C]
        lr = xp.log(self.r)
        l = xp.cumsum(lr, axis=-1)
        self.logs = (l,)          # for `decays_underflow`
        lp = xp.concatenate([xp.zeros_like(l[..., :1]), l[..., :-1]], axis=-1)
        self.lower, self.strict = _triangles(xp, C)
        with np.errstate(under="ignore"):
            self.g, self.gp = xp.exp(l), xp.exp(lp)
            self.gC = self.g[..., -1]                                       # [B, N]
            self.E = span_decays(lr, C)
            self.D = self.E[..., -1, :]
            self.Pm = self.E * (self.Q @ _tr(self.K))                     # E * Q K^T
            self.DK = self.D[..., None] * self.K
            if rule == "delta":
                self.th = _blocks(x.th[..., 0], s, C)
                self.Ep = shift_rows(self.E)
                self.A = self.Ep * (self.K @ _tr(self.K))
                self.T = ops.unit_lower_inverse(self.A, self.th)
                self.U0 = self.T @ (self.th[..., None] * self.V)
                self.W = self.T @ ((self.th * self.gp)[..., None] * self.K)
                eye = xp.eye(self.K.shape[-1], dtype=self.K.dtype)
                self.PhiT = self.gC[..., None, None] * eye - _tr(self.W) @ self.DK
                self.Psi = self.g[..., None] * self.Q - self.Pm @ self.W
            else:
                self.U0 = self.V
                self.PhiT = None
                self.Psi = self.g[..., None] * self.Q

    def carry(self, init, adds, reverse: bool = False):
        """The states entering every chunk (the cotangents leaving every chunk if `reverse`)
        and the last one."""
        return self.ops.carry(init, adds, P=self.PhiT, scale=self.gC, transpose=reverse,
                              reverse=reverse)


def forward(spec: ref.Rule, x: ref.Seq, init: tuple, checkpoint_every: Optional[int] = None,
            chunk: Optional[int] = None, ops=NumpyOps):
    """Run a rule chunkwise: ``(y [s, B, d], finals, saved)`` like `memory_ref.forward`, in
    chunks of `chunk` tokens (default `chunk_size(d)`). `checkpoint_every` is accepted for the same
    signature and not needed: the chunk starts are the only states kept; a fallback to the
    sequential loop (module docstring) checkpoints every `checkpoint_every` tokens, or every
    chunk."""
    xp = array_module(x.k)
    s = x.k.shape[0]
    C = max(1, min(chunk_size(x.k.shape[-1]) if chunk is None else chunk, s))
    grow = growth(x, init, C) if spec.name in ("delta", "hebbian") and usable(x) else np.inf
    if not grow < np.inf:
        return sequential_forward(spec, x, init, checkpoint_every, C)
    ch = _Chunks(spec.name, x, C, ops)
    erased = None
    if ch.PhiT is not None:
        parts = [(squared_norms(ch.PhiT, ch.gC), 1.0)]
        if C >= x.k.shape[-1] and transitions_cancel(parts):
            return sequential_forward(spec, x, init, checkpoint_every, C)
        erased = erased_tokens(ch.W, ch.th, ch.gp, ch.K)
        if (transitions_grow(parts, x.k.shape[-1])
                or solve_amplifies(ch.T, ch.th, ch.K)):
            return promoted_forward(forward, spec, x, init, checkpoint_every, C, grow, ops)
    adds = _tr(ch.U0) @ ch.DK                                              # [B, N, d, d]
    starts, M = ch.carry(init[0], adds)
    if erased is not None and updates_cancel(erased, ch.th, ch.gp, ch.K, starts, U0=ch.U0,
                                             W=ch.W):
        return sequential_forward(spec, x, init, checkpoint_every, C)
    Y = ch.Psi @ _tr(starts) + ch.Pm @ ch.U0
    if decays_underflow(ch.logs, starts, leaving(starts, M), Y):
        return sequential_forward(spec, x, init, checkpoint_every, C)
    if not within_range(xp, (Y, M, starts, ch.U0, getattr(ch, "W", None)), grow, x.k.dtype):
        return sequential_forward(spec, x, init, checkpoint_every, C)
    return (_unblocks(Y, s), (xp.ascontiguousarray(M),),
            Saved(x, C, starts, ch, tuple(init), grow))


def backward(spec: ref.Rule, saved, dy, dfinals: tuple, need: frozenset):
    """Gradients of a chunked forward run, in the format of `memory_ref.backward`."""
    if isinstance(saved, ref.Saved):
        return ref.backward(spec, saved, dy, dfinals, need)
    if isinstance(saved, Promoted):
        return promoted_backward(backward, spec, saved, dy, dfinals, need)
    x, C, starts, ch = saved[:4]
    xp = array_module(x.k)
    s, B, d = x.k.shape
    dY = xp.zeros_like(ch.Q) if dy is None else _blocks(dy, s, C)
    G = xp.zeros((B, d, d), x.k.dtype) if dfinals[0] is None else \
        xp.array(dfinals[0], dtype=x.k.dtype)
    adds = _tr(dY) @ ch.Psi                                                 # dY^T Psi
    ends, G = ch.carry(G, adds, reverse=True)

    M0, GC = starts, ends
    U = ch.U0 - ch.W @ _tr(M0) if spec.name == "delta" else ch.U0
    dU = _tr(ch.Pm) @ dY + ch.DK @ _tr(GC)
    dPm = xp.where(ch.lower, dY @ _tr(U), 0.0)
    dQK = dPm * ch.E
    dYM = dY @ M0                                           # rows (M0^T dy_i)^T
    UG = U @ GC
    dQ = ch.g[..., None] * dYM + dQK @ ch.K
    dK = _tr(dQK) @ ch.Q + ch.D[..., None] * UG
    pairs = dPm * ch.Pm                            # span terms, see `_log_gradient`
    from0 = ch.g * row_dots(dYM, ch.Q)
    from0[..., -1] += ch.gC * xp.einsum("bnij,bnij->bn", GC, M0)
    pairs[..., -1, :] += ch.D * row_dots(UG, ch.K)
    g = {}
    if spec.name == "delta":
        # R = theta * (V - gp * X) with X = K M0^T, U = T R.
        dR = _tr(ch.T) @ dU
        dRM = dR @ M0
        dRX = row_dots(dRM, ch.K)                   # dR_i . X_i
        dV = ch.th[..., None] * dR
        dL = -xp.where(ch.strict, dR @ _tr(U), 0.0)
        dA = ch.th[..., None] * dL
        dKK = dA * ch.Ep
        thgp = ch.th * ch.gp
        dK += (dKK + _tr(dKK)) @ ch.K - thgp[..., None] * dRM
        g["theta"] = _unblocks(row_dots(dR, ch.V) - ch.gp * dRX
                               + row_dots(dL, ch.A), s)
        pairs[..., :-1, :] += (dA * ch.A)[..., 1:, :]        # span (j, i-1]
        from0[..., :-1] -= (thgp * dRX)[..., 1:]            # span [0, i-1]
    else:
        dV = dU
    dlogr = _log_gradient(pairs, from0)
    g["alpha"] = _unblocks(-dlogr / ch.r, s)
    g["k"], g["v"] = _unblocks(dK, s), _unblocks(dV, s)
    g["q"] = _unblocks(dQ, s) if "q" in need else None
    g["init"] = (G,)
    if not within_range(xp, (G, ends) + tuple(g[n] for n in ("alpha", "k", "v", "q", "theta")
                                              if g.get(n) is not None),
                        saved.growth * max(1.0, max_abs(xp, starts)), x.k.dtype):
        return sequential_backward(spec, saved, dy, dfinals, need)
    return g
