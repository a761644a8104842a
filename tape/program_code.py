"""The generated program of a compiling trace (tape/program.py): its steps written as one Python
function ``run(leaves, seeds)``, the primal then the adjoint (tape/program_adjoint.py), with
dead code removed and each value released after its last use."""
from __future__ import annotations

import re

import numpy as np

from .backend import add_or_none
from .inactive_code import _read_only
from .program import (AUGMENTED, FORWARD, FRESH, INACTIVE, PLAIN, CompileTrace, DynamicParams,
                      GuardFailed, Uncompilable, _ShapeChecked, _fill, _param_slots, same_value,
                      step_context)
from .program_split import load
from .batching import Batched
from .core import add_into
from .program_adjoint import (AdjointWriter, basic_index, batched_add_into, iadd,
                              inline_terms, reverse_batched)
from .program_cse import common_subexpressions
from .program_inplace import (derivative_partners, large, operands_to_reuse, reusable_values,
                              reuse_buffers, times_into, write_inline_reverse)
from .program_names import Constants
from .program_unused import ALWAYS, unused_step_runs, warnings_raise
from .user_calls import DIRECT, is_user_code


class Program:
    """The steps of one trace as one generated function ``run(leaves, seeds)``.

    - `leaf_slots`: the slots of the arguments' leaves, in order;
    - `result_slots`: the slots the caller reads back (the return value, buffers written);
    - `seed_slots`: slots that get a cotangent seed (an Active return, written buffers);
    - `grad_slots`: the leaves whose cotangents are returned;
    - `by_reference`: whether watched arrays are read at each call (a kept program), or the
      copies the trace took of them (a program that answers the traced call only).
    - `width`: in batch mode (W seeds, `BatchDuplicated` arguments) the number of directions
      W: the cotangents are `Batched`, as in eager batch mode, and each reverse rule is called
      with them (once per direction where it cannot take them, as eagerly).
    The function returns ``(values of result_slots, cotangents of grad_slots)``. Its steps of
    user code (custom rules, `tape.inactive` functions) run as in eager mode, whatever their
    results feed, and through ``calls`` (tape/user_calls.UserCalls) when given one; with
    ``recorded`` (what the tracing call's user code returned, by step) they take those results.
    """

    def __init__(self, trace: CompileTrace, leaf_slots, result_slots, seed_slots, grad_slots,
                 by_reference: bool = True, width: int | None = None):
        self.width = width
        self._take_steps(trace, by_reference)
        _check_defined(self.steps, leaf_slots, result_slots, grad_slots)
        self.inplace = _all_float64(self.values, self.steps)
        # NumPy scalars and 0-d arrays: ``a + b`` of two 0-d arrays is a NumPy scalar, so their
        # cotangents are never summed in place (an in-place sum would stay a 0-d array)
        self.scalar_slots = {s for s, (t, shape, _) in self.values.items()
                             if t is not np.ndarray or shape == ()}
        # (batch mode calls those rules: their cotangents are `Batched`)
        self.scatters = self._scatters() if self.inplace and width is None else {}
        self.repeats = {i: a for i, a in common_subexpressions(
            self.steps, trace.contexts, result_slots, trace.views).items()
            if (i in self.inline) == (a in self.inline)
            and self.scatters.get(i) == self.scatters.get(a)}
        nondiff = self._nondiff(trace, leaf_slots)
        useful = self._useful(seed_slots, nondiff)
        # unused steps that may raise run; those that may only warn, where warnings raise
        runs = [unused_step_runs(step, i in trace.contexts, self.values)
                for i, step in enumerate(self.steps)]
        needed = self._needed(result_slots, useful, {i for i, r in enumerate(runs)
                                                      if r == ALWAYS})
        self.when_strict = {i for i, n in enumerate(self._needed(
            result_slots, useful, {i for i, r in enumerate(runs) if r})) if n and not needed[i]}
        # repeat -> the step whose residuals its reverse reads; a step whose own reverse
        # never runs keeps its residuals for them
        self.shared_residuals = {i: a for i, a in self.repeats.items()
                                 if needed[i] and useful[i] and self._has_residuals(i)}
        self.keep_residuals = {a for a in self.shared_residuals.values() if not useful[a]}
        self.source, namespace = self._generate(trace, leaf_slots, result_slots, seed_slots,
                                                grad_slots, nondiff, useful, needed)
        self.n_steps = len(self.steps)
        self.n_kept = sum(needed)
        self.n_adjoint = sum(useful)
        self.run = load(self.source, namespace)
        self.steps = None   # what replay needs is in the generated function

    def _take_steps(self, trace: CompileTrace, by_reference: bool) -> None:
        """The trace's steps, guards and values, once it is known they can be replayed."""
        if trace.saw_nested:
            raise Uncompilable("a differentiation inside the function (tape.checkpoint, a nested "
                               "autodiff) runs eagerly")
        if trace.raised:
            raise Uncompilable("an operation raised while traced and the function went on (it "
                               "caught the error): a replay could not take the same branch")
        if by_reference:   # a kept program reads the watched arrays themselves at each call
            restore = trace.snapshot.restore
            trace.steps = [step[:4] + (restore(step[4]), restore(step[5])) + step[6:]
                           for step in trace.steps]
        self.steps = trace.steps
        self.guards = trace.guards
        self.shapes_read = trace.shapes_read   # inactive results whose shape Python read
        self.inline = trace.inline
        self.values = trace.values
        self.user_steps = _user_steps(self.steps)
        self.calls_user = bool(self.user_steps)

    def _guard_line(self, s: int, const) -> str:
        """The line that checks slot `s`'s guard where its value is computed."""
        kind, value = self.guards[s]
        if kind == "truth":
            return f"    if bool(v{s}) is not {value}: raise GuardFailed({s})"
        return f"    if not _same(v{s}, {const(value)}): raise GuardFailed({s})"

    def _scatters(self) -> dict:
        """Steps whose reverse is written out by `AdjointWriter` rather than called: gathers
        with a fixed basic index (``x[0]``, ``x[1:3]``) from an array ("scatter": written into
        the array's cotangent), stacks of float64 arrays along a new first axis ("stack":
        slice k of the cotangent to argument k) and sums in their own dtype whose cotangent
        only broadcasts back ("sum")."""
        found = {}
        for i, (kind, fn, cfg, ins, consts, params, outs) in enumerate(self.steps):
            rule = getattr(fn, "inline", None)
            if kind != AUGMENTED or type(params) is not dict or ins[0] is None:
                continue
            if (rule == ("scatter",) and params.keys() == {"index"}
                    and basic_index(params["index"]) and ins[0] not in self.scalar_slots):
                found[i] = "scatter"
            elif rule == ("stack",) and self._direct(fn, ins, params, "", str) is not None:
                found[i] = "stack"
            elif (rule == ("sum",) and params.get("dtype") is None
                  and type(params.get("axis")) is tuple and ins[0] not in self.scalar_slots
                  and (params.get("keepdims") is True or params["axis"] == tuple(
                      range(len(params["axis"]))))):
                found[i] = "sum"
        return found

    def _direct(self, fn, ins, params, args, const):
        """The NumPy expression a primitive's impl amounts to on these operands, written
        directly (no call of the impl, no keyword dict): a gather with a fixed index, a sum of
        an array, a stack of float64 arrays along a new first axis. None: call the impl."""
        rule = getattr(fn, "inline", None)
        if type(params) is not dict or not ins or ins[0] is None:
            return None
        kind, shape, dtype = self.values[ins[0]]
        if kind is not np.ndarray:
            return None
        if rule == ("scatter",) and params.keys() == {"index"}:   # impl: x[index]
            return f"{args}[{const(params['index'], 'index')}]"
        if rule == ("sum",) and len(shape) > 0:   # np.sum of an ndarray is add.reduce
            return f"_add_reduce({args}, **{const(params, 'p')})"
        if (rule == ("stack",) and params == {"axis": 0, "dtype": None}
                and all(s is not None and self.values[s] == (np.ndarray, shape, dtype)
                        for s in ins) and dtype == np.float64):
            return f"_array(({args},))"   # same-shape float64 arrays: np.stack(axis=0)
        return None

    def _reverses_in_place(self, fn, outs, writer, grad_slots) -> bool:
        """Whether step `fn`'s reverse may take its cotangent in place
        (`Primitive.reverse_in_place`): a single result whose cotangent the program owns
        (tape/program_adjoint.py) and drops after this step."""
        if fn.reverse_in_place is None or fn.multiple_results:
            return False
        o = outs[0]
        state = writer.states.get(o)
        return (state is not None and state.owned and o not in self.scalar_slots
                and o not in grad_slots)

    def _user_step(self, i, lhs, useful, const) -> str:
        """The line of step i, user code: called through `calls`, as eager mode calls it (a
        rule's augmented primal whenever an argument is differentiated, even where its
        residuals are not needed)."""
        kind, fn, cfg, ins, consts, params, outs = self.steps[i]
        if kind == INACTIVE:
            checked = type(fn) is _ShapeChecked
            name = getattr(fn, "__name__", "inactive")
            call = (f"calls.call({const(fn.fn if checked else fn, name)}, "
                    f"*_fill({const(consts[0], 'a')}, ({''.join(f'_ro(v{s}), ' for s in ins)})))")
            return f"    {lhs} = " + (f"{const(fn, name + '_shapes')}.check({call})" if checked
                                      else call)
        args = "".join(f"v{s}, " if s is not None else f"{const(c)}, "
                       for s, c in zip(ins, consts))
        if type(params) is DynamicParams:
            holes = "".join(f"v{s}, " for s in params.slots)
            kw = f"_fill({const(params.template, 'p')}, ({holes}))"
        else:
            kw = const(params if params else _NO_PARAMS, "p")
        if kind == PLAIN:
            return f"    {lhs} = calls.call({const(fn.impl, fn.name + '_impl')}, ({args}), {kw})"
        out = f"({lhs})" if fn.multiple_results else lhs
        return (f"    {out}, {f's{i}' if useful else '_'} = calls.call("
                f"{const(fn.augmented_primal, fn.name + '_aug')}, ({const(cfg, 'cfg')}, "
                f"{args}), {kw})")

    def _nondiff(self, trace, leaf_slots):
        """Slots that carry no derivative (the leaves' own flags, then forward through the
        steps: a step with no differentiated input gives nondiff results)."""
        nondiff = set(s for s, flag in leaf_slots if flag)
        for kind, fn, cfg, ins, consts, params, outs in self.steps:
            if kind != AUGMENTED:
                nondiff.update(outs)
        return nondiff

    def _useful(self, seed_slots, nondiff):
        """Per step: whether its reverse rule runs (a differentiated step whose result reaches
        a seed)."""
        reach = {s for s in seed_slots if s not in nondiff}
        useful = [False] * len(self.steps)
        for i in range(len(self.steps) - 1, -1, -1):
            kind, fn, cfg, ins, consts, params, outs = self.steps[i]
            if kind == AUGMENTED and any(o in reach for o in outs):
                useful[i] = True
                reach.update(s for s, a in zip(ins, cfg.active) if a)
        return useful

    def _needed(self, result_slots, useful, unused_runs):
        """Per step: whether the primal part must run (its results are read, guarded, or
        needed by a reverse rule, or it is among `unused_runs`: it may raise, as eager mode's
        step would). A repeated step needs the results of the step it repeats (and its own
        operands only for an inline reverse, which reads them)."""
        live = set(result_slots) | set(self.guards) | self.shapes_read
        needed = [False] * len(self.steps)
        for i in range(len(self.steps) - 1, -1, -1):
            kind, fn, cfg, ins, consts, params, outs = self.steps[i]
            # user code runs as often as in eager mode, even when nothing reads its results
            if (useful[i] or any(o in live for o in outs) or i in self.user_steps
                    or i in unused_runs):
                needed[i] = True
                if i in self.repeats:
                    live.update(self.steps[self.repeats[i]][6])
                    if not (useful[i] and i in self.inline):
                        continue
                live.update(s for s in ins if s is not None)
                live.update(_param_slots(params))
        return needed

    def _has_residuals(self, i) -> bool:
        """Whether step i's reverse (when it runs) reads residuals ``s<i>``."""
        return i not in self.inline and i not in self.scatters

    def _generate(self, trace, leaf_slots, result_slots, seed_slots, grad_slots, nondiff,
                  useful, needed):
        ns = {"GuardFailed": GuardFailed, "_same": same_value, "_add": add_or_none, "_call": _call,
              "_fill": _fill, "_ro": _read_only, "_iadd": iadd, "_add_into": add_into, "_zeros": np.zeros,
              "_full": np.full, "_broadcast_to": np.broadcast_to, "_add_reduce": np.add.reduce,
              "_array": np.array, "_step_context": step_context, "_DIRECT": DIRECT,
              "_times_into": times_into}
        lines = ["def run(leaves, seeds, recorded=None, calls=_DIRECT):"]
        names = ", ".join(f"v{s}" for s, _ in leaf_slots)
        lines.append(f"    {names}, = leaves" if leaf_slots else "    pass")

        const = Constants(ns)

        def guard(s):
            lines.append(self._guard_line(s, const))

        for s, _ in leaf_slots:
            if s in self.guards:
                guard(s)
        if self.when_strict:   # unused steps that may warn run where warnings raise
            ns["_warnings_raise"] = warnings_raise
            lines.append("    strict = _warnings_raise()")
        lines.append("    # primal")
        reusable = reusable_values(
            self.steps, self.inline, self.values,
            {s for s, _ in leaf_slots} | set(result_slots) | set(grad_slots) | set(self.guards)
            | set(self.shapes_read) | {o for i in (*self.repeats, *self.repeats.values())
                                       for o in self.steps[i][6]})
        reuse_at: dict[int, tuple] = {}   # line -> (operands to write over, array operands)
        last_reader = {a: i for i, a in self.shared_residuals.items() if a in self.keep_residuals}
        for i, (kind, fn, cfg, ins, consts, params, outs) in enumerate(self.steps):
            if not needed[i] and i not in self.when_strict:
                continue
            first_line = len(lines)
            lhs = ", ".join(f"v{o}" for o in outs) + ("," if len(outs) == 1 and kind != FRESH
                                                      and _multiple(fn) else "")
            if i in self.repeats:   # a common subexpression: the earlier step's results
                a = self.repeats[i]
                lines.append(f"    {', '.join(f'v{o}' for o in outs)} = "
                             f"{', '.join(f'v{o}' for o in self.steps[a][6])}")
                if i in self.shared_residuals:
                    lines.append(f"    s{i} = s{a}")
                    if a in self.keep_residuals and last_reader[a] == i:
                        lines.append(f"    s{a} = None")   # step a's own reverse never runs
            elif kind == FRESH:
                lines.append(f"    v{outs[0]} = {const(consts[0], 'buffer')}.copy()")
            elif i in self.user_steps:
                lines.append(self._user_step(i, lhs, useful[i], const))
            elif kind == INACTIVE:
                args = ", ".join(f"v{s}" for s in ins)
                name = getattr(fn, "__name__", "inactive")
                lines.append(f"    {lhs} = _call({const(fn, name)}, _fill({const(consts[0], 'a')}, "
                             f"({args},)))")
            else:
                args = ", ".join(f"v{s}" if s is not None else const(c)
                                 for s, c in zip(ins, consts))
                if type(params) is DynamicParams:
                    holes = "".join(f"v{s}, " for s in params.slots)
                    kw = f", **_fill({const(params.template, 'p')}, ({holes}))"
                else:
                    kw = f", **{const(params, 'p')}" if params else ""
                if useful[i] and i in self.inline:
                    lines.append(f"    {lhs} = {const(fn.impl, fn.name + '_impl')}({args})")
                    reuse_at[len(lines) - 1] = (
                        operands_to_reuse(self.steps[i], self.values, reusable),
                        [f"v{s}" if s is not None else const(c) for s, c in zip(ins, consts)
                         if (self.values[s][0] if s is not None else type(c)) is np.ndarray])
                elif (useful[i] or i in self.keep_residuals) and i not in self.scatters:
                    out = f"({lhs})" if fn.multiple_results else lhs
                    lines.append(f"    {out}, s{i} = {const(fn.augmented_primal, fn.name + '_aug')}"
                                 f"({const(cfg, 'cfg')}, {args}{kw})")
                else:
                    direct = self._direct(fn, ins, params, args, const)
                    lines.append(f"    {lhs} = " + (direct or f"{const(fn.impl, fn.name + '_impl')}"
                                                            f"({args}{kw})"))
            if i in trace.contexts or i in self.when_strict:
                reuse_at.pop(len(lines) - 1, None)   # (lines about to be rewritten)
            if i in trace.contexts:   # the function set its own errstate / warning filters
                lines.insert(len(lines) - 1, f"    with _step_context(*{const(trace.contexts[i], 'context')}):")
                lines[-1] = "    " + lines[-1]
            if i in trace.recorded:   # user code: the tracing call takes what it returned
                _use_recorded(lines, first_line, i, kind == AUGMENTED and i in self.user_steps)
            if i in self.when_strict:   # (one statement per line: a value it reads last is
                lines[first_line:] = [f"    if strict: {line.strip()}"   # released after it)
                                      for line in lines[first_line:]]
            for o in outs:
                if o in self.guards:
                    guard(o)
        lines.append("    # adjoint")
        lines.append("    if seeds is None: return None")   # asked whether its guards hold
        if self.calls_user:   # every guard held: what user code got need not live on
            lines.append("    calls.primal_done()")
        adjoint_start = len(lines)
        partners = derivative_partners(self.steps, self.inline, useful,
                                       [n and i not in self.when_strict
                                        for i, n in enumerate(needed)], self.values)
        batched = self.width is not None
        if batched:   # in-place sums of `Batched` cotangents, rules as eager batch mode calls them
            ns.update(_B=Batched, _add_into=batched_add_into, _reverse_batched=reverse_batched)
        writer = AdjointWriter(lines, self.inplace and not batched, self.scalar_slots)
        for k, s in enumerate(seed_slots):
            if s not in nondiff:
                writer.add(s, f"seeds[{k}]", "    ", may_be_none=False, fresh=False)
        for i in range(len(self.steps) - 1, -1, -1):
            if not useful[i]:
                continue
            kind, fn, cfg, ins, consts, params, outs = self.steps[i]
            live_outs = [o for o in outs if writer.assigned(o)]
            if not live_outs:
                continue
            if fn.multiple_results:
                g = "(" + ", ".join(f"ct{o}" if writer.assigned(o) else "None"
                                    for o in outs) + ",)"
                test = " or ".join(f"ct{o} is not None" for o in live_outs)
            else:
                g, test = f"ct{outs[0]}", f"ct{outs[0]} is not None"
            conditional = not writer.certain(live_outs)
            indent = "        " if conditional else "    "
            if conditional:
                lines.append(f"    if {test}:")
            writer.open_block(conditional)
            if i in self.inline:
                operand = [f"v{s}" if s is not None else const(c) for s, c in zip(ins, consts)]
                data_shape = (self.width,) + self.values[outs[0]][1] if batched else None
                terms = list(inline_terms(fn.inline, cfg.active, g, operand, f"v{outs[0]}",
                                          const, data_shape, partners.get(i)))
                write_inline_reverse(writer, terms, ins, outs[0], indent, consumed=(
                    outs[0] not in grad_slots and outs[0] not in self.scalar_slots
                    and large(self.values[outs[0]])))
            elif self.scatters.get(i) == "scatter":
                writer.scatter(ins[0], g, const(params["index"], "index"),
                               self.values[ins[0]][1], indent)
            elif self.scatters.get(i) == "stack":   # slice k of g goes to argument k
                for k, s in enumerate(ins):
                    if cfg.active[k]:
                        writer.add(s, f"{g}[{k}]", indent, may_be_none=False, fresh=False)
            elif i in self.scatters:   # a sum: its cotangent broadcast back (full: a new array)
                shape = self.values[ins[0]][1]
                if len(params["axis"]) == len(shape) and not params["keepdims"]:
                    writer.add(ins[0], f"_full({shape!r}, {g})", indent, False, True)
                else:
                    writer.add(ins[0], f"_broadcast_to({g}, {shape!r})", indent, False, False)
            else:
                rev, rule_args = const(fn.reverse, fn.name + '_rev'), f"{const(cfg, 'cfg')}, s{i}, {g}"
                if batched:
                    lines.append(f"{indent}g = _reverse_batched({rev}, {rule_args})")
                elif self._reverses_in_place(fn, outs, writer, grad_slots):
                    # The cotangent is the program's own and dies here: the rule may write
                    # into it (`x[index] = v` zeroes the written entries) rather than copy.
                    in_place = const(fn.reverse_in_place, fn.name + '_rev_in_place')
                    lines.append(f"{indent}g = {in_place}({rule_args})")
                    lines.append(f"{indent}if g is None: g = {rev}({rule_args})")
                else:
                    lines.append(f"{indent}g = {rev}({rule_args})")
                # A rule that says so (`reverse_results`) returns a cotangent for each active
                # argument ("set"), each a new array nothing else holds ("fresh"); one with
                # `reverse_fresh` says so of its first result alone.
                results = getattr(fn, "reverse_results", None)
                for k, (s, a) in enumerate(zip(ins, cfg.active)):
                    if a:
                        fresh = results == "fresh" or (k == 0 and fn.reverse_fresh and not batched)
                        writer.add(s, f"g[{k}]", indent, may_be_none=results is None,
                                   fresh=fresh)
                lines.append(f"    s{i} = None")
            writer.close_block()
            for o in outs:
                if o not in grad_slots and writer.assigned(o):
                    lines.append(f"    ct{o} = None")
        cts = writer.states
        if cts:   # a cotangent no rule reached stays None
            lines.insert(adjoint_start, "    " + " = ".join(f"ct{s}" for s in sorted(cts))
                         + " = None")
        results = ", ".join(f"v{s}" for s in result_slots)
        grads = ", ".join(f"ct{s}" if s in cts else "None" for s in grad_slots)
        lines.append(f"    return ({results}{',' if result_slots else ''}), "
                     f"({grads}{',' if grad_slots else ''})")
        last = _last_uses(lines)
        lines = reuse_buffers(lines, reuse_at, reusable, last)
        return "\n".join(_release_dead_values(lines, last=last)) + "\n", ns

    def __repr__(self):
        return self.source


