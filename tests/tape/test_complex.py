"""Complex numbers: Enzyme.jl's conventions (docs/complex.md), checked against finite differences
on real and imaginary parts, in reverse, forward and holomorphic modes, for every complex-capable
op family."""
import numpy as np
import pytest

from tape import (Active, ActivityError, Const, Duplicated, Forward, Reverse,
                  ReverseHolomorphic, ReverseHolomorphicWithPrimal, ReverseSplitNoPrimal,
                  ReverseWithPrimal, autodiff, autodiff_thunk, custom_rule)
from tape.testing import GradientCheckError, check_grads

rng = np.random.default_rng(7)


def crandn(*shape):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


Z, W = crandn(3), crandn(3)
A, B = crandn(3, 3), crandn(3, 2)


def grad(f, *args, mode=Reverse):
    derivs, = autodiff(mode, f, Active, *[Active(a) for a in args])
    return derivs


def fd_gradient(f, z, eps=1e-6):
    """df/dx + i df/dy for a real f, entry by entry, by central differences on each part."""
    z = np.asarray(z, dtype=complex)
    out = np.zeros(z.shape, dtype=complex)
    for k in np.ndindex(z.shape):
        for unit in (1.0, 1j):
            e = np.zeros(z.shape, dtype=complex)
            e[k] = unit * eps
            out[k] += unit * (f(z + e) - f(z - e)) / (2 * eps)
    return out


# -- the conventions, on Enzyme.jl's own example (docs FAQ, "Complex numbers") --------------------
def test_enzyme_faq_values():
    z = 3.1 + 2.7j
    f = lambda z: z * z  # noqa: E731
    # Reverse mode of a real result: d/dx + i d/dy of u = Re f and of v = Im f.
    assert grad(lambda z: np.real(f(z)), z)[0] == pytest.approx(6.2 - 5.4j)
    assert grad(lambda z: np.imag(f(z)), z)[0] == pytest.approx(5.4 + 6.2j)
    # Forward mode: the tangent of f along dz.
    assert autodiff(Forward, f, Duplicated(z, 1 + 0j))[0] == pytest.approx(6.2 + 5.4j)
    assert autodiff(Forward, f, Duplicated(z, 1j))[0] == pytest.approx(-5.4 + 6.2j)
    # Holomorphic reverse: f'(z) itself.
    assert grad(f, z, mode=ReverseHolomorphic)[0] == pytest.approx(6.2 + 5.4j)
    # Non-holomorphic abs2 under ReverseHolomorphic: the Wirtinger derivative df/dz = conj(z).
    assert grad(lambda z: z * np.conj(z), z, mode=ReverseHolomorphic)[0] == pytest.approx(
        3.1 - 2.7j)


def test_split_mode_complex_seeds():
    # Enzyme.jl's FAQ: split mode seeded with 1 and with i gives grad u and grad v of f = u + iv.
    z = 3.1 + 2.7j
    fwd, rev = autodiff_thunk(ReverseSplitNoPrimal, lambda z: z * z, Active, Active)
    got = []
    for seed in (1.0 + 0j, 1j):
        tape, _, _ = fwd(Active(z))
        got.append(rev(Active(z), seed, tape)[0][0])
    assert got == [pytest.approx(6.2 - 5.4j), pytest.approx(5.4 + 6.2j)]


