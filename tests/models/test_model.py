"""The NL model: gradients against finite differences, gates, CMS semantics, state, config."""
import dataclasses

import numpy as np
import pytest

from models.config import ModelConfig
from models.layers import (B_ALPHA, B_ETA, B_THETA, conductor, init_level, init_level_state,
                           level_forward, level_inputs)
from models.model import Params, State, generate, init_params, init_state, logits, loss
from tape import Active, Const, Duplicated, Reverse, Tracer, autodiff, make_zero


def tiny(**kw) -> ModelConfig:
    base = dict(vocab=11, d_model=8, layers=1, window=4, seq_len=8, levels=2,
                periods=(1, 4), dtype="float64")
    base.update(kw)
    return ModelConfig(**base)


def leaves(tree):
    """Array leaves of a Params/State tree, in a fixed order."""
    return [a for _, a in named_leaves(tree)]


def named_leaves(tree, path=""):
    """``(path, array)`` for every array leaf, e.g. ``("blocks.0.memory.1.w_a", ...)``."""
    if dataclasses.is_dataclass(tree):
        return [x for f in dataclasses.fields(tree)
                for x in named_leaves(getattr(tree, f.name), f"{path}.{f.name}")]
    if isinstance(tree, (list, tuple)):
        return [x for i, t in enumerate(tree) for x in named_leaves(t, f"{path}.{i}")]
    return [(path.lstrip("."), tree)] if isinstance(tree, np.ndarray) else []


def shifted(tree, direction, eps):
    """A copy of `tree` with every array leaf moved by eps * its direction leaf."""
    it = iter(direction)

    def go(t):
        if dataclasses.is_dataclass(t):
            return type(t)(**{f.name: go(getattr(t, f.name)) for f in dataclasses.fields(t)})
        if isinstance(t, (list, tuple)):
            return type(t)(go(x) for x in t)
        return t + eps * next(it) if isinstance(t, np.ndarray) else t
    return go(tree)


def check_model_gradient(cfg, state, tokens, seed=0, eps=1e-6):
    """Reverse-mode gradient over the whole Params pytree against a central difference along
    a random direction."""
    params = init_params(cfg, seed=seed)
    # Larger gate weights than at init, so the gate paths carry visible gradient.
    for block in params.blocks:
        for lv in block.memory:
            for name in ("w_a", "w_t", "w_e"):
                setattr(lv, name, getattr(lv, name) * 20)
    grads = make_zero(params)
    autodiff(Reverse, lambda p, t: loss(p, t, state, cfg)[0], Active,
             Duplicated(params, grads), Const(tokens))
    rng = np.random.default_rng(seed + 1)
    named = named_leaves(params)
    # The whole tree, then only the memory levels, then only the gate weights and biases: the
    # memory's gradients are small next to the embedding's and must not hide inside its error.
    for keep in (lambda n: True, lambda n: ".memory." in n,
                 lambda n: n.rsplit(".", 1)[-1] in ("w_a", "b_a", "w_t", "b_t", "w_e", "b_e")):
        direction = [rng.standard_normal(a.shape) * keep(n) for n, a in named]
        analytic = sum(float(np.sum(g * d)) for g, d in zip(leaves(grads), direction))
        up = float(loss(shifted(params, direction, eps), tokens, state, cfg)[0])
        down = float(loss(shifted(params, direction, -eps), tokens, state, cfg)[0])
        numeric = (up - down) / (2 * eps)
        assert abs(analytic) > 1e-6
        assert abs(analytic - numeric) <= 1e-9 + 1e-5 * abs(numeric), (analytic, numeric)
    # Every leaf that should learn gets a gradient (the gate weights of unused gates aside).
    unused = {"delta": ("w_e", "b_e"), "hebbian": ("w_t", "b_t", "w_e", "b_e"), "titans": ()}
    for block in grads.blocks:
        for lv in block.memory:
            for f in dataclasses.fields(lv):
                if f.name not in unused[cfg.rule]:
                    assert np.abs(getattr(lv, f.name)).max() > 0, f.name


