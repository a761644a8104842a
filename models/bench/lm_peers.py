"""Hecate's language model against same-size PyTorch peers, on Hecate's own data and schedule.

    python -m models.bench.lm_peers               # hecate train's steps each, then the wall-clock match
    python -m models.bench.lm_peers --quick       # a few steps: a smoke test, not a result
    python -m models.bench.lm_peers --steps 2000 --json out.json
    hecate bench peers                            # the same, as a section of `hecate bench`

Every model trains on exactly what `hecate train` reads: the default corpus (`models.data`:
`make_data("text", ...)`, train/validation split 90/10), the same `TextData` batches drawn
with the same seed (batch 8 x 128 tokens), the same AdamW (betas 0.9/0.999, eps 1e-8, weight
decay 0.01 on matrices only), global-norm clip 1.0, and `models.optim.warmup_cosine` (lr 3e-3,
30 warmup steps, cosine to 10%): `models.train.TrainConfig`'s defaults. Hecate alone adds its
gate-saturation penalty to the objective (the peers have no gates to penalise). The models:

- ``hecate``: `models.train.train` with ``hecate train``'s defaults (the text task's model,
  `models.config.train_defaults`: 4 heads, an MLP of 2 d, rotary, bounded theta; 149,348
  parameters; `TrainConfig()`, the sample at the end left out), evaluations and checkpoints
  included;
- ``transformer``: `peer_nets.CausalTransformer`, d 64, 2 layers, 4 heads, a GELU MLP of 320,
  rotary positions, untied embeddings (147,712 parameters);
- ``gru2``: a 2-layer GRU, embedding 64, hidden 98 (148,156), fresh state at every chunk;
- ``gru1-carry``: a 1-layer GRU, embedding 64, hidden 148 (149,544), its hidden state carried
  from chunk to chunk as Hecate carries its memory (row b of every batch continues row b of
  the one before).

Every model is evaluated as `models.train.evaluate` does at the end of a run: the mean of the
per-chunk mean cross-entropies over the first ``final_eval_batches`` (16) chunks of
`TextData.val_batches`, with the state carried along each validation stream by the models that
carry state. "Train s" sums the training steps alone (drawing the batch, forward, backward,
clip, update: the span `hecate train` times for its tokens/s), without evaluations and
checkpoint writes; tokens/s is the training tokens over that time. "At Hecate's train time":
each peer is trained again from scratch, with the full schedule, for the number of steps that
its measured seconds per step fit into Hecate's train seconds of the same run.

torch runs on one thread (``torch.set_num_threads(1)``) and NumPy's BLAS on one thread (the
environment variables below, set before NumPy loads: `main` restarts itself when they are not),
so every model gets one core. The absolute speeds depend on the machine and its load; the rows
of one run are comparable with each other.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

from . import PACKAGE_PARENT, checkout_root
from ..validation import POSITIVE_INT, Parser

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS")
TORCH_MISSING = "PyTorch is not installed: pip install torch"

# name -> (description, class in `peer_nets`, constructor arguments)
PEERS = {
    "transformer": ("PyTorch causal transformer: d 64, 2 layers, 4 heads, GELU MLP 320, rotary "
                    "positions, untied embeddings; context = the chunk",
                    "CausalTransformer", {"d_model": 64, "layers": 2, "heads": 4, "mlp": 320}),
    "gru2": ("PyTorch 2-layer GRU: embedding 64, hidden 98, fresh state every chunk",
             "GRULanguageModel", {"embed": 64, "hidden": 98, "layers": 2}),
    "gru1-carry": ("PyTorch 1-layer GRU: embedding 64, hidden 148, state carried across chunks",
                   "GRULanguageModel", {"embed": 64, "hidden": 148, "layers": 1,
                                        "carry_state": True}),
}
HECATE_DESCRIPTION = ("Hecate (`hecate train` defaults: 4 heads, MLP 2d, rotary, 2 CMS "
                      "levels, delta, MAG)")
MODELS = ("hecate",) + tuple(PEERS)
QUICK = {"steps": 3, "eval_every": 2, "eval_batches": 1, "final_eval_batches": 2}


def torch_available() -> bool:
    """Whether PyTorch can be imported (without importing it; a module blocked with
    ``sys.modules["torch"] = None`` counts as missing)."""
    if "torch" in sys.modules:
        return sys.modules["torch"] is not None
    return importlib.util.find_spec("torch") is not None


def blas_threads() -> str:
    """NumPy's BLAS thread setting as the environment gives it: one value when every variable
    that is set agrees, else each of them.

    >>> import os; os.environ.get("OPENBLAS_NUM_THREADS") in (None, blas_threads()) or None
    True
    """
    found = {v: os.environ[v] for v in THREAD_VARIABLES if v in os.environ}
    if not found:
        return "the library's default"
    values = set(found.values())
    return values.pop() if len(values) == 1 else ", ".join(f"{k}={v}" for k, v in found.items())


def source_version() -> Optional[str]:
    """``git describe --always --dirty`` of the checkout this package runs from, or None (an
    installed package, or no git)."""
    root = checkout_root()
    if root is None:
        return None
    try:
        proc = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=root,
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return f"git {proc.stdout.strip()}" if proc.returncode == 0 and proc.stdout.strip() else None


def configs(steps: Optional[int] = None, quick: bool = False) -> tuple:
    """``(ModelConfig, TrainConfig)``: `hecate train`'s defaults, with `steps` (and in `quick`
    mode fewer steps and evaluation chunks). The sample `hecate train` ends with is left out:
    it comes after the timed run and changes nothing in it.

    >>> cfg, tcfg = configs()
    >>> (tcfg.steps, tcfg.batch_size, cfg.seq_len, tcfg.lr, tcfg.warmup, tcfg.sample_bytes)
    (800, 8, 128, 0.003, 30, 0)
    """
    from ..config import ModelConfig, train_defaults
    from ..train import TrainConfig

    fields: dict = {"sample_bytes": 0, **(QUICK if quick else {})}
    if steps is not None:
        fields["steps"] = steps
    return ModelConfig(**train_defaults("text")), TrainConfig(**fields)


def training_data(cfg: Any, tcfg: Any) -> Any:
    """The data object `models.train.train` builds for `cfg` and `tcfg` (same corpus, split,
    seed and stream layout), fresh: its first `next_batch` is Hecate's first batch."""
    from ..data import make_data

    return make_data(tcfg.task, tcfg.batch_size, cfg.seq_len, tcfg.seed, tcfg.data,
                     pairs=tcfg.pairs)

