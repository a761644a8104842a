"""NumPy functions written with differentiated NumPy calls: the running extrema
(np.maximum.accumulate, np.minimum.accumulate), np.diagflat, sliding_window_view,
np.piecewise, np.apply_along_axis and np.ix_.

The rearranging ones apply NumPy's own function to the *positions* of the elements (an integer
array) and gather the traced values there, so NumPy decides every shape and edge case and the
derivative is that of a gather. A running extremum gathers, for each output, the position of
the first entry that attains it (ties send the cotangent to the earliest, as np.argmax picks).

>>> from tape import autodiff, Reverse, Active
>>> (g,), = autodiff(Reverse, lambda x: np.sum(np.maximum.accumulate(x)), Active,
...                  Active(np.array([1.0, 3.0, 2.0, 4.0])))
>>> g
array([1., 2., 0., 1.])
"""
from __future__ import annotations

import numpy as np
from numpy.lib import stride_tricks
from numpy.lib.array_utils import normalize_axis_index

from tape.core import peek, primal
from tape.rules import inactive, register_function, register_method
from tape.views import mark_read_only_view

from ._util import shape_of
from .indexing import getitem
from .shape import ravel


def _positions(a) -> np.ndarray:
    return np.arange(int(np.prod(shape_of(a)))).reshape(shape_of(a))


def _gather(values, positions):
    return getitem(ravel(values), index=positions)


def running_extremum(ufunc):
    """np.maximum.accumulate / np.minimum.accumulate on a traced array."""
    def accumulate(a, axis=0, dtype=None):
        axis = normalize_axis_index(axis, len(shape_of(a)))
        if dtype is not None and np.dtype(dtype) != peek(a).dtype:
            a = a.astype(dtype)
        return _gather(a, _running_positions(a, _positions(a), ufunc, axis))
    accumulate.__name__ = f"{ufunc.__name__}_accumulate"
    return accumulate


@inactive
def _running_positions(values, positions, ufunc, axis):
    """Where each running extremum of `values` along `axis` comes from (flat positions, from
    `positions`): no derivative, and a compiled function computes it again at each call."""
    values = np.moveaxis(np.asarray(values), axis, -1)
    positions = np.moveaxis(positions, axis, -1)
    running = ufunc.accumulate(values, axis=-1)
    before = np.concatenate([running[..., :1], running[..., :-1]], axis=-1)
    # A new extremum (or the first NaN, which NumPy's extrema propagate) starts here.
    same = (running == before) | (np.isnan(running) & np.isnan(before))
    same[..., :1] = False
    steps = np.arange(values.shape[-1])
    first = np.maximum.accumulate(np.where(same, 0, steps), axis=-1)
    return np.moveaxis(np.take_along_axis(positions, first, axis=-1), -1, axis)


maximum_accumulate = running_extremum(np.maximum)
minimum_accumulate = running_extremum(np.minimum)


def diagflat(v, k=0):
    """np.diagflat: the flattened input on the k-th diagonal."""
    return np.diag(ravel(v), k)


def sliding_window_view(x, window_shape, axis=None, *, subok=False, writeable=False):
    """sliding_window_view on a traced array: a gather of the windows, which behaves as NumPy's
    read-only view (a write into it raises; later writes into `x` are seen through it)."""
    if writeable:
        raise NotImplementedError(
            "sliding_window_view(..., writeable=True) on a traced value is not supported: the "
            "windows are a copy, so writes would not reach the array; write into x itself")
    windows = stride_tricks.sliding_window_view(_positions(x), window_shape, axis=axis)
    return mark_read_only_view(_gather(x, windows), x, lambda base: _gather(base, windows))


def piecewise(x, condlist, funclist, *args, **kw):
    """np.piecewise, as NumPy writes it: each function sees only the entries of its piece."""
    n = len(condlist) if isinstance(condlist, (list, tuple)) else 1
    conds = [np.asarray(c, dtype=bool) for c in
             (condlist if isinstance(condlist, (list, tuple)) else [condlist])]
    shape = shape_of(x)
    conds = [np.broadcast_to(c, shape) for c in conds]
    if len(funclist) == n + 1:
        conds.append(~np.any(conds, axis=0) if conds else np.ones(shape, bool))
    elif len(funclist) != n:
        raise ValueError(f"with {n} condition(s), funclist must have {n} or {n + 1} entries; "
                         f"got {len(funclist)}")
    y = np.zeros_like(x)
    for cond, func in zip(conds, funclist):
        if not callable(func):
            y[cond] = func
        elif cond.any():
            y[cond] = func(x[cond], *args, **kw)
    return y


def apply_along_axis(func1d, axis, arr, *args, **kwargs):
    """np.apply_along_axis: `func1d` on each 1-D slice along `axis`, results stacked where the
    axis was."""
    shape = shape_of(arr)
    axis = normalize_axis_index(axis, len(shape))
    moved = np.moveaxis(arr, axis, -1)
    outer = shape[:axis] + shape[axis + 1:]
    if 0 in outer:
        raise ValueError("Cannot apply_along_axis when any iteration dimensions are 0")
    stacked = np.stack([func1d(moved[index], *args, **kwargs) for index in np.ndindex(outer)])
    result_shape = shape_of(stacked)[1:]
    out = np.reshape(stacked, outer + result_shape)
    inner = range(len(outer), len(outer) + len(result_shape))
    return np.moveaxis(out, list(inner), list(range(axis, axis + len(result_shape))))


def ix_(*args):
    """np.ix_: each 1-d argument reshaped to lie along its own axis (a boolean one taken as
    the indices of its True entries, as NumPy does). Integer indices carry no derivative; a
    float argument's reshaped copy is differentiated like any reshape.

    >>> [a.shape for a in ix_(np.array([0, 2]), np.array([1.0, 2.0, 3.0]))]
    [(2, 1), (1, 3)]
    """
    out = []
    for k, a in enumerate(args):
        if np.ndim(a) != 1:
            raise ValueError("Cross index must be 1 dimensional")
        if np.result_type(peek(a)) == np.bool_:
            a = np.nonzero(primal(a))[0]
        out.append(np.reshape(a, (1,) * k + (-1,) + (1,) * (len(args) - k - 1)))
    return tuple(out)


register_function(np.ix_, ix_)
register_function(np.diagflat, diagflat)
register_function(stride_tricks.sliding_window_view, sliding_window_view)
register_function(np.piecewise, piecewise)
register_function(np.apply_along_axis, apply_along_axis)
register_method("maximum.accumulate", maximum_accumulate)   # np.maximum.accumulate(x)
register_method("minimum.accumulate", minimum_accumulate)
