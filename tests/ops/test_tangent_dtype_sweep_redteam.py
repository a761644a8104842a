"""Forward-mode tangents of traced calls on inputs that are not float64, against NumPy and SciPy.

A forward tangent has its primal's dtype (NumPy's or SciPy's result dtype), in single-direction
forward mode, in every lane of batch mode (W = 2) and compiled; its values are float64 central
differences of the float64 version of the call, to the precision of the dtype. The calls are
those of the primal dtype sweep (float32, float16, complex64 and mixed-dtype arguments), then
tape.scipy.special and tape.scipy.stats on float32 and float16, nan-quantiles of a traced q,
the FFT with every `norm=`, and np.linalg on float16 (refused as NumPy refuses it). Known
defects are strict xfails, one per cause.
"""
import numpy as np
import pytest
import scipy.special as ss
import scipy.stats as st

import tape
import tape.scipy.special as ts
import tape.scipy.stats as tst
from tape import BatchDuplicated, Const, Duplicated, Forward, ForwardWithPrimal, autodiff
from tape.testing import traced_value
from test_primal_dtype_sweep_redteam import CASES, F32, MASK, P32, _outs, _traced

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

_DIRECTIONS = np.random.default_rng(7)


def _direction(a):
    """A tangent for argument `a`, of its type and dtype (None for an untraced one)."""
    if not _traced(a):
        return None
    d = _DIRECTIONS.uniform(-1, 1, np.shape(a))
    if np.iscomplexobj(a):
        d = d + 1j * _DIRECTIONS.uniform(-1, 1, np.shape(a))
    if type(a) in (float, complex):
        return type(a)(d)
    d = np.asarray(d).astype(np.asarray(a).dtype)
    return d if isinstance(a, np.ndarray) else d[()]


def _wide(a):
    """`a` in float64 (complex128): a Python float turns strong, so that the call computes
    in float64 around it."""
    if a is None or not _traced(a):
        return a
    return np.asarray(a).astype(np.complex128 if np.iscomplexobj(a) else np.float64)


def _central(f, args, dirs, eps):
    """Central differences of f along `dirs`, on the float64 (complex128) arguments."""
    wide, step = [_wide(a) for a in args], [_wide(d) for d in dirs]
    plus = [a if d is None else a + eps * d for a, d in zip(wide, step)]
    minus = [a if d is None else a - eps * d for a, d in zip(wide, step)]
    return [(np.asarray(p, np.complex128) - np.asarray(m, np.complex128)) / (2 * eps)
            for p, m in zip(_outs(f(*plus)), _outs(f(*minus)))]


def _tol(args, dtype):
    narrow = dtype == np.float16 or any(np.asarray(a).dtype == np.float16
                                        for a in args if _traced(a))
    return 3e-2 if narrow else 2e-4


def _check_tangents(f, args, want, eps=1e-6, ref=None):
    """Forward, forward-with-primal and batch tangents of f against `want` (NumPy's value)
    in dtype, and against central differences of `ref` (f by default) in value."""
    want = _outs(want)
    dirs = [_direction(a) for a in args]
    annotated = [Const(a) if d is None else Duplicated(a, d) for a, d in zip(args, dirs)]
    tangent, value = autodiff(ForwardWithPrimal, f, Duplicated, *annotated)
    (alone,) = autodiff(Forward, f, Duplicated, *annotated)
    tangents, values = _outs(tangent), _outs(value)
    assert [t.dtype for t in tangents] == [w.dtype for w in want] == [v.dtype for v in values]
    assert [t.dtype for t in _outs(alone)] == [w.dtype for w in want]
    for t, r, w in zip(tangents, _central(ref or f, args, dirs, eps), want):
        tol = _tol(args, w.dtype)
        np.testing.assert_allclose(t.astype(np.complex128), r, rtol=tol,
                                   atol=tol * max(1.0, np.nanmax(np.abs(r), initial=0.0)))
    batch = [Const(a) if d is None else BatchDuplicated(a, (d, 2 * d))
             for a, d in zip(args, dirs)]
    (lanes,) = autodiff(Forward, f, BatchDuplicated, *batch)
    for lane, scale in zip(lanes, (1, 2)):
        assert [t.dtype for t in _outs(lane)] == [w.dtype for w in want]
        for t, one, w in zip(_outs(lane), tangents, want):
            tol = _tol(args, w.dtype)   # a lane may round where the single direction does not
            np.testing.assert_allclose(t, scale * one, rtol=tol, atol=tol * max(
                1.0, np.nanmax(np.abs(one), initial=0.0)), equal_nan=True)
    return tangents


