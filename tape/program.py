"""Trace once, then replay: the compiling trace and the straight-line program it produces.

`CompileTrace` runs the user's function once on tracers, as eager reverse mode does, but instead
of keeping residuals it writes down *steps*: which primitive ran on which slots with which
constants. Every value is a tracer here, Const arrays and the results of `tape.inactive`
functions too (those carry no derivative: `nondiff`). A Python decision on a value is a
*guard*: `bool(x)` of any value, and any read of a nondiff value's contents outside a
primitive (`int(n)`, an index taken from `argmax`, `tape.primal(c)`) records the value seen.
`Program` (tape/program_code.py) turns the steps into one generated Python function, primal
then adjoint, with dead code removed; replaying it checks each guard where its value is computed and raises
`GuardFailed` on a mismatch, before anything outside the program has been touched.

Nothing here runs while a program replays: no tracers, no protocol dispatch, no rule
look-up. See tape/compiled.py for the public `compile`.
"""
from __future__ import annotations

import contextlib
import warnings

import numpy as np

from .aliasing import refuse_stale_reads
from .batching import Batched
from .config import _REVERSE_CONFIGS
from .core import ReverseTrace, Tracer, peek
from .inactive_code import _read_only
from .program_adjoint import INLINE_KINDS
# The values of the trace; GuardFailed and Uncompilable are also imported from here.
from .program_tracer import CompiledTracer, GuardFailed, Uncompilable  # noqa: F401
from .residuals import operands
from .tracer import FUNCTION_RULES
from .views import _refuse_read_only_write

# Step kinds
AUGMENTED = "aug"     # a differentiated primitive: augmented_primal, and its reverse rule
PLAIN = "impl"        # a primitive on nondiff values only: its impl
INACTIVE = "inactive"  # a `tape.inactive` function (argmax, comparisons, ...)
FRESH = "fresh"       # a new buffer (np.zeros_like): a copy of the traced one
FORWARD = "fwd"       # a primitive with a tangent in (forward mode): its forward rule


