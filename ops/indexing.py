"""Indexing: `x[i]` (basic, advanced and boolean), `x[i] = v`, and the scatter that reverses them.

Writes are functional on the tape: `x[i] = v` records `x_new = setitem(x_old, v)` and the tracer
then stands for `x_new`, so values saved earlier are never overwritten (the old array is copied
unless the tracer owns a private buffer that no record has seen).
"""
from __future__ import annotations

import numpy as np

from tape.core import Tracer, primal
from tape.rules import register_method

from ._util import defprimitive, shape_of, unbroadcast


def plain_index(index):
    """Indices carry no derivative: replace traced index arrays by their values."""
    if isinstance(index, tuple):
        return tuple(primal(i) for i in index)
    return primal(index)


# -- x[index] -------------------------------------------------------------------------------------
def _getitem_augmented(cfg, x, index):
    return x[index], (shape_of(x), _dtype(x), index)


def _getitem_reverse(cfg, saved, g):
    shape, dtype, index = saved
    return (scatter_add(g, index=index, shape=shape, dtype=dtype),)


def _getitem_forward(cfg, primals, tangents, index):
    return primals[0][index], tangents[0][index]


getitem = defprimitive("getitem", lambda x, index: x[index], _getitem_augmented,
                       _getitem_reverse, _getitem_forward)


def _dtype(x):
    return getattr(x, "dtype", None) or np.result_type(x)


# -- zeros(shape) with g added at index: the transpose of getitem ----------------------------------
def _scatter_impl(g, index, shape, dtype):
    xp = _module(g)
    out = xp.zeros(shape, dtype=np.result_type(dtype, _dtype(g)))
    if _is_basic(index):
        out[index] = g
    else:
        xp.add.at(out, index, g)
    return out


def _module(x):
    from tape.backend import array_module
    return array_module(x)


def _is_basic(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return all(i is None or i is Ellipsis or isinstance(i, (int, np.integer, slice))
               for i in items)


def _scatter_augmented(cfg, g, index, shape, dtype):
    return _scatter_dispatch(g, index, shape, dtype), index


def _scatter_reverse(cfg, index, ct):
    return (ct[index],)


def _scatter_forward(cfg, primals, tangents, index, shape, dtype):
    return (_scatter_dispatch(primals[0], index, shape, dtype),
            _scatter_dispatch(tangents[0], index, shape, dtype))


def _scatter_dispatch(g, index, shape, dtype):
    # With an outer-level traced `g` the scatter itself must be recorded at that level.
    if isinstance(g, Tracer):
        return scatter_add(g, index=index, shape=shape, dtype=dtype)
    return _scatter_impl(g, index, shape, dtype)


scatter_add = defprimitive("scatter_add", _scatter_impl, _scatter_augmented, _scatter_reverse,
                           _scatter_forward)


# -- x[index] = v ---------------------------------------------------------------------------------
def _setitem_impl(old, value, index, inplace):
    if isinstance(value, Tracer) and not isinstance(old, Tracer):
        # An outer level's value written into a plain buffer: the buffer joins that level.
        old = value.level.constant(old.copy())
    elif not inplace:
        old = old.copy()
    old[index] = value
    return old


def _setitem_augmented(cfg, old, value, index, inplace):
    return _setitem_impl(old, value, index, inplace), (index, shape_of(value))


def _setitem_reverse(cfg, saved, g):
    index, value_shape = saved
    g_old = setitem(g, 0, index=index, inplace=False) if cfg.active[0] else None
    g_value = unbroadcast(g[index], value_shape) if cfg.active[1] else None
    return g_old, g_value


def _setitem_forward(cfg, primals, tangents, index, inplace):
    old, value = primals
    t_old, t_value = tangents
    out = _setitem_impl(old, value, index, inplace)
    if t_old is None:
        t_old = np.zeros_like(out)
    elif not inplace:
        t_old = t_old.copy()
    t_old[index] = 0 if t_value is None else t_value
    return out, t_old


setitem = defprimitive("setitem", _setitem_impl, _setitem_augmented, _setitem_reverse,
                       _setitem_forward)

register_method("__getitem__", lambda x, index: getitem(x, index=plain_index(index)))
register_method("__setitem__", lambda x, index, value, inplace: setitem(
    x, value, index=plain_index(index), inplace=inplace))
