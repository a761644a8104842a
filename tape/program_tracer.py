"""The values of a compiling trace (tape/program.py) as the traced function sees them.

While `tape.compile` traces, every value is a `CompiledTracer`: Const arrays and the results of
`tape.inactive` functions (argmax, comparisons, masks) too, where eager mode hands the
function NumPy objects (a `ConstBuffer` view, an `np.int64` element, a plain boolean array).
A replay runs no Python code of the function, so whatever Python decides from such a value must
either be recorded as a guard or come out as eager mode's decision would:

- ``hash(v)`` of a nondiff 0-d value guards it and hashes the NumPy scalar (so ``d.get(c[0])``,
  ``c[0] in {0, 2}``, ``set(c)``, ``Counter(c)`` decide as in eager mode); of a nondiff array
  it raises ``unhashable type``, as an ndarray does. A differentiated value hashes by identity,
  as eager mode's tracers do.
- ``str``, ``format`` and ``repr`` of a nondiff value guard it and format the NumPy value. A
  repr of an array that eager mode might show as a ``ConstBuffer`` (a Const argument or
  something computed from it) cannot be told apart: the trace stops and the call runs eagerly.
- ``isinstance(v, cls)`` of a nondiff value answers for the NumPy value's class
  (``np.ndarray``, ``np.integer``, ...): `CompiledTracer.__class__` gives that class to the
  user's code. The engine's own modules (and NumPy's functions called from them) still see the
  tracer's class. ``type(v)`` cannot be changed: see docs/compile.md.
"""
from __future__ import annotations

import math
import operator
import sys

import numpy as np

from .tracer import ReverseTracerArray, _KEEP_ARRAY, _binary, _call_ufunc, _refuse


class GuardFailed(Exception):
    """A replayed program met a value that the traced Python code decided on differently."""


class Uncompilable(Exception):
    """The function does something a replay could not reproduce; it runs eagerly instead."""


# Packages whose code is the engine: they see tracers as tracers. NumPy's own Python code
# (np.isscalar, ...) answers for whoever called it.
_ENGINE_PACKAGES = ("tape", "ops", "kernels")


def _asked_by_user(frame) -> bool:
    """Whether `frame` (the Python code that hashes, formats or asks the class of a value)
    is the user's, looking through NumPy's frames and modules that only forward a call."""
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.partition(".")[0] == "numpy" or frame.f_globals.get("__hecate_transparent__"):
            frame = frame.f_back
            continue
        return module.partition(".")[0] not in _ENGINE_PACKAGES
    return False


# What eager mode's reverse tracers are called (their repr and error messages name it).
_EAGER_NAME = ReverseTracerArray.__name__


