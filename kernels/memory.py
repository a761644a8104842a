"""Matrix-memory kernel pairs: delta, Titans and Hebbian rules, and the frozen read.

Each rule is one opaque primitive (`tape.custom_rule`, once differentiable) with several
results: the per-token reads ``y`` and the final state(s). Its reverse rule is the
hand-written reverse-time recurrence of `kernels.memory_ref` (or the CUDA kernels of
`kernels.cuda_memory`), never a tape of per-token operations.

Shapes: ``k, v, q`` are ``[..., s, d]``, the gates ``[..., s]``, states ``[..., d, d]``; the
leading axes (batch, heads) are shared by all arguments and are run together, as one batch of
matrix products per token. Forward mode (JVP) runs the reference's tangent recurrence on either
backend.

On NumPy arrays the rules run by default in the chunkwise-parallel forms of
`kernels.memory_chunked` and `kernels.memory_chunked_titans` (equal results, a few batched
products per chunk of tokens instead of a Python step per token) once a sequence is long enough
for it to be faster; on CuPy arrays (float32 or float64) in the same forms with cuBLAS and the
kernels of `kernels.cuda_memory_chunked`, once a sequence is long enough
(`cuda_memory_chunked.preferred`). ``backend="reference"`` or `kernels.force_reference`
selects the sequential loop, ``backend="cuda"`` the per-token CUDA kernels.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from tape.backend import array_module, module_name
from tape.rules import custom_rule

from . import memory_ref as ref
from ._common import (batch_size, check_memory_shapes, check_same, gate_from_time_major,
                      gate_to_time_major, shape, seq_from_time_major, seq_to_time_major)
from . import cuda_memory_chunked
from . import memory_chunked as chunked
from . import memory_chunked_titans as chunked_titans
from .dispatch import backend_for, chunked_gpu_usable, is_reference_forced

_SEQS = ("k", "v", "q")
_ARGS = {
    "delta": ("k", "v", "q", "alpha", "theta", "m0"),
    "titans": ("k", "v", "q", "alpha", "theta", "eta", "m0", "s0"),
    "hebbian": ("k", "v", "q", "alpha", "m0"),
}
_STATES = {"delta": ("m0",), "titans": ("m0", "s0"), "hebbian": ("m0",)}
_PUBLIC = {"delta": "delta_rule", "titans": "titans_rule", "hebbian": "hebbian_rule"}


def _check(rule: str, args: tuple, checkpoint_every) -> int:
    """Validate a call; returns d."""
    name = _PUBLIC[rule]
    named = dict(zip(_ARGS[rule], args))
    d = check_memory_shapes(name, named, _STATES[rule])
    if checkpoint_every is not None and (isinstance(checkpoint_every, bool)
                                         or not isinstance(checkpoint_every, (int, np.integer))
                                         or checkpoint_every < 1):
        raise ValueError(f"{name}: checkpoint_every must be None or an int >= 1, got "
                         f"{checkpoint_every!r}")
    return d


def _inputs(rule: str, args: tuple):
    """Time-major inputs (`memory_ref.Seq`) and the initial states, flattened to one batch."""
    named = dict(zip(_ARGS[rule], args))
    k = named["k"]
    xp = array_module(k)
    lead, (s, d) = k.shape[:-2], k.shape[-2:]
    B = batch_size(lead)
    seq = {n: seq_to_time_major(xp, named[n], B, s) for n in _SEQS}
    ret = gate_to_time_major(xp, 1 - named["alpha"], B, s)
    th = gate_to_time_major(xp, named["theta"], B, s) if "theta" in named else None
    eta = gate_to_time_major(xp, named["eta"], B, s) if "eta" in named else None
    x = ref.Seq(seq["k"], seq["v"], seq["q"], ret, th, eta)
    init = tuple(xp.reshape(named[n], (B, d, d)) for n in _STATES[rule])
    return x, init, lead


def _outputs(xp, y, finals, lead):
    s, _, d = y.shape
    return (seq_from_time_major(xp, y, lead),) + tuple(
        xp.reshape(m, lead + (d, d)) for m in finals)


def _engine(backend: str, rule: str):
    if backend == "cuda":
        from . import cuda_memory
        return cuda_memory
    if backend == "cuda-chunked":
        return cuda_memory_chunked
    if backend == "chunked":
        return chunked_titans if rule == "titans" else chunked
    return ref


def _make(rule: str):
    names = _ARGS[rule]
    spec = ref.RULES[rule]

    def impl(*args, checkpoint_every=None, backend="reference"):
        x, init, lead = _inputs(rule, args)
        # No derivative wanted: run in chunks of 64 tokens, so that memory stays near
        # (s/64 + 64) d^2 instead of s d^2.
        y, finals, _ = _engine(backend, rule).forward(spec, x, init, 64)
        return _outputs(array_module(x.k), y, finals, lead)

    def augmented_primal(cfg, *args, checkpoint_every=None, backend="reference"):
        x, init, lead = _inputs(rule, args)
        y, finals, saved = _engine(backend, rule).forward(spec, x, init, checkpoint_every)
        return _outputs(array_module(x.k), y, finals, lead), (saved, lead, backend)

    def reverse(cfg, residuals, cts):
        saved, lead, backend = residuals
        xp = array_module(saved.x.k)
        dy, dfinals = cts[0], cts[1:]
        B = batch_size(lead)
        s, _, d = saved.x.k.shape
        need = frozenset(n for n, a in zip(names, cfg.active) if a)
        dyT = None if dy is None else seq_to_time_major(xp, xp.asarray(dy, saved.x.k.dtype),
                                                        B, s)
        dfin = tuple(None if g is None else xp.reshape(g, (B, d, d)) for g in dfinals)
        g = _engine(backend, rule).backward(spec, saved, dyT, dfin, need)
        out = []
        for n in names:
            if n not in need:
                out.append(None)
            elif n in _STATES[rule]:
                out.append(xp.reshape(g["init"][_STATES[rule].index(n)], lead + (d, d)))
            elif n in _SEQS:
                out.append(seq_from_time_major(xp, g[n], lead))
            else:
                out.append(gate_from_time_major(xp, g[n], lead))
        return tuple(out)

    def forward(cfg, primals, tangents, checkpoint_every=None, backend="reference"):
        x, init, lead = _inputs(rule, primals)
        xp = array_module(x.k)
        t = dict(zip(names, tangents))
        s, B, d = x.k.shape
        dx = ref.Seq(
            *(None if t[n] is None else seq_to_time_major(xp, t[n], B, s) for n in _SEQS),
            None if t["alpha"] is None else gate_to_time_major(xp, -t["alpha"], B, s),
            None if t.get("theta") is None else gate_to_time_major(xp, t["theta"], B, s),
            None if t.get("eta") is None else gate_to_time_major(xp, t["eta"], B, s))
        dinit = tuple(None if t[n] is None else xp.reshape(t[n], (B, d, d))
                      for n in _STATES[rule])
        (y, finals), (dy, dfinals) = ref.jvp(spec, x, dx, init, dinit)
        return _outputs(xp, y, finals, lead), _outputs(xp, dy, dfinals, lead)

    impl.__name__ = _PUBLIC[rule]
    return custom_rule(impl, augmented_primal=augmented_primal, reverse=reverse,
                       forward=forward, multiple_results=True, name=_PUBLIC[rule],
                       check_primal=False)


_delta = _make("delta")
_titans = _make("titans")
_hebbian = _make("hebbian")


def _default_backend(rule: str, args: tuple, d: int, chosen: str) -> str:
    """The chunkwise-parallel form where it applies (same results, fewer sequential steps):
    on NumPy arrays for `chunked.preferred` lengths; on a GPU for
    `cuda_memory_chunked.preferred` lengths, and for every `chunked.preferred` length where no
    per-token CUDA kernel applies (float64): the per-token reference is a Python loop of small
    launches there."""
    s = shape(args[0])[-2]
    if module_name(args[0]) == "numpy":
        return "chunked" if chosen == "reference" and chunked.preferred(rule, s) else chosen
    long_enough = (cuda_memory_chunked.preferred(rule, s)
                   or chosen == "reference" and chunked.preferred(rule, s))
    if long_enough and chunked_gpu_usable(args, d):
        return "cuda-chunked"
    return chosen


def _call(rule, prim, args, checkpoint_every, backend):
    d = _check(rule, args, checkpoint_every)
    chosen = backend_for(args, d, backend, _PUBLIC[rule])
    if backend is None and not is_reference_forced():
        chosen = _default_backend(rule, args, d, chosen)
    every = None if checkpoint_every is None else int(checkpoint_every)
    return prim(*args, checkpoint_every=every, backend=chosen)


def delta_rule(k: Any, v: Any, q: Any, alpha: Any, theta: Any, m0: Any, *,
               checkpoint_every: Optional[int] = None, backend: Optional[str] = None) -> tuple:
    """The delta-rule memory ``M' = (1 - alpha) M - theta (M k - v) k^T``, read after write:
    ``y_t = M_{t+1} q_t``. Returns ``(y, m_final)``.

    ``k, v, q``: ``[..., s, d]``; ``alpha, theta``: ``[..., s]``; ``m0``: ``[..., d, d]``.
    Differentiable in every argument (once). The backward keeps all ``s + 1`` states, or with
    ``checkpoint_every=C`` one state every C tokens, recomputing the rest (memory
    ``(s/C + C) d^2`` instead of ``s d^2``, for one extra forward pass). `backend` forces
    ``"reference"`` or ``"cuda"``; by default `kernels.select_backend` decides.

    >>> import numpy as np
    >>> from tape import autodiff, Reverse, Active, Const
    >>> rng = np.random.default_rng(0)
    >>> k, v, q = rng.standard_normal((3, 5, 4)) * 0.5
    >>> alpha, theta, m0 = np.full(5, 0.1), np.full(5, 0.5), np.zeros((4, 4))
    >>> y, m = delta_rule(k, v, q, alpha, theta, m0)
    >>> y.shape, m.shape
    ((5, 4), (4, 4))
    >>> def loss(k, theta):
    ...     y, m = delta_rule(k, v, q, alpha, theta, m0, checkpoint_every=2)
    ...     return np.sum(y ** 2) + np.sum(m)
    >>> (dk, dtheta), = autodiff(Reverse, loss, Active, Active(k), Active(theta))
    >>> dk.shape, dtheta.shape
    ((5, 4), (5,))
    """
    return _call("delta", _delta, (k, v, q, alpha, theta, m0), checkpoint_every, backend)


def titans_rule(k: Any, v: Any, q: Any, alpha: Any, theta: Any, eta: Any, m0: Any, s0: Any, *,
                checkpoint_every: Optional[int] = None, backend: Optional[str] = None) -> tuple:
    """The Titans memory with momentum: ``S' = eta S - theta (M k - v) k^T``,
    ``M' = (1 - alpha) M + S'``, read after write ``y_t = M_{t+1} q_t``.
    Returns ``(y, m_final, s_final)``.

    Shapes as `delta_rule`, with ``eta: [..., s]`` and ``s0: [..., d, d]``.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> k, v, q = rng.standard_normal((3, 2, 6, 4)) * 0.5    # a batch of 2 sequences
    >>> gate = np.full((2, 6), 0.2)
    >>> y, m, s = titans_rule(k, v, q, gate, gate, gate, np.zeros((2, 4, 4)), np.zeros((2, 4, 4)))
    >>> y.shape, m.shape, s.shape
    ((2, 6, 4), (2, 4, 4), (2, 4, 4))
    """
    return _call("titans", _titans, (k, v, q, alpha, theta, eta, m0, s0), checkpoint_every,
                 backend)


def hebbian_rule(k: Any, v: Any, q: Any, alpha: Any, m0: Any, *,
                 checkpoint_every: Optional[int] = None, backend: Optional[str] = None) -> tuple:
    """The Hebbian memory ``M' = (1 - alpha) M + v k^T``, read after write
    ``y_t = M_{t+1} q_t``. Returns ``(y, m_final)``. Shapes as `delta_rule`.

    >>> import numpy as np
    >>> k = v = q = np.eye(3)
    >>> y, m = hebbian_rule(k, v, q, np.zeros(3), np.zeros((3, 3)))
    >>> bool(np.allclose(m, np.eye(3))), bool(np.allclose(y, np.eye(3)))
    (True, True)
    """
    return _call("hebbian", _hebbian, (k, v, q, alpha, m0), checkpoint_every, backend)


# -- the frozen read: y_t = M q_t with a fixed M (idle memory levels) ---------------------------

def _read_impl(q, m):
    return q @ array_module(q).swapaxes(m, -1, -2)


def _read_augmented(cfg, q, m):
    return _read_impl(q, m), (q if cfg.active[1] else None, m if cfg.active[0] else None)


def _read_reverse(cfg, saved, dy):
    q, m = saved
    xp = array_module(dy)
    dq = dy @ m if cfg.active[0] else None
    dm = xp.swapaxes(dy, -1, -2) @ q if cfg.active[1] else None
    return dq, dm


def _read_forward(cfg, primals, tangents):
    q, m = primals
    dq, dm = tangents
    xp = array_module(q)
    y = _read_impl(q, m)
    t = None if dq is None else dq @ xp.swapaxes(m, -1, -2)
    if dm is not None:
        tm = q @ xp.swapaxes(dm, -1, -2)
        t = tm if t is None else t + tm
    return y, t


_read = custom_rule(_read_impl, augmented_primal=_read_augmented, reverse=_read_reverse,
                    forward=_read_forward, name="memory_read", check_primal=False)


def memory_read(q: Any, m: Any) -> Any:
    """Read a frozen memory: ``y_t = M q_t`` for every token (``y = q M^T``), as used by idle
    memory levels. ``q``: ``[..., s, d]``, ``m``: ``[..., d, d]``. Differentiable (once) in
    both. On a GPU this is one batched cuBLAS product, which no hand-written kernel beats.

    >>> import numpy as np
    >>> memory_read(np.array([[1.0, 2.0]]), np.array([[0.0, 1.0], [1.0, 0.0]]))
    array([[2., 1.]])
    """
    qs = shape(q)
    check_same("memory_read", "q", q, {}, qs, "")
    if len(qs) < 2:
        raise ValueError(f"memory_read: `q` must have shape [..., s, d]; got {qs}")
    check_same("memory_read", "q", q, {"m": m}, qs[:-2] + (qs[-1], qs[-1]),
               "the leading axes of `q` followed by [d, d]")
    return _read(q, m)
