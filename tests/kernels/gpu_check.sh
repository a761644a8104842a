#!/bin/sh
# The GPU checks of the kernel pairs, for a machine with a CUDA GPU and CuPy installed
# (pip install -e '.[cuda,test]'): what is detected, the whole kernel test suite (test_gpu.py
# runs instead of skipping, the chunked memories' GPU path included; test_nvrtc_compile.py runs
# where NVRTC is installed), the engine on CuPy arrays, then the benchmark with the CUDA backend
# and the chunked memories.
#   sh tests/kernels/gpu_check.sh [results.json]
set -e
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python}
$PY -m models.cli info
$PY -c "import kernels, sys; sys.exit(kernels.detect_gpu() is None and 'no usable GPU detected')"
$PY -m pytest tests/kernels -q -rs
# The engine's rules, the model's periodic kernels and the optimizer on CuPy against NumPy.
$PY -m pytest tests/tape/test_cupy_engine.py tests/models/test_gpu_optim.py -q -rfX
$PY benchmarks/kernels.py --gpu --json "${1:-kernels-gpu.json}"
