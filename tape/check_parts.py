"""Which part of a failed (or passed) gradient check is wrong: each argument and each output
leaf compared alone with finite differences. A derivative 1% wrong where it is small hides
beside one 1000x larger in a check of the whole, so `tape.testing.check_grads` runs these after
the check of the whole passes too, and names the argument and the output leaf at fault.
"""
from __future__ import annotations

import numpy as np

from .activities import Duplicated, Forward
from .api import autodiff, make_zero
from .finite_differences import (Estimate, agrees, entrywise_gap, inner, leafwise_gap,
                                 output_leaves, scalar_gap, worst_entry)
from .rule_check import magnitude_tree, masked, reverse_parts


def copied(args) -> list:
    """Fresh copies of the array arguments (or directions): `f` may write into its arguments
    (a Duplicated buffer, whose shadow then receives the new tangent), and every evaluation
    must start from the point and direction being checked (and leave the caller's arrays
    alone)."""
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def number(x):
    return complex(x) if np.iscomplexobj(x) else float(x)


def one_direction(args, diff, i, direction) -> list:
    """Copies of `args` annotated for forward mode along `direction` for argument i alone:
    the other differentiated arguments get zero tangents rather than none (a function that
    writes a traced value into one of them needs it traced)."""
    return [Duplicated(a, copied([direction])[0] if k == i else make_zero(a)) if k in diff
            else a for k, a in enumerate(copied(args))]


def only(direction, i):
    return [d if k == i else None for k, d in enumerate(direction)]


def each_leaf_forward(tangent, est, u, rtol, atol, label=()) -> tuple | None:
    """(label, description) of the first output leaf whose J·v disagrees with the finite
    differences `est` when compared alone, or None."""
    if len(u) < 2 and not label:
        return None
    for k in range(len(u)):
        uk = masked(u, k) if len(u) > 1 else u
        ok, description = agrees(lambda d: scalar_gap(tangent, d, uk), est, rtol, atol, uk)
        if not ok:
            where = ", ".join([*label, *([f"output {k}"] if len(u) > 1 else [])])
            return where, "uᵀ(J·v) = " + description
    return None


# The engine's rounding in float64, relative to the largest entry of an output (an entry
# computed by cancellation of larger terms).
_ENGINE_FLOOR = 64 * float(np.finfo(np.float64).eps)


def each_entry_forward(tangent, est, rtol, atol) -> tuple | None:
    """(output k, index j, engine, finite differences, difference, tolerance) of the entry of
    the tangent J·v that disagrees with the finite differences `est` at its own size (rtol of
    the entry plus its error bar), or None: in a projection uᵀ(J·v), or against the largest
    entry, an entry 1000 times smaller may be wrong by any factor."""
    if entrywise_gap(tangent, est.value, est.noise, rtol, atol, _ENGINE_FLOOR)[0] is None:
        return None
    value, err, _ = est.refined()
    k, j, diff, tol = entrywise_gap(tangent, value, [2 * e for e in err], rtol, atol,
                                    _ENGINE_FLOOR)
    if k is None:
        return None
    if j is None:
        return k, (), np.nan, np.nan, diff, tol
    return (k, j, number(np.asarray(tangent[k])[j]), number(np.asarray(value[k])[j]), diff,
            tol)


def describe_entry(found, several_outputs) -> str:
    k, j, got, want, diff, tol = found
    where = ", ".join([*([f"output {k}"] if several_outputs else []),
                       f"index {j}" if j else "(a single entry)"])
    return (f"J·v entry by entry, {where}: {got!r} vs finite differences {want!r} (difference "
            f"{diff:.3g}, tolerance {tol:.3g}: the entry's own size times rtol plus its error "
            "bar)")


def each_part_reverse(f, args, wide, diff, direction, u, grads, labels, eps, rtol, atol,
                      numeric) -> tuple | None:
    """(label, description) of the first output leaf (its own reverse sweep) or argument whose
    uᵀJ disagrees with finite differences when compared alone, or None: in the sum over all of
    them a small wrong part hides beside a large right one."""
    if len(u) < 2 and len(diff) < 2:
        return None
    alone = {i: Estimate(f, wide, only(direction, i), eps) for i in diff} \
        if len(diff) > 1 else {diff[0]: numeric}
    return reverse_parts(f, args, diff, direction, u, alone, labels, rtol, atol, grads)


def forward_alone(f, args, wide, diff, direction, eps):
    """(i, J·v along argument i's direction alone, its finite differences) for each
    differentiated argument i."""
    for i in diff:
        tangent = output_leaves(autodiff(Forward, f, Duplicated, *one_direction(args, diff, i,
                                                                    direction[i]))[0])
        yield i, tangent, Estimate(f, wide, only(direction, i), eps)


def locate_forward(f, args, wide, diff, direction, u, labels, eps, rtol, atol, together):
    """(label, description) of the argument whose forward derivative is wrong, with the output
    leaf that differs most."""
    for i, tangent, est in forward_alone(f, args, wide, diff, direction, eps):
        ok, description = agrees(lambda d: scalar_gap(tangent, d, u), est, rtol, atol, u)
        if not ok:
            value, err, _ = est.refined()
            k, worst, tol, where = leafwise_gap(tangent, value, rtol, atol)
            if k is not None:
                description += (f"; output {k} differs most, at index {where}: "
                                f"{number(tangent[k][where])!r} vs {number(value[k][where])!r}")
            return labels[i], "uᵀ(J·v) = " + description
    return ("every argument at once (each alone agrees: the rule mishandles several "
            "tangents together)", "uᵀ(J·v) = " + together)


def locate_reverse(f, args, wide, diff, direction, u, grads, labels, eps, rtol, atol,
                    together):
    for g, i in zip(grads, diff):
        got = inner(g, direction[i])
        terms = magnitude_tree(g, direction[i])
        est = Estimate(f, wide, only(direction, i), eps)
        ok, description = agrees(lambda d: scalar_gap(got, d, u, terms), est, rtol, atol, u)
        if not ok:
            return labels[i], ("(uᵀJ)·v = " + description
                               + worst_entry(est, i, g, u, rtol, atol))
    return "every argument at once (each alone agrees)", "(uᵀJ)·v = " + together
