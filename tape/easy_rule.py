"""`easy_rule`: every mode of an elementwise function from its partial derivatives alone
(Enzyme's ``@easy_rule``).

For ``out = f(x1, ..., xn)`` applied elementwise (with NumPy broadcasting), the user gives
``partials(x1, ..., xn) -> (df/dx1, ..., df/dxn)``, each of a shape that broadcasts to the
result's. Then

- forward mode: ``tangent = sum_i t_i * df/dx_i``, broadcast to the result's shape;
- reverse mode: ``cotangent_i = g * df/dx_i``, summed over the axes that x_i was broadcast
  along;
- batch mode: the same formulas on `Batched` tangents, one vectorised pass;
- higher orders: the rules call `f` itself (as this primitive) and `partials` on values that
  may be traced at outer levels, so a second derivative works whenever `partials` is written
  with differentiable NumPy calls, even if `f` is an opaque ufunc.

Complex arguments follow the ops' convention (JAX's): the cotangent is ``g * df/dx``, with no
conjugation, and the partials are those of a holomorphic f.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .backend import broadcast_axes
from .core import STRONG_ZERO, Primitive
from .errors import RuleError
from .rule_calls import plain_buffers


def easy_rule(fn: Callable | None = None, *, partials: Callable, with_output: bool = False,
              name: str | None = None):
    """Make the elementwise function `fn` differentiable from its partial derivatives.

    ``partials(*args)`` returns one partial derivative per positional argument (a bare value
    is accepted for a one-argument function); with ``with_output=True`` it is called as
    ``partials(out, *args)``, for derivatives best written with the result (``1 - out**2`` for
    tanh). Keyword arguments of `fn` are not supported: bind them with functools.partial.
    Usable as a decorator: ``@easy_rule(partials=...)``. Returns a `Primitive`.

    >>> import numpy as np
    >>> from tape import autodiff, Reverse, Forward, Active, Duplicated
    >>> @easy_rule(partials=lambda x, y: (y * x ** (y - 1), np.log(x) * x ** y))
    ... def power(x, y):
    ...     return x ** y
    >>> autodiff(Reverse, power, Active, Active(2.0), Active(3.0))
    ((12.0, 5.545177444479562),)
    >>> autodiff(Forward, power, Duplicated(2.0, 1.0), 3.0)
    (12.0,)
    """
    if fn is None:
        return lambda f: easy_rule(f, partials=partials, with_output=with_output, name=name)
    if not callable(partials):
        raise TypeError(f"easy_rule: partials must be a function returning one partial "
                        f"derivative per argument, got {partials!r}")
    name = name or getattr(fn, "__name__", "easy_rule")
    prim = None   # the primitive under construction: its rules call it on outer-level values

    def derivatives(args, out, out_shape):
        ps = partials(out, *args) if with_output else partials(*args)
        if not isinstance(ps, (tuple, list)):
            ps = (ps,)
        if len(ps) != len(args):
            raise RuleError(f"the partials of `{name}` returned {len(ps)} partial derivatives "
                            f"for {len(args)} arguments; return one per positional argument")
        for i, p in enumerate(ps):
            if p is None:
                raise RuleError(f"the partials of `{name}` returned None as the partial "
                                f"derivative with respect to argument {i}; return zeros "
                                "(np.zeros_like) where the result does not depend on it")
            if not _broadcasts_to(_shape(p), out_shape):
                raise RuleError(f"the partial derivative of `{name}` with respect to argument "
                                f"{i} has shape {_shape(p)}, which does not broadcast to the "
                                f"result's shape {out_shape}")
        return ps

    def refuse_keywords(params):
        if params:
            raise TypeError(f"`{name}` (an easy_rule) was called with keyword arguments "
                            f"{sorted(params)}; easy_rule functions take positional "
                            "arguments only: bind the others with functools.partial")

    def augmented_primal(cfg, *args, **params):
        refuse_keywords(params)
        args = plain_buffers(args)
        out = prim(*args)
        # A constant that may be overwritten before the sweep is copied (see RuleConfig).
        kept = tuple(x.copy() if ow and isinstance(x, np.ndarray) else x
                     for x, ow in zip(args, cfg.overwritten))
        return out, (kept, out if with_output else None, _shape(out))

    def reverse(cfg, saved, g):
        args, out, out_shape = saved
        ps = derivatives(args, out, out_shape)
        return tuple(_unbroadcast(_times(g, p), _shape(x)) if active else None
                     for active, x, p in zip(cfg.active, args, ps))

    def forward(cfg, primals, tangents, **params):
        refuse_keywords(params)
        primals = plain_buffers(primals)
        out = prim(*primals)
        ps = derivatives(primals, out, _shape(out))
        tangent = None
        for t, p in zip(tangents, ps):
            if t is not None:
                term = _times(t, p)
                tangent = term if tangent is None else tangent + term
        if tangent is not None and _shape(tangent) != _shape(out):
            tangent = np.broadcast_to(tangent, _shape(out))
        return out, tangent

    prim = Primitive(name, fn, augmented_primal, reverse, forward, differentiable_rules=True)
    prim.__doc__ = getattr(fn, "__doc__", None)
    return prim


def _times(g, d):
    """``g * d``; in strong-zero mode a zero `g` gives 0 where `d` is inf or NaN."""
    if STRONG_ZERO.get():
        return g * np.where(g == 0, 0, d)
    return g * d


def _shape(x) -> tuple:
    shape = getattr(x, "shape", None)
    return tuple(shape) if shape is not None else np.shape(x)


def _broadcasts_to(shape: tuple, target: tuple) -> bool:
    try:
        return np.broadcast_shapes(shape, target) == target
    except ValueError:
        return False


def _unbroadcast(g, shape: tuple):
    """Sum `g` down to `shape`: the reverse of NumPy broadcasting (arrays, tracers, Batched)."""
    gshape = _shape(g)
    if gshape == shape:
        return g
    axes = broadcast_axes(gshape, shape)
    if axes:
        g = np.sum(g, axis=axes)
    return np.reshape(g, shape) if _shape(g) != shape else g
