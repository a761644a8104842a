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
differentiated values; draws from np.random's global generator are replayed, a Generator's are
not), and must not write into arrays it did not create (its arguments and
closures are snapshots). The plain arrays it reads (a closure's workspace, a Const argument, the
scanned xs) are not copied: the record keeps a digest of `f`'s results, and a recomputation
whose results differ (such an array was written before the reverse pass) raises instead of
returning the derivative at the new values. The plain NumPy arrays that operations on
differentiated values read in the first run are digested too (O(1) memory each, and a weak
reference: no temporary is kept alive), and the recomputation raises when it reads one of those
same array objects, or the same place in their memory through a fresh view (``c[::-1]``
inside f), with other contents: a write that leaves the results the same but not their
derivative (a closed-over weight vector permuted under a sum) is caught that way. The
temporaries among them (``c * 1.0`` of a closed-over ``c``) are new objects in the
recomputation; their digests are kept by shape, dtype and place (up to 16 of a kind), and a
temporary that an operation on the inputs reads must be one of them. The Python parameters of
every operation on the inputs (an index ``b[i]``: a lambda made in a loop reads ``i`` late)
are kept too, and an operation with others raises. Not caught there: CuPy arrays; the
results' digest covers those (its finite values apart from where infinities and NaNs are).

The recomputation must also make every operation on the inputs that the first run made (a
flag such as ``model.training`` switched after the call takes another branch, whose results
can agree while their derivative does not), and no value it computes may stay alive other than
through its results (``aux.append(loss_term)``, ``self.last = a``): in the first run that value
was a plain array without derivative where the caller used it. Both raise `CheckpointError`.
Python floats an operation on the inputs takes (``h * layer.scale``) are part of its key.

A result that is an input returned as it is stays that input's tracer; one that is a view of an
input (``u[1:]``) becomes a new value, so a later write into either is refused (NumPy would
show it through both). The arguments are kept as their leaves and structure: a list the caller
appends to after the call (``features.append(layer(features))``) is rebuilt as it was.
"""
from __future__ import annotations

import contextlib
import functools
import weakref
from typing import Any, Callable, NamedTuple

import numpy as np

from .checkpoint_checks import (CHANGED, CheckpointError, check_recomputation,
                                checking_process, replayed_random_state, same_random_state)
from .checkpoint_digests import (operation_key, owner_of, plain_reads, read_digest, result_digest,
                                 retire, same_digest)
from .core import _TRACE_STACK, Primitive, ReverseTrace, Tracer, config_for, primal
from .pytree import flatten, unflatten
from .rule_calls import AliasedWrite

__all__ = ["checkpoint", "CheckpointError"]


def checkpoint(f: Callable) -> Callable:
    """`f`, recomputed in the reverse pass instead of stored on the tape.

    Under reverse-mode `autodiff`, a call stores only the values `f` reads (its arguments and
    the differentiated values it closes over); the reverse pass runs `f` again and
    differentiates that. Elsewhere (no autodiff, forward mode) it is `f`. `f` may take several
    arrays and return any pytree; it must be deterministic, must not write into its inputs,
    and must hand out what it computes through its results only (a value it appends to a
    list or stores in an attribute has no derivative through a checkpoint: refused).
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
        if trace is not None and trace.records_inactive:
            # A compiling trace cannot replay a recomputation (its results would be slots no
            # step computes): it stops here and the call runs eagerly.
            trace.nested_opened()
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
    arguments: tuple   # (leaves, structure) of (args, kwargs): the caller may change a list
    inputs: list       # [(tracer object, value it held, slot it held)]
    treedef: Any       # structure of f's result
    positions: list    # which result leaves are record outputs
    digests: list      # `result_digest` of each of those outputs, checked by the recomputation
    reads: dict        # id -> (weak reference, {`read_digest`}) of the plain arrays f read
    temporaries: dict  # (shape, dtype, place) -> {weighted sums} of those that died (`retire`)
    operations: set    # `operation_key` of each operation on the noted inputs
    random_state: Any = None   # np.random's global state before the call, if `f` drew from it


