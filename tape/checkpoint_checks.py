"""What `tape.checkpoint`'s recomputation checks against the first run (tape/checkpoint.py):
the plain arrays and operations it reads (`checking_process`, with the digests of
tape/checkpoint_digests.py), the operations it must make again and the values that must not
leave it other than through its results (`check_recomputation`), and np.random's global
generator, which it replays (`replayed_random_state`)."""
from __future__ import annotations

import contextlib
import gc
import weakref

import numpy as np

from .checkpoint_digests import (Temporaries, near_key, operation_key, owner_of, plain_reads,
                                 read_digest)
from .core import Tracer
from .errors import HecateError
from .pytree import flatten


class CheckpointError(HecateError, RuntimeError):
    """A checkpointed function did something its recomputation cannot reproduce."""


def checking_process(process, saved):
    """`process` of the recomputation's trace, refusing an operation that reads a plain array
    the first run read, now with other contents (written since: the results, or only their
    derivative, would be the new values'), and an operation on the inputs that the first run
    did not make (`operation_key`: another index; `Temporaries`: a temporary made from a
    closure with other values). An operation whose kind the first run never made on the
    inputs is not refused: the first run computes on plain values, so some of the
    recomputation's traced operations have no counterpart there (``z[:] = x`` into a buffer
    ``np.zeros_like(x)``, plain in the first run, is a conversion there)."""
    inputs = {id(obj) for obj, _, _ in saved.inputs}
    names = {key[0] for key in saved.operations}
    temporaries = Temporaries(saved)
    made, keys = [], set()

    def checked(prim, args, params):
        on_inputs = any(id(a) in inputs for a in args)
        if on_inputs:
            key = operation_key(prim, args, params)
            keys.add(key)
            if prim.name in names and not near_key(key, saved.operations):
                raise CheckpointError(CHANGED.format(name=saved.name))
        for x in plain_reads(args, params):
            owner = owner_of(x)
            entry = saved.reads.get(id(owner))
            if entry is not None and entry[0]() is owner:
                digest = read_digest(x)
                # The first run noted the reads of operations on the inputs only: a read by
                # another operation is compared where it reads a view the first run noted
                # (the next step's xs[1] of a scan is no change of xs[0]).
                if (digest not in entry[1] and digest[3] == digest[3]   # (NaN: not comparable)
                        and (on_inputs or digest[:3] in {d[:3] for d in entry[1]})):
                    raise CheckpointError(CHANGED.format(name=saved.name))
            elif on_inputs:
                digest = read_digest(x)
                if digest[3] == digest[3] and not temporaries.known(x, digest):
                    raise CheckpointError(CHANGED.format(name=saved.name))
        out = process(prim, args, params)
        for t in out if type(out) is tuple else (out,):
            if isinstance(t, Tracer):
                made.append(weakref.ref(t))
        return out
    checked.made, checked.keys = made, keys   # (read by `check_recomputation`)
    return checked


def check_recomputation(saved, inner, out, nested) -> None:
    """After the recomputation: refuse one that skipped operations the first run made on the
    inputs (a flag read by `f` switched after the call: another branch, whose results can
    agree while their derivative does not), and one whose values left `f` other than through
    its results (the first run's were plain arrays, without derivative, where the caller
    used them). `nested`: the records of checkpoints nested in the recomputation."""
    checked = inner.process
    # (A checkpoint nested in the recomputation runs its own operations unchecked.)
    if not nested and not all(near_key(key, checked.keys) for key in saved.operations):
        raise CheckpointError(SKIPPED.format(name=saved.name))
    kept = {id(obj) for obj, _, _ in saved.inputs}
    stack = [x for x in flatten(out)[0] if isinstance(x, Tracer)]
    for held in nested:   # what a nested checkpoint's record holds
        stack += [obj for obj, _, _ in held.inputs]
        leaves, structure = held.arguments
        stack += [x for x in (flatten(leaves)[0] if structure is None else leaves)
                  if isinstance(x, Tracer)]
    while stack:   # those, and the values they are views of
        t = stack.pop()
        if id(t) not in kept:
            kept.add(id(t))
            view_of = getattr(t, "view_of", None)   # (base, index, to_base, from_base)
            if view_of is not None:
                stack.append(view_of[0])

    def escaped():
        return [t for t in (ref() for ref in checked.made)
                if t is not None and t.level is inner and id(t) not in kept]
    if escaped():
        gc.collect()   # (a cycle that holds a temporary is no escape)
        if escaped():
            raise CheckpointError(ESCAPED.format(name=saved.name))


def same_random_state(a, b) -> bool:
    return (a["bit_generator"] == b["bit_generator"] and a["state"]["pos"] == b["state"]["pos"]
            and a.get("has_gauss") == b.get("has_gauss") and a.get("gauss") == b.get("gauss")
            and np.array_equal(a["state"]["key"], b["state"]["key"]))


@contextlib.contextmanager
def replayed_random_state(state):
    """The recomputation draws what the first run drew from np.random's global generator (a
    dropout mask: the gradient is the one of the mask the results used), and leaves the
    generator where the caller's code has it since."""
    if state is None:
        yield
        return
    now = np.random.get_state(legacy=False)
    np.random.set_state(state)
    try:
        yield
    finally:
        np.random.set_state(now)


SKIPPED = ("`{name}` skipped operations in its recomputation for the reverse pass that it made "
            "when it first ran: a flag or attribute it reads was changed after the call "
            "(model.training = False), or it is not deterministic. The derivative would be "
            "that of the other branch; leave such state unchanged until the gradient is "
            "computed")
ESCAPED = ("a value `{name}` computed left it other than through its results (appended to a "
            "list, stored in an attribute or a global): through a checkpoint that value was a "
            "plain array without derivative when the caller used it, and its part of the "
            "gradient would be lost. Return it from the checkpointed function (return y, aux), "
            "or store tape.primal(value) if it needs no derivative")
CHANGED = ("`{name}` computed other values when recomputed for the reverse pass than when it "
            "first ran: an array it reads without differentiating it (a closure, a global, a "
            "Const argument, the xs of a scan) was written after the call, or it is not "
            "deterministic. Leave such arrays unchanged until the gradient is computed, or "
            "give the function a copy (c.copy())")
