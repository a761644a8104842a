"""Walkthrough 6: nested AD. Hessian-vector products by forward-over-reverse.

The gradient is itself a NumPy function, so it can be differentiated again. Forward mode over
the reverse-mode gradient gives H v (a Hessian-vector product) for about the cost of two
gradients, without forming H; n of them (batched: `tape.hessian`) give all of H. Every number
printed is checked against the analytic Hessian and against differences of gradients.

Run: python docs/walkthroughs/06_nested_ad.py
"""
import pathlib
import sys

try:
    import tape
except ImportError:   # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
    import tape

import numpy as np
from tape import Active, Duplicated, Forward, Reverse, autodiff, hessian, hvp

rng = np.random.default_rng(0)
n = 5
B = rng.standard_normal((n, n))
A = B @ B.T                                      # symmetric


def f(x):                                        # 1/2 x^T A x + sum(sin x)
    return 0.5 * x @ (A @ x) + np.sum(np.sin(x))


def H_exact(x):                                  # A - diag(sin x)
    return A - np.diag(np.sin(x))


def grad(x):                                     # reverse mode, usable inside other AD
    return autodiff(Reverse, f, Active, Active(x))[0][0]


x = rng.standard_normal(n)
v = rng.standard_normal(n)

# 1. Forward over reverse, spelled out: a JVP of the gradient function.
(Hv,) = autodiff(Forward, grad, Duplicated(x, v))
print("H v (forward over reverse):", np.round(Hv, 8))
assert np.allclose(Hv, H_exact(x) @ v, rtol=1e-12, atol=1e-12)

# 2. The same with the convenience function, and against a difference of gradients.
assert np.allclose(hvp(f, x, v), Hv, rtol=1e-14, atol=1e-14)
h = 1e-5
fd = (grad(x + h * v) - grad(x - h * v)) / (2 * h)
print("difference of gradients  :", np.round(fd, 8))
assert np.allclose(Hv, fd, rtol=1e-7, atol=1e-7)

# 3. The whole Hessian: n Hessian-vector products in one batched pass.
H = hessian(f, x)
print("max |hessian - analytic| =", f"{np.max(np.abs(H - H_exact(x))):.1e}")
assert np.allclose(H, H_exact(x), rtol=1e-12, atol=1e-12)

# 4. One Newton step on the convex quadratic part finds its minimum exactly.
q = lambda x: 0.5 * x @ (A @ x) - x @ np.ones(n)       # noqa: E731
x0 = np.zeros(n)
g0 = autodiff(Reverse, q, Active, Active(x0))[0][0]
x1 = x0 - np.linalg.solve(hessian(q, x0), g0)
assert np.allclose(A @ x1, np.ones(n))
print("one Newton step solves A x = 1: checked")
