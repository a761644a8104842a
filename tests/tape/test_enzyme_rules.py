"""EnzymeRules: the config a user rule is given, the checks on what it returns (RuleError),
`easy_rule`, `inactive_type`, and `check_rule`'s sweep over activity combinations."""
import math

import numpy as np
import pytest

from tape import (Active, BatchDuplicated, Const, Duplicated, Forward, ForwardWithPrimal,
                  HecateError, PytreeError, Reverse, RuleError,
                  autodiff, custom_rule, easy_rule, inactive_type, make_zero,
                  set_strong_zero)
from tape.activities import BatchDuplicated as BatchDuplicatedClass
from tape.core import ReverseTrace, config_for
from tape.testing import GradientCheckError, check_grads, check_rule
from tape.tracer import UFUNC_PRIMITIVES


def spy_rule(log, *, forward_primal=True):
    """x * y with rules that record the config they are given."""
    def augmented(cfg, x, y):
        log.append(("augmented_primal", cfg))
        return x * y, (x, y)

    def reverse(cfg, saved, g):
        log.append(("reverse", cfg))
        x, y = saved
        return (g * y if cfg.active[0] else None, g * x if cfg.active[1] else None)

    def forward(cfg, primals, tangents):
        log.append(("forward", cfg))
        (x, y), (tx, ty) = primals, tangents
        t = None
        if tx is not None:
            t = tx * y
        if ty is not None:
            t = ty * x if t is None else t + ty * x
        return (x * y if cfg.needs_primal or forward_primal else None), t
    return custom_rule(lambda x, y: x * y, augmented_primal=augmented, reverse=reverse,
                       forward=forward, differentiable=True, name="spy_mul")


# --------------------------------------------------------------------------------------------
# The config


def test_config_reverse_fields_and_overwritten():
    log = []
    mul = spy_rule(log)
    buffer, frozen = np.array([3.0, 4.0]), np.array([5.0, 6.0])
    frozen.flags.writeable = False
    x = np.array([1.0, 2.0])
    autodiff(Reverse, lambda x: np.sum(mul(x, buffer) + mul(x, 2.0) + mul(x, frozen)),
             Active, Active(x))
    cfgs = [cfg for kind, cfg in log if kind == "augmented_primal"]
    assert [c.active for c in cfgs] == [(True, False)] * 3
    assert all(c.activity == (Active, Const) and c.mode == "reverse" and c.width == 1
               and c.needs_primal and c.needs_shadow for c in cfgs)
    # A writable Const buffer may change before the sweep; a number or read-only array not;
    # the traced argument is protected by the engine's copy-on-write.
    assert [c.overwritten for c in cfgs] == [(False, True), (False, False), (False, False)]
    # The reverse rule is told what its augmented_primal was told (the sweep runs backwards).
    assert [cfg for kind, cfg in log if kind == "reverse"] == cfgs[::-1]


def test_config_forward_needs_primal_and_needs_shadow():
    log = []
    mul = spy_rule(log, forward_primal=False)
    x, dx, y = np.array([1.0, 2.0]), np.array([1.0, 0.0]), np.array([3.0, 4.0])
    (t,) = autodiff(Forward, mul, Duplicated(x, dx), y)
    assert log[-1][1].needs_primal is False and log[-1][1].needs_shadow is True
    np.testing.assert_allclose(t, [3.0, 0.0], atol=1e-12)
    t, p = autodiff(ForwardWithPrimal, mul, Duplicated(x, dx), y)
    assert log[-1][1].needs_primal is True
    np.testing.assert_allclose(p, [3.0, 8.0], atol=1e-11)
    (p,) = autodiff(ForwardWithPrimal, mul, Const, Duplicated(x, dx), y)
    assert log[-1][1].needs_shadow is False
    cfg = log[-1][1]
    assert cfg.mode == "forward" and cfg.activity == (Duplicated, Const)
    # Inside a function the result feeds later operations: its primal is always needed.
    autodiff(Forward, lambda x: mul(x, y) * 2.0, Duplicated(x, dx))
    assert log[-1][1].needs_primal is True


