"""What a compiled function reads besides its arguments, and how to tell when it changed.

`_watch(f)` lists the values `f` reads from its closure, globals, defaults and bound object
(and those of the Python functions it calls by name); each compiled call compares them with
the values the trace saw (`_changed`). `Snapshotter` keeps what a trace must see again
unchanged, and `generator_state` / `_rng_key` read a random generator's position, the mark of
random draws.
"""
from __future__ import annotations

import array
import collections
import contextvars
import functools
import os
import types
import weakref

import numpy as np

from .program import DynamicParams, Uncompilable, same_value
from .pytree import flatten
from .signature import _SCALARS, _number_key
from .watch_restore import StateBefore

# --------------------------------------------------------------------------------------------
# What the function reads besides its arguments


def _argument_classes(annotated) -> list:
    """The user classes of the arguments' pytree nodes (a dataclass layer, a namedtuple, a
    registered class): their methods and class attributes are read like the function's own."""
    classes = []

    def visit(td):
        if td is None or not hasattr(td, "kind"):
            return
        cls = (td.aux[0] if td.kind in ("dataclass", "fields", "custom")
               else td.aux if td.kind == "namedtuple" else None)
        if isinstance(cls, type) and cls not in classes:
            classes.append(cls)
        for child in td.children:
            visit(child)
    for ann in annotated:
        if type(ann.val) is not np.ndarray:
            visit(flatten(ann.val)[1])
    return classes


