"""Periodic memory kernel pairs: a rule that writes once every `period` tokens (a CMS level).

The tokens are cut into chunks of `period` from the first one. Every whole chunk advances the
memory by running the rule over its tokens, in order, with their own gates; a token reads the
memory as it was at the start of its chunk, except the chunk's last token, which reads it after
the chunk's write. Tokens after the last whole chunk read the last written memory and write
nothing (they wait for the rest of their chunk). Returned: the reads ``y`` and the state(s)
after the last whole chunk. The memory trajectory is the per-token rule's; only the reads
differ (``y_t = M_{c p} q_t`` for token t of chunk c, ``M_{(c+1) p} q_t`` for its last token).

The state at chunk boundaries is computed in the chunked form of
`kernels.memory_periodic_chunked` (a few batched products per call, a Python step per chunk
instead of per token; long periods cut into `sub_chunks`), with a hand-written backward.
``backend="reference"`` (or `kernels.force_reference`) runs the sequential loop of
`kernels.memory_ref` over each chunk instead; so do calls whose retention (or Titans' momentum
gate) is not positive and finite, whose inputs hold a NaN or an inf, whose chunk transitions
cancel, or whose chunked states or gradients come near overflow
(`kernels.memory_periodic_chunked`): there the loop's values are the ones returned.
The code is written against the arrays' own module: on CuPy arrays it runs as it is (no CUDA
kernel of its own), checked against NumPy by tests/kernels/test_gpu_periodic.py.

Shapes as `kernels.delta_rule`: ``k, v, q [..., s, d]``, gates ``[..., s]``, states
``[..., d, d]``; the leading axes (batch, heads) run together.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from tape.backend import array_module
from tape.rules import custom_rule

from . import memory_periodic_chunked as chunked
from . import memory_ref as ref
from ._common import batch_size, check_memory_shapes, within_range
from .dispatch import is_reference_forced
from .memory_chunked import _tr, chunk_size
from .memory_periodic_chunked import Blocks

_SEQS = ("k", "v", "q")
_ARGS = {
    "delta": ("k", "v", "q", "alpha", "theta", "m0"),
    "titans": ("k", "v", "q", "alpha", "theta", "eta", "m0", "s0"),
    "hebbian": ("k", "v", "q", "alpha", "m0"),
}
_STATES = {"delta": ("m0",), "titans": ("m0", "s0"), "hebbian": ("m0",)}
_GATES = ("alpha", "theta", "eta")
_PUBLIC = {"delta": "delta_rule_periodic", "titans": "titans_rule_periodic",
           "hebbian": "hebbian_rule_periodic"}
BACKENDS = ("reference", "chunked")


class _Layout:
    """One call's arguments in block layout: the whole chunks (`Blocks`), the initial states
    ``[B, d, d]``, and the queries shifted by one token (`shifted`) for the reads. With
    `tangent` the arguments are tangents, and ``ret`` holds the tangent of the retention,
    ``-alpha``."""

    def __init__(self, rule: str, args: tuple, period: int, tangent: bool = False):
        named = dict(zip(_ARGS[rule], args))
        k = named["k"]
        self.xp = xp = array_module(k)
        self.lead, (self.s, self.d) = k.shape[:-2], k.shape[-2:]
        self.B, self.C = batch_size(self.lead), period
        self.N = self.s // period
        self.whole = self.N * period
        self.dtype = k.dtype

        def seq(a):
            return xp.reshape(a, (self.B, self.s, self.d))

        def blocks(a, *tail):
            return xp.reshape(a[:, :self.whole], (self.B, self.N, period) + tail)

        seqs = {n: seq(named[n]) for n in _SEQS}
        gates = {n: xp.reshape(named[n], (self.B, self.s)) if n in named else None
                 for n in _GATES}
        self.blocks = Blocks(*(blocks(seqs[n], self.d) for n in _SEQS),
                             blocks(-gates["alpha"] if tangent else 1 - gates["alpha"]),
                             *(None if gates[n] is None else blocks(gates[n])
                               for n in ("theta", "eta")))
        self.q_shifted = self.shifted(seqs["q"])
        self.init = tuple(xp.reshape(named[n], (self.B, self.d, self.d))
                          for n in _STATES[rule])

    def shifted(self, a):
        """``[B, s, d]`` -> ``[B, N + 1, C, d]``: token t at flat position t + 1, zeros around.
        Token t reads the state at boundary ``(t + 1) // C`` (its chunk's start, or the next
        boundary for a chunk's last token), so block c of the shifted tokens holds exactly the
        reads of state c: one batched product per direction."""
        xp, N, C = self.xp, self.N, self.C
        out = xp.zeros((self.B, (N + 1) * C, self.d), self.dtype)
        out[:, 1:self.s + 1] = a
        return xp.reshape(out, (self.B, N + 1, C, self.d))

    def unshift(self, a):
        """The inverse of `shifted`: ``[B, N + 1, C, d]`` -> ``[..., s, d]``."""
        # Explicit lengths: with B = 0 or d = 0 a -1 would be ambiguous.
        flat = self.xp.reshape(a, (self.B, (self.N + 1) * self.C, self.d))[:, 1:self.s + 1]
        return self.xp.reshape(flat, self.lead + (self.s, self.d))

    def reads(self, q_shifted, M):
        """``y [..., s, d]`` from the shifted queries and the boundary states
        ``M [B, N + 1, d, d]``."""
        return self.unshift(q_shifted @ _tr(M))

    def read_cotangents(self, dy, M, dfinal):
        """The reads' backward: ``(dq [..., s, d], inject [B, N + 1, d, d])``, `inject` the
        cotangent arriving at each boundary state from the reads (and `dfinal` at N)."""
        xp, d = self.xp, self.d
        if dy is None:
            inject = xp.zeros((self.B, self.N + 1, d, d), self.dtype)
            dq = None
        else:
            dys = self.shifted(xp.reshape(xp.asarray(dy, self.dtype), (self.B, self.s, d)))
            inject = _tr(dys) @ self.q_shifted
            dq = self.unshift(dys @ M)
        if dfinal is not None:
            inject[:, self.N] += xp.reshape(dfinal, (self.B, d, d))
        return dq, inject

    def unblock(self, a, vector: bool):
        """A block-layout gradient of the whole chunks -> ``[..., s(, d)]``, zeros after them
        (the last tokens write nothing)."""
        xp = self.xp
        tail = (self.d,) if vector else ()
        flat = xp.reshape(a, (self.B, self.whole) + tail)
        rest = xp.zeros((self.B, self.s - self.whole) + tail, self.dtype)
        return xp.reshape(xp.concatenate([flat, rest], 1), self.lead + (self.s,) + tail)


# -- the sequential reference: memory_ref's loop over each chunk ----------------------------------

def _time_major(b: Blocks) -> ref.Seq:
    """Block layout -> `memory_ref.Seq` over the whole chunks."""
    xp = array_module(b.k)

    def tm(a, vector):
        if a is None:
            return None
        B, N, C = a.shape[:3]
        flat = xp.reshape(a, (B, N * C) + a.shape[3:])
        out = xp.ascontiguousarray(xp.moveaxis(flat, 1, 0))
        return out if vector else out[..., None]
    return ref.Seq(tm(b.k, True), tm(b.v, True), tm(b.q, True), tm(b.ret, False),
                   tm(b.th, False), tm(b.eta, False))


def _reference_states(spec: ref.Rule, x: ref.Seq, starts: tuple, c: int, C: int):
    """Run chunk c from its starting states; returns the state buffers and errors."""
    xp = array_module(x.k)
    B, d = x.k.shape[1:]
    bufs = tuple(xp.empty((C + 1, B, d, d), x.k.dtype) for _ in starts)
    for buf, st in zip(bufs, starts):
        buf[0] = st[:, c]
    E = xp.empty((C, B, d), x.k.dtype) if spec.uses_error else None
    spec.span(x, c * C, (c + 1) * C, bufs, E)
    return bufs, E


def _reference_forward(rule: str, b: Blocks, init: tuple):
    spec = ref.RULES[rule]
    x = _time_major(b)
    xp = array_module(b.k)
    B, N, C, d = b.k.shape
    states = tuple(xp.empty((B, N + 1, d, d), b.k.dtype) for _ in init)
    for st, m in zip(states, init):
        st[:, 0] = m
    for c in range(N):
        bufs, _ = _reference_states(spec, x, states, c, C)
        for st, buf in zip(states, bufs):
            st[:, c + 1] = buf[C]
    return states, (spec, x, states)


def _reference_backward(saved, inject, final_s=None) -> dict:
    spec, x, states = saved
    xp = array_module(inject)
    B, N1, d = inject.shape[:3]
    C = x.k.shape[0] // max(N1 - 1, 1)
    G = [xp.array(inject[:, N1 - 1], copy=True)]
    if spec.n_states == 2:
        G.append(xp.zeros_like(G[0]) if final_s is None else
                 xp.array(final_s, dtype=inject.dtype, copy=True))
    s = x.k.shape[0]
    g = {n: xp.zeros((s, B, d), inject.dtype) for n in ("k", "v")}
    g.update({n: xp.zeros((s, B), inject.dtype) for n in _GATES})
    for c in range(N1 - 2, -1, -1):
        bufs, E = _reference_states(spec, x, states, c, C)
        spec.reverse(x, c * C, (c + 1) * C, bufs, E, G, None, g)
        G[0] += inject[:, c]

    def blocks(a):
        return xp.reshape(xp.moveaxis(a, 0, 1), (B, N1 - 1, C) + a.shape[2:])
    out = {n: blocks(a) for n, a in g.items()}
    out["init"] = tuple(G)
    return out


def sub_chunks(period: int, d: int) -> int:
    """How many equal sub-chunks the chunked form cuts each period into: the fewest whose
    length divides `period` and is at most `memory_chunked.chunk_size(d)`, or 1 (the whole
    period) where such a length would be under a quarter of it (a prime period). A period's
    transition is then the product of its sub-chunks' transitions, carried one after the other
    as the states are: a transition that decays far below the retention over a long period
    stays a product of factors that each keep their relative precision (the WY form of one
    long chunk is their difference, `memory_chunk_precision.transitions_cancel`), and the work per
    token is the per-token rules' at their measured chunk size.

    >>> sub_chunks(8, 16), sub_chunks(128, 16), sub_chunks(96, 16), sub_chunks(64, 64)
    (1, 8, 6, 2)
    >>> sub_chunks(127, 16)
    1
    """
    longest = chunk_size(d)
    if period <= longest:
        return 1
    m = next(m for m in range(-(-period // longest), period + 1) if period % m == 0)
    return m if 4 * (period // m) >= longest else 1


def _split(b: Blocks, m: int) -> Blocks:
    """`b` with every chunk cut into `m` equal sub-chunks: ``[B, N, C, ...]`` ->
    ``[B, N m, C / m, ...]``."""
    B, N, C = b.k.shape[:3]
    xp = array_module(b.k)
    return Blocks(*(None if a is None else xp.reshape(a, (B, N * m, C // m) + a.shape[3:])
                    for a in b))


def _states(rule: str, lay: _Layout, backend: str):
    """``(states, saved, backend)``: the boundary states in the chunked form (`sub_chunks`
    per period), or with the loop where the chunked form does not apply, cancels or comes near
    overflow (`backend` then ``"reference"``); a float32 call whose transitions grow against
    the decays (`memory_chunk_precision.transitions_grow`) runs in float64. A chunked `saved`
    carries the input growth, the sub-chunk count and the call's dtype where it ran in float64
    (else None) for its backward."""
    if backend == "chunked" and lay.N and chunked.usable(lay.blocks):
        m = sub_chunks(lay.C, lay.d)
        blocks = _split(lay.blocks, m) if m > 1 else lay.blocks
        grow = chunked.growth(blocks, lay.init)
        if grow < float("inf"):
            init, dtype = lay.init, None
            states, saved = chunked.forward(rule, blocks, init, grow=grow)
            if saved is chunked.GROW:     # float32 transitions that grow: run in float64
                dtype = blocks.k.dtype
                blocks = chunked.Blocks(*(None if a is None else a.astype(lay.xp.float64)
                                          for a in blocks))
                init = tuple(a.astype(lay.xp.float64) for a in init)
                states, saved = chunked.forward(rule, blocks, init, grow=grow)
            if states is not None and dtype is not None:     # the float32 loop near its overflow
                if not within_range(lay.xp, states, grow, dtype):
                    states = None
                else:
                    states = tuple(st.astype(dtype) for st in states)
            if states is not None:
                return tuple(st[:, ::m] for st in states), (saved, grow, m, dtype), "chunked"
    states, saved = _reference_forward(rule, lay.blocks, lay.init)
    return states, saved, "reference"


def _backward(rule: str, lay: _Layout, saved, backend: str, inject, final_s) -> dict:
    """The chunk transitions' gradients (block layout, of the sub-chunks where the forward
    cut the periods: `_Layout.unblock` flattens either), re-run with the loop where the
    chunked backward comes near overflow."""
    if backend == "chunked":
        run, grow, m, dtype = saved
        if m > 1:               # the reads see only every m-th boundary
            every = lay.xp.zeros((lay.B, lay.N * m + 1) + inject.shape[2:], inject.dtype)
            every[:, ::m] = inject
            inject = every
        if dtype is None:
            g = chunked.backward(run, inject, final_s, grow=grow)
        else:                   # a float32 call run in float64 (`_states`)
            wide = lay.xp.float64
            g = chunked.backward(run, inject.astype(wide), None if final_s is None else
                                 final_s.astype(wide), grow=grow)
            if g is not None and within_range(lay.xp, list(g["init"]) + [
                    v for n, v in g.items() if n != "init"], grow, dtype):
                g = {n: (tuple(a.astype(dtype) for a in v) if n == "init" else
                         v.astype(dtype)) for n, v in g.items()}
            else:
                g = None
        if g is not None:
            return g
        inject = inject[:, ::m]
        saved = _reference_forward(rule, lay.blocks, lay.init)[1]
    return _reference_backward(saved, inject, final_s)


# -- the primitives --------------------------------------------------------------------------------

def _make(rule: str):
    names = _ARGS[rule]

    def run(args, period, backend):
        lay = _Layout(rule, args, period)
        states, saved, backend = _states(rule, lay, backend)
        y = lay.reads(lay.q_shifted, states[0])
        finals = tuple(lay.xp.reshape(st[:, lay.N], lay.lead + (lay.d, lay.d)) for st in states)
        return (y,) + finals, (lay, states, saved, backend)

    def impl(*args, period, backend="chunked"):
        return run(args, period, backend)[0]

    def augmented_primal(cfg, *args, period, backend="chunked"):
        return run(args, period, backend)

    def reverse(cfg, residuals, cts):
        lay, states, saved, backend = residuals
        xp = lay.xp
        dq, inject = lay.read_cotangents(cts[0], states[0], cts[1])
        need = frozenset(n for n, a in zip(names, cfg.active) if a)
        recur = bool(need - {"q"})
        final_s = cts[2] if rule == "titans" else None
        if final_s is not None:
            final_s = xp.reshape(final_s, (lay.B, lay.d, lay.d))
        g = _backward(rule, lay, saved, backend, inject, final_s) if recur and lay.N else None
        out = []
        for n in names:
            if n not in need:
                out.append(None)
            elif n == "q":
                out.append(xp.zeros(lay.lead + (lay.s, lay.d), lay.dtype) if dq is None else dq)
            elif n in _STATES[rule]:
                i = _STATES[rule].index(n)
                if g is None:
                    init = inject[:, 0] if i == 0 else (xp.zeros_like(inject[:, 0])
                                                        if final_s is None else final_s)
                else:
                    init = g["init"][i]
                out.append(xp.reshape(init, lay.lead + (lay.d, lay.d)))
            elif g is None:                       # no whole chunk: nothing was written
                out.append(xp.zeros(lay.lead + (lay.s,) + ((lay.d,) if n in _SEQS else ()),
                                    lay.dtype))
            else:
                out.append(lay.unblock(g[n], n in _SEQS))
        return tuple(out)

    def forward(cfg, primals, tangents, period, backend="chunked"):
        lay = _Layout(rule, primals, period)
        xp = lay.xp
        t = dict(zip(names, tangents))
        zeros = {n: xp.zeros_like(a) for n, a in zip(names, primals)}
        tan = _Layout(rule, tuple(zeros[n] if t[n] is None else t[n] for n in names), period,
                      tangent=True)
        spec = ref.RULES[rule]
        x, dx = _time_major(lay.blocks), _time_major(tan.blocks)
        states = [[m] for m in lay.init]
        dstates = [[m] for m in tan.init]
        C = period
        for c in range(lay.N):
            sl = slice(c * C, (c + 1) * C)
            xc = ref.Seq(*(None if a is None else a[sl] for a in x))
            dxc = ref.Seq(*(None if a is None else a[sl] for a in dx))
            (_, finals), (_, dfinals) = ref.jvp(spec, xc, dxc, tuple(s[-1] for s in states),
                                                tuple(s[-1] for s in dstates))
            for s, f, ds, df in zip(states, finals, dstates, dfinals):
                s.append(f)
                ds.append(df)
        M, dM = (xp.stack(a[0], 1) for a in (states, dstates))
        y = lay.reads(lay.q_shifted, M)
        dy = lay.reads(tan.q_shifted, M) + lay.reads(lay.q_shifted, dM)
        finals = tuple(xp.reshape(s[-1], lay.lead + (lay.d, lay.d)) for s in states)
        dfinals = tuple(xp.reshape(s[-1], lay.lead + (lay.d, lay.d)) for s in dstates)
        return (y,) + finals, (dy,) + dfinals

    impl.__name__ = _PUBLIC[rule]
    return custom_rule(impl, augmented_primal=augmented_primal, reverse=reverse,
                       forward=forward, multiple_results=True, name=_PUBLIC[rule],
                       check_primal=False)


_delta = _make("delta")
_titans = _make("titans")
_hebbian = _make("hebbian")


def _check(rule: str, args: tuple, period, backend) -> None:
    name = _PUBLIC[rule]
    named = dict(zip(_ARGS[rule], args))
    check_memory_shapes(name, named, _STATES[rule])
    if isinstance(period, bool) or not isinstance(period, (int, np.integer)) or period < 1:
        raise ValueError(f"{name}: period must be an int >= 1, got {period!r}")
    if backend not in (None,) + BACKENDS:
        raise ValueError(f"{name}: backend must be None, 'reference' or 'chunked', got "
                         f"{backend!r}")


def _call(rule: str, prim, args: tuple, period, backend):
    _check(rule, args, period, backend)
    if backend is None:
        backend = "reference" if is_reference_forced() else "chunked"
    return prim(*args, period=int(period), backend=backend)


def delta_rule_periodic(k: Any, v: Any, q: Any, alpha: Any, theta: Any, m0: Any, *,
                        period: int, backend: Optional[str] = None) -> tuple:
    """The delta rule of `kernels.delta_rule` written once every `period` tokens (module
    docstring): returns ``(y, m_final)``, ``m_final`` the memory after the last whole chunk.
    Differentiable in every argument (once). `backend`: ``"chunked"`` (the default) or
    ``"reference"`` (the sequential loop; also under `kernels.force_reference`).

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> k, v, q = rng.standard_normal((3, 7, 4)) * 0.5
    >>> alpha, theta, m0 = np.full(7, 0.1), np.full(7, 0.5), np.zeros((4, 4))
    >>> y, m = delta_rule_periodic(k, v, q, alpha, theta, m0, period=3)
    >>> y.shape, m.shape
    ((7, 4), (4, 4))
    >>> import kernels       # the same memory as the per-token rule over the 6 whole tokens
    >>> bool(np.allclose(m, kernels.delta_rule(k[:6], v[:6], q[:6], alpha[:6], theta[:6], m0)[1]))
    True
    >>> bool(np.allclose(y[:2], 0.0))                     # tokens 0, 1 read the initial memory
    True
    """
    return _call("delta", _delta, (k, v, q, alpha, theta, m0), period, backend)


def titans_rule_periodic(k: Any, v: Any, q: Any, alpha: Any, theta: Any, eta: Any, m0: Any,
                         s0: Any, *, period: int, backend: Optional[str] = None) -> tuple:
    """The Titans rule of `kernels.titans_rule` written once every `period` tokens: returns
    ``(y, m_final, s_final)``. As `delta_rule_periodic` otherwise.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> k, v, q = rng.standard_normal((3, 2, 8, 4)) * 0.5
    >>> gate, m0 = np.full((2, 8), 0.2), np.zeros((2, 4, 4))
    >>> y, m, s = titans_rule_periodic(k, v, q, gate, gate, gate, m0, m0, period=4)
    >>> y.shape, m.shape, s.shape
    ((2, 8, 4), (2, 4, 4), (2, 4, 4))
    """
    return _call("titans", _titans, (k, v, q, alpha, theta, eta, m0, s0), period, backend)


def hebbian_rule_periodic(k: Any, v: Any, q: Any, alpha: Any, m0: Any, *, period: int,
                          backend: Optional[str] = None) -> tuple:
    """The Hebbian rule of `kernels.hebbian_rule` written once every `period` tokens: returns
    ``(y, m_final)``. As `delta_rule_periodic` otherwise.

    >>> import numpy as np
    >>> k = v = q = np.eye(4)
    >>> y, m = hebbian_rule_periodic(k, v, q, np.zeros(4), np.zeros((4, 4)), period=2)
    >>> np.diag(y).tolist()         # token 0 reads before the write, token 1 after it, ...
    [0.0, 1.0, 0.0, 1.0]
    """
    return _call("hebbian", _hebbian, (k, v, q, alpha, m0), period, backend)
