"""The CUDA sources compile (`nvcc --ptx`, skipped without nvcc), stay NVRTC-friendly, and ship
as package data."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kernels import cuda_loader

ROOT = Path(__file__).resolve().parents[2]
CUDA_DIR = ROOT / "kernels" / "cuda"


def test_every_source_is_listed_and_readable():
    on_disk = sorted(p.name for p in CUDA_DIR.glob("*.cu"))
    assert on_disk == sorted(cuda_loader.SOURCES)
    for name in cuda_loader.SOURCES:
        assert "__global__" in cuda_loader.source(name)


def test_sources_are_package_data():
    tomllib = pytest.importorskip("tomllib")   # Python 3.11+
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["kernels"]
    assert any(CUDA_DIR.relative_to(ROOT / "kernels").joinpath(name).match(p)
               for name in cuda_loader.SOURCES for p in patterns)


@pytest.mark.parametrize("name", cuda_loader.SOURCES)
def test_sources_need_no_headers(name):
    # CuPy compiles with NVRTC, which has no standard headers: no #include, and no macros
    # that only <math.h> defines.
    code = cuda_loader.source(name)
    assert not re.search(r"^\s*#\s*include", code, re.M)
    assert not re.search(r"\b(INFINITY|NAN|HUGE_VALF?)\b", code)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("name", cuda_loader.SOURCES)
def test_nvcc_compiles(name, tmp_path):
    proc = subprocess.run(["nvcc", "--ptx", "-std=c++14", "-Werror", "all-warnings",
                           str(CUDA_DIR / name), "-o", str(tmp_path / "out.ptx")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    ptx = (tmp_path / "out.ptx").read_text()
    entries = set(re.findall(r"\.entry\s+(\w+)", ptx))
    assert entries, "no kernels in the PTX"
    assert all(not e.startswith("_Z") for e in entries), "kernels must be extern \"C\""
