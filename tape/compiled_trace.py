"""One trace of a function for `tape.compile` (tape/compiled.py): its arguments as the traced
function sees them, the random generators it may draw from, and the memory check of a call's
arguments."""
from __future__ import annotations

import collections
import functools
import random
import threading

import numpy as np
from numpy.lib.array_utils import byte_bounds
from numpy.random import bit_generator as numpy_bit_generator

from .activities import Active, Const
from .aliasing import watch_arguments
from .api import _is_float, _reverse_argument, _seed_return, batch_width, guess_return
from .core import Tracer
from .errors import NonDifferentiableError
from .modifiers import is_complex
from .program import CompileTrace, GuardFailed, Uncompilable, same_value
from .pytree import flatten, unflatten
from .closure_watch import (_LIBRARIES, Snapshotter, _argument_classes, _rng_key, _shallow,
                            _watch, generator_state, set_generator_state)


def _containers(value, depth=0) -> list:
    """The lists, dicts, deques and sets in a Const argument, and the attribute dicts of the
    objects in it (`cfg.training = False`), four levels deep."""
    if depth > 4 or isinstance(value, (np.ndarray, str, bytes, int, float, complex)):
        return []
    if isinstance(value, dict):
        items, own = list(value.values()), [value]
    elif isinstance(value, (list, collections.deque, set)):
        items, own = list(value), [value]
    elif isinstance(value, tuple):
        items, own = list(value), []
    elif hasattr(value, "__dict__") and not isinstance(value, type) and \
            type(value).__module__.partition(".")[0] not in _LIBRARIES:
        items, own = list(vars(value).values()), [vars(value)]
    else:
        return []
    return own + [c for item in items for c in _containers(item, depth + 1)]


def trace_once(owner, annotated, names, watched, calls=None):
    """Trace `owner.f` once. The argument arrays are read-only while traced: a write the trace
    would not record (through `np.asarray(c)` or `tape.primal(x)`) raises instead of reaching
    the caller's array, and the call runs eagerly, which makes it once. `calls`
    (tape/user_calls.UserCalls): what user code returned in this call's earlier runs."""
    return with_read_only_arguments(_trace_once, owner, annotated, names, watched, calls)


def with_read_only_arguments(trace, owner, annotated, names, watched, calls):
    """``trace(owner, annotated, names, watched, read, calls)``, where ``read(x)`` makes an
    argument array read-only until the trace is over (see `trace_once`)."""
    frozen = []

    def read(x):
        if isinstance(x, np.ndarray) and x.flags.writeable:
            x.flags.writeable = False
            frozen.append(x)
        return x

    try:
        return trace(owner, annotated, names, watched, read, calls)
    finally:
        _thaw(frozen)


def float_leaf(trace, arg, i: int, x, read, leaf_slots: list, watched_leaves: list):
    """Leaf `i` of a differentiated argument that is a float: a differentiated input of the
    program, its array watched for writes through other names. Returns its tracer."""
    t = trace.new_leaf(read(x))
    leaf_slots.append((t.slot, False))
    arg.tracers.append(t)
    arg.first_slots.append(t.slot)
    if isinstance(x, np.ndarray):
        watched_leaves.append((functools.partial(arg.path, i), x, t))
    return t


def nondiff_leaf(trace, arg, i: int, x, read, leaf_slots: list) -> None:
    """Leaf `i` of a differentiated argument that is no float: an array (an index array or a
    mask beside the weights) is an input of the program, read at each call as a Const array
    is; anything else is passed as it is."""
    if isinstance(x, np.ndarray):
        t = trace.new_leaf(read(x), nondiff=True)
        t.const_argument = arg.path(i)
        leaf_slots.append((t.slot, True))
        arg.tracers.append(t)
    else:
        arg.tracers.append(x)
    arg.first_slots.append(None)


def _thaw(frozen: list) -> None:
    """Make the arrays writeable again. A view can be made writeable only once its base is,
    and the arguments may hold both in any order: repeat until every one is."""
    while frozen:
        left = []
        for x in frozen:
            try:
                x.flags.writeable = True
            except ValueError:
                left.append(x)
        if len(left) == len(frozen):
            raise RuntimeError("tape.compile could not make its arguments writeable again")
        frozen = left


