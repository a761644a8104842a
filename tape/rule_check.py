"""`check_rule`'s sweep: a user rule in every activity combination against finite differences.

`tape.testing.check_rule` runs this first-order sweep and, for a rule that says its rules are
differentiable, a second-order check; see its docstring for the whole contract.

>>> from tape import custom_rule
>>> double = custom_rule(lambda x: 2 * x, augmented_primal=lambda cfg, x: (2 * x, None),
...                      reverse=lambda cfg, s, g: (2 * g,),
...                      forward=lambda cfg, p, t: (2 * p[0], 2 * t[0]))
>>> check_rule_first_order(double, (np.array([1.0, -2.0]),), ("fwd", "rev"), 1e-6, 1e-5,
...                        0.0, 0)
7
"""
from __future__ import annotations

import itertools
from typing import Callable, Sequence

import numpy as np

from .activities import (Active, BatchDuplicated, Const, Duplicated, Forward,
                         ForwardWithPrimal, Reverse, ReverseSplitWithPrimal, ReverseWithPrimal)
from .api import autodiff
from .core import Primitive, primal
from .finite_differences import (Estimate, GradientCheckError, agrees, argument_labels,
                                 entrywise_gap, fitting_rtol, function_name, inner,
                                 input_scale, is_float, leafwise_gap, output_leaves,
                                 precision_bits, random_like, scalar_gap, term_size, widened,
                                 worst_entry)
from .pytree import flatten, is_inactive, unflatten
from .split import TapeMutatedError, autodiff_thunk


def weighted_sum(f, u):
    """x -> Re <u, f(x)>, a real scalar (complex leaves pair with u as in `dot`)."""
    def scalar(*inner_args):
        y = f(*inner_args)
        leaves, _ = flatten(y)
        total = 0.0
        for leaf, w in zip(leaves, u):
            total = total + (np.sum(np.real(leaf * np.conj(w))) if np.iscomplexobj(w)
                             else np.sum(leaf * w))
        return total
    return scalar


def vjp_function(f, diff, u):
    """x -> uᵀ J(x), computed by reverse mode (itself differentiable for higher orders)."""
    scalar = weighted_sum(f, u)

    def vjp(*xs):
        # Copies of plain arrays: `f` may write into its arguments.
        xs = [x.copy() if isinstance(x, np.ndarray) else x for x in xs]
        annotated = [Active(x) if i in diff else x for i, x in enumerate(xs)]
        derivs, = autodiff(Reverse, scalar, Active, *annotated)
        return tuple(derivs[i] for i in diff)
    return vjp


def _read_only(g):
    if isinstance(g, np.ndarray):
        g = g.view()
        g.flags.writeable = False
    return g


# The identity, whose reverse hands on a read-only view of its cotangent: a rule downstream
# that writes into the cotangent it receives (`g *= c`) then raises instead of corrupting the
# cotangent of whatever else shares that array.
_read_only_cotangent = Primitive(
    "read_only_cotangent", lambda y: y, lambda cfg, y: (y, None),
    lambda cfg, saved, g: (_read_only(g),), lambda cfg, p, t: (p[0], t[0]))


def _cotangent_probe(seen: dict, i: int) -> Primitive:
    """The identity, noting the dtype of the cotangent that reaches argument `i`."""
    def reverse(cfg, saved, g):
        seen[i] = getattr(g, "dtype", np.result_type(g))
        return (g,)
    return Primitive(f"cotangent_probe_{i}", lambda x: x, lambda cfg, x: (x, None), reverse,
                     lambda cfg, p, t: (p[0], t[0]))


