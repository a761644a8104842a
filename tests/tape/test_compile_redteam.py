"""`tape.compile` against eager `autodiff` on user-style functions called with changing values.

Each test calls the compiled function several times and compares every call (result, shadows,
arguments written) with eager `autodiff` on fresh copies of the same arguments. Each was a
difference once (nonzero results, unguarded shapes, shared returned constants, writes through
np.asarray during tracing, layouts, watched items, class/slots/keyword-only values, stdlib
random, non-pytree Consts, exceptions caught inside f, Duplicated returns); see tape.compile's
docs for what is still not watched.
"""
import dataclasses
import math
import random

import numpy as np
import pytest

import tape
from tape import Active, Const, Duplicated, ReverseWithPrimal, autodiff

from compile_sequences import same as _same

RP = ReverseWithPrimal


def _call(f, make_args, calls, between=None, ret=Active):
    """Compiled and eager on fresh argument copies for each of `calls`; `between(k)` runs after
    call k (to change what f reads)."""
    g = tape.compile(RP, f, ret, *[type(a) for a in make_args(calls[0])])
    for k, c in enumerate(calls):
        mine, theirs = make_args(c), make_args(c)
        _same(g(*mine), autodiff(RP, f, ret, *theirs))
        for a, b in zip(mine, theirs):
            _same(a.val, b.val, "argument")
            if isinstance(a, Duplicated):
                _same(a.dval, b.dval, "shadow")
        if between is not None:
            between(k)
    return g


def _dup(x):
    return Duplicated(np.array(x, dtype=float), np.zeros(np.shape(x)))


SIGNS = [np.array([1., -1, 1, -1, 1, -1]), np.array([-1., 1, -1, -1, -1, -1]),
         np.array([1., 1, -1, -1, 1, 1])]


# -- held: guarded or recomputed decisions -----------------------------------------------------

def test_boolean_masks_argmax_and_sort_follow_the_values():
    def f(x, c):
        y = x[c > 0]
        k = np.argmax(c)
        return np.sum(y ** 2) + x[k] * 3 + np.sum(np.sort(x)[:2])
    _call(f, lambda c: [_dup(np.linspace(-1, 2, 6)), Const(SIGNS[c])], [0, 1, 2, 0])


def test_const_index_arrays_gather_and_scatter():
    idx = [np.array([0, 2, 2, 5]), np.array([5, 4, 1, 1]), np.array([3, 3, 3, 3])]

    def f(x, i):
        y = x.copy()
        y[i] = x[:4] * 2
        return np.sum(np.take(y, i) ** 2) + np.sum(x[i])
    _call(f, lambda c: [_dup(np.linspace(-1, 2, 6)), Const(idx[c])], [0, 1, 2, 1])


def test_in_place_function_with_view_writes():
    def f(y, x):
        y[1:] = x[:-1] ** 2
        v = y[:2]
        v += x[1:3]
        return np.sum(y * x)

    def args(c):
        return [Duplicated(np.linspace(0, 1, 6) + c, np.full(6, 0.5)),
                _dup(np.linspace(-1, 1, 6) * (c + 1))]
    _call(f, args, [0, 1, 2])


def test_closure_attribute_and_partial_changes_are_seen():
    @dataclasses.dataclass
    class Model:
        w: np.ndarray
        scale: float

    model = Model(np.ones(6), 1.0)

    def f(x):
        return np.sum(x * model.w) * model.scale

    def change(k):
        model.w *= 2.0
        model.scale = float(k + 2)
    _call(f, lambda c: [_dup(np.linspace(-1, 1, 6))], [0, 1, 2], between=change)


def test_singular_matrix_error_is_the_eager_one():
    def f(a):
        return np.sum(np.linalg.inv(a))
    g = tape.compile(RP, f, Active, Duplicated)
    g(_dup(np.eye(3)))
    with pytest.raises(np.linalg.LinAlgError):
        g(_dup(np.zeros((3, 3))))
    with pytest.raises(np.linalg.LinAlgError):
        autodiff(RP, f, Active, _dup(np.zeros((3, 3))))


# -- known differences --------------------------------------------------------------------------

