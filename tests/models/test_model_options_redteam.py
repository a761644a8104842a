"""The model's code paths against each other over the user-selectable options (rule,
composition, levels, heads, mlp, rotary, bounded_theta, dtype, gate penalty), sampled with
pairwise coverage: every pair of values of two options appears in at least one combination.

On tiny models: the compiled training step against the eager one over consecutive steps with
parameter updates between them; the gradient against central differences, entry by entry, for
every parameter leaf, from a carried state with pending tokens; the incremental decoder against
the full forward; the default kernel dispatch (chunked and periodic kernels) against
`kernels.force_reference`; the carried memory against chunk lengths; checkpoint resume; and
`hecate eval`'s reset ablation."""
import contextlib
import copy
import warnings

import numpy as np
import pytest

import kernels
from models import model
from models.config import ModelConfig
from models.train_step import TrainStep
from tape import (Active, Const, Duplicated, Reverse, ReverseWithPrimal, autodiff, make_zero,
                  make_zero_, primal, tree_map)
from tape.pytree import flatten

from test_decode import decode_all
from test_model import named_leaves

# (rule, composition, levels, heads, mlp, rotary, bounded_theta, dtype, gate_penalty): a
# greedy pairwise covering of 3 x 2 x 4 x 3 x 2 x 2 x 2 x 2 x 2 choices.
PAIRWISE = [
    ("hebbian", "MAL", 1, 1, 0, True, True, "float32", 0.01),
    ("hebbian", "MAG", 2, 2, 2, False, False, "float64", 0.0),
    ("titans", "MAL", 3, 4, 2, True, False, "float64", 0.01),
    ("delta", "MAL", 0, 4, 0, False, True, "float32", 0.0),
    ("titans", "MAG", 3, 2, 0, False, True, "float32", 0.01),
    ("delta", "MAG", 0, 1, 2, True, False, "float32", 0.0),
    ("delta", "MAL", 2, 2, 0, True, True, "float64", 0.01),
    ("titans", "MAG", 1, 4, 2, False, False, "float64", 0.0),
    ("titans", "MAL", 0, 1, 2, False, True, "float64", 0.01),
    ("delta", "MAG", 3, 1, 0, True, False, "float32", 0.0),
    ("titans", "MAG", 2, 1, 2, False, False, "float32", 0.0),
    ("delta", "MAL", 1, 2, 2, True, True, "float32", 0.0),
    ("hebbian", "MAL", 0, 4, 0, False, False, "float64", 0.01),
    ("hebbian", "MAG", 3, 1, 0, False, True, "float64", 0.0),
    ("titans", "MAL", 2, 4, 2, True, True, "float64", 0.0),
    ("delta", "MAL", 0, 2, 0, False, False, "float64", 0.01),
]
IDS = ["-".join(str(x) for x in c) for c in PAIRWISE]


def cfg_of(combo, **kw) -> ModelConfig:
    rule, comp, levels, heads, mlp, rotary, bounded, dtype, penalty = combo
    # seq_len 16 and d 16: the period-1 level runs in the chunked kernels (16 tokens or more),
    # period 32 in sub-chunks of the periodic kernel; the gate margin 2 keeps the penalty on.
    base = dict(vocab=13, d_model=16, layers=2, window=4, seq_len=16, levels=levels,
                periods=(1, 3, 8, 32), rule=rule, composition=comp, heads=heads, mlp=mlp,
                rotary=rotary, bounded_theta=bounded, dtype=dtype, gate_penalty=penalty,
                gate_margin=2.0)
    base.update(kw)
    return ModelConfig(**base)


def params_of(cfg, seed=1):
    """Parameters with gate weights 20x their init, so the gates depend on the token (and the
    gate penalty sees pre-activations beyond its margin)."""
    params = model.init_params(cfg, seed=seed)
    for block in params.blocks:
        for lv in block.memory:
            for name in ("w_a", "w_t", "w_e"):
                setattr(lv, name, getattr(lv, name) * 20)
    return params


