"""Forward and ForwardWithPrimal for `tape.compile` (tape/compiled.py): one trace of a call in
forward mode, and how a call's arguments map onto its program (tape/program_forward.py) and
its results back onto the return value (primal, tangent), the buffers the function wrote and
their shadows, as eager `autodiff(Forward, ...)` gives them (tape/api.py `_forward`)."""
from __future__ import annotations

import numpy as np

from .activities import BatchDuplicated, BatchDuplicatedNoNeed, Const, Duplicated, DuplicatedNoNeed
from .api import (batch_tangents, refuse_read_only_tangent_shadows, caller_tangents,
                  write_tangent, _forward_argument, _is_float, _python_scalar, _tangent_of,
                  batch_width)
from .batching import stack_directions
from .aliasing import watch_arguments
from .compiled_call import _AS_COMPUTED, CompiledSignature, _replay
from .compiled_trace import (_CallTrace, _const_argument, float_leaf, nondiff_leaf,
                             program_leaves, with_read_only_arguments)
from .core import Tracer
from .program_forward import ForwardCompileTrace, ForwardProgram
from .pytree import flatten, unflatten
from .closure_watch import Snapshotter
from .signature import _is_scalar


def trace_forward_once(owner, annotated, names, watched, calls=None):
    """Trace `owner.f` once in forward mode (as `compiled_trace.trace_once` in reverse mode:
    the argument arrays are read-only while traced). Returns ``(trace, leaf_slots,
    tangent_leaves, out, groups)``."""
    return with_read_only_arguments(_trace, owner, annotated, names, watched, calls)


class _ForwardCallTrace(_CallTrace, ForwardCompileTrace):
    """The forward trace of a call, refusing what eager mode refuses of a copy of a Const
    argument (see `compiled_trace._CallTrace`)."""


def _trace(owner, annotated, names, watched, read, calls):
    if calls is not None:
        calls.rewind()
    width = batch_width(annotated, names)
    with _ForwardCallTrace(Snapshotter(watched), calls) as trace:
        trace.batched = width is not None
        call_args, groups, leaf_slots, tangent_leaves, watched_leaves = [], [], [], [], []
        for ann, name in zip(annotated, names):
            if type(ann) is Const:
                call_args.append(_const_argument(ann.val, trace, leaf_slots, name, read))
                continue
            arg = _forward_argument(ann, name)
            for i, (x, dx) in enumerate(zip(arg.leaves, arg.shadows)):
                if _is_float(x):
                    t = float_leaf(trace, arg, i, x, read, leaf_slots, watched_leaves)
                    # eager mode's tangent is the shadow itself; in batch mode the W
                    # shadows stacked on a leading axis
                    trace.tangents[t.slot] = dx if width is None else stack_directions(dx)
                    tangent_leaves.append(t.slot)
                else:
                    nondiff_leaf(trace, arg, i, x, read, leaf_slots)
            groups.append(arg)
            call_args.append(unflatten(arg.treedef, arg.tracers))
        watch_arguments(watched_leaves)
        out = owner.f(*call_args)
    return trace, leaf_slots, tangent_leaves, out, groups


