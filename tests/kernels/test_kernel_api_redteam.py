"""Edge cases of the public kernel-pair API: empty batches and dimensions, integer-like
arguments given as NumPy integers or bools, non-array inputs, a zero head_dim."""
import numpy as np
import pytest

import kernels
from tape import Active, Reverse, autodiff

PERIODIC = {
    "delta": (kernels.delta_rule_periodic, kernels.delta_rule, 2),
    "titans": (kernels.titans_rule_periodic, kernels.titans_rule, 3),
    "hebbian": (kernels.hebbian_rule_periodic, kernels.hebbian_rule, 1),
}


def _args(rule, lead, s, d, seed=0):
    rng = np.random.default_rng(seed)
    seqs = [rng.standard_normal(lead + (s, d)) * 0.5 for _ in range(3)]
    gates = [rng.uniform(0.05, 0.4, lead + (s,)) for _ in range(PERIODIC[rule][2])]
    states = [rng.standard_normal(lead + (d, d)) * 0.3 for _ in range(2 if rule == "titans" else 1)]
    return seqs + gates + states


@pytest.mark.parametrize("rule", sorted(PERIODIC))
@pytest.mark.parametrize("lead, d", [((0,), 2), ((2, 0), 3), ((2,), 0)])
def test_periodic_rules_take_empty_batches_and_dimensions(rule, lead, d):
    periodic, _, _ = PERIODIC[rule]
    args = _args(rule, lead, 5, d)
    out = periodic(*args, period=2)
    assert out[0].shape == lead + (5, d)
    assert all(m.shape == lead + (d, d) for m in out[1:])
    grads, = autodiff(Reverse, lambda *a: sum(np.sum(r) for r in periodic(*a, period=2)),
                      Active, *[Active(a) for a in args])
    assert [g.shape for g in grads] == [a.shape for a in args]


@pytest.mark.parametrize("rule", sorted(PERIODIC))
def test_numpy_integer_period_and_checkpoint_match_python_ints(rule):
    periodic, per_token, _ = PERIODIC[rule]
    args = _args(rule, (2,), 7, 3)
    for got, want in zip(periodic(*args, period=np.int64(3)), periodic(*args, period=3)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)

    def loss(every):
        return lambda *a: sum(np.sum(r * r) for r in per_token(*a, checkpoint_every=every))
    got, = autodiff(Reverse, loss(np.int32(2)), Active, *[Active(a) for a in args])
    want, = autodiff(Reverse, loss(None), Active, *[Active(a) for a in args])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("rule", sorted(PERIODIC))
def test_bool_checkpoint_every_is_refused(rule):
    with pytest.raises(ValueError, match="checkpoint_every must be None or an int >= 1, got True"):
        PERIODIC[rule][1](*_args(rule, (), 4, 2), checkpoint_every=True)


def test_non_array_inputs_are_named_as_such():
    k = np.zeros((3, 2)).tolist()
    with pytest.raises(TypeError, match="delta_rule: `k` must be a floating-point array, got a list"):
        kernels.delta_rule(k, k, k, [0.1] * 3, [0.1] * 3, np.zeros((2, 2)).tolist())
    with pytest.raises(TypeError, match="memory_read: `q` must be a floating-point array"):
        kernels.memory_read(k, np.zeros((2, 2)))
    with pytest.raises(TypeError, match="swa_attention: `q` must be a floating-point array"):
        kernels.swa_attention(k, k, k, 2)


def test_zero_head_dim_attention_is_refused():
    q = np.zeros((4, 0))
    with pytest.raises(ValueError, match=r"swa_attention: head_dim .* must be >= 1, got shape \(4, 0\)"):
        kernels.swa_attention(q, q, q, 2)