# --------------------------------------------------------------------------------------------
# Hecate


def run_hecate(cfg: Any, tcfg: Any) -> dict:
    """Train Hecate's model with `models.train.train` in a temporary run directory; its
    metrics give the training-step seconds and the validation curve."""
    from ..train import train
    from ..validation import parameter_count

    with tempfile.TemporaryDirectory(prefix="hecate-peers-") as run_dir:
        result = train(cfg, tcfg, run_dir, progress=False, out=None, argv=[])
        rows = [json.loads(line) for line in
                (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    tokens_per_step = tcfg.batch_size * cfg.seq_len
    train_s, curve = 0.0, []
    for row in rows:
        train_s += tokens_per_step / row["tokens_per_s"]
        if row["val_loss"] is not None:
            curve.append({"step": row["step"], "train_s": train_s, "val_loss": row["val_loss"]})
    return {"model": "hecate", "description": HECATE_DESCRIPTION,
            "params": parameter_count(cfg), "steps": result.step, "val_loss": result.val_loss,
            "train_s": train_s, "tokens_per_s": result.step * tokens_per_step / train_s,
            "wall_s": result.seconds, "val_curve": curve}

# --------------------------------------------------------------------------------------------
# The PyTorch peers


def build_peer(name: str, cfg: Any, seed: int) -> Any:
    """The PyTorch model `name` (a key of `PEERS`), initialised from torch's generator seeded
    with `seed`."""
    import torch

    from . import peer_nets

    _, cls, kwargs = PEERS[name]
    torch.manual_seed(seed)
    extra = {"seq_len": cfg.seq_len} if cls == "CausalTransformer" else {}
    return getattr(peer_nets, cls)(vocab=cfg.vocab, **kwargs, **extra)


def evaluate_peer(net: Any, data: Any, max_batches: int,
                  on_tokens: Optional[Callable] = None) -> float:
    """`models.train.evaluate` for a peer: the mean over the validation chunks of the mean
    cross-entropy, the state carried along the streams when the model carries state."""
    import torch

    losses, state = [], None
    with torch.no_grad():
        for chunk in data.val_batches(max_batches):
            if on_tokens is not None:
                on_tokens("val", chunk)
            loss, state = net.chunk_loss(torch.from_numpy(chunk), state)
            losses.append(float(loss))
    return float(sum(losses) / len(losses)) if losses else float("nan")


def train_peer(name: str, cfg: Any, tcfg: Any, on_tokens: Optional[Callable] = None,
               net: Any = None) -> dict:
    """Train the peer `name` under `tcfg` on `training_data(cfg, tcfg)`, evaluating on the
    same steps as `models.train.train` (every ``eval_every`` steps on ``eval_batches`` chunks,
    at the end on ``final_eval_batches``). `on_tokens(kind, array)` sees every array the model
    reads (``"train"`` or ``"val"``), in order. `net` (default: `build_peer`) is the model to
    train, for a caller that scores it afterwards (benchmarks/chunk_context.py)."""
    import torch

    from ..optim import warmup_cosine
    from .peer_nets import parameter_count

    net = build_peer(name, cfg, tcfg.seed) if net is None else net
    params = [p for p in net.parameters() if p.requires_grad]
    # Hecate's AdamW decays matrices only (`models.optim.matrices_only`).
    groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": tcfg.weight_decay},
              {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=tcfg.lr, betas=(0.9, 0.999), eps=1e-8)
    data = training_data(cfg, tcfg)
    state, train_s, curve, val = None, 0.0, [], float("nan")
    start = time.perf_counter()
    for step in range(tcfg.steps):
        t0 = time.perf_counter()
        chunk = data.next_batch()
        if on_tokens is not None:
            on_tokens("train", chunk)
        loss, state = net.chunk_loss(torch.from_numpy(chunk), state)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, tcfg.clip)
        lr = warmup_cosine(step, tcfg.lr, tcfg.warmup, tcfg.steps, tcfg.min_lr_ratio)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
        train_s += time.perf_counter() - t0
        done = step + 1
        if done % tcfg.eval_every == 0 or done == tcfg.steps:
            last = done == tcfg.steps
            val = evaluate_peer(net, data, tcfg.final_eval_batches if last
                                else tcfg.eval_batches, on_tokens)
            curve.append({"step": done, "train_s": train_s, "val_loss": val})
    tokens = tcfg.steps * tcfg.batch_size * cfg.seq_len
    return {"model": name, "description": PEERS[name][0], "params": parameter_count(net),
            "steps": tcfg.steps, "val_loss": val, "train_s": train_s,
            "tokens_per_s": tokens / train_s if train_s > 0 else float("nan"),
            "wall_s": time.perf_counter() - start, "val_curve": curve}

# --------------------------------------------------------------------------------------------
# The comparison


def steps_in(budget_s: float, row: dict) -> int:
    """How many of `row`'s training steps fit into `budget_s` seconds, at its measured rate.

    >>> steps_in(10.0, {"train_s": 2.0, "steps": 100})
    500
    """
    return max(1, round(budget_s * row["steps"] / row["train_s"]))


def run(steps: Optional[int] = None, quick: bool = False, models: tuple = MODELS,
        wall_match: bool = True, log: Callable = print) -> dict:
    """Train `models` (names from `MODELS`) one after the other in this process and return
    ``{"meta": ..., "results": [row per model]}``. With `wall_match` and Hecate among the
    models, each peer's row also gets ``at_hecate_time``: the same peer trained from scratch
    for the steps that fit into Hecate's training seconds."""
    import torch

    torch.set_num_threads(1)
    cfg, tcfg = configs(steps, quick)
    data = training_data(cfg, tcfg)
    meta = {"date": time.strftime("%Y-%m-%dT%H:%M:%S"), "quick": quick,
            "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
            "cpus": os.cpu_count(), "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
            "blas_threads": blas_threads(),
            "source": source_version(), "data": data.describe(), "model_config": cfg.to_dict(),
            "train_config": tcfg.to_dict()}
    results = []
    for name in models:
        log(f"peers: training {name} for {tcfg.steps} steps")
        row = run_hecate(cfg, tcfg) if name == "hecate" else train_peer(name, cfg, tcfg)
        log(f"peers: {name}: val {row['val_loss']:.4f} nats/token, "
            f"{row['tokens_per_s']:,.0f} tokens/s, {row['train_s']:.1f} s")
        results.append(row)
    hecate = next((r for r in results if r["model"] == "hecate"), None)
    if wall_match and hecate is not None:
        meta["hecate_train_s"] = hecate["train_s"]
        for row in results:
            if row["model"] == "hecate":
                continue
            n = steps_in(hecate["train_s"], row)
            log(f"peers: {row['model']} for {n} steps (Hecate's {hecate['train_s']:.1f} s)")
            again = row if n == row["steps"] else train_peer(
                row["model"], cfg, dataclasses.replace(tcfg, steps=n))
            row["at_hecate_time"] = {"steps": n, "val_loss": again["val_loss"],
                                     "train_s": again["train_s"],
                                     "val_curve": again["val_curve"]}
    return {"meta": meta, "results": results}


def _cell(value: Any, fmt: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return format(value, fmt)


def format_report(data: dict) -> str:
    """The Markdown table of a `run` result, with the notes needed to read it."""
    meta, rows = data["meta"], data["results"]
    tcfg, described = meta["train_config"], meta["data"]
    lines = ["| model | params | steps | val nats/token | train tokens/s | train s | wall s "
             "| steps (train s) in Hecate's train s | val nats/token at Hecate's train s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        at = r.get("at_hecate_time") or (r if r["model"] == "hecate" and "hecate_train_s" in meta
                                         else {})
        steps = f"{at['steps']} ({at['train_s']:.1f} s)" if at else "n/a"
        lines.append(
            f"| {r['model']} | {r['params']:,} | {r['steps']} | {_cell(r['val_loss'], '.4f')}"
            f" | {_cell(r['tokens_per_s'], ',.0f')} | {_cell(r['train_s'], '.1f')}"
            f" | {_cell(r['wall_s'], '.1f')} | {steps}"
            f" | {_cell(at.get('val_loss'), '.4f')} |")
    models = "; ".join(f"`{r['model']}`: {r['description']}" for r in rows)
    data_note = (
        f"Data: {described.get('source')} corpus (sha256 {described.get('sha256', '?')[:12]}, "
        f"{described.get('train_bytes'):,} train / {described.get('val_bytes'):,} validation "
        f"bytes), the same `TextData` batches for every model: batch {tcfg['batch_size']} x "
        f"{meta['model_config']['seq_len']} tokens, seed {tcfg['seed']}. Schedule: AdamW lr "
        f"{tcfg['lr']:g}, {tcfg['warmup']} warmup steps, cosine to {tcfg['min_lr_ratio']:g} x "
        f"lr, weight decay {tcfg['weight_decay']:g} on matrices, clip {tcfg['clip']:g}; Hecate "
        f"alone adds its gate penalty. Validation: the first {tcfg['final_eval_batches']} "
        "chunks of each validation stream, the state carried along them by the models that "
        "carry state (Hecate's memory, gru1-carry).")
    lines += ["", f"Models: {models}.", "", data_note, "",
              "Train s: the training steps alone (no evaluation, no checkpoint writes); wall s: "
              "the whole training call. At Hecate's train s: each peer retrained from scratch, "
              "full schedule, for the steps its measured rate fits into Hecate's train seconds "
              "of this run (when the machine's load changes between the runs, the retrained "
              "peer's own train s, in brackets, differs from Hecate's).", "",
              f"One process, one model at a time: torch on {meta['torch_threads']} thread(s) "
              f"(torch {meta['torch']}), NumPy's BLAS threads: {meta['blas_threads']}; "
              f"{meta['machine']}, {meta['cpus']} CPUs. Absolute tokens/s depend on the "
              "machine's load; the rows of one run are comparable."]
    if meta.get("source"):
        lines.append(f"Source: {meta['source']}.")
    if meta["quick"]:
        lines.append("QUICK RUN: a smoke test, not a result.")
    return "\n".join(lines)


def _restart_pinned(argv: list) -> int:
    """Run this module again with every BLAS thread variable at 1 (read only as NumPy loads)."""
    env = dict(os.environ, **{v: "1" for v in THREAD_VARIABLES})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_PARENT),
                                                   env.get("PYTHONPATH")) if p)
    return subprocess.call([sys.executable, "-m", "models.bench.lm_peers", *argv], env=env)