# -- (a) the calls of the primal sweep, in forward mode ---------------------------------------
# Traced Python float arguments of a float32 program: xfail below.
PYTHON_FLOAT_CASES = {"Python float ** float32 array", "Python float where, maximum, clip bound"}
WIDE_PARTIAL_CASES = {"i0 [f16]"}
# Calls that compute in float32 whatever their input (dtype=float32): a long step.
LINEAR_IN_FLOAT32 = {"sum, mean, cumsum dtype=float32 [f32]",
                     "sum, mean, cumsum dtype=float32 [f16]", "linspace dtype=float32 of float64"}
SWEEP = [n for n in CASES if n not in PYTHON_FLOAT_CASES | WIDE_PARTIAL_CASES]


@pytest.mark.parametrize("name", SWEEP)
def test_forward_tangent_has_numpys_dtype_and_the_derivative(name):
    f, args, ref = CASES[name]
    _check_tangents(f, args, ref(*args), eps=1e-2 if name in LINEAR_IN_FLOAT32 else 1e-6,
                    ref=ref)


S = 0.3
PYTHON_FLOAT = {
    "x + s": lambda s: F32 + s,
    "s - x": lambda s: s - F32,
    "where(mask, x, s)": lambda s: np.where(MASK, F32, s),
    "maximum(x, s), fmin(s, x)": lambda s: np.maximum(F32, s) + np.fmin(s, F32),
    "clip(x, s, 2.0)": lambda s: np.clip(F32, s, 2.0),
    "s ** |x|": lambda s: s ** P32,
    "copysign(s, x), heaviside(x, s)": lambda s: np.copysign(s, F32) + np.heaviside(F32, s),
    "kl_div(|x|, s)": lambda s: ts.kl_div(P32, s),
    "xlogy(s, |x|) (SciPy: float64)": lambda s: ts.xlogy(s, P32),
}


@pytest.mark.parametrize("name", PYTHON_FLOAT)
def test_tangent_of_a_traced_python_float_has_the_primal_dtype(name):
    f = PYTHON_FLOAT[name]
    want = f(S)
    np.testing.assert_allclose(autodiff(Forward, f, Duplicated(S, 1.0))[0].astype(np.float64),
                               _central(f, [S], [1.0], 1e-6)[0].real, rtol=1e-4, atol=1e-4)
    compiled = tape.compile(ForwardWithPrimal, f, Duplicated, Duplicated)
    for _ in range(2):
        ctangent, cprimal = compiled(Duplicated(S, 1.0))
    assert np.asarray(cprimal).dtype == np.asarray(ctangent).dtype == want.dtype
    _check_tangents(f, [S], want)


WIDE_PARTIAL = {
    "np.i0 [f16]": (np.i0, F32.astype(np.float16), None),
    "kl_div(x, 1.5) [f32]": (lambda a: ts.kl_div(a, 1.5), P32, lambda a: ss.kl_div(a, 1.5)),
    "rel_entr(x, 1.5) [f16]": (lambda a: ts.rel_entr(a, 1.5), P32.astype(np.float16),
                               lambda a: ss.rel_entr(a, 1.5)),
    "betainc(a, b, x) [f16]": (lambda x: ts.betainc(np.float16(1.5), np.float16(2.5), x),
                               (P32 / 3).astype(np.float16),
                               lambda x: ss.betainc(np.float16(1.5), np.float16(2.5), x)),
}


@pytest.mark.parametrize("name", WIDE_PARTIAL)
def test_special_rule_tangent_has_the_result_dtype(name):
    f, x, ref = WIDE_PARTIAL[name]
    _check_tangents(f, [x], (ref or f)(x), ref=ref)