def _watch(f, classes=()) -> tuple:
    """Checks for the values `f` reads from its closure, globals, defaults and bound object
    (and those of the Python functions it calls by name): a list of (description, getter,
    value seen), the generators it reaches, and how to put those values back
    (tape/watch_restore.py)."""
    # id -> the depth a value was walked at: a value reached again by a shorter path is walked
    # again from there (first reached near the depth limit, what it holds was cut off)
    watched, seen, generators, state = [], {}, [], StateBefore()

    def first_visit(value, depth) -> bool:
        if seen.get(id(value), _MAX_DEPTH + 1) <= depth:
            return False
        seen[id(value)] = depth
        return True

    def visit_function(fn, depth):
        code = getattr(fn, "__code__", None)
        if code is None or depth > _MAX_DEPTH or _in_stdlib(fn) or not first_visit(fn, depth):
            return
        module = getattr(fn, "__module__", "") or ""
        if module.partition(".")[0] in _LIBRARIES:
            return
        names = _names(code)
        attributes_read = names | _names(code, strings=True)   # of a module: getattr(m, "X")
        for i, cell in enumerate(getattr(fn, "__closure__", None) or ()):
            try:
                value = cell.cell_contents
            except ValueError:
                continue
            watched.append((f"closure variable `{code.co_freevars[i]}`",
                            (lambda c=cell: c.cell_contents), value))
            state.cell(cell, value)
            if isinstance(value, types.ModuleType):   # `import config` inside a factory
                visit_module(code.co_freevars[i], value, attributes_read, depth)
            else:
                visit_value(value, depth)
        g = getattr(fn, "__globals__", {})
        for name in names:
            if name in g:
                value = g[name]
                if isinstance(value, types.ModuleType):
                    visit_module(name, value, attributes_read, depth)
                    continue
                watched.append((f"global `{name}`", (lambda g=g, n=name: g.get(n)), value))
                state.item(g, name)
                visit_value(value, depth)
        defaults = (lambda fn=fn: _shallow((fn.__defaults__ or ()) + tuple(
            (fn.__kwdefaults__ or {}).values())) + tuple(fn.__kwdefaults__ or ()))
        watched.append(("a default argument", defaults, defaults()))
        state.defaults(fn)
        for value in (getattr(fn, "__defaults__", None) or ()) + tuple(
                (getattr(fn, "__kwdefaults__", None) or {}).values()):
            visit_value(value, depth)
        self_ = getattr(fn, "__self__", None)
        if self_ is not None and not isinstance(self_, types.ModuleType):
            visit_value(self_, depth)
        attributes = getattr(fn, "__dict__", None)
        if attributes:   # `f.scale = 2.0`, read as `f.scale`; functools.wraps' `__wrapped__`
            watched.append((f"an attribute of function `{code.co_name}`",
                            (lambda d=attributes: _shallow(d)), _shallow(attributes)))
            state.container(attributes)
            for value in tuple(attributes.values()):
                visit_value(value, depth + 1)

    def visit_module(name, module, names, depth):
        """The attributes of a user module that the function names (`config.SCALE`,
        `helpers.layer_norm`), not the whole module."""
        if _is_library_module(module):
            return
        for attr in names & set(vars(module)):
            item = vars(module)[attr]
            watched.append((f"`{name}.{attr}`", (lambda m=module, a=attr:
                            vars(m).get(a, _GONE)), _seen(item)))
            state.item(vars(module), attr)
            if not isinstance(item, types.ModuleType):
                visit_value(item, depth + 1)

    def visit_value(value, depth):
        if isinstance(value, (types.FunctionType, types.MethodType)):
            visit_function(getattr(value, "__func__", value), depth + 1)
            if isinstance(value, types.MethodType):
                visit_value(value.__self__, depth + 1)
            return
        if isinstance(value, _BUILTIN_METHODS):   # `lookup = CFG.get`, `total = W.sum`
            owner = getattr(value, "__self__", None)
            if owner is not None and not isinstance(owner, (types.ModuleType, type)):
                visit_value(owner, depth + 1)
            return
        if isinstance(value, weakref.ref) and depth <= _MAX_DEPTH:   # a parent model's
            target = value()                                         # back-reference
            watched.append(("the object a weak reference it reads points to",
                            (lambda r=value: _Same(r())), _Same(target)))
            if target is not None:
                visit_value(target, depth + 1)
            return
        if isinstance(value, contextvars.ContextVar):
            now = value.get(_GONE)
            watched.append((f"context variable `{value.name}`",
                            (lambda v=value: _seen(v.get(_GONE))), _seen(now)))
            if now is not _GONE:
                visit_value(now, depth + 1)
            return
        if isinstance(value, memoryview):
            watched.append(("a memoryview it reads", (lambda v=value: v.tobytes()),
                            value.tobytes()))
            return
        if isinstance(value, np.void) and value.base is not None:   # a structured array's
            watched.append(("a row of a structured array it reads",   # row: a view of it
                            (lambda v=value: v.tobytes()), value.tobytes()))
            return
        if isinstance(value, np.flatiter):   # `it = w.flat`: the array behind it
            visit_value(value.base, depth + 1)
            return
        if (isinstance(value, (*_SCALARS, types.ModuleType)) or depth > _MAX_DEPTH
                or seen.get(id(value), _MAX_DEPTH + 1) <= depth):
            return   # (a module reached as a value is not walked: that would be the world)
        through = getattr(type(value), "__watch_through__", None)
        if through is not None:   # a compiled function: what its user function reads, not
            seen[id(value)] = depth   # its caches and counts, which each call changes
            visit_value(through(value), depth + 1)
            return
        if isinstance(value, type):   # (visit_class marks each class of its MRO seen itself)
            if value.__module__.partition(".")[0] not in _LIBRARIES:
                visit_class(value, depth)
            return
        seen[id(value)] = depth
        if isinstance(value, (types.MappingProxyType, *_DICT_VIEWS)):
            # a read-only view of a dict (`MappingProxyType(d)`, `d.values()`): its items now
            current = ((lambda v=value: dict(v)) if isinstance(value, types.MappingProxyType)
                       else (lambda v=value: dict(v.mapping)))
            watched.append(("a dict it reads through a view",
                            (lambda c=current: _shallow(c())), _shallow(current())))
            for item in current().values():
                visit_value(item, depth + 1)
        elif isinstance(value, np.ndarray) and value.dtype == object:
            # ragged weights, an array of dicts: its items by identity, each watched itself
            watched.append(("an object array it reads",
                            (lambda v=value: (v.shape,) + _shallow(v.ravel().tolist())),
                            (value.shape,) + _shallow(value.ravel().tolist())))
            for item in value.ravel().tolist():
                visit_value(item, depth + 1)
        elif isinstance(value, np.ma.MaskedArray):   # its data, mask and fill value
            data = np.ma.getdata(value)
            watched.append(("a masked array it reads", (lambda v=value: [   # (a list: compared
                np.ma.getdata(v), np.ma.getmaskarray(v), v.fill_value, v.flags.writeable]),
                [data.copy(), np.ma.getmaskarray(value).copy(), value.fill_value,   # item by
                 value.flags.writeable]))                                     # item)
            state.array(data, data.copy())
        elif isinstance(value, np.ndarray):
            watched.append(("the writeable flag of an array it reads",
                            (lambda v=value: v.flags.writeable), value.flags.writeable))
            copy = value.copy()
            watched.append(("an array it reads", (lambda v=value: v), copy))
            state.array(value, copy)
            if type(value) is not np.ndarray and getattr(value, "__dict__", None):
                visit_object(value, depth)   # a subclass's own attributes (`w.scale`)
        elif isinstance(value, _CONTAINERS):   # an OrderedDict of weights, a namedtuple...
            items = value.values() if isinstance(value, dict) else value
            watched.append(("a container it reads", (lambda v=value: _shallow(v)),
                            _shallow(value)))
            state.container(value)
            for item in items:
                visit_value(item, depth + 1)
            if type(value) not in (list, tuple, dict):   # a subclass may have attributes too
                visit_object(value, depth)
        elif isinstance(value, (set, frozenset)):   # `if k in skipped_layers:`
            watched.append(("a set it reads", (lambda v=value: frozenset(v)), frozenset(value)))
            state.container(value)
        elif isinstance(value, (bytearray, array.array)):   # mutable, without attributes
            watched.append(("a buffer it reads", (lambda v=value: bytes(v)), bytes(value)))
            state.container(value)
        elif isinstance(value, functools.partial):
            visit_value(value.func, depth)
            for item in value.args + tuple(value.keywords.values()):
                visit_value(item, depth + 1)
            watched.append(("a partial's arguments", (lambda v=value: _shallow(
                v.args + tuple(v.keywords.values()))), _shallow(
                value.args + tuple(value.keywords.values()))))
        elif _is_generator(value):
            generators.append(value)
        else:
            visit_object(value, depth)

    def visit_object(value, depth):
        cls = type(value)
        library = cls.__module__.partition(".")[0] in _LIBRARIES
        if not library:   # `obj.__class__ = Other`; an attribute set later hides a class's
            watched.append((f"the class of a `{cls.__name__}` it reads",
                            (lambda o=value: type(o)), cls))
            if hasattr(value, "__dict__"):
                watched.append((f"the attribute names of a `{cls.__name__}` it reads",
                                (lambda o=value: frozenset(vars(o))), frozenset(vars(value))))
        for name in _attribute_names(value):   # attributes rebound between calls
            item = getattr(value, name, _GONE)
            watched.append((f"attribute `{name}`",
                            (lambda o=value, n=name: getattr(o, n, _GONE)), _seen(item)))
            state.attribute(value, name)
            if library and _is_cache(item):
                continue   # the engine's own bookkeeping (a custom rule's checked shapes)
            visit_value(item, depth + 1)
        if not library and cls.__module__.partition(".")[0] != "collections":
            visit_class(cls, depth)

    def visit_class(cls, depth):
        """Class attributes (read through an instance, or `cls` in a classmethod): the data
        ones, and the globals and closures of the methods; and the user's metaclass's
        (`Config.s` found on `Meta`)."""
        meta = type(cls)
        if meta is not type and meta.__module__.partition(".")[0] not in _LIBRARIES:
            visit_class(meta, depth)
        for klass in cls.__mro__[:-1]:
            if (id(klass) in seen or klass.__module__.partition(".")[0] in _LIBRARIES
                    or klass.__bases__ == (tuple,) and "_fields" in vars(klass)):
                continue   # (a namedtuple's generated class holds nothing of the user's)
            seen[id(klass)] = 0   # (a class is walked whole, once)
            # An attribute added to a subclass hides its base's; a method, a staticmethod or
            # a callable (`act = np.tanh`) rebound on the class: compared by identity.
            watched.append((f"the attribute names of class `{klass.__name__}`",
                            (lambda k=klass: frozenset(vars(k)) - _CLASS_BOOKKEEPING),
                            frozenset(vars(klass)) - _CLASS_BOOKKEEPING))
            for name, item in vars(klass).items():
                if name in _CLASS_BOOKKEEPING:
                    continue
                method = _method_function(item)
                if method is not None:   # the globals and closures a method reads
                    visit_function(method, depth + 1)
                elif hasattr(type(item), "__get__") and not callable(item) \
                        and type(item).__module__.partition(".")[0] not in _LIBRARIES:
                    # a descriptor of the user's (`scale = FromConfig()`): what its __get__
                    # reads, and its own state
                    visit_function(type(item).__get__, depth + 1)
                    visit_value(item, depth + 1)
                if method is not None or callable(item) or hasattr(item, "__get__"):
                    watched.append((f"class attribute `{klass.__name__}.{name}`",
                                    (lambda k=klass, n=name: vars(k).get(n, _GONE)), item))
                    state.attribute(klass, name)
                    continue
                if name.startswith("__"):
                    continue
                watched.append((f"class attribute `{klass.__name__}.{name}`",
                                (lambda k=klass, n=name: vars(k).get(n, _GONE)), _seen(item)))
                state.attribute(klass, name)
                visit_value(item, depth + 1)

    try:
        visit_function(getattr(f, "__func__", f), 0)
        if isinstance(f, types.MethodType):
            visit_value(f.__self__, 0)
        elif not isinstance(f, types.FunctionType) and hasattr(f, "__call__"):
            visit_function(getattr(type(f).__call__, "__func__", type(f).__call__), 0)
            visit_value(f, 0)
        for cls in classes:
            if cls.__module__.partition(".")[0] not in _LIBRARIES:
                visit_class(cls, 1)
    except Exception as e:   # noqa: BLE001  (an attribute that raises when read, say)
        raise Uncompilable(f"what the function reads could not be watched: "
                           f"{type(e).__name__}: {e}") from e
    return watched, generators, state


