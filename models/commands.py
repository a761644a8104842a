"""The `hecate train`, `hecate sample` and `hecate eval` subcommands (parsers and handlers).

Numeric flags are checked while parsing (`models.validation`: ranges, finiteness; `check`: the
checks across flags and the memory a run needs). Every expected failure after that (missing data
file, binary corpus, incompatible or corrupt checkpoint, `--device gpu` without a GPU) is printed
as one ``hecate <cmd>: error: ...`` line on stderr with exit status 2; with ``--debug`` it is
raised instead, so its traceback shows.

>>> import argparse
>>> p = argparse.ArgumentParser(); sub = p.add_subparsers(dest="command")
>>> add_parsers(sub)
>>> p.parse_args(["train", "--steps", "5", "--rule", "titans"]).steps
5
"""
from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path
from typing import Any

from .config import COMPOSITIONS, DTYPES, RULES, TEXT_MODEL, ModelConfig
from .data import DataError
from .export import cli as export_cli
from .serve import command as serve_cli
from .validation import (LEVELS, NON_NEGATIVE, POSITIVE, POSITIVE_INT, SEED, Integer,
                         check_train)

MLP_WIDTH = Integer(0, 16)

# flag name -> config field; flags left unset (None) keep the default or the resumed run's value
MODEL_FLAGS = {"d_model": int, "layers": int, "seq_len": int, "window": int, "levels": int,
               "rule": str, "composition": str, "gate_penalty": float, "dtype": str,
               "heads": int, "mlp": int, "rotary": bool, "bounded_theta": bool}
TRAIN_FLAGS = {"steps": int, "seed": int, "batch_size": int, "lr": float, "data": str,
               "task": str, "device": str, "checkpoint_minutes": float}


def add_parsers(sub: Any) -> None:
    """Register the three subcommands on an argparse subparsers object."""
    t = sub.add_parser("train", help="train the Nested-Learning model (the defaults: 1 to 2 "
                                     "minutes on 2 CPU cores, on Python's own sources)")
    t.add_argument("--run-dir", help="run directory (default runs/<timestamp>)")
    t.add_argument("--resume", action="store_true",
                   help="continue the run in --run-dir from its last checkpoint")
    t.add_argument("--data", help="train on this text file instead of the default corpus")
    t.add_argument("--task", choices=("text", "recall"),
                   help="text (default) or synthetic associative recall; recall starts from "
                        "its own defaults (1 MAG block, 1 level, key shift, raised retention "
                        "and inner-lr gate biases, memory queries initialised to its keys, "
                        "seq-len 64, window 16, 1000 steps, lr 3e-3: "
                        "models.train.RECALL_MODEL/RECALL_TRAIN); --levels 0 is SWA alone")
    t.add_argument("--device", choices=("cpu", "gpu"), help="cpu (default) or gpu (CuPy + "
                                                            "CUDA kernels)")
    t.add_argument("--rule", choices=RULES)
    t.add_argument("--composition", choices=COMPOSITIONS)
    t.add_argument("--dtype", choices=DTYPES,
                   help="float32 (default) or float64 parameters and activations (float64: "
                        "runs on N MPI ranks match one process to ~1e-12)")
    t.add_argument("--levels", type=LEVELS, metavar="N",
                   help="CMS levels, 0 to 4 (default 2; 0: no memory branch, SWA alone)")
    t.add_argument("--heads", type=POSITIVE_INT, metavar="N",
                   help="attention heads, each with its own memory per CMS level (default "
                        f"{TEXT_MODEL['heads']}; --task recall: {ModelConfig.heads}); must divide "
                        "--d-model")
    t.add_argument("--mlp", type=MLP_WIDTH, metavar="N",
                   help=f"MLP sublayer of N x d-model hidden units in every block (default "
                        f"{TEXT_MODEL['mlp']}; --task recall: {ModelConfig.mlp}; 0: none); an "
                        "integer from 0 to 16")
    t.add_argument("--rotary", action=argparse.BooleanOptionalAction, default=None,
                   help="rotary positions in attention (default on; --task recall: off)")
    t.add_argument("--bounded-theta", action=argparse.BooleanOptionalAction, default=None,
                   help="the memory's inner learning rate as sigmoid, in (0, 1), instead of "
                        "softplus (default on; --task recall: off); docs/model.md")
    sizes = {"d_model": "width of the model (default 64)",
             "layers": "blocks (default 2)",
             "seq_len": "tokens per training chunk, at least --window (default 128)",
             "window": "sliding-window attention span, at most --seq-len (default 32)",
             "steps": "optimizer steps (default 800; --task recall: 1000)",
             "batch_size": "sequences per step (default 8)"}
    for name, text in sizes.items():
        t.add_argument("--" + name.replace("_", "-"), type=POSITIVE_INT, metavar="N",
                       help=f"{text}; a positive integer")
    t.add_argument("--seed", type=SEED, metavar="N",
                   help="seed of the initial parameters and the data order (default 0); "
                        "a non-negative integer")
    t.add_argument("--lr", type=POSITIVE, metavar="X",
                   help="peak learning rate (default 3e-3); a finite number > 0")
    t.add_argument("--gate-penalty", type=NON_NEGATIVE, metavar="X",
                   help="weight of the penalty that keeps the sigmoid gates out of saturation "
                        "(default 0.01; 0 turns it off; models.layers.gate_excess); a finite "
                        "number >= 0")
    t.add_argument("--no-progress", action="store_true", help="no progress bar")
    t.add_argument("--no-compile", action="store_true",
                   help="differentiate each step with eager autodiff instead of replaying the "
                        "compiled step (tape.compile); the values are the same")
    t.add_argument("--checkpoint-minutes", type=NON_NEGATIVE, metavar="X",
                   help="also write the checkpoint every X minutes of training (default 5; 0: "
                        "only every 200 steps, at the end and when stopped); a finite number "
                        ">= 0")
    t.add_argument("--force", action="store_true",
                   help="with --resume: continue although the data's content (SHA-256) or "
                        "model fields differ from the checkpoint's")

    s = sub.add_parser("sample", help="generate text from a run's last checkpoint")
    s.add_argument("--run", required=True, help="run directory")
    s.add_argument("--prompt", default="def ")
    s.add_argument("--length", type=POSITIVE_INT, default=200, metavar="N",
                   help="bytes to generate (default 200); a positive integer")
    s.add_argument("--temperature", type=NON_NEGATIVE, default=0.8, metavar="X",
                   help="sampling temperature (default 0.8; 0: always the likeliest byte); "
                        "a finite number >= 0")
    s.add_argument("--seed", type=SEED, default=0, metavar="N",
                   help="sampling seed (default 0); a non-negative integer")
    s.add_argument("--device", choices=("cpu", "gpu"), default="cpu")

    e = sub.add_parser("eval", help="validation loss and bits per byte of a run")
    e.add_argument("--run", required=True, help="run directory")
    e.add_argument("--batches", type=POSITIVE_INT, metavar="N",
                   help="validation chunks (default: the run's final evaluation size); a "
                        "positive integer")
    e.add_argument("--device", choices=("cpu", "gpu"), default="cpu")

    export_cli.add_parser(sub)
    serve_cli.add_parser(sub)


