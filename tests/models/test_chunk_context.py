"""benchmarks/chunk_context.py: its by-position losses add up to `hecate eval`'s numbers."""
import math

import numpy as np

from benchmarks import chunk_context
from models.config import ModelConfig
from models.train import TrainConfig, evaluate, load_run, train
from models.data import make_data


def test_token_losses_match_a_direct_log_softmax():
    rng = np.random.default_rng(0)
    logits, targets = rng.standard_normal((2, 3, 5)) * 4, rng.integers(0, 5, (2, 3))
    got = chunk_context.token_losses(logits, targets)
    for b in range(2):
        for t in range(3):
            row = logits[b, t]
            want = math.log(sum(math.exp(v) for v in row)) - row[targets[b, t]]
            assert abs(got[b, t] - want) < 1e-12


def test_band_costs_average_the_differences_per_position_band():
    restarted = np.arange(8.0).reshape(1, 8) * np.ones((3, 1, 1))
    costs = chunk_context.band_costs(restarted, np.zeros_like(restarted), ((0, 1), (1, 4), (4, 8)))
    assert costs == {"0": 0.0, "1-3": 2.0, "4-7": 5.5}


def test_positions_average_to_the_evaluation_with_and_without_reset(tmp_path):
    cfg = ModelConfig(d_model=8, layers=1, window=4, seq_len=8, levels=2)
    tcfg = TrainConfig(steps=2, batch_size=2, eval_every=2, eval_batches=1,
                       final_eval_batches=3, sample_bytes=0)
    train(cfg, tcfg, tmp_path, progress=False, out=None)
    losses = chunk_context.hecate_positions(str(tmp_path))
    assert losses["carried"].shape == (3, 2, 8)
    _, _, params, _, _ = load_run(tmp_path)
    for mode, reset in (("carried", False), ("reset", True)):
        data = make_data("text", 2, 8, 0)
        want = evaluate(params, cfg, data, np, 3, reset_memory=reset)["val_loss"]
        assert abs(losses[mode].mean() - want) < 1e-5
    # the first chunk starts from fresh memory either way; a later one carries something
    assert np.array_equal(losses["carried"][0], losses["reset"][0])
    assert not np.array_equal(losses["carried"][1:], losses["reset"][1:])
