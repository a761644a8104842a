"""`tape.compile` against eager `autodiff`, fourth round: common subexpressions (repeats beside
views, index arrays that change between calls, multiple-result primitives, reductions, signed
zeros and NaN constants), cotangents summed in place in float32 and mixed programs, and user
code (custom rules, `tape.inactive` functions) that keeps state: it must run as often as in
eager mode on the first, the confirming and later calls.

The counting user code is tests/tape/compile_user_code.py's.
"""
import numpy as np
import pytest

import tape
from tape import Active, Const, Duplicated, ReverseWithPrimal

import compile_sequences
from compile_sequences import sequences
from compile_user_code import runs_per_call

RP = ReverseWithPrimal
CALLS = [0, 1, 2, 3, 0, 4]


def _rng(k):
    return np.random.default_rng(k)


@pytest.fixture
def exact(monkeypatch):
    """Compare values bit for bit (type, dtype and shape too): the compiled program keeps the
    eager sweep's arithmetic."""
    loose = compile_sequences.same

    def same(a, b, path="result"):
        if isinstance(a, (np.ndarray, np.generic, float, complex)):
            assert type(a) is type(b), (path, type(a), type(b))
            assert np.shape(a) == np.shape(b), path
            assert getattr(a, "dtype", None) == getattr(b, "dtype", None), path
            np.testing.assert_array_equal(a, b, err_msg=path)
        else:
            loose(a, b, path)
    monkeypatch.setattr(compile_sequences, "same", same)


