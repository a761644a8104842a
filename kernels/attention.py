"""Sliding-window attention as a kernel pair, with its array-module reference.

Token i attends to the `window` most recent tokens up to and including itself,
``i - window < j <= i``, with softmax weights over ``q_i . k_j / sqrt(head_dim)``.

The forward returns the output and the log-sum-exp of each row's scores (FlashAttention's
residual). The backward uses them to rebuild each block's probabilities with one product and
one exp, ``P = exp(S - lse)``, instead of re-running the softmax and its normalisation::

    D_i = dO_i . O_i        dS = P * (dO V^T - D)       dQ = dS K / sqrt(hd)
    dK = dS^T Q / sqrt(hd)  dV = P^T dO

The reference walks the sequence in blocks of query rows; a block of B queries only ever sees
the B + window - 1 keys of its band, so time and memory are linear in the sequence length.
Forward mode (JVP) runs the reference on either backend.

Non-finite inputs: each output row, gradient row and tangent row depends on its window only,
as a row-by-row computation would give it. A block's products run over its whole band, where
masked keys get weight 0, and ``0 * inf = NaN`` would carry a NaN or inf from a key or value a
query never attends to (a later token, or one that has left the window) into that query's
row. So each call first checks the inputs that can cross rows (v in the forward; k, D and lse
in the backward; k, v and their tangents in forward mode); when one holds a non-finite entry,
a band that holds one is walked row by row over each row's own window (the other bands keep
the blocked path). Rows whose window holds a non-finite value get what IEEE arithmetic gives
there (typically NaN or inf); the other rows are unaffected. All-finite inputs take the
blocked path as is: the ``isfinite`` passes over those inputs are the only extra work.
"""
from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np

from tape.backend import array_module
from tape.rules import custom_rule

from . import cuda_attention   # CuPy is imported only when a kernel is launched
from ._common import batch_size, check_same, dtype, round_bf16, shape
from .dispatch import backend_for

