"""`autodiff` and its helpers: Enzyme.jl's calling convention on top of the traces."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .activities import (ACTIVITY_TYPES, Active, Annotation, BatchDuplicatedNoNeed, Const,
                         Duplicated, DuplicatedNoNeed, MixedDuplicated, Mode, unannotated)
from .backend import array_module
from .batching import Batched, stack_directions
from .aliasing import overlap, refuse_shared_written_shadows
from .constbuffer import refuse_unseen_writes
from .core import ReverseTrace, Tracer, peek, primal
from .forward_trace import ForwardTrace
from .errors import ActivityError, PytreeError
from .modifiers import (check_complex_return, holomorphic_sweep, is_complex, runtime_inactive,
                        to_user, user_cotangents)
from .pytree import flatten, is_inactive, set_at, unflatten
# Modules that install themselves into the layers below: the ndarray surface on tracers, the
# vectorised functions of batch mode, and the per-direction and NaN-check hooks of the traces.
from . import tracer as _surface  # noqa: F401
from . import batched_numpy as _vectorised  # noqa: F401
from . import modifiers as _modifiers  # noqa: F401
# Re-exported for tape.split and tape.convenience:
from .arguments import (_argument_names, _check_shadow, _describe,  # noqa: F401
                        _forward_argument, _is_float, _is_mutable_leaf, _reverse_argument,
                        _trace_arguments, batch_width)


def autodiff(mode: Mode, f: Callable, *args: Any) -> tuple:
    """Differentiate `f` at the annotated arguments (Enzyme.jl's `autodiff`).

    ``autodiff(mode, f, [ReturnActivity], *annotated_args)``. Reverse modes return
    ``(derivs,)`` or ``(derivs, primal)`` where ``derivs`` has one entry per argument (the
    derivative for Active arguments, None otherwise); Duplicated shadows are updated in place.
    Forward modes return ``(tangent,)`` or ``(tangent, primal)`` (a Const return: ``()`` or
    ``(primal,)``; batch mode: a tuple of W tangents in place of the tangent).

    >>> autodiff(Reverse, lambda x: x**2, Active, Active(3.0))
    ((6.0,),)
    >>> autodiff(ForwardWithPrimal, lambda x: x**2, Duplicated(3.0, 1.0))
    (6.0, 9.0)
    """
    if not isinstance(mode, Mode):
        raise ActivityError(f"the first argument of autodiff must be a mode such as Reverse or "
                            f"Forward, got {mode!r}")
    f = unannotated(f)   # Enzyme's autodiff(mode, Const(f), ...)
    if not callable(f):
        raise ActivityError(f"autodiff needs a callable function to differentiate, got "
                            f"{type(f).__name__} {f!r}"
                            + (" (a function with a shadow, Duplicated(f, df), is not "
                               "supported: pass what it closes over as arguments)"
                               if isinstance(f, Annotation) else ""))
    ret_activity = None
    if args and isinstance(args[0], type):
        ret_activity, args = args[0], args[1:]
        if ret_activity not in ACTIVITY_TYPES:
            raise ActivityError(f"return activity must be one of Const, Active, Duplicated, "
                                f"DuplicatedNoNeed; got {ret_activity.__name__}")
    if args and isinstance(args[0], Annotation) and _takes_one_fewer(f, len(args)):
        kind = type(args[0]).__name__
        raise ActivityError(
            f"the return activity must be a type, {kind}, not an instance {kind}(...): write "
            f"autodiff(mode, f, {kind}, *args); the function takes {len(args) - 1} "
            f"argument(s) and {len(args)} were given")
    names = _argument_names(f, len(args))
    annotated = [a if isinstance(a, Annotation) else Const(a) for a in args]
    # Values of an inactive_type are constants whatever their annotation (Enzyme).
    annotated = [Const(a.val) if is_inactive(a.val) else a for a in annotated]
    if mode.runtime_activity:
        annotated = runtime_inactive(annotated)
    if mode.kind == "reverse":
        return _reverse(mode, f, ret_activity, annotated, names)
    return _forward(mode, f, ret_activity, annotated, names)


# --------------------------------------------------------------------------------------------
# Reverse mode


def _reverse(mode, f, ret_activity, annotated, names, make_trace=ReverseTrace):
    """Reverse mode: record `f`, sweep, write the shadows. `make_trace(strong_zero=...,
    nan_check=...)` makes the trace that records (tape.compile's eager fallback passes one
    whose user code takes results its earlier runs in the same call returned)."""
    if ret_activity is not None and issubclass(ret_activity, Duplicated):
        # every Duplicated kind (BatchDuplicated, MixedDuplicated, ...): no seed, no gradient
        raise ActivityError(
            f"a {ret_activity.__name__} return needs a seed: use autodiff_thunk with "
            f"ReverseSplitWithPrimal, or write the result into a Duplicated argument whose "
            f"shadow is the seed")
    width = batch_width(annotated, names)
    with make_trace(strong_zero=mode.strong_zero, nan_check=mode.nan_check) as trace:
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
    out = f(*call_args)
    refuse_unseen_writes(trace)
    return out, groups


def _takes_one_fewer(f, n_args) -> bool:
    """Whether plain Python function `f` cannot take `n_args` positional arguments but can
    take one fewer (then an Active instance first is a misplaced return activity)."""
    code = getattr(f, "__code__", None)
    if code is None or code.co_flags & 0x04:   # not a plain function, or it takes *args
        return False
    most = code.co_argcount - (1 if hasattr(f, "__self__") else 0)   # bound methods
    least = most - len(getattr(f, "__defaults__", None) or ())
    return not least <= n_args <= most and least <= n_args - 1 <= most


def guess_return(ret_activity, out):
    """Enzyme.jl's guess when no return activity is given: Active for a float result (and
    for a tuple or list holding differentiated values, which `_seed_return` then refuses)."""
    if ret_activity is not None:
        return ret_activity
    if isinstance(out, (tuple, list)) and any(isinstance(o, Tracer) for o in out):
        return Active
    return Active if out is not None and _is_float(out) else Const


def sweep(trace, groups, seeds, width, consume=True, holomorphic=None) -> dict:
    """Seed the buffers `f` overwrote and run the reverse sweep; returns the leaves'
    cotangents by slot, in the user's complex convention (docs/complex.md). `holomorphic` is
    the complex result that ReverseHolomorphic seeds."""
    refuse_shared_written_shadows([(arg.path(i), arg.shadows[i]) for arg in groups
                                   for i in _written(arg)])
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
    return distinct_derivatives(derivs)


def distinct_derivatives(derivs: list) -> tuple:
    """The Active derivatives, each leaf an array of its own and writable: a rule may give
    one cotangent to two operands (x + y) or a read-only broadcast (np.sum's), and a caller
    that scales one derivative in place (gradient clipping) must not change another."""
    if all(d is None or (type(d) is np.ndarray and d.flags.writeable) for d in derivs) and \
            len({id(_root(d)) for d in derivs if d is not None}) == sum(
                d is not None for d in derivs):
        return tuple(derivs)   # the common case: separate writable arrays
    by_root: dict = {}

    def own(g):
        if type(g) is not np.ndarray:
            return g
        others = by_root.setdefault(id(_root(g)), [])
        if not g.flags.writeable or any(overlap(g, o) for o in others):
            g = g.copy()
            others = by_root.setdefault(id(g), [])
        others.append(g)
        return g
    out = []
    for d in derivs:
        leaves, td = flatten(d)
        out.append(d if td is None else unflatten(td, [own(x) for x in leaves]))
    return tuple(out)


def _root(a):
    """The array that owns the memory of `a` (views chain through .base)."""
    while isinstance(getattr(a, "base", None), np.ndarray):
        a = a.base
    return a


def _direction(cts: dict, w: int) -> dict:
    return {s: g.data[w] if isinstance(g, Batched) else g for s, g in cts.items()}


def _seed_return(out, trace, seeds, width=None, mode=None):
    """Seed an Active scalar result with 1. A complex one is refused unless the mode is
    ReverseHolomorphic, which seeds it itself: it is returned."""
    if isinstance(out, (tuple, list, dict)):
        raise ActivityError(
            f"reverse mode with an Active return needs a real scalar result, but the function "
            f"returned a {type(out).__name__} of {len(out)} values. Return one scalar (the "
            "loss); for several outputs use jacobian(Reverse, f, x), or autodiff_thunk("
            "ReverseSplitWithPrimal, ...) and seed each output")
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
    for i in _written(arg):
        t = arg.tracers[i]
        seed = written_seed(arg.shadows[i], width)
        for shadow in arg.shadows[i] if width is not None else (arg.shadows[i],):
            shadow[...] = 0
        # The final value may also be the Active result (f returns the buffer it wrote), or
        # another written buffer's: its seeds add up
        seeds[t.slot] = seed if t.slot not in seeds else seeds[t.slot] + seed


def _written(arg) -> list:
    """The leaves of `arg` that the function overwrote and that have shadows."""
    if arg.shadows is None:
        return []
    return [i for i, (t, first) in enumerate(zip(arg.tracers, arg.first_slots))
            if first is not None and t.slot != first]


def written_seed(shadow, width=None):
    """The seed of a written buffer's final value: its shadow (a copy, in the user's complex
    convention), or in batch mode its W shadows stacked. A shadow of zeros (a buffer written
    only for its primal, the usual case) gives a read-only broadcast zero: no copy."""
    if width is not None:
        return to_user(stack_directions(shadow))
    if is_complex(shadow):
        return to_user(shadow)
    if shadow.size > _SMALL and not shadow.any():
        xp = array_module(shadow)
        return xp.broadcast_to(xp.zeros((), dtype=shadow.dtype), shadow.shape)
    return shadow.copy()


_SMALL = 64   # below this many elements a copy costs less than the test


def _write_primals(arg):
    for i, t in enumerate(arg.tracers):
        first = arg.first_slots[i]
        if first is not None and t.slot != first:
            _refuse_plain_buffer(arg, i, "primal", arg.leaves[i], t.value)
            arg.leaves[i][...] = t.value


def _added(number, g):
    """A number leaf of a shadow plus its gradient, of the leaf's type; a gradient an enclosing
    differentiation traces (a nested autodiff) stays traced, as a container can hold it."""
    total = number + g
    return total if isinstance(total, Tracer) else type(number)(total)


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
                gw = g.data[w] if isinstance(g, Batched) else g
                if _is_mutable_leaf(shadow):
                    _refuse_plain_buffer(arg, i, "shadow", shadow, gw)
                    shadow += gw
                else:   # a float leaf of shadow w's container (`+=` would only rebind it)
                    set_at(arg.annotation.dval[w], arg.paths[i], _added(shadow, gw),
                           root=f"shadow {w} of {arg.name.root}")
            continue
        shadow = arg.shadows[i]
        if _is_mutable_leaf(shadow):
            _refuse_plain_buffer(arg, i, "shadow", shadow, g)
            shadow += g
        elif mixed:
            immutable[i] = _cast_like(g, arg.leaves[i])
        else:
            set_at(arg.annotation.dval, arg.paths[i], _added(shadow, g),
                   root=f"shadow of {arg.name.root}")
    if not mixed:
        return None
    for i, x in enumerate(arg.leaves):
        if immutable[i] is None and arg.first_slots[i] is not None and not _is_mutable_leaf(x):
            immutable[i] = _cast_like(None, x)
    return unflatten(arg.treedef, immutable)


def _refuse_plain_buffer(arg, i, what, buffer, value):
    """A value that an enclosing autodiff differentiates (it depends on that level's traced
    values) cannot be written into a plain array: say so, naming the argument."""
    if isinstance(value, Batched):
        value = value.data
    if isinstance(value, Tracer) and not isinstance(buffer, Tracer):
        raise ActivityError(
            f"the {what} of {arg.path(i)} is a plain array, but the value to write into it "
            "depends on values an enclosing autodiff differentiates, which a plain array "
            "cannot carry. Make it a buffer of that level: np.zeros_like(v) or "
            "tape.make_zero(v) of a value that level traces; or, for a derivative in reverse "
            "mode, annotate the argument Active to have it returned")


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


def _forward(mode, f, ret_activity, annotated, names, make_trace=ForwardTrace):
    """Forward mode: push the tangents through `f`, write back the buffers it wrote.
    `make_trace` as for `_reverse` (tape.compile's eager fallback passes one)."""
    if ret_activity is Active:
        raise ActivityError("Active is not allowed in forward mode; use Duplicated")
    width = batch_width(annotated, names)

    def make_leaf(x, dx):
        # Batch mode: the W tangents travel as one array with a leading axis.
        return trace.new_leaf(x, dx if width is None else stack_directions(dx))

    with make_trace(strong_zero=mode.strong_zero, nan_check=mode.nan_check) as trace:
        call_args, groups = _trace_arguments(annotated, names, _forward_argument, make_leaf)
        # A primitive differentiated directly is told what the caller needs (RuleConfig).
        no_need = ret_activity in (DuplicatedNoNeed, BatchDuplicatedNoNeed)
        out = trace.call_root(f, call_args, needs_primal=mode.with_primal and not no_need,
                              needs_shadow=ret_activity is not Const)
        if ret_activity is None and not any(_is_float(x) for x in flatten(out)[0]):
            ret_activity = Const   # Enzyme's guess: a result without float data (None, int)
        refuse_read_only_tangent_shadows(
            [(arg, i) for arg in groups for i in _written_forward(arg)], width)
        for arg in groups:
            _write_back_forward(arg, width)
        primal_out = _strip(out, trace)
        tangent_out = None
        if ret_activity is not Const and out is not None:
            leaves, td = flatten(out)
            tangents = [_tangent_of(x, trace) for x in leaves]
            # A Python float result (as `_strip` gives it) has a Python float tangent. (A rule
            # told that the primal is not needed may leave it out.)
            primal_leaves = flatten(primal_out)[0]
            scalars = ([type(p) in (float, complex) for p in primal_leaves]
                       if len(primal_leaves) == len(tangents) else [False] * len(tangents))
            if width is None:
                tangents = caller_tangents(tangents, primal_leaves, annotated)
                tangent_out = unflatten(td, [_python_scalar(t) if k else t
                                             for t, k in zip(tangents, scalars)])
            else:
                tangent_out = batch_tangents(tangents, td, primal_leaves, scalars, width)
    if ret_activity is Const:
        return (primal_out,) if mode.with_primal else ()
    if mode.with_primal and not no_need:
        return (tangent_out, primal_out)
    return (tangent_out,)


def caller_tangents(tangents: list, primals: list, annotated) -> list:
    """The result tangents as the caller gets them: in their primal's precision (as batch mode
    gives them), and copied where one shares memory with a caller's tangent array while its
    primal is new memory: a rule passes a tangent through (the tangent of x + 1.0 is x's), and
    a caller refilling one tangent array direction after direction would see every earlier
    result change. A result that is an argument or a view of one keeps the tangent that is its
    shadow or the same view of it, as Enzyme does."""
    primals = primals if len(primals) == len(tangents) else [None] * len(tangents)
    tangents = [_in_dtype_of(t, p) for t, p in zip(tangents, primals)]
    if not any(type(t) is np.ndarray for t in tangents):
        return tangents
    shadows, values = [], []
    for a in annotated:
        try:
            leaves = flatten(a.val)[0]
        except PytreeError:
            if type(a) is Const:    # no pytree (an index holding a slice): no array to see
                continue
            raise
        values += [v for v in leaves if type(v) is np.ndarray]
        if isinstance(a, Duplicated) and a.dval is not None:
            shadows += [d for d in flatten(a.dval)[0] if type(d) is np.ndarray]
    if not shadows:
        return tangents
    return [t.copy() if type(t) is np.ndarray
            and any(np.may_share_memory(t, d) for d in shadows)
            and not (type(p) is np.ndarray and any(np.may_share_memory(p, v) for v in values))
            else t for t, p in zip(tangents, primals)]


def _in_dtype_of(t, p):
    """A tangent wider than its primal in the primal's precision, as batch mode gives it (a
    traced Python float, which NumPy promotes weakly, can leave a float64 tangent beside a
    float32 primal: x32 + s). A narrower one is left as it is: a rule's error, which
    tape.testing.check_rule reports."""
    dtype = getattr(p, "dtype", None)
    if (dtype is None or getattr(t, "dtype", dtype) == dtype or isinstance(t, Tracer)
            or t.dtype.kind != dtype.kind or dtype.kind not in "fc"
            or t.dtype.itemsize < dtype.itemsize):
        return t
    return t.astype(dtype)


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


def batch_tangents(tangents, td, primal_leaves, scalars, width) -> tuple:
    """Batch forward mode's W tangents of the result leaves, each direction in the primal's
    structure and dtype (the W tangents of a Python float argument travel as one float64
    array, where the float itself was weak: a float32 result keeps float32 tangents)."""
    dtypes = ([getattr(p, "dtype", None) for p in primal_leaves]
              if len(primal_leaves) == len(tangents) else [None] * len(tangents))
    return tuple(unflatten(td, [
        _python_scalar(_tangent_direction(t, w)) if k else _tangent_direction(t, w, dt)
        for t, k, dt in zip(tangents, scalars, dtypes)]) for w in range(width))


def _tangent_direction(t, w, dtype=None):
    if not isinstance(t, Batched):
        return t        # a zero: the same in every direction
    v = t.data[w]
    if (dtype is not None and getattr(v, "dtype", dtype) != dtype
            and v.dtype.kind == np.dtype(dtype).kind and v.dtype.kind in "fc"):
        v = v.astype(dtype)
    return v if np.ndim(v) else v[()]


def _written_forward(arg) -> list:
    """The leaves of `arg` that the function wrote (forward mode)."""
    return [i for i, t in enumerate(arg.tracers)
            if arg.first_slots[i] is not None and t.value is not arg.leaves[i]]


def refuse_read_only_tangent_shadows(written, width=None) -> None:
    """Forward mode writes a written buffer's tangent into its shadow: refuse a read-only
    shadow of one, `written` as (argument, leaf) pairs, before anything is written back."""
    for arg, i in written:
        shadows = arg.shadows[i] if width is not None else (arg.shadows[i],)
        for w, shadow in enumerate(shadows):
            if isinstance(arg.leaves[i], np.ndarray) and not hasattr(shadow, "__setitem__"):
                which = "shadow" if width is None else f"shadow {w}"
                raise ActivityError(
                    f"the {which} of {arg.path(i)} is a {type(shadow).__name__}, which cannot be "
                    "written in place, and the function wrote into that argument: forward mode "
                    "writes its tangent into the shadow. Pass an array: np.zeros_like(x) (or "
                    "np.array(t) for a 0-d one)")
            if isinstance(shadow, np.ndarray) and not shadow.flags.writeable:
                which = "shadow" if width is None else f"shadow {w}"
                raise ActivityError(
                    f"the {which} of {arg.path(i)} is read-only (a broadcast_to view, or "
                    "flags.writeable is False), and the function wrote into that argument: "
                    "forward mode writes its tangent into the shadow. Pass a writable array: "
                    "np.zeros_like(x)")


def _write_back_forward(arg, width=None):
    for i in _written_forward(arg):
        t = arg.tracers[i]
        _refuse_plain_buffer(arg, i, "primal", arg.leaves[i], t.value)
        arg.leaves[i][...] = t.value
        for shadow in arg.shadows[i] if width is not None else (arg.shadows[i],):
            _refuse_plain_buffer(arg, i, "shadow", shadow, t.tangent)
        write_tangent(arg.shadows[i], t.tangent, width)


def write_tangent(shadow, tangent, width=None):
    """Write a written buffer's tangent into its shadow (its W shadows in batch mode): zero
    where it has none."""
    for w, one in enumerate(shadow if width is not None else (shadow,)):
        if tangent is None:
            one[...] = 0
        elif isinstance(tangent, Batched):
            one[...] = tangent.data[w]
        else:
            one[...] = tangent


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
        # A zero of the value's level: zeros_like for an array (v * 0 is NaN at an infinite
        # entry), v * 0 for a traced number (its type kept).
        return np.zeros_like(v) if isinstance(peek(v), np.ndarray) else v * 0
    if isinstance(v, np.generic):
        return v.dtype.type(0)
    if isinstance(v, (bool, int)):
        return v
    if isinstance(v, (float, complex)):
        return type(v)(0)
    return array_module(v).zeros_like(v)
