"""Which array module (NumPy or CuPy) a value belongs to. CuPy is never imported here."""
from __future__ import annotations

import sys
from types import ModuleType

import numpy as np

from .core import peek


def array_module(x) -> ModuleType:
    """`numpy`, or `cupy` for CuPy arrays (like `cupy.get_array_module`, without importing it).

    >>> array_module(np.ones(2)).__name__
    'numpy'
    """
    x = peek(x)   # which module: no decision on the contents
    if hasattr(x, "__cuda_array_interface__"):
        return sys.modules["cupy"]
    return np


def add_at(out, index, values) -> None:
    """``np.add.at(out, index, values)`` for NumPy and CuPy arrays: unbuffered, so a repeated
    index receives every value. ``np.add.at`` does not reach CuPy's own ``cupy.add.at`` (older
    CuPy: ``cupyx.scatter_add``), atomic adds on real dtypes: a complex `out` takes its two
    parts one at a time.

    >>> out = np.zeros(3)
    >>> add_at(out, [0, 0, 2], np.array([1.0, 2.0, 5.0]))
    >>> out
    array([3., 0., 5.])
    """
    if not hasattr(out, "__cuda_array_interface__"):   # NumPy, or a traced or batched buffer
        np.add.at(out, index, values)
        return
    xp = sys.modules["cupy"]
    scatter_add = getattr(xp.add, "at", None)
    if scatter_add is None:
        import cupyx   # only reached with CuPy arrays, so CuPy is installed
        scatter_add = cupyx.scatter_add
    values = xp.asarray(values)
    if out.dtype.kind == "c":
        parts = [xp.zeros(out.shape, out.real.dtype) for _ in range(2)]
        scatter_add(parts[0], index, values.real.astype(parts[0].dtype, copy=False))
        scatter_add(parts[1], index, values.imag.astype(parts[1].dtype, copy=False)
                    if values.dtype.kind == "c" else xp.zeros((), parts[1].dtype))
        out += parts[0] + 1j * parts[1]
        return
    scatter_add(out, index, values.astype(out.dtype, copy=False))


def module_name(x) -> str:
    return "cupy" if hasattr(peek(x), "__cuda_array_interface__") else "numpy"


def broadcast_axes(from_shape: tuple, to_shape: tuple) -> tuple:
    """The axes of `from_shape` that NumPy broadcasting added or stretched to reach it from
    `to_shape`: summing a cotangent over them is the reverse of broadcasting.

    >>> broadcast_axes((4, 2, 3), (2, 1))
    (0, 2)
    """
    lead = len(from_shape) - len(to_shape)
    return tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(to_shape) if n == 1 and from_shape[lead + i] != 1)


def add_or_none(a, b):
    """a + b where None stands for a symbolic zero (cotangents and tangents).

    >>> add_or_none(None, 2.0), add_or_none(1.0, 2.0)
    (2.0, 3.0)
    """
    if a is None:
        return b
    if b is None:
        return a
    return a + b
