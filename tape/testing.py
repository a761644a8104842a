"""Gradient checks for your own functions: finite differences in float64, first and second order.

>>> import numpy as np
>>> check_grads(lambda x: np.sin(x) * x, np.array([0.3, -1.2]))

`check_rule` checks a user rule (custom_rule, easy_rule) in every activity combination.

Hypothesis strategies (`arrays`, `shapes`, `broadcastable_shapes`, `broadcastable_arrays`) live in
`tape.testing` too; they import hypothesis lazily, so this module works without it.
"""
from __future__ import annotations

import inspect
import itertools
from typing import Any, Callable, Sequence

import numpy as np

from .activities import (Active, BatchDuplicated, Const, Duplicated, Forward,
                         ForwardWithPrimal, Reverse, ReverseSplitNoPrimal, ReverseWithPrimal)
from .api import autodiff
from .core import primal
from .errors import OnceDifferentiableError
from .pytree import flatten, is_inactive, tree_map, unflatten
from .split import autodiff_thunk
# Hypothesis strategies, part of this module's interface:
from .strategies import (arrays, arrays_and_axes, broadcastable_arrays,  # noqa: F401
                         broadcastable_shapes, shapes)


class GradientCheckError(AssertionError):
    """A derivative disagrees with finite differences."""


def _is_tree(x) -> bool:
    """Whether `x` is a container of values (not an array or a number)."""
    leaves, _ = flatten(x)
    return len(leaves) != 1 or leaves[0] is not x


def _is_float(x):
    return np.issubdtype(np.result_type(x), np.inexact)


def _random_like(x, rng):
    if isinstance(x, float):
        return float(rng.standard_normal())
    if isinstance(x, complex):
        return complex(rng.standard_normal(), rng.standard_normal())
    dtype = np.result_type(x)
    if dtype.kind == "c":   # complex: perturb the real and the imaginary parts
        re, im = rng.standard_normal((2,) + np.shape(x))
        return (re + 1j * im).astype(dtype)
    return rng.standard_normal(np.shape(x)).astype(dtype)


def _axpy(a, v, x):
    """x + a*v, keeping Python numbers as Python numbers."""
    if isinstance(x, (float, complex)):
        return x + a * v
    return np.asarray(x + a * v, dtype=np.result_type(x))


def _dot(a, b) -> float:
    """The real inner product Re(sum(conj(a) * b)): a complex number counts as the pair of its
    real and imaginary parts (and a derivative dx + i dy pairs with a direction vx + i vy)."""
    return float(np.real(np.vdot(np.asarray(a), np.asarray(b))))


def _inner(a, b) -> float:
    la, _ = flatten(a)
    lb, _ = flatten(b)
    return sum(_dot(x, y) for x, y in zip(la, lb))


def _output_leaves(y):
    leaves, _ = flatten(y)
    return [np.asarray(v, dtype=np.result_type(v, np.float64)) for v in leaves]


def _numeric_jvp(f, args, direction, eps):
    plus = [_axpy(eps, v, x) if v is not None else x for x, v in zip(args, direction)]
    minus = [_axpy(-eps, v, x) if v is not None else x for x, v in zip(args, direction)]
    yp, ym = _output_leaves(f(*plus)), _output_leaves(f(*minus))
    return [(a - b) / (2 * eps) for a, b in zip(yp, ym)]


def _close(a: float, b: float, rtol: float, atol: float) -> bool:
    return abs(a - b) <= atol + rtol * max(abs(a), abs(b))


