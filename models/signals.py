"""Graceful stops for a training run: SIGTERM and the first SIGINT (Ctrl-C) ask the loop to stop
at the next step boundary (it then writes a checkpoint and says how to resume); a second SIGINT
raises `KeyboardInterrupt` at once, wherever the program is, so it exits without waiting for the
step (an unfinished checkpoint write is abandoned, which leaves the previous one intact).

The exit status of a stopped run follows the shell convention, 128 + the signal number: 130
for SIGINT, 143 for SIGTERM. The previous handlers are put back when the block ends, so
training called as a library function leaves the caller's handlers as they were.

>>> import os, signal
>>> with StopSignals() as stop:
...     os.kill(os.getpid(), signal.SIGTERM)
...     stop.requested, stop.exit_code, stop.name
(True, 143, 'SIGTERM')
"""
from __future__ import annotations

import signal
from types import FrameType
from typing import Any, Optional

NAMES = {signal.SIGINT: "Ctrl-C (SIGINT)", signal.SIGTERM: "SIGTERM"}


class StopRequest:
    """What a training loop reads of a stop: the signal (``signum``, None until one came), and
    from it `requested`, `exit_code` and `name`."""

    signum: Optional[int] = None

    @property
    def requested(self) -> bool:
        """True once SIGTERM or SIGINT arrived."""
        return self.signum is not None

    @property
    def exit_code(self) -> Optional[int]:
        """128 + the first signal's number (130 for SIGINT, 143 for SIGTERM), or None."""
        return None if self.signum is None else 128 + int(self.signum)

    @property
    def name(self) -> str:
        return NAMES.get(self.signum, str(self.signum)) if self.signum else ""


class StopSignals(StopRequest):
    """A context manager that installs the stop handlers for SIGINT and SIGTERM (only in the
    main thread; elsewhere it does nothing) and restores the previous ones on exit."""

    def __init__(self) -> None:
        self.signum: Optional[int] = None
        self._previous: dict = {}

    def _handle(self, signum: int, frame: Optional[FrameType]) -> None:
        if signum == signal.SIGINT and self.signum is not None:
            raise KeyboardInterrupt   # the second Ctrl-C: stop now
        if self.signum is None:
            self.signum = signum

    def __enter__(self) -> "StopSignals":
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:   # not the main thread: signals stay with their owner
                break
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, old in self._previous.items():
            # None: a handler installed from C, which Python cannot reinstate; the default is
            # the closest.
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
        self._previous.clear()


__all__ = ["StopSignals"]
