"""The annotated arguments of one `autodiff` call: their differentiable leaves, shadow checks
that name the leaf at fault, batch widths, and the tracers `f` is called with."""
from __future__ import annotations

import functools
import inspect

import numpy as np

from .activities import Active, BatchDuplicated, Const, Duplicated, MixedDuplicated
from .aliasing import mark_aliases, overlap, watch_arguments
from .backend import module_name
from .constbuffer import as_const
from .core import Tracer, peek
from .errors import ActivityError, PytreeError, refuse_matrix_or_masked
from .pytree import fixed_place, flatten, flatten_with_paths, format_path, unflatten


class _ArgumentName:
    """`argument 1 (`model`)` for error messages, looked up only when an error needs it
    (speed-up: inspect.signature costs more than a small differentiation)."""

    __slots__ = ("f", "i")

    def __init__(self, f, i):
        self.f, self.i = f, i

    def parameter(self):
        try:
            params = list(inspect.signature(self.f).parameters.values())
        except (TypeError, ValueError):
            return None
        if self.i < len(params) and params[self.i].kind in (
                params[self.i].POSITIONAL_ONLY, params[self.i].POSITIONAL_OR_KEYWORD):
            return params[self.i].name
        return None

    def __str__(self):
        name = self.parameter()
        return f"argument {self.i}" + (f" (`{name}`)" if name else "")

    @property
    def root(self):
        return self.parameter() or f"args[{self.i}]"


def _argument_names(f, n):
    return [_ArgumentName(f, i) for i in range(n)]


def _is_extension_dtype(x) -> bool:
    """Whether `x` is an array of a floating-point dtype from outside NumPy (ml_dtypes'
    bfloat16, float8_*), which NumPy sees as kind 'V'."""
    dt = getattr(x, "dtype", None)
    return isinstance(dt, np.dtype) and dt.kind == "V" and "float" in dt.name


def _is_float(x) -> bool:
    dt = getattr(x, "dtype", None)
    if dt is None:
        return isinstance(x, (float, complex))
    return dt.kind in "fc" if isinstance(dt, np.dtype) else np.issubdtype(dt, np.inexact)


class _Leaves:
    """The differentiable leaves of one annotated argument, with their tracers.

    ``first_slots[i]`` is None for a leaf that is not traced (an int, say); otherwise the tape
    slot its tracer started with (reverse mode; a later slot means f overwrote it), or True
    (forward mode)."""

    __slots__ = ("annotation", "name", "leaves", "paths", "treedef", "tracers", "shadows",
                 "first_slots", "width")

    def __init__(self, annotation, name):
        self.annotation = annotation
        self.name = name
        self.leaves, self.paths, self.treedef = flatten_with_paths(annotation.val,
                                                                   where=self.place)
        kind = type(annotation).__name__
        if not self.leaves or not any(_is_float(x) for x in self.leaves):
            odd = next((x.dtype for x in self.leaves if _is_extension_dtype(x)), None)
            if odd is not None:   # ml_dtypes' bfloat16 and float8 types: kind 'V'
                raise ActivityError(
                    f"{name} is marked {kind} but holds {odd} values, a floating-point type "
                    "outside NumPy's own (kind 'V'), which Hecate does not differentiate; "
                    "convert it with .astype(np.float32) and back after")
            raise ActivityError(
                f"{name} is marked {kind} but holds no floating-point value "
                f"({_describe(annotation.val)}); integer and boolean values have no derivative. "
                "Mark it Const, or convert it with .astype(float)")
        self.tracers = []
        self.shadows = None      # per leaf: the shadow, or a W-tuple of them in batch mode
        self.first_slots = []
        self.width = annotation.width if isinstance(annotation, BatchDuplicated) else None

    def path(self, i):
        """`model.proj.w_k (argument 0)`: the leaf as the user reaches it."""
        return self.place(self.paths[i])

    def place(self, path):
        if not path:
            return str(self.name)
        return f"{format_path(path, self.name.root)} (argument {self.name.i})"


