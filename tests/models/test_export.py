"""The ONNX decode step (`models.export`) against Hecate's own float32 step (`models.decode`):
logits and every state tensor at every token, for every rule, composition, level count,
key_shift and depth, for more tokens than the window and than the slowest level's period (so
the ring buffer wraps and every level fires); the graph's interface; what cannot be exported."""
import dataclasses
import itertools

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from models import decode                                     # noqa: E402
from models.config import ModelConfig                         # noqa: E402
from models.export import (ExportError, OnnxDecoder, build_step_model,   # noqa: E402
                           fresh_state, state_specs)
from models.model import init_params                          # noqa: E402

PERIODS = (1, 2, 3, 5)
TOL = 1e-4


def cfg_of(**kw) -> ModelConfig:
    base = dict(d_model=8, layers=2, window=4, seq_len=8, periods=PERIODS)
    base.update(kw)
    return ModelConfig(**base)


def decode_state_as_onnx(st: decode.DecodeState, cfg: ModelConfig) -> dict:
    """Hecate's decode state in the graph's names (the independent side of the comparison)."""
    out = {"pos": np.array([st.pos])}
    for i, p in enumerate(cfg.level_periods):
        if p > 1:
            out[f"counter_l{i}"] = np.array([st.pos % p])
    for j, b in enumerate(st.blocks):
        out[f"b{j}_k_cache"], out[f"b{j}_v_cache"] = b.k_cache, b.v_cache
        if cfg.key_shift and cfg.levels:
            out[f"b{j}_prev_h"] = b.prev_h
        for i, (lv, p) in enumerate(zip(b.levels, cfg.level_periods)):
            out[f"b{j}_l{i}_m"] = lv.m
            if p > 1:
                out[f"b{j}_l{i}_m_next"] = lv.m_next
            if cfg.rule == "titans":
                out[f"b{j}_l{i}_s_next"] = lv.s_next
    return out


def compare(cfg: ModelConfig, steps: int, seed: int = 1) -> float:
    """Feed `steps` random tokens to both; assert logits and states agree at every step;
    returns the largest logit difference."""
    params = init_params(cfg, seed=seed)
    model = build_step_model(params, cfg)
    onnx.checker.check_model(model, full_check=True)
    dec = OnnxDecoder(model.SerializeToString(), fresh_state(cfg))
    st = decode.init_state(params, cfg, batch=1)
    worst = 0.0
    for t, tok in enumerate(np.random.default_rng(seed).integers(0, cfg.vocab, size=steps)):
        got = dec.step(int(tok))
        want, st = decode.step(params, cfg, st, np.array([tok]))
        assert got.dtype == np.float32 and want.dtype == np.float32
        diff = float(np.max(np.abs(got - want[0])))
        assert diff < TOL, f"logits differ by {diff} at step {t}"
        worst = max(worst, diff)
        ref = decode_state_as_onnx(st, cfg)
        assert sorted(ref) == sorted(n[len("state_in_"):] for n in dec.state)
        for name, value in ref.items():
            got_state = dec.state["state_in_" + name]
            assert got_state.shape == np.shape(value), name
            assert np.max(np.abs(got_state - value)) < TOL, (name, t)
    return worst


@pytest.mark.parametrize("rule,composition,key_shift", list(itertools.product(
    ("delta", "titans", "hebbian"), ("MAG", "MAL"), (False, True))))
def test_rules_and_compositions(rule, composition, key_shift):
    # 2 blocks, 2 levels (periods 1, 2); 13 tokens: the window (4) wraps three times.
    compare(cfg_of(rule=rule, composition=composition, key_shift=key_shift), steps=13)


@pytest.mark.parametrize("rule,levels", [("delta", 0)] + list(itertools.product(
    ("delta", "titans", "hebbian"), (1, 3, 4))))
def test_level_settings(rule, levels):
    # 1 block; 16 tokens: beyond the slowest period (5) three times and the window four times.
    compare(cfg_of(rule=rule, levels=levels, layers=1, composition="MAL", key_shift=True),
            steps=16)


@pytest.mark.parametrize("rule,features", [
    ("delta", dict(heads=2)), ("titans", dict(heads=2, key_shift=True)),
    ("hebbian", dict(mlp=2)), ("delta", dict(rotary=True)), ("delta", dict(levels=0, heads=2,
                                                                            rotary=True)),
    ("titans", dict(heads=2, mlp=1, rotary=True, composition="MAL")),
    ("delta", dict(heads=2, bounded_theta=True))])
def test_heads_mlp_rotary(rule, features):
    # 13 tokens: the window (4) wraps three times, so rotary's distances wrap the buffer too.
    compare(cfg_of(rule=rule, **features), steps=13)


def test_default_periods_past_the_slowest_firing():
    # levels 4 with DESIGN's periods (1, 8, 64, 512): 520 tokens reach the 512-token firing.
    compare(ModelConfig(d_model=8, layers=1, window=4, seq_len=8, levels=4, rule="titans"),
            steps=520, seed=2)