def check_grads(f: Callable, *args: Any, modes: Sequence[str] = ("fwd", "rev", "batch"),
                order: int = 2,
                eps: float = 1e-6, rtol: float = 1e-5, atol: float = 1e-7,
                full_jacobian: bool = False, seed: int = 0) -> None:
    """Check `f`'s derivatives at `args` against central finite differences.

    Every floating-point argument is differentiated (others are passed as Const). For each mode
    in ``modes`` ("fwd": forward mode J·v, "rev": reverse mode uᵀJ) a random direction is
    compared with finite differences ("batch": batch forward and reverse mode against single
    directions); with ``order=2`` the same is done, recursively, for the
    gradient function itself (forward-over-reverse and reverse-over-reverse). With
    ``full_jacobian=True`` (slow; for debugging) every Jacobian entry is compared.
    Raises `GradientCheckError` saying which mode and order disagree.

    Arguments may be pytrees (dicts, lists, dataclasses, ...): their floating-point leaves are
    checked.

    >>> check_grads(lambda x, y: x * np.exp(y), 0.5, np.array([0.1, 0.2]), order=1)
    >>> check_grads(lambda p: np.sum(p["w"] * p["b"]), {"w": np.ones(2), "b": 0.5}, order=1)
    """
    if any(_is_tree(a) for a in args):   # check the leaves, passed one by one
        leaves, treedefs, counts = [], [], []
        for a in args:
            flat, td = flatten(a)
            leaves += flat
            treedefs.append(td)
            counts.append(len(flat))

        def on_leaves(*flat):
            rebuilt, start = [], 0
            for td, n in zip(treedefs, counts):
                rebuilt.append(unflatten(td, flat[start:start + n]))
                start += n
            return f(*rebuilt)
        return check_grads(on_leaves, *leaves, modes=modes, order=order, eps=eps, rtol=rtol,
                           atol=atol, full_jacobian=full_jacobian, seed=seed)
    args = list(args)
    rng = np.random.default_rng(seed)
    diff = [i for i, a in enumerate(args) if _is_float(a)]
    if not diff:
        raise ValueError("check_grads needs at least one floating-point argument")
    for a in args:
        if _is_float(a) and np.result_type(a) not in (np.float64, np.complex128):
            raise ValueError(f"check_grads needs float64 arguments for accurate finite "
                             f"differences; got dtype {np.result_type(a)}. Check the function "
                             "at float64 values (x.astype(np.float64)), or use check_rule, "
                             "which takes float32 arguments")
    direction = [_random_like(a, rng) if i in diff else None for i, a in enumerate(args)]
    y0 = f(*args)
    u = [_random_like(y, rng) for y in _output_leaves(y0)]
    numeric = _numeric_jvp(f, args, direction, eps)
    expected = sum(_dot(a, b) for a, b in zip(u, numeric))
    tag = f"order {order}" if order else ""

    if "fwd" in modes:
        annotated = [Duplicated(a, d) if d is not None else a for a, d in zip(args, direction)]
        tangent, = autodiff(Forward, f, *annotated)
        got = sum(_dot(a, b) for a, b in zip(u, _output_leaves(tangent)))
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

    if "batch" in modes:
        _check_batch(f, args, diff, direction, u, rng, rtol, atol, tag)

    if full_jacobian:
        _check_full_jacobian(f, args, diff, eps, rtol, atol)

    if order > 1:
        try:
            check_grads(vjp_fn, *args, modes=modes, order=order - 1, eps=eps, rtol=rtol,
                        atol=atol, seed=seed + 1)
        except OnceDifferentiableError as e:
            if "order=1" in str(e):   # said by a deeper level already
                raise
            e.args = (f"{e} check_grads checks second derivatives too by default (order={order}"
                      "); the first ones agreed with finite differences. Pass order=1 to check "
                      "first derivatives only.",)
            raise


def _check_batch(f, args, diff, direction, u, rng, rtol, atol, tag):
    """Batch mode against single directions: two forward tangents in one pass, and two
    reverse seeds (1 and -2.5) in one sweep of a split-mode tape."""
    second = [_random_like(a, rng) if i in diff else None for i, a in enumerate(args)]
    batched = [BatchDuplicated(a, (d, e)) if d is not None else a
               for a, d, e in zip(args, direction, second)]
    tangents, = autodiff(Forward, f, *batched)
    for w, dirs in enumerate((direction, second)):
        single = [Duplicated(a, d) if d is not None else a for a, d in zip(args, dirs)]
        expected, = autodiff(Forward, f, *single)
        for got, want in zip(_output_leaves(tangents[w]), _output_leaves(expected)):
            if got.shape != want.shape or not np.allclose(got, want, rtol=rtol, atol=atol):
                raise GradientCheckError(f"batch forward mode, direction {w} ({tag}), disagrees "
                                         f"with a single forward pass: {got} vs {want}")
    scalar = _weighted_sum(f, u)
    grads = _vjp_function(f, diff, u)(*args)
    types, call = [], []
    for i, a in enumerate(args):
        if i in diff and isinstance(a, np.ndarray):
            types.append(BatchDuplicated)
            call.append(BatchDuplicated(a, (np.zeros_like(a), np.zeros_like(a))))
        else:
            types.append(Const)
            call.append(Const(a))
    if BatchDuplicated not in types:
        return
    fwd, rev = autodiff_thunk(ReverseSplitNoPrimal, scalar, Active, *types)
    tape, _, _ = fwd(*call)
    scales = (1.0, -2.5)
    rev(*call, scales, tape)
    for g, i in zip(grads, diff):
        if types[i] is not BatchDuplicated:
            continue
        for w, c in enumerate(scales):
            got = call[i].dval[w]
            if not np.allclose(got, c * np.asarray(g), rtol=rtol, atol=atol):
                raise GradientCheckError(
                    f"batch reverse mode, seed {w} ({tag}), argument {i}, disagrees with a "
                    f"single reverse sweep: {got} vs {c} * {g}")


