"""Held-out fuzzing of the memory rules' default dispatch (chunkwise-parallel on NumPy, periodic
levels in the chunked form) against the sequential loop (`kernels.force_reference`) on
distributions the other kernel tests leave out: model-like inputs (keys, queries, values and
gates all projected from a small vocabulary of correlated embeddings, so keys repeat exactly and
the gates correlate with them, saturated gates included), keys that are not normalised (norms
1e-3 to 1e2, ``theta`` up to ``2 / |k|^2``) with ``alpha`` in {0, 1e-6, 0.5, 1 - 1e-6, 1} and
momentum at 0 or near 1, sequence lengths that are no multiple of the chunk or the period, and
initial states of large norm or with subnormal or huge entries. Outputs, final states and the
gradients of every input under random cotangents (`test_memory_scale.compare`: a tolerance
relative to each result's scale, NaN and inf in the same places); float32 calls also against a
float64 run of the loop (`worse_than_the_loop`).
"""
import numpy as np
import pytest

from test_memory_growth import worse_than_the_loop
from test_memory_scale import NAMES, compare, kernel

RULES = ("delta", "titans", "hebbian")


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def model_like(rule, T, d, lead, seed, saturate=False, vocab=16, theta_max=1.0,
               dtype=np.float64):
    """Arguments as a model layer would pass them: token embeddings from a small vocabulary
    (Zipf-distributed, low-rank correlated), keys and queries L2-normalised projections of
    them, values another projection, every gate a sigmoid of a projection of the same
    embeddings (`saturate`: logits of +-10 to +-30 for most tokens); nonzero initial states."""
    rng = np.random.default_rng(seed)
    e = 2 * d
    emb = (rng.standard_normal((vocab, 4)) @ rng.standard_normal((4, e))
           + 0.3 * rng.standard_normal((vocab, e)))
    p = 1.0 / np.arange(1, vocab + 1) ** 1.1
    X = emb[rng.choice(vocab, size=lead + (T,), p=p / p.sum())]

    def proj(o):
        return X @ (rng.standard_normal(lead + (e, o)) / np.sqrt(e))
    k, q, v = proj(d), proj(d), proj(d)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    q /= np.linalg.norm(q, axis=-1, keepdims=True)

    def gate(hi):
        z = proj(1)[..., 0]
        z = (z - z.mean()) / (z.std() + 1e-12)
        if saturate:
            z = np.sign(z) * rng.uniform(10, 30, z.shape) * np.where(rng.random(z.shape) < 0.7,
                                                                     1, 0.1)
        else:
            z = 2 * z + rng.uniform(-2, 2)
        return hi * _sigmoid(z)
    named = dict(k=k, v=v, q=q, alpha=gate(1.0 if saturate else 0.3), theta=gate(theta_max),
                 eta=gate(1.0), m0=rng.standard_normal(lead + (d, d)) * 0.3,
                 s0=rng.standard_normal(lead + (d, d)) * 0.3)
    return tuple(named[n].astype(dtype) for n in NAMES[rule])


def raw_keys(rule, T, d, lead, seed, alpha=None, eta=None, dtype=np.float64):
    """Keys of norms log-uniform in 1e-3 to 1e2, ``theta |k|^2`` uniform in [0, 2]; ``alpha``
    drawn per token from {0, 1e-6, 0.5, 1 - 1e-6, 1} (or the constant given), momentum uniform,
    0 (``eta=0``) or within 1e-8 to 1e-2 of 1 (``eta=1``)."""
    rng = np.random.default_rng(seed)
    k, v, q = rng.standard_normal((3,) + lead + (T, d))
    k *= 10.0 ** rng.uniform(-3, 2, lead + (T, 1)) / np.linalg.norm(k, axis=-1, keepdims=True)
    shape = lead + (T,)
    named = dict(k=k, v=v, q=q,
                 alpha=(rng.choice([0.0, 1e-6, 0.5, 1 - 1e-6, 1.0], size=shape)
                        if alpha is None else np.full(shape, alpha)),
                 theta=rng.uniform(0, 2, shape) / np.sum(k * k, -1),
                 eta={None: rng.uniform(0, 1, shape), 0: np.zeros(shape),
                      1: 1 - 10.0 ** rng.uniform(-8, -2, shape)}[eta],
                 m0=rng.standard_normal(lead + (d, d)) * 0.3,
                 s0=rng.standard_normal(lead + (d, d)) * 0.3)
    return tuple(named[n].astype(dtype) for n in NAMES[rule])


def _agrees(rule, period, args):
    """The default dispatch against the loop: within the scale tolerance, and for float32 no
    result more than 10 times (plus 1e-6 of scale) further from the float64 loop than the
    float32 loop is."""
    assert compare(kernel(rule, period), args, NAMES[rule]) == {}
    if args[0].dtype == np.float32:
        assert worse_than_the_loop(rule, period, args, factor=10) == {}


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("period", [None, 7])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("saturate,vocab,theta_max", [(False, 32, 0.1), (True, 4, 1.0)])
def test_model_like_inputs(rule, period, dtype, saturate, vocab, theta_max):
    """150 tokens (no multiple of the chunk or the period), lead (2, 2), d = 16. Keys that
    repeat with theta near 1 erase their direction and run the loop; small theta stays
    chunked."""
    args = model_like(rule, 150, 16, (2, 2), seed=vocab, saturate=saturate, vocab=vocab,
                      theta_max=theta_max, dtype=dtype)
    _agrees(rule, period, args)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("alpha,eta", [(0.0, 1), (1e-6, 0), (0.5, None), (1 - 1e-6, 1)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_unnormalised_keys_up_to_the_stability_edge(rule, alpha, eta, dtype):
    """Key norms from 1e-3 to 1e2 in one chunk, ``theta |k|^2`` up to 2 (learning rates up
    to 2e6), d = 8, 130 tokens, period 13 for the delta rule."""
    period = 13 if rule == "delta" else None
    _agrees(rule, period, raw_keys(rule, 130, 8, (2,), seed=3, alpha=alpha, eta=eta,
                                   dtype=dtype))


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("T,period", [(1, None), (15, None), (17, None), (33, 2), (65, 64),
                                      (100, 33), (1, 3)])
def test_lengths_off_the_chunk_grid(rule, T, period):
    """T = 1, below the chunked threshold, one past a chunk, periods longer than or not
    dividing T; float32, d = 16 (chunks of 16)."""
    _agrees(rule, period, model_like(rule, T, 16, (2,), seed=T, theta_max=0.3,
                                     dtype=np.float32))


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("period", [None, 9])
@pytest.mark.parametrize("kind", ["large", "subnormal", "huge"])
def test_extreme_initial_states(rule, period, kind):
    """Initial states of norm 1e3 to 1e6, with half their entries subnormal, or with one
    entry 1e30 (float64, 100 tokens, d = 8)."""
    args = list(model_like(rule, 100, 8, (2,), seed=5, theta_max=0.3))
    rng = np.random.default_rng(6)
    for i, n in enumerate(NAMES[rule]):
        if n in ("m0", "s0"):
            a = args[i].copy()
            if kind == "large":
                a *= 10.0 ** rng.uniform(3, 6)
            elif kind == "subnormal":
                a = np.where(rng.random(a.shape) < 0.5, a * 1e-310, a)
            else:
                a.flat[rng.integers(a.size)] = 1e30
            args[i] = a
    assert compare(kernel(rule, period), tuple(args), NAMES[rule]) == {}
