"""Compile red team, round 15: guards on values Python tells apart although they compare
equal (`1`, `True` and `1.0`; `0.0` and `-0.0`; NaNs of either sign), and decisions made
through Python built-ins on traced values (`max` / `min` / `sorted`, `round`, `hash`,
`divmod`, `in`, `np.isclose`, iteration) and through integer parameters read from a `Const`
array (`np.roll`, `np.repeat`, `np.pad`, `np.triu`, `np.percentile`, ...).

Each case runs a sequence of calls whose inputs flip the decision at some calls and keep it at
others, through the compiled function and through eager `autodiff` from fresh state, in
ReverseWithPrimal and Forward modes, and compares every call.
"""
import math

import numpy as np
import pytest

import tape
from tape import Active, Const, Duplicated, Forward, Reverse, ReverseWithPrimal, autodiff, primal

from compile_sequences import sequences

_MODES = {"ReverseWithPrimal": (ReverseWithPrimal, Active), "Forward": (Forward, Duplicated)}
_TWO = [np.array([1.0, 2.0])] * 6


def _check(f, mode_name, xs, consts=None):
    """Calls `f(Duplicated(xs[k]), Const(consts[k]))` (no Const when `consts` is None)."""
    mode, ret = _MODES[mode_name]

    def setup():
        def make_args(k):
            x = np.array(xs[k], dtype=float)
            dx = np.linspace(0.5, 1.5, x.size).reshape(x.shape) if mode is Forward \
                else np.zeros_like(x)
            args = [Duplicated(x, dx)]
            if consts is not None:
                args.append(Const(consts[k]))
            return args
        return f, make_args
    return sequences(setup, list(range(len(xs))), mode=mode, ret=ret)


# --------------------------------------------------------------------------------------------
# Findings, fixed: a dict's keys that compare equal but differ in type or sign shared a signature


def _key_text(x, c):
    return x[0] * sum(len(str(k)) for k in c) + x[1]


def _key_sign(x, c):
    return x[0] * math.copysign(1.0, next(iter(c))) + x[1]


@pytest.mark.parametrize("mode_name", _MODES)
def test_const_dict_keys_int_bool_float(mode_name):
    _check(_key_text, mode_name, _TWO, [{1: 0}, {1: 0}, {True: 0}, {1.0: 0}, {1: 0}, {True: 0}])


@pytest.mark.parametrize("mode_name", _MODES)
def test_const_dict_keys_signed_zero(mode_name):
    _check(_key_sign, mode_name, _TWO,
           [{0.0: 0}, {0.0: 0}, {-0.0: 0}, {0.0: 0}, {-0.0: 0}, {-0.0: 0}])


def test_active_dict_keys_int_bool():
    def f(d):
        k = next(iter(d))
        return d[k] * (2.0 if k is True else 3.0)

    g = tape.compile(Reverse, f, Active, Active)
    for d in [{1: 1.5}, {1: 1.5}, {True: 1.5}, {1: 1.5}, {True: 1.5}, {1.0: 1.5}]:
        (got,), = g(Active(d))
        (want,), = autodiff(Reverse, f, Active, Active(d))
        assert list(got) == list(want) and [type(k) for k in got] == [type(k) for k in want]
        assert got[next(iter(got))] == want[next(iter(want))], (d, got, want)


# --------------------------------------------------------------------------------------------
# Passing checks: decisions these rounds had not covered


@pytest.mark.parametrize("mode_name", _MODES)
def test_nan_sign_read_through_primal(mode_name):
    """A guard on NaN accepts a NaN of the same sign only (copysign reads the sign bit)."""
    def f(x):
        return x[1] * (2.0 if math.copysign(1.0, float(primal(x[0]))) < 0 else 3.0)

    g = _check(f, mode_name, [[np.nan, 1.0], [-np.nan, 1.0], [np.nan, 1.0], [-np.nan, 2.0],
                              [np.nan, 3.0], [-np.nan, 1.0], [1.0, 1.0]])
    assert g.stats.programs >= 2


