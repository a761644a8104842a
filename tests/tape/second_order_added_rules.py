"""Second-order examples for segment reductions (add/multiply.reduceat) and scatter extrema
(maximum.at / minimum.at). Merged into test_nested_every_op.EXAMPLES.

Scattered values stay apart from each other and from the buffer's values (no ties), so each
position's winner does not change within a finite-difference step.
"""
import numpy as np

from ops.segments import add_reduceat, multiply_reduceat

x6 = np.array([0.3, -0.7, 1.1, 2.0, 0.45, -1.3])
M63 = np.random.default_rng(11).standard_normal((6, 3))
buffer3 = np.array([0.1, 0.5, -0.3])
values4 = np.array([0.7, 0.2, 0.4, -1.0])
index4 = np.array([0, 1, 0, 2])


def _scatter(ufunc):
    def f(a, v):
        out = a * a
        ufunc.at(out, index4, v * v)
        return out
    return f


EXAMPLES = {
    "ndarray.add.reduceat": (lambda x: add_reduceat(x * x, [0, 2, 2, 5], axis=0), (M63,)),
    "ndarray.multiply.reduceat": (lambda x: multiply_reduceat(x, [0, 3, 1]), (x6,)),
    "ndarray.maximum.at": (_scatter(np.maximum), (buffer3, values4)),
    "ndarray.minimum.at": (_scatter(np.minimum), (buffer3, values4)),
}
