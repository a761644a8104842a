"""AdamW, global-norm gradient clipping and a warmup + cosine learning-rate schedule.

Written on the engine's own arrays: every update runs through the array module of the leaf
(`tape.array_module`), so the same code steps NumPy and CuPy parameters. Parameters and
gradients are pytrees of the same structure (the model's `Params`); the optimizer works on their
flattened leaves and updates the parameter arrays in place, so the pytree a caller holds (and
hands to `autodiff` as `Duplicated(params, grads)`) stays the one being trained.

>>> import numpy as np
>>> params = {"w": np.ones(3)}
>>> grads = {"w": np.full(3, 0.5)}
>>> opt = AdamW(params, lr=0.1, weight_decay=0.0)
>>> opt.step(params, grads)
>>> np.round(params["w"], 6)   # Adam's first step moves each entry by lr * sign(g)
array([0.9, 0.9, 0.9])
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable

import numpy as np

from tape import array_module
from tape.pytree import flatten, flatten_with_paths, format_path


def _leaves(tree: Any) -> list:
    return flatten(tree)[0]


def global_norm(grads: Any) -> float:
    """The L2 norm of all gradient leaves taken together.

    >>> global_norm({"a": np.array([3.0]), "b": np.array([4.0])})
    5.0
    """
    total = 0.0
    for g in _leaves(grads):
        xp = array_module(g)
        # Summed where the leaves are: on a GPU one transfer at the end, not one per leaf.
        total = total + xp.sum(xp.asarray(g, dtype=np.float64) ** 2)
    return math.sqrt(float(total))


def clip_by_global_norm(grads: Any, max_norm: float) -> float:
    """Scale every gradient leaf in place so the global norm is at most `max_norm`.

    Returns the norm before clipping (what a training log wants to show). A non-finite norm is
    returned unchanged and the gradients are left alone: the caller decides to stop.

    >>> g = {"a": np.array([3.0]), "b": np.array([4.0])}
    >>> clip_by_global_norm(g, 1.0)
    5.0
    >>> g["a"], g["b"]
    (array([0.6]), array([0.8]))
    """
    norm = global_norm(grads)
    if max_norm > 0 and math.isfinite(norm) and norm > max_norm:
        scale = max_norm / norm
        for g in _leaves(grads):
            g *= scale
    return norm


def warmup_cosine(step: int, base_lr: float, warmup: int, total: int,
                  min_ratio: float = 0.1) -> float:
    """Learning rate at optimizer step `step` (0-based): linear warmup over `warmup` steps, then
    cosine decay to ``min_ratio * base_lr`` at step ``total``.

    >>> warmup_cosine(0, 1.0, 10, 100)
    0.1
    >>> warmup_cosine(10, 1.0, 10, 100)
    1.0
    >>> round(warmup_cosine(100, 1.0, 10, 100), 6)
    0.1
    """
    if warmup > 0 and step < warmup:
        return base_lr * (step + 1) / warmup
    span = max(total - warmup, 1)
    progress = min(max(step - warmup, 0) / span, 1.0)
    return base_lr * (min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress)))


def matrices_only(path: str, leaf: Any) -> bool:
    """Default weight-decay filter: decay matrices, not biases, gains or scalars (the usual
    choice for transformers: decaying a norm gain or a gate bias towards 0 fights the model).
    A memory gate's weights (``c . w_a``: a projection to one number per head) are a matrix
    with one head as with several, where they are stored as a vector.

    >>> matrices_only("params.blocks[0].memory[0].w_a", np.zeros(8))
    True
    >>> matrices_only("params.blocks[0].memory[0].b_a", np.zeros(()))
    False
    """
    return getattr(leaf, "ndim", 0) >= 2 or path.rpartition(".")[2] in _GATE_WEIGHTS


_GATE_WEIGHTS = frozenset(("w_a", "w_t", "w_e"))   # models.layers.Level


def _fusable(p, g, m, v) -> bool:
    """Whether the fused CuPy update applies: one floating dtype and one shape throughout."""
    return (p.dtype.kind == "f" and g.dtype == m.dtype == v.dtype == p.dtype
            and g.shape == m.shape == v.shape == p.shape)


@functools.lru_cache(maxsize=None)
def _adamw_kernel(cp: Any) -> Any:
    """AdamW's update of one CuPy leaf as one elementwise kernel (`AdamW.step`'s operations)."""
    return cp.ElementwiseKernel(
        "T g, T shrink, T b1, T one_b1, T b2, T one_b2, T c2, T eps, T step_size",
        "T p, T m, T v",
        """
        p = p * shrink;
        m = m * b1 + one_b1 * g;
        v = v * b2 + one_b2 * (g * g);
        T denom = sqrt(v / c2) + eps;
        p = p - step_size * m / denom;
        """,
        "hecate_adamw")


class AdamW:
    """Adam with decoupled weight decay (Loshchilov & Hutter) and bias correction.

    Per leaf, with t the 1-based step count:
    ``p -= lr * wd * p`` (only where `decay(path, leaf)` is true), ``m = b1 m + (1 - b1) g``,
    ``v = b2 v + (1 - b2) g**2``, ``p -= lr * (m / (1 - b1**t)) / (sqrt(v / (1 - b2**t)) + eps)``.
    This is `torch.optim.AdamW`'s update.

    `state_arrays` / `load_state_arrays` expose the moments by the parameters' pytree paths, for
    checkpoints.

    >>> p = {"w": np.array([[1.0, 2.0]]), "b": np.array([0.5])}
    >>> opt = AdamW(p, lr=0.01, weight_decay=0.1)
    >>> opt.step(p, {"w": np.ones((1, 2)), "b": np.ones(1)})
    >>> opt.t, sorted(opt.state_arrays())
    (1, ["m/params['b']", "m/params['w']", "v/params['b']", "v/params['w']"])
    """

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01,
                 decay: Callable[[str, Any], bool] | None = matrices_only):
        leaves, paths, _ = flatten_with_paths(params)
        self.paths = [format_path(p, "params") for p in paths]
        self.lr = lr
        self.b1, self.b2 = betas
        self.eps = eps
        self.weight_decay = weight_decay
        self.decays = [decay is None or bool(decay(name, leaf))
                       for name, leaf in zip(self.paths, leaves)]
        self.m = [array_module(x).zeros_like(x) for x in leaves]
        self.v = [array_module(x).zeros_like(x) for x in leaves]
        self.t = 0

    def step(self, params: Any, grads: Any, lr: float | None = None) -> None:
        """One update of every parameter leaf, in place, with learning rate `lr` (default: the
        constructor's)."""
        lr = self.lr if lr is None else lr
        self.t += 1
        # Bias corrections as Python floats: one scalar per step, not one array op per leaf.
        c1 = 1.0 - self.b1 ** self.t
        c2 = 1.0 - self.b2 ** self.t
        step_size = lr / c1
        ps, gs = _leaves(params), _leaves(grads)
        if len(ps) != len(self.m) or len(gs) != len(ps):
            raise ValueError(f"AdamW.step: {len(ps)} parameter and {len(gs)} gradient leaves; "
                             f"the optimizer was built for {len(self.m)}")
        for p, g, m, v, decays in zip(ps, gs, self.m, self.v, self.decays):
            xp = array_module(p)
            shrink = 1.0 - lr * self.weight_decay if decays and self.weight_decay else 1.0
            if xp is not np and _fusable(p, g, m, v):
                # One kernel per leaf instead of nine small ones (the same operations, in the
                # same order, in the parameters' dtype).
                _adamw_kernel(xp)(g, shrink, self.b1, 1.0 - self.b1, self.b2, 1.0 - self.b2,
                                  c2, self.eps, step_size, p, m, v)
                continue
            if shrink != 1.0:
                p *= shrink
            m *= self.b1
            m += (1.0 - self.b1) * g
            v *= self.b2
            v += (1.0 - self.b2) * (g * g)
            denom = xp.sqrt(v / c2)
            denom += self.eps
            p -= (step_size * m / denom).astype(p.dtype, copy=False)

    def state_arrays(self) -> dict:
        """The moments as ``{"m/<param path>": array, "v/<param path>": array}``."""
        out = {}
        for name, m, v in zip(self.paths, self.m, self.v):
            out[f"m/{name}"] = m
            out[f"v/{name}"] = v
        return out

    def load_state_arrays(self, arrays: dict, t: int) -> None:
        """Restore moments saved by `state_arrays` (copied into the existing arrays, so their
        array module and dtype stay the optimizer's)."""
        for i, name in enumerate(self.paths):
            for key, dest in ((f"m/{name}", self.m[i]), (f"v/{name}", self.v[i])):
                if key not in arrays:
                    raise KeyError(f"optimizer state has no entry {key!r}")
                src = arrays[key]
                if tuple(src.shape) != tuple(dest.shape):
                    raise ValueError(f"optimizer state {key!r} has shape {tuple(src.shape)}; "
                                     f"expected {tuple(dest.shape)}")
                dest[...] = array_module(dest).asarray(src, dtype=dest.dtype)
        self.t = int(t)
