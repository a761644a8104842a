"""np.prod's first derivative divides the product by each entry when every product is a
finite nonzero normal number, and otherwise takes the products of the other entries from two
scans. Both paths must give the products of the other entries (plain NumPy, np.delete) at
zeros, infinities, NaN, subnormal entries, extreme scales and complex values, in reverse and
forward mode, eagerly and compiled; the Hessian keeps the scans."""
import numpy as np
import pytest

import tape
from tape import Active, Const, Duplicated, Forward, Reverse, autodiff

TINY = np.finfo(np.float64).tiny
CASES = {
    "plain": [0.7, -1.3, 2.1, 0.4],
    "one zero": [0.7, 0.0, 2.1, 0.4],
    "two zeros": [0.0, -1.3, 0.0, 0.4],
    "inf": [0.7, np.inf, 2.1, 0.4],
    "nan": [0.7, np.nan, 2.1, 0.4],
    "subnormal entry, normal product": [1e-310, 1e300, 3.0, 0.5],
    "product underflows": [1e-200, 1e-200, 3.0, 0.5],
    "product near underflow": [1e-154, 1e-154, 1.5, 1.0],
    "product overflows, others do not": [1e200, 1e200, 1e-100, 2.0],
    "others overflow": [1e-300, 1e200, 1e200, 1.0],
    "complex": [0.7 + 0.2j, -1.3 - 1j, 2.1j, 0.4],
}


def others(x):
    """The product of the other entries, entry by entry (plain NumPy)."""
    return np.array([np.prod(np.delete(x, i)) for i in range(x.size)])


def close(got, expected):
    np.testing.assert_allclose(got, expected, rtol=1e-13, atol=0.0, equal_nan=True)


@pytest.mark.parametrize("name", list(CASES))
def test_gradient_of_prod_is_the_product_of_the_others(name):
    x = np.array(CASES[name])
    expected = others(x)
    if np.iscomplexobj(x):    # the gradient of a holomorphic f is conj(f'(x))
        (g,), = autodiff(Reverse, lambda v: np.real(np.prod(v)), Active, Active(x))
        close(g, np.conj(expected))
        return
    (g,), = autodiff(Reverse, np.prod, Active, Active(x))
    close(g, expected)
    compiled = tape.compile(Reverse, np.prod, Active, Active)
    close(compiled(Active(x))[0][0], expected)
    if not np.all(np.isfinite(expected)):
        return   # forward mode sums t * others: 0 * inf is NaN by default (times_partial)
    for i in range(x.size):   # forward mode, one basis tangent at a time
        t = np.zeros_like(x)
        t[i] = 1.0
        close(autodiff(Forward, np.prod, Duplicated(x, t))[0], expected[i])


@pytest.mark.parametrize("axis", [0, 1, None, (0, 1)])
def test_prod_along_axes_with_a_zero_in_one_slice(axis):
    x = np.array([[0.5, 2.0, -1.5], [0.0, 3.0, 0.25]])
    w = np.array([[1.0, -2.0, 0.5], [0.3, 0.7, -1.1]])

    def f(a, w):
        return np.sum(np.prod(a, axis=axis, keepdims=True) * np.ones_like(w) * w)

    (g, _), = autodiff(Reverse, f, Active, Active(x), Const(w))
    eps = 1e-6
    fd = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        fd[i] = (f(x + d, w) - f(x - d, w)) / (2 * eps)
    np.testing.assert_allclose(g, fd, rtol=1e-8, atol=1e-10)


def test_hessian_of_prod_without_zeros():
    # Off the diagonal: products of the entries other than i and j; on it, zero.
    x = np.array([0.7, -1.3, 2.1, 0.4])
    h = tape.hessian(np.prod, x)
    expected = np.array([[0.0 if i == j else np.prod(np.delete(x, [i, j]))
                          for j in range(4)] for i in range(4)])
    np.testing.assert_allclose(h, expected, rtol=1e-13, atol=1e-15)


# -- cumprod: gx[i] = sum_{k >= i} g[k] prod_{j <= k, j != i} x[j], by division when safe ------
def cumprod_gradient(x, g):
    """The reverse of np.cumprod, term by term (plain NumPy, no division)."""
    return np.array([sum(g[k] * np.prod(np.delete(x[:k + 1], i)) for k in range(i, x.size))
                     for i in range(x.size)])


CUMPROD_CASES = {
    "plain": ([0.7, -1.3, 2.1, 0.4, 1.1], [1.0, -2.0, 0.5, 0.3, 1.5]),
    "one zero": ([0.7, 0.0, 2.1, 0.4, 1.1], [1.0, -2.0, 0.5, 0.3, 1.5]),
    "wide range": ([1e300, 1e-300, 3.0, 1e-5, 2.0], [1.0, -2.0, 0.5, 0.3, 1.5]),
    # g[1] y[1] = 1e-100 * 1e-300 underflows; the term it stands for, g[1] x[0], is 1e-250
    "weighted terms underflow": ([1e-150, 1e-150, 1e150, 1.0, 2.0],
                                 [1e-30, 1e-100, 0.0, 0.0, 0.0]),
    # g[1] y[1] = 1e30 * 1e300 overflows; the term it stands for, g[1] x[0], is 1e180
    "weighted terms overflow": ([1e150, 1e150, 1e-150, 1.0, 2.0], [1.0, 1e30, 1.0, 1.0, 1.0]),
    "cancelling cotangent": ([0.5, 2.0, 1.0, 4.0, 0.25], [1.0, -0.25, -0.25, 0.0, 0.0]),
    "zero cotangent entries": ([0.7, -1.3, 2.1, 0.4, 1.1], [0.0, 0.0, 0.5, 0.0, 1.5]),
}


@pytest.mark.parametrize("name", list(CUMPROD_CASES))
def test_gradient_of_cumprod_matches_the_termwise_sum(name):
    x, w = (np.array(v) for v in CUMPROD_CASES[name])
    expected = cumprod_gradient(x, w)
    (g, _), = autodiff(Reverse, lambda a, w: np.sum(np.cumprod(a) * w), Active, Active(x),
                       Const(w))
    np.testing.assert_allclose(g, expected, rtol=1e-13, atol=1e-300)
    # reversed: the same scan from the other end
    (g, _), = autodiff(Reverse, lambda a, w: np.sum(np.cumprod(a[::-1])[::-1] * w), Active,
                       Active(x), Const(w))
    np.testing.assert_allclose(g, cumprod_gradient(x[::-1], w[::-1])[::-1], rtol=1e-13,
                               atol=1e-300)


def test_cumprod_gradient_along_each_axis_of_a_matrix():
    rng = np.random.default_rng(3)
    x = rng.uniform(0.5, 1.5, (4, 6)) * rng.choice([-1.0, 1.0], (4, 6))
    w = rng.standard_normal((4, 6))
    for axis in (0, 1):
        (g, _), = autodiff(Reverse, lambda a, w: np.sum(np.cumprod(a, axis=axis) * w), Active,
                           Active(x), Const(w))
        expected = np.moveaxis(np.array([cumprod_gradient(xs, ws) for xs, ws in zip(
            np.moveaxis(x, axis, -1).reshape(-1, x.shape[axis]),
            np.moveaxis(w, axis, -1).reshape(-1, x.shape[axis]))]).reshape(
            np.moveaxis(x, axis, -1).shape), -1, axis)
        np.testing.assert_allclose(g, expected, rtol=1e-12)
        h = tape.hessian(lambda a: np.sum(np.cumprod(a, axis=axis) * w), x)   # the scans
        assert np.all(np.isfinite(h))
