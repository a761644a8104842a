"""Errors raised by the engine. Each one says what was wrong and where."""
import inspect
import sys

import numpy as np

from .library_calls import (RANDOM_DRAWS, called_method, library_caller, outside_engine,
                            package_of, scipy_refusal)


class HecateError(Exception):
    """Base class of the engine's own errors."""


class ActivityError(HecateError, TypeError):
    """A wrong activity annotation or a shadow that does not match its primal."""


class ConstWriteError(ActivityError):
    """A differentiated value written into a `Const` argument (its derivative would be lost)."""


class PytreeError(HecateError, TypeError):
    """An object inside an argument that the engine does not know how to traverse."""


class EscapedTracerError(HecateError, RuntimeError):
    """A traced value was used after the differentiation that created it had finished."""


class OnceDifferentiableError(HecateError, NotImplementedError):
    """A derivative of an opaque (once-differentiable) rule was requested."""

    def __init__(self, name: str):
        super().__init__(
            f"`{name}` is once differentiable: its rules are opaque kernels, so a second "
            "derivative (nested autodiff, hvp) through it is not available. A rule written "
            "with differentiable NumPy operations can nest: custom_rule(..., "
            "differentiable=True).")
        self.op = name


class RuleError(HecateError, TypeError):
    """A user rule (custom_rule, easy_rule) returned something of the wrong structure, count
    or shape. The message names the rule, the argument and what was expected."""


class NonDifferentiableError(HecateError, TypeError):
    """An operation without a derivative was applied to an active value in a way that would
    silently drop the derivative."""


_GENERATOR = inspect.CO_GENERATOR


_SUBCLASS_MODULES = {
    "numpy.ma": ("masked arrays are not differentiated (no derivative rule knows the mask, so "
                 "the derivative would be lost). Keep x a plain array and select with a boolean "
                 "mask: np.where(mask, 0.0, x) or x[~mask]"),
    "numpy.matrixlib": ("np.matrix is not differentiated (its * is a matrix product and ** a "
                        "matrix power). Keep a plain array and write the product with @"),
}


# What to do instead of np.vectorize / np.frompyfunc, which call Python on plain elements.
PYTHON_ON_ELEMENTS_FIX = ("Call the function on the whole array instead (written with NumPy "
                          "operations it usually works as is), or loop in Python and collect "
                          "the traced results with np.array([...]) or np.stack")


class TracerConversionError(NonDifferentiableError):
    """A traced value was asked to become a plain NumPy array (its `__array__`). While something
    is traced, the NumPy functions that take lists (np.array, np.mean, ...) catch this and build
    a traced array instead (ops/lists.py).

    The message names the NumPy or SciPy function that asked, found on the stack only when the
    message is read (a conversion that ops/lists.py catches pays nothing for it)."""

    def __init__(self, message: str, frame=None):
        super().__init__(message)
        self.message, self.frame = message, frame
        # A generator's frame forgets its caller once it stops (np.vectorize with a signature
        # converts its arguments in a generator expression): keep the caller it has now.
        self.resumed_by = (frame.f_back if frame is not None and frame.f_code.co_flags & _GENERATOR
                           else None)

    def __str__(self):
        caller = library_caller(self.frame, self.resumed_by)
        if caller is not None and caller[0] == "scipy":
            return scipy_refusal(caller[1], caller[2])
        if caller is not None and caller[1] in _SUBCLASS_MODULES:
            return (f"{caller[1]}.{caller[2]} was called on a traced value; "
                    f"{_SUBCLASS_MODULES[caller[1]]}")
        if caller is not None and caller[2].startswith("vectorize"):
            return ("np.vectorize calls its function on plain elements, so the derivative "
                    "would be lost. " + PYTHON_ON_ELEMENTS_FIX)
        if caller is None:
            call, method = called_method(self.frame)
            if method == "dot":
                return (f"`{call}` calls a method of a plain NumPy array with a traced value, "
                        "and NumPy's array methods convert their arguments to plain arrays, "
                        "so the derivative would be lost. Use the function or the operator, "
                        "which Hecate differentiates: `A @ B` or `np.dot(A, B)` for "
                        "`A.dot(B)`.")
            if method is not None and method not in RANDOM_DRAWS and hasattr(np.ndarray, method):
                function = (f"np.{method}(...), which Hecate differentiates, "
                            if callable(getattr(np, method, None)) else "NumPy's functions ")
                return (f"`{call}` calls the method `{method}` of a plain NumPy array with a "
                        "traced value, and NumPy's array methods convert their arguments to "
                        "plain arrays, so the derivative would be lost. Call "
                        f"{function}instead, on arrays made from the traced values "
                        "(np.zeros_like(x) for a buffer to write into).")
            if method in RANDOM_DRAWS:
                lost = (f"`{call}` draws random numbers with a traced parameter; NumPy's random "
                        "generators convert their parameters to plain arrays, so the "
                        "derivative would be lost. ")
                if RANDOM_DRAWS[method] is None:
                    return lost + (f"A {method} draw is no simple transform of a "
                                   "parameter-free one: pass its parameters as plain values "
                                   "(tape.primal(x)) where they need no derivative.")
                return lost + ("Draw standard noise and transform it, which Hecate "
                               "differentiates (the pathwise derivative for the drawn noise): "
                               + RANDOM_DRAWS[method])
        where = f" (in {caller[1]}.{caller[2]})" if caller is not None else ""
        return (self.message + where + " This also happens with np.float64(x), np.int64(x) "
                "or plain_array[i] = x (a plain array cannot hold a traced value: allocate it "
                "with np.zeros_like(x)). Lists and tuples of traced values can be given to "
                "numpy.array, numpy.mean, numpy.stack and the other numpy.* functions Hecate "
                "differentiates, but not to a ufunc (np.sin([a, b])) or to a function imported "
                "by name before differentiating (`from numpy import mean`): build the array "
                "first, np.array([a, b]).")


