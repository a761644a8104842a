"""Pytrees: tuples, lists, dicts, namedtuples, dataclasses and registered classes."""
import collections
import dataclasses

import numpy as np
import pytest

from tape import (Active, Duplicated, Forward, PytreeError, Reverse, autodiff, make_zero,
                  register_pytree)


@dataclasses.dataclass
class Proj:
    w_k: np.ndarray
    w_v: np.ndarray


@dataclasses.dataclass
class Model:
    proj: Proj
    scale: float
    bias: list


def loss(model, x):
    k = np.sum(model.proj.w_k * x)
    v = np.sum(model.proj.w_v ** 2)
    return model.scale * (k + v) + model.bias[0] * 3.0


def make_model():
    return Model(Proj(np.array([1.0, 2.0]), np.array([0.5, -1.0])), 2.0, [0.25])


def test_duplicated_dataclass_accumulates_into_nested_fields():
    model, x = make_model(), np.array([3.0, 4.0])
    dmodel = make_zero(model)
    assert dmodel.scale == 0.0 and np.all(dmodel.proj.w_k == 0)
    autodiff(Reverse, loss, Active, Duplicated(model, dmodel), x)
    np.testing.assert_allclose(dmodel.proj.w_k, 2.0 * x, atol=1e-11)
    np.testing.assert_allclose(dmodel.proj.w_v, 2.0 * 2 * model.proj.w_v, atol=1e-11)
    assert dmodel.scale == pytest.approx(np.sum(model.proj.w_k * x) + np.sum(model.proj.w_v ** 2))
    assert dmodel.bias[0] == pytest.approx(3.0)
    assert isinstance(dmodel.scale, float)
    # call twice, get twice
    autodiff(Reverse, loss, Active, Duplicated(model, dmodel), x)
    np.testing.assert_allclose(dmodel.proj.w_k, 4.0 * x, atol=1e-11)


def test_active_pytree_returns_same_structure():
    params = {"w": np.array([1.0, 2.0]), "b": (0.5, np.array(3.0))}
    (g,), = autodiff(Reverse, lambda p: np.sum(p["w"] ** 2) * p["b"][0] + p["b"][1], Active,
                     Active(params))
    assert set(g) == {"w", "b"} and isinstance(g["b"], tuple)
    np.testing.assert_allclose(g["w"], 2 * params["w"] * 0.5, atol=1e-12)
    assert g["b"][0] == pytest.approx(5.0) and type(g["b"][0]) is float
    assert g["b"][1] == pytest.approx(1.0)


def test_namedtuple_and_forward_mode():
    Pair = collections.namedtuple("Pair", "a b")
    p, dp = Pair(np.array([1.0, 2.0]), 3.0), Pair(np.array([1.0, 0.0]), 1.0)
    t, = autodiff(Forward, lambda p: np.sum(p.a * p.b), Duplicated(p, dp))
    assert t == pytest.approx(1.0 * 3.0 + (1.0 + 2.0) * 1.0)


def test_registered_class_with_fields():
    class Layer:
        def __init__(self, w, b):
            self.w, self.b = w, b
    register_pytree(Layer, fields=("w", "b"))
    layer, dlayer = Layer(np.array([2.0]), 1.0), Layer(np.zeros(1), 0.0)
    autodiff(Reverse, lambda l: np.sum(l.w ** 2) + l.b * 4.0, Active, Duplicated(layer, dlayer))
    np.testing.assert_allclose(dlayer.w, [4.0], atol=1e-11)
    assert dlayer.b == pytest.approx(4.0)


def test_registered_class_with_flatten_functions():
    class Pair:
        def __init__(self, a, b):
            self.a, self.b = a, b
    register_pytree(Pair, lambda p: ((p.a, p.b), None), lambda aux, ch: Pair(*ch))
    (g,), = autodiff(Reverse, lambda p: p.a * p.b, Active, Active(Pair(2.0, 5.0)))
    assert isinstance(g, Pair) and g.a == 5.0 and g.b == 2.0


def test_float_leaf_in_immutable_tuple_shadow_is_an_error():
    with pytest.raises(PytreeError, match="immutable leaf"):
        autodiff(Reverse, lambda p: p[0] * p[1], Active, Duplicated((2.0, 3.0), (0.0, 0.0)))


def test_integer_fields_are_inactive():
    @dataclasses.dataclass
    class Cfg:
        w: np.ndarray
        n: int
    c, dc = Cfg(np.array([1.0, 2.0]), 3), Cfg(np.zeros(2), 3)
    autodiff(Reverse, lambda c: np.sum(c.w) * c.n, Active, Duplicated(c, dc))
    np.testing.assert_allclose(dc.w, [3.0, 3.0], atol=1e-12)


def test_make_zero_shapes_and_types():
    z = make_zero({"w": np.ones((2, 3), np.float32), "s": 1.5, "l": [np.ones(2)]})
    assert z["w"].dtype == np.float32 and z["w"].shape == (2, 3) and not z["w"].any()
    assert z["s"] == 0.0 and isinstance(z["s"], float)
    assert z["l"][0].shape == (2,)
