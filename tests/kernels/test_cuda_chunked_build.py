"""kernels/cuda/memory_chunked.cu and its host code agree on their limits, and the source
assembles for the H100 / H200 (sm_90) and A100 (sm_80) without register spills and within the
48 KiB of static shared memory a block gets without opting in. The assembly check uses nvcc
(skipped without it); test_nvrtc_compile.py compiles the same source with NVRTC, as CuPy does,
where NVRTC is installed."""
import re
import shutil
import subprocess

import pytest

from kernels import cuda_loader, cuda_memory_chunked

SOURCE = cuda_loader.source("memory_chunked.cu")


def define(name: str) -> int:
    return int(re.search(rf"^#define {name} (\d+)", SOURCE, re.M).group(1))


def test_host_constants_match_the_source():
    assert cuda_memory_chunked.MAX_CHUNK == define("TRI_MAXC")
    assert cuda_memory_chunked.INVERSE_THREADS == define("TRI_MAXC")
    assert cuda_memory_chunked.MAX_COLUMNS == define("CARRY_MAXD")
    assert cuda_memory_chunked.CARRY_ROWS == define("CARRY_ROWS")
    assert cuda_memory_chunked.CARRY_THREADS == define("CARRY_MAXD") // define("CARRY_MAXCOL")
    assert cuda_memory_chunked._MODES == {"matrix": define("CARRY_MATRIX"),
                                          "matrix_t": define("CARRY_MATRIX_T"),
                                          "scale": define("CARRY_SCALE")}


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("arch", ["90", "80"])
def test_assembles_without_spills_within_static_shared_memory(arch, tmp_path):
    src = tmp_path / "memory_chunked.cu"
    src.write_text(SOURCE)
    proc = subprocess.run(["nvcc", "-cubin", f"-arch=sm_{arch}", "-std=c++14", "-Xptxas", "-v",
                           str(src), "-o", str(tmp_path / "k.cubin")], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    blocks = re.split(r"Compiling entry function '(\w+)'", proc.stderr)[1:]
    found = dict(zip(blocks[0::2], blocks[1::2]))
    assert set(found) == {f"chunk_{k}_{t}" for k in ("unit_lower_inverse", "carry")
                          for t in ("f32", "f64")}
    for kernel, text in found.items():
        assert re.search(r"\b0 bytes spill stores", text), f"{kernel} spills:\n{text}"
        smem = int(re.search(r"(\d+) bytes smem", text).group(1))
        assert smem <= 48 * 1024, f"{kernel}: {smem} bytes of static shared memory"
