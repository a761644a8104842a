"""The ADBench objectives on generated inputs (always run): the vectorised objectives against
plain loop-by-loop versions of ADBench's formulas, and every derivative against central
finite differences in float64."""
import math

import numpy as np
import pytest

from ba_reference import residual_one
from models.bench.adbench import ba, generate, gmm, lstm
from tape.testing import check_grads


def central_differences(f, x, eps=1e-6):
    """d f / d x for a vector-valued f of a flat vector x, column by column."""
    x = np.asarray(x, dtype=np.float64)
    columns = []
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = eps
        columns.append((np.asarray(f(x + e)) - np.asarray(f(x - e))) / (2 * eps))
    return np.stack(columns, axis=-1)

# -- GMM --------------------------------------------------------------------------------------


def gmm_by_loops(alphas, means, icf, x, gamma, m):
    """ADBench's GMM formula written one point and one component at a time."""
    n, d = x.shape
    K = len(alphas)
    total = -n * d / 2 * math.log(2 * math.pi)
    Qs = []
    for k in range(K):
        Q = np.diag(np.exp(icf[k, :d]))
        pos = d
        for col in range(d):
            for row in range(col + 1, d):
                Q[row, col] = icf[k, pos]
                pos += 1
        Qs.append(Q)
    for i in range(n):
        inner = [alphas[k] + icf[k, :d].sum() - 0.5 * np.sum((Qs[k] @ (x[i] - means[k])) ** 2)
                 for k in range(K)]
        total += math.log(sum(math.exp(v) for v in inner))
    total -= n * math.log(sum(math.exp(a) for a in alphas))
    n_w = d + m + 1
    log_gamma_d = d * (d - 1) / 4 * math.log(math.pi) + sum(
        math.lgamma(0.5 * n_w + 0.5 * (1 - j)) for j in range(1, d + 1))
    C = n_w * d * (math.log(gamma) - 0.5 * math.log(2)) - log_gamma_d
    for k in range(K):
        frobenius = np.sum(np.exp(icf[k, :d]) ** 2) + np.sum(icf[k, d:] ** 2)
        total += 0.5 * gamma ** 2 * frobenius - m * icf[k, :d].sum() - C
    return total


@pytest.mark.parametrize("d, K, n", [(1, 2, 3), (3, 4, 6)])
def test_gmm_objective_matches_the_formula_written_with_loops(d, K, n):
    inp = generate.gmm(d, K, n, seed=d, gamma=1.5, m=2)
    expected = gmm_by_loops(inp.alphas, inp.means, inp.icf, inp.x, inp.gamma, inp.m)
    np.testing.assert_allclose(gmm.objective(inp), expected, rtol=1e-12, atol=1e-11)


def test_gmm_gradient_matches_finite_differences():
    inp = generate.gmm(3, 4, 6, seed=1, gamma=1.5, m=2)
    sizes = [inp.alphas.size, inp.means.size, inp.icf.size]

    def f(flat):
        alphas, means, icf = np.split(flat, np.cumsum(sizes)[:-1])
        return gmm.gmm_objective(alphas, means.reshape(inp.means.shape),
                                 icf.reshape(inp.icf.shape), inp.x, inp.gamma, inp.m)
    flat = np.concatenate([inp.alphas, inp.means.ravel(), inp.icf.ravel()])
    np.testing.assert_allclose(gmm.gradient(inp), central_differences(f, flat),
                               rtol=1e-6, atol=1e-8)

# -- LSTM -------------------------------------------------------------------------------------


def test_lstm_gradient_matches_finite_differences():
    inp = generate.lstm(2, 6, b=4, seed=2)
    n_main = inp.main_params.size

    def f(flat):
        return lstm.lstm_objective(flat[:n_main].reshape(inp.main_params.shape),
                                   flat[n_main:].reshape(inp.extra_params.shape),
                                   inp.state, inp.sequence)
    flat = np.concatenate([inp.main_params.ravel(), inp.extra_params.ravel()])
    np.testing.assert_allclose(lstm.gradient(inp), central_differences(f, flat),
                               rtol=1e-6, atol=1e-9)


def test_generated_lstm_sequence_is_bits_of_printable_characters():
    seq = generate.lstm(1, 50, b=14, seed=0).sequence
    assert set(np.unique(seq)) <= {0.0, 1.0}
    chars = seq @ (2.0 ** np.arange(13, -1, -1))
    assert np.all((chars >= 32) & (chars < 127))

# -- BA ---------------------------------------------------------------------------------------


def test_ba_residuals_match_the_per_observation_formula():
    inp = generate.random_ba(3, 5, 8, seed=3)
    assert np.all(inp.cams[0, :3] == 0)   # the small-angle branch is exercised
    reproj, w_err = ba.objective(inp)
    for i, (c, j) in enumerate(inp.obs):
        np.testing.assert_allclose(
            reproj[i], residual_one(inp.cams[c], inp.X[j], inp.w[i], inp.feats[i]),
            rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(w_err, 1 - inp.w ** 2, atol=1e-12)


def test_ba_sparse_jacobian_matches_finite_differences():
    inp = generate.random_ba(3, 5, 8, seed=4)
    n, m, p = inp.sizes["n"], inp.sizes["m"], inp.sizes["p"]

    def residuals(flat):
        cams = flat[:11 * n].reshape(n, 11)
        X = flat[11 * n:11 * n + 3 * m].reshape(m, 3)
        w = flat[11 * n + 3 * m:]
        moved = type(inp)(cams, X, w, inp.obs, inp.feats)
        reproj, w_err = ba.objective(moved)
        return np.concatenate([reproj.ravel(), w_err])
    flat = np.concatenate([inp.cams.ravel(), inp.X.ravel(), inp.w])
    J = ba.jacobian(inp)
    assert (J.nrows, J.ncols) == (3 * p, flat.size)
    # every reprojection row has its 15 entries in increasing column order, as ADBench's
    assert np.all(np.diff(J.indptr) == [15] * (2 * p) + [1] * p)
    np.testing.assert_allclose(J.todense(), central_differences(residuals, flat),
                               rtol=1e-6, atol=1e-7)


def test_cross_rule_forward_and_reverse_to_second_order():
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    np.testing.assert_allclose(ba.cross(a, b), np.cross(a, b, axis=0), rtol=1e-14, atol=1e-15)
    check_grads(lambda a, b: np.sum(np.sin(ba.cross(a, b))), a, b)
