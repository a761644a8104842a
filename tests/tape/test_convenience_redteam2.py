"""Red team (round 2) of the convenience API on user pytrees: gradient, jacobian, hessian, hvp,
hvp_, hvp_and_gradient_, gradient_, make_zero_ and onehot, against central finite differences
in float64 and against autodiff itself. The findings are fixed: strong zero and the NaN check
kept by gradient/jacobian, destinations that would cut the result refused, 0-d arrays, errors
that name the argument, the leaf or the registered class, the reverse Jacobian's writes into
other arguments, and integer results."""
import dataclasses
import warnings

import numpy as np
import pytest

import tape
from tape import (ActivityError, Active, Const, Duplicated, Forward, NaNError, Reverse,
                  autodiff, gradient, gradient_, hessian, hvp, hvp_, hvp_and_gradient_,
                  jacobian, make_zero, make_zero_, onehot, set_nan_check, set_strong_zero)
from tape.pytree import flatten, unflatten


# --------------------------------------------------------------------------------------------
# Helpers: central differences over the float entries of a pytree (each leaf in C order)


def _float_slots(tree):
    return [k for k, v in enumerate(flatten(tree)[0])
            if not isinstance(v, (bool, int)) and np.asarray(v).dtype.kind == "f"]


def _shifted(tree, k, j, step):
    leaves, td = flatten(tree)
    leaves = [np.array(v, order="C") if isinstance(v, np.ndarray) else v for v in leaves]
    if isinstance(leaves[k], np.ndarray):
        leaves[k].reshape(-1)[j] += step
    else:
        leaves[k] = type(leaves[k])(leaves[k] + step)
    return unflatten(td, leaves)


def _numeric_jacobian(f, tree, eps=1e-6):
    """(out.size, n) over the n float entries, in onehot order."""
    leaves = flatten(tree)[0]
    cols = []
    for k in _float_slots(tree):
        for j in range(int(np.size(leaves[k]))):
            hi = np.asarray(f(_shifted(tree, k, j, eps)), dtype=float)
            lo = np.asarray(f(_shifted(tree, k, j, -eps)), dtype=float)
            cols.append(((hi - lo) / (2 * eps)).reshape(-1))
    return np.stack(cols, axis=-1)


def _flat(derivs, rows=1):
    """A derivative pytree (None where there is no float leaf) as (rows, n)."""
    return np.concatenate([np.reshape(np.asarray(v, dtype=float), (rows, -1))
                           for v in flatten(derivs)[0]], axis=1)


# --------------------------------------------------------------------------------------------
# Passing coverage: frozen dataclasses and both kinds of registered classes, every function


@dataclasses.dataclass(frozen=True)
class Frozen:
    w: np.ndarray
    b: float
    n: int = 3


class ByFields:
    def __init__(self, w, b):
        self.w, self.b = w, b


class ByFunctions:
    def __init__(self, w, b):
        self.w, self.b = w, b


tape.register_pytree(ByFields, fields=("w", "b"))
tape.register_pytree(ByFunctions, lambda o: ((o.w, o.b), None),
                     lambda aux, kids: ByFunctions(*kids))


def _loss(p):
    return np.sum(np.sin(p.w) ** 2) * p.b ** 2


@pytest.mark.parametrize("cls", [Frozen, ByFields, ByFunctions])
def test_every_function_on_frozen_and_registered_classes_matches_differences(cls):
    w = np.array([[0.3, -1.2], [0.7, 0.1]]).T          # a non-contiguous leaf
    p = cls(w, 1.5)
    want = _numeric_jacobian(_loss, p)[0]
    for mode in (Reverse, Forward):
        (g,) = gradient(mode, _loss, p)
        assert type(g) is cls
        np.testing.assert_allclose(_flat(g)[0], want, rtol=1e-7, atol=1e-9)
        (J,) = jacobian(mode, lambda p: np.stack([_loss(p), p.b * p.w[0, 1]]), p, chunk=1)
        np.testing.assert_allclose(_flat(J, 2), _numeric_jacobian(
            lambda p: np.stack([_loss(p), p.b * p.w[0, 1]]), p), rtol=1e-7, atol=1e-9)
    H = hessian(_loss, p)
    H_fd = _numeric_jacobian(lambda q: _flat(gradient(Reverse, _loss, q)[0])[0], p)
    np.testing.assert_allclose(H, H_fd, rtol=1e-6, atol=1e-8)
    v = onehot(p)[2]
    np.testing.assert_allclose(_flat(hvp(_loss, p, v))[0], H[:, 2], rtol=1e-12, atol=1e-14)


