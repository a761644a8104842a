"""np.logaddexp.accumulate and np.logaddexp2.accumulate on traced values."""
import numpy as np
import pytest

import tape
from tape import (Active, Const, Duplicated, Forward, ForwardWithPrimal, Reverse,
                  ReverseWithPrimal, autodiff)
from tape.testing import check_grads

rng = np.random.default_rng(20240611)
NINF = -np.inf


def _jacobian(x, base=np.e):
    """d y_i / d x_j = base**(x_j - y_i) for j <= i along the last axis (1-d x), from NumPy."""
    ufunc = np.logaddexp if base == np.e else np.logaddexp2
    y = ufunc.accumulate(x)
    with np.errstate(over="ignore", invalid="ignore"):
        d = np.power(base, x[None, :] - y[:, None])
    return np.where(np.tri(len(x), dtype=bool), d, 0.0)


@pytest.mark.parametrize("ufunc", [np.logaddexp, np.logaddexp2])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_primal_is_numpys_bits(ufunc, dtype):
    x = rng.uniform(-1000, 1000, size=(3, 40)).astype(dtype)
    x[0, :4] = NINF
    x[1, 7] = NINF
    for axis in (0, -1):
        f = lambda x: ufunc.accumulate(x, axis=axis)  # noqa: E731
        t, y = autodiff(ForwardWithPrimal, f, Duplicated(x, np.ones_like(x)))
        np.testing.assert_array_equal(y, ufunc.accumulate(x, axis=axis))
        assert y.dtype == t.dtype == dtype


@pytest.mark.parametrize("ufunc", [np.logaddexp, np.logaddexp2])
def test_second_order_against_finite_differences(ufunc):
    x = rng.normal(size=(3, 5)) * 3
    w = rng.normal(size=(3, 5))
    check_grads(lambda x: np.sum(w * np.sin(ufunc.accumulate(x, axis=-1))), x, order=2)
    check_grads(lambda x: np.sum(w * ufunc.accumulate(x)), x, order=2)   # axis=0


def test_inputs_spanning_minus_to_plus_1000():
    x = rng.uniform(-1000, 1000, size=12)
    w = rng.normal(size=12)
    f = lambda x: np.sum(w * np.logaddexp.accumulate(x))  # noqa: E731
    check_grads(f, x, order=2)
    (g,), = autodiff(Reverse, f, Active, Active(x))
    jac = _jacobian(x)
    assert np.isfinite(jac).all()
    np.testing.assert_allclose(g, w @ jac, rtol=1e-12, atol=1e-15)
    (t,) = autodiff(Forward, np.logaddexp.accumulate, Duplicated(x, w))
    np.testing.assert_allclose(t, jac @ w, rtol=1e-12, atol=1e-15)
    # The Hessian of sum_i w_i logsumexp(x[:i+1]) is sum_i w_i (diag(p_i) - p_i p_i^T).
    want = np.zeros((12, 12))
    for i in range(12):
        p = jac[i, :i + 1]
        want[:i + 1, :i + 1] += w[i] * (np.diag(p) - np.outer(p, p))
    np.testing.assert_allclose(tape.hessian(f, x), want, rtol=1e-10, atol=1e-14)


def test_logaddexp2_long_axis_matches_its_jacobian():
    x = rng.uniform(-3000, 3000, size=300)
    u = rng.normal(size=300)
    (g,), = autodiff(Reverse, lambda x: np.sum(u * np.logaddexp2.accumulate(x)), Active,
                     Active(x))
    np.testing.assert_allclose(g, u @ _jacobian(x, base=2.0), rtol=1e-9, atol=1e-12)


def test_minus_inf_entries():
    # After a finite entry a -inf one gets 0; a -inf prefix splits equally (the limit along
    # equal entries, as np.logaddexp's derivative at (-inf, -inf) is 1/2 each).
    x = np.array([NINF, NINF, NINF, 0.5, NINF, 1.0])
    u = rng.uniform(0.5, 2.0, size=6)   # positive: the primal sum(u * y) is -inf, not nan
    (g,), y = autodiff(ReverseWithPrimal, lambda x: np.sum(u * np.logaddexp.accumulate(x)),
                       Active, Active(x))
    jac = np.nan_to_num(_jacobian(x))
    jac[:3, :3] = np.tril(1.0 / np.arange(1, 4)[:, None] * np.ones(3))
    np.testing.assert_allclose(g, u @ jac, rtol=1e-13)
    (t,) = autodiff(Forward, np.logaddexp.accumulate, Duplicated(x, u))
    np.testing.assert_allclose(t, jac @ u, rtol=1e-13)
    # With no -inf prefix: the same as chaining the engine's own np.logaddexp.
    x = np.array([0.2, NINF, 1.5, NINF, -0.3])

    def chained(x):
        ys = [x[0]]
        for k in range(1, len(x)):
            ys.append(np.logaddexp(ys[-1], x[k]))
        return np.sum(u[:5] * np.stack(ys))

    (want,), = autodiff(Reverse, chained, Active, Active(x))
    (g,), = autodiff(Reverse, lambda x: np.sum(u[:5] * np.logaddexp.accumulate(x)), Active,
                     Active(x))
    np.testing.assert_allclose(g, want, rtol=1e-13)
    assert g[1] == g[3] == 0
    check_grads(lambda x: np.sum(u[:5] * np.logaddexp.accumulate(x)), x, order=2,
                modes=("rev", "batch"))


