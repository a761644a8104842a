"""Red-team tests of `tape.testing` (check_grads, check_rule, the hypothesis strategies) as
users call them on their own code: the checker must fail on a wrong derivative, pass on a
right one, and say where a wrong one is wrong. Fixed: a wrong part beside a large right one
(each output leaf and argument is now also compared alone), 0-d arrays in check_rule's batched
reverse, narrow-float strategies, forward over forward of a differentiable rule, the entry
named by a reverse-mode failure, steps scaled entry by entry."""
import re

import numpy as np
import pytest

from tape import Duplicated, Forward, autodiff, custom_rule, primal
from tape.testing import GradientCheckError, arrays, check_grads, check_rule

X = np.array([0.3, -1.2, 0.7])
Y = np.array([0.5, 0.9, -0.4])


def _sin_rule(reverse_scale=1.0, forward_scale=1.0, batched_reverse_scale=1.0):
    def reverse(cfg, x, g):
        scale = reverse_scale * (batched_reverse_scale if cfg.width > 1 else 1.0)
        return (scale * g * np.cos(x),)
    return custom_rule(np.sin, augmented_primal=lambda cfg, x: (np.sin(x), x), reverse=reverse,
                       forward=lambda cfg, p, t: (np.sin(p[0]),
                                                  forward_scale * t[0] * np.cos(p[0])),
                       name="my_sin")


# -- a wrong derivative hidden by a larger, right one elsewhere -------------------------------
# The comparison projects every output leaf on one random cotangent and every argument on one
# random tangent, with a tolerance relative to the whole projection: a leaf or argument whose
# derivatives are 1000 times larger swallows a 1% error in another one (each alone is caught).

WRONG = _sin_rule(reverse_scale=1.01, forward_scale=1.01)


def test_a_one_percent_error_alone_is_caught():
    for mode in ("fwd", "rev"):
        with pytest.raises(GradientCheckError, match="argument 0 `x`"):
            check_grads(WRONG, X, order=1, modes=(mode,))


@pytest.mark.parametrize("mode", ["fwd", "rev"])
def test_a_wrong_output_leaf_beside_a_large_one_is_caught(mode):
    with pytest.raises(GradientCheckError):
        check_grads(lambda x: {"big": 1e3 * x, "small": WRONG(x)}, X, order=1, modes=(mode,))


@pytest.mark.parametrize("mode", ["fwd", "rev"])
def test_a_wrong_argument_beside_a_large_one_is_caught(mode):
    with pytest.raises(GradientCheckError, match="argument 1 `y`"):
        check_grads(lambda x, y: 1e3 * np.sum(x) + np.sum(WRONG(y)), X, Y, order=1,
                    modes=(mode,))


def _two_results(reverse_scale):
    """(1e3 x, sin x); the reverse rule gets the sin cotangent wrong by `reverse_scale`."""
    def reverse(cfg, x, g):
        return (1e3 * g[0] + reverse_scale * g[1] * np.cos(x),)

    def forward(cfg, p, t):
        return (1e3 * p[0], np.sin(p[0])), (1e3 * t[0], t[0] * np.cos(p[0]))
    return custom_rule(lambda x: (1e3 * x, np.sin(x)),
                       augmented_primal=lambda cfg, x: ((1e3 * x, np.sin(x)), x),
                       reverse=reverse, forward=forward, multiple_results=True, name="two")


def test_a_rule_with_two_results_of_different_sizes_passes_when_right():
    check_rule(_two_results(1.0), X)
    with pytest.raises(GradientCheckError, match="ReverseWithPrimal"):
        check_rule(_two_results(1.5), X)


def test_a_rule_reverse_wrong_for_its_small_result_is_caught():
    with pytest.raises(GradientCheckError, match="Reverse.*output 1"):
        check_rule(_two_results(1.01), X)


# -- batched reverse of a 0-d array ------------------------------------------------------------

BATCH_WRONG = _sin_rule(batched_reverse_scale=1.5)


def test_batched_reverse_wrong_is_caught_for_vectors_and_by_check_grads_for_0d():
    with pytest.raises(GradientCheckError, match="BatchDuplicated"):
        check_rule(BATCH_WRONG, X)
    with pytest.raises(GradientCheckError, match="batch reverse"):
        check_grads(BATCH_WRONG, np.array(0.4), order=1)


def test_check_rule_checks_batched_reverse_of_a_0d_array():
    with pytest.raises(GradientCheckError, match="BatchDuplicated"):
        check_rule(BATCH_WRONG, np.array(0.4))


# -- second derivatives: forward over forward --------------------------------------------------

def _forward_cut():
    """sin, differentiable=True, whose forward rule cuts the primal out of the trace."""
    return custom_rule(np.sin, augmented_primal=lambda cfg, x: (np.sin(x), x),
                       reverse=lambda cfg, x, g: (g * np.cos(x),),
                       forward=lambda cfg, p, t: (np.sin(p[0]), t[0] * np.cos(primal(p[0]))),
                       differentiable=True, name="forward_cut")


