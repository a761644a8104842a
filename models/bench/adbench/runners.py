"""What every tool provides for one benchmark input: an objective call and a derivative call.

A *prepare* function ``prepare(inp) -> Prepared`` does the per-input set-up that a user would do
once (converting arrays to the tool's type, building ``grad`` functions, compiling), so that
only the two calls are timed. Each call computes its result completely (JAX results are made
ready), and the derivative call returns it as NumPy, in ADBench's layout, for the cross-check:
a flat gradient for GMM and LSTM, a `ba.SparseJacobian` for BA.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from tape import autodiff
from tape import compile as compile_tape

from . import ba, gmm, lstm


@dataclass
class Prepared:
    """One tool's two timed calls on one input (module docstring)."""
    objective: Callable[[], Any]
    derivative: Callable[[], Any]


def compiled_autodiff() -> Callable:
    """A stand-in for `autodiff` that compiles each function once (`tape.compile`) and then
    replays it: ``d = compiled_autodiff(); d(Reverse, f, Active, *args)``.

    >>> from tape import Reverse, Active
    >>> d = compiled_autodiff()
    >>> d(Reverse, lambda x: x * x, Active, Active(3.0)), d(Reverse, lambda x: -x, Active, Active(1.0))
    (((6.0,),), ((-1.0,),))
    """
    programs: dict = {}

    def differentiate(mode, f, ret, *args):
        key = (mode, f, ret, tuple(type(a) for a in args))
        if key not in programs:
            programs[key] = compile_tape(mode, f, ret, *key[3])
        return programs[key](*args)
    return differentiate


def hecate_gmm(inp, compiled: bool = False) -> Prepared:
    """Hecate differentiates NumPy code, so its objective is the plain NumPy call."""
    d = compiled_autodiff() if compiled else autodiff
    return Prepared(lambda: gmm.objective(inp), lambda: gmm.gradient(inp, d))


def hecate_lstm(inp, compiled: bool = False) -> Prepared:
    d = compiled_autodiff() if compiled else autodiff
    return Prepared(lambda: lstm.objective(inp), lambda: lstm.gradient(inp, d))


def hecate_ba(inp, compiled: bool = False) -> Prepared:
    d = compiled_autodiff() if compiled else autodiff
    return Prepared(lambda: ba.objective(inp), lambda: ba.jacobian(inp, d))


def lower_indices(d: int):
    """(rows, cols) of the strictly-lower entries of a d x d matrix in ADBench's packing order
    (column by column), for the peers that scatter the packed L into a matrix."""
    cols, rows = np.triu_indices(d, 1)
    return rows, cols


def rho(x, y) -> float:
    """ADBench's comparison metric: max |x - y| / max(1, |x| + |y|), entry by entry."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape:
        return float("inf")
    if x.size == 0:
        return 0.0
    return float(np.max(np.abs(x - y) / np.maximum(1.0, np.abs(x) + np.abs(y))))


def flat(result) -> np.ndarray:
    """A derivative result as one flat vector (a sparse Jacobian by its CSR values)."""
    if isinstance(result, ba.SparseJacobian):
        return result.data
    return np.asarray(result, dtype=np.float64).ravel()
