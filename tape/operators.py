"""The arithmetic operators of a tracer (tape.tracer): binary and reflected, in place with
NumPy's casting rule, and ``**`` with the unary ufuncs NumPy's ndarray takes for some exponents.
Operators are the hottest entry point: they skip the NumPy protocol where they can."""
from __future__ import annotations

import numpy as np

from .batching import Batched
from .core import Primitive, Tracer, peek
from .errors import refuse_matrix_or_masked
from .rule_tables import UFUNC_PRIMITIVES, _call_ufunc, array_of_sequence


def _operator(ufunc, tracer, other, args):
    # Speed-up: operators are the hottest entry point, so they skip the NumPy protocol and,
    # with a constant on the other side, go straight to the tracer's level.
    kind = type(other)
    if kind not in _PYTHON_NUMBERS and kind is not np.ndarray and not isinstance(other, Tracer):
        if kind is list or kind is tuple:
            converted = array_of_sequence(other)
            args = tuple(converted if a is other else a for a in args)
            other = converted
        elif numpy_defers_to(other):
            return NotImplemented   # Python asks `other` next, as it would for an ndarray
    prim = UFUNC_PRIMITIVES.get(ufunc)
    python = is_python_number(tracer) and is_python_number(other)
    if prim is None:   # (an inactive ufunc: s // 1 of a traced Python float is a Python float)
        out = _call_ufunc(ufunc, *args)
        return _python_number(out) if python else out
    if python:
        prim = python_arithmetic(prim)
    if not isinstance(other, Tracer):
        if type(other) is Batched:
            return NotImplemented   # see _defers_to_batched
        if isinstance(other, np.ndarray) and type(other) is not np.ndarray:
            refuse_matrix_or_masked(other, f"the operator for np.{ufunc.__name__}")
        if tracer.level.alive:
            return tracer.level.process(prim, args, _NO_PARAMS)
    return prim(*args)


_PYTHON_NUMBERS = frozenset((bool, int, float, complex))
_MISSING = object()


def numpy_defers_to(other) -> bool:
    """Whether an ndarray's arithmetic operator returns NotImplemented to `other`, so that
    Python calls `other`'s reflected operator instead: `other` sets ``__array_ufunc__ = None``,
    or has no ``__array_ufunc__`` and a higher ``__array_priority__`` than an ndarray's 0
    (scipy.sparse matrices). NumPy's own ufunc would make an object array of such operands.

    >>> class Opaque:
    ...     __array_ufunc__ = None
    >>> numpy_defers_to(Opaque()), numpy_defers_to(np.ones(2)), numpy_defers_to([1.0])
    (True, False, False)
    """
    if isinstance(other, (np.ndarray, np.generic, list, tuple, Tracer, Batched)):
        return False
    array_ufunc = getattr(type(other), "__array_ufunc__", _MISSING)
    if array_ufunc is not _MISSING:
        return array_ufunc is None
    try:
        return float(getattr(other, "__array_priority__", -1e6)) > 0.0
    except (TypeError, ValueError):
        return False


def is_python_number(x) -> bool:
    """Whether `x` is a Python number, traced or not (a traced Python float follows Python's
    arithmetic, `python_arithmetic`).

    >>> is_python_number(2.0), is_python_number(np.float64(2.0))
    (True, False)
    """
    return type(peek(x)) in _PYTHON_NUMBERS

_PYTHON_ARITHMETIC: dict = {}


def python_arithmetic(prim: Primitive) -> Primitive:
    """`prim` as Python's arithmetic on Python numbers: a Python number, not a NumPy scalar.
    A traced Python float `s` stays weak under NumPy's promotion, as the float does: in
    ``(2 * s) * x`` a float32 `x` keeps float32 (2 * s as np.float64 would make it float64)."""
    variant = _PYTHON_ARITHMETIC.get(prim)
    if variant is not None:
        return variant
    impl, aug, fwd = prim.impl, prim.augmented_primal, prim.forward

    def python_impl(*args, **params):
        return _python_number(impl(*args, **params))

    def python_augmented(cfg, *args, **params):
        out, saved = aug(cfg, *args, **params)
        return _python_number(out), saved

    def python_forward(cfg, primals, tangents, **params):
        out, tangent = fwd(cfg, primals, tangents, **params)
        return _python_number(out), _python_number(tangent)
    variant = Primitive(prim.name, python_impl, aug and python_augmented, prim.reverse,
                        fwd and python_forward, prim.differentiable_rules, prim.multiple_results)
    variant.pure = prim.pure
    if hasattr(prim, "reverse_results"):   # what the sweep may assume of the reverse's results
        variant.reverse_results = prim.reverse_results
    _PYTHON_ARITHMETIC[prim] = variant
    return variant


def _python_number(value):
    return value.item() if isinstance(value, np.generic) else value


def _unary(ufunc):
    """-x, +x, abs(x): Python's own arithmetic on a traced Python number (`python_arithmetic`),
    the ufunc otherwise."""
    def op(self):
        prim = UFUNC_PRIMITIVES.get(ufunc)
        if prim is not None and is_python_number(self):
            return python_arithmetic(prim)(self)
        return _call_ufunc(ufunc, self)
    return op


