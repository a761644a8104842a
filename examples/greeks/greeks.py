"""Monte Carlo Greeks with Hecate: pathwise Delta and Vega by reverse mode, Gamma by
forward-over-reverse, smoothed payoffs, parallel paths and checkpointed long paths.

The underlying follows geometric Brownian motion under the risk-neutral measure,
``S_T = S0 exp((r - sigma^2/2) T + sigma sqrt(T) Z)``. A Monte Carlo price is a plain NumPy
function of ``(S0, sigma, Z)``; differentiating it with the normals ``Z`` held `Const` gives the
*pathwise* estimator of each Greek: the derivative of the estimator, which is an unbiased
estimator of the derivative whenever the payoff is Lipschitz (a call's max is; a digital's
indicator is not, see `digital_price`).

Passing ``S0`` as a vector with one entry per path (all equal) makes the gradient per path:
its entries are the per-path Delta contributions, from which the Monte Carlo standard error
follows for free. Run ``python examples/greeks/greeks.py`` for a report.

>>> import numpy as np
>>> Z = np.random.default_rng(0).standard_normal(20000)
>>> g = pathwise_greeks(european_price, 100.0, 0.2, Z, K=100.0, r=0.01, T=1.0)
>>> bs = black_scholes(100.0, 0.2, K=100.0, r=0.01, T=1.0)
>>> abs(g["delta"] - bs["delta"]) < 4 * g["delta_se"]
True
"""
from __future__ import annotations

import math
import pathlib
import sys
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np

try:
    import tape  # noqa: F401
except ImportError:   # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from tape import Active, Const, Reverse, autodiff, checkpointed_scan, hvp

# --------------------------------------------------------------------------------------------
# Payoffs and pricers: plain NumPy, differentiated as written.


def softplus(x, eps: float):
    """``eps * log(1 + exp(x / eps))``: max(x, 0) smoothed over a width eps (stable form).

    It equals E[max(x + eps L, 0)] for L standard logistic, so a smoothed call is the exact
    call averaged over strikes K - eps L: the bias is (pi^2/6) eps^2 times the strike density
    to leading order, and `smoothed_black_scholes_gamma` gives it exactly.

    >>> round(float(softplus(np.float64(0.0), 0.1)), 6)   # eps log 2
    0.069315
    """
    return np.maximum(x, 0.0) + eps * np.log1p(np.exp(-np.abs(x) / eps))


def sigmoid(x, eps: float):
    """The indicator 1{x > 0} smoothed over a width eps: 1 / (1 + exp(-x / eps))."""
    return 0.5 * (1.0 + np.tanh(x / (2.0 * eps)))


def terminal_prices(S0, sigma, Z, r: float, T: float):
    """S_T for each normal in Z (S0 and sigma: scalars or one value per path)."""
    return S0 * np.exp((r - 0.5 * sigma ** 2) * T + sigma * math.sqrt(T) * Z)


def european_price(S0, sigma, Z, *, K: float, r: float, T: float, smooth: float | None = None):
    """Discounted mean of max(S_T - K, 0) (softplus with width `smooth` if given)."""
    x = terminal_prices(S0, sigma, Z, r, T) - K
    payoff = np.maximum(x, 0.0) if smooth is None else softplus(x, smooth)
    return math.exp(-r * T) * np.mean(payoff)


def digital_price(S0, sigma, Z, *, K: float, r: float, T: float, smooth: float | None = None):
    """Discounted mean of 1{S_T > K}, smoothed by a sigmoid of width `smooth` if given.

    Unsmoothed, the pathwise Delta is exactly zero (the indicator is flat almost everywhere)
    although the true Delta is not: the estimator is piecewise constant in S0. The sigmoid makes
    it differentiable at the cost of pricing the digital averaged over strikes K - eps L.
    """
    x = terminal_prices(S0, sigma, Z, r, T) - K
    payoff = (x > 0).astype(float) if smooth is None else sigmoid(x, smooth)
    return math.exp(-r * T) * np.mean(payoff)


def asian_price(S0, sigma, Z, *, K: float, r: float, T: float, smooth: float | None = None):
    """Arithmetic-average Asian call over ``Z.shape[1]`` monitoring dates (Z: paths x steps),
    vectorised over time (one cumsum: a handful of records however long the path)."""
    n = Z.shape[1]
    dt = T / n
    S0 = S0[..., None] if np.ndim(S0) else S0
    sigma = sigma[..., None] if np.ndim(sigma) else sigma
    logs = np.cumsum((r - 0.5 * sigma ** 2) * dt + sigma * math.sqrt(dt) * Z, axis=1)
    x = np.mean(S0 * np.exp(logs), axis=1) - K
    payoff = np.maximum(x, 0.0) if smooth is None else softplus(x, smooth)
    return math.exp(-r * T) * np.mean(payoff)