def main(argv: Optional[list] = None) -> int:
    """Entry point of ``python -m models.bench.lm_peers`` and ``benchmarks/lm_peers.py``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = Parser(prog="lm_peers", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK['steps']} steps, tiny evaluations: a smoke test")
    parser.add_argument("--steps", type=POSITIVE_INT, metavar="N",
                        help="training steps of every model (default: as hecate train); "
                             "a positive integer")
    parser.add_argument("--models", metavar="LIST",
                        help=f"comma-separated subset of {','.join(MODELS)} (default: all)")
    parser.add_argument("--no-wall-match", action="store_true",
                        help="skip retraining the peers for Hecate's train seconds")
    parser.add_argument("--json", metavar="PATH", help="also write every number as JSON")
    args = parser.parse_args(argv)
    models = tuple(args.models.split(",")) if args.models else MODELS
    unknown = sorted(set(models) - set(MODELS))
    if unknown:
        parser.error(f"--models: unknown model(s) {', '.join(unknown)}; choose from "
                     f"{', '.join(MODELS)}")
    if not torch_available():
        parser.error(TORCH_MISSING)
    if any(os.environ.get(v) != "1" for v in THREAD_VARIABLES):
        if "numpy" in sys.modules:   # its BLAS has read its thread count already
            return _restart_pinned(argv)
        os.environ.update({v: "1" for v in THREAD_VARIABLES})

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    data = run(args.steps, args.quick, models, not args.no_wall_match, log)
    print(format_report(data))
    if args.json:
        Path(args.json).write_text(json.dumps(data, indent=2))
    return 0


__all__ = ["PEERS", "MODELS", "configs", "training_data", "run_hecate", "build_peer",
           "train_peer", "evaluate_peer", "steps_in", "run", "format_report", "main",
           "torch_available"]

if __name__ == "__main__":
    sys.exit(main())
