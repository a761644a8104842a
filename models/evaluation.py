"""Evaluating a model and reading a finished run back: the validation loss (`evaluate`, also
run by the training loop), sampled text (`sample_text`), the array module of a device
(`array_module_for`), a run's configs and parameters from its last checkpoint (`load_run`) and
`hecate eval` (`eval_run`). `models.train` imports every name here, so
``from models.train import load_run`` works too.

>>> array_module_for("cpu").__name__
'numpy'
"""
from __future__ import annotations

import codecs
import math
import sys
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np

from tape import primal, tree_map

from . import decode, model
from .checkpoint import to_numpy
from .config import ModelConfig
from .data import RecallTask, TextData, data_mismatch, make_data
from .rundir import RunError, ckpt_path, load_run_config
from .runstate import restore
from .train_config import TrainConfig


def array_module_for(device: str) -> Any:
    """`numpy` for ``cpu``; `cupy` for ``gpu`` when `kernels.detect_gpu` finds one, else a
    `RunError` that says what the detection found."""
    if device == "cpu":
        return np
    if device != "gpu":
        raise RunError(f"--device must be 'cpu' or 'gpu'; got {device!r}")
    from kernels.dispatch import cupy_module, detect_gpu
    cp = cupy_module()
    if cp is None:
        raise RunError("--device gpu: no GPU available: kernels.detect_gpu() found no CuPy "
                       "install (pip install cupy-cuda12x); use --device cpu")
    info = detect_gpu()
    if info is None:
        raise RunError("--device gpu: no GPU available: kernels.detect_gpu() returned None "
                       "(CuPy is installed but no usable CUDA device or driver was found); "
                       "use --device cpu")
    return cp


def _plain(tree: Any) -> Any:
    return tree_map(lambda x: primal(x), tree)


def evaluate(params: Any, cfg: ModelConfig, data: Any, xp: Any, max_batches: int,
             reset_memory: bool = False) -> dict:
    """Validation loss (nats/token), bits per byte, and for the recall task the accuracy at the
    answer positions. Text streams carry their memory state from chunk to chunk, unless
    `reset_memory` (the ablation `hecate eval` reports: fresh memory at every chunk)."""
    losses, accs = [], []
    state = None
    for chunk in data.val_batches(max_batches):
        tokens = xp.asarray(chunk)
        if state is None or reset_memory or isinstance(data, RecallTask):
            state = model.init_state(cfg, chunk.shape[0], xp)
        if isinstance(data, RecallTask):
            out, _ = model.logits(params, tokens[:, :-1], state, cfg)
            out = to_numpy(primal(out))
            accs.append(RecallTask.accuracy(out, chunk, data.answer_mask()[:chunk.shape[0]]))
            z = out - out.max(axis=-1, keepdims=True)
            logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
            losses.append(float(-np.take_along_axis(logp, chunk[:, 1:, None], -1).mean()))
        else:
            value, state = model.loss(params, tokens, state, cfg)
            losses.append(float(primal(value)))
            state = _plain(state)
    val = float(np.mean(losses)) if losses else float("nan")
    return {"val_loss": val, "bits_per_byte": val / math.log(2),
            "accuracy": float(np.mean(accs)) if accs else None}


def sample_text(params: Any, cfg: ModelConfig, prompt: str, n: int, temperature: float = 0.8,
                seed: int = 0, xp: Any = np) -> str:
    """`prompt` followed by `n` sampled bytes, decoded as UTF-8 (invalid bytes replaced).
    Incremental decoding (`models.decode.generate`): each byte sees the whole history, at a
    cost per byte that does not grow with the length. `params` already live on `xp`."""
    return "".join(streamed_text(params, cfg, prompt, n, temperature, seed, xp))


def streamed_text(params: Any, cfg: ModelConfig, prompt: str, n: int, temperature: float = 0.8,
                  seed: int = 0, xp: Any = np) -> Iterator[str]:
    """`sample_text` in pieces as the bytes are drawn: the prompt first, then the text each
    new byte completes (a UTF-8 character over several bytes comes out once whole)."""
    # surrogateescape: the bytes of a command-line argument that is not UTF-8, as they were
    raw = prompt.encode("utf-8", "surrogateescape") or b"\n"
    prompt_tokens = np.frombuffer(raw, np.uint8).astype(np.int64)
    tokens = decode.sampled_tokens(params, prompt_tokens, cfg, n, temperature=temperature,
                                   seed=seed)
    text = codecs.getincrementaldecoder("utf-8")(errors="replace")
    yield text.decode(raw)
    for token in tokens:
        piece = text.decode(bytes((token,)))
        if piece:
            yield piece
    yield text.decode(b"", final=True)


def load_run(run_dir: str | Path, device: str = "cpu") -> tuple:
    """``(cfg, tcfg, params, header, xp)`` from a run directory's last checkpoint."""
    saved = load_run_config(run_dir)
    try:
        cfg = ModelConfig.from_dict(saved["model"])
        tcfg = TrainConfig.from_dict(saved["train"])
    except (TypeError, ValueError, KeyError) as e:
        raise RunError(f"{Path(run_dir) / 'config.json'} holds values that do not describe a "
                       f"run ({e}); delete it to rebuild it from the last checkpoint") from None
    xp = array_module_for(device)
    params, _, _, header = restore(ckpt_path(Path(run_dir)), cfg, tcfg, xp)
    return cfg, tcfg, params, header, xp


def eval_run(run_dir: str | Path, device: str = "cpu", batches: Optional[int] = None,
             corpus: Optional[bytes] = None) -> dict:
    """`hecate eval`: validation loss and bits per byte of a run's last checkpoint (on the
    data as it is now; a note says when it differs from what the run trained on). For a text
    model with memory levels, ``val_loss_memory_reset`` is the same loss with the memory reset
    at every chunk: the difference is what the memory carries from one chunk to the next."""
    cfg, tcfg, params, header, xp = load_run(run_dir, device)
    if corpus is not None and tcfg.task == "text":
        data = TextData(corpus, tcfg.batch_size, cfg.seq_len, tcfg.seed)
    else:
        data = make_data(tcfg.task, tcfg.batch_size, cfg.seq_len, tcfg.seed, tcfg.data,
                         pairs=tcfg.pairs)
    mismatch = data_mismatch(header.get("data") or {}, data.describe())
    if mismatch:
        print(f"hecate eval: note: {mismatch}", file=sys.stderr)
    batches = batches or tcfg.final_eval_batches
    ev = evaluate(params, cfg, data, xp, batches)
    ev["step"] = header["step"]
    if cfg.levels > 0 and tcfg.task == "text":   # what the memory carries across chunks
        reset = evaluate(params, cfg, data, xp, batches, reset_memory=True)
        ev["val_loss_memory_reset"] = reset["val_loss"]
    return ev
