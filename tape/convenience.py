"""Convenience functions on top of `autodiff`, spelled as in Enzyme.jl.

`gradient`, `gradient_`, `jacobian`, `hvp`, `hvp_`, `hvp_and_gradient_`, `hessian`,
`make_zero_` and `onehot`. Each is a few lines over `autodiff`: forward mode uses batch mode
(one vectorised pass per chunk of directions), the Hessian is a batched forward-over-reverse
product, and the reverse-mode Jacobian reverses one split-mode tape once per chunk of rows
(tape/jacobians.py). Pytree arguments get derivatives in their own structure in both modes.
"""
from __future__ import annotations

import functools
from collections import namedtuple
from typing import Any, Callable

import numpy as np

from .activities import (Active, Annotation, Const, Duplicated, Forward, ForwardWithPrimal,
                         Mode, Reverse)
from .api import autodiff
from .backend import array_module
from .core import Tracer, is_complex, peek
from .errors import ActivityError, PytreeError
from .jacobians import (SamePoint, check_argument, check_chunk, check_result,
                        forward_columns, forward_jacobian, is_tree, on_float_leaves, onehot,
                        reverse_jacobian)
from .pytree import (fixed_place, flatten, flatten_with_paths, format_path, key_order_hint,
                     set_at, unflatten)

__all__ = ["GradientResult", "gradient", "gradient_", "jacobian", "hvp", "hvp_",
           "hvp_and_gradient_", "hessian", "make_zero_", "onehot"]

GradientResult = namedtuple("GradientResult", ["derivs", "val"])


def _unwrap(args, f, caller):
    """Plain arguments are differentiated; `Const(x)` ones are not (their derivative is None).
    A differentiated argument must hold a float somewhere."""
    out = []
    for i, a in enumerate(args):
        if not isinstance(a, Const):
            _check_plain(a, i)
            check_argument(a, i, f, caller)
        out.append(a)
    return out


def _check_plain(a, i):
    if isinstance(a, Annotation):
        raise ActivityError(f"argument {i}: the convenience functions take plain values (or "
                            f"Const(x)), not {type(a).__name__}; use autodiff for other "
                            "activities")
    return a


def gradient(mode: Mode, f: Callable, *args: Any):
    """The gradient of a real scalar function with respect to each argument, in its own type.

    Reverse mode needs one sweep; Forward mode one batched pass per argument, with one
    direction per float entry (two per complex entry: the result is df/dRe + 1j df/dIm, as in
    reverse mode). A pytree argument's gradient has the argument's structure, None at integer
    leaves, in both modes. ``Const(x)`` arguments are not differentiated and give None. An
    integer scalar result has no derivative: every gradient is zero, in both modes. With
    ReverseWithPrimal or ForwardWithPrimal the result is ``GradientResult(derivs, val)``.

    >>> gradient(Reverse, lambda x, y: x * np.sum(y ** 2), 2.0, np.array([1.0, 3.0]))
    (10.0, array([ 4., 12.]))
    >>> gradient(Forward, lambda x: np.sum(x ** 3), np.array([1.0, 2.0]))
    (array([ 3., 12.]),)
    >>> p = {"w": np.array([1.0, 2.0]), "b": 0.5}
    >>> gradient(Forward, lambda p: p["b"] * np.sum(p["w"] ** 2), p)
    ({'w': array([1., 2.]), 'b': 5.0},)
    """
    _check_mode(mode, "gradient")
    args = _unwrap(args, f, "gradient")
    if mode.kind == "reverse":
        annotated = [a if isinstance(a, Const) else Active(a) for a in args]
        integers = []
        result = autodiff(mode, _integer_result_is_constant(f, integers), Active, *annotated)
        if mode.with_primal:
            return GradientResult(result[0], integers[-1] if integers else result[1])
        return result[0]
    check = _scalar_check(f)
    derivs, val = [], None
    point = SamePoint(args)   # one pass per argument, all at the same point
    for i, a in enumerate(args):
        if isinstance(a, Const):
            derivs.append(None)
            continue
        d, val = forward_jacobian(f, args, i, None, check, point, mode)
        derivs.append(d)
    if mode.with_primal:
        if all(d is None for d in derivs):
            val = f(*[a.val if isinstance(a, Const) else a for a in args])
        return GradientResult(tuple(derivs), val)
    return tuple(derivs)


