"""Errors raised by the engine. Each one says what was wrong and where."""


class HecateError(Exception):
    """Base class of the engine's own errors."""


class ActivityError(HecateError, TypeError):
    """A wrong activity annotation or a shadow that does not match its primal."""


class PytreeError(HecateError, TypeError):
    """An object inside an argument that the engine does not know how to traverse."""


class EscapedTracerError(HecateError, RuntimeError):
    """A traced value was used after the differentiation that created it had finished."""


class OnceDifferentiableError(HecateError, NotImplementedError):
    """A derivative of an opaque (once-differentiable) rule was requested."""

    def __init__(self, name: str):
        super().__init__(
            f"`{name}` is once differentiable: its rules are opaque kernels, so a second "
            "derivative (nested autodiff, hvp) through it is not available. Register a rule "
            "written with differentiable operations (differentiable_rules=True) to nest.")
        self.op = name


class NonDifferentiableError(HecateError, TypeError):
    """An operation without a derivative was applied to an active value in a way that would
    silently drop the derivative."""
