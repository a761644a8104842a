"""Residuals that outlive the caller's writes: a record copies the caller's arrays it saved.

A rule saves what its reverse needs, often an operand itself: ``x * c`` saves ``c``, ``x[idx]``
saves ``idx``, ``np.where(m, x, 0)`` saves ``m``. An operand that is not traced (an array from a
closure or a global, a workspace the function updates in place, an index array it increments)
still belongs to the caller, and NumPy cannot tell anyone when it is written. Without a copy, a
write after the use changes what the reverse sweep reads, and the derivative comes out wrong
with no error::

    W = A.copy()
    for k in range(3):
        y = y + np.sum(W @ x)     # the record of `@` saves W ...
        W *= 0.5                  # ... and this would change it for all three records

So when a rule's residuals share memory with such an array, the record keeps a copy of that
residual, taken at once. Arrays that cannot change are left alone (read-only arrays whose
memory is read-only too). Traced values are the tape's own, and Const arguments arrive as
`tape.constbuffer.ConstBuffer` views, which copy on write only when written.

>>> import numpy as np
>>> c = np.ones(3)
>>> saved = (c[:2], np.zeros(2), "a parameter")
>>> kept = protect(saved, caller_arrays((c,), {}))
>>> kept[0] is saved[0], kept[1] is saved[1], bool(np.shares_memory(kept[0], c))
(False, True, False)
"""
from __future__ import annotations

from typing import Any, Iterator, Sequence

import numpy as np


def _may_change(a) -> bool:
    """Whether the memory of the array `a` can be written by its owner: `a` or the array its
    memory comes from is writeable."""
    if a.flags.writeable:
        return True
    # The chain of bases may pass through objects that are not arrays: as_strided and
    # sliding_window_view (read-only views) hang theirs on a DummyArray with a `base`.
    root = a
    while getattr(root, "base", None) is not None:
        root = root.base
    if root is a or isinstance(root, bytes):
        return False     # memory the array owns and will not write, or immutable bytes
    return not isinstance(root, np.ndarray) or root.flags.writeable


def _is_caller_array(x) -> bool:
    # Exact types: subclasses (ConstBuffer, np.matrix, masked arrays) keep their own semantics,
    # and CuPy arrays are recognised by their module without importing CuPy.
    t = type(x)
    if t is np.ndarray:
        return x.size > 0 and _may_change(x)
    return t.__module__.startswith("cupy") and hasattr(x, "data") and getattr(x, "size", 0) > 0


def operands(values: Sequence, params: dict) -> Iterator:
    """A primitive's untraced operands `values`, then its parameters, with one level of tuples
    and lists opened (an index ``x[i, j]``)."""
    yield from values
    for p in params.values():
        if type(p) in (tuple, list):
            if type(p) is list:   # an index list `x[idx] = v`, which f may change later
                yield p
            yield from p
        else:
            yield p


# Types that are never a caller's array or list (`_is_caller_array` is False for them): a
# speed-up that skips the checks for the numbers, flags and slices most operands are.
_NEVER_ARRAYS = frozenset((int, float, bool, complex, str, type(None), slice, type(Ellipsis),
                           np.float64, np.float32, np.int64, np.intp, np.bool_))


def caller_arrays(values: Sequence, params: dict) -> list:
    """The arrays among `operands(values, params)` that their owner may still write into, and
    the Python lists among them (``x * [1.0, 2.0]``, an index ``x[rows, 0]``): the function
    may change those too after the use (``rows[0] = 1``)."""
    # `operands` unrolled (speed-up: no generator, and the common plain values skipped).
    found = []
    for x in values:
        t = type(x)
        if t not in _NEVER_ARRAYS and (t is list or _is_caller_array(x)):
            found.append(x)
    for p in params.values():
        t = type(p)
        if t in _NEVER_ARRAYS:
            continue
        if t is tuple or t is list:
            if t is list:
                found.append(p)
            for x in p:
                tx = type(x)
                if tx not in _NEVER_ARRAYS and (tx is list or _is_caller_array(x)):
                    found.append(x)
        elif _is_caller_array(p):
            found.append(p)
    return found


def _shares(x, arrays) -> bool:
    if type(x) is np.ndarray:
        for a in arrays:   # `x is a` first: the usual case, a record saving the operand itself
            if x is a or (type(a) is np.ndarray and np.may_share_memory(x, a)):
                return True
        return False
    if type(x).__module__.startswith("cupy") and hasattr(x, "data"):
        ptr = x.data.ptr
        return any(type(a) is type(x) and _overlaps(ptr, x.nbytes, a.data.ptr, a.nbytes)
                   for a in arrays)
    return False


def _overlaps(p, n, q, m) -> bool:
    # Bounds of the two allocations' extents (the views' first bytes and their lengths are a
    # conservative stand-in for CuPy, as np.may_share_memory is for NumPy).
    return p < q + max(m, 1) and q < p + max(n, 1) if n and m else p == q