def _trace_once(owner, annotated, names, watched, read, calls):
    if calls is not None:
        calls.rewind()
    width = batch_width(annotated, names)   # (a mismatch raises: the eager call says so)
    with _CallTrace(Snapshotter(watched), calls) as trace:
        call_args, groups, leaf_slots, watched_leaves = [], [], [], []
        for ann, name in zip(annotated, names):
            if type(ann) is Const:
                call_args.append(_const_argument(ann.val, trace, leaf_slots, name, read))
                continue
            arg = _reverse_argument(ann, name)
            for i, x in enumerate(arg.leaves):
                if _is_float(x):
                    float_leaf(trace, arg, i, x, read, leaf_slots, watched_leaves)
                else:
                    nondiff_leaf(trace, arg, i, x, read, leaf_slots)
            groups.append(arg)
            call_args.append(unflatten(arg.treedef, arg.tracers))
        # As in eager mode: after f writes an argument, reading the caller's array through
        # another name (a closure or global that is that array) raises.
        watch_arguments(watched_leaves)
        out = owner.f(*call_args)
        ret_active = guess_return(owner.ret_activity, out) is Active
        if ret_active:
            if isinstance(out, Tracer) and is_complex(out._v):
                raise Uncompilable("a complex result runs eagerly")
            # eager mode validates a value of Const arguments only and seeds nothing: read it
            # without the guard that reading a nondiff value records
            nondiff = isinstance(out, Tracer) and getattr(out, "nondiff", False)
            _seed_return(out._v if nondiff else out, trace, {}, width, owner.mode)
    return trace, leaf_slots, out, groups, ret_active


class _CallTrace(CompileTrace):
    """The trace of a call, which also refuses what eager mode refuses of a copy of a Const
    argument (`np.copy(c)`, `c.copy()`, and what is computed from it): eager mode makes such a
    copy a buffer of the differentiation, meant to be filled (tape/constbuffer.py), so that
    Python numbers from it raise there (`float(np.copy(c)[0])`). Here they stop the trace
    instead of being guarded, and the call runs eagerly, with eager mode's outcome. A copy
    of anything computed from a Const argument counts (eager mode decides by the array's
    type, a ConstBuffer for the argument and its views only): refusing more than eager mode
    does costs speed only."""

    def __init__(self, snapshot, calls=None):
        super().__init__(snapshot, calls)
        self.from_consts: set[int] = set()    # slots of values computed from Const arguments
        self.const_copies: set[int] = set()   # ... copies of them, and values computed from those

    def process(self, prim, args, params):
        ins = [a.slot for a in args if isinstance(a, Tracer) and a.level is self]
        out = super().process(prim, args, params)
        if self.from_consts and any(s in self.from_consts for s in ins):
            outs = [t.slot for t in (out if prim.multiple_results else (out,))]
            self.from_consts.update(outs)
            if prim.name == "copy" or any(s in self.const_copies for s in ins):
                self.const_copies.update(outs)
        return out

    def guard_value(self, t) -> None:
        if t.slot in self.const_copies:
            self.raised = True   # (if the function catches it, no program: it runs eagerly)
            raise NonDifferentiableError(
                "a plain value of a copy of a Const argument (or of something computed from "
                "one): eager mode makes such a copy a traced buffer, which gives none")
        super().guard_value(t)


def _const_argument(value, trace, leaf_slots, name, read):
    """A Const argument as the function sees it while traced: its arrays are nondiff values of
    the trace (so that each replay reads the new ones), its other leaves are as they are."""
    if type(value) is np.ndarray:
        t = trace.new_leaf(read(value), nondiff=True)
        t.const_argument = str(name)
        leaf_slots.append((t.slot, True))
        trace.from_consts.add(t.slot)
        return t
    leaves, td = flatten(value)
    if td is None or not any(isinstance(x, np.ndarray) for x in leaves):
        return value
    made = []
    for x in leaves:
        if isinstance(x, np.ndarray):
            t = trace.new_leaf(read(x), nondiff=True)
            t.const_argument = str(name)
            leaf_slots.append((t.slot, True))
            trace.from_consts.add(t.slot)
            made.append(t)
        else:
            made.append(x)
    return unflatten(td, made)


def const_leaves(value):
    if type(value) is np.ndarray:
        return [value]
    leaves, td = flatten(value)
    return [x for x in leaves if isinstance(x, np.ndarray)]


def program_leaves(annotated, names, argument, check_aliasing: bool) -> tuple:
    """``(groups, leaves, floats)`` of a call: the argument groups (`argument(ann, name)`,
    eager mode's), the program's leaves in order (Const arrays, then per differentiated
    argument its float leaves and its index or mask arrays), and per group the positions of
    its float leaves. With `check_aliasing` (the program writes an argument) a differentiated
    leaf that shares memory with another argument raises GuardFailed."""
    groups, leaves, floats, consts, differentiated = [], [], [], [], []
    for ann, name in zip(annotated, names):
        if type(ann) is Const:
            arrays = const_leaves(ann.val)
            leaves.extend(arrays)
            consts.extend(arrays)
            continue
        arg = argument(ann, name)
        positions = []
        for i, x in enumerate(arg.leaves):
            if _is_float(x):
                leaves.append(x)
                differentiated.append(x)
                positions.append(i)
            elif isinstance(x, np.ndarray):   # an index or a mask: read as a Const
                leaves.append(x)
                consts.append(x)
        groups.append(arg)
        floats.append(positions)
    if check_aliasing and aliased(differentiated, consts):
        raise GuardFailed("arguments share memory")
    return groups, leaves, floats