def _integer_result_is_constant(f, integers: list):
    """`f` for gradient(Reverse): an integer scalar result (np.sum(x).astype(int)) has no
    derivative, as gradient(Forward) and jacobian find, so it goes to autodiff as a constant
    0.0 (every gradient zero) and is kept in `integers`, the primal to return, where autodiff
    would refuse an Active integer return."""
    check = _scalar_check(f)

    @functools.wraps(f)
    def g(*args):
        out = f(*args)
        check(out)
        value = peek(out)     # (its dtype only: a compiling trace guards no value here)
        dtype = getattr(value, "dtype", None)
        if (dtype.kind in "iu" and np.ndim(value) == 0 if dtype is not None
                else isinstance(value, int) and not isinstance(value, bool)):
            integers.append(out)
            return 0.0
        return out
    return g


def _scalar_check(f):
    name = getattr(f, "__name__", "f")

    def check(out):
        check_result(out, f, "gradient")
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
    dx_leaves, dx_paths, _ = flatten_with_paths(dx)
    for leaf, path in zip(dx_leaves, dx_paths):
        why = fixed_place(dx, path) if _is_number(leaf) and path else None
        if why is not None:
            raise PytreeError(f"gradient_ cannot accumulate into the number at "
                              f"{format_path(path, 'dx')}: {why}; or use gradient(Reverse, f, "
                              "x), which returns the gradient")
    # Refused before `dx` is zeroed: zeroing a dx that shares memory with x would wipe x.
    x_arrays = [a for a in flatten(x)[0] if _is_array(a)]
    for leaf, path in zip(dx_leaves, dx_paths):
        if _is_array(leaf) and any(np.may_share_memory(leaf, a) for a in x_arrays
                                   if isinstance(a, np.ndarray) and isinstance(leaf, np.ndarray)):
            raise ActivityError(f"gradient_: {format_path(path, 'dx')} shares memory with x; the "
                                "gradient would be written into the values being "
                                "differentiated. Pass a separate buffer: make_zero(x)")
    make_zero_(dx)
    integers = []
    result = autodiff(mode, _integer_result_is_constant(f, integers), Active, Duplicated(x, dx))
    if mode.with_primal:
        return GradientResult((dx,), integers[-1] if integers else result[1])
    return dx


def make_zero_(shadow: Any) -> Any:
    """Zero `shadow` in place: its arrays, and the number leaves of lists, dicts, dataclasses
    and classes registered with ``fields=``; returns `shadow`.

    Every pytree `flatten` traverses is walked, so a shadow that `autodiff` accumulates into
    is zeroed entirely (what `gradient_` relies on). Integer and static leaves are left as they
    are. A nonzero number where it cannot be replaced (inside a tuple, a class registered with
    flatten/unflatten, or `shadow` itself) raises a PytreeError naming its path.

    >>> s = {"w": np.ones(2), "b": [1.5]}
    >>> make_zero_(s)
    {'w': array([0., 0.]), 'b': [0.0]}
    """
    leaves, paths, _ = flatten_with_paths(shadow)
    for leaf, path in zip(leaves, paths):    # every leaf checked before any is written
        if _is_array(leaf):
            _check_writable(leaf, format_path(path, "shadow"))
        elif _is_number(leaf) and leaf != 0:
            if not path:
                raise PytreeError(
                    f"make_zero_ cannot zero the number {leaf!r} in place; it zeroes arrays "
                    "and the number leaves of lists, dicts and dataclasses (use 0.0 instead)")
            why = fixed_place(shadow, path)
            if why is not None:
                raise PytreeError(f"make_zero_ cannot zero the number {leaf!r} at "
                                  f"{format_path(path, 'shadow')}: {why}")
    for leaf, path in zip(leaves, paths):
        if _is_array(leaf):
            leaf[...] = 0
        elif _is_number(leaf) and leaf != 0:
            set_at(shadow, path, type(leaf)(0), root="shadow")
    return shadow


def _is_array(x) -> bool:
    """An array that can be written in place (a NumPy scalar cannot; a 0-d array can)."""
    return hasattr(x, "shape") and not isinstance(x, (np.generic, Tracer))


