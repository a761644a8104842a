"""BA's sparse Jacobian (models/bench/adbench/ba.py) against an independent one: complex-step
derivatives of ADBench's residual written for one observation in plain NumPy (exact to
rounding, no Hecate), eager and compiled, and the CSR pattern it keeps between calls."""
import numpy as np
import pytest

import tape
from ba_reference import residual_one
from models.bench.adbench import ba, generate, runners
from tape import Active, Const, Duplicated, Reverse

N_CAM = 11


def complex_step_rows(inp, i, h=1e-30):
    """(2, 15): d residual_i / d (its camera, its point, its weight), by the complex step."""
    c, j = inp.obs[i]
    x = np.concatenate([inp.cams[c], inp.X[j], [inp.w[i]]]).astype(complex)
    rows = np.empty((2, N_CAM + 4))
    for k in range(N_CAM + 4):
        e = x.copy()
        e[k] += 1j * h
        rows[:, k] = residual_one(e[:N_CAM], e[N_CAM:N_CAM + 3], e[-1], inp.feats[i]).imag / h
    return rows


def expected_pattern(inp):
    """indptr and indices written row by row from the observations."""
    n, m, p = inp.sizes["n"], inp.sizes["m"], inp.sizes["p"]
    rows = []
    for i, (c, j) in enumerate(inp.obs):
        cols = (list(range(N_CAM * c, N_CAM * c + N_CAM))
                + list(range(N_CAM * n + 3 * j, N_CAM * n + 3 * j + 3)) + [N_CAM * n + 3 * m + i])
        rows += [cols, cols]
    rows += [[N_CAM * n + 3 * m + i] for i in range(p)]
    return np.cumsum([0] + [len(r) for r in rows]), np.concatenate(rows)


def check_jacobian(J, inp):
    p = inp.sizes["p"]
    indptr, indices = expected_pattern(inp)
    np.testing.assert_array_equal(J.indptr, indptr)
    np.testing.assert_array_equal(J.indices, indices)
    blocks = J.data[:2 * p * 15].reshape(p, 2, 15)
    for i in range(p):
        np.testing.assert_allclose(blocks[i], complex_step_rows(inp, i), rtol=1e-11,
                                   atol=1e-12, err_msg=f"observation {i}")
    np.testing.assert_allclose(J.data[2 * p * 15:], -2 * inp.w, rtol=1e-15)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_jacobian_matches_the_complex_step_of_one_observation(compiled):
    inp = generate.random_ba(4, 6, 15, seed=11)
    assert np.all(inp.cams[0, :3] == 0)     # the small-angle branch is exercised
    differentiate = runners.compiled_autodiff() if compiled else ba.autodiff
    for _ in range(3):                        # compiled: a trace, a confirming trace, a replay
        check_jacobian(ba.jacobian(inp, differentiate), inp)


def test_compiled_residual_follows_a_zero_angle_that_appears_later():
    """Without a zero angle the selection between the two Rodrigues forms is skipped: a
    Python decision on traced values, which a compiled replay must check at every call."""
    inp = generate.random_ba(3, 5, 12, seed=12)
    inp.cams[0, :3] = [0.1, -0.2, 0.3]
    p = inp.sizes["p"]

    def x_residuals(cam, X, w, feats):
        return np.sum(ba.reproj_error(cam, X, w, feats)[0])

    g = tape.compile(Reverse, x_residuals, Active, Duplicated, Duplicated, Duplicated, Const)
    for zero_camera in (None, None, None, 1, 1, 1):
        if zero_camera is not None:
            inp.cams[zero_camera, :3] = 0.0   # in place: same shapes, same signature
        cam, X = ba.gather(inp)
        grads = np.zeros((ba.ROW_WIDTH, p))
        g(Duplicated(cam, ba.CameraRows.of(grads)), Duplicated(X, grads[11:14]),
          Duplicated(inp.w, grads[14]), Const(inp.feats.T))
        for i in range(p):
            np.testing.assert_allclose(grads[:, i], complex_step_rows(inp, i)[0], rtol=1e-11,
                                       atol=1e-12, err_msg=f"observation {i}")
    assert g.stats.traces >= 2 and g.stats.eager_calls == 0


def test_compiled_jacobian_agrees_with_eager_when_a_zero_angle_appears():
    inp = generate.random_ba(3, 5, 12, seed=16)
    inp.cams[0, :3] = [0.1, -0.2, 0.3]
    d = runners.compiled_autodiff()
    for zero_camera in (None, None, None, 2, 2):
        if zero_camera is not None:
            inp.cams[zero_camera, :3] = 0.0
        np.testing.assert_allclose(ba.jacobian(inp, d).data, ba.jacobian(inp).data,
                                   rtol=1e-13, atol=1e-14)
    check_jacobian(ba.jacobian(inp, d), inp)


def test_kept_pattern_is_not_reused_for_other_observations():
    a = generate.random_ba(3, 5, 12, seed=13)
    b = generate.random_ba(3, 5, 12, seed=14)
    assert not np.array_equal(a.obs, b.obs)
    Ja, Jb = ba.jacobian(a), ba.jacobian(b)
    check_jacobian(Ja, a)
    check_jacobian(Jb, b)
    a.obs[:] = b.obs                          # changed in place: the kept copy tells
    check_jacobian(ba.jacobian(a), a)
    with pytest.raises(ValueError):           # the pattern is shared between calls
        Jb.indices[0] = 1
    np.testing.assert_array_equal(Ja.indices, expected_pattern(generate.random_ba(
        3, 5, 12, seed=13))[1])


def test_assemble_puts_blocks_in_adbench_order():
    inp = generate.random_ba(2, 3, 4, seed=15)
    blocks, dw = np.arange(4 * 2 * 15.0).reshape(4, 2, 15), -np.arange(4.0)
    J = ba.assemble(2, 3, 4, inp.obs, blocks, dw)
    dense = J.todense()
    for i, (c, j) in enumerate(inp.obs):
        cols = list(range(11 * c, 11 * c + 11)) + [22 + 3 * j, 23 + 3 * j, 24 + 3 * j, 31 + i]
        np.testing.assert_array_equal(dense[2 * i:2 * i + 2, cols], blocks[i])
        assert dense[8 + i, 31 + i] == dw[i]
    assert np.count_nonzero(dense) == (4 * 2 * 15 - 1) + (4 - 1)   # entry 0 of each is 0
