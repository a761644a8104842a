"""Joining and splitting: concatenate, stack (and hstack, vstack, dstack, column_stack,
append), split (and array_split, hsplit, vsplit, dsplit).

concatenate, stack and split are primitives: concatenate's reverse rule slices the cotangent
into its pieces, split's concatenates the pieces' cotangents (zeros for unused pieces), and
stack is its own primitive as a speed-up (one record instead of an expand_dims per array plus a
concatenate). Sequences may mix traced and plain arrays: plain ones are constants.
"""
from __future__ import annotations

import numpy as np

from tape.core import primal
from tape.rules import register_function
from tape.views import mark_view

from ._util import defprimitive, shape_of
from .shape import (_along, _array, _no_out, atleast_1d, atleast_2d, atleast_3d,
                    normalize_axis, ravel, reshape, squeeze)


# -- concatenate: any number of arrays, each with its own cotangent --------------------------------
def _concat_impl(*arrays, axis, dtype=None):
    return np.concatenate(arrays, axis=axis, dtype=dtype)


def _concat_augmented(cfg, *arrays, axis, dtype=None):
    ends = np.cumsum([shape_of(a)[axis] for a in arrays]).tolist()
    return _concat_impl(*arrays, axis=axis, dtype=dtype), (axis, [0] + ends)


def _concat_reverse(cfg, saved, g):
    axis, bounds = saved
    return tuple(g[_along(axis, slice(bounds[i], bounds[i + 1]))] if active else None
                 for i, active in enumerate(cfg.active))


def _concat_forward(cfg, primals, tangents, axis, dtype=None):
    out = _concat_impl(*primals, axis=axis, dtype=dtype)
    filled = [np.zeros_like(p, dtype=out.dtype) if t is None else t
              for p, t in zip(primals, tangents)]
    return out, concatenate_p(*filled, axis=axis, dtype=dtype)


concatenate_p = defprimitive("concatenate", _concat_impl, _concat_augmented, _concat_reverse,
                             _concat_forward)


def concatenate(arrays, axis=0, out=None, *, dtype=None, casting="same_kind"):
    """np.concatenate (axis=None concatenates the flattened arrays)."""
    _no_out("concatenate", out)
    arrays = tuple(map(_array, arrays))
    if axis is None:
        arrays, axis = tuple(ravel(a) for a in arrays), 0
    if not arrays:
        raise ValueError("need at least one array to concatenate")
    ndim = np.ndim(arrays[0])
    if ndim == 0:
        raise ValueError("zero-dimensional arrays cannot be concatenated")
    return concatenate_p(*arrays, axis=normalize_axis(axis, ndim), dtype=dtype)


# -- stack: its own primitive (speed-up: one record instead of an expand_dims per array plus a
# concatenate; small stacks in loops, such as an LSTM's gates, are common).
def _stack_impl(*arrays, axis, dtype=None):
    return np.stack(arrays, axis=axis, dtype=dtype)


def _stack_augmented(cfg, *arrays, axis, dtype=None):
    return _stack_impl(*arrays, axis=axis, dtype=dtype), axis


def _stack_reverse(cfg, axis, g):
    # the cotangent of array i is the slice i of g along the new axis
    return tuple(g[_along(axis, i)] if active else None for i, active in enumerate(cfg.active))


def _stack_forward(cfg, primals, tangents, axis, dtype=None):
    out = _stack_impl(*primals, axis=axis, dtype=dtype)
    filled = [np.zeros_like(p, dtype=out.dtype) if t is None else t
              for p, t in zip(primals, tangents)]
    return out, stack_p(*filled, axis=axis, dtype=dtype)


stack_p = defprimitive("stack", _stack_impl, _stack_augmented, _stack_reverse, _stack_forward)
stack_p.reverse_results = "set"   # never None for an active argument; views of g
stack_p.inline = ("stack",)   # compiled programs write a stack along axis 0 as np.array


def stack(arrays, axis=0, out=None, *, dtype=None, casting="same_kind"):
    """np.stack: join along a new axis."""
    _no_out("stack", out)
    arrays = tuple(map(_array, arrays))
    if not arrays:
        raise ValueError("need at least one array to stack")
    if len({shape_of(a) for a in arrays}) != 1:
        raise ValueError("all input arrays must have the same shape")
    axis = normalize_axis(axis, np.ndim(arrays[0]) + 1)
    return stack_p(*arrays, axis=axis, dtype=dtype)


def hstack(tup, *, dtype=None, casting="same_kind"):
    """np.hstack: along axis 1, or axis 0 for 1-d arrays."""
    arrs = [atleast_1d(a) for a in tup]
    return concatenate(arrs, axis=0 if arrs and np.ndim(arrs[0]) == 1 else 1, dtype=dtype)


def vstack(tup, *, dtype=None, casting="same_kind"):
    """np.vstack: 1-d arrays become rows."""
    return concatenate([atleast_2d(a) for a in tup], axis=0, dtype=dtype)


def dstack(tup):
    """np.dstack: along the third axis."""
    return concatenate([atleast_3d(a) for a in tup], axis=2)


def column_stack(tup):
    """np.column_stack: 1-d arrays become columns."""
    arrs = map(_array, tup)
    return concatenate([reshape(a, shape=(-1, 1)) if np.ndim(a) < 2 else a for a in arrs], axis=1)