def _is_number(x) -> bool:
    """A float or complex number (Python or NumPy scalar); integers and bools are not zeroed."""
    return isinstance(x, (float, complex, np.floating, np.complexfloating))


# --------------------------------------------------------------------------------------------
# Jacobians


def jacobian(mode: Mode, f: Callable, *args: Any, chunk: int | None = None) -> tuple:
    """The Jacobian of `f` with respect to each argument, shaped out.shape + x.shape.

    Forward mode pushes `chunk` directions per batched pass (all at once by default); reverse
    mode records one split-mode tape and reverses it once per chunk of output rows, in batch
    mode. `f` must return a real array or scalar (a scalar result gives the gradient). A
    pytree argument gives its own structure with out.shape + leaf.shape at each float leaf
    and None at integer leaves. ``Const(x)`` arguments give None. With ReverseWithPrimal or
    ForwardWithPrimal the result is ``GradientResult(derivs, val)``, as for `gradient`.

    >>> A = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    >>> jacobian(Forward, lambda x: A @ x, np.ones(2), chunk=1)[0]
    array([[1., 2.],
           [3., 4.],
           [5., 6.]])
    >>> jacobian(Reverse, lambda p: p["w"] * p["b"], {"w": np.array([1.0, 2.0]), "b": 3.0})[0]
    {'w': array([[3., 0.],
           [0., 3.]]), 'b': array([1., 2.])}
    """
    _check_mode(mode, "jacobian")
    chunk = check_chunk(chunk)
    args = _unwrap(args, f, "jacobian")
    primals = []

    def check(out):
        check_result(out, f, "jacobian")
        primals.append(out)
    jacobian_of = forward_jacobian if mode.kind == "forward" else reverse_jacobian
    derivs = []
    point = SamePoint(args)   # several passes, all at the same point
    for i, a in enumerate(args):
        if isinstance(a, Const):
            derivs.append(None)
            continue
        J = jacobian_of(f, args, i, chunk, check, point, mode)
        derivs.append(J[0] if mode.kind == "forward" else J)
    if not mode.with_primal:
        return tuple(derivs)
    val = primals[0] if primals else f(*[a.val if isinstance(a, Const) else a for a in args])
    return GradientResult(tuple(derivs), val)


def _check_mode(mode, caller):
    if not isinstance(mode, Mode):
        raise ActivityError(f"{caller}: the first argument is the mode (Reverse, Forward, "
                            f"ReverseWithPrimal or ForwardWithPrimal), got {mode!r}")


# --------------------------------------------------------------------------------------------
# Hessian-vector products: forward over reverse


def _grad_fn(f, caller="hvp"):
    name = getattr(f, "__name__", "f")

    def grad(x):
        try:
            return autodiff(Reverse, f, Active, Active(x))[0][0]
        except ActivityError as e:
            if "scalar" in str(e):
                raise ActivityError(f"{caller} needs a scalar function: `{name}` does not "
                                    f"return a real scalar ({e})") from None
            raise
    return grad


def hvp(f: Callable, x: Any, v: Any):
    """The Hessian of scalar `f` at `x` times `v`, by forward-over-reverse (one pass).

    >>> hvp(lambda x: np.sum(x ** 3), np.array([1.0, 2.0]), np.array([1.0, 0.0]))
    array([6., 0.])
    """
    v = _ordered_like(x, v)
    _check_direction(x, v)
    return autodiff(Forward, _grad_fn(f), Duplicated, Duplicated(x, v))[0]


def _ordered_like(x, v):
    """`v` rebuilt in `x`'s structure where the two differ only in the order of dict keys
    (leaves matched by path, as `hvp_` matches `res`); else `v` as it is."""
    xs, x_paths, x_td = flatten_with_paths(x)
    vs, v_paths, v_td = flatten_with_paths(v)
    if x_td == v_td or len(xs) != len(vs) or not key_order_hint(x_td, v_td):
        return v
    by_path = {_keys(p): leaf for p, leaf in zip(v_paths, vs)}
    keys = [_keys(p) for p in x_paths]
    if any(k not in by_path for k in keys):
        return v
    return unflatten(x_td, [by_path[k] for k in keys])


