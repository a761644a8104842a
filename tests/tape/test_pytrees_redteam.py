"""Pytrees across the public API: dict key order, registered classes, split mode, compile,
checkpoints and scans, each compared with central finite differences."""
import collections
import dataclasses

import numpy as np
import pytest

import tape
from tape import (Active, Duplicated, Forward, MixedDuplicated, Reverse,
                  ReverseSplitWithPrimal, autodiff, autodiff_thunk, checkpoint,
                  checkpointed_scan, gradient, make_zero, register_pytree)
from tape.pytree import flatten, unflatten

NT = collections.namedtuple("NT", "a b")


def fd_grad(f, tree, eps=1e-6):
    """Central differences of scalar `f` leaf by leaf, in `tree`'s structure."""
    leaves, td = flatten(tree)
    out = []
    for i, leaf in enumerate(leaves):
        a = np.array(leaf, dtype=float)
        g = np.zeros_like(a)
        for j in np.ndindex(a.shape):
            for s in (1.0, -1.0):
                b = a.copy()
                b[j] += s * eps
                moved = list(leaves)
                moved[i] = b if np.ndim(leaf) else float(b)
                g[j] += s * f(unflatten(td, moved)) / (2 * eps)
        out.append(g)
    return unflatten(td, out)


def assert_tree_close(got, want, rtol=1e-12, atol=0.0):
    gl, gtd = flatten(got)
    wl, wtd = flatten(want)
    assert gtd == wtd, (got, want)
    for a, b in zip(gl, wl):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


# -- dicts with mixed keys, ordered differently between calls ----------------------------

def f_dict(p):
    return np.sum(p["a"] ** 2) * 3.0 + np.sum(p[1] * p[(2, "x")]) + np.sin(p["c"])


def exact_dict(p):
    return {"a": 6 * p["a"], 1: p[(2, "x")], (2, "x"): p[1], "c": np.cos(p["c"])}


P1 = {"a": np.array([1.0, 2.0]), 1: np.array([3.0, 4.0]), (2, "x"): np.array([5.0, -1.0]),
      "c": 0.7}
P2 = {"c": 0.7, (2, "x"): np.array([5.0, -1.0]), 1: np.array([3.0, 4.0]),
      "a": np.array([1.0, 2.0])}


def check_keyed(g, p):
    assert list(g) == list(p)
    want = exact_dict(p)
    for k in p:
        np.testing.assert_allclose(g[k], want[k], rtol=1e-12)


def test_compiled_reverse_keeps_the_leaf_mapping_when_key_order_changes():
    active = tape.compile(Reverse, f_dict, Active, Active)
    dup = tape.compile(Reverse, f_dict, Active, Duplicated)
    for p in (P1, P2, P1, P2):
        check_keyed(active(Active(p))[0][0], p)
        d = make_zero(p)
        dup(Duplicated(p, d))
        check_keyed(d, p)
    assert active.stats.hits == 2 and dup.stats.hits == 2


def test_compiled_forward_keeps_the_leaf_mapping_when_key_order_changes():
    jvp = tape.compile(Forward, f_dict, Duplicated, Duplicated)
    for p in (P1, P2, P1, P2):
        want = exact_dict(p)
        for k in p:
            t = make_zero(p)
            t[k] = 1.0 if isinstance(p[k], float) else np.array([0.0, 1.0])
            np.testing.assert_allclose(jvp(Duplicated(p, t))[0], np.sum(want[k] * t[k]),
                                       rtol=1e-12)


# -- a class registered with flatten/unflatten whose aux orders the children -------------

class Bag:
    def __init__(self, d, order):
        self.d, self.order = d, order


register_pytree(Bag, lambda b: ([b.d[k] for k in b.order], tuple(b.order)),
                lambda aux, kids: Bag(dict(zip(aux, kids)), list(aux)))


def f_bag(b):
    return np.sum(b.d["x"] * np.array([1.0, 2.0])) + 10 * np.sum(b.d["y"] * np.array([1.0, 2.0]))


def test_compiled_registered_class_with_aux_order_maps_each_child():
    g = tape.compile(Reverse, f_bag, Active, Duplicated)
    for order in (["x", "y"], ["y", "x"], ["x", "y"]):
        b = Bag({"x": np.ones(2), "y": np.ones(2)}, order)
        d = make_zero(b)
        g(Duplicated(b, d))
        assert d.order == order
        np.testing.assert_allclose(d.d["x"], [1.0, 2.0], rtol=1e-12)
        np.testing.assert_allclose(d.d["y"], [10.0, 20.0], rtol=1e-12)


# -- dataclasses with defaults and non-float fields, frozen ------------------------------

@dataclasses.dataclass(frozen=True)
class Frozen:
    w: np.ndarray
    s: float = 2.0
    n: int = 3
    name: str = "a"
    opt: object = None


def f_frozen(m):
    return np.sum(m.w ** 2) * m.s * m.n * (2.0 if m.name == "a" else 7.0)


def test_frozen_dataclass_shadow_and_compiled_retrace_on_static_fields():
    m = Frozen(np.array([1.0, -2.0]))
    d = make_zero(m)
    autodiff(Reverse, f_frozen, Active, Duplicated(m, d))
    assert_tree_close(d, dataclasses.replace(fd_grad(f_frozen, m), n=3, name="a"), rtol=1e-8)
    g = tape.compile(Reverse, f_frozen, Active, Active)
    for mm in (m, Frozen(m.w, n=4), Frozen(m.w, name="b"), m):
        got = g(Active(mm))[0][0]
        np.testing.assert_allclose(got.w, 2 * mm.w * mm.s * mm.n * (2.0 if mm.name == "a"
                                                                   else 7.0), rtol=1e-12)
        assert got.name == mm.name and got.n is None


