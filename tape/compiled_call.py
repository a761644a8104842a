"""One traced signature of a compiled function (tape/compiled.py): its program, and how the
arguments of a call map onto the program's leaves and seeds and its results back onto the
return value, the shadows and the buffers the function wrote."""
from __future__ import annotations

import numpy as np

from .activities import Active, BatchDuplicated, Const, Duplicated, DuplicatedNoNeed
from .api import (_cast_like, _python_scalar, _reverse_argument, derivatives,
                  distinct_derivatives, written_seed)
from .aliasing import refuse_shared_written_shadows
from .backend import array_module
from .batching import Batched
from .core import Tracer
from .modifiers import user_cotangents
from .compiled_trace import program_leaves
from .program import GuardFailed, _ShapeChecked
from .program_code import Program
from .closure_watch import _changed
from .signature import _is_scalar
from .pytree import flatten, unflatten


_AS_COMPUTED = object()   # an output leaf returned as the program computed it


class ReplayRaised(Exception):
    """A replayed program raised (a singular matrix, say). Nothing outside it was touched yet;
    the call runs eagerly, which raises the error, or lets the function catch it."""


def _replay(program, leaves, seeds, recorded=None, calls=None):
    """Run the program. `calls` (tape/user_calls.UserCalls) notes what its user code returns,
    or gives what it returned in an earlier run of this call."""
    try:
        if calls is None:
            return program.run(leaves, seeds, recorded)
        calls.rewind()
        return program.run(leaves, seeds, recorded, calls)
    except GuardFailed:
        raise
    except Exception as e:   # noqa: BLE001
        raise ReplayRaised(f"the replay raised {type(e).__name__}: {e}") from e



def _same_user_step(ours, theirs) -> bool | None:
    """Whether two traced steps call the same user code the same way (kind, function or
    rule, differentiated arguments): True; False when only the shapes of an inactive
    function's results differ (the replay's shape check fails there); None otherwise."""
    if ours[0] != theirs[0] or ours[2] is not theirs[2]:
        return None
    if ours[1] == theirs[1]:
        return True
    a, b = ours[1], theirs[1]
    if type(a) is _ShapeChecked and type(b) is _ShapeChecked and a.fn is b.fn:
        return False
    return None


class _ShapeChanged:
    """Taken for the results of an inactive step whose shapes differ from the traced ones:
    the replay's guard fails there, as its shape check would."""
    __slots__ = ()

    def __getitem__(self, k):
        raise GuardFailed("the shape of an inactive function's result")


_SHAPE_CHANGED = _ShapeChanged()


