"""The compiled training step (`models.train_step`, `hecate train`'s default) against the eager
one: the same cross-entropy, objective, gradients and carried memory, step after step, with new
tokens each step and the state carried over, for every memory rule and backbone."""
import numpy as np
import pytest

from models import model
from models.config import TEXT_MODEL, ModelConfig
from models.train_step import TrainStep
from tape import make_zero, make_zero_
from tape.pytree import flatten

SMALL = dict(vocab=23, d_model=8, layers=2, window=4, seq_len=8, dtype="float64")


@pytest.mark.parametrize("fields", [
    dict(levels=2, rule="delta"),
    dict(levels=3, rule="titans", composition="MAL"),
    dict(levels=2, rule="hebbian", periods=(1, 3)),     # 8 tokens: phases 0, 2, 1 repeat
    dict(levels=0),
    dict(TEXT_MODEL, levels=2, d_model=16),
], ids=["delta", "titans-mal", "hebbian-period-3", "swa-only", "text-model"])
def test_compiled_step_equals_the_eager_step(fields):
    cfg = ModelConfig(**{**SMALL, **fields})
    params = model.init_params(cfg, seed=1)
    steps = {c: TrainStep(cfg, compiled=c) for c in (False, True)}
    states = {c: model.init_state(cfg, batch=3) for c in steps}
    grads = {c: make_zero(params) for c in steps}
    rng = np.random.default_rng(0)
    for n in range(5):
        tokens = rng.integers(0, cfg.vocab, size=(3, cfg.seq_len + 1))
        out = {}
        for c, step in steps.items():
            make_zero_(grads[c])
            out[c] = step(params, grads[c], tokens.copy(), states[c])
            states[c] = out[c][2]
        (ce_e, obj_e, new_e), (ce_c, obj_c, new_c) = out[False], out[True]
        assert np.isclose(ce_c, ce_e, rtol=1e-12, atol=1e-14), n
        assert np.isclose(obj_c, obj_e, rtol=1e-12, atol=1e-14), n
        assert new_c.pos == new_e.pos == (n + 1) * cfg.seq_len
        for a, b in zip(flatten(grads[True])[0], flatten(grads[False])[0]):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)
        state_c, state_e = flatten(new_c.blocks)[0], flatten(new_e.blocks)[0]
        assert len(state_c) == len(state_e)
        for a, b in zip(state_c, state_e):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    stats = steps[True].stats
    # One program per phase of the stream within the level periods, no eager call.
    assert stats.eager_calls == 0 and stats.guard_failures == 0, stats
    phases = {n * cfg.seq_len % steps[True].cycle for n in range(5)}
    assert stats.traces == len(phases) and stats.hits == 5 - len(phases), stats


def test_the_step_moves_with_the_parameters():
    """A replay reads the parameters of this call: after an update the gradient changes as
    the eager one does."""
    cfg = ModelConfig(**SMALL)
    params = model.init_params(cfg, seed=2)
    step, eager = TrainStep(cfg, compiled=True), TrainStep(cfg, compiled=False)
    tokens = np.random.default_rng(1).integers(0, cfg.vocab, size=(2, cfg.seq_len + 1))
    state = model.init_state(cfg, batch=2)
    for _ in range(3):
        g, h = make_zero(params), make_zero(params)
        ce, _, _ = step(params, g, tokens, state)
        ce_eager, _, _ = eager(params, h, tokens, state)
        assert np.isclose(ce, ce_eager, rtol=1e-12)
        np.testing.assert_allclose(g.embed, h.embed, rtol=1e-10, atol=1e-13)
        params.embed -= 0.5 * g.embed          # in place: the same arrays, new values
        params.unembed = params.unembed * 0.9  # rebound: a new array
    assert step.stats.eager_calls == 0


def test_hecate_train_compiled_and_eager_give_the_same_run(tmp_path, monkeypatch):
    """`hecate train` (compiled step) and `hecate train --no-compile` (eager): the same losses,
    objectives, gradient norms and validation losses, through the optimizer and the carried
    memory, and the CLI flag reaches `train`."""
    from models import train as train_module
    from models.cli import main
    from models.train import TrainConfig, train
    corpus = b"def f(x):\n    return x + 1\n\nclass A:\n    pass\n" * 40
    cfg = ModelConfig(d_model=8, layers=1, window=4, seq_len=8, levels=2, dtype="float64")
    tcfg = TrainConfig(steps=6, batch_size=2, lr=1e-2, warmup=2, eval_every=3, eval_batches=1,
                       final_eval_batches=2, ckpt_every=6, sample_bytes=0)
    runs = [train(cfg, tcfg, tmp_path / str(c), progress=False, out=None, corpus=corpus,
                  compile_step=c) for c in (True, False)]
    np.testing.assert_allclose(runs[0].losses, runs[1].losses, rtol=1e-12)
    assert np.isclose(runs[0].val_loss, runs[1].val_loss, rtol=1e-12)
    data = tmp_path / "corpus.txt"
    data.write_bytes(corpus)
    flags = ["train", "--data", str(data), "--steps", "2", "--batch-size", "2", "--d-model", "8",
             "--layers", "1", "--window", "4", "--seq-len", "8", "--no-progress"]
    seen = []
    monkeypatch.setattr(train_module, "train", lambda *a, **k: (
        seen.append(k["compile_step"]), train(*a, **k))[1])
    assert main(flags + ["--run-dir", str(tmp_path / "cli"), "--no-compile"]) == 0
    assert main(flags + ["--run-dir", str(tmp_path / "cli2")]) == 0
    assert seen == [False, True]