def test_mixed_duplicated_dict_returns_float_leaves_and_fills_arrays():
    p = {"y": 0.5, "x": np.array([1.0, 2.0])}
    dp = {"y": 0.0, "x": np.zeros(2)}
    (g,), = autodiff(Reverse, lambda p: np.sum(p["x"] ** 2) * p["y"], Active,
                     MixedDuplicated(p, dp))
    assert g == {"y": pytest.approx(5.0, rel=1e-12), "x": None}
    np.testing.assert_allclose(dp["x"], [1.0, 2.0], rtol=1e-12)


# -- split mode with pytree results ------------------------------------------------------

def g_tree(p):
    return {"s": p["x"] ** 2, "t": NT(np.sin(p["y"]), p["x"] * p["y"]), "l": [p["y"] * 3.0]}


P = {"y": 0.5, "x": np.array([1.0, 2.0])}
SEED = {"s": np.array([1.0, 0.0]), "t": NT(2.0, np.array([0.0, 2.0])), "l": [5.0]}


def seeded_loss(p):
    out = g_tree(p)
    return (np.sum(out["s"] * SEED["s"]) + out["t"].a * SEED["t"].a
            + np.sum(out["t"].b * SEED["t"].b) + out["l"][0] * SEED["l"][0])


def test_split_mode_pytree_result_seeded_by_dret_matches_differences():
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, g_tree, Duplicated, Active)
    tp, prim, shadow = fwd(Active(P))
    assert_tree_close(prim, g_tree(P))
    assert_tree_close(shadow, make_zero(g_tree(P)))
    (g,), = rev(Active(P), SEED, tp)
    assert_tree_close(g, fd_grad(seeded_loss, P), rtol=1e-8)


def test_split_mode_seed_in_another_key_order_is_explained():
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, g_tree, Duplicated, Active)
    tp, _, _ = fwd(Active(P))
    seed = {"l": SEED["l"], "t": SEED["t"], "s": SEED["s"]}
    try:
        (g,), = rev(Active(P), seed, tp)
    except tape.HecateError as e:
        assert "order" in str(e)
    else:
        assert_tree_close(g, fd_grad(seeded_loss, P), rtol=1e-8)


# -- checkpoint and checkpointed_scan with pytrees ---------------------------------------

W_B = {"b": np.array([0.1, -0.2]), "W": np.array([[0.5, -0.2], [0.1, 0.3]])}
H0 = np.array([0.3, 0.7])


@checkpoint
def block(params, h):
    return {"h": np.tanh(params["W"] @ h + params["b"]), "aux": (np.sum(h), None, "tag")}


def ck_loss(params, h):
    o = block(params, h)
    o2 = block(params, o["h"])
    return np.sum(o2["h"] ** 2) + o["aux"][0] * 0.3


@pytest.mark.parametrize("mode", [Reverse, Forward])
def test_checkpoint_with_pytree_arguments_and_results(mode):
    g = gradient(mode, ck_loss, W_B, H0)
    assert_tree_close(g[0], fd_grad(lambda q: ck_loss(q, H0), W_B), rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(g[1], fd_grad(lambda h: ck_loss(W_B, h), H0), rtol=1e-7)


XS = {"u": np.linspace(0.1, 0.9, 10).reshape(5, 2)}


def scan_loss(params, c0, xs):
    def step(c, x):
        h = np.tanh(params["W"] @ c["h"] + x["u"] * c["s"])
        return {"s": c["s"] * 0.9 + np.sum(h) * 0.1, "h": h}, (np.sum(h), {"q": h * x["u"]})
    c, ys = checkpointed_scan(step, c0, xs, every=2)
    return np.sum(c["h"]) + c["s"] + np.sum(ys[0]) + np.sum(ys[1]["q"] ** 2)


def test_checkpointed_scan_with_dict_carry_and_pytree_ys():
    c0 = {"s": np.array(0.5), "h": np.array([0.1, 0.2])}
    g = gradient(Reverse, scan_loss, W_B, c0, XS)
    assert_tree_close(g[0], fd_grad(lambda q: scan_loss(q, c0, XS), W_B), rtol=1e-7, atol=1e-10)
    assert_tree_close(g[1], fd_grad(lambda c: scan_loss(W_B, c, XS), c0), rtol=1e-7, atol=1e-10)
    assert_tree_close(g[2], fd_grad(lambda x: scan_loss(W_B, c0, x), XS), rtol=1e-7, atol=1e-10)


def test_checkpointed_scan_carry_key_order_is_accepted_or_explained():
    c0 = {"h": np.array([0.1, 0.2]), "s": np.array(0.5)}
    try:
        g = gradient(Reverse, scan_loss, W_B, c0, XS)
    except TypeError as e:
        assert "order" in str(e)
    else:
        assert_tree_close(g[1], fd_grad(lambda c: scan_loss(W_B, c, XS), c0), rtol=1e-7,
                          atol=1e-10)


def test_compiled_fields_class_is_replayed_from_the_second_call():
    class Lin:
        def __init__(self, w, scale):
            self.w, self.scale = w, scale

    register_pytree(Lin, fields=("w",))
    g = tape.compile(Reverse, lambda m: np.sum(m.w ** 2) * m.scale, Active, Active)
    for _ in range(3):
        got = g(Active(Lin(np.array([1.0, -2.0]), 3.0)))[0][0]
        np.testing.assert_allclose(got.w, [6.0, -12.0], rtol=1e-12)
    assert g.stats.eager_calls == 0 and g.stats.eager_reasons == []
