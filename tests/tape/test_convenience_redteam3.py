"""Convenience API (gradient, gradient_, jacobian, hvp, hessian): layouts against finite
differences, and the two modes agreeing on types, dtypes and errors."""
from collections import namedtuple

import numpy as np
import pytest

from tape import (Forward, Reverse, gradient, gradient_, hessian, hvp, hvp_, jacobian)
from tape.errors import ActivityError

MODES = [Forward, Reverse]


def _fd_jacobian(f, x, eps=1e-6):
    """Central differences of f at array x, shaped out.shape + x.shape."""
    x = np.asarray(x, dtype=float)
    y0 = np.asarray(f(x.copy()))
    J = np.zeros(y0.shape + x.shape)
    for j in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[j] += eps
        xm[j] -= eps
        J[(...,) + j] = (np.asarray(f(xp)) - np.asarray(f(xm))) / (2 * eps)
    return J


def _close(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-8)


# --------------------------------------------------------------------------------------------
# Passing checks


def _outer_squared(x):
    return np.outer(x[0], x[1]) ** 2


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("chunk", [1, 2, 4, None])
def test_jacobian_of_a_matrix_function_of_a_matrix_is_out_shape_plus_in_shape(mode, chunk):
    x = np.arange(1.0, 7.0).reshape(2, 3)
    J = jacobian(mode, _outer_squared, x, chunk=chunk)[0]
    assert J.shape == (3, 3, 2, 3)
    _close(J, _fd_jacobian(_outer_squared, x))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("chunk", [2, None])
def test_jacobian_of_a_fortran_ordered_argument(mode, chunk):
    a = np.asfortranarray(np.arange(6.0).reshape(2, 3))

    def f(a):
        return a.ravel() * np.arange(1.0, 7.0) + np.sin(a[:, 0]).sum()
    _close(jacobian(mode, f, a, chunk=chunk)[0], _fd_jacobian(f, a))


P = namedtuple("P", "m k")


def _tree():
    return {"z": [np.array([1.0, 2.0, 3.0]), 0.5],
            "a": P(np.array([[1.0, -1.0], [2.0, 0.3]]), 4),
            "t": (1.5, np.array([0.2, 0.7]))}


def _tree_f(p):
    w, s = p["z"]
    t0, t1 = p["t"]
    M = p["a"].m
    return np.concatenate([w * s ** 2 * t0, (M @ w[:2]) * p["a"].k, np.sin(M).ravel(),
                           t1 ** 3 * t0])


def _fd_leaf(get, put, eps=1e-6):
    """Differences of _tree_f along one float leaf: get(p) reads it, put(p, v) replaces it."""
    base = np.asarray(get(_tree()), dtype=float)
    J = np.zeros((11,) + base.shape)
    for j in np.ndindex(base.shape):
        cols = []
        for step in (eps, -eps):
            p, v = _tree(), base.copy()
            v[j] += step
            p = put(p, v if base.shape else float(v))
            cols.append(_tree_f(p))
        J[(...,) + j] = (cols[0] - cols[1]) / (2 * eps)
    return J


def _put_z0(p, v):
    p["z"][0] = v
    return p


def _put_z1(p, v):
    p["z"][1] = v
    return p


def _put_m(p, v):
    p["a"] = P(v, p["a"].k)
    return p


def _put_t0(p, v):
    p["t"] = (v, p["t"][1])
    return p


def _put_t1(p, v):
    p["t"] = (p["t"][0], v)
    return p


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("chunk", [1, 4, 5, None])   # 4 and 5 do not divide the 14 entries
def test_jacobian_of_a_nested_tree_with_tuple_and_integer_leaves_matches_differences(mode,
                                                                                     chunk):
    J = jacobian(mode, _tree_f, _tree(), chunk=chunk)[0]
    assert J["a"].k is None
    _close(J["z"][0], _fd_leaf(lambda p: p["z"][0], _put_z0))
    _close(J["z"][1], _fd_leaf(lambda p: p["z"][1], _put_z1))
    _close(J["a"].m, _fd_leaf(lambda p: p["a"].m, _put_m))
    _close(J["t"][0], _fd_leaf(lambda p: p["t"][0], _put_t0))
    _close(J["t"][1], _fd_leaf(lambda p: p["t"][1], _put_t1))
    assert J["t"][1].shape == (11, 2) and J["a"].m.shape == (11, 2, 2)


@pytest.mark.parametrize("mode", MODES)
def test_jacobian_of_a_complex_scalar_argument_is_d_re_plus_1j_d_im(mode):
    def f(z):
        return np.array([z.real * z.imag, abs(z) ** 2])
    z = 1.0 + 2.0j
    # d/dRe = [Im, 2 Re] = [2, 2], d/dIm = [Re, 2 Im] = [1, 4]
    _close(jacobian(mode, f, z)[0], np.array([2.0 + 1.0j, 2.0 + 4.0j]))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("chunk", [3, None])
