"""Differentiable NumPy: each primitive with its reverse (VJP) and forward (JVP) rule.

Importing this package fills the engine's dispatch tables; `import tape` does it for you.
"""
# Each module registers its own rules; a module that builds on another imports it (joining
# on shape, elementwise_more on elementwise, ...), never the other way round.
from . import (accumulate_logaddexp, averages, composites, contractions, creation,  # noqa: F401
               elementwise, elementwise_more, extrema, fft, histograms, inactive, indexing,
               joining, linalg, linalg_eig, linalg_factor, linalg_norms, linalg_svd, nn,
               numerical, rearranging, reductions, reductions_nan, scipy_special, segments,
               shape, sorting)
from .nn import (cross_entropy, gelu, layer_norm, log_softmax, logsumexp, rms_norm,  # noqa: F401
                 sigmoid, silu, softmax, softplus)
from . import lists  # noqa: E402,F401  (lists of traced values; last: it wraps the rules above)
from . import numpy_patch  # noqa: E402,F401  (installs lists' wrappers while tracing)
