"""Incremental decoding (`models.decode`): one token at a time equals the full forward over the
whole sequence, for every rule, composition and level count; constant-size state; `hecate
sample` uses it."""
import itertools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from models import decode
from models.config import ModelConfig
from models.model import generate as window_generate
from models.model import init_params, logits
from models.train import load_run

ROOT = Path(__file__).resolve().parents[2]
PERIODS = (1, 2, 3, 5)     # short periods, so every level fires several times in 23 tokens


def cfg_of(**kw) -> ModelConfig:
    base = dict(vocab=13, d_model=6, layers=2, window=4, seq_len=8, periods=PERIODS,
                dtype="float64")
    base.update(kw)
    return ModelConfig(**base)


def decode_all(params, cfg, tokens):
    """Logits ``[B, T, vocab]`` of feeding `tokens` one position at a time, and the state."""
    st = decode.init_state(params, cfg, tokens.shape[0])
    outs = []
    for t in range(tokens.shape[1]):
        out, st = decode.step(params, cfg, st, tokens[:, t])
        outs.append(out)
    return np.stack(outs, axis=1), st


def tokens_of(cfg, batch=2, length=23, seed=0):
    return np.random.default_rng(seed).integers(0, cfg.vocab, size=(batch, length))


@pytest.mark.parametrize("rule,composition,levels", list(itertools.product(
    ("delta", "titans", "hebbian"), ("MAG", "MAL"), (0, 1, 2, 3, 4))))
def test_step_equals_full_forward(rule, composition, levels):
    # 23 tokens: beyond the window (4) and beyond seq_len (8); the full forward is one call.
    cfg = cfg_of(rule=rule, composition=composition, levels=levels)
    params = init_params(cfg, seed=1)
    toks = tokens_of(cfg)
    full, full_state = logits(params, toks, None, cfg)
    inc, st = decode_all(params, cfg, toks)
    assert inc.shape == full.shape
    assert np.max(np.abs(inc - full)) < 1e-10
    # The memory the reads use equals the full forward's carried memory, level by level.
    assert st.pos == full_state.pos == toks.shape[1]
    for bst, levels_state in zip(st.blocks, full_state.blocks):
        for lv, ref in zip(bst.levels, levels_state):
            assert np.max(np.abs(lv.m - ref.m)) < 1e-12


@pytest.mark.parametrize("rule", ("delta", "titans", "hebbian"))
def test_key_shift_and_design_periods(rule):
    # key_shift carries the previous token's level input; the default periods (1, 8, 64)
    # with three levels over 70 tokens: level 2 fires at token 63, level 1 eight times.
    cfg = ModelConfig(vocab=11, d_model=8, layers=1, window=5, seq_len=16, levels=3,
                      rule=rule, key_shift=True, shared_qk_init=True, dtype="float64")
    params = init_params(cfg, seed=2)
    toks = tokens_of(cfg, batch=1, length=70, seed=3)
    full, _ = logits(params, toks, None, cfg)
    inc, st = decode_all(params, cfg, toks)
    assert np.max(np.abs(inc - full)) < 1e-10
    assert st.counters(cfg) == (0, 70 % 8, 70 % 64)


FEATURES = [dict(heads=2), dict(mlp=2), dict(rotary=True), dict(heads=2, rotary=True),
            dict(heads=2, mlp=1, rotary=True, bounded_theta=True)]


@pytest.mark.parametrize("rule,composition,levels,features", [
    (rule, comp, levels, f) for f in FEATURES for rule, comp, levels in
    (("delta", "MAG", 2), ("titans", "MAL", 3), ("hebbian", "MAG", 1), ("delta", "MAG", 0))])
def test_heads_mlp_rotary_step_equals_full_forward(rule, composition, levels, features):
    # Every new feature and their combination, at every position of 23 tokens (past the
    # window, so rotary's relative turn of the cached keys wraps the ring buffer).
    cfg = cfg_of(rule=rule, composition=composition, levels=levels, d_model=8, **features)
    params = init_params(cfg, seed=6)
    toks = tokens_of(cfg, seed=2)
    full, full_state = logits(params, toks, None, cfg)
    inc, st = decode_all(params, cfg, toks)
    assert np.max(np.abs(inc - full)) < 1e-10
    for bst, levels_state in zip(st.blocks, full_state.blocks):
        for lv, ref in zip(bst.levels, levels_state):
            assert lv.m.shape == ref.m.shape
            assert np.max(np.abs(lv.m - ref.m)) < 1e-12


