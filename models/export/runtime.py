"""Running an exported step with ONNX Runtime (Python): one token at a time, greedy decoding
the way `hecate sample --temperature 0` does it, and the loss of a byte stream.

>>> import tempfile, pathlib
>>> from models.config import ModelConfig
>>> from models.model import init_params
>>> from models.export.step import build_step_model, fresh_state
>>> cfg = ModelConfig(d_model=8, layers=1, levels=1, window=4, seq_len=8)
>>> model = build_step_model(init_params(cfg, seed=0), cfg)
>>> dec = OnnxDecoder(model.SerializeToString(), fresh_state(cfg))
>>> dec.step(ord("a")).shape, int(dec.state["state_in_pos"][0])
((256,), 1)
>>> len(dec.generate(b"ab", 5))
5
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from .step import STATE_IN, STATE_OUT


def state_path(model_path: str | Path) -> Path:
    """Where the fresh state of `model_path` lives: ``<model>.state.npz``."""
    return Path(str(model_path) + ".state.npz")


def save_state(path: str | Path, state: dict) -> None:
    """Write a state (arrays keyed by input name) as a deflated ``.npz``: the fresh state is
    mostly zeros, so it shrinks to a few KiB for the page to download."""
    with open(path, "wb") as f:        # a file object: np.savez would append ".npz" to a name
        np.savez_compressed(f, **state)


def load_state(path: str | Path) -> dict:
    """The arrays of a ``.state.npz``, keyed by input name."""
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


class OnnxDecoder:
    """A step model (a path or serialized bytes) in an `onnxruntime.InferenceSession` on one
    CPU thread, with its state. `step` feeds one token and returns its float32 logits."""

    def __init__(self, model: str | Path | bytes, fresh: dict | None = None) -> None:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = opts.inter_op_num_threads = 1
        source = model if isinstance(model, bytes) else str(model)
        self.session = ort.InferenceSession(source, opts, providers=["CPUExecutionProvider"])
        if fresh is None:
            if isinstance(model, bytes):
                raise ValueError("OnnxDecoder: pass the fresh state for a model given as bytes")
            fresh = load_state(state_path(model))
        names = [i.name for i in self.session.get_inputs() if i.name != "token"]
        missing = sorted(set(names) - set(fresh))
        if missing:
            raise ValueError(f"OnnxDecoder: the fresh state lacks the model's inputs {missing}")
        self.fresh = {n: np.array(fresh[n]) for n in names}
        self.outputs = ["logits"] + [STATE_OUT + n[len(STATE_IN):] for n in names]
        self.vocab = self.session.get_outputs()[0].shape[-1]   # the logits' width
        self.reset()

    def reset(self) -> None:
        """Back to the fresh state (position 0)."""
        self.state = {k: v.copy() for k, v in self.fresh.items()}

    def step(self, token: int) -> np.ndarray:
        """Feed `token`; returns the next-token logits ``[vocab]`` (float32)."""
        self._check_token(token, "step: token")
        feeds = dict(self.state, token=np.array([token], dtype=np.int64))
        logits, *states = self.session.run(self.outputs, feeds)
        self.state = {STATE_IN + n[len(STATE_OUT):]: v
                      for n, v in zip(self.outputs[1:], states)}
        return logits[0]

    def _check_token(self, token: int, who: str) -> None:
        # ONNX's Gather reads a negative id as one counted from the end of the table: a silent
        # wrong row, where the NumPy model refuses it (models.model.check_token_range).
        if isinstance(self.vocab, int) and not 0 <= token < self.vocab:
            raise ValueError(f"{who} must lie in [0, {self.vocab}); got {token}")

    def generate(self, prompt: bytes, n: int) -> bytes:
        """The `n` bytes greedy decoding appends to `prompt` (fed byte by byte from the fresh
        state; an empty prompt is a newline, as in `models.train.sample_text`)."""
        self.reset()
        logits = None
        for b in prompt or b"\n":
            logits = self.step(b)
        out = []
        for i in range(n):
            out.append(int(np.argmax(logits)))
            if i + 1 < n:
                logits = self.step(out[-1])
        return bytes(out)

    def stream_loss(self, tokens: Any) -> float:
        """Mean cross-entropy (nats/token) of predicting ``tokens[1:]`` from the fresh state,
        one token at a time (float64 log-softmax of the float32 logits)."""
        self.reset()
        tokens = [int(t) for t in np.asarray(tokens).reshape(-1)]
        if len(tokens) < 2:
            raise ValueError("stream_loss: need at least 2 tokens")
        for t in tokens:
            self._check_token(t, "stream_loss: tokens")
        total = 0.0
        for t, nxt in zip(tokens[:-1], tokens[1:]):
            z = self.step(t).astype(np.float64)
            top = z.max()
            total += top + math.log(np.exp(z - top).sum()) - z[nxt]
        return total / (len(tokens) - 1)
