"""Registering rules: one mechanism for `ops/`, `kernels/` and users (named after EnzymeRules).

A rule set is three plain functions:

- ``augmented_primal(config, *args, **params) -> (primal, saved)``
- ``reverse(config, saved, cotangent) -> tuple`` (one cotangent per positional argument)
- ``forward(config, primals, tangents, **params) -> (primal, tangent)``

`config` (a `RuleConfig`) says which arguments are active, whether the caller needs the primal
and its derivative, the batch width and which arguments may be overwritten, so rules can skip
work. Users register rules with `custom_rule` (all three, checked at every call) or `easy_rule`
(only the partial derivatives of an elementwise function); `inactive` and `inactive_type` mark
functions and classes that carry no derivative.
"""
from __future__ import annotations

import inspect
from numbers import Number
from typing import Callable

import numpy as np

from .batching import Batched
from .core import Primitive, Tracer, is_complex, primal
from .easy_rule import easy_rule  # noqa: F401  (re-exported: rules from partial derivatives)
from .errors import RuleError
from .finite_differences import widened
from .inactive_code import _plain, _plain_one, inactive, inactive_type  # noqa: F401  (re-exported)
from .rule_calls import UserRule, plain_buffers
from .rule_tables import FUNCTION_RULES, METHOD_RULES, UFUNC_PRIMITIVES, UFUNC_RULES


def custom_rule(fn: Callable, *, augmented_primal: Callable, reverse: Callable,
                forward: Callable | None = None, differentiable: bool = False,
                multiple_results: bool = False, vectorized: bool = True,
                name: str | None = None, check_primal: bool = True) -> Primitive:
    """Give `fn` hand-written derivative rules; returns the differentiable function.

    Positional arguments are the differentiable inputs (arrays or numbers); keyword arguments
    are static parameters passed through to every rule. With ``differentiable=False`` (the
    default, as for opaque kernels) the rule is once differentiable: a second derivative through
    it raises `OnceDifferentiableError`. Set ``differentiable=True`` when the rules are written
    with NumPy operations, so that nested autodiff differentiates them.

    In batch mode the rules receive `Batched` tangents and cotangents (W of them stacked; they
    look like one array to NumPy calls) and ``config.width == W``. With ``vectorized=False``
    the rules are instead called once per direction, on plain arrays.

    What the rules return is checked (this costs a little, so only user rules pay it): a wrong
    structure, count, shape or dtype, or None for the cotangent of an active argument, raises
    `RuleError` naming the rule and the argument (a cotangent returned for an inactive
    floating-point argument is checked too, then dropped). A cotangent may be of a shape that
    broadcasts to its argument's (it is broadcast), and real for a complex argument; a
    tangent must have its primal's shape. With ``check_primal`` (the default) the first call
    on arguments of each shape and dtype also runs `fn` itself and compares: a rule whose
    primal disagrees with the function raises `RuleError` (kernels whose reference forward is
    costly and tested on its own turn this off; keyword parameters that are strings, ints,
    bools or None count as part of the signature, since they may choose a branch).

    Calls are checked too (`tape.rule_calls`): a value being differentiated passed as a keyword
    parameter or inside a container argument, and a write into a result that shares memory
    with an argument, raise `RuleError`. What `saved` holds is kept safe from later writes
    where it shares memory with the call's arguments (the record copies it); an array the
    rules reach otherwise (a closure's, a global) is theirs to copy if the caller may write
    into it before the reverse sweep: the engine cannot see what they read.

    >>> import numpy as np
    >>> from tape import autodiff, Reverse, Active
    >>> def cube(x): return x ** 3
    >>> cube = custom_rule(cube,
    ...     augmented_primal=lambda cfg, x: (x ** 3, x),
    ...     reverse=lambda cfg, x, g: (3 * x ** 2 * g,))
    >>> autodiff(Reverse, cube, Active, Active(2.0))
    ((12.0,),)
    """
    name = name or getattr(fn, "__name__", "custom_rule")
    rules = _CheckedRules(name, augmented_primal, reverse, forward, multiple_results,
                          vectorized, fn, check_primal)
    return UserRule(name, fn, rules.augmented_primal, rules.reverse,
                    rules.forward if forward is not None else None, differentiable,
                    multiple_results, describe_argument=rules.argument)


