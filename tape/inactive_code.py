"""Code that carries no derivative: `inactive` functions (argmax, comparisons, random draws)
and `inactive_type` classes (settings objects), as Enzyme's ``inactive`` and
``inactive_type``."""
from __future__ import annotations

import dataclasses
import functools
import sys
from typing import Callable

import numpy as np

from .core import _TRACE_STACK, Tracer, peek, primal
from .errors import PytreeError, refuse_solver_decision
from .pytree import flatten, mark_inactive_type, unflatten



def inactive(fn: Callable) -> Callable:
    """Mark `fn` as having no derivative: traced arguments are replaced by their plain values.

    Use it for argmax-like functions, comparisons, shape queries and random draws. Tracers
    anywhere in the arguments (dicts, dataclasses, nested lists too) become their values, as
    read-only arrays: the engine reads those buffers again, so the function must not write
    them, nor may the caller write into a result that is one of them (copy it first).

    >>> import numpy as np
    >>> first_max = inactive(lambda x: int(np.argmax(x)))
    >>> first_max(np.array([1.0, 3.0, 2.0]))
    1
    """
    @functools.wraps(fn)
    def call(*args, **kwargs):
        traces = _TRACE_STACK.get()
        if traces:
            for a in args:   # a decision on a differentiated value, by whom?
                if isinstance(a, Tracer) and not getattr(a, "nondiff", False):
                    refuse_solver_decision(sys._getframe(1), peek(a))   # (no guard)
                    break
        if traces and traces[-1].records_inactive:   # a compiling trace replays the call
            return traces[-1].call_inactive(fn, args, kwargs)
        return fn(*_plain(args), **{k: _plain_one(v) for k, v in kwargs.items()})
    call.__hecate_inactive__ = True
    return call


def inactive_type(cls: type) -> type:
    """Mark `cls` (and its subclasses) as never differentiated (Enzyme's ``inactive_type``).

    Its instances are constants wherever they appear: a top-level argument of that type is
    treated as Const whatever its annotation (its derivative is None), and inside a pytree
    (a field of a model passed Duplicated, an entry of a dict) it is a static leaf that is
    neither traversed nor differentiated. A shadow holds any instance of the class in its
    place (`make_zero` keeps the primal's own). Usable as a class decorator.

    >>> import numpy as np
    >>> from tape import autodiff, Reverse, Active
    >>> @inactive_type
    ... class Settings:
    ...     def __init__(self, scale): self.scale = scale
    >>> autodiff(Reverse, lambda p: p["w"] * p["cfg"].scale, Active,
    ...          Active({"w": 2.0, "cfg": Settings(3.0)}))[0][0]["w"]
    3.0
    """
    if not isinstance(cls, type):
        raise TypeError(f"inactive_type expects a class, got {cls!r}")
    mark_inactive_type(cls)
    return cls


def _plain_one(x):
    """`x` with the plain values of its tracers, anywhere in a container (dicts, dataclasses
    and nested lists too: a tracer left inside would carry its derivative through)."""
    if isinstance(x, Tracer):
        return _read_only(primal(x))
    if isinstance(x, (list, tuple, dict)) or dataclasses.is_dataclass(x):
        try:
            leaves, treedef = flatten(x)
        except PytreeError:   # an object the engine cannot traverse: passed as it is
            return x
        if any(isinstance(leaf, Tracer) for leaf in leaves):
            return unflatten(treedef, [_plain_one(leaf) for leaf in leaves])
    return x


def _read_only(value):
    """A read-only view of a traced value's buffer: the engine reads it again (it may be the
    caller's argument), so a write by the inactive function, or into a result that is that
    view (``inactive(lambda x: x)``), raises NumPy's error instead of changing it unseen."""
    if type(value) is np.ndarray:   # a view even of a read-only array: that may be an
        value = value.view()        # argument a compiled trace froze, writable after it
        value.flags.writeable = False
    return value


def _plain(args):
    return [_plain_one(a) for a in args]