def _describe(x):
    if hasattr(x, "dtype") and hasattr(x, "shape"):
        # (a value an enclosing differentiation traces is an array to the user)
        kind = "array" if isinstance(x, Tracer) else type(x).__name__
        return f"{kind} of dtype {x.dtype} and shape {tuple(x.shape)}"
    return type(x).__name__


def _check_shadow(arg: _Leaves):
    ann = arg.annotation
    if arg.width is None:
        arg.shadows = _checked_shadow_leaves(arg, ann.dval, "shadow")
        return
    per_direction = [_checked_shadow_leaves(arg, dval, f"shadow {w}")
                     for w, dval in enumerate(ann.dval)]
    arg.shadows = list(zip(*per_direction))


def _checked_shadow_leaves(arg: _Leaves, dval, what: str) -> list:
    ann = arg.annotation
    shadow_leaves, shadow_td = flatten(dval)
    if shadow_td != arg.treedef or len(shadow_leaves) != len(arg.leaves):
        difference = _structure_difference(ann.val, dval, what) or (
            f"the primal is {_describe(ann.val)} with {len(arg.leaves)} leaves, the {what} "
            f"{_describe(dval)} with {len(shadow_leaves)} leaves")
        raise ActivityError(
            f"the {what} of {arg.name} does not have the structure of its primal: "
            f"{difference}. make_zero(x) builds a matching shadow")
    for i, (x, dx) in enumerate(zip(arg.leaves, shadow_leaves)):
        if not _is_float(x):
            continue
        problem = _shadow_mismatch(x, dx)
        if problem:
            raise ActivityError(f"{what} of {arg.path(i)} {problem}; np.zeros_like(x) (or "
                                "make_zero(x) for a pytree) builds a matching shadow")
    return shadow_leaves


def _structure_difference(x, dx, what: str, where: str = "") -> str:
    """Where the containers `x` and `dx` first differ ("at ['b']: the primal has keys ...");
    "" when the difference is not in the containers themselves (a leaf's kind, say)."""
    at = f"at {where}: " if where else ""
    if isinstance(x, dict) and isinstance(dx, dict):
        if set(x) != set(dx):
            return (f"{at}the primal has keys {sorted(map(str, x))}, the {what} keys "
                    f"{sorted(map(str, dx))}")
        inner = next((d for k in x if (d := _structure_difference(
            x[k], dx[k], what, f"{where}[{k!r}]"))), "")
        if not inner and list(x) != list(dx):   # leaves pair up in the keys' order
            return (f"{at}the {what}'s keys are in another order, {list(dx)!r}, than the "
                    f"primal's, {list(x)!r}: build it in the primal's order (tape.make_zero("
                    f"primal) does)")
        return inner
    if isinstance(x, (list, tuple)) and isinstance(dx, (list, tuple)):
        if type(x) is not type(dx) or len(x) != len(dx):
            return (f"{at}the primal is a {type(x).__name__} of length {len(x)}, the {what} "
                    f"a {type(dx).__name__} of length {len(dx)}")
        return next((d for i, (a, b) in enumerate(zip(x, dx)) if (d := _structure_difference(
            a, b, what, f"{where}[{i}]"))), "")
    if (isinstance(x, (dict, list, tuple)) != isinstance(dx, (dict, list, tuple))
            or (x is None) != (dx is None)):
        return f"{at}the primal is {_describe(x)}, the {what} {_describe(dx)}"
    return ""


