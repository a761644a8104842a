"""Continuous batching: one decode thread steps every running completion together.

`Batcher` owns a `models.serve.streams.StreamBatch` and a background thread. Each iteration
of its loop is one model step for all running jobs (at most ``max_batch``):

1. jobs submitted since the last step join (a fresh stream each), cancelled jobs leave;
2. every job contributes one input byte: its next prompt byte while its prompt is being fed
   (prefill shares the batched steps with the others' generation), else its last generated
   byte;
3. one `StreamBatch.step`; each job whose prompt is fully fed picks its next byte from its
   own row of logits with its own random generator (`models.serve.sampling.pick_token`);
4. finished jobs leave before the next step.

The HTTP side never blocks the loop: jobs publish text into their own outbox
(`models.serve.jobs.Job`). Requests beyond ``max_batch`` wait in a queue of at most
``max_waiting``; past that, `submit` raises `ServerBusy`.

Shutdown: `begin_shutdown(grace)` (safe to call from a signal handler: it only assigns
attributes) refuses new jobs and lets running ones finish for `grace` seconds; then the rest
end with finish reason ``"abort"``. `close` stops the thread.

>>> from models.config import ModelConfig
>>> from models.model import init_params
>>> cfg = ModelConfig(vocab=256, d_model=8, layers=1, window=4, seq_len=8)
>>> with Batcher(init_params(cfg, seed=0), cfg) as b:
...     job = b.submit(Job(b"hi", max_tokens=5, temperature=0))
...     _ = job.done.wait(30)
>>> job.finish_reason, len(job.generated)
('length', 5)
"""
from __future__ import annotations

import collections
import threading
import time
import traceback
from typing import Any, Optional

import numpy as np

from ..config import ModelConfig
from ..model import Params
from .jobs import Job
from .sampling import pick_token
from .streams import StreamBatch

IDLE_POLL_S = 0.05      # an idle loop's wait between looks at its flags (no busy waiting)


class ServerBusy(RuntimeError):
    """The batch and the waiting queue are full."""


class ServerClosing(RuntimeError):
    """The server is shutting down and takes no new requests."""


