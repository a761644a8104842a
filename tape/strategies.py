"""Hypothesis strategies for gradient tests: float64 arrays with bounded, finite entries (safe
for finite differences), shapes, broadcastable shapes and arrays, arrays with reduction axes.
Re-exported by `tape.testing`; hypothesis is imported only when a strategy is built, so
this module works without it.
"""
from __future__ import annotations

import numpy as np


def shapes(min_dims: int = 0, max_dims: int = 3, min_side: int = 1, max_side: int = 4):
    """Array shapes, e.g. ``(2, 3)``."""
    from hypothesis.extra import numpy as hnp
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side,
                            max_side=max_side)


def arrays(shape=None, dtype=np.float64, low: float = -2.0, high: float = 2.0, **shape_kw):
    """Arrays of `dtype` (float64 by default) with finite entries in ``[low, high]``: shaped
    `shape`, or drawn by `shapes` with ``shape_kw``.

    Complex dtypes get real and imaginary parts both in ``[low, high]`` (a zero imaginary part
    would leave half of a complex rule untested); integer dtypes get the integers in the
    range. No subnormal numbers are drawn, but 0 and the bounds are (hypothesis favours
    edge values): for a function with a kink at 0 (abs, relu, sqrt), pick bounds away from it.

    >>> from hypothesis import given, settings
    >>> @settings(max_examples=5, database=None)
    ... @given(arrays((2,), dtype=np.complex128, low=1.0, high=2.0))
    ... def check(z):
    ...     assert z.shape == (2,) and np.all((1.0 <= z.real) & (z.real <= 2.0))
    >>> check()
    """
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        elements = st.integers(int(np.ceil(low)), int(np.floor(high)))
    elif dtype.kind in "fc":
        width = 8 * (dtype.itemsize // 2 if dtype.kind == "c" else dtype.itemsize)
        if width < 64:   # bounds rounded inwards to the part's precision (hypothesis asks)
            real = np.dtype(f"float{width}").type
            lo, hi = real(low), real(high)
            low = float(lo if lo >= low else np.nextafter(lo, real(np.inf)))
            high = float(hi if hi <= high else np.nextafter(hi, real(-np.inf)))
        part = st.floats(low, high, allow_nan=False, allow_infinity=False,
                         allow_subnormal=False, width=min(width, 64))
        elements = (st.builds(complex, part, part) if dtype.kind == "c" else part)
    else:
        raise TypeError(f"arrays: dtype must be a float, complex or integer dtype, got {dtype}")
    return hnp.arrays(dtype, shape if shape is not None else shapes(**shape_kw),
                      elements=elements)


def arrays_and_axes(min_dims: int = 0, max_dims: int = 3):
    """``(array, axis)`` pairs with `axis` as NumPy's reductions take it: None, an int (maybe
    negative) or a tuple of distinct ints (None for 0-d arrays)."""
    from hypothesis import strategies as st

    @st.composite
    def build(draw):
        x = draw(arrays(shapes(min_dims=min_dims, max_dims=max_dims)))
        kind = draw(st.sampled_from(["none", "int", "tuple"]) if x.ndim else st.just("none"))
        if kind == "none":
            return x, None
        if kind == "int":
            return x, draw(st.integers(-x.ndim, x.ndim - 1))
        picked = draw(st.lists(st.integers(0, x.ndim - 1), min_size=1, max_size=x.ndim,
                               unique=True))
        return x, tuple(a - x.ndim if draw(st.booleans()) else a for a in picked)
    return build()


def broadcastable_shapes(shape, min_dims: int = 0, max_dims: int = 3):
    """Shapes that broadcast against `shape`."""
    from hypothesis.extra import numpy as hnp
    return hnp.broadcastable_shapes(shape, min_dims=min_dims, max_dims=max_dims, min_side=1)


def broadcastable_arrays(n: int = 2, low: float = -2.0, high: float = 2.0, max_dims: int = 3):
    """A tuple of `n` float64 arrays whose shapes broadcast together."""
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp

    @st.composite
    def build(draw):
        shapes_ = draw(hnp.mutually_broadcastable_shapes(num_shapes=n, max_dims=max_dims,
                                                         min_side=1, max_side=4)).input_shapes
        return tuple(draw(arrays(s, low=low, high=high)) for s in shapes_)
    return build()


__all__ = ["shapes", "arrays", "arrays_and_axes", "broadcastable_shapes", "broadcastable_arrays"]
