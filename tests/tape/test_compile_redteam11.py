"""Compile red team, round 11: shadows that alias each other across written buffers, the
decorator over a `staticmethod`, and `x ** c` (np.square / np.sqrt / np.reciprocal on float
arrays) at signed zeros and infinities in every compiled mode. Each compiled call is compared
with eager autodiff on its own fresh arguments (values, arguments and shadows after the call)."""
import numpy as np
import pytest

import tape
from tape import (Active, BatchDuplicated, Const, Duplicated, Forward, ForwardWithPrimal,
                  Reverse, ReverseWithPrimal, autodiff)

from compile_sequences import outcome, same


def _compare(g, mode, f, ret, make, calls=3):
    """`make()` builds fresh arguments (shadows that alias each other stay aliased: deepcopy
    would not keep two views of one buffer overlapping)."""
    for k in range(calls):
        mine, theirs = make(), make()
        got, error = outcome(lambda: g(*mine))
        want, want_error = outcome(lambda: autodiff(mode, f, ret, *theirs))
        if error is not None or want_error is not None:
            assert type(error) is type(want_error) and str(error) == str(want_error), (
                k, error, want_error)
        else:
            same(got, want, f"call {k}")
        for a, b in zip(mine, theirs):
            same(a.val, b.val, f"call {k}: argument")
            if hasattr(b, "dval"):
                same(a.dval, b.dval, f"call {k}: shadow")


# -- findings, fixed ----------------------------------------------------------------------------
#
# Two buffers that `f` overwrites, passed with one shadow (or overlapping views of one buffer):
# each shadow is the seed of its buffer's final value, zeroed by the sweep. Eager mode read
# and zeroed them argument by argument (with `a *= 2; b *= 3` and one shadow of ones it left
# 2, or 3 with the arguments swapped), the compiled call read every seed first (5); Enzyme's
# memory semantics would chain the adjoints (6). Both now refuse it with the same error.

def _scale_both(a, b):
    a *= 2.0
    b *= 3.0


def _one_shadow():
    s = np.ones(2)
    return [Duplicated(np.ones(2), s), Duplicated(np.ones(2), s)]


def _overlapping_shadows():
    s = np.ones(3)
    return [Duplicated(np.ones(2), s[:2]), Duplicated(np.ones(2), s[1:])]


def _one_pair_of_shadows():
    s, t = np.ones(2), np.full(2, 0.5)
    return [BatchDuplicated(np.ones(2), (s, t)), BatchDuplicated(np.ones(2), (s, t))]


@pytest.mark.parametrize("make", [_one_shadow, _overlapping_shadows, _one_pair_of_shadows],
                         ids=["one shadow", "overlapping views", "batched"])
def test_written_buffers_sharing_a_shadow_agree_with_eager(make):
    types_ = [type(a) for a in make()]
    g = tape.compile(Reverse, _scale_both, Const, *types_)
    _compare(g, Reverse, _scale_both, Const, make)
    with pytest.raises(tape.ActivityError, match=r"share memory, and the function overwrote"):
        autodiff(Reverse, _scale_both, Const, *make())


# `@tape.compile(...)` above `@staticmethod`: the compiled function's `__get__` bound the
# instance to whatever it wrapped, so `Model().step(x)` passed the instance as the first
# argument (TypeError). Above `@classmethod` compile refused the classmethod object.

class _Model:
    scale = 2.0

    @tape.compile(ReverseWithPrimal, Active, Duplicated)
    @staticmethod
    def step(x):
        return np.sum(np.cos(x) ** 2)

    @tape.compile(ReverseWithPrimal, Active, Duplicated)
    @classmethod
    def scaled(cls, x):
        return np.sum(np.sin(x) * cls.scale)


def test_a_compiled_staticmethod_called_on_the_class():
    x = np.array([0.1, 0.7, -0.4])
    _compare(_Model.step, ReverseWithPrimal, lambda x: np.sum(np.cos(x) ** 2), Active,
             lambda: [Duplicated(x.copy(), np.zeros(3))])


def test_a_compiled_staticmethod_called_on_an_instance():
    x = np.array([0.1, 0.7, -0.4])
    _compare(_Model().step, ReverseWithPrimal, lambda x: np.sum(np.cos(x) ** 2), Active,
             lambda: [Duplicated(x.copy(), np.zeros(3))])


def test_a_compiled_classmethod_reads_its_class():
    class Sub(_Model):
        scale = 5.0
    x = np.array([0.1, 0.7, -0.4])
    for owner in (_Model, _Model(), Sub, Sub()):
        scale = type(owner).scale if not isinstance(owner, type) else owner.scale
        _compare(owner.scaled, ReverseWithPrimal, lambda x: np.sum(np.sin(x) * scale), Active,
                 lambda: [Duplicated(x.copy(), np.zeros(3))])


# -- checks that hold ----------------------------------------------------------------------------

_SPECIAL = [np.array([-0.0, 4.0, -np.inf, 1e300, 0.0]),
            np.array([-1.0, np.inf, 1e-320, -2.0, 3.0]),
            np.array([1.0, 2.0, 3.0, 4.0, 5.0])]

