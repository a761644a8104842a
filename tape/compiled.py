"""`compile`: trace a function once per signature, then replay it as straight-line code.

``g = compile(Reverse, f, Active, Duplicated, Const)`` returns a callable such that
``g(Duplicated(x, dx), Const(c))`` returns, and writes into shadows, exactly what
``autodiff(Reverse, f, Active, Duplicated(x, dx), Const(c))`` would. The first call with a new
*signature* (activities, structures, shapes, dtypes, the values of Python-number Consts) traces
`f` into a `Program` (tape/program.py); later calls replay it, checking its guards. A guard
that fails traces again (the cache keeps one program per guard outcome) and, past
``max_traces`` programs for one signature, runs eagerly. Whatever cannot be replayed runs
eagerly too, and `g.stats` says why: a compiled function is never wrong, only not faster.

What a replay could not see is checked, so it is never replayed stale:
- arrays and numbers the function reads from its closure, its globals, its defaults or its
  bound object are compared at each call (an in-place change traces again);
- random draws (NumPy's global generator, or any value that differs between two traces with
  the same arguments) make the signature run eagerly, so every call draws afresh, with a
  `CompileWarning`;
- buffers that `f` makes (`np.zeros_like`) are fresh copies at each replay.

>>> import numpy as np
>>> from tape import Reverse, Active, Duplicated
>>> g = compile(Reverse, lambda x: np.sum(np.sin(x) ** 2), Active, Duplicated)
>>> x, dx = np.array([0.5, 1.0]), np.zeros(2)
>>> g(Duplicated(x, dx))
((None,),)
>>> bool(np.allclose(dx, np.sin(2 * x)))
True
"""
from __future__ import annotations

import collections
import random
import time
import warnings
from typing import Callable

import numpy as np

from .activities import (ACTIVITY_TYPES, Active, Annotation, BatchDuplicated, Const,
                         Duplicated, DuplicatedNoNeed, MixedDuplicated, Mode)
from .api import (_argument_names, _is_float, _python_scalar, _reverse_argument, autodiff,
                  _cast_like, derivatives)
from .backend import array_module
from .core import _TRACE_STACK, Tracer
from .errors import ActivityError, PytreeError
from .modifiers import is_complex, to_user, user_cotangents
from .compiled_trace import aliased, const_leaves, trace_once
from .program import GuardFailed, Uncompilable, same_value
from .program_code import Program
from .signature import (_changed, _first_difference, _is_scalar, _rng_key,
                        _signature, _watch, generator_state,
                        set_generator_state)
from .pytree import flatten, is_inactive, unflatten
from .split import autodiff_thunk


class CompileWarning(UserWarning):
    """A compiled function runs eagerly for a reason the user may want to fix."""


Stats = collections.namedtuple(
    "Stats", "traces hits guard_failures eager_calls programs compile_seconds eager_reasons")


def compile(mode: Mode, f: Callable | type | None = None, *activities: type,
            max_traces: int = 8, max_programs: int = 64):
    """Compile `f` for `mode` and the activity types (as `autodiff_thunk` takes them).

    ``compile(mode, f, ReturnActivity, *ArgActivityTypes)`` returns a callable taking the
    annotated arguments. Without `f` (``@compile(Reverse, Active, Duplicated)``) it is a
    decorator. Reverse and ReverseWithPrimal are traced and replayed; the other modes are
    accepted and run eagerly (split modes return `autodiff_thunk`'s pair). `print(g)` shows
    the generated program of the last signature; `g.stats` counts traces, cache hits, guard
    failures and eager calls.

    >>> import numpy as np
    >>> from tape import Reverse, ReverseWithPrimal, Active
    >>> @compile(ReverseWithPrimal, Active, Active)
    ... def f(x):
    ...     return x * x if x > 0 else -x
    >>> f(Active(3.0)), f(Active(-2.0)), f.stats.traces
    (((6.0,), 9.0), ((-1.0,), 2.0), 2)
    """
    if not isinstance(mode, Mode):
        raise ActivityError(f"compile: the first argument must be a mode such as Reverse, got "
                            f"{mode!r}")
    if f is None or f in ACTIVITY_TYPES:
        types_ = activities if f is None else (f,) + activities
        return lambda fn: compile(mode, fn, *types_, max_traces=max_traces,
                                  max_programs=max_programs)
    if not callable(f):
        raise ActivityError(f"compile needs a callable function, got {type(f).__name__}")
    for t in activities:
        if t not in ACTIVITY_TYPES and not (isinstance(t, type) and issubclass(t, Annotation)):
            raise ActivityError(f"compile: activities must be types such as Active or "
                                f"Duplicated, got {t!r}")
    if mode.kind == "reverse" and mode.split:
        return autodiff_thunk(mode, f, *activities)
    return CompiledFunction(mode, f, activities, max_traces, max_programs)


