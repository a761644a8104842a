"""The chunk's short-axis sums as products with ones (`memory_chunked.row_dots`,
`running_sums`, `span_decays`, `_log_gradient`) against the former reductions and, through the
default dispatch, against the sequential loop (`kernels.force_reference`): retentions above 1
(negative ``alpha`` down to -1e3), momentum at the smallest normal numbers, lengths off the chunk
grid with forced chunks (`memory_chunked.CHUNK`, restored), d = 1 to 64, periodic levels of 2 and
8 tokens. Each end-to-end case also checks that the chunked forms ran (forward and backward), so
that the loop's fallback does not hide them. Cotangents that overflow the gradients must give
NaN and inf where the loop does (a product by 0 of an inf is a NaN in the new forms; the
backward's range check sends such calls to the loop). Tolerances as `test_memory_scale.compare`.
"""
import numpy as np
import pytest

import kernels
from kernels import memory_chunked, memory_chunked_titans, memory_periodic_chunked
from test_memory_scale import NAMES, compare, kernel, mismatch, RTOL
from weighted import grads

_USERS = (memory_chunked, memory_chunked_titans, memory_periodic_chunked)


@pytest.fixture
def counted(monkeypatch):
    """Counts of the calls of `span_decays` (forward) and `_log_gradient` (backward)."""
    calls = {"span_decays": 0, "_log_gradient": 0}
    for name in calls:
        original = getattr(memory_chunked, name)

        def wrapped(*a, _f=original, _n=name):
            calls[_n] += 1
            return _f(*a)
        for module in _USERS:
            monkeypatch.setattr(module, name, wrapped)
    return calls


def _args(rule, T, d, dtype, seed, alpha, eta):
    rng = np.random.default_rng(seed)
    k, v, q = rng.standard_normal((3, 2, T, d))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    s = (2, T)
    named = dict(k=k, v=v, q=q, alpha=alpha(rng, s), theta=rng.uniform(0, 0.3, s),
                 eta=eta(rng, s), m0=rng.standard_normal((2, d, d)) * 0.3,
                 s0=rng.standard_normal((2, d, d)) * 0.3)
    return tuple(np.asarray(named[n]).astype(dtype) for n in NAMES[rule])


def _ordinary(rng, s):
    return rng.uniform(0.0, 0.3, s)


def _growing(rng, s):
    """Retentions 1 - alpha above 1 on a third of the tokens, up to 1001."""
    return np.where(rng.random(s) < 0.3, -rng.uniform(0.0, 1e3, s), rng.uniform(0.0, 0.3, s))


def _momentum(rng, s):
    return rng.uniform(0.0, 0.9, s)


def _tiny_momentum(dtype):
    tiny = float(np.finfo(dtype).tiny)
    return lambda rng, s: np.where(rng.random(s) < 0.5, tiny * rng.uniform(1, 4, s),
                                   rng.uniform(0.0, 0.9, s))


# (rule, dtype, d, T, forced chunk, period, alpha, eta): every case runs chunked both ways.
CASES = [
    ("delta", np.float32, 16, 21, 8, None, _growing, _momentum),
    ("delta", np.float64, 33, 70, 5, 8, _growing, _momentum),
    ("delta", np.float64, 64, 50, None, 2, _ordinary, _momentum),
    ("hebbian", np.float32, 1, 37, None, None, _growing, _momentum),
    ("hebbian", np.float32, 16, 19, 1, 2, _growing, _momentum),
    ("titans", np.float32, 1, 37, None, 8, _growing, _tiny_momentum(np.float32)),
    ("titans", np.float32, 16, 21, 8, None, _growing, _tiny_momentum(np.float32)),
    ("titans", np.float64, 33, 70, 5, 2, _growing, _tiny_momentum(np.float64)),
    ("titans", np.float32, 64, 50, None, None, _ordinary, _tiny_momentum(np.float32)),
]


