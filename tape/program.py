"""Trace once, then replay: the compiling trace and the straight-line program it produces.

`CompileTrace` runs the user's function once on tracers, as eager reverse mode does, but instead
of keeping residuals it writes down *steps*: which primitive ran on which slots with which
constants. Every value is a tracer here, Const arrays and the results of `tape.inactive`
functions too (those carry no derivative: `nondiff`). A Python decision on a value is a
*guard*: `bool(x)` of any value, and any read of a nondiff value's contents outside a
primitive (`int(n)`, an index taken from `argmax`, `tape.primal(c)`) records the value seen.
`Program` turns the steps into one generated Python function, primal then adjoint, with
dead code removed; replaying it checks each guard where its value is computed and raises
`GuardFailed` on a mismatch, before anything outside the program has been touched.

Nothing here runs while a program replays: no tracers, no protocol dispatch, no rule
look-up. See tape/compiled.py for the public `compile`.
"""
from __future__ import annotations

import re

import numpy as np

from .config import _REVERSE_CONFIGS
from .backend import add_or_none
from .core import ReverseTrace, Tracer, peek
from .program_adjoint import AdjointWriter, INLINE_KINDS, basic_index, iadd, inline_terms
from .tracer import ReverseTracerArray, _refuse, _KEEP_ARRAY


class GuardFailed(Exception):
    """A replayed program met a value that the traced Python code decided on differently."""


class Uncompilable(Exception):
    """The function does something a replay could not reproduce; it runs eagerly instead."""


# Step kinds
AUGMENTED = "aug"     # a differentiated primitive: augmented_primal, and its reverse rule
PLAIN = "impl"        # a primitive on nondiff values only: its impl
INACTIVE = "inactive"  # a `tape.inactive` function (argmax, comparisons, ...)
FRESH = "fresh"       # a new buffer (np.zeros_like): a copy of the traced one


class CompiledTracer(ReverseTracerArray):
    """A value of a compiling trace. `nondiff` values carry no derivative; reading their
    contents from Python (rather than passing them to a primitive) records a guard."""

    __slots__ = ("_v", "nondiff", "const_argument")

    def __init__(self, value, trace, slot, nondiff=False):
        self._v = value
        self.level = trace
        self.slot = slot
        self.nondiff = nondiff
        self.const_argument = None

    @property
    def value(self):
        if self.nondiff:
            self.level.guard_value(self)
        return self._v

    @value.setter
    def value(self, v):
        self._v = v

    def peek_value(self):
        return self._v

    def primal_value(self):
        # `tape.primal` of any value of this trace: Python computes with its contents, so the
        # program checks them at each call (a differentiated value as much as a nondiff one).
        self.level.guard_value(self)
        return self._v

    def parameter_value(self):
        # A nondiff value passed as a primitive's parameter (an index) stays traced: the step
        # reads it from its slot at each replay instead of guarding it.
        return self if self.nondiff else self._v

    def _rebind(self, new):
        if self.const_argument is not None:
            raise Uncompilable(f"the function writes into {self.const_argument}, a Const "
                               "argument")
        if not (isinstance(new, CompiledTracer) and new.level is self.level):
            raise Uncompilable("a value of another differentiation was written into a buffer")
        self._v, self.slot, self.nondiff = new._v, new.slot, new.nondiff

    def __bool__(self):
        decision = bool(self._v)
        self.level.guard_truth(self, decision)
        return decision

    # Python numbers from nondiff values are decisions (guarded); from differentiated values
    # they are refused, as in eager mode.
    def _number(kind, refusal):
        def convert(self, *args):
            if not self.nondiff:
                return refusal(self, *args)
            return getattr(self.value, kind)(*args)
        return convert

    __int__ = _number("__int__", _refuse("int(x)", "Use np.floor(x) or np.round(x)."))
    __index__ = _number("__index__", _refuse("int(x)", "Use np.floor(x) or np.round(x)."))
    __float__ = _number("__float__", _refuse("float(x)", _KEEP_ARRAY))
    __complex__ = _number("__complex__", _refuse("complex(x)", _KEEP_ARRAY))
    item = _number("item", _refuse("x.item()", _KEEP_ARRAY))
    tolist = _number("tolist", _refuse("x.tolist()", _KEEP_ARRAY))
    del _number

    def __array__(self, dtype=None, copy=None):
        if not self.nondiff:
            return ReverseTracerArray.__array__(self, dtype, copy)
        value = np.asarray(self.value)
        return value if dtype is None else value.astype(dtype)

    def __hash__(self):
        return object.__hash__(self)


