"""`hecate eval`'s memory ablation: the validation loss with the memory reset at every chunk,
next to the loss with the memory carried from chunk to chunk."""
import numpy as np

from models import model as model_mod
from models.cli import main
from models.config import ModelConfig
from models.train import TrainConfig, eval_run, load_run, train
from models.data import TextData
from tape import primal

CORPUS = bytes(range(32, 127)) * 30 + b"def f(x):\n    return x + 1\n" * 60
CFG = ModelConfig(d_model=8, layers=1, window=4, seq_len=8, levels=2)
TCFG = TrainConfig(steps=4, batch_size=2, lr=1e-2, warmup=1, eval_every=4, eval_batches=1,
                   final_eval_batches=3, ckpt_every=4, sample_bytes=0)


def _chunk_losses(params, cfg, data, carry: bool) -> float:
    """The mean validation loss, chunk by chunk, written out independently of `evaluate`."""
    losses, state = [], None
    for chunk in data.val_batches(3):
        if state is None or not carry:
            state = model_mod.init_state(cfg, chunk.shape[0], np)
        value, state = model_mod.loss(params, chunk, state, cfg)
        losses.append(float(primal(value)))
    return float(np.mean(losses))


def test_reset_ablation_equals_fresh_memory_at_every_chunk(tmp_path, capsys):
    run = tmp_path / "run"
    train(CFG, TCFG, run, progress=False, out=None, corpus=CORPUS)
    ev = eval_run(run, corpus=CORPUS)
    cfg, tcfg, params, _, _ = load_run(run)
    data = TextData(CORPUS, tcfg.batch_size, cfg.seq_len, tcfg.seed)
    np.testing.assert_allclose(ev["val_loss_memory_reset"],
                               _chunk_losses(params, cfg, data, carry=False), rtol=1e-6)
    np.testing.assert_allclose(ev["val_loss"], _chunk_losses(params, cfg, data, carry=True),
                               rtol=1e-6)
    assert ev["val_loss_memory_reset"] != ev["val_loss"]   # the memory does carry something
    assert main(["eval", "--run", str(run)]) == 0
    assert "with the memory reset at every chunk" in capsys.readouterr().out


def test_no_ablation_without_memory(tmp_path, capsys):
    run = tmp_path / "run"
    train(ModelConfig(d_model=8, layers=1, window=4, seq_len=8, levels=0), TCFG, run,
          progress=False, out=None, corpus=CORPUS)
    assert "val_loss_memory_reset" not in eval_run(run, corpus=CORPUS)
