"""Convenience functions on top of `autodiff`, spelled as in Enzyme.jl.

`gradient`, `gradient_`, `jacobian`, `hvp`, `hvp_`, `hvp_and_gradient_`, `hessian`,
`make_zero_` and `onehot`. Each is a few lines over `autodiff`: forward mode uses batch mode
(one vectorised pass per chunk of directions), the Hessian is a batched forward-over-reverse
product, and the reverse-mode Jacobian reverses one split-mode tape once per chunk of rows.
"""
from __future__ import annotations

from collections import namedtuple
from typing import Any, Callable

import numpy as np

from .activities import (Active, Annotation, BatchDuplicated, Const, Duplicated, Forward,
                         ForwardWithPrimal, Mode, Reverse, ReverseSplitWithPrimal,
                         ReverseWithPrimal)
from .api import _is_float, _is_mutable_leaf, autodiff, make_zero
from .backend import array_module
from .core import Tracer
from .errors import ActivityError
from .pytree import flatten, unflatten
from .split import autodiff_thunk

GradientResult = namedtuple("GradientResult", ["derivs", "val"])


def _unwrap(args):
    """Plain arguments are differentiated; `Const(x)` ones are not (their derivative is None)."""
    return [a if isinstance(a, Const) else _check_plain(a, i) for i, a in enumerate(args)]


def _check_plain(a, i):
    if isinstance(a, Annotation):
        raise ActivityError(f"argument {i}: the convenience functions take plain values (or "
                            f"Const(x)), not {type(a).__name__}; use autodiff for other "
                            "activities")
    return a


def gradient(mode: Mode, f: Callable, *args: Any):
    """The gradient of a scalar function with respect to each argument, in its own type.

    Reverse mode needs one sweep; Forward mode one batched pass per argument. ``Const(x)``
    arguments are not differentiated and give None. With ReverseWithPrimal the result is
    ``GradientResult(derivs, val)``.

    >>> gradient(Reverse, lambda x, y: x * np.sum(y ** 2), 2.0, np.array([1.0, 3.0]))
    (10.0, array([ 4., 12.]))
    >>> gradient(Forward, lambda x: np.sum(x ** 3), np.array([1.0, 2.0]))
    (array([ 3., 12.]),)
    """
    args = _unwrap(args)
    if mode.kind == "reverse":
        annotated = [a if isinstance(a, Const) else Active(a) for a in args]
        result = autodiff(mode, f, Active, *annotated)
        if mode.with_primal:
            return GradientResult(result[0], result[1])
        return result[0]
    derivs = tuple(None if isinstance(a, Const) else
                   _forward_columns(f, args, i, _scalar_check(f))[0] for i, a in enumerate(args))
    if mode.with_primal:
        return GradientResult(derivs, f(*[a.val if isinstance(a, Const) else a for a in args]))
    return derivs


def _scalar_check(f):
    name = getattr(f, "__name__", "f")

    def check(out):
        if np.ndim(out) != 0:
            raise ActivityError(f"gradient needs a scalar function; `{name}` returned shape "
                                f"{np.shape(out)}. Use jacobian for vector outputs")
    return check


def gradient_(mode: Mode, dx: Any, f: Callable, x: Any):
    """Zero the shadow `dx`, then fill it with the gradient of `f` at `x`; returns `dx`.

    >>> x, dx = np.array([1.0, 2.0]), np.full(2, 99.0)
    >>> gradient_(Reverse, dx, lambda x: np.sum(x ** 2), x)
    array([2., 4.])
    """
    if mode.kind != "reverse":
        raise ActivityError("gradient_ takes Reverse or ReverseWithPrimal")
    make_zero_(dx)
    result = autodiff(mode, f, Active, Duplicated(x, dx))
    if mode.with_primal:
        return GradientResult((dx,), result[1])
    return dx


def onehot(x: Any) -> tuple:
    """One shadow per scalar entry of `x` (all its float leaves), each with a single 1.

    >>> onehot(np.zeros(2))
    (array([1., 0.]), array([0., 1.]))
    """
    leaves, td = flatten(x)
    sizes = [int(np.size(v)) if _is_float(v) else 0 for v in leaves]
    out = []
    for k, size in enumerate(sizes):
        for j in range(size):
            zero = make_zero(x)
            zl, _ = flatten(zero)
            if isinstance(zl[k], (float, complex)) or np.ndim(zl[k]) == 0:
                zl[k] = type(zl[k])(1) if isinstance(zl[k], (float, complex)) else zl[k] + 1
            else:
                zl[k].reshape(-1)[j] = 1
            out.append(unflatten(td, zl))
    return tuple(out)


