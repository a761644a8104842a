"""`autodiff` and its helpers: Enzyme.jl's calling convention on top of the traces."""
from __future__ import annotations

import inspect
from typing import Any, Callable

import numpy as np

from .activities import (ACTIVITY_TYPES, Active, Annotation, BatchDuplicated,
                         BatchDuplicatedNoNeed, Const, Duplicated, DuplicatedNoNeed,
                         MixedDuplicated, Mode)
from .backend import array_module, module_name
from .batching import Batched, stack_directions
from .constbuffer import as_const
from .core import ForwardTrace, ReverseTrace, Tracer, primal
from .errors import ActivityError, PytreeError
from .modifiers import (check_complex_return, holomorphic_sweep, is_complex, to_user,
                        user_cotangents)
from .pytree import flatten, flatten_with_paths, format_path, is_inactive, set_at, unflatten
from . import tracer as _surface  # noqa: F401  (installs the ndarray surface on tracers)


def autodiff(mode: Mode, f: Callable, *args: Any) -> tuple:
    """Differentiate `f` at the annotated arguments (Enzyme.jl's `autodiff`).

    ``autodiff(mode, f, [ReturnActivity], *annotated_args)``. Reverse modes return
    ``(derivs,)`` or ``(derivs, primal)`` where ``derivs`` has one entry per argument (the
    derivative for Active arguments, None otherwise); Duplicated shadows are updated in place.
    Forward modes return ``(tangent,)`` or ``(tangent, primal)``.

    >>> autodiff(Reverse, lambda x: x**2, Active, Active(3.0))
    ((6.0,),)
    >>> autodiff(ForwardWithPrimal, lambda x: x**2, Duplicated(3.0, 1.0))
    (6.0, 9.0)
    """
    if not isinstance(mode, Mode):
        raise ActivityError(f"the first argument of autodiff must be a mode such as Reverse or "
                            f"Forward, got {mode!r}")
    if not callable(f):
        raise ActivityError(f"autodiff needs a callable function to differentiate, got "
                            f"{type(f).__name__} {f!r}")
    ret_activity = None
    if args and isinstance(args[0], type):
        ret_activity, args = args[0], args[1:]
        if ret_activity not in ACTIVITY_TYPES:
            raise ActivityError(f"return activity must be one of Const, Active, Duplicated, "
                                f"DuplicatedNoNeed; got {ret_activity.__name__}")
    names = _argument_names(f, len(args))
    annotated = [a if isinstance(a, Annotation) else Const(a) for a in args]
    # Values of an inactive_type are constants whatever their annotation (Enzyme).
    annotated = [Const(a.val) if is_inactive(a.val) else a for a in annotated]
    if mode.kind == "reverse":
        return _reverse(mode, f, ret_activity, annotated, names)
    return _forward(mode, f, ret_activity, annotated, names)


# --------------------------------------------------------------------------------------------
# Arguments


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
        self.leaves, self.paths, self.treedef = flatten_with_paths(annotation.val)
        kind = type(annotation).__name__
        if not self.leaves or not any(_is_float(x) for x in self.leaves):
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
        if not self.paths[i]:
            return str(self.name)
        return f"{format_path(self.paths[i], self.name.root)} (argument {self.name.i})"