def test_modes_agree_on_a_nested_tree_of_every_leaf_kind_for_each_chunk():
    p = {"a": 0.5, "b": [np.float32(1.5), np.array(0.3), np.array([[1.0], [2.0]])[::-1]],
         "c": (2.0, 3), "d": None, "e": "tag"}

    def f(p):
        a, (b0, b1, b2), (c, n) = p["a"], p["b"], p["c"]
        return np.stack([a * b0 * c, np.sin(b1) * n * a, np.sum(b2) * a ** 2])
    want = _numeric_jacobian(f, p, eps=1e-3)     # (b0 is float32: a wide step, loose check)
    for mode in (Reverse, Forward):
        for chunk in (None, 2):
            (J,) = jacobian(mode, f, p, chunk=chunk)
            assert J["c"][1] is None and J["d"] is None and J["e"] == "tag"
            assert J["b"][0].dtype == np.float32 and J["b"][2].shape == (3, 2, 1)
            np.testing.assert_allclose(_flat(J, 3), want, rtol=1e-4, atol=1e-6)


# --------------------------------------------------------------------------------------------
# Findings: mode modifiers are dropped by the convenience functions


def _sqrt_at_zero(x):
    return x[0] * np.sqrt(x[1])        # d/dx0 = sqrt(x1) = 0 at x1 = 0; IEEE forward: 0 * inf


def test_forward_gradient_and_jacobian_keep_strong_zero():
    x = np.array([1.0, 0.0])
    mode = set_strong_zero(Forward)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        (one,) = autodiff(mode, _sqrt_at_zero, Duplicated(x, np.array([1.0, 0.0])))
        assert one == 0.0                                  # what the mode asks for
        (g,) = gradient(mode, _sqrt_at_zero, x)
        (J,) = jacobian(mode, _sqrt_at_zero, x)
    assert g[0] == 0.0 and J[0] == 0.0                    # today: nan


def test_reverse_jacobian_keeps_strong_zero():
    x = np.array([0.0, 2.0])
    mode = set_strong_zero(Reverse)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        (row0,) = gradient(mode, lambda x: np.minimum(1.0, 1.0 / x)[0], x)
        (J,) = jacobian(mode, lambda x: np.minimum(1.0, 1.0 / x), x)
    np.testing.assert_array_equal(row0, [0.0, 0.0])
    np.testing.assert_array_equal(J, [[0.0, 0.0], [0.0, -0.25]])   # today: [[nan, 0], ...]


def test_reverse_jacobian_keeps_nan_check():
    x = np.array([0.0, 2.0])
    mode = set_nan_check(Reverse)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(NaNError):
            gradient(mode, lambda x: np.sum(np.minimum(1.0, 1.0 / x)), x)
        with pytest.raises(NaNError):
            jacobian(mode, lambda x: np.minimum(1.0, 1.0 / x), x)


# --------------------------------------------------------------------------------------------
# Findings: hvp_ / hvp_and_gradient_ write into integer destinations by truncation


def _cube(x):
    return np.sum(x ** 3)       # grad 3 x^2, H v = 6 x v


def test_hvp_underscore_refuses_an_integer_res_array():
    with pytest.raises(ActivityError, match=r"res.*dtype int"):
        hvp_(np.zeros(2, dtype=int), _cube, np.array([1.0, 2.0]), np.array([0.25, 0.25]))


def test_hvp_underscore_refuses_an_integer_number_leaf_where_the_result_is_float():
    p = {"a": np.array([1.0, 2.0]), "b": 0.5}
    v = {"a": np.array([0.25, 0.25]), "b": 0.0}
    f = lambda p: np.sum(p["a"] ** 3) * p["b"]                       # noqa: E731
    with pytest.raises(ActivityError, match=r"res\['b'\]"):
        hvp_({"a": np.zeros(2), "b": 0}, f, p, v)


def test_hvp_and_gradient_underscore_refuses_an_integer_grad():
    res, grad = np.zeros(2), np.zeros(2, dtype=int)
    with pytest.raises(ActivityError, match=r"grad.*dtype int"):
        hvp_and_gradient_(res, grad, _cube, np.array([0.5, 1.5]), np.array([0.25, 0.25]))


def test_hvp_underscore_refuses_a_real_res_for_a_complex_result():
    f = lambda z: np.sum(np.abs(z) ** 2 * z.real)                    # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ActivityError, match=r"res.*complex"):
            hvp_(np.zeros(2), f, np.array([1 + 1j, 2j]), np.array([1 + 1j, 1j]))


