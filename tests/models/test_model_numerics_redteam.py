"""The language model's numerics where the other model tests do not reach: long sequences
(hundreds to a thousand tokens, lengths that are multiples of neither the kernels' chunk nor the
level periods) on both kernel dispatches, float32 at that length against float64; gradients
with ``key_shift`` and shifted gate biases; two chunks differentiated in one function (the
carried state must stay detached); the decoder across a slow level's firing with
token-dependent gates; the ONNX step with token-dependent gates; and the window sampler and
full forward against the decoder's input checks."""
import contextlib
import dataclasses

import numpy as np
import pytest

import kernels
from models import decode, model
from models.config import ModelConfig
from tape import (Active, Const, Duplicated, Reverse, ReverseWithPrimal, autodiff, make_zero,
                  primal, tree_map)
from tape.pytree import flatten, unflatten

from test_decode import decode_all
from test_model_options_redteam import (carried_state, close,
                                        entries_match_central_differences, params_of)


def objective_and_grads(params, cfg, tokens, state=None, forced=False):
    """``(objective, gradient leaves, new-state leaves)`` of `model.training_loss`."""
    with kernels.force_reference() if forced else contextlib.nullcontext():
        grads, box = make_zero(params), []

        def f(p, t):
            value, new, _ = model.training_loss(p, t, state, cfg)
            box.append(new)
            return value
        _, value = autodiff(ReverseWithPrimal, f, Active, Duplicated(params, grads),
                            Const(tokens))
    return float(value), flatten(grads)[0], flatten(tree_map(primal, box[-1]).blocks)[0]


# (rule, heads, periods, tokens): 517 and 1031 tokens are multiples of neither the chunked
# kernels' 16-token chunks nor the periods; period 128 runs in sub-chunks of the periodic kernel.
LONG = [(rule, heads, periods, s) for rule in ("delta", "titans", "hebbian")
        for heads, periods, s in ((1, (1, 16, 64), 517), (2, (1, 5, 128), 1031))]


@pytest.mark.parametrize("rule,heads,periods,s", LONG)
def test_long_sequences_default_dispatch_equals_reference(rule, heads, periods, s):
    """Batch 1, one call over hundreds of tokens: the objective (gate penalty on), every
    gradient leaf and the carried state with the default dispatch (chunked and periodic
    kernels) equal `kernels.force_reference`'s per-token loop to 1e-10 in float64."""
    cfg = ModelConfig(vocab=13, d_model=8, layers=1, window=8, seq_len=s, levels=3,
                      periods=periods, rule=rule, heads=heads, dtype="float64",
                      gate_margin=2.0)
    params = params_of(cfg, seed=2)
    tokens = np.random.default_rng(0).integers(0, cfg.vocab, size=(1, s + 1))
    va, ga, sa = objective_and_grads(params, cfg, tokens)
    vb, gb, sb = objective_and_grads(params, cfg, tokens, forced=True)
    assert abs(va - vb) <= 1e-12 * abs(vb)
    assert len(ga) == len(gb) and len(sa) == len(sb)
    for a, b in zip(ga + sa, gb + sb):
        close(a, b, 1e-10, 1e-16)


@pytest.mark.parametrize("rule", ["delta", "titans", "hebbian"])
def test_float32_long_sequence_close_to_float64(rule):
    """The default float32 model (4 heads, MLP, rotary, bounded theta: `TEXT_MODEL`'s fields)
    over 1024 tokens and three levels: the objective and every gradient leaf within float32
    rounding (1e-5 of each leaf's largest entry) of the same parameters in float64."""
    cfg64 = ModelConfig(vocab=13, d_model=32, layers=1, window=16, seq_len=1024, levels=3,
                        periods=(1, 8, 64), rule=rule, heads=4, mlp=2, rotary=True,
                        bounded_theta=True, dtype="float64", gate_margin=2.0)
    cfg32 = dataclasses.replace(cfg64, dtype="float32")
    leaves, treedef = flatten(params_of(cfg64, seed=2))
    p32 = unflatten(treedef, [a.astype(np.float32) for a in leaves])
    p64 = unflatten(treedef, [a.astype(np.float32).astype(np.float64) for a in leaves])
    tokens = np.random.default_rng(0).integers(0, cfg64.vocab, size=(2, 1025))
    v64, g64, _ = objective_and_grads(p64, cfg64, tokens)
    v32, g32, _ = objective_and_grads(p32, cfg32, tokens)
    assert abs(v32 - v64) <= 1e-6 * abs(v64)
    for a, b in zip(g32, g64):
        assert a.dtype == np.float32
        close(a.astype(np.float64), b, 1e-5, 1e-30)