def check_rule_first_order(f: Callable, args: Sequence, modes: Sequence[str], eps: float,
                           rtol: float, atol: float, seed: int) -> int:
    """The first-order sweep of `tape.testing.check_rule`; returns the number of combinations
    checked."""
    const = {i for i, a in enumerate(args) if isinstance(a, Const)}
    args = [a.val if isinstance(a, Const) else a for a in args]
    rng = np.random.default_rng(seed)
    labels = argument_labels(f, len(args))
    name = f"check_rule(`{function_name(f)}`)"
    diff = [i for i, a in enumerate(args)
            if i not in const and not is_inactive(a) and is_float(a)]
    if not diff:
        raise ValueError("check_rule needs at least one floating-point argument (not Const)")
    raw_primal = f(*args)
    primal_bits = [precision_bits(leaf) for leaf in flatten(raw_primal)[0]]
    want_primal = output_leaves(raw_primal)
    dirs = {i: random_like(args[i], rng, input_scale(args[i])) for i in diff}
    dirs2 = {i: random_like(args[i], rng, input_scale(args[i])) for i in diff}
    u = [random_like(y, rng) for y in want_primal]
    # Finite differences in float64 whatever the arguments' precision (a float32 step of 1e-6
    # is rounding noise); rtol widens to fit the lowest precision among them.
    wide = [widened(a) if i in diff else a for i, a in enumerate(args)]
    for i in diff:
        if precision_bits(args[i]) < 23:
            raise ValueError(
                f"check_rule: {labels[i]} is {np.result_type(args[i])}, whose rounding (eps "
                f"{float(np.finfo(np.result_type(args[i])).eps):.2g}) leaves no room to tell a "
                "wrong derivative from rounding noise (a rule wrong by a factor 1.9 would "
                "pass); check the rule at float32 or float64 (x.astype(np.float32))")
    rtol = fitting_rtol([args[i] for i in diff], rtol)
    # The engine's rounding, relative to the largest entry of an output (an entry computed by
    # cancellation of larger terms).
    floor = 64 * max(np.finfo(np.result_type(args[i])).eps for i in diff)

    def only(d, i):
        return [d[i] if k == i else None for k in range(len(args))]
    jvp = {i: Estimate(f, wide, only(dirs, i), eps) for i in diff}
    jvp2 = {i: Estimate(f, wide, only(dirs2, i), eps) for i in diff}
    n_checked = 0   # (argument activities, return activity) pairs
    originals = [a.copy() if isinstance(a, np.ndarray) else a for a in args]

    def run(combo, mode, *call_args):
        try:
            result = autodiff(mode, *call_args)
        except ValueError as e:
            if "read-only" not in str(e):
                raise GradientCheckError(f"{name}, {combo}: the rule raised "
                                         f"{type(e).__name__}: {e}") from e
            raise GradientCheckError(
                f"{name}, {combo}: the rule wrote into an array it did not create ({e}), "
                "most likely the cotangent it received: rules must not modify their inputs "
                "or cotangents, which other operations may share; compute a new array "
                "(`g * c`, not `g *= c`)") from e
        except Exception as e:
            raise GradientCheckError(f"{name}, {combo}: the rule raised "
                                     f"{type(e).__name__}: {e}") from e
        for i, (a, before) in enumerate(zip(args, originals)):
            if isinstance(a, np.ndarray) and not np.array_equal(a, before, equal_nan=True):
                raise GradientCheckError(f"{name}, {combo}: the rule wrote into "
                                         f"{labels[i]}; rules must not modify their inputs")
        return result

    def same_primal(combo, got, want):
        got = output_leaves(got)
        # The rule may compute the primal another way: rounding of the order of the values.
        floor = 64 * max(np.finfo(np.result_type(args[i])).eps for i in diff) * max(
            [float(np.max(np.abs(w), initial=0.0)) for w in want] + [0.0])
        k, diff_, tol, where = (leafwise_gap(got, want, rtol, atol + floor)
                                if len(got) == len(want)
                                else (0, np.inf, 0.0, None))
        if k is not None:
            raise GradientCheckError(f"{name}, {combo}: the primal is wrong (output {k}, "
                                     f"difference {diff_:.3g}, tolerance {tol:.3g}): got "
                                     f"{_short(got)}, expected {_short(want)}")

    def same_tangent(combo, what, got, estimates, on):
        for k, leaf in enumerate(flatten(got)[0]):
            if k < len(primal_bits) and 0 < precision_bits(leaf) < primal_bits[k]:
                raise GradientCheckError(
                    f"{name}, {combo}: the {what} of output {k} is {np.result_type(leaf)} for "
                    f"a {np.result_type(flatten(raw_primal)[0][k])} primal: the rule lost "
                    "precision")
        got = output_leaves(got)
        if len(got) != len(want_primal):
            raise GradientCheckError(f"{name}, {combo}: the {what} has {len(got)} outputs, "
                                     f"expected {len(want_primal)}")
        # Entry by entry, each at its own size and error bar: an entry 1000 times smaller
        # than another of the same output may be wrong by any factor in a comparison scaled
        # by the largest.
        want = [sum(estimates[i].value[k] for i in on) for k in range(len(want_primal))]
        bar = [sum(estimates[i].noise[k] for i in on) for k in range(len(want_primal))]
        if entrywise_gap(got, want, bar, rtol, atol, floor)[0] is None:
            return
        refined = [estimates[i].refined() for i in on]
        want = [sum(r[0][k] for r in refined) for k in range(len(want_primal))]
        bar = [2 * sum(r[1][k] for r in refined) for k in range(len(want_primal))]
        k, j, gap, tol = entrywise_gap(got, want, bar, rtol, atol, floor)
        if k is not None:
            g, w = got[k], want[k]
            scale = max(float(np.max(np.abs(w), initial=0.0)),
                        float(np.max(np.abs(g), initial=0.0)))
            at = (f"got {g[j].item()!r}, expected {w[j].item()!r}"
                  if j is not None and g.ndim else f"got {_short([g])}, expected {_short([w])}")
            raise GradientCheckError(
                f"{name}, {combo}: the {what} of output {k} is wrong: at index {j}, {at} "
                f"(difference {gap:.3g}, tolerance {tol:.3g}; values up to {scale:.3g}); got "
                f"{_short([g])}, expected {_short([w])}")

    for direction, kinds in _combinations(args, diff, modes):
        on = [i for i in diff if kinds[i] != "Const"]
        if not on:
            continue
        where = ", ".join(f"{labels[i]}: {kinds[i]}" for i in diff)
        if direction == "forward":
            batch = kinds[on[0]] == "BatchDuplicated"
            for mode, ret in ((ForwardWithPrimal, Duplicated), (Forward, Duplicated),
                              (ForwardWithPrimal, Const)):
                ann = list(args)
                shadows = {}
                for i in on:
                    shadows[i] = ((_copy(dirs[i]), _copy(dirs2[i])) if batch
                                  else (_copy(dirs[i]),))
                    ann[i] = (BatchDuplicated(args[i], shadows[i]) if batch
                              else Duplicated(args[i], shadows[i][0]))
                combo = f"{mode.name} with ({where}) and return {ret.__name__}"
                result = run(combo, mode, f, ret, *ann)
                n_checked += 1
                for i in on:
                    for s, d in zip(shadows[i], (dirs[i], dirs2[i])):
                        if not np.array_equal(s, d):
                            raise GradientCheckError(
                                f"{name}, {combo}: the rule wrote into the tangent of "
                                f"{labels[i]}; rules must not modify their inputs or tangents")
                if mode.with_primal:
                    same_primal(combo, result[-1], want_primal)
                if ret is Const:
                    continue
                tangent = result[0]
                same_tangent(combo, "tangent (J·v)", tangent[0] if batch else tangent, jvp, on)
                if batch:
                    same_tangent(combo, "second tangent (J·v)", tangent[1], jvp2, on)
            continue
        # Reverse mode: Active / (Batch)Duplicated arguments (gradients are added into random
        # shadows), Active (projected on a random cotangent) and Const returns.
        shadows = {}
        ann = list(args)
        for i in on:
            if kinds[i] == "Active":
                ann[i] = Active(args[i])
            elif kinds[i] == "Duplicated":
                shadows[i] = (_shadow_like(args[i], rng),)
                ann[i] = Duplicated(args[i], shadows[i][0].copy())
            else:   # (a Python number as a 0-d array: a batch needs shadows to add into)
                x = args[i] if isinstance(args[i], np.ndarray) else np.asarray(args[i])
                shadows[i] = (_shadow_like(x, rng), _shadow_like(x, rng))
                ann[i] = BatchDuplicated(x, tuple(s.copy() for s in shadows[i]))
        combo = f"ReverseWithPrimal with ({where}) and return Active"
        seen: dict = {}
        probes = {i: _cotangent_probe(seen, i) for i in on}
        results: list = []   # (the rule's result arrays, copies taken before the sweep)

        def probed(*xs):
            y = f(*[probes[i](x) if i in probes else x for i, x in enumerate(xs)])
            live = [primal(leaf) for leaf in flatten(y)[0]]
            results.append((live, [np.array(v, copy=True) for v in live]))
            return _read_only_cotangent_tree(y)
        derivs, value = run(combo, ReverseWithPrimal, weighted_sum(probed, u), Active, *ann)
        n_checked += 1
        for k, (now, before) in enumerate(zip(*results[0])):
            if isinstance(now, np.ndarray) and not np.array_equal(now, before, equal_nan=True):
                raise GradientCheckError(
                    f"{name}, {combo}: the reverse rule wrote into the rule's result (output "
                    f"{k}), which it had saved: the caller's value is corrupted by the sweep; "
                    "rules must not modify what they save (compute a new array)")
        same_primal(combo, value, output_leaves(weighted_sum(f, u)(*args)))
        for i in on:
            if i in seen and 0 < precision_bits(seen[i]) < precision_bits(args[i]):
                raise GradientCheckError(
                    f"{name}, {combo}: the reverse rule returned a {seen[i]} cotangent for "
                    f"{labels[i]}, which is {np.result_type(args[i])}: the rule lost precision")
            grads = ([derivs[i]] if kinds[i] == "Active" else
                     [d - s for d, s in zip(_as_tuple(ann[i].dval), shadows[i])])
            for w, grad in enumerate(grads):
                # Along two directions: one projection (uᵀJ)·v may weigh an entry of the
                # gradient by next to nothing.
                for v, est in ((dirs[i], jvp[i]), (dirs2[i], jvp2[i])):
                    got = inner(grad, v)
                    terms = term_size(grad, v)
                    ok, description = agrees(lambda d: scalar_gap(got, d, u, terms), est, rtol,
                                             atol, u)
                    if not ok:
                        which = f" (shadow {w})" if len(grads) > 1 else ""
                        raise GradientCheckError(
                            f"{name}, {combo}: the derivative of {labels[i]}{which} disagrees "
                            f"with finite differences: (uᵀJ)·v = {description}"
                            + worst_entry(est, i, grad, u, rtol, atol))
        combo = f"ReverseWithPrimal with ({where}) and return Const"
        derivs, value = run(combo, ReverseWithPrimal, f, Const, *ann)
        n_checked += 1
        same_primal(combo, value, want_primal)
    if "rev" in modes:
        _reverse_twice(f, args, diff, u, name)
        _reverse_each_result(f, args, diff, u, jvp, dirs, labels, name, rtol, atol)
    return n_checked