class CompiledTracer(ReverseTracerArray):
    """A value of a compiling trace. `nondiff` values carry no derivative; reading their
    contents from Python (rather than passing them to a primitive) records a guard."""

    __slots__ = ("_v", "nondiff", "const_argument")
    # The class name of eager mode's tracers, which their repr and some errors show.
    eager_name = _EAGER_NAME

    def __init__(self, value, trace, slot, nondiff=False):
        self._v = value
        self.level = trace
        self.slot = slot
        self.nondiff = nondiff
        self.const_argument = None

    @property
    def value(self):
        if self.nondiff:
            self.level.guard_value(self)
        return self._v

    @value.setter
    def value(self, v):
        self._v = v

    def peek_value(self):
        # A shape read of an inactive result (np.nonzero's) keeps its step, whose replay
        # checks the shape (`_ShapeChecked`).
        if self.slot in self.level.inactive_slots:
            self.level.shapes_read.add(self.slot)
        return self._v

    def primal_value(self):
        # `tape.primal` of any value of this trace: Python computes with its contents, so the
        # program checks them at each call (a differentiated value as much as a nondiff one).
        self.level.guard_value(self)
        return self._v

    def parameter_value(self):
        # A nondiff value passed as a primitive's parameter (an index) stays traced: the step
        # reads it from its slot at each replay instead of guarding it.
        return self if self.nondiff else self._v

    def _rebind(self, new):
        if self.const_argument is not None:
            raise Uncompilable(f"the function writes into {self.const_argument}, a Const "
                               "argument")
        if not (isinstance(new, CompiledTracer) and new.level is self.level):
            raise Uncompilable("a value of another differentiation was written into a buffer")
        self._v, self.slot, self.nondiff = new._v, new.slot, new.nondiff

    def __bool__(self):
        decision = bool(self._v)
        self.level.guard_truth(self, decision)
        return decision

    # Python numbers from nondiff values are decisions (guarded); from differentiated values
    # they are refused, as in eager mode.
    # `convert(value, *args)` gives what Python asked for (`complex(c[0])` of an np.float64,
    # which has no __complex__ of its own, `round(c[0], 1)`, `math.trunc(c[0])`).
    def _number(convert, refusal):
        def number(self, *args):
            if not self.nondiff:
                return refusal(self, *args)
            return convert(self.value, *args)
        return number

    def _no_method(name):   # what eager mode's tracer, which lacks `name`, raises
        def refuse(self, *args):
            raise TypeError(f"type {self.eager_name} doesn't define {name} method")
        return refuse

    __int__ = _number(int, _refuse("int(x)", "Use np.floor(x) or np.round(x)."))
    __index__ = _number(operator.index, _refuse("int(x)", "Use np.floor(x) or np.round(x)."))
    __float__ = _number(float, _refuse("float(x)", _KEEP_ARRAY))
    __complex__ = _number(complex, _refuse("complex(x)", _KEEP_ARRAY))
    __round__ = _number(round, ReverseTracerArray.__round__)
    __trunc__ = _number(math.trunc, _no_method("__trunc__"))
    item = _number(lambda v, *args: v.item(*args), _refuse("x.item()", _KEEP_ARRAY))
    as_integer_ratio = _number(lambda v: v.as_integer_ratio(), ReverseTracerArray.as_integer_ratio)
    tolist = _number(lambda v: v.tolist(), _refuse("x.tolist()", _KEEP_ARRAY))
    del _number, _no_method

    # Bitwise operators. Eager mode hands the function masks, argmax indices and Const arrays
    # as NumPy arrays, which take `~(x > 0)`, `(x > 0) & (x < 1)`, `k & 1`; here they are
    # tracers, which take them through the same ufuncs (a float operand raises TypeError,
    # and the call runs eagerly, which raises eager mode's own).
    __invert__ = lambda self: _call_ufunc(np.invert, self)   # noqa: E731
    __and__, __rand__ = _binary(np.bitwise_and)
    __or__, __ror__ = _binary(np.bitwise_or)
    __xor__, __rxor__ = _binary(np.bitwise_xor)
    __lshift__, __rlshift__ = _binary(np.left_shift)
    __rshift__, __rrshift__ = _binary(np.right_shift)

    def __array__(self, dtype=None, copy=None):
        if not self.nondiff:
            return ReverseTracerArray.__array__(self, dtype, copy)
        value = np.asarray(self.value)
        return value if dtype is None else value.astype(dtype)

    # -- Python's view of the value (see the module docstring) -------------------------------
    def _as_numpy(self) -> bool:
        """Whether Python code asking now sees the NumPy value (a nondiff value, asked by the
        user's code) rather than the tracer."""
        return self.nondiff and _asked_by_user(sys._getframe(2))

    @property
    def __class__(self):
        if self.nondiff and _asked_by_user(sys._getframe(1)):
            return type(self._v)
        return type(self)

    def __hash__(self):
        if not self._as_numpy():
            return object.__hash__(self)
        if isinstance(self._v, np.ndarray):   # unhashable: its type decides, not its contents
            return self._raising(hash, self._v)
        return hash(self.value)

    def __eq__(self, other):
        if self.nondiff and not self.level.alive:
            # Kept past its trace (a key of the user's dict or cache, hashed by value): it
            # compares as the NumPy value that eager mode would have kept there.
            return self._v == _kept_value(other)
        return ReverseTracerArray.__eq__(self, other)

    def __str__(self):
        if not self._as_numpy():
            return self._tracer_repr()
        return str(self.value)

    def __repr__(self):
        if not self._as_numpy():
            return self._tracer_repr()
        if isinstance(self._v, np.ndarray) and self.slot not in self.level.inactive_slots:
            # Eager mode shows a Const argument and what its methods make (c[1:], c.T) as
            # ConstBuffer(...), and what NumPy's functions make as array(...).
            self.level.raised = True
            raise Uncompilable("repr() of a Const array or a value computed from one: eager "
                               "mode may show it as a ConstBuffer")
        return repr(self.value)

    def __format__(self, spec):
        if not self._as_numpy():
            if spec:   # object.__format__'s error, naming eager mode's tracer
                raise TypeError(f"unsupported format string passed to "
                                f"{self.eager_name}.__format__")
            return str(self)
        return self._raising(format, self.value, spec)

    def _raising(self, fn, *args):
        """``fn(*args)``; an error it raises names the NumPy value's type, which may be
        ConstBuffer in eager mode: if the function catches it, the call runs eagerly."""
        try:
            return fn(*args)
        except Exception:
            self.level.raised = True
            raise

    def _tracer_repr(self) -> str:
        """The repr eager mode gives a tracer (differentiated values, and engine messages)."""
        return f"{self.eager_name}(level={self.level.depth}, {self.primal_value()!r})"


def _kept_value(x):
    """A nondiff value kept past its trace stands for its NumPy value."""
    if isinstance(x, CompiledTracer) and x.nondiff and not x.level.alive:
        return x._v
    return x