def test_nonzero_index_used_as_an_array_on_the_first_call():
    def f(x, c):
        idx = np.nonzero(c > 0)[0]
        return np.sum(x[idx[-1]]) + np.sum(x[idx + 0])
    _call(f, lambda c: [_dup(np.arange(6.)), Const(SIGNS[c])], [0])


def test_indexing_with_the_nonzero_tuple():
    def f(x, c):
        return np.sum(x[np.nonzero(c > 0)] * 2.0)
    _call(f, lambda c: [_dup(np.arange(6.)), Const(SIGNS[c])], [0, 2])


def test_len_of_nonzero_indices_follows_the_values():
    def f(x, c):
        idx = np.flatnonzero(c > 0)
        return np.sum(x) * len(idx)
    _call(f, lambda c: [_dup(np.arange(6.)), Const(SIGNS[c])], [0, 1, 2])


def test_gather_through_nonzero_indices_of_changing_length():
    def f(x, c):
        return np.mean(x[np.nonzero(c > 0)[0]] ** 2)
    _call(f, lambda c: [_dup(np.arange(6.)), Const(SIGNS[c])], [0, 1, 2])


def test_a_returned_constant_array_is_fresh_at_each_call():
    g = tape.compile(RP, lambda x: np.ones(3), Const, Duplicated)
    g(_dup(np.zeros(2)))[1][0] = 99.0
    np.testing.assert_array_equal(g(_dup(np.zeros(2)))[1], np.ones(3))


def test_writes_through_asarray_of_a_const_happen_once():
    def f(x, c):
        y = np.asarray(c)
        y[0] += 1.0
        return np.sum(x * y)
    _call(f, lambda c: [_dup(np.arange(1., 6.)), Const(np.zeros(5))], [0])


def test_reshape_write_through_depends_on_the_layout():
    def f(a):
        v = a.reshape(-1)
        v[0] = 100.0
        return np.sum(a ** 2)

    def args(c):
        a = np.arange(6.).reshape(2, 3) if c == 0 else np.arange(6.).reshape(3, 2).T
        return [Duplicated(a.copy(order="K") if c == 0 else a, np.ones((2, 3)))]
    _call(f, args, [0, 1])


def test_a_replaced_bound_method_is_seen():
    class Lin:
        def __init__(self, w):
            self.w = w

        def loss(self, x):
            return np.sum((x * self.w) ** 2)

    models = [Lin(np.full(3, float(k))) for k in range(1, 5)]
    holder = {"m": models[0].loss}

    def f(x):
        return holder["m"](x)

    def change(k):
        del holder["m"]
        holder["m"] = models[k + 1].loss
    _call(f, lambda c: [_dup(np.ones(3))], [0, 0, 0], between=change)


class _Scaled:
    scale = 1.0

    def loss(self, x):
        return np.sum(x) * self.scale


def test_a_class_attribute_change_is_seen():
    obj = _Scaled()
    try:
        _call(obj.loss, lambda c: [_dup(np.ones(3))], [0, 0],
              between=lambda k: setattr(_Scaled, "scale", 3.0))
    finally:
        _Scaled.scale = 1.0


def test_a_slots_attribute_change_is_seen():
    class Slotted:
        __slots__ = ("w",)

        def __init__(self):
            self.w = np.ones(3)

        def loss(self, x):
            return np.sum(x * self.w)
    obj = Slotted()
    _call(obj.loss, lambda c: [_dup(np.ones(3))], [0, 0], between=lambda k: obj.w.__imul__(2.0))


def test_a_keyword_only_default_changed_in_place_is_seen():
    def f(x, *, w=np.ones(3)):
        return np.sum(x * w)
    _call(f, lambda c: [_dup(np.ones(3))], [0, 0],
          between=lambda k: f.__kwdefaults__["w"].__imul__(2.0))


def test_stdlib_random_draws_as_eager():
    def f(x):
        return np.sum(x) * random.random()
    g = tape.compile(RP, f, Active, Duplicated)
    state = random.getstate()
    try:
        random.seed(0)
        got = g(_dup(np.ones(3)))
        random.seed(0)
        _same(got, autodiff(RP, f, Active, _dup(np.ones(3))))
    finally:
        random.setstate(state)


