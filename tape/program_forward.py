"""Compiled forward mode: the compiling trace that pushes tangents, and its generated program.

`ForwardCompileTrace` runs the user's function once as eager forward mode does
(`tape.forward_trace.ForwardTrace.process`): a primitive with a tangent among its operands runs its
forward (JVP) rule, ``prim.forward(cfg, primals, tangents, **params)`` with the config of
`_FORWARD_CONFIGS` and a complex result's tangent made complex (`_complex_like`); one without
runs its impl. It writes the same steps as the reverse trace (tape/program.py), with a
`FORWARD` kind for the first, so that guards, the closure watch, fresh buffers, error states and
the user's code are handled alike.

`ForwardProgram` writes the steps as one Python function ``run(leaves, tangents)`` returning
``(values of result_slots, tangents of tangent_slots)``: each tangent is a local ``t<slot>``
(None where eager mode's is None: a Const path does no tangent work). A forward step whose
tangents reach neither a returned tangent nor a buffer written back runs its impl only (dead
tangent code), and elementwise rules are written out inline with the arithmetic of their
forward rules (ops/elementwise.py), so results equal eager ones bit for bit.
"""
from __future__ import annotations

import re

import numpy as np

from .batching import Batched, forward_per_direction
from .config import _FORWARD_CONFIGS
from .forward_trace import _complex_like
from .inactive_code import _read_only
from .program import (FORWARD, FRESH, INACTIVE, PLAIN, CompileTrace, DynamicParams,
                      GuardFailed, _fill, _inlinable, _param_slots, same_value, step_context)
from .program_adjoint import INLINE_KINDS
from .program_code import (_NO_PARAMS, Program, _call, _check_defined, _release_dead_values,
                           _use_recorded)
from .program_names import Constants
from .program_split import load
from .program_tracer import CompiledTracer
from .program_unused import ALWAYS, unused_step_runs, warnings_raise
from .user_calls import DIRECT


class ForwardCompiledTracer(CompiledTracer):
    """A value of a compiling forward trace (its tangent is kept by the trace, by slot)."""

    __slots__ = ()
    eager_name = "DualTracerArray"   # eager forward mode's tracers (tape/tracer.py)


class ForwardCompileTrace(CompileTrace):
    """A compiling trace that computes tangents as eager forward mode does and writes down
    `FORWARD` steps for the primitives it differentiates."""

    tracer_class = ForwardCompiledTracer

    def __init__(self, snapshot, calls=None):
        super().__init__(snapshot, calls)
        self.tangents: dict[int, object] = {}   # slot -> tangent (absent: None)
        self.batched = False   # batch mode: the leaves' tangents are `Batched` (W directions)
        # Steps whose rule raised TypeError/ValueError on the batched tangents and ran once
        # per direction, as eager mode's trace does (their replay makes the same attempt).
        self.per_direction: set[int] = set()
        # Results whose tangent `_complex_like` changed while traced (made complex, or as wide
        # as the result where a rule passed a narrower input's through): their replay does too
        self.retyped: set[int] = set()

    def _process(self, prim, args, params):
        vals, ins, active, consts, params, kept = self._operands(prim, args, params)
        tans = [None if s is None else self.tangents.get(s) for s in ins]
        if all(t is None for t in tans):   # eager mode calls the primitive itself: its impl
            out = self._plain_step(prim, vals, params)
            return self._made(prim, (PLAIN, prim, None, tuple(ins), consts, kept), out, vals,
                              not any(active))
        if prim.forward is None:
            raise NotImplementedError(f"`{prim.name}` has no forward-mode (JVP) rule")
        cfg = _FORWARD_CONFIGS[tuple(t is not None for t in tans)]
        step = len(self.steps)
        forward = prim.forward
        if not prim.pure:   # user code: through the call's UserCalls
            def forward(cfg, vals, tans, **params):
                return self._user(prim.forward, (cfg, vals, tans), params)
        try:
            out, tangent = forward(cfg, vals, tans, **params)
        except (TypeError, ValueError):
            # As eager mode (tape/forward_trace.py ForwardTrace.process): a rule that cannot take
            # batched tangents runs once per direction (without them the error is raised).
            out, tangent = forward_per_direction(forward, cfg, vals, tans, params)
            self.per_direction.add(step)
        if not prim.pure:
            self.recorded[step] = (out, tangent)
        if (prim.pure and step not in self.per_direction
                and getattr(prim, "inline", ("",))[0] in INLINE_KINDS and not params
                and _inlinable(vals, ins, out)
                and (_stacked_tangents(tans, out) if self.batched else _plain_tangents(tans))):
            self.inline.add(len(self.steps))
        made = self._made(prim, (FORWARD, prim, cfg, tuple(ins), consts, kept), out, vals,
                          False)
        outs = made if prim.multiple_results else (made,)
        for t, tan in zip(outs, tangent if prim.multiple_results else (tangent,)):
            if tan is not None:
                self.tangents[t.slot] = _complex_like(t._v, tan, tans)
                if self.tangents[t.slot] is not tan:
                    self.retyped.add(t.slot)
        return made