def asian_price_loop(S0, sigma, Z, *, K: float, r: float, T: float, every: int | None = 0):
    """The Asian call as a time loop, the way a path simulator is usually written.

    ``every=0``: a plain Python loop; the tape keeps every step's residuals (memory grows with
    the number of steps). ``every=k`` (or None for about sqrt(steps)): `checkpointed_scan`,
    which keeps every k-th carry and recomputes each segment in the reverse pass.
    """
    n = Z.shape[1]
    dt = T / n
    drift, vol = (r - 0.5 * sigma ** 2) * dt, sigma * math.sqrt(dt)

    def step(carry, z):
        s, total = carry
        s = s * np.exp(drift + vol * z)
        return (s, total + s), None

    s0 = S0 * np.ones(Z.shape[0])
    carry = (s0, np.zeros(Z.shape[0]))
    if every == 0:
        for t in range(n):
            carry, _ = step(carry, Z[:, t])
    else:
        carry, _ = checkpointed_scan(step, carry, Z.T, every=every)
    x = carry[1] / n - K
    return math.exp(-r * T) * np.mean(np.maximum(x, 0.0))


# --------------------------------------------------------------------------------------------
# Greeks from the engine


def pathwise_greeks(price: Callable, S0: float, sigma: float, Z, **kw) -> dict:
    """Price, Delta and Vega (with Monte Carlo standard errors) in one reverse pass.

    S0 and sigma are given as one value per path, so the gradient of the mean is the vector
    of per-path derivatives divided by the number of paths N.
    """
    N = Z.shape[0]
    s0, sig = np.full(N, float(S0)), np.full(N, float(sigma))
    (dS, dsig, _), value = autodiff(_with_primal(), lambda a, b, z: price(a, b, z, **kw),
                                    Active, Active(s0), Active(sig), Const(Z))
    return {"price": float(value),
            "delta": float(np.sum(dS)), "delta_se": _se(N * dS),
            "vega": float(np.sum(dsig)), "vega_se": _se(N * dsig)}


def _with_primal():
    from tape import ReverseWithPrimal
    return ReverseWithPrimal


def _se(per_path) -> float:
    return float(np.std(per_path, ddof=1) / math.sqrt(len(per_path)))


def pathwise_gamma(price: Callable, S0: float, sigma: float, Z, **kw) -> tuple[float, float]:
    """Gamma and its standard error by forward-over-reverse (`tape.hvp`).

    Paths are independent, so the Hessian in the per-path S0 vector is diagonal and one
    Hessian-vector product with the all-ones direction returns every path's Gamma / N.
    The payoff must be twice differentiable: pass ``smooth=eps`` (a max has a zero second
    derivative almost everywhere, so its pathwise Gamma is 0).
    """
    N = Z.shape[0]
    h = hvp(lambda s: price(s, float(sigma), Z, **kw), np.full(N, float(S0)), np.ones(N))
    return float(np.sum(h)), _se(N * h)


def parallel_delta_vega(price: Callable, S0: float, sigma: float, Z, workers: int = 2,
                        **kw) -> tuple[float, float]:
    """Delta and Vega with the paths split over `workers` threads, each with its own
    `autodiff` call (its own tape: traces are per thread), reduced at the end.

    Each worker differentiates its *sum* of discounted payoffs (its chunk's mean times the
    chunk size), so the reduction is a plain sum divided by the total number of paths.
    """
    N = Z.shape[0]
    chunks = np.array_split(Z, workers)

    def work(z):
        f = lambda a, b, z: price(a, b, z, **kw) * z.shape[0]   # noqa: E731
        (dS, dsig, _), = autodiff(Reverse, f, Active, Active(float(S0)), Active(float(sigma)),
                                  Const(z))
        return dS, dsig

    with ThreadPoolExecutor(max_workers=workers) as pool:
        parts = list(pool.map(work, chunks))
    return sum(p[0] for p in parts) / N, sum(p[1] for p in parts) / N


def checkpoint_report(S0: float, sigma: float, Z, every: int | None = None, **kw) -> dict:
    """Delta and Vega of the looped Asian call, plain and checkpointed, with the peak memory
    (tracemalloc) and time of each gradient."""
    out = {}
    for name, ev in (("plain", 0), ("checkpointed", every)):
        f = lambda a, b: asian_price_loop(a, b, Z, every=ev, **kw)   # noqa: E731
        tracemalloc.start()
        t0 = time.perf_counter()
        (dS, dsig), = autodiff(Reverse, f, Active, Active(float(S0)), Active(float(sigma)))
        seconds = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        out[name] = {"delta": float(dS), "vega": float(dsig), "peak_bytes": peak,
                     "seconds": seconds}
    return out


# --------------------------------------------------------------------------------------------
# Closed forms


def _ncdf(x):
    return 0.5 * (1.0 + np.vectorize(math.erf)(np.asarray(x, dtype=float) / math.sqrt(2.0)))


def _npdf(x):
    return np.exp(-0.5 * np.asarray(x) ** 2) / math.sqrt(2.0 * math.pi)


