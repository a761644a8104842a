"""Common subexpressions in a compiled program (tape/program_cse.py): a repeated call of one of
the engine's primitives on the same values is computed once, while the adjoint stays the
eager sweep's, so results equal eager `autodiff` bit for bit. And the cases where sharing
would be wrong: a user's rule that keeps state, buffers written in place after the repeated
call, constants that differ only in the sign of a zero or in type, returned arrays."""
from __future__ import annotations

import re

import numpy as np
import pytest

import tape
from tape import Active, Const, Duplicated, Reverse, ReverseWithPrimal, custom_rule

CALLS = 3


def _inputs(call, shape=(3, 4)):
    rng = np.random.default_rng(call)
    return rng.uniform(-1.0, 1.0, size=shape)


def _compare(f, g, *make):
    """Each call of the compiled `g` equals eager autodiff of `f` exactly (shadows included)."""
    for call in range(CALLS):
        xs = [m(call) for m in make]
        got = [np.zeros_like(x) for x in xs]
        want = [np.zeros_like(x) for x in xs]
        r1 = g(*[Duplicated(x.copy(), d) for x, d in zip(xs, got)])
        r2 = tape.autodiff(Reverse, f, Active, *[Duplicated(x.copy(), d)
                                                 for x, d in zip(xs, want)])
        assert type(r1) is type(r2)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
    assert g.stats.eager_calls == 0, g.stats


def _repeats(source: str) -> int:
    """The lines of a program that reuse an earlier step's results (``v7 = v3``)."""
    return len(re.findall(r"^\s+v\d+(?:, v\d+)* = v\d+(?:, v\d+)*$", source, re.M))


def test_a_repeated_expression_is_computed_once_and_the_gradient_is_eager_s():
    def f(x):
        a = np.sin(x) * 2.0
        b = np.sin(x) * 2.0                # the same two steps again
        c = np.exp(np.sin(x) * 2.0)        # ... and a third time, under exp
        return np.sum(a * b + c) + np.sum(np.exp(x) @ np.exp(x).T)
    g = tape.compile(Reverse, f, Active, Duplicated)
    _compare(f, g, _inputs)
    source = str(g)
    assert source.count("sin_impl(") == 1 and source.count("exp_impl(v0)") == 1, source
    assert _repeats(source) >= 4, source


def test_a_repeated_matmul_shares_its_residuals_with_its_own_reverse():
    # Both products are differentiated: the repeat's reverse rule runs on the first step's
    # residuals; the cotangents are summed as eager mode sums them.
    def f(x, w):
        return np.sum(np.tanh(x @ w)) + np.sum((x @ w) ** 2)
    g = tape.compile(Reverse, f, Active, Duplicated, Duplicated)
    _compare(f, g, _inputs, lambda call: _inputs(call + 10, (4, 2)))
    source = str(g)
    assert source.count("matmul_aug(") == 1 and re.search(r"s\d+ = s\d+", source), source


def test_a_repeat_whose_first_step_has_no_reverse_still_has_residuals():
    # The first product feeds only a Const-like path (its cotangent is never needed), the
    # second is differentiated: the first step keeps its residuals for the repeat's reverse.
    def f(x, w):
        p = x @ w
        scale = tape.inactive(np.max)(np.abs(p))    # no derivative through `scale`
        return np.sum((x @ w) ** 2) / (1.0 + scale)
    g = tape.compile(Reverse, f, Active, Duplicated, Duplicated)
    _compare(f, g, _inputs, lambda call: _inputs(call + 10, (4, 2)))


def test_a_user_rule_that_keeps_state_runs_at_every_call():
    count = [0]

    def bump(x):
        count[0] += 1
        return x * count[0]
    bumped = custom_rule(bump, augmented_primal=lambda cfg, x: (bump(x), count[0]),
                         reverse=lambda cfg, k, g: (g * k,), check_primal=False)

    def f(x):
        return np.sum(bumped(x) * bumped(x))
    g = tape.compile(Reverse, f, Active, Duplicated)
    for call in range(CALLS):
        x = _inputs(call)
        dx_c, dx_e = np.zeros_like(x), np.zeros_like(x)
        count[0] = 0
        r_c = g(Duplicated(x.copy(), dx_c))
        count[0] = 0
        r_e = tape.autodiff(Reverse, f, Active, Duplicated(x.copy(), dx_e))
        assert r_c == r_e
        np.testing.assert_array_equal(dx_c, dx_e)


