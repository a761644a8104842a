"""Reductions: sum, mean, prod, max/min, var/std, cumulative sums and products, ...

Each rule handles `axis` (None, int or tuple, negative allowed) and `keepdims`.
"""
from __future__ import annotations

import numpy as np

from ._util import defprimitive, shape_of


def normalize_axis(axis, ndim: int) -> tuple:
    """`axis` as a sorted tuple of non-negative ints (None means every axis)."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (int, np.integer)):
        axis = (axis,)
    return tuple(sorted(int(a) % ndim if ndim else 0 for a in axis))


def restore_reduced(g, in_shape: tuple, axis, keepdims: bool):
    """Reshape a cotangent of a reduction so that it broadcasts against the input."""
    if keepdims:
        return g
    axes = normalize_axis(axis, len(in_shape))
    shape = tuple(1 if i in axes else n for i, n in enumerate(in_shape))
    return np.reshape(g, shape)


def _sum_augmented(cfg, x, axis=None, dtype=None, keepdims=False):
    return np.sum(x, axis=axis, dtype=dtype, keepdims=keepdims), (shape_of(x), axis, keepdims)


def _sum_reverse(cfg, saved, g):
    shape, axis, keepdims = saved
    return (np.broadcast_to(restore_reduced(g, shape, axis, keepdims), shape),)


def _sum_forward(cfg, primals, tangents, axis=None, dtype=None, keepdims=False):
    return (np.sum(primals[0], axis=axis, dtype=dtype, keepdims=keepdims),
            np.sum(tangents[0], axis=axis, dtype=dtype, keepdims=keepdims))


sum_ = defprimitive("sum", np.sum, _sum_augmented, _sum_reverse, _sum_forward)


def _sum(a, axis=None, dtype=None, out=None, keepdims=False, **kw):
    if out is not None or kw.get("where") is not None:
        raise NotImplementedError("np.sum with out= or where= is not supported on traced values")
    return sum_(a, axis=axis, dtype=dtype, keepdims=keepdims)


from tape.rules import register_function  # noqa: E402

register_function(np.sum, _sum)
