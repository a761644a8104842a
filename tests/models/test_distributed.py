"""`models.distributed` and `models.nccl` in one process: launcher detection, the one-process
world, and the MPI and NCCL paths against fake communicators (the runs under a real
``mpiexec -n 2`` are in test_distributed_mpi.py)."""
import os
import signal
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from models import distributed, nccl
from models.distributed import (AgreedStop, DistributedError, MPIWorld, StepBuffer, World,
                                current_world, gather_state, launcher_variable, local_rows)
from models.signals import StopSignals

ROOT = Path(__file__).resolve().parents[2]


class FakeComm:
    """Rank `rank` of `size`, where every other rank holds `others` (what they contribute to
    a sum or a gather); collectives are computed locally."""

    def __init__(self, rank=0, size=2, others=None):
        self.rank, self.size, self.others = rank, size, others
        self.aborted, self.broadcasts, self.exits = None, [], []

    def Get_rank(self):
        return self.rank

    def Get_size(self):
        return self.size

    def Allreduce(self, inplace, buf, op):
        buf += self.others * (self.size - 1)

    def bcast(self, obj, root=0):
        self.broadcasts.append(obj)
        return obj if self.rank == root else self.others

    def gather(self, obj, root=0):
        return [obj] + list(self.others) if self.rank == root else None

    def Abort(self, code):
        self.aborted = code


FAKE_MPI = types.SimpleNamespace(IN_PLACE=object(), SUM="sum", COMM_TYPE_SHARED=1)


def world_of(comm):
    world = MPIWorld(comm, FAKE_MPI)
    world.hard_exit = lambda code: comm.exits.append(code)
    return world


def test_launcher_detection_reads_only_the_launchers_variables():
    assert launcher_variable({}) is None
    assert launcher_variable({"PATH": "/bin", "SLURM_PROCID": "0"}) is None
    assert launcher_variable({"PMI_RANK": "0", "PMI_SIZE": "2"}) == "PMI_RANK"
    assert launcher_variable({"OMPI_COMM_WORLD_SIZE": "4"}) == "OMPI_COMM_WORLD_SIZE"
    assert launcher_variable({"PMIX_RANK": "3"}) == "PMIX_RANK"
    assert type(current_world({"PATH": "/bin"})) is World


def test_launcher_without_mpi4py(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)   # import mpi4py fails
    assert type(current_world({"PMI_RANK": "0", "PMI_SIZE": "1"})) is World
    with pytest.raises(DistributedError, match=r"PMI_RANK is set.*mpi4py is not installed.*"
                                               r"\.\[distributed\]"):
        current_world({"PMI_RANK": "0", "PMI_SIZE": "2"})
    with pytest.raises(SystemExit) as e:   # the other ranks leave quietly
        current_world({"PMI_RANK": "1", "PMI_SIZE": "2"})
    assert e.value.code == 2