# -- (b) tape.scipy.special and tape.scipy.stats on float32 and float16 -----------------------
_X = np.array([0.5, -1.25, 2.5, 0.75])
_P = np.abs(_X)
_U = np.array([0.2, 0.45, 0.7, 0.9])
SCIPY = {
    "logsumexp": (ts.logsumexp, ss.logsumexp, _X),
    "logsumexp(b=x * x)": (lambda a: ts.logsumexp(a, b=a * a), lambda a: ss.logsumexp(a, b=a * a),
                           _X),
    "logsumexp axis=1": (lambda a: ts.logsumexp(a.reshape(2, 2), axis=1),
                         lambda a: ss.logsumexp(a.reshape(2, 2), axis=1), _X),
    "softmax axis=0": (lambda a: ts.softmax(a.reshape(2, 2), axis=0),
                       lambda a: ss.softmax(a.reshape(2, 2), axis=0), _X),
    "log_softmax": (ts.log_softmax, ss.log_softmax, _X),
    "expit, logit": (lambda a: ts.expit(a) + ts.logit(a / 3 + 0.5),
                     lambda a: ss.expit(a) + ss.logit(a / 3 + 0.5), _X / 2),
    "erf, erfc": (lambda a: ts.erf(a) + ts.erfc(a), lambda a: ss.erf(a) + ss.erfc(a), _X),
    "erfinv": (ts.erfinv, ss.erfinv, _U - 0.5),
    "gammaln, digamma": (lambda a: ts.gammaln(a) + ts.digamma(a),
                         lambda a: ss.gammaln(a) + ss.digamma(a), _P + 0.5),
    "xlogy(x, x), xlog1py(x, x)": (lambda a: ts.xlogy(a, a) + ts.xlog1py(a, a),
                                   lambda a: ss.xlogy(a, a) + ss.xlog1py(a, a), _P),
    "xlogy(x, 2.0) (SciPy: float64)": (lambda a: ts.xlogy(a, 2.0), lambda a: ss.xlogy(a, 2.0),
                                       _X),
    "entr, rel_entr(x, x[::-1])": (lambda a: ts.entr(a) + ts.rel_entr(a, a[::-1]),
                                   lambda a: ss.entr(a) + ss.rel_entr(a, a[::-1]), _P),
    "kl_div(x, x[::-1])": (lambda a: ts.kl_div(a, a[::-1]), lambda a: ss.kl_div(a, a[::-1]), _P),
    "i0e, i1e": (lambda a: ts.i0e(a) + ts.i1e(a), lambda a: ss.i0e(a) + ss.i1e(a), _X),
    "ndtr, log_ndtr": (lambda a: ts.ndtr(a) + ts.log_ndtr(a),
                       lambda a: ss.ndtr(a) + ss.log_ndtr(a), _X),
    "ndtri": (ts.ndtri, ss.ndtri, _U),
    "norm.logpdf, norm.cdf": (lambda a: tst.norm.logpdf(a) + tst.norm.cdf(a),
                              lambda a: st.norm.logpdf(a) + st.norm.cdf(a), _X),
    "norm.logpdf(1.0, loc=x, 2.0)": (lambda a: tst.norm.logpdf(1.0, a, 2.0),
                                     lambda a: st.norm.logpdf(1.0, a, 2.0), _X),
    "t.logpdf(x, 3.0)": (lambda a: tst.t.logpdf(a, 3.0), lambda a: st.t.logpdf(a, 3.0), _X),
    "gamma.logpdf(x, 2.0), gamma.logpdf(1.5, x)": (
        lambda a: tst.gamma.logpdf(a, 2.0) + tst.gamma.logpdf(1.5, a + 0.5),
        lambda a: st.gamma.logpdf(a, 2.0) + st.gamma.logpdf(1.5, a + 0.5), _P),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("name", SCIPY)
def test_scipy_tangent_and_gradient_have_scipys_dtypes(name, dtype):
    f, ref, x = SCIPY[name]
    x = x.astype(dtype)
    want = ref(x)
    value = traced_value(f, x, mode="reverse")
    assert np.asarray(value).dtype == np.asarray(want).dtype
    tol = 4 * np.finfo(np.asarray(want).dtype).eps ** 0.5
    np.testing.assert_allclose(value, want, rtol=tol, atol=tol)
    (tangent,) = _check_tangents(f, [x], want, ref=ref)
    (grad,) = tape.gradient(tape.Reverse, lambda a: np.sum(f(a)), x.copy())
    assert grad.dtype == dtype
    # the gradient against the forward derivative along ones, in float64
    (along_ones,) = autodiff(Forward, lambda a: np.sum(f(a)), Duplicated(x.copy(),
                                                                         np.ones_like(x)))
    np.testing.assert_allclose(np.sum(grad, dtype=np.float64), np.float64(along_ones),
                               rtol=5e-3 if dtype == np.float16 else 1e-5, atol=1e-3)
    assert tangent.dtype == np.asarray(want).dtype


# -- (c) nan-quantiles of a traced q, FFT norms, float16 linalg -------------------------------
N32 = np.array([0.5, np.nan, 2.5, 0.75, -1.25], np.float32)
QUANTILES = {
    "nanquantile(x, np.float32 q)": (lambda q: np.nanquantile(N32, q), (np.float32(0.3),)),
    "nanquantile(x, Python q)": (lambda q: np.nanquantile(N32, q), (0.3,)),
    "nanpercentile(x, float32 q array)": (lambda q: np.nanpercentile(N32, q),
                                          (np.array([30, 60], np.float32),)),
    "nanpercentile(x, float64 q array) (float64)": (lambda q: np.nanpercentile(N32, q),
                                                    (np.array([30.0, 60.0]),)),
    "nanquantile(x and q), axis, keepdims": (
        lambda a, q: np.nanquantile(np.stack([a, 2 * a]), q, axis=1, keepdims=True),
        (N32, np.float32(0.4))),
    "nanmedian, nanquantile midpoint [f16]": (
        lambda a: np.nanmedian(a) + np.nanquantile(a, 0.3, method="midpoint"),
        (N32.astype(np.float16),)),
}


@pytest.mark.parametrize("name", QUANTILES)
def test_nan_quantile_tangents_in_q_and_x(name):
    f, args = QUANTILES[name]
    _check_tangents(f, list(args), f(*args))


@pytest.mark.parametrize("norm", [None, "backward", "ortho", "forward"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
def test_fft_tangents_keep_numpys_dtype_with_every_norm(norm, dtype):
    def f(a):
        return (np.fft.fft(a, norm=norm), np.fft.ifft(a + 1j * a[::-1], n=6, norm=norm),
                np.fft.rfft(a, norm=norm), np.fft.irfft(a, n=6, norm=norm),
                np.fft.hfft(a, norm=norm), np.fft.ihfft(a, norm=norm),
                np.fft.fft2(a.reshape(2, 2), norm=norm), np.fft.irfftn(a.reshape(2, 2), norm=norm))
    x = F32.astype(dtype)
    want = f(x)
    assert {w.dtype.kind for w in want} == {"c", "f"} and np.complex128 not in [
        w.dtype for w in want]   # NumPy 2: complex64; float16 irfft / hfft stay float16
    _check_tangents(f, [x], want)


L = np.linalg
_M16 = (3 * np.eye(3) + 0.1 * np.arange(9).reshape(3, 3)).astype(np.float16)
LINALG16 = {"inv": L.inv, "det": L.det, "slogdet": L.slogdet, "solve": lambda a: L.solve(a, a[0]),
            "eigvalsh": L.eigvalsh, "svd": L.svd, "cholesky": lambda a: L.cholesky(a @ a.T),
            "qr": L.qr, "pinv": L.pinv, "norm 2": lambda a: L.norm(a, 2),
            "matrix_power -1": lambda a: L.matrix_power(a, -1), "lstsq": lambda a: L.lstsq(a, a)}


@pytest.mark.parametrize("mode", ["forward", "reverse"])
@pytest.mark.parametrize("name", LINALG16)
def test_float16_linalg_is_refused_as_numpy_refuses_it(name, mode):
    f = LINALG16[name]
    with pytest.raises(TypeError) as numpy_error:
        f(_M16)
    with pytest.raises(TypeError) as traced_error:
        traced_value(f, _M16, mode=mode)
    assert str(traced_error.value) == str(numpy_error.value)


# -- (d) compiled forward: the eager tangents, dtype and values -------------------------------
COMPILED = {
    **{n: CASES[n][:2] for n in ["x * 0.1 [f16]", "var, std(ddof=1) [f32]", "fft, ifft, hfft [f32]",
                                 "rfft, irfft, rfftn [f16]", "median, percentile, quantile list "
                                 "[f32]", "inv, det [c64]", "float16 @ float32, einsum",
                                 "Python float * float32", "scipy.special.softmax [f16]",
                                 "average weights float32 [f16]"]},
    "nanquantile(x, np.float32 q)": QUANTILES["nanquantile(x, np.float32 q)"],
    "norm.logpdf [f32]": (SCIPY["norm.logpdf, norm.cdf"][0], (_X.astype(np.float32),)),
    "erfinv [f16]": (ts.erfinv, ((_U - 0.5).astype(np.float16),)),
    "fft ortho, rfft forward [f32]": (lambda a: (np.fft.fft(a, norm="ortho"),
                                                 np.fft.rfft(a, norm="forward")), (F32,)),
}


@pytest.mark.parametrize("name", COMPILED)
def test_compiled_forward_tangents_are_eagers(name):
    f, args = COMPILED[name]
    dirs = [_direction(a) for a in args]
    kinds = [Const if d is None else Duplicated for d in dirs]
    annotated = [Const(a) if d is None else Duplicated(a, d) for a, d in zip(args, dirs)]
    eager, eager_primal = autodiff(ForwardWithPrimal, f, Duplicated, *annotated)
    compiled = tape.compile(ForwardWithPrimal, f, Duplicated, *kinds)
    batch = tape.compile(Forward, f, BatchDuplicated,
                         *[Const if k is Const else BatchDuplicated for k in kinds])
    for _ in range(2):
        tangent, primal = compiled(*annotated)
        (lanes,) = batch(*[Const(a) if d is None else BatchDuplicated(a, (d, 2 * d))
                           for a, d in zip(args, dirs)])
    assert compiled.stats.eager_calls == 0 and batch.stats.eager_calls == 0
    for got, want in [(tangent, eager), (primal, eager_primal), (lanes[0], eager)]:
        got, want = _outs(got), _outs(want)
        assert [g.dtype for g in got] == [w.dtype for w in want]
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(w).max()))
    assert [t.dtype for t in _outs(lanes[1])] == [t.dtype for t in _outs(eager)]
