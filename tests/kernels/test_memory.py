"""The memory-rule kernel pairs (delta, Titans, Hebbian) and the frozen read, on the reference
backend: (A) the hand-written backward equals the tape's gradient of a token-by-token program,
(B) both equal central finite differences, (C) stop-gradient barriers give exact zeros, plus
independent formulations, state checkpointing, batch axes and bad input."""
import numpy as np
import pytest

import kernels
import tokenwise
from tape import (Active, Const, Duplicated, Forward, OnceDifferentiableError, Reverse,
                  autodiff, inactive)
from tape.testing import check_grads

RULES = {
    # name: (kernel, tokenwise reference, gate names, number of states)
    "delta": (kernels.delta_rule, tokenwise.delta, ("alpha", "theta"), 1),
    "titans": (kernels.titans_rule, tokenwise.titans, ("alpha", "theta", "eta"), 2),
    "hebbian": (kernels.hebbian_rule, tokenwise.hebbian, ("alpha",), 1),
}


def make_args(rule, s=5, d=4, lead=(), seed=0, dtype=np.float64, zero_state=False):
    """Arguments of `rule`: k, v, q, gates, initial states (nonzero unless asked)."""
    rng = np.random.default_rng(seed)
    _, _, gates, n_states = RULES[rule]
    seqs = [rng.standard_normal(lead + (s, d)) / np.sqrt(d) for _ in range(3)]
    gate_vals = [rng.uniform(0.05, 0.6, lead + (s,)) for _ in gates]
    states = [np.zeros(lead + (d, d)) if zero_state else
              rng.standard_normal(lead + (d, d)) * 0.3 for _ in range(n_states)]
    return [a.astype(dtype) for a in seqs + gate_vals + states]


def weighted_loss(outputs, weights):
    total = 0.0
    for o, w in zip(outputs, weights):
        total = total + np.sum(o * w)
    return total


def gradients(fn, args, weights):
    (derivs,) = autodiff(Reverse, lambda *a: weighted_loss(fn(*a), weights), Active,
                         *[Active(a) for a in args])
    return derivs


def output_weights(rule, args, seed=1):
    outs = RULES[rule][0](*args)
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(o.shape) for o in outs]


# -- (A) hand-written backward == tape gradient of the token-by-token program ----------------------

@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("checkpoint_every", [None, 2])
def test_backward_equals_tape_of_tokenwise_program(rule, checkpoint_every):
    kernel, reference, _, _ = RULES[rule]
    args = make_args(rule, s=6, d=4)
    weights = output_weights(rule, args)
    got = gradients(lambda *a: kernel(*a, checkpoint_every=checkpoint_every), args, weights)
    want = gradients(reference, args, weights)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
    outs, ref_outs = kernel(*args), reference(*args)
    for o, r in zip(outs, ref_outs):
        np.testing.assert_allclose(o, r, rtol=1e-12, atol=1e-12)


# -- (B) finite differences, forward and reverse mode ---------------------------------------------

@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("s,d,checkpoint_every", [(1, 4, None), (5, 4, None), (7, 3, 3),
                                                  (4, 16, None)])
def test_finite_differences(rule, s, d, checkpoint_every):
    kernel = RULES[rule][0]
    args = make_args(rule, s=s, d=d, seed=s + d)
    check_grads(lambda *a: kernel(*a, checkpoint_every=checkpoint_every), *args, order=1)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("d", [64, 128])
def test_finite_differences_wide(rule, d):
    kernel = RULES[rule][0]
    args = make_args(rule, s=2, d=d, seed=d)
    check_grads(kernel, *args, order=1, modes=("rev",))


# -- (C) stop-gradient barriers --------------------------------------------------------------------

_stop = inactive(lambda x: x)


@pytest.mark.parametrize("rule", RULES)
def test_stop_gradient_barrier_gives_exact_zero(rule):
    kernel = RULES[rule][0]
    args = make_args(rule)
    weights = output_weights(rule, args)

    def blocked_input(k, *rest):
        return weighted_loss(kernel(_stop(k), *rest), weights)
    (dk, *others), = autodiff(Reverse, blocked_input, Active, *[Active(a) for a in args])
    assert not np.any(dk)
    full = gradients(kernel, args, weights)
    for g, w in zip(others, full[1:]):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)

    def blocked_output(*a):
        outs = kernel(*a)
        return weighted_loss([_stop(o) for o in outs], weights) + 0.0 * np.sum(a[0])
    derivs, = autodiff(Reverse, blocked_output, Active, *[Active(a) for a in args])
    assert all(g is None or not np.any(g) for g in derivs)


