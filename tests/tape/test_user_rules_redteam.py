"""Users' rules and inactive code misused in ways that used to pass in silence: each case now
gives the right derivative (against the plain function and central differences) or a clear
error naming the rule and the argument."""
import numpy as np
import pytest

from tape import (Active, Const, Duplicated, Forward, Reverse, ReverseWithPrimal, RuleError,
                  autodiff, custom_rule, inactive)
from tape import compile as compile_

X = np.array([0.3, -1.2, 2.0])


def _scaled_sine():
    """``sin(x) * scale`` with `scale` a keyword parameter."""
    def scaled_sine(x, *, scale):
        return np.sin(x) * scale
    return custom_rule(
        scaled_sine,
        augmented_primal=lambda cfg, x, *, scale: (np.sin(x) * scale, (x, scale)),
        reverse=lambda cfg, saved, g: (g * np.cos(saved[0]) * saved[1],),
        forward=lambda cfg, p, t, *, scale: (np.sin(p[0]) * scale, t[0] * np.cos(p[0]) * scale))


@pytest.mark.parametrize("call", [
    lambda rule: autodiff(Reverse, lambda x, s: np.sum(rule(x, scale=s)), Active, Active(X),
                          Active(2.0)),
    lambda rule: autodiff(Reverse, lambda x, s: np.sum(rule(x, scale=s)), Active, Const(X),
                          Active(2.0)),
    lambda rule: autodiff(Forward, lambda x, s: np.sum(rule(x, scale=s)),
                          Duplicated(X, np.ones(3)), Duplicated(2.0, 1.0)),
    lambda rule: compile_(Reverse, lambda x, s: np.sum(rule(x, scale=s)), Active, Active,
                          Active)(Active(X), Active(2.0)),
], ids=["reverse", "reverse-only-the-parameter", "forward", "compiled"])
def test_a_differentiated_keyword_parameter_is_refused(call):
    # It was a zero derivative for `scale` and a traced value of a finished level returned as
    # the derivative of x (or the rule silently skipped when x was Const).
    with pytest.raises(RuleError, match=r"`scaled_sine` .* keyword parameter `scale`"):
        call(_scaled_sine())


def test_a_keyword_parameter_of_an_outer_differentiation_or_a_constant_still_works():
    rule = _scaled_sine()

    def inner_gradient_sum(s):
        ((d,),) = autodiff(Reverse, lambda x: np.sum(rule(x, scale=s)), Active, Active(X))
        return np.sum(d)
    # d/ds sum(cos(x) * s) = sum(cos(x))
    ((ds,),) = autodiff(Reverse, inner_gradient_sum, Active, Active(1.7))
    np.testing.assert_allclose(ds, np.sum(np.cos(X)), rtol=1e-12, atol=1e-12)
    compiled = compile_(Reverse, lambda x, s: np.sum(rule(x, scale=s)), Active, Active, Const)
    for s in (1.5, 2.5):
        ((dx, none),) = compiled(Active(X), Const(s))
        np.testing.assert_allclose(dx, np.cos(X) * s, rtol=1e-12, atol=1e-12)
        assert none is None


def _pair_product():
    def pair_product(pair):
        return pair[0] * pair[1]
    return custom_rule(pair_product,
                       augmented_primal=lambda cfg, p: (p[0] * p[1], p),
                       reverse=lambda cfg, p, g: ((g * p[1], g * p[0]),))


def test_a_traced_value_inside_a_container_argument_is_refused():
    # The rule was skipped without a word (the function traced op by op), or its opaque
    # implementation failed on a traced value with an error about its own internals.
    rule = _pair_product()
    with pytest.raises(RuleError, match=r"`pair_product` .* inside argument 0 \(`pair`\), a "
                                        r"tuple"):
        autodiff(Reverse, lambda a, b: np.sum(rule((a, b))), Active, Active(X), Active(X))
    # A container of constants is a static positional argument, as before.
    shaped = custom_rule(lambda x, shape: np.reshape(x, shape),
                         augmented_primal=lambda cfg, x, shape: (np.reshape(x, shape), x.shape),
                         reverse=lambda cfg, s, g: (np.reshape(g, s), None))
    ((dx, none),) = autodiff(Reverse, lambda x, s: np.sum(shaped(x, s) * 2.0), Active,
                             Active(np.ones(4)), Const((2, 2)))
    np.testing.assert_array_equal(dx, np.full(4, 2.0))