def test_rotary_scores_do_not_depend_on_the_absolute_position():
    # Decoding turns cached keys by their distance, so a stream far from position 0 attends
    # exactly as the full forward of the same window does; checked against the training
    # forward's local positions by running one chunk that starts deep into a stream.
    cfg = cfg_of(levels=0, heads=2, rotary=True, d_model=8, layers=1, window=4)
    params = init_params(cfg, seed=3)
    toks = tokens_of(cfg, batch=1, length=40, seed=5)
    inc, _ = decode_all(params, cfg, toks)
    # levels=0 and layers=1: the logits at t depend only on tokens t-3..t (the window).
    for t in (3, 17, 39):
        local, _ = logits(params, toks[:, t - 3:t + 1], None, cfg)
        assert np.max(np.abs(inc[:, t] - local[:, -1])) < 1e-10


def test_decoding_follows_one_long_sequence_not_training_chunks():
    # Training runs chunks of seq_len with the memory carried but attention restarted; decoding
    # follows the single-call semantics: equal on the first chunk, different after it.
    cfg = cfg_of(levels=2)
    params = init_params(cfg, seed=4)
    toks = tokens_of(cfg, batch=1, length=16)
    first, st = logits(params, toks[:, :8], None, cfg)
    second, _ = logits(params, toks[:, 8:], st, cfg)
    inc, _ = decode_all(params, cfg, toks)
    assert np.max(np.abs(inc[:, :8] - first)) < 1e-10
    assert np.max(np.abs(inc[:, 8:] - second)) > 1e-6


def test_state_size_is_constant():
    cfg = cfg_of(levels=4, rule="titans")
    params = init_params(cfg, seed=0)
    st = decode.init_state(params, cfg, 1)

    def nbytes(state):
        total = 0
        for b in state.blocks:
            total += b.k_cache.nbytes + b.v_cache.nbytes + b.prev_h.nbytes
            for lv in b.levels:
                total += lv.m.nbytes + lv.m_next.nbytes + lv.s_next.nbytes
        return total

    sizes = []
    for t in range(40):
        _, st = decode.step(params, cfg, st, np.array([t % cfg.vocab]))
        sizes.append(nbytes(st))
    assert len(set(sizes)) == 1


def test_copy_state_branches_independently():
    cfg = cfg_of(levels=2)
    params = init_params(cfg, seed=0)
    st = decode.init_state(params, cfg, 1)
    for t in (1, 2, 3, 4, 5):
        _, st = decode.step(params, cfg, st, np.array([t]))
    branch = decode.copy_state(st)
    a, _ = decode.step(params, cfg, branch, np.array([7]))
    b, st = decode.step(params, cfg, st, np.array([7]))
    assert np.array_equal(a, b) and branch.pos == st.pos == 6


def test_step_rejects_bad_tokens():
    cfg = cfg_of()
    params = init_params(cfg, seed=0)
    st = decode.init_state(params, cfg, 2)
    with pytest.raises(ValueError, match=r"shape \[batch\] = \[2\]"):
        decode.step(params, cfg, st, np.array([1, 2, 3]))
    with pytest.raises(ValueError, match=r"must lie in \[0, 13\)"):
        decode.step(params, cfg, st, np.array([1, 13]))
    with pytest.raises(ValueError, match="batch must be a positive int"):
        decode.init_state(params, cfg, 0)


