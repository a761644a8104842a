"""The mini-NL chain: project -> memory -> gate -> loss, the smallest model that composes tape
ops with an opaque kernel pair.

``x [s, d_in]`` is projected to keys, values and queries by ``w_proj [d_in, 3d]`` (keys and
queries L2-normalised), a delta-rule memory (`kernels.delta_rule`, constant forget rate and
learning rate) reads them, a sigmoid gate ``sigmoid(x @ w_gate)`` scales the reads, and the
loss is the mean squared error against `target`. The gradient therefore chains
tape(loss, gate) x hand-written(kernel backward) x tape(projection).

>>> import numpy as np
>>> from tape import autodiff, Reverse, Active, Const
>>> w_proj, w_gate, x, target = example_inputs(seed=0)
>>> (dp, dg, _, _), = autodiff(Reverse, mini_nl_loss, Active, Active(w_proj), Active(w_gate),
...                            Const(x), Const(target))
>>> dp.shape, dg.shape
((3, 12), (3, 4))
"""
from __future__ import annotations

from typing import Any

import numpy as np

import kernels
from ops import sigmoid
from tape import array_module

ALPHA = 0.1    # forget rate of the memory
THETA = 0.5    # inner learning rate of the memory


def _unit(a):
    return a / np.sqrt(np.sum(a * a, axis=-1, keepdims=True) + 1e-6)


def mini_nl_loss(w_proj: Any, w_gate: Any, x: Any, target: Any) -> Any:
    """``mean((sigmoid(x @ w_gate) * delta_rule(k, v, q).y - target)^2)`` with
    ``[k | v | q] = x @ w_proj``.

    `w_proj`: ``[d_in, 3d]``; `w_gate`: ``[d_in, d]``; `x`: ``[s, d_in]``; `target`: ``[s, d]``.

    >>> w_proj, w_gate, x, target = example_inputs(seed=1)
    >>> bool(float(mini_nl_loss(w_proj, w_gate, x, target)) > 0)
    True
    """
    kvq = x @ w_proj                                    # project (tape)
    d = kvq.shape[-1] // 3
    k, v, q = _unit(kvq[:, :d]), kvq[:, d:2 * d], _unit(kvq[:, 2 * d:])
    s = k.shape[0]
    xp = array_module(x)                                # numpy or cupy
    y, _ = kernels.delta_rule(k, v, q, xp.full(s, ALPHA), xp.full(s, THETA),
                              xp.zeros((d, d), dtype=k.dtype))   # memory (kernel pair)
    gated = sigmoid(x @ w_gate) * y                     # gate (tape)
    return np.mean((gated - target) ** 2)               # loss (tape)


def example_inputs(seed: int = 0, s: int = 6, d_in: int = 3, d: int = 4) -> tuple:
    """Seeded float64 ``(w_proj, w_gate, x, target)`` for `mini_nl_loss`.

    >>> [a.shape for a in example_inputs()]
    [(3, 12), (3, 4), (6, 3), (6, 4)]
    """
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((d_in, 3 * d)), rng.standard_normal((d_in, d)),
            rng.standard_normal((s, d_in)), rng.standard_normal((s, d)))
