"""How much the text before a chunk matters: the ceiling of `hecate eval`'s memory-reset cost.

    python benchmarks/chunk_context.py --run runs/DIR        # a trained run, by position
    python benchmarks/chunk_context.py --peers               # PyTorch peers, ~3 min
    python benchmarks/chunk_context.py --peers --contexts 128,512,1024
    python benchmarks/chunk_context.py --peers --steps 20    # a smoke run, not a result

`hecate train` reads each stream in chunks of ``seq_len`` (128) bytes; attention restarts at
every chunk and only the memory state carries across. `hecate eval` reports the validation
loss with that state reset at every chunk. This benchmark says where that cost comes from and
how large it could be on this data at this size:

* ``--run DIR``: the run's validation loss (the chunks `hecate eval` reads) by position within
  the chunk, memory carried along each stream against memory reset at every chunk. The first
  chunk of a stream starts from fresh memory either way and is left out of the by-position
  rows.
* ``--peers``: the same question for the PyTorch peers of `hecate bench peers`
  (`models.bench.lm_peers`: same corpus, split, schedule and tokens per step), trained here:
  the transformer with a context of 128 tokens and of 512 (``--contexts``; the batch keeps
  the tokens per step: 8 x 128, 2 x 512), each
  128-token validation chunk scored with the tokens before it in the context (up to the
  model's context) and without them; and the 1-layer GRU that carries its state, scored
  carried and reset. "Cost" is restarted minus with-context: what any state carried across
  128-token chunks could earn for a model of this size and budget.

torch and NumPy's BLAS run on one thread; one model trains at a time.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any, Iterable

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from models import model  # noqa: E402
from models.data import make_data  # noqa: E402
from tape import primal, tree_map  # noqa: E402

CHUNK = 128
BANDS = ((0, 1), (1, 4), (4, 16), (16, 32), (32, 64), (64, 128))


def token_losses(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Per-token cross-entropy ``[B, T]`` of `logits` ``[B, T, V]`` against `targets` ``[B, T]``.

    >>> float(token_losses(np.zeros((1, 1, 4)), np.array([[2]]))[0, 0]) == float(np.log(4))
    True
    """
    z = logits - logits.max(axis=-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return -np.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]


def band_costs(restarted: np.ndarray, carried: np.ndarray,
               bands: Iterable[tuple] = BANDS) -> dict:
    """Mean of ``restarted - carried`` (``[..., T]``) over each band of positions that fits T.

    >>> band_costs(np.ones((2, 4)), np.zeros((2, 4)), ((0, 1), (1, 4), (4, 8)))
    {'0': 1.0, '1-3': 1.0}
    """
    diff = (restarted - carried).reshape(-1, restarted.shape[-1]).mean(axis=0)
    return {(f"{lo}" if hi == lo + 1 else f"{lo}-{hi - 1}"): float(diff[lo:hi].mean())
            for lo, hi in bands if hi <= diff.shape[0]}


def hecate_positions(run_dir: str) -> dict:
    """A run's validation losses ``[chunks, B, seq_len]``, memory carried and reset."""
    from models.train import load_run

    cfg, tcfg, params, _, xp = load_run(run_dir)
    data = make_data("text", tcfg.batch_size, cfg.seq_len, tcfg.seed, tcfg.data)
    out = {}
    for mode in ("carried", "reset"):
        state, losses = None, []
        for chunk in data.val_batches(tcfg.final_eval_batches):
            if state is None or mode == "reset":
                state = model.init_state(cfg, chunk.shape[0], xp)
            logits, state = model.logits(params, xp.asarray(chunk[:, :-1]), state, cfg)
            state = tree_map(primal, state)
            losses.append(token_losses(np.asarray(primal(logits), np.float64), chunk[:, 1:]))
        out[mode] = np.stack(losses)
    return out


def validation_streams(batches: int = 16) -> np.ndarray:
    """`hecate train`'s final evaluation tokens (batch 8 x 128, 16 chunks) as 8 contiguous
    streams ``[8, 16 * 128 + 1]``."""
    chunks = list(make_data("text", 8, CHUNK, 0).val_batches(batches))
    return np.concatenate([c[:, :-1] for c in chunks] + [chunks[-1][:, -1:]], axis=1)


def transformer_costs(net: Any, streams: np.ndarray, context: int) -> tuple:
    """Per-token losses ``[chunks, B, 128]`` of every 128-token chunk of `streams`, scored with
    up to ``context - 128`` preceding tokens in the window, and restarted at the chunk."""
    import torch
    from torch.nn import functional as F

    def losses(tokens: np.ndarray) -> np.ndarray:
        t = torch.from_numpy(tokens)
        with torch.no_grad():
            x = net.embed(t[:, :-1])
            for block in net.blocks:
                x = block(x, net.cos, net.sin)
            logits = net.unembed(net.final_norm(x))
            return F.cross_entropy(logits.transpose(1, 2), t[:, 1:], reduction="none").numpy()

    full, fresh = [], []
    for end in range(CHUNK, streams.shape[1], CHUNK):
        fresh.append(losses(streams[:, end - CHUNK:end + 1]))
        full.append(losses(streams[:, max(0, end - context):end + 1])[:, -CHUNK:])
    return np.stack(full), np.stack(fresh)


