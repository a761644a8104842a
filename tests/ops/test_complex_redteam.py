"""Complex numbers in user code, against NumPy and central differences taken along the real and
the imaginary direction separately (docs/complex.md: the gradient of a real f of z = x + iy is
df/dx + i df/dy)."""
import numpy as np
import pytest

import tape
from tape import Active, Duplicated, Forward, ForwardWithPrimal, Reverse, ReverseWithPrimal, autodiff
from tape.testing import check_grads

rng = np.random.default_rng(21)
Z = rng.standard_normal(4) + 1j * rng.standard_normal(4)
W = rng.standard_normal(4) + 1j * rng.standard_normal(4)


def fd_gradient(f, z, eps=1e-6):
    """df/dx + i df/dy of a real f, entry by entry, by central differences on each part."""
    out = np.zeros(z.shape, dtype=complex)
    for k in np.ndindex(z.shape):
        for unit in (1.0, 1j):
            e = np.zeros(z.shape, dtype=complex)
            e[k] = unit * eps
            out[k] += unit * (f(z + e) - f(z - e)) / (2 * eps)
    return out


# -- np.sign of a complex value is z / |z| (NumPy 2), not a constant --------------------------------
def sign_loss(z):
    return np.sum(np.real(np.sign(z) * W))


def test_sign_of_complex_has_the_derivative_of_z_over_abs_z():
    expected = fd_gradient(sign_loss, Z)
    (g,), value = autodiff(ReverseWithPrimal, sign_loss, Active, Active(Z.copy()))
    np.testing.assert_allclose(g, expected, rtol=1e-6, atol=1e-8)
    assert value == pytest.approx(sign_loss(Z), rel=1e-14)
    tangent, primal = autodiff(ForwardWithPrimal, np.sign, Duplicated(Z.copy(), W.copy()))
    np.testing.assert_allclose(primal, np.sign(Z), rtol=1e-15, atol=1e-15)
    assert primal.dtype == np.complex128
    np.testing.assert_allclose(tangent, (np.sign(Z + 1e-6 * W) - np.sign(Z - 1e-6 * W)) / 2e-6,
                               rtol=1e-6, atol=1e-8)
    compiled = tape.compile(Reverse, sign_loss, Active, Active)
    for _ in range(2):   # the trace, then the replay
        np.testing.assert_allclose(compiled(Active(Z.copy()))[0][0], expected, rtol=1e-6,
                                   atol=1e-8)
    check_grads(lambda z: np.sign(z) * z, Z)


def test_sign_conventions_at_zero_and_for_real_input():
    z = np.array([0j, 1 + 1j], dtype=np.complex64)
    (g,), = autodiff(Reverse, lambda z: np.sum(np.real(np.sign(z))), Active, Active(z))
    assert g[0] == 0 and g.dtype == np.complex64
    (g,), value = autodiff(ReverseWithPrimal, lambda x: np.sum(np.sign(x) * x), Active,
                           Active(np.array([-2.0, 0.0, 3.0])))
    np.testing.assert_array_equal(g, [-1.0, 0.0, 1.0])
    assert value == 5.0


# -- np.linalg.norm(z, 0) counts in the real dtype, as NumPy does ---------------------------------
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
@pytest.mark.parametrize("norm", [lambda v: np.linalg.norm(v, 0),
                                  lambda v: np.linalg.vector_norm(v, ord=0)],
                         ids=["norm", "vector_norm"])
def test_zero_norm_of_complex_input_is_real(norm, dtype):
    z = np.array([1j, 0, 2 + 1j], dtype=dtype)
    expected = norm(z)
    _, value = autodiff(ForwardWithPrimal, norm, Duplicated(z.copy(), np.ones_like(z)))
    assert value == expected and value.dtype == expected.dtype
    # A real result, so it is a valid loss in reverse mode (the count has no derivative).
    (g,), value = autodiff(ReverseWithPrimal, lambda v: norm(v) * np.sum(np.abs(v)), Active,
                           Active(z.copy()))
    assert value == pytest.approx(expected * np.sum(np.abs(z)), rel=1e-6)
    np.testing.assert_allclose(g, 2 * z / np.where(z == 0, 1, np.abs(z)), rtol=1e-6)