def close(a, b, rtol, atol=0.0):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and np.isfinite(a).all() and np.isfinite(b).all()
    scale = np.max(np.abs(b)) if b.size else 0.0
    assert np.max(np.abs(a - b), initial=0.0) <= rtol * scale + atol, \
        (np.max(np.abs(a - b)), scale)


def carried_state(params, cfg, length=5, seed=7):
    """The state after a first chunk of `length` tokens: levels of period 3 and 8 hold
    pending tokens, and the memories are not zero."""
    toks = np.random.default_rng(seed).integers(0, cfg.vocab, size=(2, length + 1))
    _, st, _ = model.training_loss(params, toks, model.init_state(cfg, 2), cfg)
    return tree_map(primal, st)


@pytest.mark.parametrize("combo", PAIRWISE, ids=IDS)
def test_compiled_step_equals_eager_step_through_parameter_updates(combo):
    """Four steps, the state carried, parameters updated in place and rebound in between
    (embedding, unembedding, a retention weight, an inner-rate bias, a query projection, the
    MLP): the compiled step gives the eager step's losses, gradients and state (bitwise in
    practice; 1e-12 in float64, float32 rounding in float32), with one program per phase."""
    cfg = cfg_of(combo)
    tol = 1e-12 if cfg.dtype == "float64" else 1e-5
    base = params_of(cfg)
    params = {False: base, True: copy.deepcopy(base)}
    steps = {c: TrainStep(cfg, compiled=c) for c in params}
    states = {c: model.init_state(cfg, batch=2) for c in params}
    grads = {c: make_zero(base) for c in params}
    rng = np.random.default_rng(0)
    for n in range(4):
        tokens = rng.integers(0, cfg.vocab, size=(2, cfg.seq_len + 1))
        out = {}
        for c in params:
            make_zero_(grads[c])
            out[c] = steps[c](params[c], grads[c], tokens.copy(), states[c])
            states[c] = out[c][2]
        for k in (0, 1):
            assert abs(out[True][k] - out[False][k]) <= tol * abs(out[False][k]), (n, k)
        if combo[-1] and cfg.levels:        # the penalty takes part
            assert out[False][1] > out[False][0]
        for a, b in zip(flatten(grads[True])[0], flatten(grads[False])[0]):
            close(a, b, tol, 1e-30)
        for a, b in zip(flatten(out[True][2].blocks)[0], flatten(out[False][2].blocks)[0]):
            close(a, b, tol)
        assert out[True][2].pos == out[False][2].pos == (n + 1) * cfg.seq_len
        for c, p in params.items():
            g = grads[c]
            p.embed -= 0.3 * g.embed
            p.unembed = p.unembed - 0.3 * g.unembed
            for blk, gb in zip(p.blocks, g.blocks):
                blk.attn.w_q -= 0.3 * gb.attn.w_q
                for lv, gl in zip(blk.memory, gb.memory):
                    lv.w_a -= 0.3 * gl.w_a
                    lv.b_t = lv.b_t - 0.3 * gl.b_t
                if blk.mlp is not None:
                    blk.mlp.w_in = blk.mlp.w_in - 0.3 * gb.mlp.w_in
    stats = steps[True].stats
    assert stats.eager_calls == 0 and stats.guard_failures == 0, stats
    phases = {n * cfg.seq_len % steps[True].cycle for n in range(4)}
    assert stats.traces == len(phases), stats


