"""The engine: primitives, traces (levels), the Wengert tape and its reverse sweep (forward
mode, the other kind of trace, is tape.forward_trace).

A *primitive* is a function the engine knows how to differentiate. Calling one finds the
innermost (deepest) trace among its arguments and lets that trace handle the call. A trace
unwraps its own tracers, calls the primitive's rule on the unwrapped values
(which may still be tracers of outer traces, so outer levels record too) and wraps the result.

This module never imports a rule: rules live next to their primitives in `ops/` and `kernels/`.
"""
from __future__ import annotations

import contextvars
import threading
from typing import Any, Callable, Sequence

import numpy as np

from .config import (_ACTIVE_01, _ACTIVE_1, _ACTIVE_10, _ACTIVE_11,  # noqa: F401
                     _FORWARD_CONFIGS, _REVERSE_CONFIGS, RuleConfig, config_for, config_table)
from .errors import (EscapedTracerError, OnceDifferentiableError, refuse_matrix_or_masked,
                     reraise_hidden_cause)
from .aliasing import refuse_stale_reads
from .residuals import caller_arrays, detach_outer, protect

# The stack of open traces of this thread / async task. `contextvars` keeps threads apart.
_TRACE_STACK: contextvars.ContextVar[tuple] = contextvars.ContextVar("hecate_traces", default=())
# Strong-zero mode (tape.modifiers): read by the rules' `times_partial`, set by a trace whose
# mode asks for it, for as long as that trace is open.
STRONG_ZERO: contextvars.ContextVar[bool] = contextvars.ContextVar("hecate_strong_zero",
                                                                   default=False)
# Callbacks run when the first trace of the process opens (in any thread) and when the last one
# closes, for what must be in place only while something is traced (ops/numpy_patch.py installs
# NumPy wrappers this way). They run under a lock, so they never interleave.
ON_FIRST_TRACE: list[Callable[[], None]] = []
ON_LAST_TRACE: list[Callable[[], None]] = []
_BATCHED_TYPE: list = [None]   # tape.batching's Batched, which installs it (Primitive.__call__)
_OPEN_TRACES = [0]
_OPEN_LOCK = threading.Lock()


def _trace_opened() -> None:
    with _OPEN_LOCK:
        _OPEN_TRACES[0] += 1
        if _OPEN_TRACES[0] == 1:
            try:
                for hook in ON_FIRST_TRACE:
                    hook()
            except BaseException:
                _OPEN_TRACES[0] -= 1
                for hook in ON_LAST_TRACE:
                    hook()
                raise


def _trace_closed() -> None:
    with _OPEN_LOCK:
        _OPEN_TRACES[0] -= 1
        if _OPEN_TRACES[0] == 0:
            for hook in ON_LAST_TRACE:
                hook()


