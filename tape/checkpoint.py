"""Checkpointing (rematerialisation): recompute a segment in the reverse pass instead of storing it.

`checkpoint(f)` makes a call of `f` one record on the tape that keeps only the values `f`
reads; the reverse pass recomputes `f` on a fresh tape and sweeps that. `checkpointed_scan`
(tape/checkpointed_scan.py) runs a loop `carry, y = step(carry, x)` as such segments, so the
tape holds every k-th carry (or, with ``schedule="revolve"``, a binomial set of snapshots)
instead of every step's residuals.

Design
------
The hard part is that a segment reads values it is not passed: an RNN step reads ``W`` from the
enclosing function. Such closures are found while the call runs, not declared:

* **Forward.** A checkpointed call is served by the innermost open trace, when it is a reverse
  trace (level d). For the duration of `f` that trace is made *transparent*: its `process` notes
  each of its own tracers an operation meets -- argument or closure alike -- with the value it
  holds, and calls the primitive on the plain values, recording nothing. `f`'s results become new
  level-d tracers: the outputs of one record whose inputs are the noted tracers and whose residuals
  are their values (references, not copies). Outer levels, if any, see ordinary operations on
  their own tracers and record them as usual.
* **Reverse.** The record's rule opens a fresh `ReverseTrace` and, for the length of one call of
  `f`, points each noted tracer *object* at a fresh leaf of it (holding the saved value). `f` still
  refers to the same objects through its arguments and closure, so it now computes on the new tape.
  The objects are restored, and the new tape is swept backward from the incoming cotangent; its
  leaves' cotangents are the record's input cotangents.
* **Higher order.** The rule uses traced operations only, so a level outside d differentiates the
  recomputation and its sweep like any other code: forward- and reverse-over-reverse through a
  checkpoint work (the outer level stores the segment in full; only level d saves memory). In
  forward mode a checkpointed call is the plain call: forward mode stores nothing.
* **Scan.** Each segment of `every` steps is a checkpointed call of a plain loop over the steps,
  so the step's closure needs nothing special either. ``schedule="revolve"`` follows Griewank's
  binomial schedule with checkpoints inside checkpoints: with s snapshots and t the least
  repetition count with C(s+t, s) >= n, the first C(s+t-1, s) steps are one checkpointed segment
  (scheduled the same way inside, with s snapshots), and the rest continue with s-1. Each step
  runs at most t+1 times; each level of nested recomputation holds its own cotangent of the
  values the step closes over.

Restrictions, checked where cheap: `f` must be deterministic (the recomputation must read the same
differentiated values), and must not write into arrays it did not create (its arguments and
closures are snapshots). The plain arrays it reads (a closure's workspace, a Const argument, the
scanned xs) are not copied: the record keeps a digest of `f`'s results, and a recomputation
whose results differ (such an array was written before the reverse pass) raises instead of
returning the derivative at the new values. The plain NumPy arrays that operations on
differentiated values read in the first run are digested too (O(1) memory each, and a weak
reference: no temporary is kept alive), and the recomputation raises when it reads one of those
same array objects, or the same place in their memory through a fresh view (``c[::-1]``
inside f), with other contents: a write that leaves the results the same but not their
derivative (a closed-over weight vector permuted under a sum) is caught that way. Not caught
there: CuPy arrays; the results' digest covers those.
"""
from __future__ import annotations

import contextlib
import functools
import weakref
from typing import Any, Callable, NamedTuple

import numpy as np

from .backend import array_module
from .core import _TRACE_STACK, Primitive, ReverseTrace, Tracer, config_for, primal
from .errors import HecateError
from .pytree import flatten, unflatten
from .residuals import operands

__all__ = ["checkpoint", "CheckpointError"]


class CheckpointError(HecateError, RuntimeError):
    """A checkpointed function did something its recomputation cannot reproduce."""