@pytest.mark.parametrize("combo", PAIRWISE, ids=IDS)
def test_gradient_entries_match_central_differences(combo):
    """One random entry of every parameter leaf (every kind: embedding, norms, projections,
    gate weights and biases, MLP), in float64, of the training objective (gate penalty
    included) from a carried state with pending tokens, through the chunked kernels."""
    cfg = cfg_of(combo, dtype="float64", layers=1)
    params = params_of(cfg)
    state = carried_state(params, cfg)
    tokens = np.random.default_rng(3).integers(0, cfg.vocab, size=(2, cfg.seq_len + 1))

    unused = {"delta": ("w_e", "b_e"), "hebbian": ("w_t", "b_t", "w_e", "b_e"), "titans": ()}
    checked = 0
    _, entries = entries_match_central_differences(params, tokens, state, cfg)
    for name, got in entries:
        if name.rsplit(".", 1)[-1] in unused[cfg.rule]:
            assert got == 0.0, name
        checked += 1
    assert checked == len(named_leaves(params))


def entries_match_central_differences(params, tokens, state, cfg, eps=1e-6, per_leaf=1):
    """Checks `per_leaf` random entries of every parameter leaf of the training objective
    against central differences in float64; returns the gradient and ``(leaf name, gradient
    entry)`` per entry checked."""
    def objective(p):
        return float(primal(model.training_loss(p, tokens, state, cfg)[0]))

    grads = make_zero(params)
    autodiff(Reverse, lambda p, t: model.training_loss(p, t, state, cfg)[0], Active,
             Duplicated(params, grads), Const(tokens))
    analytic = dict(named_leaves(grads))
    rng, checked = np.random.default_rng(4), []
    for name, leaf in named_leaves(params):
        for _ in range(per_leaf):
            idx = tuple(int(rng.integers(0, s)) for s in leaf.shape)
            old = leaf[idx]
            leaf[idx] = old + eps
            up = objective(params)
            leaf[idx] = old - eps
            down = objective(params)
            leaf[idx] = old
            numeric = (up - down) / (2 * eps)
            got = analytic[name][idx]
            assert abs(got - numeric) <= 1e-8 + 1e-5 * abs(numeric), (name, idx, got, numeric)
            checked.append((name, got))
    return grads, checked


@pytest.mark.parametrize("combo", PAIRWISE, ids=IDS)
def test_decoder_equals_full_forward_and_chunks_with_carried_memory(combo):
    """The decoder equals the one-call forward at every position of 35 tokens (past the
    window, past seq_len, with every level firing; 1e-10 in float64, float32 rounding in
    float32). With one block, the chunked forward with the memory carried equals both past the
    window of each chunk (attention restarts at a chunk, the memory does not), and carries the
    same memory; a decoder restarted from fresh memory equals a chunk from fresh memory."""
    cfg = cfg_of(combo, layers=1, d_model=8, seq_len=8, periods=(1, 2, 3, 5))
    tol = 1e-10 if cfg.dtype == "float64" else 2e-5
    params = params_of(cfg, seed=3)
    toks = np.random.default_rng(1).integers(0, cfg.vocab, size=(2, 35))
    full, full_state = model.logits(params, toks, None, cfg)
    full = np.asarray(primal(full))
    inc, st = decode_all(params, cfg, toks)
    close(inc, full, tol, tol)
    for bst, ref in zip(st.blocks, full_state.blocks):
        for lv, r in zip(bst.levels, ref):
            close(lv.m, r.m, tol, tol)
    state, outs = None, []
    for i in range(0, 32, cfg.seq_len):
        out, state = model.logits(params, toks[:, i:i + cfg.seq_len], state, cfg)
        outs.append(np.asarray(primal(out)))
    _, ref32 = model.logits(params, toks[:, :32], None, cfg)
    for i, out in enumerate(outs):
        start = 0 if i == 0 else cfg.window - 1
        close(out[:, start:], full[:, i * cfg.seq_len + start:(i + 1) * cfg.seq_len], tol, tol)
    for a, b in zip(flatten(state.blocks)[0], flatten(ref32.blocks)[0]):
        close(a, b, tol, tol)
    fresh, _ = model.logits(params, toks[:, 8:16], None, cfg)
    again, _ = decode_all(params, cfg, toks[:, 8:16])
    close(again, np.asarray(primal(fresh)), tol, tol)


