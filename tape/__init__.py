"""Hecate's engine: reverse- and forward-mode AD of NumPy code with Enzyme's activities.

>>> from tape import autodiff, Reverse, Active
>>> autodiff(Reverse, lambda x: x**2, Active, Active(3.0))
((6.0,),)

The modules, in layers; each imports only from the layers before it (tests/test_layers.py
checks that there is no cycle):

1. ``activities``, ``errors`` (with ``library_calls``: which NumPy or SciPy function asked),
   ``config``: the annotations, the errors, the rule configs;
2. ``core``: tracers, primitives and the traces (record, then sweep), ``forward_trace``
   (dual numbers); ``backend``,
   ``pytree``, ``aliasing``, ``constbuffer``;
3. what a traced value can do: ``rule_tables`` (the rules ops/ registers), ``views``
   (NumPy's views), ``tracer`` (ndarray methods, NumPy protocols) with ``operators``,
   ``batching`` and ``batched_numpy`` (batched tangents), ``modifiers`` (strong zero, NaN checks), and
   ``rules`` / ``rule_calls`` / ``easy_rule`` (how the ops and users register theirs),
   ``inactive_code`` (`tape.inactive`);
4. eager mode, trace and sweep at once: ``arguments``, ``api`` (`autodiff`), ``split``
   (`autodiff_thunk`), ``checkpoint`` (with ``checkpoint_checks`` and ``checkpoint_digests``)
   and ``checkpointed_scan``, ``convenience`` and ``jacobians``, ``visualize``,
   ``testing`` (with ``finite_differences``, ``rule_check`` and ``check_parts``);
5. trace -> program -> replay: ``program`` (the compiling trace) and ``program_*`` (the
   generated program: adjoint, forward, CSE, the cut of long programs), ``signature`` (what a
   replay depends on), ``closure_watch`` (what the function reads besides its arguments),
   ``compiled`` and ``compiled_*`` (`tape.compile`);
6. this facade, which also loads the standard rules (the ``ops`` package, a layer above the
   engine) and ``tape.scipy`` (built on them).
"""
from .activities import (Active, Annotation, BatchDuplicated, BatchDuplicatedNoNeed, Const,
                         Duplicated, DuplicatedNoNeed, Forward, ForwardWithPrimal,
                         MixedDuplicated, Mode, Reverse, ReverseHolomorphic,
                         ReverseHolomorphicWithPrimal, ReverseSplitNoPrimal,
                         ReverseSplitWithPrimal, ReverseWithPrimal, clear_nan_check,
                         clear_runtime_activity, clear_strong_zero, set_nan_check,
                         set_runtime_activity, set_strong_zero)
from .allocator import keep_freed_memory
from .api import autodiff, make_zero
from .backend import array_module
from .core import Primitive, RuleConfig, Tracer, primal
from .errors import (ActivityError, EscapedTracerError, HecateError, NaNError,
                     NonDifferentiableError, OnceDifferentiableError, PytreeError, RuleError)
from .pytree import register_pytree, tree_map
from .rules import custom_rule, easy_rule, inactive, inactive_type
from .checkpoint import CheckpointError, checkpoint
from .checkpointed_scan import checkpointed_scan
from .split import SplitTape, TapeMutatedError, autodiff_thunk
from .compiled import CompiledFunction, CompileWarning, compile  # noqa: A001
from .visualize import GraphvizNotFound, record, show, to_dot
from .convenience import (GradientResult, gradient, gradient_, hessian, hvp, hvp_,
                          hvp_and_gradient_, jacobian, make_zero_, onehot)

# The engine never imports a rule; importing the package registers the NumPy ops.
import ops  # noqa: E402,F401

__all__ = [
    "Active", "Annotation", "Const", "Duplicated", "DuplicatedNoNeed", "Forward",
    "ForwardWithPrimal", "Mode", "Reverse", "ReverseWithPrimal", "autodiff", "make_zero",
    "BatchDuplicated", "BatchDuplicatedNoNeed", "MixedDuplicated", "ReverseHolomorphic",
    "ReverseHolomorphicWithPrimal", "ReverseSplitNoPrimal", "ReverseSplitWithPrimal",
    "set_strong_zero", "clear_strong_zero", "set_runtime_activity", "clear_runtime_activity",
    "set_nan_check", "clear_nan_check", "autodiff_thunk", "SplitTape", "TapeMutatedError",
    "GradientResult", "gradient", "gradient_", "hessian", "hvp", "hvp_", "hvp_and_gradient_",
    "jacobian", "make_zero_", "onehot",
    "array_module", "Primitive", "RuleConfig", "Tracer", "primal", "ActivityError",
    "EscapedTracerError", "HecateError", "NonDifferentiableError", "OnceDifferentiableError",
    "PytreeError", "NaNError", "register_pytree", "tree_map", "custom_rule", "inactive",
    "easy_rule", "inactive_type", "RuleError",
    "checkpoint", "checkpointed_scan", "CheckpointError",
    "show", "to_dot", "record", "GraphvizNotFound",
    "compile", "CompiledFunction", "CompileWarning", "keep_freed_memory",
]