def test_forward_over_forward_of_the_cut_rule_is_wrong():
    rule = _forward_cut()
    ones = np.ones_like(X)

    def jvp(x):
        return autodiff(Forward, rule, Duplicated(x, ones))[0]
    second = autodiff(Forward, jvp, Duplicated(X.copy(), ones))[0]
    assert not np.allclose(second, -np.sin(X))   # the rule really is wrong there


@pytest.mark.parametrize("checker", ["check_rule", "check_grads"])
def test_forward_over_forward_of_a_differentiable_rule_is_checked(checker):
    with pytest.raises(GradientCheckError, match="second"):
        if checker == "check_rule":
            check_rule(_forward_cut(), X)
        else:
            check_grads(_forward_cut(), X)


# -- the failure message: which entry, got and expected ----------------------------------------

def _wrong_at_entry_3():
    def reverse(cfg, x, g):
        return (g * np.cos(x) * np.where(np.arange(x.size) == 3, 2.0, 1.0),)
    return custom_rule(np.sin, augmented_primal=lambda cfg, x: (np.sin(x), x), reverse=reverse,
                       forward=lambda cfg, p, t: (np.sin(p[0]), t[0] * np.cos(p[0])),
                       name="wrong_at_3")


def test_a_forward_failure_names_the_entry():
    def forward(cfg, p, t):
        return np.sin(p[0]), t[0] * np.cos(p[0]) * np.where(np.arange(p[0].size) == 3, 2.0, 1.0)
    rule = custom_rule(np.sin, augmented_primal=lambda cfg, x: (np.sin(x), x),
                       reverse=lambda cfg, x, g: (g * np.cos(x),), forward=forward)
    with pytest.raises(GradientCheckError, match=r"index \(3,\)"):
        check_grads(rule, np.linspace(-1.0, 1.0, 6), order=1, modes=("fwd",))


@pytest.mark.parametrize("size", [6, 300])   # 300 entries: halved down to 32, then one by one
@pytest.mark.parametrize("checker", ["check_rule", "check_grads"])
def test_a_reverse_failure_names_the_entry(checker, size):
    x = np.linspace(-1.0, 1.0, size)
    with pytest.raises(GradientCheckError, match=r"argument 0 `x`.*index \(3,\)") as e:
        if checker == "check_rule":
            check_rule(_wrong_at_entry_3(), x, modes=("rev",))
        else:
            check_grads(_wrong_at_entry_3(), x, order=1, modes=("rev",))
    got, want = re.search(r"got (\S+), finite differences (\S+)$", str(e.value)).groups()
    assert float(got) == pytest.approx(2 * float(want), rel=1e-6)   # the rule doubles entry 3


# -- strategies ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_narrow_float_arrays_take_any_bounds(dtype):
    hypothesis = pytest.importorskip("hypothesis")
    drawn = []

    @hypothesis.settings(max_examples=5, database=None, derandomize=True, deadline=None)
    @hypothesis.given(arrays((2,), dtype=dtype, low=0.1, high=1.0))
    def collect(a):
        drawn.append(a)
    collect()
    assert all(a.dtype == dtype and np.all(a.real >= np.float32(0.1)) for a in drawn)


# -- correct code: no false alarms --------------------------------------------------------------

def test_non_float_arguments_and_result_leaves_are_held_and_skipped():
    def f(x, flag, kind, idx, p):
        y = np.sin(x) if kind == "sin" and flag else x
        return {"y": y[idx] * p["w"] * p["n"], "where": np.argmax(x), "positive": x > 0,
                "name": kind, "nothing": None}
    args = (X, True, "sin", np.array([0, 2]), {"w": 0.7, "n": 3})
    check_grads(f, *args)
    wrong = _sin_rule(reverse_scale=1.01)

    def g(x, flag, kind, idx, p):
        return {"y": wrong(x)[idx] * p["w"] * p["n"], "where": np.argmax(x), "name": kind}
    with pytest.raises(GradientCheckError, match="argument 0 `x`"):
        check_grads(g, *args, order=1, modes=("rev",))


def test_log_at_entries_of_very_different_sizes():
    check_grads(np.log, np.array([1e6, 1e-3, 2.0]))


def test_second_order_check_rule_takes_float32_arguments():
    """The second-order check of a differentiable rule runs in float64 (it raised "check_grads
    needs float64 arguments ... or use check_rule" for a float32 argument)."""
    right = custom_rule(np.sin, augmented_primal=lambda cfg, x: (np.sin(x), x),
                        reverse=lambda cfg, x, g: (g * np.cos(x),),
                        forward=lambda cfg, p, t: (np.sin(p[0]), t[0] * np.cos(p[0])),
                        differentiable=True, name="sin32")
    check_rule(right, X.astype(np.float32))
    with pytest.raises(GradientCheckError, match="second"):
        check_rule(_forward_cut(), X.astype(np.float32), modes=("fwd",))