def checkpoint(f: Callable) -> Callable:
    """`f`, recomputed in the reverse pass instead of stored on the tape.

    Under reverse-mode `autodiff`, a call stores only the values `f` reads (its arguments and
    the differentiated values it closes over); the reverse pass runs `f` again and
    differentiates that. Elsewhere (no autodiff, forward mode) it is `f`. `f` may take several
    arrays and return any pytree; it must be deterministic and must not write into its inputs.
    State it updates outside what it returns (a batch norm's running statistics, a counter)
    is updated again by the recomputation: keep such updates out of the checkpointed function.

    >>> import numpy as np
    >>> from tape import autodiff, Reverse, Active
    >>> W = np.array([[0.5, -0.2], [0.1, 0.3]])
    >>> def loss(h):
    ...     layer = checkpoint(lambda h: np.tanh(W @ h))
    ...     return np.sum(layer(layer(h)))
    >>> (g,), = autodiff(Reverse, loss, Active, Active(np.array([1.0, 2.0])))
    >>> g.shape
    (2,)
    """
    if not callable(f):
        raise TypeError(f"checkpoint needs a callable, got {type(f).__name__} {f!r}")
    name = f"checkpoint({getattr(f, '__name__', type(f).__name__)})"
    prim = Primitive(name, f, reverse=_recompute_and_sweep, multiple_results=True)

    @functools.wraps(f)
    def checkpointed(*args, **kwargs):
        stack = _TRACE_STACK.get()
        trace = stack[-1] if stack else None
        # Nested in another checkpointed call's forward run, the trace records nothing anyway.
        if isinstance(trace, ReverseTrace) and not getattr(trace.process, "serving", False):
            return _record(prim, f, trace, args, kwargs)
        return f(*args, **kwargs)
    return checkpointed


# --------------------------------------------------------------------------------------------
# The record


class _Saved(NamedTuple):
    """Residuals of a checkpointed call: how to call `f` again, and the values it read.

    (A tuple, so that code walking a tape's residuals -- split mode's mutation check -- finds
    the saved arrays.)"""

    f: Callable
    name: str
    level: Any         # the trace that recorded the call
    args: tuple
    kwargs: dict
    inputs: list       # [(tracer object, value it held, slot it held)]
    treedef: Any       # structure of f's result
    positions: list    # which result leaves are record outputs
    digests: list      # `_digest` of each of those outputs, checked by the recomputation
    reads: dict        # id -> (weak reference, {`_read_digest`}) of the plain arrays f read


def _record(prim, f, trace, args, kwargs):
    seen: dict = {}
    reads: dict = {}
    with _overridden(trace, process=_transparent_process(trace, seen, prim.name, reads),
                     constant=_enclosing_constant(trace)):
        out = f(*args, **kwargs)
    leaves, treedef = flatten(out)
    for leaf in leaves:   # an input returned as it is is an input too
        if isinstance(leaf, Tracer) and leaf.level is trace:
            _note(seen, leaf)
    if not seen:
        return out        # f read nothing differentiated at this level
    values = [leaf.value if isinstance(leaf, Tracer) and leaf.level is trace else leaf
              for leaf in leaves]
    positions = [i for i, v in enumerate(values) if _is_float(v)]
    if not positions:
        return unflatten(treedef, values)
    inputs = list(seen.values())
    saved = _Saved(f, prim.name, trace, args, kwargs, inputs, treedef, positions,
                   [_digest(values[i]) for i in positions], reads)
    first = trace.n_slots
    trace.n_slots = first + len(positions)
    trace.records.append((prim, config_for((True,) * len(inputs)), saved,
                          tuple(slot for _, _, slot in inputs),
                          tuple(range(first, first + len(positions)))))
    for k, i in enumerate(positions):
        values[i] = trace.tracer_class(values[i], trace, first + k)
    return unflatten(treedef, values)


def _enclosing_constant(trace):
    """How `f`'s first run makes a buffer (np.zeros_like(x), a copy of a Const array): it
    records nothing at `trace`, but under an enclosing differentiation (hvp's forward trace)
    it must be that level's buffer, since a plain array cannot hold the enclosing level's
    values written into it. A level whose sweep is recomputing this one (a checkpoint inside
    a checkpoint) encloses nothing: it is skipped."""
    stack = _TRACE_STACK.get()
    skip = getattr(trace, "recomputing_for", None)
    for outer in reversed(stack[:stack.index(trace)] if trace in stack else ()):
        if outer is skip:
            skip = getattr(outer, "recomputing_for", None)
            continue
        return outer.constant
    return lambda value: value


