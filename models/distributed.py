"""Data-parallel training on MPI: ``mpiexec -n N hecate train`` trains the same model as one
process, with every global batch split by rows over the N ranks.

The world is found, never asked for: `current_world` looks for the variables an MPI launcher
sets in each process it starts (`LAUNCHER_VARIABLES`: MPICH/Hydra and Intel MPI's
``PMI_RANK``, Open MPI's ``OMPI_COMM_WORLD_SIZE``, PMIx, MVAPICH). Only then is mpi4py imported
(importing it calls ``MPI_Init``); a plain ``hecate train`` gets the one-process `World`, whose
methods are the same calls doing nothing, so the training loop has one code path.

What each rank holds (docs/distributed.md has the whole design):

* replicated: parameters (broadcast from rank 0 at the start, `share_start`), AdamW moments,
  the data generator (every rank draws the whole global batch exactly as one process does and
  keeps its rows, `World.rows`), the step and the stop decision;
* sharded: the batch rows and their recurrent memory state (row ``r * B/N + i`` of the global
  batch lives on rank ``r``, and so does its memory);
* reduced: one in-place allreduce per step over one flat buffer (`StepBuffer`) holding every
  gradient leaf (the leaves are views into it, so the reverse sweep accumulates straight into
  it), the loss, the objective, each rank's signal flags and rank 0's checkpoint timer;
* gathered: at a checkpoint, every rank's memory rows go to rank 0 (`gather_state`), which
  writes a checkpoint equal to one process's, so ``--resume`` works with any rank count.

Every rank draws the same global batch and divides the same allreduced sum by N, so all ranks
hold bit-identical gradients, clip them by the same global norm and take the same AdamW step.
The loss is a mean over rows and tokens (the cross-entropy and the gate penalty both), so the
mean of the ranks' means is the one-process loss up to the order of the sums.

An error on any rank (`World.guard`) prints one line naming the rank and calls ``MPI_Abort``,
which ends every rank at once; an error every rank raises identically (a batch that does not
divide, a non-finite loss) is reported once by rank 0 (`World.agreed`). With ``--device gpu``
each rank takes its node-local GPU and the allreduce goes through NCCL (`models.nccl`).

>>> world = World()
>>> world.size, world.rank, world.rows(8)
(1, 0, slice(0, 8, None))
>>> world.broadcast({"seed": 3})
{'seed': 3}
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import sys
import time
import traceback
from typing import Any, Callable, Iterator, Optional

import numpy as np

from tape import array_module
from tape.pytree import flatten, flatten_with_paths, unflatten

from .checkpoint import CheckpointFileError, fill_tree, to_numpy
from .data import DataError, data_mismatch
from .rundir import RunError
from .signals import StopRequest

# Set by MPI launchers in each process they start: (variable, what sets it).
LAUNCHER_VARIABLES = (
    ("PMI_RANK", "MPICH / Intel MPI (Hydra) or Slurm PMI2"),
    ("PMI_SIZE", "MPICH / Intel MPI (Hydra) or Slurm PMI2"),
    ("OMPI_COMM_WORLD_SIZE", "Open MPI"),
    ("PMIX_RANK", "PMIx (Open MPI 5, srun --mpi=pmix)"),
    ("MV2_COMM_WORLD_SIZE", "MVAPICH"),
    ("MPI_LOCALRANKID", "MPICH (Hydra)"),
)
# Where each launcher puts the rank and the world size (before MPI_Init can say).
_RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK")
_SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
_EXPECTED = (DataError, CheckpointFileError, RunError)
_ABORT_GRACE_S = 0.3
INSTALL_HINT = 'pip install -e ".[distributed]"'


class DistributedError(RunError):
    """The MPI world cannot be used (mpi4py missing under a launcher, a batch that does not
    split, ranks that disagree)."""


def launcher_variable(environ: Optional[dict] = None) -> Optional[str]:
    """The first `LAUNCHER_VARIABLES` entry set in `environ` (default ``os.environ``): the
    sign that an MPI launcher started this process; None for a plain run.

    >>> launcher_variable({"PMI_RANK": "1", "PMI_SIZE": "2"}), launcher_variable({})
    ('PMI_RANK', None)
    """
    environ = os.environ if environ is None else environ
    return next((name for name, _ in LAUNCHER_VARIABLES if name in environ), None)


def launcher_rank(environ: Optional[dict] = None) -> int:
    """This process's rank as its MPI launcher set it, before MPI is started (0 for a plain
    run): the command line's messages (a bad flag, ``--help``) come from rank 0 alone.

    >>> launcher_rank({"PMI_RANK": "1", "PMI_SIZE": "2"}), launcher_rank({})
    (1, 0)
    """
    environ = os.environ if environ is None else environ
    return _env_int(environ, _RANK_VARIABLES) or 0


def _env_int(environ: dict, names: tuple) -> Optional[int]:
    for name in names:
        try:
            return int(environ[name])
        except (KeyError, ValueError):
            continue
    return None


def exit_code_of(error: BaseException) -> int:
    """The exit status `hecate` gives an error: 2 for expected ones, 130 for an interruption,
    1 for anything else."""
    if isinstance(error, KeyboardInterrupt):
        return 130
    return 2 if isinstance(error, _EXPECTED) else 1


def one_line(error: BaseException) -> str:
    """The error as `hecate`'s one-line message (type named for unexpected errors)."""
    text = " ".join(str(error).split())
    if isinstance(error, KeyboardInterrupt):
        return "interrupted"
    if isinstance(error, _EXPECTED):
        return text
    return f"{type(error).__name__}: {text} (unexpected: run with --debug for the traceback)"


