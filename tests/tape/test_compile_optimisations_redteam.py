"""Red team of the optimisations of a compiled program (docs/compile.md, "The program"): common
subexpressions (tape/program_cse.py), dropped unused steps (tape/program_unused.py), in-place
writes of private buffers and in-place sums of cotangents (tape/program_code.py,
tape/program_adjoint.py), and values released after their last use.

Each function repeats a computation around a write that changes its operand (through a view,
np.copyto, out=, ufunc.at, +=, np.put, a sibling view of a private buffer), so that sharing
the two computations, or reading a released or overwritten value, would give another result.
Every mode's compiled function is called with changing values and compared with eager
`autodiff` (results and shadows), and the reverse-mode gradient with central differences."""
from __future__ import annotations

import numpy as np
import pytest

import tape
from tape import (Active, Const, Duplicated, Forward, ForwardWithPrimal, Reverse,
                  ReverseWithPrimal)

MODES = (Reverse, ReverseWithPrimal, Forward, ForwardWithPrimal)


def _through_view(x):
    v = x[1:]
    a = np.sin(v)
    x[:2] = 5.0 * x[1:]          # the base changes under the view
    b = np.sin(v)
    return a * b


def _copyto(x):
    a = np.sin(x) * 2.0
    np.copyto(x, x * 3.0)
    b = np.sin(x) * 2.0
    return a * b


def _out(x):
    a = np.exp(x)
    np.multiply(x, 0.5, out=x)
    b = np.exp(x)
    return a + b * x


def _ufunc_at(x):
    a = x * 2.0
    np.add.at(x, [0, 0, 2], 1.0)
    b = x * 2.0
    return a * b


def _iadd(x):
    a = np.cos(x)
    x += x[::-1]                 # overlapping operand
    b = np.cos(x)
    return a * b


def _put(x):
    a = np.tanh(x)
    np.put(x, [1], 7.0)
    b = np.tanh(x)
    return a - b * x


def _sibling_view_of_private_buffer(x):
    y = np.zeros_like(x)
    y[:] = x
    v, w = y[1:], y[:2]          # two views of one private buffer
    a = np.sin(v)
    w[1] = 2.0 * x[0]            # written through the other view
    b = np.sin(v)
    return a * b


def _discarded_view_written(x):
    y = x * 1.0
    y[1:][0] = 9.0 * x[2]        # the view is never named
    a = np.sin(y)
    y.reshape(3)[...] = y[::-1]  # nor is this one
    return a * np.sin(y)


def _const_path_into_active(x, c):
    b = c.copy()
    a = b * 2.0
    b *= x                       # a Const path becomes active in place
    return a * b + b * 2.0


PATTERNS = {f.__name__.lstrip("_"): f for f in (
    _through_view, _copyto, _out, _ufunc_at, _iadd, _put, _sibling_view_of_private_buffer,
    _discarded_view_written)}


def _values(call):
    return np.random.default_rng(call).uniform(-1.0, 1.0, 3)


def _run(fn, mode, f, x, c=None):
    """`fn(...)` (eager autodiff or a compiled function) on copies; what it returned and
    what it wrote into the argument and its shadow."""
    x = x.copy()
    reverse = mode in (Reverse, ReverseWithPrimal)
    dx = np.zeros(3) if reverse else np.linspace(0.5, 1.5, 3)
    args = [Duplicated(x, dx)] + ([] if c is None else [Const(c.copy())])
    out = fn(*args)
    return out, x, dx


def _assert_same(got, want):
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            _assert_same(g, w)
    elif want is None:
        assert got is None
    else:
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-14)


def _loss(r):
    return np.sum(r * r) * 0.7 - np.sum(r)


def _compare_every_mode(f, mode, c=None):
    reverse = mode in (Reverse, ReverseWithPrimal)
    target = (lambda *a: _loss(f(*a))) if reverse else f
    ret = Active if reverse else Duplicated
    activities = (Duplicated,) if c is None else (Duplicated, Const)
    g = tape.compile(mode, target, ret, *activities)
    for call in range(3):
        x = _values(call)
        got = _run(g, mode, target, x, c)
        want = _run(lambda *a: tape.autodiff(mode, target, ret, *a), mode, target, x, c)
        _assert_same(got, want)
    assert g.stats.eager_calls == 0, g.stats
    return target


def _central_differences(f, x, c=None, h=1e-6):
    out = np.zeros_like(x)
    extra = () if c is None else (c,)
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = h
        out[i] = (f((x + e).copy(), *[a.copy() for a in extra])
                  - f((x - e).copy(), *[a.copy() for a in extra])) / (2 * h)
    return out


@pytest.mark.parametrize("mode", MODES, ids=str)
@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_a_repeat_around_a_write_equals_eager_in_every_mode(name, mode):
    target = _compare_every_mode(PATTERNS[name], mode)
    if mode is Reverse:   # and the gradient is the derivative of the function
        g = tape.compile(Reverse, target, Active, Duplicated)
        x = _values(7)
        for _ in range(2):   # the tracing call and a replay
            dx = np.zeros(3)
            g(Duplicated(x.copy(), dx))
        np.testing.assert_allclose(dx, _central_differences(target, x), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("mode", MODES, ids=str)
def test_a_const_path_made_active_in_place_equals_eager(mode):
    c = np.array([0.5, -2.0, 1.5])
    target = _compare_every_mode(_const_path_into_active, mode, c)
    if mode is Reverse:
        g = tape.compile(Reverse, target, Active, Duplicated, Const)
        x = _values(5)
        for _ in range(2):
            dx = np.zeros(3)
            g(Duplicated(x.copy(), dx), Const(c.copy()))
        np.testing.assert_allclose(dx, _central_differences(target, x, c), rtol=1e-6,
                                   atol=1e-7)


def _sum_of_sum(x, y):
    return np.sum(x + y)


@pytest.mark.parametrize("mode", (Reverse, ReverseWithPrimal), ids=str)
def test_active_derivatives_sharing_a_sum_cotangent_are_not_one_writable_array(mode):
    def scaled(grads):
        """Scale the first derivative in place (an optimizer step): the second must not move."""
        gx, gy = grads
        before = np.array(gy)
        try:
            gx *= 0.5
        except ValueError:   # a read-only derivative, as eager mode returns here
            pass
        return before, np.array(gy)

    x, y = np.arange(4.0).reshape(2, 2), np.ones((2, 2))
    eager = tape.autodiff(mode, _sum_of_sum, Active, Active(x.copy()), Active(y.copy()))
    before, after = scaled(eager[0])
    np.testing.assert_array_equal(after, before)
    g = tape.compile(mode, _sum_of_sum, Active, Active, Active)
    for call in range(3):
        got = g(Active(x + call), Active(y.copy()))
        before, after = scaled(got[0])
        np.testing.assert_array_equal(after, before)
    assert g.stats.eager_calls == 0, g.stats
