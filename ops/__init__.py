"""Differentiable NumPy: each primitive with its reverse (VJP) and forward (JVP) rule.

Importing this package fills the engine's dispatch tables; `import tape` does it for you.
"""
from . import (contractions, creation, elementwise, fft, inactive, indexing, linalg,  # noqa: F401
               nn, numerical, rearranging, reductions, scipy_special, shape, sorting)
from .nn import (cross_entropy, gelu, layer_norm, log_softmax, logsumexp, rms_norm,  # noqa: F401
                 sigmoid, silu, softmax, softplus)
from . import lists  # noqa: E402,F401  (lists of traced values; last: it wraps the rules above)