class CompileTrace(ReverseTrace):
    """A reverse trace that writes down replayable steps instead of keeping residuals."""

    tracer_class = CompiledTracer
    records_inactive = True

    def __init__(self, snapshot):
        super().__init__()
        self.steps: list[tuple] = []
        self.guards: dict[int, tuple] = {}      # slot -> ("truth", bool) | ("equal", value)
        self.snapshot = snapshot                # baked constants: copied, unless watched
        self.inline: set[int] = set()           # steps whose rule is written out inline
        self.saw_nested = False                 # a differentiation opened inside the function
        self.values: dict[int, tuple] = {}      # slot -> (type, shape, dtype) of its value

    # -- leaves ------------------------------------------------------------------------------
    def new_leaf(self, value, nondiff=False) -> CompiledTracer:
        slot = self.n_slots
        self.n_slots = slot + 1
        self.values[slot] = _describe(value)
        return CompiledTracer(value, self, slot, nondiff)

    def constant(self, value) -> CompiledTracer:
        """A fresh buffer (np.zeros_like): each replay starts from a copy of this one."""
        t = self._add_step((FRESH, None, None, (), (self.snapshot(value),), None), [value],
                           False)[0]
        t.owned = True
        return t

    # -- steps -------------------------------------------------------------------------------
    def _add_step(self, step, outs, nondiff):
        first = self.n_slots
        self.n_slots = first + len(outs)
        slots = tuple(range(first, first + len(outs)))
        self.steps.append(step + (slots,))
        for o, s in zip(outs, slots):
            self.values[s] = _describe(o)
        return [CompiledTracer(o, self, s, nondiff) for o, s in zip(outs, slots)]

    def process(self, prim, args, params):
        vals, ins, active = [], [], []
        for a in args:
            if isinstance(a, Tracer):
                if a.level is not self:
                    raise Uncompilable("a traced value of another differentiation reached "
                                       f"`{prim.name}`")
                a.owned = False
                vals.append(a._v)
                ins.append(a.slot)
                active.append(not a.nondiff)
            else:
                vals.append(a)
                ins.append(None)
                active.append(False)
        consts = tuple(None if s is not None else self.snapshot(v) for v, s in zip(vals, ins))
        params, kept = self._parameters(params)
        if any(active):
            if prim.augmented_primal is None:
                raise NotImplementedError(f"`{prim.name}` has no reverse-mode rule")
            cfg = _REVERSE_CONFIGS[tuple(active)]
            out, _ = prim.augmented_primal(cfg, *vals, **params)
            step = (AUGMENTED, prim, cfg, tuple(ins), consts, kept)
            if (getattr(prim, "inline", ("",))[0] in INLINE_KINDS and not params
                    and _inlinable(vals, ins, out)):
                self.inline.add(len(self.steps))
        else:
            out = prim.impl(*vals, **params)
            step = (PLAIN, prim, None, tuple(ins), consts, kept)
        outs = list(out) if prim.multiple_results else [out]
        made = self._add_step(step, outs, not any(active))
        return tuple(made) if prim.multiple_results else made[0]

    def _parameters(self, params):
        """``(params for this call, params for the step)``. Traced values among the params
        (indices passed through `core.nondiff_value`) become holes of a `DynamicParams` that
        each replay fills from its slots."""
        if not params:
            return params, params
        found = []
        template = _template(params, self, found)
        if not found:
            return params, self.snapshot(params)
        for t in found:
            t.owned = False
        return (_fill(template, [t._v for t in found]),
                DynamicParams(self.snapshot(template), tuple(t.slot for t in found)))

    def call_inactive(self, fn, args, kwargs):
        """A `tape.inactive` function on values of this trace: a step whose results carry no
        derivative (arrays stay traced, Python values are guarded)."""
        if fn in _SHAPE_ONLY:   # shapes and dtypes are part of the signature: no step
            return fn(*[peek(a) for a in args], **kwargs)
        found = []
        template = _template((args, kwargs), self, found)
        if not found:   # no traced value anywhere in the arguments
            return fn(*args, **kwargs)
        plain = _fill(template, [t._v for t in found])
        out = fn(*plain[0], **plain[1])
        step = (INACTIVE, fn, None, tuple(t.slot for t in found),
                (self.snapshot(template),), None)
        if isinstance(out, tuple) and all(isinstance(o, np.ndarray) for o in out):
            return tuple(self._add_step(step, list(out), True))
        made = self._add_step(step, [out], True)[0]
        if isinstance(out, (np.ndarray, np.generic)):
            return made
        self.guard_value(made)    # a Python value (a bool from np.allclose, say)
        return out

    # -- guards ------------------------------------------------------------------------------
    def guard_value(self, t: CompiledTracer) -> None:
        if t.slot not in self.guards or self.guards[t.slot][0] != "equal":
            value = t._v
            self.guards[t.slot] = ("equal", value.copy() if isinstance(value, np.ndarray)
                                   else value)

    def guard_truth(self, t: CompiledTracer, decision: bool) -> None:
        self.guards.setdefault(t.slot, ("truth", decision))