def _is_generator(value) -> bool:
    """A NumPy (or CuPy) Generator or RandomState. An object whose `__getattr__` fails in its
    own way (ctypes' library loaders raise OSError) is not one."""
    if isinstance(value, (np.random.Generator, np.random.RandomState)):
        return True
    try:
        return hasattr(value, "bit_generator")
    except Exception:   # noqa: BLE001
        return False


def _is_cache(item) -> bool:
    """A set, buffer or dict/list subclass: in a library's object, its bookkeeping, which
    the function's own calls may change (the exact lists and dicts are watched as before)."""
    return (isinstance(item, (set, frozenset, bytearray, array.array, *_CONTAINERS))
            and type(item) not in (list, tuple, dict))


def _method_function(item):
    """The Python function behind a class attribute that is a method, a static or class
    method or a property (None for anything else)."""
    if isinstance(item, (staticmethod, classmethod)):
        item = item.__func__
    elif isinstance(item, property):
        item = item.fget
    if not isinstance(item, types.FunctionType) or item.__code__.co_filename.startswith("<"):
        return None   # (the methods dataclasses generate are left out)
    return item


_STDLIB = os.path.dirname(os.__file__)


def _in_stdlib(fn) -> bool:
    """A function of Python's standard library (a namedtuple's `_make`, the wrapper reprlib
    puts around a dataclass's `__repr__`): not the user's state, not watched."""
    filename = fn.__code__.co_filename
    return filename.startswith(_STDLIB) and "site-packages" not in filename