class CompileTrace(ReverseTrace):
    """A reverse trace that writes down replayable steps instead of keeping residuals."""

    tracer_class = CompiledTracer
    records_inactive = True

    def __init__(self, snapshot, calls=None):
        super().__init__()
        # What user code returned in earlier runs of this call (tape/user_calls.UserCalls):
        # taken rather than run again, and this trace's own calls are noted there.
        self.calls = calls
        self.in_user_code = 0   # > 0 while a rule or an inactive function of the user's runs
        self.steps: list[tuple] = []
        self.guards: dict[int, tuple] = {}      # slot -> ("truth", bool) | ("equal", value)
        self.snapshot = snapshot                # baked constants: copied, unless watched
        self.inline: set[int] = set()           # steps whose rule is written out inline
        self.saw_nested = False                 # a differentiation opened inside the function
        self.raised = False                     # an operation raised (and f may catch it)
        self.inactive_slots: set[int] = set()   # results of inactive calls
        self.shapes_read: set[int] = set()      # ... whose shape Python read
        self.values: dict[int, tuple] = {}      # slot -> (type, shape, dtype) of its value
        # NumPy's error state and the warning filters when tracing began; a step run under
        # others (`with np.errstate(divide="raise")` inside the function) replays under them.
        self.entry_context = (np.geterr(), list(warnings.filters))
        self.contexts: dict[int, tuple] = {}    # step index -> (errstate, filters) to replay
        # What the steps of user code (a custom rule, an inactive function) returned while
        # traced: the call that traced answers with these rather than run them a second time
        # (such code may keep state, and eager mode runs it once).
        self.recorded: dict[int, object] = {}
        # Steps whose results may share memory with an operand (a NumPy view): a value the
        # caller gets back may be one of those operands' memory too (tape/program_cse.py).
        self.views: set[int] = set()

    @property
    def records_untraced(self) -> bool:
        """A user's rule on plain values is a step (`Primitive.__call__`), unless it is called
        by user code, whose own step runs it."""
        return not self.in_user_code

    def nested_opened(self):
        """A differentiation opens inside the function: stop tracing at once (the call runs
        eagerly), rather than trace the rest for nothing. Inside user code, which computes
        on plain values (a compiled function an inactive one calls), it is that code's own
        business, as in eager mode."""
        if self.in_user_code:
            return
        self.saw_nested = self.raised = True
        raise Uncompilable("a differentiation inside the function (tape.checkpoint, a nested "
                           "autodiff) runs eagerly")

    # -- leaves ------------------------------------------------------------------------------
    def new_leaf(self, value, nondiff=False) -> CompiledTracer:
        slot = self.n_slots
        self.n_slots = slot + 1
        self.values[slot] = _describe(value)
        return self.tracer_class(value, self, slot, nondiff)

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
        return [self.tracer_class(o, self, s, nondiff) for o, s in zip(outs, slots)]

    def process(self, prim, args, params):
        try:
            return self._process(prim, args, params)
        except Exception:
            self.raised = True   # if the function catches it, a replay cannot follow
            raise

    def _note_context(self) -> None:
        """Remember the error state and warning filters of the next step, where the function
        set its own (a replay runs under the caller's, as eager mode runs the sweep)."""
        errstate, filters = self.entry_context
        now_err, now_filters = np.geterr(), warnings.filters
        if now_err != errstate or now_filters != filters:
            self.contexts[len(self.steps)] = (
                now_err if now_err != errstate else None,
                list(now_filters) if now_filters != filters else None)

    def _process(self, prim, args, params):
        vals, ins, active, consts, params, kept = self._operands(prim, args, params)
        if any(active):
            if prim.augmented_primal is None:
                raise NotImplementedError(f"`{prim.name}` has no reverse-mode rule")
            cfg = _REVERSE_CONFIGS[tuple(active)]
            out, saved = (prim.augmented_primal(cfg, *vals, **params) if prim.pure
                          else self._user(prim.augmented_primal, (cfg, *vals), params))
            step = (AUGMENTED, prim, cfg, tuple(ins), consts, kept)
            if not prim.pure:
                self.recorded[len(self.steps)] = (out, saved)
            if (getattr(prim, "inline", ("",))[0] in INLINE_KINDS and not params
                    and _inlinable(vals, ins, out)):
                self.inline.add(len(self.steps))
        else:
            out = self._plain_step(prim, vals, params)
            step = (PLAIN, prim, None, tuple(ins), consts, kept)
        return self._made(prim, step, out, vals, not any(active))

    def _plain_step(self, prim, vals, params):
        """A primitive's impl on values none of which is differentiated (a PLAIN step)."""
        out = (prim.impl(*vals, **params) if prim.pure
               else self._user(prim.impl, tuple(vals), params))
        if not prim.pure:
            self.recorded[len(self.steps)] = (out, None)
        return out

    def _made(self, prim, step, out, vals, nondiff):
        """The tracers of a step's results (`out`), once the step is written down."""
        outs = list(out) if prim.multiple_results else [out]
        if _may_view(outs, vals):
            self.views.add(len(self.steps))
        made = self._add_step(step, outs, nondiff)
        return tuple(made) if prim.multiple_results else made[0]

    def _operands(self, prim, args, params):
        """``(values, slots, differentiated flags, constants, params for this call, params
        for the step)`` of a primitive's call on `args`."""
        self._note_context()
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
        if self.written_arguments:   # as eager mode: a stale read of a written argument raises
            # (every untraced array: arguments are read-only while traced, so `caller_arrays`
            # would leave them out)
            refuse_stale_reads(operands([v for v, s in zip(vals, ins) if s is None], params),
                               self.written_arguments)
        consts = tuple(None if s is not None else self.snapshot(v) for v, s in zip(vals, ins))
        params, kept = self._parameters(params)
        return vals, ins, active, consts, params, kept

    def _user(self, fn, args, kwargs, inactive=False):
        self.in_user_code += 1
        try:
            if self.calls is None:
                return fn(*args, **kwargs)
            if inactive:
                return self.calls.call_inactive(fn, args, kwargs)
            return self.calls.call(fn, args, kwargs)
        finally:
            self.in_user_code -= 1

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
        if not found and (self.in_user_code or not is_user_code(fn)):
            # NumPy's own function of constants: a constant of the program. (User code on
            # constants is a step all the same: each replay runs it, as eager mode does.)
            return fn(*args, **kwargs)
        # Read-only, as eager mode gives them (tape/inactive_code.py): a write by the function,
        # or into a result that is one of them, raises there, and so here.
        plain = _fill(template, [_read_only(t._v) for t in found])
        self._note_context()
        try:
            out = self._user(fn, plain[0], plain[1], inactive=True)
        except Exception:
            self.raised = True
            raise
        arrays = isinstance(out, tuple) and all(isinstance(o, np.ndarray) for o in out)
        outs = out if arrays else (out,)
        if arrays or isinstance(out, (np.ndarray, np.generic)):
            fn = _ShapeChecked(fn, tuple(np.shape(o) for o in outs), unpack=arrays)
        step = (INACTIVE, fn, None, tuple(t.slot for t in found),
                (self.snapshot(template),), None)
        self.recorded[len(self.steps)] = (out[0] if arrays and len(out) == 1 else out, None)
        if _may_view(outs, [t._v for t in found]):
            self.views.add(len(self.steps))
        if arrays:
            made = tuple(self._add_step(step, list(out), True))
            self.inactive_slots.update(t.slot for t in made)
            _refuse_writes_into_read_only(made, out)
            return made
        made = self._add_step(step, [out], True)[0]
        self.inactive_slots.add(made.slot)
        _refuse_writes_into_read_only((made,), (out,))
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


