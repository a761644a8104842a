"""The user functions of the reverse-mode compile tests (tests/tape/test_compile_redteam*.py,
test_compile_snapshots.py), run in ForwardWithPrimal: each test runs with its comparison helper
(`compile_sequences.sequences`, or the module's own `_call`) replaced by one that compiles the
same function in forward mode and compares every call with eager forward mode bit for bit
(tests/tape/forward_compare.py). Active arguments become Duplicated ones with a tangent, the
shadows get nonzero tangents, an Active return becomes a Duplicated one.

Each test's own assertions after its calls (on reverse-mode results or stats) are not what is
checked here; the comparison inside the helper is.
"""
import copy
import inspect

import numpy as np
import pytest

import tape
from tape import Active, Duplicated, ForwardWithPrimal, autodiff
from tape.pytree import flatten, unflatten

import test_compile_redteam
import test_compile_redteam2
import test_compile_redteam3
import test_compile_redteam3_watch
import test_compile_redteam5
import test_compile_snapshots
from forward_compare import identical, outcome, run_sequence

MODULES = [test_compile_redteam, test_compile_redteam2, test_compile_redteam3,
           test_compile_redteam3_watch, test_compile_redteam5, test_compile_snapshots]


def _tangent_like(x):
    """A nonzero tangent congruent with `x` (arrays, floats and pytrees of them)."""
    leaves, td = flatten(x)
    out = []
    for leaf in leaves:
        if isinstance(leaf, np.ndarray) and leaf.dtype.kind in "fc":
            out.append(np.linspace(0.3, 1.1, leaf.size).reshape(leaf.shape).astype(leaf.dtype))
        elif isinstance(leaf, (float, np.floating)) and not isinstance(leaf, bool):
            out.append(type(leaf)(0.7))
        else:
            out.append(copy.deepcopy(leaf))
    return unflatten(td, out)


def _forward_args(args):
    converted = []
    for a in args:
        if type(a) is Active:
            converted.append(Duplicated(a.val, _tangent_like(a.val)))
        elif isinstance(a, Duplicated):
            converted.append(type(a)(a.val, _tangent_like(a.val)))
        else:
            converted.append(a)
    return converted


def _forward_return(ret):
    return Duplicated if ret in (Active, None) else ret


class ForwardMismatch(Exception):
    """Compiled forward mode differed from eager forward mode (not one of the test's own
    reverse-mode assertions, which fail with AssertionError)."""


COMPARED: list = []


def _checked(compare):
    try:
        compare()
    except AssertionError as e:
        raise ForwardMismatch(str(e)) from e
    COMPARED.append(1)


def _sequences(setup, calls, mode=None, ret=Active):
    """`compile_sequences.sequences` in forward mode: the compiled sequence from fresh
    state, then the eager one from fresh state, every call compared."""
    fret = _forward_return(ret)
    types = [type(a) for a in _forward_args(setup()[1](calls[0]))]
    f, make_args = setup()
    g = tape.compile(ForwardWithPrimal, f, fret, *types)
    mine = []
    for c in calls:
        args = _forward_args(make_args(c))
        result = outcome(lambda: g(*args))
        mine.append((result, copy.deepcopy([(a.val, getattr(a, "dval", None)) for a in args])))
    f, make_args = setup()

    def compare():
        for k, (c, ((got, error), after)) in enumerate(zip(calls, mine)):
            theirs = _forward_args(make_args(c))
            want, want_error = outcome(lambda: autodiff(ForwardWithPrimal, f, fret, *theirs))
            if error is not None or want_error is not None:
                assert type(error) is type(want_error) and str(error) == str(want_error), (
                    k, error, want_error)
                continue
            identical(got, want, f"call {k}")
            for (val, dval), b in zip(after, theirs):
                identical(val, b.val, f"call {k}: argument")
                if isinstance(b, Duplicated):
                    identical(dval, b.dval, f"call {k}: shadow")
    _checked(compare)
    return g


def _call(f, make_args, calls, between=None, ret=Active):
    """The `_call` of test_compile_redteam.py in forward mode."""
    g = tape.compile(ForwardWithPrimal, f, _forward_return(ret),
                     *[type(a) for a in _forward_args(make_args(calls[0]))])
    _checked(lambda: run_sequence(ForwardWithPrimal, f, _forward_return(ret),
                                  lambda c: _forward_args(make_args(c)), list(calls), g=g,
                                  between=between))
    return g


def _cases():
    for module in MODULES:
        for name, fn in vars(module).items():
            if (name.startswith("test_") and inspect.isfunction(fn)
                    and not inspect.signature(fn).parameters
                    and not getattr(fn, "pytestmark", None)
                    and ("_call" in fn.__code__.co_names or "sequences" in fn.__code__.co_names
                         or "_sequences" in fn.__code__.co_names)):
                yield pytest.param(module, name, id=f"{module.__name__[13:]}-{name[5:]}")


@pytest.mark.parametrize("module, name", list(_cases()))
def test_reverse_corpus_in_forward_mode(module, name, monkeypatch):
    for helper, replacement in (("_call", _call), ("_sequences", _sequences),
                                ("sequences", _sequences)):
        if hasattr(module, helper):
            monkeypatch.setattr(module, helper, replacement)
    del COMPARED[:]
    try:
        getattr(module, name)()
    except ForwardMismatch:
        raise
    except Exception:   # noqa: BLE001  (the test's own reverse-mode assertions afterwards)
        pass
    assert COMPARED, "the test made no forward comparison"
