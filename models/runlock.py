"""One trainer per run directory: a lock file ``<run>/hecate.lock`` holding the owner's PID,
host and start time (JSON), created with ``O_CREAT | O_EXCL`` so two processes can never both
create it.

A second `hecate train` on a locked directory is refused with the owner's PID. A lock whose
process is gone (its PID is not alive, or is a zombie, on this host) is stale: it is taken over
with a note. A lock from another host is never judged (its PID means nothing here): the message
says how to remove it by hand. The lock is released when training returns or is interrupted
(``finally``); only a SIGKILL or a power cut leaves it, and then it is stale.

>>> import tempfile
>>> d = tempfile.mkdtemp()
>>> with RunLock(d) as lock:
...     RunLock(d).acquire()  # doctest: +ELLIPSIS
Traceback (most recent call last):
    ...
models.runlock.LockError: ...
"""
from __future__ import annotations

import datetime
import json
import os
import socket
import time
from pathlib import Path
from typing import Any, Optional

from .rundir import RunError, disk_error

LOCK = "hecate.lock"
_EMPTY_GRACE_S = 10.0   # an empty lock younger than this may be mid-creation


class LockError(RunError):
    """The run directory is in use by another process (or its lock cannot be created)."""


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists on this host and is not a zombie."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # exists, owned by someone else
        return True
    except OSError:
        return False
    try:   # Linux: a zombie (exited, not yet reaped) holds nothing
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2] != "Z"
    except (OSError, ValueError, IndexError):
        return True


class RunLock:
    """The lock of one run directory; `acquire` returns a note when a stale lock was taken
    over (else None); `release` removes the file if it is still ours."""

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / LOCK
        self.held = False
        self._mine = {"pid": os.getpid(), "host": socket.gethostname()}

    def _create(self) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        except OSError as e:
            raise LockError(str(disk_error(e, f"the lock file {self.path}",
                                           "nothing was changed",
                                           "run the same command again"))) from None
        stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        with os.fdopen(fd, "w") as f:
            json.dump({**self._mine, "started": stamp}, f)
        self.held = True
        return True

    def _owner(self) -> Optional[dict]:
        try:
            owner = json.loads(self.path.read_text())
            return owner if isinstance(owner, dict) and "pid" in owner else None
        except (OSError, ValueError):
            return None

    def acquire(self) -> Optional[str]:
        """Take the lock, or raise `LockError` naming the process that holds it."""
        note = None
        for _ in range(3):   # a lock removed between our attempts: try again
            if self._create():
                return note
            owner = self._owner()
            if owner is None:
                try:
                    age = time.time() - self.path.stat().st_mtime
                except FileNotFoundError:
                    continue
                if age < _EMPTY_GRACE_S:
                    raise LockError(f"run directory {self.path.parent} is being locked by "
                                    f"another process ({self.path} is empty and new); try "
                                    f"again in a few seconds")
                note = f"note: took over the unreadable lock file {self.path}"
            else:
                pid, host = int(owner.get("pid", -1)), owner.get("host")
                where = f"PID {pid}" + (f" on host {host}" if host != self._mine["host"]
                                        else "")
                if host != self._mine["host"]:
                    raise LockError(f"run directory {self.path.parent} is in use by {where} "
                                    f"(lock {self.path}); if that process is gone, delete the "
                                    f"lock file, or pass another --run-dir")
                if pid_alive(pid):
                    since = owner.get("started", "?")
                    raise LockError(f"run directory {self.path.parent} is in use by PID {pid} "
                                    f"(since {since}; lock {self.path}): wait for it to end, "
                                    f"stop it (kill -TERM {pid}), or pass another --run-dir")
                note = (f"note: took over the stale lock {self.path} of PID {pid}, which is "
                        f"no longer running")
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
        raise LockError(f"could not lock run directory {self.path.parent}: {self.path} keeps "
                        f"coming back; is another trainer starting there?")

    def release(self) -> None:
        """Remove the lock file if this process still owns it."""
        if not self.held:
            return
        self.held = False
        owner = self._owner()
        if owner is not None and owner.get("pid") == self._mine["pid"] \
                and owner.get("host") == self._mine["host"]:
            try:
                os.unlink(self.path)
            except OSError:
                pass

    def __enter__(self) -> "RunLock":
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


__all__ = ["RunLock", "LockError", "LOCK", "pid_alive"]