def test_float64_run_exports_as_float32():
    cfg = cfg_of(dtype="float64", layers=1)
    params = init_params(cfg, seed=0)
    model = build_step_model(params, cfg)
    assert {i.data_type for i in model.graph.initializer} <= {onnx.TensorProto.FLOAT,
                                                               onnx.TensorProto.INT64}
    dec = OnnxDecoder(model.SerializeToString(), fresh_state(cfg))
    st = decode.init_state(params, cfg, 1)
    for tok in (3, 200, 17, 65, 9, 1):
        got = dec.step(tok)
        want, st = decode.step(params, cfg, st, np.array([tok]))
        assert np.max(np.abs(got - want[0])) < 1e-4


def test_interface():
    cfg = cfg_of(rule="titans", key_shift=True, levels=3)
    model = build_step_model(init_params(cfg, seed=0), cfg)
    assert model.opset_import[0].version >= 17
    types = onnx.TensorProto
    ins = {i.name: i.type.tensor_type for i in model.graph.input}
    outs = {o.name: o.type.tensor_type for o in model.graph.output}

    def shape(t):
        return [d.dim_value for d in t.shape.dim]

    assert ins["token"].elem_type == types.INT64 and shape(ins["token"]) == [1]
    assert outs["logits"].elem_type == types.FLOAT and shape(outs["logits"]) == [1, 256]
    states = [n for n in ins if n != "token"]
    assert states == [s.input_name for s in state_specs(cfg)]
    assert sorted(outs) == sorted(["logits"] + [n.replace("state_in_", "state_out_")
                                                for n in states])
    for n in states:
        o = outs[n.replace("state_in_", "state_out_")]
        assert (o.elem_type, shape(o)) == (ins[n].elem_type, shape(ins[n]))
    # the weights are initializers, not Constant nodes
    assert not [n for n in model.graph.node if n.op_type == "Constant"]
    names = {i.name for i in model.graph.initializer}
    assert {"embed", "unembed", "b0.attn.w_q", "b1.l2.w_e"} <= names


def test_state_starts_at_zero_and_counters_wrap():
    cfg = cfg_of(levels=3, layers=1)          # periods 1, 2, 3
    dec = OnnxDecoder(build_step_model(init_params(cfg, seed=0), cfg).SerializeToString(),
                      fresh_state(cfg))
    assert all(not v.any() for v in dec.state.values())
    seen = []
    for tok in range(7):
        dec.step(tok)
        seen.append((int(dec.state["state_in_pos"][0]),
                     int(dec.state["state_in_counter_l1"][0]),
                     int(dec.state["state_in_counter_l2"][0])))
    assert seen == [(t, t % 2, t % 3) for t in range(1, 8)]


def test_the_comparison_can_fail():
    # A step that forgets the position (state fed back with pos reset to 0 each time: the
    # ring buffer always writes slot 0 and attends only to it) must be caught.
    cfg = cfg_of(layers=1, levels=1)
    params = init_params(cfg, seed=0)
    dec = OnnxDecoder(build_step_model(params, cfg).SerializeToString(), fresh_state(cfg))
    st = decode.init_state(params, cfg, 1)
    diffs = []
    for tok in (5, 9, 77, 3):
        got = dec.step(tok)
        dec.state["state_in_pos"][:] = 0
        want, st = decode.step(params, cfg, st, np.array([tok]))
        diffs.append(float(np.max(np.abs(got - want[0]))))
    assert diffs[0] < TOL and max(diffs[1:]) > 100 * TOL


def test_non_finite_weights_are_refused():
    cfg = cfg_of(layers=1)
    params = init_params(cfg, seed=0)
    params.blocks[0].memory[1].w_k[0, 0] = np.nan
    with pytest.raises(ExportError, match=r"params\.blocks\[0\]\.memory\[1\]\.w_k .*non-finite"):
        build_step_model(params, cfg)


def test_unknown_config_field_is_refused():
    @dataclasses.dataclass(frozen=True)
    class FutureConfig(ModelConfig):
        colour: int = 1

    cfg = FutureConfig(d_model=8, layers=1, window=4, seq_len=8, colour=4)
    with pytest.raises(ExportError, match=r"ModelConfig\.colour = 4 is not supported"):
        build_step_model(init_params(cfg, seed=0), cfg)
    # at its default the field changes nothing the step computes, so the run exports
    cfg = FutureConfig(d_model=8, layers=1, window=4, seq_len=8)
    build_step_model(init_params(cfg, seed=0), cfg)


def test_docstring_examples():
    import doctest
    import importlib
    for name in ("graph", "blocks", "step", "runtime", "quantize", "run", "cli"):
        module = importlib.import_module(f"models.export.{name}")
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.failed == 0, name


def test_quantisation_reads_weights_only():
    # int8 covers the weight products and the embedding, never rotary's angle tables.
    from models.export.quantize import weight_nodes
    cfg = cfg_of(heads=2, rotary=True, mlp=1, layers=1)
    model = build_step_model(init_params(cfg, seed=0), cfg)
    chosen = set(weight_nodes(model))
    gathers = [n for n in model.graph.node if n.op_type == "Gather"]
    assert [n.input[0] for n in gathers if n.name in chosen] == ["embed"]
    assert len(gathers) == 3                     # the embedding, cos and sin
    inits = {i.name for i in model.graph.initializer}
    products = {n.input[1] for n in model.graph.node if n.name in chosen and n.op_type == "MatMul"}
    assert {"b0.mlp.w_in", "b0.mlp.w_out", "b0.w_o", "unembed"} <= products <= inits
