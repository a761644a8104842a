"""What a function reads besides its arguments, as it was before a compiling trace ran it.

`tape.compile` runs `f` once per call. A trace that fails part-way (`f` writes into a `Const`
argument, or raises), or whose program cannot answer the call, leaves the call to eager
`autodiff`, which runs `f` again: whatever `f` changed in its closure, its globals or the
objects it reads (``counts[0] += 1``, ``history.append(...)``, ``self.calls += 1``) would
then change twice in one call. The watch (tape/closure_watch.py `_watch`) notes here how to put
each such value back; `restore` does so before the eager call, which then starts from the
state eager mode would have seen.

>>> import numpy as np
>>> state, counts = StateBefore(), np.zeros(1)
>>> state.array(counts, counts.copy())
>>> counts[0] += 1
>>> state.restore(), counts
(True, array([0.]))
"""
from __future__ import annotations

import array as array_module
import collections
from typing import Callable

import numpy as np

from .residuals import same_bits

_GONE = object()


class StateBefore:
    """Undo steps for the values a trace may change, taken before it runs."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], bool]] = []

    def restore(self) -> bool:
        """Put every value back that changed since it was noted; whether any had changed."""
        changed = False
        for undo in self._undo:
            try:
                changed = undo() or changed
            except Exception:   # noqa: BLE001  (a read-only attribute, a deleted cell)
                continue
        return changed

    def cell(self, cell, value) -> None:
        """A closure variable (rebound by `nonlocal`)."""
        def undo():
            try:
                if cell.cell_contents is value:
                    return False
            except ValueError:   # deleted
                pass
            cell.cell_contents = value
            return True
        self._undo.append(undo)

    def item(self, mapping: dict, key) -> None:
        """A global, or an attribute of a user module (its namespace)."""
        value = mapping.get(key, _GONE)

        def undo():
            if mapping.get(key, _GONE) is value:
                return False
            if value is _GONE:
                del mapping[key]
            else:
                mapping[key] = value
            return True
        self._undo.append(undo)

    def attribute(self, obj, name: str) -> None:
        """An instance or class attribute."""
        value = getattr(obj, name, _GONE) if not isinstance(obj, type) else \
            vars(obj).get(name, _GONE)

        def undo():
            now = getattr(obj, name, _GONE) if not isinstance(obj, type) else \
                vars(obj).get(name, _GONE)
            if now is value:
                return False
            if value is _GONE:
                delattr(obj, name)
            else:
                setattr(obj, name, value)
            return True
        self._undo.append(undo)

    def defaults(self, fn) -> None:
        """A function's defaults (rebound `__defaults__` / `__kwdefaults__`)."""
        before = (fn.__defaults__, fn.__kwdefaults__)
        kwdefaults = None if before[1] is None else dict(before[1])

        def undo():
            changed = fn.__defaults__ is not before[0] or (fn.__kwdefaults__ or {}) != (
                kwdefaults or {})
            if changed:
                fn.__defaults__ = before[0]
                fn.__kwdefaults__ = None if kwdefaults is None else dict(kwdefaults)
            return changed
        self._undo.append(undo)

    def array(self, value: np.ndarray, copy: np.ndarray) -> None:
        """An array's contents (`copy`: a copy taken now)."""
        def undo():
            if (value.shape == copy.shape and value.dtype == copy.dtype
                    and same_bits(value, copy)) or not value.flags.writeable:
                return False
            value[...] = copy
            return True
        self._undo.append(undo)

    def container(self, value) -> None:
        """The items of a list, dict, deque, set or mutable buffer (not its items' contents:
        those are noted on their own)."""
        if isinstance(value, (list, collections.deque)):
            items = list(value)
            # The base classes' own methods, here and below: a subclass may give its methods
            # another meaning (a Counter's update counts the pairs it is given).
            if isinstance(value, list):
                def put(v=value):
                    list.__setitem__(v, slice(None), items)
            else:
                def put(v=value):
                    collections.deque.clear(v)
                    collections.deque.extend(v, items)
            same = (lambda v=value: len(v) == len(items)
                    and all(a is b for a, b in zip(v, items)))
        elif isinstance(value, dict):
            pairs = list(value.items())

            def put(v=value):
                dict.clear(v)
                dict.update(v, pairs)
            same = (lambda v=value: len(v) == len(pairs) and all(
                k in v and v[k] is item for k, item in pairs) and list(v) == [k for k, _ in pairs])
        elif isinstance(value, set):
            kept = set(value)

            def put(v=value):
                set.clear(v)
                set.update(v, kept)
            same = lambda v=value: set(v) == kept   # noqa: E731
        elif isinstance(value, (bytearray, array_module.array)):
            kept = value[:]

            def put(v=value):
                v[:] = kept
            same = lambda v=value: v == kept   # noqa: E731
        else:
            return

        def undo():
            if same():
                return False
            put()
            return True
        self._undo.append(undo)
