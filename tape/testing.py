"""Gradient checks for your own functions: finite differences in float64, first and second order.

>>> import numpy as np
>>> check_grads(lambda x: np.sin(x) * x, np.array([0.3, -1.2]))

Hypothesis strategies (`arrays`, `shapes`, `broadcastable_shapes`, `broadcastable_arrays`) live in
`tape.testing` too; they import hypothesis lazily, so this module works without it.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from .activities import Active, Duplicated, Forward, ForwardWithPrimal, Reverse
from .api import autodiff
from .core import primal
from .pytree import flatten, tree_map


class GradientCheckError(AssertionError):
    """A derivative disagrees with finite differences."""


def _is_float(x):
    return np.issubdtype(np.result_type(x), np.inexact)


def _random_like(x, rng):
    if isinstance(x, float):
        return float(rng.standard_normal())
    return rng.standard_normal(np.shape(x)).astype(np.result_type(x))


def _axpy(a, v, x):
    """x + a*v, keeping Python floats as floats."""
    if isinstance(x, float):
        return x + a * v
    return np.asarray(x + a * v, dtype=np.result_type(x))


def _inner(a, b) -> float:
    la, _ = flatten(a)
    lb, _ = flatten(b)
    return float(sum(np.sum(np.asarray(x, dtype=np.float64) * np.asarray(y, dtype=np.float64))
                     for x, y in zip(la, lb)))


def _output_leaves(y):
    leaves, _ = flatten(y)
    return [np.asarray(v, dtype=np.float64) for v in leaves]


def _numeric_jvp(f, args, direction, eps):
    plus = [_axpy(eps, v, x) if v is not None else x for x, v in zip(args, direction)]
    minus = [_axpy(-eps, v, x) if v is not None else x for x, v in zip(args, direction)]
    yp, ym = _output_leaves(f(*plus)), _output_leaves(f(*minus))
    return [(a - b) / (2 * eps) for a, b in zip(yp, ym)]


def _close(a: float, b: float, rtol: float, atol: float) -> bool:
    return abs(a - b) <= atol + rtol * max(abs(a), abs(b))


def check_grads(f: Callable, *args: Any, modes: Sequence[str] = ("fwd", "rev"), order: int = 2,
                eps: float = 1e-6, rtol: float = 1e-5, atol: float = 1e-7,
                full_jacobian: bool = False, seed: int = 0) -> None:
    """Check `f`'s derivatives at `args` against central finite differences.

    Every floating-point argument is differentiated (others are passed as Const). For each mode
    in ``modes`` ("fwd": forward mode J·v, "rev": reverse mode uᵀJ) a random direction is
    compared with finite differences; with ``order=2`` the same is done, recursively, for the
    gradient function itself (forward-over-reverse and reverse-over-reverse). With
    ``full_jacobian=True`` (slow; for debugging) every Jacobian entry is compared.
    Raises `GradientCheckError` saying which mode and order disagree.

    >>> check_grads(lambda x, y: x * np.exp(y), 0.5, np.array([0.1, 0.2]), order=1)
    """
    args = list(args)
    rng = np.random.default_rng(seed)
    diff = [i for i, a in enumerate(args) if _is_float(a)]
    if not diff:
        raise ValueError("check_grads needs at least one floating-point argument")
    for a in args:
        if _is_float(a) and np.result_type(a) not in (np.float64, np.complex128):
            raise ValueError(f"check_grads needs float64 arguments for accurate finite "
                             f"differences; got dtype {np.result_type(a)}")
    direction = [_random_like(a, rng) if i in diff else None for i, a in enumerate(args)]
    y0 = f(*args)
    u = [rng.standard_normal(np.shape(y)) for y in _output_leaves(y0)]
    numeric = _numeric_jvp(f, args, direction, eps)
    expected = sum(float(np.sum(a * b)) for a, b in zip(u, numeric))
    tag = f"order {order}" if order else ""

    if "fwd" in modes:
        annotated = [Duplicated(a, d) if d is not None else a for a, d in zip(args, direction)]
        tangent, = autodiff(Forward, f, *annotated)
        got = sum(float(np.sum(a * b)) for a, b in zip(u, _output_leaves(tangent)))
        if not _close(got, expected, rtol, atol):
            raise GradientCheckError(
                f"forward mode (J·v) disagrees with finite differences ({tag}): "
                f"uᵀ(J·v) = {got!r} vs numeric {expected!r}")

    if "rev" in modes or order > 1:
        vjp_fn = _vjp_function(f, diff, u)
    if "rev" in modes:
        grads = vjp_fn(*args)
        got = sum(_inner(g, direction[i]) for g, i in zip(grads, diff))
        if not _close(got, expected, rtol, atol):
            raise GradientCheckError(
                f"reverse mode (uᵀJ) disagrees with finite differences ({tag}): "
                f"(uᵀJ)·v = {got!r} vs numeric {expected!r}")

    if full_jacobian:
        _check_full_jacobian(f, args, diff, eps, rtol, atol)

    if order > 1:
        check_grads(vjp_fn, *args, modes=modes, order=order - 1, eps=eps, rtol=rtol,
                    atol=atol, seed=seed + 1)


def _vjp_function(f, diff, u):
    """x -> uᵀ J(x), computed by reverse mode (itself differentiable for higher orders)."""
    def vjp(*xs):
        def scalar(*inner):
            y = f(*inner)
            leaves, _ = flatten(y)
            total = 0.0
            for leaf, w in zip(leaves, u):
                total = total + np.sum(leaf * w)
            return total
        annotated = [Active(x) if i in diff else x for i, x in enumerate(xs)]
        derivs, = autodiff(Reverse, scalar, Active, *annotated)
        return tuple(derivs[i] for i in diff)
    return vjp


def _check_full_jacobian(f, args, diff, eps, rtol, atol):
    for i in diff:
        size = int(np.size(args[i]))
        for j in range(size):
            e = np.zeros(size)
            e[j] = 1.0
            d = [None] * len(args)
            d[i] = float(e[0]) if isinstance(args[i], float) else e.reshape(np.shape(args[i]))
            numeric = _numeric_jvp(f, args, d, eps)
            annotated = [Duplicated(a, d[i]) if n == i else a for n, a in enumerate(args)]
            tangent, = autodiff(Forward, f, *annotated)
            for out_k, (num, got) in enumerate(zip(numeric, _output_leaves(tangent))):
                bad = ~np.isclose(got, num, rtol=rtol, atol=atol)
                if np.any(bad):
                    raise GradientCheckError(
                        f"Jacobian column {j} of argument {i} (output leaf {out_k}) disagrees: "
                        f"engine {got.ravel()[:6]} vs numeric {num.ravel()[:6]}")


def traced_value(f: Callable, *args: Any, mode: str = "forward") -> Any:
    """What `f` returns when its floating-point arguments are traced, as plain values: the
    primal computed through the rules (the forward rules for ``mode="forward"``, the
    augmented-primal rules for ``mode="reverse"``), to compare with `f` on plain arrays.

    >>> traced_value(lambda x: np.cumsum(x) * 2, np.array([1.0, 2.0]), mode="reverse")
    array([2., 6.])
    """
    if mode == "forward":
        annotated = [Duplicated(a, np.zeros_like(a) if not isinstance(a, float) else 0.0)
                     if _is_float(a) else a for a in args]
        return autodiff(ForwardWithPrimal, f, *annotated)[1]
    if mode != "reverse":
        raise ValueError(f"mode must be 'forward' or 'reverse', got {mode!r}")
    seen = []

    def scalar(*xs):
        y = f(*xs)
        seen.append(y)
        total = 0.0
        for leaf in flatten(y)[0]:
            total = total + np.sum(leaf)
        return total
    autodiff(Reverse, scalar, Active, *[Active(a) if _is_float(a) else a for a in args])
    return tree_map(primal, seen[0])


# ------------------------------------------------------------------------------------------------
# Hypothesis strategies (hypothesis is imported only when these are used)


def shapes(min_dims: int = 0, max_dims: int = 3, min_side: int = 1, max_side: int = 4):
    """Array shapes, e.g. ``(2, 3)``."""
    from hypothesis.extra import numpy as hnp
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side,
                            max_side=max_side)


def arrays(shape=None, dtype=np.float64, low: float = -2.0, high: float = 2.0, **shape_kw):
    """float64 arrays with bounded, finite entries (safe for finite differences)."""
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp
    elements = st.floats(low, high, allow_nan=False, allow_infinity=False, width=64)
    return hnp.arrays(dtype, shape if shape is not None else shapes(**shape_kw),
                      elements=elements)


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


__all__ = ["check_grads", "GradientCheckError", "traced_value", "shapes", "arrays", "broadcastable_shapes",
           "broadcastable_arrays"]
