"""The CUDA sources compile with NVRTC, as CuPy's `RawModule` compiles them on a GPU machine,
for the H100 / H200 architecture (sm_90), export every kernel the host code launches, and
assemble with `ptxas` without register spills. Skipped when NVRTC or ptxas is absent (they come
with `pip install nvidia-cuda-nvrtc-cu12 nvidia-cuda-nvcc-cu12`; no GPU is needed). This checks
the code compiles and fits; whether it computes the right numbers on a GPU is `test_gpu.py`'s
job."""
import re
import subprocess

import pytest

from kernels import cuda_loader

import nvrtc

ARCHS = ("90", "80")     # Hopper (H100/H200), Ampere (A100)

# Every kernel name the host code (kernels/cuda_attention.py, kernels/cuda_memory.py,
# kernels/cuda_memory_chunked.py) launches.
LAUNCHED = {
    "swa.cu": {f"swa_{part}_{suffix}" for part in ("fwd", "bwd_dq", "bwd_dkdv")
               for suffix in ("f32", "bf16")},
    "memory.cu": {f"memory_{way}_{rule}" for way in ("forward", "backward")
                  for rule in ("delta", "titans", "hebbian")},
    "memory_chunked.cu": {f"chunk_{part}_{suffix}" for part in ("unit_lower_inverse", "carry")
                          for suffix in ("f32", "f64")},
}

_lib = nvrtc.find_nvrtc()
needs_nvrtc = pytest.mark.skipif(_lib is None, reason="NVRTC is not installed")


def _compile(name, arch):
    ok, log, ptx = nvrtc.compile_ptx(_lib, cuda_loader.source(name), name,
                                     ("-std=c++14", f"--gpu-architecture=compute_{arch}"))
    assert ok, f"NVRTC {nvrtc.version(_lib)} failed on {name}:\n{log}"
    return log, ptx


def test_every_source_has_its_launch_list():
    assert sorted(LAUNCHED) == sorted(cuda_loader.SOURCES)


@needs_nvrtc
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", cuda_loader.SOURCES)
def test_nvrtc_compiles_without_warnings_and_exports_the_launched_kernels(name, arch):
    log, ptx = _compile(name, arch)
    assert "warning" not in log.lower(), log
    entries = set(re.findall(r"\.entry\s+(\w+)", ptx))
    assert LAUNCHED[name] <= entries, f"missing: {sorted(LAUNCHED[name] - entries)}"


# Spill stores (bytes per thread) ptxas is allowed. The Titans backward keeps the most state per
# thread (memory, momentum and both their cotangents); at 512 threads a block the register
# file allows it 128 registers and ptxas spills 64 bytes (to L1-cached local memory). Any
# growth, or a spill anywhere else, fails.
ALLOWED_SPILLS = {"memory_backward_titans": 64}


@needs_nvrtc
@pytest.mark.skipif(nvrtc.find_ptxas() is None, reason="ptxas is not installed")
@pytest.mark.parametrize("name", cuda_loader.SOURCES)
def test_ptxas_assembles_for_sm90_within_the_register_file(name, tmp_path):
    _, ptx = _compile(name, "90")
    path = tmp_path / "k.ptx"
    path.write_text(ptx)
    proc = subprocess.run([nvrtc.find_ptxas(), "-arch=sm_90", "-v", str(path), "-o",
                           str(tmp_path / "k.cubin")], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = proc.stderr
    # One "Compiling entry function" block per kernel: its spills and registers follow it.
    blocks = re.split(r"Compiling entry function '(\w+)'", report)[1:]
    found = dict(zip(blocks[0::2], blocks[1::2]))
    assert LAUNCHED[name] <= set(found)
    for kernel, text in found.items():
        spill = int(re.search(r"(\d+) bytes spill stores", text).group(1))
        registers = int(re.search(r"Used (\d+) registers", text).group(1))
        assert spill <= ALLOWED_SPILLS.get(kernel, 0), f"{kernel} spills {spill} bytes:\n{text}"
        # __launch_bounds__ makes ptxas fit each block in the 64K-register file.
        assert registers <= 255, f"{kernel} uses {registers} registers"