class _CheckedRules:
    """A user's rules, wrapped to refine the config and check what they return."""

    def __init__(self, name, augmented_primal, reverse, forward, multiple_results, vectorized,
                 fn=None, check_primal=False):
        self.name = name
        self.fn = fn
        self.check_primal = check_primal and fn is not None
        self.checked_signatures: set = set()   # argument shapes and dtypes whose primal agreed
        self.user_augmented, self.user_reverse, self.user_forward = (
            augmented_primal, reverse, forward)
        self.multiple_results = multiple_results
        self.vectorized = vectorized

    def _fail(self, rule, message):
        return RuleError(f"the {rule} rule of `{self.name}` {message}")

    def augmented_primal(self, cfg, *args, **params):
        args = plain_buffers(args)
        overwritten = _overwritten(cfg, args)
        if overwritten != cfg.overwritten:
            cfg = cfg.replace(overwritten=overwritten)
        result = self.user_augmented(cfg, *args, **params)
        if type(result) is not tuple or len(result) != 2:
            raise self._fail("augmented_primal", f"must return a pair (primal, saved); it "
                              f"returned {_describe(result)}")
        out, saved = result
        out = self._check_primal("augmented_primal", out, cfg)
        self._check_agrees_with_function("augmented_primal", out, args, params)
        # The reverse rule gets the config its augmented_primal saw, and the argument shapes
        # against which its cotangents are checked.
        specs = tuple((_shape(x), is_complex(x), _is_value(x) and _is_inexact(x))
                      for x in args)
        return out, (cfg, specs, saved)

    def reverse(self, cfg, saved, g):
        cfg, specs, saved = saved
        width = _width(g if self.multiple_results else (g,))
        if width == 1:
            return self._checked_reverse(cfg, specs, saved, g)
        cfg = cfg.replace(width=width)
        if self.vectorized:
            return self._checked_reverse(cfg, specs, saved, g)
        one = cfg.replace(width=1)
        per_direction = [self._checked_reverse(one, specs, saved, _direction(g, w))
                         for w in range(width)]
        return tuple(None if all(c[i] is None for c in per_direction) else
                     _stack([c[i] if c[i] is not None else np.zeros(specs[i][0])
                             for c in per_direction])
                     for i in range(len(specs)))

    def _checked_reverse(self, cfg, specs, saved, g):
        cts = self.user_reverse(cfg, saved, g)
        n = len(specs)
        if not isinstance(cts, (tuple, list)) or len(cts) != n:
            got = (f"a {type(cts).__name__} of length {len(cts)}"
                   if isinstance(cts, (tuple, list)) else _describe(cts))
            raise self._fail("reverse", f"must return a tuple of {n} cotangents (one per "
                              f"positional argument, None for inactive ones); it returned {got}")
        out = []
        for i, (c, (shape, complex_arg, inexact), active) in enumerate(zip(cts, specs,
                                                                          cfg.active)):
            if not active:
                if c is not None and inexact:
                    self._check_dropped_cotangent(i, c, shape, complex_arg)
                out.append(None)
                continue
            if c is None:
                raise self._fail("reverse", f"returned None as the cotangent of "
                                  f"{self.argument(i)}, which is active (differentiated); "
                                  f"return its cotangent, an array of shape {shape} (zeros if "
                                  "the result truly does not depend on it)")
            out.append(self._checked_cotangent(i, c, shape, complex_arg))
        return tuple(out)

    def _check_dropped_cotangent(self, i, c, shape, complex_arg):
        """A cotangent of inactive argument i is dropped, but one that could be no cotangent
        of it at all is a bug that would otherwise surface only when it is differentiated.
        One of a shape the argument broadcasts to (not yet summed) is let through."""
        if _is_value(c) and _broadcasts_to(shape, _shape(c)):
            shape = _shape(c)
        self._checked_cotangent(i, c, shape, complex_arg, broadcast=False, note=(
            f" ({self.argument(i)} is not differentiated in this call, so its cotangent is "
            "dropped; return None for it when config.active[i] is False)"))

    def _checked_cotangent(self, i, c, shape, complex_arg, broadcast=True, note=""):
        """The cotangent `c` of argument i, broadcast to its shape, or a RuleError."""
        if not _is_value(c):
            raise self._fail("reverse", f"returned a {type(c).__name__} as the cotangent "
                              f"of {self.argument(i)}; expected an array or a number of "
                              f"shape {shape}{note}")
        if not _is_inexact(c):
            raise self._fail("reverse", f"returned a cotangent of dtype {_dtype(c)} for "
                              f"{self.argument(i)}; a cotangent is a floating-point "
                              f"(or complex) array like its argument{note}")
        if is_complex(c) and not complex_arg:
            raise self._fail("reverse", f"returned a complex cotangent for "
                              f"{self.argument(i)}, which is real; a real argument's "
                              f"cotangent is real (take the real part){note}")
        cshape = _shape(c)
        if cshape != shape:
            if not _broadcasts_to(cshape, shape):
                raise self._fail(
                    "reverse", f"returned a cotangent of shape {cshape} for "
                    f"{self.argument(i)}, whose shape is {shape}; a cotangent has its "
                    "argument's shape (or one that broadcasts to it: sum over broadcast "
                    f"axes){note}")
            if broadcast:
                c = _broadcast(c, shape)
        return c

    def argument(self, i) -> str:
        """`argument 1 (`y`)`, named after the function's own parameter where it has one."""
        try:
            params = list(inspect.signature(self.fn).parameters.values())
        except (TypeError, ValueError):
            params = []
        if i < len(params) and params[i].kind in (params[i].POSITIONAL_ONLY,
                                                  params[i].POSITIONAL_OR_KEYWORD):
            return f"argument {i} (`{params[i].name}`)"
        return f"argument {i}"

    def _check_agrees_with_function(self, rule, out, args, params):
        """The first time the rule runs on arguments of given shapes and dtypes, its primal is
        compared with the function's own result: a rule that computes something else would
        make every derivative wrong. Skipped for values of outer levels (calling the
        function there would record it) and when the primal is not computed."""
        if (not self.check_primal or out is None or _has_traced(args)
                or _has_traced(params.values())):
            return
        signature = tuple((_shape(a), str(getattr(a, "dtype", type(a).__name__)))
                          for a in args) + tuple(
            (k, v if isinstance(v, _DISCRETE) else None) for k, v in sorted(params.items()))
        if signature in self.checked_signatures:
            return
        want = self.fn(*args, **params)
        got_leaves = out if self.multiple_results else (out,)
        want_leaves = want if self.multiple_results else (want,)
        if (self.multiple_results and isinstance(want, (tuple, list))
                and len(want_leaves) != len(got_leaves)):
            raise self._fail(rule, f"returned {len(got_leaves)} results, but `{self.name}` "
                              f"itself returns {len(want_leaves)} on these arguments; the "
                              "rule's primal must be the function's result")
        wide_leaves = None
        for k, (got, expected) in enumerate(zip(got_leaves, want_leaves)):
            problem = _disagreement(got, expected)
            if problem and wide_leaves is None:
                wide_leaves = self._widened_results(args, params)
            if problem and k < len(wide_leaves):
                # In float16 or float32 the function's own result may be the less accurate
                # one (a long float16 running sum): a primal that agrees with the function
                # run in float64, rounded to the primal's dtype, is the function's result.
                problem = _disagreement(got, _rounded_like(wide_leaves[k], got)) and problem
            if problem:
                which = f" (result {k})" if self.multiple_results else ""
                raise self._fail(rule, f"returned a primal{which} that disagrees with "
                                  f"`{self.name}` itself on these arguments: {problem}. The "
                                  "rule's primal must be the function's result")
        self.checked_signatures.add(signature)

    def _widened_results(self, args, params) -> tuple:
        """The function's results on float64 (complex128) copies of its narrower floating
        arguments, as a tuple of leaves; empty when no argument is narrower or the function
        does not run on the copies."""
        wide = [widened(a) if isinstance(a, (np.ndarray, np.generic)) else a for a in args]
        if all(w is a for w, a in zip(wide, args)):
            return ()
        try:
            with np.errstate(all="ignore"):
                out = self.fn(*wide, **params)
        except Exception:       # the function's own business: the narrow result stands
            return ()
        return tuple(out) if self.multiple_results and isinstance(out, (tuple, list)) \
            else (out,)

    def forward(self, cfg, primals, tangents, **params):
        primals = plain_buffers(primals)
        overwritten, width = _overwritten(cfg, primals), _width(tangents)
        if overwritten != cfg.overwritten or width != cfg.width or cfg.mode != "forward":
            cfg = cfg.replace(overwritten=overwritten, mode="forward", width=width)
        if cfg.width == 1 or self.vectorized:
            return self._checked_forward(cfg, primals, tangents, params)
        one = cfg.replace(width=1)
        runs = [self._checked_forward(one, primals, _direction(tangents, w), params)
                for w in range(cfg.width)]
        out = runs[0][0]
        if not self.multiple_results:
            return out, _stack_tangents([t for _, t in runs], out)
        return out, tuple(_stack_tangents([t[k] for _, t in runs], o)
                          for k, o in enumerate(out))

    def _checked_forward(self, cfg, primals, tangents, params):
        result = self.user_forward(cfg, primals, tangents, **params)
        if type(result) is not tuple or len(result) != 2:
            raise self._fail("forward", f"must return a pair (primal, tangent); it returned "
                              f"{_describe(result)}")
        out, tan = result
        self._check_agrees_with_function("forward", out, primals, params)
        if not self.multiple_results:
            out = self._check_primal("forward", out, cfg)
            return out, self._check_tangent(tan, out, cfg, "")
        if out is None and not cfg.needs_primal and isinstance(tan, (tuple, list)):
            out = (None,) * len(tan)
        out = self._check_primal("forward", out, cfg)
        if tan is None and not cfg.needs_shadow:
            tan = (None,) * len(out)
        if not isinstance(tan, (tuple, list)) or len(tan) != len(out):
            raise self._fail("forward", f"returned {len(out)} primals, so it must return a "
                              f"tuple of {len(out)} tangents (None for a zero one); it returned "
                              f"{_describe(tan)}")
        return out, tuple(self._check_tangent(t, o, cfg, f" of result {k}")
                          for k, (t, o) in enumerate(zip(tan, out)))

    def _check_primal(self, rule, out, cfg):
        if self.multiple_results:
            if not isinstance(out, (tuple, list)):
                raise self._fail(rule, f"must return a tuple of results as its primal "
                                 f"(multiple_results=True); it returned {_describe(out)}")
            return tuple(self._check_primal_one(rule, o, cfg, f" {k}") for k, o in
                         enumerate(out))
        return self._check_primal_one(rule, out, cfg, "")

    def _check_primal_one(self, rule, out, cfg, which):
        if out is None:
            if cfg.needs_primal:
                raise self._fail(rule, f"returned None as its primal{which}, but the caller "
                                 "needs it (config.needs_primal is True)")
            return out
        if isinstance(out, (tuple, list)) and not self.multiple_results:
            raise self._fail(rule, f"returned a {type(out).__name__} as its primal; pass "
                              "multiple_results=True to custom_rule for a function with "
                              "several results")
        if not _is_value(out):
            raise self._fail(rule, f"returned a {type(out).__name__} as its primal{which}; "
                              "expected an array or a number")
        return out

    def _check_tangent(self, tan, out, cfg, which):
        if tan is None:
            return None
        if not _is_value(tan):
            raise self._fail("forward", f"returned a {type(tan).__name__} as the tangent"
                              f"{which}; expected an array or a number")
        if not _is_inexact(tan):
            raise self._fail("forward", f"returned a tangent{which} of dtype {_dtype(tan)}; a "
                              "tangent is a floating-point (or complex) array like its primal")
        if out is None:
            return tan
        if _shape(tan) != _shape(out):
            raise self._fail("forward", f"returned a tangent{which} of shape {_shape(tan)} "
                              f"for a primal of shape {_shape(out)}; a tangent has its "
                              "primal's shape")
        if is_complex(tan) and not is_complex(out):
            raise self._fail("forward", f"returned a complex tangent{which} for a real "
                              "primal")
        return tan


