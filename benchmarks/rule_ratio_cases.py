"""The cases of `benchmarks/rule_ratios.py`: one scalar loss around one NumPy operation each,
with its inputs and its two sizes (see that script's docstring)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import scipy.special as sps

import tape.scipy.special as tss

VEC = (100_000, 1_000_000)          # 1-D lengths
MAT = (316, 1000)                   # square side: 10x the elements
CUBIC = (300, 600)                  # square side for O(n^3) linear algebra
SPECIAL = (30_000, 300_000)         # scipy.special: 10-50x dearer per element than sin
QUICK = {VEC: 10_000, MAT: 100, CUBIC: 100, SPECIAL: 3_000}   # --quick: one smaller size


@dataclass
class Case:
    name: str
    group: str
    make: Callable      # (size, rng) -> tuple of arguments
    op: Callable        # (*args) -> array; the loss is sum(op * w), or op itself when scalar
    active: tuple = (0,)
    sizes: tuple = VEC
    label: Callable = field(default=lambda s: f"n={s:.0e}".replace("+0", ""))


CASES: list[Case] = []


def case(name, group, make, op, active=(0,), sizes=VEC, label=None):
    c = Case(name, group, make, op, tuple(active), sizes)
    if label is not None:
        c.label = label
    elif sizes is not VEC and sizes is not SPECIAL:
        c.label = lambda s: f"{s}x{s}"
    CASES.append(c)


# ----------------------------------------------------------------------------- inputs

def vec(lo=-2.0, hi=2.0):
    return lambda n, r: (r.uniform(lo, hi, n),)


def vec2(lo=-2.0, hi=2.0, lo2=None, hi2=None):
    lo2 = lo if lo2 is None else lo2
    hi2 = hi if hi2 is None else hi2
    return lambda n, r: (r.uniform(lo, hi, n), r.uniform(lo2, hi2, n))


def mat(lo=-2.0, hi=2.0):
    return lambda s, r: (r.uniform(lo, hi, (s, s)),)


def spd(s, r):
    a = r.standard_normal((s, s))
    return (a @ a.T / s + np.eye(s),)


def well(s, r):
    return (r.standard_normal((s, s)) / math.sqrt(s) + 2 * np.eye(s),)


# ----------------------------------------------------------------------------- the sweep

# Elementwise unary ufuncs.
for name, fn, lo, hi in [
        ("sin", np.sin, -3, 3), ("cos", np.cos, -3, 3), ("tan", np.tan, -1, 1),
        ("exp", np.exp, -2, 2), ("expm1", np.expm1, -2, 2), ("exp2", np.exp2, -2, 2),
        ("log", np.log, 0.1, 3), ("log1p", np.log1p, 0, 3), ("log2", np.log2, 0.1, 3),
        ("log10", np.log10, 0.1, 3), ("sqrt", np.sqrt, 0.1, 3), ("cbrt", np.cbrt, 0.1, 3),
        ("square", np.square, -2, 2), ("reciprocal", np.reciprocal, 0.5, 3),
        ("abs", np.abs, -2, 2), ("tanh", np.tanh, -2, 2), ("sinh", np.sinh, -2, 2),
        ("cosh", np.cosh, -2, 2), ("arcsin", np.arcsin, -0.9, 0.9),
        ("arccos", np.arccos, -0.9, 0.9), ("arctan", np.arctan, -2, 2),
        ("arcsinh", np.arcsinh, -2, 2), ("arctanh", np.arctanh, -0.9, 0.9),
        ("negative", np.negative, -2, 2), ("deg2rad", np.deg2rad, -2, 2),
        ("sinc", np.sinc, -2, 2), ("real", np.real, -2, 2), ("fabs", np.fabs, -2, 2)]:
    case(name, "unary", vec(lo, hi), fn)
case("x**3", "unary", vec(), lambda x: x ** 3)
case("x**2.5", "unary", vec(0.1, 3), lambda x: x ** 2.5)
case("power(x,y) both", "binary", vec2(0.5, 2), np.power, active=(0, 1))

# Binary ufuncs, same shape, both active.
for name, fn in [("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply),
                 ("divide", np.divide), ("maximum", np.maximum), ("minimum", np.minimum),
                 ("fmax", np.fmax), ("hypot", np.hypot), ("arctan2", np.arctan2),
                 ("logaddexp", np.logaddexp), ("copysign", np.copysign)]:
    case(name, "binary", vec2(0.5, 2.0, -2.0, 2.0), fn, active=(0, 1))

# Binary with broadcasting: a full matrix and a row / column vector, both active.
_row = lambda s, r: (r.uniform(0.5, 2, (s, s)), r.uniform(0.5, 2, s))          # noqa: E731
_col = lambda s, r: (r.uniform(0.5, 2, (s, s)), r.uniform(0.5, 2, (s, 1)))     # noqa: E731
for name, fn in [("add", np.add), ("multiply", np.multiply), ("divide", np.divide),
                 ("maximum", np.maximum), ("power", np.power)]:
    case(f"{name} M,row", "broadcast", _row, fn, active=(0, 1), sizes=MAT)
    case(f"{name} M,col", "broadcast", _col, fn, active=(0, 1), sizes=MAT)
case("x*scalar array", "broadcast", lambda s, r: (r.uniform(0.5, 2, (s, s)), np.array(1.5)),
     np.multiply, active=(0, 1), sizes=MAT)
case("outer via [:,None]*[None,:]", "broadcast", lambda s, r: (r.uniform(0.5, 2, s),),
     lambda x: x[:, None] * x[None, :], sizes=MAT)

# where / clip.
case("where(x>0, x, 2y)", "select", vec2(), lambda x, y: np.where(x > 0, x, 2 * y),
     active=(0, 1))
case("clip", "select", vec(), lambda x: np.clip(x, -1, 1))
case("clip array bounds", "select", lambda n, r: (r.uniform(-2, 2, n), r.uniform(-2, 0, n),
                                                  r.uniform(0, 2, n)),
     np.clip, active=(0, 1, 2))
case("heaviside-masked x*(x>0)", "select", vec(), lambda x: x * (x > 0))
case("select 3 conds", "select", vec(),
     lambda x: np.select([x < -1, x < 1], [x ** 2, np.sin(x)], default=x))

# Reductions over each axis on a matrix.
_pos = mat(0.5, 1.5)
for name, fn, mk in [
        ("sum", np.sum, mat()), ("mean", np.mean, mat()), ("var", np.var, mat()),
        ("std", np.std, mat()), ("max", np.max, mat()), ("min", np.min, mat()),
        ("prod", np.prod, mat(0.999, 1.001)), ("ptp", np.ptp, mat()),
        ("median", np.median, mat()), ("nansum", np.nansum, mat()),
        ("nanmean", np.nanmean, mat()), ("nanvar", np.nanvar, mat()),
        ("nanstd", np.nanstd, mat()), ("nanmax", np.nanmax, mat()),
        ("nanmin", np.nanmin, mat()), ("nanprod", np.nanprod, mat(0.999, 1.001)),
        ("nanmedian", np.nanmedian, mat()),
        ("logsumexp", tss.logsumexp, mat()),
        ("amax", np.amax, mat()), ("average", np.average, mat()),
        ("linalg.norm", np.linalg.norm, mat())]:
    case(f"{name} all", "reduce", mk, fn, sizes=MAT)
    for ax in (0, 1):
        case(f"{name} axis={ax}", "reduce", mk, (lambda f, a: lambda x: f(x, axis=a))(fn, ax),
             sizes=MAT)
for name, fn in [("quantile", np.quantile), ("nanquantile", np.nanquantile),
                 ("percentile", lambda x, q, axis=None: np.percentile(x, 100 * q, axis=axis))]:
    case(f"{name} 0.3 all", "reduce", mat(), (lambda f: lambda x: f(x, 0.3))(fn), sizes=MAT)
    case(f"{name} 0.3 axis=0", "reduce", mat(), (lambda f: lambda x: f(x, 0.3, axis=0))(fn),
         sizes=MAT)
    case(f"{name} 0.3 axis=1", "reduce", mat(), (lambda f: lambda x: f(x, 0.3, axis=1))(fn),
         sizes=MAT)
case("quantile 5 qs axis=1", "reduce", mat(),
     lambda x: np.quantile(x, [0.1, 0.3, 0.5, 0.7, 0.9], axis=1), sizes=MAT)
case("average weights axis=1", "reduce", lambda s, r: (r.uniform(-2, 2, (s, s)),
                                                      r.uniform(0.5, 1, s)),
     lambda x, w: np.average(x, axis=1, weights=w), active=(0, 1), sizes=MAT)
case("max with ties", "reduce", lambda s, r: (np.round(r.uniform(0, 3, (s, s))),),
     lambda x: np.max(x, axis=1), sizes=MAT)

# Cumulative ops.
for name, fn, mk in [("cumsum", np.cumsum, mat()), ("cumprod", np.cumprod, mat(0.999, 1.001)),
                     ("nancumsum", np.nancumsum, mat()),
                     ("nancumprod", np.nancumprod, mat(0.999, 1.001)),
                     ("maximum.accumulate", np.maximum.accumulate, mat()),
                     ("logaddexp.accumulate", np.logaddexp.accumulate, mat())]:
    case(f"{name} axis=0", "cumulative", mk, (lambda f: lambda x: f(x, axis=0))(fn), sizes=MAT)
    case(f"{name} axis=1", "cumulative", mk, (lambda f: lambda x: f(x, axis=1))(fn), sizes=MAT)
case("cumsum 1-D", "cumulative", vec(), np.cumsum)
case("cumprod 1-D", "cumulative", vec(0.99999, 1.00001), np.cumprod)
case("cumprod 1-D with zeros", "cumulative",
     lambda n, r: (np.where(r.random(n) < 1e-3, 0.0, r.uniform(0.99999, 1.00001, n)),),
     np.cumprod)
case("maximum.accumulate 1-D", "cumulative", vec(), np.maximum.accumulate)

# Indexing.
_idx = lambda n, r: (r.uniform(-2, 2, n), r.integers(0, n, n))                 # noqa: E731
case("x[idx] fancy (repeats)", "indexing", _idx, lambda x, i: x[i])
case("x[mask]", "indexing", lambda n, r: (r.uniform(-2, 2, n), r.random(n) < 0.5),
     lambda x, m: x[m])
case("x[::2]", "indexing", vec(), lambda x: x[::2])
case("x[1:-1] slice", "indexing", vec(), lambda x: x[1:-1])
case("np.take", "indexing", _idx, lambda x, i: np.take(x, i))
case("np.compress", "indexing", lambda n, r: (r.uniform(-2, 2, n), r.random(n) < 0.5),
     lambda x, m: np.compress(m, x))
case("x[nonzero(x>0)]", "indexing", vec(), lambda x: x[np.nonzero(x > 0)])
case("M[rows] gather rows", "indexing",
     lambda s, r: (r.uniform(-2, 2, (s, s)), r.integers(0, s, s)), lambda x, i: x[i], sizes=MAT)
case("M[:, cols]", "indexing",
     lambda s, r: (r.uniform(-2, 2, (s, s)), r.integers(0, s, s)), lambda x, i: x[:, i],
     sizes=MAT)
case("M[i, j] pairs", "indexing",
     lambda s, r: (r.uniform(-2, 2, (s, s)), r.integers(0, s, s * s), r.integers(0, s, s * s)),
     lambda x, i, j: x[i, j], sizes=MAT)
case("take_along_axis axis=1", "indexing",
     lambda s, r: (r.uniform(-2, 2, (s, s)), r.integers(0, s, (s, s))),
     lambda x, i: np.take_along_axis(x, i, axis=1), sizes=MAT)
case("take_along_axis axis=0", "indexing",
     lambda s, r: (r.uniform(-2, 2, (s, s)), r.integers(0, s, (s, s))),
     lambda x, i: np.take_along_axis(x, i, axis=0), sizes=MAT)


def _setitem_repeat(x, i):
    y = np.zeros_like(x)
    y[i] = x            # repeated indices: the last write wins
    return y


def _setitem_slice(x):
    y = x * 1.0
    y[::3] = 0.0
    return y


def _setitem_into_active(x, z, i):
    y = x * 1.0
    y[i] = z            # overwrite part of an active buffer with another active value
    return y


def _add_at(x, i):
    y = np.zeros_like(x)
    np.add.at(y, i, x)
    return y


def _iadd_fancy(x, i):
    y = np.zeros_like(x)
    y[i] += x           # buffered: repeated indices count once
    return y


def _put(x, i):
    y = np.zeros_like(x)
    np.put(y, i, x)
    return y


def _put_along(x, i):
    y = np.zeros_like(x)
    np.put_along_axis(y, i, x, axis=1)
    return y


def _loop_setitem(x):
    y = np.zeros_like(x)
    for k in range(0, x.shape[0], x.shape[0] // 100):
        y[k] = x[k] * 2.0
    return y


case("y[idx] = x (repeats)", "indexing", _idx, _setitem_repeat)
case("y[::3] = 0 on copy", "indexing", vec(), _setitem_slice)
case("y[idx] = z into active", "indexing",
     lambda n, r: (r.uniform(-2, 2, n), r.uniform(-2, 2, n // 10), r.integers(0, n, n // 10)),
     _setitem_into_active, active=(0, 1))
case("np.add.at (repeats)", "indexing", _idx, _add_at)
case("y[idx] += x (repeats)", "indexing", _idx, _iadd_fancy)
case("np.put (repeats)", "indexing", _idx, _put)
case("put_along_axis", "indexing",
     lambda s, r: (r.uniform(-2, 2, (s, s)), np.argsort(r.random((s, s)), axis=1)),
     _put_along, sizes=MAT)
case("100 scalar setitems", "indexing", vec(), _loop_setitem)
case("bincount weights", "indexing",
     lambda n, r: (r.uniform(-2, 2, n), r.integers(0, 1000, n)),
     lambda x, i: np.bincount(i, weights=x, minlength=1000))
case("histogram weights", "indexing",
     lambda n, r: (r.uniform(-2, 2, n), r.uniform(0, 1, n)),
     lambda x, d: np.histogram(d, bins=100, weights=x)[0])
case("choose", "indexing",
     lambda n, r: (r.uniform(-2, 2, n), r.uniform(-2, 2, n), r.integers(0, 2, n)),
     lambda a, b, i: np.choose(i, [a, b]), active=(0, 1))

# Sorting.
case("sort 1-D", "sort", vec(), np.sort)
case("sort axis=0", "sort", mat(), lambda x: np.sort(x, axis=0), sizes=MAT)
case("sort axis=1", "sort", mat(), lambda x: np.sort(x, axis=1), sizes=MAT)
case("x[argsort(x)]", "sort", vec(), lambda x: x[np.argsort(x)])
case("take_along_axis(argsort)", "sort", mat(),
     lambda x: np.take_along_axis(x, np.argsort(x, axis=1), axis=1), sizes=MAT)
case("partition k=n/2", "sort", vec(), lambda x: np.partition(x, x.shape[0] // 2))
case("partition axis=1", "sort", mat(), lambda x: np.partition(x, 10, axis=1), sizes=MAT)
case("sort descending [::-1]", "sort", vec(), lambda x: np.sort(x)[::-1])
case("top-k via argpartition", "sort", vec(),
     lambda x: x[np.argpartition(x, -100)[-100:]])
case("unique (values)", "sort", lambda n, r: (np.round(r.uniform(0, 1000, n)),), np.unique)

# Joins, splits, shape.
case("concatenate [x, x]", "join", vec(), lambda x: np.concatenate([x, x]))
case("concatenate 100 pieces", "join", vec(),
     lambda x: np.concatenate([x[k::100] for k in range(100)]))
case("concatenate 1000 pieces", "join", vec(),
     lambda x: np.concatenate([x[k::1000] for k in range(1000)]))
case("stack 2", "join", vec2(), lambda x, y: np.stack([x, y]), active=(0, 1))
case("vstack rows", "join", mat(), lambda x: np.vstack([x, x]), sizes=MAT)
case("hstack cols", "join", mat(), lambda x: np.hstack([x, x]), sizes=MAT)
case("stack of rows (list)", "join", mat(), lambda x: np.stack(list(x)), sizes=MAT)
case("split 10, sum parts", "join", vec(),
     lambda x: sum(np.sum(p * (k + 1)) for k, p in enumerate(np.split(x, 10))))
case("split 1000, one part", "join", vec(), lambda x: np.split(x, 1000)[7])
case("array_split 1000, all", "join", vec(),
     lambda x: np.concatenate(np.array_split(x, 1000)[::-1]))
case("iterate rows (for r in M)", "join", mat(),
     lambda x: sum(np.sum(r) for r in x), sizes=MAT)
case("M[k] per row loop", "join", mat(),
     lambda x: sum(np.sum(x[k] * k) for k in range(x.shape[0])), sizes=MAT)
for mode in ("constant", "edge", "reflect", "symmetric", "wrap", "linear_ramp", "mean"):
    case(f"pad {mode}", "join", mat(), (lambda m: lambda x: np.pad(x, 7, mode=m))(mode),
         sizes=MAT)
case("roll", "join", vec(), lambda x: np.roll(x, 17))
case("roll 2-D axis", "join", mat(), lambda x: np.roll(x, (3, -5), axis=(0, 1)), sizes=MAT)
case("tile 3", "join", vec(), lambda x: np.tile(x, 3))
case("tile 2-D", "join", mat(), lambda x: np.tile(x, (2, 2)), sizes=MAT)
case("repeat 3", "join", vec(), lambda x: np.repeat(x, 3))
case("repeat counts", "join", lambda n, r: (r.uniform(-2, 2, n), r.integers(0, 4, n)),
     lambda x, c: np.repeat(x, c))
case("flip", "join", vec(), np.flip)
case("rot90", "join", mat(), np.rot90, sizes=MAT)
case("transpose", "join", mat(), lambda x: x.T, sizes=MAT)
case("reshape", "join", mat(), lambda x: x.reshape(-1), sizes=MAT)
case("broadcast_to", "join", lambda s, r: (r.uniform(-2, 2, s),),
     lambda x: np.broadcast_to(x, (x.shape[0], x.shape[0])), sizes=MAT)
case("diag of matrix", "join", mat(), np.diag, sizes=MAT)
case("diag vector->matrix", "join", lambda s, r: (r.uniform(-2, 2, s),), np.diag, sizes=MAT)
case("triu", "join", mat(), np.triu, sizes=MAT)
case("trace", "join", mat(), np.trace, sizes=MAT)
case("outer", "join", lambda s, r: (r.uniform(-2, 2, s), r.uniform(-2, 2, s)), np.outer,
     active=(0, 1), sizes=MAT)
case("kron", "join", lambda s, r: (r.uniform(-2, 2, (s // 10, s // 10)),
                                   r.uniform(-2, 2, (10, 10))),
     np.kron, active=(0, 1), sizes=MAT)
case("moveaxis 3-D", "join", lambda s, r: (r.uniform(-2, 2, (s // 10, s, 10)),),
     lambda x: np.moveaxis(x, 0, -1), sizes=MAT)
case("sliding_window_view", "join", vec(),
     lambda x: np.lib.stride_tricks.sliding_window_view(x, 8).sum(axis=1))

# Differences, interpolation, polynomials, convolution.
case("diff", "numerical", vec(), np.diff)
case("diff n=3", "numerical", vec(), lambda x: np.diff(x, n=3))
case("diff axis=0 2-D", "numerical", mat(), lambda x: np.diff(x, axis=0), sizes=MAT)
case("ediff1d", "numerical", vec(), np.ediff1d)
case("gradient 1-D", "numerical", vec(), np.gradient)
case("gradient 2-D", "numerical", mat(), lambda x: np.stack(np.gradient(x)), sizes=MAT)
case("gradient edge_order=2", "numerical", vec(), lambda x: np.gradient(x, edge_order=2))
case("trapezoid", "numerical", vec(), np.trapezoid)
case("interp wrt x", "numerical",
     lambda n, r: (r.uniform(0, 1, n), np.linspace(0, 1, 1000), r.standard_normal(1000)),
     np.interp)
case("interp wrt fp", "numerical",
     lambda n, r: (r.standard_normal(n // 10), r.uniform(0, 1, n), np.linspace(0, 1, n // 10)),
     lambda fp, x, xp: np.interp(x, xp, fp))
case("interp wrt xp", "numerical",
     lambda n, r: (np.linspace(0, 1, n // 10), r.uniform(0, 1, n), r.standard_normal(n // 10)),
     lambda xp, x, fp: np.interp(x, xp, fp))
case("polyval deg 8", "numerical", lambda n, r: (r.uniform(-1, 1, n), r.standard_normal(9)),
     lambda x, p: np.polyval(p, x), active=(0, 1))
case("convolve k=32 full", "numerical",
     lambda n, r: (r.standard_normal(n), r.standard_normal(32)), np.convolve, active=(0, 1))
case("convolve k=32 valid", "numerical",
     lambda n, r: (r.standard_normal(n), r.standard_normal(32)),
     lambda a, k: np.convolve(a, k, mode="valid"), active=(0, 1))
case("correlate k=32 same", "numerical",
     lambda n, r: (r.standard_normal(n), r.standard_normal(32)),
     lambda a, k: np.correlate(a, k, mode="same"), active=(0, 1))
case("convolve 1e3 x n/100", "numerical",
     lambda n, r: (r.standard_normal(1000), r.standard_normal(n // 100)), np.convolve,
     active=(0, 1))

# FFT.
case("fft.fft", "fft", vec(), lambda x: np.fft.fft(x).real)
case("fft.fft |.|^2", "fft", vec(), lambda x: np.abs(np.fft.fft(x)) ** 2)
case("fft.ifft", "fft", vec(), lambda x: np.fft.ifft(x).imag)
case("fft.rfft", "fft", vec(), lambda x: np.abs(np.fft.rfft(x)))
case("fft.irfft(rfft)", "fft", vec(), lambda x: np.fft.irfft(np.fft.rfft(x) * 0.5))
case("fft.fft2", "fft", mat(), lambda x: np.fft.fft2(x).real, sizes=MAT)
case("fft.rfftn", "fft", mat(), lambda x: np.abs(np.fft.rfftn(x)), sizes=MAT)
case("fft.fft axis=0", "fft", mat(), lambda x: np.fft.fft(x, axis=0).imag, sizes=MAT)
case("fft n=padded", "fft", vec(), lambda x: np.fft.rfft(x, n=2 * x.shape[0]).real)
case("fftshift", "fft", vec(), np.fft.fftshift)

# Linear algebra.
_mm = lambda s, r: (r.standard_normal((s, s)), r.standard_normal((s, s)))        # noqa: E731
case("matmul A@B", "linalg", _mm, np.matmul, active=(0, 1), sizes=CUBIC)
case("matvec A@v", "linalg", lambda s, r: (r.standard_normal((s, s)), r.standard_normal(s)),
     np.matmul, active=(0, 1), sizes=MAT)
case("batched matmul", "linalg",
     lambda s, r: (r.standard_normal((s // 10, 64, 64)), r.standard_normal((s // 10, 64, 64))),
     np.matmul, active=(0, 1), sizes=MAT)
case("dot", "linalg", _mm, np.dot, active=(0, 1), sizes=CUBIC)
case("tensordot axes=2", "linalg",
     lambda s, r: (r.standard_normal((s, 10, 10)), r.standard_normal((10, 10, s))),
     lambda a, b: np.tensordot(a, b, axes=2), active=(0, 1), sizes=CUBIC)
case("einsum ij,jk->ik", "linalg", _mm, lambda a, b: np.einsum("ij,jk->ik", a, b),
     active=(0, 1), sizes=CUBIC)
case("einsum ij,jk,kl->il", "linalg",
     lambda s, r: tuple(r.standard_normal((s, s)) for _ in range(3)),
     lambda a, b, c: np.einsum("ij,jk,kl->il", a, b, c, optimize=True),
     active=(0, 1, 2), sizes=CUBIC)
case("einsum ij,jk,kl->il no-opt", "linalg",
     lambda s, r: tuple(r.standard_normal((s // 4, s // 4)) for _ in range(3)),
     lambda a, b, c: np.einsum("ij,jk,kl->il", a, b, c), active=(0, 1, 2), sizes=CUBIC)
case("einsum ij,ij->", "linalg", _mm, lambda a, b: np.einsum("ij,ij->", a, b),
     active=(0, 1), sizes=MAT)
case("einsum ii->i", "linalg", mat(), lambda a: np.einsum("ii->i", a), sizes=MAT)
case("einsum bij,bjk->bik", "linalg",
     lambda s, r: (r.standard_normal((s // 10, 64, 64)), r.standard_normal((s // 10, 64, 64))),
     lambda a, b: np.einsum("bij,bjk->bik", a, b), active=(0, 1), sizes=MAT)
case("einsum i,ij,j->", "linalg",
     lambda s, r: (r.standard_normal(s), r.standard_normal((s, s)), r.standard_normal(s)),
     lambda a, m, b: np.einsum("i,ij,j->", a, m, b), active=(0, 1, 2), sizes=MAT)
case("solve A,B", "linalg", lambda s, r: well(s, r) + (r.standard_normal((s, s)),),
     np.linalg.solve, active=(0, 1), sizes=CUBIC)
case("solve A,b", "linalg", lambda s, r: well(s, r) + (r.standard_normal(s),),
     np.linalg.solve, active=(0, 1), sizes=CUBIC)
case("inv", "linalg", well, np.linalg.inv, sizes=CUBIC)
case("pinv", "linalg", well, np.linalg.pinv, sizes=CUBIC)
case("det", "linalg", lambda s, r: (np.eye(s) + r.standard_normal((s, s)) * 0.01,),
     np.linalg.det, sizes=CUBIC)
case("slogdet", "linalg", well, lambda a: np.linalg.slogdet(a)[1], sizes=CUBIC)
case("cholesky", "linalg", spd, np.linalg.cholesky, sizes=CUBIC)
case("qr", "linalg", mat(), lambda a: np.linalg.qr(a)[1], sizes=CUBIC)
case("qr Q", "linalg", mat(), lambda a: np.linalg.qr(a)[0], sizes=CUBIC)
case("svd (U,S,Vt)", "linalg", mat(),
     lambda a: np.linalg.svd(a, full_matrices=False)[1], sizes=CUBIC)
case("svd U", "linalg", mat(), lambda a: np.linalg.svd(a, full_matrices=False)[0],
     sizes=CUBIC)
case("svdvals (compute_uv=False)", "linalg", mat(),
     lambda a: np.linalg.svd(a, compute_uv=False), sizes=CUBIC)
case("eigh values", "linalg", spd, lambda a: np.linalg.eigh(a)[0], sizes=CUBIC)
case("eigh vectors", "linalg", spd, lambda a: np.linalg.eigh(a)[1], sizes=CUBIC)
case("eigvalsh", "linalg", spd, np.linalg.eigvalsh, sizes=CUBIC)
case("eig values (real part)", "linalg", mat(), lambda a: np.linalg.eigvals(a).real,
     sizes=CUBIC)
case("norm fro", "linalg", mat(), np.linalg.norm, sizes=CUBIC)
case("norm 2", "linalg", mat(), lambda a: np.linalg.norm(a, 2), sizes=CUBIC)
case("norm nuc", "linalg", mat(), lambda a: np.linalg.norm(a, "nuc"), sizes=CUBIC)
case("norm axis=1", "linalg", mat(), lambda a: np.linalg.norm(a, axis=1), sizes=MAT)
case("lstsq", "linalg", lambda s, r: (r.standard_normal((2 * s, s)), r.standard_normal(2 * s)),
     lambda a, b: np.linalg.lstsq(a, b, rcond=None)[0], active=(0, 1), sizes=CUBIC)
case("matrix_power 5", "linalg", lambda s, r: (r.standard_normal((s, s)) / math.sqrt(s),),
     lambda a: np.linalg.matrix_power(a, 5), sizes=CUBIC)
case("multi_dot 3", "linalg", lambda s, r: tuple(r.standard_normal((s, s)) for _ in range(3)),
     lambda a, b, c: np.linalg.multi_dot([a, b, c]), active=(0, 1, 2), sizes=CUBIC)

# scipy.special ufuncs (tape.scipy.special names, evaluated through SciPy's ufuncs).
for name, lo, hi in [("erf", -2, 2), ("erfc", -2, 2), ("erfinv", -0.9, 0.9),
                     ("erfcx", 0, 3), ("gammaln", 0.5, 5), ("digamma", 0.5, 5),
                     ("gamma", 0.5, 3), ("loggamma", 0.5, 5), ("expit", -3, 3),
                     ("logit", 0.1, 0.9), ("log_expit", -3, 3), ("ndtr", -2, 2),
                     ("ndtri", 0.1, 0.9), ("log_ndtr", -3, 3), ("i0", -2, 2), ("i0e", -2, 2),
                     ("i1", -2, 2), ("j0", 0, 5), ("j1", 0, 5), ("y0", 0.5, 5), ("y1", 0.5, 5),
                     ("i1e", -2, 2), ("k1", 0.5, 5),
                     ("k0", 0.5, 5), ("k1e", 0.5, 5), ("entr", 0.1, 2), ("rgamma", 0.5, 3)]:
    case(f"special.{name}", "scipy.special", vec(lo, hi), getattr(sps, name), sizes=SPECIAL)
case("special.polygamma(1,x)", "scipy.special", vec(0.5, 5), lambda x: tss.polygamma(1, x))
case("special.zeta(2, q) wrt q", "scipy.special", vec(1.5, 4), lambda q: sps.zeta(2.0, q))
case("special.xlogy", "scipy.special", vec2(0.1, 2), sps.xlogy, active=(0, 1))
case("special.xlog1py", "scipy.special", vec2(0.1, 2), sps.xlog1py, active=(0, 1))
case("special.betaln", "scipy.special", vec2(0.5, 3), sps.betaln, active=(0, 1))
case("special.beta", "scipy.special", vec2(0.5, 3), sps.beta, active=(0, 1))
case("special.gammainc(a, x) wrt x", "scipy.special", vec2(0.5, 3),
     lambda x, a: sps.gammainc(a, x))
case("special.betainc wrt x", "scipy.special",
     lambda n, r: (r.uniform(0.1, 0.9, n), r.uniform(1, 3, n), r.uniform(1, 3, n)),
     lambda x, a, b: sps.betainc(a, b, x))
case("special.jv(v, x) wrt x", "scipy.special", vec2(0.5, 5, 0, 3),
     lambda x, v: sps.jv(v, x))
case("special.kv(v, x) wrt x", "scipy.special", vec2(0.5, 5, 0, 3),
     lambda x, v: sps.kv(v, x))
case("special.iv(v, x) wrt x", "scipy.special", vec2(0.5, 5, 0, 3),
     lambda x, v: sps.iv(v, x))
case("special.kl_div", "scipy.special", vec2(0.1, 2), sps.kl_div, active=(0, 1))
case("special.rel_entr", "scipy.special", vec2(0.1, 2), sps.rel_entr, active=(0, 1))
case("special.softmax axis=1", "scipy.special", mat(), lambda x: tss.softmax(x, axis=1),
     sizes=MAT)
case("special.log_softmax axis=1", "scipy.special", mat(),
     lambda x: tss.log_softmax(x, axis=1), sizes=MAT)
case("special.logsumexp b=", "scipy.special",
     lambda s, r: (r.standard_normal((s, s)), r.uniform(0.5, 1, (s, s))),
     lambda x, b: tss.logsumexp(x, axis=1, b=b), active=(0, 1), sizes=MAT)
case("special.multigammaln(x, 5)", "scipy.special", vec(3, 6),
     lambda x: tss.multigammaln(x, 5))

for _c in CASES:
    if _c.group == "scipy.special" and _c.sizes is VEC:
        _c.sizes = SPECIAL
