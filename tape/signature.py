"""What a compiled program is specialised on, and what it must watch besides its arguments.

- `signature`: the hashable key of a call (activities, pytree structures, shapes, dtypes,
  the values of Python-number Consts); a new key traces again.
- `watch`: the values a function reads from its closure, globals, defaults and bound object
  (and those of the Python functions it calls by name), compared at each call.
- `first_difference`: where two traces of one call differ, the mark of random draws.
"""
from __future__ import annotations

import functools
import types

import numpy as np

from .activities import Const
from .arguments import _is_float
from .program import Uncompilable, same_value
from .pytree import _aux_key, flatten


# --------------------------------------------------------------------------------------------
# Signatures


def _leaves(ann):
    return flatten(ann.val)[0] if not isinstance(ann.val, np.ndarray) else [ann.val]


_SCALARS = (bool, int, float, complex, str, bytes, type(None), np.generic, np.dtype, slice,
            type(Ellipsis))


def _signature(annotated) -> tuple:
    """The part of the arguments a program is specialised on (hashable)."""
    parts = []
    for ann in annotated:
        v = ann.val
        const = type(ann) is Const
        if type(v) is np.ndarray:
            parts.append((type(ann), v.shape, v.dtype))
            continue
        leaves, td = flatten(v)
        parts.append((type(ann), _treedef_key(td),
                      tuple(_leaf_key(x, const) for x in leaves)))
    return tuple(parts)


def _treedef_key(td):
    if td is None:
        return None
    if td.kind == "inactive":
        raise Uncompilable("an argument holds an inactive_type value")
    aux = _aux_key(td)
    try:
        hash(aux)
    except TypeError:
        aux = repr(aux)
    return (td.kind, aux, tuple(_treedef_key(c) if hasattr(c, "kind") else c
                                for c in td.children))


def _is_scalar(x) -> bool:
    return isinstance(x, _SCALARS)


def _leaf_key(x, const):
    if hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, np.generic):
        return (type(x), tuple(x.shape), x.dtype)
    if isinstance(x, _SCALARS):
        # Python numbers of Const arguments (and ints of active ones) are baked in.
        if const or not _is_float(x):
            return (type(x), x)
        return (type(x),)
    raise Uncompilable(f"an argument holds a {type(x).__name__}, whose contents a compiled "
                       "replay could not watch")


# --------------------------------------------------------------------------------------------
# What the function reads besides its arguments


