"""Convenience functions on pytrees as a model's user calls them: `make_zero_` (and so
`gradient_`) zeroes every shadow `autodiff` accumulates into; `hvp_` and `hvp_and_gradient_`
write by path; functions that write into their arguments are differentiated at one point by
the multi-pass functions (`jacobian`, Forward `gradient`, `hessian`). Expected values are
written out by hand or come from central differences in float64."""
import dataclasses

import numpy as np
import pytest

from tape import (ActivityError, Const, Forward, PytreeError, Reverse, ReverseWithPrimal,
                  gradient, gradient_, hessian, hvp, hvp_, hvp_and_gradient_, jacobian,
                  make_zero, make_zero_, register_pytree)


class Affine:
    def __init__(self, w, c):
        self.w, self.c = w, c


register_pytree(Affine, fields=("w", "c"))


class Pair:
    def __init__(self, a, b):
        self.a, self.b = a, b


register_pytree(Pair, lambda p: ((p.a, p.b), None), lambda aux, kids: Pair(*kids))


@dataclasses.dataclass(frozen=True)
class Frozen:
    w: np.ndarray
    b: float


def _affine_loss(m):
    return np.sum(m.w ** 2) * m.c


def test_gradient_underscore_zeroes_a_registered_class_shadow():
    x = Affine(np.array([1.0, 2.0]), 0.5)
    dx = Affine(np.full(2, 9.0), 9.0)       # stale values from an earlier step
    assert gradient_(Reverse, dx, _affine_loss, x) is dx
    np.testing.assert_allclose(dx.w, [1.0, 2.0], rtol=1e-12)     # 2 w c
    assert dx.c == pytest.approx(5.0, rel=1e-12)                  # sum(w ** 2)
    result = gradient_(ReverseWithPrimal, dx, _affine_loss, x)    # again: the same, not twice
    np.testing.assert_allclose(dx.w, [1.0, 2.0], rtol=1e-12)
    assert result.val == pytest.approx(2.5)


def test_gradient_underscore_zeroes_numpy_scalars_in_a_list():
    x = [np.ones(2), np.float32(0.5)]
    dx = [np.full(2, 9.0), np.float32(9.0)]
    gradient_(Reverse, dx, lambda p: np.sum(p[0] ** 2) * p[1], x)
    np.testing.assert_allclose(dx[0], [1.0, 1.0], rtol=1e-6)
    assert dx[1] == pytest.approx(2.0, rel=1e-6)
    assert type(dx[1]) is np.float32


def test_make_zero_underscore_walks_every_pytree():
    s = [np.float32(3.0), np.float64(2.0), 1.5, 2 + 1j, np.complex128(1j), 7, "name", None]
    make_zero_(s)
    assert s[:5] == [0, 0, 0, 0, 0] and s[5:] == [7, "name", None]
    assert [type(v) for v in s[:5]] == [np.float32, np.float64, float, complex, np.complex128]
    pair = Pair(np.ones(2), np.ones((2, 2)))
    assert make_zero_(pair) is pair
    assert not pair.a.any() and not pair.b.any()
    frozen = Frozen(np.ones(2), 1.5)      # autodiff accumulates into its fields, so it can be zeroed
    make_zero_(frozen)
    assert frozen.b == 0.0 and not frozen.w.any()


def test_make_zero_underscore_refuses_a_number_it_cannot_zero():
    with pytest.raises(PytreeError, match=r"shadow\['b'\]\[1\]"):
        make_zero_({"a": np.ones(2), "b": (np.ones(1), 1.5)})
    make_zero_((np.ones(2), 0.0))          # already zero: nothing to write
    with pytest.raises(PytreeError, match="in place"):
        make_zero_(1.5)


def _cubic(p):
    return np.sum(p["a"] ** 3) * np.sum(p["b"] ** 2)


def test_hvp_underscore_writes_by_path_not_by_dict_order():
    a, b = np.array([1.0, 2.0]), np.array([3.0, -1.0])
    x, v = {"a": a, "b": b}, {"a": np.array([1.0, 0.0]), "b": np.array([0.0, 1.0])}
    expected = hvp(_cubic, x, v)
    # H v, by hand: d/da = 3a^2 |b|^2, d/db = 2b sum(a^3)
    np.testing.assert_allclose(expected["a"], [6 * 1 * 10 + 3 * 1 * 2 * -1, 3 * 4 * 2 * -1],
                               rtol=1e-12)
    np.testing.assert_allclose(expected["b"], [6 * 3, 6 * -1 + 2 * 9], rtol=1e-12)
    res = {"b": np.zeros(2), "a": np.zeros(2)}       # same keys, another order
    hvp_(res, _cubic, x, v)
    np.testing.assert_allclose(res["a"], expected["a"], rtol=1e-12)
    np.testing.assert_allclose(res["b"], expected["b"], rtol=1e-12)
    res, grad = {"b": np.zeros(2), "a": np.zeros(2)}, {"b": np.zeros(2), "a": np.zeros(2)}
    hvp_and_gradient_(res, grad, _cubic, x, v)
    np.testing.assert_allclose(grad["a"], 3 * a ** 2 * 10, rtol=1e-12)
    np.testing.assert_allclose(grad["b"], 2 * b * 9, rtol=1e-12)


