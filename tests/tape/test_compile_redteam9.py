"""Compile red team, round 9: what the watch of a function's reads misses (attributes that
appear after the trace, class attributes that are callables, an object's class, module
attributes read by `getattr`, read-only views of containers), each compared with eager
autodiff call by call; and Const scalar kinds that promote float32 differently. These findings
are fixed."""
import types

import numpy as np
import pytest

from tape import Const, Duplicated

from compile_sequences import changed_before_the_fourth_call, sequences


# -- findings: changes the watch does not see (silent wrong primal and gradient) -------------
#
# tape/closure_watch.py `visit_object` (line 170) watches the attributes an object has when it
# is traced, one getter per name: an attribute set later is never looked at, though Python
# finds it first (an instance attribute over a class default, `getattr(self, n, default)`, a
# method replaced on the instance, a subclass attribute over a base class's).

class _Defaults:
    scale = 2.0

    def factor(self):
        return 2.0

    def loss(self, x):
        return np.sum(x * x) * self.scale * self.factor() * getattr(self, "extra", 1.0)


class _Base:
    scale = 2.0


class _Sub(_Base):
    def loss(self, x):
        return np.sum(x * x) * self.scale


@pytest.mark.parametrize("how", ["instance over class default", "getattr default",
                                 "method set on the instance", "subclass over base class"])
def test_an_attribute_set_after_the_trace_is_seen(how):
    obj = _Sub() if how == "subclass over base class" else _Defaults()
    change = {
        "instance over class default": lambda: setattr(obj, "scale", 5.0),
        "getattr default": lambda: setattr(obj, "extra", 5.0),
        "method set on the instance": lambda: setattr(obj, "factor", lambda: 5.0),
        "subclass over base class": lambda: setattr(_Sub, "scale", 5.0),
    }[how]
    try:
        changed_before_the_fourth_call(obj.loss, change)
    finally:
        if "scale" in vars(_Sub):
            del _Sub.scale


# visit_class (tape/closure_watch.py:191-195) walks into a class's methods but keeps no check
# of the binding itself, and skips any other callable class attribute (`act = np.tanh`, a
# staticmethod): rebinding it on the class replays the old function.

class _Layer:
    act = np.tanh

    @staticmethod
    def norm(x):
        return x

    def scale(self):
        return 2.0

    def __call__(self, x):
        return np.sum(self.norm(self.act(x))) * self.scale()


@pytest.mark.parametrize("name, new", [("act", np.sin),
                                       ("norm", staticmethod(lambda x: 3.0 * x)),
                                       ("scale", lambda self: 5.0)])
def test_a_callable_class_attribute_rebound_on_the_class_is_seen(name, new):
    old = vars(_Layer)[name]
    try:
        changed_before_the_fourth_call(_Layer(), lambda: setattr(_Layer, name, new))
    finally:
        setattr(_Layer, name, old)


class _Two:
    def factor(self):
        return 2.0


class _Five(_Two):
    def factor(self):
        return 5.0


def test_an_object_whose_class_is_reassigned():
    obj = _Two()

    def f(x):
        return np.sum(x * x) * obj.factor()
    changed_before_the_fourth_call(f, lambda: setattr(obj, "__class__", _Five))


def test_a_module_attribute_read_by_getattr_with_a_string():
    config = types.ModuleType("config_for_redteam9")
    config.SCALE = 2.0

    def f(x):
        return np.sum(x * x) * getattr(config, "SCALE")
    changed_before_the_fourth_call(f, lambda: setattr(config, "SCALE", 5.0))


@pytest.mark.parametrize("view", ["mappingproxy", "values"])
def test_a_read_only_view_of_a_changed_dict(view):
    weights = {"w": np.array([1.0, 2.0, 3.0])}
    seen = types.MappingProxyType(weights) if view == "mappingproxy" else weights.values()

    def f(x):
        return sum(np.sum(w * x) for w in (seen.values() if view == "mappingproxy" else seen))
    changed_before_the_fourth_call(
        f, lambda: weights.__setitem__("w", np.array([4.0, 5.0, 6.0])))


# An object-dtype array in the closure (ragged weights): the watch copies it (a shallow copy,
# the same inner objects) and compares with same_value, whose np.array_equal
# (tape/program.py:432, called from tape/compiled.py:377) raises on arrays held inside.

def test_an_object_array_of_ragged_weights_in_the_closure():
    weights = np.empty(2, dtype=object)
    weights[0], weights[1] = np.array([1.0, 2.0, 3.0]), np.array([1.0, 1.0])

    def f(x):
        return np.sum(weights[0] * x) + np.sum(weights[1] * x[:2])
    changed_before_the_fourth_call(f, lambda: weights[0].__setitem__(1, 5.0))


def test_an_object_array_holding_a_changed_dict():
    table = np.empty(1, dtype=object)
    table[0] = {"s": 2.0}
    changed_before_the_fourth_call(lambda x: np.sum(x * x) * table[0]["s"],
                                    lambda: table[0].__setitem__("s", 5.0))


# -- passing: what the watch does see, and Const scalar kinds --------------------------------

_GLOBAL_SCALE = [2.0]


class _Property:
    @property
    def scale(self):
        return _GLOBAL_SCALE[0]


_PROPERTY = _Property()


def _reads_a_property(x):
    return np.sum(x * x) * _PROPERTY.scale


def test_a_property_and_a_dynamic_attribute_reading_state_f_does_not_name():
    try:
        changed_before_the_fourth_call(_reads_a_property,
                                        lambda: _GLOBAL_SCALE.__setitem__(0, 5.0))
    finally:
        _GLOBAL_SCALE[0] = 2.0
    store = {"s": 2.0}

    class Dynamic:
        def __getattr__(self, name):
            return store[name]
    obj = Dynamic()
    changed_before_the_fourth_call(lambda x: np.sum(x * x) * obj.s,
                                    lambda: store.__setitem__("s", 5.0))


def test_config_objects_of_the_standard_library():
    import argparse
    import collections
    ns = argparse.Namespace(s=2.0)
    changed_before_the_fourth_call(lambda x: np.sum(x * x) * ns.s,
                                    lambda: setattr(ns, "s", 5.0))
    chain = collections.ChainMap({}, {"s": 2.0})
    changed_before_the_fourth_call(lambda x: np.sum(x * x) * chain["s"],
                                    lambda: chain.__setitem__("s", 5.0))
    layers = [np.array([1.0, 2.0, 3.0])]

    def weights():   # a generator helper over a list f does not name
        yield from layers
    changed_before_the_fourth_call(lambda x: sum(np.sum(w * x) for w in weights()),
                                    lambda: layers.append(np.full(3, 2.0)))


def test_const_scalar_kinds_that_promote_float32_differently():
    """`Const(0.5)` keeps a float32 product float32, `Const(np.float64(0.5))` promotes it
    (0.5 == np.float64(0.5) and both hash alike): each kind is its own program."""
    consts = [0.5, np.float64(0.5), 0.5, np.float64(0.5), np.float32(0.5), 1, True,
              np.int64(1), np.True_, 0.5]

    def setup():
        def f(x, c):
            y = x * c
            return np.sum(y * y) if isinstance(c, float) else np.sum(y)
        return f, lambda k: [Duplicated(np.array([0.3, 0.4], dtype=np.float32),
                                        np.zeros(2, np.float32)), Const(consts[k])]
    sequences(setup, list(range(len(consts))))