def test_config_needs_primal_plumbing_in_reverse():
    log = []
    mul = spy_rule(log)
    with ReverseTrace() as trace:
        x = trace.new_leaf(np.array([1.0, 2.0]))
        out = trace.call_root(mul, [x, 3.0], needs_primal=False)
        trace.backward({out.slot: np.ones(2)}, [x.slot])
    assert [(kind, cfg.needs_primal) for kind, cfg in log] == [("augmented_primal", False),
                                                               ("reverse", False)]


def test_config_width_in_batch_mode():
    log = []
    mul = spy_rule(log)
    x, y = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    (ts,) = autodiff(Forward, mul, BatchDuplicated(x, (np.ones(2), np.array([0.0, 2.0]))), y)
    assert log[-1][1].width == 2 and log[-1][1].activity == (BatchDuplicatedClass, Const)
    np.testing.assert_allclose(ts[0], [3.0, 4.0], atol=1e-11)
    np.testing.assert_allclose(ts[1], [0.0, 8.0], atol=1e-11)
    shadows = (np.zeros(2), np.zeros(2))
    autodiff(Reverse, lambda x: np.sum(mul(x, y)), Active, BatchDuplicated(x, shadows))
    assert [cfg.width for kind, cfg in log if kind == "reverse"][-1] == 2


def test_unvectorized_rule_sees_one_direction_at_a_time():
    seen = []

    def forward(cfg, p, t):
        seen.append((type(t[0]), cfg.width))
        return np.sin(p[0]), t[0] * np.cos(p[0])
    sin = custom_rule(np.sin, augmented_primal=lambda cfg, x: (np.sin(x), x),
                      reverse=lambda cfg, x, g: (g * np.cos(x),), forward=forward,
                      vectorized=False)
    x = np.array([0.3, 0.7])
    (ts,) = autodiff(Forward, sin, BatchDuplicated(x, (np.ones(2), 2 * np.ones(2))))
    assert seen == [(np.ndarray, 1), (np.ndarray, 1)]
    np.testing.assert_allclose(ts[1], 2 * np.cos(x), atol=1e-12)


def test_configs_are_cached_and_shared():
    assert config_for((True, False)) is config_for((True, False))
    cfg = config_for((True, False), needs_primal=False, width=3)
    assert cfg is config_for((True, False), needs_primal=False, width=3)
    assert cfg.replace(width=1, needs_primal=True) is config_for((True, False))
    with ReverseTrace() as trace:
        x = trace.new_leaf(np.ones(3))
        y = np.sin(x) * 2.0 + x
    configs = {id(cfg) for _, cfg, *_ in trace.records}
    assert len(configs) == 3 and y is not None   # sin, *2.0, + : one shared object each


def test_builtin_ops_are_not_checked():
    # Checks cost time: only user rules pay for them.
    sin = UFUNC_PRIMITIVES[np.sin]
    assert "_CheckedRules" not in getattr(sin.augmented_primal, "__qualname__", "")


# --------------------------------------------------------------------------------------------
# Wrong rule returns: RuleError says what was expected


def _rule(augmented=None, reverse=None, forward=None, **kw):
    return custom_rule(lambda x, y: x * y,
                       augmented_primal=augmented or (lambda cfg, x, y: (x * y, (x, y))),
                       reverse=reverse or (lambda cfg, s, g: (g * s[1], g * s[0])),
                       forward=forward or (lambda cfg, p, t: (p[0] * p[1], t[0] * p[1])),
                       name="bad_mul", **kw)


X, Y = np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0])


def _grad(rule):
    return autodiff(Reverse, lambda x, y: np.sum(rule(x, y)), Active, Active(X), Active(Y))


def test_rule_error_is_typed():
    assert issubclass(RuleError, HecateError) and issubclass(RuleError, TypeError)


def test_wrong_number_of_cotangents():
    with pytest.raises(RuleError, match=r"reverse rule of `bad_mul` must return a tuple of 2 "
                                        r"cotangents.*length 1"):
        _grad(_rule(reverse=lambda cfg, s, g: (g * s[1],)))


