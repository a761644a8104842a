"""The ``hecate export`` subcommand: its parser and its handler.

>>> import argparse
>>> p = argparse.ArgumentParser(); sub = p.add_subparsers(dest="command")
>>> add_parser(sub)
>>> p.parse_args(["export", "--run", "runs/x", "--quantize", "int8"]).out
'model.onnx'
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..validation import POSITIVE_INT

QUANTIZE_CHOICES = ("int8",)     # models.export.run.QUANTIZE_CHOICES, without importing onnx


def add_parser(sub: Any) -> None:
    """Register ``export`` on an argparse subparsers object."""
    e = sub.add_parser("export", help="a run's model as an ONNX decode step (model.onnx plus "
                                      "model.onnx.state.npz) for ONNX Runtime, e.g. in a "
                                      "browser (needs the edge extra: pip install -e "
                                      "\".[edge]\")")
    e.add_argument("--run", required=True, help="run directory")
    e.add_argument("--out", default="model.onnx",
                   help="the ONNX file to write (default model.onnx); its fresh state goes "
                        "next to it as <out>.state.npz")
    e.add_argument("--quantize", choices=QUANTIZE_CHOICES,
                   help="int8: dynamic int8 quantisation of the weight products (onnxruntime); "
                        "reports the size and the validation loss against float32")
    e.add_argument("--val-bytes", type=POSITIVE_INT, default=4096, metavar="N",
                   help="with --quantize: validation bytes to compare the losses on (default "
                        "4096); a positive integer")


def check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Checks of the parsed flags that need the file system (`parser.error`: one line,
    exit status 2)."""
    run = Path(args.run)
    if not run.is_dir():
        parser.error(f"argument --run: {args.run!r} is not a directory (a run directory "
                     f"written by hecate train)")
    out = Path(args.out)
    if out.is_dir():
        parser.error(f"argument --out: {args.out!r} is a directory; give a file name such as "
                     f"{out / 'model.onnx'}")
    if not out.parent.is_dir():
        parser.error(f"argument --out: the folder {str(out.parent)!r} does not exist; create "
                     f"it first")


def run_export(args: argparse.Namespace) -> int:
    """Export the run; prints what was written and measured."""
    from .run import export_run
    report = export_run(args.run, args.out, args.quantize, args.val_bytes)
    for line in report.lines():
        print(line)
    return 0
