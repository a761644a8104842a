"""Evidence that the NL model learns, beyond the default `hecate train` run.

    python benchmarks/train_evidence.py recall --steps 300   # memory model vs SWA alone
    python benchmarks/train_evidence.py stream --run DIR     # gates and memory norms, 10k tokens

``recall`` trains the same configuration twice on `--task recall`: once as is, once as SWA alone
(the CMS branch replaced by zeros, so the MAG gate is a constant 1/2 that the output projection
absorbs: exactly a sliding-window transformer with the same window), and prints the accuracy at
the answer positions. ``stream`` runs a trained model (or a fresh one) over a 10,000-token
stream of the default corpus chunk by chunk and reports, per level, the range of the retention
gate alpha, the share of saturated gates (alpha < 0.01 or > 0.99) and the largest memory
Frobenius norm seen.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from models import model  # noqa: E402
from models.config import ModelConfig  # noqa: E402
from models.data import stdlib_corpus  # noqa: E402
from models.layers import level_inputs  # noqa: E402
from models.train import TrainConfig, load_run, train  # noqa: E402
from ops import rms_norm  # noqa: E402
from tape import primal  # noqa: E402


def recall(args) -> None:
    cfg = ModelConfig(d_model=args.d_model, layers=2, window=args.window, seq_len=args.seq_len,
                      levels=1, composition=args.composition)
    tcfg = TrainConfig(steps=args.steps, batch_size=16, lr=args.lr, warmup=20, task="recall",
                       pairs=args.pairs, eval_every=max(args.steps // 4, 1), eval_batches=4,
                       final_eval_batches=8, ckpt_every=10**9, sample_bytes=0)
    real_cms = model.cms_forward

    def no_memory(levels, x, states, periods, pos, rule):
        return x * 0.0, states
    results = {}
    runs = [(f"memory ({args.composition}, delta)", real_cms), ("SWA alone", no_memory)]
    for name, cms in runs[:1] if args.memory_only else runs:
        model.cms_forward = cms
        try:
            r = train(cfg, tcfg, tempfile.mkdtemp(), progress=False, out=None)
        finally:
            model.cms_forward = real_cms
        results[name] = r
        print(f"{name:22s} accuracy {r.accuracy:.3f}  val loss {r.val_loss:.3f}  "
              f"({r.seconds:.0f} s)", flush=True)
    print(f"chance 1/64 = {1 / 64:.3f}; window {cfg.window}, layers {cfg.layers}, "
          f"least key-query distance {args.seq_len + 2 - 4 * args.pairs}")


def stream(args) -> None:
    if args.run:
        cfg, _, params, _, _ = load_run(args.run)
    else:
        cfg = ModelConfig()
        params = model.init_params(cfg, 0)
    tokens = np.frombuffer(stdlib_corpus(), np.uint8).astype(np.int64)[:args.tokens + 1]
    state = model.init_state(cfg, 1)
    lo = np.full((cfg.layers, cfg.levels), np.inf)
    hi = np.full((cfg.layers, cfg.levels), -np.inf)
    sat = np.zeros((cfg.layers, cfg.levels))
    norm = np.zeros((cfg.layers, cfg.levels))
    n = 0
    for start in range(0, args.tokens - cfg.seq_len + 1, cfg.seq_len):
        chunk = tokens[None, start:start + cfg.seq_len + 1]
        # The gates of each block's levels, from that block's input (as the model computes it)
        x = params.embed[chunk[:, :-1]]
        for b, block in enumerate(params.blocks):
            h = rms_norm(x, block.norm)
            for i, lv in enumerate(block.memory):
                alpha = np.asarray(primal(level_inputs(lv, h)[3]))
                lo[b, i], hi[b, i] = min(lo[b, i], alpha.min()), max(hi[b, i], alpha.max())
                sat[b, i] += ((alpha < 0.01) | (alpha > 0.99)).sum()
            x, _ = model._block(block, x, state.blocks[b], state.pos, cfg)
            x = primal(x)
        _, state = model.loss(params, chunk, state, cfg)
        for b in range(cfg.layers):
            for i in range(cfg.levels):
                norm[b, i] = max(norm[b, i], float(np.linalg.norm(state.blocks[b][i].m)))
        n += cfg.seq_len
    print(f"{n} tokens, {'run ' + args.run if args.run else 'fresh parameters'}")
    for b in range(cfg.layers):
        for i in range(cfg.levels):
            print(f"block {b} level {i} (period {cfg.level_periods[i]}): alpha in "
                  f"[{lo[b, i]:.4f}, {hi[b, i]:.4f}], saturated {sat[b, i] / n:.1%}, "
                  f"max |M|_F {norm[b, i]:.3f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("recall")
    r.add_argument("--steps", type=int, default=300)
    r.add_argument("--d-model", type=int, default=64)
    r.add_argument("--window", type=int, default=16)
    r.add_argument("--seq-len", type=int, default=64)
    r.add_argument("--pairs", type=int, default=4)
    r.add_argument("--lr", type=float, default=3e-3)
    r.add_argument("--composition", default="MAG", choices=("MAG", "MAL"))
    r.add_argument("--memory-only", action="store_true", help="skip the SWA-alone run")
    s = sub.add_parser("stream")
    s.add_argument("--run")
    s.add_argument("--tokens", type=int, default=10_000)
    args = ap.parse_args(argv)
    (recall if args.cmd == "recall" else stream)(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