def make_zero_(shadow: Any) -> Any:
    """Zero `shadow` in place (arrays, and float fields of lists, dicts and dataclasses).

    >>> s = {"w": np.ones(2), "b": [1.5]}
    >>> make_zero_(s)
    {'w': array([0., 0.]), 'b': [0.0]}
    """
    if isinstance(shadow, (list, dict)):
        keys = range(len(shadow)) if isinstance(shadow, list) else list(shadow)
        for k in keys:
            v = shadow[k]
            shadow[k] = type(v)(0) if isinstance(v, (float, complex)) else make_zero_(v)
        return shadow
    if hasattr(shadow, "__dataclass_fields__"):
        for name in shadow.__dataclass_fields__:
            v = getattr(shadow, name)
            if isinstance(v, (float, complex)):
                setattr(shadow, name, type(v)(0))
            else:
                make_zero_(v)
        return shadow
    if isinstance(shadow, tuple):
        for v in shadow:
            if not isinstance(v, (float, complex, int)):
                make_zero_(v)
        return shadow
    if hasattr(shadow, "shape") and np.ndim(shadow) > 0 or isinstance(shadow, np.ndarray):
        shadow[...] = 0
    return shadow


# --------------------------------------------------------------------------------------------
# Jacobians


def _chunks(n: int, chunk: int | None):
    chunk = n if chunk is None else chunk
    if chunk < 1:
        raise ValueError(f"chunk must be at least 1, got {chunk}")
    return [range(i, min(i + chunk, n)) for i in range(0, n, chunk)]


def _forward_columns(f, args, i, check=None, chunk=None):
    """The Jacobian of `f` with respect to argument i, one batched forward pass per chunk of
    input directions; returns (J, primal) with J of shape out.shape + x.shape."""
    x = args[i]
    directions = onehot(x)
    consts = [Const(a.val if isinstance(a, Const) else a) for a in args]
    columns, primal = [], None
    for rows in _chunks(len(directions), chunk):
        call = list(consts)
        call[i] = BatchDuplicated(x, tuple(directions[j] for j in rows))
        tangents, primal = autodiff(ForwardWithPrimal, f, *call)
        columns.extend(tangents)
        if check is not None:
            check(primal)
    return _assemble(columns, primal, x), primal


def _assemble(columns, out, x):
    """Stack per-direction results (each shaped like `out`) into out.shape + x.shape."""
    xp = array_module(out if hasattr(out, "shape") else np.asarray(out))
    stacked = xp.stack([xp.asarray(c) for c in columns], axis=-1)
    result = stacked.reshape(np.shape(out) + np.shape(x))
    if result.ndim:
        return result
    return float(result) if isinstance(x, float) else result[()]


def jacobian(mode: Mode, f: Callable, *args: Any, chunk: int | None = None) -> tuple:
    """The Jacobian of `f` with respect to each array argument, shaped out.shape + x.shape.

    Forward mode pushes `chunk` directions per batched pass (all at once by default); reverse
    mode records one split-mode tape and reverses it once per chunk of output rows, in batch
    mode. ``Const(x)`` arguments give None.

    >>> A = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    >>> jacobian(Forward, lambda x: A @ x, np.ones(2), chunk=1)[0]
    array([[1., 2.],
           [3., 4.],
           [5., 6.]])
    """
    args = _unwrap(args)
    if mode.kind == "forward":
        return tuple(None if isinstance(a, Const) else _forward_columns(f, args, i, None, chunk)[0]
                     for i, a in enumerate(args))
    return tuple(None if isinstance(a, Const) else _reverse_rows(f, args, i, chunk)
                 for i, a in enumerate(args))


