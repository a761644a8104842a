"""The differentiated training step: eager `autodiff`, or a `tape.compile`d program.

Both fill `grads` with the gradient of `model.training_loss`'s objective and return the
cross-entropy, the objective and the new memory state. The eager step collects the new state
and the cross-entropy from inside the differentiated function; a replayed program runs no
Python, so the compiled step writes them into buffers passed `Duplicated` instead (their zero
shadows seed nothing), and takes everything that changes between steps as arguments: the
tokens and the state as `Const`, and the stream position as its phase within the least common
multiple of the level periods, the only part of it the model decides on. Anything the program
cannot replay makes `tape.compile` run that call eagerly, with the same result.

    >>> import numpy as np
    >>> from tape import make_zero
    >>> cfg = model.ModelConfig(vocab=11, d_model=8, layers=1, levels=2, window=4, seq_len=8)
    >>> params, state = model.init_params(cfg, seed=0), model.init_state(cfg, batch=2)
    >>> tokens = np.random.default_rng(0).integers(0, 11, size=(2, 9))
    >>> runs = []
    >>> for compiled in (False, True):
    ...     grads = make_zero(params)
    ...     ce, objective, new = TrainStep(cfg, compiled)(params, grads, tokens, state)
    ...     runs.append((ce, objective, new.pos, grads.embed.copy()))
    >>> runs[0][:3] == runs[1][:3], bool(np.allclose(runs[0][3], runs[1][3], rtol=1e-12))
    (True, True)
"""
from __future__ import annotations

import math
from typing import Any

import tape
from tape import Active, Const, Duplicated, ReverseWithPrimal, autodiff, primal
from tape.pytree import flatten, tree_map

import kernels

from . import model
from .config import ModelConfig


class TrainStep:
    """``step(params, grads, tokens, state) -> (cross-entropy, objective, new state)``, with
    `grads` (zeroed by the caller) holding the objective's gradient afterwards. `compiled`
    replays a `tape.compile`d program; ``step.stats`` reports its traces and eager calls."""

    def __init__(self, cfg: ModelConfig, compiled: bool = True):
        self.cfg = cfg
        self.compiled = compiled
        periods = cfg.level_periods if cfg.levels > 0 else (1,)
        self.cycle = math.lcm(*periods)
        self._shadows = None   # zero seeds for the written state and cross-entropy
        # A function of cfg alone: tape.compile watches what it reads, and this object's
        # counters change at every call. One program per state of `kernels.force_reference`
        # (the model's dispatch reads it), so that a call under it does not make the other's
        # traces differ (which would turn compilation off for good).
        self._programs = {forced: tape.compile(ReverseWithPrimal, _written_step(cfg), Active,
                                               Duplicated, Duplicated, Const, Const, Const)
                          for forced in (False, True)} if compiled else None

    @property
    def _program(self):
        return None if self._programs is None else \
            self._programs[kernels.is_reference_forced()]

    @property
    def stats(self) -> Any:
        """`tape.compile`'s counters (None for the eager step) of the program in use."""
        return None if self._program is None else self._program.stats

    def __call__(self, params: Any, grads: Any, tokens: Any, state: model.State) -> tuple:
        if self._programs is None:
            return self._eager(params, grads, tokens, state)
        xp = tape.array_module(tokens)
        new_blocks = tree_map(xp.zeros_like, state.blocks)
        ce = xp.zeros((), dtype=self.cfg.dtype)
        if self._shadows is None or not _same_layout(self._shadows[0], state.blocks):
            # (made again for another batch size or dtype; the compiled call leaves them zero)
            self._shadows = (tree_map(xp.zeros_like, state.blocks), xp.zeros_like(ce))
        _, objective = self._program(
            Duplicated((new_blocks, ce), self._shadows), Duplicated(params, grads),
            Const(tokens), Const(state.blocks), Const(state.pos % self.cycle))
        new = model.State(pos=state.pos + tokens.shape[1] - 1, blocks=new_blocks)
        return float(ce), float(objective), new

    def _eager(self, params, grads, tokens, state):
        box = []

        def objective(p, t):
            value, new_state, ce = model.training_loss(p, t, state, self.cfg)
            box.append((new_state, ce))
            return value

        _, total = autodiff(ReverseWithPrimal, objective, Active, Duplicated(params, grads),
                            Const(tokens))
        new_state, ce = box[-1]
        return float(primal(ce)), float(total), tree_map(primal, new_state)


def _same_layout(a: Any, b: Any) -> bool:
    """Whether two pytrees of arrays have leaves of the same shapes and dtypes."""
    la, lb = flatten(a)[0], flatten(b)[0]
    return len(la) == len(lb) and all(x.shape == y.shape and x.dtype == y.dtype
                                      for x, y in zip(la, lb))


def _written_step(cfg: ModelConfig):
    def written_step(out, params, tokens, blocks, phase):
        """The objective, writing the new state and the cross-entropy into `out`."""
        new_blocks, ce_out = out
        objective, new, ce = model.training_loss(params, tokens,
                                                 model.State(pos=phase, blocks=blocks), cfg)
        for out, value in zip(flatten(new_blocks)[0], flatten(new.blocks)[0]):
            out[...] = value
        ce_out[...] = ce
        return objective
    return written_step
