"""Float32 chunk transitions that grow against the decays in chunks of fewer tokens than d, where
the forward run does not form them: the per-token Titans rule for d > 16 (chunks of 32 tokens at
d = 64) and periodic levels whose sub-chunks are shorter than d (a period of 128 at d = 64 is cut
into sub-chunks of 32). The default dispatch must be about as accurate as the float32 loop
(`kernels.force_reference`), both measured against the loop in float64 on the same float32
inputs, relative to each result's scale: outputs, final states and the gradients of every input.

Measured before `thin_transitions_grow` (those chunks were never checked): 20x to 230x the
loop's error (2e-5 to 6e-4 of scale against 1e-6 to 8e-6), with theta in the sigmoid's range
and the momentum near 1 as well as with theta up to 3, keys clustered around one direction.
The last periodic case also fails with that check under the former limit of ``GROWTH_RATIO^2 d
decay^2`` (`memory_chunk_precision.growth_limit`): its transitions grow 7-fold in one direction,
1.36 times the decay in Frobenius norm at d = 64.
"""
import numpy as np
import pytest

import kernels
from kernels import memory_chunk_precision, memory_chunked
from test_memory_growth import worse_than_the_loop
from test_memory_scale import NAMES, _uniform, make_args


def clustered_args(rule, T, d, theta, alpha, eta, seed):
    """One sequence of float32 arguments: keys around one direction (unit norm, as the model
    passes them), unit queries, gates uniform in the given ranges, nonzero initial states."""
    rng = np.random.default_rng(seed)
    k, v, q = rng.standard_normal((3, 1, T, d))
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    k = rng.standard_normal(d) + 0.3 * k
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    named = {"k": k, "v": v, "q": q, "alpha": rng.uniform(*alpha, (1, T)),
             "theta": rng.uniform(*theta, (1, T)), "eta": rng.uniform(*eta, (1, T)),
             "m0": rng.standard_normal((1, d, d)) * 0.3, "s0": rng.standard_normal((1, d, d)) * 0.3}
    return tuple(named[n].astype(np.float32) for n in NAMES[rule])


@pytest.mark.parametrize("theta,alpha,eta", [
    ((0.0, 1.0), (0.0, 0.05), (0.9, 0.999)),      # sigmoid theta, momentum near 1: 38x before
    ((1.5, 3.0), (0.02, 0.5), (0.9, 0.999)),      # softplus theta: 95x before
])
def test_titans_chunks_shorter_than_d(theta, alpha, eta):
    args = clustered_args("titans", 256, 64, theta, alpha, eta, seed=0)
    assert worse_than_the_loop("titans", None, args, factor=4) == {}


@pytest.mark.parametrize("rule,theta,eta,seed", [
    ("delta", (1.5, 3.0), (0.5, 0.5), 1),         # 64x before
    ("titans", (0.0, 1.0), (0.9, 0.999), 0),      # 34x before
    ("titans", (1.5, 3.0), (0.05, 0.5), 0),       # 40x before (see the module docstring)
])
def test_periodic_sub_chunks_shorter_than_d(rule, theta, eta, seed):
    """A period of 128 at d = 64 (four sub-chunks of 32 tokens), 261 tokens: two whole periods
    and a tail that only reads."""
    args = clustered_args(rule, 261, 64, theta, (0.0, 0.05), eta, seed)
    assert worse_than_the_loop(rule, 128, args, factor=4) == {}


# Reflecting tokens (theta |k|^2 near 1 + r, alpha near 0) along clustered keys: the transitions
# do not grow, but the triangular solve and the WY sums add about C terms near theta of
# alternating signs (`memory_chunk_precision.solve_amplifies`). Before those delta calls ran in
# float64: 11x to 28x the loop's error (6e-6 to 1.4e-5 of scale against 5e-7 to 7e-7).
@pytest.mark.parametrize("period,d", [
    (None, 16),         # 11x before
    (None, 64),         # 20x before
    (64, 16),           # 13x before
    (128, 64),          # sub-chunks of 32 tokens: 28x before
])
def test_reflecting_tokens_on_clustered_keys(period, d):
    args = clustered_args("delta", 512, d, (1.9, 1.99), (0.0, 0.005), (0.5, 0.5), seed=0)
    assert worse_than_the_loop("delta", period, args, factor=4) == {}


@pytest.mark.parametrize("d", [16, 64])
@pytest.mark.parametrize("theta,alpha", [((0.99, 1.0), (0.0, 0.0)),          # sums up to 4.2
                                         ((0.005, 0.02), (0.03, 0.06))])     # initial gates
def test_sigmoid_gates_keep_float32(d, theta, alpha):
    """Random unit keys with theta up to 1 (the sigmoid's range: every entry of T is then at
    most theta_i) and the model's initial gates: the triangular solves never send a call to
    float64."""
    args = make_args("delta", 1024, d, lead=(8,), dtype=np.float32, theta=_uniform(*theta),
                     alpha=_uniform(*alpha))
    x = kernels.memory._inputs("delta", args)[0]
    ch = memory_chunked._Chunks("delta", x, memory_chunked.chunk_size(d), memory_chunked.NumpyOps)
    assert not memory_chunk_precision.solve_amplifies(ch.T, ch.th, ch.K)