def black_scholes(S0: float, sigma: float, *, K, r: float, T: float) -> dict:
    """European call price, Delta, Vega, Gamma (K may be an array of strikes).

    >>> round(black_scholes(100.0, 0.2, K=100.0, r=0.0, T=1.0)["price"], 4)
    7.9656
    """
    d1 = (np.log(S0 / np.asarray(K, dtype=float)) + (r + 0.5 * sigma ** 2) * T) / (
        sigma * math.sqrt(T))
    d2 = d1 - sigma * math.sqrt(T)
    price = S0 * _ncdf(d1) - np.asarray(K) * math.exp(-r * T) * _ncdf(d2)
    res = {"price": price, "delta": _ncdf(d1), "vega": S0 * _npdf(d1) * math.sqrt(T),
           "gamma": _npdf(d1) / (S0 * sigma * math.sqrt(T)),
           "digital": math.exp(-r * T) * _ncdf(d2),
           "digital_delta": math.exp(-r * T) * _npdf(d2) / (S0 * sigma * math.sqrt(T))}
    return {k: (float(v) if np.ndim(v) == 0 else v) for k, v in res.items()}


def smoothed_black_scholes(S0: float, sigma: float, eps: float, *, K: float, r: float,
                           T: float) -> dict:
    """The closed form of the smoothed payoffs: Black-Scholes averaged over the strikes
    K - eps L, L standard logistic (quadrature). Their difference from `black_scholes` is the
    bias the smoothing introduces."""
    l = np.linspace(-40.0, 40.0, 8001)
    w = np.exp(-np.abs(l)) / (1.0 + np.exp(-np.abs(l))) ** 2     # logistic density
    w = w / np.sum(w)
    bs = black_scholes(S0, sigma, K=K - eps * l, r=r, T=T)
    return {k: float(np.sum(w * v)) for k, v in bs.items()}


# --------------------------------------------------------------------------------------------


def main(paths: int = 200_000, seed: int = 0) -> None:
    """Print the Greeks next to Black-Scholes, finite differences and the smoothing bias."""
    S0, sigma, K, r, T = 100.0, 0.2, 100.0, 0.01, 1.0
    kw = dict(K=K, r=r, T=T)
    Z = np.random.default_rng(seed).standard_normal(paths)
    bs = black_scholes(S0, sigma, **kw)
    g = pathwise_greeks(european_price, S0, sigma, Z, **kw)
    print(f"European call, {paths} paths        MC (+- 1 s.e.)          Black-Scholes")
    print(f"  price  {g['price']:10.5f}                         {bs['price']:10.5f}")
    for k in ("delta", "vega"):
        print(f"  {k:6s} {g[k]:10.5f} +- {g[k + '_se']:.5f}              {bs[k]:10.5f}")
    eps = 0.5
    gam, gse = pathwise_gamma(european_price, S0, sigma, Z, smooth=eps, **kw)
    sbs = smoothed_black_scholes(S0, sigma, eps, **kw)
    print(f"  gamma  {gam:10.5f} +- {gse:.5f}  (softplus eps={eps}) {bs['gamma']:10.5f}"
          f"   smoothing bias {sbs['gamma'] - bs['gamma']:+.2e}")
    h = 1e-4 * S0
    fd = (european_price(S0 + h, sigma, Z, **kw) - european_price(S0 - h, sigma, Z, **kw)) / (2 * h)
    print(f"  delta by bump-and-reprice (same normals): {fd:.8f} vs {g['delta']:.8f}")
    kd = dict(kw, K=110.0)
    d = pathwise_greeks(digital_price, S0, sigma, Z, smooth=eps, **kd)
    d0 = pathwise_greeks(digital_price, S0, sigma, Z, **kd)
    bsd, sbsd = black_scholes(S0, sigma, **kd), smoothed_black_scholes(S0, sigma, eps, **kd)
    print(f"Digital call K=110: delta unsmoothed {d0['delta']:.5f} (pathwise: always 0), "
          f"sigmoid eps={eps}: {d['delta']:.5f} +- {d['delta_se']:.5f}; closed form "
          f"{bsd['digital_delta']:.5f}, smoothed closed form {sbsd['digital_delta']:.5f}")
    pd, pv = parallel_delta_vega(european_price, S0, sigma, Z, workers=4, **kw)
    print(f"4 threads: delta {pd:.10f} vega {pv:.10f} (serial {g['delta']:.10f} "
          f"{g['vega']:.10f})")
    Za = np.random.default_rng(seed + 1).standard_normal((2000, 1000))
    rep = checkpoint_report(S0, sigma, Za, every=32, **kw)
    p, c = rep["plain"], rep["checkpointed"]
    print(f"Asian call, 2000 paths x 1000 steps: delta {p['delta']:.5f} vega {p['vega']:.5f}")
    print(f"  plain loop:   peak {p['peak_bytes'] / 2**20:7.1f} MiB, {p['seconds']:.2f} s")
    print(f"  checkpointed: peak {c['peak_bytes'] / 2**20:7.1f} MiB, {c['seconds']:.2f} s "
          f"(memory / {p['peak_bytes'] / c['peak_bytes']:.1f}, time x "
          f"{c['seconds'] / p['seconds']:.2f})")


if __name__ == "__main__":
    main()