_MAX_DEPTH = 8
"""How deep the watch walks: attributes and items of what the function reads (a model's
`self.encoder.blocks[i].attn.query.weight` is six steps from `self`), and the functions and
methods it calls."""
_CONTAINERS = (list, tuple, dict, collections.deque)
"""Watched item by item, subclasses too (OrderedDict, defaultdict, namedtuples)."""
_DICT_VIEWS = (type({}.keys()), type({}.values()), type({}.items()))
"""Read-only views of a dict (`d.values()`): the dict behind them is watched."""
_LIBRARIES = frozenset(("numpy", "scipy", "tape", "ops", "builtins", "cupy", "reprlib",
                        "dataclasses", "typing", "enum", "abc",
                        # Test frameworks: an `assert` that pytest rewrote names its helpers
                        # (`@pytest_ar`), and walking them reached the session's whole state
                        # (36,795 values by the end of a test suite, 60 ms per trace).
                        "_pytest", "pytest", "pluggy", "hypothesis"))


def _attribute_names(obj) -> list:
    """The instance attributes of `obj`: its __dict__ and its __slots__."""
    names = list(vars(obj)) if hasattr(obj, "__dict__") else []
    for klass in type(obj).__mro__:
        slots = vars(klass).get("__slots__", ())
        names += [n for n in ((slots,) if isinstance(slots, str) else slots)
                  if n not in ("__dict__", "__weakref__") and n not in names]
    return names
_GONE = object()
# Bound methods of builtin objects (`CFG.get`, `W.sum`, `L.__getitem__`): their object is read.
_BUILTIN_METHODS = (types.BuiltinMethodType, type("".__add__), type([].__getitem__))
# A class's own entries that are not the user's attributes (and change by themselves: an ABC's
# caches), left out of the identity checks of `visit_class`.
# (`__slotnames__`: copyreg adds it to a class at its first copy.copy, as unflatten makes.)
_CLASS_BOOKKEEPING = frozenset(("__dict__", "__weakref__", "__doc__", "__module__",
                                "__qualname__", "__slots__", "_abc_impl", "__annotations__",
                                "__parameters__", "__orig_bases__", "__slotnames__"))


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


def _names(code, strings: bool = False):
    """The names a code object reads, its own and its nested functions'; with `strings`, its
    string constants that are identifiers instead (``getattr(config, "SCALE")``: looked up
    among a module's attributes only)."""
    names = set() if strings else set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _names(c, strings)
        elif strings and isinstance(c, str) and c.isidentifier():
            names.add(c)
    return names


