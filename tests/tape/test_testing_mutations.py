"""Mutation tests of the gradient checker (`tape.testing.check_grads`, `check_rule`): user rules
with the bugs users really plant must be caught, with a message naming the mode, the argument or
output and the size of the discrepancy; correct rules and badly scaled but smooth functions must
pass. A checker that passes a wrong rule is a silent wrong value by proxy."""
import functools

import numpy as np
import pytest

from tape import Const, custom_rule, easy_rule, primal
from tape.testing import GradientCheckError, arrays, check_grads, check_rule

X = np.array([0.3, -1.2, 0.7])
Y = np.array([0.5, 0.9, -0.4])
Z = np.array([0.3 + 0.4j, -1.0 + 0.2j])
A = np.array([[0.3, -1.2], [0.7, 0.2]])
B = np.array([[0.5, 0.1], [-0.3, 0.8]])


def _rule(fn, augmented, reverse, forward=None, **kw):
    return custom_rule(fn, augmented_primal=augmented, reverse=reverse, forward=forward, **kw)


def _caught(check, *args, says=(), **kw) -> str:
    """Run the check, which must raise GradientCheckError whose message holds every part of
    `says`; return the message."""
    with pytest.raises(GradientCheckError) as info:
        check(*args, **kw)
    message = str(info.value)
    missing = [s for s in says if s not in message]
    assert not missing, f"the message lacks {missing}: {message}"
    return message


def _sin_rule(reverse_scale=1.0, forward_scale=1.0, reverse_dtype=None, forward_dtype=None):
    def reverse(cfg, x, g):
        c = reverse_scale * g * np.cos(x)
        return (c.astype(reverse_dtype) if reverse_dtype else c,)

    def forward(cfg, p, t):
        tan = forward_scale * t[0] * np.cos(p[0])
        return np.sin(p[0]), tan.astype(forward_dtype) if forward_dtype else tan
    return _rule(np.sin, lambda cfg, x: (np.sin(x), x), reverse, forward, name="my_sin")


# -- planted bugs: each must be caught --------------------------------------------------------

def test_wrong_sign_in_the_reverse_rule():
    _caught(check_rule, _sin_rule(reverse_scale=-1), X,
            says=("ReverseWithPrimal", "argument 0 `x`", "difference", "tolerance"))
    _caught(check_grads, _sin_rule(reverse_scale=-1), X, order=1,
            says=("reverse mode", "argument 0", "first derivatives", "difference"))


def test_factor_two_in_the_forward_rule_only():
    _caught(check_rule, _sin_rule(forward_scale=2), X,
            says=("ForwardWithPrimal", "tangent", "output 0", "difference"))
    _caught(check_grads, _sin_rule(forward_scale=2), X, order=1,
            says=("forward mode", "argument 0", "difference"))
    check_rule(_sin_rule(forward_scale=2), X, modes=("rev",))   # the reverse rule is right


def test_reverse_rule_with_a_conjugate_too_many_for_a_complex_input():
    # Hecate's user rules use the transpose convention (no conjugate for holomorphic f);
    # EnzymeRules' convention (conjugated cotangents) is a bug here.
    square = _rule(lambda z: z * z, lambda cfg, z: (z * z, z),
                   lambda cfg, z, g: (g * np.conj(2 * z),),
                   lambda cfg, p, t: (p[0] * p[0], 2 * p[0] * t[0]))
    _caught(check_rule, square, Z, says=("argument 0 `z`", "ReverseWithPrimal"))
    _caught(check_grads, square, Z, order=1, says=("reverse mode",))


def test_abs_rule_missing_its_conjugate():
    absolute = _rule(np.abs, lambda cfg, z: (np.abs(z), z),
                     lambda cfg, z, g: (np.real(g) * z / np.abs(z),),
                     lambda cfg, p, t: (np.abs(p[0]), np.real(np.conj(p[0]) * t[0]) / np.abs(p[0])))
    _caught(check_rule, absolute, Z, says=("ReverseWithPrimal", "argument 0"))


def _bias_rule(reduce):
    """x + b with b broadcast along x's first axis; `reduce` turns g into b's cotangent."""
    def forward(cfg, p, t):
        tan = np.zeros(np.broadcast_shapes(np.shape(p[0]), np.shape(p[1])))
        for ti in t:
            if ti is not None:
                tan = tan + ti
        return p[0] + p[1], tan
    return _rule(lambda x, b: x + b, lambda cfg, x, b: (x + b, None),
                 lambda cfg, s, g: (g, reduce(g)), forward, name="add_bias")


