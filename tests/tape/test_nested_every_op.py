"""Second derivatives through every differentiable op: forward-over-reverse and
reverse-over-reverse (and batch mode at both orders), checked against finite differences of
gradients by `check_grads(..., order=2)`.

EXAMPLES holds one or more small, well-conditioned uses of each registered rule: positive
inputs for log/sqrt, values away from kinks (abs, max, clip, sort, fmod), symmetric
positive-definite matrices for cholesky/eigh, separated singular values for svd. Eigen- and
singular vectors enter only through sign-invariant expressions. A variant of an op is named
"op[detail]"; the part before "[" must be a registered name, and `test_every_rule_is_covered`
fails (listing them) when a rule has no entry.
"""
import warnings

import numpy as np
import pytest

import ops
from tape.testing import check_grads
from tape.tracer import FUNCTION_RULES, METHOD_RULES, UFUNC_RULES

FUSED = ["logsumexp", "softmax", "log_softmax", "cross_entropy", "sigmoid", "softplus", "silu",
         "gelu", "layer_norm", "rms_norm"]


def _active(rule):
    return not getattr(rule, "__hecate_inactive__", False)


def _name(key):
    """A rule's readable key: "ndarray.copy", "np.sin", "np.linalg.eigh", "np.fft.rfft",
    "scipy.special.gammaln" (SciPy's ufuncs report no module; they live in scipy.special)."""
    if isinstance(key, str):
        return f"ndarray.{key}"
    module = getattr(key, "__module__", None) or ""
    if module.startswith("numpy.") and module.count(".") == 1:   # numpy.linalg, numpy.fft
        return "np." + module.split(".")[1] + "." + key.__name__
    if isinstance(key, np.ufunc) and getattr(np, key.__name__, None) is not key:
        return "scipy.special." + key.__name__
    return "np." + key.__name__


def registered_names() -> set:
    """Every differentiable rule the engine dispatches to, by readable name."""
    tables = (UFUNC_RULES, FUNCTION_RULES, METHOD_RULES)
    names = {_name(k) for table in tables for k, rule in table.items() if _active(rule)}
    return names | {f"ops.{n}" for n in FUSED}


# -- inputs ---------------------------------------------------------------------------------------
rng = np.random.default_rng(0)
x3 = np.array([0.3, -0.7, 1.1])           # signed, away from 0 and from each other
y3 = np.array([1.2, 0.5, -0.4])
p3 = np.array([0.6, 1.3, 2.1])            # positive
q3 = np.array([1.7, 0.8, 1.4])            # positive
u3 = np.array([0.2, -0.45, 0.7])          # inside (-1, 1)
M23 = np.array([[0.3, -0.7, 1.1], [1.5, 0.4, -0.9]])   # distinct entries
N23 = np.array([[0.8, 1.3, -0.2], [-1.1, 0.6, 0.45]])
P23 = np.array([[0.6, 1.3, 2.1], [1.7, 0.8, 1.4]])     # positive
Z23 = np.array([[0.3, 0.0, 1.1], [1.5, 0.4, -0.9]])   # a zero: prod's gradient is not prod/x
T223 = rng.standard_normal((2, 2, 3))
c3 = np.array([0.3 + 0.8j, -0.7 + 0.2j, 1.1 - 0.5j])   # complex, away from 0


def _orthogonal(n, seed):
    q, r = np.linalg.qr(np.random.default_rng(seed).standard_normal((n, n)))
    return q * np.sign(np.diag(r))


S3 = (_orthogonal(3, 1) * [1.0, 1.9, 2.8]) @ _orthogonal(3, 1).T   # SPD, separated eigenvalues
A3 = (_orthogonal(3, 2) * [1.0, 1.8, 2.7]) @ _orthogonal(3, 3).T   # separated singular values
A32 = (_orthogonal(3, 4)[:, :2] * [1.0, 2.1]) @ _orthogonal(2, 5).T
b3 = np.array([0.5, -1.0, 0.8])
idx = np.array([2, 0, 1])


def sq(v):
    """Eigen- and singular vectors are unique up to sign; their squares are not."""
    return v * v


def _copyto(x, y):
    out = x.copy()
    np.copyto(out, y, where=np.array([True, False, True]))
    return out * x


def _put_along_axis(x, v):
    out = np.zeros_like(x)
    np.put_along_axis(out, np.array([[2], [0]]), v, axis=1)
    return out * x + out