def is_user_code(fn) -> bool:
    """Whether `fn` may keep state: anything but NumPy's own ufuncs and functions (those the
    engine routes as inactive, such as comparisons and np.argmax), which are functions of their
    arguments and are run again freely."""
    if isinstance(fn, np.ufunc):
        return False
    try:
        return fn not in FUNCTION_RULES
    except TypeError:   # an unhashable callable object
        return True


_SHAPE_ONLY = {np.ndim, np.shape, np.size, np.result_type, np.iscomplexobj, np.isrealobj}


def _describe(value) -> tuple:
    return (type(value), getattr(value, "shape", None), getattr(value, "dtype", None))


def _may_view(outs, operands) -> bool:
    """Whether a result array may share memory with an operand array."""
    arrays = [v for v in operands if type(v) is np.ndarray]
    return any(type(o) is np.ndarray and np.may_share_memory(o, v) for o in outs for v in arrays)


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


@contextlib.contextmanager
def step_context(errstate, filters):
    """Run a replayed step under the error state / warning filters it was traced under."""
    with np.errstate(**(errstate or {})), warnings.catch_warnings():
        if filters is not None:
            warnings.filters[:] = filters
            getattr(warnings, "_filters_mutated", lambda: None)()
        yield


class _ShapeChecked:
    """An inactive function whose replayed array results must have the traced shapes: a
    shape that depends on the data (np.nonzero, np.unique) may have been read by Python
    (`len(idx)`), which took it as fixed. A tuple of arrays of length one is unpacked into its
    one slot, like longer tuples."""
    __slots__ = ("fn", "shapes", "unpack", "__name__")

    def __init__(self, fn, shapes, unpack):
        self.fn, self.shapes, self.unpack = fn, shapes, unpack
        self.__name__ = getattr(fn, "__name__", "inactive")

    def __call__(self, *args, **kwargs):
        return self.check(self.fn(*args, **kwargs))

    def check(self, out):
        """`out`, a result of `fn`, as the step gives it; GuardFailed when its shapes differ."""
        outs = out if self.unpack else (out,)
        if tuple(np.shape(o) for o in outs) != self.shapes:
            raise GuardFailed(f"the shape of a result of {self.__name__}")
        return outs[0] if self.unpack and len(outs) == 1 else out

    def __eq__(self, other):   # two traces of one call agree (tape.signature)
        return (type(other) is _ShapeChecked and other.fn is self.fn
                and other.shapes == self.shapes and other.unpack == self.unpack)

    def __hash__(self):
        return hash((id(self.fn), self.shapes))


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


def _same_signs(a, b) -> bool:
    """-0.0 == 0.0, but Python code may tell them apart (math.copysign, 1 / x, str)."""
    parts = (np.real, np.imag) if a.dtype.kind == "c" else (np.asarray,)
    return all(bool(np.array_equal(np.signbit(p(a)), np.signbit(p(b)))) for p in parts)


_UINTS = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def same_value(a, b) -> bool:
    """Whether a replayed value equals the traced one, for a guard: same type, dtype, shape
    and contents (NaNs equal)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            return False
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.dtype.kind == "O":   # an object array: its items, each compared as a value
            return all(same_value(x, y) for x, y in zip(a.ravel().tolist(), b.ravel().tolist()))
        if a.size <= 4096:
            if a.tobytes() == b.tobytes():
                return True   # the same bits (speed-up for the many small arrays a watch compares)
        elif a.dtype.kind == "f" and a.dtype.itemsize in _UINTS:
            # The same bits, read as unsigned integers (no copy): a large array from the
            # closure is compared at every call, and NaN-aware equality and signs cost 10x.
            uint = _UINTS[a.dtype.itemsize]
            if np.array_equal(a.view(uint), b.view(uint)):
                return True
        if not np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"):
            return False
        return a.dtype.kind not in "fc" or _same_signs(a, b)
    if type(a) is not type(b):
        return False
    if type(a) is Batched:   # batch mode's tangents (their `==` is elementwise, batched)
        return same_value(a.data, b.data)
    if isinstance(a, (float, complex, np.floating, np.complexfloating)):
        a, b = np.asarray(a), np.asarray(b)
        return bool(np.array_equal(a, b, equal_nan=True)) and _same_signs(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    try:
        return bool(a == b) or (a != a and b != b)
    except (TypeError, ValueError):
        return a is b


def _refuse_writes_into_read_only(made, outs) -> None:
    """An inactive function's read-only result (its argument handed back, which eager mode
    gives as a read-only view) refuses a write, as NumPy does in eager mode."""
    for t, o in zip(made, outs):
        if isinstance(o, np.ndarray) and not o.flags.writeable:
            t.write_guard = _refuse_read_only_write
