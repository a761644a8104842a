"""Run the CUDA kernels of kernels/cuda on the CPU (see cuda_emulator.h), for tests.

`emulated()` builds each `.cu` source with g++ against the emulator header (once per session)
and installs a launcher in `kernels.cuda_loader`, so the CUDA backend's host code runs on NumPy
arrays and its kernels run as emulated CUDA threads. It also checks what a GPU would reject
silently or loudly: non-contiguous arrays, wrong dtypes, more dynamic shared memory than the
48 KiB a launch gets without opting in, and block sizes above 1024.
"""
from __future__ import annotations

import contextlib
import ctypes
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np

from kernels import cuda_loader

HERE = Path(__file__).resolve().parent
KERNELS = {
    "swa.cu": [f"swa_{k}_{t}" for k in ("fwd", "bwd_dq", "bwd_dkdv") for t in ("f32", "bf16")],
    "memory.cu": [f"memory_{p}_{r}" for p in ("forward", "backward")
                  for r in ("delta", "titans", "hebbian")],
    "memory_chunked.cu": [f"chunk_{k}_{t}" for k in ("unit_lower_inverse", "carry")
                          for t in ("f32", "f64")],
}

_HARNESS = r"""
#include <utility>
template <typename... A, std::size_t... I>
static void call_with(void (*k)(A...), void** args, std::index_sequence<I...>) {
    k(*static_cast<A*>(args[I])...);
}
template <typename... A>
static int launch_k(void (*k)(A...), unsigned gx, unsigned gy, unsigned bx, void** args) {
    return emu::run(gx, gy, 1, bx, [=] { call_with(k, args, std::index_sequence_for<A...>{}); });
}
extern "C" int emu_launch(const char* name, unsigned gx, unsigned gy, unsigned bx, void** args) {
%s
    return -1;
}
"""


def available() -> bool:
    return shutil.which("g++") is not None


def build(source_name: str, out_dir: Path) -> ctypes.CDLL:
    code = cuda_loader.source(source_name)
    code = code.replace("extern __shared__", "extern").replace("__shared__", "static")
    dispatch = "\n".join(f'    if (!std::strcmp(name, "{n}")) return launch_k({n}, gx, gy, bx, '
                         f'args);' for n in KERNELS[source_name])
    text = f'#include "{HERE / "cuda_emulator.h"}"\n{code}\n{_HARNESS % dispatch}'
    src = out_dir / (source_name + ".cpp")
    lib = out_dir / (source_name + ".so")
    src.write_text(text)
    subprocess.run(["g++", "-std=c++17", "-O1", "-shared", "-fPIC", "-Wno-unknown-pragmas",
                    "-o", str(lib), str(src)], check=True, capture_output=True, text=True)
    dll = ctypes.CDLL(str(lib))
    dll.emu_launch.restype = ctypes.c_int
    dll.emu_launch.argtypes = [ctypes.c_char_p, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                               ctypes.c_void_p]
    return dll


class Launcher:
    """A `cuda_loader` launcher that runs kernels in the emulator and records each launch."""

    def __init__(self, libs: dict):
        self.libs = libs
        self.launches = []

    def __call__(self, source_name, kernel, grid, block, args, shared_mem=0):
        assert len(block) == 1 and 1 <= block[0] <= 1024, block
        assert shared_mem <= 48 * 1024, f"{kernel}: {shared_mem} bytes of dynamic shared memory"
        grid = tuple(grid) + (1,) * (2 - len(grid))
        keep, ptrs = [], []
        for a in args:
            if isinstance(a, np.ndarray):
                assert a.flags.c_contiguous, f"{kernel}: a non-contiguous array"
                assert a.dtype in (np.float32, np.float64, np.uint16), \
                    f"{kernel}: dtype {a.dtype}"
                obj = ctypes.c_void_p(a.ctypes.data)
            elif isinstance(a, np.int32):
                obj = ctypes.c_int(int(a))
            elif isinstance(a, np.float32):
                obj = ctypes.c_float(float(a))
            else:
                raise TypeError(f"{kernel}: argument of type {type(a).__name__}")
            keep.append(obj)
            ptrs.append(ctypes.cast(ctypes.pointer(obj), ctypes.c_void_p))
        argv = (ctypes.c_void_p * len(ptrs))(*ptrs)
        rc = self.libs[source_name].emu_launch(kernel.encode(), grid[0], grid[1], block[0],
                                               argv)
        if rc != 0:
            raise RuntimeError(f"emulated launch of {kernel} failed ({rc})")
        self.launches.append((kernel, grid, block, shared_mem))


@contextlib.contextmanager
def emulated(libs: dict):
    launcher = Launcher(libs)
    previous = cuda_loader.set_launcher(launcher)
    try:
        yield launcher
    finally:
        cuda_loader.set_launcher(previous)


def kernel_names_in_source(source_name: str) -> set:
    """Entry points the source defines, read from its macro invocations (a consistency check
    of the KERNELS table above)."""
    code = cuda_loader.source(source_name)
    names = set()
    for suffix, _ in re.findall(r"^SWA_ENTRY_POINTS\((\w+), ([\w ]+)\)", code, re.M):
        names |= {f"swa_{k}_{suffix}" for k in ("fwd", "bwd_dq", "bwd_dkdv")}
    for name, _ in re.findall(r"^MEMORY_ENTRY_POINTS\((\w+), (\w+)\)", code, re.M):
        names |= {f"memory_{p}_{name}" for p in ("forward", "backward")}
    for suffix, _ in re.findall(r"^CHUNKED_ENTRY_POINTS\((\w+), (\w+)\)", code, re.M):
        names |= {f"chunk_{k}_{suffix}" for k in ("unit_lower_inverse", "carry")}
    return names