class _Same:
    """An item of a watched container, compared by identity (and kept alive, so that a new
    object cannot take its address)."""
    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __eq__(self, other):
        return type(other) is _Same and other.obj is self.obj

    __hash__ = None


def _shallow(container):
    if isinstance(container, dict):
        return tuple(_Same(v) if not isinstance(v, _SCALARS) else _number_key(v)
                     for v in container.values()) + tuple(container)
    return tuple(_Same(v) if not isinstance(v, _SCALARS) else _number_key(v)
                 for v in container)


def _changed(watched) -> str | None:
    """What the function reads that changed since it was traced (None: nothing)."""
    for what, get, seen in watched:
        now = get()
        if now is seen or (type(now) is tuple and _shallow_items(now) and now == seen):
            continue   # a container's items, unchanged: compared without same_value's walk
            #            (checked first: `==` of tuples of arrays would compare the arrays)
        if (type(now) is np.ndarray and type(seen) is np.ndarray and now.size <= 4096
                and now.dtype == seen.dtype and now.dtype.kind != "O"
                and now.shape == seen.shape and now.tobytes() == seen.tobytes()):
            continue   # the same bits: the common case of a watched array, kept short
        if not same_value(now, seen):
            return what
    return None


def _shallow_items(items) -> bool:
    """Whether a tuple holds only `_shallow`'s identity wrappers, number keys and strings
    (a dict's keys), for which ``==`` is exact (number keys carry their type and the sign of
    a zero)."""
    for item in items:
        if type(item) is not _Same and type(item) is not tuple and type(item) is not str:
            return False   # (a dict's string keys compare exactly too)
    return True


class Snapshotter:
    """Copies of the arrays and lists a trace bakes into its program, taken when each is used:
    a copy keeps the value the trace saw even if the function changes the array (or list)
    later in the same call. The copies of watched arrays (`originals`) go back to the arrays
    themselves in a program that is kept (`restore`): it reads them by reference at each call,
    and the watch compares their contents. Only a copy of the contents the array holds when
    the call begins (and again when it ends, or the program is not kept) goes back: where
    the function changed the array within the call (`w *= 2`, used, `w /= 2`; a scratch
    buffer it refills), the steps that saw other contents keep them, by value, as the same
    code computes them at each call from the same watched contents."""

    def __init__(self, watched):
        self.by_reference = {id(v): v for v in (get() for _, get, _ in watched)
                             if isinstance(v, np.ndarray)}
        self.originals: dict[int, tuple] = {}   # id(copy) -> (copy, watched array)
        self.latest: dict[int, tuple] = {}      # id(array) -> (array, its latest copy)
        self.restorable: dict[int, np.ndarray] | None = None   # id(copy) -> array, for restore

    def __call__(self, obj):
        if isinstance(obj, np.ndarray):
            # One copy per contents: an array used at every step of a loop is copied once.
            seen = self.latest.get(id(obj))
            if seen is not None and seen[0] is obj and same_value(obj, seen[1]):
                return seen[1]
            copy = obj.copy()
            self.latest[id(obj)] = (obj, copy)
            if id(obj) in self.by_reference:
                self.originals[id(copy)] = (copy, obj)
            return copy
        if type(obj) is list:   # always a new list: f may change its own later in the call
            return [self(o) for o in obj]
        if type(obj) is tuple:
            items = [self(o) for o in obj]
            return obj if all(a is b for a, b in zip(items, obj)) else tuple(items)
        if type(obj) is dict:
            return {k: self(v) for k, v in obj.items()}
        return obj

    def restore(self, obj):
        """`obj` (a constant, params) with the copies of watched arrays that hold the arrays'
        contents now (after the trace: those of the call's start, for a kept program)
        replaced by the arrays."""
        if self.restorable is None:
            self.restorable = {k: array for k, (copy, array) in self.originals.items()
                               if same_value(array, copy)}
        if isinstance(obj, np.ndarray):
            return self.restorable.get(id(obj), obj)
        if type(obj) in (tuple, list):
            items = [self.restore(o) for o in obj]
            return obj if all(a is b for a, b in zip(items, obj)) else type(obj)(items)
        if type(obj) is dict:
            return {k: self.restore(v) for k, v in obj.items()}
        if type(obj) is DynamicParams:
            return DynamicParams(self.restore(obj.template), obj.slots)
        return obj


def _rng_key(state):
    bits = state.get("state", {})
    return (state.get("bit_generator"), tuple(np.asarray(bits.get("key", ())).tolist())
            if isinstance(bits, dict) else bits, bits.get("pos") if isinstance(bits, dict)
            else None, state.get("has_gauss"), state.get("gauss"))