_MODES = {
    "reverse": (ReverseWithPrimal, Active,
                lambda x: Duplicated(x.copy(), np.zeros(5))),
    "forward": (ForwardWithPrimal, Duplicated,
                lambda x: Duplicated(x.copy(), np.ones(5))),
    "batched reverse": (Reverse, Active,
                        lambda x: BatchDuplicated(x.copy(), (np.zeros(5), np.zeros(5)))),
    "batched forward": (Forward, BatchDuplicated,
                        lambda x: BatchDuplicated(x.copy(), (np.ones(5), -np.ones(5)))),
}


def _identical(a, b, path):
    """Bit for bit, the sign of zeros and infinities too (sqrt's rule at -0.0 gives -inf
    where power's gives +inf)."""
    if isinstance(a, tuple):
        assert type(b) is tuple and len(a) == len(b), path
        for k, (x, y) in enumerate(zip(a, b)):
            _identical(x, y, f"{path}[{k}]")
    elif a is None:
        assert b is None, path
    else:
        assert type(a) is type(b), path
        assert np.array_equal(a, b, equal_nan=True), (path, a, b)
        assert np.array_equal(np.signbit(a), np.signbit(b)), (path, a, b)


def _power(x, n):
    return np.sum(x ** n)


def _power_in_place(x, n):
    y = x * 1.0
    y **= n
    return np.sum(y)


@pytest.mark.parametrize("mode", list(_MODES))
@pytest.mark.parametrize("f", [_power, _power_in_place], ids=["x ** n", "y **= n"])
def test_power_shortcuts_at_signed_zeros_and_infinities_equal_eager(f, mode):
    """`x ** 2`, `x ** 0.5`, `x ** -1` take np.square / np.sqrt / np.reciprocal, and
    `x ** np.float64(0.5)` or a 0-d exponent np.power: each Const kind its own program, its
    derivative rule at -0.0 and -inf the eager one, through replays."""
    m, ret, make = _MODES[mode]
    g = tape.compile(m, f, ret, type(make(_SPECIAL[0])), Const)
    exponents = [2, 0.5, -1, np.float64(0.5), -1.0, np.array(2.0), 0.5, 2]
    with np.errstate(all="ignore"):
        for n in exponents:
            for x in _SPECIAL:
                mine, theirs = make(x), make(x)
                got = g(mine, Const(n))
                want = autodiff(m, f, ret, theirs, Const(n))
                _identical(got, want, f"{n!r} {x}")
                _identical(mine.dval, theirs.dval, f"{n!r} {x}: shadow")
    assert g.stats.eager_calls == 0


def test_a_closure_exponent_that_changes_kind_but_not_value():
    """0.5 -> np.float64(0.5) after the program is confirmed: equal values, but NumPy's `**`
    takes np.sqrt for one and np.power for the other, whose derivatives at -0.0 differ in
    sign (-inf against inf): the watch must tell them apart."""
    p = [0.5]

    def f(x):
        return np.sum(x ** p[0])

    g = tape.compile(ReverseWithPrimal, f, Active, Duplicated)
    x = np.array([-0.0, 4.0, 2.0])
    with np.errstate(all="ignore"):
        for k in range(5):
            if k == 3:
                p[0] = np.float64(0.5)
            mine, theirs = Duplicated(x.copy(), np.zeros(3)), Duplicated(x.copy(), np.zeros(3))
            _identical(g(mine), autodiff(ReverseWithPrimal, f, Active, theirs), f"call {k}")
            _identical(mine.dval, theirs.dval, f"call {k}: shadow")
    assert theirs.dval[0] == np.inf


def _write_through_a_view(out, x, y):
    o = out[::2]
    o *= x[:2]
    out[1] = np.sum(out) * y[0]


@pytest.mark.parametrize("mode", [Reverse, ReverseWithPrimal, Forward, ForwardWithPrimal])
def test_a_written_buffer_sharing_its_shadow_with_an_argument_it_reads(mode):
    """One shadow for a buffer `f` overwrites and for an argument it only reads: the seed is
    read and zeroed before the read argument's gradient is added (reverse), the tangent of
    the new values is written over the read argument's tangent (forward), as eagerly."""
    def make(k):
        r = np.random.default_rng(k)
        s = np.abs(r.normal(size=4)) + 0.3
        return [Duplicated(np.abs(r.normal(size=4)) + 0.3, s),
                Duplicated(np.abs(r.normal(size=4)) + 0.3, s), Const(r.normal(size=4))]

    g = tape.compile(mode, _write_through_a_view, Const, Duplicated, Duplicated, Const)
    for k in range(3):
        _compare(g, mode, _write_through_a_view, Const, lambda k=k: make(k), calls=1)
    assert g.stats.hits >= 1


def test_calls_that_raise_the_function_s_own_error_do_not_stop_compilation():
    """Two calls whose values make the function raise (as eager autodiff raises) left the
    signature eager for good; they now leave it compiling, and later calls replay."""
    def f(x):
        if x[0] < 0:
            raise ValueError("negative")
        return np.sum(x ** 3)
    g = tape.compile(Reverse, f, Active, Duplicated)
    for v in (-1.0, -2.0):
        with pytest.raises(ValueError, match="negative"):
            g(Duplicated(np.array([v, 1.0]), np.zeros(2)))
    for v in (1.0, 2.0, 3.0):
        _compare(g, Reverse, f, Active,
                 lambda: [Duplicated(np.array([v, 1.0]), np.zeros(2))], calls=1)
    assert g.stats.hits >= 1, g.stats
