"""While anything is traced, NumPy's functions are replaced by the wrappers of `ops.lists` (in
the numpy, numpy.linalg and numpy.fft namespaces), so that lists of traced values, and the
functions that NumPy's own Python code calls with them, reach the rules; the originals are put
back when the last trace closes. `install` and `uninstall` run on the engine's first- and
last-trace hooks.
"""
from __future__ import annotations

import functools
import operator

import numpy as np

from tape import tracer
from tape.core import ON_FIRST_TRACE, ON_LAST_TRACE
from tape.tracer import FUNCTION_RULES

from .lists import _FALLBACKS, _WRAPPER_MAKERS, _Concatenator, _convert_lists, _wrapper

# -- installing and removing the wrappers --------------------------------------------------------
_WRAPPERS: dict = {}   # NumPy's object -> its wrapper, made once so that identities are stable


def _wrapper_of(value):
    wrapper = _WRAPPERS.get(value)
    if wrapper is None:
        if value is np.r_ or value is np.c_:
            wrapper = _Concatenator(value)
        else:
            make = _WRAPPER_MAKERS.get(value, _wrapper)
            wrapper = functools.update_wrapper(
                make(value, _FALLBACKS.get(value, _convert_lists)), value)
            _WRAPPED.add(wrapper)
        _WRAPPERS[value] = wrapper
    return wrapper


_WRAPPED: set = set()   # the wrappers made, so that a wrapper is never wrapped again


# Shape and type queries are left unwrapped, as a speed-up: the rules and the tracer's
# attributes call them all the time (np.shape of a primal), and a list is rarely asked.
_QUERIES = {np.shape, np.ndim, np.size, np.result_type, np.may_share_memory, np.iscomplexobj,
            np.isrealobj}


def _wanted(value) -> bool:
    if value is np.r_ or value is np.c_:
        return True
    if isinstance(value, np.ufunc) or not callable(value) or value in _QUERIES:
        return False
    try:
        return (value not in _WRAPPED and value in FUNCTION_RULES or value in _FALLBACKS
                or value in _WRAPPER_MAKERS)
    except TypeError:   # unhashable
        return False


class _Patch:
    """The attributes of one module that are replaced while tracing. `skipped` lists those
    left alone because someone had replaced NumPy's object (monkeypatch): when NumPy's
    object is back, the plan is remade."""

    def __init__(self, namespace: dict, names: list, skipped: list):
        self.namespace = namespace
        self.skipped = tuple(skipped)
        self.originals = tuple(namespace[n] for n in names)
        self.wrappers = tuple(_wrapper_of(v) for v in self.originals)
        self.wrapped = dict(zip(names, self.wrappers))
        self.restored = dict(zip(names, self.originals))
        # The tracer's methods look their rule up by the module attribute at call time
        # (x.sum() finds np.sum), so those wrappers are keys to the same rules too. They stay
        # (unreachable outside tracing): adding and removing them at every trace cost more.
        looked_up = _looked_up() if namespace is vars(np) else set()
        self.ruled = tuple(o for n, o in zip(names, self.originals)
                           if n in looked_up and o in FUNCTION_RULES)
        self.aliases = tuple(_wrapper_of(o) for o in self.ruled)
        self.rules = None   # the rules last given to the aliases
        # Speed-up: one C call reads all the current values, to compare them at once.
        getter = operator.itemgetter(*names)
        self.current = getter if len(names) > 1 else (lambda d: (getter(d),))

    def now(self):
        try:
            return self.current(self.namespace)
        except KeyError:   # an attribute was deleted
            return None

    def stale(self) -> bool:
        return self.now() != self.originals or any(
            self.namespace.get(name) is value for name, value in self.skipped)


def _looked_up() -> set:
    """The names that tape.tracer's code reads (np.sum in ``x.sum()``), found in its code
    objects, so that a method added there is covered without a list to keep."""
    names, todo = set(), []
    for value in vars(tracer).values():
        todo.extend(vars(value).values() if isinstance(value, type) else [value])
    while todo:
        item = todo.pop()
        if isinstance(item, property):
            todo.extend((item.fget, item.fset))
        elif isinstance(item, (staticmethod, classmethod)):
            todo.append(item.__func__)
        elif hasattr(item, "__code__"):
            todo.append(item.__code__)
        elif isinstance(item, type(_looked_up.__code__)):
            names.update(item.co_names)
            todo.extend(c for c in item.co_consts if isinstance(c, type(item)))
    return names


_MODULES = tuple(m for m in (np, np.linalg, getattr(np, "fft", None)) if m is not None)
# NumPy's own objects, taken before any trace (and any wrapper) existed.
_NUMPY_OBJECTS = {id(vars(m)): dict(vars(m)) for m in _MODULES}


def _plan() -> list:
    patches = []
    for module in _MODULES:
        namespace = vars(module)
        names = [n for n, v in list(namespace.items()) if not n.startswith("__") and _wanted(v)]
        skipped = [(n, v) for n, v in _NUMPY_OBJECTS[id(namespace)].items()
                   if n not in names and not n.startswith("__") and namespace.get(n) is not v
                   and _wanted(v)]
        if names:
            patches.append(_Patch(namespace, names, skipped))
    return patches


_STATE = {"plan": [], "rules": -1}


def install() -> None:
    """Replace the numpy attributes by their wrappers (the first trace has opened). The plan
    is remade when rules were registered since, or when an attribute is no longer NumPy's
    (someone replaced it: theirs is left alone)."""
    plan = _STATE["plan"]
    if _STATE["rules"] != len(FUNCTION_RULES) or any(p.stale() for p in plan):
        plan = _STATE["plan"] = _plan()
    for patch in plan:
        patch.namespace.update(patch.wrapped)
        rules = tuple(map(FUNCTION_RULES.get, patch.ruled))
        if rules != patch.rules:   # a rule was registered anew (or this is a new plan)
            FUNCTION_RULES.update(zip(patch.aliases, rules))
            patch.rules = rules
    _STATE["rules"] = len(FUNCTION_RULES)


def uninstall() -> None:
    """Put NumPy's own objects back (the last trace has closed), except where someone else
    replaced a wrapper meanwhile."""
    for patch in _STATE["plan"]:
        if patch.now() == patch.wrappers:
            patch.namespace.update(patch.restored)
            continue
        for name, wrapper in patch.wrapped.items():
            if patch.namespace.get(name) is wrapper:
                patch.namespace[name] = patch.restored[name]


ON_FIRST_TRACE.append(install)
ON_LAST_TRACE.append(uninstall)