class Primitive:
    """A differentiable function: an implementation plus its rules.

    - ``impl(*args, **params)`` computes the result on plain (or outer-level traced) arrays;
    - ``augmented_primal(config, *args, **params) -> (out, saved)`` computes the result and the
      residuals the reverse rule needs (JAX custom_vjp style: explicit, no hidden closures);
    - ``reverse(config, saved, cotangent) -> tuple`` returns one cotangent per argument (None for
      inactive arguments or symbolic zeros);
    - ``forward(config, primals, tangents, **params) -> (out, tangent)`` is the JVP rule;
      tangents of inactive arguments are None.

    ``differentiable_rules`` says whether the rules are written with differentiable operations
    (so higher derivatives work). When False the primitive is *once differentiable*: asking for a
    derivative of its rules raises `OnceDifferentiableError` rather than returning a wrong number.
    ``multiple_results`` means `impl` returns a tuple of arrays, each with its own cotangent.
    """

    # No __slots__: a primitive is made once per function, and users may set its __doc__.

    # Whether the primitive is a function of its arguments alone, so that a compiled program
    # may compute two equal calls once (tape/program_cse.py). A user's rule may keep state.
    pure = False

    # Optional speed-ups of the eager sweep (`ReverseTrace.backward`), for rules whose plain
    # reverse would make a full-size array per record (a loop over a matrix's rows):
    # - ``accumulate_into(config, saved, cotangent, buffer) -> bool`` adds the cotangent of the
    #   first argument into `buffer`, an array that only the sweep references, in place, and
    #   says whether it did (False: the sweep calls `reverse`);
    # - ``reverse_in_place(config, saved, cotangent)`` is `reverse` for a cotangent that only
    #   the sweep references and that it may overwrite; a first result that *is* the cotangent
    #   stays the sweep's own. It returns None where it cannot (the sweep calls `reverse`);
    # - ``reverse_fresh``: the first result of `reverse`, when an ndarray, is new and
    #   referenced nowhere else.
    accumulate_into = None
    reverse_in_place = None
    reverse_fresh = False

    def __init__(self, name: str, impl: Callable, augmented_primal: Callable | None = None,
                 reverse: Callable | None = None, forward: Callable | None = None,
                 differentiable_rules: bool = True, multiple_results: bool = False):
        self.name = name
        self.impl = impl
        self.augmented_primal = augmented_primal
        self.reverse = reverse
        self.forward = forward
        self.differentiable_rules = differentiable_rules
        self.multiple_results = multiple_results
        # One result, a reverse rule, and rules that may see outer-level tracers.
        self.simple = (augmented_primal is not None and differentiable_rules
                       and not multiple_results)

    def __call__(self, *args, **params):
        # Find the deepest trace among the arguments; it records the call (the outer ones see
        # the rule's own operations on their tracers). This is the entry of every operation.
        top = None
        batched = False
        subclassed = None   # an np.matrix or masked array would be silently misread
        for a in args:
            if isinstance(a, Tracer):
                t = a.level
                if top is None or t.depth > top.depth:
                    top = t
            elif type(a) is _BATCHED_TYPE[0]:
                batched = True
            elif isinstance(a, np.ndarray) and type(a) is not np.ndarray:
                subclassed = a
        if subclassed is not None and top is not None:
            refuse_matrix_or_masked(subclassed, self.name)
        if top is None and params:
            # A compiling trace keeps its nondiff parameters traced (`nondiff_value`): the
            # condition of np.where(x > 0, 1.0, -1.0) is the call's only traced value.
            for v in params.values():
                if isinstance(v, Tracer) and (top is None or v.level.depth > top.depth):
                    top = v.level
        if top is None:
            if not self.pure:
                traces = _TRACE_STACK.get()
                if traces and traces[-1].records_untraced:
                    return traces[-1].process(self, args, params)
            return self.impl(*args, **params)
        if not top.alive:
            raise _escaped(self)
        if batched:
            # An inner batch mode's rule met an outer tracer: recorded as tracer(Batched), the
            # W directions would pass for one array (a wrong derivative, or a failed rule).
            return Trace.hooks["call_per_direction"](self, args, params)
        return top.process(self, args, params)

    def __repr__(self) -> str:
        return f"<primitive {self.name}>"


class Tracer:
    """A value being differentiated at one trace (level). Subclasses add slot or tangent.

    The operator and NumPy-protocol surface is attached in `tape.tracer`.
    """

    # `owned` (a private buffer no record has seen: writable in place), `view_of` (the array
    # this one is a NumPy view of), `views` (weak references to its own views) and
    # `write_guard` (an argument's leaf: called before a write, to refuse it when the argument
    # shares memory with another one, or to note it for `refuse_stale_reads`; see
    # tape.aliasing) and `layout` (the strides NumPy's own array has, where a write made the
    # value a new buffer laid out otherwise: a written strided view; tape.tracer `_become`)
    # are left unset unless needed, as a speed-up: read them with getattr(t, name, None).
    __slots__ = ("value", "level", "owned", "view_of", "views", "write_guard", "layout",
                 "__weakref__")

    def peek_value(self):
        """The value, for its shape and dtype (see `peek`)."""
        return self.value

    def parameter_value(self):
        """The value, for a primitive's nondifferentiable parameter (see `nondiff_value`)."""
        return self.value

    def primal_value(self):
        """The value, for Python code that computes with it (see `primal`)."""
        return self.value


