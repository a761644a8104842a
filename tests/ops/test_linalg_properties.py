"""Property tests over every np.linalg function with rules: random shapes (with batch
dimensions where NumPy takes them), real and complex dtypes, keyword values. The primal on
traced input must equal plain NumPy, and the derivatives must match finite differences
(forward and reverse mode, first order; second order lives in tests/tape/second_order_linalg.py
and the other test_linalg modules).

Inputs are well conditioned by construction (singular values in [1, 3], separated where vectors
are differentiated); eigen- and singular vectors enter through phase-invariant functions.
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tape.testing import check_grads, traced_value

from test_linalg_eig import eig_of, general
from test_linalg_triangles import phase_free, read_triangle_input

SETTINGS = settings(max_examples=12, deadline=None)


def unitary(rng, n, complex_):
    z = rng.standard_normal((n, n)) + (1j * rng.standard_normal((n, n)) if complex_ else 0)
    q, r = np.linalg.qr(z)
    return q * (np.diag(r) / np.abs(np.diag(r)))


def conditioned(rng, batch, m, n, complex_, separated=False):
    """A stack of m x n matrices U diag(s) V^H with s in [1, 3] (or 0.6 apart)."""
    k = min(m, n)
    out = []
    for _ in range(int(np.prod(batch))):
        s = (1 + 0.6 * np.arange(k)[::-1] + 0.1 * rng.uniform(size=k) if separated
             else rng.uniform(1, 3, k))
        out.append((unitary(rng, m, complex_)[:, :k] * s) @ unitary(rng, n, complex_)[:k])
    return np.array(out).reshape(batch + (m, n))


def noise(rng, shape, complex_):
    return rng.standard_normal(shape) + (1j * rng.standard_normal(shape) if complex_ else 0)


def _svd(x):
    u, s, vh = np.linalg.svd(x, full_matrices=False)
    return s, (u * s[..., None, :]) @ vh, phase_free(u), phase_free(vh)


def _eigh(x, uplo):
    w, v = np.linalg.eigh(x, uplo)
    return w, phase_free(v)


# name -> build(rng, seed, batch, m, n, complex_, option) -> (f, args). `option` is a random
# integer that picks a keyword value.
CASES = {
    "inv": lambda r, sd, b, m, n, c, o: (np.linalg.inv, (conditioned(r, b, n, n, c),)),
    "solve": lambda r, sd, b, m, n, c, o: (np.linalg.solve, (
        conditioned(r, b, n, n, c), noise(r, b + (n, m), c))),
    "solve[vector]": lambda r, sd, b, m, n, c, o: (np.linalg.solve, (
        conditioned(r, b, n, n, c), noise(r, (n,), c))),
    "det": lambda r, sd, b, m, n, c, o: (np.linalg.det, (conditioned(r, b, n, n, c),)),
    "slogdet": lambda r, sd, b, m, n, c, o: (lambda x: tuple(np.linalg.slogdet(x)), (
        conditioned(r, b, n, n, c),)),
    "matrix_power": lambda r, sd, b, m, n, c, o: (
        lambda x: np.linalg.matrix_power(x, o % 8 - 3), (conditioned(r, b, n, n, c),)),
    "pinv": lambda r, sd, b, m, n, c, o: (np.linalg.pinv, (conditioned(r, b, m, n, c),)),
    "lstsq": lambda r, sd, b, m, n, c, o: (
        lambda x, y: (lambda res: (res[0], res[1], res[3]))(np.linalg.lstsq(x, y)),
        (conditioned(r, (), m, n, c), noise(r, (m,) + ((2,) if o % 2 else ()), c))),
    "cholesky": lambda r, sd, b, m, n, c, o: (
        lambda x: np.linalg.cholesky(x, upper=bool(o % 2)),
        (read_triangle_input(sd, b, n, c, lower=not o % 2),)),
    "eigh": lambda r, sd, b, m, n, c, o: (
        lambda x: _eigh(x, "LU"[o % 2]), (read_triangle_input(sd, b, n, c, lower=not o % 2),)),
    "eigvalsh": lambda r, sd, b, m, n, c, o: (
        lambda x: np.linalg.eigvalsh(x, "LU"[o % 2]),
        (read_triangle_input(sd, b, n, c, lower=not o % 2),)),
    "eig": lambda r, sd, b, m, n, c, o: (eig_of, (general(sd, b, n, c),)),
    "eigvals": lambda r, sd, b, m, n, c, o: (np.linalg.eigvals, (general(sd, b, n, c),)),
    "svd": lambda r, sd, b, m, n, c, o: (_svd, (conditioned(r, b, m, n, c, separated=True),)),
    "svdvals": lambda r, sd, b, m, n, c, o: (np.linalg.svdvals, (conditioned(r, b, m, n, c),)),
    "svd[hermitian]": lambda r, sd, b, m, n, c, o: (
        lambda x: np.linalg.svd(x, compute_uv=False, hermitian=True),
        (read_triangle_input(sd, b, n, c, lower=True),)),
    "qr": lambda r, sd, b, m, n, c, o: (
        lambda x: np.linalg.qr(x, mode=("reduced", "r")[o % 2]),
        (conditioned(r, b, max(m, n), min(m, n), c),)),
    "norm[matrix]": lambda r, sd, b, m, n, c, o: (
        lambda x: np.linalg.norm(x, (None, "fro", "nuc", 2, -2, 1, -1, np.inf)[o % 8],
                                 axis=(-2, -1), keepdims=bool(o % 3)),
        (conditioned(r, b, m, n, c, separated=True) + 0.01 * noise(r, b + (m, n), c),)),
    "norm[vector]": lambda r, sd, b, m, n, c, o: (
        lambda x: np.linalg.norm(x, (None, 1, 2, 3, np.inf, -np.inf, 0.5)[o % 7], axis=-1),
        (noise(r, b + (m, n), c) + (1.5 if o % 2 else -1.5),)),
    "matrix_norm": lambda r, sd, b, m, n, c, o: (
        lambda x: np.linalg.matrix_norm(x, ord=("fro", "nuc")[o % 2]),
        (conditioned(r, b, m, n, c),)),
    "tensorinv": lambda r, sd, b, m, n, c, o: (
        lambda x: np.linalg.tensorinv(x, ind=1 + o % 2),
        (np.reshape(conditioned(r, (), 2 * n, 2 * n, c), (2, n, 2 * n) if o % 2 else
                    (2 * n, 2, n)),)),
    "tensorsolve": lambda r, sd, b, m, n, c, o: (
        lambda x, y: np.linalg.tensorsolve(x, y, axes=(None, (1, 0))[o % 2]),
        (np.reshape(conditioned(r, (), 2 * n, 2 * n, c), (2, n, n, 2) if o % 2 else
                    (2, n, 2, n)), noise(r, (2, n), c))),
    "cond": lambda r, sd, b, m, n, c, o: (
        lambda x: np.linalg.cond(x, (None, 2, -2, "fro", "nuc", 1, np.inf)[o % 7]),
        (conditioned(r, b, n, n, c, separated=True) + 0.01 * noise(r, b + (n, n), c),)),
}


def _same(got, want):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert np.shape(g) == np.shape(w)
        assert np.result_type(g) == np.result_type(w), (np.result_type(g), np.result_type(w))
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", sorted(CASES))
@SETTINGS
@given(seed=st.integers(0, 2 ** 32 - 1),
       batch=st.sampled_from([(), (2,), (1, 2)]), m=st.integers(1, 4), n=st.integers(1, 4),
       complex_=st.booleans(), option=st.integers(0, 2 ** 16))
def test_primal_equals_numpy_and_derivatives_match(name, seed, batch, m, n, complex_, option):
    rng = np.random.default_rng(seed)
    f, args = CASES[name](rng, seed, batch, m, n, complex_, option)
    expected = f(*args)
    _same(traced_value(f, *args), expected)
    leaves = expected if isinstance(expected, tuple) else (expected,)
    if not any(np.iscomplexobj(y) for y in leaves):   # reverse mode sums them: a real scalar
        _same(traced_value(f, *args, mode="reverse"), expected)
    check_grads(f, *args, order=1, modes=("fwd", "rev"))