def tokens_for(cfg, batch=2, seed=0):
    return np.random.default_rng(seed).integers(0, cfg.vocab, size=(batch, cfg.seq_len + 1))


@pytest.mark.parametrize("composition", ["MAG", "MAL"])
@pytest.mark.parametrize("rule", ["delta", "titans", "hebbian"])
def test_full_model_gradient_matches_finite_differences(rule, composition):
    cfg = tiny(rule=rule, composition=composition)
    check_model_gradient(cfg, init_state(cfg, 2), tokens_for(cfg))


@pytest.mark.parametrize("composition", ["MAG", "MAL"])
def test_levels_zero_is_pure_sliding_window_attention(composition):
    # levels=0 is the SWA-only baseline: no memory parameters or state, and every block is
    # exactly x + swa(rms_norm(x)) @ w_o, with no memory gate (MAG) or memory input (MAL) left.
    import kernels
    from ops import cross_entropy, rms_norm
    from tape.testing import check_grads
    cfg = tiny(levels=0, layers=2, composition=composition)
    params, state = init_params(cfg, seed=0), init_state(cfg, 2)
    assert all(b.memory == [] for b in params.blocks) and state.blocks == [[], []]
    tokens = tokens_for(cfg)

    def reference(embed, w_o0, w_q1):
        x = embed[tokens[:, :-1]]
        for i, b in enumerate(params.blocks):
            h = rms_norm(x, b.norm)
            w_q = w_q1 if i == 1 else b.attn.w_q
            a = kernels.swa_attention(h @ w_q, h @ b.attn.w_k, h @ b.attn.w_v, cfg.window)
            x = x + a @ (w_o0 if i == 0 else b.w_o)
        return cross_entropy(rms_norm(x, params.final_norm) @ params.unembed, tokens[:, 1:])

    value, new_state = loss(params, tokens, state, cfg)
    assert new_state.blocks == [[], []] and new_state.pos == cfg.seq_len
    args = (params.embed, params.blocks[0].w_o, params.blocks[1].attn.w_q)
    np.testing.assert_allclose(float(value), float(reference(*args)), rtol=1e-12, atol=1e-12)

    def model_loss(embed, w_o0, w_q1):
        p = dataclasses.replace(params, embed=embed, blocks=[
            dataclasses.replace(params.blocks[0], w_o=w_o0),
            dataclasses.replace(params.blocks[1], attn=dataclasses.replace(
                params.blocks[1].attn, w_q=w_q1))])
        return loss(p, tokens, None, cfg)[0]
    check_grads(model_loss, *args, modes=("rev",), order=1)
    # And the whole pytree in one reverse pass, against a central difference.
    grads = make_zero(params)
    autodiff(Reverse, lambda p, t: loss(p, t, state, cfg)[0], Active,
             Duplicated(params, grads), Const(tokens))
    rng = np.random.default_rng(1)
    direction = [rng.standard_normal(a.shape) for a in leaves(params)]
    analytic = sum(float(np.sum(g * d)) for g, d in zip(leaves(grads), direction))
    up = float(loss(shifted(params, direction, 1e-6), tokens, state, cfg)[0])
    down = float(loss(shifted(params, direction, -1e-6), tokens, state, cfg)[0])
    assert abs(analytic - (up - down) / 2e-6) <= 1e-9 + 1e-5 * abs(analytic)


@pytest.mark.parametrize("rule", ["delta", "titans"])
def test_gradient_with_carried_state_and_pending_tokens(rule):
    # Two layers, three levels (1/sqrt(3) scaling), and a chunk that starts mid-segment: the
    # state after 6 tokens holds pending tokens for the period-4 level.
    cfg = tiny(rule=rule, layers=2, levels=3, periods=(1, 2, 4), seq_len=6, window=3)
    params = init_params(cfg, seed=3)
    _, state = loss(params, tokens_for(cfg, seed=5), init_state(cfg, 2), cfg)
    assert state.pos == 6 and state.blocks[0][2].pend[0].shape == (2, 3, 8)
    assert np.abs(state.blocks[0][2].pend[0][:, :2]).min() > 0     # two valid pending tokens
    assert not state.blocks[0][2].pend[0][:, 2].any()
    check_model_gradient(cfg, state, tokens_for(cfg, seed=6))