# -- np.median of complex input (NumPy takes it; quantile and percentile refuse it) --------------
@pytest.mark.parametrize("median", [np.median, np.nanmedian])
def test_median_of_complex_values(median):
    for z in (Z, np.append(Z, 0.5 - 2j)):   # even and odd counts
        loss = lambda v: np.abs(median(v)) ** 2   # noqa: E731
        (g,), value = autodiff(ReverseWithPrimal, loss, Active, Active(z.copy()))
        assert value == pytest.approx(loss(z), rel=1e-14)
        np.testing.assert_allclose(g, fd_gradient(loss, z), rtol=1e-6, atol=1e-8)
    _, value = autodiff(ForwardWithPrimal, median, Duplicated(Z.astype(np.complex64),
                                                               np.ones(4, np.complex64)))
    assert value == median(Z.astype(np.complex64)) and value.dtype == np.complex64


@pytest.mark.parametrize("quantile", [np.quantile, np.nanquantile, np.percentile,
                                      np.nanpercentile])
def test_quantiles_of_complex_values_are_refused_as_in_numpy(quantile):
    with pytest.raises(TypeError, match="real numbers"):
        autodiff(ForwardWithPrimal, lambda v: quantile(v, 0.5), Duplicated(Z.copy(), W.copy()))


@pytest.mark.parametrize("name", ["sqrt", "log", "log2", "log10", "arccos", "arcsin", "arctanh",
                                  "power", "logn"])
@pytest.mark.parametrize("x", [np.array([-0.5, 0.3, 0.7]), np.array([0.2, 0.5]),
                               np.array([-2.0, 1.5]), np.array([0.3, 0.6], np.float32)],
                         ids=["mixed", "inside", "beyond-one", "float32"])
def test_numpy_emath_on_traced_values_matches_numpy_and_finite_differences(name, x):
    # np.emath had no rules ("no derivative rule for numpy.sqrt"); beyond |x| = 1 arcsin and
    # arccos take the real-line derivative of NumPy's branch, not the complex function's
    fn = getattr(np.emath, name)
    call = {"power": lambda v: fn(v, 3.0), "logn": lambda v: fn(3.0, v)}.get(name, fn)
    with np.errstate(all="ignore"):
        want = call(x)
        tangent, value = autodiff(ForwardWithPrimal, call, Duplicated(x.copy(), np.ones_like(x)))
        assert np.asarray(value).dtype == want.dtype
        np.testing.assert_allclose(value, want, rtol=1e-6)
        if x.dtype != np.float64:
            return
        loss = lambda v: np.sum(np.real(call(v)) + 2.0 * np.imag(call(v)))   # noqa: E731
        (grad,), = autodiff(Reverse, loss, Active, Active(x.copy()))
        h = 1e-6
        fd = np.array([(loss(x + h * e) - loss(x - h * e)) / (2 * h) for e in np.eye(x.size)])
        np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(tangent, (call(x + h) - call(x - h)) / (2 * h), rtol=1e-5,
                                   atol=1e-7)


@pytest.mark.parametrize("fn", [np.arcsin, np.arccos, np.arccosh])
@pytest.mark.parametrize("x0", [1.5, -2.0, 3.0, -1.2, 0.5, 0.3 + 0.4j, -2 + 0.5j])
def test_inverse_trig_tangent_on_and_off_the_branch_cut(fn, x0):
    # On the cut (real z beyond 1, zero imaginary part) NumPy's value is that of one side;
    # the tangent along the real line came with the other side's sign.
    z = np.array([complex(x0)])
    tangent, = autodiff(Forward, fn, Duplicated(z, np.ones_like(z)))
    h = 1e-7
    np.testing.assert_allclose(tangent, (fn(z + h) - fn(z - h)) / (2 * h), rtol=1e-5)
