"""User code that hands traced values to libraries, or to NumPy spellings, that would turn them
into plain arrays: scipy.sparse operators and solvers with a Const sparse matrix, scipy.optimize
called inside f, scipy.ndimage / scipy.spatial, the math and statistics modules, conversions to
object, string and structured dtypes. Each case must either differentiate correctly (plain
NumPy's primal, central differences in float64; tape.compile matching on two inputs) or raise
a Hecate error that names what was called. A silent wrong primal or a dropped derivative is
the failure these tests look for.
"""
from __future__ import annotations

import functools
import math
import statistics
import warnings

import numpy as np
import pytest

pytest.importorskip("scipy")

import scipy.ndimage as nd  # noqa: E402
import scipy.optimize as so  # noqa: E402
import scipy.signal as sig  # noqa: E402
import scipy.sparse as ss  # noqa: E402
import scipy.sparse.linalg as ssl  # noqa: E402
import scipy.spatial.distance as dist  # noqa: E402

import tape  # noqa: E402
from tape import Active, ReverseWithPrimal, autodiff  # noqa: E402
from tape.errors import HecateError  # noqa: E402

from numeric_checks import close, fd_gradient  # noqa: E402

X = np.array([0.3, -0.7, 1.2, 0.5])
D = np.diag([2.0, 1.0, 3.0, 1.0]) + np.diag([0.5, 0.25, 0.5], 1)


def _check(f, x):
    """Eager reverse mode at x equals plain NumPy's value and central differences."""
    (g,), val = autodiff(ReverseWithPrimal, f, Active, Active(x.copy()))
    want = float(f(x.copy()))
    assert abs(float(val) - want) <= 1e-10 * max(1.0, abs(want)), (val, want)
    close(np.zeros_like(x) if g is None else g, fd_gradient(f, x.copy()), 1e-6)


def _check_compiled(f, x):
    """_check, then tape.compile at x and a second point, each equal to eager and to plain."""
    _check(f, x)
    compiled = tape.compile(ReverseWithPrimal, f, Active, Active)
    for z in (x, 1.1 * x + 0.05):
        (g,), val = compiled(Active(z.copy()))
        (ge,), ve = autodiff(ReverseWithPrimal, f, Active, Active(z.copy()))
        assert abs(float(val) - float(ve)) <= 1e-10 * max(1.0, abs(float(ve)))
        close(g, ge, 1e-10)
        close(g, fd_gradient(f, z.copy()), 1e-6)


def _correct_or_refused(f, x, named):
    """Either a Hecate error whose message contains `named`, or a correct value and gradient
    (a silent wrong answer, or an error from inside a library that does not say what happened,
    fails)."""
    try:
        autodiff(ReverseWithPrimal, f, Active, Active(x.copy()))
    except HecateError as error:
        assert named in str(error), str(error)
        return
    _check(f, x)


# --------------------------------------------------------------------------- refused clearly
_REFUSED = {
    # scipy.sparse with a Const sparse matrix (csr/csc/coo, matrices and arrays) and traced data
    "csr_matrix @ x": (lambda x: ss.csr_matrix(D) @ x, "csr_matrix.__matmul__"),
    "csc_array.dot(x)": (lambda x: ss.csc_array(D).dot(x), "csc_array.dot"),
    "coo_matrix.multiply(x)": (lambda x: ss.coo_matrix(D).multiply(x).toarray(), "multiply"),
    "csr_array * x": (lambda x: ss.csr_array(D) * x, "csr_array.__mul__"),
    "spsolve(csc_matrix, b)": (lambda x: ssl.spsolve(ss.csc_matrix(D), x), "spsolve"),
    "spsolve(csr_array, b)": (lambda x: ssl.spsolve(ss.csr_array(D), x), "spsolve"),
    "cg": (lambda x: ssl.cg(ss.csr_matrix(D), x)[0], "cg"),
    "csr_matrix((traced, (i, j)))": (
        lambda x: ss.csr_matrix((x, (np.arange(4), np.arange(4))), shape=(4, 4)) @ np.ones(4),
        "scipy.sparse.csr_matrix"),
    "coo_array((traced, (i, j)))": (
        lambda x: ss.coo_array((x, (np.arange(4), np.arange(4))), shape=(4, 4)) @ np.ones(4),
        "scipy.sparse.coo_array"),
    "LinearOperator.matvec": (lambda x: ssl.aslinearoperator(ss.csr_matrix(D)).matvec(x),
                              "matvec"),
    # scipy.ndimage, scipy.signal, scipy.spatial (no tape.scipy module for most)
    "ndimage.gaussian_filter": (lambda x: nd.gaussian_filter(x, 1.0), "gaussian_filter"),
    "ndimage.map_coordinates": (lambda x: nd.map_coordinates(x, [[0.5, 2.2]], order=1),
                                "map_coordinates"),
    "signal.fftconvolve": (lambda x: sig.fftconvolve(x, [1.0, 2.0, 0.5]), "fftconvolve"),
    "signal.convolve2d": (lambda x: sig.convolve2d(x.reshape(2, 2), [[1.0, 2.0]]),
                          "convolve2d"),
    "spatial.cdist": (lambda x: dist.cdist(x.reshape(2, 2), np.eye(2)), "cdist"),
    "spatial.pdist": (lambda x: dist.pdist(x.reshape(2, 2)), "pdist"),
    # scipy.optimize where the traced value reaches the solver's own arguments
    "optimize.least_squares": (lambda x: so.least_squares(lambda z: z - x, np.zeros(4)).x,
                               "least_squares"),
    "optimize.curve_fit": (lambda x: so.curve_fit(lambda t, a, b: a * t + b, np.arange(4.0),
                                                  x)[0], "curve_fit"),
    # the math module on a 0-d traced value, through float(x)
    "math.log1p": (lambda x: math.log1p(x[2]), "np.exp"),
    "math.hypot": (lambda x: math.hypot(x[0], x[1]), "np.exp"),
    "math.fsum": (lambda x: math.fsum(x), "float(x)"),
    "statistics.fmean": (lambda x: statistics.fmean(x), "float(x)"),
}


