"""The call of a user's rule (`custom_rule`), checked before and after the engine records it.

A rule differentiates its positional arguments that are arrays or numbers themselves. Two
mistakes would otherwise pass in silence:

- a value that carries a derivative hidden where the rule cannot see it: in a keyword
  parameter (static by definition) or inside a container passed positionally (a tuple, a
  dict, a dataclass). The engine would record the call without it (a zero derivative, and
  the rule's residual a traced value of a finished level), or, with no traced argument left,
  trace the function op by op and never run the rule. Both are refused with a `RuleError`.
  A value of an outer differentiation in a keyword parameter is fine (the rule's own NumPy
  operations carry it to that level), and so is a compiling trace's constant.
- a result that shares memory with an argument (the rule returned its input, or a view of
  it). NumPy would see a write into one through the other; the engine treats the rule's
  result as a new value. A write into either while both are live raises rather than let
  the traced function and the plain one disagree.
"""
from __future__ import annotations

import dataclasses
import weakref
from typing import Callable

import numpy as np

from .aliasing import overlap
from .constbuffer import ConstBuffer
from .core import Primitive, Tracer, peek
from .errors import PytreeError, RuleError
from .pytree import flatten


class UserRule(Primitive):
    """A `Primitive` made by `custom_rule`; `describe_argument(i)` names argument i."""

    def __init__(self, *args, describe_argument: Callable[[int], str], **kwargs):
        super().__init__(*args, **kwargs)
        self.describe_argument = describe_argument

    def __call__(self, *args, **params):
        top = None
        containers = False
        for a in args:
            if isinstance(a, Tracer):
                if top is None or a.level.depth > top:
                    top = a.level.depth
            elif isinstance(a, (tuple, list, dict)) or dataclasses.is_dataclass(a):
                containers = True
        if params:
            self._refuse_traced_params(params, top)
        if containers:
            self._refuse_traced_containers(args, top)
        out = Primitive.__call__(self, *args, **params)
        if top is not None:
            results = out if self.multiple_results and isinstance(out, tuple) else (out,)
            for k, r in enumerate(results):
                if isinstance(r, Tracer):
                    self._guard_aliases(r, k, args)
        return out

    def _refuse_traced_params(self, params, top):
        for key, value in params.items():
            if _derivative_carrier(value, top) is not None:
                raise RuleError(
                    f"`{self.name}` was called with a value that is being differentiated as "
                    f"its keyword parameter `{key}`: keyword parameters are static, passed to "
                    "the rules as they are, and get no derivative. Pass it as a positional "
                    "argument (its rules then return its cotangent and tangent), or pass "
                    "tape.primal(value) if no derivative should flow through it")

    def _refuse_traced_containers(self, args, top):
        for i, a in enumerate(args):
            if isinstance(a, Tracer) or not (isinstance(a, (tuple, list, dict))
                                               or dataclasses.is_dataclass(a)):
                continue
            if _derivative_carrier(a, top) is not None:
                raise RuleError(
                    f"`{self.name}` was called with a value that is being differentiated "
                    f"inside {self.describe_argument(i)}, a {type(a).__name__}: a rule "
                    "differentiates only positional arguments that are arrays or numbers "
                    "themselves, so the rule would be skipped or the derivative lost. Pass "
                    "the container's arrays as separate positional arguments")

    def _guard_aliases(self, result, k, args):
        value = peek(result)
        if not isinstance(value, np.ndarray):
            return
        which = f"result {k}" if self.multiple_results else "the result"
        for i, a in enumerate(args):
            arg_value = peek(a)
            if not (isinstance(arg_value, np.ndarray) and np.may_share_memory(value, arg_value)
                    and overlap(value, arg_value)):
                continue
            message = (
                f"{which} of `{self.name}` shares memory with its {self.describe_argument(i)} "
                "(the rule returned that array or a view of it), and the function writes "
                "into {written}. In NumPy the write would show through the other one; the "
                "engine treats a rule's result as a new value, so the derivative and the "
                "primal would silently disagree with the plain function. Return a copy from "
                "the rule (x.copy()), or copy before writing (y = rule(x).copy())")
            result.write_guard = AliasedWrite(message.format(written="that result"))
            if isinstance(a, Tracer) and a.level is result.level:
                a.write_guard = AliasedWrite(message.format(written="that argument"),
                                              weakref.ref(result),
                                              getattr(a, "write_guard", None))
            return


class AliasedWrite:
    """A write guard: refuses the write (raising `error`) while `partner` (a weak reference)
    is alive, and otherwise hands over to the guard it replaced."""

    __slots__ = ("message", "partner", "previous", "error")

    def __init__(self, message: str, partner=None, previous=None, error=RuleError):
        self.message, self.partner, self.previous, self.error = message, partner, previous, error

    def __call__(self, tracer) -> None:
        if self.partner is None or self.partner() is not None:
            raise self.error(self.message)
        if self.previous is None:
            del tracer.write_guard
        else:
            tracer.write_guard = self.previous
            self.previous(tracer)


def _derivative_carrier(value, top):
    """A value inside `value` that carries a derivative the rule would not see, or None.

    A value of an outer differentiation than the deepest among the positional arguments
    (depth < `top`) is carried by the rule's own operations; a compiling trace's constants
    (``nondiff``) carry none."""
    if isinstance(value, Tracer):
        leaves = (value,)
    elif isinstance(value, (tuple, list, dict)) or dataclasses.is_dataclass(value):
        try:
            leaves = flatten(value)[0]
        except PytreeError:   # an object the engine cannot traverse: the rule's business
            return None
    else:
        return None
    for leaf in leaves:
        if (isinstance(leaf, Tracer) and not getattr(leaf, "nondiff", False)
                and (top is None or leaf.level.depth >= top)):
            return leaf
    return None


def plain_buffers(args) -> tuple:
    """`args` with Const arguments' `ConstBuffer` views made plain ndarray views, for a user's
    rule (or easy_rule partials): in user code, `np.zeros_like` of a ConstBuffer is a traced
    buffer of the innermost trace, which the rule would return as its tangent or cotangent
    (a traced value of a finished level handed to the caller as the derivative)."""
    if not any(isinstance(a, ConstBuffer) for a in args):
        return tuple(args)
    return tuple(a.view(np.ndarray) if isinstance(a, ConstBuffer) else a for a in args)