def _weighted_sum(f, u):
    def scalar(*inner):
        y = f(*inner)
        leaves, _ = flatten(y)
        total = 0.0
        for leaf, w in zip(leaves, u):
            # Complex leaves pair with w as in `_dot`, so the scalar is real.
            total = total + (np.sum(np.real(leaf * np.conj(w))) if np.iscomplexobj(w)
                             else np.sum(leaf * w))
        return total
    return scalar


def _vjp_function(f, diff, u):
    """x -> uᵀ J(x), computed by reverse mode (itself differentiable for higher orders)."""
    scalar = _weighted_sum(f, u)

    def vjp(*xs):
        annotated = [Active(x) if i in diff else x for i, x in enumerate(xs)]
        derivs, = autodiff(Reverse, scalar, Active, *annotated)
        return tuple(derivs[i] for i in diff)
    return vjp


def _unit_directions(x):
    """(label, direction) for each coordinate of `x`: its real and, for a complex `x`, its
    imaginary part."""
    dtype = np.result_type(x)
    units = (1.0, 1j) if dtype.kind == "c" else (1.0,)
    size = int(np.size(x))
    for j in range(size):
        for unit in units:
            e = np.zeros(size, dtype=dtype)
            e[j] = unit
            label = f"{j}" if unit == 1.0 else f"{j} (imaginary part)"
            if isinstance(x, (float, complex)):
                yield label, type(x)(e[0]) if isinstance(x, complex) else float(e[0].real)
            else:
                yield label, e.reshape(np.shape(x))


def _check_full_jacobian(f, args, diff, eps, rtol, atol):
    for i in diff:
        for j, direction in _unit_directions(args[i]):
            d = [None] * len(args)
            d[i] = direction
            numeric = _numeric_jvp(f, args, d, eps)
            annotated = [Duplicated(a, d[i]) if n == i else a for n, a in enumerate(args)]
            tangent, = autodiff(Forward, f, *annotated)
            for out_k, (num, got) in enumerate(zip(numeric, _output_leaves(tangent))):
                bad = ~np.isclose(got, num, rtol=rtol, atol=atol)
                if np.any(bad):
                    raise GradientCheckError(
                        f"Jacobian column {j} of argument {i} (output leaf {out_k}) disagrees: "
                        f"engine {got.ravel()[:6]} vs numeric {num.ravel()[:6]}")


