"""Split reverse mode: run the forward pass now, the reverse pass later (Enzyme.jl's
`autodiff_thunk`).

`autodiff_thunk(ReverseSplitWithPrimal, f, ReturnActivity, *ArgActivityTypes)` returns two
functions. `forward(*args)` runs `f`, records the tape and returns ``(tape, primal, shadow)``;
`reverse(*args, dret, tape)` sweeps the tape backwards from the seed `dret` (or from the
shadow returned by `forward`, for a Duplicated return) and returns ``(derivs,)`` as `autodiff`
does, adding into Duplicated shadows.

The tape is a plain value: it can be kept, printed (`repr` lists its records) and reversed
any number of times with different seeds. Its saved arrays are fingerprinted when `forward`
returns; reversing it after any of them changed raises `TapeMutatedError`.

>>> import numpy as np
>>> fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, lambda x: np.sin(x) * 2, Active, Active)
>>> tape, y, _ = fwd(Active(0.0))
>>> rev(Active(0.0), 1.0, tape)
((2.0,),)
>>> rev(Active(0.0), 3.0, tape)        # the same tape, another seed
((6.0,),)
"""
from __future__ import annotations

import threading
import zlib
from typing import Callable

import numpy as np

from .activities import (ACTIVITY_TYPES, Active, Annotation, Const,
                         Duplicated, MixedDuplicated, Mode, unannotated)
from .api import (autodiff, _argument_names, _check_shadow, _is_float, _strip,
                  _write_primals, batch_width, derivatives, guess_return, make_zero,
                  record_reverse, sweep)
from .arguments import (_check_shadow_not_read_only, _check_shadow_writable,
                        _is_mutable_leaf)
from .backend import array_module
from .batching import stack_directions
from .core import ReverseTrace, Tracer, primal
from .errors import ActivityError, HecateError
from .pytree import (fixed_place, flatten, flatten_with_paths, format_path, is_inactive,
                     key_order_hint)
from .residuals import protect
from .modifiers import runtime_inactive, strong_zero_scope, to_user


class TapeMutatedError(HecateError, RuntimeError):
    """A split-mode tape was reversed after an array it saved was modified."""


class SplitTape:
    """The records of one forward pass, kept for one or more reverse passes."""

    def __init__(self, thunk, trace, groups, out, ret_activity, width, annotated):
        self._thunk = thunk
        self._trace = trace
        self._groups = groups
        self._out = out
        self.ret_activity = ret_activity
        self.width = width
        self._primals = [a.val for a in annotated]
        self._const = [type(a) is Const for a in annotated]   # (runtime activity decides it)
        self._arguments = [a.val for a in annotated]
        self._fingerprints = self._fingerprint_all()
        self._structures = [_structure(v) for v in self._arguments]
        self._reversing = threading.RLock()

    def _fingerprint_all(self) -> list:
        # The arguments too: a tape reversed after its inputs changed would return the
        # derivative at the old point, which the caller would take for the new one.
        arrays: dict = {}
        _saved_arrays(self._arguments, arrays)
        return _fingerprints(self._trace.records) + [
            ("argument", None, _fingerprint(a)) for a in arrays.values()]

    @property
    def records(self) -> list:
        return self._trace.records

    def __len__(self) -> int:
        return len(self._trace.records)

    def __repr__(self) -> str:
        lines = [f"SplitTape of `{self._thunk.name}`: {len(self)} records, "
                 f"{self._trace.n_slots} slots"]
        lines += ["  " + describe_record(i, r) for i, r in enumerate(self._trace.records)]
        if self._out is not None:
            lines.append(f"  return {_slot_names(self._out, self._trace)}")
        return "\n".join(lines)

    # `show()` and `to_dot(path=None)` are installed by tape.visualize, which sits above.

    def check_unchanged(self) -> None:
        """Raise `TapeMutatedError` if an array the tape saved was modified since `forward`."""
        if [_structure(v) for v in self._arguments] != self._structures:
            raise TapeMutatedError(
                "an argument of this tape changed after the forward pass (a number in a dict, "
                "list or dataclass, or an array replaced); the tape holds the derivative at the "
                "old values. Run forward again")
        now = self._fingerprint_all()
        for (i, name, before), (_, _, after) in zip(self._fingerprints, now):
            if _same(before, after):
                continue
            if i == "argument":
                raise TapeMutatedError(
                    "an argument array of this tape was modified after the forward pass; the "
                    "tape holds the derivative at the old values. Run forward again")
            raise TapeMutatedError(
                    f"record #{i} (`{name}`) of this tape saved an array that was modified after "
                    "the forward pass; its gradient would be wrong. Run forward again after "
                    "changing the inputs, or copy them before mutating")