def bind(prim: Primitive, args: Sequence, params: dict):
    """Call `prim` on `args`, letting the deepest trace among them record it (the dispatch
    itself lives in `Primitive.__call__`)."""
    return prim(*args, **params)


def _escaped(prim):
    return EscapedTracerError(
        f"a traced value from a finished differentiation reached `{prim.name}`; values "
        "created inside autodiff's function must not be used after it returns")


def primal(x: Any) -> Any:
    """The plain value under any number of tracers.

    Code that computes with the result decides on the value: a compiling trace (tape.program)
    guards it, so a replay never reuses it stale. Read shapes and dtypes with `peek`.

    >>> primal(np.ones(2))
    array([1., 1.])
    """
    while isinstance(x, Tracer):
        x = x.primal_value()
    return x


def nondiff_value(x: Any) -> Any:
    """The value of an argument that carries no derivative and reaches a primitive as a
    parameter whose contents do not decide any shape: integer indices, class targets, an
    elementwise mask.

    Like `primal`, except that a compiling trace (tape.program) keeps its own nondiff values
    traced here, so that each replay passes that call's indices to the primitive instead of
    guarding the traced ones. Boolean indices decide a shape and must go through `primal`.

    >>> nondiff_value(np.array([2, 0]))
    array([2, 0])
    """
    while isinstance(x, Tracer):
        v = x.parameter_value()
        if v is x:
            return x
        x = v
    return x


def peek(x: Any) -> Any:
    """The plain value under any number of tracers, for reading its shape or dtype only.

    `primal` is what a computation on the value uses; a compiling trace (tape.program) sees
    that as a decision on the value and guards it, while `peek` is not guarded.

    >>> peek(np.ones(2)).shape
    (2,)
    """
    while isinstance(x, Tracer):
        x = x.peek_value()
    return x


class Trace:
    """One level of differentiation. Opened by `autodiff`, closed when it returns.

    ``strong_zero`` and ``nan_check`` are the mode modifiers of the call (see tape.modifiers).
    """

    nan_check = False
    # The caller's arrays of the arguments `f` has written so far, as ``(label, array)``
    # (tape.aliasing.WatchedArgument): an operation reading them through another name is refused.
    written_arguments: Sequence = ()
    # Whether calls of `tape.inactive` functions go to `call_inactive` (a compiling trace).
    records_inactive = False
    # Whether a user's rule (a primitive that is not `pure`) called on plain values only, no
    # tracer among them, comes to `process` when this trace is the innermost: a compiling
    # trace makes it a step that each replay runs, as eager mode runs it at each call.
    records_untraced = False
    # Installed by the layers above (core imports neither): tape.batching reruns a rule once
    # per direction when it cannot take a batched cotangent or tangent, and tape.modifiers
    # wraps the sweep or the forward `process` with NaN checks in NaN-check mode.
    hooks: dict = {}

    def __init__(self, *, strong_zero: bool = False, nan_check: bool = False):
        self.depth = len(_TRACE_STACK.get()) + 1
        self.alive = True
        self._token = None
        self.strong_zero = strong_zero
        self._strong_zero_token = None
        if nan_check:
            self.nan_check = True

    def __enter__(self):
        stack = _TRACE_STACK.get()
        if stack and stack[-1].records_inactive:
            stack[-1].nested_opened()   # a compiling trace cannot replay what this records
        _trace_opened()
        self._token = _TRACE_STACK.set(stack + (self,))
        if self.strong_zero:
            self._strong_zero_token = STRONG_ZERO.set(True)
        return self

    def __exit__(self, *exc):
        _trace_closed()   # first, so that the count stays right whatever fails below
        if self._strong_zero_token is not None:
            STRONG_ZERO.reset(self._strong_zero_token)
        _TRACE_STACK.reset(self._token)
        self.alive = False
        reraise_hidden_cause(exc[1])
        return False

    def call_root(self, f: Callable, args: Sequence, needs_primal: bool = True,
                  needs_shadow: bool = True) -> Any:
        """Call the differentiated function: ``f(*args)``.

        When `f` is itself a primitive (a user rule differentiated directly) that this trace
        records, its rules are told whether the caller needs the primal result and its
        derivative (`RuleConfig.needs_primal`, `needs_shadow`), as EnzymeRules tells a custom
        rule at the top of a differentiated call. Any other call is simply made.
        """
        if needs_primal and needs_shadow or not isinstance(f, Primitive):
            return f(*args)
        mine = [a for a in args if isinstance(a, Tracer) and a.level is self]
        vals = [a.value if isinstance(a, Tracer) and a.level is self else a for a in args]
        if (not mine or not self._rules_run(mine)
                or not f.differentiable_rules and _has_tracer(vals)):
            return f(*args)   # the rules do not run at this level: this is not the root record
        return self.process(_root_primitive(f, needs_primal, needs_shadow), args, {})

    def _rules_run(self, mine) -> bool:
        return True