@pytest.mark.parametrize("combo", PAIRWISE, ids=IDS)
def test_default_dispatch_equals_force_reference_in_the_model(combo):
    """The objective, the whole gradient and the carried state of three consecutive chunks,
    with the default NumPy dispatch (chunked per-token kernels, periodic kernels with
    sub-chunks) and under `kernels.force_reference` (per-token loop, per-segment calls): equal
    to 1e-10 in float64."""
    cfg = cfg_of(combo, dtype="float64")
    params = params_of(cfg)
    runs = []
    for forced in (False, True):
        with kernels.force_reference() if forced else contextlib.nullcontext():
            state, rng, out = model.init_state(cfg, 2), np.random.default_rng(0), []
            for _ in range(3):
                tokens = rng.integers(0, cfg.vocab, size=(2, cfg.seq_len + 1))
                grads, box = make_zero(params), []

                def f(p, t, state=state, box=box):
                    value, new, _ = model.training_loss(p, t, state, cfg)
                    box.append(new)
                    return value
                _, value = autodiff(ReverseWithPrimal, f, Active, Duplicated(params, grads),
                                    Const(tokens))
                state = tree_map(primal, box[-1])
                out.append((float(value), flatten(grads)[0], flatten(state.blocks)[0]))
        runs.append(out)
    for (va, ga, sa), (vb, gb, sb) in zip(*runs):
        assert abs(va - vb) <= 1e-10 * abs(vb)
        for a, b in zip(ga + sa, gb + sb):
            close(a, b, 1e-10, 1e-14)


@pytest.mark.parametrize("rule", ["delta", "titans", "hebbian"])
def test_carried_memory_does_not_depend_on_chunk_lengths(rule):
    """Chunks of 1, 2, 5, 3, 7, 1 and 4 tokens with the state carried (pending tokens of
    levels of period 3 and 5 across every boundary, 2 heads) end in the memory, momentum and
    pending buffers of one call over the 23 tokens, on both kernel dispatches."""
    cfg = ModelConfig(vocab=13, d_model=8, layers=1, window=4, seq_len=8, levels=3,
                      periods=(1, 3, 5), rule=rule, heads=2, dtype="float64")
    params = params_of(cfg, seed=0)
    toks = np.random.default_rng(0).integers(0, 13, size=(2, 23))
    for forced in (False, True):
        with kernels.force_reference() if forced else contextlib.nullcontext():
            _, whole = model.logits(params, toks, None, cfg)
            state, i = None, 0
            for length in (1, 2, 5, 3, 7, 1, 4):
                _, state = model.logits(params, toks[:, i:i + length], state, cfg)
                i += length
        assert state.pos == whole.pos == 23
        for a, b in zip(flatten(state.blocks)[0], flatten(whole.blocks)[0]):
            close(a, b, 1e-12, 1e-15)


CORPUS = bytes(range(32, 127)) * 20 + b"def f(x):\n    return x + 1\n\nclass A:\n    pass\n" * 40


