"""Forward mode: a complex result of a real input gets a complex tangent, of the result's
precision, equal to the finite difference of the complex function."""
import numpy as np
import pytest

from tape import BatchDuplicated, Duplicated, Forward, autodiff
from tape.core import primal

FUNCTIONS = {
    "plus_zero_j": lambda x: x + 0j,
    "zero_j_plus": lambda x: 0j + x,
    "times_complex": lambda x: x * (1 + 2j),
    "exp_i": lambda x: np.exp(1j * x),
    "astype": lambda x: x.astype(np.complex128) - 1.0,
    "sqrt_of_negative": lambda x: np.sqrt(x.astype(complex) - 3.0),
    "sum_with_complex_weights": lambda x: np.sum(x * np.array([1j, 2.0])),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_complex_result_of_real_input_has_complex_tangent(name):
    f = FUNCTIONS[name]
    x, dx = np.array([0.5, 1.5]), np.array([1.0, -0.5])
    (tangent,) = autodiff(Forward, f, Duplicated(x, dx))
    eps = 1e-6
    want = (f(x + eps * dx) - f(x - eps * dx)) / (2 * eps)
    assert np.iscomplexobj(tangent), f"tangent of dtype {np.asarray(tangent).dtype}"
    np.testing.assert_allclose(tangent, want, rtol=1e-7, atol=1e-9)


def test_precision_and_batch_are_kept():
    (tangent,) = autodiff(Forward, lambda x: x + 0j,
                          Duplicated(np.float32(2.0), np.float32(1.0)))
    assert np.asarray(tangent).dtype == np.complex64
    (tangents,) = autodiff(Forward, lambda x: x + 0j,
                           BatchDuplicated(np.ones(2), (np.ones(2), 2 * np.ones(2))))
    assert all(np.asarray(primal(t)).dtype == np.complex128 for t in tangents)
    np.testing.assert_array_equal(tangents[1], [2 + 0j, 2 + 0j])


def test_full_jacobian_check_covers_complex_arguments():
    from tape.testing import GradientCheckError, check_grads
    check_grads(np.fft.fft, np.array([1 + 1j, 2 - 1j]), order=1, full_jacobian=True)
    check_grads(lambda z: np.real(z) * np.conj(z), np.array([1 + 2j]), order=1,
                full_jacobian=True)   # not holomorphic: the imaginary direction differs
    from tape import custom_rule
    drops_imaginary = custom_rule(
        lambda z: z * 2.0, augmented_primal=lambda cfg, z: (z * 2.0, None),
        reverse=lambda cfg, s, g: (2.0 * g,),
        forward=lambda cfg, p, t: (p[0] * 2.0, 2.0 * np.real(t[0]) + 0j))
    with pytest.raises(GradientCheckError):
        check_grads(drops_imaginary, np.array([1.0 + 1.0j]), modes=("fwd",), order=1,
                    full_jacobian=True)


def test_traced_value_of_a_complex_result_in_reverse_mode():
    from tape.testing import traced_value
    f = lambda x: np.sum(x * (1 + 2j))   # noqa: E731
    x = np.array([0.5, 1.5])
    assert traced_value(f, x, mode="reverse") == f(x)
    assert traced_value(f, x, mode="forward") == f(x)
