"""Arguments that share memory: the same array, or overlapping views, in two positions.

Each argument is traced on its own, so a write through one of them would not be seen through
the other (NumPy would see it): the primal and the derivative would silently be wrong. Reading
aliased arguments is fine (each position gets its own partial derivative; a shadow passed
twice accumulates the total), so the arguments are only marked here, and a *write* into a
marked argument raises an error that names both.

The same holds for an array that is not an argument but shares memory with one (a global or
a closure variable that is the argument itself, or a view of it made before the call): the
function's writes into the argument reach the caller's array only when it returns, so such an
array still holds the old values while the function runs. An operation that reads it after the
argument was written raises an error that names the argument (`refuse_stale_reads`).
"""
from __future__ import annotations

import numpy as np

from .errors import ActivityError


def mark_aliases(entries) -> None:
    """`entries`: (label, array, target) for every NumPy array an argument passes in, where
    `label()` names it (called only when needed) and `target` is what `f` sees (a tracer or a
    Const buffer). Targets whose arrays share memory
    with another argument's, when at least one of the two is differentiated, get
    ``alias_error``: the message their first write raises."""
    groups: dict = {}
    for entry in entries:
        array = entry[1]
        if type(array) is np.ndarray or isinstance(array, np.ndarray):
            groups.setdefault(id(_root(array)), []).append(entry)
    for group in groups.values():
        if len(group) < 2:   # speed-up: the common case, nothing shared
            continue
        for i, (label_a, array_a, target_a) in enumerate(group):
            for label_b, array_b, target_b in group[i + 1:]:
                if target_a is target_b or not overlap(array_a, array_b):
                    continue
                if _is_const(target_a) and _is_const(target_b):
                    continue   # no derivative involved: NumPy's own semantics hold
                _mark(target_a, label_a, label_b)
                _mark(target_b, label_b, label_a)


def watch_arguments(entries) -> None:
    """`entries` as for `mark_aliases`: give each traced array leaf a `WatchedArgument` guard
    (`mark_aliases`, called after, replaces it where writes are refused)."""
    for label, array, target in entries:
        if not _is_const(target):
            target.write_guard = WatchedArgument(label, array)


def _root(array):
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def overlap(a, b) -> bool:
    """Whether arrays `a` and `b` share memory (True when that is too costly to tell)."""
    try:
        return bool(np.shares_memory(a, b, max_work=10_000))
    except np.exceptions.TooHardError:
        return True   # cannot tell cheaply: assume they do


def _is_const(target) -> bool:
    return isinstance(target, np.ndarray)


def _mark(target, label, other):
    label, other = label(), other()
    message = (f"{label} shares memory with {other} (the same array, or overlapping views), "
               f"and the function writes into {label}; each argument is traced separately, so "
               f"the write would not be seen through {other} and the result would be wrong. "
               "Pass a copy (x.copy()) for one of them, or pass the array once")
    if _is_const(target):
        target.__dict__["_alias_error"] = message
    else:
        target.write_guard = _RefusedWrite(message)


def refuse_shared_written_shadows(written) -> None:
    """Refuse two buffers `f` overwrote whose shadows share memory. `written`: (name, shadow)
    per overwritten leaf, the shadow a tuple of W arrays in batch mode. Each such shadow is
    the seed of its buffer's final value and is zeroed by the sweep, so a shared one has no
    order-free meaning (Enzyme's memory semantics would chain the two adjoints through it)."""
    arrays = [(name, a) for name, shadow in written
              for a in (shadow if isinstance(shadow, tuple) else (shadow,))
              if isinstance(a, np.ndarray)]
    for i, (name_a, a) in enumerate(arrays):
        for name_b, b in arrays[:i]:
            if name_a != name_b and np.may_share_memory(a, b) and overlap(a, b):
                raise ActivityError(
                    f"the shadows of {name_b} and {name_a} share memory, and the function "
                    "overwrote both buffers: each shadow is the seed of its buffer's final "
                    "value, so one shared shadow cannot be both. Give each written buffer "
                    "its own shadow (np.zeros_like(x))")


def refuse_aliased_write(message: str):
    """The error a write into an aliased argument raises."""
    raise ActivityError(message)


class _RefusedWrite:
    """The write guard of an argument that shares memory with another one."""

    __slots__ = ("message",)

    def __init__(self, message: str):
        self.message = message

    def __call__(self, tracer) -> None:
        refuse_aliased_write(self.message)


class WatchedArgument:
    """The write guard of an argument's array leaf: its first write adds the caller's array
    to the trace's `written_arguments`, which `refuse_stale_reads` checks."""

    __slots__ = ("label", "array")

    def __init__(self, label, array):
        self.label, self.array = label, array

    def __call__(self, tracer) -> None:
        trace = tracer.level
        if not trace.written_arguments:
            trace.written_arguments = []
        trace.written_arguments.append((self.label, self.array))
        del tracer.write_guard   # one entry is enough


def refuse_stale_reads(arrays, written) -> None:
    """Raise if one of the untraced `arrays` an operation reads shares memory with an argument
    the function has written: it still holds the values from before the write.

    `written` holds ``(label, array)`` pairs, `label()` naming the argument."""
    for array in arrays:
        if not isinstance(array, np.ndarray):
            continue
        for label, argument in written:
            if overlap(array, argument):
                raise ActivityError(
                    f"an array that is not an argument shares memory with {label()} (a "
                    "global or closure variable that is that array, or a view of it), and it is "
                    f"read after the function wrote into {label()}; the write reaches the "
                    "caller's array only when the function returns, so the read would see the "
                    "old values and the result would be wrong. Read the argument itself "
                    "inside the function, or pass the other array as an argument (Const) and "
                    "copy it first")
