"""Data-parallel training probed where test_distributed.py (fakes) and test_distributed_mpi.py
(`mpiexec -n 2`, default options) do not reach: the training loop with active gradient
clipping, strong weight decay, a short warmup + cosine schedule, evaluations and step
snapshots, other rules / compositions / tasks and 3 or 4 ranks (ranks run as threads joined by
an in-process communicator, so these need no MPI); the step buffer on odd leaves; float32
under a real ``mpiexec``; and how errors every rank meets are reported."""
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import threading
import types
from pathlib import Path

import numpy as np
import pytest

from models.checkpoint import load_checkpoint
from models.config import ModelConfig
from models.distributed import (AgreedStop, DistributedError, MPIWorld, StepBuffer, World,
                                launcher_variable)
from models.train import TrainConfig, train
from tape import Active, Duplicated, Reverse, autodiff

ROOT = Path(__file__).resolve().parents[2]
CORPUS = b"def add(a, b):\n    return a + b\n\nprint(add(1, 2))\n" * 40
MPI = types.SimpleNamespace(IN_PLACE=object(), SUM="sum", COMM_TYPE_SHARED=1)


class _Hub:
    def __init__(self, size):
        self.size, self.slots = size, [None] * size
        self.barrier = threading.Barrier(size, timeout=60)


class ThreadComm:
    """Rank `rank` of the ranks sharing `hub`, each a thread: mpi4py's collectives (pickled
    broadcast and gather, in-place summing Allreduce, summed in rank order)."""

    def __init__(self, hub, rank):
        self.hub, self.rank = hub, rank

    def Get_size(self):
        return self.hub.size

    def Get_rank(self):
        return self.rank

    def _exchange(self, obj):
        self.hub.slots[self.rank] = obj
        self.hub.barrier.wait()
        got = list(self.hub.slots)
        self.hub.barrier.wait()
        return got

    def bcast(self, obj, root=0):
        got = self._exchange(obj)
        return obj if self.rank == root else pickle.loads(pickle.dumps(got[root]))

    def gather(self, obj, root=0):
        got = self._exchange(pickle.loads(pickle.dumps(obj)))
        return got if self.rank == root else None

    def Allreduce(self, inplace, buf, op):
        got = self._exchange(buf.copy())
        total = got[0].copy()
        for part in got[1:]:
            total += part
        buf[...] = total

    def Abort(self, code):
        raise SystemExit(code)


