"""NVIDIA's runtime compiler (NVRTC, what CuPy's `RawModule` compiles with) and `ptxas`, found
without a GPU or a CUDA install: from the `nvidia-cuda-nvrtc-cu12` / `nvidia-cuda-nvcc-cu12`
wheels, or from the system. Used by `test_nvrtc_compile.py`; each finder returns None when the
tool is absent."""
from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import shutil
from pathlib import Path
from typing import Optional


def _package_dir(name: str) -> Optional[Path]:
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError:
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def find_nvrtc() -> Optional[ctypes.CDLL]:
    """The NVRTC library, or None."""
    candidates = []
    pkg = _package_dir("nvidia.cuda_nvrtc")
    if pkg is not None:
        candidates += sorted((pkg / "lib").glob("libnvrtc.so*"))
    system = ctypes.util.find_library("nvrtc")
    if system:
        candidates.append(system)
    for path in candidates:
        try:
            return ctypes.CDLL(str(path))
        except OSError:
            continue
    return None


def find_ptxas() -> Optional[str]:
    """The path of `ptxas`, or None."""
    pkg = _package_dir("nvidia.cuda_nvcc")
    if pkg is not None and (pkg / "bin" / "ptxas").exists():
        return str(pkg / "bin" / "ptxas")
    return shutil.which("ptxas")


def version(lib: ctypes.CDLL) -> tuple:
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value


def compile_ptx(lib: ctypes.CDLL, source: str, name: str, options: tuple) -> tuple:
    """Compile `source` with NVRTC; returns ``(ok, log, ptx)``."""
    prog = ctypes.c_void_p()
    rc = lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None,
                                None)
    if rc != 0:
        return False, f"nvrtcCreateProgram failed with code {rc}", ""
    try:
        opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        rc = lib.nvrtcCompileProgram(prog, len(options), opts)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, buf)
        log = buf.value.decode(errors="replace")
        if rc != 0:
            return False, log, ""
        lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetPTX(prog, buf)
        return True, log, buf.value.decode()
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
