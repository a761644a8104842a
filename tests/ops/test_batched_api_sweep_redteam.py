"""Batch mode over the public NumPy API: the calls of test_numpy_api_sweep_redteam.py (imported)
and a wider table of their own, each under batched reverse mode (W seeds in one sweep, written
as the shadows of BatchDuplicated output buffers) and batched forward mode (W tangents in one
pass), eager and `tape.compile`d, compared lane by lane with single-seed Reverse and
single-tangent Forward calls. W cycles through 1 to 4, so that the batch axis has the size of
an axis of the argument (3 or 4) or is 1. Known defects are strict xfails."""
import importlib.util
import pathlib
import warnings

import numpy as np
import pytest

import tape
from tape import BatchDuplicated, Const, Duplicated, Forward, Reverse, autodiff


def _sweep_cases():
    path = pathlib.Path(__file__).with_name("test_numpy_api_sweep_redteam.py")
    spec = importlib.util.spec_from_file_location("_numpy_api_sweep_cases", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CASES


RNG = np.random.default_rng(11)
A = RNG.uniform(0.1, 0.9, (3, 4))
A3 = RNG.uniform(0.1, 0.9, (2, 3, 4))
A1 = RNG.uniform(0.1, 0.9, (1, 4))
V = RNG.uniform(0.1, 0.9, 4)
C = RNG.uniform(0.1, 0.9, (4, 3))
S = np.array(0.4)
_S = RNG.uniform(0.1, 0.9, (3, 3))
SPD = _S @ _S.T + 3 * np.eye(3)
L, F = np.linalg, np.fft


def _buf(fill):
    """`fill(y, x)` into y = np.zeros_like(x), returned."""
    def f(x):
        y = np.zeros_like(x)
        fill(y, x)
        return y
    return f


def _o(fill, shape=None):
    """`fill(y, x)` into a traced buffer of x's or another shape (out= arguments)."""
    def f(x):
        y = np.zeros_like(x, shape=shape if shape is not None else x.shape)
        fill(y, x)
        return y
    return f


def _setitem(x):
    y = np.zeros_like(x, shape=(4, 4))
    y[1:, :] = x * 2
    y[0, [0, 2]] = x[0, :2]
    return y


def _iadd(x):
    y = x.copy()
    y[[0, 0, 2]] += x[1]
    return y


def _addat(x):
    y = np.zeros_like(x, shape=4)
    np.add.at(y, [0, 1, 1, 3], x[0])
    return y


def _maxat(x):
    y = np.zeros_like(x, shape=4)
    np.maximum.at(y, [0, 0, 1], x[1, :3])
    return y


def _imul(x):
    y = x + 0.0
    y *= x
    return y


def _pal(x):
    y = np.zeros_like(x)
    np.put_along_axis(y, np.argsort(x, axis=1)[:, :2], x[:, :2] * 3, axis=1)
    return y


def _iaddslice(x):
    y = x.copy()
    y[:, 1:] += x[:, :-1]
    return y


def _self_out(x):
    y = x * 1.0
    np.exp(y, out=y)
    return y


def _modf_out(x):
    a, b = np.zeros_like(x), np.zeros_like(x)
    np.modf(x * 3, out=(a, b))
    return a


CASES = {f"sweep:{k}": v for k, v in _sweep_cases().items()}
for _u in ["exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "cbrt", "square",
           "reciprocal", "absolute", "fabs", "sin", "cos", "tan", "arcsin", "arccos", "arctan",
           "sinh", "cosh", "tanh", "arcsinh", "arctanh", "negative", "positive", "sign", "rint",
           "deg2rad", "rad2deg", "sinc", "i0"]:
    CASES[_u] = ((lambda f: lambda x: f(x))(getattr(np, _u)), A)
for _u in ["add", "subtract", "multiply", "divide", "power", "float_power", "maximum", "minimum",
           "fmax", "fmin", "hypot", "arctan2", "logaddexp", "logaddexp2", "copysign", "fmod",
           "remainder", "heaviside"]:
    CASES[f"{_u}[x,flipped x]"] = ((lambda f: lambda x: f(x, x[::-1, ::-1] + 0.05))(
        getattr(np, _u)), A)
    CASES[f"{_u}[broadcast]"] = ((lambda f: lambda x: f(x[:, :1], x[0] + 0.1))(getattr(np, _u)), A)
CASES.update({
    "arccosh": (lambda x: np.arccosh(x + 1.5), A),
    "ldexp": (lambda x: np.ldexp(x, 2), A),
    "sum[axis,keepdims]": (lambda x: np.sum(x, axis=1, keepdims=True), A),
    "mean[axis0]": (lambda x: np.mean(x, axis=0), A),
    "prod[axis1]": (lambda x: np.prod(x, axis=1), A),
    "max[axis]": (lambda x: np.max(x, axis=0), A),
    "min[all]": (lambda x: np.min(x), A),
    "var[ddof]": (lambda x: np.var(x, axis=1, ddof=1), A),
    "std[keepdims]": (lambda x: np.std(x, axis=0, keepdims=True), A),
    "ptp": (lambda x: np.ptp(x, axis=1), A),
    "cumsum[axis0]": (lambda x: np.cumsum(x, axis=0), A),
    "cumprod[axis1]": (lambda x: np.cumprod(x, axis=1), A),
    "cumprod[flat]": (lambda x: np.cumprod(x), A),
    "nansum": (lambda x: np.nansum(np.where(x > 0.5, x, np.nan), axis=0), A),
    "nanmean": (lambda x: np.nanmean(np.where(x > 0.3, x, np.nan), axis=1), A),
    "nanmax": (lambda x: np.nanmax(np.where(x > 0.3, x, np.nan), axis=1), A),
    "nanvar": (lambda x: np.nanvar(np.where(x > 0.3, x, np.nan), axis=0), A),
    "average[axis,weights]": (lambda x: np.average(x, axis=1, weights=V), A),
    "median": (lambda x: np.median(x, axis=1), A),
    "quantile[linear]": (lambda x: np.quantile(x, [0.2, 0.7], axis=1), A),
    "logsumexp-like": (lambda x: np.log(np.sum(np.exp(x), axis=0)), A),
    "diff[n=2]": (lambda x: np.diff(x, n=2, axis=1), A),
    "trapezoid": (lambda x: np.trapezoid(x, axis=1), A),
    "clip": (lambda x: np.clip(x, 0.3, 0.7), A),
    "where": (lambda x: np.where(x > 0.5, x ** 2, -x), A),
    "select": (lambda x: np.select([x < 0.3, x > 0.6], [x, x ** 2], default=1.0), A),
    "reshape": (lambda x: np.reshape(x, (2, 6)), A),
    "transpose": (lambda x: np.transpose(x), A),
    "moveaxis": (lambda x: np.moveaxis(x[None], 0, -1), A),
    "swapaxes": (lambda x: np.swapaxes(x, 0, 1), A),
    "expand_dims/squeeze": (lambda x: np.squeeze(np.expand_dims(x, 1), axis=1), A),
    "broadcast_to": (lambda x: np.broadcast_to(x[0], (2, 4)), A),
    "concatenate[axis1]": (lambda x: np.concatenate([x, x ** 2], axis=1), A),
    "stack[axis-1]": (lambda x: np.stack([x, 2 * x], axis=-1), A),
    "hstack": (lambda x: np.hstack([x, x[:, :1]]), A),
    "vstack": (lambda x: np.vstack([x, x[0]]), A),
    "dstack": (lambda x: np.dstack([x, x]), A),
    "column_stack": (lambda x: np.column_stack([x[0], x[1]]), A),
    "split": (lambda x: np.split(x, 2, axis=1), A),
    "array_split": (lambda x: np.array_split(x, 2, axis=0), A),
    "flip": (lambda x: np.flip(x, axis=1), A),
    "roll": (lambda x: np.roll(x, 2, axis=1), A),
    "roll[flat]": (lambda x: np.roll(x, 5), A),
    "rot90": (lambda x: np.rot90(x), A),
    "repeat": (lambda x: np.repeat(x, 2, axis=0), A),
    "tile": (lambda x: np.tile(x, (2, 1)), A),
    "pad[constant]": (lambda x: np.pad(x, ((1, 2), (0, 1))), A),
    "pad[edge]": (lambda x: np.pad(x, 1, mode="edge"), A),
    "take[axis]": (lambda x: np.take(x, [2, 0, 2], axis=1), A),
    "take_along_axis": (lambda x: np.take_along_axis(x, np.argsort(x, axis=1), axis=1), A),
    "triu": (lambda x: np.triu(x, 1), A),
    "tril": (lambda x: np.tril(x), A),
    "diag[vector]": (lambda x: np.diag(x[0]), A),
    "diag[matrix]": (lambda x: np.diag(x, 1), A),
    "diagonal": (lambda x: np.diagonal(x), A),
    "trace": (lambda x: np.trace(x), A),
    "ravel": (lambda x: np.ravel(x, order="F"), A),
    "atleast_3d": (lambda x: np.atleast_3d(x), A),
    "fancy index": (lambda x: x[[0, 2, 2], [1, 3, 0]], A),
    "bool mask": (lambda x: x[x > 0.5], A),
    "slice step": (lambda x: x[::-1, 1::2], A),
    "newaxis index": (lambda x: x[:, None, 1] * x[None, :, 2], A),
    "setitem": (lambda x: _setitem(x), A),
    "iadd fancy": (lambda x: _iadd(x), A),
    "add.at": (lambda x: _addat(x), A),
    "sort[axis0]": (lambda x: np.sort(x, axis=0), A),
    "sort[flat]": (lambda x: np.sort(x, axis=None), A),
    "partition": (lambda x: np.partition(x, 1, axis=1), A),
    "dot[mat-mat]": (lambda x: np.dot(x, C), A),
    "dot[mat-vec]": (lambda x: np.dot(x, V), A),
    "matmul self": (lambda x: x @ x.T, A),
    "matmul const left": (lambda x: C @ x, A),
    "vdot": (lambda x: np.vdot(x, x[::-1]), A),
    "inner": (lambda x: np.inner(x, x), A),
    "outer": (lambda x: np.outer(x[0], x[1]), A),
    "tensordot": (lambda x: np.tensordot(x, C, axes=([1], [0])), A),
    "tensordot[2]": (lambda x: np.tensordot(x, x, axes=2), A),
    "einsum[ij,jk]": (lambda x: np.einsum("ij,jk->ik", x, C), A),
    "einsum[ii]": (lambda x: np.einsum("ii->", x), SPD),
    "einsum[3 ops]": (lambda x: np.einsum("ij,jk,kl->il", x, C, x), A),
    "kron": (lambda x: np.kron(x[:2, :2], x[1:, 2:]), A),
    "cross": (lambda x: np.cross(x[0, :3], x[1, 1:]), A),
    "convolve": (lambda x: np.convolve(x[0], x[1]), A),
    "vecdot": (lambda x: np.vecdot(x, x), A),
    "matvec": (lambda x: np.matvec(x, V), A),
    "linalg.inv": (lambda x: L.inv(x), SPD),
    "linalg.solve[vec]": (lambda x: L.solve(x, np.arange(3.0)), SPD),
    "linalg.solve[rhs traced]": (lambda x: L.solve(SPD, x[:, :2]), SPD),
    "linalg.det": (lambda x: L.det(x), SPD),
    "linalg.slogdet": (lambda x: L.slogdet(x)[1], SPD),
    "linalg.cholesky": (lambda x: L.cholesky(x + x.T), SPD),
    "linalg.eigh[w]": (lambda x: L.eigh(x + x.T)[0], SPD),
    "linalg.eigvalsh": (lambda x: L.eigvalsh(x + x.T), SPD),
    "linalg.svd[s]": (lambda x: L.svd(x, compute_uv=False), A),
    "linalg.svd[full]": (lambda x: np.abs(L.svd(x, full_matrices=False)[0]), A),
    "linalg.qr[r]": (lambda x: np.abs(L.qr(x.T)[1]), A),
    "linalg.norm[fro]": (lambda x: L.norm(x), A),
    "linalg.norm[axis]": (lambda x: L.norm(x, axis=1), A),
    "linalg.norm[nuc]": (lambda x: L.norm(x, "nuc"), A),
    "linalg.norm[2]": (lambda x: L.norm(x, 2), A),
    "linalg.pinv": (lambda x: L.pinv(x), A),
    "linalg.lstsq[x]": (lambda x: L.lstsq(x.T, V, rcond=None)[0], A),
    "linalg.matrix_power": (lambda x: L.matrix_power(x, 3), SPD),
    "linalg.matrix_power[-2]": (lambda x: L.matrix_power(x, -2), SPD),
    "linalg.eig[real vals]": (lambda x: np.sort(L.eigvals(x).real), SPD),
    "linalg.tensorsolve": (lambda x: L.tensorsolve(x, np.arange(3.0)), SPD),
    "linalg.inv[stack]": (lambda x: L.inv(np.stack([x, x + np.eye(3)])), SPD),
    "linalg.det[stack]": (lambda x: L.det(np.stack([x, 2 * x])), SPD),
    "linalg.solve[stack]": (lambda x: L.solve(np.stack([x, x.T]), np.ones((2, 3, 1))), SPD),
    "fft.fft abs": (lambda x: np.abs(F.fft(x, axis=1)), A),
    "fft.rfft real": (lambda x: F.rfft(x).real, A),
    "fft.irfft": (lambda x: F.irfft(x), A),
    "fft.fft2 imag": (lambda x: F.fft2(x).imag, A),
    "fft.ifft roundtrip": (lambda x: F.ifft(F.fft(x)).real, A),
    "fft.dct-like": (lambda x: F.rfft(x, n=6, axis=0).imag, A),
    "complex abs": (lambda x: np.abs(x + 1j * x[::-1]), A),
    "complex angle": (lambda x: np.angle(x + 1j * x[::-1]), A),
    "real(exp(complex))": (lambda x: np.real(np.exp(1j * x)), A),
    "interp": (lambda x: np.interp(x[0], [0.0, 0.5, 1.0], [1.0, 3.0, 2.0]), A),
    "polyval": (lambda x: np.polyval(x[0], x[1]), A),
    "cov": (lambda x: np.cov(x), A),
    "corrcoef": (lambda x: np.corrcoef(x), A),
    "histogram weights": (lambda x: np.histogram(V, bins=2, weights=x[0])[0], A),
    "ndarray.sum method": (lambda x: x.sum(axis=0), A),
    "ndarray.T @": (lambda x: x.T @ x, A),
    "ndarray.dot": (lambda x: x.dot(V), A),
    "ndarray.clip": (lambda x: x.clip(0.2, 0.6), A),
    "ndarray.cumsum": (lambda x: x.cumsum(axis=1), A),
    "ndarray.max keepdims": (lambda x: x.max(axis=1, keepdims=True), A),
    "ndarray.astype f32->f64": (lambda x: x.astype(np.float32).astype(np.float64), A),
    "ndarray.flatten": (lambda x: x.flatten(), A),
    "ndarray.copy": (lambda x: x.copy(), A),
    "ndarray.__imul__": (lambda x: _imul(x), A),
    "np.linspace traced": (lambda x: np.linspace(x[0, 0], x[0, 1], 5), A),
    "np.array of traced": (lambda x: np.array([x[0, 0], x[1, 1] ** 2]), A),
    "np.asarray": (lambda x: np.asarray(x) * 2, A),
    "zeros_like+": (lambda x: np.zeros_like(x) + x ** 2, A),
    "full_like traced": (lambda x: np.full_like(x, 2.0) * x, A),
    "meshgrid": (lambda x: np.meshgrid(x[0], x[1]), A),
    "vander": (lambda x: np.vander(x[0], 3), A),
    "nan_to_num": (lambda x: np.nan_to_num(np.log(x - 0.3)), A),
    "round": (lambda x: np.round(x * 10) + x, A),
    "floor+": (lambda x: np.floor(x * 4) * x, A),
    "mod": (lambda x: np.mod(x * 5, 1.3), A),
    "abs of diff": (lambda x: np.abs(x - 0.5), A),
    "isclose-select": (lambda x: np.where(np.isclose(x, x), x, 0.0), A),
    "apply_along_axis": (lambda x: np.apply_along_axis(np.cumsum, 1, x), A),
    "vectorize-ish frompy": (lambda x: np.sum(x, axis=None, dtype=np.float64), A),
    "searchsorted-based": (lambda x: x[0] * np.searchsorted(V, 0.5), A),
    "block": (lambda x: np.block([[x, x[:, :1]], [x[:1], x[:1, :1]]]), A),
    "lexsort-gather": (lambda x: x[:, np.lexsort((x[0], x[1]))], A),
    "flip[no axis]": (lambda x: np.flip(x), A),
    "flip[no axis,3d]": (lambda x: np.flip(x), A3),
    "fftn[no axes]": (lambda x: F.fftn(x).real, A),
    "ifftn[no axes]": (lambda x: F.ifftn(x).imag, A3),
    "rfftn[no axes]": (lambda x: np.abs(F.rfftn(x)), A3),
    "irfftn[no axes]": (lambda x: F.irfftn(x), A),
    "fft2 default": (lambda x: F.fft2(x).real, A3),
    "fftshift[no axes]": (lambda x: F.fftshift(x), A),
    "ifftshift[no axes]": (lambda x: F.ifftshift(x), A3),
    "squeeze[no axis]": (lambda x: np.squeeze(x), A1),
    "squeeze[no axis,3d]": (lambda x: np.squeeze(x[:, :1]), A3),
    "ndarray.squeeze": (lambda x: x.squeeze(), A1),
    "transpose[3d default]": (lambda x: np.transpose(x), A3),
    "ndarray.T 3d": (lambda x: x.T, A3),
    "mT": (lambda x: x.mT, A3),
    "matrix_transpose": (lambda x: np.matrix_transpose(x), A3),
    "transpose[axes neg]": (lambda x: np.transpose(x, (-1, 0, -2)), A3),
    "moveaxis[neg]": (lambda x: np.moveaxis(x, -1, 0), A3),
    "swapaxes[neg]": (lambda x: np.swapaxes(x, -1, -3), A3),
    "rot90[axes]": (lambda x: np.rot90(x, 1, axes=(0, 2)), A3),
    "sum[axis None]": (lambda x: np.sum(x), A3),
    "sum[axis tuple neg]": (lambda x: np.sum(x, axis=(-1, 0)), A3),
    "mean[axis -1 keepdims]": (lambda x: np.mean(x, axis=-1, keepdims=True), A3),
    "max[axis None]": (lambda x: np.max(x), A3),
    "amax[axis tuple]": (lambda x: np.amax(x, axis=(0, 2)), A3),
    "prod[axis None]": (lambda x: np.prod(x), A),
    "var[axis None]": (lambda x: np.var(x), A3),
    "std[axis tuple]": (lambda x: np.std(x, axis=(0, 1)), A3),
    "median[axis None]": (lambda x: np.median(x), A3),
    "percentile[axis None]": (lambda x: np.percentile(x, 30), A),
    "quantile[axis tuple]": (lambda x: np.quantile(x, 0.4, axis=(0, 2)), A3),
    "average[axis None weights]": (lambda x: np.average(x, weights=A3 + 0.1), A3),
    "ptp[axis None]": (lambda x: np.ptp(x), A3),
    "logsumexp via max": (lambda x: np.max(x, axis=-1) + np.log(np.sum(
        np.exp(x - np.max(x, axis=-1, keepdims=True)), axis=-1)), A3),
    "cumsum[axis None]": (lambda x: np.cumsum(x), A3),
    "cumsum[axis -1]": (lambda x: np.cumsum(x, axis=-1), A3),
    "cumprod[axis -2]": (lambda x: np.cumprod(x, axis=-2), A3),
    "diff[axis 0 3d]": (lambda x: np.diff(x, axis=0), A3),
    "take[axis None]": (lambda x: np.take(x, [0, 5, 11, 3]), A),
    "ndarray.take[no axis]": (lambda x: x.take([1, 7, 2]), A3),
    "ndarray.item-like [()]": (lambda x: x[1, 2] * x, A),
    "put_along_axis": (lambda x: _pal(x), A),
    "repeat[axis None]": (lambda x: np.repeat(x, 2), A),
    "concatenate[axis None]": (lambda x: np.concatenate([x, x ** 2], axis=None), A),
    "append[no axis]": (lambda x: np.append(x, x[0]), A),
    "insert[no axis]": (lambda x: np.insert(x, 2, 5.0), A),
    "delete[no axis]": (lambda x: np.delete(x, [1, 4]), A),
    "resize": (lambda x: np.resize(x, (5, 3)), A),
    "trim_zeros": (lambda x: np.trim_zeros(np.concatenate([np.zeros(2), x[0]])), A),
    "outer[2d flattens]": (lambda x: np.outer(x, V), A),
    "kron[2d,1d]": (lambda x: np.kron(x, V[:2]), A),
    "pad[scalar width 3d]": (lambda x: np.pad(x, 1), A3),
    "pad[reflect 3d]": (lambda x: np.pad(x, ((0, 0), (1, 1), (2, 0)), mode="reflect"), A3),
    "tile[short reps]": (lambda x: np.tile(x, 2), A3),
    "tile[long reps]": (lambda x: np.tile(x, (2, 1, 1)), A),
    "broadcast_arrays": (lambda x: np.broadcast_arrays(x, V[None, :] * 0 + np.ones((3, 1))), A),
    "broadcast_to[new leading]": (lambda x: np.broadcast_to(x, (2, 3, 4)), A),
    "atleast_2d[1d]": (lambda x: np.atleast_2d(x[0]), A),
    "atleast_3d[1d]": (lambda x: np.atleast_3d(x[0]), A),
    "expand_dims[neg tuple]": (lambda x: np.expand_dims(x, (0, -1)), A),
    "reshape[-1]": (lambda x: np.reshape(x, -1), A3),
    "reshape[order F]": (lambda x: np.reshape(x, (4, 3), order="F"), A),
    "ravel[order F 3d]": (lambda x: np.ravel(x, order="F"), A3),
    "ndarray.reshape(*)": (lambda x: x.reshape(6, 4), A3),
    "einsum[ellipsis]": (lambda x: np.einsum("...i,...i->...", x, x), A3),
    "einsum[ellipsis trans]": (lambda x: np.einsum("...ij->...ji", x), A3),
    "einsum[implicit]": (lambda x: np.einsum("ij,kj", x, A), A),
    "einsum[broadcast ...]": (lambda x: np.einsum("i...,i->...", x, V[:3]), A),
    "matmul[stack bcast]": (lambda x: x @ A.T, A3),
    "matmul[1d @ 3d]": (lambda x: V[:3] @ x, A3),
    "matmul[3d @ 1d]": (lambda x: x @ V, A3),
    "matmul[self 1d]": (lambda x: x[0] @ x[1], A),
    "dot[3d,2d]": (lambda x: np.dot(x, A.T), A3),
    "dot[scalar]": (lambda x: np.dot(x, 2.0), A),
    "inner[3d]": (lambda x: np.inner(x, A), A3),
    "tensordot[neg axes]": (lambda x: np.tensordot(x, A, axes=([-1, -2], [1, 0])), A3),
    "tensordot[int 1]": (lambda x: np.tensordot(x, V, 1), A3),
    "vdot[3d flattens]": (lambda x: np.vdot(x, A3), A3),
    "trace[axis]": (lambda x: np.trace(x, axis1=1, axis2=2), A3),
    "diagonal[axis]": (lambda x: np.diagonal(x, offset=1, axis1=0, axis2=2), A3),
    "cross[axisa]": (lambda x: np.cross(x[:, :3], x[:, 1:], axis=-1), A),
    "cross[axis0]": (lambda x: np.cross(x[:, :3].T.copy(), x[:, 1:].T.copy(), axis=0), A),
    "linalg.norm[axis -2,-1]": (lambda x: L.norm(x, axis=(-2, -1)), A3),
    "linalg.norm[ord 1 axis]": (lambda x: L.norm(x, ord=1, axis=(1, 2)), A3),
    "linalg.norm[vector inf]": (lambda x: L.norm(x, np.inf, axis=-1), A3),
    "linalg.norm[3d flat]": (lambda x: L.norm(x), A3),
    "linalg.vector_norm[None]": (lambda x: L.vector_norm(x), A3),
    "linalg.matrix_norm": (lambda x: L.matrix_norm(x), A3),
    "linalg.det[3d]": (lambda x: L.det(x[:, :, :3] + 2 * np.eye(3)), A3),
    "linalg.inv[3d]": (lambda x: L.inv(x[:, :, :3] + 2 * np.eye(3)), A3),
    "linalg.solve[3d,bcast b]": (lambda x: L.solve(x[:, :, :3] + 2 * np.eye(3),
                                                   np.ones((3, 2))), A3),
    "linalg.cholesky[upper]": (lambda x: L.cholesky(x @ x.T + np.eye(3), upper=True), A),
    "linalg.svd[3d s]": (lambda x: L.svd(x, compute_uv=False), A3),
    "linalg.qr[3d r]": (lambda x: np.abs(L.qr(x.mT)[1]), A3),
    "linalg.eigh[3d w]": (lambda x: L.eigh(x[:, :, :3] + x[:, :, :3].mT)[0], A3),
    "linalg.pinv[3d]": (lambda x: L.pinv(x), A3),
    "linalg.matrix_power[3d]": (lambda x: L.matrix_power(x[:, :, :3], 2), A3),
    "linalg.multi_dot": (lambda x: L.multi_dot([x, A.T, x]), A),
    "linalg.outer": (lambda x: L.outer(x[0], V), A),
    "linalg.trace": (lambda x: L.trace(x[:, :, :3]), A3),
    "linalg.diagonal": (lambda x: L.diagonal(x), A3),
    "linalg.vecdot": (lambda x: L.vecdot(x, V), A3),
    "linalg.tensordot": (lambda x: L.tensordot(x, V, axes=1), A3),
    "linalg.cross": (lambda x: L.cross(x[:, :3], x[:, 1:]), A),
    "linalg.matmul": (lambda x: L.matmul(x, A.T), A3),
    "linalg.svdvals": (lambda x: L.svdvals(x), A3),
    "linalg.slogdet[3d]": (lambda x: L.slogdet(x[:, :, :3] + 2 * np.eye(3))[1], A3),
    "linalg.lstsq[2d b]": (lambda x: L.lstsq(x.T, A.T, rcond=None)[0], A),
    "sort[axis -1 3d]": (lambda x: np.sort(x, axis=-1), A3),
    "sort[axis 0 3d]": (lambda x: np.sort(x, axis=0), A3),
    "partition[axis None]": (lambda x: np.partition(x, 3, axis=None), A),
    "argsort gather axis None": (lambda x: x.ravel()[np.argsort(x, axis=None)], A3),
    "maximum.reduce axis None": (lambda x: np.maximum.reduce(x, axis=None), A3),
    "add.reduce tuple": (lambda x: np.add.reduce(x, axis=(0, 2)), A3),
    "add.accumulate axis -1": (lambda x: np.add.accumulate(x, axis=-1), A3),
    "multiply.outer": (lambda x: np.multiply.outer(x[0], x[1]), A),
    "multiply.reduce keepdims": (lambda x: np.multiply.reduce(x, axis=1, keepdims=True), A3),
    "add.reduceat axis0": (lambda x: np.add.reduceat(x, [0, 1], axis=0), A3),
    "out= zeros_like": (_buf(lambda y, x: np.multiply(x, 3.0, out=y)), A),
    "out= where": (_buf(lambda y, x: np.add(x, x, out=y, where=x > 0.4)), A),
    "copyto": (_buf(lambda y, x: np.copyto(y, x ** 2)), A),
    "copyto where": (_buf(lambda y, x: np.copyto(y, x ** 2, where=x > 0.5)), A),
    "putmask": (_buf(lambda y, x: np.putmask(y, x > 0.5, x * 3)), A),
    "place": (_buf(lambda y, x: np.place(y, x > 0.5, x[0])), A),
    "put": (_buf(lambda y, x: np.put(y, [0, 5], x[1, :2])), A),
    "fill_diagonal": (_buf(lambda y, x: (y.__iadd__(x), np.fill_diagonal(y, 2.0))), A),
    "setitem ellipsis": (_buf(lambda y, x: y.__setitem__((Ellipsis, 1), x[..., 0])), A3),
    "setitem bool": (_buf(lambda y, x: y.__setitem__(x > 0.5, x[x > 0.5] * 2)), A3),
    "setitem fancy 3d": (_buf(lambda y, x: y.__setitem__((0, [1, 2]), x[1, :2])), A3),
    "iadd slice": (lambda x: _iaddslice(x), A3),
    "index[..., None]": (lambda x: x[..., None] * x[:, None], A),
    "index[fancy 3d]": (lambda x: x[[1, 0], :, [3, 2]], A3),
    "index[fancy mixed]": (lambda x: x[:, [2, 0]][..., 1:], A3),
    "index[bool 1d rows]": (lambda x: x[x[:, 0] > 0.5], A),
    "index[neg int]": (lambda x: x[-1], A3),
    "index[newaxis 0-d]": (lambda x: x[()] * 2, S),
    "0-d exp": (lambda x: np.exp(x) * x, S),
    "0-d stack": (lambda x: np.stack([x, x ** 2, np.sin(x)]), S),
    "0-d sum": (lambda x: np.sum(x), S),
    "0-d reshape": (lambda x: np.reshape(x, (1, 1)), S),
    "0-d atleast_1d": (lambda x: np.atleast_1d(x) * V, S),
    "0-d broadcast": (lambda x: np.broadcast_to(x, (2, 3)), S),
    "0-d full_like-style": (lambda x: np.full((2, 2), x), S),
    "0-d linspace": (lambda x: np.linspace(0.0, x, 4), S),
    "0-d polyval": (lambda x: np.polyval(V, x), S),
    "0-d array list": (lambda x: np.array([[x, 1.0], [2.0, x * x]]), S),
    "0-d outer": (lambda x: np.outer(x, V), S),
    "0-d where": (lambda x: np.where(V > 0.5, x, V), S),
    "1d ravel index": (lambda x: x.ravel()[::2], A3),
    "interp[xp traced]": (lambda x: np.interp(V, np.cumsum(x[0]), x[1]), A),
    "histogram2d weights 2d": (lambda x: np.histogram2d(V, V[::-1], bins=2,
                                                        weights=x[0] ** 2)[0], A),
    "apply_along_axis 3d": (lambda x: np.apply_along_axis(np.sort, -1, x), A3),
    "polyfit multi": (lambda x: np.polyfit(np.arange(3.0), x, 2), A),
    "convolve valid": (lambda x: np.convolve(x[0], V[:2], mode="valid"), A),
    "correlate same": (lambda x: np.correlate(x[0], x[1], mode="same"), A),
    "gradient 3d": (lambda x: np.gradient(x, axis=(0, 2)), A3),
    "gradient 3d all": (lambda x: np.gradient(x), A3),
    "trapezoid 3d axis0": (lambda x: np.trapezoid(x, axis=0), A3),
    "meshgrid xy 3": (lambda x: np.meshgrid(x[0], x[1, :2], x[2, :3]), A),
    "nanmean axis None": (lambda x: np.nanmean(np.where(x > 0.4, x, np.nan)), A3),
    "nanstd axis tuple": (lambda x: np.nanstd(np.where(x > 0.4, x, np.nan), axis=(0, 2)), A3),
    "nanprod": (lambda x: np.nanprod(np.where(x > 0.4, x, np.nan), axis=-1), A3),
    "nancumsum None": (lambda x: np.nancumsum(np.where(x > 0.4, x, np.nan)), A),
    "nanmin None": (lambda x: np.nanmin(np.where(x > 0.4, x, np.nan)), A3),
    "nanquantile": (lambda x: np.nanquantile(np.where(x > 0.4, x, np.nan), 0.5, axis=-1), A3),
    "cov 3 rows rowvar False": (lambda x: np.cov(x.T, rowvar=False), A),
    "corrcoef 2 args": (lambda x: np.corrcoef(x[0], x[1]), A),
    "cov y arg": (lambda x: np.cov(x[0], x[1]), A),
    "clip traced bounds": (lambda x: np.clip(V, x[0] * 0.5, x[1] + 0.5), A),
    "where x y both": (lambda x: np.where(A3 > 0.5, x, x[::-1]), A3),
    "select 3d": (lambda x: np.select([x > 0.6], [x ** 2], default=x), A3),
    "choose": (lambda x: np.choose(np.array([[0, 1, 0, 1]] * 3), [x, x ** 2]), A),
    "piecewise 3d": (lambda x: np.piecewise(x, [x < 0.4], [lambda t: t ** 3, lambda t: t]), A3),
    "float32 input exp": (lambda x: np.exp(x), A.astype(np.float32)),
    "float32 matmul": (lambda x: x @ x.T, A.astype(np.float32)),
    "float32 sum": (lambda x: np.sum(x, axis=0), A.astype(np.float32)),
    "astype float32": (lambda x: x.astype(np.float32) * 2, A),
    "complex out real input": (lambda x: (x * (1 + 2j)).real, A),
    "np.real_if_close": (lambda x: np.real_if_close(x + 0j), A),
    "divmod": (lambda x: np.divmod(x * 5, 1.5)[1], A),
    "frexp mantissa": (lambda x: np.frexp(x)[0], A),
    "modf": (lambda x: np.modf(x * 3)[0], A),
    "heaviside": (lambda x: np.heaviside(x - 0.5, 0.5) * x, A),
    "float_power 0-d exp": (lambda x: np.float_power(V, x), S),
    "power x**x": (lambda x: x ** x, A3),
    "einsum out=": (_o(lambda y, x: np.einsum("ij,j->i", x, V, out=y), (3,)), A),
    "matmul out=": (_o(lambda y, x: np.matmul(x, x.T, out=y), (3, 3)), A),
    "dot out=": (_o(lambda y, x: np.dot(x, x.T, out=y), (3, 3)), A),
    "cumsum out=": (_o(lambda y, x: np.cumsum(x, axis=1, out=y)), A),
    "sum out=": (_o(lambda y, x: np.sum(x, axis=0, out=y), (4,)), A),
    "clip out=": (_o(lambda y, x: np.clip(x, 0.3, 0.6, out=y)), A),
    "mean out=": (_o(lambda y, x: np.mean(x, axis=1, out=y), (3,)), A),
    "add.at[2d index]": (_o(lambda y, x: np.add.at(y, ([0, 0, 2], [1, 1, 3]), x[0, :3])), A),
    "maximum.at": (lambda x: _maxat(x), A),
    "exp out self": (lambda x: _self_out(x), A),
    "modf out tuple": (lambda x: _modf_out(x), A),
    "add reduce out": (_o(lambda y, x: np.add.reduce(x, axis=1, out=y), (3,)), A),
    "iter rows stack": (lambda x: np.stack([r * i for i, r in enumerate(x)]), A),
    "list(x) concat": (lambda x: np.concatenate(list(x)), A),
    "zip unpack": (lambda x: (lambda a, b, c: a * b + c)(*x), A),
    "np.asarray list": (lambda x: np.asarray([x[0], x[1] * 2]), A),
    "sum generator": (lambda x: sum(x[i] * i for i in range(3)), A),
    "ndarray.__matmul__ 1d": (lambda x: x[0].__matmul__(x[1]), A),
    "ndarray.__rmatmul__": (lambda x: V[:3] @ x, A),
    "ndarray.__pow__ neg": (lambda x: x ** -1.5, A),
    "ndarray.__rpow__": (lambda x: 2.0 ** x, A),
    "ndarray.__abs__": (lambda x: abs(x - 0.5), A),
    "ndarray.__neg__ mod": (lambda x: -x % 0.3, A),
    "ndarray.__floordiv__ mix": (lambda x: x // 0.3 + x, A),
    "ndarray.prod method": (lambda x: x.prod(axis=0, keepdims=True), A),
    "ndarray.std method": (lambda x: x.std(ddof=1), A),
    "ndarray.trace method": (lambda x: x.trace(offset=1), A),
    "ndarray.diagonal method": (lambda x: x.diagonal(-1), A),
    "ndarray.swapaxes method": (lambda x: x.swapaxes(0, 1), A),
    "ndarray.transpose args": (lambda x: x.transpose(1, 0), A),
    "ndarray.cumprod method": (lambda x: x.cumprod(), A),
    "ndarray.conj": (lambda x: x.conj(), A),
    "ndarray.real/imag": (lambda x: x.real + x.imag, A),
    "ndarray.view": (lambda x: x.view() * 2, A),
    "ndarray.__getitem__ Ellipsis": (lambda x: x[..., ::2], A),
    "ndarray.compress": (lambda x: x.compress([True, False, True], axis=0), A),
    "np.compress": (lambda x: np.compress(x[0] > 0.4, x, axis=1), A),
    "np.extract": (lambda x: np.extract(x > 0.4, x), A),
    "np.diagflat": (lambda x: np.diagflat(x[0], 1), A),
    "np.tri mult": (lambda x: np.tri(3, 4) * x, A),
    "np.fliplr": (lambda x: np.fliplr(x), A),
    "np.flipud": (lambda x: np.flipud(x), A),
    "np.hsplit": (lambda x: np.hsplit(x, 2), A),
    "np.vsplit": (lambda x: np.vsplit(x, [1]), A),
    "np.dsplit": (lambda x: np.dsplit(x[..., None] * np.ones(2), 2), A),
    "np.unstack": (lambda x: np.unstack(x, axis=1), A),
    "np.permute_dims": (lambda x: np.permute_dims(x, (1, 0)), A),
    "np.concat": (lambda x: np.concat([x, x], axis=-1), A),
    "np.cumulative_sum": (lambda x: np.cumulative_sum(x, axis=1), A),
    "sort reversed": (lambda x: np.sort(x, axis=-1)[:, ::-1], A),
    "np.around": (lambda x: np.around(x, 1) + x, A),
    "np.nanargmax gather": (lambda x: x[np.nanargmax(x, axis=0), np.arange(4)], A),
    "np.ediff1d": (lambda x: np.ediff1d(x), A),
    "np.cbrt neg": (lambda x: np.cbrt(x - 0.5), A),
    "np.sinc": (lambda x: np.sinc(x - 0.5), A),
    "np.logspace": (lambda x: np.logspace(0.0, x[0, 0], 3), A),
    "np.geomspace": (lambda x: np.geomspace(x[0, 0], 2.0, 3), A),
    "np.polyder-val": (lambda x: np.polyval(np.polyder(x[0]), 0.3), A),
    "np.polyint": (lambda x: np.polyint(x[0]), A),
    "linalg.eigvals real": (lambda x: np.sort(L.eigvals(x[:, :3] + 2 * np.eye(3)).real), A),
    "linalg.eig vecs abs": (lambda x: np.abs(L.eig(x[:, :3] @ x[:, :3].T
                                                   + np.diag([1.0, 2.0, 3.0]))[1]), A),
    "linalg.solve[triangular]": (lambda x: L.solve(np.triu(x[:, :3]) + np.eye(3), V[:3]), A),
})
NAMES = sorted(CASES)
WIDTH = {name: 1 + i % 4 for i, name in enumerate(NAMES)}
COMPILED = NAMES[::3]


def _outs(o):
    return [np.asarray(t) for t in o] if isinstance(o, (tuple, list)) else [np.asarray(o)]


def _tol(x):
    return 1e-12 if np.asarray(x).dtype == np.float64 else 1e-5


def _close(got, want, x, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, want.shape,
                                                                 got.dtype, want.dtype)
    scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=_tol(x), atol=_tol(x) * scale, err_msg=what)


def _moved(x0):
    """Other values of the same signature (a compiled program replays on them)."""
    return np.asarray(x0 * 0.9 + 0.05, dtype=x0.dtype)


def _reverse_lanes(fn, x, width, run):
    """W seeds in one sweep: every float result of `fn` is written into a BatchDuplicated
    buffer whose W shadows are W different seeds; lane w must equal one Reverse call with
    seed w (the argument's shadow, the buffers' shadows and their primal)."""
    ref = _outs(fn(x.copy()))
    keep = [i for i, r in enumerate(ref) if r.dtype.kind in "fc"]
    rng = np.random.default_rng(5)
    seeds = [[rng.uniform(0.5, 1.5, ref[i].shape).astype(ref[i].dtype) for i in keep]
             for _ in range(width)]

    def into(x, *bufs):
        o = _outs(fn(x))
        for b, i in zip(bufs, keep):
            b[...] = o[i]
    shadows = tuple(np.zeros_like(x) for _ in range(width))
    bufs = [BatchDuplicated(np.zeros_like(ref[i]), tuple(seeds[w][j].copy() for w in range(width)))
            for j, i in enumerate(keep)]
    run(into, len(keep))(BatchDuplicated(x.copy(), shadows), *bufs)
    for w in range(width):
        dx = np.zeros_like(x)
        single = [Duplicated(np.zeros_like(ref[i]), seeds[w][j].copy()) for j, i in enumerate(keep)]
        autodiff(Reverse, into, Const, Duplicated(x.copy(), dx), *single)
        _close(shadows[w], dx, x, f"argument shadow, lane {w}")
        for j, (b, s) in enumerate(zip(bufs, single)):
            _close(b.dval[w], s.dval, x, f"shadow {w} of result buffer {j}")
            _close(b.val, s.val, x, f"primal of result buffer {j}")


def _forward_lanes(fn, x, width, run):
    """W tangents in one pass; lane w must equal one Forward call with tangent w."""
    rng = np.random.default_rng(6)
    ts = tuple(rng.standard_normal(x.shape).astype(x.dtype) for _ in range(width))
    (lanes,) = run(fn)(BatchDuplicated(x.copy(), tuple(t.copy() for t in ts)))
    assert isinstance(lanes, tuple) and len(lanes) == width, type(lanes)
    for w in range(width):
        (single,) = autodiff(Forward, fn, Duplicated(x.copy(), ts[w].copy()))
        got, want = _outs(lanes[w]), _outs(single)
        assert len(got) == len(want) and type(lanes[w]) in (type(single), np.float64)
        for k, (g, s) in enumerate(zip(got, want)):
            _close(g, s, x, f"tangent {k}, lane {w}")


def _eager_reverse(into, n):
    return lambda *args: autodiff(Reverse, into, Const, *args)


def _eager_forward(fn):
    return lambda *args: autodiff(Forward, fn, *args)


@pytest.fixture(autouse=True)
def _quiet():
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


@pytest.mark.parametrize("name", NAMES)
def test_batched_reverse_lanes_equal_single_seeds(name):
    fn, x = CASES[name]
    _reverse_lanes(fn, x, WIDTH[name], _eager_reverse)


@pytest.mark.parametrize("name", NAMES)
def test_batched_forward_lanes_equal_single_tangents(name):
    fn, x = CASES[name]
    _forward_lanes(fn, x, WIDTH[name], _eager_forward)


@pytest.mark.parametrize("name", COMPILED)
def test_compiled_batched_reverse_lanes_equal_single_seeds(name):
    fn, x = CASES[name]
    programs = {}

    def run(into, n):
        if "g" not in programs:
            programs["g"] = tape.compile(Reverse, into, Const, BatchDuplicated,
                                         *[BatchDuplicated] * n)
        return programs["g"]
    for value in (x, _moved(x), x):     # trace, replay on other values, replay
        _reverse_lanes(fn, value, WIDTH[name], run)
    assert programs["g"].stats.eager_calls == 0, programs["g"].stats


@pytest.mark.parametrize("name", COMPILED)
def test_compiled_batched_forward_lanes_equal_single_tangents(name):
    fn, x = CASES[name]
    g = tape.compile(Forward, fn, BatchDuplicated, BatchDuplicated)
    for value in (x, _moved(x), x):
        _forward_lanes(fn, value, WIDTH[name], lambda f: g)
    assert g.stats.eager_calls == 0, g.stats


# -- findings ------------------------------------------------------------------------------------
X32 = np.linspace(0.1, 0.9, 4).astype(np.float32)
M32 = (np.outer(X32, X32) + np.diag(X32)).astype(np.float32)


@pytest.mark.parametrize("call", [lambda x: L.eigh(x)[1],
                                  lambda x: L.svd(x[:, :3], full_matrices=False)[0],
                                  lambda x: L.svd(x[:3], full_matrices=False)[2]],
                         ids=["eigh", "svd-u", "svd-vh"])
def test_float32_vector_tangents_keep_float32_in_one_tangent_forward(call):
    t = np.ones((4, 4), np.float32)
    (single,) = autodiff(Forward, call, Duplicated(M32.copy(), t.copy()))
    (lanes,) = autodiff(Forward, call, BatchDuplicated(M32.copy(), (t.copy(), t.copy())))
    assert call(M32).dtype == lanes[1].dtype == np.float32
    _close(lanes[1], single, M32, "lane 1")


@pytest.mark.parametrize("call", [lambda x: np.gradient(x, np.array([0.0, 0.5, 1.5, 1.7])),
                                  lambda x: np.ediff1d(x, to_end=[1.0])],
                         ids=["gradient-coords", "ediff1d-to_end"])
def test_float32_primal_dtype_follows_numpy(call):
    (_, primal) = autodiff(tape.ForwardWithPrimal, call,
                           BatchDuplicated(X32.copy(), (np.ones(4, np.float32),) * 2))
    assert np.asarray(primal).dtype == call(X32).dtype == np.float32
