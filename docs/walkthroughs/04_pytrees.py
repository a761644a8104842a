"""Walkthrough 4: structs and pytrees. Gradients into `model.proj.w_k`.

Arguments may be nested containers (dataclasses, dicts, lists, tuples) of arrays and floats: a
*pytree*. `Duplicated(model, dmodel)` needs a shadow of the same structure; `make_zero(model)`
builds one, and the gradient of every leaf is added into the matching leaf of the shadow. A
mismatched shadow is reported by the leaf's path. Every number printed is checked against
central differences.

Run: python docs/walkthroughs/04_pytrees.py
"""
import pathlib
import sys
from dataclasses import dataclass

try:
    import tape
except ImportError:   # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
    import tape

import numpy as np
from tape import ActivityError, Active, Const, Duplicated, Reverse, autodiff, make_zero


@dataclass
class Projection:
    w_k: np.ndarray
    w_v: np.ndarray


@dataclass
class Model:
    proj: Projection
    scale: float                  # a float field gets a derivative too


def loss(model, x):
    k, v = model.proj.w_k @ x, model.proj.w_v @ x
    return model.scale * np.sum(np.tanh(k) * v)


rng = np.random.default_rng(0)
model = Model(Projection(rng.standard_normal((2, 3)), rng.standard_normal((2, 3))), 0.5)
x = rng.standard_normal(3)

# 1. The shadow has the model's structure, with zeros.
dmodel = make_zero(model)
autodiff(Reverse, loss, Active, Duplicated(model, dmodel), Const(x))
print("d loss / d model.proj.w_k =\n", np.round(dmodel.proj.w_k, 6))
print("d loss / d model.scale    =", round(dmodel.scale, 6))

# Check: by hand, dL/dw_k = scale * (v * (1 - tanh(k)^2)) x^T, dL/dscale = L / scale.
k, v = model.proj.w_k @ x, model.proj.w_v @ x
assert np.allclose(dmodel.proj.w_k, model.scale * np.outer(v * (1 - np.tanh(k) ** 2), x))
assert np.isclose(dmodel.scale, loss(model, x) / model.scale)


# And every leaf against central differences, perturbing one entry of the struct at a time.
def perturbed(field, idx, h):
    m = Model(Projection(model.proj.w_k.copy(), model.proj.w_v.copy()), model.scale)
    if field == "scale":
        m.scale += h
    else:
        getattr(m.proj, field)[idx] += h
    return loss(m, x)


h = 1e-6
for field in ("w_k", "w_v"):
    for idx in np.ndindex(2, 3):
        fd = (perturbed(field, idx, h) - perturbed(field, idx, -h)) / (2 * h)
        assert abs(getattr(dmodel.proj, field)[idx] - fd) < 1e-8, (field, idx)
assert abs(dmodel.scale - (perturbed("scale", None, h) - perturbed("scale", None, -h)) / (2 * h)) < 1e-8
print("all 13 leaf entries match central differences")

# 2. Active works on pytrees as well: the derivative is returned as a new Model.
((g, _),) = autodiff(Reverse, loss, Active, Active(model), Const(x))
assert isinstance(g, Model) and np.allclose(g.proj.w_k, dmodel.proj.w_k)
print("Active(model) returns a", type(g).__name__, "of gradients")

# 3. A wrong shadow is named by its path.
bad = Model(Projection(np.zeros((3, 2)), np.zeros((2, 3))), 0.0)
try:
    autodiff(Reverse, loss, Active, Duplicated(model, bad), Const(x))
    raise AssertionError("expected an ActivityError")
except ActivityError as e:
    print("error:", e)
    assert "model.proj.w_k" in str(e)