def _watch(f) -> tuple:
    """Checks for the values `f` reads from its closure, globals, defaults and bound object
    (and those of the Python functions it calls by name): a list of (description, getter,
    value seen)."""
    watched, seen, generators = [], set(), []

    def visit_function(fn, depth):
        code = getattr(fn, "__code__", None)
        if code is None or id(fn) in seen or depth > 3:
            return
        seen.add(id(fn))
        module = getattr(fn, "__module__", "") or ""
        if module.partition(".")[0] in _LIBRARIES:
            return
        for i, cell in enumerate(getattr(fn, "__closure__", None) or ()):
            try:
                value = cell.cell_contents
            except ValueError:
                continue
            watched.append((f"closure variable `{code.co_freevars[i]}`",
                            (lambda c=cell: c.cell_contents), value))
            visit_value(value, depth)
        g = getattr(fn, "__globals__", {})
        names = _names(code)
        for name in names:
            if name in g:
                value = g[name]
                if isinstance(value, types.ModuleType):
                    if not _is_library_module(value):
                        for attr in names & set(vars(value)):   # module.attribute reads
                            watched.append((f"`{name}.{attr}`", (lambda m=value, a=attr:
                                            vars(m).get(a, _GONE)), _seen(vars(value)[attr])))
                    continue
                watched.append((f"global `{name}`", (lambda g=g, n=name: g.get(n)), value))
                visit_value(value, depth)
        for value in getattr(fn, "__defaults__", None) or ():
            visit_value(value, depth)
        self_ = getattr(fn, "__self__", None)
        if self_ is not None and not isinstance(self_, types.ModuleType):
            visit_value(self_, depth)

    def visit_value(value, depth):
        if isinstance(value, (types.FunctionType, types.MethodType)):
            visit_function(getattr(value, "__func__", value), depth + 1)
            if isinstance(value, types.MethodType):
                visit_value(value.__self__, depth + 1)
            return
        if id(value) in seen or depth > 3 or _is_library_module(value):
            return
        seen.add(id(value))
        if isinstance(value, np.ndarray):
            watched.append(("an array it reads", (lambda v=value: v), value.copy()))
        elif type(value) in (list, tuple, dict):
            items = value.values() if type(value) is dict else value
            watched.append(("a container it reads", (lambda v=value: _shallow(v)),
                            _shallow(value)))
            for item in items:
                visit_value(item, depth + 1)
        elif isinstance(value, functools.partial):
            visit_value(value.func, depth)
            for item in value.args + tuple(value.keywords.values()):
                visit_value(item, depth + 1)
            watched.append(("a partial's arguments", (lambda v=value: _shallow(
                v.args + tuple(v.keywords.values()))), _shallow(
                value.args + tuple(value.keywords.values()))))
        elif hasattr(value, "bit_generator") or isinstance(value, np.random.RandomState):
            generators.append(value)
        elif hasattr(value, "__dict__") and not isinstance(value, type):
            for name, item in vars(value).items():   # attributes rebound between calls
                watched.append((f"attribute `{name}`",
                                (lambda o=value, n=name: vars(o).get(n, _GONE)), _seen(item)))
                visit_value(item, depth + 1)

    visit_function(getattr(f, "__func__", f), 0)
    if isinstance(f, types.MethodType):
        visit_value(f.__self__, 0)
    elif not isinstance(f, types.FunctionType) and hasattr(f, "__call__"):
        visit_function(getattr(type(f).__call__, "__func__", type(f).__call__), 0)
        visit_value(f, 0)
    return watched, generators


_LIBRARIES = ("numpy", "scipy", "tape", "ops", "builtins", "cupy")
_GONE = object()


def _is_library_module(value) -> bool:
    """NumPy, SciPy and the engine are not watched (walking them would cost every call)."""
    return (isinstance(value, types.ModuleType)
            and value.__name__.partition(".")[0] in _LIBRARIES)


def _seen(value):
    """What a watched value is compared with later: a copy of an array's contents."""
    return value.copy() if isinstance(value, np.ndarray) else value


def generator_state(g):
    """The state of a NumPy Generator or RandomState (to restore it after tracing)."""
    return g.bit_generator.state if hasattr(g, "bit_generator") else g.get_state(legacy=False)


def set_generator_state(g, state) -> None:
    if hasattr(g, "bit_generator"):
        g.bit_generator.state = state
    else:
        g.set_state(state)


def _names(code):
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _names(c)
    return names


def _shallow(container):
    items = container.values() if type(container) is dict else container
    return tuple(id(v) if not isinstance(v, _SCALARS) else v for v in items) + (
        tuple(container) if type(container) is dict else ())


def _changed(watched) -> str | None:
    """What the function reads that changed since it was traced (None: nothing)."""
    for what, get, seen in watched:
        now = get()
        if now is not seen and not same_value(now, seen):
            return what
    return None


def _snapshotter(watched):
    """Arrays baked into a program are copied when traced (the function may change them
    later), except the watched ones, which are read by reference (and compared per call)."""
    by_reference = {id(get()) for _, get, _ in watched if isinstance(get(), np.ndarray)}

    def snapshot(obj):
        if isinstance(obj, np.ndarray):
            return obj if id(obj) in by_reference else obj.copy()
        if type(obj) in (tuple, list):
            items = [snapshot(o) for o in obj]
            return obj if all(a is b for a, b in zip(items, obj)) else type(obj)(items)
        if type(obj) is dict:
            return {k: snapshot(v) for k, v in obj.items()}
        return obj
    return snapshot


def _rng_key(state):
    bits = state.get("state", {})
    return (state.get("bit_generator"), tuple(np.asarray(bits.get("key", ())).tolist())
            if isinstance(bits, dict) else bits, bits.get("pos") if isinstance(bits, dict)
            else None, state.get("has_gauss"), state.get("gauss"))


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
