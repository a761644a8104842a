"""The ``hecate serve`` command line: its flags (checked while parsing, like every ``hecate``
command: one line and exit status 2 on a bad value) and its handler.

>>> import argparse
>>> p = argparse.ArgumentParser(); sub = p.add_subparsers(dest="command")
>>> add_parser(sub)
>>> args = p.parse_args(["serve", "--run", "runs/x", "--port", "0"])
>>> args.port, args.max_batch, args.max_tokens_cap
(0, 16, 1024)
"""
from __future__ import annotations

import argparse
from typing import Any

from ..validation import NON_NEGATIVE, NON_NEGATIVE_INT, POSITIVE_INT, Integer

PORT = Integer(0, 65535)
INSTALL_HINT = 'pip install -e ".[serve]"'


def add_parser(sub: Any) -> None:
    """Register ``serve`` on an argparse subparsers object."""
    s = sub.add_parser("serve", help="serve a run over HTTP: an OpenAI-style completions API "
                                     "with streaming and batching, and a web page (needs "
                                     f"{INSTALL_HINT})")
    s.add_argument("--run", required=True, help="run directory (its last checkpoint is served)")
    s.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only)")
    s.add_argument("--port", type=PORT, default=8000, metavar="N",
                   help="TCP port (default 8000; 0: any free port, printed at start); "
                        "an integer from 0 to 65535")
    s.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    s.add_argument("--model-name", metavar="NAME",
                   help="the model id in answers and /v1/models (default hecate-<run folder>)")
    s.add_argument("--max-tokens-cap", type=POSITIVE_INT, default=1024, metavar="N",
                   help="the largest max_tokens a request may ask for (default 1024); a "
                        "positive integer")
    s.add_argument("--max-prompt-bytes", type=POSITIVE_INT, default=8192, metavar="N",
                   help="the longest prompt, in bytes of UTF-8 (default 8192); a positive "
                        "integer")
    s.add_argument("--max-batch", type=POSITIVE_INT, default=16, metavar="N",
                   help="completions decoded together in one step (default 16); a positive "
                        "integer")
    s.add_argument("--max-waiting", type=NON_NEGATIVE_INT, default=64, metavar="N",
                   help="requests that may wait for a place in the batch; beyond it the "
                        "server answers 503 (default 64); a non-negative integer")
    s.add_argument("--shutdown-grace", type=NON_NEGATIVE, default=3.0, metavar="S",
                   help="seconds running completions get to finish after SIGTERM / Ctrl-C "
                        "before they are ended (default 3); a finite number >= 0")
    s.add_argument("--log-level", choices=("critical", "error", "warning", "info", "debug"),
                   default="info", help="uvicorn's log level (default info: one line per "
                                        "request)")


def run(args: argparse.Namespace) -> int:
    """Run a parsed ``hecate serve``; a missing ``serve`` extra is a `RunError` (one line,
    exit status 2) naming the install command."""
    from ..train import RunError
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        raise RunError(f"the serve extra is not installed ({e.name or e} is missing): "
                       f"{INSTALL_HINT}") from None
    from .protocol import Limits
    from .server import serve
    return serve(args.run, host=args.host, port=args.port, device=args.device,
                 model_name=args.model_name, max_batch=args.max_batch,
                 max_waiting=args.max_waiting,
                 limits=Limits(args.max_tokens_cap, args.max_prompt_bytes),
                 shutdown_grace=args.shutdown_grace, log_level=args.log_level)


__all__ = ["add_parser", "run", "INSTALL_HINT"]
