"""Evidence that the NL model learns, beyond the default `hecate train` run.

    python benchmarks/train_evidence.py recall               # memory model vs SWA alone, 5 seeds
    python benchmarks/train_evidence.py stream --run DIR     # gates and memory norms, 10k tokens

``recall`` trains the `hecate train --task recall` configuration (`models.train.RECALL_MODEL`,
`RECALL_TRAIN`) with its memory and with ``levels=0`` (no memory branch: a sliding-window
transformer with the same window, sizes, steps and seed), for each of several seeds (a
recall solution appears suddenly, or not at all, so one seed proves little), and prints a
table of the accuracy at the answer positions. ``stream`` runs a trained model (or a
fresh one) over a 10,000-token stream of the default corpus chunk by chunk and reports, per
level, the range of the retention gate alpha and the inner learning rate theta, the share of
saturated gates and the largest memory Frobenius norm seen. A gate counts as saturated when its
pre-activation has |z| > 6: then sigmoid'(z) < 0.0025 (alpha outside [0.0025, 0.9975]), 1/100
of its slope at z = 0, so it barely learns; DESIGN §5's own slowest retention bias (5.0) sits
inside that bound.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from models import model  # noqa: E402
from models.config import ModelConfig  # noqa: E402
from models.data import stdlib_corpus  # noqa: E402
from models.layers import _projections  # noqa: E402
from models.train import RECALL_MODEL, RECALL_TRAIN, TrainConfig, load_run, train  # noqa: E402
from ops import rms_norm  # noqa: E402
from tape import primal  # noqa: E402

SATURATED = 6.0   # |pre-activation| beyond which a gate counts as saturated (see above)


def recall(args) -> None:
    base = {**ModelConfig().to_dict(), **RECALL_MODEL}
    if args.composition:
        base["composition"] = args.composition
    for item in args.set:
        key, value = item.split("=", 1)
        base[key] = json.loads(value)
    runs = [(f"memory ({base['composition']}, {base['rule']}, key shift)", base),
            ("SWA alone (levels 0)", {**base, "levels": 0})]
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = []
    for name, d in runs[:1] if args.memory_only else runs:
        results = []
        for seed in seeds:
            tcfg = TrainConfig(**{**TrainConfig().to_dict(), **RECALL_TRAIN, "task": "recall",
                                  "steps": args.steps, "seed": seed, "ckpt_every": 10**9,
                                  "sample_bytes": 0})
            r = train(ModelConfig.from_dict(d), tcfg, tempfile.mkdtemp(), progress=False,
                      out=None)
            results.append(r)
            print(f"{name:34s} seed {seed}: accuracy {r.accuracy:.3f}  val loss "
                  f"{r.val_loss:.3f}  ({r.seconds:.0f} s)", flush=True)
        rows.append((name, results))
    cfg = ModelConfig.from_dict(base)
    least = cfg.seq_len + 2 - 4 * tcfg.pairs
    print(f"\n| model | recall accuracy per seed ({args.seeds}) | seeds above 0.9 | "
          f"train time per seed |\n|---|---|---|---|")
    for name, results in rows:
        accs = ", ".join(f"{r.accuracy:.3f}" for r in results)
        solved = sum(r.accuracy > 0.9 for r in results)
        secs = sum(r.seconds for r in results) / len(results)
        print(f"| {name} | {accs} | {solved} / {len(results)} | {secs:.0f} s |")
    print(f"| chance (1/64) | {1 / 64:.3f} | | |")
    print(f"\nwindow {cfg.window}, layers {cfg.layers}, d_model {cfg.d_model}, {tcfg.pairs} pairs, "
          f"seq_len {cfg.seq_len}, least key-query distance {least}, {tcfg.steps} steps, "
          f"batch {tcfg.batch_size}, lr {tcfg.lr}")


def stream(args) -> None:
    if args.run:
        cfg, _, params, _, _ = load_run(args.run)
    else:
        cfg = ModelConfig()
        params = model.init_params(cfg, 0)
    if cfg.levels == 0:
        print("levels=0: no memory branch, no gates")
        return
    tokens = np.frombuffer(stdlib_corpus(), np.uint8).astype(np.int64)[:args.tokens + 1]
    state = model.init_state(cfg, 1)
    shape = (cfg.layers, cfg.levels)
    a_lo, a_hi = np.full(shape, np.inf), np.full(shape, -np.inf)
    t_lo, t_hi = np.full(shape, np.inf), np.full(shape, -np.inf)
    sat_a, sat_t = np.zeros(shape), np.zeros(shape)
    norm = np.zeros((2,) + shape)      # the largest |M|_F in the first / second half
    n = 0
    for start in range(0, args.tokens - cfg.seq_len + 1, cfg.seq_len):
        chunk = tokens[None, start:start + cfg.seq_len + 1]
        # The gates of each block's levels, from that block's input (as the model computes it)
        x = params.embed[chunk[:, :-1]]
        for b, block in enumerate(params.blocks):
            h = rms_norm(x, block.norm)
            for i, lv in enumerate(block.memory):
                za, zt = (np.asarray(primal(z)) for z in
                          _projections(lv, h, cfg.key_shift, cfg.heads)[3:5])
                alpha = 1 / (1 + np.exp(-za))
                theta = 1 / (1 + np.exp(-zt)) if cfg.bounded_theta else np.logaddexp(0, zt)
                a_lo[b, i], a_hi[b, i] = min(a_lo[b, i], alpha.min()), max(a_hi[b, i], alpha.max())
                t_lo[b, i], t_hi[b, i] = min(t_lo[b, i], theta.min()), max(t_hi[b, i], theta.max())
                sat_a[b, i] += (np.abs(za) > SATURATED).sum()
                sat_t[b, i] += (zt < -SATURATED).sum()   # softplus saturates only downwards
            x = model._block(block, x, state.blocks[b], state.pos, cfg)[0]
            x = primal(x)
        _, state = model.loss(params, chunk, state, cfg)
        for b in range(cfg.layers):
            for i in range(cfg.levels):
                half = int(2 * start >= args.tokens)
                norm[half, b, i] = max(norm[half, b, i],
                                       float(np.linalg.norm(state.blocks[b][i].m)))
        n += cfg.seq_len
    print(f"{n} tokens, {'run ' + args.run if args.run else 'fresh parameters'}; saturated: "
          f"|pre-activation| > {SATURATED:g}")
    print("| block | level (period) | alpha range | alpha saturated | theta range | "
          "theta saturated | max \\|M\\|_F, first / second half |\n|---|---|---|---|---|---|---|")
    for b in range(cfg.layers):
        for i in range(cfg.levels):
            print(f"| {b} | {i} ({cfg.level_periods[i]}) | [{a_lo[b, i]:.4f}, {a_hi[b, i]:.4f}] "
                  f"| {sat_a[b, i] / n:.1%} | [{t_lo[b, i]:.2g}, {t_hi[b, i]:.2g}] "
                  f"| {sat_t[b, i] / n:.1%} | {norm[0, b, i]:.2f} / {norm[1, b, i]:.2f} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("recall")
    r.add_argument("--steps", type=int, default=RECALL_TRAIN["steps"])
    r.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated training seeds")
    r.add_argument("--composition", choices=("MAG", "MAL"),
                   help=f"default {RECALL_MODEL['composition']} (the recall default)")
    r.add_argument("--memory-only", action="store_true", help="skip the SWA-alone run")
    r.add_argument("--set", action="append", default=[], metavar="FIELD=JSON",
                   help="override a ModelConfig field of both runs, e.g. gate_penalty=0")
    s = sub.add_parser("stream")
    s.add_argument("--run")
    s.add_argument("--tokens", type=int, default=10_000)
    args = ap.parse_args(argv)
    (recall if args.cmd == "recall" else stream)(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