def _describe(x):
    if hasattr(x, "dtype") and hasattr(x, "shape"):
        return f"{type(x).__name__} of dtype {x.dtype} and shape {tuple(x.shape)}"
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
        raise ActivityError(
            f"the {what} of {arg.name} does not have the structure of its primal: the primal is "
            f"{_describe(ann.val)} with {len(arg.leaves)} leaves, the {what} "
            f"{_describe(dval)} with {len(shadow_leaves)} leaves. make_zero(x) builds a "
            "matching shadow")
    for i, (x, dx) in enumerate(zip(arg.leaves, shadow_leaves)):
        if not _is_float(x):
            continue
        problem = _shadow_mismatch(x, dx)
        if problem:
            raise ActivityError(f"{what} of {arg.path(i)} {problem}")
    return shadow_leaves


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
    if len(set(widths.values())) > 1:
        listing = ", ".join(f"{n} has width {w}" for n, w in widths.items())
        raise ActivityError(f"batch width mismatch: {listing}; every BatchDuplicated argument "
                            "of one call needs the same number of shadows")
    width = next(iter(widths.values()))
    for ann, name in zip(annotated, names):
        if isinstance(ann, Duplicated) and not isinstance(ann, BatchDuplicated):
            raise ActivityError(
                f"batch width mismatch: {name} is {type(ann).__name__} (width 1) but other "
                f"arguments are BatchDuplicated with width {width}; use BatchDuplicated(x, "
                f"(dx_1, ..., dx_{width})) for it, or Const")
    return width


def _shadow_mismatch(x, dx) -> str | None:
    if np.shape(x) != np.shape(dx):
        return f"has shape {np.shape(dx)} but the primal has shape {np.shape(x)}"
    if hasattr(x, "dtype") and getattr(dx, "dtype", None) != x.dtype and np.ndim(x) > 0:
        return (f"has dtype {getattr(dx, 'dtype', type(dx).__name__)} but the primal has dtype "
                f"{x.dtype}")
    if module_name(x) != module_name(dx):
        return f"is a {module_name(dx)} array but the primal is a {module_name(x)} array"
    return None


def _trace_arguments(annotated, names, check, make_leaf):
    """The arguments `f` is called with: Const values as they are (arrays as ConstBuffer
    views), and the float leaves of the others replaced by tracers `make_leaf(x, dx)`."""
    call_args, groups = [], []
    for ann, name in zip(annotated, names):
        if type(ann) is Const:
            call_args.append(as_const(ann.val, name))
            continue
        arg = check(ann, name)
        shadows = arg.shadows if arg.shadows is not None else [None] * len(arg.leaves)
        for x, dx in zip(arg.leaves, shadows):
            if _is_float(x):
                t = make_leaf(x, dx)
                arg.tracers.append(t)
                arg.first_slots.append(getattr(t, "slot", True))
            else:
                arg.tracers.append(x)
                arg.first_slots.append(None)
        groups.append(arg)
        call_args.append(unflatten(arg.treedef, arg.tracers))
    return call_args, groups


def _reverse_argument(ann, name):
    if not isinstance(ann, (Active, Duplicated)):
        raise ActivityError(f"{name}: {type(ann).__name__} is not supported in reverse mode")
    arg = _Leaves(ann, name)
    if isinstance(ann, Duplicated):
        _check_shadow(arg)
        if isinstance(ann, MixedDuplicated):
            return arg
        _check_shadow_writable(arg)
        if not arg.paths[0] and not _is_mutable_leaf(ann.val):
            raise ActivityError(
                f"{name} is Duplicated but is an immutable scalar ({type(ann.val).__name__}); "
                "its shadow could not be updated. Mark it Active to get its derivative returned")
    return arg


def _forward_argument(ann, name):
    if isinstance(ann, Active):
        raise ActivityError(f"{name}: Active is not allowed in forward mode; use "
                            "Duplicated(x, dx) with the tangent dx")
    arg = _Leaves(ann, name)
    _check_shadow(arg)
    return arg


# --------------------------------------------------------------------------------------------
# Reverse mode


def _reverse(mode, f, ret_activity, annotated, names):
    if ret_activity in (Duplicated, DuplicatedNoNeed):
        raise ActivityError(
            "a Duplicated return needs a seed: use autodiff_thunk with ReverseSplitWithPrimal, or "
            "write the result into a Duplicated argument whose shadow is the seed")
    width = batch_width(annotated, names)
    with ReverseTrace(strong_zero=mode.strong_zero, nan_check=mode.nan_check) as trace:
        out, groups = record_reverse(trace, f, annotated, names)
        seeds = {}
        holomorphic = None
        if guess_return(ret_activity, out) is Active:
            holomorphic = _seed_return(out, trace, seeds, width, mode)
        cts = sweep(trace, groups, seeds, width, holomorphic=holomorphic)
        # Only now: records may have saved the caller's own arrays, which this overwrites.
        for arg in groups:
            _write_primals(arg)
    result = (derivatives(annotated, groups, cts, width),)
    if mode.with_primal:
        result += (_strip(out, trace),)
    return result


