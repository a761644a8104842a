"""Synthetic ADBench inputs, so that the benchmarks run without ADBench's files.

The generated instances have ADBench's shapes and value ranges (GMM: normal alphas and points,
uniform means; LSTM: uniform parameters and state, characters as b bits; BA: one camera, point,
weight and feature replicated, exactly like ADBench's files) and are written in ADBench's
formats by `io`. ``random_ba`` makes a BA instance whose cameras, points and observations all
differ, for tests (ADBench's replicated instances have identical rows).

    python -m models.bench.adbench.generate gmm --d 10 --K 25 --n 1000 gmm_d10_K25.txt
    python -m models.bench.adbench.generate lstm --l 2 --c 1024 lstm_l2_c1024.txt
    python -m models.bench.adbench.generate ba --n 49 --m 7776 --p 31843 ba1.txt
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

from ...validation import POSITIVE_INT, SEED
from . import io


def gmm(d: int, K: int, n: int, seed: int = 0, gamma: float = 1.0, m: int = 0) -> io.GMMInput:
    """A GMM instance with K components in d dimensions and n points."""
    rng = np.random.default_rng(seed)
    return io.GMMInput(alphas=rng.standard_normal(K), means=rng.uniform(size=(K, d)),
                       icf=rng.standard_normal((K, d * (d + 1) // 2)),
                       x=rng.standard_normal((n, d)), gamma=gamma, m=m)


def lstm(l: int, c: int, b: int = 14, seed: int = 0) -> io.LSTMInput:
    """An LSTM instance: l layers, c characters of b bits (printable ASCII, high bit first)."""
    rng = np.random.default_rng(seed)
    chars = rng.integers(32, 127, size=c)
    bits = (chars[:, None] >> np.arange(b - 1, -1, -1)) & 1
    return io.LSTMInput(main_params=rng.uniform(size=(2 * l, 4 * b)),
                        extra_params=rng.uniform(size=(3, b)),
                        state=rng.uniform(size=(2 * l, b)), sequence=bits.astype(np.float64))


def ba_one_of_each(seed: int = 0):
    """The values of an ADBench BA file: one camera, point, weight and feature."""
    rng = np.random.default_rng(seed)
    cam = np.concatenate([rng.standard_normal(3), rng.uniform(0, 100, 3), rng.uniform(100, 500, 1),
                          rng.standard_normal(2) * 5, rng.uniform(0, 0.1, 2)])
    point = rng.uniform(0, 10, 3)
    return cam, point, float(rng.uniform()), rng.uniform(-500, 500, 2)


def ba(n: int, m: int, p: int, seed: int = 0) -> io.BAInput:
    """A BA instance in ADBench's form: one camera, point, weight and feature replicated."""
    return io.replicate_ba(n, m, p, *ba_one_of_each(seed))


def random_ba(n: int, m: int, p: int, seed: int = 0) -> io.BAInput:
    """A BA instance whose cameras, points, weights and observations all differ (for tests).
    Camera 0 has rotation exactly 0, which exercises the small-angle branch. Points lie well in
    front of the cameras, so no projection divides by a depth near 0."""
    rng = np.random.default_rng(seed)
    cams = np.concatenate([rng.normal(0, 0.3, (n, 3)), rng.normal(0, 0.5, (n, 3)),
                           rng.uniform(1, 2, (n, 1)), rng.normal(0, 0.1, (n, 2)),
                           rng.normal(0, 0.1, (n, 2))], axis=1)
    cams[0, :3] = 0.0
    X = np.concatenate([rng.normal(0, 1, (m, 2)), rng.uniform(5, 10, (m, 1))], axis=1)
    obs = np.stack([rng.integers(0, n, p), rng.integers(0, m, p)], axis=1)
    used = min(n, p)
    obs[:used, 0] = np.arange(used)     # every camera is observed (when p >= n)
    return io.BAInput(cams, X, rng.uniform(0.5, 1.5, p), obs, rng.normal(0, 0.5, (p, 2)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Write a synthetic input in ADBench's format.")
    sub = parser.add_subparsers(dest="problem", required=True)
    for name, dims in [("gmm", ("d", "K", "n")), ("lstm", ("l", "c")), ("ba", ("n", "m", "p"))]:
        p = sub.add_parser(name)
        for dim in dims:
            p.add_argument(f"--{dim}", type=POSITIVE_INT, required=True)
        p.add_argument("--seed", type=SEED, default=0)
        p.add_argument("path")
    args = parser.parse_args(argv)
    if args.problem == "gmm":
        io.write_gmm(args.path, gmm(args.d, args.K, args.n, args.seed))
    elif args.problem == "lstm":
        io.write_lstm(args.path, lstm(args.l, args.c, seed=args.seed))
    else:
        io.write_ba(args.path, args.n, args.m, args.p, *ba_one_of_each(args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
