"""Kernel pairs: opaque primitives with a hand-written forward and backward.

Each pair is registered with `tape.custom_rule` (once differentiable: a second derivative through
it raises `OnceDifferentiableError`) and has two backends: ``reference`` (array-module code that
runs on NumPy and on CuPy arrays) and ``cuda`` (CuPy `RawModule` kernels compiled from the
``.cu`` sources shipped in ``kernels/cuda/``). `select_backend` picks one per process,
`force_reference` overrides it, and each call may still fall back to the reference (NumPy
arrays, float64, a dimension beyond the CUDA kernels).

>>> import numpy as np
>>> import kernels
>>> q = k = v = np.ones((4, 8))
>>> kernels.swa_attention(q, k, v, window=2).shape
(4, 8)
"""
from .attention import swa_attention
from .dispatch import (CUDA_MAX_DIM, GpuInfo, detect_gpu, force_reference, info,
                       is_reference_forced, select_backend)
from .memory import delta_rule, hebbian_rule, memory_read, titans_rule
from .memory_periodic import delta_rule_periodic, hebbian_rule_periodic, titans_rule_periodic

__all__ = [
    "swa_attention", "delta_rule", "titans_rule", "hebbian_rule", "memory_read",
    "delta_rule_periodic", "titans_rule_periodic", "hebbian_rule_periodic",
    "detect_gpu", "select_backend", "force_reference", "is_reference_forced", "info",
    "GpuInfo", "CUDA_MAX_DIM",
]