# --------------------------------------------------------------------------------------------
# Reverse mode


class ReverseTracer(Tracer):
    __slots__ = ("slot",)

    def __init__(self, value, trace, slot):
        self.value = value
        self.level = trace
        self.slot = slot


class ReverseTrace(Trace):
    """A Wengert tape: records in execution order, which is already a topological order.

    A record is the tuple ``(prim, config, saved, in_slots, out_slot)``: ``in_slots[i]`` is the
    slot of argument i (None for a constant) and ``out_slot`` an int, or a tuple of ints for a
    primitive with several results. (Speed-up: plain tuples, not objects, on the hot path.)
    """

    tracer_class = ReverseTracer   # replaced by the full ndarray surface in tape.tracer

    def __init__(self, **modifiers):
        super().__init__(**modifiers)
        self.records: list[tuple] = []
        self.n_slots = 0

    def new_leaf(self, value) -> ReverseTracer:
        slot = self.n_slots
        self.n_slots = slot + 1
        return self.tracer_class(value, self, slot)

    def constant(self, value) -> ReverseTracer:
        """A fresh buffer at this level that carries no derivative yet (np.zeros_like)."""
        t = self.new_leaf(value)
        t.owned = True
        return t

    def process(self, prim: Primitive, args: Sequence, params: dict):
        # Speed-up: the one- and two-argument cases avoid building lists.
        n = len(args)
        untraced = ()   # operands that are not this trace's values (the caller's arrays)
        if n == 1:
            a = args[0]                   # bind chose this trace, so `a` is one of ours
            a.owned = False
            vals, in_slots, cfg = (a.value,), (a.slot,), _ACTIVE_1
        elif n == 2:
            a, b = args
            if isinstance(a, Tracer) and a.level is self:
                a.owned = False
                if isinstance(b, Tracer) and b.level is self:
                    b.owned = False
                    vals, in_slots, cfg = (a.value, b.value), (a.slot, b.slot), _ACTIVE_11
                else:
                    vals, in_slots, cfg = (a.value, b), (a.slot, None), _ACTIVE_10
                    if type(b) not in _NUMBERS:   # a Python number is never a caller's array
                        untraced = (b,)
            else:
                b.owned = False
                vals, in_slots, cfg = (a, b.value), (None, b.slot), _ACTIVE_01
                if type(a) not in _NUMBERS:
                    untraced = (a,)
        else:
            vals, slots = [], []
            for a in args:
                if isinstance(a, Tracer) and a.level is self:
                    a.owned = False
                    vals.append(a.value)
                    slots.append(a.slot)
                else:
                    vals.append(a)
                    slots.append(None)
            in_slots = tuple(slots)
            cfg = _REVERSE_CONFIGS[tuple(s is not None for s in slots)]
            untraced = [v for v, s in zip(vals, slots) if s is None]
        slot = self.n_slots
        if prim.simple:   # speed-up: the common case in a few lines
            out, saved = (prim.augmented_primal(cfg, *vals, **params) if params
                          else prim.augmented_primal(cfg, *vals))
            if untraced or params:
                saved = self._protect(saved, untraced, params)
            if self.depth > 1:   # residuals may be an outer level's tracers, which writes rebind
                saved = detach_outer(saved, (self, Tracer))
            self.n_slots = slot + 1
            self.records.append((prim, cfg, saved, in_slots, slot))
            return self.tracer_class(out, self, slot)
        if not prim.differentiable_rules and _has_tracer(vals):
            # An outer level differentiates this call too: let it record the primitive, and
            # refuse the derivative of the (opaque) reverse rule if it is ever asked for.
            out, saved = bind(prim, vals, params), _OUTER_TRACED
        else:
            augmented = prim.augmented_primal
            if augmented is None:
                raise NotImplementedError(f"`{prim.name}` has no reverse-mode rule")
            out, saved = augmented(cfg, *vals, **params)
            if untraced or params:
                saved = self._protect(saved, untraced, params)
            if self.depth > 1:
                saved = detach_outer(saved, (self, Tracer))
        if prim.multiple_results:
            self.n_slots = slot + len(out)
            self.records.append((prim, cfg, saved, in_slots, tuple(range(slot, slot + len(out)))))
            return tuple(self.tracer_class(o, self, slot + k) for k, o in enumerate(out))
        self.n_slots = slot + 1
        self.records.append((prim, cfg, saved, in_slots, slot))
        return self.tracer_class(out, self, slot)

    def _protect(self, saved, untraced, params):
        """`saved`, safe from later writes into the caller's arrays among the operands (see
        tape.residuals); first refuses a read of an argument's memory after `f` wrote it.
        Const arguments (tape.constbuffer) are kept by reference and note that they are."""
        for x in untraced:
            if isinstance(x, np.ndarray) and type(x) is not np.ndarray:
                note = getattr(x, "note_saved", None)
                if note is not None:
                    note(self)
        arrays = caller_arrays(untraced, params)
        if not arrays:   # speed-up: the common case, nothing of the caller's among them
            return saved
        if self.written_arguments:
            refuse_stale_reads(arrays, self.written_arguments)
        copies = self.__dict__.get("residual_copies")
        if copies is None:
            copies = self.residual_copies = {}
        return protect(saved, arrays, copies)

    def backward(self, seeds: dict, keep: Sequence[int], consume: bool = True) -> dict:
        """The reverse sweep. `seeds` maps slots to cotangents; returns cotangents of `keep`.

        Cotangents are freed as soon as the sweep has passed their slot. With ``consume`` (the
        default) records are released as they are used, so saved arrays die during the sweep,
        not after it; ``consume=False`` keeps the tape for another sweep (split mode).
        """
        self.residual_copies = None   # the records hold them; a later record copies afresh
        ct: list = [None] * self.n_slots
        for s, g in seeds.items():
            ct[s] = g if ct[s] is None else ct[s] + g
        # `keep` holds leaf slots, which are never the output of a record, so freeing each
        # record's output cotangent below never drops one of them.
        n_records = len(self.records)
        if consume:
            records, self.records = self.records, []
            sweep = _popping(records)
        else:
            sweep = reversed(self.records)
        if self.nan_check:   # a wrapper, so that the ordinary sweep pays nothing for it
            sweep = Trace.hooks["nan_checked_sweep"](sweep, n_records)
        # Slots whose cotangent is an ndarray the sweep made itself (a sum, or a fresh rule
        # result) that nothing else references: further contributions are added into it in
        # place, which gives the same values as ``prev + c`` without a new full-size array.
        own: set = set()
        for prim, cfg, saved, in_slots, out_slot in sweep:
            if type(out_slot) is int:
                g = ct[out_slot]
                if g is None:
                    continue
                ct[out_slot] = None
                if own and out_slot in own:
                    own.discard(out_slot)
                    if prim.reverse_in_place is not None:
                        cts = prim.reverse_in_place(cfg, saved, g)
                        if cts is not None:
                            self._add_cotangents(ct, own, in_slots, cts, cts[0] is g)
                            continue
            else:
                g = tuple(ct[s] for s in out_slot)
                if all(x is None for x in g):
                    continue
                for s in out_slot:
                    ct[s] = None
                    own.discard(s)
            if saved is _OUTER_TRACED:
                raise OnceDifferentiableError(prim.name)
            if (prim.accumulate_into is not None and in_slots[0] in own
                    and prim.accumulate_into(cfg, saved, g, ct[in_slots[0]])):
                continue
            try:
                cts = prim.reverse(cfg, saved, g)
            except (TypeError, ValueError):
                # A rule that cannot take a batched cotangent runs once per direction (NumPy
                # turns some BatchingFallbacks into ValueErrors); a real error happens again.
                cts = Trace.hooks["reverse_per_direction"](prim.reverse, cfg, saved, g)
            if len(in_slots) == 1:   # speed-up: most records have one input
                s, c = in_slots[0], cts[0]
                if c is not None:
                    prev = ct[s]
                    if prev is None:
                        ct[s] = c
                        if prim.reverse_fresh and type(c) is np.ndarray:
                            own.add(s)
                    else:
                        ct[s] = _summed(prev, c, s, own)
                continue
            self._add_cotangents(ct, own, in_slots, cts, prim.reverse_fresh)
        return {s: ct[s] for s in keep}

    @staticmethod
    def _add_cotangents(ct: list, own: set, in_slots, cts, own_first: bool) -> None:
        """Add a record's cotangents `cts` into `ct`. With `own_first` the first one, when it
        is an ndarray that arrives first at its slot, becomes the sweep's own."""
        for k, (s, c) in enumerate(zip(in_slots, cts)):
            if s is None or c is None:
                continue
            prev = ct[s]
            if prev is None:
                ct[s] = c
                if own_first and k == 0 and type(c) is np.ndarray:
                    own.add(s)
            else:
                ct[s] = _summed(prev, c, s, own)