class ForwardSignature(CompiledSignature):
    """A forward program and how the arguments of a call map onto it."""

    @classmethod
    def build(cls, owner, traced, watched, annotated, kept=True):
        trace, leaf_slots, tangent_leaves, out, groups = traced
        out_leaves, out_td = flatten(out) if out is not None else ([], None)
        out_slots = [x.slot if isinstance(x, Tracer) else None for x in out_leaves]
        writes = []
        for g, arg in enumerate(groups):
            for i, t in enumerate(arg.tracers):
                first_slot = arg.first_slots[i]
                if first_slot is not None and t.slot != first_slot:
                    writes.append((g, i, t.slot, True))
        # Eager forward mode's guess without a return activity: Const for a result without
        # float data (tape/api.py `_forward`).
        guessed_const = owner.ret_activity is None and not any(
            _is_float(x) for x in out_leaves)
        wants_tangent = owner.ret_activity is not Const and out is not None and not guessed_const
        result_slots = [s for s in out_slots if s is not None] + [w[2] for w in writes]
        tangent_results = ([s for s in out_slots if s is not None] if wants_tangent else []) + [
            w[2] for w in writes]
        program = ForwardProgram(trace, leaf_slots, tangent_leaves, result_slots,
                                 tangent_results, kept)
        template = None if out_td is None else (out_td, [
            (_AS_COMPUTED if x.nondiff else None) if isinstance(x, Tracer) else x
            for x in out_leaves])
        compiled = cls(program, template, out_slots, writes, [], watched, None, owner)
        compiled.wants_tangent = wants_tangent
        compiled.guessed_const = guessed_const
        compiled.width = next((a.width for a in annotated if isinstance(a, BatchDuplicated)),
                              None)   # (the trace checked that they agree)
        compiled.plain = compiled.width is None and not writes and all(
            _is_scalar(ann.val) if type(ann) is Const and type(ann.val) is not np.ndarray
            else type(ann) is Const
            or type(ann) in (Duplicated, DuplicatedNoNeed)
            and type(ann.val) is np.ndarray and ann.val.dtype.kind == "f"
            for ann in annotated)
        compiled.record = trace
        return compiled

    def _accept_inputs(self, annotated, names):
        groups, leaves, tangents = self._inputs(annotated, names)
        return leaves, tangents

    def call(self, annotated, names, recorded=None, calls=None):
        """Replay for this call (see `CompiledSignature.call`)."""
        fast = self._checked_fast_path(annotated, recorded, calls)
        if fast is not None:
            return fast
        groups, leaves, tangents = self._inputs(annotated, names)
        results, result_tangents = _replay(self.program, leaves, tangents, recorded, calls)
        n_out = sum(s is not None for s in self.out_slots)
        n_tangents = len(result_tangents) - len(self.writes)
        refuse_read_only_tangent_shadows([(groups[g], i) for g, i, _, _ in self.writes],
                                         self.width)
        for (g, i, _, _), value, tangent in zip(self.writes, results[n_out:],
                                                result_tangents[n_tangents:]):
            groups[g].leaves[i][...] = value   # as eager mode writes them back, leaf by leaf
            write_tangent(groups[g].shadows[i], tangent, self.width)
        return self._answer(results[:n_out], result_tangents[:n_tangents], annotated)

    def _inputs(self, annotated, names):
        """The program's leaves and tangents for a call, and the argument groups."""
        groups, leaves, floats = program_leaves(annotated, names, _forward_argument,
                                                bool(self.writes))
        tangents = [arg.shadows[i] if arg.width is None else stack_directions(arg.shadows[i])
                    for arg, positions in zip(groups, floats) for i in positions]
        return groups, leaves, tangents

    def _call_plain(self, annotated, recorded=None, calls=None):
        """Every argument a single array (or a Const number), shadows congruent, nothing
        written. None: take the general path (which also names any problem)."""
        leaves, tangents = [], []
        for ann in annotated:
            x = ann.val
            if type(ann) is Const:
                if type(x) is np.ndarray:
                    leaves.append(x)
                continue
            dx = getattr(ann, "dval", None)
            if type(dx) is not np.ndarray or dx.shape != x.shape or dx.dtype != x.dtype:
                return None
            leaves.append(x)
            tangents.append(dx)
        results, result_tangents = _replay(self.program, leaves, tangents, recorded, calls)
        return self._answer(results, result_tangents, annotated)

    def _answer(self, values, tangents, annotated):
        """What eager forward mode returns: ``(tangent, primal)``, ``(tangent,)``,
        ``(primal,)`` or ``()`` (tape/api.py `_forward`)."""
        mode, ret = self.owner.mode, self.owner.ret_activity
        primal_out = self._primal(values)
        if ret is Const or self.guessed_const:
            return (primal_out,) if mode.with_primal else ()
        tangent_out = None
        if self.wants_tangent:
            td, consts = self.out_template
            primal_leaves = flatten(primal_out)[0]
            it_value, it_tangent = iter(values), iter(tangents)
            out = []
            for s, c in zip(self.out_slots, consts):
                if s is None:   # a constant of the result: a zero tangent
                    t = _tangent_of(c, None)
                else:
                    value, t = next(it_value), next(it_tangent)
                    if t is None:
                        t = _tangent_of(value, None)
                out.append(t)
            scalars = ([type(p) in (float, complex) for p in primal_leaves]
                       if len(primal_leaves) == len(out) else [False] * len(out))
            if self.width is None:
                out = caller_tangents(out, primal_leaves, annotated)
                tangent_out = unflatten(td, [_python_scalar(t) if k else t
                                             for t, k in zip(out, scalars)])
            else:   # a W-tuple, as eager batch mode gives it
                tangent_out = batch_tangents(out, td, primal_leaves, scalars, self.width)
        if mode.with_primal and ret not in (DuplicatedNoNeed, BatchDuplicatedNoNeed):
            return (tangent_out, primal_out)
        return (tangent_out,)