def test_cotangent_of_wrong_shape_names_argument_and_shapes():
    with pytest.raises(RuleError, match=r"cotangent of shape \(2,\) for argument 1 \(`y`\), whose "
                                        r"shape is \(3,\)"):
        _grad(_rule(reverse=lambda cfg, s, g: (g * s[1], np.ones(2))))


def test_cotangent_that_broadcasts_is_accepted():
    (gx, gy), = _grad(_rule(reverse=lambda cfg, s, g: (g * s[1], 1.0)))
    np.testing.assert_allclose(gy, np.ones(3), atol=1e-12)
    gy[0] = 5.0   # a result the user owns, not a read-only broadcast view


def test_complex_cotangent_for_real_argument():
    with pytest.raises(RuleError, match="complex cotangent for argument 0"):
        _grad(_rule(reverse=lambda cfg, s, g: (g * s[1] * 1j, g * s[0])))


def test_real_cotangent_for_complex_argument_is_accepted():
    rule = _rule(reverse=lambda cfg, s, g: (np.real(g * s[1]), g * s[0]))
    z = np.array([1.0 + 1.0j, 2.0])
    _, saved = rule.augmented_primal(config_for((True, True)), z, z)
    gx, gy = rule.reverse(config_for((True, True)), saved, np.ones(2, complex))
    assert gx.dtype.kind == "f" and gy.dtype.kind == "c"


def test_cotangent_that_is_not_an_array():
    with pytest.raises(RuleError, match="returned a str as the cotangent of argument 0"):
        _grad(_rule(reverse=lambda cfg, s, g: ("oops", None)))


def test_augmented_primal_not_a_pair():
    with pytest.raises(RuleError, match=r"augmented_primal rule of `bad_mul` must return a "
                                        r"pair \(primal, saved\); it returned a ndarray"):
        _grad(_rule(augmented=lambda cfg, x, y: x * y))


def test_primal_that_is_a_tuple_without_multiple_results():
    with pytest.raises(RuleError, match="multiple_results=True"):
        _grad(_rule(augmented=lambda cfg, x, y: ((x * y, x), None)))


def test_forward_not_a_pair():
    with pytest.raises(RuleError, match=r"forward rule of `bad_mul` must return a pair "
                                        r"\(primal, tangent\); it returned a tuple of length 3"):
        autodiff(Forward, _rule(forward=lambda cfg, p, t: (p[0], t[0], 1.0)),
                 Duplicated(X, Y), Y)


def test_forward_tangent_of_wrong_shape():
    with pytest.raises(RuleError, match=r"tangent of shape \(\) for a primal of shape \(3,\)"):
        autodiff(Forward, _rule(forward=lambda cfg, p, t: (p[0] * p[1], np.sum(t[0]))),
                 Duplicated(X, Y), Y)


def test_forward_none_primal_when_needed():
    rule = _rule(forward=lambda cfg, p, t: (None, t[0] * p[1]))
    autodiff(Forward, rule, Duplicated(X, Y), Y)   # the primal is not needed: fine
    with pytest.raises(RuleError, match="returned None as its primal, but the caller needs"):
        autodiff(ForwardWithPrimal, rule, Duplicated(X, Y), Y)


def _sincos(multiple_forward=None):
    def forward(cfg, p, t):
        s, c = np.sin(p[0]), np.cos(p[0])
        return (s, c), (t[0] * c, -t[0] * s)

    def reverse(cfg, x, g):
        gs, gc = g
        total = 0.0
        if gs is not None:
            total = total + gs * np.cos(x)
        if gc is not None:
            total = total - gc * np.sin(x)
        return (total,)
    return custom_rule(lambda x: (np.sin(x), np.cos(x)),
                       augmented_primal=lambda cfg, x: ((np.sin(x), np.cos(x)), x),
                       reverse=reverse, forward=multiple_forward or forward,
                       multiple_results=True, differentiable=True, name="sincos")