@pytest.mark.parametrize("f", [
    lambda z: np.sum(np.abs(z) ** 2),
    lambda z: np.sum(np.real(z * W)),
    lambda z: np.sum(np.abs(np.exp(z))),
    lambda z: np.sum(np.angle(z)),
    lambda z: (z.conj() @ A @ z).real,
    lambda z: np.sum(np.imag(np.log(z)) * np.real(z)),
    lambda z: np.linalg.norm(z * W),
], ids=["abs2", "real_zw", "abs_exp", "angle", "quadratic_form", "imag_log", "norm"])
def test_gradient_is_df_dx_plus_i_df_dy(f):
    expected = fd_gradient(f, Z)
    np.testing.assert_allclose(grad(f, Z)[0], expected, rtol=1e-6, atol=1e-8)
    dz = np.zeros(3, dtype=complex)
    autodiff(Reverse, f, Active, Duplicated(Z.copy(), dz))
    np.testing.assert_allclose(dz, expected, rtol=1e-6, atol=1e-8)
    # Forward mode along each real and each imaginary axis gives the parts of the gradient.
    for k in range(3):
        for unit, part in ((1.0, np.real), (1j, np.imag)):
            e = np.zeros(3, dtype=complex)
            e[k] = unit
            tangent = autodiff(Forward, f, Duplicated(Z, e))[0]
            assert tangent == pytest.approx(part(expected[k]), rel=1e-6, abs=1e-8)


def test_matches_pytorch_and_is_the_conjugate_of_jax():
    torch = pytest.importorskip("torch")
    t = torch.tensor(Z, requires_grad=True)
    (t.abs() ** 2 * torch.tensor(W.real)).sum().backward()
    ours = grad(lambda z: np.sum(np.abs(z) ** 2 * W.real), Z)[0]
    np.testing.assert_allclose(ours, t.grad.numpy(), atol=1e-12)
    # JAX's grad of the same function is 2 conj(z) w (its convention conjugates ours).
    np.testing.assert_allclose(np.conj(ours), 2 * np.conj(Z) * W.real, atol=1e-12)


def test_real_inputs_get_real_derivatives_through_complex_intermediates():
    x = np.array([0.3, -1.1])
    f = lambda x: np.sum(np.abs(np.exp(1j * x) * (2 + x)) ** 2 + np.real(x * (1 + 2j)))  # noqa
    g = grad(f, x)[0]
    assert g.dtype == np.float64
    np.testing.assert_allclose(g, 2 * (2 + x) + 1.0, atol=1e-11)
    dx = np.zeros(2)
    autodiff(Reverse, f, Active, Duplicated(x.copy(), dx))
    np.testing.assert_allclose(dx, g, atol=1e-11)
    assert isinstance(grad(lambda x: np.real(x * 1j * x), 1.5)[0], float)


def test_a_real_part_taken_then_promoted_again():
    # Re(Re(z) * w) = x Re(w): the cotangent reaching Re(z) from the complex product must lose
    # its imaginary part (it is the cotangent of a real value).
    f = lambda z: np.sum(np.real(np.real(z) * W) + np.real(np.abs(z) * W))  # noqa: E731
    np.testing.assert_allclose(grad(f, Z)[0], fd_gradient(f, Z), rtol=1e-6, atol=1e-8)


