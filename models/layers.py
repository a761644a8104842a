"""The memory branch of one block: continuum memory system (CMS) levels over a matrix memory.

Each level has its own projections ``k, v, q = x W_K, x W_V, x W_Q`` (k and q L2-normalised)
and gates from ``c = concat(k, v)`` (DESIGN §5):

- ``alpha = sigmoid(c . w_a + b_a)``: the *retention* of the memory per update; the rule
  kernels take the forget rate, so they are given ``1 - alpha`` (computed as
  ``sigmoid(-(c . w_a + b_a))``, which keeps its precision when alpha is near 1). With the
  table's initial ``b_a = 3.0 / 4.0 / 4.5 / 5.0`` the memory keeps 95% / 98% / 99% / 99.3% of
  itself per update, so slower levels also remember longer.
- ``theta = softplus(c . w_t + b_t)``: the inner learning rate (delta, Titans); with
  ``bounded_theta`` (`ModelConfig`) it is ``sigmoid(c . w_t + b_t)`` in (0, 1) instead. The
  delta rule with a unit key multiplies the memory's component along k by ``1 - theta``, so
  it flips and grows once theta > 2: measured with 4 heads on the default text model, theta
  passed 1.5 by step 60 and a memory reached 4e10 at step 110 (NaN at 116). At the initial
  biases the two agree (both ``~exp(z)`` for ``z << 0``).
- ``eta = eta_max * sigmoid(c . w_e + b_e)``: the momentum (Titans). ``eta_max``
  (`ModelConfig.eta_max`, 0.9; 1.0 is DESIGN §5 exactly) keeps the momentum away from 1:
  measured on the default text model, the plain gate went from 0.84 to 0.99 within 40 steps,
  and with retention also near 1 the memory recurrence overflowed float32 at step 42.

Gate saturation. Trained freely, the sigmoid gates saturate: ``v`` is not normalised, so as
``W_V`` and the gate weights grow the pre-activations reach |z| of 10 or more, and there
``sigmoid'`` is under 1/20,000 of its slope at 0; the gate stops learning and alpha becomes a
hard 0 / 1 switch. `gate_excess` measures how far the sigmoid gates' pre-activations go beyond
a margin (``ModelConfig.gate_margin``, 5.0: DESIGN's largest initial bias, so the table itself
costs nothing); the training objective adds ``ModelConfig.gate_penalty`` times it
(`models.model.training_loss`). Theta is not penalised: softplus does not saturate upwards,
and below 0 it is ``~exp(z)``, a log-scale learning rate (the table starts slow levels at
``exp(-7.6)`` on purpose), where a unit step in z scales theta by e anywhere.

Departures from DESIGN §5, each a `ModelConfig` field that restores it: ``eta_max`` (1.0),
``gate_penalty`` (0.0; it changes the training objective only, not the model). The recall
task's ``key_shift`` and ``shared_qk_init`` are off by default, and so are ``bounded_theta``
and ``heads``: with ``heads = H > 1`` the keys, values and queries are split into H heads of
``d / H`` (`split_heads`), each L2-normalised on its own, and every level keeps one
``[d / H, d / H]`` memory per head with that head's own gates (weights ``[H, 2 d / H]``,
biases ``[H]``, read from the head's key and value); the kernels see the head axis as batch,
and the heads' reads are merged back to ``[B, T, d]``.

CMS semantics (exact). Level i has period ``p = periods[i]`` and counts tokens globally, across
chunks, from the start of the stream (``State.pos``). `conductor` says which levels *fire* at a
global token t: those with ``(t + 1) % p == 0``. When a level fires at token t it advances its
memory by running its rule kernel over all tokens since its previous firing (the p tokens
``t - p + 1 .. t``, in order, with their own gates), and token t reads the advanced memory
(read after write, as in DESIGN §5). Every other token reads the memory as of the level's
last firing, through the read-only kernel `kernels.memory_read`. For ``p = 1`` this is exactly
the per-token rule ``y_t = M_{t+1} q_t``: one rule-kernel call over the whole chunk. For
``p > 1`` the chunk is cut into segments ending at the firing tokens (one rule call per
segment); tokens of a segment that started in an earlier chunk wait in a pending buffer of the
level's state, as plain arrays, so they advance the memory but receive no gradient. The
memory itself carries across chunks without gradient too. On NumPy arrays a level with
``p > 1`` runs as one call of a periodic kernel (`kernels.delta_rule_periodic`, ...) over the
pending and the chunk's tokens: the same memory trajectory and reads, computed in chunks of p
tokens that end at the firing tokens; `kernels.force_reference` keeps the per-segment calls.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional

import numpy as np

import kernels
from ops import sigmoid, softplus
from tape import array_module, inactive
from tape.core import peek
from tape.backend import add_or_none

# DESIGN §5: gate-bias initial values by level.
B_ALPHA = (3.0, 4.0, 4.5, 5.0)
B_THETA = (-4.6, -5.6, -6.6, -7.6)
B_ETA = (1.5, 2.0, 2.5, 3.0)

_NORM_EPS = 1e-6


@dataclasses.dataclass
class Level:
    """Parameters of one CMS level: projections ``[d, d]``, gate weights ``[2d]``, gate biases
    ``[1]``."""
    w_k: Any
    w_v: Any
    w_q: Any
    w_a: Any
    b_a: Any
    w_t: Any
    b_t: Any
    w_e: Any
    b_e: Any


@dataclasses.dataclass
class LevelState:
    """A level's carried state (plain arrays, no gradient): memory ``m [B, d, d]``, Titans
    momentum ``s [B, d, d]`` (None for the other rules) and the pending tokens of an unfinished
    segment: ``pend = (k, v, q [B, period - 1, d], decay, theta, eta [B, period - 1])``, of
    which the first ``pos % period`` tokens are valid (the rest are zeros). A fixed shape, so a
    checkpointed state always matches `init_level_state`."""
    m: Any
    s: Optional[Any]
    pend: tuple


def conductor(t: int, periods: tuple) -> tuple:
    """Which CMS levels fire at global token `t` (0-based): level i fires when
    ``(t + 1) % periods[i] == 0``, i.e. once it has seen ``periods[i]`` new tokens.

    >>> conductor(0, (1, 8, 64))
    (True, False, False)
    >>> conductor(7, (1, 8, 64))
    (True, True, False)
    """
    return tuple((t + 1) % p == 0 for p in periods)


def init_level(rng: np.random.Generator, d: int, index: int, dtype: str,
               alpha_shift: float = 0.0, theta_shift: float = 0.0,
               shared_qk: bool = False, heads: int = 1) -> Level:
    """Random projections (std 1/sqrt(d)), small gate weights, and the DESIGN §5 gate biases of
    level `index` (the retention and inner-learning-rate biases moved by `alpha_shift` and
    `theta_shift`: `ModelConfig.alpha_bias_shift` / ``theta_bias_shift``). With `shared_qk`
    (`ModelConfig.shared_qk_init`) the query projection starts equal to the key projection;
    the two still train separately. With ``heads > 1`` every head has its own gates: weights
    ``[heads, 2 d / heads]`` (read from that head's key and value) and biases ``[heads]``.

    >>> lv = init_level(np.random.default_rng(0), 4, 1, "float64")
    >>> float(lv.b_a[0]), float(lv.b_t[0]), float(lv.b_e[0])
    (4.0, -5.6, 2.0)
    >>> init_level(np.random.default_rng(0), 8, 0, "float64", heads=2).w_a.shape
    (2, 8)
    """
    def mat():
        return (rng.standard_normal((d, d)) / math.sqrt(d)).astype(dtype)

    width = 2 * d // heads
    shape = (width,) if heads == 1 else (heads, width)

    def vec():
        # Small, so the gates start near their bias values but still depend on the token.
        return (rng.standard_normal(shape) * 0.1 / math.sqrt(width)).astype(dtype)

    def bias(table, shift=0.0):
        return np.full(heads, table[index] + shift, dtype=dtype)

    w_k, w_v, w_q = mat(), mat(), mat()
    if shared_qk:
        w_q = w_k.copy()      # drawn anyway, so the rest of the init is the same either way
    return Level(w_k=w_k, w_v=w_v, w_q=w_q, w_a=vec(), b_a=bias(B_ALPHA, alpha_shift),
                 w_t=vec(), b_t=bias(B_THETA, theta_shift), w_e=vec(), b_e=bias(B_ETA))


def init_level_state(batch: int, d: int, rule: str, period: int, xp: Any = np,
                     dtype: str = "float64", heads: int = 1) -> LevelState:
    """An empty memory (zeros) with an empty pending buffer. With ``heads > 1`` every array
    gains a head axis after the batch axis and the memories are ``[d / heads, d / heads]``.

    >>> st = init_level_state(2, 4, "titans", 8)
    >>> st.m.shape, st.s.shape, st.pend[0].shape, st.pend[3].shape
    ((2, 4, 4), (2, 4, 4), (2, 7, 4), (2, 7))
    >>> init_level_state(2, 8, "delta", 8, heads=2).pend[0].shape
    (2, 2, 7, 4)
    """
    lead = (batch,) if heads == 1 else (batch, heads)
    dh = d // heads
    m = xp.zeros(lead + (dh, dh), dtype=dtype)
    s = xp.zeros(lead + (dh, dh), dtype=dtype) if rule == "titans" else None
    seq = xp.zeros(lead + (period - 1, dh), dtype=dtype)
    gate = xp.zeros(lead + (period - 1,), dtype=dtype)
    return LevelState(m=m, s=s, pend=(seq, seq, seq, gate, gate, gate))


def split_heads(x, heads: int):
    """``[B, T, d] -> [B, heads, T, d / heads]`` (unchanged for one head).

    >>> split_heads(np.arange(8.0).reshape(1, 2, 4), 2)[0, 1].tolist()
    [[2.0, 3.0], [6.0, 7.0]]
    """
    if heads == 1:
        return x
    B, T, d = x.shape
    return x.reshape(B, T, heads, d // heads).transpose(0, 2, 1, 3)


def merge_heads(x, heads: int):
    """Inverse of `split_heads`: ``[B, heads, T, dh] -> [B, T, heads * dh]``.

    >>> x = np.arange(8.0).reshape(1, 2, 4)
    >>> bool(np.array_equal(merge_heads(split_heads(x, 2), 2), x))
    True
    """
    if heads == 1:
        return x
    B, H, T, dh = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, T, H * dh)


ROTARY_BASE = 10000.0


def rotary_tables(positions: Any, dh: int, xp: Any = np, dtype: str = "float64") -> tuple:
    """``(cos, sin)`` of the rotary angles ``positions[:, None] * ROTARY_BASE^(-2i/dh)``,
    ``[len(positions), dh / 2]``, computed in float64 and cast to `dtype`.

    >>> c, s = rotary_tables(np.arange(3), 4)
    >>> c.shape, float(c[0, 0]), round(float(s[1, 0]), 6)
    ((3, 2), 1.0, 0.841471)
    """
    freq = ROTARY_BASE ** (-np.arange(dh // 2, dtype=np.float64) * 2.0 / dh)
    angle = np.asarray(positions, dtype=np.float64)[:, None] * freq[None, :]
    return xp.asarray(np.cos(angle).astype(dtype)), xp.asarray(np.sin(angle).astype(dtype))


def rotate(x, cos, sin):
    """Rotary position embedding of ``x [..., T, dh]`` with tables ``[T, dh / 2]``: the pairs
    ``(x_i, x_{i + dh/2})`` turn by their angle. Rotating queries and keys by their positions
    makes the scores depend on the offset between them only:
    ``rotate(q, t) . rotate(k, s) = q . rotate(k, s - t)``.

    >>> c, s = rotary_tables(np.array([1, 3]), 2)
    >>> q, k = np.array([[0.3, -1.0], [0.3, -1.0]]), np.array([[2.0, 0.5], [2.0, 0.5]])
    >>> a = np.sum(rotate(q, c, s)[0] * rotate(k, c, s)[1])      # q at 1, k at 3
    >>> c2, s2 = rotary_tables(np.array([0, 2]), 2)
    >>> b = np.sum(rotate(q, c2, s2)[0] * rotate(k, c2, s2)[1])  # q at 0, k at 2
    >>> bool(np.isclose(a, b))
    True
    """
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)


def _gate(c, w, b, heads: int):
    """A gate pre-activation per token (and head): ``c . w + b``, ``[B, T]`` for one head,
    ``[B, heads, T]`` from ``c [B, heads, T, 2 dh]``, ``w [heads, 2 dh]``, ``b [heads]``."""
    if heads == 1:
        return c @ w + b
    return (c @ w[:, :, None])[..., 0] + b[:, None]


def _l2_normalise(x):
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + _NORM_EPS)


def _projections(level: Level, x, key_shift: bool = False, heads: int = 1) -> tuple:
    """``k, v, q`` and the three gate pre-activations ``z_a, z_t, z_e`` of one level.

    With `key_shift` the key of token t is projected from token t - 1 (zeros before the
    chunk's first token), so one write binds the previous token (a recall key) to the current
    one (its value). Attention has no positional signal, so without this an order-dependent
    binding must be found by the memory recurrence alone. It is the one-step case of the short
    causal convolution Titans puts after its k, v, q projections; off by default (DESIGN §5).
    With ``heads > 1`` the keys, values and queries are split into heads (`split_heads`), each
    L2-normalised on its own, and the gates are per head (`_gate`)."""
    if key_shift:
        xp = array_module(x)
        pad = xp.zeros((x.shape[0], 1) + tuple(x.shape[2:]), dtype=peek(x).dtype)
        k = np.concatenate([pad, x[:, :-1]], axis=1) @ level.w_k
    else:
        k = x @ level.w_k
    k = _l2_normalise(split_heads(k, heads))
    v = split_heads(x @ level.w_v, heads)
    q = _l2_normalise(split_heads(x @ level.w_q, heads))
    c = np.concatenate([k, v], axis=-1)
    return (k, v, q, _gate(c, level.w_a, level.b_a, heads),
            _gate(c, level.w_t, level.b_t, heads), _gate(c, level.w_e, level.b_e, heads))


def level_inputs(level: Level, x, key_shift: bool = False, eta_max: float = 1.0,
                 heads: int = 1, bounded_theta: bool = False) -> tuple:
    """Keys, values, queries and gates of one level for ``x [B, T, d]``: returns
    ``(k, v, q, alpha, theta, eta)`` with ``alpha`` the retention and ``eta`` the momentum
    scaled into ``(0, eta_max)`` (see the module docstring).

    >>> lv = init_level(np.random.default_rng(0), 4, 0, "float64")
    >>> k, v, q, alpha, theta, eta = level_inputs(lv, np.ones((2, 3, 4)))
    >>> alpha.shape, bool(0.9 < alpha.min() and alpha.max() < 1)
    ((2, 3), True)
    """
    k, v, q, za, zt, ze = _projections(level, x, key_shift, heads)
    return k, v, q, sigmoid(za), inner_rate(zt, bounded_theta), _momentum(ze, eta_max)


def inner_rate(zt, bounded: bool):
    """The inner learning rate theta from its pre-activation: ``softplus`` (DESIGN §5) or,
    `bounded`, ``sigmoid`` (module docstring).

    >>> z = np.array(-4.6)
    >>> round(float(inner_rate(z, False)), 5), round(float(inner_rate(z, True)), 5)
    (0.01, 0.00995)
    """
    return sigmoid(zt) if bounded else softplus(zt)


def _momentum(ze, eta_max: float):
    return sigmoid(ze) if eta_max == 1.0 else sigmoid(ze) * eta_max


def gate_excess(za, ze, rule: str, margin: float):
    """``mean(relu(|z| - margin)^2)`` of the retention pre-activations `za` ``[B, T]``, plus
    the same of the momentum's `ze` for Titans (the only rule that uses eta): zero while every
    sigmoid gate stays within ``|z| <= margin``, growing quadratically beyond.

    >>> float(gate_excess(np.array([[0.0, 7.0, -8.0]]), None, "delta", 5.0))
    4.333333333333333
    """
    def one(z):
        return np.mean(np.maximum(np.abs(z) - margin, 0.0) ** 2)
    return one(za) + one(ze) if rule == "titans" else one(za)


def _run_rule(rule: str, k, v, q, decay, theta, eta, m, s,
              period: Optional[int] = None) -> tuple:
    """One rule-kernel call (the periodic kernel when `period` is given); returns
    ``(y, m_final, s_final or None)``."""
    extra = {} if period is None else {"period": period}
    kernel = getattr(kernels, f"{rule}_rule" if period is None else f"{rule}_rule_periodic")
    if rule == "delta":
        y, m = kernel(k, v, q, decay, theta, m, **extra)
        return y, m, None
    if rule == "titans":
        return kernel(k, v, q, decay, theta, eta, m, s, **extra)
    y, m = kernel(k, v, q, decay, m, **extra)
    return y, m, None


def _tokens(a, index: int, sl: slice):
    """Slice the token axis of the `index`-th array of a ``(k, v, q, decay, theta, eta)``
    tuple: the axis before the last for the vectors (0-2), the last for the gates (3-5)."""
    return a[..., sl, :] if index < 3 else a[..., sl]


def _join(index: int, p, a):
    """Concatenate two arrays of the `index`-th kind along their token axis."""
    return np.concatenate([p, a], axis=-2 if index < 3 else -1)


# The new state carries no derivative. As a `tape.inactive` call, a compiled training step
# keeps it traced, so each replay returns that call's state (`primal` would fix the traced one).
_state_value = inactive(lambda a: a)


def level_forward(level: Level, x, st: LevelState, period: int, pos: int, rule: str,
                  key_shift: bool = False, gate_margin: Optional[float] = None,
                  eta_max: float = 1.0, heads: int = 1, bounded_theta: bool = False) -> tuple:
    """One CMS level over a chunk ``x [B, T, d]`` that starts at global token `pos`.
    Returns ``(y [B, T, d], new LevelState, excess)``; the new state holds plain arrays only,
    and ``excess`` is `gate_excess` at `gate_margin` (None when `gate_margin` is None).
    Semantics in the module docstring; `key_shift` as in `_projections`, `eta_max` as in
    `level_inputs`; with ``heads > 1`` each head runs its own memory (a head axis after the
    batch axis, which the kernels treat as batch) and the reads are merged back.
    """
    k, v, q, za, zt, ze = _projections(level, x, key_shift, heads)
    excess = None if gate_margin is None else gate_excess(za, ze, rule, gate_margin)
    # The kernels take the forget rate 1 - alpha; sigmoid(-z) is that without cancellation.
    decay, theta, eta = sigmoid(-za), inner_rate(zt, bounded_theta), _momentum(ze, eta_max)
    T = x.shape[1]
    m, s = st.m, st.s
    if period == 1:
        y, m, s = _run_rule(rule, k, v, q, decay, theta, eta, m, s)
        return merge_heads(y, heads), LevelState(m=_state_value(m), s=_state_value(s),
                                                 pend=st.pend), excess

    cur = (k, v, q, decay, theta, eta)
    if period >= PERIODIC_KERNEL_MIN_PERIOD and _periodic_kernel_applies(x):
        y, new = _level_periodic(rule, cur, st, period, pos)
        return merge_heads(y, heads), new, excess
    outs = []
    pend = tuple(_tokens(a, i, slice(0, pos % period)) for i, a in enumerate(st.pend))
    start = 0
    first_fire = (period - 1 - pos) % period       # local index of the first firing token
    for end in range(first_fire, T, period):       # segment [start, end] ends with a firing
        seg = tuple(_tokens(a, i, slice(start, end + 1)) for i, a in enumerate(cur))
        if end > start:                            # tokens before the firing read frozen memory
            outs.append(kernels.memory_read(seg[2][..., :-1, :], m))
        full = tuple(_join(i, p, a) for i, (p, a) in enumerate(zip(pend, seg)))
        y, m, s = _run_rule(rule, *full, m, s)
        outs.append(y[..., -1:, :])                # the firing token reads after the write
        pend = tuple(_tokens(a, i, slice(0, 0)) for i, a in enumerate(pend))
        start = end + 1
    if start < T:                                  # an unfinished segment: read, then wait
        tail = tuple(_tokens(a, i, slice(start, None)) for i, a in enumerate(cur))
        outs.append(kernels.memory_read(tail[2], m))
        pend = tuple(_join(i, p, a) for i, (p, a) in enumerate(zip(pend, tail)))
    y = outs[0] if len(outs) == 1 else np.concatenate(outs, axis=-2)
    new = LevelState(m=_state_value(m), s=_state_value(s),
                     pend=tuple(_pad_pending(_state_value(a), period, i < 3)
                                for i, a in enumerate(pend)))
    return merge_heads(y, heads), new, excess


# Levels of at least this period run as one periodic kernel call per chunk
# (`kernels.delta_rule_periodic`, ...) rather than one rule call per firing; a very large value
# keeps the per-firing path, which `kernels.force_reference` also selects.
PERIODIC_KERNEL_MIN_PERIOD = 2


def _periodic_kernel_applies(x) -> bool:
    """Whether the periodic kernels run a level: always, but under `kernels.force_reference`
    (on NumPy and on CuPy arrays: tests/kernels/test_gpu_periodic.py checks the CuPy calls
    against NumPy's)."""
    return not kernels.is_reference_forced()


def _level_periodic(rule: str, cur: tuple, st: LevelState, period: int, pos: int) -> tuple:
    """The CMS semantics of `level_forward` for ``period > 1`` as one periodic kernel call: the
    pending tokens go first, so that the kernel's chunks of `period` tokens end exactly at the
    firing tokens, and their reads are dropped. Returns ``(y [B, (H,) T, dh], LevelState)``."""
    held = pos % period
    T = peek(cur[0]).shape[-2]
    full = cur
    if held:
        full = tuple(_join(i, _tokens(p, i, slice(0, held)), a)
                     for i, (p, a) in enumerate(zip(st.pend, cur)))
    y, m, s = _run_rule(rule, *full, st.m, st.s, period=period)
    if held:
        y = y[..., held:, :]
    waiting = (held + T) % period               # tokens after the last firing
    pend = tuple(_tokens(a, i, slice(held + T - waiting, held + T)) for i, a in enumerate(full))
    new = LevelState(m=_state_value(m), s=_state_value(s),
                     pend=tuple(_pad_pending(_state_value(a), period, i < 3)
                                for i, a in enumerate(pend)))
    return y, new


def _pad_pending(a, period: int, is_vector: bool):
    """Zero-pad a pending array along its token axis to the fixed length ``period - 1``."""
    xp = array_module(a)
    axis = a.ndim - 2 if is_vector else a.ndim - 1
    shape = list(a.shape)
    shape[axis] = period - 1 - a.shape[axis]
    return xp.concatenate([a, xp.zeros(tuple(shape), dtype=a.dtype)], axis=axis)


def cms_forward(levels: list, x, states: list, periods: tuple, pos: int, rule: str,
                key_shift: bool = False, gate_margin: Optional[float] = None,
                eta_max: float = 1.0, heads: int = 1, bounded_theta: bool = False) -> tuple:
    """All CMS levels of a block: the sum of their reads, times 1/sqrt(k) when k > 2 levels.
    Returns ``(y [B, T, d], new level states, excess)``, ``excess`` the sum of the levels'
    `gate_excess` (None when `gate_margin` is None)."""
    total, new_states, excess = None, [], None
    for level, st, p in zip(levels, states, periods):
        y, ns, e = level_forward(level, x, st, p, pos, rule, key_shift, gate_margin, eta_max,
                                 heads, bounded_theta)
        total, excess = add_or_none(total, y), add_or_none(excess, e)
        new_states.append(ns)
    if len(levels) > 2:
        total = total * (1.0 / math.sqrt(len(levels)))
    return total, new_states, excess