def _flags(args: argparse.Namespace, names: dict) -> dict:
    return {k: getattr(args, k) for k in names if getattr(args, k, None) is not None}


def _train(args: argparse.Namespace) -> int:
    # Under mpiexec: the MPI world (models.distributed); an error on one rank ends them all.
    from .distributed import current_world
    world = current_world()
    with world.guard("train", bool(getattr(args, "debug", False))):
        return _train_on(args, world)


def _train_on(args: argparse.Namespace, world: Any) -> int:
    from .train import resolve_configs, train
    if args.resume and not args.run_dir:
        raise DataError("--resume needs --run-dir DIR (the run to continue)")

    def configs() -> tuple:   # rank 0 reads the run directory; the others get its answer
        run_dir = Path(args.run_dir) if args.run_dir else Path(
            "runs", datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
        return (run_dir, *resolve_configs(run_dir, args.resume, _flags(args, MODEL_FLAGS),
                                          _flags(args, TRAIN_FLAGS), force=args.force))
    run_dir, cfg, tcfg = world.from_root(configs)
    world.rows(tcfg.batch_size)   # a batch that does not split over the ranks: exit 2
    if world.is_root:
        print(f"hecate train: run directory {run_dir}", file=sys.stderr)
    try:   # SIGTERM / a first Ctrl-C: checkpoint, then exit 143 / 130; a second Ctrl-C: 130
        result = train(cfg, tcfg, run_dir, resume=args.resume, progress=not args.no_progress,
                       force=args.force, world=world, compile_step=not args.no_compile)
    except KeyboardInterrupt:
        if world.size > 1:
            raise   # every rank must end: the guard aborts them
        return 130
    return result.exit_code


def _sample(args: argparse.Namespace) -> int:
    from .evaluation import streamed_text
    from .train import load_run
    cfg, _, params, _, xp = load_run(args.run, args.device)
    try:   # printed as the bytes are drawn: a long --length shows its progress, Ctrl-C keeps it
        for piece in streamed_text(params, cfg, args.prompt, args.length, args.temperature,
                                   args.seed, xp):
            sys.stdout.write(piece)
            sys.stdout.flush()
    except KeyboardInterrupt:
        print()
        return 130
    print()
    return 0


def _eval(args: argparse.Namespace) -> int:
    from .train import eval_run
    ev = eval_run(args.run, args.device, args.batches)
    print(f"step {ev['step']}: validation loss {ev['val_loss']:.4f} nats/token, "
          f"{ev['bits_per_byte']:.4f} bits per byte")
    if ev.get("accuracy") is not None:
        print(f"recall accuracy {ev['accuracy']:.3f}")
    if ev.get("val_loss_memory_reset") is not None:
        reset = ev["val_loss_memory_reset"]
        print(f"with the memory reset at every chunk: {reset:.4f} nats/token "
              f"({reset - ev['val_loss']:+.4f}: what the memory carries across chunks)")
    return 0


def check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The checks of a parsed command that involve several flags (`parser.error` on failure:
    one line, exit status 2); single values were checked while parsing (`models.validation`)."""
    if args.command == "export":
        export_cli.check(parser, args)
    if args.command != "train":
        return
    if args.resume and not args.run_dir:
        parser.error("--resume needs --run-dir DIR (the run to continue)")
    check_train(parser, args, _flags(args, MODEL_FLAGS), _flags(args, TRAIN_FLAGS))


def run(args: argparse.Namespace) -> int:
    """Dispatch a parsed `train` / `sample` / `eval` command; expected errors -> exit 2."""
    from .checkpoint import CheckpointFileError
    from .train import RunError
    handler = {"train": _train, "sample": _sample, "eval": _eval,
               "export": export_cli.run_export, "serve": serve_cli.run}[args.command]
    try:
        return handler(args)
    except (DataError, CheckpointFileError, RunError) as e:
        if getattr(args, "debug", False):
            raise
        print(f"hecate {args.command}: error: {e}", file=sys.stderr)
        return 2


__all__ = ["add_parsers", "check", "run"]