@pytest.mark.parametrize("combo", PAIRWISE[:3] + PAIRWISE[4:5], ids=IDS[:3] + IDS[4:5])
def test_resume_is_bitwise_across_options(combo, tmp_path):
    """Stopped after 3 steps (levels of period 3, 5 and 7 mid-period: pending tokens in the
    checkpoint) and resumed: the same losses and final checkpoint as the uninterrupted run,
    bit for bit, with validation between the steps."""
    from models.checkpoint import load_checkpoint
    from models.train import TrainConfig, train
    cfg = cfg_of(combo, vocab=256, periods=(1, 3, 5, 7), layers=1, d_model=8, seq_len=8)
    tcfg = TrainConfig(steps=5, batch_size=2, lr=1e-2, warmup=2, eval_every=1, eval_batches=1,
                       final_eval_batches=2, ckpt_every=100, sample_bytes=0)
    full = train(cfg, tcfg, tmp_path / "a", progress=False, out=None, corpus=CORPUS)
    first = train(cfg, tcfg, tmp_path / "b", progress=False, out=None, corpus=CORPUS,
                  stop_after=3)
    second = train(cfg, tcfg, tmp_path / "b", resume=True, progress=False, out=None,
                   corpus=CORPUS)
    assert first.losses + second.losses == full.losses
    a, _ = load_checkpoint(tmp_path / "a" / "checkpoints" / "last.npz")
    b, _ = load_checkpoint(tmp_path / "b" / "checkpoints" / "last.npz")
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def test_eval_reset_ablation_uses_the_trained_model_with_every_option(tmp_path):
    """`hecate eval` of a run with heads, MLP, rotary, bounded theta and three Titans levels:
    both losses equal the chunk-by-chunk losses of the checkpoint's parameters under the run's
    config, carried and reset."""
    from models.data import TextData
    from models.train import TrainConfig, eval_run, load_run, train
    cfg = cfg_of(PAIRWISE[2], vocab=256, layers=1, d_model=8, seq_len=8,
                 periods=(1, 3, 5, 7), bounded_theta=True)
    tcfg = TrainConfig(steps=3, batch_size=2, lr=1e-2, warmup=1, eval_every=3, eval_batches=1,
                       final_eval_batches=3, ckpt_every=3, sample_bytes=0)
    train(cfg, tcfg, tmp_path / "run", progress=False, out=None, corpus=CORPUS)
    ev = eval_run(tmp_path / "run", corpus=CORPUS)
    loaded_cfg, loaded_tcfg, params, _, _ = load_run(tmp_path / "run")
    assert loaded_cfg == cfg
    data = TextData(CORPUS, loaded_tcfg.batch_size, cfg.seq_len, loaded_tcfg.seed)
    for key, carry in (("val_loss", True), ("val_loss_memory_reset", False)):
        losses, state = [], None
        for chunk in data.val_batches(3):
            if state is None or not carry:
                state = model.init_state(cfg, chunk.shape[0])
            value, state = model.loss(params, chunk, state, cfg)
            losses.append(float(primal(value)))
        assert ev[key] == pytest.approx(float(np.mean(losses)), rel=1e-12), key
    assert ev["val_loss"] != ev["val_loss_memory_reset"]


def test_compiled_step_takes_another_batch_size():
    cfg = ModelConfig(vocab=13, d_model=8, layers=1, window=4, seq_len=8, levels=2,
                      periods=(1, 3), dtype="float64")
    params = model.init_params(cfg, seed=0)
    compiled, eager = TrainStep(cfg, compiled=True), TrainStep(cfg, compiled=False)
    rng = np.random.default_rng(0)
    for batch in (2, 3):
        tokens = rng.integers(0, cfg.vocab, size=(batch, cfg.seq_len + 1))
        state = model.init_state(cfg, batch)
        g, h = make_zero(params), make_zero(params)
        ce, _, _ = compiled(params, g, tokens, state)
        ce_eager, _, _ = eager(params, h, tokens, state)
        assert abs(ce - ce_eager) <= 1e-12 * abs(ce_eager)
        close(g.embed, h.embed, 1e-12)


def test_compiled_step_replays_again_after_a_force_reference_call():
    cfg = ModelConfig(vocab=13, d_model=8, layers=1, window=4, seq_len=8, levels=2,
                      periods=(1, 4), dtype="float64")
    params = model.init_params(cfg, seed=0)
    step = TrainStep(cfg, compiled=True)
    tokens = np.random.default_rng(0).integers(0, cfg.vocab, size=(2, cfg.seq_len + 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for forced in (False, True, False, False):
            with kernels.force_reference() if forced else contextlib.nullcontext():
                step(params, make_zero(params), tokens, model.init_state(cfg, 2))
    assert step.stats.hits >= 2 and step.stats.programs >= 1, step.stats