def run_ranks(size, fn):
    """``fn(world, rank)`` on `size` thread ranks; returns the results in rank order."""
    hub = _Hub(size)
    out, errors = [None] * size, [None] * size

    def go(rank):
        try:
            out[rank] = fn(MPIWorld(ThreadComm(hub, rank), MPI), rank)
        except BaseException as e:   # noqa: BLE001 - re-raised below
            errors[rank] = e
            hub.barrier.abort()

    threads = [threading.Thread(target=go, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for e in errors:
        if e is not None:
            raise e
    return out


def metrics(run):
    return [json.loads(line) for line in (Path(run) / "metrics.jsonl").read_text().splitlines()]


def assert_same_run(one, many, rtol):
    """Every metric of every step and every array of every checkpoint file agree."""
    ma, mb = metrics(one), metrics(many)
    assert [r["step"] for r in ma] == [r["step"] for r in mb]
    for key in ("loss", "objective", "grad_norm", "lr", "val_loss"):
        a = [r[key] for r in ma]
        b = [r[key] for r in mb]
        assert [x is None for x in a] == [x is None for x in b], key
        np.testing.assert_allclose([x for x in b if x is not None],
                                   [x for x in a if x is not None], rtol=rtol, atol=0,
                                   err_msg=key)
    names = sorted(p.name for p in (Path(one) / "checkpoints").iterdir())
    assert names == sorted(p.name for p in (Path(many) / "checkpoints").iterdir())
    for name in names:
        (xa, ha), (xb, hb) = (load_checkpoint(Path(r) / "checkpoints" / name)
                              for r in (one, many))
        assert ha["step"] == hb["step"] and ha["data_state"] == hb["data_state"]
        assert sorted(xa) == sorted(xb)
        for k in xa:
            scale = max(float(np.abs(xa[k]).max(initial=0.0)), 1e-300)
            np.testing.assert_allclose(xb[k], xa[k], rtol=rtol, atol=rtol * scale,
                                       err_msg=f"{name}: {k}")


def one_and_many(cfg, tcfg, size):
    """The run directory of one process and of `size` thread ranks, and the ranks' losses."""
    root = Path(tempfile.mkdtemp())
    kw = dict(progress=False, out=None, corpus=CORPUS)
    one = train(cfg, tcfg, root / "one", world=World(), **kw)
    results = run_ranks(size, lambda world, rank: train(cfg, tcfg, root / "many", world=world,
                                                        **kw))
    assert all(r.losses == results[0].losses for r in results)   # every rank logs the same
    assert len(one.losses) == len(results[0].losses) == tcfg.steps
    return root / "one", root / "many"


TINY = dict(d_model=8, layers=1, window=4, seq_len=8, dtype="float64")
QUICK = dict(steps=4, batch_size=4, sample_bytes=0, checkpoint_minutes=0, final_eval_batches=2,
             eval_batches=2, eval_every=2, ckpt_every=2)


def test_clipping_weight_decay_schedule_and_evaluations_under_sharding():
    # clip far below the gradient norm: each rank's shard norm differs from the global one, so
    # a per-shard clip would show in grad_norm and in the parameters
    tcfg = TrainConfig(**QUICK, clip=0.05, weight_decay=0.5, warmup=1, lr=0.05)
    one, many = one_and_many(ModelConfig(**TINY, levels=2), tcfg, 2)
    assert all(r["grad_norm"] > 10 * tcfg.clip for r in metrics(one))
    assert len({r["lr"] for r in metrics(one)}) >= 3   # warmup, then the cosine decay
    assert sum(r["val_loss"] is not None for r in metrics(one)) == 2
    assert_same_run(one, many, rtol=1e-11)


@pytest.mark.parametrize("size, model, train_cfg", [
    (3, dict(levels=3, heads=2, rule="titans", composition="MAL"), dict(batch_size=6)),
    (4, dict(levels=1, seq_len=32, heads=1), dict(task="recall", batch_size=4)),
], ids=["titans-MAL-3-levels-3-ranks", "recall-4-ranks-one-row-each"])
def test_other_models_tasks_and_rank_counts(size, model, train_cfg):
    cfg = ModelConfig(**{**TINY, **model})
    tcfg = TrainConfig(**{**QUICK, "steps": 2, "clip": 0.1, "warmup": 1, "lr": 0.02,
                          **train_cfg})
    one, many = one_and_many(cfg, tcfg, size)
    assert_same_run(one, many, rtol=1e-11)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_step_buffer_means_over_odd_leaves(dtype):
    # a 0-d leaf, an empty one, a Fortran-ordered one, a [1, 1, 5] one; rank r scales them
    def params(rank):
        return {"s": np.array(2.0 + rank, dtype=dtype), "e": np.zeros((0, 3), dtype=dtype),
                "f": np.asfortranarray(np.arange(6, dtype=dtype).reshape(2, 3) * (rank + 1)),
                "o": np.ones((1, 1, 5), dtype=dtype)}

    def step(world, rank):
        p = params(rank)
        buf = StepBuffer(p, world)
        autodiff(Reverse, lambda q: q["s"] ** 2 + np.sum(q["f"] ** 2) + np.sum(q["o"] * q["s"])
                 + np.sum(q["e"]), Active, Duplicated(p, buf.grads))
        clock = types.SimpleNamespace(timer_expired=lambda: False)
        reduced = buf.reduce(1.0 + rank, 0.5 * (rank + 1), AgreedStop(
            types.SimpleNamespace(signum=None)), clock)
        return reduced, {k: np.array(v) for k, v in buf.grads.items()}, buf.flat.dtype

    out = run_ranks(2, step)
    grads = [out[r][1] for r in range(2)]
    assert out[0][2] == dtype and out[0][0] == out[1][0] == (1.5, 0.75, False)
    # the mean of both ranks' gradients, as plain NumPy computes them
    expect = {"s": np.mean([2 * (2.0 + r) + 5 for r in range(2)]), "e": np.zeros((0, 3)),
              "f": np.mean([2 * np.arange(6.0).reshape(2, 3) * (r + 1) for r in range(2)], 0),
              "o": np.mean([np.full((1, 1, 5), 2.0 + r) for r in range(2)], 0)}
    for g in grads:
        for k, v in expect.items():
            assert g[k].dtype == dtype and g[k].shape == np.shape(v)
            np.testing.assert_allclose(g[k], v, rtol=1e-6, atol=1e-6)
        assert g.keys() == expect.keys()


class _Sized:
    def __init__(self, rank, size):
        self.rank, self.size = rank, size

    def Get_rank(self):
        return self.rank

    def Get_size(self):
        return self.size


def test_more_ranks_than_rows_suggests_two_different_batches():
    world = MPIWorld(_Sized(0, 3), MPI)
    with pytest.raises(DistributedError) as e:
        world.rows(2)
    assert "(e.g. 3 or 6)" in str(e.value), str(e.value)


# ---- under a real mpiexec ----------------------------------------------------------------

try:
    import mpi4py  # noqa: F401
    HAVE_MPI4PY = True
except ImportError:
    HAVE_MPI4PY = False
MPIEXEC = next((str(p) for p in (Path(sys.executable).parent / "mpiexec",) if p.exists()),
               shutil.which("mpiexec"))
needs_mpiexec = pytest.mark.skipif(MPIEXEC is None or not HAVE_MPI4PY,
                                   reason="no mpiexec / mpi4py (pip install -e "
                                          "'.[distributed]')")
CLI_TINY = ["--d-model", "8", "--layers", "1", "--window", "4", "--seq-len", "8", "--levels",
            "2", "--batch-size", "4", "--no-progress"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    f = tmp_path_factory.mktemp("data") / "corpus.txt"
    f.write_bytes(CORPUS)
    return f


def hecate(ranks, *args, timeout=60):
    env = {k: v for k, v in os.environ.items() if launcher_variable({k: v}) is None}
    one = [sys.executable, "-m", "models.cli", "train", *map(str, args)]
    cmd = one if ranks == 1 else [MPIEXEC, "-n", str(ranks), *one]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def error_lines(proc):
    return [line for line in proc.stderr.splitlines() if "error" in line.lower()]


@needs_mpiexec
def test_float32_two_ranks_match_one_process_to_float32_rounding(corpus, tmp_path):
    # the default dtype: the flat buffer and the allreduce are float32 (MPI_FLOAT)
    args = ["--data", corpus, "--steps", "3", *CLI_TINY]
    one = hecate(1, "--run-dir", tmp_path / "one", *args)
    two = hecate(2, "--run-dir", tmp_path / "two", *args)
    assert one.returncode == 0 and two.returncode == 0, one.stderr + two.stderr
    (xa, _), (xb, _) = (load_checkpoint(tmp_path / r / "checkpoints" / "last.npz")
                        for r in ("one", "two"))
    assert xa["params/params.embed"].dtype == np.float32
    ma, mb = metrics(tmp_path / "one"), metrics(tmp_path / "two")
    for key in ("loss", "objective", "grad_norm"):
        np.testing.assert_allclose([r[key] for r in mb], [r[key] for r in ma], rtol=2e-6,
                                   atol=0, err_msg=key)
    for k in xa:
        scale = max(float(np.abs(xa[k]).max(initial=0.0)), 1e-30)
        np.testing.assert_allclose(xb[k], xa[k], rtol=1e-4, atol=1e-5 * scale, err_msg=k)


@needs_mpiexec
def test_a_bad_flag_under_mpiexec_is_reported_once(tmp_path):
    proc = hecate(2, "--run-dir", tmp_path / "r", "--steps", "0", timeout=30)
    assert proc.returncode == 2
    assert error_lines(proc) == ["hecate train: error: argument --steps: must be a positive "
                                 "integer, got 0"], proc.stderr


@needs_mpiexec
def test_a_data_file_missing_everywhere_is_one_line(tmp_path):
    missing = tmp_path / "nowhere.txt"
    one = hecate(1, "--run-dir", tmp_path / "one", "--data", missing, "--steps", "1", *CLI_TINY)
    two = hecate(2, "--run-dir", tmp_path / "two", "--data", missing, "--steps", "1", *CLI_TINY,
                 timeout=30)
    assert one.returncode == two.returncode == 2
    assert error_lines(one) == [f"hecate train: error: data file not found: {missing}"]
    assert error_lines(two) == error_lines(one), two.stderr