def describe_record(i: int, record: tuple) -> str:
    """One record as a line: ``#3  %5 = sin(%2)`` (`const` for an inactive argument)."""
    prim, cfg, saved, in_slots, out_slot = record
    outs = (f"%{out_slot}" if type(out_slot) is int
            else ", ".join(f"%{s}" for s in out_slot))
    args = ", ".join("const" if s is None else f"%{s}" for s in in_slots)
    return f"#{i:<3d} {outs} = {prim.name}({args})"


def _slot_names(out, trace) -> str:
    leaves, _ = flatten(out)
    return ", ".join(f"%{x.slot}" if isinstance(x, Tracer) and x.level is trace else "const"
                     for x in leaves)


# --------------------------------------------------------------------------------------------
# Fingerprints: a tape must not be reversed after an array it saved was changed.


def _saved_arrays(saved, found: dict):
    if isinstance(saved, (tuple, list)):
        for v in saved:
            _saved_arrays(v, found)
    elif isinstance(saved, dict):
        for v in saved.values():
            _saved_arrays(v, found)
    elif isinstance(saved, Annotation) or hasattr(saved, "__dataclass_fields__"):
        _saved_arrays(flatten(saved.val if isinstance(saved, Annotation) else saved)[0], found)
    elif isinstance(saved, np.ndarray) or hasattr(saved, "__cuda_array_interface__"):
        found.setdefault(id(saved), saved)


def _structure(value) -> tuple:
    """An argument's pytree structure and its number leaves (arrays by identity only: their
    contents are fingerprinted), for `check_unchanged`: a number changed in place in a dict or
    a dataclass, or an array replaced by a number, changes it."""
    leaves, treedef = flatten(value)
    return treedef, tuple(
        ("array", id(x)) if isinstance(x, np.ndarray) or hasattr(x, "__cuda_array_interface__")
        else ("nan",) if isinstance(x, (float, complex, np.inexact)) and x != x
        else (type(x).__name__, x) if isinstance(x, (int, float, complex, np.generic)) else
        ("other", id(x)) for x in leaves)


def _fingerprint(a):
    if isinstance(a, np.ndarray) and a.dtype.hasobject:   # the objects it holds, by identity
        return zlib.crc32(np.array([id(o) for o in a.flat], dtype=np.int64).view(np.uint8))
    if isinstance(a, np.ndarray):
        return zlib.crc32(np.ascontiguousarray(a).view(np.uint8).reshape(-1))
    return a.copy()     # a device array: compare on the device later


def _same(before, after) -> bool:
    if isinstance(before, int):
        return before == after
    return bool(array_module(before).array_equal(before, after))


def _fingerprints(records) -> list:
    out = []
    for i, (prim, _, saved, _, _) in enumerate(records):
        arrays: dict = {}
        _saved_arrays(saved, arrays)
        for a in arrays.values():
            out.append((i, prim.name, _fingerprint(a)))
    return out


# --------------------------------------------------------------------------------------------
# The thunk


