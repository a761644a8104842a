"""The whole decode step as one ONNX model, its state tensors and the checks of what exports.

Inputs: ``token`` (int64 ``[1]``) and one ``state_in_<name>`` per state tensor; outputs:
``logits`` (float32 ``[1, vocab]``) and a ``state_out_<name>`` of the same shape and dtype for
every ``state_in_<name>``. The state (`state_specs`) is that of `models.decode` for batch 1:

=========================  ========  ==============  =====================================
name                       dtype     shape           meaning
=========================  ========  ==============  =====================================
``pos``                    int64     [1]             tokens fed so far
``counter_l<i>``           int64     [1]             level i's ``pos % period`` (period > 1)
``b<j>_k_cache``           float32   [1, window, d]  block j's attention keys, position t in
``b<j>_v_cache``                                     slot ``t % window``; and its values
``b<j>_prev_h``            float32   [1, d]          last token's level input (key_shift)
``b<j>_l<i>_m``            float32   [1, d, d]       level i's memory as its reads see it
``b<j>_l<i>_m_next``       float32   [1, d, d]       its shadow, advanced every token
                                                     (period > 1; for period 1 it is ``m``)
``b<j>_l<i>_s_next``       float32   [1, d, d]       Titans' momentum
=========================  ========  ==============  =====================================

With ``heads > 1`` the memories are ``[1, heads, d / heads, d / heads]``.

A slow level fires when its counter reaches ``period - 1`` (the token with
``(pos + 1) % period == 0``); the counter then restarts at 0. The fresh state is all zeros.

>>> from models.config import ModelConfig
>>> [s.name for s in state_specs(ModelConfig(layers=1, levels=2, key_shift=True))]
['pos', 'counter_l1', 'b0_k_cache', 'b0_v_cache', 'b0_prev_h', 'b0_l0_m', 'b0_l1_m', 'b0_l1_m_next']
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..config import ModelConfig
from ..rundir import RunError
from . import blocks
from .graph import GraphBuilder

STATE_IN, STATE_OUT = "state_in_", "state_out_"

# Every ModelConfig field and whether the step graph reads it. Fields that only shape training
# (initialisation, the gate penalty) do not change a trained model's step. A field missing from
# this table is one the exporter does not know: a run that sets it away from its default is
# refused instead of being exported without it.
KNOWN_FIELDS = {"vocab", "d_model", "layers", "window", "seq_len", "levels", "periods", "rule",
                "composition", "dtype", "alpha_bias_shift", "theta_bias_shift", "key_shift",
                "shared_qk_init", "gate_penalty", "gate_margin", "eta_max", "heads", "mlp",
                "rotary", "bounded_theta"}


class ExportError(RunError):
    """A run that cannot be exported as an ONNX decode step (the message says why)."""


@dataclasses.dataclass(frozen=True)
class StateSpec:
    """One state tensor: its short name, dtype and shape (batch 1)."""
    name: str
    dtype: str
    shape: tuple

    @property
    def input_name(self) -> str:
        return STATE_IN + self.name

    @property
    def output_name(self) -> str:
        return STATE_OUT + self.name


def state_specs(cfg: ModelConfig) -> list:
    """The state tensors of `cfg`'s decode step, in the order of the graph's inputs."""
    d, window = cfg.d_model, cfg.window
    mem = (1, d, d) if cfg.heads == 1 else (1, cfg.heads, cfg.head_dim, cfg.head_dim)
    specs = [StateSpec("pos", "int64", (1,))]
    specs += [StateSpec(f"counter_l{i}", "int64", (1,))
              for i, p in enumerate(cfg.level_periods) if p > 1]
    for j in range(cfg.layers):
        specs += [StateSpec(f"b{j}_k_cache", "float32", (1, window, d)),
                  StateSpec(f"b{j}_v_cache", "float32", (1, window, d))]
        if cfg.key_shift and cfg.levels:
            specs.append(StateSpec(f"b{j}_prev_h", "float32", (1, d)))
        for i, p in enumerate(cfg.level_periods):
            specs.append(StateSpec(f"b{j}_l{i}_m", "float32", mem))
            if p > 1:
                specs.append(StateSpec(f"b{j}_l{i}_m_next", "float32", mem))
            if cfg.rule == "titans":
                specs.append(StateSpec(f"b{j}_l{i}_s_next", "float32", mem))
    return specs


def fresh_state(cfg: ModelConfig) -> dict:
    """The state at position 0, keyed by input name (``state_in_...``): all zeros.

    >>> st = fresh_state(ModelConfig(d_model=8, layers=1, levels=1, window=4, seq_len=8))
    >>> sorted(st), st["state_in_b0_k_cache"].shape
    (['state_in_b0_k_cache', 'state_in_b0_l0_m', 'state_in_b0_v_cache', 'state_in_pos'], (1, 4, 8))
    """
    return {s.input_name: np.zeros(s.shape, dtype=s.dtype) for s in state_specs(cfg)}


def check_exportable(params: Any, cfg: ModelConfig) -> None:
    """Raise `ExportError` saying why `params` / `cfg` cannot become the ONNX step."""
    defaults = type(cfg)()
    for f in dataclasses.fields(cfg):
        if f.name not in KNOWN_FIELDS and getattr(cfg, f.name) != getattr(defaults, f.name):
            raise ExportError(f"ModelConfig.{f.name} = {getattr(cfg, f.name)!r} is not supported "
                              f"by the ONNX decode step (hecate export knows only "
                              f"{sorted(KNOWN_FIELDS)}); export a run that leaves it at its "
                              f"default {getattr(defaults, f.name)!r}")
    for path, value in _leaves(params, "params"):
        arr = np.asarray(value.get() if hasattr(value, "get") else value, dtype=np.float64)
        if not np.all(np.isfinite(arr)):
            raise ExportError(f"{path} holds non-finite values (NaN or inf): the run diverged; "
                              f"export an earlier checkpoint or retrain")
        if arr.size and np.max(np.abs(arr)) > np.finfo(np.float32).max:
            raise ExportError(f"{path} holds values beyond float32's range (max |x| = "
                              f"{np.max(np.abs(arr)):.3g}); the ONNX step is float32")


def _leaves(tree: Any, path: str):
    if dataclasses.is_dataclass(tree):
        for f in dataclasses.fields(tree):
            yield from _leaves(getattr(tree, f.name), f"{path}.{f.name}")
    elif isinstance(tree, (list, tuple)):
        for i, t in enumerate(tree):
            yield from _leaves(t, f"{path}[{i}]")
    elif tree is not None:
        yield path, tree


def build_step_model(params: Any, cfg: ModelConfig) -> Any:
    """The decode step of `params` (float32 weights as initializers) as an `onnx.ModelProto`.

    >>> from models.model import init_params
    >>> cfg = ModelConfig(d_model=8, layers=1, levels=2, window=4, seq_len=8)
    >>> m = build_step_model(init_params(cfg, seed=0), cfg)
    >>> [i.name for i in m.graph.input][:3], m.graph.output[0].name
    (['token', 'state_in_pos', 'state_in_counter_l1'], 'logits')
    """
    cfg.validate()
    check_exportable(params, cfg)
    params = _to_numpy(params)
    specs = state_specs(cfg)
    g = GraphBuilder()
    token = g.input("token", "int64", [1])
    state = {s.name: g.input(s.input_name, s.dtype, s.shape) for s in specs}
    pos = state["pos"]
    one = g.const_i64([1])
    fires, new = [], {"pos": g.op("Add", pos, one)}
    for i, p in enumerate(cfg.level_periods):
        if p == 1:
            fires.append(None)
            continue
        nxt = g.op("Add", state[f"counter_l{i}"], one)
        fires.append(g.op("Equal", nxt, g.const_i64([p])))
        new[f"counter_l{i}"] = g.op("Where", fires[-1], g.const_i64([0]), nxt)
    is_first = g.op("Equal", pos, g.const_i64([0]))

    x = g.op("Gather", g.weight("embed", params.embed), token, axis=0)     # [1, d]
    for j, blk in enumerate(params.blocks):
        prefix = f"b{j}_"
        inp = blocks.StepInputs(pos=pos, fires=fires, is_first=is_first,
                                state={k[len(prefix):]: v for k, v in state.items()
                                       if k.startswith(prefix)})
        out: dict = {}
        x = blocks.block(g, blk, f"b{j}", x, inp, cfg, out)
        new.update({prefix + k: v for k, v in out.items()})
    logits = g.matmul(g.rms_norm(x, g.weight("final_norm", params.final_norm)),
                      g.weight("unembed", params.unembed))
    g.output(logits, "logits", "float32", [1, cfg.vocab])
    missing = [s.name for s in specs if s.name not in new]
    if missing:     # a state tensor the step never rewrites would be a silent bug
        raise AssertionError(f"build_step_model: no new value for state {missing}")
    for s in specs:
        g.output(new[s.name], s.output_name, s.dtype, s.shape)
    return g.model("hecate_decode_step", doc=_doc(cfg))


def _doc(cfg: ModelConfig) -> str:
    import json
    return ("Hecate decode step, batch 1: inputs token int64 [1] and state_in_*; outputs "
            "logits float32 [1, vocab] and state_out_* (feed them back as state_in_*). "
            "Fresh state: <model>.state.npz. Model config: " + json.dumps(cfg.to_dict()))


def _to_numpy(tree: Any) -> Any:
    if dataclasses.is_dataclass(tree):
        return type(tree)(**{f.name: _to_numpy(getattr(tree, f.name))
                             for f in dataclasses.fields(tree)})
    if isinstance(tree, (list, tuple)):
        return type(tree)(_to_numpy(t) for t in tree)
    if hasattr(tree, "get") and not isinstance(tree, dict):
        return tree.get()
    return tree