def test_gates_in_open_unit_interval_at_init():
    cfg = tiny(levels=4, periods=(1, 8, 64, 512), rule="titans", d_model=16)
    params = init_params(cfg, seed=0)
    x = np.random.default_rng(0).standard_normal((2, 8, 16))
    for i, lv in enumerate(params.blocks[0].memory):
        assert (float(lv.b_a[0]), float(lv.b_t[0]), float(lv.b_e[0])) == \
            (B_ALPHA[i], B_THETA[i], B_ETA[i])
        _, _, _, alpha, theta, eta = level_inputs(lv, x)
        for g in (alpha, eta):
            assert 0.5 < g.min() and g.max() < 0.999      # in (0, 1), not saturated
        assert 0 < theta.min() and theta.max() < 0.05     # small positive inner learning rate
        sig = 1 / (1 + np.exp(-B_ALPHA[i]))
        assert np.allclose(alpha, sig, atol=0.02)


def reference_level(level, chunks, period, rule, eta_max=1.0):
    """The CMS semantics of `models.layers`, token by token with ordinary NumPy: a level fires
    at global token t when (t + 1) % period == 0, absorbing every token since its last firing
    with the rule; each token reads the memory after any firing at that token."""
    d = level.w_k.shape[0]
    B = chunks[0].shape[0]
    m, s = np.zeros((B, d, d)), np.zeros((B, d, d))
    pending, outs, t = [], [], 0
    for x in chunks:
        k, v, q, alpha, theta, eta = level_inputs(level, x)
        ys = []
        for i in range(x.shape[1]):
            pending.append((k[:, i], v[:, i], alpha[:, i], theta[:, i], eta[:, i]))
            if (t + 1) % period == 0:
                for kk, vv, a, th, e in pending:
                    keep = a[:, None, None]
                    err = np.einsum("bij,bj->bi", m, kk) - vv
                    outer = np.einsum("bi,bj->bij", err, kk)
                    if rule == "delta":
                        m = keep * m - th[:, None, None] * outer
                    elif rule == "titans":
                        s = eta_max * e[:, None, None] * s - th[:, None, None] * outer
                        m = keep * m + s
                    else:
                        m = keep * m + np.einsum("bi,bj->bij", vv, kk)
                pending = []
            ys.append(np.einsum("bij,bj->bi", m, q[:, i]))
            t += 1
        outs.append(np.stack(ys, axis=1))
    return outs


@pytest.mark.parametrize("rule, eta_max", [("delta", 1.0), ("titans", 1.0), ("titans", 0.7),
                                           ("hebbian", 1.0)])
@pytest.mark.parametrize("period", [1, 3])
def test_cms_level_matches_per_token_reference(rule, eta_max, period):
    d = 4
    level = init_level(np.random.default_rng(0), d, 0, "float64")
    level.w_a = level.w_a * 10          # token-dependent gates
    level.b_a = np.array([1.0])         # retention ~0.73: a forgetting memory shows up clearly
    level.b_t = np.array([-1.0])
    rng = np.random.default_rng(1)
    chunks = [rng.standard_normal((2, n, d)) for n in (5, 7, 2)]   # segments cross chunks
    expected = reference_level(level, chunks, period, rule, eta_max)
    st, pos = init_level_state(2, d, rule, period, np, "float64"), 0
    for x, want in zip(chunks, expected):
        got, st, _ = level_forward(level, x, st, period, pos, rule, eta_max=eta_max)
        pos += x.shape[1]
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
        assert st.pend[0].shape[1] == period - 1     # fixed shape: checkpoints stay compatible
        assert not st.pend[0][:, pos % period:].any()


def test_conductor():
    assert [conductor(t, (1, 2, 4)) for t in range(4)] == [
        (True, False, False), (True, True, False), (True, False, False), (True, True, True)]


