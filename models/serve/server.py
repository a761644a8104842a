"""The ``hecate serve`` process: load a run, listen, serve with uvicorn, stop cleanly.

The socket is bound here, before uvicorn starts, so a taken port is one clear error and
``--port 0`` picks a free port (the line printed at start names it).

Stopping. SIGTERM or Ctrl-C (SIGINT) starts a graceful shutdown: the server stops accepting
connections and new requests (503), running completions get ``shutdown_grace`` seconds to
finish, then the rest end (a stream gets a last chunk with ``finish_reason: "abort"`` and
``data: [DONE]``; a waiting plain request gets a 503), and the process exits with status 0.
A second Ctrl-C stops at once. uvicorn re-raises the signal it caught once it has shut down;
the handler installed around it here takes that without effect, so the exit status stays 0.
"""
from __future__ import annotations

import signal
import socket
import sys
from pathlib import Path
from typing import Any, Callable, Optional, TextIO

import uvicorn

from ..train import RunError, load_run
from .app import create_app
from .batcher import Batcher
from .protocol import Limits


class _Server(uvicorn.Server):
    """uvicorn's server, telling the decode loop to wind down when a stop signal arrives."""

    def __init__(self, config: uvicorn.Config, on_stop: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_stop = on_stop

    def handle_exit(self, sig: int, frame: Any) -> None:
        self._on_stop()          # signal-safe: assigns attributes only
        super().handle_exit(sig, frame)


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on `host`:`port` (0: a free port); `RunError` naming the
    address when it cannot be had.

    >>> s = listen("127.0.0.1", 0); s.getsockname()[1] > 0
    True
    >>> s.close()
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as e:
        raise RunError(f"cannot listen on {host}:{port}: {e.strerror or e} (check --host)") \
            from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as e:
        sock.close()
        raise RunError(f"cannot listen on {host}:{port}: {e.strerror or e} (choose another "
                       f"--port, or 0 for any free port)") from None
    sock.set_inheritable(True)
    return sock


def serve(run_dir: str | Path, host: str = "127.0.0.1", port: int = 8000, device: str = "cpu",
          model_name: Optional[str] = None, max_batch: int = 16, max_waiting: int = 64,
          limits: Limits = Limits(), shutdown_grace: float = 3.0, log_level: str = "info",
          out: TextIO = sys.stderr) -> int:
    """Serve the last checkpoint of `run_dir` until SIGTERM / Ctrl-C; returns 0. Errors a
    user can fix (no such run, a taken port) raise `RunError` (or the checkpoint's errors)."""
    cfg, _, params, header, _ = load_run(run_dir, device)
    name = model_name or f"hecate-{Path(run_dir).resolve().name}"
    sock = listen(host, port)
    bound = sock.getsockname()
    batcher = Batcher(params, cfg, max_batch=max_batch, max_waiting=max_waiting)
    info = {"run": str(Path(run_dir).resolve()), "step": header.get("step"), "device": device,
            "tokens": "bytes (vocab 256: each token is one byte of UTF-8)",
            "config": cfg.to_dict()}
    app = create_app(batcher, name, limits, info)
    config = uvicorn.Config(app, log_level=log_level, lifespan="on",
                            timeout_graceful_shutdown=max(1, round(shutdown_grace + 2)))
    server = _Server(config, lambda: batcher.begin_shutdown(shutdown_grace))

    def stop(sig: int, frame: Any) -> None:
        # Before uvicorn installs its own handlers, a stop signal still stops the server (it
        # exits right after starting); after a graceful shutdown uvicorn re-raises the signal
        # it caught, which lands here and changes nothing, so the exit status stays 0.
        server.handle_exit(sig, frame)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    print(f"hecate serve: model {name} (step {header.get('step')}) at http://{shown}:{bound[1]}"
          f"  (OpenAI API under /v1, web page at /; Ctrl-C or SIGTERM stops)", file=out,
          flush=True)
    try:
        server.run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()
    print("hecate serve: stopped", file=out, flush=True)
    return 0


__all__ = ["serve", "listen"]
