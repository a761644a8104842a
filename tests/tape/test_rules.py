"""The rule mechanism from the user's side: custom rules, inactive functions, once-differentiable
rules, and a gradient checker that catches a wrong rule."""
import numpy as np
import pytest

from tape import (Active, Duplicated, Forward, OnceDifferentiableError, Reverse, autodiff,
                  custom_rule, inactive)
from tape.testing import GradientCheckError, check_grads


def _softclip_impl(x):
    return np.tanh(x) * 2.0


calls = {"reverse": 0}


def _softclip_reverse(cfg, saved, g):
    calls["reverse"] += 1
    y, = saved
    return (g * (2.0 - y * y / 2.0),)


softclip = custom_rule(
    _softclip_impl,
    augmented_primal=lambda cfg, x: ((y := np.tanh(x) * 2.0), (y,)),
    reverse=_softclip_reverse,
    forward=lambda cfg, primals, tangents: (np.tanh(primals[0]) * 2.0,
                                            tangents[0] * 2.0 / np.cosh(primals[0]) ** 2),
    differentiable=True)


def test_user_rule_is_used_by_the_tape():
    x = np.array([0.1, -0.4, 1.3])
    before = calls["reverse"]
    (g,), = autodiff(Reverse, lambda x: np.sum(softclip(x) ** 2), Active, Active(x))
    assert calls["reverse"] == before + 1
    y = 2 * np.tanh(x)
    np.testing.assert_allclose(g, 2 * y * 2 / np.cosh(x) ** 2, atol=1e-12)


def test_user_rule_passes_check_grads_both_modes_second_order():
    check_grads(lambda x: softclip(x) * x, np.array([0.3, -0.8]))


def test_wrong_rule_makes_check_grads_fail():
    wrong = custom_rule(lambda x: np.sin(x),
                        augmented_primal=lambda cfg, x: (np.sin(x), x),
                        reverse=lambda cfg, x, g: (g * np.sin(x),),     # should be cos
                        forward=lambda cfg, p, t: (np.sin(p[0]), t[0] * np.cos(p[0])))
    with pytest.raises(GradientCheckError, match="reverse mode"):
        check_grads(wrong, np.array([0.3, 1.1]), order=1)


def test_wrong_forward_rule_makes_check_grads_fail():
    wrong = custom_rule(lambda x: x ** 3,
                        augmented_primal=lambda cfg, x: (x ** 3, x),
                        reverse=lambda cfg, x, g: (3 * x ** 2 * g,),
                        forward=lambda cfg, p, t: (p[0] ** 3, 2 * p[0] ** 2 * t[0]))
    with pytest.raises(GradientCheckError, match="forward mode"):
        check_grads(wrong, np.array([0.3, 1.1]), order=1)


def test_wrong_second_order_is_caught():
    # First derivative right, but the rule's reverse uses an op whose derivative is dropped.
    frozen = inactive(lambda x: np.cos(x))
    wrong = custom_rule(lambda x: np.sin(x),
                        augmented_primal=lambda cfg, x: (np.sin(x), x),
                        reverse=lambda cfg, x, g: (g * frozen(x),),
                        forward=lambda cfg, p, t: (np.sin(p[0]), t[0] * frozen(p[0])),
                        differentiable=True)
    check_grads(wrong, np.array([0.3, 1.1]), order=1)
    with pytest.raises(GradientCheckError, match="order 1"):
        check_grads(wrong, np.array([0.3, 1.1]), order=2)


def test_opaque_rule_is_once_differentiable():
    opaque = custom_rule(lambda x: np.sin(x),
                         augmented_primal=lambda cfg, x: (np.sin(x), np.cos(x)),
                         reverse=lambda cfg, c, g: (g * c,),
                         forward=lambda cfg, p, t: (np.sin(p[0]), t[0] * np.cos(p[0])))
    (g,), = autodiff(Reverse, opaque, Active, Active(0.5))
    assert g == pytest.approx(np.cos(0.5))

    def grad(x):
        (d,), = autodiff(Reverse, opaque, Active, Active(x))
        return d
    with pytest.raises(OnceDifferentiableError, match="once differentiable"):
        autodiff(Reverse, grad, Active, Active(0.5))
    with pytest.raises(OnceDifferentiableError):
        autodiff(Forward, grad, Duplicated(0.5, 1.0))


def test_rule_returning_wrong_number_of_cotangents():
    bad = custom_rule(lambda x, y: x * y,
                      augmented_primal=lambda cfg, x, y: (x * y, (x, y)),
                      reverse=lambda cfg, s, g: (g * s[1],))
    with pytest.raises(TypeError, match="tuple of 2 cotangents"):
        autodiff(Reverse, bad, Active, Active(1.0), Active(2.0))


def test_missing_forward_rule():
    no_fwd = custom_rule(lambda x: x * 2, augmented_primal=lambda cfg, x: (x * 2, None),
                         reverse=lambda cfg, s, g: (2 * g,))
    with pytest.raises(NotImplementedError, match="forward-mode"):
        autodiff(Forward, no_fwd, Duplicated(1.0, 1.0))


def test_inactive_function_gets_plain_values_and_stops_derivative():
    seen = []
    spy = inactive(lambda x: seen.append(type(x)) or np.floor(x))
    (g,), = autodiff(Reverse, lambda x: x * spy(x), Active, Active(2.5))
    assert seen == [float] and g == 2.0


def test_config_tells_which_arguments_are_active():
    configs = []

    def rev(cfg, saved, g):
        configs.append(cfg.active)
        return tuple(g if a else None for a in cfg.active)
    add = custom_rule(lambda x, y: x + y, augmented_primal=lambda cfg, x, y: (x + y, None),
                      reverse=rev)
    autodiff(Reverse, lambda x, y: add(x, y), Active, Active(1.0), 2.0)
    assert configs == [(True, False)]


def test_check_grads_takes_pytree_arguments():
    params = {"w": np.array([0.3, -0.8]), "layers": [np.array([1.2, 0.4]), 0.7]}

    def loss(p, x):
        h = np.tanh(p["w"] * x + p["layers"][0])
        return np.sum(h ** 2) * p["layers"][1]
    check_grads(loss, params, np.array([0.5, 1.5]), order=2)
    wrong = custom_rule(lambda x: x * x, augmented_primal=lambda cfg, x: (x * x, x),
                        reverse=lambda cfg, x, g: (3 * x * g,))
    with pytest.raises(GradientCheckError):
        check_grads(lambda p: np.sum(wrong(p["w"])), params, modes=("rev",), order=1)
