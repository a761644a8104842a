"""np.linalg.eig and eigvals: real and complex input, stacked, real and complex spectra.

Inputs are X diag(w) X^-1 with well-conditioned X and eigenvalues at least 0.4 apart (the
derivatives divide by their gaps), and eigenvectors whose largest-modulus entry is clear of the
next one (LAPACK makes that entry real; the rule follows it, so eigenvectors are checked
directly, not only through phase-invariant functions). For real input LAPACK's eigenvector
signs are not continuous (a perturbation of 1e-6 flips some of them), so there the vectors are
checked through v**2.
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tape import Active, Reverse, ReverseHolomorphic, autodiff
from tape.testing import check_grads, traced_value

FAST = settings(max_examples=20, deadline=None)


def _well_posed(a):
    w, v = np.linalg.eig(a)
    n = len(w)
    gaps = np.abs(w[:, None] - w[None, :]) + np.eye(n) * 10
    top2 = np.sort(np.abs(v), axis=0)[-2:] if n > 1 else np.array([[0.0], [1.0]])
    return gaps.min() > 0.4 and np.linalg.cond(v) < 20 and np.all(top2[1] - top2[0] > 1e-2)


def general(seed, batch, n, complex_):
    """A stack of n x n matrices with separated eigenvalues (real input: real or complex
    pairs, as they come)."""
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < int(np.prod(batch)):
        a = rng.standard_normal((n, n)) * 1.5
        if complex_:
            a = a + 1.5j * rng.standard_normal((n, n))
        if _well_posed(a):
            out.append(a)
    return np.array(out).reshape(batch + (n, n))


def eig_of(x):
    """eig's results, the vectors as v**2 for real input (their sign is LAPACK's whim)."""
    w, v = np.linalg.eig(x)
    return w, (v if np.iscomplexobj(x) else v * v)


def _same(got, want):
    for g, w in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,)):
        assert np.result_type(g) == np.result_type(w)
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


@FAST
@given(st.integers(0, 2 ** 32 - 1), st.sampled_from([(), (2,)]), st.integers(1, 4),
       st.booleans())
def test_eig_and_eigvals(seed, batch, n, complex_):
    a = general(seed, batch, n, complex_)
    eig = lambda x: tuple(np.linalg.eig(x))  # noqa: E731
    _same(traced_value(eig, a), eig(a))
    _same(traced_value(np.linalg.eigvals, a), np.linalg.eigvals(a))
    check_grads(eig_of, a, order=1)
    check_grads(np.linalg.eigvals, a, order=1)


@pytest.mark.parametrize("kind", ["complex", "real, complex pairs", "real spectrum", "stacked"])
def test_second_order(kind):
    a = {"complex": general(1, (), 3, True),
         "real, complex pairs": np.array([[0.0, -2.0, 0.3], [1.5, 0.2, 0.0], [0.4, 0.1, 2.5]]),
         "real spectrum": np.array([[1.0, 0.5, 0.2], [0.1, 2.0, 0.3], [0.0, 0.4, 3.2]]),
         "stacked": general(2, (2,), 3, False)}[kind]
    check_grads(eig_of, a, order=2)
    check_grads(np.linalg.eigvals, a, order=2)


def test_real_spectrum_gives_real_results_and_real_gradients():
    a = np.array([[1.0, 0.5, 0.2], [0.1, 2.0, 0.3], [0.0, 0.4, 3.2]])
    w, v = traced_value(lambda x: tuple(np.linalg.eig(x)), a)
    assert w.dtype == v.dtype == np.float64
    (g,), = autodiff(Reverse, lambda x: np.sum(np.linalg.eig(x)[1] ** 2 * x), Active, Active(a))
    assert g.dtype == np.float64
    # real input with complex eigenvalues: complex results, a real gradient
    b = np.array([[0.0, -2.0, 0.3], [1.5, 0.2, 0.0], [0.4, 0.1, 2.5]])
    (g,), = autodiff(Reverse, lambda x: np.sum(np.abs(np.linalg.eigvals(x)) ** 3), Active,
                     Active(b))
    assert g.dtype == np.float64 and np.all(np.isfinite(g))


def test_eigenvalue_identities():
    # sum(w) = trace(a) and sum(w^2) = trace(a^2), independently of the rule's algebra;
    # eigvals is holomorphic, so ReverseHolomorphic gives d tr(a^2) / da = 2 a^T.
    a = general(5, (), 3, True)
    (g,), = autodiff(Reverse, lambda x: np.real(np.sum(np.linalg.eigvals(x))), Active, Active(a))
    np.testing.assert_allclose(g, np.eye(3), atol=1e-10)
    (g,), = autodiff(ReverseHolomorphic, lambda x: np.sum(np.linalg.eigvals(x) ** 2), Active,
                     Active(a))
    np.testing.assert_allclose(g, 2 * a.T, atol=1e-10)
    (g,), = autodiff(Reverse, lambda x: np.real(np.sum(np.linalg.eig(x)[0] ** 2)), Active,
                     Active(a))
    np.testing.assert_allclose(g, np.conj(2 * a.T), atol=1e-10)


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
def test_phase_invariant_functions_of_the_eigenvectors(complex_):
    # V diag(k) V^-1 does not depend on how the columns are scaled.
    a = general(6, (2,), 3, complex_)
    k = np.array([1.0, -2.0, 0.5])
    check_grads(lambda x: (lambda v: (v * k) @ np.linalg.inv(v))(np.linalg.eig(x)[1]), a,
                order=1)


def test_non_square_input_is_named():
    for f in (np.linalg.eig, np.linalg.eigvals):
        with pytest.raises(np.linalg.LinAlgError, match=r"square.*\(2, 3\)"):
            autodiff(Reverse, lambda x: np.real(np.sum(f(x)[0])), Active,
                     Active(np.ones((2, 3))))