def _all_float64(values, steps) -> bool:
    """Whether every inexact value of the program (slots, constant arrays and numbers) is
    float64: then every cotangent is float64 and may be summed in place (tape/program_adjoint)."""
    for t, _, dtype in values.values():
        if dtype is not None and dtype.kind in "fcV" and dtype != np.float64:
            return False
        if dtype is None and t not in (bool, int, float):
            return False
    for step in steps:
        for c in step[4]:
            dtype = getattr(c, "dtype", None)
            if dtype is not None and dtype.kind in "fcV" and dtype != np.float64:
                return False
            if dtype is None and isinstance(c, complex):
                return False
    return True


def _check_defined(steps, leaf_slots, result_slots, grad_slots) -> None:
    """Every value a step reads, or the caller reads back, is a leaf or a step's result; a
    value made some other way could not be replayed."""
    defined = {s for s, _ in leaf_slots}
    for kind, fn, cfg, ins, consts, params, outs in steps:
        missing = [s for s in ins + _param_slots(params) if s is not None and s not in defined]
        if missing:
            raise Uncompilable(f"`{getattr(fn, 'name', fn)}` reads a value the trace did not "
                               "make")
        defined.update(outs)
    if any(s not in defined for s in list(result_slots) + list(grad_slots)):
        raise Uncompilable("the result holds a value the trace did not make")