def test_float32_and_dtype():
    x = rng.normal(size=(2, 30)) * 20
    u = rng.normal(size=(2, 30))
    (want,), = autodiff(Reverse, lambda x: np.sum(u * np.logaddexp.accumulate(x, axis=-1)),
                        Active, Active(x))
    x32 = x.astype(np.float32)
    (g,), = autodiff(Reverse, lambda x: np.sum(u * np.logaddexp.accumulate(x, axis=-1)),
                     Active, Active(x32))
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5)
    f = lambda x: np.logaddexp.accumulate(x, axis=-1, dtype=np.float64)  # noqa: E731
    t, y = autodiff(ForwardWithPrimal, f, Duplicated(x32, np.ones_like(x32)))
    np.testing.assert_array_equal(y, np.logaddexp.accumulate(x32, axis=-1, dtype=np.float64))
    assert t.dtype == np.float64
    np.testing.assert_allclose(t, 1.0, rtol=1e-12)   # y(x + c) = y(x) + c
    with pytest.raises(TypeError, match="dtype=int64"):
        autodiff(Reverse, lambda x: np.sum(np.logaddexp.accumulate(x, dtype=np.int64)), Active,
                 Active(x))


@pytest.mark.parametrize("x, kw, error", [(np.array(1.0), {}, TypeError),
                                          (np.ones((2, 3)), {"axis": None}, ValueError),
                                          (np.ones((2, 3)), {"axis": 2}, np.exceptions.AxisError)])
def test_numpys_errors(x, kw, error):
    with pytest.raises(error):
        np.logaddexp.accumulate(x, **kw)
    with pytest.raises(error):
        autodiff(Reverse, lambda x: np.sum(np.logaddexp.accumulate(x, **kw)), Active, Active(x))


def test_out_and_empty_axis():
    def f(x):
        out = np.empty_like(x)
        np.logaddexp.accumulate(x, axis=0, out=out)
        return np.sum(out)

    x = np.log(np.arange(1.0, 4.0))
    (g,), = autodiff(Reverse, f, Active, Active(x))
    np.testing.assert_allclose(g, [1.5, 1.0, 0.5], rtol=1e-14)   # (j+1) * sum_{i>=j} 1/cum_i
    (g,), = autodiff(Reverse, lambda x: np.sum(np.logaddexp.accumulate(x)), Active,
                     Active(np.ones((0, 3))))
    assert g.shape == (0, 3)


def test_compiled_matches_eager_with_one_trace():
    def cox_like(x, w):
        return np.sum(w * np.logaddexp.accumulate(x[..., ::-1], axis=-1)[..., ::-1])

    w = rng.normal(size=(3, 20))
    rev = tape.compile(Reverse, cox_like, Active, Active, Const)
    fwd = tape.compile(Forward, np.logaddexp2.accumulate, Duplicated)
    for k in range(3):
        x = rng.normal(size=(3, 20)) * 10 ** k
        (got, _), = rev(Active(x.copy()), Const(w))
        (want, _), = autodiff(Reverse, cox_like, Active, Active(x.copy()), Const(w))
        np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-300)
        t = rng.normal(size=(3, 20))
        np.testing.assert_allclose(fwd(Duplicated(x[0], t[0]))[0],
                                   autodiff(Forward, np.logaddexp2.accumulate,
                                            Duplicated(x[0], t[0]))[0],
                                   rtol=1e-14, atol=1e-300)
    assert rev.stats.traces == 1 and fwd.stats.traces == 1


def test_make_zero_of_a_traced_infinite_entry_is_zero():
    _, v = autodiff(ReverseWithPrimal, lambda x: np.sum(tape.make_zero(x)), Active,
                    Active(np.array([1.0, NINF])))
    assert v == 0.0
