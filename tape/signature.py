"""What a compiled program is specialised on.

- `signature`: the hashable key of a call (activities, pytree structures, shapes, dtypes,
  the values of Python-number Consts); a new key traces again.
- `first_difference`: where two traces of one call differ, the mark of random draws.

What a function reads besides its arguments (its closure, globals, defaults) is watched by
tape/closure_watch.py.
"""
from __future__ import annotations

import math

import numpy as np

from .activities import BatchDuplicated, Const
from .arguments import _is_float
from .core import Tracer
from .errors import PytreeError
from .program import Uncompilable, same_value
from .pytree import _aux_key, flatten


# --------------------------------------------------------------------------------------------
# Signatures


_SCALARS = (bool, int, float, complex, str, bytes, type(None), np.generic, np.dtype, slice,
            type(Ellipsis))


def _signature(annotated) -> tuple:
    """The part of the arguments a program is specialised on (hashable)."""
    parts = []
    for ann in annotated:
        v = ann.val
        const = type(ann) is Const
        # batch mode: the number of directions W too
        kind = (type(ann), ann.width) if isinstance(ann, BatchDuplicated) else type(ann)
        if type(v) is np.ndarray:
            parts.append((kind, _array_key(v)))
            continue
        try:
            leaves, td = flatten(v)
        except PytreeError:
            if not const:
                raise
            raise Uncompilable(
                f"a Const argument holds a {type(v).__module__}.{type(v).__qualname__}, "
                "whose contents a compiled replay could not watch, so each call runs eagerly; "
                "pass the arrays and numbers it holds as Const arguments of their own, or make "
                "it a dataclass") from None
        parts.append((kind, _treedef_key(td), tuple(_leaf_key(x, const) for x in leaves)))
    return tuple(parts)


def _treedef_key(td):
    if td is None:
        return None
    if td.kind == "inactive":
        raise Uncompilable("an argument holds an inactive_type value")
    # a registered class's own static part (`aux` of its flatten) too, by value (a repr
    # would elide the middle of a long array)
    aux = ((td.aux[0], _static_key(td.aux[1])) if td.kind == "custom"
           # a dict's keys with their type and a zero's sign: {1: ...}, {True: ...} and
           # {1.0: ...} are equal under == but a function may tell them apart
           else _static_key(td.aux) if td.kind == "dict" else _aux_key(td))
    try:
        hash(aux)
    except TypeError:
        aux = _static_key(aux)
    if td.kind in ("dataclass", "fields"):   # attributes beside the fields come along
        aux = (aux, _extra_attributes_key(td.aux[2], td.aux[1]))
    return (td.kind, aux, tuple(_treedef_key(c) if hasattr(c, "kind") else c
                                for c in td.children))


def _extra_attributes_key(obj, fields) -> tuple:
    """The attributes of a pytree node that are not its fields (set in `__post_init__`, or
    left out of `register_pytree(cls, fields=...)`): the traced function reads them from the
    node as it was traced, so they are part of the signature, by value."""
    attributes = getattr(obj, "__dict__", None)
    if not attributes or len(attributes) <= len(fields) and all(
            name in fields for name in attributes):
        return ()
    return tuple((name, _static_key(value)) for name, value in attributes.items()
                 if name not in fields)


def _static_key(value):
    """A hashable key equal for equal values: numbers with their type (and the sign of a
    zero), arrays by contents, containers item by item, other hashable objects themselves."""
    if isinstance(value, _SCALARS):
        return _number_key(value)
    if isinstance(value, np.ndarray):
        return (np.ndarray, value.shape, value.dtype.str, value.tobytes())
    if type(value) in (tuple, list):
        return (type(value), tuple(_static_key(v) for v in value))
    if type(value) is dict:
        return (dict, tuple((_static_key(k), _static_key(v)) for k, v in value.items()))
    try:
        hash(value)
    except TypeError:
        raise Uncompilable(f"a pytree node holds a {type(value).__name__} beside its fields, "
                           "whose value a compiled replay could not key on") from None
    return (type(value), value)


def _is_scalar(x) -> bool:
    return isinstance(x, _SCALARS)


def _array_key(x) -> tuple:
    """Shape, dtype and memory layout: whether `x.reshape(-1)` or `x.ravel()` is a view that
    writes through, or a copy, depends on the strides, and a replay repeats the traced one."""
    if hasattr(x, "__cuda_array_interface__"):
        # A program's inputs, guards and written buffers are NumPy arrays: a CuPy array would
        # be baked into the program as a constant (a later call's array never read) and its
        # writes could not be caught, so the call runs as eager autodiff does.
        raise Uncompilable("CuPy arrays run eagerly: compiled programs replay NumPy arrays")
    flags = getattr(x, "flags", None)
    return (type(x), tuple(x.shape), x.dtype, getattr(x, "strides", None),
            None if flags is None else bool(flags.writeable))


def _number_key(x):
    """A Python number baked into a program: its type and plain value (never the object, whose
    class may define its own ``__eq__`` and ``__hash__``), the sign of a zero (-0.0 == 0.0, but
    `math.copysign` and `1 / x` tell them apart) and NaN as a marker (NaN equals no NaN)."""
    if isinstance(x, (float, complex, np.floating, np.complexfloating)):
        z = (complex(float.__float__(x)) if isinstance(x, float)
             else complex.__complex__(x) if isinstance(x, complex) else complex(x.item()))
        return (type(x),) + tuple(("nan",) if v != v else (v, math.copysign(1.0, v))
                                  for v in (z.real, z.imag))
    if isinstance(x, (int, np.integer)):   # (bool too)
        return (type(x), int.__index__(x) if isinstance(x, int) else int(x))
    if isinstance(x, (str, bytes)):
        return (type(x), str.__str__(x) if isinstance(x, str) else bytes(x))
    return (type(x), x)


def _leaf_key(x, const):
    if isinstance(x, Tracer):   # the arguments of a call made inside a differentiation
        raise Uncompilable("arguments are traced values")
    if hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, np.generic):
        return _array_key(x)
    if isinstance(x, _SCALARS):
        # Python numbers of Const arguments (and ints of active ones) are baked in.
        if const or not _is_float(x):
            return _number_key(x)
        return (type(x),)
    raise Uncompilable(f"an argument holds a {type(x).__name__}, whose contents a compiled "
                       "replay could not watch")


def _first_difference(a, b) -> str | None:
    """Where two traces of one call differ (None when they agree): a sign of random draws."""
    sa, sb = a.steps, b.steps
    if len(sa) != len(sb):
        return f"{len(sa)} against {len(sb)} steps"
    for i, (x, y) in enumerate(zip(sa, sb)):
        name = getattr(x[1], "name", getattr(x[1], "__name__", x[0]))
        if x[0] != y[0] or getattr(x[1], "name", x[1]) != getattr(y[1], "name", y[1]):
            return f"step {i}"
        if x[3] != y[3] or not same_value(list(x[4]), list(y[4])):
            return f"a constant of step {i} (`{name}`)"
        if not same_value(x[5] or {}, y[5] or {}):
            return f"a parameter of step {i} (`{name}`)"
    if set(a.guards) != set(b.guards) or not all(
            same_value(list(a.guards[s]), list(b.guards[s])) for s in a.guards):
        return "a value the function decided on"
    return None