def test_multiple_results_rule_works_and_wrong_count_is_caught():
    sincos = _sincos()
    check_grads(lambda x: sincos(x)[0] * sincos(x)[1], np.array([0.2, 0.9]), order=2)
    bad = _sincos(lambda cfg, p, t: ((np.sin(p[0]), np.cos(p[0])), (t[0],)))
    with pytest.raises(RuleError, match="returned 2 primals, so it must return a tuple of 2 "
                                        "tangents"):
        autodiff(Forward, lambda x: bad(x)[0], Duplicated(X, Y))


# --------------------------------------------------------------------------------------------
# easy_rule


@easy_rule(partials=lambda x: 1.0 / (1.0 + np.exp(-x)))
def softplus(x):
    return np.log1p(np.exp(x))


@easy_rule(partials=lambda x, y: (y * np.cos(x * y), x * np.cos(x * y)))
def sin_xy(x, y):
    return np.sin(x * y)


def test_easy_rule_one_argument_every_mode_and_second_order():
    assert autodiff(Reverse, softplus, Active, Active(0.0)) == ((0.5,),)
    check_grads(softplus, np.array([-1.0, 0.2, 2.0]), order=2)


def test_easy_rule_broadcasting_arguments():
    check_grads(sin_xy, np.array([[0.3, 0.5, 0.9]]), np.array([[0.7], [1.1]]), order=2)
    check_grads(sin_xy, 0.4, np.array([0.7, 1.1]), order=2)


def test_easy_rule_with_output_and_opaque_function():
    # `math.erf` has no rule: only the partials need to be differentiable for any order.
    erf = easy_rule(np.vectorize(math.erf, otypes=[float]),
                    partials=lambda x: 2 / math.sqrt(math.pi) * np.exp(-x * x), name="erf")
    check_grads(erf, np.array([0.1, -0.6]), order=2)
    tanh = easy_rule(np.tanh, partials=lambda out, x: 1 - out ** 2, with_output=True)
    check_grads(tanh, np.array([0.1, -0.6]), order=2)


def test_easy_rule_passes_check_rule():
    assert check_rule(sin_xy, np.array([0.3, 0.5]), 0.8) > 0


def test_easy_rule_strong_zero():
    root = easy_rule(np.sqrt, partials=lambda x: 0.5 / np.sqrt(x))
    f = lambda x: np.where(x > 0, root(np.abs(x)), 0.0)   # noqa: E731
    with np.errstate(divide="ignore", invalid="ignore"):
        (g,), = autodiff(Reverse, lambda x: np.sum(f(x)), Active, Active(np.array([0.0, 4.0])))
        assert np.isnan(g[0])
        (g,), = autodiff(set_strong_zero(Reverse), lambda x: np.sum(f(x)), Active,
                         Active(np.array([0.0, 4.0])))
    np.testing.assert_allclose(g, [0.0, 0.25], atol=1e-12)


def test_easy_rule_keeps_a_constant_that_is_overwritten_later():
    # config.overwritten says the Const buffer w may change before the sweep: it is copied.
    scale = easy_rule(lambda x, w: x * w, partials=lambda x, w: (w, x))
    w = np.array([1.0, 2.0])

    def f(x):
        y = scale(x, w)
        w[0] = 100.0
        return np.sum(y)
    (g,), = autodiff(Reverse, f, Active, Active(np.ones(2)))
    np.testing.assert_allclose(g, [1.0, 2.0], atol=1e-12)


def test_easy_rule_wrong_partials():
    bad_count = easy_rule(lambda x, y: x * y, partials=lambda x, y: (y,), name="bad_count")
    with pytest.raises(RuleError, match="returned 1 partial derivatives for 2 arguments"):
        autodiff(Reverse, bad_count, Active, Active(1.0), Active(2.0))
    bad_shape = easy_rule(lambda x: x * 2, partials=lambda x: np.ones(4), name="bad_shape")
    with pytest.raises(RuleError, match=r"argument 0 has shape \(4,\), which does not "
                                        r"broadcast to the result's shape \(3,\)"):
        autodiff(Forward, bad_shape, Duplicated(X, Y))


# --------------------------------------------------------------------------------------------
# inactive_type


@inactive_type
class Settings:
    def __init__(self, scale):
        self.scale = scale


