"""The gate-saturation penalty: its value, its gradient, and that training obeys it."""
import numpy as np
import pytest

from models.config import ModelConfig
from models.layers import gate_excess
from models.model import init_params, init_state, loss, training_loss
from tape import Active, Const, Duplicated, Reverse, autodiff, make_zero

from test_model import leaves, named_leaves, shifted, tiny, tokens_for


def test_gate_excess_is_a_squared_hinge_beyond_the_margin():
    za = np.array([[0.0, 4.9, -5.0, 6.5], [-7.0, 5.0, 1.0, -2.0]])
    ze = np.array([[9.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, -6.0]])
    want_a = (1.5 ** 2 + 2.0 ** 2) / 8
    want_e = (4.0 ** 2 + 1.0 ** 2) / 8
    assert gate_excess(za, ze, "delta", 5.0) == pytest.approx(want_a, rel=1e-15)
    assert gate_excess(za, ze, "hebbian", 5.0) == pytest.approx(want_a, rel=1e-15)
    # Only Titans uses the momentum eta, so only Titans penalises it.
    assert gate_excess(za, ze, "titans", 5.0) == pytest.approx(want_a + want_e, rel=1e-15)
    assert gate_excess(za, ze, "titans", 10.0) == 0.0


def _gradient(f, params, cfg, state, tokens):
    grads = make_zero(params)
    autodiff(Reverse, lambda p, t: f(p, t, state, cfg)[0], Active, Duplicated(params, grads),
             Const(tokens))
    return grads


@pytest.mark.parametrize("rule", ["delta", "titans"])
def test_penalty_gradient_equals_the_hand_derivative_on_constant_gates(rule):
    # With w_a = w_e = 0 every token's pre-activation is its bias b, so the excess is
    # (b - margin)^2 per gate and its derivative 2 (b - margin): the objective's bias gradient
    # must exceed the cross-entropy's by exactly gate_penalty times that.
    cfg = tiny(rule=rule, gate_penalty=0.3, gate_margin=5.0)
    state, tokens = init_state(cfg, 2), tokens_for(cfg)
    params = init_params(cfg, seed=0)
    for i, lv in enumerate(params.blocks[0].memory):
        lv.w_a, lv.w_e = lv.w_a * 0, lv.w_e * 0
        lv.b_a, lv.b_e = np.array([7.0 + i]), np.array([-6.5 - i])
    with_penalty = _gradient(training_loss, params, cfg, state, tokens)
    plain = _gradient(loss, params, cfg, state, tokens)
    for i, (a, b) in enumerate(zip(with_penalty.blocks[0].memory, plain.blocks[0].memory)):
        assert a.b_a[0] - b.b_a[0] == pytest.approx(0.3 * 2 * (2.0 + i), rel=1e-9)
        want_e = 0.3 * 2 * -(1.5 + i) if rule == "titans" else 0.0
        assert a.b_e[0] - b.b_e[0] == pytest.approx(want_e, rel=1e-9, abs=1e-15)
        np.testing.assert_array_equal(a.b_t, b.b_t)   # theta is not penalised
    value, _, ce = training_loss(params, tokens, state, cfg)
    excess = sum((2.0 + i) ** 2 + ((1.5 + i) ** 2 if rule == "titans" else 0) for i in range(2))
    assert float(value) == pytest.approx(float(ce) + 0.3 * excess, rel=1e-12)


@pytest.mark.parametrize("rule", ["delta", "titans"])
def test_training_loss_gradient_matches_finite_differences(rule):
    cfg = tiny(rule=rule, gate_penalty=0.5, gate_margin=0.5)   # a margin every token exceeds
    state, tokens = init_state(cfg, 2), tokens_for(cfg)
    params = init_params(cfg, seed=3)
    for lv in params.blocks[0].memory:
        lv.w_a, lv.w_e = lv.w_a * 30, lv.w_e * 30
    grads = _gradient(training_loss, params, cfg, state, tokens)
    rng = np.random.default_rng(4)
    named = named_leaves(params)
    direction = [rng.standard_normal(a.shape) * (n.rsplit(".", 1)[-1] in ("w_a", "b_a", "w_e",
                                                                        "b_e"))
                 for n, a in named]
    analytic = sum(float(np.sum(g * d)) for g, d in zip(leaves(grads), direction))
    eps = 1e-6
    up = float(training_loss(shifted(params, direction, eps), tokens, state, cfg)[0])
    down = float(training_loss(shifted(params, direction, -eps), tokens, state, cfg)[0])
    numeric = (up - down) / (2 * eps)
    assert abs(analytic) > 1e-4
    assert abs(analytic - numeric) <= 1e-9 + 1e-6 * abs(numeric), (analytic, numeric)


def test_no_penalty_means_the_plain_cross_entropy():
    cfg = tiny(gate_penalty=0.0, gate_margin=0.0)
    state, tokens = init_state(cfg, 2), tokens_for(cfg)
    params = init_params(cfg, seed=0)
    value, _, ce = training_loss(params, tokens, state, cfg)
    assert float(value) == float(ce) == float(loss(params, tokens, state, cfg)[0])


def _excess(params, cfg, tokens):
    """The retention gates' excess over the margin on this batch (the block input is the
    embedding after the block's pre-norm, as in `models.model`)."""
    from models.layers import _projections
    from ops import rms_norm
    h = rms_norm(params.embed[tokens[:, :-1]], params.blocks[0].norm)
    return sum(float(gate_excess(_projections(lv, h)[3], None, "delta", cfg.gate_margin))
               for lv in params.blocks[0].memory)


def test_training_pulls_saturated_gates_back_inside_the_margin():
    # Retention gates started deep in saturation (z = 11): the penalty brings them back to
    # the margin (through their biases and weights); the cross-entropy alone does not.
    from models.optim import AdamW
    excess = {}
    for penalty in (0.0, 1.0):
        cfg = tiny(gate_penalty=penalty, gate_margin=5.0)
        state, tokens = init_state(cfg, 2), tokens_for(cfg)
        params = init_params(cfg, seed=0)
        for lv in params.blocks[0].memory:
            lv.b_a = np.array([11.0])
        start = _excess(params, cfg, tokens)
        opt = AdamW(params, lr=0.05, weight_decay=0.0)
        for _ in range(40):
            opt.step(params, _gradient(training_loss, params, cfg, state, tokens), 0.05)
        excess[penalty] = _excess(params, cfg, tokens) / start
    assert excess[0.0] > 0.5, excess
    assert excess[1.0] < 0.05, excess


@pytest.mark.parametrize("kwargs, field", [
    (dict(gate_penalty=-0.1), "gate_penalty"),
    (dict(gate_penalty=float("nan")), "gate_penalty"),
    (dict(gate_margin=-1.0), "gate_margin"),
    (dict(gate_margin=True), "gate_margin"),
])
def test_gate_config_errors_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"ModelConfig.{field}"):
        ModelConfig(**kwargs).validate()