@pytest.mark.parametrize("name", _REFUSED)
def test_a_library_call_that_would_drop_the_derivative_is_refused_naming_it(name):
    fn, named = _REFUSED[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(HecateError, match=named.replace(".", r"\.").replace("(", r"\(")
                           .replace(")", r"\)")):
            autodiff(ReverseWithPrimal, lambda x: np.sum(np.sin(fn(x))), Active, Active(X.copy()))


# --------------------------------------------------------------------------- followed exactly
_FOLLOWED = {
    "functools.reduce(np.add, rows)": lambda x: np.sum(np.sin(
        functools.reduce(np.add, x.reshape(2, 2)))),
    "functools.reduce(np.multiply, entries)": lambda x: np.sin(
        functools.reduce(np.multiply, [x[0], x[1] * x[2], x[3]])),
    "math.prod of a traced array": lambda x: math.prod(x),
    "sorted() and max() of a traced array": lambda x: np.sin(sorted(x)[1]) * max(x),
    # secant iterations in Python: the traced root follows the iterations
    "optimize.newton on a closure": lambda x: so.newton(lambda z: z ** 3 + z - x[0], 0.0) * x[1],
}


@pytest.mark.parametrize("name", _FOLLOWED)
def test_python_level_library_code_is_differentiated_and_compiled(name):
    _check_compiled(_FOLLOWED[name], X)


# --------------------------------------------------------------------------- findings
@pytest.mark.parametrize("kind", ["csr_matrix", "csr_array"])
def test_traced_times_sparse_is_not_silently_wrong(kind):
    A = getattr(ss, kind)(D)
    _correct_or_refused(lambda x: np.sin((x * A).sum().sum()), X, "sparse")


def test_traced_matmul_sparse_is_refused_naming_sparse():
    A = ss.csr_matrix(D)
    _correct_or_refused(lambda x: np.sum(np.sin(x @ A)), X, "sparse")


@pytest.mark.parametrize("spelling", ["astype", "asarray", "array"])
def test_object_dtype_conversion_does_not_drop_the_derivative(spelling):
    convert = {"astype": lambda x: x.astype(object),
               "asarray": lambda x: np.asarray(x, dtype=object),
               "array": lambda x: np.array(x, dtype=object)}[spelling]
    _correct_or_refused(lambda x: np.sin(convert(x).sum()) + np.sin(convert(x)[0]), X,
                        "object")


@pytest.mark.parametrize("dtype", ["U32", "S32", "structured"])
def test_string_and_structured_casts_do_not_drop_the_derivative(dtype):
    if dtype == "structured":
        f = lambda x: np.sum(np.sin(np.array(x, dtype=[("a", float)])["a"]))  # noqa: E731
    else:
        f = lambda x: np.sum(np.sin(x.astype(dtype).astype(float)))  # noqa: E731
    _correct_or_refused(f, X, "dtype")


@pytest.mark.xfail(strict=True, reason="scipy.optimize.minimize with a traced value in `args` "
                   "raises SciPy's 'The user-provided objective function must return a scalar "
                   "value.' (a ValueError wrapping the conversion error), not an error naming "
                   "scipy.optimize.minimize as root/least_squares get")
def test_minimize_with_traced_args_is_refused_naming_minimize():
    f = lambda x: so.minimize(lambda z, a: np.sum((z - a) ** 2), np.zeros(4),  # noqa: E731
                              args=(x,)).fun + np.sum(x)
    _correct_or_refused(f, X, "minimize")


@pytest.mark.parametrize("solver", ["root", "fsolve"])
def test_minpack_solvers_with_traced_values_are_refused_naming_them(solver):
    if solver == "root":
        f = lambda x: np.sum(so.root(lambda z, a: z ** 3 + z - a, np.zeros(4),  # noqa: E731
                                     args=(x,)).x)
    else:
        f = lambda x: np.sum(so.fsolve(lambda z: z ** 3 + z - x, np.zeros(4)))  # noqa: E731
    _correct_or_refused(f, X, solver)


def test_brentq_with_traced_args_is_refused_naming_it():
    _correct_or_refused(lambda x: so.brentq(lambda z, a: z ** 3 + z - a, -5, 5,
                                            args=(x[0],)) + x[1], X, "brentq")


def test_statistics_mean_is_refused_naming_the_fix():
    _correct_or_refused(lambda x: statistics.mean(x) * x[0], X, "np.mean")


@pytest.mark.xfail(strict=True, reason="scipy.signal.lfilter with traced filter coefficients "
                   "raises SciPy's 'could not convert b, a, and x to a common type' (traced "
                   "data x is refused naming lfilter)")
def test_lfilter_with_traced_coefficients_is_refused_naming_it():
    _correct_or_refused(lambda x: np.sum(np.sin(sig.lfilter(x[:2], [1.0, -0.3],
                                                            np.arange(5.0)))), X, "lfilter")


@pytest.mark.xfail(strict=True, reason="scipy.sparse.diags(x) of a traced vector raises SciPy's "
                   "'Different number of diagonals and offsets.' instead of an error naming "
                   "scipy.sparse")
def test_sparse_diags_of_a_traced_vector_is_refused_naming_sparse():
    _correct_or_refused(lambda x: np.sum(np.sin(ss.diags(x) @ np.ones(4))), X, "sparse")
