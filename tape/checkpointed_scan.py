"""`checkpointed_scan`: a loop ``carry, y = step(carry, x)`` run as checkpointed segments, so that
the tape holds every k-th carry, or with ``schedule="revolve"`` a binomial set of snapshots,
instead of every step's residuals (the design is in tape/checkpoint.py's docstring, "Scan").
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from .checkpoint import checkpoint
from .core import peek, primal
from .pytree import flatten, flatten_with_paths, format_path, key_order_hint, unflatten

__all__ = ["checkpointed_scan"]


def checkpointed_scan(step: Callable, carry: Any, xs: Any, every: int | None = None, *,
                      schedule: str = "every", snapshots: int | None = None,
                      length: int | None = None) -> tuple:
    """``for x in xs: carry, y = step(carry, x)``, storing only a few carries for the reverse pass.

    Returns ``(carry, ys)``, the ys stacked along a new leading axis (a pytree of such arrays if
    `step` returns a pytree y; None if it returns None). `carry` is a pytree of arrays whose
    structure, shapes and dtypes `step` keeps; `xs` a pytree of arrays scanned over their
    leading axis (or None with ``length=n``). `step` may close over differentiated values (an
    RNN's weights): they receive their gradients.

    With ``schedule="every"`` the loop runs as checkpointed segments of `every` steps (default
    about sqrt(n)): the tape holds n/every carries and, during the reverse pass, one segment's
    residuals; each step runs twice. ``schedule="revolve"`` with ``snapshots=s`` (default about
    sqrt(n)) follows Griewank's binomial schedule instead: at most s stored carries, each step
    recomputed at most t times for the least t with C(s+t, s) >= n.

    >>> import numpy as np
    >>> from tape import autodiff, Reverse, Active, Const
    >>> def loss(W, h0, xs):
    ...     step = lambda h, x: (np.tanh(W @ h + x), np.sum(h))
    ...     h, ys = checkpointed_scan(step, h0, xs, every=3)
    ...     return np.sum(h) + np.sum(ys)
    >>> W, h0, xs = 0.5 * np.eye(2), np.ones(2), np.zeros((10, 2))
    >>> (dW, dh0, _), = autodiff(Reverse, loss, Active, Active(W), Active(h0), Const(xs))
    >>> dW.shape, dh0.shape
    ((2, 2), (2,))
    """
    if not callable(step):
        raise TypeError(f"checkpointed_scan needs a callable step, got {type(step).__name__}")
    xs_leaves, xs_paths, xs_td = flatten_with_paths(xs)
    n = _scan_length(xs_leaves, xs_paths, length)
    loop = _Loop(step, carry, xs_td)
    if schedule == "every":
        if snapshots is not None:
            raise ValueError("snapshots= is a parameter of schedule='revolve'; "
                             "schedule='every' takes every=k")
        k = _positive_int("every", every) if every is not None else max(1, math.isqrt(n))
        segment = checkpoint(loop.run)
        parts = []
        for start in range(0, n, k):
            stop = min(start + k, n)
            carry, ys = segment(carry, [a[start:stop] for a in xs_leaves], start, stop - start)
            parts.append(ys)
    elif schedule == "revolve":
        if every is not None:
            raise ValueError("every= is a parameter of schedule='every'; schedule='revolve' "
                             "takes snapshots=s")
        s = (_positive_int("snapshots", snapshots) if snapshots is not None
             else max(1, math.isqrt(n)))
        t = _repetitions(s, n)
        if t > _MAX_NESTING:
            raise ValueError(
                f"snapshots={s} is too few for {n} steps: the binomial schedule would recompute "
                f"steps {t} times, nesting as many checkpoints (at most {_MAX_NESTING}); use "
                "more snapshots")
        carry, ys = loop.revolve(carry, xs_leaves, 0, n, s)
        parts = [ys]
    else:
        raise ValueError(f"schedule must be 'every' or 'revolve', got {schedule!r}")
    return carry, loop.join(parts)


_MAX_NESTING = 64   # Python frames per nested checkpoint level keep this well under the limit


def _positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"checkpointed_scan: {name} must be a positive int, got "
                        f"{type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"checkpointed_scan: {name} must be at least 1, got {value}")
    return int(value)


def _scan_length(leaves, paths, length):
    if not leaves:
        if length is None:
            raise ValueError("checkpointed_scan: xs holds no arrays; pass length=n to scan "
                             "n steps without inputs")
        return _positive_int("length", length)
    lengths = []
    for leaf, path in zip(leaves, paths):
        shape = getattr(leaf, "shape", ())
        if len(shape) == 0:
            raise ValueError(f"checkpointed_scan: {format_path(path, 'xs')} is a scalar; every "
                             "array of xs needs a leading axis to scan over")
        lengths.append(shape[0])
    if len(set(lengths)) > 1:
        described = ", ".join(f"{format_path(p, 'xs')}: {m}" for p, m in zip(paths, lengths))
        raise ValueError(f"checkpointed_scan: the arrays of xs have different leading lengths "
                         f"({described}); they are scanned together, step by step")
    if length is not None and length != lengths[0]:
        raise ValueError(f"checkpointed_scan: length={length} but xs has leading length "
                         f"{lengths[0]}")
    if lengths[0] == 0:
        raise ValueError("checkpointed_scan: xs has leading length 0; there is no step to run")
    return lengths[0]


def _repetitions(s, n):
    """The least t with C(s + t, s) >= n: how often revolve recomputes a step at most."""
    t = 0
    while math.comb(s + t, s) < n:
        t += 1
    return t


class _Loop:
    """The step loop of one scan, with the checks that keep every step's carry congruent."""

    def __init__(self, step, carry, xs_td):
        self.step = step
        self.xs_td = xs_td
        leaves, paths, self.carry_td = flatten_with_paths(carry)
        # A Python number (traced or not) has no dtype to keep: NumPy promotes it weakly.
        self.carry_spec = [(format_path(p, "carry"), _shape(x),
                            None if type(peek(x)) in (bool, int, float, complex)
                            else getattr(x, "dtype", None))
                           for x, p in zip(leaves, paths)]
        self.y_td = self.y_spec = None

    def run(self, carry, xs_leaves, start, n):
        """Steps start .. start+n-1 as a plain loop; returns (carry, stacked y leaves)."""
        ys = []
        for i in range(n):
            x = unflatten(self.xs_td, [a[i] for a in xs_leaves])
            carry, y_leaves = self._checked(self.step(carry, x), start + i)
            ys.append(y_leaves)
        return carry, [np.stack(column) for column in zip(*ys)] if ys and ys[0] else []

    def revolve(self, carry, xs_leaves, start, n, s):
        """Steps start .. start+n-1 on Griewank's binomial schedule with s snapshots.

        With t the least repetition count with C(s+t, s) >= n, the first C(s+t-1, s) steps
        are one checkpointed segment (reversed later with all s snapshots and t-1
        repetitions), and the rest continue at this level with one snapshot fewer. The last
        step is taped directly."""
        nested = checkpoint(self.revolve)
        parts = []
        while n > 1:
            m = math.comb(s + _repetitions(s, n) - 1, s)
            carry, ys = nested(carry, [a[:m] for a in xs_leaves], start, m, s)
            parts.append(ys)
            xs_leaves = [a[m:] for a in xs_leaves]
            start, n, s = start + m, n - m, s - 1
        carry, ys = self.run(carry, xs_leaves, start, n)
        parts.append(ys)
        return carry, [np.concatenate(c) if len(c) > 1 else c[0] for c in zip(*parts)]

    def join(self, parts):
        if self.y_td is None:
            return None
        columns = [np.concatenate(c) if len(c) > 1 else c[0] for c in zip(*parts)]
        return unflatten(self.y_td, columns)

    def _checked(self, out, i):
        if not (isinstance(out, tuple) and len(out) == 2):
            got = (f"a tuple of length {len(out)}" if isinstance(out, tuple)
                   else type(out).__name__)
            raise TypeError(f"checkpointed_scan: step must return a pair (carry, y); at step {i} "
                            f"it returned {got}")
        carry, y = out
        leaves, td = flatten(carry)
        if td is not self.carry_td and td != self.carry_td:   # speed-up: `is` for leaves
            raise TypeError(f"checkpointed_scan: step changed the structure of the carry at step "
                            f"{i}: the initial carry is {self.carry_td!r}, step returned {td!r}"
                            f"{key_order_hint(self.carry_td, td)}")
        for x, (where, shape, dtype) in zip(leaves, self.carry_spec):
            x = primal(x)   # speed-up: shape and dtype of a tracer go through properties
            if _shape(x) != shape:
                raise TypeError(f"checkpointed_scan: step changed the shape of {where} at step "
                                f"{i} from {shape} to {_shape(x)}; the carry must keep its shape")
            got = getattr(x, "dtype", None)
            if dtype is not None and got is not None and got != dtype:
                raise TypeError(f"checkpointed_scan: step changed the dtype of {where} at step "
                                f"{i} from {dtype} to {got}; cast it back (astype) in step")
        y_leaves, y_td = flatten(y)
        y_spec = [_shape(primal(v)) for v in y_leaves]
        if self.y_td is None:
            self.y_td, self.y_spec = y_td, y_spec
        elif (y_td is not self.y_td and y_td != self.y_td) or y_spec != self.y_spec:
            raise TypeError(f"checkpointed_scan: step returned a y of structure {y_td!r} with "
                            f"shapes {y_spec} at step {i}, but {self.y_td!r} with shapes "
                            f"{self.y_spec} before; the ys are stacked, so they must agree")
        return carry, y_leaves


def _shape(x) -> tuple:
    return tuple(getattr(x, "shape", ()))