def _reverse_each_result(f, args, diff, u, jvp, dirs, labels, name, rtol, atol):
    """The reverse rule with a cotangent on one result at a time: with one cotangent on all of
    them, a derivative 1% wrong for a small result hides beside a large one."""
    if len(u) < 2:
        return
    wrong = reverse_parts(f, args, diff, dirs, u, jvp, labels, rtol, atol)
    if wrong is not None:
        raise GradientCheckError(
            f"{name}, Reverse with a cotangent on one output at a time, {wrong[0]}: the "
            f"derivative disagrees with finite differences: {wrong[1]}")


def masked(u: list, k: int) -> list:
    """The output weights `u` with every leaf but leaf k zero."""
    return [x if j == k else np.zeros_like(x) for j, x in enumerate(u)]


def magnitude_tree(a, b) -> float:
    """`term_size` of the inner product of two pytrees."""
    la, _ = flatten(a)
    lb, _ = flatten(b)
    return sum(term_size(x, y) for x, y in zip(la, lb))


def reverse_parts(f, args, diff, direction, u, alone, labels, rtol, atol, grads=None):
    """(label, description) of the first output leaf (a reverse sweep with the cotangent on it
    alone) and argument i whose (uᵀJ)·v disagrees with `alone[i]`, the finite differences along
    argument i's `direction[i]` alone; None when every part agrees. `grads`: the sweep's
    result for `u` itself, when there is one output leaf and it has run already."""
    for k in range(len(u)):
        uk = masked(u, k) if len(u) > 1 else u
        gk = grads if len(u) == 1 and grads is not None else vjp_function(f, diff, uk)(*args)
        for g, i in zip(gk, diff):
            got, terms = inner(g, direction[i]), magnitude_tree(g, direction[i])
            ok, description = agrees(lambda d: scalar_gap(got, d, uk, terms), alone[i], rtol,
                                     atol, uk)
            if not ok:
                where = ", ".join([labels[i], *([f"output {k}"] if len(u) > 1 else [])])
                return where, ("(uᵀJ)·v = " + description
                               + worst_entry(alone[i], i, g, uk, rtol, atol))
    return None