# -- every complex-capable op family against finite differences (forward, reverse, 2nd order) ---
OPS = {
    "arithmetic": (lambda z, w: (z * w - z / w + 2.0 * z) ** 2, (Z, W)),
    "power": (lambda z, w: z ** 3 + z ** w + np.float_power(z, 2.5) + np.sqrt(z), (Z, W)),
    "exp_log": (lambda z: np.exp(z) + np.log(z) + np.expm1(z) + np.log1p(z) + np.exp2(z)
                + np.log10(z) + np.reciprocal(z), (Z,)),
    "trig": (lambda z: np.sin(z) * np.cos(z) + np.tan(z) + np.arctan(z) + np.arcsin(z / 3),
             (Z,)),
    "hyperbolic": (lambda z: np.sinh(z) + np.cosh(z) * np.tanh(z) + np.arcsinh(z), (Z,)),
    "parts": (lambda z: np.abs(z) + np.real(z) * np.imag(z) + np.angle(z) + np.conj(z) * z,
              (Z,)),
    "reductions": (lambda z: np.sum(z * z) + np.mean(z) * np.prod(z) + np.var(z), (Z,)),
    "scans": (lambda z: np.cumsum(z) * np.cumprod(z), (Z,)),
    "matmul": (lambda a, b: a @ b + a.T @ b * 2j, (A, B)),
    "dot_family": (lambda z, w: np.dot(z, w) + np.vdot(z, w) + np.inner(z, w) * 1j
                   + np.sum(np.outer(z, w)) + np.sum(np.kron(z, w)), (Z, W)),
    "einsum_tensordot": (lambda a, z: np.einsum("ij,j,i->", a, z, z)
                         + np.sum(np.tensordot(a, a, axes=1)), (A, Z)),
    "linalg": (lambda a, z: np.linalg.solve(a, z) + np.linalg.det(a) * np.linalg.inv(a)[0]
               + np.linalg.slogdet(a)[1] + np.linalg.matrix_power(a, 2)[1], (A, Z)),
    "norms": (lambda a, z: np.linalg.norm(z) + np.linalg.norm(a) + np.linalg.norm(z, 1)
              + np.std(z), (A, Z)),
    "shape_indexing": (lambda a, z: np.concatenate([a.T[1:, ::-1].ravel(), z]) * np.where(
        np.arange(9) % 2 == 0, 1.0, 2j), (A, Z)),
    "mixed_real_complex": (lambda x, z: x * z + np.exp(1j * x) * np.abs(z),
                           (np.array([0.3, -1.0, 2.0]), Z)),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_ops_against_finite_differences(name):
    f, args = OPS[name]
    check_grads(f, *args)


def test_complex_python_scalars():
    check_grads(lambda z, w: z * w + np.exp(z) * abs(w) ** 2, 0.3 - 0.2j, 1.1 + 0.5j)


@pytest.mark.parametrize("fn", [
    lambda a: np.linalg.cholesky(a), lambda a: np.linalg.eigh(a)[0],
    lambda a: np.abs(np.linalg.eigh(a)[1]), lambda a: np.linalg.qr(a)[1],
    np.linalg.pinv, lambda a: np.linalg.svd(a, compute_uv=False)])
def test_factorisations_of_complex_hermitian_matrices(fn):
    # Values that do not depend on LAPACK's choice of phase for the vectors.
    s = A @ A.conj().T + 3 * np.eye(3)
    check_grads(lambda a: np.real(np.sum(fn(a) * np.conj(fn(a)))), s)


# -- ReverseHolomorphic -------------------------------------------------------------------------
HOLOMORPHIC = {
    "exp": (np.exp, np.exp),
    "cube": (lambda z: z ** 3, lambda z: 3 * z ** 2),
    "sin_times_z": (lambda z: np.sin(z) * z, lambda z: np.cos(z) * z + np.sin(z)),
    "rational": (lambda z: 1 / (1 + z * z), lambda z: -2 * z / (1 + z * z) ** 2),
    "log": (np.log, lambda z: 1 / z),
}


@pytest.mark.parametrize("name", sorted(HOLOMORPHIC))
def test_holomorphic_derivative(name):
    f, df = HOLOMORPHIC[name]
    z = 0.7 - 0.4j
    assert grad(f, z, mode=ReverseHolomorphic)[0] == pytest.approx(df(z), rel=1e-12)
    # The same derivative along the real and along the imaginary axis (finite differences).
    eps = 1e-6
    assert (f(z + eps) - f(z - eps)) / (2 * eps) == pytest.approx(df(z), rel=1e-6)
    assert (f(z + 1j * eps) - f(z - 1j * eps)) / (2j * eps) == pytest.approx(df(z), rel=1e-6)


def test_holomorphic_with_arrays_shadows_and_primal():
    dz = np.zeros(3, dtype=complex)
    derivs, value = autodiff(ReverseHolomorphicWithPrimal, lambda z, c: np.sum(np.exp(z) * c),
                             Active, Duplicated(Z.copy(), dz), Const(2.0))
    np.testing.assert_allclose(dz, 2 * np.exp(Z), atol=1e-12)
    assert derivs == (None, None) and value == pytest.approx(np.sum(2 * np.exp(Z)))
    # A real argument of a complex result gets d Re f / dx, as in Enzyme.jl.
    z = 3.1 + 2.7j
    gx, gz = grad(lambda x, z: x * z * z, 2.0, z, mode=ReverseHolomorphic)
    assert gx == pytest.approx((z * z).real) and gz == pytest.approx(4 * z)
    # A real result: ReverseHolomorphic is plain reverse mode.
    assert grad(lambda z: np.abs(z) ** 2, z, mode=ReverseHolomorphic)[0] == pytest.approx(2 * z)


def test_holomorphic_of_non_holomorphic_is_the_wirtinger_derivative():
    # d/dz = (d/dx - i d/dy) / 2; conj(z) has d/dz = 0, Re z has 1/2. Nothing flags that these
    # functions are not holomorphic: a single evaluation cannot tell in general.
    z = 0.4 + 1.3j
    assert grad(np.conj, z, mode=ReverseHolomorphic)[0] == 0
    assert grad(lambda z: np.real(z) + 0j, z, mode=ReverseHolomorphic)[0] == pytest.approx(0.5)


def test_holomorphic_with_an_overwritten_buffer():
    # y[0] = 2z is seeded by dy (the ordinary reverse convention); the return by holomorphy.
    def f(y, z):
        y[0] = 2 * z
        return z ** 2
    y, dy = np.zeros(2, dtype=complex), np.array([1.0 + 0j, 0j])
    (_, gz), = autodiff(ReverseHolomorphic, f, Active, Duplicated(y, dy), Active(0.5 + 1j))
    assert gz == pytest.approx(2 * (0.5 + 1j) + 2)
    assert y[0] == 1 + 2j and not dy.any()


def test_overwritten_complex_buffer_in_reverse_mode():
    # Seeding y = w * z with dy: the derivative of Re(sum(conj(dy) * y)), i.e. dy * conj(w).
    def f(y, z):
        y[:] = W * z
    y, dy, dz = np.zeros(3, dtype=complex), crandn(3), np.zeros(3, dtype=complex)
    seed = dy.copy()
    autodiff(Reverse, f, Const, Duplicated(y, dy), Duplicated(Z.copy(), dz))
    np.testing.assert_allclose(dz, seed * np.conj(W), atol=1e-12)
    np.testing.assert_allclose(dz, fd_gradient(lambda z: np.sum(np.real(np.conj(seed) * W * z)),
                                               Z), rtol=1e-6, atol=1e-8)


# -- errors and rule writing ---------------------------------------------------------------------
def test_complex_active_return_needs_holomorphic_or_a_real_result():
    for mode in (Reverse, ReverseWithPrimal):
        with pytest.raises(ActivityError, match=r"complex number.*ReverseHolomorphic.*np\.real"):
            autodiff(mode, lambda z: z * z, Active, Active(1 + 1j))
    with pytest.raises(ActivityError, match="real scalar"):
        autodiff(ReverseHolomorphic, lambda z: z * W, Active, Active(1 + 1j))


def test_rules_use_the_transpose_convention_and_the_checker_sees_a_wrong_one():
    def scale(z):
        return z * W
    right = custom_rule(scale, augmented_primal=lambda cfg, z: (z * W, None),
                        reverse=lambda cfg, saved, g: (g * W,), differentiable=True,
                        forward=lambda cfg, p, t: (p[0] * W, t[0] * W))
    check_grads(right, Z, order=1)
    # Conjugating inside the rule (the user's convention) is wrong there: autodiff conjugates.
    wrong = custom_rule(scale, augmented_primal=lambda cfg, z: (z * W, None),
                        reverse=lambda cfg, saved, g: (g * np.conj(W),), differentiable=True,
                        forward=lambda cfg, p, t: (p[0] * W, t[0] * W))
    with pytest.raises(GradientCheckError, match="reverse"):
        check_grads(wrong, Z, order=1, modes=("rev",))
