"""The Greeks of `greeks.py` with the Monte Carlo paths split over MPI ranks: each rank runs
its own reverse pass (Delta, Vega) and forward-over-reverse pass (Gamma) over its paths, and
the per-path adjoints are reduced into the figures one process gets over the same paths.

The paths are `blocks` independent streams, each seeded by a child of one
`numpy.random.SeedSequence` (``SeedSequence(seed).spawn(blocks)``): block b holds the same
normals whichever rank draws it, so the path set depends only on ``(seed, paths, blocks)``,
never on the number of ranks, and no two ranks share a stream. Rank r draws blocks
``r, r + N, r + 2N, ...``.

Each Greek is a mean of per-path derivatives; a rank differentiates its own mean, scales the
per-path adjoints back to per-path derivatives, and contributes their sum (then, around the
global mean, the sum of squared deviations for the standard error): two small allreduces.
The result equals `greeks.pathwise_greeks` / `greeks.pathwise_gamma` on all the paths at once,
up to the order of the sums.

    python examples/greeks/mpi_greeks.py                  # one process
    mpiexec -n 4 python examples/greeks/mpi_greeks.py     # four ranks, the same figures

>>> Z = normals(seed=0, paths=10, blocks=4)
>>> Z.shape, bool(np.array_equal(np.concatenate([block_normals(0, 10, 4, b) for b in
...                                              range(4)]), Z))
((10,), True)
"""
from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys

import numpy as np

try:
    import models  # noqa: F401
except ImportError:   # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from greeks import european_price, terminal_prices  # noqa: E402

from models.distributed import World, current_world  # noqa: E402
from tape import Active, Const, Reverse, autodiff, hvp  # noqa: E402

GREEKS = ("price", "delta", "vega", "gamma")


def block_sizes(paths: int, blocks: int) -> list:
    """Paths per block: as equal as possible, the first ones one larger."""
    return [paths // blocks + (b < paths % blocks) for b in range(blocks)]


def block_normals(seed: int, paths: int, blocks: int, b: int) -> np.ndarray:
    """The standard normals of block `b`, from the b-th child of ``SeedSequence(seed)``."""
    child = np.random.SeedSequence(seed).spawn(blocks)[b]
    return np.random.default_rng(child).standard_normal(block_sizes(paths, blocks)[b])


def normals(seed: int, paths: int, blocks: int, rank: int = 0, size: int = 1) -> np.ndarray:
    """The normals of the blocks rank `rank` of `size` draws (all of them for one process)."""
    return np.concatenate([block_normals(seed, paths, blocks, b)
                           for b in range(rank, blocks, size)] or [np.zeros(0)])


def per_path(S0: float, sigma: float, Z: np.ndarray, smooth: float, **kw) -> dict:
    """Per-path discounted payoff, Delta and Vega (reverse mode, the plain call) and Gamma
    (forward-over-reverse, the softplus-smoothed call), each as a vector over `Z`'s paths."""
    n = Z.shape[0]
    if n == 0:
        return {k: np.zeros(0) for k in GREEKS}
    s0, sig = np.full(n, float(S0)), np.full(n, float(sigma))
    (dS, dsig, _), = autodiff(Reverse, lambda a, b, z: european_price(a, b, z, **kw), Active,
                              Active(s0), Active(sig), Const(Z))
    payoff = np.maximum(terminal_prices(S0, sigma, Z, kw["r"], kw["T"]) - kw["K"], 0.0)
    h = hvp(lambda s: european_price(s, float(sigma), Z, smooth=smooth, **kw), s0, np.ones(n))
    # The gradient of a mean over n paths is each path's derivative divided by n.
    return {"price": math.exp(-kw["r"] * kw["T"]) * payoff, "delta": n * np.asarray(dS),
            "vega": n * np.asarray(dsig), "gamma": n * np.asarray(h)}


def reduced_greeks(world: World, samples: dict, paths: int) -> dict:
    """Each Greek's mean over all ranks' paths and its Monte Carlo standard error: sums, then
    squared deviations from the global mean (no cancellation), one allreduce each."""
    sums = np.array([float(np.sum(samples[k])) for k in GREEKS])
    world.allreduce_sum_(sums)
    means = sums / paths
    squares = np.array([float(np.sum((samples[k] - m) ** 2)) for k, m in zip(GREEKS, means)])
    world.allreduce_sum_(squares)
    out = {}
    for k, m, sq in zip(GREEKS, means, squares):
        out[k] = float(m)
        out[k + "_se"] = math.sqrt(sq / (paths - 1) / paths)
    return out


def run(world: World, paths: int, seed: int, blocks: int, smooth: float = 0.5,
        S0: float = 100.0, sigma: float = 0.2, K: float = 100.0, r: float = 0.01,
        T: float = 1.0) -> dict:
    """This rank's share of the paths, differentiated, reduced over `world`."""
    if blocks < world.size:
        raise SystemExit(f"mpi_greeks.py: --blocks {blocks} is fewer than the {world.size} "
                         f"ranks: some rank would have no paths; raise --blocks")
    Z = normals(seed, paths, blocks, world.rank, world.size)
    samples = per_path(S0, sigma, Z, smooth, K=K, r=r, T=T)
    result = reduced_greeks(world, samples, paths)
    result.update(paths=paths, seed=seed, blocks=blocks, ranks=world.size, smooth=smooth)
    return result


def main(argv: list | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--paths", type=int, default=200_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--blocks", type=int, default=64,
                   help="independent streams the paths are cut into (at least the rank count)")
    p.add_argument("--json", help="also write the figures to this file (rank 0)")
    args = p.parse_args(argv)
    world = current_world()
    res = run(world, args.paths, args.seed, args.blocks)
    if world.is_root:
        print(f"European call, {args.paths} paths in {args.blocks} blocks on {world.size} "
              f"rank(s), seed {args.seed}")
        for k in GREEKS:
            print(f"  {k:6s} {res[k]:14.10f} +- {res[k + '_se']:.6f}")
        if args.json:
            pathlib.Path(args.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