@pytest.mark.parametrize("temperature", (0.0, 0.8))
def test_generate_equals_window_sampler_within_seq_len(temperature):
    # While prompt + generated fits in seq_len tokens the older sampler (last seq_len tokens,
    # fresh memory) sees the whole history too, so both draw the same tokens.
    cfg = cfg_of(levels=3, rule="titans", seq_len=12)
    params = init_params(cfg, seed=5)
    new = decode.generate(params, [1, 2, 3], cfg, n_new=10, temperature=temperature, seed=7)
    old = window_generate(params, [1, 2, 3], cfg, n_new=10, temperature=temperature, seed=7)
    assert np.array_equal(new, old)
    # Beyond seq_len each of its tokens is the argmax of the one-call full forward's logits.
    long = decode.generate(params, [1, 2, 3], cfg, n_new=30, temperature=0)
    full, _ = logits(params, long[None, :-1], None, cfg)
    assert np.array_equal(long[3:], np.argmax(full[0, 2:], axis=-1))
    with pytest.raises(ValueError, match="n_new must be an int >= 0"):
        decode.generate(params, [1], cfg, n_new=-1)


def test_hecate_sample_is_deterministic_and_uses_decoding(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("import os\nprint(os.getcwd())\n" * 60)
    run = tmp_path / "run"
    tiny = ["--d-model", "8", "--layers", "1", "--window", "4", "--seq-len", "8", "--levels",
            "2", "--rule", "hebbian", "--batch-size", "2", "--no-progress"]
    cli = [sys.executable, "-m", "models.cli"]
    done = subprocess.run([*cli, "train", "--run-dir", str(run), "--data", str(corpus),
                           "--steps", "2", *tiny], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    argv = [*cli, "sample", "--run", str(run), "--prompt", "import", "--length", "40",
            "--temperature", "0"]
    outs = [subprocess.run(argv, capture_output=True, text=True, cwd=ROOT) for _ in range(2)]
    assert all(o.returncode == 0 for o in outs), outs[0].stderr
    assert outs[0].stdout == outs[1].stdout
    cfg, _, params, _, _ = load_run(run)
    expect = decode.generate(params, np.frombuffer(b"import", np.uint8), cfg, 40,
                             temperature=0)
    text = bytes(int(t) for t in expect).decode("utf-8", errors="replace")
    assert outs[0].stdout == text + "\n"
    # 46 bytes > seq_len: the older sampler (fresh memory over the last 8 bytes) picks other
    # bytes for this run, so the output above is the decoder's and not the older one's.
    old = window_generate(params, np.frombuffer(b"import", np.uint8), cfg, 40, temperature=0)
    assert not np.array_equal(expect, old)


@pytest.mark.parametrize("features", [dict(), dict(heads=2, rotary=True, mlp=1, key_shift=True)])
def test_step_streams_at_their_own_positions_equal_each_stream_alone(features):
    # Three streams that joined at different times (positions 0, 3 and 9: one level fires for
    # some of them only, rotary distances and unfilled ring slots differ per row) against
    # `step` on each stream by itself.
    cfg = cfg_of(levels=3, rule="titans", d_model=8, **features)
    params = init_params(cfg, seed=8)
    toks = tokens_of(cfg, batch=3, length=20, seed=4)
    starts = (0, 3, 9)
    alone = []
    for i, start in enumerate(starts):
        st = decode.init_state(params, cfg, 1)
        for t in toks[i, :start]:
            _, st = decode.step(params, cfg, st, np.array([t]))
        alone.append(st)
    blocks = [decode.BlockDecodeState(
        k_cache=np.concatenate([s.blocks[j].k_cache for s in alone]),
        v_cache=np.concatenate([s.blocks[j].v_cache for s in alone]),
        prev_h=np.concatenate([s.blocks[j].prev_h for s in alone]),
        levels=[decode.LevelDecodeState(
            m=np.concatenate([s.blocks[j].levels[i].m for s in alone]),
            m_next=np.concatenate([s.blocks[j].levels[i].m_next for s in alone]),
            s_next=np.concatenate([s.blocks[j].levels[i].s_next for s in alone]))
            for i in range(cfg.levels)]) for j in range(cfg.layers)]
    pos = np.array(starts)
    for t in range(9):
        got = decode.step_streams(params, cfg, blocks, toks[np.arange(3), pos], pos)
        for i in range(3):
            want, alone[i] = decode.step(params, cfg, alone[i], toks[i, pos[i]:pos[i] + 1])
            assert np.max(np.abs(got[i] - want[0])) < 1e-12
        pos = pos + 1