class CompiledFunction:
    """`f` compiled for one mode: call it with annotated arguments (see `compile`)."""

    def __init__(self, mode, f, activities, max_traces, max_programs):
        self.mode, self.f = mode, f
        self.ret_activity = None
        if activities:   # the return activity comes first, as for autodiff_thunk
            self.ret_activity, activities = activities[0], activities[1:]
        self.arg_types = activities
        self.max_traces, self.max_programs = max_traces, max_programs
        self._cache: collections.OrderedDict = collections.OrderedDict()
        self._last = None
        self._counts = dict(traces=0, hits=0, guard_failures=0, eager_calls=0)
        self._compile_seconds = 0.0
        self._eager_reasons: collections.deque = collections.deque(maxlen=8)
        self._fast = None   # (signature, compiled) of the last plain replay
        self.__doc__ = getattr(f, "__doc__", None)
        self.__name__ = getattr(f, "__name__", "compiled")

    # -- public ------------------------------------------------------------------------------
    @property
    def stats(self) -> Stats:
        """Traces made, replays that hit, guards that failed, eager calls (and why), programs
        cached, seconds spent tracing."""
        programs = sum(len(v) for v in self._cache.values() if isinstance(v, list))
        return Stats(programs=programs, compile_seconds=self._compile_seconds,
                     eager_reasons=list(self._eager_reasons), **self._counts)

    def __str__(self) -> str:
        if self._last is None:
            return f"<compiled {self.__name__}: not traced yet>"
        p = self._last
        return (f"# compiled {self.__name__} ({self.mode}): {p.n_steps} steps traced, "
                f"{p.n_kept} replayed, {p.n_adjoint} with a reverse rule\n{p.source}")

    __repr__ = __str__

    def __call__(self, *args):
        fast = self._fast
        if fast is not None and not _TRACE_STACK.get():
            result = self._call_fast(fast, args)
            if result is not None:
                return result
        annotated = [a if isinstance(a, Annotation) else Const(a) for a in args]
        annotated = [Const(a.val) if is_inactive(a.val) else a for a in annotated]
        self._check_types(annotated)
        try:
            reason = self._eager_reason(annotated)
            key = None if reason is not None else _signature(annotated)
        except (Uncompilable, PytreeError) as e:   # eager mode gives the genuine behaviour
            reason = str(e)
        if reason is not None:
            return self._eager(annotated, reason)
        entry = self._cache.get(key)
        if isinstance(entry, str):
            return self._eager(annotated, entry)
        names = _argument_names(self.f, len(annotated))
        if entry:
            self._cache.move_to_end(key)
            for compiled in entry:
                try:
                    result = compiled.call(annotated, names)
                except GuardFailed:
                    self._counts["guard_failures"] += 1
                    continue
                except _ReplayRaised as e:
                    return self._eager(annotated, str(e))
                self._counts["hits"] += 1
                self._last = compiled.program
                self._remember_fast(key, compiled, annotated)
                return result
            if len(entry) >= self.max_traces:
                return self._eager(annotated, f"more than {self.max_traces} traces for one "
                                   "signature (guards keep failing)")
        return self._trace_and_call(key, annotated, names)

    # -- internals ---------------------------------------------------------------------------
    def _call_fast(self, fast, args):
        """The replay of a call with the signature of the last plain replay, its arguments
        annotated arrays (or Active floats): what the general path would do for them, without
        its checks (they passed for this signature). None: take the general path."""
        key, compiled = fast
        for a in args:
            if type(a) not in _FAST_TYPES:
                return None
        try:
            if _signature(args) != key:
                return None
        except Uncompilable:
            return None
        if compiled.watched and _changed(compiled.watched) is not None:
            return None
        try:
            result = compiled._call_plain(args)
        except (GuardFailed, _ReplayRaised):   # the general path decides
            return None
        if result is not None:
            self._counts["hits"] += 1
            self._last = compiled.program
            self._cache.move_to_end(key)
        return result

    def _remember_fast(self, key, compiled, annotated):
        plain = compiled.plain and compiled in self._cache.get(key, ())
        self._fast = (key, compiled) if plain and all(
            type(a) in _FAST_TYPES and (type(a.val) is np.ndarray or type(a.val) is float)
            for a in annotated) else None

    def _check_types(self, annotated):
        if not self.arg_types:
            return
        if len(annotated) != len(self.arg_types):
            raise ActivityError(f"{self.__name__} was compiled for {len(self.arg_types)} "
                                f"arguments and called with {len(annotated)}")
        names = _argument_names(self.f, len(annotated))
        for ann, t, name in zip(annotated, self.arg_types, names):
            if type(ann) is not t and not (t is Const and is_inactive(ann.val)):
                raise ActivityError(
                    f"{name} was compiled as {t.__name__} but passed as "
                    f"{type(ann).__name__}; annotate it {t.__name__}(...) or compile again")

    def _eager_reason(self, annotated):
        mode = self.mode
        if mode.kind != "reverse":
            return "forward mode runs eagerly"
        if self.ret_activity in (Duplicated, DuplicatedNoNeed):
            return "a Duplicated return needs a seed (eager mode says how to pass one)"
        if mode.strong_zero or mode.nan_check or mode.holomorphic:
            return "mode modifiers (strong zero, NaN check, holomorphic) run eagerly"
        if any(isinstance(a, (BatchDuplicated, MixedDuplicated)) for a in annotated):
            return "batched and mixed activities run eagerly"
        if _TRACE_STACK.get():
            return "called inside another differentiation"
        return None

    def _eager(self, annotated, reason):
        self._counts["eager_calls"] += 1
        if not self._eager_reasons or self._eager_reasons[-1] != reason:
            self._eager_reasons.append(reason)
        ret = () if self.ret_activity is None else (self.ret_activity,)
        return autodiff(self.mode, self.f, *ret, *annotated)

    def _trace_and_call(self, key, annotated, names):
        start = time.perf_counter()
        reason = None
        try:
            compiled = _Compiled.trace(self, annotated, names)
        except _Random as e:
            warnings.warn(f"{self.__name__} runs eagerly: {e}", CompileWarning, stacklevel=3)
            reason = str(e)
        except Exception as e:   # noqa: BLE001  (eager mode gives the genuine behaviour)
            reason = f"tracing failed: {type(e).__name__}: {e}"
        finally:
            self._compile_seconds += time.perf_counter() - start
        if reason is not None:   # outside the handler: the failed trace's frames are freed
            self._remember(key, reason)
            return self._eager(annotated, reason)
        self._counts["traces"] += 1
        entry = self._cache.setdefault(key, [])
        entry.append(compiled)
        self._evict()
        self._last = compiled.program
        try:
            result = compiled.call(annotated, names)
            self._remember_fast(key, compiled, annotated)
            return result
        except GuardFailed:   # the traced values decide the same way: this cannot happen
            entry.remove(compiled)
            return self._eager(annotated, "a fresh trace failed its own guards")
        except _ReplayRaised as e:
            return self._eager(annotated, str(e))

    def _remember(self, key, reason):
        self._cache[key] = reason
        self._evict()

    def _evict(self):
        while sum(len(v) if isinstance(v, list) else 1
                  for v in self._cache.values()) > self.max_programs:
            key, _ = self._cache.popitem(last=False)
            if self._fast is not None and self._fast[0] == key:
                self._fast = None