_SHAPE_ONLY = {np.ndim, np.shape, np.size, np.result_type, np.iscomplexobj, np.isrealobj}


def _describe(value) -> tuple:
    return (type(value), getattr(value, "shape", None), getattr(value, "dtype", None))


_FLOAT_SCALARS = (np.float64, np.float32, np.float16)


def _inlinable(vals, ins, out) -> bool:
    """Whether an elementwise rule may be written out inline: real floating arrays (or NumPy
    float scalars) of the result's shape (nothing broadcast, so no cotangent needs summing
    down to an input's shape), or Python numbers that are constants of the program."""
    if (type(out) is not np.ndarray and type(out) not in _FLOAT_SCALARS) or out.dtype.kind != "f":
        return False
    for v, s in zip(vals, ins):
        if type(v) is np.ndarray or type(v) in _FLOAT_SCALARS:
            if v.shape != out.shape or v.dtype.kind != "f":
                return False
        elif s is not None or type(v) not in (float, int):
            return False
    return True


class DynamicParams:
    """A step's params with holes where traced values go (`template`), and their slots."""
    __slots__ = ("template", "slots")

    def __init__(self, template, slots):
        self.template = template
        self.slots = slots

    def __eq__(self, other):   # two traces of one call agree (tape.signature)
        return (type(other) is DynamicParams and other.slots == self.slots
                and same_value(self.template, other.template))

    __hash__ = None


def _param_slots(params) -> tuple:
    return params.slots if type(params) is DynamicParams else ()


class _Hole:
    """Where a traced value sits in the arguments of an inactive call."""
    __slots__ = ("k",)

    def __init__(self, k):
        self.k = k

    def __eq__(self, other):
        return type(other) is _Hole and other.k == self.k

    def __hash__(self):
        return self.k


def _template(obj, trace, found):
    if isinstance(obj, Tracer):
        if obj.level is not trace:
            raise Uncompilable("a traced value of another differentiation reached an inactive "
                               "function")
        found.append(obj)
        return _Hole(len(found) - 1)
    if type(obj) in (tuple, list):
        return type(obj)(_template(o, trace, found) for o in obj)
    if type(obj) is dict:
        return {k: _template(v, trace, found) for k, v in obj.items()}
    return obj


def _fill(template, values):
    if type(template) is _Hole:
        return values[template.k]
    if type(template) in (tuple, list):
        return type(template)(_fill(o, values) for o in template)
    if type(template) is dict:
        return {k: _fill(v, values) for k, v in template.items()}
    return template


# --------------------------------------------------------------------------------------------
# The program