def aliased(written, consts) -> bool:
    """Whether an array the program may write or differentiate shares memory with another
    argument (Const arrays sharing memory among themselves are harmless). Byte bounds, as
    `np.may_share_memory`, in one sorted sweep instead of a test per pair."""
    spans = sorted((*byte_bounds(a), w) for arrays, w in ((written, True), (consts, False))
                   for a in arrays if isinstance(a, np.ndarray) and a.size)
    end_any = end_written = 0
    for lo, hi, w in spans:   # by start: an earlier span reaching past `lo` overlaps
        if lo < (end_any if w else end_written):
            return True
        end_any = max(end_any, hi)
        if w:
            end_written = max(end_written, hi)
    return False


RANDOM_DRAWS = ("the function draws random numbers (NumPy's global generator, a Generator it "
           "reads, a Generator it makes without a seed, or Python's random module); a replay "
           "would repeat the same draws, so each call runs eagerly")


class _EntropyDraws:
    """How many NumPy generators were seeded from the operating system's entropy so far.

    ``np.random.default_rng()`` (or ``RandomState()``, ``PCG64()``) made inside `f` is a new
    generator per call, out of reach of the watch; its draws are constants of the trace, and a
    confirming trace whose few draws happen to repeat (one stochastic-depth coin, a one-unit
    mask: about half the time) would confirm a program that then replays that draw forever.
    Such a seed is drawn by ``numpy.random.bit_generator.randbits``, looked up in that module
    at each call: wrapping it (once, calling the original) lets a trace see that it made one."""

    count = 0
    installed = False

    @classmethod
    def now(cls) -> int:
        if not cls.installed:
            cls.installed = True
            cls._install()
        return cls.count

    @classmethod
    def _install(cls) -> None:
        original = getattr(numpy_bit_generator, "randbits", None)
        if original is None or getattr(original, "counts_entropy", False):
            return   # another NumPy layout: only the generators the watch reaches are seen

        def randbits(k):
            cls.count += 1
            return original(k)
        randbits.counts_entropy = True
        numpy_bit_generator.randbits = randbits


class RandomStates:
    """The generators a trace may draw from: NumPy's global one, Python's `random`, and the
    Generators the function reaches (`watch`); whether a trace moved them, and their states
    before it (restored when the call then runs eagerly, so that it draws what eager would),
    with the other values the watch reaches (`before`: a closure counter, a list f appends
    to, restored too, so that the eager call changes them once)."""

    def __init__(self, f, annotated=()):
        self.watched, self.generators, self.before = _watch(f, _argument_classes(annotated))
        # The containers of Const arguments (a config dict, a list): a write into them is a
        # side effect a replay would not make, noted here and undone like the others.
        self.const_containers = [(i, c, _shallow(c)) for i, ann in enumerate(annotated)
                                 if type(ann) is Const for c in _containers(ann.val)]
        for _, c, _ in self.const_containers:
            self.before.container(c)
        self.states = [generator_state(g) for g in self.generators]
        self.numpy = np.random.get_state(legacy=False)
        self.python = random.getstate()
        self.entropy = _EntropyDraws.now()

    def drew(self) -> bool:
        numpy_state = np.random.get_state(legacy=False)
        return (_EntropyDraws.now() != self.entropy
                or not same_value(_rng_key(self.numpy), _rng_key(numpy_state))
                or random.getstate() != self.python
                or any(not same_value(generator_state(g), s)
                       for g, s in zip(self.generators, self.states)))

    def const_written(self) -> str | None:
        """Which Const argument the trace wrote into (None: none)."""
        for i, c, seen in self.const_containers:
            if _shallow(c) != seen:
                return f"its Const argument {i}"
        return None

    def restore(self) -> bool:
        """Put the generators and the watched values back; whether a watched value had
        changed (the trace ran code with side effects)."""
        # The process-wide generators are rewound only while this is the only thread: another
        # thread may have drawn from them during the trace, and rewinding would hand it the
        # same numbers again (the eager call then draws afresh, as any concurrent caller may).
        if threading.active_count() == 1:
            np.random.set_state(self.numpy)
            random.setstate(self.python)
        for g, s in zip(self.generators, self.states):
            set_generator_state(g, s)
        return self.before.restore()