class Opaque:
    def __init__(self, scale):
        self.scale = scale


@inactive_type
class Temperature(float):
    pass


def test_inactive_type_inside_a_pytree_is_skipped():
    params = {"w": np.array([1.0, 2.0]), "settings": Settings(3.0)}
    f = lambda p: np.sum(p["w"] * p["settings"].scale)   # noqa: E731
    shadow = {"w": np.zeros(2), "settings": Settings(-1.0)}   # any instance will do
    autodiff(Reverse, f, Active, Duplicated(params, shadow))
    np.testing.assert_allclose(shadow["w"], [3.0, 3.0], atol=1e-12)
    (d,), = autodiff(Reverse, f, Active, Active(params))
    assert d["settings"] is params["settings"]   # kept, as make_zero keeps it
    assert make_zero(params)["settings"] is params["settings"]
    with pytest.raises(PytreeError, match="Opaque"):   # the same without the marker
        autodiff(Reverse, lambda p: np.sum(p["w"]), Active,
                 Active({"w": np.ones(2), "o": Opaque(1.0)}))


def test_inactive_type_argument_is_const_whatever_its_annotation():
    t = Temperature(2.0)
    assert autodiff(Reverse, lambda x, t: x * t, Active, Active(1.5), Active(t)) == ((2.0, None),)
    assert autodiff(Forward, lambda x, t: x * t, Duplicated(1.5, 1.0),
                    Duplicated(t, 1.0)) == (2.0,)

    class Sub(Settings):
        pass
    d, = autodiff(Reverse, lambda x, s: x * s.scale, Active, Active(2.0), Active(Sub(4.0)))
    assert d == (4.0, None)


def test_inactive_type_needs_a_class():
    with pytest.raises(TypeError, match="expects a class"):
        inactive_type(Settings(1.0))


# --------------------------------------------------------------------------------------------
# check_rule


def _mul_rule(wrong_when_y_const=False, wrong_without_primal=False, wrong_batch=False,
              wrong_batch_reverse=False, sum_for_scalar_y=True):
    def augmented(cfg, x, y):
        return x * y, (x if cfg.active[1] else None, y)

    def reverse(cfg, saved, g):
        x, y = saved
        gx = None
        if cfg.active[0]:
            gx = g * y * (1.5 if wrong_when_y_const and not cfg.active[1]
                          or wrong_batch_reverse and cfg.width > 1 else 1.0)
        gy = g * x if cfg.active[1] else None
        if gy is not None and sum_for_scalar_y and np.ndim(y) == 0:
            gy = np.sum(gy)   # y was broadcast: its cotangent is summed back to a scalar
        return gx, gy

    def forward(cfg, p, t):
        (x, y), (tx, ty) = p, t
        scale = 1.5 if (wrong_without_primal and not cfg.needs_primal
                        or wrong_batch and cfg.width > 1) else 1.0
        tan = 0.0
        if tx is not None:
            tan = tan + tx * y
        if ty is not None:
            tan = tan + ty * x
        return x * y, tan * scale
    return custom_rule(lambda x, y: x * y, augmented_primal=augmented, reverse=reverse,
                       forward=forward, differentiable=True, name="mul")


def test_check_rule_passes_a_correct_rule_in_every_combination():
    # 2 args: forward 3 non-Const patterns x 3 returns, batch the same; reverse: an array
    # and a Python float give 3*2 - 1 = 5 patterns, batch reverse 3 (x, y, both), each x 2
    # returns.
    assert check_rule(_mul_rule(), np.array([0.5, -1.0]), 0.7) == 9 + 9 + 5 * 2 + 3 * 2


