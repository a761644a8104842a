"""Gradient checks for your own functions and rules: finite differences in float64, first and
second order.

>>> import numpy as np
>>> check_grads(lambda x: np.sin(x) * x, np.array([0.3, -1.2]))

`check_rule` checks a user rule (custom_rule, easy_rule) in every activity combination.

Both compare the engine with central differences along random directions (a random tangent v
for each argument, a random cotangent u for each output), with a tolerance relative to the
size of the terms compared; a disagreement is re-examined at other steps before it is
reported, so badly scaled inputs and kinks away from the point give no false alarm. A failure
raises `GradientCheckError` naming the mode, the derivative order, the argument (and output)
and the size of the discrepancy.

Hypothesis strategies (`arrays`, `shapes`, `broadcastable_shapes`, `broadcastable_arrays`,
`arrays_and_axes`) live in `tape.testing` too; they import hypothesis lazily, so this module
works without it.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from .activities import (Active, BatchDuplicated, Const, Duplicated, Forward,
                         ForwardWithPrimal, Reverse, ReverseSplitNoPrimal)
from .api import autodiff, make_zero
from .check_parts import (copied as _copied, describe_entry as _describe_entry,
                          each_entry_forward as _each_entry_forward,
                          each_leaf_forward as _each_leaf_forward,
                          each_part_reverse as _each_part_reverse, forward_alone as _forward_alone,
                          locate_forward as _locate_forward, locate_reverse as _locate_reverse,
                          one_direction as _one_direction)
from .core import primal
from .errors import OnceDifferentiableError
from .finite_differences import (Estimate, GradientCheckError, agrees, argument_labels,
                                 check_options, function_name, inner, input_scale, is_float,
                                 leafwise_gap, output_leaves, plain_function, random_like,
                                 scalar_gap, widened)
from .pytree import flatten, flatten_with_paths, format_path, is_inactive, tree_map, unflatten
from .rule_check import (check_rule_first_order, magnitude_tree as _magnitude_tree,
                         vjp_function, weighted_sum)
from .split import autodiff_thunk
# Hypothesis strategies, part of this module's interface:
from .strategies import (arrays, arrays_and_axes, broadcastable_arrays,  # noqa: F401
                         broadcastable_shapes, shapes)

_ORDERS = {1: "first derivatives", 2: "second derivatives (the derivatives of the reverse-mode "
           "gradient x -> uᵀJ(x); the first derivatives, order 1, agreed)",
           3: "third derivatives"}
_FORWARD_ORDERS = {2: "second derivatives (the derivatives of the forward-mode tangent x -> "
                   "J(x)·v; the first derivatives, order 1, agreed)"}


def _is_tree(x) -> bool:
    """Whether `x` is a container of values (not an array or a number)."""
    leaves, _ = flatten(x)
    return len(leaves) != 1 or leaves[0] is not x


def check_grads(f: Callable, *args: Any, modes: Sequence[str] = ("fwd", "rev", "batch"),
                order: int = 2,
                eps: float = 1e-6, rtol: float = 1e-5, atol: float = 1e-10,
                full_jacobian: bool = False, seed: int = 0) -> None:
    """Check `f`'s derivatives at `args` against central finite differences.

    Every floating-point argument is differentiated (others, and arguments given as
    ``Const(x)``, are held constant). `f` must return its results (a function that writes
    into an argument returns that argument); each evaluation gets fresh copies of the array
    arguments, so the caller's arrays are left alone. For each mode
    in ``modes`` ("fwd": forward mode J·v, "rev": reverse mode uᵀJ, both along random
    directions v and u; "batch": batch forward and reverse mode against single directions)
    the engine is compared with finite differences; with ``order=2`` the same is done,
    recursively, for the gradient function itself (forward-over-reverse and
    reverse-over-reverse) and, with "fwd", forward mode for the tangent function x -> J(x)·v
    (forward over forward). With ``full_jacobian=True`` (slow; for debugging) every Jacobian
    entry is compared.

    The step is ``eps`` times the size of each entry (at least 1), entry by entry; where the
    engine and that step disagree, steps from 100 times larger to a million times smaller are
    tried and the most self-consistent estimate decides, its spread counting as its error.
    The tolerance is ``atol + rtol * scale``, where scale is the size of the terms of the
    inner products compared, the root of the sum of their squares (so it fits functions of
    any magnitude, and one wrong entry of a large array still shows); the small absolute
    ``atol`` absorbs the rounding noise of derivatives that are zero (a value computed by
    cancellation): pass ``atol=0`` for functions whose derivatives are themselves below
    1e-9. Arguments must be float64 (or complex128): `check_rule` takes float32 ones. Raises
    `GradientCheckError` naming the mode, the order, the argument at fault and the size of
    the discrepancy (and saying so when `f` is not differentiable at the point).

    Arguments may be pytrees (dicts, lists, dataclasses, ...): their floating-point leaves are
    checked, and a failure names the leaf by its path (``p['b']``). A misspelt or empty
    ``modes``, ``order < 1`` or a step ``eps <= 0`` is refused (it would check nothing).

    >>> check_grads(lambda x, y: x * np.exp(y), 0.5, np.array([0.1, 0.2]), order=1)
    >>> check_grads(lambda p: np.sum(p["w"] * p["b"]), {"w": np.ones(2), "b": 0.5}, order=1)
    >>> check_grads(lambda x: x ** 2, np.array([3e6, -1e6]))   # large inputs: a scaled step
    >>> try:
    ...     check_grads(lambda x: np.where(x > 0, x, 0.0), np.array([0.0, 1.0]), order=1)
    ... except GradientCheckError as e:
    ...     print("not differentiable at this" in str(e))
    True
    """
    modes = check_options("check_grads", modes, eps, rtol, atol, order)
    labels = argument_labels(f, len(args))
    f, args, labels = _hold_constants(_on_copies(f), list(args), labels)
    if any(_is_tree(a) for a in args):   # check the leaves, passed one by one
        leaves, treedefs, counts, leaf_labels = [], [], [], []
        for label, a in zip(labels, args):
            flat, paths, td = flatten_with_paths(a)
            leaves += flat
            treedefs.append(td)
            counts.append(len(flat))
            root = label.split("`")[1] if "`" in label else label
            leaf_labels += [label if len(flat) == 1 and flat[0] is a else
                            f"{label}, leaf {format_path(path, root)}" for path in paths]

        def on_leaves(*flat):
            rebuilt, start = [], 0
            for td, n in zip(treedefs, counts):
                rebuilt.append(unflatten(td, flat[start:start + n]))
                start += n
            return f(*rebuilt)
        return _check(on_leaves, leaves, leaf_labels, modes, order, eps, rtol, atol,
                      full_jacobian, seed, 1)
    return _check(f, args, labels, modes, order, eps, rtol, atol, full_jacobian, seed, 1)


def _on_copies(f):
    """`f` called on fresh copies of its plain array arguments."""
    def on_copies(*xs):
        return f(*_copied(xs))
    return on_copies


def _hold_constants(f, args, labels):
    """(g, free, labels): `g` takes the arguments that are not ``Const(x)``; those are held
    at x."""
    held = [i for i, a in enumerate(args) if isinstance(a, Const)]
    if not held:
        return f, args, labels
    values = [a.val if isinstance(a, Const) else a for a in args]
    free = [i for i in range(len(args)) if i not in held]

    def on_free(*xs):
        full = list(values)
        for i, x in zip(free, xs):
            full[i] = x
        return f(*full)
    return on_free, [values[i] for i in free], [labels[i] for i in free]


def _check_result(y0) -> None:
    """Refuse a result with nothing to compare (the check would pass whatever the rules)."""
    leaves, _ = flatten(y0)
    if any(is_float(v) for v in leaves):
        return
    if y0 is None:
        raise ValueError("check_grads: f returned None, so there is nothing to compare; a "
                         "function that writes its result into an argument must return it "
                         "to be checked: lambda y, x: (f(y, x), y)[1]")
    raise ValueError(f"check_grads: f returned no floating-point value ({type(y0).__name__}"
                     f"{' of dtype ' + str(np.result_type(y0)) if leaves else ', empty'}), "
                     "so there is no derivative to compare; return the float results")


def _check(f, args, labels, modes, order, eps, rtol, atol, full_jacobian, seed, level,
           outer_floor=0.0, what=None, each_argument=True, y0=None):
    rng = np.random.default_rng(seed)
    diff = [i for i, a in enumerate(args) if is_float(a)]
    if not diff:
        raise ValueError("check_grads needs at least one floating-point argument")
    for a in args:
        if is_float(a) and np.result_type(a) not in (np.float64, np.complex128):
            raise ValueError(f"check_grads needs float64 arguments for accurate finite "
                             f"differences; got dtype {np.result_type(a)}. Check the function "
                             "at float64 values (x.astype(np.float64)), or use check_rule, "
                             "which takes float32 arguments")
    wide = args
    direction = [random_like(a, rng, input_scale(a)) if i in diff else None
                 for i, a in enumerate(args)]
    if y0 is None:   # (else f's value at args, known already)
        y0 = f(*_copied(args))
    if level == 1:
        _check_result(y0)
    u = [random_like(y, rng) for y in output_leaves(y0)]
    numeric = Estimate(f, wide, direction, eps)
    what = what or _ORDERS.get(level, f"derivatives of order {level}")
    # Engine against engine (batch against single passes): rounding of the order of the
    # function's values (at higher orders, of the original function's too: a derivative that
    # is zero is rounding noise on both sides).
    floor = max([outer_floor] + [1e-3 * rtol * float(np.max(np.abs(y), initial=0.0))
                                 for y in output_leaves(y0)])

    def fail(mode, label, description):
        return GradientCheckError(f"check_grads: {mode} of the {what}, {label}: {description}")

    if "fwd" in modes:
        annotated = [Duplicated(a, d) if d is not None else a
                     for a, d in zip(_copied(args), _copied(direction))]
        tangent, = autodiff(Forward, f, Duplicated, *annotated)
        ok, together = agrees(lambda d: scalar_gap(output_leaves(tangent), d, u), numeric,
                              rtol, atol, u)
        if not ok:
            label, description = _locate_forward(f, args, wide, diff, direction, u, labels, eps,
                                                 rtol, atol, together)
            raise fail("forward mode (J·v)", label, description)
        # Each output leaf, and each argument, on its own: a derivative 1% wrong where it is
        # small hides beside one 1000x larger in the sum above.
        wrong = _each_leaf_forward(output_leaves(tangent), numeric, u, rtol, atol)
        if wrong is None and len(diff) > 1 and each_argument:
            for i, alone, est in _forward_alone(f, args, wide, diff, direction, eps):
                wrong = _each_leaf_forward(alone, est, u, rtol, atol, [labels[i]])
                if wrong is not None:
                    break
        if wrong is not None:
            raise fail("forward mode (J·v)", *wrong)
        found = _each_entry_forward(output_leaves(tangent), numeric, rtol, atol)
        if found is not None:
            label = labels[diff[0]] if len(diff) == 1 else (
                "every argument at once (each alone agrees entry by entry)")
            if len(diff) > 1:
                for i, alone, est in _forward_alone(f, args, wide, diff, direction, eps):
                    found_alone = _each_entry_forward(alone, est, rtol, atol)
                    if found_alone is not None:
                        label, found = labels[i], found_alone
                        break
            raise fail("forward mode (J·v)", label, _describe_entry(found, len(u) > 1))

    if "rev" in modes or order > 1:
        vjp_fn = vjp_function(f, diff, u)
    if "rev" in modes:
        grads = vjp_fn(*_copied(args))
        got = sum(inner(g, direction[i]) for g, i in zip(grads, diff))
        terms = sum(_magnitude_tree(g, direction[i]) for g, i in zip(grads, diff))
        ok, together = agrees(lambda d: scalar_gap(got, d, u, terms), numeric, rtol, atol, u)
        if not ok:
            label, description = _locate_reverse(f, args, wide, diff, direction, u, grads,
                                                 labels, eps, rtol, atol, together)
            raise fail("reverse mode (uᵀJ)", label, description)
        wrong = _each_part_reverse(f, args, wide, diff, direction, u, grads, labels, eps, rtol,
                                   atol, numeric)
        if wrong is not None:
            raise fail("reverse mode (uᵀJ)", *wrong)

    if "batch" in modes:
        _check_batch(f, args, diff, direction, u, rng, rtol, atol + floor, what, labels)

    if full_jacobian:
        _check_full_jacobian(f, args, wide, diff, eps, rtol, atol, labels)

    if order > 1:
        try:
            _check(vjp_fn, args, labels, modes, order - 1, eps, rtol, atol, False, seed + 1,
                   level + 1, floor)
            if "fwd" in modes:
                _check_forward_over_forward(f, args, labels, direction, eps, rtol, atol,
                                            seed + 2, level + 1, floor, tangent)
        except OnceDifferentiableError as e:
            if "order=1" in str(e):   # said by a deeper level already
                raise
            e.args = (f"{e} check_grads checks second derivatives too by default (order={order}"
                      "); the first ones agreed with finite differences. Pass order=1 to check "
                      "first derivatives only.",)
            raise


def check_rule(f: Callable, *args: Any, modes: Sequence[str] = ("fwd", "rev", "batch"),
               eps: float = 1e-6, rtol: float = 1e-5, atol: float = 1e-10,
               seed: int = 0) -> int:
    """Check a user rule (`custom_rule`, `easy_rule`) in every activity combination against
    finite differences, as EnzymeTestUtils' ``test_forward`` / ``test_reverse`` do.

    Each floating-point argument is tried Const and differentiated: forward mode Duplicated
    ("fwd"), reverse mode Active, and Duplicated for arrays (gradients added into a non-zero
    shadow) ("rev"); with "batch", BatchDuplicated of width 2 in both modes (a Python number as
    a 0-d array in reverse mode). Arguments given as ``Const(x)`` (and integers, and
    instances of `inactive_type` classes) stay constant.
    Each combination is run with every return activity: forward Duplicated with and without
    the primal, and Const (so the rule also sees ``needs_primal`` and ``needs_shadow``
    False); reverse Active (the result projected onto a random cotangent, so the reverse rule
    gets a non-trivial seed) and Const. Primal results are compared with ``f(*args)``,
    derivatives with finite differences argument by argument (tangents output by output),
    with random directions scaled to each argument and the tolerances of `check_grads`.

    The rule must also leave alone what it is given: the arguments, the tangents (forward)
    and the cotangent (reverse: it receives a read-only array, so ``g *= c`` raises), and
    keep the precision: a float32 tangent or cotangent for float64 values is an error; nor
    may the reverse rule modify what it saved (the tape is also reversed twice, as split
    mode and ``jacobian(Reverse)`` do, and the rule's result must survive the sweep).
    float16 arguments are refused: their rounding hides rules wrong by a factor 2. A
    rule that says its rules are differentiable (``easy_rule``, ``custom_rule(...,
    differentiable=True)``) has its second derivatives checked too (forward-over-reverse
    and reverse-over-reverse against finite differences of its gradient, forward over
    forward against those of its tangent), in double precision. Keyword parameters are bound
    with ``functools.partial(rule, k=...)``.

    Returns the number of first-order combinations checked; raises `GradientCheckError`
    naming the combination, the argument or output at fault and the size of the
    discrepancy. Use `check_grads` for higher orders.

    >>> from tape import custom_rule
    >>> square = custom_rule(lambda x: x * x, augmented_primal=lambda cfg, x: (x * x, x),
    ...     reverse=lambda cfg, x, g: (2 * x * g,),
    ...     forward=lambda cfg, p, t: (p[0] * p[0], 2 * p[0] * t[0]))
    >>> check_rule(square, np.array([0.5, -1.0]))
    12
    """
    modes = check_options("check_rule", modes, eps, rtol, atol)
    n_checked = check_rule_first_order(f, args, modes, eps, rtol, atol, seed)
    if getattr(plain_function(f), "differentiable_rules", False) and (
            "rev" in modes or "fwd" in modes):
        _check_rule_second_order(f, args, modes, eps, rtol, atol, seed)
    return n_checked


def _forward_tangent(f, direction):
    """x -> J(x)·v by forward mode, itself differentiable (forward over forward)."""
    def jvp(*xs):
        # Tangents of the differentiating level (zeros of x plus v): `f` may write a traced
        # value into an argument, and then into its tangent too.
        annotated = [Duplicated(x, make_zero(x) + d) if d is not None else x
                     for x, d in zip(_copied(xs), direction)]
        return autodiff(Forward, f, Duplicated, *annotated)[0]
    return jvp


def _check_forward_over_forward(f, args, labels, direction, eps, rtol, atol, seed, level,
                                floor=0.0, tangent=None):
    """The forward-mode derivatives of x -> J(x)·v against its finite differences: forward
    over reverse and reverse over reverse never differentiate a forward rule, so a forward
    rule that is not itself differentiable (it cuts the primal out of the trace) passes them
    both. Every argument at once (a failure is then located argument by argument): forward
    over reverse checks each argument's second derivatives alone already."""
    what = _FORWARD_ORDERS.get(level, f"derivatives of order {level} (forward over forward)")
    _check(_forward_tangent(f, direction), args, labels, ("fwd",), 1, eps, rtol, atol, False,
           seed, level, floor, what, each_argument=False, y0=tangent)


def _check_rule_second_order(f, args, modes, eps, rtol, atol, seed):
    """Forward-over-reverse and reverse-over-reverse ("rev" in `modes`), and forward over
    forward ("fwd"), of the rule, the constant arguments held fixed."""
    diff = [i for i, a in enumerate(args)
            if not isinstance(a, Const) and not is_inactive(a) and is_float(a)]
    # In double precision (the first-order sweep took float32 arguments as they are): the
    # finite differences of a derivative need it.
    values = [a.val if isinstance(a, Const) else widened(a) if i in diff else a
              for i, a in enumerate(args)]
    labels = argument_labels(f, len(args))

    def on_differentiated(*xs):
        full = list(values)
        for i, x in zip(diff, xs):
            full[i] = x
        return f(*full)
    rng = np.random.default_rng(seed + 1)
    u = [random_like(y, rng) for y in output_leaves(f(*values))]
    points = [values[i] for i in diff]
    try:
        if "rev" in modes:
            gradient = vjp_function(on_differentiated, list(range(len(diff))), u)
            _check(gradient, points, [labels[i] for i in diff],
                   [m for m in modes if m in ("fwd", "rev")], 1, eps, rtol, atol, False,
                   seed + 2, 2)
        if "fwd" in modes:
            direction = [random_like(x, rng, input_scale(x)) for x in points]
            _check_forward_over_forward(on_differentiated, points, [labels[i] for i in diff],
                                        direction, eps, rtol, atol, seed + 3, 2)
    except GradientCheckError as e:
        message = str(e)
        if message.startswith("check_grads: "):
            message = message[len("check_grads: "):]
        raise GradientCheckError(f"check_rule(`{function_name(f)}`): {message}") from None


def _check_batch(f, args, diff, direction, u, rng, rtol, atol, what, labels):
    """Batch mode against single directions: two forward tangents in one pass, and two
    reverse seeds (1 and -2.5) in one sweep of a split-mode tape."""
    second = [random_like(a, rng, input_scale(a)) if i in diff else None
              for i, a in enumerate(args)]
    batched = [BatchDuplicated(a, (d, e)) if d is not None else a
               for a, d, e in zip(_copied(args), _copied(direction), _copied(second))]
    tangents, = autodiff(Forward, f, Duplicated, *batched)
    for w, dirs in enumerate((direction, second)):
        single = [Duplicated(a, d) if d is not None else a
                  for a, d in zip(_copied(args), _copied(dirs))]
        expected, = autodiff(Forward, f, Duplicated, *single)
        got_leaves, want_leaves = output_leaves(tangents[w]), output_leaves(expected)
        k, diff_, tol, where = leafwise_gap(got_leaves, want_leaves, rtol, atol)
        if k is not None:
            raise GradientCheckError(
                f"check_grads: batch forward mode (BatchDuplicated) of the {what}, direction "
                f"{w}, output {k}: disagrees with a single forward pass (difference {diff_:.3g}"
                f", tolerance {tol:.3g}): {got_leaves[k]} vs {want_leaves[k]}")
    scalar = weighted_sum(f, u)
    grads = vjp_function(f, diff, u)(*_copied(args))
    types, call = [], []
    for i, a in enumerate(_copied(args)):
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
            k, diff_, tol, _ = leafwise_gap([got], [c * np.asarray(g)], rtol, atol)
            if k is not None:
                raise GradientCheckError(
                    f"check_grads: batch reverse mode (BatchDuplicated) of the {what}, seed {w},"
                    f" {labels[i]}: disagrees with a single reverse sweep (difference "
                    f"{diff_:.3g}, tolerance {tol:.3g}): {got} vs {c} * {g}")


def _unit_directions(x):
    """(label, flat index, direction) for each coordinate of `x`: its real and, for a complex
    `x`, its imaginary part."""
    dtype = np.result_type(x)
    units = (1.0, 1j) if dtype.kind == "c" else (1.0,)
    size = int(np.size(x))
    for j in range(size):
        for unit in units:
            e = np.zeros(size, dtype=dtype)
            e[j] = unit
            label = f"{j}" if unit == 1.0 else f"{j} (imaginary part)"
            if isinstance(x, (float, complex)):
                yield label, j, type(x)(e[0]) if isinstance(x, complex) else float(e[0].real)
            else:
                yield label, j, e.reshape(np.shape(x))


def _check_full_jacobian(f, args, wide, diff, eps, rtol, atol, labels):
    for i in diff:
        scales = np.ravel(input_scale(args[i]))
        for j, flat, direction in _unit_directions(args[i]):
            d = [None] * len(args)
            d[i] = direction
            annotated = _one_direction(args, diff, i, direction)
            tangent = output_leaves(autodiff(Forward, f, Duplicated, *annotated)[0])
            est = Estimate(f, wide, d, eps * float(scales[flat]))
            if leafwise_gap(tangent, est.value, rtol, atol)[0] is None:
                continue
            value, err, _ = est.refined()
            for k, (num, got, e) in enumerate(zip(value, tangent, err)):
                scale = max(float(np.max(np.abs(num), initial=0.0)),
                            float(np.max(np.abs(got), initial=0.0)))
                bad = np.abs(got - num) > atol + rtol * scale + 2 * e
                if np.any(bad):
                    raise GradientCheckError(
                        f"check_grads: Jacobian column {j} of {labels[i]} (output {k}) "
                        f"disagrees: engine {got.ravel()[:6]} vs numeric {num.ravel()[:6]}")


def traced_value(f: Callable, *args: Any, mode: str = "forward") -> Any:
    """What `f` returns when its floating-point arguments are traced, as plain values: the
    primal computed through the rules (the forward rules for ``mode="forward"``, the
    augmented-primal rules for ``mode="reverse"``), to compare with `f` on plain arrays.

    >>> traced_value(lambda x: np.cumsum(x) * 2, np.array([1.0, 2.0]), mode="reverse")
    array([2., 6.])
    """
    def traced(a):   # a value with a float somewhere, not held by Const
        return not isinstance(a, Const) and any(is_float(v) for v in flatten(a)[0])
    if mode == "forward":
        annotated = [Duplicated(a, make_zero(a)) if traced(a) else a for a in args]
        return autodiff(ForwardWithPrimal, f, Duplicated, *annotated)[1]
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
    autodiff(Reverse, scalar, Active, *[Active(a) if traced(a) else a for a in args])
    return tree_map(primal, seen[0])


__all__ = ["check_grads", "check_rule", "GradientCheckError", "traced_value", "shapes", "arrays",
           "arrays_and_axes", "broadcastable_shapes", "broadcastable_arrays"]
