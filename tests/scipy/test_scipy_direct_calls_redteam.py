"""User code calling SciPy itself (`scipy.*`, not `tape.scipy`) on traced values, in eager
Reverse and Forward mode and under tape.compile. Each call must either give SciPy's primal with
the right derivative (central differences in float64, or a closed form), or raise a Hecate
error that names the SciPy function the user called and says what to do. A derivative of zero,
or one that ignores a path, is the failure looked for; so is an error that names SciPy's
internals (`__ua_function__`, `axis_nan_policy_wrapper`, `__init__`) or points to a replacement
that does not do the same thing.

Refusals of scipy.special.logsumexp/softmax/polygamma/factorial, scipy.linalg.expm/cho_factor/
logm/funm/lu/block_diag/toeplitz, scipy.stats.norm.logpdf/multivariate_normal,
scipy.signal.convolve/lfilter are in tests/tape/test_scipy_user_programs_redteam.py;
gaussian_filter, map_coordinates, fftconvolve, convolve2d, cdist, pdist, scipy.optimize's
solvers and scipy.sparse in tests/tape/test_library_boundaries_redteam.py.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("scipy")

import scipy.fft as sfft  # noqa: E402
import scipy.integrate as sint  # noqa: E402
import scipy.interpolate as si  # noqa: E402
import scipy.linalg as sl  # noqa: E402
import scipy.ndimage as nd  # noqa: E402
import scipy.optimize as so  # noqa: E402
import scipy.signal as sig  # noqa: E402
import scipy.spatial.distance as dist  # noqa: E402
import scipy.special as sp  # noqa: E402
import scipy.stats as st  # noqa: E402

import tape  # noqa: E402
import tape.scipy.stats as tst  # noqa: E402
from tape import Active, Forward, ReverseWithPrimal, autodiff  # noqa: E402
from tape.errors import HecateError  # noqa: E402

from numeric_checks import close, fd_gradient  # noqa: E402

X = np.array([0.3, -0.7, 1.2, 0.5])
T4 = np.linspace(0.0, 1.0, 4)
W3 = np.array([1.0, 2.0, 0.5])
SPD = np.array([[2.0, 0.3, 0.1, 0.0], [0.3, 1.5, 0.2, 0.1],
                [0.1, 0.2, 1.8, 0.3], [0.0, 0.1, 0.3, 2.2]])
MODES = ["reverse", "forward", "compile"]


def _s(y):
    return np.sum(np.sin(y))


def _run(mode, f, x):
    """(value, gradient) of f at x in `mode` (compile: traced once at x, run at x)."""
    if mode == "reverse":
        (g,), value = autodiff(ReverseWithPrimal, f, Active, Active(x.copy()))
    elif mode == "forward":
        g, = tape.gradient(Forward, f, x.copy())
        value = f(x.copy())
    else:
        compiled = tape.compile(ReverseWithPrimal, f, Active, Active)
        (g,), value = compiled(Active(x.copy()))
    return float(value), (np.zeros_like(x) if g is None else np.asarray(g))


def _message(mode, f, x):
    """The message of Hecate's refusal in `mode` (a HecateError, or the NotImplementedError of
    a function without a rule); fails if there is none."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises((HecateError, NotImplementedError)) as info:
            _run(mode, f, x)
    return str(info.value)