class _Thunk:
    def __init__(self, mode: Mode, f: Callable, ret_activity, arg_types: tuple):
        self.mode, self.f, self.ret_activity, self.arg_types = mode, f, ret_activity, arg_types
        self.name = getattr(f, "__name__", type(f).__name__)

    def check_args(self, args, where: str):
        if len(args) != len(self.arg_types):
            raise ActivityError(f"{where} of `{self.name}` takes {len(self.arg_types)} annotated "
                                f"arguments (as given to autodiff_thunk), got {len(args)}")
        annotated = [a if isinstance(a, Annotation) else Const(a) for a in args]
        for i, (a, kind) in enumerate(zip(annotated, self.arg_types)):
            if is_inactive(a.val):      # an inactive_type is constant whatever its annotation
                annotated[i] = Const(a.val)
                continue
            if type(a) is not kind:
                raise ActivityError(f"{where}: argument {i} is {type(a).__name__} but "
                                    f"autodiff_thunk was told {kind.__name__}")
        return runtime_inactive(annotated) if self.mode.runtime_activity else annotated

    def forward(self, *args):
        annotated = self.check_args(args, "forward")
        names = _argument_names(self.f, len(annotated))
        width = batch_width(annotated, names)
        with ReverseTrace(strong_zero=self.mode.strong_zero,
                          nan_check=self.mode.nan_check) as trace:
            out, groups = record_reverse(trace, self.f, annotated, names)
        ret = guess_return(self.ret_activity, out)
        _protect_and_write_primals(trace, groups)
        tape = SplitTape(self, trace, groups, out, ret, width, annotated)
        primal = _strip(out, trace) if self.mode.with_primal else None
        shadow = None
        if _is_duplicated_kind(ret):
            value = _strip(out, trace)
            shadow = (make_zero(value) if width is None
                      else tuple(make_zero(value) for _ in range(width)))
            tape.return_shadow = shadow
        return tape, primal, shadow

    def reverse(self, *args):
        if len(args) < 1 or not isinstance(args[-1], SplitTape):
            raise ActivityError(f"reverse of `{self.name}` is called as reverse(*args, dret, "
                                "tape) with the tape that forward returned")
        tape = args[-1]
        args = args[:-1]
        dret = None
        if len(args) == len(self.arg_types) + 1:
            dret, args = args[-1], args[:-1]
        annotated = self.check_args(args, "reverse")
        if tape._thunk is not self:
            raise ActivityError(f"this tape was recorded by another autodiff_thunk, not by the "
                                f"one of `{self.name}`")
        for i, (a, was_const) in enumerate(zip(annotated, tape._const)):
            if (type(a) is Const) != was_const:   # (types match: runtime activity decided)
                now, then = ("active", "inactive") if was_const else ("inactive", "active")
                raise ActivityError(
                    f"reverse: argument {i} is {now} but was {then} in forward: under "
                    "set_runtime_activity a shadow that is its primal makes a value inactive. "
                    "Pass the same kind of shadow to forward and reverse")
        for i, (a, recorded) in enumerate(zip(annotated, tape._primals)):
            if type(a) is not Const and not _same_argument(a.val, recorded):
                raise ActivityError(f"reverse: argument {i} is not the value forward recorded; "
                                    "pass the same arrays to forward and reverse")
            if type(a) is Const and not _same_const(a.val, recorded):
                raise ActivityError(
                    f"reverse: the Const argument {i} holds other values than forward "
                    "recorded; the tape holds the derivative at forward's values. Run "
                    "forward again with the new values")
        width = batch_width(annotated, _argument_names(self.f, len(annotated)))
        if width != tape.width:
            raise ActivityError(
                f"reverse: the arguments carry {width or 1} shadows each but forward recorded "
                f"{tape.width or 1}; pass as many shadows as forward had")
        with tape._reversing:   # the groups take this call's shadows: one reversal at a time
            tape.check_unchanged()
            for arg, ann in zip(tape._groups, [a for a in annotated if type(a) is not Const]):
                arg.annotation = ann
                if isinstance(ann, Duplicated):
                    # The shadows to add into are the ones given now: each is checked as
                    # forward checks them, before any is written.
                    _check_shadow(arg)
                    _check_shadow_not_read_only(arg)
                    if not isinstance(ann, MixedDuplicated):
                        _check_shadow_writable(arg)
            seeds = {}
            _seed(tape, dret, seeds)
            with strong_zero_scope(self.mode.strong_zero):
                cts = sweep(tape._trace, tape._groups, seeds, tape.width, consume=False)
            return (derivatives(annotated, tape._groups, cts, tape.width),)


def _same_argument(value, recorded) -> bool:
    """Arrays and containers must be the very objects forward saw; numbers equal ones."""
    if isinstance(value, (int, float, complex, np.generic)):
        return isinstance(recorded, (int, float, complex, np.generic)) and value == recorded
    return value is recorded