def forward_batched(forward, cfg, vals, tans, params):
    """``forward(cfg, vals, tans, **params)`` as eager forward mode calls it
    (tape/forward_trace.py ForwardTrace.process): where the rule raises TypeError or ValueError on
    batched tangents, it runs once per direction (without them the error is raised)."""
    try:
        return forward(cfg, vals, tans, **params)
    except (TypeError, ValueError):
        return forward_per_direction(forward, cfg, vals, tans, params)


def user_forward_batched(calls, forward, cfg, vals, tans, params):
    """`forward_batched` for a user's rule: each of its calls goes through `calls`
    (tape/user_calls.UserCalls), so a later run of the same call takes what it returned."""
    def noted(cfg, vals, tans, **params):
        return calls.call(forward, (cfg, vals, tans), params)
    return forward_batched(noted, cfg, vals, tans, params)


def _stacked_tangents(tans, out) -> bool:
    """Batch mode: tangents that the inline arithmetic, on their stacked data, treats as the
    rule does on them: `Batched` ones of the result's shape (`_inlinable` saw to the
    operands'), whose batch axis then leads and the other axes align without reshaping, as
    `tape.batching` aligns them for each NumPy call of the rule."""
    return all(t is None or type(t) is Batched and t.shape == np.shape(out) for t in tans)


def _plain_tangents(tans) -> bool:
    """Tangents that the inline arithmetic treats as the rule does: arrays and numbers."""
    return all(t is None or type(t) in (np.ndarray, float, np.float64, np.float32)
               for t in tans)


_NAMES = re.compile(r"\b([vt]\d+)\b")


