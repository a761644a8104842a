"""Which backend runs a kernel pair: GPU detection, backend selection, the reference switch.

CuPy is imported lazily and never required. A CuPy install on a machine without a usable driver
(`cudaErrorInsufficientDriver`, no device, a broken toolkit) counts as "no GPU": every probe is
wrapped so that detection can only ever answer None, never crash an import.

>>> backend = select_backend(detect_gpu())
>>> backend in ("reference", "cuda")
True
>>> with force_reference():
...     select_backend(detect_gpu())
'reference'
"""
from __future__ import annotations

import functools
import warnings
from typing import Any, NamedTuple, Optional

from tape.backend import module_name
from tape.core import peek

BACKENDS = ("reference", "cuda")

# Largest head_dim / memory dimension the CUDA kernels are compiled for: each lane of a warp
# holds up to four elements of a row in registers (4 * 32 = 128).
CUDA_MAX_DIM = 128


class GpuInfo(NamedTuple):
    """What `detect_gpu` found: the device name and its compute capability (major, minor)."""

    name: str
    compute_capability: tuple


def cupy_module() -> Any:
    """The `cupy` module, or None when it is not installed or fails to import."""
    try:
        import cupy
    except Exception:   # ImportError, but also CUDA errors raised while CuPy initialises
        return None
    return cupy


@functools.lru_cache(maxsize=None)
def detect_gpu() -> Optional[GpuInfo]:
    """The first CUDA device as ``GpuInfo(name, compute_capability)``, or None.

    None when CuPy is missing, when its driver or runtime is unusable (this catches CuPy's
    `CUDARuntimeError`, e.g. `cudaErrorInsufficientDriver`, and any other failure of the
    probe), or when no device is visible. The answer is cached for the process.

    >>> info = detect_gpu()
    >>> info is None or isinstance(info.name, str)
    True
    """
    cp = cupy_module()
    if cp is None:
        return None
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:
            return None
        props = cp.cuda.runtime.getDeviceProperties(0)
        name = props["name"]
        name = name.decode() if isinstance(name, bytes) else str(name)
        return GpuInfo(name, (int(props["major"]), int(props["minor"])))
    except Exception:
        return None


# The global switch. A plain module variable rather than a context variable: a switch set once
# at start-up must hold in every thread that runs kernels later.
_FORCED = False


class force_reference:
    """Run every kernel pair on the reference backend.

    Works as a global switch, ``force_reference(True)`` / ``force_reference(False)``, which
    takes effect when called (like ``torch.set_grad_enabled``), and as a context manager,
    ``with force_reference(): ...``, which restores the previous setting on exit. CuPy arrays
    still work while the reference is forced: the reference code runs on them through their
    array module.

    >>> with force_reference():
    ...     is_reference_forced()
    True
    >>> _ = force_reference(True); is_reference_forced()
    True
    >>> _ = force_reference(False); is_reference_forced()
    False
    """

    def __init__(self, enabled: bool = True):
        global _FORCED
        self.previous = _FORCED
        _FORCED = bool(enabled)

    def __enter__(self) -> "force_reference":
        return self

    def __exit__(self, *exc) -> bool:
        global _FORCED
        _FORCED = self.previous
        return False


def is_reference_forced() -> bool:
    """Whether `force_reference` is in effect.

    >>> with force_reference():
    ...     is_reference_forced()
    True
    """
    return _FORCED


def select_backend(gpu: Optional[GpuInfo]) -> str:
    """The backend kernel pairs use given `gpu` (from `detect_gpu`): ``"cuda"`` when there is a
    GPU and the reference is not forced, else ``"reference"``.

    >>> select_backend(None)
    'reference'
    >>> select_backend(GpuInfo("Some GPU", (9, 0)))  # doctest: +SKIP
    'cuda'
    """
    if _FORCED or gpu is None:
        return "reference"
    return "cuda"


def backend_for(arrays, dim: int, requested: Optional[str], name: str) -> str:
    """The backend one call runs on.

    CUDA needs CuPy float32 arrays and ``dim <= CUDA_MAX_DIM``; anything else (NumPy arrays,
    float64, a forced reference) runs the reference code on the arrays' own module. A head_dim
    beyond the CUDA kernels falls back to the reference with a warning, never a wrong answer.
    ``requested="cuda"`` turns each of those fallbacks into an error.
    """
    if requested not in (None, *BACKENDS):
        raise ValueError(f"{name}: backend must be None, 'reference' or 'cuda', got "
                         f"{requested!r}")
    on_gpu = module_name(arrays[0]) == "cupy"
    if requested == "reference":
        return "reference"
    if requested == "cuda":
        if not on_gpu:
            raise ValueError(f"{name}: backend='cuda' needs CuPy arrays, got NumPy arrays")
        if detect_gpu() is None:
            raise RuntimeError(f"{name}: backend='cuda' but no usable GPU was detected")
    elif not on_gpu or select_backend(detect_gpu()) != "cuda":
        return "reference"
    if str(peek(arrays[0]).dtype) != "float32":
        if requested == "cuda":
            raise ValueError(f"{name}: the CUDA kernels take float32 arrays, got "
                             f"{peek(arrays[0]).dtype}")
        return "reference"
    if dim > CUDA_MAX_DIM:
        msg = (f"{name}: dimension {dim} exceeds the CUDA kernels' maximum of {CUDA_MAX_DIM}")
        if requested == "cuda":
            raise ValueError(msg)
        warnings.warn(msg + "; running the reference backend on the GPU arrays instead",
                      RuntimeWarning, stacklevel=4)
        return "reference"
    return "cuda"


def chunked_gpu_usable(arrays, dim: int) -> bool:
    """Whether the chunkwise-parallel memories can run on the GPU for a call: CuPy arrays of
    float32 or float64, a usable GPU, ``dim <= CUDA_MAX_DIM``. The caller has already ruled
    out a forced reference and an explicit backend.

    >>> import numpy as np
    >>> chunked_gpu_usable([np.ones((4, 2))], 2)      # NumPy arrays
    False
    """
    if module_name(arrays[0]) != "cupy" or detect_gpu() is None:
        return False
    return str(peek(arrays[0]).dtype) in ("float32", "float64") and dim <= CUDA_MAX_DIM


def info() -> str:
    """A short report of the detected GPU and the backend kernel pairs select.

    >>> print(info())  # doctest: +ELLIPSIS
    GPU: ...
    """
    cp = cupy_module()
    gpu = detect_gpu()
    lines = []
    if gpu is None:
        why = "CuPy not installed" if cp is None else "CuPy installed, no usable CUDA device"
        lines.append(f"GPU: none ({why})")
    else:
        cc = ".".join(map(str, gpu.compute_capability))
        lines.append(f"GPU: {gpu.name} (compute capability {cc})")
    lines.append(f"CuPy: {getattr(cp, '__version__', 'not installed')}")
    lines.append(f"kernel backend: {select_backend(gpu)}"
                 + (" (reference forced)" if _FORCED else ""))
    lines.append(f"CUDA kernels: float32, dimension <= {CUDA_MAX_DIM}; other calls use the "
                 f"reference backend")
    lines.append(f"memory rules on long sequences: chunkwise-parallel (NumPy; on a GPU cuBLAS "
                 f"and memory_chunked.cu, float32 and float64, dimension <= {CUDA_MAX_DIM})")
    return "\n".join(lines)