def record_reverse(trace, f, annotated, names):
    """Run `f` on tracers of `trace`; returns its output and the argument groups."""
    # The user's arrays are not `owned`: a write copies them first, and the final values are
    # copied back into them after the sweep.
    call_args, groups = _trace_arguments(annotated, names, _reverse_argument,
                                         lambda x, dx: trace.new_leaf(x))
    return f(*call_args), groups


def guess_return(ret_activity, out):
    """Enzyme.jl's guess when no return activity is given: Active for a float result."""
    if ret_activity is not None:
        return ret_activity
    return Active if out is not None and _is_float(out) else Const


def sweep(trace, groups, seeds, width, consume=True, holomorphic=None) -> dict:
    """Seed the buffers `f` overwrote and run the reverse sweep; returns the leaves'
    cotangents by slot, in the user's complex convention (docs/complex.md). `holomorphic` is
    the complex result that ReverseHolomorphic seeds."""
    for arg in groups:
        _write_back_reverse(arg, trace, seeds, width)
    keep = [s for arg in groups for s in arg.first_slots if s is not None]
    leaves = [(x, s) for arg in groups for x, s in zip(arg.leaves, arg.first_slots)
              if s is not None]
    if holomorphic is not None:
        cts = holomorphic_sweep(trace, seeds, holomorphic, keep,
                                {s for x, s in leaves if is_complex(x)})
    else:
        cts = trace.backward(seeds, keep, consume) if seeds else {}
    return user_cotangents(cts, leaves)


def derivatives(annotated, groups, cts, width) -> tuple:
    """What reverse mode returns: per argument, the derivative of an Active one (a W-tuple
    in batch mode), None otherwise; Duplicated shadows are accumulated in place."""
    derivs, groups = [], list(groups)
    for ann in annotated:
        if type(ann) is Const:
            derivs.append(None)
            continue
        arg = groups.pop(0)
        if isinstance(ann, Duplicated):
            derivs.append(_accumulate_shadows(arg, cts, width))
        elif width is None:
            derivs.append(_active_result(arg, cts))
        else:
            derivs.append(tuple(_active_result(arg, _direction(cts, w)) for w in range(width)))
    return tuple(derivs)


def _direction(cts: dict, w: int) -> dict:
    return {s: g.data[w] if isinstance(g, Batched) else g for s, g in cts.items()}


def _check_shadow_writable(arg):
    """Reverse mode adds into shadows in place: refuse, before running f, a float shadow leaf
    that sits in a tuple (it could not be updated)."""
    for i, (x, dx) in enumerate(zip(arg.leaves, arg.shadows)):
        if (_is_float(x) and arg.paths[i] and not _is_mutable_leaf(dx)
                and arg.paths[i][-1].kind == "index"):
            raise PytreeError(
                f"cannot accumulate into the immutable leaf {arg.path(i)} of the shadow: a "
                "number inside a tuple cannot be updated in place. Use a list, a dict or a "
                "dataclass for the shadow, or mark the argument Active")


def _is_mutable_leaf(x):
    return hasattr(x, "shape") and np.ndim(x) > 0 or isinstance(x, np.ndarray)


