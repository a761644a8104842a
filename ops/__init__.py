"""Differentiable NumPy: each primitive with its reverse (VJP) and forward (JVP) rule.

Importing this package fills the engine's dispatch tables; `import tape` does it for you.
"""
from . import creation, elementwise, inactive, indexing, reductions  # noqa: F401