def test_state_carries_across_chunks_without_gradient():
    cfg = tiny(rule="titans")
    params, fresh = init_params(cfg, seed=0), init_state(cfg, 2)
    tokens = tokens_for(cfg)
    first, carried = loss(params, tokens, fresh, cfg)
    again, _ = loss(params, tokens, fresh, cfg)
    second, _ = loss(params, tokens, carried, cfg)
    assert float(first) == float(again)            # the fresh state was not mutated
    assert float(second) != float(first)           # the carried memory changes the output
    assert carried.pos == cfg.seq_len
    assert np.abs(carried.blocks[0][0].m).max() > 0

    captured = []

    def f(p, t):
        value, new = loss(p, t, carried, cfg)
        captured.append(new)
        return value
    autodiff(Reverse, f, Active, Duplicated(params, make_zero(params)), Const(tokens))
    new_leaves = leaves(captured[0])
    assert new_leaves and all(type(a) is np.ndarray for a in new_leaves)
    assert not any(isinstance(a, Tracer) for a in new_leaves)


def test_logits_and_generate():
    cfg = tiny()
    params = init_params(cfg, seed=0)
    out, st = logits(params, np.zeros((3, 5), dtype=np.int64), None, cfg)
    assert out.shape == (3, 5, 11) and st.pos == 5
    seq = generate(params, [1, 2, 3], cfg, n_new=10, temperature=0.8, seed=1)
    assert seq.shape == (13,) and list(seq[:3]) == [1, 2, 3] and seq.max() < 11
    assert np.array_equal(seq, generate(params, [1, 2, 3], cfg, n_new=10, temperature=0.8,
                                        seed=1))
    greedy = generate(params, [1], cfg, n_new=3, temperature=0)
    assert greedy.shape == (4,)


def test_init_is_seeded_and_typed():
    cfg = tiny(dtype="float32")
    a, b, c = init_params(cfg, 0), init_params(cfg, 0), init_params(cfg, 1)
    assert all(np.array_equal(x, y) for x, y in zip(leaves(a), leaves(b)))
    assert not np.array_equal(a.embed, c.embed)
    assert all(x.dtype == np.float32 for x in leaves(a))
    assert isinstance(a, Params) and isinstance(init_state(cfg, 1), State)
    value, _ = loss(a, tokens_for(cfg), None, cfg)
    assert np.asarray(value).dtype == np.float32


@pytest.mark.parametrize("kwargs, field", [
    (dict(seq_len=4, window=8), "seq_len"),
    (dict(rule="lstm"), "rule"),
    (dict(levels=-1), "levels"),
    (dict(levels=5), "levels"),
    (dict(composition="MAC2"), "composition"),
    (dict(periods=(2, 4)), "periods"),
    (dict(periods=(1, 8, 4)), "periods"),
    (dict(dtype="int8"), "dtype"),
    (dict(d_model=0), "d_model"),
    (dict(eta_max=0.0), "eta_max"),
    (dict(eta_max=1.5), "eta_max"),
    (dict(heads=3), "heads"),
    (dict(heads=0), "heads"),
    (dict(mlp=-1), "mlp"),
    (dict(mlp=True), "mlp"),
    (dict(d_model=6, heads=2, rotary=True), "rotary"),
    (dict(rotary=1), "rotary"),
    (dict(bounded_theta=0), "bounded_theta"),
])
def test_config_errors_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"ModelConfig.{field}"):
        ModelConfig(**kwargs).validate()
    with pytest.raises(ValueError, match=f"ModelConfig.{field}"):
        init_params(ModelConfig(**kwargs), seed=0)


def test_config_json_round_trip():
    import json
    cfg = tiny(rule="hebbian", composition="MAL")
    assert ModelConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    with pytest.raises(ValueError, match="unknown key"):
        ModelConfig.from_dict({**cfg.to_dict(), "colour": 2})


