"""Red-team checks of buffer reuse in compiled programs (tape/program_inplace.py) against the
rest of the engine: MixedDuplicated containers, user code (custom rules, `tape.inactive`)
reading values that inline steps write over, guards whose branch flips, errstate contexts,
NumPy scalars and 0-d arrays, integer and complex inputs, leaves and closure constants of
other layouts before layout-dependent reductions, non-inline steps amid inline chains,
ReverseWithPrimal array results, batch mode, float32 programs and repeated expressions. A
compiled float64 program must give eager `autodiff`'s bits everywhere: results, shadows,
gradients and the caller's arrays."""
from __future__ import annotations

import re

import numpy as np
import pytest

import tape
from tape import (Active, BatchDuplicated, Const, Duplicated, MixedDuplicated, Reverse,
                  ReverseWithPrimal)

SHAPE = (64, 80)   # 5120 entries: above the reuse threshold


def _inputs(call, shape=SHAPE, dtype=np.float64):
    return np.random.default_rng(call).uniform(0.2, 0.9, size=shape).astype(dtype)


def _same(a, b, path="result"):
    """a and b hold the same bits, structure, types and dtypes."""
    if isinstance(a, (tuple, list, dict)):
        assert type(a) is type(b) and len(a) == len(b), (path, a, b)
        keys = a.keys() if isinstance(a, dict) else range(len(a))
        for k in keys:
            _same(a[k], b[k], f"{path}[{k!r}]")
        return
    assert type(a) is type(b), (path, type(a), type(b))
    if a is not None:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=path, strict=True)


def _compare(f, mode, ret, make, calls=(0, 1, 2)):
    """The compiled f and eager autodiff agree bit for bit on what they return and on every
    argument's primal and shadow, call after call; `make(call)` builds fresh annotations."""
    g = tape.compile(mode, f, ret, *[type(a) for a in make(calls[0])])
    for call in calls:
        mine, theirs = make(call), make(call)
        _same(g(*mine), tape.autodiff(mode, f, ret, *theirs))
        for a, b in zip(mine, theirs):
            _same(a.val, b.val, "primal")
            _same(getattr(a, "dval", None), getattr(b, "dval", None), "shadow")
    assert g.stats.eager_calls == 0, g.stats
    return str(g)


def _dup(call, shape=SHAPE, dtype=np.float64):
    x = _inputs(call, shape, dtype)
    return Duplicated(x, np.zeros_like(x))


def _outs(source):
    return len(re.findall(r", out=v\d+\)", source))


def _in_place_products(source):
    return len(re.findall(r"^\s+(ct\d+) = _times_into\(\1, ", source, re.M))


def test_mixed_duplicated_containers_with_float_leaves():
    def f(p):
        a, s, b = p
        y = np.sin(a) * s + b
        z = np.exp(np.tanh(y) * 0.5) * s
        return np.sum(np.sum(z * b, axis=1) ** 2)

    def make(call):
        a, b = _inputs(call), np.asfortranarray(_inputs(call + 3))
        return [MixedDuplicated([a, 1.5 + call, b], [np.zeros_like(a), 0.0, np.zeros_like(b)])]
    source = _compare(f, ReverseWithPrimal, Active, make)
    assert _outs(source) >= 1 and _in_place_products(source) >= 1, source


_cube = tape.custom_rule(lambda y: y * y * y, augmented_primal=lambda cfg, y: (y * y * y, y),
                         reverse=lambda cfg, y, g: (3.0 * y * y * g,))


@tape.inactive
def _scale_of(y):
    return float(np.max(np.abs(y))) + 1.0


def test_values_user_code_reads_are_not_written_over():
    # The rule keeps y as its residual and the inactive function reads it; the inline chain
    # after them reads y last.
    def f(x):
        y = np.sin(x) * 2.0 + 0.5
        c = _cube(y)
        k = _scale_of(y)
        z = np.exp(y * 0.5) / k + 1.0
        return np.sum(z * c) + np.sum(np.tanh(c) * 3.0)
    source = _compare(f, Reverse, Active, lambda c: [_dup(c)])
    assert _outs(source) >= 1 and _in_place_products(source) >= 1, source


def test_a_guard_flipping_between_calls_keeps_each_branch_s_bits():
    def f(x):
        y = np.sin(x) * 2.0 - 1.0
        if np.all(y > -0.5):
            z = np.exp(y) * 3.0 + 1.0
        else:
            z = np.tanh(y) * 3.0 + 1.0
        return np.sum(z * z)

    def make(call):
        x = _inputs(call) - (0.5 if call % 2 else 0.0)   # odd calls take the other branch
        return [Duplicated(x, np.zeros_like(x))]
    g = tape.compile(Reverse, f, Active, Duplicated)
    for call in (0, 1, 2, 3, 0):
        mine, theirs = make(call), make(call)
        _same(g(*mine), tape.autodiff(Reverse, f, Active, *theirs))
        _same(mine[0].dval, theirs[0].dval)
    assert g.stats.eager_calls == 0, g.stats
    assert _outs(str(g)) >= 1, g


