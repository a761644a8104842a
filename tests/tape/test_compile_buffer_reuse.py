"""Buffer reuse in compiled programs (tape/program_inplace.py): an elementwise step writes its
result over an operand array that dies there (``out=``), and an inline reverse multiplies a
cotangent that dies there in place (``g *= d``). Results must equal eager `autodiff` bit for
bit, and no array anything else can see (a leaf, a returned value, a view, a residual, a seed)
may be written over."""
from __future__ import annotations

import re

import numpy as np
import pytest

import tape
from tape import Active, Const, Duplicated, Reverse, ReverseWithPrimal

CALLS = 3


def _inputs(call, shape=(64, 80), dtype=np.float64):
    rng = np.random.default_rng(call)
    return rng.uniform(0.2, 0.9, size=shape).astype(dtype)


def _compare(f, g, *make, mode=Reverse):
    """Every call of the compiled `g` equals eager autodiff of `f` exactly, and leaves the
    arguments as they were."""
    for call in range(CALLS):
        xs = [m(call) for m in make]
        kept = [x.copy() for x in xs]
        got = [np.zeros_like(x) for x in xs]
        want = [np.zeros_like(x) for x in xs]
        r1 = g(*[Duplicated(x, d) for x, d in zip(xs, got)])
        r2 = tape.autodiff(mode, f, Active, *[Duplicated(x.copy(), d) for x, d in zip(xs, want)])
        for x, k in zip(xs, kept):
            np.testing.assert_array_equal(x, k)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
        if mode is ReverseWithPrimal:
            np.testing.assert_array_equal(r1[1], r2[1])
    assert g.stats.eager_calls == 0, g.stats
    return str(g)


def _outs(source):
    return len(re.findall(r", out=v\d+\)(?: if [^\n]*)?$", source, re.M))


def _in_place_products(source):
    return len(re.findall(r"^\s+(ct\d+) = _times_into\(\1, ", source, re.M))


def test_a_chain_writes_over_dying_values_and_cotangents():
    def f(x):
        y = x
        for _ in range(3):
            y = np.exp(np.tanh(np.sin(y) * 0.5 + x))
        return np.sum(y)
    source = _compare(f, tape.compile(Reverse, f, Active, Duplicated), _inputs)
    assert _outs(source) >= 6, source
    assert _in_place_products(source) >= 6, source


UNARY = [np.sin, np.cos, np.tan, np.exp, np.expm1, np.log, np.log1p, np.sqrt, np.cbrt,
         np.tanh, np.sinh, np.cosh, np.arcsin, np.arctan, np.arcsinh, np.square,
         np.reciprocal, np.negative, np.exp2, np.log2, np.log10, np.fabs]
BINARY = [np.add, np.subtract, np.multiply, np.divide, np.power, np.hypot, np.arctan2,
          np.logaddexp, np.logaddexp2]


@pytest.mark.parametrize("fn", UNARY, ids=lambda fn: fn.__name__)
def test_each_unary_ufunc_written_over_its_operand_is_eager_s_bits(fn):
    def f(x):
        y = np.sin(x) * 0.3 + 0.5       # values in (0.2, 0.8): every domain above holds
        return np.sum(fn(y) * x)
    _compare(f, tape.compile(Reverse, f, Active, Duplicated), _inputs)


@pytest.mark.parametrize("fn", BINARY, ids=lambda fn: fn.__name__)
@pytest.mark.parametrize("layout", ["C", "transposed"])
def test_each_binary_ufunc_on_mixed_layouts_is_eager_s_bits(fn, layout):
    # With a transposed operand the two arrays differ in layout; only the correctly rounded
    # ufuncs are written over one of them.
    def f(x, w):
        a = np.cos(x) * 0.3 + 0.5
        b = np.cos(w.T if layout == "transposed" else w) * 0.3 + 0.5
        return np.sum(fn(a, b) * x)
    make_w = (lambda c: _inputs(c + 7, (80, 64))) if layout == "transposed" else \
        (lambda c: _inputs(c + 7))
    _compare(f, tape.compile(Reverse, f, Active, Duplicated, Duplicated), _inputs, make_w)


def test_a_view_of_a_value_keeps_its_values_when_the_value_dies():
    # y's last reader is ``y + 1.0`` (whose reverse reads nothing), but the transpose, a view
    # of y's memory, is read after it by a product that keeps it for its reverse.
    def f(x):
        y = np.sin(x) * 2.0
        t = y.T
        z = y + 1.0
        return np.sum(z * z) + np.sum(t @ x)
    _compare(f, tape.compile(Reverse, f, Active, Duplicated), lambda c: _inputs(c, (70, 70)))


def test_a_value_saved_by_a_non_inline_rule_is_not_written_over():
    def f(x, w):
        y = np.sin(x) + 1.0
        m = y @ w                        # the product keeps y for w's cotangent
        z = y * 3.0                      # y's last use in the program's text
        return np.sum(z * z) + np.sum(m * m)
    _compare(f, tape.compile(Reverse, f, Active, Duplicated, Duplicated), _inputs,
             lambda c: _inputs(c + 3, (80, 5)))


def test_returned_arrays_stay_as_they_were_returned_over_later_calls():
    def f(x):
        return np.exp(np.sin(x) * 3.0) + 1.0
    g = tape.compile(ReverseWithPrimal, f, Const, Duplicated)
    kept = []
    for call in range(CALLS):
        x = _inputs(call)
        _, y = g(Duplicated(x, np.zeros_like(x)))
        kept.append((x, y))
    for x, y in kept:
        np.testing.assert_array_equal(y, np.exp(np.sin(x) * 3.0) + 1.0)


