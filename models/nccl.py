"""The GPU side of `models.distributed`: each rank on its node-local GPU, and the step's
allreduce through NCCL (``cupy.cuda.nccl``) instead of MPI.

NCCL needs one unique id shared by all ranks before its communicator exists: rank 0 makes it
and MPI broadcasts it (`NcclSum`). The sum runs in place on the flat gradient buffer on the
current CuPy stream, which is then synchronised, so the optimizer reads the finished sum.
CuPy is imported only here, and only when ``--device gpu`` runs on several ranks.

>>> pick_gpu(5, 4)   # the sixth rank of a node with 4 GPUs shares GPU 1
1
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .rundir import RunError


def pick_gpu(local_rank: int, device_count: int) -> int:
    """The GPU index of the rank with node-local index `local_rank` (round robin when a node
    has more ranks than GPUs; usually one rank per GPU)."""
    if device_count < 1:
        raise RunError("--device gpu: no CUDA device is visible to this rank; use --device cpu")
    return local_rank % device_count


def _cupy() -> Any:
    from kernels.dispatch import cupy_module
    cp = cupy_module()
    if cp is None:
        raise RunError("--device gpu on several MPI ranks needs CuPy with NCCL: "
                       "pip install -e \".[cuda,distributed]\"")
    return cp


def use_local_gpu(local_rank: int, cupy: Any = None) -> int:
    """Make the node-local GPU of this rank CuPy's current device; returns its index."""
    cp = cupy if cupy is not None else _cupy()
    index = pick_gpu(local_rank, int(cp.cuda.runtime.getDeviceCount()))
    cp.cuda.Device(index).use()
    return index


class NcclSum:
    """An NCCL communicator over the ranks of `world` (its id broadcast over MPI) that sums
    one contiguous CuPy array in place."""

    def __init__(self, world: Any, cupy: Any = None):
        cp = cupy if cupy is not None else _cupy()
        nccl = getattr(cp.cuda, "nccl", None)
        if nccl is None or not getattr(nccl, "available", True):
            raise RunError("--device gpu on several MPI ranks: this CuPy has no NCCL; install "
                           "NCCL for CuPy (python -m cupyx.tools.install_library --library "
                           "nccl) or use --device cpu")
        self.cp, self.nccl = cp, nccl
        uid = world.broadcast(nccl.get_unique_id() if world.is_root else None)
        self.comm = nccl.NcclCommunicator(world.size, uid, world.rank)
        self.types = {np.dtype(np.float32): nccl.NCCL_FLOAT32,
                      np.dtype(np.float64): nccl.NCCL_FLOAT64}

    def allreduce_sum_(self, flat: Any) -> None:
        """``flat`` summed over the ranks, in place; returns once the sum is done."""
        if np.dtype(flat.dtype) not in self.types:
            raise RunError(f"NCCL allreduce: dtype {flat.dtype} is not float32 or float64")
        stream = self.cp.cuda.get_current_stream()
        self.comm.allReduce(flat.data.ptr, flat.data.ptr, int(flat.size),
                            self.types[np.dtype(flat.dtype)], self.nccl.NCCL_SUM, stream.ptr)
        stream.synchronize()


__all__ = ["NcclSum", "use_local_gpu", "pick_gpu"]