def _identity_with_clipped_gradient():
    return custom_rule(lambda x: x, augmented_primal=lambda cfg, x: (x, None),
                       reverse=lambda cfg, s, g: (np.clip(g, -1.0, 1.0),),
                       forward=lambda cfg, p, t: (p[0], np.clip(t[0], -1.0, 1.0)))


def test_a_write_into_a_result_that_shares_memory_with_the_argument_is_refused():
    clip = _identity_with_clipped_gradient()

    def writes_the_result(x):
        y = clip(x)
        y[0] = 10.0   # NumPy writes x[0] too: the plain function returns sum(y * y) = 129
        return np.sum(y * x)

    def writes_the_argument(x):
        y = clip(x)
        x *= 2.0
        return np.sum(y * x)
    x = np.array([1.0, 2.0, 3.0, 4.0])
    assert writes_the_result(x.copy()) == 129.0
    for f in (writes_the_result, writes_the_argument):
        # It returned 39 (the write not seen through the argument) and its derivative.
        with pytest.raises(RuleError, match=r"shares memory with its argument 0"):
            autodiff(ReverseWithPrimal, f, Active, Active(x.copy()))
        with pytest.raises(RuleError, match=r"shares memory with its argument 0"):
            autodiff(Forward, f, Duplicated(x.copy(), np.ones(4)))


def test_a_rule_returning_its_argument_works_when_nothing_writes():
    clip = _identity_with_clipped_gradient()
    ((dx,),) = autodiff(Reverse, lambda x: np.sum(3.0 * clip(x) + x), Active, Active(X))
    np.testing.assert_array_equal(dx, np.full(3, 2.0))   # clip(3) + 1
    (tangent,) = autodiff(Forward, lambda x: np.sum(clip(x) * 2.0), Duplicated(X, np.ones(3)))
    assert tangent == 6.0


def test_a_rule_with_fewer_results_than_its_function_is_refused():
    def three(x):
        return x * 2.0, x * 3.0, x * 4.0
    rule = custom_rule(three, augmented_primal=lambda cfg, x: ((x * 2.0, x * 3.0), None),
                       reverse=lambda cfg, s, g: (2.0 * g[0] + 3.0 * g[1],),
                       multiple_results=True)
    with pytest.raises(RuleError, match=r"returned 2 results, but `three` itself returns 3"):
        autodiff(Reverse, lambda x: np.sum(rule(x)[0]), Active, Active(X))


def test_the_primal_is_checked_for_each_value_of_a_string_parameter():
    def activation(x, *, kind):
        return np.tanh(x) if kind == "tanh" else np.sin(x)
    rule = custom_rule(activation,   # wrong for kind="sin": always tanh
                       augmented_primal=lambda cfg, x, *, kind: (np.tanh(x), x),
                       reverse=lambda cfg, x, g: (g * (1 - np.tanh(x) ** 2),))
    autodiff(Reverse, lambda x: np.sum(rule(x, kind="tanh")), Active, Active(X))
    with pytest.raises(RuleError, match=r"primal that disagrees with `activation`"):
        autodiff(Reverse, lambda x: np.sum(rule(x, kind="sin")), Active, Active(X))


def test_a_malformed_cotangent_of_a_constant_argument_is_refused():
    def product(x, y):
        return x * y
    wrong = custom_rule(product, augmented_primal=lambda cfg, x, y: (x * y, (x, y)),
                        reverse=lambda cfg, s, g: (g * s[1], np.ones(7)))
    with pytest.raises(RuleError, match=r"shape \(7,\) for argument 1 \(`y`\).*not "
                                        r"differentiated in this call"):
        autodiff(Reverse, lambda x, y: np.sum(wrong(x, y)), Active, Active(X), Const(X))
    # A cotangent not yet summed over the axes a scalar was broadcast along is dropped, as
    # before; the active argument's derivative is right.
    unsummed = custom_rule(product, augmented_primal=lambda cfg, x, y: (x * y, (x, y)),
                           reverse=lambda cfg, s, g: (g * s[1], g * s[0]))
    ((dx, none),) = autodiff(Reverse, lambda x, y: np.sum(unsummed(x, y)), Active, Active(X),
                             Const(2.0))
    np.testing.assert_array_equal(dx, np.full(3, 2.0))
    assert none is None


