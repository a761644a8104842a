"""Pytrees: nested containers whose leaves are arrays and numbers.

Known containers: tuple, list, dict, namedtuple, dataclass, None, plus classes registered with
`register_pytree`. A leaf is an array (NumPy, CuPy), a NumPy scalar or a Python number; strings,
bools and None are *static* leaves (carried along, never differentiated).

Every leaf has a path, written as the user would reach it (`model.proj.w_k`, `params['b'][0]`),
so errors can say exactly which leaf is at fault.
"""
from __future__ import annotations

import copy
import dataclasses
from numbers import Number
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from .core import Tracer
from .errors import PytreeError


class PathEntry(NamedTuple):
    kind: str   # "attr", "item" (mutable container), "index" (immutable container)
    key: Any


class TreeDef:
    __slots__ = ("kind", "aux", "children")

    def __init__(self, kind, aux=None, children=()):
        self.kind = kind
        self.aux = aux
        self.children = children

    def __eq__(self, other):
        return (isinstance(other, TreeDef) and self.kind == other.kind
                and _aux_key(self) == _aux_key(other) and self.children == other.children)

    def __repr__(self):
        if self.kind == "dict":   # the keys, in order: two dicts differing in order show it
            return f"TreeDef(dict with keys {list(self.aux)!r})"
        if self.kind in ("dataclass", "fields"):
            return f"TreeDef({self.aux[0].__name__} with fields {list(self.aux[1])!r})"
        return f"TreeDef({self.kind}, {len(self.children)} children)"


def key_order_hint(a: TreeDef, b: TreeDef) -> str:
    """For an error about two structures that differ: where a dict has the same keys in
    another order (flattening follows the order of the keys), else ''."""
    if a.kind == "dict" and b.kind == "dict" and list(a.aux) != list(b.aux) \
            and set(a.aux) == set(b.aux):
        return (f"; a dict has the same keys in another order ({list(a.aux)!r} against "
                f"{list(b.aux)!r}): build it in the same order")
    if a.kind == b.kind and len(a.children) == len(b.children):
        for x, y in zip(a.children, b.children):
            hint = key_order_hint(x, y)
            if hint:
                return hint
    return ""


def _aux_key(td):
    if td.kind in ("dataclass", "fields"):
        return td.aux[0], td.aux[1]
    if td.kind == "custom":
        return td.aux[0]
    if td.kind == "inactive":
        return type(td.aux)
    return td.aux


_REGISTRY: dict[type, tuple] = {}


def register_pytree(cls: type, flatten: Callable | None = None, unflatten: Callable | None = None,
                    *, fields: Sequence[str] | None = None) -> type:
    """Teach the engine to traverse a user class.

    Either give ``fields`` (attribute names; paths read ``obj.name`` and float attributes of a
    shadow are accumulated in place), or ``flatten(obj) -> (children, aux)`` and
    ``unflatten(aux, children) -> obj``.

    >>> class Linear:
    ...     def __init__(self, w, b): self.w, self.b = w, b
    >>> _ = register_pytree(Linear, fields=("w", "b"))
    >>> leaves, _ = flatten(Linear(np.ones(2), 0.5)); len(leaves)
    2
    """
    if fields is not None:
        _REGISTRY[cls] = ("fields", tuple(fields))
    elif flatten is not None and unflatten is not None:
        _REGISTRY[cls] = ("custom", (flatten, unflatten))
    else:
        raise TypeError("register_pytree needs either fields=... or both flatten and unflatten")
    return cls


def is_array(x) -> bool:
    return isinstance(x, np.ndarray) or hasattr(x, "__cuda_array_interface__")


def is_leaf(x) -> bool:
    return (isinstance(x, (Tracer, np.ndarray, np.generic, Number))
            or hasattr(x, "__cuda_array_interface__"))