def same_value(a, b) -> bool:
    """Whether a replayed value equals the traced one, for a guard: same type, dtype, shape
    and contents (NaNs equal)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            return False
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    try:
        return bool(a == b) or (a != a and b != b)
    except (TypeError, ValueError):
        return a is b


class Program:
    """The steps of one trace as one generated function ``run(leaves, seeds)``.

    - `leaf_slots`: the slots of the arguments' leaves, in order;
    - `result_slots`: the slots the caller reads back (the return value, buffers written);
    - `seed_slots`: slots that get a cotangent seed (an Active return, written buffers);
    - `grad_slots`: the leaves whose cotangents are returned.
    The function returns ``(values of result_slots, cotangents of grad_slots)``.
    """

    def __init__(self, trace: CompileTrace, leaf_slots, result_slots, seed_slots, grad_slots):
        if trace.saw_nested:
            raise Uncompilable("a differentiation inside the function (tape.checkpoint, a nested "
                               "autodiff) runs eagerly")
        self.steps = trace.steps
        self.guards = trace.guards
        self.inline = trace.inline
        self.values = trace.values
        _check_defined(self.steps, leaf_slots, result_slots, grad_slots)
        self.inplace = _all_float64(self.values, self.steps)
        self.scalar_slots = {s for s, (t, _, _) in self.values.items() if t is not np.ndarray}
        self.scatters = self._scatters() if self.inplace else {}
        nondiff = self._nondiff(trace, leaf_slots)
        useful = self._useful(seed_slots, nondiff)
        needed = self._needed(result_slots, useful)
        self.source, namespace = self._generate(trace, leaf_slots, result_slots, seed_slots,
                                                grad_slots, nondiff, useful, needed)
        self.n_steps = len(self.steps)
        self.n_kept = sum(needed)
        self.n_adjoint = sum(useful)
        exec(compile(self.source, "<hecate program>", "exec"), namespace)  # noqa: S102
        self.run = namespace["run"]
        self.steps = None   # what replay needs is in the generated function

    def _scatters(self) -> dict:
        """Steps whose reverse is written out by `AdjointWriter` rather than called: gathers
        with a fixed basic index (``x[0]``, ``x[1:3]``) from an array ("scatter": written into
        the array's cotangent) and sums in their own dtype whose cotangent only broadcasts
        back ("sum")."""
        found = {}
        for i, (kind, fn, cfg, ins, consts, params, outs) in enumerate(self.steps):
            rule = getattr(fn, "inline", None)
            if kind != AUGMENTED or type(params) is not dict or ins[0] is None:
                continue
            if (rule == ("scatter",) and params.keys() == {"index"}
                    and basic_index(params["index"]) and ins[0] not in self.scalar_slots):
                found[i] = "scatter"
            elif (rule == ("sum",) and params.get("dtype") is None
                  and type(params.get("axis")) is tuple and ins[0] not in self.scalar_slots
                  and (params.get("keepdims") is True or params["axis"] == tuple(
                      range(len(params["axis"]))))):
                found[i] = "sum"
        return found

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

    def _needed(self, result_slots, useful):
        """Per step: whether the primal part must run (its results are read, guarded, or
        needed by a reverse rule)."""
        live = set(result_slots) | set(self.guards)
        needed = [False] * len(self.steps)
        for i in range(len(self.steps) - 1, -1, -1):
            kind, fn, cfg, ins, consts, params, outs = self.steps[i]
            if useful[i] or any(o in live for o in outs):
                needed[i] = True
                live.update(s for s in ins if s is not None)
                live.update(_param_slots(params))
        return needed

    def _generate(self, trace, leaf_slots, result_slots, seed_slots, grad_slots, nondiff,
                  useful, needed):
        ns = {"GuardFailed": GuardFailed, "_same": same_value, "_add": add_or_none, "_call": _call,
              "_fill": _fill, "_iadd": iadd, "_zeros": np.zeros,
              "_full": np.full, "_broadcast_to": np.broadcast_to}
        lines = ["def run(leaves, seeds):"]
        names = ", ".join(f"v{s}" for s, _ in leaf_slots)
        lines.append(f"    {names}, = leaves" if leaf_slots else "    pass")

        names: dict[int, str] = {}
        counts: dict[str, int] = {}

        def const(value, hint="k"):
            name = names.get(id(value))
            if name is not None:
                return name
            hint = "".join(ch if ch.isalnum() else "_" for ch in hint)
            n = counts.get(hint, 0) + 1
            counts[hint] = n
            name = hint if n == 1 else f"{hint}{n}"
            while name in ns:
                name += "_"
            ns[name] = value
            names[id(value)] = name
            return name

        def guard(s):
            kind, value = self.guards[s]
            if kind == "truth":
                lines.append(f"    if bool(v{s}) is not {value}: raise GuardFailed({s})")
            else:
                lines.append(f"    if not _same(v{s}, {const(value)}): raise GuardFailed({s})")

        for s, _ in leaf_slots:
            if s in self.guards:
                guard(s)
        lines.append("    # primal")
        for i, (kind, fn, cfg, ins, consts, params, outs) in enumerate(self.steps):
            if not needed[i]:
                continue
            lhs = ", ".join(f"v{o}" for o in outs) + ("," if len(outs) == 1 and kind != FRESH
                                                      and _multiple(fn) else "")
            if kind == FRESH:
                lines.append(f"    v{outs[0]} = {const(consts[0], 'buffer')}.copy()")
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
                elif useful[i] and i not in self.scatters:
                    out = f"({lhs})" if fn.multiple_results else lhs
                    lines.append(f"    {out}, s{i} = {const(fn.augmented_primal, fn.name + '_aug')}"
                                 f"({const(cfg, 'cfg')}, {args}{kw})")
                else:
                    lines.append(f"    {lhs} = {const(fn.impl, fn.name + '_impl')}({args}{kw})")
            for o in outs:
                if o in self.guards:
                    guard(o)
        lines.append("    # adjoint")
        adjoint_start = len(lines)
        writer = AdjointWriter(lines, self.inplace, self.scalar_slots)
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
                for k, term, fresh in inline_terms(fn.inline, cfg.active, g, operand,
                                                   f"v{outs[0]}", const):
                    writer.add(ins[k], term, indent, may_be_none=False, fresh=fresh)
            elif self.scatters.get(i) == "scatter":
                writer.scatter(ins[0], g, const(params["index"], "index"),
                               self.values[ins[0]][1], indent)
            elif i in self.scatters:   # a sum: its cotangent broadcast back (full: a new array)
                shape = self.values[ins[0]][1]
                if len(params["axis"]) == len(shape) and not params["keepdims"]:
                    writer.add(ins[0], f"_full({shape!r}, {g})", indent, False, True)
                else:
                    writer.add(ins[0], f"_broadcast_to({g}, {shape!r})", indent, False, False)
            else:
                lines.append(f"{indent}g = {const(fn.reverse, fn.name + '_rev')}"
                             f"({const(cfg, 'cfg')}, s{i}, {g})")
                for k, (s, a) in enumerate(zip(ins, cfg.active)):
                    if a:
                        writer.add(s, f"g[{k}]", indent, may_be_none=True, fresh=False)
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
        return "\n".join(_release_dead_values(lines)) + "\n", ns

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


_VALUE = re.compile(r"\bv(\d+)\b")


def _release_dead_values(lines: list[str]) -> list[str]:
    """Drop each value right after the line that uses it last, as the eager sweep frees
    residuals as it goes: memory is reused rather than freshly mapped."""
    last = {}
    for n, line in enumerate(lines):
        for name in _VALUE.findall(line.split("#")[0]):
            last[name] = n
    after: dict[int, list[str]] = {}
    for name, n in last.items():
        if n > 1 and not lines[n].lstrip().startswith("return"):
            after.setdefault(n, []).append(name)
    out = []
    for n, line in enumerate(lines):
        out.append(line)
        if n in after:
            indent = line[:len(line) - len(line.lstrip())]
            out.append(indent + " = ".join(f"v{k}" for k in sorted(after[n], key=int))
                       + " = None")
    return out


def _multiple(fn) -> bool:
    return bool(getattr(fn, "multiple_results", False))


def _call(fn, filled):
    args, kwargs = filled
    return fn(*args, **kwargs)