def _reverse_twice(f, args, diff, u, name):
    """One split-mode tape reversed twice must give the same derivatives twice: a rule that
    modifies what it saved (its residuals) gives a wrong second sweep, as `jacobian(Reverse)`
    and split mode do."""
    call = [Active(a) if i in diff else Const(a) for i, a in enumerate(args)]
    combo = "ReverseSplitWithPrimal, one tape reversed twice"
    scalar = weighted_sum(f, u)
    try:
        fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, scalar, Active, *map(type, call))
        tape, _, _ = fwd(*call)
        first = rev(*call, 1.0, tape)[0]
        second = rev(*call, 1.0, tape)[0]
    except TapeMutatedError as e:
        raise GradientCheckError(
            f"{name}, {combo}: the reverse rule modified an array the rule saved for it ({e}); "
            "rules must not modify their residuals: a second reverse pass over the same tape "
            "(split mode, jacobian(Reverse)) would be wrong") from e
    for i in diff:
        if not np.array_equal(np.asarray(first[i]), np.asarray(second[i]), equal_nan=True):
            raise GradientCheckError(
                f"{name}, {combo}: the second reverse pass gave another derivative for "
                f"argument {i} ({_short([first[i]])} then {_short([second[i]])}): the reverse "
                "rule keeps state between calls or modifies what it saved")


def _read_only_cotangent_tree(y):
    leaves, td = flatten(y)
    if len(leaves) == 1 and leaves[0] is y:
        return _read_only_cotangent(y)
    return unflatten(td, [_read_only_cotangent(leaf) for leaf in leaves])


def _copy(x):
    return x.copy() if isinstance(x, np.ndarray) else x


def _shadow_like(x, rng):
    """A random shadow for the array `x`: an array, a 0-d one too (a NumPy scalar could not
    hold what the rule adds into it)."""
    r = random_like(x, rng)
    return np.array(r, dtype=x.dtype) if not isinstance(r, np.ndarray) else r


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
                   else ("Const", "Active") for i in diff]   # (0-d arrays have shadows too)
        for pick in itertools.product(*options):
            yield "reverse", dict(zip(diff, pick))
    if "rev" in modes and "batch" in modes:
        options = [("Const", "BatchDuplicated") for i in diff]
        for pick in itertools.product(*options):
            yield "reverse", dict(zip(diff, pick))


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def _short(leaves):
    return "; ".join(np.array2string(np.asarray(v).ravel()[:6], precision=6) for v in leaves)


__all__ = ["check_rule_first_order", "vjp_function", "weighted_sum"]
