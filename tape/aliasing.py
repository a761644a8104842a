"""Arguments that share memory: the same array, or overlapping views, in two positions.

Each argument is traced on its own, so a write through one of them would not be seen through
the other (NumPy would see it): the primal and the derivative would silently be wrong. Reading
aliased arguments is fine (each position gets its own partial derivative; a shadow passed
twice accumulates the total), so the arguments are only marked here, and a *write* into a
marked argument raises an error that names both.
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
                if target_a is target_b or not _overlap(array_a, array_b):
                    continue
                if _is_const(target_a) and _is_const(target_b):
                    continue   # no derivative involved: NumPy's own semantics hold
                _mark(target_a, label_a, label_b)
                _mark(target_b, label_b, label_a)


def _root(array):
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def _overlap(a, b) -> bool:
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
        target.alias_error = message


def refuse_aliased_write(message: str):
    """The error a write into an aliased argument raises."""
    raise ActivityError(message)
