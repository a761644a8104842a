"""Helpers shared by the rules of ops/: one place for broadcasting and symbolic zeros."""
from __future__ import annotations

import numpy as np

from tape.core import Primitive
from tape.rules import register_function, register_ufunc


def shape_of(x) -> tuple:
    """The shape of an array, tracer or Python number."""
    try:
        return x.shape
    except AttributeError:
        return ()


def unbroadcast(g, shape: tuple):
    """Sum the cotangent `g` down to `shape`: the reverse of NumPy broadcasting.

    >>> unbroadcast(np.ones((2, 3)), (3,))
    array([2., 2., 2.])
    """
    gshape = shape_of(g)
    if gshape == shape:
        return g
    lead = len(gshape) - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(shape) if n == 1 and gshape[lead + i] != 1)
    if axes:
        g = np.sum(g, axis=axes)
    return np.reshape(g, shape) if shape_of(g) != shape else g


def broadcast_tangent(t, shape: tuple):
    """A tangent of an input, broadcast to the output's shape (forward-mode counterpart)."""
    return t if shape_of(t) == shape else np.broadcast_to(t, shape)


def add_tangents(a, b):
    """Sum of two tangents where None is a symbolic zero."""
    if a is None:
        return b
    if b is None:
        return a
    return a + b


def scale_tangent(t, factor):
    return None if t is None else t * factor


def defprimitive(name, impl, augmented_primal, reverse, forward, *, ufunc=None, function=None,
                 multiple_results=False) -> Primitive:
    """Build a primitive and route the NumPy ufunc/function it implements to it."""
    prim = Primitive(name, impl, augmented_primal, reverse, forward,
                     multiple_results=multiple_results)
    if ufunc is not None:
        register_ufunc(ufunc, prim, primitive=prim)
    if function is not None:
        register_function(function, prim)
    return prim