@pytest.mark.parametrize("reduce", [lambda g: np.sum(g), lambda g: g[0],
                                    lambda g: np.mean(g, axis=0)],
                         ids=["summed over every axis", "first row only", "mean not sum"])
def test_cotangent_not_summed_over_the_broadcast_axis(reduce):
    # Every one of these has a shape that broadcasts to b's, so the engine accepts it.
    xx = np.array([[0.3, -1.2, 0.7], [0.1, 0.4, -0.5]])
    _caught(check_rule, _bias_rule(reduce), xx, Y, says=("argument 1 `b`", "ReverseWithPrimal"))
    check_rule(_bias_rule(lambda g: np.sum(g, axis=0)), xx, Y)


def _matmul_rule():
    def reverse(cfg, saved, g):
        a, b = saved
        return g @ b, a.T @ g        # bug: g @ b instead of g @ b.T
    return _rule(lambda a, b: a @ b, lambda cfg, a, b: (a @ b, (a, b)), reverse,
                 lambda cfg, p, t: (p[0] @ p[1], (0 if t[0] is None else t[0] @ p[1])
                                    + (0 if t[1] is None else p[0] @ t[1])), name="my_matmul")


def test_transposed_matrix_in_a_matmul_rule():
    _caught(check_rule, _matmul_rule(), A, B, says=("argument 0 `a`",))
    # At a symmetric b the bug gives the right value: no check at that point can see it ...
    check_rule(_matmul_rule(), A, B + B.T)


def test_hypothesis_finds_a_bug_hidden_at_some_points():
    # ... but property-based tests over tape.testing.arrays do.
    hypothesis = pytest.importorskip("hypothesis")

    @hypothesis.settings(max_examples=20, database=None, derandomize=True, deadline=None)
    @hypothesis.given(arrays((2, 2)), arrays((2, 2)))
    def prop(a, b):
        check_rule(_matmul_rule(), a, b, modes=("rev",))
    with pytest.raises(GradientCheckError):
        prop()


def test_rule_wrong_only_for_negative_inputs():
    cube = _rule(lambda x: x ** 3, lambda cfg, x: (x ** 3, x),
                 lambda cfg, x, g: (3 * x * np.abs(x) * g,),
                 lambda cfg, p, t: (p[0] ** 3, 3 * p[0] ** 2 * t[0]))
    check_rule(cube, np.abs(X))   # right where x > 0
    _caught(check_rule, cube, X, says=("ReverseWithPrimal", "argument 0"))


def _take_rule():
    def reverse(cfg, saved, g):
        idx, shape = saved
        out = np.zeros(shape)
        out[idx] = g                  # bug: np.add.at(out, idx, g)
        return out, None
    return _rule(lambda x, idx: x[idx], lambda cfg, x, idx: (x[idx], (idx, x.shape)), reverse,
                 lambda cfg, p, t: (p[0][p[1]], t[0][p[1]]), name="take")


def test_gather_rule_wrong_only_where_an_index_repeats():
    check_rule(_take_rule(), X, np.array([0, 2, 1]))
    _caught(check_rule, _take_rule(), X, np.array([0, 2, 0]), says=("argument 0 `x`",))
    _caught(check_grads, _take_rule(), X, np.array([0, 2, 0]), order=1)


def _sin_without_second_order(kind):
    if kind == "easy_rule":
        return easy_rule(np.sin, partials=lambda x: np.cos(primal(x)))   # primal() cuts it
    return _rule(np.sin, lambda cfg, x: (np.sin(x), x),
                 lambda cfg, x, g: (g * np.cos(primal(x)),),
                 lambda cfg, p, t: (np.sin(p[0]), t[0] * np.cos(primal(p[0]))),
                 differentiable=True)


@pytest.mark.parametrize("kind", ["easy_rule", "custom_rule"])
def test_rule_right_first_order_wrong_second_order_where_claimed(kind):
    rule = _sin_without_second_order(kind)
    check_grads(rule, X, order=1)
    _caught(check_grads, rule, X, says=("second derivatives",))


@pytest.mark.parametrize("kind", ["easy_rule", "custom_rule"])
def test_check_rule_checks_second_order_when_the_rule_claims_it(kind):
    _caught(check_rule, _sin_without_second_order(kind), X, says=("second derivatives",))