def _defers_to_batched(values) -> bool:
    """Whether a tracer meets a batched tangent (an inner batch mode's rule): it declines, and
    Batched answers with outer tracers per direction (Primitive.__call__ says why)."""
    return any(type(v) is Batched for v in values)


def _binary(ufunc):
    def op(self, other):
        return _operator(ufunc, self, other, (self, other))

    def reflected(self, other):
        return _operator(ufunc, self, other, (other, self))
    return op, reflected


_NO_PARAMS: dict = {}


def _inplace(ufunc):
    def iop(self, other):
        if is_python_number(self):   # s += 1.0 rebinds s, as for a float
            return _operator(ufunc, self, other, (self, other))
        result = _call_ufunc(ufunc, self, other)
        got, mine = peek(result), peek(self)
        if type(mine) is np.ndarray and type(got) is np.ndarray and got.dtype is not mine.dtype:
            _check_same_kind(ufunc, mine, other, got)
        return self._write(result)
    return iop


# NumPy's ndarray `**` (fast_scalar_power in numpy/_core/src/multiarray/number.c) calls a unary
# ufunc for some constant exponents of a floating or complex array instead of np.power, and
# the values differ where np.power gives NaN: np.sqrt(inf+1j) is inf, np.reciprocal(inf+1j) is
# 0, np.square(1e300+1e300j) is -inf+inf j. Since NumPy 2.3 only a Python int -1 or 2 and a
# Python float 0.5 qualify; before, any integer or floating scalar (a 0-d array too) equal to
# -1, 0.5, 2 or 1 did. (Exponent 0 took ones and, before 2.3, integer arrays took np.square
# for 2: np.power gives the same values there.)
_POWER_SHORTCUT_LEGACY = np.lib.NumpyVersion(np.__version__) < "2.3.0"
_POWER_SHORTCUTS = {-1.0: np.reciprocal, 0.5: np.sqrt, 2.0: np.square, 1.0: np.positive}


def _power_shortcut(base, exponent):
    """The unary ufunc that NumPy's `base ** exponent` calls, or None where it calls np.power
    (and for a traced exponent, whose derivative needs np.power)."""
    value = peek(base)
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "fc":
        return None   # NumPy scalars, integer and boolean arrays take np.power
    if _POWER_SHORTCUT_LEGACY:
        if isinstance(exponent, Tracer) or isinstance(exponent, np.bool_):
            return None
        if isinstance(exponent, np.ndarray):
            if exponent.ndim or exponent.dtype.kind not in "iuf":
                return None
        elif not isinstance(exponent, (int, float, np.integer, np.floating)):
            return None
        try:
            return _POWER_SHORTCUTS.get(float(exponent))
        except OverflowError:   # an int beyond a C long
            return None
    if type(exponent) is int:
        return np.reciprocal if exponent == -1 else np.square if exponent == 2 else None
    return np.sqrt if type(exponent) is float and exponent == 0.5 else None


def _pow(self, other):
    shortcut = _power_shortcut(self, other)
    if shortcut is None:
        return _operator(np.power, self, other, (self, other))
    return _operator(shortcut, self, other, (self,))


def _ipow(self, other, _power=_inplace(np.power)):
    shortcut = _power_shortcut(self, other)
    if shortcut is None:
        return _power(self, other)
    return self._write(_call_ufunc(shortcut, self))   # the dtype stays: no cast to check


def check_cast(name: str, what: str, value, target, casting: str = "same_kind") -> None:
    """NumPy's casting rule for ufunc `name`'s `what` ("output", "input 0") from `value`'s dtype
    to `target`'s (an array or a dtype): a cast it refuses (a float into an integer `out`, any
    change under casting="no") raises its error rather than truncate or round."""
    got = np.result_type(peek(value))
    kept = target if isinstance(target, np.dtype) else np.result_type(peek(target))
    if got == kept or np.can_cast(got, kept, casting):
        return
    raise TypeError(f"Cannot cast ufunc '{name}' {what} from {got!r} to {kept!r} with casting "
                    f"rule '{casting}'")


def _check_same_kind(ufunc, target: np.ndarray, other, result: np.ndarray) -> None:
    """NumPy's ``a += b`` keeps a's dtype and refuses a result that does not cast 'same_kind'
    into it (a float into an integer buffer); a traced array refuses it too, with NumPy's own
    error, rather than truncate."""
    kept, got = target.dtype, result.dtype
    if got == kept or np.can_cast(got, kept, "same_kind"):
        return
    empty = (0, 0) if ufunc is np.matmul else (0,)
    theirs = peek(other)
    if isinstance(theirs, np.ndarray):
        theirs = np.empty(empty, theirs.dtype)
    ufunc(np.empty(empty, kept), theirs, out=np.empty(empty, kept))   # raises NumPy's error
    raise TypeError(f"Cannot cast ufunc '{ufunc.__name__}' output from {got!r} to {kept!r} "
                    "with casting rule 'same_kind'")