# -- small helpers on values: arrays, numbers, tracers and Batched alike ---------------------

def _shape(x) -> tuple:
    shape = getattr(x, "shape", None)
    return tuple(shape) if shape is not None else np.shape(x)


def _dtype(x):
    dtype = getattr(x, "dtype", None)
    return np.dtype(dtype) if dtype is not None else np.result_type(x)


def _is_inexact(x) -> bool:
    return _dtype(x).kind in "fc"


# Keyword parameter values that may choose a branch of the function (`mode="tanh"`): each one
# is a signature of its own for the primal check.
_DISCRETE = (str, bool, int, type(None))


def _has_traced(values) -> bool:
    return any(isinstance(v, (Tracer, Batched)) for v in values)


def _disagreement(got, want) -> str | None:
    """Why the rule's primal `got` is not the function's `want`, or None if it agrees (within
    a tolerance fit for the precision: the rule may compute it another way)."""
    if want is None or got is None:
        return None
    if _shape(got) != _shape(want):
        return f"shape {_shape(got)}, expected {_shape(want)}"
    try:
        got_value, want_value = np.asarray(primal(got)), np.asarray(primal(want))
    except (TypeError, ValueError):
        return None   # a device array: left to the rule's own tests
    if want_value.dtype.kind in "fc" and got_value.dtype.kind not in "fc":
        return f"dtype {got_value.dtype}, expected {want_value.dtype}"
    if got_value.dtype.kind not in "fc" or want_value.dtype.kind not in "fc":
        return None if np.array_equal(got_value, want_value) else "different values"
    rtol = 1e-6 if np.finfo(np.result_type(got_value, want_value)).bits >= 64 else 1e-3
    scale = float(np.max(np.abs(want_value), initial=0.0)) if want_value.size else 0.0
    if np.allclose(got_value, want_value, rtol=rtol, atol=rtol * scale, equal_nan=True):
        return None
    difference = float(np.max(np.abs(got_value - want_value)))
    return f"largest difference {difference:.3g} (values up to {scale:.3g})"