def test_a_guard_sees_the_sign_of_zero():
    def f(x, c):
        return np.sum(x) * math.copysign(1.0, float(c[0]))
    _call(f, lambda c: [_dup(np.ones(3)), Const(np.array([c]))], [0.0, -0.0])


def test_a_const_generator_argument_runs_as_eager():
    def f(x, r):
        return np.sum(x * r.normal(size=3))
    g = tape.compile(RP, f, Active, Duplicated, Const)
    got = g(_dup(np.ones(3)), Const(np.random.default_rng(0)))
    _same(got, autodiff(RP, f, Active, _dup(np.ones(3)), Const(np.random.default_rng(0))))


def test_an_exception_caught_inside_f_is_caught_in_the_replay():
    def f(a):
        try:
            return np.sum(np.linalg.inv(a))
        except np.linalg.LinAlgError:
            return np.sum(a) * 0.0
    _call(f, lambda c: [_dup(np.eye(3) * c)], [1, 0])


def test_an_exception_caught_while_traced_does_not_fix_the_branch():
    """Traced on a singular matrix, f takes its except branch; a replay must not take it for
    a regular matrix (the trace saw the error, so the signature runs eagerly)."""
    def f(a):
        try:
            return np.sum(np.linalg.inv(a))
        except np.linalg.LinAlgError:
            return np.sum(a) * 0.0
    _call(f, lambda c: [_dup(np.eye(3) * c)], [0, 1, 2])


def test_a_function_catching_an_engine_error_runs_eagerly():
    """f catches everything, an error of a traced operation included: same as eager."""
    def f(x, c):
        try:
            y = np.sum(x[np.array([0, 5])[c]])     # index 5 is out of bounds
        except Exception:
            y = np.sum(x) * 2.0
        return y
    _call(f, lambda c: [_dup(np.arange(3.0)), Const(np.array(c))], [1, 0, 1, 0])


def test_a_duplicated_return_raises_as_eager():
    g = tape.compile(RP, lambda x: x * 2, Duplicated, Duplicated)
    with pytest.raises(tape.ActivityError):
        g(_dup(np.ones(3)))


def test_arguments_keep_their_writeable_flags():
    """The traces read the argument arrays read-only; afterwards every flag is as it was,
    also when the function raises."""
    ro = np.arange(3.0)
    ro.flags.writeable = False

    def f(x, c):
        if c[0] > 1:
            raise ValueError("c too large")
        return np.sum(x * c)
    g = tape.compile(RP, f, Active, Duplicated, Const)
    x = np.ones(3)
    g(Duplicated(x, np.zeros(3)), Const(ro))
    assert x.flags.writeable and not ro.flags.writeable
    big = np.full(3, 5.0)
    with pytest.raises(ValueError, match="c too large"):
        g(Duplicated(x, np.zeros(3)), Const(big))
    assert x.flags.writeable and big.flags.writeable


@pytest.mark.parametrize("view_first", [False, True])
def test_an_array_and_its_view_both_passed_stay_writeable(view_first):
    """Arguments that are an array and a view of it, in either order: both are writeable
    again after the trace (a view can only be made writeable once its base is)."""
    base = np.arange(6.0)
    pair = (base[1:], base) if view_first else (base, base[1:])
    f = (lambda x, a, b: np.sum(x * a[:3] * b[:3]))
    g = tape.compile(tape.Reverse, f, Active, Duplicated, Const, Const)
    dx_compiled, dx_eager = np.zeros(3), np.zeros(3)
    g(Duplicated(np.ones(3), dx_compiled), Const(pair[0]), Const(pair[1]))
    tape.autodiff(tape.Reverse, f, Active, Duplicated(np.ones(3), dx_eager), Const(pair[0]),
                  Const(pair[1]))
    np.testing.assert_allclose(dx_compiled, dx_eager, rtol=1e-12)
    np.testing.assert_allclose(dx_eager, [0.0, 2.0, 6.0], rtol=1e-12)
    assert base.flags.writeable and base[1:].flags.writeable and pair[0].flags.writeable
    assert g.stats.eager_calls == 0
