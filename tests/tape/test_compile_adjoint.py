"""The adjoint of a compiled program sums cotangents in place only into arrays it owns
(tape/program_adjoint.py). Each example here is a way a cotangent can be shared: a rule that
returns its cotangent argument itself (to two arguments), one that returns a saved array (the
user's own), the cotangent of ``x + y`` passed to both sides unchanged, a read-only broadcast
view from a sum, a rule that returns None (a symbolic zero), gathers that scatter into a
cotangent someone else holds, and a float32 program (where ``ct += term`` would round).
Every call is compared with eager `tape.autodiff` on fresh arguments, twice (a replay that
corrupted a value would show on the second call)."""
from __future__ import annotations

import numpy as np

import tape
from tape import Active, Duplicated, Primitive, Reverse

RTOL, ATOL = 1e-12, 1e-14


def _check(f, *make, calls=2, rtol=RTOL):
    """Compile `f` for Reverse with Duplicated arguments; each call equals eager autodiff."""
    g = tape.compile(Reverse, f, Active, *([Duplicated] * len(make)))
    for call in range(calls):
        xs = [m(call) for m in make]
        got = [np.zeros_like(x) for x in xs]
        want = [np.zeros_like(x) for x in xs]
        g(*[Duplicated(x.copy(), d) for x, d in zip(xs, got)])
        tape.autodiff(Reverse, f, Active, *[Duplicated(x.copy(), d) for x, d in zip(xs, want)])
        for a, b in zip(got, want):
            assert a.dtype == b.dtype
            np.testing.assert_allclose(a, b, rtol=rtol, atol=ATOL)
    assert g.stats.hits == calls - 1 and g.stats.eager_calls == 0, g.stats
    return str(g)


def _x(call):
    return np.linspace(-1.0, 1.0, 12).reshape(3, 4) * (1.0 + call)


# A rule that hands its cotangent argument, unchanged, to both of its arguments.
both = Primitive("both", lambda x, y: x + y, lambda cfg, x, y: (x + y, None),
                 lambda cfg, saved, g: (g, g))


def test_a_cotangent_a_rule_returns_twice_is_not_summed_into():
    def f(x):
        y = x * 3.0
        a, b = np.sin(x), np.cos(y)
        return np.sum(a * b * both(x, y))
    source = _check(f, _x)
    assert " = ct" in source and "+ g[" not in source


def test_the_cotangent_of_a_sum_passed_to_both_sides_is_not_summed_into():
    def f(x):
        u, v = 2.0 * x, 3.0 * x
        a, b = np.sin(u), np.cos(v)
        return np.sum((u + v) * a * b)
    source = _check(f, _x)
    assert "+=" in source   # the program does sum in place elsewhere


def test_a_saved_array_a_rule_returns_is_left_untouched():
    c = np.arange(12.0).reshape(3, 4) / 7.0
    original = c.copy()
    # d(x * c)/dx: the rule returns the saved c itself when the cotangent is all ones.
    scale = Primitive("scale", lambda x: x * c, lambda cfg, x: (x * c, c),
                      lambda cfg, saved, g: (saved if np.all(g == 1.0) else g * saved,))

    def f(x):
        return np.sum(np.sin(x)) + np.sum(scale(x))
    _check(f, _x, calls=3)
    np.testing.assert_array_equal(c, original)


def test_a_broadcast_sum_cotangent_is_not_written():
    def f(x):
        y = np.sin(x)
        s = np.sum(x, axis=1, keepdims=True)
        return np.sum(y * s)
    source = _check(f, _x)
    assert "_broadcast_to(" in source


# A rule whose cotangent is a symbolic zero (None).
flat = Primitive("flat", np.floor, lambda cfg, x: (np.floor(x), None),
                 lambda cfg, saved, g: (None,))


def test_a_cotangent_that_may_be_none_is_assigned_not_summed():
    def f(x):
        a = np.cos(x)
        c = flat(x * 2.0)
        return np.sum(a + np.sin(c))
    source = _check(f, _x)
    assert "is None:" in source


def test_gathers_scatter_into_owned_and_shared_cotangents():
    def f(x):
        y = 2.0 * x
        rows = x[0] * x[1] + np.sum(x[1:3], axis=0) + y[2] * x[:, 1][2]
        return np.sum(rows * both(x, y)[0])
    source = _check(f, _x)
    assert "] += " in source and "_zeros(" in source


def test_gathers_of_one_row_twice_accumulate():
    def f(x):
        return np.sum(x[1] * x[1] + np.tanh(x[1:, 2:]).sum() * x[0])
    _check(f, _x)


def test_float32_programs_sum_out_of_place():
    c = np.linspace(0.5, 2.0, 12).reshape(3, 4)   # float64: some cotangents are float64

    def f(x):
        return np.sum(np.sin(x) * np.float32(2.0)) + np.sum(x * c) + np.sum(np.exp(x) * x)
    source = _check(f, lambda call: _x(call).astype(np.float32), rtol=1e-6)
    assert "+=" not in source