def block_rows(window: int) -> int:
    """Query rows per block: a block of B rows computes ``B (B + window - 1)`` scores, of which
    ``B window`` are inside the window, so small blocks waste less, while large ones amortise
    NumPy's per-call cost. Half the window, within [32, 128], measured fastest on CPU (e.g.
    2.2x faster than 128 rows at window 32, head_dim 16, 128 tokens, forward plus backward).

    >>> block_rows(32), block_rows(128), block_rows(1024)
    (32, 64, 128)
    """
    return min(128, max(32, window // 2))


def _finite(xp, arrays) -> bool:
    """True when every entry of every array (None skipped) is finite."""
    return all(bool(xp.isfinite(a).all()) for a in arrays if a is not None)


def _blocks(xp, s: int, window: int, exact=None):
    """(i0, i1, j0, mask) for each block of query rows: keys j0..i1-1, `mask` True where
    the key is inside the row's window.

    `exact`, when given, is ``(queries, keys)``: the call's arrays indexed ``[:, query]`` and
    ``[:, key]`` (None skipped). A block whose rows or band of them hold a non-finite entry is
    then split into single rows, each with the keys of its own window only (mask all True),
    so that no masked product can turn a non-finite key or value into a NaN of another row."""
    rows = block_rows(window)
    for i0 in range(0, s, rows):
        i1 = min(s, i0 + rows)
        j0 = max(0, i0 - window + 1)
        if exact is not None and not (
                _finite(xp, (None if a is None else a[:, i0:i1] for a in exact[0]))
                and _finite(xp, (None if a is None else a[:, j0:i1] for a in exact[1]))):
            for t in range(i0, i1):
                lo = max(0, t - window + 1)
                yield t, t + 1, lo, xp.ones((1, t + 1 - lo), dtype=bool)
            continue
        rel = xp.arange(i0, i1)[:, None] - xp.arange(j0, i1)[None, :]
        yield i0, i1, j0, (rel >= 0) & (rel < window)


def _scores(xp, q, k, mask, scale):
    S = (q @ xp.swapaxes(k, -1, -2)) * scale
    return xp.where(mask, S, -xp.inf)


def swa_forward(q, k, v, window: int):
    """Reference forward on ``[B, s, hd]`` arrays: ``(out, lse)`` with lse ``[B, s]``."""
    xp = array_module(q)
    B, s, hd = q.shape
    scale = 1.0 / math.sqrt(hd)
    out = xp.empty_like(q)
    lse = xp.empty((B, s), q.dtype)
    # Masked scores are replaced, so a non-finite q or k stays in its own rows; only the
    # masked zeros of P @ v can carry a non-finite value to another row.
    exact = None if _finite(xp, (v,)) else ((), (v,))
    for i0, i1, j0, mask in _blocks(xp, s, window, exact):
        S = _scores(xp, q[:, i0:i1], k[:, j0:i1], mask, scale)
        m = S.max(axis=-1, keepdims=True)   # finite: the diagonal is always in the window
        P = xp.exp(S - m)
        denom = P.sum(axis=-1, keepdims=True)
        out[:, i0:i1] = (P @ v[:, j0:i1]) / denom
        lse[:, i0:i1] = (m + xp.log(denom))[..., 0]
    return out, lse


def swa_backward(q, k, v, out, lse, dout, window: int, need: tuple):
    """Reference backward: ``(dq, dk, dv)`` (None where ``need`` is False)."""
    xp = array_module(q)
    B, s, hd = q.shape
    scale = 1.0 / math.sqrt(hd)
    need_q, need_k, need_v = need
    dq = xp.empty_like(q) if need_q else None
    dk = xp.zeros_like(k) if need_k else None
    dv = xp.zeros_like(v) if need_v else None
    D = (dout * out).sum(axis=-1)
    # Every product here can carry a non-finite q, k, v, dout, D or lse across rows through
    # a masked zero. With out and lse from `swa_forward` on the same q, k, v, three arrays
    # screen them all: a non-finite q_i makes lse_i non-finite, a non-finite v_j makes out_j
    # non-finite (key j is in the window of query j), and out_i, dout_i reach D_i.
    exact = None if _finite(xp, (k, D, lse)) else ((q, dout, D, lse), (k, v))
    for i0, i1, j0, mask in _blocks(xp, s, window, exact):
        P = xp.exp(_scores(xp, q[:, i0:i1], k[:, j0:i1], mask, scale)
                   - lse[:, i0:i1, None])
        g = dout[:, i0:i1]
        if need_v:
            dv[:, j0:i1] += xp.swapaxes(P, -1, -2) @ g
        if need_q or need_k:
            dS = P * (g @ xp.swapaxes(v[:, j0:i1], -1, -2) - D[:, i0:i1, None])
            if need_q:
                dq[:, i0:i1] = (dS @ k[:, j0:i1]) * scale
            if need_k:
                dk[:, j0:i1] += (xp.swapaxes(dS, -1, -2) @ q[:, i0:i1]) * scale
    return dq, dk, dv


def swa_jvp(q, k, v, tq, tk, tv, window: int):
    """Reference forward mode: ``(out, tangent of out)``; None tangents are zeros."""
    xp = array_module(q)
    B, s, hd = q.shape
    scale = 1.0 / math.sqrt(hd)
    out, tout = xp.empty_like(q), xp.zeros_like(q)
    # A non-finite q or tq stays in its own rows; k, v and their tangents can cross them.
    keys = (k, v, tk, tv)
    exact = None if _finite(xp, keys) else ((), keys)
    for i0, i1, j0, mask in _blocks(xp, s, window, exact):
        S = _scores(xp, q[:, i0:i1], k[:, j0:i1], mask, scale)
        P = xp.exp(S - S.max(axis=-1, keepdims=True))
        P /= P.sum(axis=-1, keepdims=True)
        vb = v[:, j0:i1]
        out[:, i0:i1] = P @ vb
        dS = xp.zeros_like(P)
        if tq is not None:
            dS += tq[:, i0:i1] @ xp.swapaxes(k[:, j0:i1], -1, -2)
        if tk is not None:
            dS += q[:, i0:i1] @ xp.swapaxes(tk[:, j0:i1], -1, -2)
        dS *= scale
        dP = P * (dS - (P * dS).sum(axis=-1, keepdims=True))
        tout[:, i0:i1] = dP @ vb
        if tv is not None:
            tout[:, i0:i1] += P @ tv[:, j0:i1]
    return out, tout


# -- the primitive -------------------------------------------------------------------------------

def _flat(x):
    s, hd = x.shape[-2:]
    return array_module(x).reshape(x, (batch_size(x.shape[:-2]), s, hd))


def _stored(q, k, v, storage):
    """The inputs as the kernels see them: rounded to bf16 when bf16 storage is asked for."""
    if storage == "bf16":
        xp = array_module(q)
        return tuple(round_bf16(xp, a) for a in (q, k, v))
    return q, k, v


def _engine(backend):
    return cuda_attention if backend == "cuda" else None


def _swa_impl(q, k, v, *, window, storage="f32", backend="reference"):
    return _swa_augmented(None, q, k, v, window=window, storage=storage, backend=backend)[0]


def _swa_augmented(cfg, q, k, v, *, window, storage="f32", backend="reference"):
    lead = q.shape[:-2]
    if backend == "cuda":
        out, saved = _engine(backend).swa_forward(_flat(q), _flat(k), _flat(v), window, storage)
    else:
        qf, kf, vf = _stored(_flat(q), _flat(k), _flat(v), storage)
        out, lse = swa_forward(qf, kf, vf, window)
        saved = (qf, kf, vf, out, lse)
    return array_module(q).reshape(out, q.shape), (saved, lead, window, backend)


def _swa_reverse(cfg, residuals, dout):
    saved, lead, window, backend = residuals
    xp = array_module(dout)
    out = saved[3]
    dout = xp.reshape(xp.asarray(dout, dtype=out.dtype), out.shape)
    if backend == "cuda":
        grads = _engine(backend).swa_backward(saved, dout, window, cfg.active)
    else:
        grads = swa_backward(*saved, dout, window, cfg.active)
    return tuple(None if g is None else xp.reshape(g, lead + g.shape[1:]) for g in grads)


def _swa_forward_mode(cfg, primals, tangents, *, window, storage="f32", backend="reference"):
    xp = array_module(primals[0])
    shape_ = primals[0].shape
    qf, kf, vf = _stored(*(_flat(p) for p in primals), storage)
    tq, tk, tv = (None if t is None else _flat(xp.asarray(t)) for t in tangents)
    out, tout = swa_jvp(qf, kf, vf, tq, tk, tv, window)
    return xp.reshape(out, shape_), xp.reshape(tout, shape_)


_swa = custom_rule(_swa_impl, augmented_primal=_swa_augmented, reverse=_swa_reverse,
                   forward=_swa_forward_mode, name="swa_attention",
                   check_primal=False)


def swa_attention(q: Any, k: Any, v: Any, window: int, *, storage: Optional[str] = None,
                  backend: Optional[str] = None) -> Any:
    """Causal sliding-window attention: token i attends to tokens ``i - window < j <= i``
    with softmax weights over ``q_i . k_j / sqrt(head_dim)``.

    ``q, k, v``: ``[..., s, head_dim]`` (leading batch/head axes are shared). Differentiable
    (once) in q, k and v. ``storage="bf16"`` stores q, k, v (and the saved residuals) as
    bfloat16 and computes in float32: on the CUDA backend this halves the bytes read and kept
    for the backward; the reference rounds the same way, so it is the CUDA variant's oracle.
    Gradients then pass straight through the rounding. `backend` forces ``"reference"`` or
    ``"cuda"``; by default `kernels.select_backend` decides.

    A NaN or inf reaches only the rows whose window holds it: on the reference backend
    (forward, gradients and forward mode) every other row's output, gradient and tangent is
    finite, as a row-by-row softmax over the window gives it.

    >>> import numpy as np
    >>> from tape import autodiff, Reverse, Active
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 2, 6, 8))     # batch 2, 6 tokens, head_dim 8
    >>> out = swa_attention(q, k, v, window=3)
    >>> out.shape
    (2, 6, 8)
    >>> bool(np.allclose(swa_attention(q, k, v, window=1), v))   # a window of one: itself
    True
    >>> (dq,), = autodiff(Reverse, lambda q: np.sum(swa_attention(q, k, v, 3) ** 2),
    ...                   Active, Active(q))
    >>> dq.shape
    (2, 6, 8)
    """
    qs = shape(q)
    check_same("swa_attention", "q", q, {}, qs, "")
    if len(qs) < 2:
        raise ValueError(f"swa_attention: `q` must have shape [..., s, head_dim]; got {qs}")
    check_same("swa_attention", "q", q, {"k": k, "v": v}, qs, "the shape of `q`")
    if qs[-1] < 1:
        raise ValueError(f"swa_attention: head_dim (the last axis of `q`) must be >= 1, got "
                         f"shape {qs}")
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)):
        raise TypeError(f"swa_attention: window must be an int, got {window!r}")
    if window < 1:
        raise ValueError(f"swa_attention: window must be >= 1 (the token itself), got {window}")
    if storage not in (None, "f32", "bf16"):
        raise ValueError(f"swa_attention: storage must be None, 'f32' or 'bf16', got "
                         f"{storage!r}")
    storage = storage or "f32"
    if storage == "bf16" and str(dtype(q)) != "float32":
        raise TypeError(f"swa_attention: storage='bf16' takes float32 arrays, got {dtype(q)}")
    chosen = backend_for((q, k, v), qs[-1], backend, "swa_attention")
    return _swa(q, k, v, window=int(window), storage=storage, backend=chosen)