def add_into(ct, term):
    """``ct + term`` (None standing for a zero on either side), summed into `ct` itself when
    that gives the same array: both ndarrays of one dtype and shape. `ct` is owned (by the
    eager sweep, or a compiled program's adjoint: tape/program_adjoint.py)."""
    if term is None:
        return ct
    if ct is None:
        return term
    if (type(term) is np.ndarray and type(ct) is np.ndarray and term.dtype == ct.dtype
            and term.shape == ct.shape):
        ct += term
        return ct
    return ct + term


def _summed(prev, c, s: int, own: set):
    """``prev + c``: summed into `prev` itself when the sweep owns it (`add_into`); a new
    ndarray sum is the sweep's own."""
    total = add_into(prev, c) if own and s in own else prev + c
    if type(total) is np.ndarray:
        own.add(s)
    elif own:
        own.discard(s)   # a 0-d sum is a NumPy scalar, which has no item assignment
    return total


def _popping(records: list):
    while records:
        yield records.pop()


# Operand types that are never a caller's array (tape.residuals): `process` skips them.
_NUMBERS = frozenset((int, float, complex, bool))

# Residuals of a once-differentiable rule whose inputs an outer level is differentiating.
_OUTER_TRACED = object()


def _has_tracer(vals) -> bool:
    return any(isinstance(v, Tracer) for v in vals)


def _root_primitive(f: Primitive, needs_primal: bool, needs_shadow: bool) -> Primitive:
    """`f`, with rules told what the caller needs (see `Trace.call_root`)."""
    def told(cfg):
        return cfg.replace(needs_primal=needs_primal, needs_shadow=needs_shadow)
    aug, rev, fwd = f.augmented_primal, f.reverse, f.forward
    return Primitive(f.name, f.impl,
                     aug and (lambda cfg, *a, **p: aug(told(cfg), *a, **p)),
                     rev and (lambda cfg, saved, g: rev(told(cfg), saved, g)),
                     fwd and (lambda cfg, x, t, **p: fwd(told(cfg), x, t, **p)),
                     f.differentiable_rules, f.multiple_results)


def is_complex(x) -> bool:
    """Whether `x` (array, tracer or number) holds complex values.

    >>> is_complex(np.array([1j])), is_complex(2.0)
    (True, False)
    """
    dt = getattr(x, "dtype", None)
    if dt is None:
        return isinstance(x, complex)
    return (dt if isinstance(dt, np.dtype) else np.dtype(dt)).kind == "c"
