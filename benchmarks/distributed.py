"""Data-parallel training throughput: `hecate train`'s loop on 1 process and on N MPI ranks.

    python benchmarks/distributed.py                 # default model, 1 and 2 ranks
    python benchmarks/distributed.py --ranks 1 2 4 --steps 40
    python benchmarks/distributed.py --quick --json out.json   # a smoke test: tiny model

For each rank count the script starts ``mpiexec -n N python benchmarks/distributed.py
--worker`` (1: a plain process, no MPI), which runs `models.train.train` with the same global
batch (so every row count and the losses are those of one process) and reports, from rank 0:

* tokens/s: global tokens per step over the step time (the median over the timed steps, after
  `--warmup` untimed ones), the figure `metrics.jsonl` records;
* allreduce share: the time inside the step's one allreduce (`MPIWorld.allreduce_seconds`,
  which includes waiting for the slowest rank) over the total step time;
* allreduce alone: the same buffer allreduced after a barrier, i.e. the transfer without
  the wait, per call;
* one share alone: one plain process training the per-rank batch (batch / N rows), the step
  time N ranks would reach if they neither communicated nor competed for the machine.

Every rank runs BLAS on one thread (set below before NumPy loads), so N ranks use N cores and
the 1-rank figure is one core. Timings on a shared machine move with the other load on it.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

QUICK_MODEL = {"d_model": 8, "layers": 1, "window": 4, "seq_len": 8, "levels": 1}


def worker(args: argparse.Namespace) -> None:
    """One rank: train, then time the bare allreduce; rank 0 writes the figures."""
    from models.config import ModelConfig
    from models.distributed import current_world
    from models.train import TrainConfig, train

    world = current_world()
    cfg = ModelConfig(**(QUICK_MODEL if args.quick else {}))
    steps = args.warmup + args.steps
    tcfg = TrainConfig(steps=steps, batch_size=args.batch_size, eval_every=10**9,
                       eval_batches=1, final_eval_batches=1, ckpt_every=10**9,
                       checkpoint_minutes=0.0, sample_bytes=0)
    run_dir = Path(args.run_dir)
    result = train(cfg, tcfg, run_dir, progress=False, out=None, world=world)
    in_allreduce = world.allreduce_seconds
    # The bare transfer: the flat buffer of this model, allreduced after a barrier each time.
    from models.distributed import StepBuffer
    from models.model import init_params
    flat = StepBuffer(init_params(cfg, 0), world).flat
    bare = []
    for _ in range(20 if world.size > 1 else 0):
        world.comm.Barrier()
        t0 = time.perf_counter()
        world.allreduce_sum_(flat)
        bare.append(time.perf_counter() - t0)
    if not world.is_root:
        return
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    tokens = tcfg.batch_size * cfg.seq_len
    step_seconds = [tokens / r["tokens_per_s"] for r in rows]
    timed = rows[args.warmup:]
    out = {"ranks": world.size, "steps": result.step, "batch_size": tcfg.batch_size,
           "seq_len": cfg.seq_len, "d_model": cfg.d_model, "layers": cfg.layers,
           "buffer_values": int(flat.size),
           "tokens_per_s": statistics.median(r["tokens_per_s"] for r in timed),
           "step_seconds": statistics.median(tokens / r["tokens_per_s"] for r in timed),
           "allreduce_share": in_allreduce / sum(step_seconds),
           "allreduce_alone_s": statistics.median(bare) if bare else 0.0,
           "losses": [r["loss"] for r in rows]}
    Path(args.out).write_text(json.dumps(out))


def mpiexec() -> str | None:
    local = Path(sys.executable).parent / "mpiexec"
    return str(local) if local.exists() else shutil.which("mpiexec")


def run_ranks(n: int, args: argparse.Namespace, tmp: Path, batch: int = 0) -> dict:
    batch = batch or args.batch_size
    out, run_dir = tmp / f"ranks{n}-{batch}.json", tmp / f"run{n}-{batch}"
    cmd = [sys.executable, __file__, "--worker", "--out", str(out), "--run-dir", str(run_dir),
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--batch-size",
           str(batch)] + (["--quick"] if args.quick else [])
    if n > 1:
        launcher = mpiexec()
        if launcher is None:
            raise SystemExit("benchmarks/distributed.py: no mpiexec: pip install -e "
                             "\".[distributed]\"")
        cmd = [launcher, "-n", str(n)] + cmd
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} ... failed ({proc.returncode}):\n{proc.stderr}")
    return json.loads(out.read_text())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    p.add_argument("--steps", type=int, default=None, help="timed steps (default 20; 3 quick)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps first (default 3)")
    p.add_argument("--batch-size", type=int, default=8, help="the global batch (default 8)")
    p.add_argument("--quick", action="store_true", help="tiny model, few steps (smoke test)")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--run-dir", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.steps = args.steps if args.steps is not None else (3 if args.quick else 20)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 3)
    if args.worker:
        worker(args)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        results = [run_ranks(n, args, Path(tmp)) for n in args.ranks]
        for r in results:
            share = args.batch_size // r["ranks"]
            r["share_alone_s"] = r["step_seconds"] if r["ranks"] == 1 else \
                run_ranks(1, args, Path(tmp), batch=share)["step_seconds"]
    base = results[0]
    print(f"global batch {args.batch_size} x seq_len {base['seq_len']}, d_model "
          f"{base['d_model']}, {base['layers']} layer(s); {args.steps} timed steps after "
          f"{args.warmup}; one BLAS thread per rank; allreduce buffer {base['buffer_values']:,} "
          f"values")
    print(f"{'ranks':>5} {'tokens/s':>10} {'speed-up':>8} {'step ms':>8} {'allreduce share':>15} "
          f"{'allreduce alone ms':>18} {'one share alone ms':>18}")
    for r in results:
        print(f"{r['ranks']:>5} {r['tokens_per_s']:>10,.0f} "
              f"{r['tokens_per_s'] / base['tokens_per_s']:>8.2f} {1e3 * r['step_seconds']:>8.1f} "
              f"{100 * r['allreduce_share']:>14.1f}% {1e3 * r['allreduce_alone_s']:>18.3f} "
              f"{1e3 * r['share_alone_s']:>18.1f}")
    same = all(abs(a - b) <= 1e-4 * abs(a) for r in results[1:]
               for a, b in zip(base["losses"], r["losses"]))
    print(f"per-step losses equal to 1e-4 relative (float32) on every rank count: {same}")
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "losses_equal": same},
                                              indent=2))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