def _check_direction(x, v) -> None:
    """`v` must be shaped like `x`, leaf by leaf: its type, shape and dtype (named as `v`)."""
    xs, x_paths, x_td = flatten_with_paths(x)
    vs, _, v_td = flatten_with_paths(v)
    if x_td != v_td:
        raise ActivityError(f"`v` has another structure than `x` ({v_td!r} against {x_td!r}); "
                            "pass a direction shaped like x")
    for a, b, path in zip(xs, vs, x_paths):
        where = f"`{format_path(path, 'v')}`"
        if _is_array(a) and not _is_array(b):
            raise ActivityError(f"{where} is a {type(b).__name__} where x has an array; pass "
                                "np.asarray(v, dtype=x.dtype)")
        if np.shape(a) != np.shape(b):
            raise ActivityError(f"{where} has shape {np.shape(b)} but x has shape "
                                f"{np.shape(a)}; pass a direction shaped like x")
        if _is_array(a) and np.result_type(b) != np.result_type(a):
            raise ActivityError(f"{where} has dtype {np.result_type(b)} but x has "
                                f"{np.result_type(a)}; pass v.astype(x.dtype)")


def hvp_(res: Any, f: Callable, x: Any, v: Any):
    """`hvp` written into `res` (an array of x's shape, or a pytree like x); returns `res`.

    >>> res = np.zeros(2)
    >>> hvp_(res, lambda x: np.sum(x ** 3), np.array([1.0, 2.0]), np.array([0.0, 1.0]))
    array([ 0., 12.])
    """
    return _write_into(res, hvp(f, x, v), "res")


def hvp_and_gradient_(res: Any, grad: Any, f: Callable, x: Any, v: Any):
    """Fill `res` with H(x) v and `grad` with the gradient, in one forward-over-reverse pass.

    >>> res, g = np.zeros(2), np.zeros(2)
    >>> hvp_and_gradient_(res, g, lambda x: np.sum(x ** 3), np.array([1.0, 2.0]), np.ones(2))
    (array([ 6., 12.]), array([ 3., 12.]))
    """
    _check_direction(x, v)
    tangent, value = autodiff(ForwardWithPrimal, _grad_fn(f), Duplicated, Duplicated(x, v))
    writes = _planned_writes(res, tangent, "res") + _planned_writes(grad, value, "grad")
    for write in writes:   # both checked before either is written
        write()
    return res, grad


def _write_into(dst, value, name):
    """Copy `value` into `dst` in place (`_planned_writes`); returns `dst`."""
    for write in _planned_writes(dst, value, name):
        write()
    return dst


def _planned_writes(dst, value, name) -> list:
    """The writes that copy `value` into `dst` in place, every leaf checked before any is
    written: array leaves by value, number leaves of lists, dicts and dataclasses by
    replacement (a number inside a tuple cannot be written: PytreeError). Leaves are matched
    by path (dict keys, not their order); each needs the result's shape; integer leaves of
    `dst`, where the result has None, are left as they are."""
    if _is_array(dst):
        _check_shape(dst, value, name)
        _check_dtype(dst, value, name)
        _check_writable(dst, name)
        return [lambda: dst.__setitem__(Ellipsis, value)]
    leaves, paths, _ = flatten_with_paths(dst)
    values, value_paths, _ = flatten_with_paths(value)
    by_path = {_keys(p): v for p, v in zip(value_paths, values)}
    written, writes = set(), []
    for leaf, path in zip(leaves, paths):
        key = _keys(path)
        if key not in by_path:
            if _is_number(leaf) or _is_array(leaf) and np.asarray(leaf).dtype.kind in "fc":
                raise ActivityError(f"{format_path(path, name)} has no counterpart in the result "
                                    "(its keys or fields differ); pass a pytree shaped like x")
            continue
        val = by_path[key]
        written.add(key)
        _check_dtype(leaf, val, format_path(path, name))
        if _is_array(leaf):
            _check_shape(leaf, val, format_path(path, name))
            _check_writable(leaf, format_path(path, name))
            writes.append(functools.partial(leaf.__setitem__, Ellipsis, val))
        elif not path:
            raise ActivityError(f"`{name}` is a {type(dst).__name__}, which cannot be written "
                                "in place; pass an array (or a pytree of arrays)")
        else:
            writes.append(functools.partial(set_at, dst, path, type(leaf)(val), root=name))
    missing = [p for p in value_paths if _keys(p) not in written]
    if missing:
        raise ActivityError(f"{format_path(missing[0], name)} is missing: `{name}` has no leaf "
                            "there for the result; pass a pytree shaped like x (make_zero(x))")
    return writes


