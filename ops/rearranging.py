"""Functions that pick, drop, repeat or insert elements: np.delete, insert, resize, compress,
extract, trim_zeros, choose, ediff1d, block, vander, bincount, plus np.cov and np.corrcoef.

Most of them only rearrange elements, so each is NumPy's own function applied to the *positions*
of the elements (an integer array), followed by one gather of the traced values at those
positions: NumPy decides every shape, broadcast and edge case, and the derivative is that of a
gather (repeated positions accumulate their cotangents). The rest are short compositions of
differentiable ops.

>>> from tape import autodiff, Reverse, Active
>>> (g,), = autodiff(Reverse, lambda x: np.sum(np.delete(x, 1) ** 2), Active,
...                  Active(np.array([1.0, 2.0, 3.0])))
>>> g
array([2., 0., 6.])
"""
from __future__ import annotations

import numpy as np

from tape.backend import array_module
from tape.core import Tracer, nondiff_value, peek, primal
from tape.rules import inactive, register_function

from ._util import as_array, shape_of
from .indexing import getitem, scatter_add
from .joining import concatenate
from .shape import ravel, reshape


def _positions(a) -> np.ndarray:
    """The flat position of each element of `a`, in `a`'s shape."""
    return np.arange(int(np.prod(shape_of(a)))).reshape(shape_of(a))


def _gather(values, positions):
    """values.ravel()[positions], a copy (as the NumPy functions built on it return)."""
    return getitem(ravel(values), index=positions)


def _as_array(a):
    return a if hasattr(a, "shape") else np.asarray(a)


# -- pure rearrangements: NumPy on positions, then a gather ------------------------------------------
def delete(arr, obj, axis=None):
    """np.delete: the kept elements, gathered."""
    arr = _as_array(arr)
    return _gather(arr, np.delete(_positions(arr), primal(obj), axis=axis))


def resize(a, new_shape):
    """np.resize: the elements repeated in order to fill `new_shape`."""
    a = _as_array(a)
    return _gather(a, np.resize(_positions(a), new_shape))


def compress(condition, a, axis=None, out=None):
    """np.compress: the slices where `condition` holds."""
    _refuse_out("compress", out)
    a = _as_array(a)
    return _gather(a, np.compress(primal(condition), _positions(a), axis=axis))


def extract(condition, arr):
    """np.extract: the elements where `condition` holds, flattened."""
    arr = _as_array(arr)
    return _gather(arr, np.extract(primal(condition), _positions(arr)))


def trim_zeros(filt, trim="fb", axis=None):
    """np.trim_zeros: which zeros are trimmed is decided on the values."""
    if np.ndim(filt) != 1 or axis is not None:
        raise NotImplementedError("np.trim_zeros on a traced array: only 1-d input with "
                                  "axis=None is supported")
    kept = np.trim_zeros(np.asarray(primal(filt)), trim)
    start = 0
    if "f" in trim.lower():
        nonzero = np.flatnonzero(np.asarray(primal(filt)))
        start = int(nonzero[0]) if nonzero.size else len(primal(filt))
    return filt[start:start + len(kept)]


def insert(arr, obj, values, axis=None):
    """np.insert: `arr` with `values` inserted; NumPy places both sets of positions (the
    values' are marked negative), then one gather from the two, concatenated."""
    arr, values = _as_array(arr), _as_array(values)
    n = int(np.prod(shape_of(arr)))
    marked_values = -1 - _positions(values)
    placed = np.insert(_positions(arr), primal(obj), marked_values, axis=axis)
    source = np.where(placed >= 0, placed, n + (-1 - placed))
    both = concatenate([ravel(arr), ravel(values)])
    dtype = np.result_type(peek(arr))
    if np.result_type(peek(both)) != dtype:   # NumPy casts the values to arr's dtype
        both = both.astype(dtype)
    return getitem(both, index=source)