def _correct_or_refused(mode, f, x, named, want_grad=None):
    """Either a Hecate error naming `named`, or SciPy's primal and the right gradient."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            value, g = _run(mode, f, x)
        except HecateError as error:
            assert named in str(error), str(error)
            return
        want = float(f(x.copy()))
        assert abs(value - want) <= 1e-10 * max(1.0, abs(want)), (value, want)
        close(g, fd_gradient(f, x.copy()) if want_grad is None else want_grad, 1e-6)


def _replacement_exists(message):
    """A `tape.scipy.<module>.<name>` the message recommends is there."""
    if "Use the differentiable tape." not in message:
        return True
    path = message.split("Use the differentiable ")[1].split(" ")[0]
    obj = tape
    for part in path.split(".")[1:]:
        obj = getattr(obj, part, None)
    return obj is not None


# --------------------------------------------------------------------------- refused clearly
# (call on the traced vector X, what the message must name)
_REFUSED = {
    # scipy.interpolate: traced data and traced query points
    "CubicSpline(t, y)": (lambda x: _s(si.CubicSpline(T4, x)(np.array([0.1, 0.5]))),
                          "CubicSpline"),
    "CubicSpline(...)(xq)": (lambda x: _s(si.CubicSpline(np.linspace(-2, 2, 6),
                                                         np.arange(6.0) ** 2)(x)), "CubicSpline"),
    "interp1d(t, y)": (lambda x: _s(si.interp1d(T4, x)(np.array([0.1, 0.5]))), "interp1d"),
    "interp1d(...)(xq)": (lambda x: _s(si.interp1d(np.linspace(-2, 2, 6),
                                                   np.arange(6.0))(x)), "interp1d"),
    "make_interp_spline": (lambda x: _s(si.make_interp_spline(T4, x, k=3)(np.array([0.1]))),
                           "make_interp_spline"),
    "PchipInterpolator": (lambda x: _s(si.PchipInterpolator(T4, x)(np.array([0.1]))),
                          "PchipInterpolator"),
    "RegularGridInterpolator": (lambda x: _s(si.RegularGridInterpolator(
        (np.arange(2.0), np.arange(2.0)), x.reshape(2, 2))(np.array([[0.3, 0.6]]))),
        "RegularGridInterpolator"),
    "splrep": (lambda x: _s(si.splev(np.array([0.1]), si.splrep(T4, x, k=3))), "splrep"),
    # scipy.ndimage
    "ndimage.zoom": (lambda x: _s(nd.zoom(x, 2, order=1)), "zoom"),
    "ndimage.shift": (lambda x: _s(nd.shift(x, 0.5, order=1)), "shift"),
    "ndimage.uniform_filter1d": (lambda x: _s(nd.uniform_filter1d(x, 3)), "uniform_filter1d"),
    # scipy.spatial.distance
    "squareform": (lambda x: _s(dist.squareform(x[:3])), "squareform"),
    "euclidean": (lambda x: np.sin(dist.euclidean(x[:2], x[2:])), "euclidean"),
    "mahalanobis": (lambda x: np.sin(dist.mahalanobis(x[:2], x[2:], 2 * np.eye(2))),
                    "mahalanobis"),
    # scipy.integrate
    "simpson": (lambda x: np.sin(sint.simpson(x, x=T4)), "simpson"),
    "cumulative_trapezoid": (lambda x: _s(sint.cumulative_trapezoid(x, T4)),
                             "cumulative_trapezoid"),
    "solve_ivp(y0)": (lambda x: _s(sint.solve_ivp(lambda t, y: -0.5 * y, (0, 1), x).y[:, -1]),
                      "solve_ivp"),
    "solve_ivp(closure)": (lambda x: _s(sint.solve_ivp(lambda t, y: -x * y, (0, 1),
                                                       np.ones(4)).y[:, -1]), "solve_ivp"),
    "odeint(closure)": (lambda x: _s(sint.odeint(lambda y, t: -x * y, np.ones(4),
                                                 [0.0, 1.0])[-1]), "odeint"),
    # scipy.signal
    "savgol_filter": (lambda x: _s(sig.savgol_filter(np.concatenate([x, x]), 5, 2)),
                      "savgol_filter"),
    "correlate": (lambda x: _s(sig.correlate(x, W3)), "tape.scipy.signal.correlate"),
    "filtfilt": (lambda x: _s(sig.filtfilt([0.5, 0.5], [1.0], np.tile(x, 3))), "filtfilt"),
    # scipy.stats
    "t.logpdf": (lambda x: np.sum(st.t.logpdf(x, 4.0)), "tape.scipy.stats"),
    "norm.logpdf(scale=traced)": (lambda x: np.sum(st.norm.logpdf(1.0, 0.0, np.exp(x))),
                                  "tape.scipy.stats"),
    "gaussian_kde(data)(xq)": (lambda x: _s(st.gaussian_kde(np.array([0.0, 1.0, 2.0, 0.5]))(x)),
                               "gaussian_kde"),
    "expon.logpdf": (lambda x: np.sum(st.expon.logpdf(np.exp(x), scale=2.0)), "expon.logpdf"),
    # scipy.linalg
    "solve_triangular": (lambda x: _s(sl.solve_triangular(np.triu(SPD), x)),
                         "tape.scipy.linalg.solve_triangular"),
    "lu_factor/lu_solve": (lambda x: _s(sl.lu_solve(sl.lu_factor(SPD), x)),
                           "tape.scipy.linalg.lu_solve"),
    "cho_solve": (lambda x: _s(sl.cho_solve(sl.cho_factor(SPD), x)),
                  "tape.scipy.linalg.cho_solve"),
    "circulant": (lambda x: _s(sl.circulant(x) @ np.arange(4.0)), "circulant"),
    "hankel": (lambda x: _s(sl.hankel(x) @ np.arange(4.0)), "hankel"),
    "svdvals": (lambda x: _s(sl.svdvals(x.reshape(2, 2))), "tape.scipy.linalg.svdvals"),
    "pinv": (lambda x: _s(sl.pinv(x.reshape(2, 2))), "pinv"),
    # scipy.special: non-ufuncs, ufuncs without a rule, ufunc methods without a rule
    "log_softmax": (lambda x: _s(sp.log_softmax(x)), "tape.scipy.special.log_softmax"),
    "multigammaln": (lambda x: np.sin(sp.multigammaln(x[0] + 3, 2)),
                     "tape.scipy.special.multigammaln"),
    "boxcox": (lambda x: _s(sp.boxcox(x + 2, 0.5)), "scipy.special.boxcox"),
    "xlogy.reduce": (lambda x: np.sin(sp.xlogy.reduce(x + 2)), "xlogy.reduce"),
    "erf.at": (lambda x: (lambda z: (sp.erf.at(z, [0, 2]), _s(z))[1])(x * 1.0), "erf.at"),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", _REFUSED)
def test_a_direct_scipy_call_is_refused_naming_it(name, mode):
    fn, named = _REFUSED[name]
    message = _message(mode, fn, X)
    assert named in message, message
    assert _replacement_exists(message), message


# --------------------------------------------------------------------------- followed exactly
def _brent_argmin(x):
    return so.brent(lambda z: (z - x[0]) ** 2 + x[1] * z ** 4, tol=1e-12)


def _argmin_grad(x):
    """d argmin_z ((z - a)^2 + b z^4) / d(a, b), by the implicit function theorem."""
    z = _brent_argmin(x)
    h = 2 + 12 * x[1] * z ** 2
    return np.array([2 / h, -4 * z ** 3 / h])


_FOLLOWED = {
    # SciPy code written in Python and NumPy, with the traced value in a closure
    "integrate.fixed_quad(closure)": (
        lambda x: sint.fixed_quad(lambda s: np.exp(x[0] * s), 0, x[1] + 2, n=8)[0], X[:2]),
    # scipy.special ufunc methods and the Python-level softplus
    "xlogy.outer(traced, plain)": (lambda x: _s(sp.xlogy.outer(x + 2, W3)), X),
    "beta.outer(plain, traced)": (lambda x: _s(sp.beta.outer(W3, x + 2)), X),
    "softplus": (lambda x: _s(sp.softplus(x)) if hasattr(sp, "softplus") else _s(x), X),
    "expit(x, out=zeros_like(x))": (
        lambda x: (lambda b: (sp.expit(x, out=b), _s(b))[1])(np.zeros_like(x)), X),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", _FOLLOWED)
def test_python_level_scipy_code_is_differentiated(name, mode):
    fn, x = _FOLLOWED[name]
    _correct_or_refused(mode, fn, x, named="\0never")   # an error fails


_SOLVERS = {
    # golden-section search builds its iterates from the bracket alone (a derivative of exactly
    # zero if it were followed); brent and fminbound carry the traced values through whichever
    # parabolic steps they took last
    "golden": lambda x: so.golden(lambda z: (z - x[0]) ** 2 + x[1] * z ** 4, tol=1e-12),
    "brent": _brent_argmin,
    "fminbound": lambda x: so.fminbound(lambda z: (z - x[0]) ** 2 + x[1] * z ** 4, -3, 3,
                                        xtol=1e-12),
    "bisect": lambda x: so.bisect(lambda z: z ** 3 + z - x[0], -5.0, 5.0),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", _SOLVERS)
def test_a_solver_deciding_on_traced_values_is_refused_naming_it(name, mode):
    message = _message(mode, _SOLVERS[name], np.array([0.3, 0.1]))
    assert f"scipy.optimize.{name}" in message and "implicit function theorem" in message, \
        message


def test_the_implicit_derivative_the_refusal_points_to():
    # What the message recommends: solve with plain values, and give the minimiser dz*/dx =
    # -(d2g/dz2)^-1 d2g/dzdx in a custom rule; checked against the closed form.
    def argmin(x):
        return _brent_argmin(x)

    def augmented(cfg, x):
        z = argmin(x)
        return z, (z, x)

    def reverse(cfg, saved, g):
        z, x = saved
        h = 2 + 12 * x[1] * z ** 2
        return (g * np.array([2.0, -4.0 * z ** 3]) / h,)

    rule = tape.custom_rule(argmin, augmented_primal=augmented, reverse=reverse)
    x = np.array([0.3, 0.1])
    (g,), = tape.autodiff(tape.Reverse, rule, Active, Active(x))
    close(g, _argmin_grad(x), 1e-12)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("call", ["quad", "quad_vec"])
def test_quad_with_a_traced_integrand_is_refused_naming_quad(call, mode):
    if call == "quad":
        f = lambda x: sint.quad(lambda s: np.sin(x[0] * s), 0, 1)[0] + x[1]  # noqa: E731
    else:
        f = lambda x: _s(sint.quad_vec(lambda s: np.sin(x * s), 0, 1)[0])  # noqa: E731
    message = _message(mode, f, X)
    assert f"scipy.integrate.{call}" in message, message


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("call", ["fft", "rfft", "dct"])
def test_scipy_fft_is_refused_naming_the_transform(call, mode):
    fn = getattr(sfft, call)
    message = _message(mode, lambda x: _s(np.abs(fn(x))), X)
    assert f"scipy.fft.{call}" in message and "__ua_function__" not in message, message
    if call != "dct":
        assert f"np.fft.{call}" in message, message


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("call", ["skew", "entropy", "gmean"])
def test_axis_nan_policy_stats_are_refused_naming_them(call, mode):
    fn = getattr(st, call)
    message = _message(mode, lambda x: np.sin(fn(np.exp(x))), X)
    assert f"scipy.stats.{call}" in message and "axis_nan_policy" not in message, message


@pytest.mark.parametrize("mode", MODES)
def test_barycentric_interpolator_is_refused_naming_it(mode):
    f = lambda x: _s(si.BarycentricInterpolator(T4, x)(np.array([0.1, 0.5])))  # noqa: E731
    message = _message(mode, f, X)
    assert "BarycentricInterpolator" in message and "np.__init__" not in message, message


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dist", ["norm", "multivariate_normal"])
def test_frozen_distribution_refusal_points_to_the_tape_distribution(dist, mode):
    if dist == "norm":
        f = lambda x: np.sum(st.norm(0.3, 1.2).logpdf(x))  # noqa: E731
    else:
        f = lambda x: st.multivariate_normal(np.zeros(4), SPD).logpdf(x)  # noqa: E731
    message = _message(mode, f, X)
    assert f"tape.scipy.stats.{dist}" in message and "has no" not in message, message
    # the replacement it should point to exists and is right
    frozen = (tst.norm(0.3, 1.2) if dist == "norm"
              else tst.multivariate_normal(np.zeros(4), SPD))
    _correct_or_refused(mode, lambda x: np.sum(frozen.logpdf(x)), X, "\0never")


@pytest.mark.parametrize("mode", MODES)
def test_multiufunc_special_function_is_refused_naming_it(mode):
    message = _message(mode, lambda x: _s(sp.legendre_p(2, 0.5 * x)), X)
    assert "legendre_p" in message, message


@pytest.mark.parametrize("mode", MODES)
def test_ndimage_convolve_is_not_said_to_be_np_convolve(mode):
    assert not np.allclose(nd.convolve(X, W3), np.convolve(X, W3)[:4])   # not the same thing
    message = _message(mode, lambda x: _s(nd.convolve(x, W3)), X)
    assert "scipy.ndimage.convolve" in message and "Use np.convolve" not in message, message


def test_lambertw_refusal_names_the_public_function():
    with pytest.raises(NotImplementedError) as info:
        tape.gradient(ReverseWithPrimal, lambda x: _s(np.real(sp.lambertw(x + 2))), X.copy())
    assert "scipy.special.lambertw" in str(info.value), str(info.value)
