"""Gradients of a kernel's outputs through a weighted sum: the loss the kernel tests compare
(the hand-written backward against the tape of a reference program)."""
import numpy as np

from tape import Active, Reverse, autodiff


def weighted(outs, weights):
    """sum(out * weight) over the outputs; a None weight leaves its output out."""
    total = 0.0
    for o, w in zip(outs, weights):
        if w is not None:
            total = total + np.sum(o * w)
    return total


def grads(fn, args, weights):
    """The gradient of `weighted(fn(*args), weights)` with respect to every argument."""
    (g,), = [autodiff(Reverse, lambda *a: weighted(fn(*a), weights), Active,
                      *[Active(a) for a in args])]
    return g


def weights_for(outs, seed=1, dtype=np.float64):
    """Random weights, one per output, of its shape."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(o.shape).astype(dtype) for o in outs]