@pytest.mark.parametrize("kind, match", [
    ("wrong_when_y_const", r"ReverseWithPrimal with \(argument 0 `x`: Active, argument 1 `y`: "
                           r"Const\) and return Active: the derivative of argument 0 `x`"),
    ("wrong_without_primal", r"Forward with \(argument 0 `x`: Const, argument 1 `y`: "
                             r"Duplicated\) and return Duplicated: the tangent"),
    ("wrong_batch", r"BatchDuplicated.*the tangent"),
    ("wrong_batch_reverse", r"ReverseWithPrimal with \(argument 0 `x`: BatchDuplicated, "
                            r"argument 1 `y`: Const\) and return Active: the derivative of "
                            r"argument 0 `x` \(shadow 0\)"),
])
def test_check_rule_names_the_failing_combination(kind, match):
    rule = _mul_rule(**{kind: True})
    with pytest.raises(GradientCheckError, match=match):
        check_rule(rule, np.array([0.5, -1.0]), np.array([0.7, 0.2]))
    if kind == "wrong_when_y_const":   # a check of all-active arguments does not see it
        check_grads(rule, np.array([0.5, -1.0]), np.array([0.7, 0.2]), order=1)


def test_check_rule_catches_a_cotangent_not_summed_over_broadcast_axes():
    # All-array checks pass; a scalar y (broadcast by x * y) needs its cotangent summed.
    rule = _mul_rule(sum_for_scalar_y=False)
    check_rule(rule, np.array([0.5, -1.0]), np.array([0.7, 0.2]))
    with pytest.raises(GradientCheckError, match=r"argument 1 `y`: Active\) and return Active: "
                                                 r"the rule raised RuleError: .* cotangent of "
                                                 r"shape \(2,\) for argument 1 \(`y`\), whose shape is "
                                                 r"\(\)"):
        check_rule(rule, np.array([0.5, -1.0]), 0.7)


def test_check_rule_catches_a_rule_that_writes_into_its_input():
    def augmented(cfg, x):
        x *= 1.0 + 1e-3    # the classic bug: an in-place update of the caller's array
        return x * 2, None
    sloppy = custom_rule(lambda x: x * 2, augmented_primal=augmented,
                         reverse=lambda cfg, s, g: (2 * g,),
                         forward=lambda cfg, p, t: (p[0] * 2, 2 * t[0]), name="sloppy")
    with pytest.raises(GradientCheckError, match=r"`sloppy`.*Active\) and return Active: the "
                                                 r"rule wrote into argument 0 `x`"):
        check_rule(sloppy, np.array([1.0, 2.0]), modes=("rev",))


def test_check_rule_reports_a_wrong_primal_and_a_rule_error():
    wrong_primal = custom_rule(lambda x: x * 2, augmented_primal=lambda cfg, x: (x * 3, None),
                               reverse=lambda cfg, s, g: (2 * g,),
                               forward=lambda cfg, p, t: (p[0] * 2, 2 * t[0]), name="dbl")
    with pytest.raises(GradientCheckError, match=r"ReverseWithPrimal .* the primal is wrong"):
        check_rule(wrong_primal, np.array([1.0, 2.0]))
    raising = _rule(reverse=lambda cfg, s, g: (g * s[1], np.ones(7)))
    with pytest.raises(GradientCheckError, match=r"argument 1 `y`: Active\) and return Active:"
                                                 r" the rule raised RuleError") as info:
        check_rule(raising, X, Y, modes=("rev",))
    assert isinstance(info.value.__cause__, RuleError)


def test_check_rule_skips_non_float_arguments():
    scale = custom_rule(lambda x, n: x * n, augmented_primal=lambda cfg, x, n: (x * n, n),
                        reverse=lambda cfg, n, g: (g * n, None),
                        forward=lambda cfg, p, t: (p[0] * p[1], t[0] * p[1]))
    assert check_rule(scale, np.array([1.0, 2.0]), 3) == 3 + 3 + 2 * 2 + 1 * 2
    scaled = custom_rule(lambda x, s: x * s.scale,
                         augmented_primal=lambda cfg, x, s: (x * s.scale, s.scale),
                         reverse=lambda cfg, k, g: (g * k, None),
                         forward=lambda cfg, p, t: (p[0] * p[1].scale, t[0] * p[1].scale))
    assert check_rule(scaled, np.array([1.0, 2.0]), Settings(2.0)) == 12
    with pytest.raises(ValueError, match="floating-point"):
        check_rule(scale, np.array([1, 2]), 3)