def _buffers_compare(f, make_seed):
    """f(x, out) writes `out`; compiled and eager agree on `out`, its shadow (the seed, which
    the sweep consumes), x's cotangent and x itself."""
    g = tape.compile(Reverse, f, Active, Duplicated, Duplicated)
    for call in range(CALLS):
        x = _inputs(call)
        x0 = x.copy()
        results = []
        for run in (lambda *a: g(*a), lambda *a: tape.autodiff(Reverse, f, Active, *a)):
            out, seed, dx = np.zeros_like(x), make_seed(x), np.zeros_like(x)
            r = run(Duplicated(x, dx), Duplicated(out, seed))
            results.append((r, out, seed, dx))
            np.testing.assert_array_equal(x, x0)
        (r1, *got), (r2, *want) = results
        assert r1 == r2
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
    assert g.stats.eager_calls == 0, g.stats


def test_an_intermediate_written_into_a_buffer_is_not_written_over():
    def f(x, out):
        y = np.sin(x) * 3.0
        out[...] = y                     # the buffer holds y's values
        return np.sum(np.exp(y))         # y's last use
    _buffers_compare(f, np.zeros_like)


def test_the_leaf_and_the_seed_are_never_written_over():
    def f(x, out):
        out[...] = np.exp(np.sin(x) * x)
        return np.sum(np.tanh(x) * 2.0)
    _buffers_compare(f, lambda x: np.full_like(x, 0.5))


def test_cotangents_passed_on_unchanged_are_not_shared_when_two_arguments_take_them():
    def f(x):
        y = np.sin(x)
        s = y + y                        # both arguments take the cotangent unchanged
        d = y - x                        # one unchanged, one negated
        p = y * y
        return np.sum(np.exp(s) * 2.0 + np.tanh(d) * 3.0 + p)
    source = _compare(f, tape.compile(Reverse, f, Active, Duplicated), _inputs)
    assert _in_place_products(source) >= 1, source


def test_float32_programs_never_multiply_cotangents_in_place():
    # ``g *= d`` in float32 could differ from ``g * d`` when d is float64; such programs keep
    # the eager products.
    def f(x):
        return np.sum(np.exp(np.sin(x) * 2.0) * np.float64(1.5))
    make = lambda c: _inputs(c, dtype=np.float32)
    source = _compare(f, tape.compile(Reverse, f, Active, Duplicated), make)
    assert _in_place_products(source) == 0, source


def test_a_recomputed_call_sees_new_inputs():
    # A program writing over its own values must not carry them from one call to the next.
    def f(x):
        return np.sum(np.exp(np.sin(x) * 0.5 + 1.0) * x)
    g = tape.compile(Reverse, f, Active, Duplicated)
    for call in range(5):
        x = _inputs(call % 2)
        dx = np.zeros_like(x)
        want = np.zeros_like(x)
        g(Duplicated(x, dx))
        tape.autodiff(Reverse, f, Active, Duplicated(x, want))
        np.testing.assert_array_equal(dx, want)


# -- derivatives read from the primal: sin' = cos, cos' = -sin, sinh' = cosh, cosh' = sinh ------
def _derivative_calls(source):
    return len(re.findall(r"derivative\d*\(", source))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_sin_and_cos_of_one_value_read_each_other_for_their_derivatives(dtype):
    def f(x):
        theta = np.sqrt(x * x + 1.0)
        return np.sum(np.cos(theta) * x + np.sin(theta) * 2.0 + np.sinh(x) * np.cosh(x))
    source = _compare(f, tape.compile(Reverse, f, Active, Duplicated),
                      lambda c: _inputs(c, dtype=dtype))
    assert re.search(r"\* -v\d+|, -v\d+\)", source), source           # cos' = -sin
    assert source.count("sin_impl(") == 1 and source.count("cos_impl(") == 1, source
    assert source.count("sinh_impl(") == 1 and source.count("cosh_impl(") == 1, source


def test_only_a_partner_of_the_same_value_is_read():
    def f(x, y):
        return np.sum(np.sin(x) * np.cos(y))       # different operands: no partner
    source = _compare(f, tape.compile(Reverse, f, Active, Duplicated, Duplicated), _inputs,
                      lambda c: _inputs(c + 5))
    assert _derivative_calls(source) == 2, source


def test_a_partner_written_into_afterwards_still_gives_cos():
    def f(x):
        c = np.cos(x)
        s = np.sin(x)
        c[0] = 5.0                                 # c no longer holds cos(x) ...
        c[1:3] = c[0] * 2.0                        # ... twice (the second write in place)
        return np.sum(s * s) + np.sum(c * c)
    _compare(f, tape.compile(Reverse, f, Active, Duplicated), _inputs)


def test_a_partner_the_gradient_does_not_need_is_still_read_when_computed():
    # cos(x) only feeds a comparison (no cotangent reaches it), yet it is computed: sin's
    # reverse reads it.
    def f(x):
        count = np.sum(np.where(np.cos(x) > 0.8, 1.0, 0.0))
        return np.sum(np.sin(x) * x) + count
    source = _compare(f, tape.compile(Reverse, f, Active, Duplicated), _inputs)
    assert _derivative_calls(source) == 0, source