def gru_costs(net: Any, streams: np.ndarray) -> tuple:
    """Per-token losses ``[chunks, B, 128]`` of the GRU, state carried and reset per chunk."""
    import torch
    from torch.nn import functional as F

    out = {}
    for reset in (False, True):
        state, rows = None, []
        with torch.no_grad():
            for end in range(CHUNK, streams.shape[1], CHUNK):
                t = torch.from_numpy(streams[:, end - CHUNK:end + 1])
                h, last = net.gru(net.embed(t[:, :-1]), None if reset else state)
                state = last
                logits = net.head(h)
                rows.append(F.cross_entropy(logits.transpose(1, 2), t[:, 1:],
                                            reduction="none").numpy())
        out[reset] = np.stack(rows)
    return out[False], out[True]


def peers(steps: int, contexts: tuple = (CHUNK, 4 * CHUNK)) -> list:
    """Train the transformer at each of `contexts` (multiples of 128 that divide 1024) and the
    carried GRU; one row each."""
    import torch

    from models.bench import lm_peers

    torch.set_num_threads(1)
    cfg, tcfg = lm_peers.configs(steps)
    tcfg = dataclasses.replace(tcfg, eval_every=10 ** 9, final_eval_batches=1)
    streams = validation_streams()
    rows = []
    for context in contexts:
        c = dataclasses.replace(cfg, seq_len=context)
        t = dataclasses.replace(tcfg, batch_size=tcfg.batch_size * CHUNK // context)
        net = lm_peers.build_peer("transformer", c, t.seed)
        row = lm_peers.train_peer("transformer", c, t, net=net)
        full, fresh = transformer_costs(net, streams, context)
        rows.append(_row(f"transformer, context {context} (batch {t.batch_size})", row,
                         full, fresh))
    net = lm_peers.build_peer("gru1-carry", cfg, tcfg.seed)
    row = lm_peers.train_peer("gru1-carry", cfg, tcfg, net=net)
    rows.append(_row("gru1-carry", row, *gru_costs(net, streams)))
    return rows


def _row(name: str, trained: dict, carried: np.ndarray, restarted: np.ndarray) -> dict:
    return {"model": name, "steps": trained.get("steps"), "train_s": trained.get("train_s"),
            "with_context": float(carried.mean()), "restarted": float(restarted.mean()),
            "cost": float(restarted.mean() - carried.mean()),
            "by_position": band_costs(restarted[1:], carried[1:])}


def table(rows: list) -> str:
    """The rows as a Markdown table."""
    bands = [k for k in rows[0]["by_position"]]
    lines = ["| model | steps | train s | with context | restarted | cost | "
             + " | ".join(f"cost at {b}" for b in bands) + " |",
             "|---|---:|---:|---:|---:|---:|" + "---:|" * len(bands)]
    for r in rows:
        train_s = "" if r["train_s"] is None else f"{r['train_s']:.1f}"
        lines.append(f"| {r['model']} | {r['steps'] or ''} | {train_s} | "
                     f"{r['with_context']:.4f} | {r['restarted']:.4f} | {r['cost']:+.4f} | "
                     + " | ".join(f"{r['by_position'][b]:+.3f}" for b in bands) + " |")
    return "\n".join(lines)


def main(argv: list | None = None) -> int:
    """Entry point; see the module docstring."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", action="append", default=[], metavar="DIR",
                   help="a `hecate train` run directory (repeatable)")
    p.add_argument("--peers", action="store_true", help="train and score the PyTorch peers")
    p.add_argument("--steps", type=int, default=800, help="peer training steps (default 800)")
    p.add_argument("--contexts", default="128,512", metavar="LIST",
                   help="transformer contexts, multiples of 128 dividing 1024 (default 128,512)")
    p.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    args = p.parse_args(argv)
    if not args.run and not args.peers:
        p.error("give --run DIR and/or --peers")
    if args.steps < 1:
        p.error(f"--steps must be a positive integer; got {args.steps}")
    try:
        contexts = tuple(int(c) for c in args.contexts.split(","))
    except ValueError:
        contexts = ()
    if not contexts or any(c < CHUNK or c % CHUNK or 1024 % c for c in contexts):
        p.error(f"--contexts must be a comma-separated list of 128, 256, 512 or 1024; "
                f"got {args.contexts!r}")
    rows = []
    for run_dir in args.run:
        losses = hecate_positions(run_dir)
        rows.append(_row(f"hecate {run_dir}", {}, losses["carried"], losses["reset"]))
    if args.peers:
        from models.bench.lm_peers import TORCH_MISSING, torch_available
        if not torch_available():
            p.error(TORCH_MISSING)
        rows += peers(args.steps, contexts)
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
