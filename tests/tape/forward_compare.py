"""Compiled forward mode against eager forward mode, bit for bit: the comparison the
tests/tape/test_compile_forward*.py files share.

`run_sequence` calls a `tape.compile`d function and eager `autodiff` on fresh copies of the
same arguments, call after call, and compares the results (types, dtypes, shapes and every
bit, signs of zeros and NaNs included), the raised errors (type and message), and the
arguments and shadows right after each call.
"""
import copy

import numpy as np

import tape
from tape import Duplicated, autodiff


def identical(a, b, path="result"):
    """Same structure, types, dtypes, shapes and bits."""
    if isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b), (path, a, b)
        for k, (x, y) in enumerate(zip(a, b)):
            identical(x, y, f"{path}[{k}]")
    elif isinstance(a, dict):
        assert type(a) is type(b) and list(a) == list(b), path
        for k in a:
            identical(a[k], b[k], f"{path}[{k!r}]")
    elif a is None or b is None:
        assert a is None and b is None, (path, a, b)
    elif hasattr(a, "__dict__") and not isinstance(a, (np.ndarray, np.generic)):
        assert type(a) is type(b), (path, type(a), type(b))   # a dataclass, a model object
        identical(dict(vars(a)), dict(vars(b)), f"{path}.vars")
    elif isinstance(a, (str, bytes, bool, int)) and not isinstance(a, np.generic):
        assert type(a) is type(b) and a == b, (path, a, b)
    else:
        assert type(a) is type(b), (path, type(a), type(b))
        x, y = np.asarray(a), np.asarray(b)
        assert x.dtype == y.dtype and x.shape == y.shape, (path, x.dtype, y.dtype, x.shape,
                                                            y.shape)
        assert x.tobytes() == y.tobytes() or (
            x.dtype.kind in "fc" and np.array_equal(x, y, equal_nan=True)
            and np.array_equal(np.signbit(x.real), np.signbit(y.real))), (path, a, b)


def outcome(call):
    try:
        return call(), None
    except Exception as e:   # noqa: BLE001  (compared with eager's)
        return None, e


def run_sequence(mode, f, ret, make_args, calls, g=None, between=None):
    """Compiled (`g`, or a new ``tape.compile(mode, f, ret, ...)``) against eager on fresh
    copies of ``make_args(c)`` for each c of `calls`; `between(k)` runs after both calls k
    (to change what `f` reads). Returns the compiled function."""
    if g is None:
        g = tape.compile(mode, f, ret, *[type(a) for a in make_args(calls[0])])
    for k, c in enumerate(calls):
        args = make_args(c)
        mine, theirs = copy.deepcopy(args), copy.deepcopy(args)
        got, error = outcome(lambda: g(*mine))
        want, want_error = outcome(lambda: autodiff(mode, f, ret, *theirs))
        if error is not None or want_error is not None:
            assert type(error) is type(want_error) and str(error) == str(want_error), (
                k, error, want_error, g.stats)
        else:
            identical(got, want, f"call {k}")
        for a, b in zip(mine, theirs):
            identical(a.val, b.val, f"call {k}: argument")
            if isinstance(b, Duplicated):
                identical(a.dval, b.dval, f"call {k}: shadow")
        if between is not None:
            between(k)
    return g
