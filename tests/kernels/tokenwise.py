"""The kernel pairs written token by token with ordinary NumPy operations.

Differentiated by the tape (every operation recorded), these are test (A)'s reference: the
hand-written backward of each kernel must give the same gradients. One sequence, no batch axes.
"""
import numpy as np


def _outer(a, b):
    return a[:, None] * b[None, :]


def delta(k, v, q, alpha, theta, m0):
    M, ys = m0, []
    for t in range(k.shape[0]):
        e = M @ k[t] - v[t]
        M = (1 - alpha[t]) * M - theta[t] * _outer(e, k[t])
        ys.append(M @ q[t])
    return np.stack(ys), M


def titans(k, v, q, alpha, theta, eta, m0, s0):
    M, S, ys = m0, s0, []
    for t in range(k.shape[0]):
        e = M @ k[t] - v[t]
        S = eta[t] * S - theta[t] * _outer(e, k[t])
        M = (1 - alpha[t]) * M + S
        ys.append(M @ q[t])
    return np.stack(ys), M, S


def hebbian(k, v, q, alpha, m0):
    M, ys = m0, []
    for t in range(k.shape[0]):
        M = (1 - alpha[t]) * M + _outer(v[t], k[t])
        ys.append(M @ q[t])
    return np.stack(ys), M


def swa(q, k, v, window):
    s, hd = q.shape
    rows = []
    for i in range(s):
        lo = max(0, i - window + 1)
        scores = k[lo:i + 1] @ q[i] / np.sqrt(hd)
        w = np.exp(scores - np.max(scores))
        rows.append((w / np.sum(w)) @ v[lo:i + 1])
    return np.stack(rows)


def memory_args(rule, s, d, lead=(2,), seed=0, dtype=np.float64):
    """Random arguments of a memory rule: k, v, q [*lead, s, d], gates in (0.05, 0.6) and
    initial states [*lead, d, d], in `dtype`."""
    rng = np.random.default_rng(seed)
    n_gates = {"delta": 2, "titans": 3, "hebbian": 1}[rule]
    n_states = 2 if rule == "titans" else 1
    seqs = [rng.standard_normal(lead + (s, d)) / np.sqrt(d) for _ in range(3)]
    gates = [rng.uniform(0.05, 0.6, lead + (s,)) for _ in range(n_gates)]
    states = [rng.standard_normal(lead + (d, d)) * 0.3 for _ in range(n_states)]
    return [a.astype(dtype) for a in seqs + gates + states]
