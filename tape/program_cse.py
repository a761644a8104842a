"""Common subexpressions of a compiled program (tape/program_code.py): a step that repeats an
earlier one (the same primitive on the same values, constants and parameters) reuses the
earlier step's results instead of computing them again.

Only the primal work is shared. The repeated step keeps its own result slots, so its
cotangents and its reverse rule stay as they are (the rule reads the earlier step's
residuals), and the adjoint sums what the eager sweep sums, in the same order: a compiled
program still computes the same bits as eager `autodiff`.

A step qualifies when replaying it twice must give equal results:
- its primitive is one of the engine's own (`Primitive.pure`: a function of its arguments
  alone); a user's `custom_rule` may keep state between calls, so it always runs;
- it is not a fresh buffer, nor an inactive call (a user's `tape.inactive` function);
- it runs under the caller's error state and warning filters;
- none of its results is written in place later (``x[i] = v`` into a private buffer updates
  that array, so two results sharing it would both change), and none is returned to the
  caller, itself or through a view (``return a, b.T`` with ``b`` a repeat of ``a`` would
  give the caller two arrays sharing memory, which eager mode gives apart).

Values are compared as they are stored in the step: numbers by type and exact value (-0.0 is
not 0.0), arrays and other objects by identity (the trace keeps one copy per array contents).
"""
from __future__ import annotations

import numpy as np

from .program import AUGMENTED, PLAIN, DynamicParams, _Hole
from .signature import _number_key


def common_subexpressions(steps, contexts, result_slots, views=frozenset()) -> dict[int, int]:
    """``{index of a repeated step: index of the first step it repeats}``. `views`: the
    steps whose results may share memory with an operand (`CompileTrace.views`)."""
    mutated = written_in_place(steps)
    results = _returned_memory(steps, result_slots, views)
    first: dict[tuple, int] = {}
    same_as: dict[int, int] = {}   # result slot of a repeat -> the first step's result slot
    repeats: dict[int, int] = {}
    for i, (kind, fn, cfg, ins, consts, params, outs) in enumerate(steps):
        if (kind not in (AUGMENTED, PLAIN) or not getattr(fn, "pure", False) or i in contexts
                or _writes_in_place(params) or any(o in mutated for o in outs)):
            continue
        if type(params) is DynamicParams:
            frozen_params = (_frozen(params.template),
                             tuple(same_as.get(s, s) for s in params.slots))
        else:
            frozen_params = _frozen(params)
        key = (kind, id(fn), id(cfg), tuple(same_as.get(s, s) for s in ins), _frozen(consts),
               frozen_params)
        earlier = first.setdefault(key, i)
        if earlier == i or any(o in results for o in outs):
            continue
        repeats[i] = earlier
        for o, e in zip(outs, steps[earlier][6]):
            same_as[o] = same_as.get(e, e)
    return repeats


def _returned_memory(steps, result_slots, views) -> set:
    """The result slots and the slots whose memory a result may view."""
    visible = set(result_slots)
    for i in range(len(steps) - 1, -1, -1):
        if i in views and any(o in visible for o in steps[i][6]):
            visible.update(s for s in steps[i][3] if s is not None)
    return visible


def _writes_in_place(params) -> bool:
    if type(params) is DynamicParams:
        params = params.template
    return type(params) is dict and params.get("inplace") is True


def written_in_place(steps) -> set:
    """Slots whose array a later step updates in place. Only a private buffer is written in
    place (a fresh one, or the copy an earlier ``x[i] = v`` made), and the trace reads a
    written buffer through its new slot only."""
    return {step[3][0] for step in steps if _writes_in_place(step[5]) and step[3]}


def _frozen(obj):
    """A hashable key that is equal for two values only when they are the same value."""
    kind = type(obj)
    if obj is None or kind in (str, bytes):
        return (kind, obj)
    if kind in (bool, int, float, complex) or isinstance(obj, np.generic):
        return _number_key(obj)           # with its type and the signs (-0.0 is not 0.0)
    if kind in (tuple, list):
        return (kind, tuple(_frozen(o) for o in obj))
    if kind is dict:
        return (kind, tuple((_frozen(k), _frozen(v)) for k, v in obj.items()))
    if kind is slice:
        return (kind, _frozen(obj.start), _frozen(obj.stop), _frozen(obj.step))
    if kind is _Hole:
        return (kind, obj.k)
    if isinstance(obj, np.dtype):
        return (kind, obj)
    return ("object", id(obj))            # arrays, functions, classes: the same object