@pytest.mark.parametrize("rule,dtype,d,T,chunk,period,alpha,eta", CASES)
def test_chunked_forms_agree_with_the_loop(monkeypatch, counted, rule, dtype, d, T, chunk,
                                           period, alpha, eta):
    monkeypatch.setattr(memory_chunked, "CHUNK", chunk)
    args = _args(rule, T, d, dtype, 0, alpha, eta)
    assert compare(kernel(rule, period), args, NAMES[rule]) == {}
    assert counted["span_decays"] > 0 and counted["_log_gradient"] > 0


@pytest.mark.parametrize("rule", ["delta", "hebbian", "titans"])
@pytest.mark.parametrize("period", [None, 8])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_overflowing_cotangents_match_the_loop(rule, period, dtype):
    """One output entry's cotangent at the dtype's largest number: the gradients overflow in
    both forms, in the same places (no NaN from a product of 0 and inf in `_log_gradient`)."""
    args = _args(rule, 40, 4, dtype, 1, _ordinary, _momentum)
    fn = kernel(rule, period)
    with np.errstate(all="ignore"):
        outs = fn(*args)
        rng = np.random.default_rng(2)
        weights = [rng.standard_normal(o.shape).astype(dtype) for o in outs]
        weights[0][1, 20, 2] = np.finfo(dtype).max
        got = grads(fn, args, weights)
        with kernels.force_reference():
            want = grads(fn, args, weights)
    assert not all(np.isfinite(w).all() for w in want)      # the case does overflow
    assert {n: m for n, g, w in zip(NAMES[rule], got, want)
            if (m := mismatch(g, w, RTOL[dtype])) is not None} == {}


# -- the helpers against the reductions they replace --------------------------------------------

def _span_decays_before(lr, C):
    lower, strict = memory_chunked._triangles(np, C)
    spans = np.cumsum(np.where(strict, lr[..., :, None], 0.0), axis=-2)
    with np.errstate(under="ignore"):
        return np.exp(np.where(lower, spans, -np.inf))


def _log_gradient_before(pairs, starts):
    C = pairs.shape[-1]
    full = np.concatenate([starts[..., None], pairs], axis=-1)
    covered = np.cumsum(full, axis=-1)[..., :C]
    return np.sum(np.where(memory_chunked._triangles(np, C)[0], covered, 0.0), axis=-2)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("C", [1, 5, 16, 33])
def test_helpers_match_the_reductions_they_replace(dtype, C):
    """Log retentions from that of the smallest normal number to that of the largest, span
    terms of every order of magnitude and sign: the same values to a few units in the last
    place of the largest term (the order of the additions may differ)."""
    rng = np.random.default_rng(C)
    info = np.finfo(dtype)
    hi = float(np.log(info.max))
    lr = rng.choice(np.array([np.log(info.tiny), -1.0, -1e-7, 0.0, 1e-3, hi / C], dtype),
                    size=(3, 2, C)).astype(dtype)
    got, want = memory_chunked.span_decays(lr, C), _span_decays_before(lr, C)
    assert mismatch(got, want, 64 * float(info.eps) * max(1.0, hi)) is None
    assert np.all(np.triu(got, 1) == 0)
    mag = 10.0 ** rng.uniform(-20, 20, (3, 2, C, C))
    pairs = (rng.standard_normal((3, 2, C, C)) * mag).astype(dtype) * np.tri(C, dtype=dtype)
    starts = (rng.standard_normal((3, 2, C)) * 1e10).astype(dtype)
    got, want = memory_chunked._log_gradient(pairs, starts), _log_gradient_before(pairs, starts)
    scale = np.sum(np.abs(pairs), axis=-2).max() + np.abs(starts).max() * C
    assert np.max(np.abs(got - want)) <= 4 * C * float(info.eps) * scale
    a, b = rng.standard_normal((2, 3, C, 7)).astype(dtype)
    np.testing.assert_allclose(memory_chunked.row_dots(a, b), np.sum(a * b, -1),
                               rtol=0, atol=8 * float(info.eps) * np.sum(np.abs(a * b), -1).max())
