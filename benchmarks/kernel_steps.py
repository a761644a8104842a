"""The steps `benchmarks/kernels.py` times: inputs, the functions every tool differentiates (Hecate
and a PyTorch user's version), and the timing and comparison helpers its CPU and GPU tables share
(`benchmarks/kernels_gpu.py`)."""
from __future__ import annotations

import math
import time

import numpy as np

import kernels
from kernels import memory
from tape import Active, Reverse, autodiff

PAIRS = ("swa", "delta", "titans", "hebbian")
WINDOW = 256          # attention window in every run
CHECKPOINT = 64       # chunk of hecate-ckpt
N_GATES = {"delta": 2, "titans": 3, "hebbian": 1}
CHUNKED = ("delta", "hebbian", "titans")   # rules with a chunkwise-parallel CPU form

# --------------------------------------------------------------------------------------------
# Inputs and the functions every tool differentiates


def make_inputs(pair, s, d, lead=(), seed=0):
    """float32 NumPy inputs: q, k, v for attention; k, v, q, gates, states for the memories."""
    rng = np.random.default_rng(seed)
    if pair == "swa":
        arrays = [rng.standard_normal(lead + (s, d)) for _ in range(3)]
    else:
        k = rng.standard_normal(lead + (s, d))
        k /= np.linalg.norm(k, axis=-1, keepdims=True)          # L2-normalised, as in the model
        q = rng.standard_normal(lead + (s, d))
        q /= np.linalg.norm(q, axis=-1, keepdims=True)
        v = rng.standard_normal(lead + (s, d)) / math.sqrt(d)
        gates = [rng.uniform(0.0, 0.1, lead + (s,)), rng.uniform(0.05, 0.5, lead + (s,)),
                 rng.uniform(0.5, 0.9, lead + (s,))][:N_GATES[pair]]
        states = [np.zeros(lead + (d, d))] * (2 if pair == "titans" else 1)
        arrays = [k, v, q] + gates + states
    return [a.astype(np.float32) for a in arrays]


def output_weights(pair, s, d, lead=(), seed=1):
    rng = np.random.default_rng(seed)
    shapes = [lead + (s, d)] + ([] if pair == "swa" else
                                [lead + (d, d)] * (2 if pair == "titans" else 1))
    return [rng.standard_normal(sh).astype(np.float32) for sh in shapes]


def hecate_fn(pair, checkpoint_every=None, backend=None):
    if pair == "swa":
        return lambda q, k, v: (kernels.swa_attention(q, k, v, WINDOW, backend=backend),)
    kernel = {"delta": kernels.delta_rule, "titans": kernels.titans_rule,
              "hebbian": kernels.hebbian_rule}[pair]
    return lambda *a: kernel(*a, checkpoint_every=checkpoint_every, backend=backend)


def prim_fn(pair, backend):
    """The memory rule's primitive with an internal backend name ("cuda-chunked" is what the
    default dispatch picks on long sequences; it is not a public `backend` choice)."""
    prim = {"delta": memory._delta, "titans": memory._titans, "hebbian": memory._hebbian}[pair]
    return lambda *a: prim(*a, backend=backend)


def hecate_step(pair, args, weights, prim_backend=None, **kw):
    fn = prim_fn(pair, prim_backend) if prim_backend else hecate_fn(pair, **kw)
    return loss_step(fn, args, weights)


def torch_memory(pair, torch, k, v, q, *rest):
    """The recurrence as a PyTorch user writes it: a loop over tokens, autograd records it.
    Leading batch axes ride along (k: [..., s, d], gates: [..., s], states: [..., d, d])."""
    gates, states = rest[:N_GATES[pair]], list(rest[N_GATES[pair]:])
    alpha = gates[0]
    M = states[0]
    S = states[1] if pair == "titans" else None

    def outer(a, b):
        return a[..., :, None] * b[..., None, :]

    def scale(g, t):
        return g[..., t, None, None]

    ys = []
    for t in range(k.shape[-2]):
        kt = k[..., t, :]
        if pair == "hebbian":
            M = (1 - scale(alpha, t)) * M + outer(v[..., t, :], kt)
        else:
            upd = scale(gates[1], t) * outer((M @ kt[..., None])[..., 0] - v[..., t, :], kt)
            if pair == "delta":
                M = (1 - scale(alpha, t)) * M - upd
            else:
                S = scale(gates[2], t) * S - upd
                M = (1 - scale(alpha, t)) * M + S
        ys.append((M @ q[..., t, :, None])[..., 0])
    return (torch.stack(ys, -2), M) + ((S,) if pair == "titans" else ())


def torch_attention(torch, q, k, v):
    s = q.shape[-2]
    i = torch.arange(s, device=q.device)
    band = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - WINDOW)
    out = torch.nn.functional.scaled_dot_product_attention(q[..., None, :, :], k[..., None, :, :],
                                                           v[..., None, :, :], attn_mask=band)
    return (out[..., 0, :, :],)


def torch_step(pair, args, weights, device="cpu"):
    import torch
    ts = [torch.tensor(a, device=device, requires_grad=True) for a in args]
    ws = [torch.tensor(w, device=device) for w in weights]

    def step():
        for t in ts:
            t.grad = None
        outs = torch_attention(torch, *ts) if pair == "swa" else torch_memory(pair, torch, *ts)
        sum(((o * w).sum() for o, w in zip(outs, ws))).backward()
        if device != "cpu":
            torch.cuda.synchronize()
        return [t.grad for t in ts]    # copied to the host by `host`, outside the timing
    return step


def host(x):
    """A gradient as a NumPy array: from NumPy, CuPy or a PyTorch tensor (CPU or CUDA)."""
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    if hasattr(x, "__cuda_array_interface__"):
        import cupy as cp
        return cp.asnumpy(x)
    return np.asarray(x)


def torch_version(cuda=False):
    try:
        import torch
    except Exception:   # a broken install is treated like a missing one
        return None
    if cuda and not torch.cuda.is_available():
        return None
    torch.set_num_threads(1)
    return torch.__version__


# --------------------------------------------------------------------------------------------
# Measurement


def best_time(step, repeat, sync=None):
    step()   # warm-up: caches, first-call allocations, CUDA compilation
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        step()
        if sync is not None:
            sync()
        times.append(time.perf_counter() - t0)
    return min(times)


def grads_agree(got, want):
    return all(np.allclose(np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=2e-3,
                           atol=2e-3 * max(1.0, float(np.max(np.abs(w)))))
               for g, w in zip(got, want))


def loss_step(fn, args, weights):
    def loss(*a):
        total = 0.0
        for o, w in zip(fn(*a), weights):
            total = total + (o * w).sum()
        return total

    def step():
        derivs, = autodiff(Reverse, loss, Active, *[Active(a) for a in args])
        return derivs
    return step
