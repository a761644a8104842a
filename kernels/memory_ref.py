"""Reference kernels of the matrix-memory rules: array-module code for NumPy and CuPy arrays.

Layout. Inputs arrive flattened to one batch axis B (all leading batch/head axes) and
time-major: ``k[t]`` is ``[B, d]``, gates are ``[s, B, 1]`` (so they broadcast over a vector)
and states are ``[B, d, d]``. Every step is a handful of batched matrix operations; only the
recurrence over time is a Python loop, forward and reverse.

Rules (read after write, ``y_t = M_{t+1} q_t``, ``e_t = M_t k_t - v_t``, ``r_t = 1 - alpha_t``):

- delta:   ``M' = r M - th e k^T``
- titans:  ``S' = eta S - th e k^T``, ``M' = r M + S'``
- hebbian: ``M' = r M + v k^T``

The reverse sweep carries the cotangent G of the current state backwards. For the delta rule,
with G the cotangent of ``M_{t+1}`` (after adding ``dy_t q_t^T``)::

    de = -th G k          dth = -e . (G k)          dalpha = -<G, M_t>
    dk = -th G^T e + M_t^T de                        dv = -de
    G_t = r G + de k^T                               dq_t = M_{t+1}^T dy_t

States. A span of the sequence is run with a buffer of its states ``buf[0..L]``. Storing all
states is one span of length s (memory ``(s+1) d^2`` per state). With ``checkpoint_every=C``
the forward keeps only the state at the start of each chunk of C tokens and the backward
re-runs each chunk from its checkpoint before sweeping it backwards: memory
``(s/C + C) d^2``, one extra forward pass of time.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

from tape.backend import array_module


class Seq(NamedTuple):
    """Time-major inputs of one call (see the module docstring for the layout)."""

    k: object
    v: object
    q: object
    ret: object     # 1 - alpha, [s, B, 1]
    th: object      # theta, [s, B, 1] (None for hebbian)
    eta: object     # titans momentum gate, [s, B, 1], else None


def _mv(M, x):
    """M x for a batch: [B, d, d] @ [B, d] -> [B, d]."""
    return (M @ x[:, :, None])[:, :, 0]


def _vm(x, M):
    """x^T M (= M^T x) for a batch: [B, d] @ [B, d, d] -> [B, d]."""
    return (x[:, None, :] @ M)[:, 0, :]


def _outer(a, b):
    return a[:, :, None] * b[:, None, :]


def _inner(A, B_, xp):
    """<A, B> per batch entry: [B, d, d] x [B, d, d] -> [B]."""
    return xp.einsum("bij,bij->b", A, B_)


# -- one span of the forward recurrence, per rule ------------------------------------------------
# `bufs` holds one [L+1, B, d, d] buffer per state with bufs[.][0] filled; `E` an [L, B, d]
# buffer for the errors e_t (None for hebbian).

def _delta_span(x: Seq, t0: int, t1: int, bufs, E):
    xp, (M,) = array_module(x.k), bufs
    for i, t in enumerate(range(t0, t1)):
        e = _mv(M[i], x.k[t])
        e -= x.v[t]
        E[i] = e
        xp.multiply(M[i], x.ret[t][:, :, None], out=M[i + 1])
        M[i + 1] -= _outer(e * x.th[t], x.k[t])


def _titans_span(x: Seq, t0: int, t1: int, bufs, E):
    xp, (M, S) = array_module(x.k), bufs
    for i, t in enumerate(range(t0, t1)):
        e = _mv(M[i], x.k[t])
        e -= x.v[t]
        E[i] = e
        xp.multiply(S[i], x.eta[t][:, :, None], out=S[i + 1])
        S[i + 1] -= _outer(e * x.th[t], x.k[t])
        xp.multiply(M[i], x.ret[t][:, :, None], out=M[i + 1])
        M[i + 1] += S[i + 1]


def _hebbian_span(x: Seq, t0: int, t1: int, bufs, E):
    xp, (M,) = array_module(x.k), bufs
    for i, t in enumerate(range(t0, t1)):
        xp.multiply(M[i], x.ret[t][:, :, None], out=M[i + 1])
        M[i + 1] += _outer(x.v[t], x.k[t])


# -- one span of the reverse recurrence, per rule ------------------------------------------------
# `G` is a tuple of cotangent accumulators (one per state, updated in place), `dy` the
# time-major output cotangent or None, `g` a dict of time-major gradient buffers (only for the
# active arguments).

def _delta_reverse(x: Seq, t0: int, t1: int, bufs, E, G, dy, g):
    xp, (M,), (GM,) = array_module(x.k), bufs, G
    for t in range(t1 - 1, t0 - 1, -1):
        i = t - t0
        if dy is not None:
            GM += _outer(dy[t], x.q[t])
        if "alpha" in g:
            g["alpha"][t] = -_inner(GM, M[i], xp)
        Gk = _mv(GM, x.k[t])
        e = E[i]
        if "theta" in g:
            g["theta"][t] = -(e * Gk).sum(axis=-1)
        de = Gk * -x.th[t]
        if "k" in g:
            g["k"][t] = _vm(e, GM) * -x.th[t] + _vm(de, M[i])
        if "v" in g:
            g["v"][t] = -de
        GM *= x.ret[t][:, :, None]
        GM += _outer(de, x.k[t])


def _titans_reverse(x: Seq, t0: int, t1: int, bufs, E, G, dy, g):
    xp, (M, S), (GM, GS) = array_module(x.k), bufs, G
    for t in range(t1 - 1, t0 - 1, -1):
        i = t - t0
        if dy is not None:
            GM += _outer(dy[t], x.q[t])
        if "alpha" in g:
            g["alpha"][t] = -_inner(GM, M[i], xp)
        GS += GM                       # M' = r M + S': S' also receives M''s cotangent
        if "eta" in g:
            g["eta"][t] = _inner(GS, S[i], xp)
        Hk = _mv(GS, x.k[t])
        e = E[i]
        if "theta" in g:
            g["theta"][t] = -(e * Hk).sum(axis=-1)
        de = Hk * -x.th[t]
        if "k" in g:
            g["k"][t] = _vm(e, GS) * -x.th[t] + _vm(de, M[i])
        if "v" in g:
            g["v"][t] = -de
        GM *= x.ret[t][:, :, None]
        GM += _outer(de, x.k[t])
        GS *= x.eta[t][:, :, None]


def _hebbian_reverse(x: Seq, t0: int, t1: int, bufs, E, G, dy, g):
    xp, (M,), (GM,) = array_module(x.k), bufs, G
    for t in range(t1 - 1, t0 - 1, -1):
        i = t - t0
        if dy is not None:
            GM += _outer(dy[t], x.q[t])
        if "alpha" in g:
            g["alpha"][t] = -_inner(GM, M[i], xp)
        if "v" in g:
            g["v"][t] = _mv(GM, x.k[t])
        if "k" in g:
            g["k"][t] = _vm(x.v[t], GM)
        GM *= x.ret[t][:, :, None]


class Rule(NamedTuple):
    name: str
    n_states: int
    uses_error: bool
    span: object
    reverse: object


RULES = {
    "delta": Rule("delta", 1, True, _delta_span, _delta_reverse),
    "titans": Rule("titans", 2, True, _titans_span, _titans_reverse),
    "hebbian": Rule("hebbian", 1, False, _hebbian_span, _hebbian_reverse),
}


class Saved(NamedTuple):
    """Residuals of a forward run: everything the reverse sweep needs."""

    x: Seq
    chunk: int            # span length; == s when every state is stored
    states: tuple         # full: per state [s+1, B, d, d]; checkpointed: [n_chunks, B, d, d]
    E: object             # full: [s, B, d] errors (None for hebbian or checkpointed)
    checkpointed: bool


def _spans(s: int, chunk: int):
    return [(t0, min(s, t0 + chunk)) for t0 in range(0, s, chunk)]


def _read(x: Seq, M, t0: int, t1: int):
    """y_t = M_{t+1} q_t over a span, in one batched product."""
    return (M[1:t1 - t0 + 1] @ x.q[t0:t1][..., None])[..., 0]


def forward(rule: Rule, x: Seq, init: tuple, checkpoint_every: Optional[int]):
    """Run the recurrence: returns ``(y [s, B, d], finals (tuple of [B, d, d]), Saved)``."""
    xp = array_module(x.k)
    s, B, d = x.k.shape
    dtype = x.k.dtype
    checkpointed = checkpoint_every is not None and checkpoint_every < s
    chunk = max(1, min(checkpoint_every, s)) if checkpointed else max(s, 1)
    bufs = tuple(xp.empty((chunk + 1, B, d, d), dtype) for _ in range(rule.n_states))
    E = xp.empty((chunk, B, d), dtype) if rule.uses_error else None
    spans = _spans(s, chunk)
    ckpt = tuple(xp.empty((len(spans), B, d, d), dtype) for _ in range(rule.n_states)) \
        if checkpointed else None
    y = xp.empty((s, B, d), dtype)
    for b, m in zip(bufs, init):
        b[0] = m
    last = 0
    for c, (t0, t1) in enumerate(spans):
        if c:
            for b in bufs:
                b[0] = b[last]
        if checkpointed:
            for store, b in zip(ckpt, bufs):
                store[c] = b[0]
        rule.span(x, t0, t1, bufs, E)
        y[t0:t1] = _read(x, bufs[0], t0, t1)
        last = t1 - t0
    finals = tuple(b[last].copy() for b in bufs)
    if checkpointed:
        return y, finals, Saved(x, chunk, ckpt, None, True)
    return y, finals, Saved(x, chunk, bufs, E, False)


def backward(rule: Rule, saved: Saved, dy, dfinals: tuple, need: frozenset):
    """The reverse-time recurrence. `dy` ([s, B, d] or None) and `dfinals` (a cotangent or None
    per final state) are the incoming cotangents; `need` names the arguments whose gradients
    are wanted. Returns a dict of time-major gradients plus ``"init"``: the cotangents of the
    initial states."""
    x = saved.x
    xp = array_module(x.k)
    s, B, d = x.k.shape
    dtype = x.k.dtype
    G = tuple(xp.zeros((B, d, d), dtype) if g is None else xp.array(g, dtype=dtype, copy=True)
              for g in dfinals)
    g = {}
    for n in need & {"k", "v"}:
        g[n] = xp.empty((s, B, d), dtype)
    for n in need & {"alpha", "theta", "eta"}:
        g[n] = xp.empty((s, B), dtype)
    want_q = "q" in need and dy is not None
    dq = xp.zeros((s, B, d), dtype) if "q" in need else None
    recur = bool(g) or bool(need & {"m0", "s0"})
    spans = _spans(s, saved.chunk) if s else []
    if saved.checkpointed:
        bufs = tuple(xp.empty((saved.chunk + 1, B, d, d), dtype) for _ in range(rule.n_states))
        E = xp.empty((saved.chunk, B, d), dtype) if rule.uses_error else None
    else:
        bufs, E = saved.states, saved.E
    for c in range(len(spans) - 1, -1, -1):
        t0, t1 = spans[c]
        if saved.checkpointed:
            for b, store in zip(bufs, saved.states):
                b[0] = store[c]
            rule.span(x, t0, t1, bufs, E)   # recompute this chunk's states
        if want_q:
            dq[t0:t1] = (dy[t0:t1][:, :, None, :] @ bufs[0][1:t1 - t0 + 1])[:, :, 0, :]
        if recur:
            rule.reverse(x, t0, t1, bufs, E, G, dy, g)
    g["q"] = dq
    g["init"] = G
    return g


# -- forward mode (JVP): the tangent recurrence, token by token ----------------------------------

def jvp(rule: Rule, x: Seq, dx: Seq, init: tuple, dinit: tuple):
    """Tangents of ``(y, finals)`` given tangents `dx` of the inputs (a `Seq` with the tangent
    of 1 - alpha in ``ret``) and `dinit` of the initial states; None entries are zeros."""
    xp = array_module(x.k)
    s, B, d = x.k.shape
    zero_v = xp.zeros((B, d), x.k.dtype)
    zero_g = xp.zeros((B, 1), x.k.dtype)

    def at(seq, name, t, zero):
        a = getattr(seq, name)
        return zero if a is None else a[t]

    states = [xp.array(m, copy=True) for m in init]
    dstates = [xp.zeros_like(m) if dm is None else xp.array(dm, dtype=m.dtype, copy=True)
               for m, dm in zip(states, dinit)]
    y = xp.empty((s, B, d), x.k.dtype)
    dy = xp.empty((s, B, d), x.k.dtype)
    for t in range(s):
        k, v, q = x.k[t], x.v[t], x.q[t]
        r, dr = x.ret[t][:, :, None], at(dx, "ret", t, zero_g)[:, :, None]
        dk, dv, dq = at(dx, "k", t, zero_v), at(dx, "v", t, zero_v), at(dx, "q", t, zero_v)
        M, dM = states[0], dstates[0]
        if rule.name == "hebbian":
            M_new = r * M + _outer(v, k)
            dM_new = dr * M + r * dM + _outer(dv, k) + _outer(v, dk)
        else:
            th, dth = x.th[t][:, :, None], at(dx, "th", t, zero_g)[:, :, None]
            e = _mv(M, k) - v
            de = _mv(dM, k) + _mv(M, dk) - dv
            upd = th * _outer(e, k)
            dupd = dth * _outer(e, k) + th * (_outer(de, k) + _outer(e, dk))
            if rule.name == "delta":
                M_new, dM_new = r * M - upd, dr * M + r * dM - dupd
            else:
                S, dS = states[1], dstates[1]
                eta = x.eta[t][:, :, None]
                deta = at(dx, "eta", t, zero_g)[:, :, None]
                S_new = eta * S - upd
                dS_new = deta * S + eta * dS - dupd
                M_new, dM_new = r * M + S_new, dr * M + r * dM + dS_new
                states[1], dstates[1] = S_new, dS_new
        states[0], dstates[0] = M_new, dM_new
        y[t] = _mv(M_new, q)
        dy[t] = _mv(dM_new, q) + _mv(M_new, dq)
    return (y, tuple(states)), (dy, tuple(dstates))