def check_rule(f: Callable, *args: Any, modes: Sequence[str] = ("fwd", "rev", "batch"),
               eps: float = 1e-6, rtol: float = 1e-5, atol: float = 1e-7,
               seed: int = 0) -> int:
    """Check a user rule (`custom_rule`, `easy_rule`) in every activity combination against
    finite differences, as EnzymeTestUtils' ``test_forward`` / ``test_reverse`` do.

    Each floating-point argument is tried Const and differentiated: forward mode Duplicated
    ("fwd"), reverse mode Active, and Duplicated for arrays (gradients added into a non-zero
    shadow) ("rev"); with "batch", BatchDuplicated of width 2 in both modes. Each
    combination is run with every
    return activity: forward Duplicated with and without the primal, and Const (so the rule
    also sees ``needs_primal`` and ``needs_shadow`` False); reverse Active (the result projected
    onto a random cotangent, so the reverse rule gets a non-trivial seed) and Const. Primal
    results are compared with ``f(*args)``, derivatives with finite differences argument by
    argument, and the arguments must be left unmodified. Returns the number of combinations
    checked; raises `GradientCheckError` naming the combination and the argument at fault.
    Use `check_grads` for higher orders.

    >>> from tape import custom_rule
    >>> square = custom_rule(lambda x: x * x, augmented_primal=lambda cfg, x: (x * x, x),
    ...     reverse=lambda cfg, x, g: (2 * x * g,),
    ...     forward=lambda cfg, p, t: (p[0] * p[0], 2 * p[0] * t[0]))
    >>> check_rule(square, np.array([0.5, -1.0]))
    12
    """
    args = list(args)
    rng = np.random.default_rng(seed)
    labels = _argument_labels(f, len(args))
    diff = [i for i, a in enumerate(args) if not is_inactive(a) and _is_float(a)]
    if not diff:
        raise ValueError("check_rule needs at least one floating-point argument")
    want_primal = _output_leaves(f(*args))
    dirs = {i: _random_like(args[i], rng) for i in diff}
    dirs2 = {i: _random_like(args[i], rng) for i in diff}
    u = [_random_like(y, rng) for y in want_primal]
    # Finite differences in float64 whatever the arguments' precision (a float32 step of 1e-6
    # is rounding noise); the tolerances widen to fit the lowest precision among them.
    wide = [_widened(a) if i in diff else a for i, a in enumerate(args)]
    rtol, atol = _fitting_tolerances([args[i] for i in diff], rtol, atol)
    jvp = {i: _numeric_jvp(f, wide, [dirs[i] if k == i else None for k in range(len(args))],
                           eps) for i in diff}
    jvp2 = {i: _numeric_jvp(f, wide, [dirs2[i] if k == i else None for k in range(len(args))],
                            eps) for i in diff} if "batch" in modes else {}
    n_checked = 0   # (argument activities, return activity) pairs
    originals = [a.copy() if isinstance(a, np.ndarray) else a for a in args]

    def run(combo, mode, *call_args):
        try:
            result = autodiff(mode, *call_args)
        except Exception as e:
            raise GradientCheckError(f"{_rule_name(f)}, {combo}: the rule raised "
                                     f"{type(e).__name__}: {e}") from e
        for i, (a, before) in enumerate(zip(args, originals)):
            if isinstance(a, np.ndarray) and not np.array_equal(a, before, equal_nan=True):
                raise GradientCheckError(f"{_rule_name(f)}, {combo}: the rule wrote into "
                                         f"{labels[i]}; rules must not modify their inputs")
        return result

    def same(combo, what, got, want):
        got = _output_leaves(got)
        if len(got) != len(want) or not all(
                np.shape(g) == np.shape(w) and np.allclose(g, w, rtol=rtol, atol=atol)
                for g, w in zip(got, want)):
            raise GradientCheckError(f"{_rule_name(f)}, {combo}: the {what} is wrong: got "
                                     f"{_short(got)}, expected {_short(want)}")

    for direction, kinds in _combinations(args, diff, modes):
        on = [i for i in diff if kinds[i] != "Const"]
        if not on:
            continue
        where = ", ".join(f"{labels[i]}: {kinds[i]}" for i in diff)
        if direction == "forward":
            batch = kinds[on[0]] == "BatchDuplicated"
            ann = list(args)
            for i in on:
                ann[i] = (BatchDuplicated(args[i], (dirs[i], dirs2[i])) if batch
                          else Duplicated(args[i], dirs[i]))
            want = _summed(jvp, on)
            for mode, ret in ((ForwardWithPrimal, Duplicated), (Forward, Duplicated),
                              (ForwardWithPrimal, Const)):
                combo = f"{mode.name} with ({where}) and return {ret.__name__}"
                result = run(combo, mode, f, ret, *ann)
                n_checked += 1
                if mode.with_primal:
                    same(combo, "primal", result[-1], want_primal)
                if ret is Const:
                    continue
                tangent = result[0]
                same(combo, "tangent (J·v)", tangent[0] if batch else tangent, want)
                if batch:
                    same(combo, "second tangent (J·v)", tangent[1], _summed(jvp2, on))
            continue
        # Reverse mode: Active / (Batch)Duplicated arguments (gradients are added into random
        # shadows), Active (projected) and Const returns.
        shadows = {}
        ann = list(args)
        for i in on:
            if kinds[i] == "Active":
                ann[i] = Active(args[i])
            elif kinds[i] == "Duplicated":
                shadows[i] = (_random_like(args[i], rng),)
                ann[i] = Duplicated(args[i], shadows[i][0].copy())
            else:
                shadows[i] = (_random_like(args[i], rng), _random_like(args[i], rng))
                ann[i] = BatchDuplicated(args[i], tuple(s.copy() for s in shadows[i]))
        combo = f"ReverseWithPrimal with ({where}) and return Active"
        derivs, value = run(combo, ReverseWithPrimal, _weighted_sum(f, u), Active, *ann)
        n_checked += 1
        same(combo, "primal", value, _output_leaves(_weighted_sum(f, u)(*args)))
        for i in on:
            grads = ([derivs[i]] if kinds[i] == "Active" else
                     [d - s for d, s in zip(_as_tuple(ann[i].dval), shadows[i])])
            for w, grad in enumerate(grads):
                got = _inner(grad, dirs[i])
                want = sum(_dot(a, b) for a, b in zip(u, jvp[i]))
                if not _close(got, want, rtol, atol):
                    which = f" (shadow {w})" if len(grads) > 1 else ""
                    raise GradientCheckError(
                        f"{_rule_name(f)}, {combo}: the derivative of {labels[i]}{which} "
                        f"disagrees with finite differences: (uᵀJ)·v = {got!r} vs numeric "
                        f"{want!r}")
        combo = f"ReverseWithPrimal with ({where}) and return Const"
        derivs, value = run(combo, ReverseWithPrimal, f, Const, *ann)
        n_checked += 1
        same(combo, "primal", value, want_primal)
    return n_checked