def _setitem(x, v):
    out = x.copy()
    out[1:] = v[:2] * x[0]
    return out * x


def _like(maker):
    def f(x):
        out = maker(x)
        out[...] = x * x      # a buffer filled with traced values
        return out + np.ones_like(x)
    return f


def _with_nans(reducer):
    return lambda x: reducer(np.where(np.array([False, True, False]), np.nan, x * x))


def _row_stack(arrays):
    with warnings.catch_warnings():   # a deprecated alias of np.vstack, still registered
        warnings.simplefilter("ignore", DeprecationWarning)
        return np.row_stack(arrays)


def _eigh(a):
    w, v = np.linalg.eigh(a + a.T)
    return w, sq(v)


def _lstsq(a, b):
    x, residuals, _, s = np.linalg.lstsq(a, b)
    return x, residuals, s


def _svd(a):
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    return s, u @ vh, sq(u), sq(vh)


EXAMPLES = {
    # ufuncs
    "np.absolute": (np.absolute, (x3,)),
    "np.add": (np.add, (M23, y3)),
    "np.arccos": (np.arccos, (u3,)),
    "np.arccosh": (np.arccosh, (1 + p3,)),
    "np.arcsin": (np.arcsin, (u3,)),
    "np.arcsinh": (np.arcsinh, (x3,)),
    "np.arctan": (np.arctan, (x3,)),
    "np.arctan2": (np.arctan2, (x3, y3)),
    "np.arctanh": (np.arctanh, (u3,)),
    "np.cbrt": (np.cbrt, (x3,)),
    "np.conjugate": (lambda z: np.conjugate(z) * z, (c3,)),
    "np.conjugate[real]": (lambda x: np.conjugate(x) * x, (x3,)),
    "np.copysign": (np.copysign, (x3, y3)),
    "np.cos": (np.cos, (x3,)),
    "np.cosh": (np.cosh, (x3,)),
    "np.deg2rad": (np.deg2rad, (x3,)),
    "np.degrees": (np.degrees, (x3,)),
    "np.divide": (np.divide, (x3, y3)),
    "np.divmod": (lambda x, y: np.divmod(x, y), (3 * x3, q3)),
    "np.exp": (np.exp, (x3,)),
    "np.exp2": (np.exp2, (x3,)),
    "np.expm1": (np.expm1, (x3,)),
    "np.fabs": (np.fabs, (x3,)),
    "np.float_power": (np.float_power, (p3, y3)),
    "np.fmax": (np.fmax, (x3, y3)),
    "np.fmin": (np.fmin, (x3, y3)),
    "np.fmod": (np.fmod, (3 * x3, q3)),
    "np.frexp": (lambda x: np.frexp(x), (3 * x3,)),
    "np.heaviside": (lambda x, h: np.heaviside(x, h) * x, (x3, y3)),
    "np.hypot": (np.hypot, (x3, y3)),
    "np.ldexp": (lambda x: np.ldexp(x, np.array([1, -2, 3])), (x3,)),
    "np.log": (np.log, (p3,)),
    "np.log10": (np.log10, (p3,)),
    "np.log1p": (np.log1p, (x3,)),
    "np.log2": (np.log2, (p3,)),
    "np.logaddexp": (np.logaddexp, (x3, y3)),
    "np.logaddexp2": (np.logaddexp2, (x3, y3)),
    "np.matmul": (np.matmul, (M23, N23.T)),
    "np.maximum": (np.maximum, (x3, y3)),
    "np.minimum": (np.minimum, (x3, y3)),
    "np.modf": (lambda x: np.modf(x), (3 * x3,)),
    "np.multiply": (np.multiply, (M23, y3)),
    "np.negative": (lambda x: np.negative(x) * x, (x3,)),
    "np.positive": (lambda x: np.positive(x) * x, (x3,)),
    "np.power": (np.power, (p3, y3)),
    "np.power[int exponent]": (lambda x: np.power(x, 3), (x3,)),
    "np.rad2deg": (np.rad2deg, (x3,)),
    "np.radians": (np.radians, (x3,)),
    "np.reciprocal": (np.reciprocal, (x3,)),
    "np.remainder": (np.remainder, (3 * x3, q3)),
    "np.sin": (np.sin, (x3,)),
    "np.sinh": (np.sinh, (x3,)),
    "np.sqrt": (np.sqrt, (p3,)),
    "np.square": (np.square, (x3,)),
    "np.subtract": (np.subtract, (M23, y3)),
    "np.tan": (np.tan, (x3,)),
    "np.tanh": (np.tanh, (x3,)),
    "np.divide[broadcast]": (np.divide, (M23, q3)),
    "np.power[broadcast]": (np.power, (P23, y3)),
    "np.maximum[broadcast]": (np.maximum, (M23, y3)),
    "np.arctan2[broadcast]": (np.arctan2, (M23, y3)),
    "np.multiply[python float]": (lambda x, s: x * s, (x3, 0.7)),
    # reductions and statistics
    "np.amax": (lambda a: np.amax(a * a, axis=1), (M23,)),
    "np.amin": (lambda a: np.amin(a * a, axis=0), (M23,)),
    "np.max": (lambda a: np.max(a * a), (M23,)),
    "np.min": (lambda a: np.min(a * a, axis=1), (M23,)),
    "np.average": (lambda a, w: np.average(a * a, axis=1, weights=w), (M23, p3)),
    "np.mean": (lambda a: np.mean(a * a, axis=0), (M23,)),
    "np.median": (lambda a: np.median(a * a, axis=1), (M23,)),
    "np.nanmean": (_with_nans(np.nanmean), (x3,)),
    "np.nanprod": (_with_nans(np.nanprod), (x3,)),
    "np.nansum": (_with_nans(np.nansum), (x3,)),
    "np.percentile": (lambda a, q: np.percentile(a * a, q), (x3, 30.0)),
    "np.quantile": (lambda a, q: np.quantile(a * a, q, axis=1), (M23, 0.7)),
    "np.prod": (lambda a: np.prod(a, axis=1), (M23,)),
    "np.ptp": (lambda a: np.ptp(a * a, axis=1), (M23,)),
    "np.std": (lambda a: np.std(a, axis=1), (M23,)),
    "np.sum": (lambda a: np.sum(a * a, axis=0), (M23,)),
    "np.var": (lambda a: np.var(a, ddof=1), (M23,)),
    "np.cumprod": (lambda a: np.cumprod(a, axis=1), (M23,)),
    "np.cumsum": (lambda a: np.cumsum(a * a), (M23,)),
    "np.prod[zero entry]": (lambda a: np.prod(a, axis=1), (Z23,)),
    "np.cumprod[zero entry]": (lambda a: np.cumprod(a, axis=1), (Z23,)),
    "np.sum[keepdims]": (lambda a: np.sum(a * a, axis=1, keepdims=True) * a, (M23,)),
    "np.cumulative_prod": (lambda a: np.cumulative_prod(a, axis=0), (M23,)),
    "np.cumulative_sum": (lambda a: np.cumulative_sum(a * a, axis=1), (M23,)),
    "np.diff": (lambda a: np.diff(a * a, axis=1), (M23,)),
    # elementwise functions
    "np.angle": (lambda z: np.angle(z), (c3,)),
    "np.angle[real]": (lambda x: np.angle(x) * x, (x3,)),
    "np.clip": (lambda x, lo, hi: np.clip(x * x, lo, hi), (np.array([0.3, 1.4, 0.8]),
                                                           np.array([0.2, 0.1, 0.9]), 1.0)),
    "np.imag": (lambda z: np.imag(z * z), (c3,)),
    "np.real": (lambda z: np.real(z * z), (c3,)),
    "np.nan_to_num": (lambda x: np.nan_to_num(x * x), (x3,)),
    "np.sinc": (np.sinc, (x3,)),
    "np.where": (lambda x, y: np.where(x > 0, x * y, y * y), (x3, y3)),
    "np.select": (lambda x, y: np.select([x > 0.5, x < 0], [x * y, y * y], default=x * x),
                  (x3, y3)),
    # shapes, joining and splitting
    "np.append": (lambda x, y: np.append(x, y * y), (x3, y3)),
    "np.array_split": (lambda x: np.array_split(x * x, 2), (x3,)),
    "np.atleast_1d": (lambda x: np.atleast_1d(x * x), (x3,)),
    "np.atleast_2d": (lambda x: np.atleast_2d(x * x), (x3,)),
    "np.atleast_3d": (lambda x: np.atleast_3d(x * x), (M23,)),
    "np.broadcast_to": (lambda x: np.broadcast_to(x, (2, 3)) * M23, (x3,)),
    "np.column_stack": (lambda x, y: np.column_stack([x * y, y]), (x3, y3)),
    "np.concatenate": (lambda a, x: np.concatenate([a, a * x], axis=0), (M23, x3)),
    "np.dsplit": (lambda t: np.dsplit(t * t, [1]), (T223,)),
    "np.dstack": (lambda x, y: np.dstack([x * y, y]), (x3, y3)),
    "np.expand_dims": (lambda x: np.expand_dims(x, 0) * M23, (x3,)),
    "np.flip": (lambda a: np.flip(a, axis=1) * a, (M23,)),
    "np.fliplr": (lambda a: np.fliplr(a) * a, (M23,)),
    "np.flipud": (lambda a: np.flipud(a) * a, (M23,)),
    "np.hsplit": (lambda a: np.hsplit(a * a, 3), (M23,)),
    "np.hstack": (lambda x, y: np.hstack([x * y, y]), (x3, y3)),
    "np.matrix_transpose": (lambda a: np.matrix_transpose(a) @ a, (M23,)),
    "np.moveaxis": (lambda t: np.moveaxis(t, 0, -1) * t[0, :, :, None], (T223,)),
    "np.pad": (lambda a: np.pad(a * a, ((1, 0), (0, 2))), (M23,)),
    "np.ravel": (lambda a: np.ravel(a) * a.ravel(), (M23,)),
    "np.repeat": (lambda x: np.repeat(x * x, 2), (x3,)),
    "np.reshape": (lambda a: np.reshape(a, (3, 2)) @ a, (M23,)),
    "np.roll": (lambda a: np.roll(a, 1, axis=1) * a, (M23,)),
    "np.rollaxis": (lambda t: np.rollaxis(t, 2) * t[0, 0][:, None, None], (T223,)),
    "np.rot90": (lambda a: np.rot90(a) @ a, (M23,)),
    "np.row_stack": (lambda x, y: _row_stack([x * y, y]), (x3, y3)),
    "np.split": (lambda x: np.split(x * x, 3), (x3,)),
    "np.squeeze": (lambda a: np.squeeze(a[None]) * a, (M23,)),
    "np.stack": (lambda x, y: np.stack([x * y, y], axis=1), (x3, y3)),
    "np.swapaxes": (lambda a: np.swapaxes(a, 0, 1) @ a, (M23,)),
    "np.tile": (lambda x: np.tile(x * x, (2, 2)), (x3,)),
    "np.transpose": (lambda a: np.transpose(a) @ a, (M23,)),
    "np.unstack": (lambda a: np.unstack(a * a, axis=1), (M23,)),
    "np.vsplit": (lambda a: np.vsplit(a * a, 2), (M23,)),
    "np.vstack": (lambda x, y: np.vstack([x * y, y]), (x3, y3)),
    # buffers and copies
    "np.copy": (lambda x: np.copy(x) * x, (x3,)),
    "np.copyto": (_copyto, (x3, y3)),
    "np.empty_like": (_like(np.empty_like), (x3,)),
    "np.full_like": (lambda x: np.full_like(x, 2.5) * x, (x3,)),
    "np.full_like[traced fill]": (lambda x, s: np.full_like(x, s) * x, (x3, 0.7)),
    "np.ones_like": (_like(np.ones_like), (x3,)),
    "np.zeros_like": (_like(np.zeros_like), (x3,)),
    "np.put_along_axis": (_put_along_axis, (M23, np.array([[0.4], [-1.2]]))),
    # indexing, diagonals, sorting
    "np.diag": (lambda x: np.diag(x) @ np.diag(np.diag(x * x)), (x3,)),
    "np.diagonal": (lambda a: np.diagonal(a @ a.T), (M23,)),
    "np.trace": (lambda a: np.trace(a @ a.T), (M23,)),
    "np.tril": (lambda a: np.tril(a @ a.T), (M23,)),
    "np.triu": (lambda a: np.triu(a.T @ a, 1), (M23,)),
    "np.take": (lambda a: np.take(a * a, idx, axis=1), (M23,)),
    "np.take_along_axis": (lambda a: np.take_along_axis(a * a, np.array([[2, 0], [1, 1]]),
                                                        axis=1), (M23,)),
    "np.partition": (lambda x: np.partition(x * x, 1), (np.array([0.3, -1.2, 0.8, 2.0]),)),
    "np.sort": (lambda a: np.sort(a * a, axis=1), (M23,)),
    # products and contractions
    "np.dot": (lambda a, b: np.dot(a, b) * np.dot(b, b), (M23, x3)),
    "np.einsum": (lambda a, b: np.einsum("ij,kj,j->ik", a, b, b[0]), (M23, N23)),
    "np.inner": (lambda a, b: np.inner(a, b * b), (M23, N23)),
    "np.kron": (lambda x, y: np.kron(x, y * y), (x3, y3[:2])),
    "np.outer": (lambda x, y: np.outer(x, y * x), (x3, y3)),
    "np.tensordot": (lambda t, a: np.tensordot(t * t, a, axes=([1, 2], [0, 1])), (T223, M23)),
    "np.vdot": (lambda a, b: np.vdot(a, b * a), (M23, N23)),
    "np.einsum[trace, matmul]": (lambda a, b: np.einsum("ii->", a @ a) * np.einsum(
        "ij,jk->ik", a, b), (A3, A32)),
    # np.linalg
    "np.linalg.cholesky": (lambda a: np.linalg.cholesky(a @ a.T), (A3,)),
    "np.linalg.cond": (np.linalg.cond, (A3,)),
    "np.linalg.cond[fro]": (lambda a: np.linalg.cond(a, "fro"), (A3,)),
    "np.linalg.cross": (lambda x, y: np.linalg.cross(x * y, y), (x3, y3)),
    "np.linalg.det": (np.linalg.det, (A3,)),
    "np.linalg.diagonal": (lambda a: np.linalg.diagonal(a @ a.T), (M23,)),
    "np.linalg.eigh": (_eigh, (S3,)),
    "np.linalg.eigvalsh": (lambda a: np.linalg.eigvalsh(a + a.T), (S3,)),
    "np.linalg.inv": (np.linalg.inv, (A3,)),
    "np.linalg.lstsq": (lambda a, b: _lstsq(a, b), (A32, b3)),
    "np.linalg.matmul": (lambda a, b: np.linalg.matmul(a, b.T), (M23, N23)),
    "np.linalg.matrix_norm": (lambda a: np.linalg.matrix_norm(a), (M23,)),
    "np.linalg.matrix_norm[nuc]": (lambda a: np.linalg.matrix_norm(a, ord="nuc"), (A3,)),
    "np.linalg.matrix_power": (lambda a: np.linalg.matrix_power(a, 3), (A3,)),
    "np.linalg.matrix_power[negative]": (lambda a: np.linalg.matrix_power(a, -2), (A3,)),
    "np.linalg.matrix_transpose": (lambda a: np.linalg.matrix_transpose(a) @ a, (M23,)),
    "np.linalg.multi_dot": (lambda a, b, c: np.linalg.multi_dot([a.T, b, c]), (M23, N23, A3)),
    "np.linalg.norm": (np.linalg.norm, (M23,)),
    "np.linalg.norm[2]": (lambda a: np.linalg.norm(a, 2), (A3,)),
    "np.linalg.norm[vector, ord=3]": (lambda x: np.linalg.norm(x, 3), (x3,)),
    "np.linalg.outer": (lambda x, y: np.linalg.outer(x, y * x), (x3, y3)),
    "np.linalg.pinv": (np.linalg.pinv, (A32,)),
    "np.linalg.qr": (lambda a: np.linalg.qr(a), (A32,)),
    "np.linalg.slogdet": (lambda a: tuple(np.linalg.slogdet(a)), (A3,)),
    "np.linalg.solve": (lambda a, b: np.linalg.solve(a, b), (A3, b3)),
    "np.linalg.svd": (_svd, (A32,)),
    "np.linalg.svdvals": (np.linalg.svdvals, (A3,)),
    "np.linalg.tensordot": (lambda t, a: np.linalg.tensordot(t, a * a), (T223, M23)),
    "np.linalg.trace": (lambda a: np.linalg.trace(a @ a.T), (M23,)),
    "np.linalg.vecdot": (lambda a, b: np.linalg.vecdot(a, b * a), (M23, N23)),
    "np.linalg.vector_norm": (lambda a: np.linalg.vector_norm(a, axis=1), (M23,)),
    "np.linalg.vector_norm[inf]": (lambda a: np.linalg.vector_norm(a, ord=np.inf), (M23,)),
    "np.linalg.matrix_norm[2]": (lambda a: np.linalg.matrix_norm(a, ord=2), (A3,)),
    "np.linalg.cholesky[upper]": (lambda a: np.linalg.cholesky(a @ a.T, upper=True), (A3,)),
    "np.linalg.det[stacked]": (np.linalg.det, (np.stack([A3, S3]),)),
    "np.linalg.slogdet[negative det]": (lambda a: tuple(np.linalg.slogdet(a)), (A3[::-1],)),
    "np.linalg.solve[matrix rhs]": (np.linalg.solve, (A3, M23.T)),
    "np.linalg.svd[compute_uv=False]": (lambda a: np.linalg.svd(a, compute_uv=False), (A32,)),
    "np.linalg.qr[r]": (lambda a: np.linalg.qr(a, mode="r"), (A32,)),
    # ndarray methods
    "ndarray.__getitem__": (lambda a: a[1:, ::2] * a[0, idx[:2]], (M23,)),
    "ndarray.__setitem__": (_setitem, (x3, y3)),
    "ndarray.astype": (lambda x: x.astype(np.float64) * x, (x3,)),
    "ndarray.copy": (lambda x: x.copy() * x, (x3,)),
    "ndarray.real": (lambda z: (z * z).real * np.abs(z), (c3,)),
    "ndarray.logaddexp.reduce": (lambda a: np.logaddexp.reduce(a * a, axis=1), (M23,)),
    "ndarray.logaddexp2.reduce": (lambda a: np.logaddexp2.reduce(np.sin(a)), (M23,)),
    "ndarray.logaddexp.accumulate": (lambda a: np.logaddexp.accumulate(a * a, axis=1),
                                     (M23,)),
    "ndarray.logaddexp2.accumulate": (lambda a: np.logaddexp2.accumulate(np.sin(a)), (M23,)),
    # fused ops
    "ops.logsumexp": (lambda a: ops.logsumexp(a, axis=1), (M23,)),
    "ops.softmax": (ops.softmax, (M23,)),
    "ops.log_softmax": (lambda a: ops.log_softmax(a, axis=0), (M23,)),
    "ops.cross_entropy": (lambda a: ops.cross_entropy(a, np.array([2, 0])), (M23,)),
    "ops.cross_entropy[sum, ignore_index]": (
        lambda a: ops.cross_entropy(a, np.array([2, -100]), reduction="sum"), (M23,)),
    "ops.sigmoid": (ops.sigmoid, (x3,)),
    "ops.softplus": (ops.softplus, (x3,)),
    "ops.silu": (ops.silu, (x3,)),
    "ops.gelu": (ops.gelu, (x3,)),
    "ops.gelu[tanh]": (lambda x: ops.gelu(x, approximate=True), (x3,)),
    "ops.layer_norm": (ops.layer_norm, (M23, y3, x3)),
    "ops.rms_norm": (ops.rms_norm, (M23, y3)),
}

