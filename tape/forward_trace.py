"""Forward mode: dual numbers. Each traced value carries its tangent, and a primitive's JVP
rule pushes the tangents of its operands to its result at once (no tape)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .config import _FORWARD_CONFIGS
from .core import Primitive, Trace, Tracer, _has_tracer, bind, is_complex, peek, primal
from .errors import OnceDifferentiableError
from .aliasing import refuse_stale_reads
from .residuals import caller_arrays


class DualTracer(Tracer):
    __slots__ = ("tangent",)

    def __init__(self, value, trace, tangent):
        self.value = value
        self.level = trace
        self.tangent = tangent


class ForwardTrace(Trace):
    """Dual numbers: each value carries its tangent; JVP rules push tangents forward."""

    tracer_class = DualTracer   # replaced by the full ndarray surface in tape.tracer

    def __init__(self, **modifiers):
        super().__init__(**modifiers)
        if self.nan_check:
            # An instance attribute shadows the method, so unchecked traces pay nothing.
            self.process = Trace.hooks["nan_checked_process"](self, self.process)

    def new_leaf(self, value, tangent) -> DualTracer:
        return self.tracer_class(value, self, tangent)

    def _rules_run(self, mine) -> bool:
        return any(a.tangent is not None for a in mine)   # else the call goes past this level

    def constant(self, value) -> DualTracer:
        """A fresh buffer at this level that carries no derivative yet (np.zeros_like)."""
        t = self.new_leaf(value, None)
        t.owned = True
        return t

    def process(self, prim: Primitive, args: Sequence, params: dict):
        if self.written_arguments:
            refuse_stale_reads(caller_arrays([a for a in args if not isinstance(a, Tracer)],
                                             params), self.written_arguments)
        vals = list(args)
        tans = [None] * len(args)
        any_tangent = False
        for i, a in enumerate(args):
            if isinstance(a, Tracer) and a.level is self:
                vals[i] = a.value
                t = a.tangent
                tans[i] = t
                a.owned = False
                if t is not None:
                    any_tangent = True
        if not any_tangent:
            # Still a value of this level (a buffer made by np.zeros_like(x), say), so that a
            # later write of a differentiated value into it is recorded.
            out = bind(prim, vals, params)
            if prim.multiple_results:
                return tuple(self.tracer_class(o, self, None) for o in out)
            return self.tracer_class(out, self, None)
        if prim.forward is None:
            raise NotImplementedError(f"`{prim.name}` has no forward-mode (JVP) rule")
        if not prim.differentiable_rules and (_has_tracer(vals) or _has_tracer(tans)):
            raise OnceDifferentiableError(prim.name)
        cfg = _FORWARD_CONFIGS[tuple(t is not None for t in tans)]
        try:
            out, tangent = prim.forward(cfg, vals, tans, **params)
        except (TypeError, ValueError):
            # A rule that cannot take batched tangents runs once per direction (NumPy turns
            # some BatchingFallbacks into ValueErrors); a real error happens again there.
            out, tangent = Trace.hooks["forward_per_direction"](prim.forward, cfg, vals, tans,
                                                                params)
        if prim.multiple_results:
            return tuple(self.tracer_class(o, self, _complex_like(o, t, tans))
                         for o, t in zip(out, tangent))
        return self.tracer_class(out, self, _complex_like(out, tangent, tans))


def _complex_like(out, tangent, input_tangents=()):
    """A tangent in the result's dtype, where a rule passed an input's tangent through: complex
    for a complex result (``x + 0j``), and as wide as the result where a narrower input's went
    into a wider result (float32 ``x + np.arange(3)`` is float64, and so is its tangent). A
    narrow tangent no input had is the rule's own and is left for tape.testing to report."""
    if tangent is None:
        return tangent
    if is_complex(primal(out)) and not is_complex(primal(tangent)):
        tangent = tangent + 0j   # a weak Python complex keeps the precision (float32: complex64)
    wanted, got = getattr(peek(out), "dtype", None), getattr(peek(tangent), "dtype", None)
    if (wanted is not None and got is not None and wanted != got and wanted.kind == got.kind
            and wanted.kind in "fc" and wanted.itemsize > got.itemsize
            and any(_widened_dtype(t, got) for t in input_tangents)):
        tangent = tangent.astype(wanted)
    return tangent


def _widened_dtype(input_tangent, dtype) -> bool:
    """Whether an input's tangent has `dtype`, or becomes it as a complex result's tangent."""
    have = getattr(peek(input_tangent), "dtype", None) if input_tangent is not None else None
    return have is not None and (have == dtype or np.result_type(have, 1j) == dtype)
