"""Choosing the next byte from a stream's logits: greedy, temperature and nucleus (top-p).

`pick_token` follows `models.decode._pick` (so ``hecate sample`` and the server draw the same
bytes from the same seed): ``temperature <= 0`` is the argmax; otherwise one draw of
``rng.choice`` from ``softmax(logits / temperature)``. With ``top_p < 1`` the draw is
restricted to the nucleus: the fewest most-likely tokens whose probabilities sum to at least
``top_p`` (ties in probability broken by token id), renormalised.

Every stream has its own ``numpy.random.Generator``, and only that stream's draws use it, so a
seeded request gets the same text whether it runs alone or batched with others.

>>> rng = np.random.default_rng(0)
>>> pick_token(np.array([0.0, 3.0, 1.0]), 0.0, 1.0, rng)
1
>>> nucleus(np.array([0.5, 0.3, 0.2]), 0.75).round(6).tolist()
[0.625, 0.375, 0.0]
"""
from __future__ import annotations

import numpy as np

from ..model import tempered


def nucleus(prob: np.ndarray, top_p: float) -> np.ndarray:
    """`prob` (a probability vector) restricted to its top-`top_p` nucleus and renormalised."""
    if top_p >= 1.0:
        return prob / prob.sum()
    order = np.argsort(-prob, kind="stable")
    mass = np.cumsum(prob[order])
    # the smallest k whose top-k mass reaches top_p (rounding can leave mass[-1] < top_p)
    k = min(int(np.searchsorted(mass, top_p * mass[-1], side="left")) + 1, len(prob))
    kept = np.zeros_like(prob)
    kept[order[:k]] = prob[order[:k]]
    return kept / kept.sum()


def pick_token(logits: np.ndarray, temperature: float, top_p: float,
               rng: np.random.Generator) -> int:
    """The next token from one stream's float64 `logits` ``[vocab]`` (see the module
    docstring); `rng` is advanced by one draw unless the pick is greedy."""
    prob = tempered(logits, temperature)
    if prob is None:   # greedy
        return int(np.argmax(logits))
    if top_p >= 1.0:   # exactly models.decode._pick's arithmetic, draw for draw
        return int(rng.choice(len(prob), p=prob / prob.sum()))
    return int(rng.choice(len(prob), p=nucleus(prob / prob.sum(), top_p)))


__all__ = ["nucleus", "pick_token"]
