"""The eager call of a compiled function after user code already ran in the same call.

A replay that raises, or a trace that fails, is answered by eager mode. When the replay or
the trace ran a custom rule or a `tape.inactive` function first, eager mode must not run it a
second time (it may keep state): `eager_taking` is `autodiff` in reverse mode whose trace
takes what that user code returned for the same inputs (tape/user_calls.UserCalls). A rule's
taken result is recorded as eager mode records it, so its reverse rule runs in the sweep.
"""
from __future__ import annotations

import functools
from typing import Callable

from .activities import Mode
from .api import _argument_names, _reverse
from .config import _REVERSE_CONFIGS
from .core import Primitive, ReverseTrace, Tracer
from .rules import _plain, _plain_one
from .user_calls import UserCalls


class TakingTrace(ReverseTrace):
    """An eager reverse trace whose user code takes what `calls` noted for its inputs."""

    records_inactive = True   # the calls of `tape.inactive` functions come to call_inactive
    records_untraced = True   # ... and those of the user's rules on plain values to process

    def __init__(self, calls: UserCalls, **options):
        super().__init__(**options)
        self.calls = calls

    def nested_opened(self) -> None:
        """A differentiation opened inside the function: eager mode allows it (its own trace
        calls inactive functions as usual)."""

    def process(self, prim, args, params):
        if not any(isinstance(a, Tracer) for a in args):   # a user's rule on plain values
            return self.calls.call(prim.impl, args, params)
        if prim.pure or prim.augmented_primal is None:
            return super().process(prim, args, params)
        mine = tuple(isinstance(a, Tracer) and a.level is self for a in args)
        vals = tuple(a.value if m else a for a, m in zip(args, mine))
        outcome = self.calls.call(prim.augmented_primal, (_REVERSE_CONFIGS[mine], *vals),
                                  params)
        return super().process(_taken(prim, outcome), args, params)

    def call_inactive(self, fn, args, kwargs):
        return self.calls.call_inactive(fn, tuple(_plain(args)),
                                        {k: _plain_one(v) for k, v in kwargs.items()})


def _taken(prim: Primitive, outcome: tuple) -> Primitive:
    """`prim`, whose augmented primal gives `outcome` (its result and residuals) instead of
    running: the record and the reverse rule are the rule's own."""
    return Primitive(prim.name, prim.impl, lambda cfg, *args, **params: outcome, prim.reverse,
                     prim.forward, prim.differentiable_rules, prim.multiple_results)


def eager_taking(mode: Mode, f: Callable, ret_activity, annotated: list,
                 calls: UserCalls) -> tuple:
    """``autodiff(mode, f, ret_activity, *annotated)`` for a reverse mode, taking the results
    of user code from `calls`: eager mode's own reverse pass, recorded by a `TakingTrace`.

    >>> import numpy as np
    >>> from tape import Active, Duplicated, Reverse
    >>> x, dx = np.array([1.0, 2.0]), np.zeros(2)
    >>> eager_taking(Reverse, lambda x: np.sum(x * x), Active, [Duplicated(x, dx)],
    ...              UserCalls())
    ((None,),)
    >>> dx
    array([2., 4.])
    """
    calls.rewind()
    return _reverse(mode, f, ret_activity, annotated, _argument_names(f, len(annotated)),
                    make_trace=functools.partial(TakingTrace, calls))