def test_state_shapes_are_fixed_across_chunks():
    # Checkpoints restore the state into `init_state`'s shapes, whatever the position.
    cfg = tiny(levels=4, periods=(1, 2, 4, 16), seq_len=6, window=3)
    params, state = init_params(cfg, seed=0), init_state(cfg, 2)
    shapes = [a.shape for a in leaves(state)]
    for i in range(4):
        _, state = loss(params, tokens_for(cfg, seed=i), state, cfg)
        assert [a.shape for a in leaves(state)] == shapes
    assert state.pos == 24
    assert np.abs(state.blocks[0][3].m).max() > 0      # the period-16 level has fired once


def test_shared_qk_init_starts_queries_equal_to_keys_and_changes_nothing_else():
    plain = init_params(tiny(), seed=0)
    shared = init_params(tiny(shared_qk_init=True), seed=0)
    for lp, ls in zip(plain.blocks[0].memory, shared.blocks[0].memory):
        np.testing.assert_array_equal(ls.w_q, ls.w_k)
        assert not np.array_equal(lp.w_q, lp.w_k)
    differ = [n for (n, a), (_, b) in zip(named_leaves(plain), named_leaves(shared))
              if not np.array_equal(a, b)]
    assert differ == ["blocks.0.memory.0.w_q", "blocks.0.memory.1.w_q"]
    with pytest.raises(ValueError, match="ModelConfig.shared_qk_init"):
        ModelConfig(shared_qk_init=1).validate()


@pytest.mark.parametrize("rule", ["delta", "titans", "hebbian"])
def test_heads_mlp_rotary_gradient_matches_finite_differences(rule):
    # Two heads (per-head memories and gates), the MLP sublayer and rotary attention, two
    # blocks, and a carried state with pending tokens for the period-4 level.
    cfg = tiny(rule=rule, layers=2, heads=2, mlp=2, rotary=True, composition="MAG",
               bounded_theta=rule == "titans")
    params = init_params(cfg, seed=4)
    _, state = loss(params, tokens_for(cfg, seed=7), init_state(cfg, 2), cfg)
    _, state = loss(params, tokens_for(cfg, seed=8)[:, :4], state, cfg)   # pos 11: pending
    assert state.blocks[0][1].pend[0].shape == (2, 2, 3, 4)
    check_model_gradient(cfg, state, tokens_for(cfg, seed=9))
    grads = make_zero(params)
    autodiff(Reverse, lambda p, t: loss(p, t, state, cfg)[0], Active,
             Duplicated(params, grads), Const(tokens_for(cfg, seed=9)))
    for name, g in named_leaves(grads):
        if ".mlp." in name or ".attn." in name:
            assert np.abs(g).max() > 0, name