@pytest.mark.parametrize("mode_name", _MODES)
def test_max_min_sorted_of_traced_scalars(mode_name):
    """`max`, `min`, `sorted` decide through `>` / `<` on traced values, NaN included (a
    comparison with NaN is False, so `max` keeps the first operand)."""
    def f(x):
        a, b, c = x[0], x[1], x[2]
        return max([a, b, c]) * 2.0 + min([a, b, c]) + sorted([a, b, c])[1] * 3.0

    _check(f, mode_name, [[1.0, 3.0, 2.0], [3.0, 1.0, 2.0], [2.0, 3.0, 1.0], [1.0, 3.0, 2.0],
                          [np.nan, 1.0, 2.0], [1.0, np.nan, 2.0], [2.0, 2.0, 2.0]])


@pytest.mark.parametrize("mode_name", _MODES)
def test_round_hash_divmod_of_primal(mode_name):
    """Python numbers computed from a guarded value: round-half-even, `hash` used as an index
    (`hash(-0.0) == hash(0.0)`), `divmod` of a negative int."""
    weights = [2.0, 3.0, 5.0, 7.0]

    def f(x):
        v = float(primal(x[0]))
        q, r = divmod(round(v), 3)
        return x[(q + r) % 3] * weights[hash(v) % 4] + x[1]

    _check(f, mode_name, [[0.5, 1.0, 2.0], [1.5, 1.0, 2.0], [2.5, 1.0, 2.0], [-0.5, 1.0, 2.0],
                          [-1.0, 1.0, 2.0], [0.5, 2.0, 3.0], [-0.0, 1.0, 2.0], [4.0, 1.0, 2.0]])


@pytest.mark.parametrize("mode_name", _MODES)
def test_membership_iteration_isclose(mode_name):
    """`3.0 in x`, a loop `for v in x: if v > 0`, and `np.isclose` / `np.allclose` in `if`."""
    def f(x):
        t = np.sum(x) * (2.0 if 3.0 in x else 1.0)
        for v in x:
            t = t + (v * v if v > 0 else -v)
        if np.allclose(x, 3.0):
            return t * 4.0
        return t * 5.0 if np.isclose(x[0], 2.0) else t

    _check(f, mode_name, [[1.0, 3.0, 2.0], [1.0, 1.0, 2.0], [3.0, 3.0, 3.0], [2.0, -1.0, 4.0],
                          [1.0, 3.0, 2.0], [2.0 + 1e-12, 3.0, 0.0], [np.nan, 3.0, -2.0]])


_PARAMS = {
    "slice": lambda x, c: np.sum(x[c[0]:] ** 2),
    "roll": lambda x, c: np.sum(np.roll(x, c[0]) * np.arange(6.0)),
    "repeat": lambda x, c: np.sum(np.repeat(x, c[0]) ** 2),
    "diff": lambda x, c: np.sum(np.diff(x ** 2, n=c[0])),
    "triu": lambda x, c: np.sum(np.triu(x.reshape(2, 3), k=c[0]) ** 2),
    "pad": lambda x, c: np.sum(np.pad(x, c[0]) * np.arange(6.0 + 2 * int(c[0]))),
    "array_split": lambda x, c: np.sum(np.array_split(x, c[0] + 1)[0] ** 2),
    "partition": lambda x, c: np.sum(np.partition(-x, c[0])[:2] ** 2),
    "percentile": lambda x, c: np.percentile(x, c[0] * 30.0),
    "arange": lambda x, c: np.sum(x[:3] * np.arange(c[0], c[0] + 3)),
}


@pytest.mark.parametrize("mode_name", _MODES)
@pytest.mark.parametrize("name", _PARAMS)
def test_const_int_as_parameter(name, mode_name):
    """An element of a `Const` int array passed as an integer parameter (a shift, a count, an
    order, a diagonal): a new value retraces, the old one comes back to its program."""
    consts = [np.array([1, 2])] * 2 + [np.array([2, 1]), np.array([1, 2])] \
        + [np.array([3, 1])] * 2
    g = _check(_PARAMS[name], mode_name, [np.arange(1.0, 7.0)] * 6, consts)
    assert g.stats.programs >= 2