def test_wide_and_tall_jacobians_with_a_chunk_not_dividing_the_size(mode, chunk):
    x = np.linspace(1.0, 2.0, 13)
    wide = jacobian(mode, lambda a: np.array([np.sum(a ** 2), np.prod(a[:3])]), x,
                    chunk=chunk)[0]
    _close(wide[0], 2 * x)
    _close(wide[1], np.r_[x[1] * x[2], x[0] * x[2], x[0] * x[1], np.zeros(10)])
    c = np.arange(1.0, 14.0)
    tall = jacobian(mode, lambda a: np.outer(c, a).ravel(), np.array([1.0, 2.0]),
                    chunk=chunk)[0]
    _close(tall, np.kron(c[:, None], np.eye(2)))


# --------------------------------------------------------------------------------------------
# Findings


def test_gradient_underscore_refusing_an_aliased_shadow_leaves_x_unchanged():
    x = np.array([1.0, 2.0])
    with pytest.raises(ActivityError, match="shares memory"):
        gradient_(Reverse, x, lambda x: np.sum(x ** 2), x)
    np.testing.assert_array_equal(x, [1.0, 2.0])


@pytest.mark.xfail(strict=True, reason="reverse-mode jacobian of a scalar argument builds "
                   "the zero Jacobian of a constant result with np.zeros: float64 and a 0-d "
                   "array, where forward mode keeps the argument's type and dtype")
def test_reverse_jacobian_of_a_scalar_argument_keeps_its_type_for_constant_results():
    for f, x in [(lambda s: np.arange(3), np.float32(2.0)),
                 (lambda s: np.zeros(0, np.float32) * s, np.float32(2.0)),
                 (lambda s: 3, 2.0)]:
        fwd, rev = jacobian(Forward, f, x)[0], jacobian(Reverse, f, x)[0]
        assert type(rev) is type(fwd) and np.result_type(rev) == np.result_type(fwd)


@pytest.mark.xfail(strict=True, reason="gradient(Reverse) of a constant result at a "
                   "np.float32 argument returns a 0-d array, not a NumPy scalar as "
                   "gradient(Forward) and a non-constant result give")
def test_reverse_gradient_of_a_constant_at_a_numpy_scalar_is_a_numpy_scalar():
    g = gradient(Reverse, lambda s: 3, np.float32(2.0))[0]
    assert isinstance(g, np.float32)


def _outcome(thunk):
    try:
        return ("value", thunk())
    except ActivityError:
        return ("error", None)


def test_gradient_modes_agree_on_a_numpy_bool_result():
    x = np.ones(2)
    kinds = [_outcome(lambda: gradient(m, lambda s: np.sum(s) > 0, x))[0] for m in MODES]
    assert kinds[0] == kinds[1]


@pytest.mark.parametrize("mode", MODES)
def test_jacobian_error_for_a_bool_result_does_not_call_it_a_pytree(mode):
    with pytest.raises(ActivityError) as e:
        jacobian(mode, lambda s: bool(s[0] > 0), np.ones(2))
    assert "pytree" not in str(e.value)


def test_gradient_underscore_of_an_integer_result_is_zero_like_gradient():
    x = np.array([1.0, 2.0])
    f = lambda x: np.sum(x).astype(int)
    np.testing.assert_array_equal(gradient(Reverse, f, x)[0], 0.0)
    dx = gradient_(Reverse, np.ones(2), f, x)
    np.testing.assert_array_equal(dx, 0.0)


def _cubic(p):
    return p["a"] ** 2 * np.sum(p["b"] ** 3) + p["a"] * p["b"][0]


def test_hvp_takes_a_direction_with_another_key_order():
    p = {"a": 1.5, "b": np.array([1.0, 2.0])}
    want = hvp(_cubic, p, {"a": 1.0, "b": np.array([1.0, 0.0])})
    res = hvp_({"b": np.zeros(2), "a": 0.0}, _cubic, p, {"a": 1.0, "b": np.array([1.0, 0.0])})
    _close(res["b"], want["b"])            # res in another order is fine
    got = hvp(_cubic, p, {"b": np.array([1.0, 0.0]), "a": 1.0})
    _close(got["b"], want["b"])
    _close(got["a"], want["a"])


def test_hessian_chunk_is_keyword_only():
    def f(x, y=1.0):
        return np.sum(x ** 3) * y
    with pytest.raises(TypeError):
        hessian(f, np.array([1.0, 2.0]), 3)


@pytest.mark.xfail(strict=True, reason="jacobian(ReverseWithPrimal) returns f's raw result "
                   "(a 0-d array) as val, jacobian(ForwardWithPrimal) and gradient a float")
def test_jacobian_with_primal_modes_agree_on_the_type_of_val():
    from tape import ForwardWithPrimal, ReverseWithPrimal
    f = lambda x: np.asarray(np.sum(x ** 2))
    x = np.array([1.0, 2.0])
    fwd = jacobian(ForwardWithPrimal, f, x).val
    rev = jacobian(ReverseWithPrimal, f, x).val
    assert fwd == rev == 5.0
    assert type(fwd) is type(rev)


def test_hvp_still_refuses_a_direction_of_another_structure():
    p = [1.5, np.array([1.0, 2.0])]
    with pytest.raises(ActivityError, match="structure"):
        hvp(lambda p: p[0] ** 2 * np.sum(p[1] ** 3), p, (1.0, np.array([1.0, 0.0])))
    with pytest.raises(ActivityError, match="structure"):
        hvp(_cubic, {"a": 1.5, "b": np.array([1.0, 2.0])}, {"a": 1.0, "c": np.array([1.0, 0.0])})