@pytest.mark.parametrize("period", [1, 4])
def test_per_head_memory_equals_separate_single_head_memories(period):
    # A level with two heads is two independent memories, each reading its own slice of the
    # projections and gating itself from its own key and value.
    d, heads, dh = 8, 2, 4
    lv = init_level(np.random.default_rng(0), d, 0, "float64", heads=heads)
    lv.w_a, lv.w_t = lv.w_a * 20, lv.w_t * 20
    x = np.random.default_rng(1).standard_normal((2, 7, d))
    st = init_level_state(2, d, "delta", period, heads=heads)
    y, new, _ = level_forward(lv, x, st, period, pos=1, rule="delta", heads=heads)
    for h in range(heads):
        cols = slice(h * dh, (h + 1) * dh)
        one = dataclasses.replace(lv, w_k=lv.w_k[:, cols], w_v=lv.w_v[:, cols],
                                  w_q=lv.w_q[:, cols], w_a=lv.w_a[h], b_a=lv.b_a[h:h + 1],
                                  w_t=lv.w_t[h], b_t=lv.b_t[h:h + 1], w_e=lv.w_e[h],
                                  b_e=lv.b_e[h:h + 1])
        st1 = init_level_state(2, dh, "delta", period)
        y1, new1, _ = level_forward(one, x, st1, period, pos=1, rule="delta")
        np.testing.assert_allclose(y[..., cols], y1, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(new.m[:, h], new1.m, rtol=1e-12, atol=1e-14)


def test_attention_heads_and_rotary_against_plain_numpy():
    # The multi-head rotary attention of a levels=0 block against a direct NumPy computation.
    from ops import rms_norm
    cfg = tiny(levels=0, heads=2, rotary=True, window=3, seq_len=6)
    params = init_params(cfg, seed=2)
    tokens = tokens_for(cfg, batch=1)[:, :-1]
    out, _ = logits(params, tokens, None, cfg)
    b = params.blocks[0]
    x = params.embed[tokens][0]
    h = np.asarray(rms_norm(x, b.norm))
    T, dh = x.shape[0], cfg.head_dim
    freq = 10000.0 ** (-np.arange(dh // 2) * 2.0 / dh)
    heads = []
    for i in range(cfg.heads):
        cols = slice(i * dh, (i + 1) * dh)
        q, k, v = h @ b.attn.w_q[:, cols], h @ b.attn.w_k[:, cols], h @ b.attn.w_v[:, cols]
        scores = np.full((T, T), -np.inf)
        for t in range(T):
            for s in range(max(0, t - cfg.window + 1), t + 1):
                # A complex rotation of each pair (x_j, x_{j + dh/2}) by position * freq_j.
                qc = (q[t, :dh // 2] + 1j * q[t, dh // 2:]) * np.exp(1j * t * freq)
                kc = (k[s, :dh // 2] + 1j * k[s, dh // 2:]) * np.exp(1j * s * freq)
                scores[t, s] = np.real(np.sum(qc * np.conj(kc))) / np.sqrt(dh)
        w = np.exp(scores - scores.max(axis=1, keepdims=True))
        heads.append((w / w.sum(axis=1, keepdims=True)) @ v)
    x = x + np.concatenate(heads, axis=1) @ b.w_o
    ref = np.asarray(rms_norm(x, params.final_norm)) @ params.unembed
    np.testing.assert_allclose(out[0], ref, rtol=1e-10, atol=1e-12)


def test_configs_that_predate_a_field_load_as_the_older_model():
    # A checkpoint's config without heads / mlp / rotary is the model it was trained as,
    # whatever today's defaults are; and a missing field otherwise takes its default.
    from models.config import PREDATING
    old = {k: v for k, v in tiny().to_dict().items() if k not in PREDATING}
    cfg = ModelConfig.from_dict(old)
    assert (cfg.heads, cfg.mlp, cfg.rotary) == (1, 0, False)
    params = init_params(cfg, seed=0)
    assert params.blocks[0].mlp is None and params.blocks[0].memory[0].w_a.shape == (16,)
    assert ModelConfig.from_dict({**old, "heads": 2}).heads == 2


def test_parameter_count_covers_heads_and_mlp():
    from models.validation import parameter_count
    from tape.pytree import flatten
    for cfg in (tiny(heads=2, mlp=3), tiny(heads=4, mlp=1, levels=0, layers=2)):
        assert parameter_count(cfg) == sum(x.size for x in flatten(init_params(cfg, 0))[0])


def test_ablation_benchmark_smoke(tmp_path):
    # benchmarks/ablations.py --quick: two variants of a tiny model, three steps each.
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "rows.jsonl"
    done = subprocess.run([sys.executable, str(root / "benchmarks" / "ablations.py"), "--quick",
                           "--variants", "base,all", "--json", str(out)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "| all | 0 |" in done.stdout and len(out.read_text().splitlines()) == 2


def test_resuming_a_checkpoint_that_predates_the_backbone_fields():
    # check_compatible counts a field the checkpoint's header lacks as its older value: an old
    # run resumes as itself, and asking it for heads is a difference that names the field.
    from models.checkpoint import CheckpointFileError, check_compatible
    from models.config import PREDATING
    saved = {k: v for k, v in tiny().to_dict().items() if k not in PREDATING}
    header = {"model": saved}
    check_compatible("old.npz", header, ModelConfig.from_dict(saved).to_dict())
    with pytest.raises(CheckpointFileError, match="heads: 1 \\(checkpoint\\) vs 4"):
        check_compatible("old.npz", header, ModelConfig.from_dict({**saved, "heads": 4}).to_dict())