def _dup(shape, dtype=np.float64, seed=0):
    x = _rng(seed).normal(size=shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * _rng(seed + 100).normal(size=shape)
    x = x.astype(dtype)
    return Duplicated(x, np.zeros_like(x))


# -- common subexpressions ------------------------------------------------------------------

def test_a_repeat_is_not_shared_when_a_view_of_it_is_returned():
    """`b` repeats `a`; `a` and a view of `b` are returned: they shared memory (a write into
    one changed the other), where eager mode returns two arrays."""
    def f(x):
        a = np.exp(x)
        b = np.exp(x)
        return a, b.reshape(-1), b.T
    g = tape.compile(RP, f, Const, Duplicated)
    for c in range(3):
        x = _rng(c).normal(size=(2, 3))
        _, (a, flat, t) = g(Duplicated(x, np.zeros_like(x)))
        assert not np.shares_memory(a, flat) and not np.shares_memory(a, t)
        a[...] = 0.0
        np.testing.assert_array_equal(flat, np.exp(x).reshape(-1))
        np.testing.assert_array_equal(t, np.exp(x).T)
    assert g.stats.eager_calls == 0


def test_a_repeat_behind_an_inactive_view_is_not_shared_either():
    view = tape.inactive(lambda v: v[::2])

    def f(x, c):
        a = np.cos(c)
        b = np.cos(c)
        return np.sum(x * a), view(b), a
    g = tape.compile(RP, f, Const, Duplicated, Const)
    for k in range(3):
        x, c = _rng(k).normal(size=4), _rng(k + 1).normal(size=4)
        _, (_, strided, a) = g(Duplicated(x, np.zeros(4)), Const(c))
        assert not np.shares_memory(strided, a)


def _pair(c):
    return [_dup(6, seed=c), Const(_rng(c + 7).integers(0, 6, 4))]


@pytest.mark.parametrize("name, f, make", [
    ("a gather with a Const index that changes",
     lambda x, idx: np.sum(x[idx] ** 2) + np.sum(np.sin(x[idx])), _pair),
    ("gathers with a traced index",
     lambda x: np.sum(x[np.argsort(x)[:3]] ** 2) + np.sum(np.cumsum(x[np.argsort(x)]) * x),
     lambda c: [_dup(6, seed=c)]),
    ("multiple-result primitives",
     lambda a: (np.sum(np.linalg.eigh(a + a.T)[0] * np.linalg.eigh(a + a.T)[0])
                + np.sum(np.linalg.svd(a)[1] * np.linalg.svd(a)[1])
                + np.sum(np.linalg.qr(a)[1] * np.linalg.qr(a)[1])
                + np.sum(np.split(a, 2)[0] * np.split(a, 2)[1])),
     lambda c: [_dup((4, 4), seed=c)]),
    ("reductions that differ in axis, keepdims or dtype",
     lambda x: (np.sum(np.sum(x, axis=0) * np.sum(x, axis=(0,)))
                + np.sum(np.sum(x, axis=0, keepdims=True) ** 3)
                + np.sum(np.sum(x, axis=0, dtype=np.float32))
                + np.sum(np.mean(x, axis=1) * np.mean(x, axis=-1))
                + np.sum(np.max(x, axis=0) * np.max(x, axis=0))),
     lambda c: [_dup((3, 4), seed=c)]),
    ("constants: signed zeros, NaN, NumPy and Python scalars",
     lambda x: (np.sum(np.maximum(x, -0.0) * 1.5 + np.maximum(x, 0.0))
                + np.sum(np.copysign(x, -0.0) * x + np.copysign(x, 0.0))
                + np.sum(np.fmax(x, np.nan) * np.fmax(x, np.nan))
                + np.sum(x * np.float32(0.1) + (x * 0.1) * (x * np.float64(0.1)))),
     lambda c: [_dup(5, seed=c)]),
])
def test_repeats_equal_eager_bit_for_bit(exact, name, f, make):
    def setup():
        return f, make
    g = sequences(setup, CALLS)
    assert g.stats.eager_calls == 0, (name, g.stats)


# -- cotangents summed in place -------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_0d_cotangent_summed_twice_is_a_numpy_scalar_as_in_eager_mode(exact, dtype):
    """Two np.where terms (0-d arrays) summed in place stayed a 0-d array; eager's ``a + b``
    of two 0-d arrays is a NumPy scalar, the derivative returned for the Active argument."""
    def setup():
        def f(x):
            return np.where(x > 0, x, 0.0) + np.where(x > -5, x, 1.0)
        return f, lambda c: [Active(np.array(0.3 + c, dtype=dtype))]
    g = sequences(setup, CALLS)
    assert g.stats.eager_calls == 0


@pytest.mark.parametrize("name, f, make", [
    ("terms that broadcast",
     lambda x, b: (np.sum(np.tanh(x + b) * (x * b)) + np.sum(b * 2.0 + b * b)
                   + np.sum(b[None, :] * x)),
     lambda c: [_dup((4, 3), np.float32, c), _dup(3, np.float32, c + 9)]),
    ("float32 and float64 terms",
     lambda x, y: (np.sum(x * y) + np.sum(x * x * 3.0) + np.sum(x.astype(np.float64) * y)
                   + np.sum(x * np.float64(2.0)) + np.sum(x * 2.0)),
     lambda c: [_dup(5, np.float32, c), _dup(5, np.float64, c + 9)]),
    ("float32 and complex64 terms",
     lambda x, z: (np.sum(np.real((x * z) * np.conj(x * z))) + np.sum(np.abs(z) ** 2 * x)
                   + np.sum(x * x)),
     lambda c: [_dup(5, np.float32, c), _dup(5, np.complex64, c + 9)]),
    ("read-only and strided terms",
     lambda x: (np.sum(x.T * x.T) + np.sum(np.broadcast_to(x[:, :1], x.shape) * x)
                + np.sum(x[::2] * x[::2]) + np.sum(np.diagonal(x) * 3.0) + np.sum(x)),
     lambda c: [_dup((4, 4), np.float32, c)]),
    ("float16 beside float32",
     lambda x, y: np.sum(x * y) + np.sum(x * x) + np.sum(y * 2),
     lambda c: [_dup(5, np.float16, c), _dup(5, np.float32, c + 9)]),
    ("repeated float32 products beside a float64 one",
     lambda x, w, w64: (np.sum(np.tanh(x @ w)) + np.sum((x @ w64) ** 2) + np.sum(x @ w)),
     lambda c: [_dup((3, 4), np.float32, c), _dup((4, 2), np.float32, c + 9),
                _dup((4, 2), np.float64, c + 5)]),
])
def test_mixed_precision_sums_equal_eager_bit_for_bit(exact, name, f, make):
    g = sequences(lambda: (f, make), CALLS)
    assert g.stats.eager_calls == 0, (name, g.stats)


# -- user code that keeps state --------------------------------------------------------------

@pytest.mark.parametrize("twice", [False, True])
def test_user_code_runs_once_per_call_on_the_confirming_call_too(twice):
    """The call that confirms a program asked it whether it accepts the call by replaying
    it whole (the rule's primal, its reverse and the inactive function ran), then traced:
    twice per call where eager mode runs them once."""
    def make_f(counted):
        def f(x):
            y = counted.rule(x) * counted.scale(x)
            if twice:
                y = y + counted.rule(x) * counted.scale(x)
            return np.sum(y ** 2)
        return f
    compiled, eager, stats = runs_per_call(make_f, [Duplicated],
                                            lambda c: [_dup(3, seed=c)], range(5))
    assert compiled == eager, (compiled, eager)
    assert stats.hits == 4 and stats.eager_calls == 0, stats


def test_a_rule_on_const_arguments_runs_once_per_call():
    def make_f(counted):
        def f(x, c):
            return np.sum(counted.rule(x) * counted.rule(c)) * counted.scale(c)
        return f
    compiled, eager, stats = runs_per_call(
        make_f, [Duplicated, Const],
        lambda c: [_dup(3, seed=c), Const(_rng(c + 3).normal(size=3))], range(5))
    assert compiled == eager, (compiled, eager)


def test_a_guard_on_a_rule_result_traces_again_without_running_it_again():
    def make_f(counted):
        def f(x):
            y = counted.rule(x)
            n = int(np.argmax(tape.primal(y)))
            return np.sum(y[n] * y)
        return f
    compiled, eager, _ = runs_per_call(make_f, [Duplicated], lambda c: [_dup(3, seed=c)],
                                        range(6))
    assert compiled == eager, (compiled, eager)


def test_user_code_before_a_failing_guard_runs_once():
    def make_f(counted):
        def f(x):
            y = counted.rule(x) * counted.scale(x)
            if np.sum(x) > 0:
                return np.sum(y * y)
            return np.sum(y)
        return f
    compiled, eager, _ = runs_per_call(make_f, [Duplicated], lambda c: [_dup(3, seed=c)],
                                        range(8))
    assert compiled == eager, (compiled, eager)


def test_programs_that_fail_their_guards_equal_eager():
    """The confirming call now asks a program after tracing: a branch the first trace did not
    take is a new program (not a random draw), and the results stay eager's."""
    def setup():
        def f(x):
            if np.sum(x) > 0:
                return np.sum(np.sin(x) * np.sin(x))
            return np.sum(np.cos(x))
        return f, lambda c: [_dup(3, seed=c)]
    g = sequences(setup, [0, 1, 2, 3, 4, 5, 6, 7, 0, 1])
    assert g.stats.eager_calls == 0 and g.stats.programs == 2, g.stats