def choose(a, choices, out=None, mode="raise"):
    """np.choose: element i comes from choices[a[i]]; the index array carries no derivative."""
    _refuse_out("choose", out)
    choices = [_as_array(c) for c in choices]
    offsets = np.cumsum([0] + [int(np.prod(shape_of(c))) for c in choices[:-1]])
    positions = [_positions(c) + offset for c, offset in zip(choices, offsets)]
    # A recorded nondiff step: a compiled program picks with each call's index array.
    picked = _choose_positions(a, positions, mode)
    return getitem(concatenate([ravel(c) for c in choices]), index=nondiff_value(picked))


@inactive
def _choose_positions(a, positions, mode):
    """Where each element of np.choose's result sits in the concatenated, flattened choices
    (NumPy's own checks of `a` and `mode`)."""
    return np.choose(np.asarray(a), positions, mode=mode)


def ediff1d(ary, to_end=None, to_begin=None):
    """np.ediff1d: differences of the flattened array, with optional ends."""
    flat = ravel(_as_array(ary))
    dtype = np.result_type(peek(flat))   # NumPy's result keeps the array's dtype
    pieces = [flat[1:] - flat[:-1]]

    def end(values, name):
        values = ravel(_as_array(values))
        if not np.can_cast(np.result_type(peek(values)), dtype, casting="same_kind"):
            raise TypeError(f"dtype of `{name}` must be compatible with input `ary` under the "
                            "`same_kind` rule.")
        return values if np.result_type(peek(values)) == dtype else values.astype(dtype)

    if to_begin is not None:
        pieces.insert(0, end(to_begin, "to_begin"))
    if to_end is not None:
        pieces.append(end(to_end, "to_end"))
    return concatenate(pieces) if len(pieces) > 1 else pieces[0]


def block(arrays):
    """np.block: nested lists are concatenated along the last axes, innermost first."""
    depth, ndim = _block_depth(arrays), _block_ndim(arrays)
    ndim = max(ndim, depth)
    return _block(arrays, depth, ndim)


def _block_depth(arrays) -> int:
    return 1 + _block_depth(arrays[0]) if isinstance(arrays, list) and arrays else 0


def _block_ndim(arrays) -> int:
    if isinstance(arrays, list):
        return max(_block_ndim(a) for a in arrays)
    return np.ndim(peek(arrays))


def _block(arrays, depth, ndim):
    if not isinstance(arrays, list):
        a = _as_array(arrays)
        return reshape(a, shape=(1,) * (ndim - np.ndim(a)) + shape_of(a))
    parts = [_block(a, depth - 1, ndim) for a in arrays]
    return concatenate(parts, axis=ndim - depth)


def vander(x, N=None, increasing=False):
    """np.vander: powers of x as columns (decreasing unless `increasing`)."""
    n = len(peek(x)) if N is None else N
    xp = array_module(x)
    powers = xp.arange(n) if increasing else xp.arange(n)[::-1]
    return _as_array(x)[:, None] ** powers


def bincount(x, weights=None, minlength=0):
    """np.bincount: with traced `weights`, the sums per bin (a scatter-add); the counts of an
    unweighted call carry no derivative."""
    if weights is None or not isinstance(weights, Tracer):
        x = as_array(primal(x))   # (a list; a CuPy array stays on the device)
        return np.bincount(x, primal(weights) if weights is not None else None, minlength)
    w_shape, x_shape = shape_of(weights), np.shape(peek(x))
    if len(w_shape) != 1 or w_shape != x_shape:
        raise ValueError(f"np.bincount: `weights` has shape {w_shape} and `x` has shape "
                         f"{x_shape}; they must be 1-d arrays of the same length")
    if np.iscomplexobj(peek(weights)):
        raise TypeError("np.bincount sums `weights` in float64 and refuses complex ones: bin "
                        "weights.real and weights.imag separately")
    # Recorded nondiff steps: a compiled program reads each call's bins, and checks only how
    # many there are (the result's shape).
    n = int(_bin_count(x, minlength))
    index = nondiff_value(_bin_index(x))
    # NumPy sums the weights in float64 whatever their dtype.
    return scatter_add(weights, index=index, shape=(n,), dtype=np.float64)