def _rounded_like(want, got):
    """`want` (a result of the widened function) in `got`'s dtype, where both are arrays or
    scalars of floating dtypes; else `want` as it is."""
    dtype = getattr(got, "dtype", None)
    if dtype is None or dtype.kind not in "fc" or not isinstance(want, (np.ndarray, np.generic)):
        return want
    with np.errstate(all="ignore"):
        return np.asarray(want).astype(dtype)


def _is_value(x) -> bool:
    return (isinstance(x, (Number, np.ndarray, np.generic, Tracer, Batched))
            or hasattr(x, "__cuda_array_interface__"))


def _describe(x) -> str:
    if isinstance(x, (tuple, list)):
        return f"a {type(x).__name__} of length {len(x)}"
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return f"a {type(x).__name__} of shape {_shape(x)}"
    return f"a {type(x).__name__}"


def _broadcasts_to(shape: tuple, target: tuple) -> bool:
    try:
        return np.broadcast_shapes(shape, target) == target
    except ValueError:
        return False


def _broadcast(c, shape):
    if isinstance(c, (Tracer, Batched)):
        return np.broadcast_to(c, shape)
    return np.broadcast_to(c, shape).copy()   # a writable array: it may become a result


def _width(values) -> int:
    for v in values:
        if isinstance(v, Batched):
            return v.width
    return 1