def test_copies_written_in_place_afterwards_stay_separate():
    # Each copy's first write makes a private buffer that later writes update in place: two
    # equal-looking writes must not end in one shared array.
    def f(x, w):
        t = np.exp(x)
        t1 = t.copy()
        t1[0] = 0.0
        t1[1] = 5.0
        t2 = t.copy()
        t2[0] = 0.0
        t2[1] = 7.0
        return np.sum(t1 * w) + np.sum(t2 * w * w)
    g = tape.compile(Reverse, f, Active, Duplicated, Duplicated)
    _compare(f, g, _inputs, lambda call: _inputs(call + 5))


def test_fresh_buffers_filled_alike_stay_separate():
    def f(x):
        a = np.zeros_like(x)
        a[0] = x[0]
        b = np.zeros_like(x)
        b[0] = x[0]
        b[1] = 2.0 * x[1]
        return np.sum(a * np.sin(x)) + np.sum(b ** 2)
    g = tape.compile(Reverse, f, Active, Duplicated)
    _compare(f, g, _inputs)


@pytest.mark.parametrize("first, second", [(0.0, -0.0), (2, 2.0), (2.0, np.float32(2.0)),
                                           (np.float64(1.0), np.float32(1.0))])
def test_constants_that_differ_only_in_sign_or_type_are_not_shared(first, second):
    def f(x):
        a = np.arctan2(x * first, -1.0)      # +pi or -pi: the sign of the zero matters
        b = np.arctan2(x * second, -1.0)
        return np.sum(a * x) + 3.0 * np.sum(b * x)
    g = tape.compile(Reverse, f, Active, Duplicated)
    _compare(f, g, lambda call: np.abs(_inputs(call)) + 0.5)


def test_equal_returned_arrays_are_separate_arrays():
    def f(x):
        return np.sin(x) * 2.0, np.sin(x) * 2.0
    g = tape.compile(ReverseWithPrimal, f, Const, Duplicated)
    for call in range(CALLS):
        x = _inputs(call)
        (_, (a, b)) = g(Duplicated(x, np.zeros_like(x)))
        want = np.sin(x) * 2.0
        np.testing.assert_array_equal(a, want)
        np.testing.assert_array_equal(b, want)
        a[0, 0] = 100.0                       # the caller owns each result
        assert b[0, 0] == want[0, 0]


def test_buffers_written_with_equal_values_are_both_written():
    def f(y1, y2, x):
        y1[...] = np.cos(x) ** 2
        y2[...] = np.cos(x) ** 2
        return np.sum(y1 * y2)
    g = tape.compile(Reverse, f, Active, Duplicated, Duplicated, Duplicated)
    for call in range(CALLS):
        x = _inputs(call)
        outs = {}
        for name, run in (("compiled", g), ("eager", lambda *a: tape.autodiff(
                Reverse, f, Active, *a))):
            y1, y2, dx = np.zeros_like(x), np.zeros_like(x), np.zeros_like(x)
            dy1, dy2 = np.zeros_like(x), np.zeros_like(x)
            run(Duplicated(y1, dy1), Duplicated(y2, dy2), Duplicated(x.copy(), dx))
            outs[name] = (y1, y2, dx, dy1, dy2)
        for a, b in zip(outs["compiled"], outs["eager"]):
            np.testing.assert_array_equal(a, b)


def test_random_programs_with_repeats_equal_eager():
    # Chains of elementwise and reducing steps, each written twice at random places.
    ops = [np.sin, np.cos, np.tanh, lambda v: v * 1.5, lambda v: v @ v.T @ v,
           lambda v: np.sum(v, axis=0, keepdims=True) + v, lambda v: v[::-1] * v,
           lambda v: np.maximum(v, 0.1)]
    rng = np.random.default_rng(0)
    for trial in range(12):
        chain = [ops[k] for k in rng.integers(0, len(ops), size=5)]
        again = rng.integers(0, 2, size=5).astype(bool)

        def f(x, chain=chain, again=again):
            total, v = 0.0, x
            for op, twice in zip(chain, again):
                w = op(v)
                if twice:
                    total = total + np.sum(op(v) ** 2)
                v = w
            return total + np.sum(v)
        g = tape.compile(Reverse, f, Active, Duplicated)
        _compare(f, g, lambda call: _inputs(call, (3, 3)) * 0.5)