def protect(saved: Any, arrays: list, copies: dict | None = None) -> Any:
    """`saved` with a copy of every array in it (inside tuples, named tuples, lists and dicts)
    that may share memory with one of `arrays`; `saved` itself when there is none.

    With `copies` (a dict the caller keeps for one differentiation), an array read again with
    the same bits reuses its earlier copy: a closed-over weight matrix used at every step of
    a loop is kept once, not once per step."""
    if not arrays:
        return saved
    t = type(saved)
    if t is tuple:   # speed-up: the common flat tuple of arrays, shapes and None, in one pass
        items = None
        for i, v in enumerate(saved):
            tv = type(v)
            if v is None or tv in _NEVER_ARRAYS:
                continue
            if tv is tuple and all(type(n) is int for n in v):   # a shape
                continue
            kept = protect(v, arrays, copies)
            if kept is not v:
                if items is None:
                    items = list(saved)
                items[i] = kept
        return saved if items is None else tuple(items)
    if t is np.ndarray or t.__module__.startswith("cupy"):
        if not _shares(saved, arrays):
            return saved
        return saved.copy() if copies is None else _copy_once(saved, copies)
    if type(saved) is list and any(saved is a for a in arrays):
        return _list_copy(saved)
    return _map_items(saved, lambda v, arrays: protect(v, arrays, copies), arrays)


# Below this size a copy costs no more than comparing with an earlier one.
_SHARED_COPY_BYTES = 16384


def _copy_once(a, copies: dict):
    """A copy of `a`, or an earlier copy of the same memory (address, shape, dtype) whose bits
    still equal `a`'s. Shared copies are read-only: no record may change another's residual."""
    if (type(a) is not np.ndarray or a.nbytes < _SHARED_COPY_BYTES or not a.flags.c_contiguous
            or a.dtype.hasobject):
        return a.copy()
    key = (a.__array_interface__["data"][0], a.shape, a.dtype.str)
    kept = copies.get(key)
    if kept is not None and same_bits(kept, a):
        return kept
    kept = a.copy()
    kept.flags.writeable = False
    copies[key] = kept
    return kept


def same_bits(x: np.ndarray, y: np.ndarray) -> bool:
    """Whether two arrays of one shape and dtype hold the same bytes (a NaN equals itself,
    0.0 differs from -0.0: exactly what a residual must keep); object arrays, the same items.

    >>> same_bits(np.zeros(2), -np.zeros(2)), same_bits(np.full(2, np.nan), np.full(2, np.nan))
    (False, True)
    """
    if x.dtype.hasobject:
        return all(a is b for a, b in zip(x.ravel(), y.ravel()))
    if not (x.flags.c_contiguous and y.flags.c_contiguous):
        return x.tobytes() == y.tobytes()
    size = x.dtype.itemsize
    unit = np.uint64 if size % 8 == 0 else np.uint32 if size % 4 == 0 else np.uint8
    return bool(np.array_equal(x.reshape(-1).view(unit), y.reshape(-1).view(unit)))


def _list_copy(items: list) -> list:
    """A caller's list as it is now, the lists inside it copied too (``[[1, 0], [0, 2]]``)."""
    return [_list_copy(v) if type(v) is list else v for v in items]


def _map_items(saved: Any, fn, arg) -> Any:
    """`saved` (a tuple, named tuple, list or dict) with `fn(item, arg)` for each item; `saved`
    itself when no item changed, or when it is no such container."""
    if isinstance(saved, (tuple, list)):
        items = [fn(v, arg) for v in saved]
        if all(a is b for a, b in zip(items, saved)):
            return saved
        if type(saved) in (tuple, list):
            return type(saved)(items)
        if hasattr(saved, "_make"):       # a named tuple
            return saved._make(items)
        return saved
    if type(saved) is dict:
        items = {k: fn(v, arg) for k, v in saved.items()}
        return items if any(items[k] is not saved[k] for k in saved) else saved
    return saved


# What ties a tracer object to the names the function holds, rather than to its value: a
# detached copy leaves them out.
_LINKS = frozenset(("owned", "view_of", "views", "write_guard", "__weakref__", "__dict__"))
_STATE_SLOTS: dict = {}


def _state_slots(cls) -> tuple:
    slots = _STATE_SLOTS.get(cls)
    if slots is None:
        names = []
        for klass in cls.__mro__:
            declared = klass.__dict__.get("__slots__", ())
            names.extend(n for n in ((declared,) if isinstance(declared, str) else declared)
                         if n not in _LINKS and n not in names)
        slots = _STATE_SLOTS[cls] = tuple(names)
    return slots


def detach_outer(saved: Any, context: tuple) -> Any:
    """`saved` with every tracer of another (outer) level replaced by a detached copy that
    stands for its current value.

    `context` is ``(level, tracer_type)``. An outer level's tracer is a mutable object: writing
    into it (``w[0] = ...``, ``w *= 2``, or into a view or base of it) rebinds it to the new
    value, so a residual that *is* that object would follow the write, as a caller's array
    would without `protect`. The copy keeps the value, slot or tangent of the moment (and the
    original stops being updated in place, so the value array stays as it is).
    """
    level, tracer_type = context
    if isinstance(saved, tracer_type):
        if saved.level is level:
            return saved
        copy = object.__new__(type(saved))
        for name in _state_slots(type(saved)):
            try:
                setattr(copy, name, getattr(saved, name))
            except AttributeError:
                pass   # a slot left unset
        if getattr(saved, "owned", False):
            saved.owned = False
        return copy
    return _map_items(saved, detach_outer, context)