@pytest.mark.parametrize("rule", RULES)
def test_const_arguments_get_no_derivative(rule):
    kernel = RULES[rule][0]
    args = make_args(rule)
    weights = output_weights(rule, args)
    annotated = [Const(a) if i % 2 else Active(a) for i, a in enumerate(args)]
    derivs, = autodiff(Reverse, lambda *a: weighted_loss(kernel(*a), weights), Active,
                       *annotated)
    full = gradients(kernel, args, weights)
    for i, (g, w) in enumerate(zip(derivs, full)):
        if i % 2:
            assert g is None
        else:
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)


# -- independent formulations ----------------------------------------------------------------------

def test_delta_equals_deltanet_form_without_decay():
    k, v, q, alpha, theta, m0 = make_args("delta", s=6, d=5)
    alpha[:] = 0.0
    y, m = kernels.delta_rule(k, v, q, alpha, theta, m0)
    M = m0
    for t in range(6):   # M' = M (I - th k k^T) + th v k^T
        M = M @ (np.eye(5) - theta[t] * np.outer(k[t], k[t])) + theta[t] * np.outer(v[t], k[t])
        np.testing.assert_allclose(y[t], M @ q[t], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(m, M, rtol=1e-12, atol=1e-12)


def test_titans_without_momentum_is_the_delta_rule():
    k, v, q, alpha, theta, eta, m0, s0 = make_args("titans", s=6, d=4)
    y, m, s = kernels.titans_rule(k, v, q, alpha, theta, np.zeros(6), m0, s0)
    y_d, m_d = kernels.delta_rule(k, v, q, alpha, theta, m0)
    np.testing.assert_allclose(y, y_d, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(m, m_d, rtol=1e-12, atol=1e-12)


def test_hebbian_equals_gated_linear_attention():
    # y_t = prod_{u<=t} r_u M0 q_t + sum_{j<=t} prod_{j<u<=t} r_u (k_j . q_t) v_j
    k, v, q, alpha, m0 = make_args("hebbian", s=7, d=3)
    y, m = kernels.hebbian_rule(k, v, q, alpha, m0)
    log_r = np.cumsum(np.log(1 - alpha))
    for t in range(7):
        decay = np.exp(log_r[t] - log_r[:t + 1])
        want = np.exp(log_r[t]) * (m0 @ q[t]) + ((decay * (k[:t + 1] @ q[t])) @ v[:t + 1])
        np.testing.assert_allclose(y[t], want, rtol=1e-12, atol=1e-12)


# -- states, batch axes, dtypes --------------------------------------------------------------------

@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("checkpoint_every", [1, 3, 4, 100])
def test_checkpointed_equals_full_states(rule, checkpoint_every):
    kernel = RULES[rule][0]
    args = make_args(rule, s=10, d=4)
    weights = output_weights(rule, args)
    full = gradients(kernel, args, weights)
    ckpt = gradients(lambda *a: kernel(*a, checkpoint_every=checkpoint_every), args, weights)
    for g, w in zip(ckpt, full):
        np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("rule", RULES)
def test_batch_and_head_axes_equal_one_sequence_at_a_time(rule):
    kernel = RULES[rule][0]
    n_seq = 3 + len(RULES[rule][2])
    args = make_args(rule, s=4, d=3, lead=(2, 3))
    weights = output_weights(rule, args)
    outs = kernel(*args)
    grads = gradients(kernel, args, weights)
    for b in np.ndindex(2, 3):
        one = [a[b] for a in args]
        for o, r in zip(outs, kernel(*one)):
            np.testing.assert_allclose(o[b], r, rtol=1e-13, atol=1e-14)
        for g, w in zip(grads, gradients(kernel, one, [w[b] for w in weights])):
            np.testing.assert_allclose(g[b], w, rtol=1e-12, atol=1e-14)
    assert len(args) == n_seq + RULES[rule][3]


@pytest.mark.parametrize("rule", RULES)
def test_float32_stays_float32(rule):
    kernel = RULES[rule][0]
    args = make_args(rule, dtype=np.float32)
    assert all(o.dtype == np.float32 for o in kernel(*args))
    weights = [w.astype(np.float32) for w in output_weights(rule, args)]
    assert all(g.dtype == np.float32 for g in gradients(kernel, args, weights))


@pytest.mark.parametrize("rule", RULES)
def test_empty_sequence_passes_the_state_through(rule):
    kernel = RULES[rule][0]
    args = make_args(rule, s=0, d=3)
    outs = kernel(*args)
    assert outs[0].shape == (0, 3)
    for o, m in zip(outs[1:], args[-RULES[rule][3]:]):
        np.testing.assert_array_equal(o, m)


# -- once differentiable ---------------------------------------------------------------------------

@pytest.mark.parametrize("rule", RULES)
def test_second_derivative_raises(rule):
    kernel = RULES[rule][0]
    args = make_args(rule, s=3, d=2)

    def grad_norm(k):
        (g,), = autodiff(Reverse, lambda k: np.sum(kernel(k, *args[1:])[0]), Active, Active(k))
        return np.sum(g ** 2)
    with pytest.raises(OnceDifferentiableError):
        autodiff(Reverse, grad_norm, Active, Active(args[0]))
    with pytest.raises(OnceDifferentiableError):     # forward over reverse (an hvp)
        autodiff(Forward, grad_norm, Duplicated(args[0], np.ones_like(args[0])))


# -- composition: tape(loss) x hand(kernel) x tape(projection) -------------------------------------

def _model(x, W_k, W_v, W_q, w_a, w_t, rule_kernel):
    """projection -> L2-normalised k, q -> sigmoid / softplus gates -> memory -> sigmoid gate
    -> loss, as in the model's memory branch."""
    k, v, q = x @ W_k, x @ W_v, x @ W_q
    k = k / np.sqrt(np.sum(k * k, axis=-1, keepdims=True))
    q = q / np.sqrt(np.sum(q * q, axis=-1, keepdims=True))
    c = np.concatenate([k, v], axis=-1)
    alpha = 1 / (1 + np.exp(-(c @ w_a + 2.0)))
    theta = np.log1p(np.exp(c @ w_t - 1.0))
    y, m = rule_kernel(k, v, q, alpha, theta, np.zeros((k.shape[-1],) * 2))
    gated = y / (1 + np.exp(-y))
    return np.sum(gated ** 2) + np.sum(np.tanh(m))


def test_chain_rule_composition_matches_finite_differences():
    rng = np.random.default_rng(3)
    s, dm, d = 6, 5, 4
    args = [rng.standard_normal((s, dm)), *(rng.standard_normal((dm, d)) * 0.5
                                            for _ in range(3)),
            rng.standard_normal(2 * d) * 0.3, rng.standard_normal(2 * d) * 0.3]
    check_grads(lambda *a: _model(*a, kernels.delta_rule), *args, order=1)
    weights = [np.ones(())]
    got = gradients(lambda *a: (_model(*a, kernels.delta_rule),), args, weights)
    want = gradients(lambda *a: (_model(*a, tokenwise.delta),), args, weights)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


# -- the frozen read -------------------------------------------------------------------------------

def test_memory_read():
    rng = np.random.default_rng(4)
    q, m = rng.standard_normal((2, 5, 3)), rng.standard_normal((2, 3, 3))
    y = kernels.memory_read(q, m)
    np.testing.assert_allclose(y[1, 2], m[1] @ q[1, 2], atol=1e-12)
    check_grads(kernels.memory_read, q, m, order=1)
    _, m_final = kernels.delta_rule(*make_args("delta", s=3, d=3, lead=(2,))[:5], m)
    check_grads(lambda q: kernels.memory_read(q, m_final), q, order=1)
    with pytest.raises(OnceDifferentiableError):
        autodiff(Reverse, lambda q: np.sum(autodiff(
            Reverse, lambda z: np.sum(kernels.memory_read(z, m) ** 2), Active,
            Active(q))[0][0] ** 2), Active, Active(q))


# -- bad input -------------------------------------------------------------------------------------

def test_bad_input_errors_are_clear():
    k, v, q, alpha, theta, m0 = make_args("delta", s=5, d=4)
    with pytest.raises(ValueError, match=r"`v` must have shape \(5, 4\)"):
        kernels.delta_rule(k, v[:, :3], q, alpha, theta, m0)
    with pytest.raises(TypeError, match="`q` has dtype float32 but `k` has float64"):
        kernels.delta_rule(k, v, q.astype(np.float32), alpha, theta, m0)
    with pytest.raises(ValueError, match=r"`alpha` must have shape \(5,\).*one gate value"):
        kernels.delta_rule(k, v, q, alpha[:4], theta, m0)
    with pytest.raises(ValueError, match="`theta` must have shape"):
        kernels.delta_rule(k, v, q, alpha, theta[None], m0)
    with pytest.raises(ValueError, match=r"`m0` must have shape \(4, 4\)"):
        kernels.delta_rule(k, v, q, alpha, theta, m0[:3])
    with pytest.raises(ValueError, match="`k` must have shape"):
        kernels.delta_rule(k[0], v, q, alpha, theta, m0)
    with pytest.raises(TypeError, match="floating-point"):
        kernels.hebbian_rule(k.astype(int), v, q, alpha, m0)
    with pytest.raises(ValueError, match="checkpoint_every"):
        kernels.delta_rule(k, v, q, alpha, theta, m0, checkpoint_every=0)
    with pytest.raises(ValueError, match="`eta` must have shape"):
        kernels.titans_rule(k, v, q, alpha, theta, theta[:2], m0, m0)
    with pytest.raises(ValueError, match="backend"):
        kernels.delta_rule(k, v, q, alpha, theta, m0, backend="tpu")
    with pytest.raises(ValueError, match="needs CuPy arrays"):
        kernels.delta_rule(k, v, q, alpha, theta, m0, backend="cuda")
    with pytest.raises(ValueError, match="`m` must have shape"):
        kernels.memory_read(q, m0[:2])
