"""`tape.compile` against eager `autodiff`, third round, the arguments of model-like functions
called many times with changing values: a shadow sharing its primal (refused by eager mode at
every call), index arrays and masks beside the weights of a Duplicated pytree, and a dataclass
layer whose methods read globals and class attributes. What the function reads besides its
arguments is in test_compile_redteam3_watch.py.

Each test runs a sequence of calls through the compiled function and the same sequence through
eager `autodiff`, each from fresh state, and compares every call: result (values and types),
raised error, shadows and arguments after the call.
"""
import dataclasses

import numpy as np
import pytest

import tape
from tape import Active, Const, Duplicated, ReverseWithPrimal

from compile_sequences import sequences as _sequences

RP = ReverseWithPrimal


def _rng(k):
    return np.random.default_rng(k)


CALLS = [0, 1, 2, 3, 4, 5, 0, 1]


def test_a_shadow_sharing_its_primal_is_refused_on_replays_too():
    """Once replayed on the plain path, Duplicated(x, x) added the gradient into x; eager
    mode refuses it with an ActivityError at every call."""
    def setup():
        def f(x, c):
            return np.sum(x * c)

        def make_args(c):
            x = _rng(c).normal(size=3)
            return [Duplicated(x, x if c % 2 else np.zeros(3)), Const(np.ones(3))]
        return f, make_args
    _sequences(setup, CALLS)
    _sequences(setup, [0, 2, 4, 1, 3, 0])


REPEATED_FIRST = [0, 0, 1, 2, 3, 0, 4]   # confirmed on the second call, then new values


def _with_indices(c):
    params = {"w": _rng(c).normal(size=5), "idx": _rng(c + 1).integers(0, 5, 3),
              "mask": _rng(c + 2).random(5) > 0.4}
    shadow = {"w": np.zeros(5), "idx": np.zeros(3, int), "mask": np.zeros(5, bool)}
    return Duplicated(params, shadow)


def test_index_arrays_and_masks_inside_a_duplicated_pytree_are_read_at_each_call():
    """Integer and boolean arrays beside the weights of a Duplicated (or Active) argument were
    baked into the program by the first trace: later calls gathered with the old indices."""
    def setup():
        def f(p):
            return np.sum(p["w"][p["idx"]] ** 2) + np.sum(p["w"] * p["mask"])
        return f, lambda c: [_with_indices(c)]
    _sequences(setup, REPEATED_FIRST)


def test_a_decision_on_an_index_array_inside_a_duplicated_pytree():
    def setup():
        def f(p):
            if p["idx"][0] > 2:
                return np.sum(p["w"][p["mask"]])
            return np.sum(p["w"] ** 2)
        return f, lambda c: [_with_indices(c)]
    _sequences(setup, REPEATED_FIRST)


def test_an_index_array_inside_an_active_tuple():
    def setup():
        def f(p):
            return np.sum(p[0][p[1]] ** 2)
        return f, lambda c: [Active((_rng(c).normal(size=5), _rng(c).integers(0, 5, 3)))]
    _sequences(setup, REPEATED_FIRST)


def _count_steps(p):
    p["idx"] += 1   # a step counter kept in the parameters: the signature runs eagerly
    return np.sum(p["w"][p["idx"] % 5] ** 2)


def _double_weights(p):
    p["w"][...] *= 2.0
    return np.sum(p["w"][p["idx"]])


@pytest.mark.parametrize("f", [_count_steps, _double_weights])
def test_a_function_writing_the_integer_or_the_float_leaf(f):
    _sequences(lambda: (f, lambda c: [_with_indices(c)]), REPEATED_FIRST)


def test_returning_the_index_array_of_a_duplicated_pytree():
    _sequences(lambda: (lambda p: p["idx"], lambda c: [_with_indices(c)]), REPEATED_FIRST,
               ret=Const)


LAYER_SCALE = 1.0


@dataclasses.dataclass
class _DenseLayer:
    weight: np.ndarray
    factor = 1.0   # a class attribute, not a field

    def __call__(self, x):
        return np.tanh(x @ self.weight) * LAYER_SCALE * type(self).factor


def test_methods_and_class_attributes_of_a_pytree_argument():
    """A layer passed as a Duplicated dataclass, called as `layer(x)`: its method reads a
    module-level global and a class attribute, neither of which was watched (arguments were
    keyed on their fields only)."""
    def setup():
        global LAYER_SCALE
        LAYER_SCALE, _DenseLayer.factor = 1.0, 1.0

        def f(layer, x):
            return np.sum(layer(x) ** 2)

        def make_args(c):
            global LAYER_SCALE
            if c == 1:
                LAYER_SCALE = 2.0
            elif c == 2:
                _DenseLayer.factor = 0.5
            weight = _rng(9).normal(size=(3, 2))
            return [Duplicated(_DenseLayer(weight), _DenseLayer(np.zeros((3, 2)))),
                    Const(_rng(c).normal(size=(4, 3)))]
        return f, make_args
    _sequences(setup, [0, 0, 0, 1, 1, 2, 2])


class _MaskedLinear:
    """Weights (a field) and a mask and a scale beside them (not fields)."""

    def __init__(self, weight, mask, scale):
        self.weight, self.mask, self.scale = weight, mask, scale


tape.register_pytree(_MaskedLinear, fields=("weight",))


@dataclasses.dataclass
class _Tagged:
    weight: np.ndarray


class _StaticMask:
    """A pytree whose static part (`aux`) is a mask array: unhashable, and long enough that
    its repr would elide the middle."""

    def __init__(self, weight, mask):
        self.weight, self.mask = weight, mask


tape.register_pytree(_StaticMask, lambda m: ((m.weight,), m.mask),
                     lambda mask, children: _StaticMask(children[0], mask))


def _mask(c, n):
    mask = np.ones(n)
    if c:
        mask[n // 2] = 0.0   # in the part a repr leaves out
    return mask


@pytest.mark.parametrize("kind", ["fields", "dataclass", "static mask"])
def test_what_a_pytree_node_holds_beside_its_fields_is_part_of_the_signature(kind):
    """A node's other attributes (a mask left out of `fields`, an attribute set after
    construction) and the static part of a registered class (`aux`) came from the node the
    first trace saw: replays used its mask and scale. The signature keyed a registered class
    on the class alone; now on its static part by value (not by repr, which elides the middle
    of a long array)."""
    def setup():
        def f(node, x):
            if kind == "dataclass":
                return np.sum((x * node.weight) ** 2) * node.scale
            if kind == "fields":
                return np.sum((x * node.weight * node.mask[:3]) ** 2) * node.scale
            return np.sum(x * node.weight) * np.sum(node.mask)

        def make_args(c):
            weight = _rng(9).normal(size=3)
            if kind == "fields":
                node, shadow = (_MaskedLinear(weight, _mask(c, 3), 1.0 + c),
                                _MaskedLinear(np.zeros(3), None, None))
            elif kind == "dataclass":
                node, shadow = _Tagged(weight), _Tagged(np.zeros(3))
                node.scale = 1.0 + c
            else:
                node, shadow = _StaticMask(weight, _mask(c, 2001)), _StaticMask(np.zeros(3),
                                                                                   _mask(c, 2001))
            return [Duplicated(node, shadow), Const(_rng(c).normal(size=3))]
        return f, make_args
    _sequences(setup, [0, 0, 0, 1, 2])
