"""Registering rules: one mechanism for `ops/`, `kernels/` and users (named after EnzymeRules).

A rule set is three plain functions:

- ``augmented_primal(config, *args, **params) -> (primal, saved)``
- ``reverse(config, saved, cotangent) -> tuple`` (one cotangent per positional argument)
- ``forward(config, primals, tangents, **params) -> (primal, tangent)``

`config.active[i]` tells whether argument i carries a derivative, so rules can skip work.
"""
from __future__ import annotations

import functools
from typing import Callable

from .core import Primitive, Tracer, primal
from .tracer import FUNCTION_RULES, METHOD_RULES, UFUNC_PRIMITIVES, UFUNC_RULES


def custom_rule(fn: Callable, *, augmented_primal: Callable, reverse: Callable,
                forward: Callable | None = None, differentiable: bool = False,
                multiple_results: bool = False, name: str | None = None) -> Primitive:
    """Give `fn` hand-written derivative rules; returns the differentiable function.

    Positional arguments are the differentiable inputs (arrays or numbers); keyword arguments
    are static parameters passed through to every rule. With ``differentiable=False`` (the
    default, as for opaque kernels) the rule is once differentiable: a second derivative through
    it raises `OnceDifferentiableError`. Set ``differentiable=True`` when the rules are written
    with NumPy operations, so that nested autodiff differentiates them.

    >>> import numpy as np
    >>> from tape import autodiff, Reverse, Active
    >>> def cube(x): return x ** 3
    >>> cube = custom_rule(cube,
    ...     augmented_primal=lambda cfg, x: (x ** 3, x),
    ...     reverse=lambda cfg, x, g: (3 * x ** 2 * g,))
    >>> autodiff(Reverse, cube, Active, Active(2.0))
    ((12.0,),)
    """
    prim = Primitive(name or getattr(fn, "__name__", "custom_rule"), fn, augmented_primal,
                     _checked_reverse(fn, reverse), forward, differentiable, multiple_results)
    return prim


def _checked_reverse(fn, reverse):
    """Wrong rule returns are the user's most common mistake: say what was expected."""
    name = getattr(fn, "__name__", "custom rule")

    def checked(config, saved, g):
        cts = reverse(config, saved, g)
        if not isinstance(cts, tuple) or len(cts) != len(config.active):
            got = f"a {type(cts).__name__} of length {len(cts)}" if isinstance(
                cts, (tuple, list)) else repr(type(cts).__name__)
            raise TypeError(f"the reverse rule of `{name}` must return a tuple of "
                            f"{len(config.active)} cotangents (one per positional argument, None "
                            f"for inactive ones); it returned {got}")
        return cts
    return checked


def inactive(fn: Callable) -> Callable:
    """Mark `fn` as having no derivative: traced arguments are replaced by their plain values.

    Use it for argmax-like functions, comparisons, shape queries and random draws.

    >>> import numpy as np
    >>> first_max = inactive(lambda x: int(np.argmax(x)))
    >>> first_max(np.array([1.0, 3.0, 2.0]))
    1
    """
    @functools.wraps(fn)
    def call(*args, **kwargs):
        return fn(*_plain(args), **{k: _plain_one(v) for k, v in kwargs.items()})
    call.__hecate_inactive__ = True
    return call


def _plain_one(x):
    if isinstance(x, Tracer):
        return primal(x)
    if isinstance(x, (list, tuple)) and any(isinstance(v, Tracer) for v in x):
        return type(x)(_plain(x)) if type(x) in (list, tuple) else type(x)(*_plain(x))
    return x


def _plain(args):
    return [_plain_one(a) for a in args]


def register_ufunc(ufunc, rule: Callable, primitive: Primitive | None = None) -> Callable:
    """Route `ufunc(traced, ...)` to `rule` (used by ops/). When `primitive` is given, calls
    without keyword arguments go straight to it (speed-up: operators and plain ufunc calls)."""
    UFUNC_RULES[ufunc] = rule
    if primitive is not None:
        UFUNC_PRIMITIVES[ufunc] = primitive
    else:
        UFUNC_PRIMITIVES.pop(ufunc, None)
    return rule


def register_function(func, rule: Callable) -> Callable:
    """Route `func(traced, ...)` (a NumPy function reached by `__array_function__`) to `rule`."""
    FUNCTION_RULES[func] = rule
    return rule


def register_method(name: str, rule: Callable) -> Callable:
    """Route the ndarray method or operator `name` of tracers to `rule`."""
    METHOD_RULES[name] = rule
    return rule
