"""Red-team tests of the gradient-testing API (`tape.testing`) and the Jacobian helpers
(`jacobian`, `hessian`, `gradient`, `onehot`), as users call them to test their own code: a
checker that passes a wrong derivative, or a Jacobian helper that returns a wrong one, is a
silent wrong value by proxy. Each test failed before the fix it guards."""
import numpy as np
import pytest

from tape import Forward, Reverse, gradient, hessian, jacobian, onehot

M = np.array([[0.3, -1.2, 0.5], [0.7, 0.2, -0.9]])


def _central_jacobian(f, x, h=1e-6):
    """d f / d x by central differences in float64, shaped f(x).shape + x.shape."""
    columns = []
    for j in range(x.size):
        e = np.zeros(x.size)
        e[j] = h
        e = e.reshape(x.shape)
        columns.append((np.asarray(f(x + e)) - np.asarray(f(x - e))) / (2 * h))
    out_shape = np.shape(f(x))
    return np.stack(columns, axis=-1).reshape(out_shape + x.shape)


# -- Jacobians of arrays that are not C-contiguous (a transpose, Fortran order) ---------------

def test_onehot_of_a_transposed_array_has_its_one():
    units = onehot(M.T)
    assert len(units) == M.size
    np.testing.assert_array_equal(np.stack(units).reshape(M.size, M.size), np.eye(M.size))


@pytest.mark.parametrize("mode", [Forward, Reverse], ids=["forward", "reverse"])
def test_jacobian_of_a_transposed_input_and_output(mode):
    def f(x):
        return np.sin(x).T * 2.0
    for x in (M, M.T, np.asfortranarray(M)):
        want = _central_jacobian(f, x)
        np.testing.assert_allclose(jacobian(mode, f, x)[0], want, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(jacobian(mode, f, x, chunk=2)[0], want, rtol=1e-6,
                                   atol=1e-8)


def test_forward_gradient_and_hessian_of_a_transposed_input():
    x = M.T
    np.testing.assert_allclose(gradient(Forward, lambda x: np.sum(x ** 3), x)[0], 3 * x ** 2)
    want = np.diag((6 * x).ravel()).reshape(x.shape + x.shape)
    np.testing.assert_allclose(hessian(lambda x: np.sum(x ** 3), x), want)