class World:
    """One process: rank 0 of 1. Every collective returns its input; `MPIWorld` has the same
    methods over MPI."""

    size = 1
    rank = 0
    local_rank = 0
    allreduce_seconds = 0.0   # time spent in the step allreduce (benchmarks read it)

    @property
    def is_root(self) -> bool:
        """Whether this rank alone writes the run directory and prints (rank 0)."""
        return self.rank == 0

    def describe(self) -> str:
        return "1 process"

    def rows(self, batch: int) -> slice:
        """The rows of a global batch of `batch` rows that belong to this rank; a batch that
        does not divide by the rank count is a `DistributedError` (every rank finds it, so it
        is `agreed`: one line from rank 0, exit status 2).

        >>> World().rows(6)
        slice(0, 6, None)
        """
        if batch % self.size:
            upper = batch + self.size - batch % self.size
            lower = batch - batch % self.size or upper + self.size   # two different choices
            raise self.agreed(DistributedError(
                f"--batch-size {batch} does not divide over {self.size} MPI ranks: the global "
                f"batch is split evenly by rows; use a multiple of {self.size} (e.g. "
                f"{min(lower, upper)} or {max(lower, upper)}), or run on a number of ranks "
                f"that divides {batch}"))
        per = batch // self.size
        return slice(self.rank * per, (self.rank + 1) * per)

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank (pickled)."""
        return obj

    def gather(self, obj: Any) -> Optional[list]:
        """Every rank's `obj` in rank order on rank 0; None on the others."""
        return [obj]

    def allreduce_sum_(self, flat: Any) -> None:
        """Sum `flat` (one contiguous NumPy or CuPy array) over the ranks, in place."""

    def bind_device(self, device: str) -> None:
        """Before any GPU array exists: make this rank's node-local GPU the current one."""

    def from_root(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` computed on rank 0 alone (it may read the run directory) and broadcast;
        an error it raises is reported once by rank 0 (`agreed`)."""
        return fn()

    def agreed(self, error: BaseException) -> BaseException:
        """The exception to raise for an error every rank meets at the same point: the error
        itself on rank 0 (reported as usual), a quiet `SystemExit` with the same status on the
        others."""
        if self.is_root:
            error.hecate_agreed = True   # type: ignore[attr-defined]
            return error
        return SystemExit(exit_code_of(error))

    @contextlib.contextmanager
    def guard(self, command: str, debug: bool = False) -> Iterator[None]:
        """Around a command: an error on one rank ends every rank (`MPIWorld.guard`)."""
        yield

    def stop_view(self, stop: Any) -> Any:
        """The stop request the loop reads: the process's own signals here, the one agreed
        over the ranks in `MPIWorld`."""
        return stop


class MPIWorld(World):
    """``MPI.COMM_WORLD`` of mpi4py; `comm` is any object with mpi4py's communicator methods
    (the tests pass a fake)."""

    def __init__(self, comm: Any, mpi: Any = None):
        self.comm, self.mpi = comm, mpi
        self.size, self.rank = comm.Get_size(), comm.Get_rank()
        self.local_rank = self._local_rank()
        self.allreduce_seconds = 0.0
        self._nccl: Any = None
        self.hard_exit: Callable[[int], Any] = os._exit

    def _local_rank(self) -> int:
        """This rank's index among the ranks on its node (MPI's shared-memory split)."""
        if self.mpi is None or not hasattr(self.comm, "Split_type"):
            return _env_int(os.environ, ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK",
                                         "MV2_COMM_WORLD_LOCAL_RANK")) or 0
        node = self.comm.Split_type(self.mpi.COMM_TYPE_SHARED)
        try:
            return int(node.Get_rank())
        finally:
            node.Free()

    def describe(self) -> str:
        return f"{self.size} MPI ranks"

    def broadcast(self, obj: Any) -> Any:
        return self.comm.bcast(obj, root=0)

    def gather(self, obj: Any) -> Optional[list]:
        return self.comm.gather(obj, root=0)

    def allreduce_sum_(self, flat: Any) -> None:
        t0 = time.perf_counter()
        if isinstance(flat, np.ndarray):
            self.comm.Allreduce(self.mpi.IN_PLACE, flat, op=self.mpi.SUM)
        else:   # a CuPy array: NCCL, set up at the first call
            if self._nccl is None:
                from .nccl import NcclSum
                self._nccl = NcclSum(self)
            self._nccl.allreduce_sum_(flat)
        self.allreduce_seconds += time.perf_counter() - t0

    def bind_device(self, device: str) -> None:
        if device == "gpu":
            from .nccl import use_local_gpu
            use_local_gpu(self.local_rank)

    def from_root(self, fn: Callable[[], Any]) -> Any:
        outcome: Any = None
        error: Optional[Exception] = None
        if self.is_root:
            try:
                outcome = ("ok", fn())
            except Exception as e:   # noqa: BLE001 - every rank learns of it, rank 0 reports
                error, outcome = e, ("error", exit_code_of(e))
        kind, value = self.broadcast(outcome)
        if kind == "error":
            raise self.agreed(error) if error is not None else SystemExit(value)
        return value

    @contextlib.contextmanager
    def guard(self, command: str, debug: bool = False) -> Iterator[None]:
        """An exception that leaves the block on one rank (other than an `agreed` one) is
        printed as one line naming the rank (the traceback with `debug`) and ends every rank
        through ``MPI_Abort`` with `exit_code_of` it: the other ranks may be waiting in a
        collective that would never complete."""
        try:
            yield
        except SystemExit:
            raise
        except BaseException as e:
            if self.size == 1 or getattr(e, "hecate_agreed", False):
                raise   # nobody waits for this rank (`mpiexec -n 1`), or all ranks met it
            if debug:
                traceback.print_exc()
            print(f"hecate {command}: error: rank {self.rank} of {self.size}: {one_line(e)}",
                  file=sys.stderr, flush=True)
            # The launcher stops forwarding output once a rank aborts; give the line time to
            # reach it (without the pause it was sometimes lost, leaving exit 2 and no reason).
            time.sleep(_ABORT_GRACE_S)
            # The launcher ends the ranks with SIGTERM: the stop handlers must not catch it.
            _default_signal_handlers()
            self.comm.Abort(exit_code_of(e))
            self.hard_exit(exit_code_of(e))   # never run Python code after an abort
            raise   # only reached with a test's fake `hard_exit`

    def stop_view(self, stop: Any) -> Any:
        return stop if self.size == 1 else AgreedStop(stop)


def _default_signal_handlers() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            signal.signal(sig, signal.SIG_DFL)
        except ValueError:   # not the main thread
            break


class AgreedStop(StopRequest):
    """The stop request all ranks act on: the signals each rank received (`flags`) are summed
    in the step's allreduce and `agree`d, so every rank stops after the same step; SIGTERM
    wins over SIGINT when both arrived. Reads like `models.signals.StopSignals`."""

    def __init__(self, local: Any):
        self.local = local
        self.signum: Optional[int] = None

    def flags(self) -> tuple:
        """``(1 if SIGINT arrived here, 1 if SIGTERM arrived here)``."""
        mine = self.local.signum
        return float(mine == signal.SIGINT), float(mine == signal.SIGTERM)

    def agree(self, sigint_ranks: float, sigterm_ranks: float) -> None:
        if self.signum is None and sigterm_ranks > 0:
            self.signum = signal.SIGTERM
        elif self.signum is None and sigint_ranks > 0:
            self.signum = signal.SIGINT


class StepBuffer:
    """One flat array per run: every gradient leaf of `params` as a view into it (`grads`, the
    shadow `autodiff` accumulates into), then `TAIL` scalars. `reduce` turns this rank's
    gradients and losses into the mean over the ranks with one allreduce.

    >>> p = {"w": np.ones((2, 2)), "b": np.ones(3)}
    >>> buf = StepBuffer(p, World())
    >>> buf.flat.shape, buf.grads["w"].base is buf.flat
    ((12,), True)
    >>> buf.reduce(1.5, 1.75, None, None)   # one process: the values as they are
    (1.5, 1.75, None)
    """

    # [loss, objective, ranks that got SIGINT, ranks that got SIGTERM, rank 0's timer is due]
    TAIL = 5

    def __init__(self, params: Any, world: World):
        leaves, treedef = flatten(params)
        xp = array_module(leaves[0])
        dtype = np.result_type(*[leaf.dtype for leaf in leaves])
        sizes = [int(np.prod(leaf.shape)) for leaf in leaves]
        self.flat = xp.zeros(sum(sizes) + self.TAIL, dtype=dtype)
        self.n_grads = sum(sizes)
        views, offset = [], 0
        for leaf, n in zip(leaves, sizes):
            views.append(self.flat[offset:offset + n].reshape(leaf.shape))
            offset += n
        self.grads = unflatten(treedef, views)
        self.world = world

    def reduce(self, loss: float, objective: float, stop: Any, checkpointer: Any) -> tuple:
        """Average the gradients (in place), `loss` and `objective` over the ranks, agree on
        the stop request and on rank 0's checkpoint timer; returns ``(loss, objective, timer
        due)``, the timer None with one process (the checkpointer decides by itself)."""
        world = self.world
        if world.size == 1:
            return loss, objective, None
        timer = float(world.is_root and checkpointer.timer_expired())
        tail = np.array([loss, objective, *stop.flags(), timer], dtype=self.flat.dtype)
        self.flat[self.n_grads:] = array_module(self.flat).asarray(tail)
        world.allreduce_sum_(self.flat)
        # Every rank divides the same sum by the same count: bit-identical means everywhere.
        self.flat[:self.n_grads + 2] /= world.size
        tail = to_numpy(self.flat[self.n_grads:])
        stop.agree(float(tail[2]), float(tail[3]))
        return float(tail[0]), float(tail[1]), bool(tail[4] > 0)


def current_world(environ: Optional[dict] = None) -> World:
    """The world this process runs in, found once: `MPIWorld` when an MPI launcher started
    it (`launcher_variable`), else the one-process `World`. Under a launcher without mpi4py,
    a one-rank launch runs as one process and a larger one is a `DistributedError` that says
    what to install (reported by rank 0 only).

    >>> current_world({}).size
    1
    """
    global _WORLD
    if environ is None and _WORLD is not None:
        return _WORLD
    env = os.environ if environ is None else environ
    variable = launcher_variable(env)
    if variable is None:
        world: World = World()
    else:
        try:
            from mpi4py import MPI   # MPI_Init happens here
        except ImportError:
            size, rank = _env_int(env, _SIZE_VARIABLES), launcher_rank(env)
            if size == 1:
                world = World()
            elif rank:
                raise SystemExit(2) from None   # rank 0 says it
            else:
                raise DistributedError(f"started by an MPI launcher ({variable} is set) but "
                                       f"mpi4py is not installed: {INSTALL_HINT}") from None
        else:
            world = MPIWorld(MPI.COMM_WORLD, MPI)
    if environ is None:
        _WORLD = world
    return world


_WORLD: Optional[World] = None


def share_start(world: World, params: Any, opt: Any, state: Any, start: int, data: Any,
                xp: Any) -> tuple:
    """Everything a step depends on, made equal to rank 0's on every rank: parameters, AdamW
    moments and step, the global memory state, the step and the data generator. Returns
    ``(params, opt, state, start)``; rank 0's own objects come back unchanged."""
    if world.size == 1:
        return params, opt, state, start
    from .runstate import state_arrays
    package = None
    if world.is_root:
        arrays = {k: to_numpy(v) for k, v in state_arrays(params, opt, state).items()}
        package = (arrays, {"start": start, "opt_step": opt.t, "data_state": data.state(),
                            "data": data.describe()})
    arrays, meta = world.broadcast(package)
    if world.is_root:
        return params, opt, state, start
    mismatch = data_mismatch(meta["data"], data.describe())
    if mismatch:   # each rank reads the data itself: another node may hold another file
        raise DistributedError(f"rank {world.rank} reads other training data than rank 0 "
                               f"({mismatch.replace('the checkpoint', 'rank 0')}): every node "
                               f"needs the same data file")
    source = "rank 0's start"
    params = fill_tree(params, arrays, "params", "params", source, xp)
    state = fill_tree(state, arrays, "state", "state", source, xp)
    opt.load_state_arrays({k[4:]: v for k, v in arrays.items() if k.startswith("opt/")},
                          meta["opt_step"])
    data.set_state(meta["data_state"])
    return params, opt, state, int(meta["start"])


def local_rows(world: World, state: Any, batch: int) -> Any:
    """This rank's rows of a global memory `state` (every array leaf has the batch first)."""
    if world.size == 1:
        return state
    rows = world.rows(batch)
    leaves, treedef = flatten(state)
    return unflatten(treedef, [leaf[rows] if np.ndim(leaf) >= 1 else leaf for leaf in leaves])


def params_digest(params: Any) -> str:
    """SHA-256 of every parameter's bytes: equal on all ranks while they train in step."""
    h = hashlib.sha256()
    for leaf in flatten(params)[0]:
        h.update(np.ascontiguousarray(to_numpy(leaf)).tobytes())
    return h.hexdigest()


def gather_state(world: World, state: Any, params: Any) -> Any:
    """The global memory state on rank 0 (each array leaf the ranks' rows in rank order, as
    one process holds them), None on the others. Rank 0 also checks that every rank holds the
    same parameters, so a divergence is an error at the first checkpoint, never a silently
    wrong model."""
    if world.size == 1:
        return state
    leaves, _, treedef = flatten_with_paths(state)
    host = [to_numpy(leaf) if np.ndim(leaf) >= 1 else leaf for leaf in leaves]
    parts = world.gather((host, params_digest(params)))
    if parts is None:
        return None
    digests = [digest for _, digest in parts]
    differing = [r for r, d in enumerate(digests) if d != digests[0]]
    if differing:
        raise DistributedError(f"the parameters of rank(s) {differing} differ from rank 0's: "
                               f"the ranks no longer train the same model (a non-deterministic "
                               f"allreduce or a different NumPy build?); the last checkpoint is "
                               f"kept")
    xp = next((array_module(leaf) for leaf in leaves if np.ndim(leaf) >= 1), np)
    merged = []
    for i, leaf in enumerate(leaves):
        if np.ndim(leaf) >= 1:
            merged.append(xp.asarray(np.concatenate([part[0][i] for part in parts], axis=0)))
        else:
            merged.append(leaf)
    return unflatten(treedef, merged)


class NullLog:
    """The metrics file of a rank other than 0: writes go nowhere."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


__all__ = ["World", "MPIWorld", "AgreedStop", "StepBuffer", "DistributedError",
           "current_world", "launcher_variable", "share_start", "local_rows", "gather_state",
           "params_digest", "exit_code_of", "one_line", "NullLog", "LAUNCHER_VARIABLES"]
