"""Cases where tape.scipy and the scipy.special rules differed from SciPy (or crashed) as a user
differentiating their own SciPy code would meet them: derivatives at the edges of a domain,
keyword arguments honoured on plain values but dropped on traced ones, dtypes, and tails.
Each is compared with SciPy itself or with a closed form."""
from __future__ import annotations

import numpy as np
import pytest

sc = pytest.importorskip("scipy.special")
import scipy.integrate  # noqa: E402
import scipy.linalg  # noqa: E402
import scipy.stats  # noqa: E402

import tape  # noqa: E402
import tape.scipy.integrate as ti  # noqa: E402
import tape.scipy.linalg as tl  # noqa: E402
import tape.scipy.stats as ts  # noqa: E402
from tape import Active, Duplicated, Forward, Reverse, autodiff, gradient  # noqa: E402


def reverse_and_forward(f, x: float) -> tuple:
    """f'(x) by reverse mode (Active) and by forward mode (Duplicated), x a Python float."""
    (d_rev,), = autodiff(Reverse, f, Active, Active(x))
    d_fwd, = autodiff(Forward, f, Duplicated(x, 1.0))
    return d_rev, d_fwd


# -- scipy.special rules ---------------------------------------------------------------------------
@pytest.mark.parametrize("f, x", [(sc.logit, 0.0), (sc.logit, 1.0), (sc.log1p, -1.0)])
def test_derivative_at_a_pole_given_a_python_float_is_inf(f, x):
    # The partials were Python arithmetic on the Python float: ZeroDivisionError.
    with np.errstate(divide="ignore"):
        for d in reverse_and_forward(f, x):
            assert d == np.inf


@pytest.mark.parametrize("f, x", [
    (lambda x: sc.gammainc(1.0, x), -1.0),
    (lambda x: sc.gammaincc(1.0, x), -0.5),
    (lambda x: sc.betainc(1.0, 1.0, x), 1.5),
    (lambda x: sc.betainc(2.0, 1.0, x), -0.25),
])
def test_incomplete_gamma_and_beta_outside_the_domain_have_nan_derivatives(f, x):
    # SciPy's value is NaN there; the density formula alone gave a finite slope (e, 1, ...).
    assert np.isnan(f(x))
    with np.errstate(invalid="ignore"):
        assert all(np.isnan(d) for d in reverse_and_forward(f, x))


def test_incomplete_gamma_derivative_unchanged_inside_the_domain():
    x = np.array([0.0, 0.5, 3.0])
    g, = gradient(Reverse, lambda x: np.sum(sc.gammainc(1.0, x)), x)
    np.testing.assert_allclose(g, np.exp(-x), rtol=1e-14)


@pytest.mark.parametrize("v", [0.5, -0.5, 0.25])
def test_iv_derivative_at_zero_for_fractional_order_is_inf(v):
    # iv(v, x) ~ x^v near 0 (v = -0.5: a pole), so the slope at 0 is +-inf; it was NaN
    # (ive(v - 1, 0) is NaN in SciPy, and the small-x branch used it at x = 0 too).
    want = np.inf if v < 1 else 0.0
    with np.errstate(invalid="ignore", divide="ignore"):
        d_rev, d_fwd = reverse_and_forward(lambda x: sc.iv(v, x), 0.0)
    assert abs(d_rev) == want and abs(d_fwd) == want


def test_iv_derivative_at_zero_for_integer_orders_is_unchanged():
    for v, want in [(0.0, 0.0), (1.0, 0.5), (2.0, 0.0)]:
        assert reverse_and_forward(lambda x: sc.iv(v, x), 0.0) == (want, want)


# -- scipy.integrate.odeint with a Jacobian --------------------------------------------------------
@pytest.mark.parametrize("tfirst", [False, True])
def test_odeint_dfun_gets_args_and_the_tfirst_order_when_traced(tfirst):
    # A stiff decay, so that LSODA calls the Jacobian. The traced solve passed SciPy a wrapped
    # right-hand side but the user's Dfun unwrapped: called without `args` (TypeError) and in
    # (y, t) order even with tfirst=True.
    y0, t = np.array([1.0, -0.5]), np.array([0.0, 0.05, 0.1])
    calls = []

    def rate(y, tt, k):
        return -1000.0 * k * y

    def jac(y, tt, k):
        calls.append((np.shape(y), np.ndim(tt)))
        return np.diag([-1000.0 * k, -1000.0 * k])

    f = (lambda tt, y, k: rate(y, tt, k)) if tfirst else rate
    dfun = (lambda tt, y, k: jac(y, tt, k)) if tfirst else jac
    options = dict(Dfun=dfun, tfirst=tfirst, rtol=1e-10, atol=1e-10)
    (dk,), total = autodiff(tape.ReverseWithPrimal,
                            lambda k: np.sum(ti.odeint(f, y0, t, args=(k,), **options)),
                            Active, Active(0.7))
    assert calls and set(calls) == {((2,), 0)}
    plain = scipy.integrate.odeint(f, y0, t, args=(0.7,), **options)
    np.testing.assert_allclose(total, np.sum(plain), rtol=1e-12)
    exact = -1000.0 * t * np.exp(-700.0 * t) * np.sum(y0)   # d/dk of sum(y0 e^(-1000 k t))
    np.testing.assert_allclose(dk, np.sum(exact), rtol=1e-5, atol=1e-9)