class ForwardProgram(Program):
    """The steps of one forward trace as one generated function ``run(leaves, tangents)``.

    - `leaf_slots`: the slots of the arguments' leaves, in order (as `Program`);
    - `tangent_leaves`: the slots whose tangents the caller passes (the shadows), in order;
    - `result_slots`: the slots the caller reads back (the return value, buffers written);
    - `tangent_results`: the slots whose tangents the caller reads back.
    The function returns ``(values of result_slots, tangents of tangent_results)``.
    """

    def __init__(self, trace: ForwardCompileTrace, leaf_slots, tangent_leaves, result_slots,
                 tangent_results, by_reference: bool = True):
        self._take_steps(trace, by_reference)
        _check_defined(self.steps, leaf_slots, list(result_slots) + list(tangent_results), ())
        self.repeats = {}   # (common subexpressions are not shared in forward programs)
        runs = [unused_step_runs(step, i in trace.contexts, self.values)
                for i, step in enumerate(self.steps)]
        always = {i for i, r in enumerate(runs) if r == ALWAYS}
        may_raise = {i for i, r in enumerate(runs) if r}
        # Eager mode runs the forward rule of every step with a tangent, and a rule's tangent
        # arithmetic may raise where its impl does not (``t / (2 * sqrt(0))``): under an error
        # state the function set, the rule runs; where the caller's settings make warnings
        # raise, the strict program below runs instead, with the tangents eager mode computes.
        useful, needed = self._live(result_slots, tangent_results, always,
                                    set(trace.contexts))
        strict_useful, strict_needed = self._live(result_slots, tangent_results, may_raise,
                                                  may_raise)
        self.when_strict = set()   # (steps that may only warn run in the strict program)
        self.traced_tangents = {s for s, t in trace.tangents.items() if t is not None}
        strict_run = None
        if strict_useful != useful or strict_needed != needed:
            strict_run = load(*self._generate_forward(
                trace, leaf_slots, tangent_leaves, result_slots, tangent_results,
                strict_useful, strict_needed))
        self.source, namespace = self._generate_forward(
            trace, leaf_slots, tangent_leaves, result_slots, tangent_results, useful, needed,
            strict_run)
        self.n_steps = len(self.steps)
        self.n_kept = sum(needed)
        self.n_adjoint = sum(useful)
        self.run = load(self.source, namespace)
        self.steps = None

    def _live(self, result_slots, tangent_results, unused_runs, rules_run):
        """Per step: whether its forward rule runs (`useful`: its tangents are read, it is
        user code, which eager mode runs with its tangents, or it is in `rules_run`: its
        rule's tangent arithmetic may raise), and whether it runs at all (`needed`: its values
        are read, guarded, it is user code, or may raise: `unused_runs`)."""
        tangent_live = set(tangent_results)
        live = set(result_slots) | set(self.guards) | self.shapes_read
        useful = [False] * len(self.steps)
        needed = [False] * len(self.steps)
        for i in range(len(self.steps) - 1, -1, -1):
            kind, fn, cfg, ins, consts, params, outs = self.steps[i]
            if kind == FORWARD and (i in self.user_steps or i in rules_run
                                    or any(o in tangent_live for o in outs)):
                useful[i] = True
                tangent_live.update(s for s, a in zip(ins, cfg.active) if a)
            if (useful[i] or any(o in live for o in outs) or i in self.user_steps
                    or i in unused_runs):
                needed[i] = True
                live.update(s for s in ins if s is not None)
                live.update(_param_slots(params))
        return useful, needed

    def _generate_forward(self, trace, leaf_slots, tangent_leaves, result_slots,
                          tangent_results, useful, needed, strict_run=None):
        """The program's source and namespace. `strict_run`: the program to run instead
        where the caller's settings make warnings raise (it runs every step and forward rule
        that may raise)."""
        ns = {"GuardFailed": GuardFailed, "_same": same_value, "_fill": _fill, "_ro": _read_only, "_call": _call,
              "_add_reduce": np.add.reduce, "_array": np.array, "_step_context": step_context,
              "_DIRECT": DIRECT, "_complex_like": _complex_like,
              "_forward_batched": forward_batched, "_user_forward_batched": user_forward_batched,
              "_Batched": Batched}
        lines = ["def run(leaves, tangents, recorded=None, calls=_DIRECT):"]
        if strict_run is not None:
            ns["_warnings_raise"] = warnings_raise
            ns["_strict_run"] = strict_run
            lines.append("    if _warnings_raise(): "
                         "return _strict_run(leaves, tangents, recorded, calls)")
        names = ", ".join(f"v{s}" for s, _ in leaf_slots)
        lines.append(f"    {names}, = leaves" if leaf_slots else "    pass")
        unpack_at = len(lines)   # where the tangents are unpacked, if the program reads them
        const = Constants(ns)
        has_tangent = set(tangent_leaves)

        def guard(s):
            lines.append(self._guard_line(s, const))

        for s, _ in leaf_slots:
            if s in self.guards:
                guard(s)
        for i, (kind, fn, cfg, ins, consts, params, outs) in enumerate(self.steps):
            if not needed[i]:
                continue
            first_line = len(lines)
            values = ", ".join(f"v{o}" for o in outs)
            lhs = values + ("," if len(outs) == 1 and kind != FRESH
                            and getattr(fn, "multiple_results", False) else "")
            args = ", ".join(f"v{s}" if s is not None else const(c)
                             for s, c in zip(ins, consts))
            kw = _keywords(params, const)
            if kind == FRESH:
                lines.append(f"    v{outs[0]} = {const(consts[0], 'buffer')}.copy()")
            elif kind == FORWARD and useful[i]:
                tans = ", ".join(f"t{s}" if a else "None" for s, a in zip(ins, cfg.active))
                tangents = ", ".join(f"t{o}" for o in outs)
                if fn.multiple_results:
                    target = f"({values},), ({tangents},)"
                else:
                    target = f"v{outs[0]}, t{outs[0]}"
                kwargs = (kw[4:] if type(params) is DynamicParams
                          else const(params if params else _NO_PARAMS, "p"))
                rule = (f"{const(fn.forward, fn.name + '_fwd')}, {const(cfg, 'cfg')}, "
                        f"[{args}], [{tans}], {kwargs}")
                if i in trace.per_direction:   # eager mode's attempt, then once per direction
                    helper = ("_user_forward_batched(calls, " if i in self.user_steps
                              else "_forward_batched(")
                    lines.append(f"    {target} = {helper}{rule})")
                elif i in self.user_steps:
                    lines.append(f"    {target} = calls.call({const(fn.forward, fn.name + '_fwd')}"
                                 f", ({const(cfg, 'cfg')}, [{args}], [{tans}]), {kwargs})")
                elif i in self.inline:
                    lines.append(f"    v{outs[0]} = {const(fn.impl, fn.name + '_impl')}({args})")
                    operands = [f"v{s}" if s is not None else const(c)
                                for s, c in zip(ins, consts)]
                    data = ".data" if trace.batched else ""   # (the W tangents stacked)
                    tangent = _inline_tangent(
                        fn.inline, [f"t{s}{data}" if a else None
                                    for s, a in zip(ins, cfg.active)],
                        operands, f"v{outs[0]}", const)
                    lines.append(f"    t{outs[0]} = " + (f"_Batched({tangent})" if data
                                                         else tangent))
                else:
                    lines.append(f"    {target} = {const(fn.forward, fn.name + '_fwd')}("
                                 f"{const(cfg, 'cfg')}, [{args}], [{tans}]{kw})")
                has_tangent.update(outs)
            elif i in self.user_steps:
                lines.append(self._user_step(i, lhs, False, const))
            elif kind == INACTIVE:
                name = getattr(fn, "__name__", "inactive")
                lines.append(f"    {lhs} = _call({const(fn, name)}, _fill({const(consts[0], 'a')}, "
                             f"({', '.join(f'v{s}' for s in ins)},)))")
            else:   # a PLAIN step, or a FORWARD step whose tangents nothing reads
                direct = self._direct(fn, ins, params, args, const)
                lines.append(f"    {lhs} = " + (direct or f"{const(fn.impl, fn.name + '_impl')}"
                                                         f"({args}{kw})"))
            if i in trace.contexts:   # the function set its own errstate / warning filters
                body = ["    " + line for line in lines[first_line:]]
                context = const(trace.contexts[i], "context")
                lines[first_line:] = [f"    with _step_context(*{context}):", *body]
            if i in trace.recorded:   # user code: the tracing call takes what it returned
                _use_recorded(lines, first_line, i, kind == FORWARD and useful[i])
            if kind == FORWARD and useful[i]:
                for o in outs:
                    if _complex(self.values[o]) or o in trace.retyped:
                        lines.append(f"    t{o} = _complex_like(v{o}, t{o}, ({tans},))")
                    if i in self.user_steps:   # a rule of the user's decides its zeros
                        test = "is" if o in trace.tangents else "is not"
                        lines.append(f"    if t{o} {test} None: raise GuardFailed({o})")
            for o in outs:
                if o in self.guards:
                    guard(o)
        results = ", ".join(f"v{s}" for s in result_slots)
        tangents = ", ".join(f"t{s}" if s in has_tangent else "None" for s in tangent_results)
        lines.append(f"    return ({results}{',' if result_slots else ''}), "
                     f"({tangents}{',' if tangent_results else ''})")
        read = set(_NAMES.findall("\n".join(lines[unpack_at:])))
        if any(f"t{s}" in read for s in tangent_leaves):   # (else no tangent work at all)
            names = ", ".join(f"t{s}" for s in tangent_leaves)
            lines.insert(unpack_at, f"    {names}, = tangents")
        return "\n".join(_release_dead_values(lines, _NAMES)) + "\n", ns