KEY_SHIFT = [
    dict(rule="delta", seq_len=11, levels=3, periods=(1, 3, 4), heads=2, composition="MAL"),
    dict(rule="titans", seq_len=11, levels=3, periods=(1, 3, 4), heads=2, rotary=True, mlp=1,
         eta_max=1.0),
    dict(rule="hebbian", seq_len=17, levels=2, periods=(1, 5), alpha_bias_shift=-3.0),
    dict(rule="delta", seq_len=19, levels=4, periods=(1, 2, 7, 16), heads=4,
         bounded_theta=True, theta_bias_shift=4.0, alpha_bias_shift=2.0),
]


@pytest.mark.parametrize("fields", KEY_SHIFT, ids=lambda f: f["rule"] + str(f["levels"]))
def test_key_shift_gradient_entries_match_central_differences(fields):
    """``key_shift`` (with shifted gate biases, one stream, chunk lengths that are multiples of
    no period, a carried state with pending tokens): one random entry of every parameter leaf
    of the training objective against a central difference in float64."""
    cfg = ModelConfig(vocab=13, d_model=8, layers=1, window=4, dtype="float64",
                      gate_margin=2.0, key_shift=True, **fields)
    params = params_of(cfg, seed=0)
    state = tree_map(lambda a: a[:1] if isinstance(a, np.ndarray) else a,
                     carried_state(params, cfg, length=5))
    tokens = np.random.default_rng(3).integers(0, cfg.vocab, size=(1, cfg.seq_len + 1))

    grads, _ = entries_match_central_differences(params, tokens, state, cfg)
    # key_shift moves the keys: the key projection of every level learns.
    assert all(np.abs(lv.w_k).max() > 0 for lv in grads.blocks[0].memory)


def test_two_chunks_in_one_function_keep_the_carried_state_detached():
    """Differentiating chunk 1's objective plus chunk 2's (from chunk 1's new state) in one
    reverse pass gives the sum of the two chunks' gradients with the state frozen: no
    gradient flows through the carried memory, momentum or pending tokens (docs/model.md,
    `models.model`), and the central difference of that frozen-state sum agrees."""
    cfg = ModelConfig(vocab=13, d_model=8, layers=1, window=4, seq_len=7, levels=3,
                      periods=(1, 3, 5), rule="titans", heads=2, dtype="float64",
                      gate_margin=2.0)
    params = params_of(cfg, seed=1)
    toks = np.random.default_rng(0).integers(0, cfg.vocab, size=(2, 15))
    first, second = toks[:, :8], toks[:, 7:]

    def both(p, t1, t2):
        v1, s1, _ = model.training_loss(p, t1, None, cfg)
        v2, _, _ = model.training_loss(p, t2, s1, cfg)
        return v1 + v2
    g = make_zero(params)
    autodiff(Reverse, both, Active, Duplicated(params, g), Const(first), Const(second))
    _, carried, _ = model.training_loss(params, first, None, cfg)
    carried = tree_map(primal, carried)
    assert carried.pos == 7 and np.abs(carried.blocks[0][2].pend[0][:, :, :2]).min() > 0
    _, g1, _ = objective_and_grads(params, cfg, first)
    _, g2, _ = objective_and_grads(params, cfg, second, state=carried)
    for a, b, c in zip(flatten(g)[0], g1, g2):
        close(a, b + c, 1e-13, 1e-18)
    # The frozen-state sum against a central difference along a random direction.
    leaves, treedef = flatten(params)
    rng, eps = np.random.default_rng(1), 1e-6
    direction = [rng.standard_normal(a.shape) for a in leaves]

    def frozen(e):
        p = unflatten(treedef, [a + e * d for a, d in zip(leaves, direction)])
        return float(primal(model.training_loss(p, first, None, cfg)[0])
                     + primal(model.training_loss(p, second, carried, cfg)[0]))
    analytic = sum(float(np.sum(a * d)) for a, d in zip(flatten(g)[0], direction))
    numeric = (frozen(eps) - frozen(-eps)) / (2 * eps)
    assert abs(analytic - numeric) <= 1e-9 + 1e-6 * abs(numeric), (analytic, numeric)


