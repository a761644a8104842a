"""Buffers made from traced values (`np.zeros_like(x)`, `x.copy()`) and dtype conversion.

A buffer made with `np.zeros_like(x)` from a traced `x` is itself traced (with no derivative
yet), so that writes into it (`out[1:] = x[:-1] * 2`) are recorded and differentiated.
"""
from __future__ import annotations

import numpy as np

from tape.core import Tracer, primal
from tape.rules import register_function, register_method

from ._util import defprimitive


def _like(np_fn):
    def make(a, *args, **kwargs):
        value = np_fn(a.value, *args, **kwargs)
        return a.level.constant(value)
    return make


for _fn in (np.zeros_like, np.ones_like, np.empty_like):
    register_function(_fn, _like(_fn))


def _full_like(a, fill_value, *args, **kwargs):
    if isinstance(fill_value, Tracer):
        out = np.zeros_like(a, *args, **kwargs)
        out[...] = fill_value
        return out
    return _like(np.full_like)(a, fill_value, *args, **kwargs)


register_function(np.full_like, _full_like)


# -- copy: the identity, producing a private buffer ----------------------------------------------
copy = defprimitive("copy", lambda x: x.copy(),
                    lambda cfg, x: (x.copy(), None),
                    lambda cfg, saved, g: (g,),
                    lambda cfg, primals, tangents: (primals[0].copy(), tangents[0].copy()))


def _copy_method(x):
    out = copy(x)
    out.owned = True
    return out


register_method("copy", _copy_method)
register_function(np.copy, lambda a, *args, **kwargs: _copy_method(a))


# -- astype: cotangents go back in the input's dtype ---------------------------------------------
def _astype_augmented(cfg, x, dtype):
    return x.astype(dtype), x.dtype


def _astype_reverse(cfg, in_dtype, g):
    if in_dtype.kind != "c" and np.iscomplexobj(g):
        g = np.real(g)   # a real input's cotangent is the real part (docs/complex.md)
    return (g.astype(in_dtype),)


def _astype_forward(cfg, primals, tangents, dtype):
    return primals[0].astype(dtype), tangents[0].astype(dtype)


astype = defprimitive("astype", lambda x, dtype: x.astype(dtype), _astype_augmented,
                      _astype_reverse, _astype_forward)


def _astype_method(x, dtype):
    if not np.issubdtype(np.dtype(dtype), np.inexact):
        return primal(x).astype(dtype)   # integer/bool casts carry no derivative
    return astype(x, dtype=dtype)


register_method("astype", _astype_method)