@inactive
def _bin_count(x, minlength):
    """How many bins np.bincount makes of `x` (NumPy's own checks: non-negative integers, one
    dimension), as a 0-d array."""
    xp = array_module(x)   # (a list of numbers is cast, as NumPy casts it)
    return xp.asarray(len(xp.bincount(x, minlength=minlength)))


@inactive
def _bin_index(x):
    """The bin of each entry of `x`, as np.bincount reads it (a list of numbers is cast)."""
    xp = array_module(x)
    return xp.asarray(as_array(x)).astype(np.intp, copy=False)


def _refuse_out(name, out):
    if out is not None:
        raise NotImplementedError(f"np.{name}(..., out=...) on traced values: assign the "
                                  "result instead")


# -- covariance and correlation --------------------------------------------------------------------
def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *,
        dtype=None):
    """np.cov: NumPy's estimator, written with differentiable ops (weights and `y` may be
    traced too; integer frequency weights are checked as NumPy checks them)."""
    if ddof is not None and ddof != int(ddof):
        raise ValueError("ddof must be integer")
    X = np.atleast_2d(_as_array(m))
    if not rowvar and shape_of(X)[0] != 1:
        X = X.T
    if y is not None:
        Y = np.atleast_2d(_as_array(y))
        if not rowvar and shape_of(Y)[0] != 1:
            Y = Y.T
        X = np.concatenate([X, Y], axis=0)
    if dtype is None:
        dtype = np.result_type(peek(X), np.float64)   # NumPy's: float32 data is computed in float64
    if np.result_type(peek(X)) != dtype:
        X = X.astype(dtype)
    if ddof is None:
        ddof = 0 if bias else 1
    w = None
    if fweights is not None:
        w = _as_array(fweights)
        plain = primal(w)   # (NumPy or CuPy: the checks run where the weights are)
        if not np.all(plain == np.around(plain)):
            raise TypeError("fweights must be integer")
        if np.any(plain < 0):
            raise ValueError("fweights cannot be negative")
    if aweights is not None:
        a = _as_array(aweights)
        if bool(np.any(a < 0)):   # on the traced weights: a compiled call guards its truth
            raise ValueError("aweights cannot be negative")
        w = a if w is None else w * a
    avg = np.average(X, axis=1, weights=w)
    if w is None:
        fact = shape_of(X)[1] - ddof
    elif ddof == 0:
        fact = np.sum(w)
    elif aweights is None:
        fact = np.sum(w) - ddof
    else:
        fact = np.sum(w) - ddof * np.sum(w * a) / np.sum(w)
    centred = X - avg[:, None]
    weighted = centred if w is None else centred * w
    c = np.dot(centred, np.conj(weighted.T)) / fact
    return np.squeeze(c)


def corrcoef(x, y=None, rowvar=True, *, dtype=None):
    """np.corrcoef: the covariance scaled by the standard deviations, clipped to [-1, 1] as
    NumPy clips it."""
    c = cov(x, y, rowvar, dtype=dtype)
    if np.ndim(peek(c)) == 0:
        return c / c
    d = np.diagonal(c)
    stddev = np.sqrt(np.real(d))
    c = c / stddev[:, None] / stddev[None, :]
    if np.iscomplexobj(peek(c)):
        return np.clip(np.real(c), -1, 1) + 1j * np.clip(np.imag(c), -1, 1)
    return np.clip(c, -1, 1)


for _np_fn, _rule in [(np.delete, delete), (np.resize, resize), (np.compress, compress),
                      (np.extract, extract), (np.trim_zeros, trim_zeros), (np.insert, insert),
                      (np.choose, choose), (np.ediff1d, ediff1d), (np.block, block),
                      (np.vander, vander), (np.bincount, bincount), (np.cov, cov),
                      (np.corrcoef, corrcoef)]:
    register_function(_np_fn, _rule)