_STATIC = (str, bytes, type(None), bool, type(Ellipsis))
# Classes marked with `tape.inactive_type`: their instances are static leaves, never traversed
# nor differentiated, and a shadow needs only an instance of the same class in their place.
_INACTIVE: tuple = ()


def mark_inactive_type(cls: type) -> None:
    global _INACTIVE
    if cls not in _INACTIVE:
        _INACTIVE = _INACTIVE + (cls,)


def is_inactive(x) -> bool:
    """Whether `x` is an instance of a class marked with `tape.inactive_type`."""
    return bool(_INACTIVE) and isinstance(x, _INACTIVE)


def flatten(tree, where: Callable | None = None) -> tuple[list, TreeDef]:
    """Leaves in a fixed order and the structure to rebuild the tree from them.

    `where(path)` names a place in `tree` for the error about an object that is no pytree
    (``p['w'][2] (argument 1)``); without it the path starts from the word "argument"."""
    leaves: list = []
    try:
        td = _flatten(tree, leaves, None)
    except _NotAPytree as e:
        raise e.error(where) from None
    return leaves, td


def flatten_with_paths(tree, where: Callable | None = None) -> tuple[list, list, TreeDef]:
    """`flatten`, with the path of each leaf."""
    leaves: list = []
    paths: list = []
    try:
        td = _flatten(tree, leaves, paths, ())
    except _NotAPytree as e:
        raise e.error(where) from None
    return leaves, paths, td


class _NotAPytree(Exception):
    """An object `_flatten` cannot traverse, and where: `flatten` names the place."""

    def __init__(self, cls: type, path: tuple):
        super().__init__(cls, path)
        self.cls, self.path = cls, path

    def error(self, where: Callable | None) -> PytreeError:
        place = format_path(self.path, "argument") if where is None else where(self.path)
        t = self.cls
        return PytreeError(
            f"cannot differentiate through an object of type {t.__module__}.{t.__qualname__} "
            f"at {place}: make it a dataclass, or register it with "
            "tape.register_pytree(cls, fields=(...)) or register_pytree(cls, flatten, unflatten)")


def _flatten(x, leaves, paths, path=()):
    if _INACTIVE and isinstance(x, _INACTIVE):
        return TreeDef("inactive", x)
    if is_leaf(x) and not isinstance(x, bool):
        leaves.append(x)
        if paths is not None:
            paths.append(path)
        return _LEAF
    if isinstance(x, _STATIC):
        return TreeDef("static", x)
    t = type(x)
    reg = _REGISTRY.get(t)
    if reg is not None:
        kind, spec = reg
        if kind == "fields":
            kids = [_flatten(getattr(x, f), leaves, paths, path + (PathEntry("attr", f),))
                    for f in spec]
            return TreeDef("fields", (t, spec, x), tuple(kids))
        children, aux = spec[0](x)
        kids = [_flatten(c, leaves, paths, path + (PathEntry("index", i),))
                for i, c in enumerate(children)]
        return TreeDef("custom", (t, aux), tuple(kids))
    if t is tuple:
        return TreeDef("tuple", len(x), tuple(
            _flatten(c, leaves, paths, path + (PathEntry("index", i),)) for i, c in enumerate(x)))
    if t is list:
        return TreeDef("list", len(x), tuple(
            _flatten(c, leaves, paths, path + (PathEntry("item", i),)) for i, c in enumerate(x)))
    if t is dict:
        keys = tuple(x.keys())
        return TreeDef("dict", keys, tuple(
            _flatten(x[k], leaves, paths, path + (PathEntry("item", k),)) for k in keys))
    if isinstance(x, tuple) and hasattr(t, "_fields"):
        return TreeDef("namedtuple", t, tuple(
            _flatten(getattr(x, f), leaves, paths, path + (PathEntry("attr", f),))
            for f in t._fields))
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        names = tuple(f.name for f in dataclasses.fields(x))
        kids = [_flatten(getattr(x, f), leaves, paths, path + (PathEntry("attr", f),))
                for f in names]
        return TreeDef("dataclass", (t, names, x), tuple(kids))
    raise _NotAPytree(t, path)