class PythonNumberError(NonDifferentiableError):
    """A traced value was asked to become a plain Python number (float(x), int(x), x.item()).

    Where SciPy's code asked (scipy.integrate.quad calls float() on what the integrand
    returns), the message names the SciPy function and what to use instead; that is looked up
    only when the message is read, so a refusal that is caught costs nothing more."""

    def __init__(self, message: str, frame=None, call: str = ""):
        super().__init__(message)
        self.message, self.frame, self.call = message, frame, call

    def __str__(self):
        frame = outside_engine(self.frame)
        # Only a conversion SciPy's own code asked for: the user's float(x) (math.exp(x)) is
        # fixed where it is written, whatever called the user's code.
        if frame is not None and package_of(frame) == "scipy":
            caller = library_caller(frame)
            if caller is not None and caller[0] == "scipy":
                return scipy_refusal(caller[1], caller[2], f" (it asked for {self.call})"
                                      if self.call else "")
        return self.message


# Solvers whose every iterate is a smooth function of the previous one and of the traced values
# (Newton, secant and Halley steps): differentiating the last iterate gives the implicit
# derivative to within the convergence of the iterations, which are followed.
_FOLLOWED_SOLVERS = ("newton",)


def refuse_solver_decision(frame, value) -> None:
    """Raise if the code that asked for a comparison (or another function without derivative)
    of the traced `value` is SciPy's optimiser or root-finder code, or NumPy code it called.
    `frame` is the innermost frame of the call; the engine's own frames are skipped.

    Such a solver only compares the traced values and builds its result from plain numbers
    (golden-section search), or carries them through whichever steps it happened to take last
    (brent), so the derivative of its result would be silently zero or depend on where the
    iterations stopped. Decisions in the user's own code, the solver's callbacks included,
    stay allowed."""
    frame = outside_engine(frame)
    if frame is None or package_of(frame) not in ("scipy", "numpy"):
        return   # the usual case, `np.where(x > 0, ...)` in the user's code
    caller = library_caller(frame)
    if caller is None or caller[1] != "scipy.optimize" or caller[2] in _FOLLOWED_SOLVERS:
        return
    raise NonDifferentiableError(
        f"scipy.optimize.{caller[2]} compared a traced value ({np.result_type(value)} of shape "
        f"{np.shape(value)}) to choose its next step: Hecate does not differentiate through a "
        "solver's iterations (the derivative of their result would be zero, or depend on "
        "where they stopped). Solve with plain values (tape.primal(x)) and give the solution "
        "its derivative by the implicit function theorem in a tape.custom_rule: for z* with "
        "g(z*, x) = 0, dz*/dx = -(dg/dz)^-1 dg/dx.")