def test_reverse_rule_that_writes_into_its_cotangent():
    def reverse(cfg, x, g):
        g *= np.cos(x)                 # the cotangent may be shared with other consumers
        return (g,)
    rule = _rule(np.sin, lambda cfg, x: (np.sin(x), x), reverse,
                 lambda cfg, p, t: (np.sin(p[0]), t[0] * np.cos(p[0])), name="my_sin")
    _caught(check_rule, rule, X, says=("wrote into", "cotangent"))


def test_forward_rule_that_writes_into_its_tangent():
    def forward(cfg, p, t):
        t[0] *= np.cos(p[0])
        return np.sin(p[0]), t[0]
    rule = _rule(np.sin, lambda cfg, x: (np.sin(x), x), lambda cfg, x, g: (g * np.cos(x),),
                 forward, name="my_sin")
    _caught(check_rule, rule, X, says=("wrote into", "tangent"))


def test_float32_cotangent_for_a_float64_input():
    _caught(check_rule, _sin_rule(reverse_dtype=np.float32), X,
            says=("float32", "float64", "argument 0 `x`"))


def test_float32_tangent_for_a_float64_input():
    _caught(check_rule, _sin_rule(forward_dtype=np.float32), X, says=("float32", "float64"))


def _two_results(wrong):
    def reverse(cfg, x, g):
        g0, g1 = g
        total = g0 * np.cos(x)
        return (total if wrong == "reverse" else total + g1 * np.exp(x),)

    def forward(cfg, p, t):
        second = t[0] * (np.sin(p[0]) if wrong == "forward" else np.exp(p[0]))
        return (np.sin(p[0]), np.exp(p[0])), (t[0] * np.cos(p[0]), second)
    return _rule(lambda x: (np.sin(x), np.exp(x)), lambda cfg, x: ((np.sin(x), np.exp(x)), x),
                 reverse, forward, multiple_results=True, name="sin_exp")


def test_rule_right_only_for_its_first_result():
    _caught(check_rule, _two_results("reverse"), X, says=("ReverseWithPrimal", "argument 0"))
    _caught(check_rule, _two_results("forward"), X, says=("tangent", "output 1"))


def test_rule_that_ignores_a_keyword_parameter():
    def scale(x, *, k=2.0):
        return k * x
    rule = _rule(scale, lambda cfg, x, k=2.0: (k * x, None), lambda cfg, s, g: (2.0 * g,),
                 lambda cfg, p, t, k=2.0: (k * p[0], k * t[0]), name="scale")
    check_rule(rule, X)   # right at the default k
    message = _caught(check_rule, functools.partial(rule, k=3.0), X,
                      says=("ReverseWithPrimal", "argument 0", "`scale`"))
    assert "`args`" not in message


def test_jvp_that_ignores_one_of_several_tangents():
    def forward(cfg, p, t):
        x, y = p
        return x * y, (t[0] * y if t[0] is not None else t[1] * x)
    mul = _rule(lambda x, y: x * y, lambda cfg, x, y: (x * y, (x, y)),
                lambda cfg, s, g: (g * s[1], g * s[0]), forward, name="mul")
    _caught(check_rule, mul, X, Y, says=("`x`: Duplicated, argument 1 `y`: Duplicated",))
    _caught(check_grads, mul, X, Y, order=1, says=("forward mode",))


def test_batched_path_wrong_single_path_right():
    def reverse(cfg, x, g):
        return (g * np.cos(x) * (1.01 if cfg.width > 1 else 1.0),)

    def forward(cfg, p, t):
        return np.sin(p[0]), t[0] * np.cos(p[0]) * (1.01 if cfg.width > 1 else 1.0)
    rule = _rule(np.sin, lambda cfg, x: (np.sin(x), x), reverse, forward, name="my_sin")
    check_rule(rule, X, modes=("fwd", "rev"))
    _caught(check_rule, rule, X, says=("BatchDuplicated",))
    _caught(check_grads, rule, X, order=1, says=("batch",))


def test_rule_wrong_past_a_kink():
    c = 0.37     # f has slope 1 below c and 2 above; the rule says 1 everywhere
    kink = _rule(lambda x: np.where(x < c, x, 2 * x - c),
                 lambda cfg, x: (np.where(x < c, x, 2 * x - c), x), lambda cfg, x, g: (g,),
                 lambda cfg, p, t: (np.where(p[0] < c, p[0], 2 * p[0] - c), t[0]))
    check_rule(kink, X[X < c])
    _caught(check_rule, kink, X, says=("tangent",))


