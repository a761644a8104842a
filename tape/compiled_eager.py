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
from .api import _argument_names, _forward, _reverse
from .config import _FORWARD_CONFIGS, _REVERSE_CONFIGS
from .core import Primitive, ReverseTrace, Tracer
from .forward_trace import ForwardTrace
from .program_forward import user_forward_batched
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


class TakingForwardTrace(ForwardTrace):
    """An eager forward trace whose user code takes what `calls` noted for its inputs."""

    records_inactive = True
    records_untraced = True

    def __init__(self, calls: UserCalls, **options):
        super().__init__(**options)
        self.calls = calls

    def nested_opened(self) -> None:
        """A differentiation opened inside the function: eager mode allows it."""

    def process(self, prim, args, params):
        if not any(isinstance(a, Tracer) for a in args):   # a user's rule on plain values
            return self.calls.call(prim.impl, args, params)
        if prim.pure or prim.forward is None:
            return super().process(prim, args, params)
        mine = [isinstance(a, Tracer) and a.level is self for a in args]
        tans = [a.tangent if m else None for a, m in zip(args, mine)]
        if all(t is None for t in tans):   # the impl, through the branch above
            return super().process(prim, args, params)
        vals = [a.value if m else a for a, m in zip(args, mine)]
        # (eager mode's attempt on batched tangents, then once per direction: each a call)
        outcome = user_forward_batched(self.calls, prim.forward, _FORWARD_CONFIGS[tuple(
            t is not None for t in tans)], vals, tans, params)
        taken = Primitive(prim.name, prim.impl, prim.augmented_primal, prim.reverse,
                          lambda cfg, primals, tangents, **p: outcome,
                          prim.differentiable_rules, prim.multiple_results)
        return super().process(taken, args, params)

    call_inactive = TakingTrace.call_inactive


def _taken(prim: Primitive, outcome: tuple) -> Primitive:
    """`prim`, whose augmented primal gives `outcome` (its result and residuals) instead of
    running: the record and the reverse rule are the rule's own."""
    return Primitive(prim.name, prim.impl, lambda cfg, *args, **params: outcome, prim.reverse,
                     prim.forward, prim.differentiable_rules, prim.multiple_results)


def eager_taking(mode: Mode, f: Callable, ret_activity, annotated: list,
                 calls: UserCalls) -> tuple:
    """``autodiff(mode, f, ret_activity, *annotated)``, taking the results of user code from
    `calls`: eager mode's own pass, recorded by a `TakingTrace` (a `TakingForwardTrace` in
    forward mode).

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
    names = _argument_names(f, len(annotated))
    if mode.kind == "forward":
        return _forward(mode, f, ret_activity, annotated, names,
                        make_trace=functools.partial(TakingForwardTrace, calls))
    return _reverse(mode, f, ret_activity, annotated, names,
                    make_trace=functools.partial(TakingTrace, calls))
