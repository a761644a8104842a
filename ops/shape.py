"""Shape and layout: reshape, transpose, broadcast_to, concatenate, ... Linear maps, so each
reverse rule is the transposed map and each forward rule is the same map on the tangent."""
from __future__ import annotations

import numpy as np

from tape.rules import register_function

from ._util import defprimitive, shape_of, unbroadcast


def linear(name, fn, transpose, save=lambda x, **params: shape_of(x), function=None):
    """A primitive linear in its single array argument: `fn(x, **params)`; the reverse rule is
    `transpose(saved, g)` where `saved = save(x, **params)`."""

    def augmented_primal(cfg, x, **params):
        return fn(x, **params), save(x, **params)

    def reverse(cfg, saved, g):
        return (transpose(saved, g),)

    def forward(cfg, primals, tangents, **params):
        return fn(primals[0], **params), fn(tangents[0], **params)

    return defprimitive(name, fn, augmented_primal, reverse, forward, function=function)


reshape = linear("reshape", lambda x, shape, order="C": np.reshape(x, shape, order=order),
                 lambda saved, g: np.reshape(g, saved[0], order=saved[1]),
                 save=lambda x, shape, order="C": (shape_of(x), order))
register_function(np.reshape, lambda a, *args, **kw: reshape(
    a, **dict(zip(("shape", "order"), args)), **_renamed(kw, newshape="shape")))


def _renamed(kw, **names):
    return {names.get(k, k): v for k, v in kw.items()}


def _transpose_fn(x, axes=None):
    return np.transpose(x, axes)


def _transpose_back(saved, g):
    axes = saved
    return np.transpose(g, None if axes is None else tuple(np.argsort(axes)))


transpose = linear("transpose", _transpose_fn, _transpose_back,
                   save=lambda x, axes=None: None if axes is None else tuple(
                       a % np.ndim(x) for a in axes))
register_function(np.transpose, lambda a, axes=None: transpose(
    a, axes=None if axes is None else tuple(axes)))

broadcast_to = linear("broadcast_to", lambda x, shape: np.broadcast_to(x, shape),
                      lambda saved, g: unbroadcast(g, saved))
register_function(np.broadcast_to, lambda array, shape, subok=False: broadcast_to(
    array, shape=tuple(shape) if not isinstance(shape, int) else (shape,)))