# Each op family may keep its examples beside its own tests, in a module
# tests/tape/second_order_<family>.py that defines EXAMPLES (and optionally EXCLUDED) of the
# same form; they are merged here.
def _family_examples():
    import importlib.util
    from pathlib import Path
    for path in sorted(Path(__file__).parent.glob("second_order_*.py")):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module


_FAMILIES = list(_family_examples())
for _family in _FAMILIES:
    EXAMPLES.update(_family.EXAMPLES)

# Registered, differentiable, yet without a second-order check here: name -> why. Empty: every
# rule has a smooth second derivative somewhere finite differences can check it.
EXCLUDED: dict = {}
for _family in _FAMILIES:
    EXCLUDED.update(getattr(_family, "EXCLUDED", {}))


def test_every_rule_is_covered():
    covered = {name.split("[")[0] for name in EXAMPLES} | set(EXCLUDED)
    missing = sorted(registered_names() - covered)
    assert not missing, f"no second-order example in EXAMPLES for: {', '.join(missing)}"


def test_every_example_names_a_registered_rule():
    unknown = sorted({name.split("[")[0] for name in EXAMPLES} - registered_names())
    assert not unknown, f"EXAMPLES entries that name no registered rule: {', '.join(unknown)}"


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_second_order(name):
    f, args = EXAMPLES[name]
    check_grads(f, *args, order=2)