def test_float32_cotangents_are_summed_in_place_only_with_terms_of_their_dtype():
    # Terms of x's cotangent: float32 ones (summed into the owned cotangent) and float64 ones
    # (from a float64 constant: the sum is promoted, as in eager mode). Bit-equal to eager.
    c = np.linspace(0.5, 2.0, 12).reshape(3, 4)

    def f(x):
        a = np.sin(x) * x
        b = np.exp(x) * np.cos(x)
        return np.sum(a * b) + np.sum(x * c) + np.sum(np.tanh(x) * x)
    g = tape.compile(Reverse, f, Active, Duplicated)
    for call in range(3):
        x = _x(call).astype(np.float32)
        got, want = np.zeros_like(x), np.zeros_like(x)
        r1 = g(Duplicated(x.copy(), got))
        r2 = tape.autodiff(Reverse, f, Active, Duplicated(x.copy(), want))
        assert r1 == r2 and got.dtype == want.dtype == np.float32
        np.testing.assert_array_equal(got, want)
    assert "_add_into(" in str(g)


def test_a_broadcast_add_passes_a_shared_cotangent_that_is_not_summed_into():
    # z + c hands one cotangent G to z and c; the rule of x + w (w broadcast) hands G on to
    # x; x's next contribution (from q) must not be added into G, which c's step still reads.
    def f(x, w):
        a = np.cos(x)
        c = np.sin(x) * 2.0
        q = x * 5.0
        z = x + w
        return np.sum((z + c) * 3.0 + a + q)
    source = _check(f, _x, lambda call: np.array([[0.5, -1.0, 2.0, 0.25]]) * (call + 1))
    assert "add_rev" in source


def test_stacks_hand_each_argument_its_slice():
    def f(x):
        a, b = np.sin(x[0]), x[1] * 2.0
        s = np.stack((a, b, a, x[2]))   # `a` twice: its two slices are summed
        return np.sum(s * s) + np.sum(np.stack((b, a), axis=1) ** 3)
    source = _check(f, _x)
    assert "_array((" in source
    _check(f, lambda call: _x(call).astype(np.float32), rtol=1e-6)


def test_gathers_with_repeated_indices_accumulate():
    def f(x):
        picked = x[[0, 2, 0]]
        return np.sum(np.tanh(picked) * x[[1, 1, 2]]) + np.sum(x[0] ** 2)
    _check(f, _x)


def _writes(x):
    y = np.zeros_like(x)
    for i in range(4):
        y[i] = np.sin(x[i]) * (i + 1.0)             # scalar writes
    y[1:3] = y[1:3] + x[4:6]                        # a value read from the buffer itself
    y[[5, 5, 6]] = x[:3] ** 2                       # a repeated index: the last write wins
    z = y.copy()
    z[7:] = x[7:] * 3.0                             # a value whose cotangent is a view of g
    return np.sum(z * z) + np.sum(y)


def test_writes_into_an_owned_cotangent_zero_it_in_place_and_equal_eager():
    """``y[index] = v`` in a compiled adjoint zeroes the written entries of the cotangent it
    owns instead of copying it (`reverse_in_place`); the values are eager mode's, bit for bit,
    in float64 and float32, and the value's cotangent is read before the zeroing."""
    for dtype in (np.float64, np.float32):
        g = tape.compile(Reverse, _writes, Active, Duplicated)
        for call in range(3):
            x = (np.linspace(-1.0, 2.0, 10) * (1 + call)).astype(dtype)
            got, want = np.zeros_like(x), np.zeros_like(x)
            g(Duplicated(x, got))
            tape.autodiff(Reverse, _writes, Active, Duplicated(x.copy(), want))
            np.testing.assert_array_equal(got, want)
            fd = np.array([(_writes(x.astype(np.float64) + e) - _writes(x.astype(np.float64) - e))
                           / 2e-6 for e in np.eye(10) * 1e-6])
            np.testing.assert_allclose(got, fd, rtol=1e-5 if dtype == np.float64 else 1e-3,
                                       atol=1e-6 if dtype == np.float64 else 1e-3)
        assert "setitem_rev_in_place" in str(g)


def test_a_write_whose_cotangent_is_shared_copies_it():
    """The cotangent of ``y + x`` reaches both sides unchanged, not the program's own: the
    write's reverse copies it, and x's share stays whole."""
    def f(x):
        y = x * 2.0
        y[0] = x[1] ** 2
        return np.sum(y + x)

    g = tape.compile(Reverse, f, Active, Duplicated)
    x, got = np.array([1.0, 2.0, 3.0]), np.zeros(3)
    g(Duplicated(x, got))
    assert "setitem_rev_in_place" not in str(g)
    np.testing.assert_allclose(got, [1.0, 7.0, 3.0], rtol=1e-14)