class NaNError(HecateError, FloatingPointError):
    """NaN-check mode (`set_nan_check(mode)`) found a NaN in a cotangent (or tangent).

    Attributes: `op` (the primitive's name), `index` (its record on the tape, counting from 0 in
    execution order), `total` (the number of records; None in forward mode), `argument` (the
    argument whose cotangent holds the NaN; None when it came in with the op's own cotangent)
    and `incoming` (True when the NaN was already in what reached the rule, False when the rule
    made it).
    """

    def __init__(self, op: str, index: int, total, argument, *, incoming: bool,
                 forward: bool = False):
        self.op, self.index, self.total = op, index, total
        self.argument, self.incoming, self.forward = argument, incoming, forward
        super().__init__(self._message())

    def _message(self) -> str:
        if self.forward:
            where = f"`{self.op}` (op {self.index} of the forward pass, counting from 0)"
            made = ("one of its input tangents already held NaN" if self.incoming else
                    "its input tangents were finite, so the rule made it")
            return (f"NaN check: the tangent computed by {where} holds NaN; {made}. "
                    "Strong zero (set_strong_zero(mode)) turns 0 * inf into 0")
        where = (f"`{self.op}` (record {self.index} of {self.total} on the tape, counting from 0 "
                 "in execution order)")
        if self.incoming:
            return (f"NaN check: the cotangent reaching {where} already holds NaN: it came with "
                    "the seed or from adding the cotangents of several uses of the result "
                    "(inf + -inf)")
        return (f"NaN check: the reverse rule of {where} returned a NaN cotangent for its "
                f"argument {self.argument}; the cotangent it received was finite, so the rule "
                "made the NaN (often 0 * inf from a branch that was not taken: strong zero, "
                "set_strong_zero(mode), turns that into 0)")


class BatchingFallback(TypeError):
    """Raised inside a rule that cannot take batched (batch-mode) values; the trace catches it
    and runs the rule once per direction instead."""


def reraise_hidden_cause(error: BaseException | None) -> None:
    """Raise the engine's own error where NumPy's C code replaced it with a vaguer one.

    ``buffer[i] = x`` with a traced ``x`` and a plain ``buffer`` asks the tracer for a float;
    the tracer refuses with a `NonDifferentiableError` that names the fix, but NumPy's
    item assignment turns any error of a sequence-like value into ``ValueError: setting an
    array element with a sequence.``, keeping the explanation only as ``__cause__``. A trace
    that ends on such an error raises the explanation instead, with the traceback of the
    user's line. Anything else is left alone (returns None).

    >>> try:
    ...     try:
    ...         raise NonDifferentiableError("allocate with np.zeros_like(x)")
    ...     except NonDifferentiableError as cause:
    ...         raise ValueError("setting an array element with a sequence.") from cause
    ... except ValueError as hidden:
    ...     reraise_hidden_cause(hidden)
    Traceback (most recent call last):
        ...
    tape.errors.NonDifferentiableError: allocate with np.zeros_like(x)
    """
    cause = getattr(error, "__cause__", None)
    if (type(error) is ValueError and isinstance(cause, NonDifferentiableError)
            and "setting an array element" in str(error)):
        again = type(cause)(*cause.args)
        again.__dict__.update(cause.__dict__)   # PythonNumberError's frame: SciPy named
        raise again.with_traceback(error.__traceback__) from None


def refuse_matrix_or_masked(value, where: str, error: type = NonDifferentiableError) -> None:
    """Refuse an np.matrix or numpy.ma masked array that meets a traced value (`where` names
    the operation or the argument).

    Their operators mean other things than an ndarray's (a matrix's ``*`` is a matrix product,
    ``**`` a matrix power) and a masked array's mask is not part of any derivative rule, so
    the result or its derivative would be silently wrong (the masked entries' data would
    count). Anything else, plain arrays included, passes.

    >>> refuse_matrix_or_masked(np.ones(2), "np.multiply")
    >>> refuse_matrix_or_masked(np.matrix(np.eye(2)), "np.multiply")
    Traceback (most recent call last):
        ...
    tape.errors.NonDifferentiableError: np.multiply: an np.matrix in a differentiated computation; ...
    """
    if type(value) is np.ndarray or not isinstance(value, np.ndarray):
        return
    if isinstance(value, np.matrix):
        raise error(
            f"{where}: an np.matrix in a differentiated computation; a matrix's * is a matrix product and "
            "** a matrix power, which a traced array does not follow. Convert it with "
            "np.asarray(A) and write the product with @ (or np.dot)")
    masked = sys.modules.get("numpy.ma")   # loaded by whoever made a masked array
    if masked is not None and isinstance(value, masked.MaskedArray):
        raise error(
            f"{where}: a numpy.ma masked array in a differentiated computation; its mask is not part of "
            "any derivative rule, so the masked entries' data would count. Pass the data as a "
            "plain array (m.filled(0.0), or m.data with the mask m.mask) and select with the "
            "boolean mask: np.where(mask, 0.0, x) or x[~mask]")