# -- scipy.linalg: dtypes and check_finite on the traced path ----------------------------------------
def traced_result(f, *args):
    """What `f` returns when its arguments are being differentiated (reverse mode)."""
    kept = {}

    def loss(*a):
        kept["out"] = f(*a)
        outs = kept["out"] if isinstance(kept["out"], tuple) else (kept["out"],)
        return sum(np.sum(o) for o in outs if np.asarray(tape.primal(o)).dtype.kind == "f")
    autodiff(Reverse, loss, Active, *[Duplicated(a.copy(), np.zeros_like(a)) for a in args])
    out = kept["out"]
    return tuple(np.asarray(tape.primal(o)) for o in out) if isinstance(out, tuple) else \
        np.asarray(tape.primal(out))


_A32 = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]], np.float32)
_TALL32 = np.array([[2.0, 1.0], [0.5, 3.0], [1.0, -1.0]], np.float32)


@pytest.mark.parametrize("ours, scipys, args", [
    (tl.eigh, scipy.linalg.eigh, (_A32,)),
    (tl.svd, scipy.linalg.svd, (_A32,)),
    (tl.qr, scipy.linalg.qr, (_A32,)),
    (lambda a: tl.qr(a, mode="r"), lambda a: scipy.linalg.qr(a, mode="r"), (_TALL32,)),
    (tl.det, scipy.linalg.det, (_A32,)),
    (tl.expm_frechet, scipy.linalg.expm_frechet, (_A32, _A32.T.copy())),
])
def test_traced_results_have_scipys_dtype(ours, scipys, args):
    # Sign fixes (+-1.0 float64) turned float32 eigen- and singular vectors into float64; SciPy
    # returns det and expm_frechet in float64 for float32 input.
    want = scipys(*args)
    want = tuple(want) if isinstance(want, (tuple, list)) else (want,)
    for got in (ours(*args), traced_result(ours, *args)):
        got = got if isinstance(got, tuple) else (got,)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert np.asarray(g).dtype == w.dtype and np.shape(g) == np.shape(w)
            np.testing.assert_allclose(np.abs(g), np.abs(w), rtol=2e-5, atol=2e-5)


_NAN = np.array([[2.0, np.nan], [0.5, 3.0]])
_B = np.array([1.0, 2.0])


@pytest.mark.parametrize("name, call", [
    ("inv", lambda a, **k: tl.inv(a, **k)),
    ("det", lambda a, **k: tl.det(a, **k)),
    ("solve", lambda a, **k: tl.solve(a, _B, **k)),
    ("solve_triangular", lambda a, **k: tl.solve_triangular(a, _B, lower=True, **k)),
    ("cholesky", lambda a, **k: tl.cholesky(a, lower=True, **k)),
    ("cho_solve", lambda a, **k: tl.cho_solve((a, True), _B, **k)),
    ("lu_solve", lambda a, **k: tl.lu_solve((2.0 * np.eye(2), np.array([0, 1])), a[0], **k)),
    ("svdvals", lambda a, **k: tl.svdvals(a, **k)),
    ("norm", lambda a, **k: tl.norm(a, **k)),
])
def test_check_finite_is_honoured_on_traced_values(name, call):
    # SciPy raises for NaN input by default; the traced path dropped check_finite and returned
    # NaNs. With check_finite=False both compute (the traced solve_triangular raised then).
    # lu_solve checks b only, as SciPy's does.
    with pytest.raises(ValueError, match="infs or NaNs"):
        call(_NAN)
    with pytest.raises(ValueError, match=f"{name}: array must not contain infs or NaNs"):
        traced_result(call, _NAN)
    with np.errstate(invalid="ignore"):
        if name not in ("svdvals", "det"):   # LAPACK does not converge on some NaN input
            traced_result(lambda a: call(a, check_finite=False), _NAN)


def test_lu_solve_checks_only_b_as_scipy():
    lu = np.array([[2.0, np.nan], [0.5, 3.0]])   # SciPy's lu_solve computes with this
    want = scipy.linalg.lu_solve((lu, np.array([0, 1])), _B)
    got = traced_result(lambda lu: tl.lu_solve((lu, np.array([0, 1])), _B), lu)
    np.testing.assert_array_equal(got, want)


# -- scipy.stats: logcdf and logsf where the probability rounds to 1 ----------------------------------
@pytest.mark.parametrize("name, method, x, shapes", [
    ("t", "logcdf", 1e3, (5.0,)), ("t", "logcdf", 1e5, (5.0,)), ("t", "logsf", -1e3, (5.0,)),
    ("t", "logcdf", 9.0, (200.0,)), ("gamma", "logcdf", 40.0, (2.0,)),
    ("gamma", "logsf", 1e-9, (2.0,)), ("chi2", "logcdf", 80.0, (3.0,)),
    ("chi2", "logsf", 1e-9, (3.0,)), ("beta", "logcdf", 0.999, (2.0, 3.0)),
    ("beta", "logsf", 1e-9, (2.0, 3.0)), ("t", "logcdf", -3.0, (5.0,)), ("gamma", "logsf", 3.0, (2.0,)),
])
def test_log_probabilities_keep_their_digits_near_one(name, method, x, shapes):
    # log(cdf) gave 0 or -1.1e-16 where SciPy (log1p(-sf) above the median) gives -9.5e-25.
    want = getattr(getattr(scipy.stats, name), method)(x, *shapes)
    ours = getattr(getattr(ts, name), method)
    np.testing.assert_allclose(ours(x, *shapes), want, rtol=1e-12)
    (dx,), got = autodiff(tape.ReverseWithPrimal, lambda x: ours(x, *shapes), Active, Active(x))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    # d/dx log P(X <= x) = pdf / cdf and d/dx log P(X > x) = -pdf / sf
    dist = getattr(scipy.stats, name)
    slope = dist.pdf(x, *shapes) / (dist.cdf(x, *shapes) if method == "logcdf"
                                    else -dist.sf(x, *shapes))
    np.testing.assert_allclose(dx, slope, rtol=1e-9)