_LEAF = TreeDef("leaf")


def unflatten(td: TreeDef, leaves: Sequence) -> Any:
    it = iter(leaves)
    out = _unflatten(td, it)
    return out


def _unflatten(td, it):
    kind = td.kind
    if kind == "leaf":
        return next(it)
    if kind in ("static", "inactive"):
        return td.aux
    kids = [_unflatten(c, it) for c in td.children]
    if kind == "tuple":
        return tuple(kids)
    if kind == "list":
        return kids
    if kind == "dict":
        return dict(zip(td.aux, kids))
    if kind == "namedtuple":
        return td.aux(*kids)
    if kind in ("dataclass", "fields"):
        cls, names, original = td.aux
        obj = copy.copy(original)
        for name, value in zip(names, kids):
            object.__setattr__(obj, name, value)
        return obj
    if kind == "custom":
        cls, aux = td.aux
        return _REGISTRY[cls][1][1](aux, kids)
    raise AssertionError(kind)


def tree_map(fn: Callable, tree, *rest) -> Any:
    """Apply `fn` leaf by leaf to trees of the same structure."""
    leaves, td = flatten(tree)
    others = [flatten(r)[0] for r in rest]
    return unflatten(td, [fn(*xs) for xs in zip(leaves, *others)])


def format_path(path: Sequence[PathEntry], root: str) -> str:
    out = root
    for entry in path:
        if entry.kind == "attr":
            out += f".{entry.key}"
        else:
            out += f"[{entry.key!r}]"
    return out


def get_at(tree, path: Sequence[PathEntry]):
    for entry in path:
        if entry.kind == "attr":
            tree = getattr(tree, entry.key)
        elif _custom_class(tree) is not None:   # a child of a class registered with functions
            tree = _REGISTRY[type(tree)][1][0](tree)[0][entry.key]
        else:
            tree = tree[entry.key]
    return tree


def _custom_class(x) -> type | None:
    """The class of `x` where it is registered with flatten/unflatten functions."""
    reg = _REGISTRY.get(type(x))
    return type(x) if reg is not None and reg[0] == "custom" else None


def fixed_place(tree, path: Sequence[PathEntry]) -> str | None:
    """Why the leaf at `path` cannot be replaced in place ("a number inside a tuple ...");
    None where `set_at` can replace it."""
    if not path:
        return None
    parent = get_at(tree, path[:-1])
    cls = _custom_class(parent)
    if cls is not None:
        return (f"a number held by a {cls.__qualname__}, a class registered with "
                "register_pytree(cls, flatten, unflatten), cannot be updated in place (its "
                "children are rebuilt, never assigned). Register the class with fields=(...) "
                "instead, or hold the number in an array (np.array(x))")
    if path[-1].kind == "index" or isinstance(parent, tuple):
        return ("a number inside a tuple cannot be updated in place. Use a list, a dict or a "
                "dataclass for the shadow")
    return None


def set_at(tree, path: Sequence[PathEntry], value, root: str = "argument") -> None:
    """Replace the leaf at `path` (used to accumulate float leaves of mutable containers)."""
    if not path:
        raise PytreeError(
            f"cannot accumulate into {root}: it is a {type(tree).__name__}, an immutable "
            "number. Pass an array the derivative can be added into (np.zeros_like(x), or "
            "make_zero(x))")
    why = fixed_place(tree, path)
    if why is not None:
        raise PytreeError(f"cannot accumulate into the immutable leaf "
                          f"{format_path(path, root)}: {why}, or mark the argument Active")
    parent = get_at(tree, path[:-1])
    last = path[-1]
    if last.kind == "attr":
        object.__setattr__(parent, last.key, value)
    else:
        parent[last.key] = value
