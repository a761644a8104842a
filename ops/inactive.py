"""Functions whose result carries no derivative: shape queries, comparisons, rounding, argmax, ...

They are applied to the plain values under the tracers. Functions that *are* differentiable
never appear here: a missing rule raises NotImplementedError instead of returning zeros.
"""
from __future__ import annotations

import numpy as np

from tape.rules import inactive, register_function, register_ufunc

INACTIVE_FUNCTIONS = [
    np.ndim, np.shape, np.size, np.iscomplexobj, np.isrealobj, np.result_type,
    np.argmax, np.argmin, np.argsort, np.argwhere, np.nonzero, np.flatnonzero, np.count_nonzero,
    np.all, np.any, np.array_equal, np.allclose, np.isclose, np.searchsorted, np.digitize,
    np.round, np.around, np.fix, np.isposinf, np.isneginf, np.isreal, np.iscomplex,
    np.argpartition, np.lexsort, np.nanargmax, np.nanargmin, np.isin, np.array_equiv,
    np.shares_memory, np.may_share_memory, np.tril_indices_from, np.triu_indices_from,
    np.diag_indices_from,
]

INACTIVE_UFUNCS = [
    np.less, np.less_equal, np.greater, np.greater_equal, np.equal, np.not_equal,
    np.logical_and, np.logical_or, np.logical_xor, np.logical_not,
    np.isnan, np.isinf, np.isfinite, np.signbit, np.floor, np.ceil, np.trunc, np.rint,
    np.floor_divide, np.spacing, np.isnat, np.gcd, np.lcm, np.bitwise_and, np.bitwise_or,
    np.bitwise_xor, np.invert, np.left_shift, np.right_shift, np.bitwise_count,
]

for _fn in INACTIVE_FUNCTIONS:
    register_function(_fn, inactive(_fn))
for _uf in INACTIVE_UFUNCS:
    register_ufunc(_uf, inactive(_uf))
# np.sign is in ops.elementwise_more: constant for real input, z / |z| for complex input.