def _same_const(value, recorded) -> bool:
    """Whether a Const argument given to reverse is what forward saw: the same object, or
    the same structure with equal numbers and arrays (other leaves are not compared)."""
    if value is recorded:
        return True
    leaves, td = flatten(value)
    before, td_before = flatten(recorded)
    if td != td_before:
        return False
    for a, b in zip(leaves, before):
        if a is b:
            continue
        # An enclosing differentiation's traced value is compared by its value, as a plain
        # one is (left uncompared, another value slipped through as the same).
        a, b = primal(a), primal(b)
        if isinstance(a, (int, float, complex, np.generic)):
            if (not isinstance(b, (int, float, complex, np.generic))
                    or not (a == b or a != a and b != b)):   # (a NaN equals only a NaN)
                return False
        elif isinstance(a, np.ndarray) or hasattr(a, "__cuda_array_interface__"):
            if not (hasattr(b, "shape") and a.shape == b.shape
                    and bool(array_module(a).array_equal(a, b, equal_nan=a.dtype.kind in "fc"))):
                return False
    return True


def _protect_and_write_primals(trace, groups):
    """Write the final values of overwritten arguments into the caller's arrays, first
    giving the records that saved those arrays a copy of the values they saw."""
    written = [arg.leaves[i] for arg in groups for i, t in enumerate(arg.tracers)
               if arg.first_slots[i] is not None and t.slot != arg.first_slots[i]]
    if written:
        # the written arrays themselves, and any view of them a record saved (x[1:], x.T)
        copies = {}
        trace.records = [(p, c, protect(s, written, copies), i, o)
                         for p, c, s, i, o in trace.records]
    for arg in groups:
        _write_primals(arg)


def _is_duplicated_kind(ret) -> bool:
    """Duplicated and its kinds (NoNeed, Batch, Mixed): a return whose shadow is the seed."""
    return isinstance(ret, type) and issubclass(ret, Duplicated)


def _check_seedable(shadow, width) -> None:
    """A Duplicated return's shadow is the seed, set by the caller in place: a number at the
    top or inside a tuple cannot be, and would seed zero (Enzyme refuses such returns too)."""
    for one in (shadow,) if width is None else shadow:
        leaves, paths, _ = flatten_with_paths(one)
        for leaf, path in zip(leaves, paths):
            if not _is_mutable_leaf(leaf) and (not path or fixed_place(one, path)):
                where = format_path(path, "the result") if path else "the result"
                raise ActivityError(
                    f"{where} is a number: the shadow of a Duplicated return is the seed, "
                    "written in place, and a number there cannot be written. Use an Active "
                    "return and pass the seed to reverse(*args, dret, tape), pass dret "
                    "explicitly, or return an array (np.asarray)")


def _seed(tape: SplitTape, dret, seeds: dict):
    out, trace, ret, width = tape._out, tape._trace, tape.ret_activity, tape.width
    if ret is Const:
        if dret is not None:
            raise ActivityError("the return is Const: reverse takes no seed")
        return
    if _is_duplicated_kind(ret) and dret is None:
        _check_seedable(tape.return_shadow, width)
        dret = tape.return_shadow
    if dret is None:
        raise ActivityError(f"reverse needs a seed for the {ret.__name__} return: "
                            "reverse(*args, dret, tape)")
    leaves, td = flatten(out)
    if width is None:
        per_leaf = _seed_leaves(dret, td, leaves, trace)
    else:
        if not isinstance(dret, (tuple, list)) or len(dret) != width:
            raise ActivityError(f"a batch reverse of width {width} needs a tuple of {width} "
                                "seeds")
        directions = [_seed_leaves(d, td, leaves, trace) for d in dret]
        per_leaf = [None if d[0] is None else stack_directions(d) for d in zip(*directions)]
    for x, g in zip(leaves, per_leaf):
        if g is not None and isinstance(x, Tracer) and x.level is trace:
            seeds[x.slot] = g if x.slot not in seeds else seeds[x.slot] + g


