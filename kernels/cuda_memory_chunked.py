"""The chunkwise-parallel memories on a GPU: `kernels.memory_chunked` and
`kernels.memory_chunked_titans` run on CuPy arrays, with their two sequential parts as the
kernels of `cuda/memory_chunked.cu`.

Everything else in the chunked algorithm is batched matrix products and elementwise or scan
operations over ``[B, N, C, ...]`` arrays (batch x chunks in one cuBLAS call each), which CuPy
already runs as single launches. The two parts that are not:

- the unit lower-triangular inverse ``T = (I + diag(theta) A)^-1`` of every chunk: one thread
  block per chunk, forward substitution with the chunk in shared memory, in place of the
  blocked inverse's ~150 small launches;
- the state carried across chunks: one launch for the whole sweep, each block keeping a few rows
  of the state in registers over all chunks (rows evolve independently), in place of a Python
  loop of launches per chunk, whose overhead grows with ``s / C``.

Same interface as `kernels.memory_ref` (time-major inputs, ``[B, d, d]`` states). float32 and
float64 (both kernels are compiled for each). Chunks longer than `MAX_CHUNK` tokens use the
blocked inverse; states wider than `MAX_COLUMNS` the Python carry loop: never a wrong answer.
A call the chunked form cannot run (retention not positive, an empty sequence) runs the
per-token CUDA kernels (float32) or the reference (float64).
"""
from __future__ import annotations

import math
from typing import Optional

from tape.backend import array_module

from . import cuda_memory
from . import memory_chunked
from . import memory_chunked_titans
from . import memory_ref as ref
from .cuda_loader import i32, launch

SOURCE = "memory_chunked.cu"
MAX_CHUNK = 64            # TRI_MAXC in memory_chunked.cu
MAX_COLUMNS = 256         # CARRY_MAXD
CARRY_ROWS = 4            # CARRY_ROWS
CARRY_THREADS = 128       # CARRY_MAXD / CARRY_MAXCOL: the kernel's launch bound
INVERSE_THREADS = 64      # TRI_MAXC
DTYPES = ("float32", "float64")
# Below these lengths the per-token CUDA kernels run the default dispatch. Measured with
# `benchmarks/kernels.py --gpu` on an H100 (16 sequences, forward plus backward), the chunked
# form against the per-token kernels (one block per group of state rows): at d = 64 delta
# 0.82x at 4096 tokens, 0.96x at 8192, 1.02x at 16384; Hebbian 1.01x, 1.07x, 1.06x; Titans
# 0.34-0.36x; at d = 128 0.67-0.93x (delta, Hebbian) and 0.23-0.25x (Titans). The chunked form
# still takes over at 16384 tokens: the per-token kernels keep every state (s d^2 floats per
# sequence and state, 268 MB at d = 64), the chunked form one per chunk.
MIN_TOKENS = {"delta": 16384, "hebbian": 16384, "titans": 16384}
_MODES = {"matrix": 0, "matrix_t": 1, "scale": 2}


def preferred(rule: str, s: int) -> bool:
    """Whether the default CuPy dispatch runs `rule` on `s` tokens in the chunked form.

    The per-token kernels are one launch per pass and as fast or faster up to 16384 tokens
    (`MIN_TOKENS`); the chunked form (about a hundred launches) keeps one state per chunk
    instead of every state, which decides from there on.

    >>> preferred("delta", 16384), preferred("delta", 4096), preferred("titans", 16)
    (True, False, False)
    """
    return memory_chunked.preferred(rule, s) and s >= MIN_TOKENS.get(rule, 0)


def _suffix(dtype) -> str:
    name = str(dtype)
    if name not in DTYPES:
        raise TypeError(f"the chunked CUDA kernels take float32 or float64 arrays, got {name}")
    return "f32" if name == "float32" else "f64"


class CudaOps:
    """`memory_chunked.NumpyOps`'s two sequential parts as launches of `cuda/memory_chunked.cu`
    (through `kernels.cuda_loader`, so a test may run them in the CPU emulator)."""

    @staticmethod
    def unit_lower_inverse(A, th):
        """``(I + diag(th) A)^-1`` for ``A [..., C, C]`` (its strictly lower part is read)."""
        C = A.shape[-1]
        if C > MAX_CHUNK:
            return memory_chunked.NumpyOps.unit_lower_inverse(A, th)
        xp = array_module(A)
        A = xp.ascontiguousarray(A)
        th = xp.ascontiguousarray(xp.broadcast_to(th, A.shape[:-1]), dtype=A.dtype)
        out = xp.empty(A.shape, A.dtype)
        count = math.prod(A.shape[:-2])
        if count and C:
            launch(SOURCE, f"chunk_unit_lower_inverse_{_suffix(A.dtype)}", (count,),
                   (INVERSE_THREADS,), (A, th, out, i32(C)))
        return out

    @staticmethod
    def carry(init, adds, P=None, scale=None, transpose: bool = False, reverse: bool = False):
        """As `memory_chunked.NumpyOps.carry`, in one launch."""
        B, N, R, D = adds.shape
        if D > MAX_COLUMNS:
            return memory_chunked.NumpyOps.carry(init, adds, P, scale, transpose, reverse)
        xp = array_module(adds)
        dtype = adds.dtype
        adds = xp.ascontiguousarray(adds)
        X = xp.ascontiguousarray(xp.broadcast_to(init, (B, R, D)), dtype=dtype)
        dummy = xp.zeros((1,), dtype)
        if P is None:
            mode = _MODES["scale"]
            Pc, g = dummy, xp.ascontiguousarray(xp.broadcast_to(scale, (B, N)), dtype=dtype)
        else:
            mode = _MODES["matrix_t" if transpose else "matrix"]
            Pc, g = xp.ascontiguousarray(P, dtype=dtype), dummy
            if Pc.shape != (B, N, D, D):
                raise ValueError(f"carry: P has shape {Pc.shape}, expected {(B, N, D, D)}")
        records = xp.empty(adds.shape, dtype)
        final = xp.empty((B, R, D), dtype)
        if N == 0 or B == 0 or R == 0:
            final[...] = X
            return records, final
        threads = min(CARRY_THREADS, 32 * -(-D // 32))
        grid = (B, -(-R // CARRY_ROWS))
        launch(SOURCE, f"chunk_carry_{_suffix(dtype)}", grid, (threads,),
               (Pc, g, adds, X, records, final, i32(N), i32(R), i32(D), i32(mode),
                i32(int(reverse))))
        return records, final


def _engine(spec: ref.Rule):
    return memory_chunked_titans if spec.name == "titans" else memory_chunked


def _fallback(x: ref.Seq):
    return cuda_memory if str(x.k.dtype) == "float32" else ref


def forward(spec: ref.Rule, x: ref.Seq, init: tuple, checkpoint_every: Optional[int] = None,
            chunk: Optional[int] = None):
    """``(y, finals, saved)`` like `memory_ref.forward`, chunkwise with the CUDA kernels."""
    engine = _engine(spec)
    if not engine.usable(x):
        return _fallback(x).forward(spec, x, init, checkpoint_every)
    return engine.forward(spec, x, init, checkpoint_every, chunk, ops=CudaOps)


def backward(spec: ref.Rule, saved, dy, dfinals: tuple, need: frozenset):
    """Gradients of a `forward` run, in the format of `memory_ref.backward`."""
    if isinstance(saved, cuda_memory.CudaSaved):
        return cuda_memory.backward(spec, saved, dy, dfinals, need)
    return _engine(spec).backward(spec, saved, dy, dfinals, need)
