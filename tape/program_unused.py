"""Steps of a compiled program (tape/program_code.py) whose results nothing reads, that must run
all the same: eager mode runs every step, and some raise for some values.

- `ALWAYS`: a step that may raise whatever the error settings are: a factorization, inverse or
  solve (LinAlgError for a singular or indefinite matrix), an index taken from a value of the
  call (out of bounds), a step on integers (``c ** -1``), a `tape.inactive` function, a step
  the function ran under its own ``np.errstate(...)`` or warning filters.
- `WARNS`: a step on floating-point values that may only warn (overflow, a log of a negative
  number, a division by zero). It runs when the caller's settings turn such warnings into
  errors (`warnings_raise`: ``np.seterr(all="raise")``, ``warnings.simplefilter("error")``);
  otherwise it is dropped, and its warning is missing (docs/compile.md). An unused gate in a
  model (a matmul and a sigmoid) costs its full price at every call if it always runs.
- None: a fresh buffer, or a primitive that only moves or selects values (`_QUIET`) with
  constant parameters: it can neither raise nor warn.

>>> warnings_raise()
False
>>> with np.errstate(over="raise"):
...     warnings_raise()
True
"""
from __future__ import annotations

import warnings

import numpy as np

from .program import FRESH, INACTIVE, DynamicParams

ALWAYS = "always"
WARNS = "warns"

_QUIET = frozenset((
    "broadcast_to", "concatenate", "conjugate", "copy", "flip", "getitem", "imag", "negative",
    "pad", "permute", "positive", "real", "reshape", "roll", "split", "stack", "transpose",
    "tril", "triu", "where"))
"""Primitives that neither raise nor warn on operands of the traced shapes and dtypes, with
constant parameters: they move or select values (a constant index was checked by the trace)
and compute nothing that can overflow, divide by zero or be invalid (unless told to cast
to a `dtype`)."""

_LINALG = frozenset(("cholesky", "cofactor", "det", "eig", "eigh", "eigvals", "eigvalsh", "inv",
                     "lstsq", "pinv", "qr", "slogdet", "solve", "svd", "svdvals"))
"""Factorizations, inverses and solves: LinAlgError for some matrices (singular, not positive
definite, no convergence)."""


def unused_step_runs(step, in_context: bool, values: dict) -> str | None:
    """Whether a step whose results nothing reads runs: `ALWAYS`, `WARNS` (when warnings
    raise) or None. `values`: slot -> (type, shape, dtype), as `CompileTrace.values`."""
    kind, fn, cfg, ins, consts, params, outs = step
    if kind == FRESH:
        return None
    if in_context or kind == INACTIVE or type(params) is DynamicParams:
        return ALWAYS
    casts = type(params) is dict and params.get("dtype") is not None   # NaN to int warns
    if fn.name in _QUIET and not casts:
        return None
    if fn.name in _LINALG:
        return ALWAYS
    operands = [values[s][2] for s in ins if s is not None] + [
        getattr(c, "dtype", None) for c in consts if c is not None]
    if all(d is None or d.kind in "fc" for d in operands):
        return WARNS
    return ALWAYS


def warnings_raise() -> bool:
    """Whether a floating-point warning would raise (or call the user's handler) now: NumPy's
    error state says so for one kind, or a warning filter turns warnings into errors (any
    such filter counts, whatever category or message it names)."""
    for mode in np.geterr().values():
        if mode != "warn" and mode != "ignore":
            return True
    for item in warnings.filters:
        if item[0] == "error":
            return True
    return False