def _seed_return(out, trace, seeds, width=None, mode=None):
    """Seed an Active scalar result with 1. A complex one is refused unless the mode is
    ReverseHolomorphic, which seeds it itself: it is returned."""
    value = out.value if isinstance(out, Tracer) and out.level is trace else out
    if mode is not None and np.ndim(value) == 0 and is_complex(primal(value)):
        check_complex_return(mode, width)
        return out if isinstance(out, Tracer) and out.level is trace else None
    if out is None or np.ndim(value) != 0 or not _is_float(value) or np.iscomplexobj(value):
        raise ActivityError(
            f"reverse mode with an Active return needs a real scalar result, but the function "
            f"returned {_describe(value)}. Reduce it to a scalar (e.g. .sum()), or pass a seed "
            "by writing the result into a Duplicated argument whose shadow holds the seed")
    if isinstance(out, Tracer) and out.level is trace:
        one = _ones_like(value)
        seeds[out.slot] = one if width is None else Batched(array_module(one).ones(
            (width,), dtype=one.dtype))


def _ones_like(value):
    xp = array_module(value)
    dt = getattr(value, "dtype", None)
    dt = np.float64 if dt is None else dt
    return xp.ones((), dtype=dt)


def _write_back_reverse(arg, trace, seeds, width=None):
    """Enzyme semantics for buffers the function overwrote: the primal really holds the new
    values, and the shadow is the seed of the final value (it is zeroed after the sweep)."""
    for i, t in enumerate(arg.tracers):
        first = arg.first_slots[i]
        if first is None or t.slot == first or arg.shadows is None:
            continue
        if width is None:
            shadow = arg.shadows[i]
            seeds[t.slot] = to_user(shadow) if is_complex(shadow) else shadow.copy()
            shadow[...] = 0
        else:
            seeds[t.slot] = to_user(stack_directions(arg.shadows[i]))
            for shadow in arg.shadows[i]:
                shadow[...] = 0


def _write_primals(arg):
    for i, t in enumerate(arg.tracers):
        first = arg.first_slots[i]
        if first is not None and t.slot != first:
            arg.leaves[i][...] = t.value


def _accumulate_shadows(arg, cts, width=None):
    """Add the gradients into the shadows. MixedDuplicated returns the derivatives of its
    immutable leaves (which have no memory to add into) in a container like its primal."""
    mixed = isinstance(arg.annotation, MixedDuplicated)
    immutable = [None] * len(arg.leaves)
    for i, first in enumerate(arg.first_slots):
        if first is None:
            continue
        g = cts.get(first)
        if g is None:
            continue
        if width is not None:
            for w, shadow in enumerate(arg.shadows[i]):
                shadow += g.data[w] if isinstance(g, Batched) else g
            continue
        shadow = arg.shadows[i]
        if _is_mutable_leaf(shadow):
            shadow += g
        elif mixed:
            immutable[i] = _cast_like(g, arg.leaves[i])
        else:
            set_at(arg.annotation.dval, arg.paths[i], type(shadow)(shadow + g),
                   root=f"shadow of {arg.name.root}")
    if not mixed:
        return None
    for i, x in enumerate(arg.leaves):
        if immutable[i] is None and arg.first_slots[i] is not None and not _is_mutable_leaf(x):
            immutable[i] = _cast_like(None, x)
    return unflatten(arg.treedef, immutable)


def _active_result(arg, cts):
    out = []
    for i, x in enumerate(arg.leaves):
        first = arg.first_slots[i]
        if first is None:
            out.append(None)
            continue
        out.append(_cast_like(cts.get(first), x))
    return unflatten(arg.treedef, out)


def _cast_like(g, x):
    """The derivative in the type of its primal: float in, float out; zeros for no path."""
    if isinstance(x, Tracer):
        return g if g is not None else x * 0
    if g is None:
        if isinstance(x, (float, complex)):
            return type(x)(0)
        return array_module(x).zeros_like(x)
    if isinstance(g, Tracer):
        return g
    if isinstance(x, (float, complex)) and not isinstance(x, np.generic):
        return type(x)(g)
    if isinstance(x, np.generic):
        return x.dtype.type(g)
    if getattr(g, "dtype", None) != x.dtype or np.shape(g) != np.shape(x):
        xp = array_module(x)
        return xp.broadcast_to(xp.asarray(g, dtype=x.dtype), x.shape).copy()
    return g


