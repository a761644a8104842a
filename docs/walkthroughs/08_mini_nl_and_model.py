"""Walkthrough 8: the mini-NL chain, then one training step of the full NL model.

The mini-NL chain is the smallest model that mixes traced operations with an opaque kernel
pair: project (x @ w_proj, traced) -> memory (`kernels.delta_rule`, hand-written backward) ->
gate (sigmoid, traced) -> loss (traced). One reverse sweep runs the tape's records backwards
and calls the kernel's hand-written reverse for its one record. Then the real model
(`models.model`): a pytree of dataclass parameters, one gradient, one AdamW step. Every number
printed is checked against a central difference (or, for the step, by the loss going down).

Run: python docs/walkthroughs/08_mini_nl_and_model.py
"""
import math
import pathlib
import sys

try:
    import tape
except ImportError:   # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
    import tape

import numpy as np
from tape import Active, Const, Duplicated, Reverse, autodiff, make_zero, record
from tape.pytree import flatten, unflatten
from models.mini_nl import example_inputs, mini_nl_loss
from models import model as nl
from models.config import ModelConfig
from models.optim import AdamW

# 1. The mini-NL chain. Its tape: the delta-rule memory is one record (`delta_rule`), however
#    many tokens it reads; around it, the projection, normalisation, gate and loss.
w_proj, w_gate, x, target = example_inputs(seed=0)
t = record(mini_nl_loss, Active(w_proj), Active(w_gate), Const(x), Const(target))
print(t.show())
assert sum(r[0].name == "delta_rule" for r in t.records) == 1

(dp, dg, _, _), value = autodiff(tape.ReverseWithPrimal, mini_nl_loss, Active, Active(w_proj),
                                  Active(w_gate), Const(x), Const(target))
print(f"loss {float(value):.10f}")
assert abs(float(value) - float(mini_nl_loss(w_proj, w_gate, x, target))) < 1e-15

# Check the gradient in a random direction (both weight matrices at once).
rng = np.random.default_rng(1)
vp, vg = rng.standard_normal(w_proj.shape), rng.standard_normal(w_gate.shape)
h = 1e-6
fd = (mini_nl_loss(w_proj + h * vp, w_gate + h * vg, x, target)
      - mini_nl_loss(w_proj - h * vp, w_gate - h * vg, x, target)) / (2 * h)
ad = np.sum(dp * vp) + np.sum(dg * vg)
print(f"directional derivative: tape x kernel {ad:.10f}, central difference {fd:.10f}")
assert abs(ad - fd) < 1e-7 * max(1.0, abs(fd))

# 2. The full model: a small float64 configuration, one batch of random tokens.
cfg = ModelConfig(vocab=11, d_model=8, layers=1, window=4, seq_len=8, dtype="float64")
params, state = nl.init_params(cfg, seed=0), nl.init_state(cfg, batch=2)
tokens = np.random.default_rng(0).integers(0, cfg.vocab, size=(2, cfg.seq_len + 1))


def loss(p):
    return nl.loss(p, tokens, state, cfg)[0]


grads = make_zero(params)           # the gradient pytree, same dataclasses as params
autodiff(Reverse, loss, Active, Duplicated(params, grads))
L0 = float(loss(params))
print(f"\nNL model: loss {L0:.6f} (uniform guess: ln {cfg.vocab} = {math.log(cfg.vocab):.6f})")
assert abs(L0 - math.log(cfg.vocab)) < 1.0
print("gradient of blocks[0].memory[0].w_k:", grads.blocks[0].memory[0].w_k.shape)

# Every leaf at once, in one random direction.
leaves, td = flatten(params)
gleaves = flatten(grads)[0]
dirs = [rng.standard_normal(np.shape(a)) if np.issubdtype(np.result_type(a), np.floating)
        else None for a in leaves]


def shifted(eps):
    return unflatten(td, [a + eps * d if d is not None else a for a, d in zip(leaves, dirs)])


h = 1e-5
fd = (float(loss(shifted(h))) - float(loss(shifted(-h)))) / (2 * h)
ad = sum(float(np.sum(g * d)) for g, d in zip(gleaves, dirs) if d is not None)
print(f"directional derivative over all {len(leaves)} leaves: tape {ad:.8f}, "
      f"central difference {fd:.8f}")
assert abs(ad - fd) < 1e-6 * max(1.0, abs(fd))

# 3. One AdamW step on this batch lowers its loss.
opt = AdamW(params, lr=1e-2)
opt.step(params, grads)
L1 = float(loss(params))
print(f"after one AdamW step: loss {L1:.6f} (down by {L0 - L1:.6f})")
assert L1 < L0