@pytest.mark.parametrize("rule", ["delta", "titans", "hebbian"])
def test_decoder_across_slow_firings_with_token_dependent_gates(rule):
    """140 tokens, levels of period 1, 8 and 64 (the 64-token level fires twice, its shadow
    memory holds up to 63 updates), two blocks, 2 heads, rotary, key_shift, MLP, gate weights
    20x their init (gates that depend on the token): every position's logits and the read
    memories of the decoder equal the one-call full forward to 1e-10 in float64."""
    cfg = ModelConfig(vocab=13, d_model=8, layers=2, window=5, seq_len=140, levels=3,
                      periods=(1, 8, 64), rule=rule, heads=2, rotary=True, key_shift=True,
                      mlp=1, dtype="float64")
    params = params_of(cfg, seed=3)
    toks = np.random.default_rng(2).integers(0, cfg.vocab, size=(1, 140))
    full, full_state = model.logits(params, toks, None, cfg)
    inc, st = decode_all(params, cfg, toks)
    close(inc, np.asarray(primal(full)), 1e-10, 1e-12)
    for bst, ref in zip(st.blocks, full_state.blocks):
        for lv, r in zip(bst.levels, ref):
            close(lv.m, r.m, 1e-10, 1e-14)
    # The slow level has written something the reads see.
    assert np.abs(st.blocks[0].levels[2].m).max() > 1e-3


ONNX_CONFIGS = [
    ("delta", dict(heads=2, levels=3, key_shift=True)),
    ("titans", dict(heads=4, levels=4, rotary=True, mlp=1, composition="MAL", eta_max=1.0,
                    bounded_theta=True)),
    ("hebbian", dict(heads=2, levels=2, rotary=True, key_shift=True, dtype="float64")),
]


@pytest.mark.parametrize("rule,fields", ONNX_CONFIGS, ids=[c[0] for c in ONNX_CONFIGS])
def test_onnx_step_with_token_dependent_gates(rule, fields):
    """The ONNX decode step against the decoder with gate weights 20x their init, at 2e-6:
    at init the gates barely depend on the token, so a wrong gate input (the key / value halves
    of the gate's input swapped in the decoder) moves the logits by 3e-4, against 1e-4 in
    `tests/models/test_export.py`; with these gates it moves them by 2e-2."""
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from models.export import OnnxDecoder, build_step_model, fresh_state
    cfg = ModelConfig(vocab=13, d_model=8, layers=2, window=4, seq_len=8, periods=(1, 2, 3, 5),
                      rule=rule, **fields)
    params = params_of(cfg, seed=1)
    dec = OnnxDecoder(build_step_model(params, cfg).SerializeToString(), fresh_state(cfg))
    st = decode.init_state(params, cfg, 1)
    for tok in np.random.default_rng(1).integers(0, cfg.vocab, size=15):
        got = dec.step(int(tok))
        want, st = decode.step(params, cfg, st, np.array([tok]))
        close(got, np.asarray(want[0], dtype=np.float32), 2e-6, 1e-6)


# -- findings, fixed: the full forward and the window sampler check their inputs as the decoder --

BAD_INPUT = {
    "logits": lambda p, cfg: model.logits(p, np.array([[-1, 2, 3]]), None, cfg),
    "loss": lambda p, cfg: model.loss(p, np.array([[-2, 2, 3, 4]]), None, cfg),
    "generate": lambda p, cfg: model.generate(p, [-1, 2], cfg, n_new=2),
}


@pytest.mark.parametrize("call", sorted(BAD_INPUT))
def test_full_forward_refuses_negative_tokens_as_the_decoder_does(call):
    cfg = ModelConfig(vocab=13, d_model=8, layers=1, window=2, seq_len=4, levels=2,
                      periods=(1, 3), dtype="float64")
    params = model.init_params(cfg, seed=0)
    with pytest.raises(ValueError):
        decode.generate(params, [-1, 2], cfg, n_new=2)
    with pytest.raises(ValueError, match=r"\[0, 13\)"):
        BAD_INPUT[call](params, cfg)


def test_window_sampler_takes_the_greedy_limit_at_a_tiny_temperature():
    cfg = ModelConfig(vocab=13, d_model=8, layers=1, window=4, seq_len=8, levels=2,
                      periods=(1, 3), dtype="float64")
    params = model.init_params(cfg, seed=0)
    greedy = decode.generate(params, [1, 2], cfg, n_new=3, temperature=0)
    assert np.array_equal(decode.generate(params, [1, 2], cfg, n_new=3, temperature=1e-310),
                          greedy)
    with np.errstate(all="ignore"):
        got = model.generate(params, [1, 2], cfg, n_new=3, temperature=1e-310)
    assert np.array_equal(got, greedy)


def test_window_sampler_refuses_a_negative_count():
    cfg = ModelConfig(vocab=13, d_model=8, layers=1, window=4, seq_len=8, levels=1,
                      dtype="float64")
    params = model.init_params(cfg, seed=0)
    with pytest.raises(ValueError, match="n_new must be an int >= 0"):
        decode.generate(params, [1], cfg, n_new=-1)
    with pytest.raises(ValueError, match="n_new"):
        model.generate(params, [1], cfg, n_new=-1)