def _seed_leaves(dret, td, leaves, trace) -> list:
    seed_leaves, seed_td = flatten(dret)
    if seed_td != td:
        hint = (" (a None in the seed is no leaf: seed a result you do not differentiate "
                "with 0.0 or zeros of its shape)" if _holds_none(dret) else "")
        if isinstance(dret, (str, bytes)):
            raise ActivityError(f"the seed is a {type(dret).__name__}, {dret!r}: a seed is a "
                                "number or a float array per result leaf (a float(...) of it)")
        raise ActivityError(f"the seed's structure ({seed_td!r}) is not the function "
                            f"result's ({td!r}): give one seed per result leaf{hint}"
                            f"{key_order_hint(seed_td, td)}")
    out = []
    for k, (x, d) in enumerate(zip(leaves, seed_leaves)):
        value = x.value if isinstance(x, Tracer) and x.level is trace else x
        if np.shape(d) != np.shape(value):
            where = f" (result leaf {k})" if len(leaves) > 1 else ""
            raise ActivityError(f"the seed{where} has shape {np.shape(d)} but the result has "
                                f"shape {np.shape(value)}")
        if not _is_float(value):
            out.append(None)
            continue
        xp = array_module(value)
        if np.iscomplexobj(d) and not np.iscomplexobj(value):
            where = f" of result leaf {k}" if len(leaves) > 1 else ""
            raise ActivityError(f"the seed{where} is complex but the result is real; seed a "
                                "real result with real values (its real part)")
        # A complex seed is conjugated into the sweep's convention (docs/complex.md). A copy:
        # a rule may pass the seed through as a derivative it returns, and the caller may
        # refill the seed array for the next reverse.
        dtype = value.dtype if hasattr(value, "dtype") else np.asarray(value).dtype
        out.append(to_user(xp.array(d, dtype=dtype, copy=True)))
    return out


def _holds_none(tree) -> bool:
    if tree is None:
        return True
    if isinstance(tree, (tuple, list)):
        return any(_holds_none(t) for t in tree)
    if isinstance(tree, dict):
        return any(_holds_none(t) for t in tree.values())
    return False


def autodiff_thunk(mode: Mode, f: Callable, ret_activity: type, *arg_types: type):
    """Split reverse mode: returns ``(forward, reverse)`` for `f` with these activities. In a
    forward mode it returns one function, ``forward(*args)``, that returns what `autodiff`
    does (Enzyme's forward thunk).

    - ``forward(*args) -> (tape, primal, shadow)``: `primal` is None under
      ReverseSplitNoPrimal; `shadow` is a zero shadow of the result for a Duplicated return
      (fill it with the seed before calling reverse), else None.
    - ``reverse(*args, dret, tape) -> (derivs,)``: `dret` is the seed of the result (a number
      or an array of the result's shape; a W-tuple in batch mode); it may be left out for a
      Duplicated return, whose filled-in shadow is then the seed.

    >>> import numpy as np
    >>> fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, lambda x: x * 2.0, Duplicated,
    ...                           Duplicated)
    >>> x, dx = np.array([1.0, 2.0]), np.zeros(2)
    >>> tape, y, dy = fwd(Duplicated(x, dx))
    >>> dy[:] = [1.0, 10.0]
    >>> rev(Duplicated(x, dx), tape)
    ((None,),)
    >>> dx
    array([ 2., 20.])
    """
    f = unannotated(f)   # Enzyme's autodiff(mode, Const(f), ...)
    forward_mode = isinstance(mode, Mode) and mode.kind == "forward"
    if not isinstance(mode, Mode) or not (mode.split or forward_mode):
        raise ActivityError(f"autodiff_thunk takes ReverseSplitWithPrimal, ReverseSplitNoPrimal "
                            f"or a forward mode, got {mode!r}")
    if not callable(f):
        raise ActivityError(f"autodiff_thunk needs a callable, got {type(f).__name__}")
    for t in (ret_activity,) + arg_types:
        if not (isinstance(t, type) and t in ACTIVITY_TYPES):
            raise ActivityError(f"autodiff_thunk takes activity types (Const, Active, "
                                f"Duplicated, ...), got {t!r}")
    if forward_mode:
        return _forward_thunk(mode, f, ret_activity, arg_types)
    for i, t in enumerate(arg_types):
        if t is Active or t is Const or issubclass(t, Duplicated):
            continue
        raise ActivityError(f"argument {i}: {t.__name__} is not supported in reverse mode")
    thunk = _Thunk(mode, f, ret_activity, arg_types)
    return thunk.forward, thunk.reverse


def _forward_thunk(mode, f, ret_activity, arg_types):
    """Enzyme's forward-mode thunk: one function that takes the annotated arguments and returns
    what ``autodiff(mode, f, ret_activity, *args)`` returns (the shadow, and the primal under
    ForwardWithPrimal)."""
    checked = _Thunk(mode, f, ret_activity, arg_types).check_args   # as the split thunk's

    def forward(*args):
        return autodiff(mode, f, ret_activity, *checked(args, "forward"))
    return forward