def _combinations(args, diff, modes):
    """("forward" or "reverse", the kind of each differentiated argument by index)."""
    forward = ["Duplicated"] if "fwd" in modes else []
    if "batch" in modes:
        forward.append("BatchDuplicated")
    for kind in forward:
        for pick in itertools.product((False, True), repeat=len(diff)):
            yield "forward", {i: kind if p else "Const" for i, p in zip(diff, pick)}
    if "rev" in modes:
        options = [("Const", "Active", "Duplicated") if isinstance(args[i], np.ndarray)
                   and np.ndim(args[i]) > 0 else ("Const", "Active") for i in diff]
        for pick in itertools.product(*options):
            yield "reverse", dict(zip(diff, pick))
    if "rev" in modes and "batch" in modes:
        options = [("Const", "BatchDuplicated") if isinstance(args[i], np.ndarray)
                   and np.ndim(args[i]) > 0 else ("Const",) for i in diff]
        for pick in itertools.product(*options):
            yield "reverse", dict(zip(diff, pick))


def _widened(x):
    """`x` in double precision when it is a lower-precision float (finite differences)."""
    dtype = np.result_type(x)
    if isinstance(x, (float, complex, int, bool)) or dtype.kind not in "fc" or dtype.itemsize * (
            2 if dtype.kind == "f" else 1) >= 16:
        return x
    return np.asarray(x, dtype=np.complex128 if dtype.kind == "c" else np.float64)[()]


def _fitting_tolerances(args, rtol, atol) -> tuple:
    """(rtol, atol), widened for arguments of less than double precision: the engine computes
    in their precision, the finite differences in float64."""
    eps = max(np.finfo(np.result_type(a)).eps for a in args)
    return max(rtol, 1000 * eps), max(atol, 100 * eps)


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def _summed(jvp, on):
    return [sum(jvp[i][k] for i in on) for k in range(len(jvp[on[0]]))]


def _rule_name(f) -> str:
    return f"check_rule(`{getattr(f, 'name', getattr(f, '__name__', 'f'))}`)"


def _argument_labels(f, n):
    try:
        params = list(inspect.signature(getattr(f, "impl", f)).parameters)
    except (TypeError, ValueError):
        params = []
    return [f"argument {i}" + (f" `{params[i]}`" if i < len(params) else "") for i in range(n)]


def _short(leaves):
    return "; ".join(np.array2string(np.asarray(v).ravel()[:6], precision=6) for v in leaves)


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
            if np.iscomplexobj(primal(leaf)):   # a real scalar, so reverse mode may seed it
                leaf = np.real(leaf) + np.imag(leaf)
            total = total + np.sum(leaf)
        return total
    autodiff(Reverse, scalar, Active, *[Active(a) if _is_float(a) else a for a in args])
    return tree_map(primal, seen[0])


__all__ = ["check_grads", "check_rule", "GradientCheckError", "traced_value", "shapes", "arrays",
           "arrays_and_axes", "broadcastable_shapes", "broadcastable_arrays"]
