"""`tape.compile` as a decorator on methods: bound per instance, watching the instance."""
import copy
import gc
import pickle
import weakref

import numpy as np

import tape
from tape import Active, Duplicated, Reverse, ReverseWithPrimal, autodiff


class Model:
    def __init__(self, scale):
        self.scale = scale
        self.w = np.arange(3.0)

    @tape.compile(ReverseWithPrimal, Active, Duplicated)
    def loss(self, x):
        return np.sum(x ** 2 * self.w) * self.scale

    def plain_loss(self, x):
        return np.sum(x ** 2 * self.w) * self.scale


class Slotted:
    __slots__ = ("scale",)

    def __init__(self):
        self.scale = 4.0

    @tape.compile(Reverse, Active, Duplicated)
    def loss(self, x):
        return np.sum(x) * self.scale


def _call(method, x):
    dx = np.zeros_like(x)
    result = method(Duplicated(x, dx))
    return result, dx


def _eager(model, x):
    dx = np.zeros_like(x)
    result = autodiff(ReverseWithPrimal, model.plain_loss, Active, Duplicated(x, dx))
    return result, dx


def test_a_decorated_method_binds_self_and_agrees_with_eager_per_instance():
    x = np.array([1.0, -2.0, 0.5])
    a, b = Model(2.0), Model(3.0)
    for model in (a, b, a, b):
        (got, dgot), (want, dwant) = _call(model.loss, x), _eager(model, x)
        assert got[1] == want[1]
        np.testing.assert_array_equal(dgot, dwant)
    assert a.loss is a.loss and a.loss is not b.loss
    assert Model.loss.stats.traces == 0          # the class's own is never called
    assert a.loss.stats.hits >= 1                # replays, once confirmed


def test_a_change_of_the_instance_is_seen():
    x = np.ones(3)
    m = Model(2.0)
    for step in range(4):
        m.scale = 1.0 + step
        m.w[0] = step
        (got, dgot), (want, dwant) = _call(m.loss, x), _eager(m, x)
        assert got[1] == want[1]
        np.testing.assert_array_equal(dgot, dwant)


def test_the_instance_is_collected_and_copies_compile_afresh():
    m = Model(2.0)
    _call(m.loss, np.ones(3))
    twin = copy.deepcopy(m)
    twin.scale = 10.0
    assert _call(twin.loss, np.ones(3))[0][1] == 30.0
    assert _call(m.loss, np.ones(3))[0][1] == 6.0
    restored = pickle.loads(pickle.dumps(m))
    assert restored.loss is not m.loss and _call(restored.loss, np.ones(3))[0][1] == 6.0
    gone = weakref.ref(m)
    del m
    gc.collect()
    assert gone() is None


def test_an_instance_without_a_dict_is_still_right():
    s = Slotted()
    for scale in (4.0, 5.0):
        s.scale = scale
        _, dx = _call(s.loss, np.ones(2))
        np.testing.assert_array_equal(dx, [scale, scale])


def test_a_compiled_function_read_by_another_is_watched_through_its_function():
    # Its caches and counts change at every call; what it reads (its function) does not.
    inner = tape.compile(Reverse, lambda v: np.sum(v * v * weight), Active, Duplicated)
    weight = np.array([1.0, 3.0])

    def gradient_of_inner(v):
        dv = np.zeros(2)
        inner(Duplicated(v, dv))
        return dv

    helper = tape.inactive(gradient_of_inner)

    def outer(x):
        return np.sum(x * helper(np.array([1.0, 2.0])))

    g = tape.compile(Reverse, outer, Active, Duplicated)
    for step in range(4):
        weight[0] = step   # read through `inner`: seen, so the next call traces again
        dx = np.zeros(2)
        g(Duplicated(np.ones(2), dx))
        np.testing.assert_array_equal(dx, [2.0 * step, 12.0])
    assert g.stats.eager_calls == 0


def test_a_write_into_an_inactive_function_s_result_that_is_its_argument_raises_as_eagerly():
    # inactive(lambda x: x) hands back a read-only view of x: eager mode refuses the write,
    # and so must the compiled function (it returned 113 where the plain function gives 10013).
    import pytest
    ident = tape.inactive(lambda v: v)

    def f(x):
        y = ident(x)
        y[0] = 100.0
        return np.sum(x * y)

    x = np.array([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="read-only"):
        autodiff(ReverseWithPrimal, f, Active, Active(x.copy()))
    g = tape.compile(ReverseWithPrimal, f, Active, Active)
    for _ in range(2):
        with pytest.raises(ValueError, match="read-only"):
            g(Active(x.copy()))
