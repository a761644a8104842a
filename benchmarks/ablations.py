"""The model ablation table: each backbone change's effect on `hecate train`'s validation loss.

    python benchmarks/ablations.py                          # every variant, seed 0, 500 steps
    python benchmarks/ablations.py --variants base,heads4 --seeds 0,1 --json out.json
    python benchmarks/ablations.py --quick                  # a smoke run: tiny model, 3 steps

Every variant trains with `models.train.train` on the default data split, batch and schedule
(`TrainConfig`), one after the other in this process, so their times compare on a shared
machine (report ratios, not seconds). For each run it records the validation loss, the same loss
with the memory reset at every chunk (`hecate eval`'s ablation: what the memory carries across
chunks), the training seconds and tokens/s, and the fraction of saturated sigmoid-gate
pre-activations (|z| > 5: the retention gate, and the momentum gate for Titans) on the
validation chunks at the end of training.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from models import model  # noqa: E402
from models.config import TEXT_MODEL, ModelConfig  # noqa: E402
from models.layers import _projections  # noqa: E402
from models.train import RunError, TrainConfig, eval_run, load_run, train  # noqa: E402
from models.data import make_data  # noqa: E402
from ops import rms_norm  # noqa: E402

# The DESIGN §5 model as it was before the backbone work, then one change at a time, then the
# changes together (with and without the memory levels).
LEGACY = {"heads": 1, "mlp": 0, "rotary": False, "bounded_theta": False}
THETA = {**LEGACY, "bounded_theta": True}
ALL = dict(TEXT_MODEL)
VARIANTS = {
    "base": LEGACY,
    "theta": THETA,
    "heads4": {**THETA, "heads": 4},
    "mlp2": {**THETA, "mlp": 2},
    "rotary": {**THETA, "rotary": True},
    "all": ALL,
    "all-swa": {**ALL, "levels": 0},
    "all-nopenalty": {**ALL, "gate_penalty": 0.0},
    "heads4-softplus": {**LEGACY, "heads": 4},
    "all-penalty0.1": {**ALL, "gate_penalty": 0.1},
    "all-retain": {**ALL, "alpha_bias_shift": 1.5},
    "all-levels3": {**ALL, "levels": 3},
    "all-levels1": {**ALL, "levels": 1},
    "all-d96": {**ALL, "d_model": 96},
}
SATURATED = 5.0


def saturation(params, cfg: ModelConfig, tokens: np.ndarray) -> float:
    """The fraction of sigmoid-gate pre-activations with |z| > 5 over `tokens` ``[B, T]``
    (fresh memory), every level of every block: the retention gate, and Titans' momentum."""
    if cfg.levels == 0:
        return float("nan")
    x = params.embed[tokens]
    state = model.init_state(cfg, tokens.shape[0])
    hits = total = 0
    for block, states in zip(params.blocks, state.blocks):
        h = rms_norm(x, block.norm)
        for level in block.memory:
            _, _, _, za, _, ze = _projections(level, h, cfg.key_shift, cfg.heads)
            for z in (za, ze) if cfg.rule == "titans" else (za,):
                z = np.asarray(z)
                hits, total = hits + int(np.sum(np.abs(z) > SATURATED)), total + z.size
        x, _, _ = model._block(block, x, states, 0, cfg)
    return hits / total


def run_variant(name: str, overrides: dict, seed: int, steps: int, quick: bool) -> dict:
    """Train one variant and measure it (a fresh temporary run directory)."""
    base = ModelConfig().to_dict()
    if quick:
        base.update(d_model=16, layers=1, window=8, seq_len=16)
    cfg = ModelConfig.from_dict({**base, **overrides})
    tcfg = TrainConfig(steps=steps, seed=seed, sample_bytes=0,
                       **({"batch_size": 2, "eval_every": steps, "final_eval_batches": 2,
                           "warmup": 1} if quick else {}))
    run_dir = tempfile.mkdtemp(prefix=f"ablation-{name}-")
    t0 = time.perf_counter()
    try:
        result = train(cfg, tcfg, run_dir, progress=False)
    except RunError as e:       # a diverged run is a row of the table too
        shutil.rmtree(run_dir, ignore_errors=True)
        return {"variant": name, "seed": seed, "steps": steps, "params": 0,
                "val_loss": float("nan"), "val_loss_memory_reset": None,
                "train_seconds": float("nan"), "wall_seconds": time.perf_counter() - t0,
                "tokens_per_s": float("nan"), "saturated": float("nan"), "config": overrides,
                "error": str(e)}
    wall = time.perf_counter() - t0
    ev = eval_run(run_dir)
    cfg, tcfg, params, _, _ = load_run(run_dir)
    data = make_data(tcfg.task, tcfg.batch_size, cfg.seq_len, tcfg.seed, tcfg.data)
    val = np.concatenate(list(data.val_batches(2)), axis=0)[:, :-1]
    n_params = sum(int(np.asarray(a).size) for a in _leaves(params))
    shutil.rmtree(run_dir, ignore_errors=True)
    return {"variant": name, "seed": seed, "steps": steps, "params": n_params,
            "val_loss": ev["val_loss"], "val_loss_memory_reset": ev.get("val_loss_memory_reset"),
            "train_seconds": result.seconds, "wall_seconds": wall,
            "tokens_per_s": steps * tcfg.batch_size * cfg.seq_len / result.seconds,
            "saturated": saturation(params, cfg, val), "config": overrides}


def _leaves(tree):
    from tape.pytree import flatten
    return flatten(tree)[0]


def table(rows: list) -> str:
    """A Markdown table of the runs, tokens/s as a ratio to the first variant of each seed."""
    first = {}
    for r in rows:
        first.setdefault(r["seed"], r["tokens_per_s"])
    lines = ["| variant | seed | params | val loss | reset every chunk | reset cost | "
             "tokens/s ratio | saturated gates |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        reset = r["val_loss_memory_reset"]
        cost = "" if reset is None else f"{reset - r['val_loss']:+.3f}"
        lines.append(f"| {r['variant']} | {r['seed']} | {r['params'] / 1e3:.0f}k | "
                     f"{r['val_loss']:.4f} | {'' if reset is None else f'{reset:.4f}'} | "
                     f"{cost} | {r['tokens_per_s'] / first[r['seed']]:.2f} | "
                     f"{r['saturated']:.3f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help=f"comma-separated, from {list(VARIANTS)}")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--quick", action="store_true", help="tiny model, 3 steps (a smoke run)")
    ap.add_argument("--json", help="write the rows here (appended to, one JSON per line)")
    args = ap.parse_args(argv)
    names = args.variants.split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        ap.error(f"unknown variant(s) {unknown}; choose from {list(VARIANTS)}")
    steps = 3 if args.quick else args.steps
    rows = []
    for seed in (int(s) for s in args.seeds.split(",")):
        for name in names:
            row = run_variant(name, VARIANTS[name], seed, steps, args.quick)
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "config"}), flush=True)
            if args.json:
                with open(args.json, "a") as f:
                    f.write(json.dumps(row) + "\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
