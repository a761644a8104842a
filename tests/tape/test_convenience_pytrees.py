"""gradient, jacobian, hessian and hvp on pytree arguments, checked against central finite
differences in float64 and against each other (Forward against Reverse); refusals of
non-array results, integer arguments and bad chunk values."""
import dataclasses
from collections import namedtuple

import numpy as np
import pytest

from tape import (ActivityError, Const, Forward, ForwardWithPrimal, Reverse, gradient, hessian,
                  hvp, hvp_, jacobian, onehot)
from tape.pytree import flatten, unflatten

Pair = namedtuple("Pair", "w b")


@dataclasses.dataclass
class Params:
    w: np.ndarray
    b: float


def _entry_is_complex(tree):
    """For each float entry of `tree`, in leaf order (each leaf in C order): is it complex?"""
    flags = []
    for v in flatten(tree)[0]:
        kind = np.asarray(v).dtype.kind
        if kind in "fc" and not isinstance(v, bool):
            flags += [kind == "c"] * int(np.size(v))
    return flags


def _shifted(tree, j, step):
    """A copy of `tree` with float entry j moved by `step` (real or imaginary)."""
    leaves, td = flatten(tree)
    leaves = [np.array(v, copy=True) if hasattr(v, "shape") else v for v in leaves]
    for k, v in enumerate(leaves):
        if isinstance(v, (bool, int)) or getattr(v, "dtype", np.dtype(float)).kind not in "fc":
            continue
        size = int(np.size(v))
        if j < size:
            if hasattr(v, "shape") and np.ndim(v):
                v.reshape(-1)[j] += step
            else:
                leaves[k] = type(v)(v + step) if not hasattr(v, "shape") else v + step
            return unflatten(td, leaves)
        j -= size
    raise IndexError(j)


def _numeric_gradient(f, tree, eps=1e-6):
    """Central differences: df/dRe (+ 1j df/dIm for complex entries), flat."""
    out = []
    for j, is_complex in enumerate(_entry_is_complex(tree)):
        d = (f(_shifted(tree, j, eps)) - f(_shifted(tree, j, -eps))) / (2 * eps)
        if is_complex:
            d = d + 1j * (f(_shifted(tree, j, 1j * eps)) - f(_shifted(tree, j, -1j * eps))) / (
                2 * eps)
        out.append(d)
    return np.array(out)


def _flat(derivs, tree):
    """A derivative pytree (None at integer leaves) as one flat vector in `_entries` order."""
    d_leaves = flatten(derivs)[0]
    return np.concatenate([np.ravel(np.asarray(v)) for v in d_leaves])


W = np.array([0.3, -1.2, 0.7])
CASES = {
    "dict": ({"w": W.copy(), "b": 0.5, "n": 3, "name": "x"},
             lambda p: np.sum(np.tanh(p["w"] * p["b"]) ** 2) * p["n"]),
    "list": ([W.copy(), 0.5], lambda p: np.sum(np.sin(p[0]) * p[1] ** 2)),
    "tuple": ((W.copy(), np.array(0.5)), lambda p: np.sum(np.exp(p[0] * p[1]))),
    "namedtuple": (Pair(W.copy(), 0.5), lambda p: np.sum(p.w ** 3) * np.cos(p.b)),
    "dataclass": (Params(W.reshape(3, 1).copy(), 0.5), lambda p: np.sum(np.log1p(p.w ** 2)) / p.b),
    "0-d leaves": ({"a": np.array(1.5), "b": np.float64(-0.5), "c": 2.0},
                   lambda p: p["a"] ** 2 * p["b"] + np.sin(p["c"] * p["a"])),
}