def _strip(out, trace):
    """The primal result: tracers of `trace` replaced by their values."""
    leaves, td = flatten(out) if out is not None else ([], None)
    if td is None:
        return None
    return unflatten(td, [_python_scalar(x.value) if isinstance(x, Tracer) and x.level is trace
                          else x for x in leaves])


def _python_scalar(v):
    # NumPy turns Python floats into float64 scalars on the way; give back the Python type.
    t = type(v)
    if t is np.float64:
        return float(v)
    if t is np.complex128:
        return complex(v)
    return v


# --------------------------------------------------------------------------------------------
# Forward mode


def _forward(mode, f, ret_activity, annotated, names):
    if ret_activity is Active:
        raise ActivityError("Active is not allowed in forward mode; use Duplicated")
    width = batch_width(annotated, names)

    def make_leaf(x, dx):
        # Batch mode: the W tangents travel as one array with a leading axis.
        return trace.new_leaf(x, dx if width is None else stack_directions(dx))

    with ForwardTrace(strong_zero=mode.strong_zero, nan_check=mode.nan_check) as trace:
        call_args, groups = _trace_arguments(annotated, names, _forward_argument, make_leaf)
        # A primitive differentiated directly is told what the caller needs (RuleConfig).
        no_need = ret_activity in (DuplicatedNoNeed, BatchDuplicatedNoNeed)
        out = trace.call_root(f, call_args, needs_primal=mode.with_primal and not no_need,
                              needs_shadow=ret_activity is not Const)
        for arg in groups:
            _write_back_forward(arg, width)
        primal_out = _strip(out, trace)
        tangent_out = None
        if ret_activity is not Const and out is not None:
            leaves, td = flatten(out)
            tangents = [_tangent_of(x, trace) for x in leaves]
            if width is None:
                tangent_out = unflatten(td, tangents)
            else:
                tangent_out = tuple(unflatten(td, [_tangent_direction(t, w) for t in tangents])
                                    for w in range(width))
    if ret_activity is Const:
        return (primal_out,) if mode.with_primal else ()
    if mode.with_primal and not no_need:
        return (tangent_out, primal_out)
    return (tangent_out,)


def _tangent_of(x, trace):
    if isinstance(x, Tracer) and x.level is trace:
        if x.tangent is not None:
            return x.tangent
        x = x.value
    if isinstance(x, (float, int)) and not isinstance(x, np.generic):
        return 0.0
    if isinstance(x, Tracer):
        return x * 0
    return array_module(x).zeros_like(x)


def _tangent_direction(t, w):
    if not isinstance(t, Batched):
        return t        # a zero: the same in every direction
    v = t.data[w]
    return v if np.ndim(v) else v[()]


def _write_back_forward(arg, width=None):
    for i, t in enumerate(arg.tracers):
        if arg.first_slots[i] is None or t.value is arg.leaves[i]:
            continue   # never written
        arg.leaves[i][...] = t.value
        shadows = arg.shadows[i] if width is not None else (arg.shadows[i],)
        for w, shadow in enumerate(shadows):
            if t.tangent is None:
                shadow[...] = 0
            elif isinstance(t.tangent, Batched):
                shadow[...] = t.tangent.data[w]
            else:
                shadow[...] = t.tangent


# --------------------------------------------------------------------------------------------
# Shadows


def make_zero(x: Any) -> Any:
    """A zero shadow congruent with `x`: same structure, shapes, dtypes and array module.

    >>> make_zero({'w': np.ones(2), 'b': 1.5})
    {'w': array([0., 0.]), 'b': 0.0}
    """
    leaves, td = flatten(x)
    return unflatten(td, [_zero_leaf(v) for v in leaves])


def _zero_leaf(v):
    if isinstance(v, Tracer):
        return v * 0
    if isinstance(v, np.generic):
        return v.dtype.type(0)
    if isinstance(v, (bool, int)):
        return v
    if isinstance(v, (float, complex)):
        return type(v)(0)
    return array_module(v).zeros_like(v)