def test_an_errstate_set_inside_f_around_reused_buffers():
    def f(x):
        y = np.sin(x) * 2.0 - 1.0             # negative in places: log and sqrt give nan
        with np.errstate(invalid="ignore", divide="ignore"):
            z = np.log(y) * 2.0 + 1.0
            w = np.sqrt(z) * 3.0
        return np.sum(np.nan_to_num(w) * x) + np.sum(np.exp(y) * 2.0)
    with np.errstate(all="raise"):             # the caller's state stays in force outside
        source = _compare(f, Reverse, Active, lambda c: [_dup(c, dtype=np.float64)])
    assert _outs(source) >= 1 and _in_place_products(source) >= 1, source


def test_numpy_scalars_and_0d_arrays_beside_big_arrays():
    def f(x, s):
        y = np.sin(x) * np.float64(2.5) + np.array(0.5)
        z = np.exp(y * 0.1) * s
        w = np.tanh(z) + s
        return np.sum(w * w)
    source = _compare(f, Reverse, Active,
                      lambda c: [_dup(c), Duplicated(np.array(1.5 + c), np.array(0.0))])
    assert _outs(source) >= 1 and _in_place_products(source) >= 1, source


def test_integer_and_complex_operands_beside_a_reused_chain():
    k = np.arange(SHAPE[0] * SHAPE[1]).reshape(SHAPE) % 7

    def f(x, k):
        y = np.sin(x) * 2.0 + k                    # int promoted to float
        z = np.exp(y * 0.1) * 1.5
        c = np.exp(z * 0.5j) * 3.0                 # complex: never inline
        return np.sum(np.cumsum(z * z, axis=0)) + np.sum(np.abs(c * c + 1.0))
    source = _compare(f, Reverse, Active, lambda c: [_dup(c), Const(k)])
    assert _outs(source) >= 1, source


_K_F = np.asfortranarray(_inputs(99))
_K_T = _inputs(98, SHAPE[::-1]).T
_K_S = _inputs(97, (2 * SHAPE[0], SHAPE[1]))[::2]
_W = _inputs(96, (SHAPE[1], 30))
_REDUCE = {"sum1": lambda z: np.sum(np.sum(z, axis=1) ** 2),
           "matmul": lambda z: np.sum((z @ _W) ** 2),
           "cumsum": lambda z: np.sum(np.cumsum(z, axis=1) * 0.5)}


def _leaf(call, layout):
    if layout == "F":
        x = np.asfortranarray(_inputs(call))
    elif layout == "T":
        x = _inputs(call, SHAPE[::-1]).T
    elif layout == "S":
        x = _inputs(call, (2 * SHAPE[0], SHAPE[1]))[::2]
    else:
        x = _inputs(call)
    return Duplicated(x, np.zeros_like(x))


@pytest.mark.parametrize("reduce", sorted(_REDUCE))
@pytest.mark.parametrize("konst,layouts", [(_K_F, "CF"), (_K_T, "SC"), (_K_S, "TF")],
                         ids=["F-const", "T-const", "S-const"])
def test_leaves_and_constants_of_other_layouts_before_a_layout_dependent_reduction(
        reduce, konst, layouts):
    def f(x, w):
        a = np.sin(x) * 0.3 + 0.5                  # x's layout
        b = np.cos(w) * 0.7                        # w's layout
        c = a * konst + b
        d = np.exp(c) - konst
        e = d / (b + 1.0)
        return _REDUCE[reduce](e * e)
    source = _compare(f, ReverseWithPrimal, Active,
                      lambda c: [_leaf(c, layouts[0]), _leaf(c + 5, layouts[1])])
    assert _outs(source) >= 1, source


def test_non_inline_where_and_maximum_amid_inline_chains():
    def f(x):
        y = np.sin(x) * 2.0 - 1.0
        m = np.maximum(y, 0.1)
        w = np.where(y > 0, y, y * 0.5)
        z = np.exp(m) * w + np.tanh(y)
        u = np.where(z > 0.5, z, 0.0)
        v = np.maximum(u * 2.0, z)
        return np.sum(np.sum(v * v, axis=1) ** 2)
    source = _compare(f, Reverse, Active, lambda c: [_dup(c)])
    assert _outs(source) >= 1 and _in_place_products(source) >= 1, source


def test_a_value_read_twice_by_one_step_then_reduced():
    def f(x):
        y = np.sin(x) * 2.0
        z = y * y
        u = np.exp(z) + z
        return np.sum(np.sum(u * u, axis=0) ** 2)
    source = _compare(f, Reverse, Active, lambda c: [_dup(c)])
    assert _outs(source) >= 1 and _in_place_products(source) >= 1, source