class _Random(Exception):
    pass


class _ReplayRaised(Exception):
    """A replayed program raised (a singular matrix, say). Nothing outside it was touched yet;
    the call runs eagerly, which raises the error, or lets the function catch it."""


def _replay(program, leaves, seeds):
    try:
        return program.run(leaves, seeds)
    except GuardFailed:
        raise
    except Exception as e:   # noqa: BLE001
        raise _ReplayRaised(f"the replay raised {type(e).__name__}: {e}") from e


_FAST_TYPES = (Active, Duplicated, DuplicatedNoNeed, Const)


# --------------------------------------------------------------------------------------------
# One traced signature


class _Compiled:
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
    def trace(cls, owner, annotated, names):
        watched, generators = _watch(owner.f)
        states = [generator_state(g) for g in generators]
        state = np.random.get_state(legacy=False)
        python_state = random.getstate()
        try:
            first = trace_once(owner, annotated, names, watched)
            moved = [not same_value(generator_state(g), s) for g, s in zip(generators, states)]
            second = trace_once(owner, annotated, names, watched)
            after = np.random.get_state(legacy=False)
            python_moved = random.getstate() != python_state
        finally:   # tracing draws nothing: a call that then runs eagerly draws as eager does
            np.random.set_state(state)
            random.setstate(python_state)
            for g, s in zip(generators, states):
                set_generator_state(g, s)
        if not same_value(_rng_key(state), _rng_key(after)) or any(moved) or python_moved:
            raise _Random("the function draws random numbers (NumPy's global generator, a "
                          "Generator it reads, or Python's random module); a replay would repeat the same draws, so each "
                          "call runs eagerly")
        difference = _first_difference(first[0], second[0])
        if difference is not None:
            raise _Random(f"two traces with the same arguments differ ({difference}): the "
                          "function draws random numbers or reads a value that changes between "
                          "calls; pass such values as Const arguments to compile it")
        what = _changed(watched)
        if what is not None:
            raise Uncompilable(f"the function changed {what} while it ran")
        trace, leaf_slots, out, groups, ret_active = first
        return cls._build(owner, trace, leaf_slots, out, groups, ret_active, watched, annotated)

    @classmethod
    def _build(cls, owner, trace, leaf_slots, out, groups, ret_active, watched, annotated):
        out_leaves, out_td = flatten(out) if out is not None else ([], None)
        out_slots = [x.slot if isinstance(x, Tracer) else None for x in out_leaves]
        writes, seeds = [], []
        ret_slot = out.slot if ret_active and isinstance(out, Tracer) else None
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
        program = Program(trace, leaf_slots, result_slots, seeds, grad_slots)
        template = None if out_td is None else (out_td, [None if isinstance(x, Tracer) else x
                                                         for x in out_leaves])
        compiled = cls(program, template, out_slots, writes, grad_slots, watched,
                       ret_slot, owner)
        if ret_slot is not None:
            compiled.seed = array_module(out._v).ones((), dtype=out.dtype)   # copied per call
        compiled.plain = not writes and all(
            _is_scalar(ann.val) if type(ann) is Const and type(ann.val) is not np.ndarray
            else type(ann) is Const
            or type(ann) in (Active, Duplicated, DuplicatedNoNeed)
            and type(ann.val) is np.ndarray and ann.val.dtype.kind == "f"
            or type(ann) is Active and type(ann.val) is float
            for ann in annotated)
        return compiled

    def call(self, annotated, names):
        if self.watched and _changed(self.watched) is not None:
            raise GuardFailed("a value the function reads changed")
        if self.plain:
            fast = self._call_plain(annotated)
            if fast is not None:
                return fast
        groups, leaves = [], []
        consts, differentiated = [], []
        for ann, name in zip(annotated, names):
            if type(ann) is Const:
                arrays = const_leaves(ann.val)
                leaves.extend(arrays)
                consts.extend(arrays)
                continue
            arg = _reverse_argument(ann, name)
            arg.first_slots = []
            for x in arg.leaves:
                arg.first_slots.append(True if _is_float(x) else None)
                if _is_float(x):
                    leaves.append(x)
                    differentiated.append(x)
            groups.append(arg)
        if self.writes and aliased(differentiated, consts):
            raise GuardFailed("arguments share memory")
        slot_iter = iter(self.grad_slots)
        for arg in groups:
            arg.first_slots = [next(slot_iter) if s else None for s in arg.first_slots]
        seeds = []
        if self.ret_slot is not None:
            seeds.append(self.seed.copy())
        zero_after = []
        for g, i, _, seeded in self.writes:
            if seeded:
                shadow = groups[g].shadows[i]
                seeds.append(to_user(shadow) if is_complex(shadow) else shadow.copy())
                zero_after.append(shadow)
        results, grads = _replay(self.program, leaves, seeds)
        for shadow in zero_after:
            shadow[...] = 0
        n_out = sum(s is not None for s in self.out_slots)
        for (g, i, _, _), value in zip(self.writes, results[n_out:]):
            groups[g].leaves[i][...] = value
        cts = dict(zip(self.grad_slots, grads))
        user_cotangents(cts, [(x, s) for arg in groups for x, s in zip(arg.leaves,
                                                                       arg.first_slots)
                              if s is not None])
        result = (derivatives(annotated, groups, cts, None),)
        if self.owner.mode.with_primal:
            result += (self._primal(results[:n_out]),)
        return result

    def _call_plain(self, annotated):
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
                        or not dx.flags.writeable):
                    return None
            leaves.append(x)
        seeds = []
        if self.ret_slot is not None:
            seeds.append(self.seed.copy())
        results, grads = _replay(self.program, leaves, seeds)
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
        result = (tuple(derivs),)
        if self.owner.mode.with_primal:
            result += (self._primal(results),)
        return result

    def _primal(self, values):
        if self.out_template is None:
            return None
        td, consts = self.out_template
        it = iter(values)
        # A constant array of the result is the caller's to write into: a copy per call.
        leaves = [_python_scalar(next(it)) if s is not None
                  else c.copy() if isinstance(c, np.ndarray) else c
                  for s, c in zip(self.out_slots, consts)]
        return unflatten(td, leaves)