def _direction(values, w):
    if isinstance(values, Batched):
        return values.data[w]
    if isinstance(values, (tuple, list)):
        return type(values)(_direction(v, w) for v in values)
    return values


def _stack(values):
    return Batched(np.stack(values))


def _stack_tangents(tangents, out):
    if all(t is None for t in tangents):
        return None
    return _stack([t if t is not None else np.zeros_like(primal(out)) for t in tangents])


def _overwritten(cfg, args) -> tuple:
    return tuple(not a and _may_be_written(x) for a, x in zip(cfg.active, args))


def _may_be_written(x) -> bool:
    """Whether a constant argument's memory could change before the reverse sweep."""
    if isinstance(x, (Number, np.generic, str, bytes, type(None))):
        return False
    if isinstance(x, np.ndarray):
        return bool(x.flags.writeable)
    if isinstance(x, tuple):
        return any(_may_be_written(v) for v in x)
    return True   # tracers of outer levels, device arrays, mutable containers


# --------------------------------------------------------------------------------------------
# Routing NumPy entry points to primitives (used by ops/)


def register_ufunc(ufunc, rule: Callable, primitive: Primitive | None = None) -> Callable:
    """Route `ufunc(traced, ...)` to `rule` (used by ops/). When `primitive` is given, calls
    without keyword arguments go straight to it (speed-up: operators and plain ufunc calls)."""
    UFUNC_RULES[ufunc] = rule
    if primitive is not None:
        UFUNC_PRIMITIVES[ufunc] = primitive
    else:
        UFUNC_PRIMITIVES.pop(ufunc, None)
    return rule


def register_function(func, rule: Callable) -> Callable:
    """Route `func(traced, ...)` (a NumPy function reached by `__array_function__`) to `rule`."""
    FUNCTION_RULES[func] = rule
    return rule


def register_method(name: str, rule: Callable) -> Callable:
    """Route the ndarray method or operator `name` of tracers to `rule`."""
    METHOD_RULES[name] = rule
    return rule