def _scaled_square(scale, wrong=1.0):
    """scale * x**2 whose rules say wrong * 2 * scale * x."""
    return _rule(lambda x: scale * x ** 2, lambda cfg, x: (scale * x ** 2, x),
                 lambda cfg, x, g: (wrong * 2 * scale * x * g,),
                 lambda cfg, p, t: (scale * p[0] ** 2, wrong * 2 * scale * p[0] * t[0]),
                 name="scaled_square")


def test_a_wrong_rule_of_a_tiny_function_is_caught():
    # Derivatives of order 1e-8 are under a fixed absolute tolerance of 1e-7.
    check_grads(_scaled_square(1e-8), X, order=1)
    _caught(check_rule, _scaled_square(1e-8, wrong=1.5), X, says=("argument 0",))
    _caught(check_grads, _scaled_square(1e-8, wrong=1.5), X, order=1, says=("argument 0",))


def test_a_wrong_rule_at_tiny_inputs_is_caught():
    _caught(check_grads, _scaled_square(1.0, wrong=1.5), X * 1e-8, order=1)


def test_relu_exactly_at_its_kink_is_named_as_not_differentiable():
    # Central differences give 1/2 at 0; where's 0 there is a convention. The error must say
    # that the point, not necessarily the rule, is at fault.
    _caught(check_grads, lambda x: np.where(x > 0, x, 0.0), np.array([0.0, 0.5]), order=1,
            says=("not differentiable",))


# -- correct rules and smooth functions: no false alarms --------------------------------------

def test_large_inputs():
    check_grads(lambda x: x ** 2, X * 1e6)
    check_grads(lambda x: np.sin(x) * x, X * 1e6, order=1)


def test_large_and_tiny_outputs():
    check_grads(lambda x: 1e6 * np.exp(x), X)
    check_grads(lambda x: 1e-8 * np.sin(x), X)


def test_tiny_inputs():
    check_grads(lambda x: x ** 2, X * 1e-8)
    check_grads(np.log, np.abs(X) * 1e-8)


def test_kink_near_but_not_at_the_sample_point():
    check_grads(lambda x: np.maximum(x, 0.0), np.array([1e-7, -2e-7, 0.5]), order=1)
    check_grads(lambda x: np.abs(x) * x, X)


def test_zero_derivative_with_finite_difference_noise():
    check_grads(lambda x: np.sum(x ** 2) - np.sum(x * x), X)
    check_grads(lambda x: x ** 3, np.array([0.0, 1e-9, 0.4]))


def test_float32_inputs():
    check_rule(_sin_rule(), X.astype(np.float32))
    check_rule(_scaled_square(1e3), X.astype(np.float32))
    _caught(check_rule, _scaled_square(1.0, wrong=1.01), X.astype(np.float32),
            says=("argument 0",))
    # check_grads differences f itself, so it asks for float64 values rather than guess.
    with pytest.raises(ValueError, match=r"float32.*astype\(np.float64\)"):
        check_grads(np.sin, X.astype(np.float32))


def test_complex_pytrees_integers_and_python_floats():
    square = _rule(lambda z: z * z, lambda cfg, z: (z * z, z), lambda cfg, z, g: (g * 2 * z,),
                   lambda cfg, p, t: (p[0] * p[0], 2 * p[0] * t[0]))
    check_rule(square, Z)
    check_grads(square, Z, order=1)
    check_grads(lambda p: np.sum(np.sin(p["w"]) * p["b"]), {"w": X, "b": 0.5})
    check_grads(lambda x, n: np.sum(x ** n), X, 3)
    check_rule(_sin_rule(), 0.3)
    check_grads(easy_rule(np.sin, partials=np.cos), X)


def test_const_arguments_to_check_rule():
    mul = _rule(lambda x, y: x * y, lambda cfg, x, y: (x * y, (x, y)),
                lambda cfg, s, g: (g * s[1], g * s[0]),
                lambda cfg, p, t: (p[0] * p[1], (0 if t[0] is None else t[0] * p[1])
                                   + (0 if t[1] is None else t[1] * p[0])), name="mul")
    assert check_rule(mul, X, Const(Y)) > 0
    check_grads(mul, X, Y, order=1)
