"""Walkthrough 3: forward mode, JVPs and batch mode; Jacobians by columns or by rows.

Forward mode carries a *tangent* along with each value: `Duplicated(x, v)` gives the
Jacobian-vector product J v in one pass, with no tape. Reverse mode gives u^T J. So a Jacobian
of f: R^n -> R^m costs n forward passes (one column each) or m reverse passes (one row each):
forward wins when inputs are few (n << m: a tall Jacobian), reverse when outputs are few
(n >> m: a wide Jacobian; a gradient has m = 1).
`BatchDuplicated` pushes several tangents through one pass. Every number printed is checked
against the hand-written Jacobian; the timings are only printed.

Run: python docs/walkthroughs/03_forward_and_batch.py
"""
import pathlib
import sys
import time

try:
    import tape
except ImportError:   # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
    import tape

import numpy as np
from tape import BatchDuplicated, Duplicated, Forward, Reverse, autodiff, jacobian

rng = np.random.default_rng(0)
W = rng.standard_normal((3, 4))


def f(x):
    return np.tanh(W @ x)                 # R^4 -> R^3


def J_exact(x):                           # diag(1 - tanh^2) W
    return (1 - np.tanh(W @ x) ** 2)[:, None] * W


x = rng.standard_normal(4)
J = J_exact(x)

# 1. A JVP: one forward pass, no tape. The result is J v.
v = np.array([1.0, 0.0, -1.0, 0.5])
(jv,) = autodiff(Forward, f, Duplicated(x, v))
print("J v       =", np.round(jv, 6))
assert np.allclose(jv, J @ v, atol=1e-12)

# 2. Batch mode: W tangents in one pass (the values are computed once).
(cols,) = autodiff(Forward, f, BatchDuplicated(x, tuple(np.eye(4)[:2])))
print("J e0, J e1 =", [np.round(c, 6) for c in cols])
assert np.allclose(cols[0], J[:, 0]) and np.allclose(cols[1], J[:, 1])

# 3. Whole Jacobians: by columns (forward) and by rows (reverse) agree.
(Jf,) = jacobian(Forward, f, x)
(Jr,) = jacobian(Reverse, f, x)
print("Jacobian (forward, by columns):\n", np.round(Jf, 6))
assert np.allclose(Jf, J, atol=1e-12) and np.allclose(Jr, J, atol=1e-12)
print("reverse (by rows) agrees; both match the closed form")


# 4. When each wins: count passes. Time a wide and a tall function both ways.
def timed(mode, g, x, reps=3):
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        (Jg,) = jacobian(mode, g, x, chunk=1)      # one direction per pass: counts passes
        best = min(best, time.perf_counter() - t0)
    return Jg, best


for n, m in ((2, 200), (200, 2)):
    A = rng.standard_normal((m, n)) / np.sqrt(n)
    g = lambda x, A=A: np.sin(A @ x)               # noqa: E731
    xx = rng.standard_normal(n)
    exact = np.cos(A @ xx)[:, None] * A
    Jf, tf = timed(Forward, g, xx)
    Jr, tr = timed(Reverse, g, xx)
    assert np.allclose(Jf, exact) and np.allclose(Jr, exact)
    winner = "forward" if tf < tr else "reverse"
    print(f"R^{n} -> R^{m}: forward {n} passes {tf * 1e3:6.1f} ms, reverse {m} passes "
          f"{tr * 1e3:6.1f} ms -> {winner} here")
print("(rule of thumb: columns by forward when inputs are few, rows by reverse when outputs are)")