class CompiledSignature:
    """A program and how the arguments of a call map onto it."""

    def __init__(self, program, out_template, out_slots, writes, grad_slots, watched,
                 ret_slot, owner):
        self.program = program
        self.out_template = out_template   # the return value with its traced leaves as None
        self.out_slots = out_slots         # per output leaf: its slot, or None (a constant)
        self.writes = writes               # (group, leaf, final slot, seeded) per written leaf
        self.grad_slots = grad_slots
        self.watched = watched
        self.ret_slot = ret_slot           # the seeded result's slot (None: no seed)
        self.owner = owner

    @classmethod
    def build(cls, owner, traced, watched, annotated, kept=True):
        trace, leaf_slots, out, groups, ret_active = traced
        compiled = cls._build(owner, trace, leaf_slots, out, groups, ret_active, watched,
                              annotated, kept)
        compiled.record = trace   # what a later trace must equal to confirm it (then None)
        return compiled

    @classmethod
    def _build(cls, owner, trace, leaf_slots, out, groups, ret_active, watched, annotated,
               kept):
        out_leaves, out_td = flatten(out) if out is not None else ([], None)
        out_slots = [x.slot if isinstance(x, Tracer) else None for x in out_leaves]
        writes, seeds = [], []
        # A value computed from Const arguments only carries no derivative: no seed.
        ret_slot = (out.slot if ret_active and isinstance(out, Tracer) and not out.nondiff
                    else None)
        if ret_slot is not None:
            seeds.append(ret_slot)
        for g, arg in enumerate(groups):
            for i, t in enumerate(arg.tracers):
                first_slot = arg.first_slots[i]
                if first_slot is None or t.slot == first_slot:
                    continue
                seeded = arg.shadows is not None
                writes.append((g, i, t.slot, seeded))
                if seeded:
                    seeds.append(t.slot)
        grad_slots = [s for arg in groups for s in arg.first_slots if s is not None]
        result_slots = [s for s in out_slots if s is not None] + [w[2] for w in writes]
        # batch mode (BatchDuplicated arguments): W seeds per seeded slot (the trace checked
        # that the widths agree)
        width = next((a.width for a in annotated if isinstance(a, BatchDuplicated)), None)
        program = Program(trace, leaf_slots, result_slots, seeds, grad_slots, kept, width)
        template = None if out_td is None else (out_td, [
            (_AS_COMPUTED if x.nondiff else None) if isinstance(x, Tracer) else x
            for x in out_leaves])
        compiled = cls(program, template, out_slots, writes, grad_slots, watched,
                       ret_slot, owner)
        compiled.width = width
        if ret_slot is not None:   # copied per call; in batch mode 1 in each direction
            compiled.seed = array_module(out._v).ones(() if width is None else (width,),
                                                      dtype=out.dtype)
        compiled.plain = width is None and not writes and all(
            _is_scalar(ann.val) if type(ann) is Const and type(ann.val) is not np.ndarray
            else type(ann) is Const
            or type(ann) in (Active, Duplicated, DuplicatedNoNeed)
            and type(ann.val) is np.ndarray and ann.val.dtype.kind == "f"
            or type(ann) is Active and type(ann.val) is float
            for ann in annotated)
        return compiled

    def accepts(self, annotated, names, trace, record) -> bool:
        """Whether a replay would take this program for the call that `trace` traced: the
        watched values, then the guards of its primal. The user's rules and inactive
        functions do not run again: their steps take what they returned in `trace` (the
        same call, so the same results where the two traces agree). Nothing is written
        back. A replay that meets a step of user code `trace` did not make at that place,
        or that raises, accepts: the two traces took one path and still differ. `record`: the
        trace this program was built from (`self.record`, read once by the caller)."""
        if self.watched and _changed(self.watched) is not None:
            return False
        try:
            leaves, seeds = self._accept_inputs(annotated, names)
        except GuardFailed:
            return False
        ours, taken = record.steps, {}
        for k, value in trace.recorded.items():
            if k < len(ours):
                same = _same_user_step(ours[k], trace.steps[k])
                if same is not None:
                    taken[k] = value if same else _SHAPE_CHANGED
        try:
            self.program.run(leaves, seeds, taken)
        except GuardFailed:
            return False
        except Exception:   # noqa: BLE001
            return True
        return True

    def _accept_inputs(self, annotated, names):
        """The leaves and seeds of a run that only asks whether the guards hold: no seeds,
        the primal alone."""
        return self._inputs(annotated, names)[1], None

    def _checked_fast_path(self, annotated, recorded, calls):
        """Raise GuardFailed where a value the function reads changed; then the answer of the
        fast path where it applies (`plain`), or None: take the general path."""
        if self.watched and _changed(self.watched) is not None:
            raise GuardFailed("a value the function reads changed")
        return self._call_plain(annotated, recorded, calls) if self.plain else None

    def call(self, annotated, names, recorded=None, calls=None):
        """Replay for this call. `recorded`: what user code returned in the trace of this
        very call (`CompileTrace.recorded`), taken instead of running it again; `calls`: what
        it returned in this call's earlier runs (see `_replay`)."""
        fast = self._checked_fast_path(annotated, recorded, calls)
        if fast is not None:
            return fast
        groups, leaves, seeds, zero_after = self._inputs(annotated, names)
        results, grads = _replay(self.program, leaves, seeds, recorded, calls)
        for shadow in zero_after:
            shadow[...] = 0
        n_out = sum(s is not None for s in self.out_slots)
        for (g, i, _, _), value in zip(self.writes, results[n_out:]):
            groups[g].leaves[i][...] = value
        cts = dict(zip(self.grad_slots, grads))
        user_cotangents(cts, [(x, s) for arg in groups for x, s in zip(arg.leaves,
                                                                       arg.first_slots)
                              if s is not None])
        result = (derivatives(annotated, groups, cts, self.width),)
        if self.owner.mode.with_primal:
            result += (self._primal(results[:n_out]),)
        return result

    def _inputs(self, annotated, names):
        """The program's leaves and seeds for a call, the argument groups, and the shadows
        to zero after it (those of written buffers, whose seeds they are)."""
        groups, leaves, floats = program_leaves(annotated, names, _reverse_argument,
                                                bool(self.writes))
        slot_iter = iter(self.grad_slots)
        for arg, positions in zip(groups, floats):
            arg.first_slots = [None] * len(arg.leaves)
            for i in positions:
                arg.first_slots[i] = next(slot_iter)
        seeds = []
        if self.ret_slot is not None:
            seeds.append(self.seed.copy() if self.width is None else Batched(self.seed.copy()))
        zero_after = []
        refuse_shared_written_shadows([(groups[g].path(i), groups[g].shadows[i])
                                       for g, i, _, seeded in self.writes if seeded])
        for g, i, _, seeded in self.writes:
            if not seeded:
                continue
            shadow = groups[g].shadows[i]
            seeds.append(written_seed(shadow, self.width))
            zero_after.extend(shadow if self.width is not None else (shadow,))
        return groups, leaves, seeds, zero_after

    def _call_plain(self, annotated, recorded=None, calls=None):
        """The common case, without pytree machinery: every argument a single array (or an
        Active float), shadows congruent, no argument written. None: take the general path
        (which also names any problem)."""
        leaves = []
        for ann in annotated:
            x = ann.val
            if type(ann) is Const:
                if type(x) is np.ndarray:
                    leaves.append(x)
                continue
            if type(ann) is not Active:
                dx = ann.dval
                if (type(dx) is not np.ndarray or dx.shape != x.shape or dx.dtype != x.dtype
                        or not dx.flags.writeable or dx is x
                        or (x.base is not None or dx.base is not None)
                        and np.may_share_memory(x, dx)):
                    # (a shadow sharing its primal's memory: eager refuses it; two arrays
                    # that own their memory cannot)
                    return None
            leaves.append(x)
        seeds = []
        if self.ret_slot is not None:
            seeds.append(self.seed.copy())
        results, grads = _replay(self.program, leaves, seeds, recorded, calls)
        derivs, k = [], 0
        for ann in annotated:
            if type(ann) is Const:
                derivs.append(None)
                continue
            g = grads[k]
            k += 1
            if g is not None and g.dtype.kind == "c":
                g = np.real(g)
            if type(ann) is Active:
                derivs.append(_cast_like(g, ann.val))
            else:
                if g is not None:
                    ann.dval += g
                derivs.append(None)
        result = (distinct_derivatives(derivs),)
        if self.owner.mode.with_primal:
            result += (self._primal(results),)
        return result

    def _primal(self, values):
        if self.out_template is None:
            return None
        td, consts = self.out_template
        it = iter(values)
        # A constant array of the result is the caller's to write into: a copy per call. A
        # differentiated float64 scalar is a Python float, as eager mode strips its tracer; a
        # value of Const arguments only never was a tracer there, and stays as computed.
        leaves = [(_python_scalar(next(it)) if c is None else next(it)) if s is not None
                  else c.copy() if isinstance(c, np.ndarray) else c
                  for s, c in zip(self.out_slots, consts)]
        return unflatten(td, leaves)