def test_hvp_underscore_takes_make_zero_of_a_tree_with_integer_leaves():
    x = {"w": np.array([1.0, 2.0]), "n": 3, "name": "layer"}
    res = make_zero(x)
    hvp_(res, lambda p: np.sum(p["w"] ** 3) * p["n"], x, {"w": np.ones(2), "n": 0,
                                                          "name": "layer"})
    np.testing.assert_allclose(res["w"], 18 * x["w"], rtol=1e-12)
    assert res["n"] == 3 and res["name"] == "layer"


def test_hvp_underscore_refuses_a_wrong_shape_naming_the_leaf():
    x = {"a": np.ones(2), "b": [np.ones(3)]}
    f = lambda p: np.sum(p["a"] ** 2) * np.sum(p["b"][0] ** 2)     # noqa: E731
    with pytest.raises(ActivityError, match=r"res\['b'\]\[0\] has shape \(4,\)"):
        hvp_({"a": np.zeros(2), "b": [np.zeros(4)]}, f, x, make_zero(x))
    with pytest.raises(ActivityError, match=r"res has shape \(1, 2\)"):   # no broadcasting
        hvp_(np.zeros((1, 2)), lambda a: np.sum(a ** 3), np.ones(2), np.ones(2))
    with pytest.raises(ActivityError, match=r"res\['c'\]"):
        hvp_({"a": np.zeros(2), "c": [np.zeros(3)]}, f, x, make_zero(x))


def _doubles_then_squares(a):
    a *= 2.0
    return a ** 2


@pytest.mark.parametrize("mode", [Reverse, Forward])
@pytest.mark.parametrize("chunk", [None, 1])
def test_jacobian_of_a_function_writing_its_argument_is_taken_at_one_point(mode, chunk):
    a = np.array([1.0, 2.0])
    J, = jacobian(mode, _doubles_then_squares, a, chunk=chunk)
    np.testing.assert_allclose(J, np.diag([8.0, 16.0]), rtol=1e-12)    # d (2a)^2 / da = 8a
    np.testing.assert_array_equal(a, [2.0, 4.0])                        # written once, as f does


def test_forward_gradient_of_several_arguments_is_taken_at_one_point():
    def loss(p, q):
        p *= 2.0
        return np.sum(p ** 2 * q)
    for mode in (Reverse, Forward):
        p, q = np.array([1.0, 2.0]), np.array([1.0, 1.0])
        dp, dq = gradient(mode, loss, p, q)
        np.testing.assert_allclose(dp, [8.0, 16.0], rtol=1e-12)
        np.testing.assert_allclose(dq, [4.0, 16.0], rtol=1e-12)
        np.testing.assert_array_equal(p, [2.0, 4.0])


def test_jacobian_of_a_pytree_writing_a_const_array_is_taken_at_one_point():
    def f(p, scale):
        scale *= 3.0
        return p["w"] * scale
    for mode in (Reverse, Forward):
        scale = np.array([1.0, 2.0])
        J, none = jacobian(mode, f, {"w": np.ones(2), "n": 1}, Const(scale), chunk=1)
        assert none is None and J["n"] is None
        np.testing.assert_allclose(J["w"], np.diag([3.0, 6.0]), rtol=1e-12)
        np.testing.assert_array_equal(scale, [3.0, 6.0])


def test_hessian_of_a_function_writing_its_argument_is_taken_at_one_point():
    def f(a):
        a *= 2.0
        return np.sum(a ** 3)          # 8 sum(a^3): H = 48 diag(a)
    a = np.array([1.0, 2.0])
    np.testing.assert_allclose(hessian(f, a, chunk=1), np.diag([48.0, 96.0]), rtol=1e-12)
    np.testing.assert_array_equal(a, [2.0, 4.0])


@pytest.mark.parametrize("mode", [Reverse, Forward])
def test_errors_name_the_leaf_path_in_both_modes(mode):
    shared = np.ones(2)

    def f(p):
        p["a"][0] = 2.0             # p['b'] is the same array: refused in both modes
        return np.sum(p["b"] ** 2)
    with pytest.raises(ActivityError, match=r"p\['a'\] \(argument 0\) shares memory with "
                                            r"p\['b'\]"):
        gradient(mode, f, {"a": shared, "b": shared, "n": 3})
    with pytest.raises(ActivityError, match=r"p\['a'\] \(argument 0\) shares memory"):
        jacobian(mode, lambda p: f(p) * np.ones(2), {"a": shared, "b": shared}, chunk=1)


def test_forward_passes_let_f_write_an_argument_s_value_into_another_argument():
    # Each forward pass held the other arguments Const, so `q[0] = p[0] * 2` was refused
    # ("argument 1 (`q`) is Const") where gradient(Reverse) accepts the call.
    def f(p, q):
        q[0] = p[0] * 2.0
        return np.sum(q ** 2) + np.sum(p)
    p, q = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    forward = gradient(Forward, f, p.copy(), q.copy())
    reverse = gradient(Reverse, f, p.copy(), q.copy())
    for a, b, want in zip(forward, reverse, ([9.0, 1.0], [0.0, 8.0])):
        np.testing.assert_allclose(a, want, rtol=1e-12)
        np.testing.assert_allclose(b, want, rtol=1e-12)

    def g(p, q):
        q[0] = p[0] * 2.0
        return q * p
    Jp, Jq = jacobian(Forward, g, p.copy(), q.copy())
    np.testing.assert_allclose(Jp, [[4.0, 0.0], [0.0, 4.0]], rtol=1e-12)
    np.testing.assert_allclose(Jq, [[0.0, 0.0], [0.0, 2.0]], rtol=1e-12)
    for got, want in zip(jacobian(Reverse, g, p.copy(), q.copy()), (Jp, Jq)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
