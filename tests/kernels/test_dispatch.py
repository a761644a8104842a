"""Backend dispatch: GPU detection never crashes, the reference switch, per-call fallbacks and
`hecate info`. CuPy is replaced by small fakes, so these run on machines without it."""
import sys
import types
import warnings

import numpy as np
import pytest

import kernels
from kernels import dispatch
from models.cli import main


class CUDARuntimeError(RuntimeError):
    """Stands in for cupy.cuda.runtime.CUDARuntimeError."""


def fake_cupy(count=1, error=None, name=b"NVIDIA H200", cc=(9, 0)):
    def get_count():
        if error is not None:
            raise error
        return count
    runtime = types.SimpleNamespace(
        getDeviceCount=get_count,
        getDeviceProperties=lambda i: {"name": name, "major": cc[0], "minor": cc[1]})
    module = types.ModuleType("cupy")
    module.cuda = types.SimpleNamespace(runtime=runtime)
    module.__version__ = "13.0.0-fake"
    return module


@pytest.fixture
def cupy_as(monkeypatch):
    """Install a fake `cupy` (or None: not importable) for one test."""
    def install(module):
        monkeypatch.setitem(sys.modules, "cupy", module)
        dispatch.detect_gpu.cache_clear()
    yield install
    dispatch.detect_gpu.cache_clear()


@pytest.fixture(autouse=True)
def reset_switch():
    before = dispatch.is_reference_forced()
    yield
    kernels.force_reference(before)


def test_no_cupy_means_no_gpu(cupy_as):
    cupy_as(None)          # `import cupy` raises ImportError
    assert kernels.detect_gpu() is None
    assert kernels.select_backend(kernels.detect_gpu()) == "reference"


def test_cupy_without_a_driver_means_no_gpu(cupy_as):
    cupy_as(fake_cupy(error=CUDARuntimeError(
        "cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime "
        "version")))
    assert kernels.detect_gpu() is None
    assert "CuPy installed, no usable CUDA device" in kernels.info()


def test_cupy_whose_import_fails_means_no_gpu(cupy_as, monkeypatch):
    class Broken:
        def find_spec(self, name, path=None, target=None):
            if name == "cupy":
                raise CUDARuntimeError("cudaErrorNoDevice")
            return None
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    monkeypatch.setattr(sys, "meta_path", [Broken()] + sys.meta_path)
    dispatch.detect_gpu.cache_clear()
    assert dispatch.cupy_module() is None
    assert kernels.detect_gpu() is None
    dispatch.detect_gpu.cache_clear()


def test_no_device_means_no_gpu(cupy_as):
    cupy_as(fake_cupy(count=0))
    assert kernels.detect_gpu() is None


def test_a_gpu_selects_cuda_unless_the_reference_is_forced(cupy_as):
    cupy_as(fake_cupy())
    gpu = kernels.detect_gpu()
    assert gpu == kernels.GpuInfo("NVIDIA H200", (9, 0))
    assert kernels.select_backend(gpu) == "cuda"
    with kernels.force_reference():
        assert kernels.select_backend(gpu) == "reference"
        with kernels.force_reference(False):
            assert kernels.select_backend(gpu) == "cuda"
        assert kernels.select_backend(gpu) == "reference"
    assert kernels.select_backend(gpu) == "cuda"
    kernels.force_reference(True)                # the global switch
    assert kernels.select_backend(gpu) == "reference"
    kernels.force_reference(False)
    assert kernels.select_backend(gpu) == "cuda"


class FakeDeviceArray:
    """Quacks like a CuPy array for the dispatch code (which never touches the data)."""
    __cuda_array_interface__ = {}

    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, np.dtype(dtype)


def test_per_call_backend(cupy_as):
    cupy_as(fake_cupy())
    gpu_f32 = (FakeDeviceArray((5, 64), np.float32),)
    assert dispatch.backend_for(gpu_f32, 64, None, "op") == "cuda"
    assert dispatch.backend_for(gpu_f32, 64, "reference", "op") == "reference"
    with kernels.force_reference():
        assert dispatch.backend_for(gpu_f32, 64, None, "op") == "reference"
    assert dispatch.backend_for((np.ones((5, 64), np.float32),), 64, None, "op") == "reference"
    assert dispatch.backend_for((FakeDeviceArray((5, 64), np.float64),), 64, None,
                                "op") == "reference"
    with pytest.raises(ValueError, match="float32"):
        dispatch.backend_for((FakeDeviceArray((5, 64), np.float64),), 64, "cuda", "op")
    with pytest.warns(RuntimeWarning, match="exceeds the CUDA kernels' maximum of 128"):
        assert dispatch.backend_for((FakeDeviceArray((5, 256), np.float32),), 256, None,
                                    "op") == "reference"
    with pytest.raises(ValueError, match="exceeds"):
        dispatch.backend_for((FakeDeviceArray((5, 256), np.float32),), 256, "cuda", "op")
    with pytest.raises(ValueError, match="needs CuPy arrays"):
        dispatch.backend_for((np.ones(3, np.float32),), 3, "cuda", "op")


def test_requesting_cuda_without_a_gpu_is_an_error(cupy_as):
    cupy_as(None)
    with pytest.raises(RuntimeError, match="no usable GPU"):
        dispatch.backend_for((FakeDeviceArray((5, 64), np.float32),), 64, "cuda", "op")


def test_numpy_arrays_never_warn_about_head_dim():
    q = np.ones((3, 200))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kernels.swa_attention(q, q, q, 2).shape == (3, 200)


def test_info_and_the_cli(cupy_as, capsys):
    cupy_as(fake_cupy())
    text = kernels.info()
    assert "GPU: NVIDIA H200 (compute capability 9.0)" in text
    assert "kernel backend: cuda" in text
    with kernels.force_reference():
        assert "kernel backend: reference (reference forced)" in kernels.info()
    cupy_as(None)
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "GPU: none (CuPy not installed)" in out
    assert "kernel backend: reference" in out