def batch_width(annotated, names) -> int | None:
    """The common width W of the BatchDuplicated arguments (None when there are none).

    Every differentiated argument of a batch call must carry W shadows: a plain Duplicated
    argument (width 1) beside a BatchDuplicated one is a width mismatch, as in Enzyme."""
    widths = {}
    for ann, name in zip(annotated, names):
        if isinstance(ann, BatchDuplicated):
            widths[str(name)] = ann.width
    if not widths:
        return None
    for name, w in widths.items():
        if w < 1:
            raise ActivityError(f"{name} is BatchDuplicated with no shadows (width {w}); give "
                                "it at least one: BatchDuplicated(x, (dx_1, ...))")
    if len(set(widths.values())) > 1:
        listing = ", ".join(f"{n} has width {w}" for n, w in widths.items())
        raise ActivityError(f"batch width mismatch: {listing}; every BatchDuplicated argument "
                            "of one call needs the same number of shadows")
    width = next(iter(widths.values()))
    for ann, name in zip(annotated, names):
        if isinstance(ann, Duplicated) and not isinstance(ann, BatchDuplicated):
            raise ActivityError(
                f"{name} is {type(ann).__name__} (one shadow) beside BatchDuplicated arguments "
                f"(width {width}): a batch call takes batched shadows only; use "
                f"BatchDuplicated(x, (dx_1, ..., dx_{width})) for it, or Const")
    return width


def _shadow_mismatch(x, dx) -> str | None:
    if np.shape(x) != np.shape(dx):
        return f"has shape {np.shape(dx)} but the primal has shape {np.shape(x)}"
    if hasattr(x, "dtype") and getattr(dx, "dtype", None) != x.dtype and np.ndim(x) > 0:
        return (f"has dtype {getattr(dx, 'dtype', type(dx).__name__)} but the primal has dtype "
                f"{x.dtype}")
    if np.ndim(x) == 0 and np.iscomplexobj(dx) and not np.iscomplexobj(x):
        # (arrays are refused above by dtype; a scalar's shadow may be a wider real type)
        return (f"is complex ({dx!r}) but the primal is real ({type(x).__name__}): a real "
                f"function's tangent or cotangent is real; make the primal complex to "
                f"differentiate in a complex direction")
    if module_name(x) != module_name(dx):
        return f"is a {module_name(dx)} array but the primal is a {module_name(x)} array"
    return None


def _trace_arguments(annotated, names, check, make_leaf):
    """The arguments `f` is called with: Const values as they are (arrays as ConstBuffer
    views), and the float leaves of the others replaced by tracers `make_leaf(x, dx)`."""
    call_args, groups, arrays = [], [], []
    for ann, name in zip(annotated, names):
        if type(ann) is Const:
            value = as_const(ann.val, name)
            call_args.append(value)
            if isinstance(value, np.ndarray):
                arrays.append((name.__str__, ann.val, value))
            continue
        arg = check(ann, name)
        shadows = arg.shadows if arg.shadows is not None else [None] * len(arg.leaves)
        for i, (x, dx) in enumerate(zip(arg.leaves, shadows)):
            if _is_float(x):
                if type(x) is not np.ndarray and isinstance(x, np.ndarray):   # (path: lazily)
                    refuse_matrix_or_masked(x, arg.path(i), ActivityError)
                t = make_leaf(x, dx)
                arg.tracers.append(t)
                arg.first_slots.append(getattr(t, "slot", True))
                if isinstance(x, np.ndarray):
                    arrays.append((functools.partial(arg.path, i), x, t))
            else:
                arg.tracers.append(x)
                arg.first_slots.append(None)
        groups.append(arg)
        call_args.append(unflatten(arg.treedef, arg.tracers))
    if arrays:
        watch_arguments(arrays)
        if len(arrays) > 1:
            mark_aliases(arrays)
    return call_args, groups