def _keys(path):
    return tuple(entry.key for entry in path)


def _dtype_of(x) -> np.dtype:
    """An array's dtype (a CuPy array's too, which np.result_type would try to convert), or
    NumPy's type for a number."""
    dtype = getattr(x, "dtype", None)
    return np.dtype(dtype) if dtype is not None else np.result_type(x)


def _check_writable(dst, where):
    flags = getattr(dst, "flags", None)
    if flags is not None and not getattr(flags, "writeable", True):   # (CuPy has no such flag)
        raise ActivityError(f"{where} is a read-only array (flags.writeable is False), so the "
                            "result cannot be written into it; pass a writable array "
                            "(np.zeros_like(x), or x.copy())")


def _check_dtype(dst, value, where):
    """A destination that would cut the result (an int array for a float result, a real one
    for a complex result) is refused, as `gradient_` refuses such a shadow."""
    have, want = _dtype_of(dst), _dtype_of(value)
    if not np.can_cast(want, have, casting="same_kind"):
        raise ActivityError(f"{where} has dtype {have} but the result there is {want}; writing "
                            f"it would cut the values. Pass a {want} destination (make_zero(x) "
                            "of a float x, or np.zeros_like(x, dtype=float))")


def _check_shape(dst, value, where):
    if np.shape(dst) != np.shape(value):
        raise ActivityError(f"{where} has shape {np.shape(dst)} but the result there has shape "
                            f"{np.shape(value)}; pass arrays shaped like x's (make_zero(x))")


def hessian(f: Callable, x: Any, *, chunk: int | None = None):
    """The Hessian of real scalar `f` at `x`: batched forward-over-reverse, `chunk`
    Hessian-vector products per pass (all by default).

    An array `x` gives an array shaped x.shape + x.shape. A pytree `x` (dict, list, tuple,
    namedtuple, dataclass) gives one (n, n) matrix over its n float entries, in the order of
    ``onehot(x)``: leaves as ``tape.pytree.flatten(x)`` lists them, each leaf in C order
    (integer leaves are held constant and left out). Complex and integer arguments are
    refused.

    >>> hessian(lambda x: x[0] ** 2 * x[1], np.array([1.0, 2.0]))
    array([[4., 2.],
           [2., 0.]])
    >>> hessian(lambda p: p["b"] ** 2 * np.sum(p["w"] ** 2), {"w": np.array([1.0, 2.0]), "b": 3.0})
    array([[18.,  0., 12.],
           [ 0., 18., 24.],
           [12., 24., 10.]])
    """
    chunk = check_chunk(chunk)
    check_argument(x, 0, f, "hessian")
    if any(is_complex(leaf) for leaf in flatten(x)[0]):
        raise ActivityError(
            "hessian: the argument holds complex values; the Hessian of a real function of "
            "complex variables is over their real and imaginary parts: pass them as real "
            "arrays (lambda re, im: f(re + 1j * im)) and differentiate those")
    if is_tree(x):
        g, call, _ = on_float_leaves(f, [x], 0)
        columns, _ = forward_columns(_flat_grad_fn(g, "hessian"), call, 0, chunk)
        xp = array_module(columns[0] if hasattr(columns[0], "shape") else np.asarray(0.0))
        return xp.stack([xp.asarray(c) for c in columns], axis=-1)
    if isinstance(x, float) and not isinstance(x, Tracer):
        x = np.asarray(x, dtype=float)
    return forward_jacobian(_grad_fn(f, "hessian"), [x], 0, chunk)[0]


def _flat_grad_fn(g, caller):
    """x (a list of float leaves) -> the gradient of `g` there, raveled into one vector."""
    grad = _grad_fn(g, caller)

    def flat_grad(leaves):
        return np.concatenate([np.reshape(d, -1) for d in grad(leaves)])
    return flat_grad