def test_plain_train_never_imports_mpi4py(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("def f(x):\n    return x\n" * 60)
    env = {k: v for k, v in os.environ.items()
           if launcher_variable({k: v}) is None and not k.startswith(("PMI", "OMPI", "HYDRA"))}
    code = ("import sys; from models.cli import main; rc = main(sys.argv[1:]); "
            "print('mpi4py' in sys.modules, 'mpi4py.MPI' in sys.modules, rc)")
    proc = subprocess.run([sys.executable, "-c", code, "train", "--run-dir",
                           str(tmp_path / "r"), "--data", str(corpus), "--steps", "2",
                           "--d-model", "8", "--layers", "1", "--window", "4", "--seq-len", "8",
                           "--levels", "1", "--batch-size", "2", "--no-progress"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.stdout.splitlines()[-1] == "False False 0", (proc.stdout, proc.stderr)
    assert "ranks" not in proc.stderr


def test_rows_split_the_batch_and_refuse_a_remainder():
    assert World().rows(5) == slice(0, 5)
    assert world_of(FakeComm(rank=1, size=2)).rows(8) == slice(4, 8)
    assert world_of(FakeComm(rank=2, size=3)).rows(9) == slice(6, 9)
    with pytest.raises(DistributedError, match=r"--batch-size 8 does not divide over 3 MPI "
                                               r"ranks.*multiple of 3 \(e\.g\. 6 or 9\)"):
        world_of(FakeComm(rank=0, size=3)).rows(8)
    with pytest.raises(SystemExit) as e:   # reported once, by rank 0
        world_of(FakeComm(rank=1, size=3)).rows(8)
    assert e.value.code == 2


def params_tree():
    return {"w": np.arange(6.0).reshape(2, 3), "b": np.array([1.0, -2.0])}


def test_step_buffer_one_process_is_the_identity():
    buf = StepBuffer(params_tree(), World())
    assert buf.flat.shape == (8 + StepBuffer.TAIL,)
    buf.grads["w"][...] = 3.0
    assert buf.reduce(2.5, 2.75, StopSignals(), None) == (2.5, 2.75, None)
    assert np.all(buf.flat[:6] == 3.0) and np.all(buf.flat[6:] == 0.0)


def test_step_buffer_averages_gradients_losses_and_agrees_on_stop_and_timer():
    # The other rank's gradients are all 1, its loss 1, objective 3; it got SIGTERM.
    other = np.concatenate([np.ones(8), [1.0, 3.0, 0.0, 1.0, 0.0]])
    comm = FakeComm(rank=0, size=2, others=other)
    buf = StepBuffer(params_tree(), world_of(comm))
    buf.grads["w"][...] = 5.0
    buf.grads["b"][...] = [2.0, 4.0]
    clock = types.SimpleNamespace(timer_expired=lambda: True)
    stop = AgreedStop(types.SimpleNamespace(signum=signal.SIGINT))
    loss, objective, timed = buf.reduce(2.0, 4.0, stop, clock)
    assert (loss, objective, timed) == (1.5, 3.5, True)
    np.testing.assert_array_equal(buf.grads["w"], np.full((2, 3), 3.0))
    np.testing.assert_array_equal(buf.grads["b"], [1.5, 2.5])
    assert stop.requested and stop.signum == signal.SIGTERM and stop.exit_code == 143
    # A rank other than 0 never offers its own timer.
    comm1 = FakeComm(rank=1, size=2, others=np.zeros(13))
    buf1 = StepBuffer(params_tree(), world_of(comm1))
    calm = AgreedStop(types.SimpleNamespace(signum=None))
    assert buf1.reduce(1.0, 1.0, calm, clock)[2] is False and not calm.requested


def test_gradient_views_receive_autodiff_accumulation():
    from tape import Active, Duplicated, Reverse, autodiff
    params = params_tree()
    buf = StepBuffer(params, World())
    autodiff(Reverse, lambda p: np.sum(p["w"] ** 2) + np.sum(p["b"] ** 3), Active,
             Duplicated(params, buf.grads))
    assert buf.grads["w"].base is buf.flat and buf.grads["b"].base is buf.flat
    np.testing.assert_allclose(buf.grads["w"], 2 * params["w"])
    np.testing.assert_allclose(buf.grads["b"], 3 * params["b"] ** 2)
    np.testing.assert_allclose(np.sort(buf.flat[:8]), np.sort(np.concatenate(
        [2 * params["w"].ravel(), 3 * params["b"] ** 2])))


def test_gather_state_concatenates_rows_and_checks_parameters():
    params = params_tree()
    state = {"pos": 7, "m": np.zeros((2, 3, 3)), "pend": (np.zeros((2, 4)),)}
    from tape.pytree import flatten
    theirs = flatten({"pos": 7, "m": np.ones((2, 3, 3)), "pend": (np.ones((2, 4)),)})[0]
    digest = distributed.params_digest(params)
    world = world_of(FakeComm(rank=0, size=2, others=[(theirs, digest)]))
    full = gather_state(world, state, params)
    assert full["pos"] == 7 and full["m"].shape == (4, 3, 3) and full["pend"][0].shape == (4, 4)
    assert full["m"][:2].sum() == 0 and full["m"][2:].min() == 1
    np.testing.assert_array_equal(local_rows(world, full, 4)["m"], np.zeros((2, 3, 3)))
    bad = world_of(FakeComm(rank=0, size=2, others=[(theirs, "0" * 64)]))
    with pytest.raises(DistributedError, match=r"rank\(s\) \[1\] differ from rank 0"):
        gather_state(bad, state, params)
    assert gather_state(world_of(FakeComm(rank=1, size=2)), state, params) is None


def test_from_root_broadcasts_the_answer_or_the_error():
    root = world_of(FakeComm(rank=0, size=2))
    assert root.from_root(lambda: ("runs/x", 3)) == ("runs/x", 3)
    with pytest.raises(DistributedError) as e:
        root.from_root(lambda: (_ for _ in ()).throw(DistributedError("no run at x")))
    assert e.value.hecate_agreed
    other = world_of(FakeComm(rank=1, size=2, others=("error", 2)))
    with pytest.raises(SystemExit) as e:
        other.from_root(lambda: pytest.fail("only rank 0 runs it"))
    assert e.value.code == 2


@pytest.fixture
def keep_signal_handlers():
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_guard_names_the_rank_and_aborts_every_rank(capsys, keep_signal_handlers):
    comm = FakeComm(rank=1, size=4)
    world = world_of(comm)
    with pytest.raises(RuntimeError):
        with world.guard("train"):
            raise RuntimeError("disk\non fire")
    assert comm.aborted == 1 and comm.exits == [1]
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    err = capsys.readouterr().err.strip()
    assert err == ("hecate train: error: rank 1 of 4: RuntimeError: disk on fire (unexpected: "
                   "run with --debug for the traceback)")
    comm.aborted = None
    with pytest.raises(DistributedError):
        with world.guard("train"):
            raise DistributedError("bad input")
    assert comm.aborted == 2
    comm.aborted = None
    agreed = world_of(FakeComm(rank=0, size=4)).agreed(DistributedError("same everywhere"))
    with pytest.raises(DistributedError):
        with world.guard("train"):
            raise agreed
    assert comm.aborted is None   # every rank met it: no abort


class FakeCupy:
    """Just the parts of CuPy that `models.nccl` calls."""

    def __init__(self, devices=2):
        self.calls, self.used = [], []
        fake = self

        class Communicator:
            def __init__(self, size, uid, rank):
                fake.calls.append(("init", size, uid, rank))

            def allReduce(self, send, recv, count, dtype, op, stream):
                fake.calls.append(("allReduce", send, recv, count, dtype, op, stream))

        class Stream:
            ptr = 77

            def synchronize(self):
                fake.calls.append(("synchronize",))

        class Device:
            def __init__(self, index):
                self.index = index

            def use(self):
                fake.used.append(self.index)

        self.cuda = types.SimpleNamespace(
            nccl=types.SimpleNamespace(available=True, get_unique_id=lambda: (1, 2, 3),
                                       NcclCommunicator=Communicator, NCCL_FLOAT32=7,
                                       NCCL_FLOAT64=8, NCCL_SUM=0),
            runtime=types.SimpleNamespace(getDeviceCount=lambda: devices),
            Device=Device, get_current_stream=Stream)


class FakeDeviceArray:
    def __init__(self, n, dtype):
        self.size, self.dtype = n, np.dtype(dtype)
        self.data = types.SimpleNamespace(ptr=4096)


def test_nccl_allreduce_with_a_broadcast_id_on_the_local_gpu():
    cp = FakeCupy(devices=2)
    assert nccl.use_local_gpu(3, cupy=cp) == 1 and cp.used == [1]
    comm = FakeComm(rank=0, size=2)
    summer = nccl.NcclSum(world_of(comm), cupy=cp)
    assert comm.broadcasts == [(1, 2, 3)] and cp.calls[0] == ("init", 2, (1, 2, 3), 0)
    summer.allreduce_sum_(FakeDeviceArray(10, np.float64))
    assert cp.calls[1:] == [("allReduce", 4096, 4096, 10, 8, 0, 77), ("synchronize",)]
    with pytest.raises(distributed.RunError, match="float16"):
        summer.allreduce_sum_(FakeDeviceArray(10, np.float16))
    with pytest.raises(distributed.RunError, match="no CUDA device"):
        nccl.use_local_gpu(0, cupy=FakeCupy(devices=0))


def test_mpi_world_sends_device_arrays_through_nccl(monkeypatch):
    cp = FakeCupy()
    monkeypatch.setattr(nccl, "_cupy", lambda: cp)
    world = world_of(FakeComm(rank=1, size=2, others=(9, 9, 9)))
    world.bind_device("gpu")
    world.allreduce_sum_(FakeDeviceArray(4, np.float32))
    world.allreduce_sum_(FakeDeviceArray(4, np.float32))
    assert cp.used == [0]   # no Split_type on the fake: the launcher's local rank, else 0
    assert [c[0] for c in cp.calls] == ["init", "allReduce", "synchronize", "allReduce",
                                        "synchronize"]
    assert cp.calls[0] == ("init", 2, (9, 9, 9), 1) and cp.calls[1][4] == 7


def test_share_start_copies_rank_0_and_refuses_other_data():
    from models import model
    from models.config import ModelConfig
    from models.data import TextData
    from models.optim import AdamW
    from models.distributed import share_start
    cfg = ModelConfig(vocab=256, d_model=8, layers=1, window=4, seq_len=8, levels=1,
                      dtype="float64")
    text = b"def f(x):\n    return x\n" * 30

    def setup(seed, corpus=text):
        params = model.init_params(cfg, seed)
        return params, AdamW(params), model.init_state(cfg, 4), TextData(corpus, 4, 8, seed)
    params, opt, state, data = setup(0)
    opt.t, state.pos = 5, 16
    state.blocks[0][0].m[...] = np.arange(4)[:, None, None]   # one value per row
    data.next_batch()
    root = world_of(FakeComm(rank=0, size=2))
    assert share_start(root, params, opt, state, 7, data, np)[3] == 7
    package = root.comm.broadcasts[-1]
    mine = setup(1)   # other seed: other parameters and data order before the start
    p1, o1, s1, start = share_start(world_of(FakeComm(rank=1, size=2, others=package)),
                                    *mine[:3], 0, mine[3], np)
    assert start == 7 and o1.t == 5 and s1.pos == 16 and mine[3].state() == data.state()
    assert distributed.params_digest(p1) == distributed.params_digest(params)
    mine_rows = local_rows(world_of(FakeComm(rank=1, size=2)), s1, 4)
    np.testing.assert_array_equal(mine_rows.blocks[0][0].m[:, 0, 0], [2, 3])
    other = setup(1, corpus=text + b"# more\n")
    with pytest.raises(DistributedError, match="rank 1 reads other training data than rank 0"):
        share_start(world_of(FakeComm(rank=1, size=2, others=package)), *other[:3], 0,
                    other[3], np)


def test_one_rank_under_mpiexec_behaves_as_one_process(capsys):
    comm = FakeComm(rank=0, size=1)
    world = world_of(comm)
    with pytest.raises(DistributedError):
        with world.guard("train"):
            raise DistributedError("bad input")
    assert comm.aborted is None and capsys.readouterr().err == ""
    stop = StopSignals()
    assert world.stop_view(stop) is stop


@pytest.mark.parametrize("module", [distributed, nccl])
def test_docstring_examples(module):
    import doctest
    result = doctest.testmod(module)
    assert result.failed == 0 and result.attempted > 0