@pytest.mark.parametrize("pack", [
    lambda x: {"a": x, "b": x},
    lambda x: [[x], [x]],
    lambda x: ({"a": [x]}, x),
], ids=["dict", "nested-list", "nested-dict"])
def test_inactive_strips_tracers_inside_any_container(pack):
    product = inactive(lambda p: _first(p) * _first(p))

    def f(x):
        return np.sum(x * product(pack(x)))
    ((dx,),) = autodiff(Reverse, f, Active, Active(X))   # was 3 x**2: the derivative leaked
    np.testing.assert_allclose(dx, X * X, rtol=1e-12, atol=1e-12)
    (tangent,) = autodiff(Forward, f, Duplicated(X, np.ones(3)))
    np.testing.assert_allclose(tangent, np.sum(X * X), rtol=1e-12, atol=1e-12)


def _first(tree):
    while isinstance(tree, (dict, list, tuple)):
        tree = next(iter(tree.values())) if isinstance(tree, dict) else tree[0]
    return tree


def test_a_write_into_the_buffer_an_inactive_function_got_raises():
    stop = inactive(lambda x: x)

    def f(x):
        y = stop(x)
        y[0] = 100.0
        return np.sum(x * y)
    x = X.copy()
    # It wrote the caller's array behind the engine's back: derivative [100, x1, x2] where
    # the plain function's is [0, 2 x1, 2 x2].
    with pytest.raises(ValueError, match="read-only"):
        autodiff(Reverse, f, Active, Active(x))
    np.testing.assert_array_equal(x, X)
    ((dx,),) = autodiff(Reverse, lambda x: np.sum(x * stop(x)), Active, Active(X))
    np.testing.assert_array_equal(dx, X)


def test_a_buffer_made_from_a_constant_argument_inside_a_rule_stays_plain():
    # np.zeros_like of a Const argument in the user's rule was a traced buffer of the running
    # differentiation, returned as the derivative: a dead traced value (EscapedTracerError on
    # use), in Reverse, Forward and batch modes alike.
    def scaled_sine(x, y):
        return np.sin(x) * y

    def reverse(cfg, saved, g):
        x, y = saved
        return g * np.cos(x) * y + np.zeros_like(y), (g * np.sin(x) if cfg.active[1] else None)

    def forward(cfg, p, t):
        (x, y), (tx, ty) = p, t
        ty = np.zeros_like(y) if ty is None else ty
        return np.sin(x) * y, tx * np.cos(x) * y + np.sin(x) * ty
    rule = custom_rule(scaled_sine, augmented_primal=lambda cfg, x, y: (np.sin(x) * y, (x, y)),
                       reverse=reverse, forward=forward)
    y = np.array([1.0, 2.0, -0.5])
    ((dx, none),) = autodiff(Reverse, lambda x, y: np.sum(rule(x, y)), Active, Active(X),
                             Const(y))
    assert type(dx) is np.ndarray and none is None
    np.testing.assert_allclose(dx, np.cos(X) * y, rtol=1e-12, atol=1e-12)
    (tangent,) = autodiff(Forward, rule, Duplicated(X, np.ones(3)), Const(y))
    assert type(tangent) is np.ndarray
    np.testing.assert_allclose(tangent, np.cos(X) * y, rtol=1e-12, atol=1e-12)
    from tape import BatchDuplicated
    (tangents,) = autodiff(Forward, rule, BatchDuplicated(X, (np.ones(3), 2 * np.ones(3))),
                           Const(y))
    assert all(type(t) is np.ndarray for t in tangents)
    np.testing.assert_allclose(tangents[1], 2 * np.cos(X) * y, rtol=1e-12, atol=1e-12)


def test_an_easy_rule_whose_partials_make_buffers_from_a_constant_gives_plain_tangents():
    from tape import easy_rule
    product = easy_rule(lambda x, y: x * y,
                        partials=lambda x, y: (y + np.zeros_like(y), x + np.zeros_like(x)))
    y = np.array([3.0, 4.0, 5.0])
    (tangent,) = autodiff(Forward, product, Duplicated(X, np.ones(3)), Const(y))
    assert type(tangent) is np.ndarray   # was a traced value of the finished level
    np.testing.assert_allclose(tangent, y, rtol=1e-12, atol=1e-12)
