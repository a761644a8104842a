"""Jacobians by forward columns or reverse rows, for array, scalar and pytree arguments.

The Jacobian with respect to an argument has the argument's structure: an array or scalar
argument gives one array shaped ``out.shape + x.shape``; a pytree argument (dict, list, tuple,
namedtuple, dataclass, registered class) gives the same pytree with each float leaf replaced
by ``out.shape + leaf.shape`` and every other leaf by None, as reverse-mode gradients do.
Both modes differentiate a pytree argument itself (forward mode seeds one float leaf hot per
direction, reverse mode accumulates into zero shadows of the tree), so errors name leaves by
their path; a tree whose shadow cannot take a float number leaf (one inside a tuple) goes to
reverse mode as the plain list of its float leaves. Other arguments are held Const; where `f`
writes a value computed from the differentiated one into them, they get throwaway zero
shadows instead.

Complex entries take two forward directions, 1 and 1j: the forward Jacobian row of a real
function is then ``df/dRe + 1j df/dIm``, the reverse-mode gradient. Complex results are
refused (their forward columns and reverse rows are conjugate conventions of each other).
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from .activities import (Active, BatchDuplicated, Const, Duplicated, ForwardWithPrimal,
                          ReverseSplitWithPrimal)
from .api import _argument_names, _is_float, _is_mutable_leaf, autodiff, make_zero
from .backend import array_module
from .core import Tracer, is_complex, peek
from .errors import ActivityError, ConstWriteError
from .pytree import (fixed_place, flatten, flatten_with_paths, format_path, is_leaf,
                     unflatten)
from .split import autodiff_thunk


def with_flags(mode, flags):
    """`mode` with the modifiers of `flags` (strong zero, runtime activity, NaN check), so that
    a helper's inner passes follow the mode the user gave it.

    >>> from tape import set_strong_zero, Reverse
    >>> with_flags(ReverseSplitWithPrimal, set_strong_zero(Reverse)).strong_zero
    True
    """
    if flags is None:
        return mode
    return mode.replace(strong_zero=flags.strong_zero, runtime_activity=flags.runtime_activity,
                        nan_check=flags.nan_check)


def onehot(x: Any) -> tuple:
    """One shadow per scalar entry of `x` (all its float leaves), each with a single 1.

    The order is that of the leaves in `tape.pytree.flatten(x)`, each leaf in C order; it is
    also the order of the rows and columns of `hessian` for a pytree argument.

    >>> onehot(np.zeros(2))
    (array([1., 0.]), array([0., 1.]))
    >>> onehot({"w": np.zeros(1), "b": 0.0})
    ({'w': array([1.]), 'b': 0.0}, {'w': array([0.]), 'b': 1.0})
    """
    return _units(x, 1)


def _units(x, value):
    """`onehot` with `value` (1 or 1j) in place of the 1."""
    leaves, td = flatten(x)
    out = []
    for k, leaf in enumerate(leaves):
        for j in range(int(np.size(leaf)) if _is_float(leaf) else 0):
            zl, _ = flatten(make_zero(x))
            if isinstance(peek(zl[k]), (float, complex)):   # (traced by an outer level too)
                zl[k] = type(peek(zl[k]))(value)
            elif isinstance(zl[k], np.generic):   # a NumPy scalar stays one (a 0-d array too)
                zl[k] = zl[k] + value
            else:
                # Index by position, not through reshape(-1): that is a copy for an array that
                # is not C-contiguous (a transpose, Fortran order), and the 1 would be lost.
                zl[k][np.unravel_index(j, np.shape(zl[k]))] = value
            out.append(unflatten(td, zl))
    return tuple(out)


def _directions(x):
    """Real unit directions, then (for complex leaves) imaginary ones, leaf by leaf."""
    if not isinstance(x, list):
        return _units(x, 1) + (_units(x, 1j) if is_complex(x) else ())
    out = []
    for k, leaf in enumerate(x):
        for hot in _directions(leaf):
            zeros = [make_zero(v) for v in x]
            zeros[k] = hot
            out.append(zeros)
    return tuple(out)


def check_chunk(chunk: Any) -> int | None:
    """None (all directions in one pass) or a positive integer; anything else is refused."""
    if chunk is None:
        return None
    if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)):
        raise TypeError(f"chunk must be a positive integer (directions per pass) or None, got "
                        f"{chunk!r} of type {type(chunk).__name__}")
    if chunk < 1:
        raise ValueError(f"chunk must be at least 1 (directions per pass), got {chunk}; pass a "
                         "positive integer, or None for all directions in one pass")
    return int(chunk)


def _chunks(n: int, chunk: int | None):
    chunk = n if chunk is None else chunk
    return [range(i, min(i + chunk, n)) for i in range(0, n, max(chunk, 1))]


def _describe(v) -> str:
    if hasattr(v, "dtype"):
        return f"{type(v).__name__} of dtype {v.dtype} and shape {np.shape(v)}"
    return type(v).__name__


def check_argument(x: Any, i: int, f: Callable, caller: str) -> None:
    """Refuse an argument with no floating-point value (or with an object that is no pytree,
    naming the argument) before any work is done."""
    leaves, _ = flatten(x, where=functools.partial(_place, f, i))
    if not any(_is_float(v) for v in leaves):
        what = _describe(x) if is_leaf(x) else f"{_describe(x)} with no float leaf"
        raise ActivityError(
            f"{caller}: argument {i} of `{_name(f)}` holds no floating-point value ({what}); "
            "integer and boolean values have no derivative. Convert it (x.astype(float), 2.0 "
            "for 2), or wrap it in Const(...) to hold it constant")


def check_result(out: Any, f: Callable, caller: str) -> None:
    """A Jacobian needs an array (or scalar) result with real entries."""
    if isinstance(out, (bool, np.bool_)) or getattr(out, "dtype", None) == np.bool_:
        raise ActivityError(
            f"{caller} needs a float result, but `{_name(f)}` returned a boolean "
            f"({_describe(out)}), which has no derivative: return the float value the "
            "comparison was made on")
    if not is_leaf(out):
        raise ActivityError(
            f"{caller} needs an array or scalar result, but `{_name(f)}` returned "
            f"{type(out).__name__}; Jacobians of pytree results are not supported: take one "
            "Jacobian per output (lambda x: f(x)['a']), or return one array "
            "(np.concatenate of the raveled outputs)")
    if is_complex(out):
        raise ActivityError(
            f"{caller} needs a real result, but `{_name(f)}` returned complex values "
            f"({_describe(out)}); return the real and imaginary parts as one real array, e.g. "
            "lambda x: np.stack([f(x).real, f(x).imag])")


def _name(f) -> str:
    return getattr(f, "__name__", "f")


def _place(f: Callable, i: int, path) -> str:
    """A place in argument i of `f`, as autodiff names it: `p['w'][2] (argument 1)`."""
    name = _argument_names(f, i + 1)[i]
    return f"{format_path(path, name.root)} (argument {i})" if path else str(name)


def on_float_leaves(f: Callable, args: list, i: int):
    """(g, args', rebuild): `g` takes argument i as the list of its float leaves; `rebuild`
    turns one result per float leaf back into the argument's structure (None elsewhere)."""
    leaves, td = flatten(args[i])
    slots = [k for k, v in enumerate(leaves) if _is_float(v)]

    def g(*call):
        full = list(leaves)
        for k, v in zip(slots, call[i]):
            full[k] = v
        return f(*call[:i], unflatten(td, full), *call[i + 1:])
    g.__name__ = _name(f)

    def rebuild(per_leaf):
        full = [None] * len(leaves)
        for k, v in zip(slots, per_leaf):
            full[k] = v
        return unflatten(td, full)
    call = list(args)
    call[i] = [leaves[k] for k in slots]
    return g, call, rebuild


class SamePoint:
    """Several calls of `f` at one point. `f` may write into its arguments' arrays (a Jacobian
    of ``a *= 2; return a ** 2``); every call after the first starts from the values they held
    before the first, so that each pass differentiates at the same point and the arrays end
    up as after one call, as after `autodiff`.

    >>> a = np.array([1.0, 2.0]); point = SamePoint([a])
    >>> point.before_call(); a *= 2; point.before_call(); a
    array([1., 2.])
    """
    __slots__ = ("saved", "calls")

    def __init__(self, args: list):
        arrays = {}
        for a in args:
            for leaf in flatten(a.val if isinstance(a, Const) else a)[0]:
                if _is_writable_array(leaf):
                    arrays[id(leaf)] = leaf
        self.saved = [(v, v.copy()) for v in arrays.values()]
        self.calls = 0

    def before_call(self) -> None:
        if self.calls:
            for array, values in self.saved:
                array[...] = values
        self.calls += 1


def _is_writable_array(x) -> bool:
    if isinstance(x, np.ndarray):
        return bool(x.flags.writeable)
    return hasattr(x, "__cuda_array_interface__")


def is_tree(x) -> bool:
    return not isinstance(x, Tracer) and flatten(x)[1].kind != "leaf"


# --------------------------------------------------------------------------------------------
# Forward mode: one batched pass per chunk of input directions


def forward_columns(f, args, i, chunk=None, check=None, point=None, directions=None,
                    flags=None):
    """(columns, primal): the tangent of `f` along each direction (by default
    `_directions(args[i])`). `point` (a SamePoint over the arguments) restores them between
    passes."""
    point = SamePoint(args) if point is None else point
    x = args[i]
    directions = _directions(x) if directions is None else directions
    consts = [Const(a.val if isinstance(a, Const) else a) for a in args]
    columns, primal = [], None
    for rows in _chunks(len(directions), chunk):
        call = list(consts)
        call[i] = BatchDuplicated(x, tuple(directions[j] for j in rows))
        point.before_call()
        try:
            tangents, primal = autodiff(with_flags(ForwardWithPrimal, flags), f, Duplicated, *call)
        except ConstWriteError:
            # `f` writes a value computed from argument i into another argument (`q[0] =
            # p[0]`): that one carries zero tangents instead of being held Const
            call = [c if k == i else _zero_tangents(c.val, len(rows))
                    for k, c in enumerate(call)]
            point.before_call()
            tangents, primal = autodiff(with_flags(ForwardWithPrimal, flags), f, Duplicated, *call)
        if check is not None and not columns:
            check(primal)
        columns.extend(tangents)
    if not directions:      # an empty argument: no pass ran
        point.before_call()
        primal = f(*[c.val for c in consts])
        if check is not None:
            check(primal)
    return columns, primal


def _zero_tangents(value, width: int):
    """`value` as a BatchDuplicated argument with `width` zero tangents, where it has float
    leaves that `f` may write into; Const otherwise."""
    leaves = flatten(value)[0]
    if not any(_is_mutable_leaf(leaf) and _is_float(leaf) for leaf in leaves):
        return Const(value)
    return BatchDuplicated(value, tuple(make_zero(value) for _ in range(width)))


def forward_jacobian(f, args, i, chunk=None, check=None, point=None, flags=None):
    """The Jacobian of `f` with respect to argument i by forward columns, and the primal."""
    x = args[i]
    if not is_tree(x):
        columns, primal = forward_columns(f, args, i, chunk, check, point, flags=flags)
        return _blocks(columns, primal, [x])[0], primal
    # The tree itself is seeded (reverse mode needs the list of its float leaves), so that the
    # engine's errors name a leaf by its path in the argument (`p['w']`, not `args[0][1]`).
    leaves, td = flatten(x)
    slots = [k for k, v in enumerate(leaves) if _is_float(v)]
    directions = []
    for k in slots:
        for hot in _directions(leaves[k]):
            zeros = flatten(make_zero(x))[0]
            zeros[k] = hot
            directions.append(unflatten(td, zeros))
    columns, primal = forward_columns(f, args, i, chunk, check, point, tuple(directions),
                                      flags)
    full = [None] * len(leaves)
    for k, block in zip(slots, _blocks(columns, primal, [leaves[k] for k in slots])):
        full[k] = block
    return unflatten(td, full), primal


def _blocks(columns, primal, leaves):
    """The Jacobian block of each leaf from the forward columns, in `_directions` order."""
    xp = array_module(primal if hasattr(primal, "shape") else np.asarray(primal))
    out, start = [], 0
    for leaf in leaves:
        size = int(np.size(leaf))
        if size == 0:
            out.append(_like_leaf(xp.zeros(np.shape(primal) + np.shape(leaf)), leaf))
            continue
        J = xp.stack([xp.asarray(c) for c in columns[start:start + size]], axis=-1)
        start += size
        if is_complex(leaf):
            J = J + 1j * xp.stack([xp.asarray(c) for c in columns[start:start + size]], axis=-1)
            start += size
        out.append(_like_leaf(J.reshape(np.shape(primal) + np.shape(leaf)), leaf))
    return out


def _like_leaf(J, leaf):
    """A Jacobian block in its argument's type, as reverse mode casts derivatives."""
    if isinstance(J, Tracer) or isinstance(leaf, Tracer):
        return J if J.ndim else J[()]
    dtype = getattr(leaf, "dtype", None)
    if dtype is not None and J.dtype != dtype:
        J = J.astype(dtype)
    if J.ndim:
        return J
    if isinstance(leaf, (float, complex)) and not isinstance(leaf, np.generic):
        return type(leaf)(J)
    return J[()]


# --------------------------------------------------------------------------------------------
# Reverse mode: one recorded forward pass, reversed once per chunk of output rows


def reverse_jacobian(f, args, i, chunk=None, check=None, point=None, flags=None):
    """The Jacobian of `f` with respect to argument i by reverse rows (batch mode)."""
    point = SamePoint(args) if point is None else point
    if is_tree(args[i]) and not _shadow_takes_every_leaf(args[i]):
        # A float number inside a tuple (or a class registered with functions) cannot be
        # accumulated into: the engine gets the list of the float leaves instead
        g, call, rebuild = on_float_leaves(f, args, i)
        return rebuild(_reverse_jacobian(g, call, i, chunk, check, point, flags))
    return _reverse_jacobian(f, args, i, chunk, check, point, flags)


def _shadow_takes_every_leaf(x) -> bool:
    """Whether a shadow of tree `x` (make_zero) can be accumulated into at each float leaf,
    so that the tree itself is differentiated and errors name leaves by their path."""
    leaves, paths, _ = flatten_with_paths(x)
    return all(_is_mutable_leaf(v) or not _is_float(v) or fixed_place(x, path) is None
               for v, path in zip(leaves, paths))


def _reverse_jacobian(f, args, i, chunk, check, point, flags=None):
    """`reverse_jacobian` of an array, a scalar or a tree whose shadow takes every leaf (or a
    list of float leaves): one block per float leaf, in the argument's structure. `f` runs
    twice: once for the result's shape (the seeds), once recorded."""
    values = [a.val if isinstance(a, Const) else a for a in args]
    try:
        return _reverse_rows(f, values, i, chunk, check, point, flags, False)
    except ConstWriteError:
        # `f` writes a value computed from argument i into another argument (`q[0] = x[0]`):
        # those carry throwaway zero shadows instead of being held Const, as in
        # jacobian(Forward), and their derivatives are dropped
        return _reverse_rows(f, values, i, chunk, None, point, flags, True)


def _annotate(values, i, hot, width, writes):
    """The arguments of one pass: `hot` at i, the others Const, or (`writes`) with
    throwaway zero shadows where they hold float arrays `f` may write into."""
    call = [_throwaway_shadows(v, width) if writes else Const(v) for v in values]
    call[i] = hot
    return call


def _throwaway_shadows(value, width):
    leaves = flatten(value)[0]
    if not any(_is_mutable_leaf(leaf) and _is_float(leaf) for leaf in leaves):
        return Const(value)
    if width is None:
        return Duplicated(value, make_zero(value))
    return BatchDuplicated(value, tuple(make_zero(value) for _ in range(width)))


def _reverse_rows(f, values, i, chunk, check, point, flags, writes):
    x = values[i]
    point.before_call()
    primal = f(*values)
    if check is not None:
        check(primal)
    seeds = onehot(primal) if _is_float(primal) else ()
    if not _is_mutable_leaf(x) and is_leaf(x):
        return _reverse_rows_of_scalar(f, values, i, primal, seeds, point, flags, writes)
    blocks = _chunks(len(seeds), chunk)
    width = len(blocks[0]) if blocks else 1

    def annotate():   # fresh zero shadows for each pass
        hot = BatchDuplicated(x, tuple(make_zero(x) for _ in range(width)))
        return _annotate(values, i, hot, width, writes)
    call = annotate()
    fwd, rev = autodiff_thunk(with_flags(ReverseSplitWithPrimal, flags), f, Active,
                              *[type(c) for c in call])
    point.before_call()
    tape, _, _ = fwd(*call)
    zero_seed = make_zero(primal)
    rows = []
    for block in blocks:
        call = annotate()
        block_seeds = [seeds[j] for j in block]
        block_seeds += [zero_seed] * (width - len(block))    # the last chunk may be short
        rev(*call, tuple(block_seeds), tape)
        rows.extend(flatten(s)[0] for s in call[i].dval[:len(block)])
    leaves, td = flatten(x)
    return unflatten(td, [_stack_rows([r[k] for r in rows], primal, leaf)
                          if _is_float(leaf) else None for k, leaf in enumerate(leaves)])


def _stack_rows(rows, primal, leaf):
    if not rows:
        return _like_leaf(np.zeros(np.shape(primal) + np.shape(leaf)), leaf)
    xp = array_module(leaf if hasattr(leaf, "shape") else np.asarray(leaf))
    J = xp.stack([xp.asarray(r) for r in rows]).reshape(np.shape(primal) + np.shape(leaf))
    return _like_leaf(J, leaf)


def _reverse_rows_of_scalar(f, values, i, primal, seeds, point, flags, writes):
    """A scalar input has no shadow to fill: Active, one reverse sweep per output element."""
    call = _annotate(values, i, Active(values[i]), None, writes)
    fwd, rev = autodiff_thunk(with_flags(ReverseSplitWithPrimal, flags), f, Active,
                              *[type(c) for c in call])
    point.before_call()
    tape, _, _ = fwd(*call)
    rows = [rev(*_annotate(values, i, Active(values[i]), None, writes), seed, tape)[0][i]
            for seed in seeds]
    if not rows:
        return np.zeros(np.shape(primal))
    if not np.shape(primal):
        return rows[0]
    return np.reshape(np.stack(rows), np.shape(primal))