VALUES = re.compile(r"\b(v\d+)\b")
"""The names of a program's values (``v<slot>``); forward programs add tangents (``t<slot>``)."""


def _last_uses(lines: list[str], pattern: re.Pattern = VALUES) -> dict[str, int]:
    """Each value's name -> the index of the last line that reads or writes it."""
    last = {}
    for n, line in enumerate(lines):
        for name in pattern.findall(line.split("#")[0]):
            last[name] = n
    return last


def _release_dead_values(lines: list[str], pattern: re.Pattern = VALUES,
                         last: dict | None = None) -> list[str]:
    """Drop each value right after the line that uses it last (`last`, else found with
    `_last_uses`), as the eager sweep frees residuals as it goes: memory is reused rather
    than freshly mapped."""
    last = _last_uses(lines, pattern) if last is None else last
    after: dict[int, list[str]] = {}
    for name, n in last.items():
        if n > 1 and not lines[n].lstrip().startswith("return"):
            after.setdefault(n, []).append(name)
    out = []
    for n, line in enumerate(lines):
        out.append(line)
        if n in after:
            indent = line[:len(line) - len(line.lstrip())]
            names = sorted(after[n], key=lambda name: (name[0], int(name[1:])))
            out.append(indent + " = ".join(names) + " = None")
    return out


