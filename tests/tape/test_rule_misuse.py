"""A user rule that is wrong in a way the engine can see raises a RuleError naming the rule and
the argument, instead of giving a wrong derivative."""
import numpy as np
import pytest

from tape import (Active, Duplicated, Forward, Reverse, ReverseWithPrimal, RuleError, autodiff,
                  custom_rule)


def _rule(primal, reverse, forward=None, name="scaled_product"):
    def scaled_product(x, y):
        return 2.0 * x * y
    return custom_rule(scaled_product, augmented_primal=lambda cfg, x, y: (primal(x, y), (x, y)),
                       reverse=reverse, forward=forward, name=name)


def _good_reverse(cfg, saved, g):
    x, y = saved
    return 2.0 * y * g, 2.0 * x * g


def test_none_for_an_active_argument_is_refused():
    rule = _rule(lambda x, y: 2.0 * x * y, lambda cfg, saved, g: (2.0 * saved[1] * g, None))
    with pytest.raises(RuleError, match=r"reverse rule of `scaled_product` returned None as the "
                                        r"cotangent of argument 1 \(`y`\), which is active"):
        autodiff(Reverse, rule, Active, Active(1.5), Active(2.0))
    # None is fine for an argument that is not differentiated.
    assert autodiff(Reverse, lambda x: rule(x, 2.0), Active, Active(1.5)) == ((4.0,),)


@pytest.mark.parametrize("bad,match", [
    (lambda x, y, g: (np.array([1, 2], dtype=np.int64), 2.0 * x * g),
     r"cotangent of dtype int64 for argument 0 \(`x`\)"),
    (lambda x, y, g: (np.ones(3), 2.0 * x * g), r"cotangent of shape \(3,\) for argument 0 "
                                                r"\(`x`\), whose shape is \(2,\)"),
    (lambda x, y, g: (2.0 * y * g * 1j, 2.0 * x * g), r"complex cotangent for argument 0 "
                                                       r"\(`x`\), which is real"),
])
def test_wrong_cotangents_are_named(bad, match):
    rule = _rule(lambda x, y: 2.0 * x * y, lambda cfg, saved, g: bad(*saved, g))
    x, y = np.array([1.0, 2.0]), np.array([0.5, -1.0])
    with pytest.raises(RuleError, match=r"`scaled_product` " + r".*" + match):
        autodiff(Reverse, lambda x, y: np.sum(rule(x, y)), Active, Active(x), Active(y))


def test_a_primal_that_disagrees_with_the_function_is_refused():
    rule = _rule(lambda x, y: 3.0 * x * y, _good_reverse)   # the function computes 2 x y
    with pytest.raises(RuleError, match=r"augmented_primal rule of `scaled_product` returned a "
                                        r"primal that disagrees with `scaled_product`"):
        autodiff(ReverseWithPrimal, lambda x: np.sum(rule(x, 2.0)), Active,
                 Active(np.array([1.0, 2.0])))


def test_a_forward_primal_that_disagrees_is_refused():
    rule = _rule(lambda x, y: 2.0 * x * y, _good_reverse,
                 forward=lambda cfg, p, t: (p[0] * p[1], 2.0 * t[0] * p[1]))
    with pytest.raises(RuleError, match=r"forward rule of `scaled_product` returned a primal "
                                        r"that disagrees"):
        autodiff(Forward, lambda x: rule(x, 3.0), Duplicated(np.array([1.0, 2.0]), np.ones(2)))


def test_an_agreeing_rule_is_checked_once_per_signature():
    calls = []

    def scaled_product(x, y):
        calls.append(np.shape(x))
        return 2.0 * x * y
    rule = custom_rule(scaled_product,
                       augmented_primal=lambda cfg, x, y: (2.0 * x * y, (x, y)),
                       reverse=_good_reverse)
    for _ in range(3):
        autodiff(Reverse, lambda x: np.sum(rule(x, 2.0)), Active, Active(np.ones(2)))
    autodiff(Reverse, lambda x: np.sum(rule(x, 2.0)), Active, Active(np.ones(3)))
    assert calls == [(2,), (3,)]
    unchecked = custom_rule(scaled_product, augmented_primal=lambda cfg, x, y: (3 * x * y, None),
                            reverse=lambda cfg, s, g: (g, g), check_primal=False)
    autodiff(Reverse, lambda x: unchecked(x, 2.0), Active, Active(1.0))