def _reverse_argument(ann, name):
    if not isinstance(ann, (Active, Duplicated)):
        raise ActivityError(f"{name}: {type(ann).__name__} is not supported in reverse mode")
    arg = _Leaves(ann, name)
    if isinstance(ann, Duplicated):
        _check_shadow(arg)
        _check_shadow_not_read_only(arg)
        if isinstance(ann, MixedDuplicated):
            return arg
        _check_shadow_writable(arg)
        if not arg.paths[0] and not _is_mutable_leaf(ann.val):
            raise ActivityError(
                f"{name} is {type(ann).__name__} but is an immutable scalar "
                f"({type(ann.val).__name__}); "
                "its shadow could not be updated. Mark it Active to get its derivative returned")
        shadows = ann.dval if isinstance(ann, BatchDuplicated) else (ann.dval,)
        if not arg.paths[0] and not all(_is_mutable_leaf(d) for d in shadows):
            raise ActivityError(
                f"{name} is {type(ann).__name__} with a shadow that is an immutable number "
                f"({', '.join(type(d).__name__ for d in shadows)}), which the derivative cannot "
                "be added into; pass "
                "an array shaped like it (np.zeros_like(x), make_zero(x))")
    return arg


def _forward_argument(ann, name):
    if isinstance(ann, Active):
        raise ActivityError(f"{name}: Active is not allowed in forward mode; use "
                            "Duplicated(x, dx) with the tangent dx")
    arg = _Leaves(ann, name)
    _check_shadow(arg)
    return arg


def _check_shadow_not_read_only(arg):
    """Reverse mode adds into (and zeroes) the shadow arrays after the sweep: a read-only one
    is refused before `f` runs, not after the shadows before it were updated."""
    for i, dx in enumerate(arg.shadows):
        for w, d in enumerate(dx if arg.width is not None else (dx,)):
            if isinstance(d, np.ndarray) and not d.flags.writeable:
                which = "shadow" if arg.width is None else f"shadow {w}"
                raise ActivityError(
                    f"the {which} of {arg.path(i)} is read-only (a broadcast_to view, or "
                    "flags.writeable is False); reverse mode adds the gradient into it. Pass a "
                    "writable array: np.zeros_like(x)")


def _check_shadow_writable(arg):
    """Reverse mode adds into shadows in place: refuse, before running f, a float shadow leaf
    that sits in a tuple (it could not be updated), or one that shares memory with its primal
    (the gradient would be added into the values being differentiated)."""
    for i, (x, dx) in enumerate(zip(arg.leaves, arg.shadows)):
        # Batch mode: `dx` is the W shadows of the leaf, each checked.
        per_direction = dx if arg.width is not None else (dx,)
        if (_is_float(x) and arg.paths[i] and arg.paths[i][-1].kind == "index"
                and not all(_is_mutable_leaf(d) for d in per_direction)):
            why = (fixed_place(arg.annotation.dval, arg.paths[i]) if arg.width is None
                   else None) or ("a number inside a tuple cannot be updated in place. Use "
                                  "a list, a dict or a dataclass for the shadow")
            raise PytreeError(f"cannot accumulate into the immutable leaf {arg.path(i)} of "
                              f"the shadow: {why}; or mark the argument Active")
        # (an enclosing differentiation's values are compared by the arrays they hold)
        x = peek(x)
        if isinstance(x, np.ndarray) and any(
                isinstance(d, np.ndarray) and np.may_share_memory(x, d) and overlap(x, d)
                for d in map(peek, per_direction)):
            raise ActivityError(
                f"the shadow of {arg.path(i)} shares memory with its primal (Duplicated(x, x), "
                "or overlapping views); the gradient would be added into the values being "
                "differentiated. Give it a separate shadow: Duplicated(x, np.zeros_like(x))")


def _is_mutable_leaf(x):
    """An array (of any rank, a 0-d NumPy or CuPy array too) takes a gradient in place; a
    number or a NumPy scalar cannot."""
    if isinstance(x, Tracer):   # nested autodiff: a traced 0-d array is an array too
        x = peek(x)
    return (isinstance(x, np.ndarray) or hasattr(x, "__cuda_array_interface__")
            or hasattr(x, "shape") and np.ndim(x) > 0)