def _record(prim, f, trace, args, kwargs):
    seen: dict = {}
    reads: dict = {}
    operations: set = set()
    # The arguments' leaves, kept now: a list argument the caller appends to after the call
    # (features.append(layer(features))) is rebuilt as it was for the recomputation.
    arguments = (flatten((args, kwargs)) if any(_mutable(a) for a in (*args, *kwargs.values()))
                 else ((args, kwargs), None))
    temporaries: dict = {}
    random_state = np.random.get_state(legacy=False)
    with _overridden(trace, process=_transparent_process(trace, seen, prim.name, reads,
                                                         operations, temporaries),
                     constant=_enclosing_constant(trace)):
        out = f(*args, **kwargs)
    if same_random_state(random_state, np.random.get_state(legacy=False)):
        random_state = None   # f drew nothing from np.random's global generator
    for key, entry in list(reads.items()):
        if entry[0]() is None:
            retire(temporaries, entry)
            del reads[key]
    leaves, treedef = flatten(out)
    if not seen:
        return out        # f read nothing differentiated at this level
    # A traced value returned as it is (an input passed through) stays that very tracer, as
    # without the checkpoint: a later write into it is seen by both names. The other float
    # leaves (plain in this run) are the record's outputs.
    positions = [i for i, leaf in enumerate(leaves) if _is_float(leaf)
                 and not (isinstance(leaf, Tracer) and leaf.level is trace)]
    values = list(leaves)
    if not positions:
        return unflatten(treedef, values)
    inputs = list(seen.values())
    saved = _Saved(f, prim.name, trace, arguments, inputs, treedef, positions,
                   [result_digest(values[i]) for i in positions], reads, temporaries, operations,
                   random_state)
    first = trace.n_slots
    trace.n_slots = first + len(positions)
    trace.records.append((prim, config_for((True,) * len(inputs)), saved,
                          tuple(slot for _, _, slot in inputs),
                          tuple(range(first, first + len(positions)))))
    for k, i in enumerate(positions):
        values[i] = trace.tracer_class(values[i], trace, first + k)
        _guard_shared_memory(values[i], inputs, prim.name)
    return unflatten(treedef, values)


def _guard_shared_memory(result, inputs, name):
    """A result that is a view of an input's value (``u[1:]``, ``u.reshape(...)``) is a new
    value on the tape, not a view of the input: a later write into either would show through
    the other in NumPy but not in its derivative. Such writes are refused, naming the fix."""
    value = result.value
    if not isinstance(value, np.ndarray):
        return
    for obj, held, _ in inputs:
        if not (isinstance(held, np.ndarray) and np.may_share_memory(value, held)):
            continue
        message = (f"a result of `{name}` is a view of one of its inputs (it returns u[1:], "
                   "u.T, u.reshape(...) of an argument or closure), and the function writes "
                   "into {written} afterwards; through a checkpoint the two are separate "
                   "values, so the write would not show through the other as it does in "
                   "NumPy. Return a copy from the checkpointed function (u[1:].copy())")
        result.write_guard = AliasedWrite(message.format(written="that result"),
                                           error=CheckpointError)
        obj.write_guard = AliasedWrite(message.format(written="that input"),
                                        weakref.ref(result), getattr(obj, "write_guard", None),
                                        error=CheckpointError)
        return


def _mutable(x) -> bool:
    """Whether an argument holds a container its caller may change after the call (a list, a
    dict, a set, a user's pytree node), below one level of tuples."""
    if type(x) is tuple:
        return any(_mutable(v) for v in x)
    return not (isinstance(x, (np.ndarray, Tracer, int, float, complex, str, bytes, np.generic))
                or x is None)


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


def _transparent_process(trace, seen, name, reads, operations, temporaries):
    """`trace.process` while a checkpointed call runs: unwrap, note, compute, record nothing
    (but the digest of each plain array an operation reads, into `reads`, and the operation's
    `operation_key`, into `operations`)."""
    def process(prim, args, params):
        operations.add(operation_key(prim, args, params))
        for x in plain_reads(args, params):
            owner = owner_of(x)
            entry = reads.get(id(owner))
            if entry is None or entry[0]() is not owner:   # (an id of a dead array, reused)
                if entry is not None:
                    retire(temporaries, entry)
                reads[id(owner)] = entry = (weakref.ref(owner), set())
            entry[1].add(read_digest(x))
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
            _overridden(inner, process=checking_process(inner.process, saved)):
        inner.recomputing_for = level
        objects = [obj for obj, _, _ in saved.inputs]
        states = [_repoint(obj, inner, value) for obj, value, _ in saved.inputs]
        leaf_slots = [obj.slot for obj in objects]
        try:
            guard = (_overridden(level, process=_unexpected_input(saved.name))
                     if level.alive else contextlib.nullcontext())
            with guard, replayed_random_state(saved.random_state):
                leaves, structure = saved.arguments
                args, kwargs = leaves if structure is None else unflatten(structure, leaves)
                out = saved.f(*args, **kwargs)
            seeds = _seeds(saved, out, g, inner)
            check_recomputation(saved, inner, out,
                                [rec[2] for rec in inner.records if type(rec[2]) is _Saved])
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
        if not same_digest(digest, result_digest(primal(leaves[pos]))):
            raise CheckpointError(CHANGED.format(name=saved.name))
    seeds: dict = {}
    for pos, gi in zip(saved.positions, g):
        leaf = leaves[pos]
        if gi is None or not (isinstance(leaf, Tracer) and leaf.level is inner):
            continue
        s = leaf.slot
        seeds[s] = gi if s not in seeds else seeds[s] + gi
    return seeds
