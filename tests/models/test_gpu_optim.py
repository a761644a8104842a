"""On a GPU: AdamW's fused CuPy update and the global-norm clip against the NumPy path.

Skipped unless CuPy is installed and a CUDA device is usable. CuPy's update is one elementwise
kernel per leaf (`models.optim._adamw_kernel`), NumPy's nine array operations; the same values
up to rounding (the kernel may fuse a multiply and an add).
"""
import numpy as np
import pytest

import kernels
from models.optim import AdamW, clip_by_global_norm, global_norm

cp = pytest.importorskip("cupy")
if kernels.detect_gpu() is None:
    pytest.skip("no usable CUDA device", allow_module_level=True)


@pytest.mark.parametrize("dtype,rtol", [(np.float32, 1e-5), (np.float64, 1e-12)])
def test_fused_adamw_on_cupy_matches_numpy(dtype, rtol):
    rng = np.random.default_rng(0)
    host = {"w": rng.standard_normal((5, 7)).astype(dtype),
            "b": rng.standard_normal(7).astype(dtype),
            "view": rng.standard_normal((6, 4)).astype(dtype)[:, ::2]}   # a strided leaf
    device = {k: cp.asarray(v) for k, v in host.items()}
    device["view"] = cp.asarray(host["view"].base)[:, ::2]
    opts = [AdamW(host, lr=0.05, weight_decay=0.1), AdamW(device, lr=0.05, weight_decay=0.1)]
    for step in range(5):
        grads = {k: (rng.standard_normal(v.shape) * (step + 1)).astype(dtype)
                 for k, v in host.items()}
        opts[0].step(host, grads, lr=0.05 / (step + 1))
        opts[1].step(device, {k: cp.asarray(g) for k, g in grads.items()}, lr=0.05 / (step + 1))
    for k in host:
        np.testing.assert_allclose(cp.asnumpy(device[k]), host[k], rtol=rtol, atol=rtol)
    for mine, theirs in zip(opts[1].m + opts[1].v, opts[0].m + opts[0].v):
        np.testing.assert_allclose(cp.asnumpy(mine), theirs, rtol=rtol, atol=rtol)


def test_global_norm_and_clip_on_cupy_match_numpy():
    rng = np.random.default_rng(1)
    host = [rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(5)]
    device = [cp.asarray(g) for g in host]
    assert global_norm(device) == pytest.approx(global_norm(host), rel=1e-12)
    assert clip_by_global_norm(device, 1.0) == pytest.approx(clip_by_global_norm(host, 1.0),
                                                             rel=1e-12)
    for d, h in zip(device, host):
        np.testing.assert_allclose(cp.asnumpy(d), h, rtol=1e-6)
