"""Hecate's ADBench objectives and derivatives against the values ADBench's own unit tests
assert, with ADBench's metric rho(x, y) = |x - y| / max(1, |x| + |y|) <= 1e-8. Skipped when
ADBench's files (../shared/adbench) are absent."""
import json

import numpy as np

from models.bench.adbench import ba, gmm, io, lstm
from models.bench.adbench.runners import rho

TOLERANCE = 1e-8   # ADBench's


def reference(folder, name):
    return json.loads((folder / "reference" / "from_tests" / name).read_text())


def test_gmm_objective_and_gradient(adbench_data):
    ref = reference(adbench_data, "gmm_test_ref.json")
    inp = io.read_gmm(adbench_data / "gmm" / "test.txt")
    assert rho(gmm.objective(inp), ref["objective"]) <= TOLERANCE
    assert rho(gmm.gradient(inp), ref["gradient"]) <= TOLERANCE


def test_lstm_objective_and_gradient(adbench_data):
    ref = reference(adbench_data, "lstm_l2_c1024_ref.json")
    inp = io.read_lstm(adbench_data / "lstm" / "lstm_l2_c1024.txt")
    assert rho(lstm.objective(inp), ref["objective"]) <= TOLERANCE
    assert rho(lstm.gradient(inp), ref["gradient"]) <= TOLERANCE


def test_ba_residuals_and_sparse_jacobian(adbench_data):
    ref = reference(adbench_data, "ba_test_ref.json")
    inp = io.read_ba(adbench_data / "ba" / "test.txt")
    reproj, w_err = ba.objective(inp)
    assert rho(reproj.ravel(), ref["reproj_err"]) <= TOLERANCE
    assert rho(w_err, ref["w_err"]) <= TOLERANCE
    J = ba.jacobian(inp)
    assert (J.nrows, J.ncols) == (ref["J_nrows"], ref["J_ncols"])
    np.testing.assert_array_equal(J.indptr, ref["J_rows_csr"])
    np.testing.assert_array_equal(J.indices, ref["J_cols_csr"])
    assert rho(J.data, ref["J_vals_csr"]) <= TOLERANCE


def test_standard_inputs_read_with_the_sizes_their_names_give(adbench_data):
    from models.bench.adbench import suite

    for problem in suite.PROBLEMS.values():
        for size in problem.sizes:
            inp, source = suite.load(problem, size)
            assert source.startswith("ADBench"), source
            generated = size.generated()
            assert inp.sizes == generated.sizes, size.label
            for name, value in vars(inp).items():
                assert np.shape(value) == np.shape(getattr(generated, name)), (size.label, name)
