"""Differentiable NumPy: each primitive with its reverse (VJP) and forward (JVP) rule.

Importing this package fills the engine's dispatch tables; `import tape` does it for you.
"""
from . import (contractions, creation, elementwise, inactive, indexing, linalg, nn,  # noqa: F401
               reductions, shape, sorting)
from .nn import (cross_entropy, gelu, layer_norm, log_softmax, logsumexp, rms_norm,  # noqa: F401
                 sigmoid, silu, softmax, softplus)
