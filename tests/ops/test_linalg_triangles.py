"""Functions that read one triangle of their input: eigh / eigvalsh (UPLO), cholesky (upper=),
and the hermitian=True paths of svd, svdvals and pinv (the lower triangle).

Their derivatives must be those of the function NumPy computes, for any input: the inputs here
are NOT symmetric (the unread triangle, and for complex input the diagonal's imaginary part,
hold unrelated values), so a rule that symmetrised its cotangent would fail the finite
differences, which see only the triangle LAPACK reads.
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tape import Active, Reverse, autodiff
from tape.testing import check_grads, traced_value

FAST = settings(max_examples=15, deadline=None)


def unitary(rng, n, complex_):
    z = rng.standard_normal((n, n)) + (1j * rng.standard_normal((n, n)) if complex_ else 0)
    q, r = np.linalg.qr(z)
    return q * (np.diag(r) / np.abs(np.diag(r)))


def read_triangle_input(seed, batch, n, complex_, lower, spectrum=None):
    """A stack of matrices whose `lower` (else upper) triangle is that of a Hermitian matrix
    with eigenvalues `spectrum` (default 1, 1.8, 2.6, ...: positive and separated), and whose
    other triangle (and diagonal imaginary part) is unrelated noise."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(int(np.prod(batch))):
        w = 1 + 0.8 * np.arange(n) + 0.2 * rng.uniform(size=n) if spectrum is None else spectrum
        q = unitary(rng, n, complex_)
        h = (q * w) @ q.conj().T
        noise = rng.standard_normal((n, n)) + (1j * rng.standard_normal((n, n)) if complex_
                                                else 0)
        unread = np.triu(noise, 1) if lower else np.tril(noise, -1)
        if complex_:
            unread = unread + 1j * np.diag(rng.standard_normal(n))
        out.append(h + unread)
    return np.array(out).reshape(batch + (n, n))


def phase_free(v):
    """Functions of eigen/singular vectors that do not depend on their sign or phase."""
    return np.real(v * np.conj(v)) if np.iscomplexobj(v) else v * v


def projector(v):
    """v diag(1, 2, ...) v^H: phase-invariant, and it mixes the columns."""
    k = np.arange(1, v.shape[-1] + 1)
    return (v * k) @ np.conj(np.swapaxes(v, -1, -2))


CASES = {
    "eigvalsh": lambda lower: lambda a: np.linalg.eigvalsh(a, UPLO="L" if lower else "U"),
    "eigh": lambda lower: lambda a: (lambda r: (r.eigenvalues, phase_free(r.eigenvectors),
                                                projector(r.eigenvectors)))(
        np.linalg.eigh(a, UPLO="L" if lower else "u")),
    "cholesky": lambda lower: lambda a: np.linalg.cholesky(a, upper=not lower),
}
HERMITIAN = {   # NumPy's hermitian=True paths read the lower triangle
    "svd": lambda a: (lambda u, s, vh: (s, phase_free(u), (u * s[..., None, :]) @ vh))(
        *np.linalg.svd(a, hermitian=True)),
    "svdvals": lambda a: np.linalg.svd(a, compute_uv=False, hermitian=True),
    "pinv": lambda a: np.linalg.pinv(a, hermitian=True),
}


def _same(got, want):
    for g, w in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,)):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("lower", [True, False], ids=["L", "U"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_second_order_on_non_symmetric_input(name, lower, complex_):
    a = read_triangle_input(3, (), 3, complex_, lower)
    f = CASES[name](lower)
    _same(traced_value(f, a), f(a))
    if not complex_:   # (the reverse-mode primal sums the outputs into a real scalar)
        _same(traced_value(f, a, mode="reverse"), f(a))
    check_grads(f, a, order=2)


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("name", sorted(HERMITIAN))
def test_hermitian_paths_on_non_symmetric_input(name, complex_):
    a = read_triangle_input(5, (), 3, complex_, lower=True)
    f = HERMITIAN[name]
    _same(traced_value(f, a), f(a))
    check_grads(f, a, order=2 if name != "svd" else 1)


@FAST
@given(st.integers(0, 2 ** 32 - 1), st.sampled_from([(), (2,), (2, 1)]), st.integers(1, 4),
       st.booleans(), st.booleans(), st.sampled_from(sorted(CASES)))
def test_first_order_over_shapes(seed, batch, n, complex_, lower, name):
    a = read_triangle_input(seed, batch, n, complex_, lower)
    f = CASES[name](lower)
    _same(traced_value(f, a), f(a))
    check_grads(f, a, order=1, modes=("fwd", "rev"))


def test_cholesky_upper_reads_the_upper_triangle():
    # Before the fix, upper=True transposed the lower factor: a wrong primal on such input.
    for complex_ in (False, True):
        a = read_triangle_input(7, (2,), 3, complex_, lower=False)
        f = lambda x: np.linalg.cholesky(x, upper=True)  # noqa: E731
        _same(traced_value(f, a), f(a))


@pytest.mark.parametrize("lower", [True, False], ids=["L", "U"])
def test_the_unread_triangle_gets_a_zero_gradient(lower):
    a = read_triangle_input(11, (), 4, True, lower)
    uplo = "L" if lower else "U"
    for f in (lambda x: np.sum(np.linalg.eigvalsh(x, uplo) ** 3),
              lambda x: np.real(np.sum(projector(np.linalg.eigh(x, uplo)[1]) * a)),
              lambda x: np.sum(np.abs(np.linalg.cholesky(x, upper=not lower)) ** 2)):
        (g,), = autodiff(Reverse, f, Active, Active(a))
        unread = np.triu_indices(4, 1) if lower else np.tril_indices(4, -1)
        np.testing.assert_array_equal(g[unread], 0)
        np.testing.assert_array_equal(np.imag(np.diag(g)), 0)   # Im of the diagonal: unread
        assert np.all(g[tuple(reversed(unread))] != 0)


def test_eigvalsh_on_degenerate_spectrum_is_finite():
    # Eigenvalues alone stay differentiable at repeated eigenvalues (their sum is the trace).
    a = read_triangle_input(2, (), 3, True, lower=True, spectrum=np.array([2.0, 2.0, 2.0]))
    (g,), = autodiff(Reverse, lambda x: np.sum(np.linalg.eigvalsh(x)), Active, Active(a))
    np.testing.assert_allclose(g, np.eye(3), atol=1e-12)


def test_bad_uplo_is_named():
    with pytest.raises(ValueError, match="UPLO must be 'L' or 'U'"):
        autodiff(Reverse, lambda x: np.sum(np.linalg.eigvalsh(x, "X")), Active,
                 Active(np.eye(2)))