def append(arr, values, axis=None):
    """np.append: concatenate `values` after `arr` (both flattened when axis is None)."""
    arr, values = _array(arr), _array(values)
    if axis is None:
        return concatenate((ravel(arr), ravel(values)), axis=0)
    return concatenate((arr, values), axis=axis)


# -- split: one primitive with several results -----------------------------------------------------
def _split_impl(x, bounds, axis):
    return tuple(x[_along(axis, slice(a, b))] for a, b in bounds)


def _split_augmented(cfg, x, bounds, axis):
    return _split_impl(x, bounds, axis), (shape_of(x), bounds, axis)


def _split_reverse(cfg, saved, gs):
    shape, bounds, axis = saved
    like = next(g for g in gs if g is not None)
    pieces = [np.zeros_like(like, shape=_resized(shape, axis, b - a)) if g is None else g
              for g, (a, b) in zip(gs, bounds)]
    if _tiles(bounds, shape[axis]):
        return (concatenate_p(*pieces, axis=axis),)
    total = None   # overlapping or missing pieces (np.split with unsorted indices)
    for g, (a, b) in zip(gs, bounds):
        if g is None:
            continue
        part = concatenate_p(np.zeros_like(g, shape=_resized(shape, axis, a)), g,
                             np.zeros_like(g, shape=_resized(shape, axis, shape[axis] - b)),
                             axis=axis)
        total = part if total is None else total + part
    return (total,)


def _tiles(bounds, n):
    return bounds[0][0] == 0 and bounds[-1][1] == n and all(
        b == c for (_, b), (c, _) in zip(bounds, bounds[1:]))


def _resized(shape, axis, n):
    return shape[:axis] + (n,) + shape[axis + 1:]


def _split_forward(cfg, primals, tangents, bounds, axis):
    return _split_impl(primals[0], bounds, axis), split_p(tangents[0], bounds=bounds, axis=axis)


split_p = defprimitive("split", _split_impl, _split_augmented, _split_reverse, _split_forward,
                       multiple_results=True)


def array_split(ary, indices_or_sections, axis=0):
    """np.array_split: sections need not divide the axis evenly."""
    ndim = np.ndim(ary)
    axis = normalize_axis(axis, ndim)
    n = shape_of(ary)[axis]
    if np.ndim(indices_or_sections) == 0:
        sections = int(indices_or_sections)
        if sections <= 0:
            raise ValueError("number sections must be larger than 0.")
        each, extra = divmod(n, sections)
        points = np.cumsum([0] + extra * [each + 1] + (sections - extra) * [each]).tolist()
    else:
        points = [0] + [int(i) for i in primal(indices_or_sections)] + [n]
    # Python slice semantics (negative and out-of-range bounds), as NumPy's x[a:b].
    bounds = tuple((min(start, stop), stop) for start, stop, _ in
                   (slice(a, b).indices(n) for a, b in zip(points, points[1:])))
    pieces = split_p(ary, bounds=bounds, axis=axis)
    # Each piece is a view in NumPy: writes into it reach `ary`.
    return [mark_view(p, ary, _along(axis, slice(a, b))) for p, (a, b) in zip(pieces, bounds)]


def split(ary, indices_or_sections, axis=0):
    """np.split: a list of pieces; an integer number of sections must divide the axis."""
    if np.ndim(indices_or_sections) == 0:
        n = shape_of(ary)[normalize_axis(axis, np.ndim(ary))]
        if n % int(indices_or_sections):
            raise ValueError("array split does not result in an equal division")
    return array_split(ary, indices_or_sections, axis)


def hsplit(ary, indices_or_sections):
    """np.hsplit: along axis 1 (axis 0 for 1-d arrays)."""
    if np.ndim(ary) == 0:
        raise ValueError("hsplit only works on arrays of 1 or more dimensions")
    return split(ary, indices_or_sections, 1 if np.ndim(ary) > 1 else 0)


def vsplit(ary, indices_or_sections):
    """np.vsplit: along axis 0."""
    if np.ndim(ary) < 2:
        raise ValueError("vsplit only works on arrays of 2 or more dimensions")
    return split(ary, indices_or_sections, 0)


def dsplit(ary, indices_or_sections):
    """np.dsplit: along axis 2."""
    if np.ndim(ary) < 3:
        raise ValueError("dsplit only works on arrays of 3 or more dimensions")
    return split(ary, indices_or_sections, 2)


def unstack(x, /, *, axis=0):
    """np.unstack: the slices along `axis`, as a tuple."""
    axis = normalize_axis(axis, np.ndim(x))
    return tuple(squeeze(p, axis) for p in array_split(x, shape_of(x)[axis], axis))


for _np_fn, _rule in [
        (np.concatenate, concatenate), (np.stack, stack), (np.hstack, hstack),
        (np.vstack, vstack), (np.dstack, dstack), (np.column_stack, column_stack),
        (np.append, append), (np.split, split), (np.array_split, array_split),
        (np.hsplit, hsplit), (np.vsplit, vsplit), (np.dsplit, dsplit)]:
    register_function(_np_fn, _rule)
for _name, _rule in [("unstack", unstack), ("row_stack", vstack), ("concat", concatenate)]:
    if hasattr(np, _name):   # not in every NumPy version
        register_function(getattr(np, _name), _rule)
