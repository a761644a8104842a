"""Loading the `.cu` sources (package data) with CuPy and launching their kernels.

Sources are compiled on first use, once per process, by CuPy's `RawModule` (NVRTC), so
importing `kernels` never needs CuPy or a GPU. Launches go through one function so that a test
can substitute a launcher (the CPU emulator of `tests/kernels`) and run the host-side code of
the CUDA backend without a GPU.
"""
from __future__ import annotations

import functools
from importlib import resources
from typing import Callable, Optional

import numpy as np

from .dispatch import cupy_module

SOURCES = ("swa.cu", "memory.cu", "memory_chunked.cu")

_launcher: Optional[Callable] = None


def source(name: str) -> str:
    """The text of the CUDA source `name` (e.g. ``"swa.cu"``), read from the package data."""
    return resources.files("kernels").joinpath("cuda", name).read_text()


@functools.lru_cache(maxsize=None)
def _module(name: str):
    cp = cupy_module()
    if cp is None:
        raise RuntimeError("the CUDA backend needs CuPy")
    return cp.RawModule(code=source(name), options=("-std=c++14",))


def launch(source_name: str, kernel: str, grid: tuple, block: tuple, args: tuple,
           shared_mem: int = 0) -> None:
    """Launch `kernel` of `source_name`. Scalars in `args` must be NumPy scalars (np.int32,
    np.float32) so that their C types are explicit."""
    if _launcher is not None:
        _launcher(source_name, kernel, grid, block, args, shared_mem)
        return
    _module(source_name).get_function(kernel)(grid, block, args, shared_mem=shared_mem)


def set_launcher(fn: Optional[Callable]) -> Optional[Callable]:
    """Route launches to ``fn(source_name, kernel, grid, block, args, shared_mem)`` (None
    restores CuPy); returns the previous launcher. For tests."""
    global _launcher
    previous, _launcher = _launcher, fn
    return previous


def i32(x: int) -> np.int32:
    return np.int32(x)


def f32(x: float) -> np.float32:
    return np.float32(x)
