"""The Greeks example: Monte Carlo Greeks from the engine against Black-Scholes (within Monte
Carlo error), against bump-and-reprice finite differences (tightly), in parallel and
checkpointed."""
import importlib.util
import pathlib

import numpy as np
import pytest

PATH = pathlib.Path(__file__).resolve().parents[2] / "examples" / "greeks" / "greeks.py"
spec = importlib.util.spec_from_file_location("greeks_example", PATH)
greeks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(greeks)

S0, SIGMA = 100.0, 0.2
KW = dict(K=100.0, r=0.01, T=1.0)
N = 200_000


@pytest.fixture(scope="module")
def Z():
    return np.random.default_rng(1234).standard_normal(N)


@pytest.fixture(scope="module")
def mc(Z):
    return greeks.pathwise_greeks(greeks.european_price, S0, SIGMA, Z, **KW)


def test_delta_and_vega_match_black_scholes_within_mc_error(mc):
    bs = greeks.black_scholes(S0, SIGMA, **KW)
    assert abs(mc["price"] - bs["price"]) < 0.1            # sanity; the price is not the point
    for k in ("delta", "vega"):
        assert abs(mc[k] - bs[k]) < 4 * mc[k + "_se"], (k, mc[k], bs[k], mc[k + "_se"])
        assert mc[k + "_se"] < 0.01 * abs(bs[k])            # the bound is a real constraint


def test_gamma_by_forward_over_reverse_matches_black_scholes(Z):
    eps = 0.5
    gamma, se = greeks.pathwise_gamma(greeks.european_price, S0, SIGMA, Z, smooth=eps, **KW)
    bs = greeks.black_scholes(S0, SIGMA, **KW)
    smoothed = greeks.smoothed_black_scholes(S0, SIGMA, eps, **KW)
    bias = smoothed["gamma"] - bs["gamma"]
    assert abs(bias) < 0.2 * se                       # the smoothing bias is documented, small
    assert abs(gamma - smoothed["gamma"]) < 4 * se
    assert abs(gamma - bs["gamma"]) < 4 * se + abs(bias)
    assert se < 0.02 * bs["gamma"]


def test_unsmoothed_max_has_zero_pathwise_gamma(Z):
    gamma, _ = greeks.pathwise_gamma(greeks.european_price, S0, SIGMA, Z[:1000], **KW)
    assert gamma == 0.0


def test_greeks_equal_bump_and_reprice_with_common_random_numbers(Z, mc):
    price = greeks.european_price
    h = 1e-4
    fd = (price(S0 + h, SIGMA, Z, **KW) - price(S0 - h, SIGMA, Z, **KW)) / (2 * h)
    fv = (price(S0, SIGMA + h, Z, **KW) - price(S0, SIGMA - h, Z, **KW)) / (2 * h)
    # the max's kink: only paths within h of the strike differ, O(h) relative
    assert mc["delta"] == pytest.approx(fd, rel=1e-5)
    assert mc["vega"] == pytest.approx(fv, rel=1e-5)
    # smooth payoffs: tight
    s = greeks.pathwise_greeks(price, S0, SIGMA, Z, smooth=0.5, **KW)
    sp = lambda a, b: price(a, b, Z, smooth=0.5, **KW)   # noqa: E731
    assert s["delta"] == pytest.approx((sp(S0 + h, SIGMA) - sp(S0 - h, SIGMA)) / (2 * h),
                                       rel=1e-7)
    assert s["vega"] == pytest.approx((sp(S0, SIGMA + h) - sp(S0, SIGMA - h)) / (2 * h),
                                      rel=1e-7)
    gamma, _ = greeks.pathwise_gamma(price, S0, SIGMA, Z, smooth=0.5, **KW)
    h2 = 1e-2
    fg = (sp(S0 + h2, SIGMA) - 2 * sp(S0, SIGMA) + sp(S0 - h2, SIGMA)) / h2 ** 2
    assert gamma == pytest.approx(fg, rel=1e-4)


def test_digital_needs_smoothing(Z):
    kw = dict(KW, K=110.0)
    raw = greeks.pathwise_greeks(greeks.digital_price, S0, SIGMA, Z, **kw)
    assert raw["delta"] == 0.0
    eps = 0.5
    s = greeks.pathwise_greeks(greeks.digital_price, S0, SIGMA, Z, smooth=eps, **kw)
    exact = greeks.smoothed_black_scholes(S0, SIGMA, eps, **kw)["digital_delta"]
    assert abs(s["delta"] - exact) < 4 * s["delta_se"]


def test_asian_vectorised_matches_loop_and_finite_differences():
    Za = np.random.default_rng(5).standard_normal((500, 64))
    g = greeks.pathwise_greeks(greeks.asian_price, S0, SIGMA, Za, **KW)
    loop = greeks.checkpoint_report(S0, SIGMA, Za, every=8, **KW)
    for k in ("delta", "vega"):
        assert loop["plain"][k] == pytest.approx(g[k], rel=1e-10)
    h = 1e-5
    p = lambda a, b: greeks.asian_price(a, b, Za, **KW)   # noqa: E731
    assert g["delta"] == pytest.approx((p(S0 + h, SIGMA) - p(S0 - h, SIGMA)) / (2 * h), rel=1e-5)


def test_parallel_equals_serial(Z, mc):
    d, v = greeks.parallel_delta_vega(greeks.european_price, S0, SIGMA, Z, workers=4, **KW)
    assert d == pytest.approx(mc["delta"], rel=1e-12)
    assert v == pytest.approx(mc["vega"], rel=1e-12)


def test_checkpointed_long_paths_equal_plain_and_save_memory():
    Za = np.random.default_rng(7).standard_normal((500, 1000))
    rep = greeks.checkpoint_report(S0, SIGMA, Za, every=32, **KW)
    p, c = rep["plain"], rep["checkpointed"]
    assert c["delta"] == pytest.approx(p["delta"], rel=1e-12)
    assert c["vega"] == pytest.approx(p["vega"], rel=1e-12)
    assert c["peak_bytes"] * 3 < p["peak_bytes"]


def test_docstring_examples():
    import doctest
    result = doctest.testmod(greeks, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