class Batcher:
    """The decode loop (see the module docstring). Use as a context manager, or call
    `start` and `close`."""

    def __init__(self, params: Params, cfg: ModelConfig, max_batch: int = 16,
                 max_waiting: int = 64) -> None:
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"Batcher: max_batch must be a positive int; got {max_batch!r}")
        if isinstance(max_waiting, bool) or not isinstance(max_waiting, int) or max_waiting < 0:
            raise ValueError(f"Batcher: max_waiting must be an int >= 0; got {max_waiting!r}")
        if cfg.vocab > 256:
            raise ValueError(f"Batcher: the server's tokens are bytes, and this model has "
                             f"vocab {cfg.vocab} > 256 (it could sample a token no byte "
                             "stands for); serve a model trained with vocab 256 or less")
        self.params, self.cfg = params, cfg
        self.max_batch, self.max_waiting = max_batch, max_waiting
        self._streams = StreamBatch(params, cfg)
        self._rows: list[Job] = []              # row i of the stream batch is _rows[i]
        self._waiting: collections.deque = collections.deque()
        self._cond = threading.Condition()
        self._thread: Optional[threading.Thread] = None
        self._stop = False
        self.closing = False                    # set by begin_shutdown
        self._deadline: Optional[float] = None
        self._counts = collections.Counter()
        self._batch_sizes = collections.Counter()   # batch size -> steps run at that size
        self._step_seconds = 0.0

    # -- life cycle ----------------------------------------------------------------------

    def start(self) -> "Batcher":
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="hecate-decode",
                                            daemon=True)
            self._thread.start()
        return self

    def begin_shutdown(self, grace: float) -> None:
        """Refuse new jobs; running and waiting ones get `grace` seconds to finish, then end
        with ``"abort"``. Only assigns attributes, so a signal handler may call it."""
        if self._deadline is None:
            self._deadline = time.monotonic() + max(0.0, float(grace))
        self.closing = True

    def close(self, timeout: float = 10.0) -> None:
        """Stop the loop (jobs still running end with ``"abort"``) and join the thread."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def __enter__(self) -> "Batcher":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- the HTTP side -------------------------------------------------------------------

    def submit(self, job: Job) -> Job:
        """Queue `job` to join the batch at the next step; raises `ServerClosing` during
        shutdown, `ServerBusy` when ``max_batch + max_waiting`` jobs are already in, and
        ValueError for a prompt byte outside the model's vocabulary (which would fail the
        step of every job in the batch)."""
        outside = [b for b in job.prompt if b >= self.cfg.vocab]
        if outside:
            raise ValueError(f"prompt byte {outside[0]} is outside the model's vocabulary "
                             f"[0, {self.cfg.vocab})")
        with self._cond:
            if self.closing or self._stop:
                raise ServerClosing("the server is shutting down")
            if len(self._rows) + len(self._waiting) >= self.max_batch + self.max_waiting:
                raise ServerBusy(f"{self.max_batch} requests running and {self.max_waiting} "
                                 f"waiting; retry later")
            self._waiting.append(job)
            self._counts["submitted"] += 1
            self._cond.notify_all()
        return job

    def stats(self) -> dict:
        """Counters for ``/health``: jobs by outcome, steps, bytes, and how many steps ran at
        each batch size."""
        with self._cond:
            counts = dict(self._counts)
            sizes = dict(sorted(self._batch_sizes.items()))
            running, waiting = len(self._rows), len(self._waiting)
        steps = sum(sizes.values())
        return {"running": running, "waiting": waiting, "max_batch": self.max_batch,
                "max_waiting": self.max_waiting, "steps": steps,
                "mean_batch_size": (sum(k * v for k, v in sizes.items()) / steps) if steps
                else 0.0,
                "max_batch_size_seen": max(sizes, default=0),
                "batch_size_steps": {str(k): v for k, v in sizes.items()},
                "step_seconds": round(self._step_seconds, 6),
                "requests": {k: counts.get(k, 0) for k in
                             ("submitted", "length", "stop", "abort", "cancelled", "error")},
                "prompt_tokens": counts.get("prompt_tokens", 0),
                "completion_tokens": counts.get("completion_tokens", 0)}

    # -- the decode thread ---------------------------------------------------------------

    def _end(self, job: Job, reason: str, error: Optional[str] = None) -> None:
        job.finish(reason, error)
        self._counts[job.finish_reason or reason] += 1

    def _admit(self) -> bool:
        """Move waiting jobs into the batch; False when the loop should exit."""
        with self._cond:
            while not (self._waiting or self._rows or self._stop):
                self._cond.wait(IDLE_POLL_S)
            if self._stop:
                return False
            joining = []
            while self._waiting and len(self._rows) + len(joining) < self.max_batch:
                joining.append(self._waiting.popleft())
        for job in joining:
            if job.cancelled:
                self._end(job, "cancelled")
            elif job.max_tokens <= 0:
                self._end(job, "length")
            else:
                self._streams.add()
                with self._cond:
                    self._rows.append(job)
        return True

    def _drop(self, leaving: set) -> None:
        """Remove the rows in `leaving` from the batch (their jobs already ended)."""
        if not leaving:
            return
        keep = [i for i in range(len(self._rows)) if i not in leaving]
        self._streams.keep(keep)
        with self._cond:
            self._rows = [self._rows[i] for i in keep]

    def _abort_all(self) -> None:
        with self._cond:
            waiting, self._waiting = list(self._waiting), collections.deque()
        for job in waiting + self._rows:
            self._end(job, "abort")
        self._drop(set(range(len(self._rows))))

    def _step(self) -> None:
        rows = self._rows
        tokens = np.array([job.next_input() for job in rows], dtype=np.int64)
        start = time.perf_counter()
        out = self._streams.step(tokens)
        logits = np.asarray(out.get() if hasattr(out, "get") else out, dtype=np.float64)
        self._step_seconds += time.perf_counter() - start
        leaving = set()
        for i, job in enumerate(rows):
            if job.fed <= len(job.prompt) and not job.generated:
                self._counts["prompt_tokens"] += 1
            if not job.wants_token():
                continue
            try:
                token = pick_token(logits[i], job.temperature, job.top_p, job.rng)
            except Exception as e:   # one job's own settings: it ends, the others go on
                self._end(job, "error", f"decoding failed: {type(e).__name__}: {e}")
                leaving.add(i)
                continue
            self._counts["completion_tokens"] += 1
            if job.accept(token):
                self._counts[job.finish_reason] += 1
                leaving.add(i)
        with self._cond:
            self._batch_sizes[len(rows)] += 1
        self._drop(leaving)

    def _loop(self) -> None:
        while self._admit():
            if self._deadline is not None and time.monotonic() >= self._deadline:
                self._abort_all()
                continue
            cancelled = {i for i, job in enumerate(self._rows) if job.cancelled}
            for i in cancelled:
                self._end(self._rows[i], "cancelled")
            self._drop(cancelled)
            if not self._rows:
                continue
            try:
                self._step()
            except Exception as e:   # a failed step ends its jobs, never the server
                message = f"decoding failed: {type(e).__name__}: {e}"
                traceback.print_exc()
                for job in self._rows:
                    self._end(job, "error", message)
                self._streams = StreamBatch(self.params, self.cfg)
                with self._cond:
                    self._rows = []
        self._abort_all()


__all__ = ["Batcher", "ServerBusy", "ServerClosing", "Job"]