# --------------------------------------------------------------------------------------------
# Findings: 0-d arrays and read-only destinations


def test_onehot_of_a_zero_d_array_gives_zero_d_arrays():
    (e,) = onehot(np.array(2.0))
    assert isinstance(e, np.ndarray) and e.shape == () and e == 1.0
    (e,) = onehot({"a": np.array(2.0)})
    assert isinstance(e["a"], np.ndarray)


def test_reverse_duplicated_zero_d_array_with_a_scalar_shadow_is_refused_clearly():
    with pytest.raises(ActivityError, match=r"argument 0.*shadow"):
        autodiff(Reverse, lambda x: x ** 3, Active, Duplicated(np.array(2.0), np.float64(0.0)))


def _read_only(shape):
    a = np.zeros(shape)
    a.flags.writeable = False
    return a


def test_gradient_underscore_refuses_a_read_only_shadow_clearly():
    with pytest.raises(ActivityError, match=r"read-only"):
        gradient_(Reverse, _read_only(2), _cube, np.array([1.0, 2.0]))


def test_hvp_underscore_refuses_a_read_only_res_clearly():
    with pytest.raises(ActivityError, match=r"res.*read-only"):
        hvp_(_read_only(2), _cube, np.array([1.0, 2.0]), np.ones(2))


# --------------------------------------------------------------------------------------------
# Findings: errors that do not name the argument or the leaf


def test_reverse_jacobian_names_a_pytree_leaf_by_its_path():
    p = {"w": np.array([1.0, 2.0]), "m": np.ma.array([1.0, 2.0])}
    with pytest.raises(ActivityError, match=r"p\['m'\]"):
        jacobian(Forward, lambda p: p["w"] * p["m"], p)       # (Forward already does)
    with pytest.raises(ActivityError, match=r"p\['m'\]"):
        jacobian(Reverse, lambda p: p["w"] * p["m"], p)


def test_reverse_jacobian_lets_f_write_into_another_argument():
    def f(x, q):
        q[0] = x[0]
        return x * 2 + q
    x = np.array([1.0, 2.0])
    want = jacobian(Forward, f, x, np.zeros(2))
    for chunk in (None, 1):        # (one reverse pass per row: each starts from zero shadows)
        got = jacobian(Reverse, f, x, np.zeros(2), chunk=chunk)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("mode", [Reverse, Forward])
def test_unsupported_leaf_type_error_names_the_argument(mode):
    class Opaque:
        pass

    def f(x, p):
        return np.sum(x) * p["w"][1]
    with pytest.raises(tape.PytreeError, match=r"p\['w'\]\[2\]|args\[1\]\['w'\]\[2\]"):
        gradient(mode, f, np.ones(2), {"w": [1.0, 2.0, Opaque()]})


def test_gradient_of_an_integer_result_agrees_between_modes():
    f = lambda x: np.sum(x).astype(int)                              # noqa: E731
    x = np.array([1.5, 2.0])
    np.testing.assert_array_equal(gradient(Forward, f, x)[0], [0.0, 0.0])
    np.testing.assert_array_equal(jacobian(Reverse, f, x)[0], [0.0, 0.0])
    np.testing.assert_array_equal(gradient(Reverse, f, x)[0], [0.0, 0.0])


def test_make_zero_underscore_names_the_registered_class_it_cannot_write():
    s = ByFunctions(np.ones(2), 9.0)
    with pytest.raises(tape.PytreeError, match=r"ByFunctions"):
        make_zero_(s)
    np.testing.assert_array_equal(s.w, [1.0, 1.0])      # refused before anything is written
    with pytest.raises(tape.PytreeError, match=r"dx\[1\].*ByFunctions"):
        gradient_(Reverse, ByFunctions(np.zeros(2), 0.0), _loss, ByFunctions(np.ones(2), 2.0))


def test_make_zero_and_const_leave_integer_static_and_none_leaves():
    # (new coverage) make_zero keeps int numbers, strings and None; Const arguments give None
    z = make_zero({"b": 2, "c": np.float32(3), "d": None, "e": "s"})
    assert z["b"] == 2 and z["d"] is None and z["e"] == "s"
    assert z["c"] == 0 and type(z["c"]) is np.float32
    for mode in (Reverse, Forward):
        g = gradient(mode, lambda x, c: np.sum(x * c["k"]), np.array([1.0, 2.0]),
                     Const({"k": np.array([3.0, 4.0])}))
        assert g[1] is None
        np.testing.assert_allclose(g[0], [3.0, 4.0], rtol=1e-15)
