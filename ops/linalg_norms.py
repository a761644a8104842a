"""np.linalg.norm, vector_norm, matrix_norm and cond, built on `l2norm` and singular values.

Conventions: the 2-norm and the Frobenius norm have derivative 0 at 0 (norm'(0) = 0, where
sqrt would give 0/0). The spectral norms (2, -2, 'nuc', cond) differentiate singular values, so
2 and -2 need the largest (smallest) singular value to be simple. The max/min-based norms
(inf, -inf, matrix 1/-1/inf/-inf) follow the tie conventions of abs, max and min; ord=0 (a
count of nonzeros) has no derivative.
"""
from __future__ import annotations

import operator

import numpy as np

from tape.rules import inactive, register_function

from ._util import defprimitive, dtype_of, numpy_scalar, shape_of
from .linalg import inv
from .linalg_svd import svdvals


def _kept(y, x, axis):
    """`y` (reduced over `axis` of `x`) with the reduced axes kept as size 1."""
    shape = shape_of(x)
    return np.reshape(y, tuple(1 if i in axis else d for i, d in enumerate(shape)))


def _l2norm_augmented(cfg, x, axis, keepdims):
    out = l2norm(x, axis=axis, keepdims=keepdims)
    return out, (x, out, axis)


def _l2norm_reverse(cfg, saved, g):
    x, out, axis = saved
    out = _kept(out, x, axis)
    g = _kept(g, x, axis)
    if np.iscomplexobj(x):
        # |z|' in the rules' convention (see abs): the real cotangent times conj(z) / |z|.
        return (np.real(g) * np.conj(x) / (out + (out == 0)),)
    return (g * x / (out + (out == 0)),)     # norm'(0) = 0: x is 0 there


def _l2norm_forward(cfg, primals, tangents, axis, keepdims):
    x, = primals
    out = l2norm(x, axis=axis, keepdims=keepdims)
    t = tangents[0]
    dot = np.sum(np.real(np.conj(x) * t) if np.iscomplexobj(x) else x * t, axis=axis,
                 keepdims=keepdims)
    return out, dot / (out + (out == 0))


def _l2norm_impl(x, axis, keepdims):
    square = x.real * x.real + x.imag * x.imag if np.iscomplexobj(x) else x * x
    return np.sqrt(np.sum(square, axis=axis, keepdims=keepdims))


# The 2-norm over `axis` (a tuple of non-negative axes); also the Frobenius norm.
l2norm = defprimitive("l2norm", _l2norm_impl, _l2norm_augmented, _l2norm_reverse,
                      _l2norm_forward)


def _vector_norm(x, ord=2, axis=None, keepdims=False):
    """The vector norm over `axis` (None: all axes; a tuple: the flattened axes)."""
    nd = len(shape_of(x))
    axis = tuple(range(nd)) if axis is None else tuple(sorted(
        operator.index(a) % nd for a in (axis if isinstance(axis, tuple) else (axis,))))
    if ord is None or ord == 2:
        return l2norm(x, axis=axis, keepdims=keepdims)
    if isinstance(ord, str):
        raise ValueError(f"Invalid norm order '{ord}' for vectors")
    if ord == 0:
        # NumPy counts in the real dtype of x: complex64 gives float32, complex128 float64.
        return inactive(lambda v: np.sum(v != 0, axis=axis, keepdims=keepdims).astype(
            v.real.dtype))(x)
    if ord == np.inf:
        return np.max(np.abs(x), axis=axis, keepdims=keepdims)
    if ord == -np.inf:
        return np.min(np.abs(x), axis=axis, keepdims=keepdims)
    if ord == 1:
        return np.sum(np.abs(x), axis=axis, keepdims=keepdims)
    return np.sum(np.abs(x) ** ord, axis=axis, keepdims=keepdims) ** (1.0 / ord)


def _matrix_norm(x, ord="fro", axis=(-2, -1), keepdims=False):
    nd = len(shape_of(x))
    row, col = (operator.index(a) % nd for a in axis)
    if row == col:
        raise ValueError("Duplicate axes given.")
    if ord in (None, "fro", "f"):
        return l2norm(x, axis=tuple(sorted((row, col))), keepdims=keepdims)
    shape = shape_of(x)
    if shape[row] == 0 or shape[col] == 0:   # no entries, nothing to differentiate: NumPy's
        return np.linalg.norm(np.zeros(shape, dtype_of(x)), ord, (row, col), keepdims)
    if ord in (2, -2, "nuc"):
        perm = tuple(i for i in range(nd) if i not in (row, col)) + (row, col)
        s = svdvals(x if perm == tuple(range(nd)) else np.transpose(x, perm))
        out = s[..., 0] if ord == 2 else s[..., -1] if ord == -2 else np.sum(s, axis=-1)
    elif ord in (1, -1, np.inf, -np.inf):
        inner, outer = (row, col) if ord in (1, -1) else (col, row)
        reduce = np.max if ord > 0 else np.min
        out = reduce(np.sum(np.abs(x), axis=inner), axis=outer - (outer > inner))
    else:
        raise ValueError("Invalid norm order for matrices.")
    return _kept(out, x, (row, col)) if keepdims else numpy_scalar(out)


def _norm(x, ord=None, axis=None, keepdims=False):
    """np.linalg.norm: a vector norm for one axis, a matrix norm for two."""
    nd = len(shape_of(x))
    if axis is None:
        if ord is None or (ord in ("f", "fro") and nd == 2) or (ord == 2 and nd == 1):
            return l2norm(x, axis=tuple(range(nd)), keepdims=keepdims)
        axis = tuple(range(nd))
    elif not isinstance(axis, tuple):
        axis = (operator.index(axis),)
    if len(axis) == 1:
        return _vector_norm(x, ord, axis, keepdims)
    if len(axis) == 2:
        return _matrix_norm(x, "fro" if ord is None else ord, axis, keepdims)
    raise ValueError("Improper number of dimensions to norm.")


def _cond(x, p=None):
    """np.linalg.cond: the ratio of extreme singular values, or norm(x) * norm(inv(x))."""
    shape = shape_of(x)
    if len(shape) >= 2 and 0 in shape[-2:]:
        return np.linalg.cond(np.zeros(shape, dtype_of(x)), p)   # NumPy refuses these
    if p in (None, 2, -2):
        s = svdvals(x)
        return s[..., -1] / s[..., 0] if p == -2 else s[..., 0] / s[..., -1]
    return _matrix_norm(x, p) * _matrix_norm(inv(x), p)


register_function(np.linalg.norm, _norm)
register_function(np.linalg.vector_norm, lambda x, /, *, axis=None, keepdims=False, ord=2:
                  _vector_norm(x, ord, axis, keepdims))
register_function(np.linalg.matrix_norm, lambda x, /, *, keepdims=False, ord="fro":
                  _matrix_norm(x, ord, (-2, -1), keepdims))
register_function(np.linalg.cond, _cond)
