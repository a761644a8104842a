"""`compile`: trace a function once per signature, then replay it as straight-line code.

``g = compile(Reverse, f, Active, Duplicated, Const)`` returns a callable such that
``g(Duplicated(x, dx), Const(c))`` returns, and writes into shadows, exactly what
``autodiff(Reverse, f, Active, Duplicated(x, dx), Const(c))`` would. The first call with a new
*signature* (activities, structures, shapes, dtypes, the values of Python-number Consts) traces
`f` into a `Program` (tape/program.py) and answers with it; a later call the program accepts
traces once more, and when that trace comes out the same the program is confirmed: from then
on calls replay it, checking its guards, without running `f`. So `f` runs at most once per
call, as in eager mode. A guard that fails traces again (the cache keeps one program per guard
outcome) and, past ``max_traces`` programs for one signature, runs eagerly. Whatever cannot be
replayed runs eagerly too, and `g.stats` says why: a compiled function is never wrong, only
not faster.

What a replay could not see is checked, so it is never replayed stale:
- arrays and numbers the function reads from its closure, its globals, its defaults or its
  bound object are compared at each call (an in-place change traces again; a change made by
  `f` itself at two calls, a counter, makes the signature eager; at one call only, a cache
  it fills, the next call traces again);
- random draws (a generator that moved while traced, or a confirming trace that differs)
  make the signature run eagerly, so every call draws afresh, with a `CompileWarning`;
- buffers that `f` makes (`np.zeros_like`) are fresh copies at each replay; steps run under
  an error state or warning filters `f` set itself (`np.errstate`) replay under them.

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
import threading
import time
import warnings
from typing import Callable

import numpy as np

from .activities import (ACTIVITY_TYPES, Active, Annotation, Const, Duplicated,
                         DuplicatedNoNeed, Mode, unannotated)
from .api import _argument_names, autodiff
from .modifiers import runtime_inactive
from .core import _TRACE_STACK
from .errors import ActivityError, PytreeError
from .compiled_call import CompiledSignature, ReplayRaised
from .compiled_eager import eager_taking
from .compiled_forward import ForwardSignature, trace_forward_once
from .compiled_method import MethodBehaviour
from .compiled_trace import RANDOM_DRAWS, RandomStates, trace_once
from .core import Primitive
from .program import GuardFailed, Uncompilable, same_value
from .closure_watch import _changed
from .signature import _first_difference, _signature
from .pytree import is_inactive
from .split import autodiff_thunk
from .user_calls import UserCalls


class CompileWarning(UserWarning):
    """A compiled function runs eagerly for a reason the user may want to fix."""


Stats = collections.namedtuple(
    "Stats", "traces hits guard_failures eager_calls programs compile_seconds eager_reasons")


def compile(mode: Mode, f: Callable | type | None = None, *activities: type,
            max_traces: int = 8, max_programs: int = 64):
    """Compile `f` for `mode` and the activity types (as `autodiff_thunk` takes them).

    ``compile(mode, f, ReturnActivity, *ArgActivityTypes)`` returns a callable taking the
    annotated arguments. Without `f` (``@compile(Reverse, Active, Duplicated)``) it is a
    decorator. Reverse, ReverseWithPrimal, Forward and ForwardWithPrimal are traced and
    replayed, with BatchDuplicated arguments too (W tangents in one forward pass, W seeds in
    one reverse sweep) and MixedDuplicated ones; mode modifiers run eagerly, and split modes
    return `autodiff_thunk`'s pair. `print(g)` shows the generated program of the last signature;
    `g.stats` counts traces, cache hits, guard failures and eager calls.

    >>> import numpy as np
    >>> from tape import Reverse, ReverseWithPrimal, Active
    >>> @compile(ReverseWithPrimal, Active, Active)
    ... def f(x):
    ...     return x * x if x > 0 else -x
    >>> f(Active(3.0)), f(Active(-2.0)), f.stats.traces
    (((6.0,), 9.0), ((-1.0,), 2.0), 2)
    >>> from tape import ForwardWithPrimal, Duplicated
    >>> jvp = compile(ForwardWithPrimal, lambda x: x ** 3, Duplicated, Duplicated)
    >>> jvp(Duplicated(2.0, 1.0))
    (12.0, 8.0)
    >>> from tape import BatchDuplicated
    >>> jvps = compile(ForwardWithPrimal, lambda x: x ** 3, BatchDuplicated, BatchDuplicated)
    >>> jvps(BatchDuplicated(2.0, (1.0, 0.5)))   # two directions in one pass
    ((12.0, 6.0), 8.0)
    >>> def square_into(y, x):
    ...     y[...] = x * x
    >>> vjps = compile(Reverse, square_into, Const, BatchDuplicated, BatchDuplicated)
    >>> dxs = (np.zeros(2), np.zeros(2))
    >>> vjps(BatchDuplicated(np.zeros(2), (np.ones(2), np.array([0.0, 1.0]))),
    ...      BatchDuplicated(np.array([1.0, 3.0]), dxs))   # the W seeds: y's shadows
    ((None, None),)
    >>> dxs
    (array([2., 6.]), array([0., 6.]))
    """
    if not isinstance(mode, Mode):
        decorator = (" (as a decorator: @compile(Reverse, Active, Duplicated, ...) above the "
                     "function, with the return's activity and one per argument)"
                     if callable(mode) else "")
        raise ActivityError(f"compile: the first argument must be a mode such as Reverse, got "
                            f"{mode!r}{decorator}")
    if f is None or f in ACTIVITY_TYPES:
        types_ = activities if f is None else (f,) + activities
        return lambda fn: compile(mode, fn, *types_, max_traces=max_traces,
                                  max_programs=max_programs)
    f = unannotated(f)   # Enzyme's autodiff(mode, Const(f), ...)
    if not callable(f) and not isinstance(f, classmethod):   # (a class body's classmethod)
        raise ActivityError(f"compile needs a callable function, got {type(f).__name__}")
    for t in activities:
        if t not in ACTIVITY_TYPES and not (isinstance(t, type) and issubclass(t, Annotation)):
            raise ActivityError(f"compile: activities must be types such as Active or "
                                f"Duplicated, got {t!r}")
    if mode.kind == "reverse" and mode.split:
        return autodiff_thunk(mode, f, *activities)
    return CompiledFunction(mode, f, activities, max_traces, max_programs)


class CompiledFunction(MethodBehaviour):
    """`f` compiled for one mode: call it with annotated arguments (see `compile`)."""

    def __init__(self, mode, f, activities, max_traces, max_programs):
        self.mode, self.f = mode, f
        self._activities = activities
        self._attribute = "_compiled_" + getattr(f, "__name__", "method")
        self._per_instance = False
        self.ret_activity = None
        if activities:   # the return activity comes first, as for autodiff_thunk
            self.ret_activity, activities = activities[0], activities[1:]
        self.arg_types = activities
        forward = mode.kind == "forward"
        self._trace_once = trace_forward_once if forward else trace_once
        self._signature_class = ForwardSignature if forward else CompiledSignature
        self.max_traces, self.max_programs = max_traces, max_programs
        self._cache: collections.OrderedDict = collections.OrderedDict()
        self._last = None
        self._counts = dict(traces=0, hits=0, guard_failures=0, eager_calls=0)
        self._compile_seconds = 0.0
        self._eager_reasons: collections.deque = collections.deque(maxlen=8)
        self._fast = None   # (signature, compiled) of the last plain replay
        # The cache and the counts are shared by the threads that call this function: they
        # change under this lock, never held while user code, a trace or a replay runs.
        self._lock = threading.RLock()
        self._changed_once: set = set()   # signatures whose trace changed what it reads
        self._failed_once: set = set()    # signatures whose trace failed once
        self.__doc__ = getattr(f, "__doc__", None)
        self.__name__ = getattr(f, "__name__", "compiled")

    # -- public ------------------------------------------------------------------------------
    @property
    def stats(self) -> Stats:
        """Traces made, replays that hit, guards that failed, eager calls (and why), programs
        cached, seconds spent tracing."""
        with self._lock:
            programs = sum(len(v) for v in self._cache.values() if isinstance(v, list))
            return Stats(programs=programs, compile_seconds=self._compile_seconds,
                         eager_reasons=list(self._eager_reasons), **self._counts)

    def __str__(self) -> str:
        if self._last is None:
            return f"<compiled {self.__name__}: not traced yet>"
        p = self._last
        rule = "forward" if self.mode.kind == "forward" else "reverse"
        return (f"# compiled {self.__name__} ({self.mode}): {p.n_steps} steps traced, "
                f"{p.n_kept} replayed, {p.n_adjoint} with a {rule} rule\n{p.source}")

    __repr__ = __str__

    def __watch_through__(self):
        """What a function that calls this one reads through it (tape/closure_watch.py)."""
        return self.f

    def __call__(self, *args):
        fast, failed = self._fast, None
        if fast is not None and not _TRACE_STACK.get():
            result, failed = self._call_fast(fast, args)
            if result is not None:
                return result
        annotated = [a if isinstance(a, Annotation) else Const(a) for a in args]
        annotated = [Const(a.val) if is_inactive(a.val) else a for a in annotated]
        self._check_types(annotated)
        if self.mode.runtime_activity:
            annotated = runtime_inactive(annotated)
        try:
            reason = self._eager_reason(annotated)
            key = None if reason is not None else _signature(annotated)
        except (Uncompilable, PytreeError) as e:   # eager mode gives the genuine behaviour
            reason = str(e)
        if reason is None:
            try:
                hash(key)
            except TypeError as e:   # an unhashable object among the Const numbers
                reason = f"the signature cannot be a cache key: {e}"
        if reason is not None:
            return self._eager(annotated, reason)
        with self._lock:
            entry = self._cache.get(key)
            if entry is not None:
                self._cache.move_to_end(key)
        if isinstance(entry, str):
            return self._eager(annotated, entry)
        names = _argument_names(self.f, len(annotated))
        # What user code returned in this call's runs of f so far: a replay that fails after
        # running some, then another replay, a trace or an eager call, runs it once in all.
        calls = UserCalls() if failed is None or failed[2] is None else failed[2]
        pending = []   # programs not confirmed yet: never replayed alone
        if entry:
            for compiled in tuple(entry):   # (a recursive call may trace into `entry`)
                record = compiled.record   # (read once: another thread may confirm it)
                if record is not None:
                    pending.append((compiled, record))
                    continue
                try:
                    if failed is not None and failed[0] is compiled:
                        raise failed[1]   # the fast path replayed it (and ran user code)
                    result = compiled.call(annotated, names, calls=calls)
                except GuardFailed:
                    self._count("guard_failures")
                    continue
                except ReplayRaised as e:
                    return self._eager(annotated, str(e), calls)
                self._count("hits")
                self._last = compiled.program
                self._remember_fast(key, compiled, annotated)
                return result
            if len(entry) >= self.max_traces and not pending:
                return self._eager(annotated, self._too_many, calls)
        return self._trace_and_call(key, annotated, names, pending, calls)

    @property
    def _too_many(self) -> str:
        return f"more than {self.max_traces} traces for one signature (guards keep failing)"

    # -- internals ---------------------------------------------------------------------------
    def _count(self, what: str, n: int = 1) -> None:
        with self._lock:
            self._counts[what] += n

    def _call_fast(self, fast, args):
        """The replay of a call with the signature of the last plain replay, its arguments
        annotated arrays (or Active floats): what the general path would do for them, without
        its checks (they passed for this signature). Returns (result, failed): result None
        takes the general path, which decides with `failed`, (compiled, error, calls) when
        this replay failed, without running the program a second time."""
        key, compiled = fast
        for a in args:
            if type(a) not in _FAST_TYPES:
                return None, None
        try:
            if _signature(args) != key:
                return None, None
        except Uncompilable:
            return None, None
        if compiled.watched and _changed(compiled.watched) is not None:
            return None, None
        calls = UserCalls() if compiled.program.calls_user else None
        try:
            result = compiled._call_plain(args, calls=calls)
        except (GuardFailed, ReplayRaised) as e:
            return None, (compiled, e, calls)
        if result is not None:
            self._last = compiled.program
            with self._lock:
                self._counts["hits"] += 1
                if key in self._cache:   # (another thread may have evicted it)
                    self._cache.move_to_end(key)
        return result, None

    def _remember_fast(self, key, compiled, annotated):
        # (runtime activity looks at every call's shadows, which the fast path does not)
        plain = (compiled.plain and compiled.record is None and not self.mode.runtime_activity
                 and compiled in self._cache.get(key, ()))
        self._fast = (key, compiled) if plain and all(
            type(a) in _FAST_TYPES and (type(a.val) is np.ndarray or type(a.val) is float)
            for a in annotated) else None

    def _check_types(self, annotated):
        if not self.arg_types:
            return
        if len(annotated) != len(self.arg_types):
            names = _argument_names(self.f, max(len(annotated), len(self.arg_types)))
            given = ", ".join(f"{n}: {t.__name__}" for n, t in zip(names, self.arg_types))
            left = ", ".join(str(n) for n in names[len(self.arg_types):len(annotated)])
            raise ActivityError(
                f"{self.__name__} was compiled for {len(self.arg_types)} arguments ({given}) "
                f"and called with {len(annotated)}"
                + (f"; {left} has no activity type" if left else "")
                + f": the first activity type given to compile is the return's "
                f"({self.ret_activity.__name__}), then one per argument; compile again with "
                "one type per argument, or pass the missing ones")
        names = _argument_names(self.f, len(annotated))
        for ann, t, name in zip(annotated, self.arg_types, names):
            if type(ann) is not t and not (t is Const and is_inactive(ann.val)):
                raise ActivityError(
                    f"{name} was compiled as {t.__name__} but passed as "
                    f"{type(ann).__name__}; annotate it {t.__name__}(...) or compile again")

    def _eager_reason(self, annotated):
        mode = self.mode
        if mode.kind == "forward":
            if self.ret_activity is Active or any(type(a) is Active for a in annotated):
                return "Active in forward mode (eager mode says what to use instead)"
            if isinstance(self.f, Primitive):
                return "a primitive differentiated directly runs eagerly"
        elif self.ret_activity is not None and issubclass(self.ret_activity, Duplicated):
            return "a Duplicated return needs a seed (eager mode says how to pass one)"
        if mode.strong_zero or mode.nan_check or mode.holomorphic:
            return "mode modifiers (strong zero, NaN check, holomorphic) run eagerly"
        if _TRACE_STACK.get():
            return "called inside another differentiation"
        return None

    def _eager(self, annotated, reason, calls=None):
        """Answer the call eagerly. `calls`: what user code returned in this call's runs so
        far (a replay, a trace), taken rather than run again."""
        self._note_eager(reason)
        if calls:
            return eager_taking(self.mode, self.f, self.ret_activity, annotated, calls)
        ret = () if self.ret_activity is None else (self.ret_activity,)
        return autodiff(self.mode, self.f, *ret, *annotated)

    def _note_eager(self, reason: str) -> None:
        with self._lock:
            self._counts["eager_calls"] += 1
            if not self._eager_reasons or self._eager_reasons[-1] != reason:
                self._eager_reasons.append(reason)

    def _trace_and_call(self, key, annotated, names, pending=(), calls=None):
        """Trace `f` once on this call's arguments and answer the call with that trace's
        program: `f` runs once per call, as in eager mode, so its draws and other side effects
        happen as often as eager ones. A new program is kept unconfirmed; it is replayed
        without running `f` only once a trace of a later call it accepts (one of `pending`)
        came out the same. A trace that differs from a program that accepts its call, or
        that drew random numbers, makes the signature eager from the next call on (`pending`:
        (program, the trace it must equal) pairs). Whether a
        program accepts the call is asked after the trace, of its primal alone, with what the
        user's rules and inactive functions returned in the trace: they run once per call.
        `calls`: what user code returned in this call's earlier runs (replays whose guards
        failed), taken by the trace, and by an eager call after it."""
        calls = UserCalls() if calls is None else calls
        start = time.perf_counter()
        try:
            states = RandomStates(self.f, annotated)
        except Uncompilable as e:   # what it reads cannot be watched: eager, as it would be
            self._remember(key, str(e))
            return self._eager(annotated, str(e), calls)
        reason, failure, traced, compiled = None, None, None, None
        mark = calls.count
        try:
            traced = self._trace_once(self, annotated, names, states.watched, calls)
        except Exception as e:   # noqa: BLE001  (eager mode gives the genuine behaviour)
            reason, failure = f"tracing failed: {type(e).__name__}: {e}", e
        future = None   # why the signature runs eagerly from the next call on
        once = False    # ...unless it is the first change of what it reads
        if reason is None:
            changed = [what for what, get, seen in states.watched
                       if get() is not seen and not same_value(get(), seen)]
            written = states.const_written()
            if states.drew():
                future = RANDOM_DRAWS
            elif written:   # a side effect on the caller's object: each call runs eagerly
                future = f"the function writes into {written}"
                traced = None
                self._compile_seconds += time.perf_counter() - start
                _restore(states, calls, mark)
                self._remember(key, future)
                return self._eager(annotated, future, calls)
            elif changed:
                future = f"the function changed {changed[0]} while it ran"
                if key not in self._changed_once:   # a cache it filled (a mask per shape):
                    self._changed_once.add(key)     # the next call traces again, and only
                    once = True                     # a second change makes it eager
                # What it changed may now hold the trace's values (a statistic of a Const
                # kept in an attribute, an item appended to a list): put it back and answer
                # this call eagerly, which stores plain values as eager autodiff does.
                traced = None
                self._compile_seconds += time.perf_counter() - start
                _restore(states, calls, mark)
                if not once:
                    self._remember(key, future)
                return self._eager(annotated, future, calls)
            elif pending:
                stale = [p for p, _ in pending if p.watched and _changed(p.watched) is not None]
                self._count("guard_failures", len(stale))   # what it read changed since
                pending = [(p, r) for p, r in pending if p not in stale]
                differences = [_first_difference(r, traced[0]) for _, r in pending]
                for (program, _), difference in zip(pending, differences):
                    if difference is None:   # the same program: confirmed
                        program.record = None
                        recorded, traced[0].recorded, traced = traced[0].recorded, {}, None
                        self._compile_seconds += time.perf_counter() - start
                        return self._replay_confirmed(key, program, annotated, names,
                                                      recorded, calls)
                for (program, record), difference in zip(pending, differences):
                    if program.accepts(annotated, names, traced[0], record):
                        future = (f"two traces of calls that decide alike differ "
                                  f"({difference}): the function draws random numbers or "
                                  "reads a value that changes between calls; pass such values "
                                  "as Const arguments to compile it")
                        break
                    self._count("guard_failures")
                entry = self._cache.get(key, ())
                if future is None and isinstance(entry, list) and len(entry) >= self.max_traces:
                    future, once = self._too_many, True   # this call only, as before
            try:
                compiled = self._signature_class.build(self, traced, states.watched,
                                                       annotated, kept=future is None)
            except Exception as e:   # noqa: BLE001
                reason, failure = f"tracing failed: {type(e).__name__}: {e}", e
        recorded = None
        if traced is not None:   # this call takes them; a kept record need not hold them
            recorded, traced[0].recorded = traced[0].recorded, {}
        traced = None   # the failed trace's frames are freed before an eager call
        self._compile_seconds += time.perf_counter() - start
        if reason is not None:
            _restore(states, calls, mark)   # the eager call draws what eager autodiff would
            # A program of this signature traced (`pending`): this call's values fail. An
            # error of the function may come from this call's values too (an index out of
            # bounds): only a second one makes the signature eager, and one that eager
            # autodiff raises as well (the function's own error for these values) none.
            result = self._eager(annotated, reason, calls)
            if not pending:
                if key in self._failed_once or isinstance(failure, Uncompilable):
                    self._remember(key, reason)
                else:
                    self._failed_once.add(key)
            return result
        if future is not None:
            if "random" in future:
                warnings.warn(f"{self.__name__} runs eagerly: {future}", CompileWarning,
                              stacklevel=3)
            if not once:
                self._remember(key, future)
            self._note_eager(future)
            compiled.watched = ()   # answers this call only: what f changed is its own doing
        else:
            with self._lock:
                self._counts["traces"] += 1
                entry = self._cache.get(key)
                if not isinstance(entry, str):   # (another thread's call made it eager)
                    self._cache.setdefault(key, []).append(compiled)
                    self._cache.move_to_end(key)
                    self._evict()
        self._last = compiled.program
        try:
            # This call's own trace ran the user's rules: the replay takes their results
            return compiled.call(annotated, names, recorded)
        except (GuardFailed, ReplayRaised) as e:   # arguments that share memory, say
            with self._lock:
                entry = self._cache.get(key)
                if future is None and isinstance(entry, list) and compiled in entry:
                    entry.remove(compiled)
            _restore(states, calls, mark)
            return self._eager(annotated, "a fresh trace failed its own guards"
                               if isinstance(e, GuardFailed) else str(e), calls)

    def _replay_confirmed(self, key, compiled, annotated, names, recorded, calls):
        try:
            result = compiled.call(annotated, names, recorded)
        except (GuardFailed, ReplayRaised) as e:   # it accepted these arguments: unexpected
            return self._eager(annotated, str(e), calls)
        self._count("hits")
        self._last = compiled.program
        self._remember_fast(key, compiled, annotated)
        return result

    def _remember(self, key, reason):
        with self._lock:
            self._cache[key] = reason
            self._cache.move_to_end(key)
            if self._fast is not None and self._fast[0] == key:
                self._fast = None
            self._evict()

    def _evict(self):   # (under the lock)
        while sum(len(v) if isinstance(v, list) else 1
                  for v in self._cache.values()) > self.max_programs:
            key, _ = self._cache.popitem(last=False)
            self._changed_once.discard(key)
            self._failed_once.discard(key)
            if self._fast is not None and self._fast[0] == key:
                self._fast = None


def _restore(states, calls, mark) -> None:
    """Set the random generators, and the values the function reads and changed while
    traced (a counter in its closure, a list it appends to), back to before the trace for an
    eager call, which then draws and changes what eager autodiff would: `f` runs twice in
    this call, and only the second run's side effects remain. The trace's user code, if it
    drew or changed such a value, runs again there (what it returned is forgotten)."""
    drew = states.drew()
    if states.restore() or drew:
        calls.forget_since(mark)


_FAST_TYPES = (Active, Duplicated, DuplicatedNoNeed, Const)
