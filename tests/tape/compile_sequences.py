"""Compiled against eager, call by call: the comparison the compile red-team tests share.

`sequences(setup, calls)` runs a sequence of calls through a `tape.compile`d function and the
same sequence through eager `autodiff`, each from fresh state, and compares every call: the
result (values and types), the raised error (type and message), and the arguments and shadows
as they were right after the call.
"""
import copy
import dataclasses

import numpy as np

import tape
from tape import (Active, BatchDuplicated, Duplicated, Forward, ForwardWithPrimal, Reverse,
                  ReverseWithPrimal, autodiff)

RP = ReverseWithPrimal


def same(a, b, path="result"):
    if isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b), path
        for k, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}[{k}]")
    elif isinstance(a, dict):
        assert type(a) is type(b) and list(a) == list(b), path
        for k in a:
            same(a[k], b[k], f"{path}[{k!r}]")
    elif dataclasses.is_dataclass(a) and not isinstance(a, type):
        assert type(a) is type(b), path
        for field in dataclasses.fields(a):
            same(getattr(a, field.name), getattr(b, field.name), f"{path}.{field.name}")
    elif isinstance(a, np.random.Generator):
        assert a.bit_generator.state == b.bit_generator.state, path
    elif hasattr(a, "__dict__") and not isinstance(a, np.ndarray):
        assert type(a) is type(b), path
        same(dict(vars(a)), dict(vars(b)), f"{path}.vars")
    elif a is None or b is None or isinstance(a, str):
        assert a == b, path
    else:
        assert type(a) is type(b), (path, type(a), type(b))
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14, err_msg=path)


def outcome(call):
    try:
        return call(), None
    except Exception as e:   # noqa: BLE001  (compared with eager's)
        return None, e


def sequences(setup, calls, mode=RP, ret=Active):
    """`setup()` -> (f, make_args) with fresh state; `make_args(c)` may change that state (an
    optimizer step, a Const array changed in place) before it builds call `c`'s arguments.
    The compiled sequence, then the eager one from fresh state; every call compared (the
    arguments as they were right after the call). Returns the compiled function."""
    types = [type(a) for a in setup()[1](calls[0])]
    f, make_args = setup()
    g = tape.compile(mode, f, ret, *types)
    mine = []
    for c in calls:
        args = make_args(c)
        result = outcome(lambda: g(*args))
        mine.append((result, copy.deepcopy([(a.val, getattr(a, "dval", None))
                                             for a in args])))
    f, make_args = setup()
    for k, (c, ((got, error), after)) in enumerate(zip(calls, mine)):
        theirs = make_args(c)
        want, want_error = outcome(lambda: autodiff(mode, f, ret, *theirs))
        if want_error is not None or error is not None:
            assert type(error) is type(want_error) and str(error) == str(want_error), (
                k, error, want_error)
            continue
        same(got, want, f"call {k}")
        for (val, dval), b in zip(after, theirs):
            same(val, b.val, f"call {k}: argument")
            if isinstance(b, Duplicated):
                same(dval, b.dval, f"call {k}: shadow")
    return g


# -- one change between calls, in every mode ---------------------------------------------------

X = np.array([0.3, 0.4, 0.5])   # the argument of every call of `changed_before_the_fourth_call`
T = np.array([1.0, -2.0, 0.5])   # its tangent in forward modes

MODES = {
    "reverse": (ReverseWithPrimal, Active,
                lambda: [Duplicated(X.copy(), np.zeros(3))]),
    "forward": (Forward, Duplicated, lambda: [Duplicated(X.copy(), T.copy())]),
    "forward with primal": (ForwardWithPrimal, Duplicated,
                            lambda: [Duplicated(X.copy(), T.copy())]),
    "batched forward": (Forward, BatchDuplicated,
                        lambda: [BatchDuplicated(X.copy(), (T.copy(), np.ones(3)))]),
    "batched reverse": (Reverse, Active,
                        lambda: [BatchDuplicated(X.copy(), (np.zeros(3), np.zeros(3)))]),
}


def changed_before_the_fourth_call(f, change, mode="reverse", calls=6):
    """Compiled and eager calls side by side (f keeps no state of its own); `change()` runs
    after the third call, once the program is confirmed and replayed."""
    m, ret, make = MODES[mode]
    g = tape.compile(m, f, ret, type(make()[0]))
    for k in range(calls):
        if k == 3:
            change()
        mine = make()
        theirs = copy.deepcopy(mine)
        got = g(*mine)
        want = autodiff(m, f, ret, *theirs)
        same(got, want, f"call {k}")
        same(mine[0].dval, theirs[0].dval, f"call {k}: shadow")
    return g