_NO_PARAMS: dict = {}   # a user step's keyword arguments when it has none (never written)


def _user_steps(steps) -> set:
    """The steps that run user code: a rule of the user's (not `Primitive.pure`), or a
    `tape.inactive` function that is not one of NumPy's own (tape/user_calls.is_user_code)."""
    found = set()
    for i, (kind, fn, cfg, ins, consts, params, outs) in enumerate(steps):
        if kind == INACTIVE:
            if is_user_code(fn.fn if type(fn) is _ShapeChecked else fn):
                found.add(i)
        elif kind in (AUGMENTED, PLAIN, FORWARD) and not fn.pure:
            found.add(i)
    return found


def _use_recorded(lines: list, first: int, i: int, pair: bool = False) -> None:
    """Make the lines of step i (from `first` on) run only when `recorded` is None; else the
    step's results (and residuals) are what the trace recorded. The call that traced a
    function answers this way: a user's rule or inactive function runs once in that call,
    as in eager mode, even if it keeps state."""
    body = ["    " + line for line in lines[first:]]
    target = body[-1].strip().split(" = ", 1)[0]   # "v5", "v5, v6", "(v5,), s5", ...
    if pair or target.endswith(f", s{i}"):   # (result, residuals)
        taken = f"    else: {target} = recorded[{i}]"
    else:
        taken = f"    else: {target} = recorded[{i}][0]"
    lines[first:] = ["    if recorded is None:", *body, taken]


def _multiple(fn) -> bool:
    return bool(getattr(fn, "multiple_results", False))


def _call(fn, filled):
    args, kwargs = filled
    return fn(*args, **kwargs)