def _keywords(params, const) -> str:
    """``, **params`` of a call (filled from the step's slots where they hold traced values)."""
    if type(params) is DynamicParams:
        holes = "".join(f"v{s}, " for s in params.slots)
        return f", **_fill({const(params.template, 'p')}, ({holes}))"
    return f", **{const(params, 'p')}" if params else ""


def _complex(value) -> bool:
    kind, _, dtype = value
    return kind is complex or dtype is not None and np.dtype(dtype).kind == "c"


def _inline_tangent(inline, tangents, operands, out, const) -> str:
    """The tangent of an elementwise step, written with the arithmetic of its forward rule
    (ops/elementwise.py) where nothing broadcasts: ``times_partial`` is a product outside
    strong-zero mode (which runs eagerly), ``add_tangents`` a sum where both are set."""
    kind = inline[0]
    if kind == "unary":
        _, derivative, use_ans, times = inline
        at = out if use_ans else operands[0]
        if times is not None:
            return f"{const(times, 'times')}({tangents[0]}, {at})"
        return f"{tangents[0]} * {const(derivative, 'derivative')}({at})"
    if kind == "map":
        return f"{const(inline[1], 'ufunc')}({tangents[0]})"
    if kind == "linear":
        tx, ty = tangents
        if ty is not None and inline[1] < 0:
            ty = f"(-{ty})"
        return _sum(tx, ty)
    if kind == "product":
        tx, ty = tangents
        return _sum(tx and f"{tx} * {operands[1]}", ty and f"{ty} * {operands[0]}")
    if kind == "binary":
        _, d_first, d_second, _, times_second = inline
        tx, ty = tangents
        x, y = operands
        second = (ty and f"{const(times_second, 'times')}({ty}, {x}, {y}, {out})"
                  if times_second is not None
                  else ty and f"{ty} * {const(d_second, 'partial')}({x}, {y}, {out})")
        return _sum(tx and f"{tx} * {const(d_first, 'partial')}({x}, {y}, {out})", second)
    raise ValueError(f"unknown inline rule {kind!r}")


def _sum(a, b) -> str:
    if a is None:
        return b
    if b is None:
        return a
    return f"({a}) + ({b})"
