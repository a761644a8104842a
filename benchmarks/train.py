"""Training tokens/s: Hecate's NL model against the same model written in PyTorch.

    python benchmarks/train.py            # default model config, batch 8, a few timed steps
    python benchmarks/train.py --quick    # a smoke test: tiny model, one timed step
    python benchmarks/train.py --json out.json
    python benchmarks/train.py --text-model   # models.config.TEXT_MODEL's backbone
    python benchmarks/train.py --device gpu   # Hecate on CuPy against PyTorch CUDA

A training step is the same on both sides: forward, mean cross-entropy plus the gate-saturation
penalty (`models.model.training_loss`), backward, a global-norm clip and an AdamW update. The PyTorch model has the same sizes and the same per-token memory
recurrence as `models.model` (MAG or MAL composition, CMS levels with the conductor's firing
rule, the delta / Titans / Hebbian rule, attention and memory heads, rotary positions, the MLP
sublayer), with the memory written as a Python loop over tokens,
the way one writes a recurrence in eager PyTorch. (The PyTorch side keeps no pending buffer
across chunks: with seq_len a multiple of every period, as here, none is ever needed.) Before
timing, the PyTorch loss on Hecate's initial parameters is checked against Hecate's loss (same number to float32 precision), so both
sides compute the same function. Both run on one thread (``torch.set_num_threads(1)``; NumPy's
BLAS is limited by the environment variables set below before NumPy loads). With
``--device gpu`` Hecate runs on CuPy arrays and PyTorch on CUDA; each timed step ends with the
loss as a host number, which waits for the device.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from models import model  # noqa: E402
from models.config import TEXT_MODEL, ModelConfig  # noqa: E402
from models.layers import conductor  # noqa: E402
from models.optim import AdamW, clip_by_global_norm  # noqa: E402
from models.train import array_module_for  # noqa: E402
from models.train_step import TrainStep  # noqa: E402
from tape import keep_freed_memory, make_zero, make_zero_, primal, tree_map  # noqa: E402
from tape.pytree import flatten  # noqa: E402


def hecate_step_fn(cfg: ModelConfig, batch: int, compiled: bool = False, xp=np):
    """Hecate's training step (`models.train_step.TrainStep`, as `hecate train` runs it):
    eager `autodiff`, or the `tape.compile`d program (`hecate train`'s default), on NumPy or
    (``xp=cupy``) on the GPU. Returns the step and the initial parameters on the host."""
    host_params = model.init_params(cfg, 0)
    params = tree_map(xp.asarray, host_params)
    grads = make_zero(params)
    opt = AdamW(params, lr=1e-3)
    train_step = TrainStep(cfg, compiled=compiled)
    box = {"state": model.init_state(cfg, batch, xp)}

    def step(tokens):
        make_zero_(grads)
        _, value, box["state"] = train_step(params, grads, xp.asarray(tokens), box["state"])
        clip_by_global_norm(grads, 1.0)
        opt.step(params, grads)
        return float(primal(value))     # a host number: on the GPU this waits for the step
    step.stats = lambda: train_step.stats
    return step, host_params


def torch_model(cfg: ModelConfig, params, torch, device: str = "cpu"):
    """The same model in eager PyTorch, on copies of Hecate's initial parameters."""
    leaves, _ = flatten(params)
    tleaves = [torch.tensor(np.asarray(x), requires_grad=True, device=device) for x in leaves]
    it = iter(tleaves)
    # Rebuild the same structure with torch leaves (flatten order is the dataclass order).
    tp = tree_map(lambda _: next(it), params)
    F = torch.nn.functional

    def rms(x, w):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w

    def l2(x):
        return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)

    H, dh = cfg.heads, cfg.head_dim

    def split(x):       # [B, T, d] -> [B, H, T, dh] (unchanged for one head)
        return x if H == 1 else x.reshape(x.shape[0], x.shape[1], H, dh).transpose(1, 2)

    def merge(x):
        return x if H == 1 else x.transpose(1, 2).reshape(x.shape[0], x.shape[2], H * dh)

    def rope(x):        # rotary positions 0..T-1 within the chunk (models.layers.rotate)
        T, half = x.shape[-2], dh // 2
        freq = 10000.0 ** (-torch.arange(half, dtype=torch.float64, device=x.device) * 2.0 / dh)
        angle = torch.arange(T, dtype=torch.float64, device=x.device)[:, None] * freq[None, :]
        c, s = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], -1)

    def swa(q, k, v):
        q, k, v = split(q), split(k), split(v)
        if cfg.rotary:
            q, k = rope(q), rope(k)
        T = q.shape[-2]
        s = q @ k.transpose(-1, -2) / math.sqrt(dh)
        i = torch.arange(T, device=q.device)
        mask = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - cfg.window)
        return merge(torch.softmax(s.masked_fill(~mask, float("-inf")), -1) @ v)

    def gate(c, w, b):
        return c @ w + b if H == 1 else (c * w[None, :, None, :]).sum(-1) + b[None, :, None]

    def update(m, s, k, v, decay, theta, eta):
        # one token: k, v [B, (H,) dh]; gates [B, (H)]
        if cfg.rule == "hebbian":
            return (1 - decay)[..., None, None] * m + v[..., :, None] * k[..., None, :], s
        err = torch.einsum("...ij,...j->...i", m, k) - v
        upd = theta[..., None, None] * err[..., :, None] * k[..., None, :]
        if cfg.rule == "delta":
            return (1 - decay)[..., None, None] * m - upd, s
        s = eta[..., None, None] * s - upd
        return (1 - decay)[..., None, None] * m + s, s

    def level(lv, x, st, period, pos):
        k, v, q = l2(split(x @ lv.w_k)), split(x @ lv.w_v), l2(split(x @ lv.w_q))
        c = torch.cat([k, v], -1)
        za, ze = gate(c, lv.w_a, lv.b_a), gate(c, lv.w_e, lv.b_e)
        zt = gate(c, lv.w_t, lv.b_t)
        decay = torch.sigmoid(-za)
        theta = torch.sigmoid(zt) if cfg.bounded_theta else F.softplus(zt)
        eta = torch.sigmoid(ze) * cfg.eta_max
        # The training objective's gate penalty (models.layers.gate_excess).
        excess = sum(((z.abs() - cfg.gate_margin).clamp(min=0) ** 2).mean()
                     for z in ((za, ze) if cfg.rule == "titans" else (za,)))
        m, s = st
        pending, ys = [], []
        for t in range(x.shape[1]):     # the per-token recurrence, as eager PyTorch writes it
            pending.append(t)
            if conductor(pos + t, (period,))[0]:
                for u in pending:
                    m, s = update(m, s, k[..., u, :], v[..., u, :], decay[..., u],
                                  theta[..., u], eta[..., u])
                pending = []
            ys.append(torch.einsum("...ij,...j->...i", m, q[..., t, :]))
        return merge(torch.stack(ys, -2)), (m.detach(), s.detach()), excess

    def loss(tokens, state, pos):
        x = tp.embed[tokens[:, :-1]]
        new, excess = [], 0
        for bi, block in enumerate(tp.blocks):
            h = rms(x, block.norm)
            mem, ns = 0, []
            for li, lv in enumerate(block.memory):
                y, st, e = level(lv, h, state[bi][li], cfg.level_periods[li], pos)
                mem, excess, _ = mem + y, excess + e, ns.append(st)
            if len(block.memory) > 2:
                mem = mem / math.sqrt(len(block.memory))
            a_in = h + mem if cfg.composition == "MAL" else h
            a = swa(a_in @ block.attn.w_q, a_in @ block.attn.w_k, a_in @ block.attn.w_v)
            out = a * torch.sigmoid(mem) if cfg.composition == "MAG" and block.memory else a
            x = x + out @ block.w_o
            if block.mlp is not None:
                u = rms(x, block.mlp.norm) @ block.mlp.w_in
                x = x + F.silu(u) @ block.mlp.w_out
            new.append(ns)
        logits = rms(x, tp.final_norm) @ tp.unembed
        ce = F.cross_entropy(logits.reshape(-1, cfg.vocab), tokens[:, 1:].reshape(-1))
        return ce + cfg.gate_penalty * excess, new

    return tleaves, loss