def _transparent_process(trace, seen, name, reads):
    """`trace.process` while a checkpointed call runs: unwrap, note, compute, record nothing
    (but the digest of each plain array an operation reads, into `reads`)."""
    def process(prim, args, params):
        for x in _plain_reads(args, params):
            owner = _owner(x)
            entry = reads.get(id(owner))
            if entry is None or entry[0]() is not owner:   # (an id of a dead array, reused)
                reads[id(owner)] = entry = (weakref.ref(owner), set())
            entry[1].add(_read_digest(x))
        vals = list(args)
        mine = False
        for i, a in enumerate(args):
            if isinstance(a, Tracer) and a.level is trace:
                if i == 0 and prim.name == "setitem":
                    raise CheckpointError(
                        f"`{name}` writes into an array it did not create (one of its arguments "
                        "or a value it closes over); the recomputation would read the written "
                        "values. Write into a copy (x = x.copy()) instead")
                _note(seen, a)
                a.owned = False   # a later write must copy: its value is a residual now
                vals[i] = a.value
                mine = True
        out = prim(*vals, **params)
        if mine and isinstance(out, np.ndarray) and out.base is not None:
            # A NumPy view of an input (x[1:], x.T): writing into it would change the input.
            out.flags.writeable = False
        return out

    def read(tracer, dtype=None, copy=None):
        """`np.asarray(tracer)` in the first run (`plain_buffer[:] = x`): its value, noted
        as an input of the call."""
        if tracer.level is trace:
            _note(seen, tracer)
            tracer.owned = False
        return np.array(tracer.value, dtype=dtype)   # a copy: the caller may write into it

    process.serving = True
    process.read = read
    return process


def _plain_reads(args, params) -> list:
    """The plain NumPy arrays among an operation's operands and parameters (`operands`: one
    level of tuples and lists opened, an index ``x[i, j]``)."""
    return [x for x in operands(args, params)
            if isinstance(x, np.ndarray) and x.dtype.kind in "biufc" and x.size]


@functools.lru_cache(maxsize=16)
def _weights(n: int) -> np.ndarray:
    return np.cos(np.arange(n) * 0.7071)


def _owner(x: np.ndarray) -> np.ndarray:
    """The array whose memory `x` views (`x` itself when it owns its memory): reads are noted
    per owner, since f makes a fresh view (``c[::-1]``, ``c.T``) of a closed-over array at
    every run, and only the owner is the same object in the recomputation."""
    base = x.base
    while isinstance(base, np.ndarray):
        x, base = base, base.base
    return x


def _read_digest(x) -> tuple:
    """Shape, dtype, where in its owner's memory a view lies, and a weighted sum of a plain
    array's values (one pass): equal contents give equal digests (the same operations on the
    same values), and a change, a permutation too, almost surely another."""
    a = np.asarray(x)
    place = None
    if a.base is not None:
        place = (a.__array_interface__["data"][0] - _owner(a).__array_interface__["data"][0],
                 a.strides)
    flat = a.reshape(-1)
    if flat.dtype.kind == "c":
        flat = np.concatenate([flat.real, flat.imag])
    flat = flat.astype(np.float64, copy=False)
    return (a.shape, a.dtype.str, place, float(flat @ _weights(flat.size)))


def _checking_process(process, saved):
    """`process` of the recomputation's trace, refusing an operation that reads a plain array
    the first run read, now with other contents (written since: the results, or only their
    derivative, would be the new values')."""
    def checked(prim, args, params):
        for x in _plain_reads(args, params):
            owner = _owner(x)
            entry = saved.reads.get(id(owner))
            if entry is None or entry[0]() is not owner:
                continue
            digest = _read_digest(x)
            if digest not in entry[1] and digest[3] == digest[3]:   # (NaN: not comparable)
                raise CheckpointError(_CHANGED.format(name=saved.name))
        return process(prim, args, params)
    return checked


def _note(seen, tracer):
    key = id(tracer)
    if key not in seen:
        seen[key] = (tracer, tracer.value, tracer.slot)


def _is_float(x) -> bool:
    if isinstance(x, (float, complex)):
        return True
    dt = getattr(x, "dtype", None)
    return dt is not None and np.issubdtype(dt, np.inexact)


@contextlib.contextmanager
def _overridden(trace, **methods):
    """Shadow methods of one trace object by instance attributes, restoring them afterwards."""
    before = {k: vars(trace)[k] for k in methods if k in vars(trace)}
    for k, fn in methods.items():
        setattr(trace, k, fn)
    try:
        yield
    finally:
        for k in methods:
            if k in before:
                setattr(trace, k, before[k])
            else:
                delattr(trace, k)


# --------------------------------------------------------------------------------------------
# The reverse rule: recompute on a fresh tape, sweep it


_TRACER_STATE = ("owned", "view_of", "views")


