"""Walkthrough 7: checkpointing. The memory/time trade-off, measured.

Reverse mode keeps every value the reverse rules need until the sweep reaches them: a loop of
n steps holds n steps of residuals. `tape.checkpointed_scan(step, carry, xs, every=k)` keeps
only every k-th carry and recomputes each segment of k steps during the reverse pass: memory
about n/k + k steps instead of n (least at k = sqrt(n)), for one extra forward pass. The
gradients are the same; the script asserts that and prints the measured ratios (peak memory by
tracemalloc, time by the wall clock; only printed, they vary by machine).

Run: python docs/walkthroughs/07_checkpointing.py
"""
import pathlib
import sys
import time
import tracemalloc

try:
    import tape
except ImportError:   # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
    import tape

import numpy as np
from tape import Active, Const, Reverse, autodiff, checkpointed_scan

rng = np.random.default_rng(0)
d, n, batch = 16, 1024, 64
W0 = rng.standard_normal((d, d)) * 0.9 / np.sqrt(d)
xs = rng.standard_normal((n, batch, d)) * 0.5
h0 = np.zeros((batch, d))


def step(W):
    """One RNN step: (carry, input) -> (new carry, output). It closes over W, which the
    checkpointed scan still differentiates."""
    def f(h, x):
        h = np.tanh(h @ W + x)
        return h, np.sum(h * h)
    return f


def loss_plain(W, xs):
    h, total = h0, 0.0
    f = step(W)
    for t in range(n):
        h, y = f(h, xs[t])
        total = total + y
    return total / n


def loss_scan(W, xs, **schedule):
    _, ys = checkpointed_scan(step(W), h0, xs, **schedule)
    return np.sum(ys) / n


def measure(loss, **kw):
    tracemalloc.start()
    t0 = time.perf_counter()
    ((dW, _),) = autodiff(Reverse, lambda W, xs: loss(W, xs, **kw), Active, Active(W0),
                          Const(xs))
    seconds = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return dW, peak, seconds


runs = {"plain loop": measure(loss_plain),
        "every=32 (sqrt n)": measure(loss_scan, every=32),
        "every=128": measure(loss_scan, every=128),
        "revolve, 8 snapshots": measure(loss_scan, schedule="revolve", snapshots=8)}
dW_ref, peak_ref, t_ref = runs["plain loop"]
print(f"RNN, {n} steps, batch {batch}, width {d}: gradient of W")
print(f"  {'schedule':22s} {'peak MiB':>9s} {'memory':>8s} {'seconds':>8s} {'time':>6s}")
for name, (dW, peak, seconds) in runs.items():
    print(f"  {name:22s} {peak / 2**20:9.1f} {peak_ref / peak:7.1f}x {seconds:8.2f} "
          f"{seconds / t_ref:5.2f}x")
    assert np.allclose(dW, dW_ref, rtol=1e-12, atol=1e-14), name
print("all schedules give the same gradient (checked); 'memory' is plain / this, 'time' this / plain")

# The gradient itself, against a central difference in one direction.
V = rng.standard_normal((d, d))
h = 1e-6
fd = (loss_plain(W0 + h * V, xs) - loss_plain(W0 - h * V, xs)) / (2 * h)
print(f"directional derivative: tape {np.sum(dW_ref * V):.10f}, central difference {fd:.10f}")
assert abs(np.sum(dW_ref * V) - fd) < 1e-7 * max(1.0, abs(fd))
assert runs["every=32 (sqrt n)"][1] * 4 < peak_ref       # the point of it: far less memory