def _reverse_rows(f, args, i, chunk):
    """One recorded forward pass, reversed once per chunk of output rows (batch mode)."""
    x = args[i]
    call = [Const(a.val if isinstance(a, Const) else a) for a in args]
    primal = f(*[c.val for c in call])
    seeds = onehot(primal) if _is_float(primal) else ()
    if not _is_mutable_leaf(x):
        return _reverse_rows_of_scalar(f, call, i, x, primal, seeds)
    blocks = _chunks(len(seeds), chunk)
    width = len(blocks[0]) if blocks else 1
    shadows = tuple(make_zero(x) for _ in range(width))
    call[i] = BatchDuplicated(x, shadows)
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, f, Active, *[type(c) for c in call])
    tape, _, _ = fwd(*call)
    zero_seed = make_zero(primal)
    rows = []
    for block in blocks:
        for s in shadows:
            make_zero_(s)
        block_seeds = [seeds[j] for j in block]
        block_seeds += [zero_seed] * (width - len(block))    # the last chunk may be short
        rev(*call, tuple(block_seeds), tape)
        rows.extend(_copy_leaf(s) for s in shadows[:len(block)])
    xp = array_module(x if hasattr(x, "shape") else np.asarray(x))
    J = xp.stack([xp.asarray(r) for r in rows]).reshape(np.shape(primal) + np.shape(x))
    return J if J.ndim else J[()]


def _reverse_rows_of_scalar(f, call, i, x, primal, seeds):
    """A scalar input has no shadow to fill: Active, one reverse sweep per output element."""
    call[i] = Active(x)
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, f, Active, *[type(c) for c in call])
    tape, _, _ = fwd(*call)
    rows = [rev(*call, seed, tape)[0][i] for seed in seeds]
    if not rows:
        return np.zeros(np.shape(primal))
    if not np.shape(primal):
        return rows[0]
    return np.reshape(np.stack(rows), np.shape(primal))


def _copy_leaf(s):
    return s.copy() if hasattr(s, "copy") else s


# --------------------------------------------------------------------------------------------
# Hessian-vector products: forward over reverse


def _grad_fn(f):
    name = getattr(f, "__name__", "f")

    def grad(x):
        try:
            return autodiff(Reverse, f, Active, Active(x))[0][0]
        except ActivityError as e:
            if "scalar" in str(e):
                raise ActivityError(f"hvp needs a scalar function: `{name}` does not return a "
                                    f"real scalar ({e})") from None
            raise
    return grad


def hvp(f: Callable, x: Any, v: Any):
    """The Hessian of scalar `f` at `x` times `v`, by forward-over-reverse (one pass).

    >>> hvp(lambda x: np.sum(x ** 3), np.array([1.0, 2.0]), np.array([1.0, 0.0]))
    array([6., 0.])
    """
    return autodiff(Forward, _grad_fn(f), Duplicated(x, v))[0]


def hvp_(res: Any, f: Callable, x: Any, v: Any):
    """`hvp` written into `res` (an array of x's shape); returns `res`.

    >>> res = np.zeros(2)
    >>> hvp_(res, lambda x: np.sum(x ** 3), np.array([1.0, 2.0]), np.array([0.0, 1.0]))
    array([ 0., 12.])
    """
    res[...] = hvp(f, x, v)
    return res


def hvp_and_gradient_(res: Any, grad: Any, f: Callable, x: Any, v: Any):
    """Fill `res` with H(x) v and `grad` with the gradient, in one forward-over-reverse pass.

    >>> res, g = np.zeros(2), np.zeros(2)
    >>> hvp_and_gradient_(res, g, lambda x: np.sum(x ** 3), np.array([1.0, 2.0]), np.ones(2))
    (array([ 6., 12.]), array([ 3., 12.]))
    """
    tangent, value = autodiff(ForwardWithPrimal, _grad_fn(f), Duplicated(x, v))
    res[...] = tangent
    grad[...] = value
    return res, grad


def hessian(f: Callable, x: Any, chunk: int | None = None):
    """The Hessian of scalar `f` at array `x`, shaped x.shape + x.shape: batched
    forward-over-reverse, `chunk` Hessian-vector products per pass (all by default).

    >>> hessian(lambda x: x[0] ** 2 * x[1], np.array([1.0, 2.0]))
    array([[4., 2.],
           [2., 0.]])
    """
    if isinstance(x, (float, int)) or isinstance(x, Tracer):
        x = np.asarray(x, dtype=float) if not isinstance(x, Tracer) else x
    return _forward_columns(_grad_fn(f), [x], 0, None, chunk)[0]
