"""The rule tables that `ops/` fills in and a tracer's operators, methods and NumPy protocols
look their primitive up in: `UFUNC_RULES` (keyed by NumPy ufunc), `FUNCTION_RULES` (keyed by
NumPy function, reached through `__array_function__`) and `METHOD_RULES` (keyed by name, for
what has no NumPy function: `__getitem__`, `__setitem__`, `astype`, `copy`), with lookups that
name what has no rule. The engine never imports a rule.
"""
from __future__ import annotations

import sys

import numpy as np

from .errors import PYTHON_ON_ELEMENTS_FIX, NonDifferentiableError

UFUNC_RULES: dict = {}
UFUNC_PRIMITIVES: dict = {}   # ufuncs whose keyword-free calls go straight to a primitive
FUNCTION_RULES: dict = {}
METHOD_RULES: dict = {}


def _missing(what: str):
    return NotImplementedError(
        f"hecate has no derivative rule for {what}; it cannot be applied to a traced value. "
        "Register one with tape.custom_rule, or mark it tape.inactive if it has no derivative.")


def _rule(table: dict, key, what: str):
    rule = table.get(key)
    if rule is None:
        raise _missing(what)
    return rule


def array_of_sequence(value):
    """A list or tuple as the array NumPy makes of an operand (one holding traced values
    becomes a traced array: np.array is Hecate's while something is traced); anything else as
    it is. The rules compute with arrays.

    >>> array_of_sequence([1.0, 2.0])
    array([1., 2.])
    """
    return np.array(value) if isinstance(value, (list, tuple)) else value


# The rule lookups name what is missing only when a rule is (speed-up: the message is not
# formatted on every call).
def _call_ufunc(ufunc, *args, **kw):
    rule = UFUNC_RULES.get(ufunc)
    if rule is None:
        if ufunc.types and all(t.replace("->", "").strip("O") == "" for t in ufunc.types):
            raise NonDifferentiableError(
                f"np.frompyfunc's ufunc `{ufunc.__name__}` was called on a traced value; it "
                "calls its Python function on plain elements (object arrays), so the "
                "derivative would be lost. " + PYTHON_ON_ELEMENTS_FIX)
        raise _missing(_ufunc_name(ufunc))
    for a in args:
        if type(a) is list or type(a) is tuple:
            args = tuple(array_of_sequence(a) for a in args)
            break
    return rule(*args, **kw)


def _ufunc_name(ufunc) -> str:
    """``numpy.sin``, or ``scipy.special.hyp2f1`` for the ufuncs that are not NumPy's (SciPy's
    report no module of their own)."""
    if getattr(np, ufunc.__name__, None) is ufunc:
        return f"numpy.{ufunc.__name__}"
    module = getattr(ufunc, "__module__", None) or "scipy.special"
    name = ufunc.__name__
    public = name.lstrip("_")
    if public != name and hasattr(sys.modules.get(module), public):
        name = public   # scipy.special.lambertw calls the private ufunc _lambertw
    return f"{module}.{name}"


def _call_function(func, *args, **kw):
    rule = FUNCTION_RULES.get(func)
    if rule is None:
        module = getattr(func, "__module__", None) or "numpy"
        implementation = getattr(func, "_implementation", None)
        if module.startswith("numpy.polynomial.") and implementation is not None:
            # np.polynomial's functions are compositions of array operations: traced through
            # (polyval2d dispatches on its arguments; chebval2d, a plain function, does not)
            return implementation(*args, **kw)
        raise _missing(f"{module}.{getattr(func, '__name__', func)}")
    return rule(*args, **kw)


def _call_method(name, *args, **kw):
    rule = METHOD_RULES.get(name)
    if rule is None:
        raise _missing(f"ndarray.{name}")
    return rule(*args, **kw)