def test_a_large_array_result_and_a_written_buffer_stay_as_returned():
    def f(x, out):
        y = np.sin(x) * 2.0
        out[...] = np.exp(y) + 1.0
        return np.tanh(y) * 3.0 + y

    def make(call):
        x = _inputs(call)
        return [Duplicated(x, np.zeros_like(x)), Duplicated(np.zeros_like(x), _inputs(call + 40))]
    source = _compare(f, ReverseWithPrimal, Const, make)
    assert _outs(source) >= 1, source
    g = tape.compile(ReverseWithPrimal, f, Const, Duplicated, Duplicated)
    kept = []
    for call in range(3):
        x, out = _inputs(call), np.zeros(SHAPE)
        kept.append((x, g(Duplicated(x, np.zeros_like(x)), Duplicated(out, _inputs(call)))[1], out))
    for x, result, out in kept:   # later calls wrote over none of them
        y = np.sin(x) * 2.0
        _same(result, np.tanh(y) * 3.0 + y)
        _same(out, np.exp(y) + 1.0)


@pytest.mark.parametrize("width", [2, 3])
def test_batch_programs_with_reused_buffers(width):
    def f(x, out):
        y = np.sin(x) * 2.0
        out[...] = np.exp(y) * np.cos(x) + y

    def make(call):
        x, rng = _inputs(call), np.random.default_rng(call + 50)
        return [BatchDuplicated(x, tuple(np.zeros_like(x) for _ in range(width))),
                BatchDuplicated(np.zeros_like(x),
                                tuple(rng.standard_normal(SHAPE) for _ in range(width)))]
    source = _compare(f, Reverse, Const, make)
    assert _outs(source) >= 1, source


def test_float32_programs_with_float64_constants():
    k = _inputs(77)

    def f(x):
        y = np.sin(x) * np.float64(2.0)            # float64 result of a float32 operand
        z = np.exp(x * 0.5) * k
        w = np.tanh(np.cos(x) * 1.5) + np.float32(0.5)
        u = np.exp(w) / (w + 1.0)
        return np.sum(y * z) + np.sum(u * u)
    source = _compare(f, Reverse, Active, lambda c: [_dup(c, dtype=np.float32)])
    assert _outs(source) >= 1, source


def test_repeated_expressions_beside_partners_and_reused_buffers():
    def f(x):
        t = np.tanh(x) * 2.0
        a = np.sin(t)
        b = np.sin(t)                              # a repeat of a
        c = a * 2.0 + 1.0
        d = np.exp(b * c)
        e = np.sin(t) * d
        return np.sum(e * e) + np.sum(np.cos(t) * c)
    source = _compare(f, Reverse, Active, lambda c: [_dup(c)])
    assert source.count("sin_impl(") == 1, source
    assert _outs(source) >= 1 and _in_place_products(source) >= 1, source


def test_user_writes_into_values_of_a_reused_chain():
    def f(x):
        y = np.sin(x) * 2.0
        old = y                                    # the same array: sees the writes below
        z = np.exp(y) + 1.0
        y += 1.0
        y *= x
        t = np.cos(z) + 1.0
        np.exp(t, out=t)
        a, b = np.sin(y), np.cos(y)
        y[...] = a * b
        return np.sum(np.tanh(t) * old) + np.sum(np.exp(y) * a) + np.sum(b * b)
    source = _compare(f, ReverseWithPrimal, Active, lambda c: [_dup(c)])
    assert _outs(source) >= 1 and _in_place_products(source) >= 1, source


# -- names of user functions in the generated program ----------------------------------------
@pytest.mark.parametrize("name", ["v1", "g", "leaves", "seeds", "calls", "ct2", "lambda", "1st"])
def test_an_inactive_function_named_like_a_program_variable_still_replays(name):
    # ``v4 = calls.call(v1, ...)`` reads the value v1, not the function: the replay raises
    # (TypeError, or UnboundLocalError for ``g``) and the call falls back to eager mode.
    def peek(a):
        return np.max(a) + 1.0
    peek.__name__ = name
    peek = tape.inactive(peek)

    def f(x):
        y = np.sin(x) * 2.0
        z = np.exp(y) / peek(y)
        return np.sum(z * x)
    _compare(f, Reverse, Active, lambda c: [_dup(c)])


@pytest.mark.parametrize("name", ["t1", "tangents", "v0", "leaves"])
def test_a_forward_program_reads_a_function_named_like_its_variables(name):
    def peek(a):
        return np.max(a) + 1.0
    peek.__name__ = name
    peek = tape.inactive(peek)

    def f(x):
        return np.exp(np.sin(x) * 2.0) / peek(x)
    g = tape.compile(tape.Forward, f, Duplicated, Duplicated)
    for call in range(3):
        x, dx = _inputs(call), _inputs(call + 10)
        got = g(Duplicated(x, dx))
        want = tape.autodiff(tape.Forward, f, Duplicated, Duplicated(x, dx))
        np.testing.assert_array_equal(got[0], want[0])
    assert g.stats.eager_calls == 0, g.stats