def _recompute_and_sweep(cfg, saved: _Saved, g: tuple) -> tuple:
    level = saved.level
    # The recomputation is swept under the same mode modifiers as the tape it stands in for.
    with ReverseTrace(strong_zero=level.strong_zero, nan_check=level.nan_check) as inner, \
            _overridden(inner, process=_checking_process(inner.process, saved)):
        inner.recomputing_for = level
        objects = [obj for obj, _, _ in saved.inputs]
        states = [_repoint(obj, inner, value) for obj, value, _ in saved.inputs]
        leaf_slots = [obj.slot for obj in objects]
        try:
            guard = (_overridden(level, process=_unexpected_input(saved.name))
                     if level.alive else contextlib.nullcontext())
            with guard:
                out = saved.f(*saved.args, **saved.kwargs)
            seeds = _seeds(saved, out, g, inner)
        finally:
            for obj, state in zip(objects, states):
                _restore(obj, state)
        cts = inner.backward(seeds, leaf_slots) if seeds else {}
    return tuple(cts.get(s) for s in leaf_slots)


def _repoint(obj, trace, value):
    """Make the tracer object `obj` a fresh leaf of `trace` holding `value`; returns its state."""
    extra = {k: getattr(obj, k) for k in _TRACER_STATE if hasattr(obj, k)}
    for k in extra:
        delattr(obj, k)
    state = (obj.value, obj.level, obj.slot, extra)
    obj.value, obj.level, obj.slot = value, trace, trace.n_slots
    trace.n_slots += 1
    return state


def _restore(obj, state):
    obj.value, obj.level, obj.slot, extra = state
    for k in _TRACER_STATE:
        if hasattr(obj, k):
            delattr(obj, k)
    for k, v in extra.items():
        setattr(obj, k, v)


def _unexpected_input(name):
    def process(prim, args, params):
        raise CheckpointError(
            f"`{name}` read a differentiated value in its recomputation that it did not read "
            "when it first ran; a checkpointed function must compute the same thing every time "
            "it is called (no randomness or state that changes between calls)")
    return process


def _seeds(saved, out, g, inner):
    leaves, treedef = flatten(out)
    if treedef != saved.treedef:
        raise CheckpointError(
            f"`{saved.name}` returned a result of a different structure when recomputed "
            f"({treedef!r} instead of {saved.treedef!r}); a checkpointed function must be "
            "deterministic")
    for pos, digest in zip(saved.positions, saved.digests):
        if not _same_digest(digest, _digest(primal(leaves[pos]))):
            raise CheckpointError(_CHANGED.format(name=saved.name))
    seeds: dict = {}
    for pos, gi in zip(saved.positions, g):
        leaf = leaves[pos]
        if gi is None or not (isinstance(leaf, Tracer) and leaf.level is inner):
            continue
        s = leaf.slot
        seeds[s] = gi if s not in seeds else seeds[s] + gi
    return seeds


_CHANGED = ("`{name}` computed other values when recomputed for the reverse pass than when it "
            "first ran: an array it reads without differentiating it (a closure, a global, a "
            "Const argument, the xs of a scan) was written after the call, or it is not "
            "deterministic. Leave such arrays unchanged until the gradient is computed, or "
            "give the function a copy (c.copy())")


def _digest(value) -> tuple:
    """(shape, two weighted sums, sum of magnitudes, tolerance) of a float result: O(1) memory
    per output, unlike a copy. The weights tell a permutation from the original."""
    v = primal(value)
    xp = array_module(v)
    flat = xp.asarray(v).ravel()
    parts = (flat.real, flat.imag) if xp.iscomplexobj(flat) else (flat,)
    weights = _weights(flat.size) if xp is np else xp.cos(xp.arange(flat.size) * 0.7071)
    sums = tuple(float(xp.sum(p)) for p in parts) + tuple(float(p @ weights) for p in parts)
    scale = float(sum(xp.sum(xp.abs(p)) for p in parts))
    # Rules may compute the primal in another order than the plain call did: a few roundings.
    tol = 64 * float(xp.finfo(flat.dtype).eps) * scale if flat.size else 0.0
    return (tuple(v.shape) if hasattr(v, "shape") else (), sums, tol)


def _same_digest(before: tuple, after: tuple) -> bool:
    (shape, sums, tol), (shape2, sums2, _) = before, after
    if shape != shape2 or len(sums) != len(sums2):
        return False
    # NaN results are compared as NaN: a NaN in both is no change.
    return all(a == b or abs(a - b) <= tol or (a != a and b != b) for a, b in zip(sums, sums2))
