"""The user code that one call of a compiled function ran (tape/compiled.py).

A custom rule or a `tape.inactive` function may keep state (a counter, a generator, a cache),
and eager mode runs it once per call. A compiled call may run `f` more than once: a replay
whose guard fails after user code ran is followed by another program's replay or a new trace,
and a replay that raises by an eager call. `UserCalls` notes what each piece of user code was
called with and returned, and the later runs of the same call take those results instead of
running it again: the k-th call of a callable takes a noted result of that callable, not taken
yet in this run, whose inputs are equal to its own (values: bit-equal arrays of the same
dtypes and shapes). Any other call is a different one, and runs.

>>> import numpy as np
>>> runs = []
>>> def double(x):
...     runs.append(1)
...     return x * 2
>>> calls = UserCalls()
>>> first = calls.call(double, (np.arange(3.0),), {})
>>> calls.rewind()   # a second run of the same call
>>> again = calls.call(double, (np.arange(3.0),), {})
>>> other = calls.call(double, (np.ones(3),), {})   # inputs differ: it runs
>>> again is first, len(runs)
(True, 2)
"""
from __future__ import annotations

from typing import Any, Callable

# is_user_code is also imported from here
from .program import GuardFailed, Uncompilable, is_user_code, same_value  # noqa: F401


_NOTHING_TAKEN: frozenset = frozenset()   # (the first run takes nothing: no set to make)

# A noted call: (callable, args, kwargs, what it returned or raised, whether it raised, number)
_FN, _ARGS, _KWARGS, _OUTCOME, _RAISED, _ORDER = range(6)


class UserCalls:
    """What user code returned (or raised) in the runs of one call, per callable in call order.

    Each run of `f` (a replay, a trace, an eager call) starts with `rewind` and makes its
    calls of user code through `call`. The first run only notes them (the replay's hot path);
    a later one looks among the noted calls of its callable first.
    """

    __slots__ = ("log", "earlier", "position", "taken", "count")

    def __init__(self):
        self.log: list[tuple] = []          # this run's calls, in order
        self.earlier: dict | None = None    # id(callable) -> earlier runs' calls, to take
        self.position: dict = {}            # id(callable) -> where this run looks next
        self.taken: set = _NOTHING_TAKEN    # (id, index) of the earlier calls taken
        self.count = 0                      # calls noted so far (numbers them)

    def __bool__(self) -> bool:
        return bool(self.log or self.earlier)

    def rewind(self) -> None:
        """Start another run of the function within the same call: it may take what this
        run's calls returned, then what earlier runs' calls it did not take returned."""
        if not self.log:
            if self.earlier:
                self.position, self.taken = {}, set()
            return
        merged: dict = {}
        for entry in self.log:
            merged.setdefault(id(entry[_FN]), []).append(entry)
        for key, entries in (self.earlier or {}).items():
            merged.setdefault(key, []).extend(
                e for j, e in enumerate(entries) if (key, j) not in self.taken)
        self.earlier, self.log, self.position, self.taken = merged, [], {}, set()

    def forget_since(self, mark: int) -> None:
        """Drop the calls noted since `count` was `mark`: the random generators are set
        back to before them, so the run that follows draws again."""
        self.rewind()
        self.earlier = {k: kept for k, entries in (self.earlier or {}).items()
                        if (kept := [e for e in entries if e[_ORDER] < mark])}

    def call(self, fn: Callable, args: tuple, kwargs: dict) -> Any:
        """``fn(*args, **kwargs)``, or what an earlier run of this call got from it for the
        same inputs (an exception it raised is raised again). `fn` is user code
        (`is_user_code`)."""
        if self.earlier:
            entry = self._take(fn, args, kwargs)
            if entry is not None:
                self.log.append(entry)
                if entry[_RAISED]:
                    raise entry[_OUTCOME]
                return entry[_OUTCOME]
        try:
            out = fn(*args, **kwargs)
        except (GuardFailed, Uncompilable):   # the machinery's, not the user code's own
            raise
        except Exception as e:
            self.log.append((fn, args, kwargs, e, True, self.count))
            self.count += 1
            raise
        self.log.append((fn, args, kwargs, out, False, self.count))
        self.count += 1
        return out

    def primal_done(self) -> None:
        """The run's primal is over and every guard held: no other program and no trace can
        follow in this call. Only an eager call can, after the adjoint raised, and that call
        raises too (its sweep runs after `f` returned, where `f` cannot catch anything), so
        user code running again there changes no result. What was noted is let go, so that
        the inputs and results of user code (a kernel's arrays) are not held through the
        adjoint: they were 2.8 MB of a 36 MB training step."""
        self.log, self.earlier = [], None

    def _take(self, fn, args, kwargs):
        key = id(fn)
        entries = self.earlier.get(key)
        if entries is None:
            return None
        for j in range(self.position.get(key, 0), len(entries)):
            entry = entries[j]
            if same_value(entry[_ARGS], args) and same_value(entry[_KWARGS], kwargs):
                self.position[key] = j + 1
                self.taken.add((key, j))
                return entry
        return None

    def call_inactive(self, fn: Callable, args: tuple, kwargs: dict) -> Any:
        """A `tape.inactive` function's call: through `call` when it is user code."""
        if is_user_code(fn):
            return self.call(fn, args, kwargs)
        return fn(*args, **kwargs)


class _Direct:
    """The `calls` of a replay that notes nothing: user code is simply called."""
    __slots__ = ()

    @staticmethod
    def call(fn: Callable, args: tuple, kwargs: dict) -> Any:
        return fn(*args, **kwargs)

    @staticmethod
    def primal_done() -> None:
        pass


DIRECT = _Direct()