def torch_step_fn(cfg: ModelConfig, batch: int, params, torch, device: str = "cpu"):
    tleaves, loss = torch_model(cfg, params, torch, device)
    opt = torch.optim.AdamW(tleaves, lr=1e-3)
    zeros = torch.zeros(memory_shape(cfg, batch), device=device)
    box = {"state": [[(zeros, zeros) for _ in range(cfg.levels)] for _ in range(cfg.layers)],
           "pos": 0}

    def step(tokens):
        opt.zero_grad(set_to_none=True)
        value, box["state"] = loss(torch.as_tensor(tokens, device=device), box["state"],
                                   box["pos"])
        box["pos"] += tokens.shape[1] - 1
        value.backward()
        torch.nn.utils.clip_grad_norm_(tleaves, 1.0)
        opt.step()
        return float(value.detach())
    return step, loss


def memory_shape(cfg: ModelConfig, batch: int) -> tuple:
    """One level's memory: ``[B, d, d]``, or ``[B, heads, dh, dh]`` with heads."""
    dh = cfg.head_dim
    return (batch, dh, dh) if cfg.heads == 1 else (batch, cfg.heads, dh, dh)


def measure(step, batches, repeat: int) -> float:
    """Tokens/s: the best of `repeat` timed steps after one warm-up step."""
    step(batches[0])
    best = float("inf")
    for i in range(repeat):
        t0 = time.perf_counter()
        step(batches[(i + 1) % len(batches)])
        best = min(best, time.perf_counter() - t0)
    return batches[0].shape[0] * (batches[0].shape[1] - 1) / best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json")
    ap.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                    help="gpu: Hecate on CuPy (hecate train --device gpu) against PyTorch CUDA")
    ap.add_argument("--text-model", action="store_true",
                    help="models.config.TEXT_MODEL's backbone (heads, MLP, rotary, bounded "
                         "theta) instead of ModelConfig's defaults")
    ap.add_argument("--system-malloc", action="store_true",
                    help="keep malloc's default settings; by default freed memory is kept, as "
                         "`hecate train` does (tape.allocator), for both tools")
    args = ap.parse_args(argv)
    kept = False if args.system_malloc else keep_freed_memory()
    extra = dict(TEXT_MODEL) if args.text_model else {}
    cfg = ModelConfig(dtype="float32", **extra)
    if args.quick:
        cfg = ModelConfig(d_model=16, layers=1, window=8, seq_len=16, levels=2, **extra)
        args.repeat, args.batch = 1, 2
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, cfg.vocab, size=(args.batch, cfg.seq_len + 1))
               for _ in range(4)]
    xp = array_module_for(args.device)
    t_device = "cuda" if args.device == "gpu" else "cpu"
    h_step, params = hecate_step_fn(cfg, args.batch, xp=xp)
    result = {"config": cfg.to_dict(), "batch": args.batch, "device": args.device,
              "freed_memory_kept": kept}
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and t_device == "cuda" and not torch.cuda.is_available():
        print("pytorch : no CUDA device visible to PyTorch (skipped)")
        torch = None
    if torch is not None:
        torch.set_num_threads(1)
        _, tloss = torch_model(cfg, params, torch, t_device)
        st = [[(torch.zeros(memory_shape(cfg, args.batch), device=t_device),) * 2
               for _ in range(cfg.levels)] for _ in range(cfg.layers)]
        t_val = float(tloss(torch.as_tensor(batches[0], device=t_device), st, 0)[0].detach())
        h_val = float(primal(model.training_loss(tree_map(xp.asarray, params),
                                                 xp.asarray(batches[0]),
                                                 model.init_state(cfg, args.batch, xp), cfg)[0]))
        result["loss_check"] = {"hecate": h_val, "torch": t_val}
        print(f"same function: hecate loss {h_val:.6f}, torch loss {t_val:.6f}")
    result["hecate_tokens_per_s"] = measure(h_step, batches, args.repeat)
    print(f"hecate  : {result['hecate_tokens_per_s']:10,.0f} tokens/s (eager autodiff)")
    c_step, _ = hecate_step_fn(cfg, args.batch, compiled=True, xp=xp)
    t0 = time.perf_counter()
    c_step(batches[0])   # the first call traces and compiles
    result["compile_s"] = time.perf_counter() - t0
    result["hecate_compiled_tokens_per_s"] = measure(c_step, batches, args.repeat)
    result["compiled_over_eager"] = (result["hecate_compiled_tokens_per_s"]
                                     / result["hecate_tokens_per_s"])
    print(f"compiled: {result['hecate_compiled_tokens_per_s']:10,.0f} tokens/s "
          f"(tape.compile, hecate train's default; {result['compiled_over_eager']:.2f}x eager; "
          f"first call {result['compile_s']:.2f} s; {c_step.stats()})")
    if torch is not None:
        t_step, _ = torch_step_fn(cfg, args.batch, params, torch, t_device)
        result["torch_tokens_per_s"] = measure(t_step, batches, args.repeat)
        result["ratio"] = result["hecate_tokens_per_s"] / result["torch_tokens_per_s"]
        result["compiled_ratio"] = (result["hecate_compiled_tokens_per_s"]
                                    / result["torch_tokens_per_s"])
        print(f"pytorch : {result['torch_tokens_per_s']:10,.0f} tokens/s")
        print(f"hecate / pytorch: {result['ratio']:.2f}x eager, "
              f"{result['compiled_ratio']:.2f}x compiled")
    else:
        print("pytorch : not installed (skipped)")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