@pytest.mark.parametrize("name", list(CASES))
def test_forward_gradient_of_a_pytree_is_reverse_and_finite_differences(name):
    x, f = CASES[name]
    rev = gradient(Reverse, f, x)[0]
    fwd = gradient(Forward, f, x)[0]
    assert type(fwd) is type(x)
    assert flatten(fwd)[1] == flatten(rev)[1]                       # same structure, None's
    for a, b in zip(flatten(fwd)[0], flatten(rev)[0]):
        assert type(a) is type(b) and np.shape(a) == np.shape(b)
    np.testing.assert_allclose(_flat(fwd, x), _flat(rev, x), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(_flat(fwd, x), _numeric_gradient(f, x).real, rtol=1e-6, atol=1e-8)


def test_integer_and_static_leaves_give_none_in_both_modes():
    x, f = CASES["dict"]
    for mode in (Forward, Reverse):
        g = gradient(mode, f, x)[0]
        assert g["n"] is None and g["name"] == "x"


def test_float32_pytree_gradient_has_reverse_dtypes():
    x = {"w": np.array([0.5, -1.0], np.float32), "b": np.float32(2.0)}
    f = lambda p: np.sum(p["w"] ** 2) * p["b"]   # noqa: E731
    rev, fwd = gradient(Reverse, f, x)[0], gradient(Forward, f, x)[0]
    assert fwd["w"].dtype == rev["w"].dtype == np.float32
    assert type(fwd["b"]) is type(rev["b"]) is np.float32
    np.testing.assert_allclose(fwd["w"], [2.0, -4.0], rtol=1e-6)
    np.testing.assert_allclose(fwd["b"], 1.25, rtol=1e-6)
    # a float64 result of float32 leaves: derivatives still in the leaves' dtype, both modes
    g = lambda p: np.sum(p["w"] * np.ones(2)) * p["b"]   # noqa: E731
    for mode in (Forward, Reverse):
        d = gradient(mode, g, x)[0]
        assert d["w"].dtype == np.float32 and type(d["b"]) is np.float32
        (J,) = jacobian(mode, lambda p: p["w"] * np.ones(2), x)
        assert J["w"].dtype == J["b"].dtype == np.float32
        np.testing.assert_allclose(J["w"], np.eye(2), atol=1e-7)


def test_complex_leaves_take_real_and_imaginary_directions():
    x = {"z": np.array([1.0 + 2.0j, -0.5 + 0.3j]), "s": 0.7}
    f = lambda p: np.sum(np.abs(p["z"] * p["s"]) ** 2 + np.real(p["z"] ** 2))   # noqa: E731
    rev, fwd = gradient(Reverse, f, x)[0], gradient(Forward, f, x)[0]
    np.testing.assert_allclose(fwd["z"], rev["z"], rtol=1e-12)
    assert fwd["s"] == pytest.approx(rev["s"], rel=1e-12)
    numeric = _numeric_gradient(lambda p: f(p), x)
    np.testing.assert_allclose(fwd["z"], numeric[:2], rtol=1e-6)
    assert fwd["s"] == pytest.approx(numeric[2].real, rel=1e-6)
    (g,) = gradient(Forward, lambda z: np.abs(z) ** 2, 1.0 + 2.0j)    # a Python complex
    assert g == pytest.approx(2.0 + 4.0j)


def test_forward_with_primal_of_a_pytree():
    x, f = CASES["namedtuple"]
    r = gradient(ForwardWithPrimal, f, x)
    assert r.val == pytest.approx(f(x))
    np.testing.assert_allclose(_flat(r.derivs[0], x), _numeric_gradient(f, x).real, rtol=1e-6)


# --------------------------------------------------------------------------------------------
# jacobian


def vector_f(p):
    return np.stack([np.sum(p["w"] * p["b"]), np.prod(np.sin(p["w"])), p["b"] ** 3])


P = {"w": np.array([[0.4, -0.3], [1.1, 0.2]]), "b": 0.8, "k": 2}


@pytest.mark.parametrize("mode", [Forward, Reverse])
@pytest.mark.parametrize("chunk", [None, 1, 2, 5, 100])
def test_jacobian_of_a_pytree_argument(mode, chunk):
    (J,) = jacobian(mode, vector_f, P, chunk=chunk)
    assert J["w"].shape == (3, 2, 2) and J["b"].shape == (3,) and J["k"] is None
    for row in range(3):
        numeric = _numeric_gradient(lambda p: vector_f(p)[row], P).real
        got = np.concatenate([J["w"][row].ravel(), [J["b"][row]]])
        np.testing.assert_allclose(got, numeric, rtol=1e-6, atol=1e-8)


def test_jacobian_modes_agree_on_pytrees_and_scalar_results():
    for x, f in CASES.values():
        Jf, Jr = jacobian(Forward, f, x)[0], jacobian(Reverse, f, x)[0]
        np.testing.assert_allclose(_flat(Jf, x), _flat(Jr, x), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(_flat(Jf, x), _flat(gradient(Reverse, f, x)[0], x),
                                   rtol=1e-12, atol=1e-14)
    x = np.array([0.2, -0.4])
    for mode in (Forward, Reverse):
        (J,) = jacobian(mode, lambda x: np.sum(np.sin(x) * x), x, chunk=1)
        np.testing.assert_allclose(J, np.cos(x) * x + np.sin(x), rtol=1e-13)


@pytest.mark.parametrize("mode", [Forward, Reverse])
@pytest.mark.parametrize("result, name", [(lambda x: {"a": x * 2, "b": np.sum(x)}, "dict"),
                                          (lambda x: (x, x), "tuple"),
                                          (lambda x: [x], "list")])
def test_jacobian_refuses_pytree_results_in_both_modes(mode, result, name):
    with pytest.raises(ActivityError, match=f"array or scalar result.*returned {name}"):
        jacobian(mode, result, np.array([1.0, 2.0]))


@pytest.mark.parametrize("mode", [Forward, Reverse])
def test_jacobian_refuses_complex_results_in_both_modes(mode):
    with pytest.raises(ActivityError, match="real result.*complex"):
        jacobian(mode, lambda x: x * (1 + 1j), np.array([1.0, 2.0]))


@pytest.mark.parametrize("chunk, error, match", [
    (0, ValueError, "chunk must be at least 1.*got 0"),
    (-2, ValueError, "chunk must be at least 1.*got -2"),
    (1.5, TypeError, "chunk must be a positive integer.*1.5"),
    (True, TypeError, "chunk must be a positive integer.*True"),
])
def test_bad_chunks_are_refused_everywhere(chunk, error, match):
    x = np.array([1.0, 2.0])
    for call in (lambda: jacobian(Forward, np.sin, x, chunk=chunk),
                 lambda: jacobian(Reverse, np.sin, x, chunk=chunk),
                 lambda: hessian(lambda x: np.sum(x ** 3), x, chunk=chunk),
                 lambda: hessian(lambda p: p["a"] ** 3, {"a": 1.0}, chunk=chunk)):
        with pytest.raises(error, match=match):
            call()


@pytest.mark.parametrize("x", [np.array([1, 2]), 3, {"a": 1, "b": np.array([2])}],
                         ids=["int array", "int", "int pytree"])
def test_integer_arguments_are_refused_clearly(x):
    f = lambda x: np.sum(flatten(x)[0][0] ** 2)    # noqa: E731
    calls = [lambda: gradient(Forward, f, x), lambda: gradient(Reverse, f, x),
             lambda: jacobian(Forward, f, x), lambda: jacobian(Reverse, f, x),
             lambda: hessian(f, x)]
    for call in calls:
        with pytest.raises(ActivityError, match="argument 0 of .* holds no floating-point"):
            call()
    assert gradient(Reverse, lambda y, n: y * n, 2.0, Const(3)) == (3.0, None)


# --------------------------------------------------------------------------------------------
# hessian and hvp


def tree_f(p):
    return np.sum(np.sin(p.w) * p.b ** 2) + np.prod(p.w) * np.exp(p.b)


PT = Pair(np.array([0.5, -0.8, 1.3]), 0.6)


def _flat_gradient(p):
    return _flat(gradient(Reverse, tree_f, p)[0], p)


@pytest.mark.parametrize("chunk", [None, 1, 3, 10])
def test_hessian_of_a_pytree_is_flat_and_matches_differences_of_gradients(chunk):
    H = hessian(tree_f, PT, chunk=chunk)
    assert H.shape == (4, 4)
    eps = 1e-6
    numeric = np.stack([(_flat_gradient(_shifted(PT, j, eps))
                         - _flat_gradient(_shifted(PT, j, -eps))) / (2 * eps) for j in range(4)],
                       axis=1)
    np.testing.assert_allclose(H, numeric, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(H, H.T, rtol=1e-12, atol=1e-13)


def test_hessian_order_is_onehot_order_and_hvp_agrees():
    p = {"b": 0.6, "w": np.array([[0.5], [-0.8]]), "i": 4}
    f = lambda p: np.sum(p["w"] ** 3) * p["b"] ** 2 * p["i"]   # noqa: E731
    H = hessian(f, p)
    assert H.shape == (3, 3)
    for j, e in enumerate(onehot(p)):
        np.testing.assert_allclose(H[:, j], _flat(hvp(f, p, e), p), rtol=1e-12, atol=1e-14)
    # b first (dict order), then w in C order: d2f/db2 = 2 i sum(w^3)
    assert H[0, 0] == pytest.approx(2 * 4 * np.sum(p["w"] ** 3), rel=1e-12)


def test_hessian_refuses_complex_arguments():
    with pytest.raises(ActivityError, match="hessian.*complex"):
        hessian(lambda z: np.sum(np.abs(z) ** 2), np.array([1.0 + 1.0j]))


def test_hvp_into_a_pytree():
    res = {"w": np.zeros(2), "b": 0.0}
    p = {"w": np.array([0.3, 0.4]), "b": 1.5}
    f = lambda p: np.sum(p["w"] ** 2) * p["b"] ** 2   # noqa: E731
    v = {"w": np.array([1.0, 0.0]), "b": 1.0}
    assert hvp_(res, f, p, v) is res
    # H v, by hand: d/dw = 2 w b^2, d/db = 2 b sum(w^2)
    np.testing.assert_allclose(res["w"], [2 * 1.5 ** 2 + 4 * 0.3 * 1.5, 4 * 0.4 * 1.5], rtol=1e-12)
    assert res["b"] == pytest.approx(4 * 0.3 * 1.5 + 2 * np.sum(p["w"] ** 2), rel=1e-12)


def test_empty_leaves_and_integer_results_agree_in_both_modes():
    p = {"w": np.zeros(0), "b": np.ones(1)}
    for mode in (Forward, Reverse):
        (J,) = jacobian(mode, lambda p: np.concatenate([p["w"], p["b"] * 2]), p, chunk=1)
        assert J["w"].shape == (1, 0)
        np.testing.assert_allclose(J["b"], [[2.0]], rtol=1e-14)
        (J,) = jacobian(mode, lambda x: np.sum(x) * np.ones(2), np.zeros(0))
        assert J.shape == (2, 0)
        (J,) = jacobian(mode, lambda x: np.floor(x).astype(int), np.array([1.5, 2.0]))
        np.testing.assert_array_equal(J, np.zeros((2, 2)))
