"""Second-order examples for ops/composites.py (merged into test_nested_every_op)."""
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

x5 = np.array([0.3, -0.7, 1.1, 0.5, -1.3])
M23 = np.array([[0.4, -1.2, 0.9], [1.5, 0.2, -0.6]])

EXAMPLES = {
    "ndarray.maximum.accumulate": (lambda a: np.maximum.accumulate(a * a), (x5,)),
    "ndarray.minimum.accumulate": (lambda a: np.minimum.accumulate(np.sin(a), axis=1), (M23,)),
    "np.apply_along_axis": (lambda a: np.apply_along_axis(lambda r: r * np.sum(r * r), 1, a),
                            (M23,)),
    "np.diagflat": (lambda a: np.diagflat(a * a, k=-1), (M23,)),
    "np.ix_": (lambda a: np.ix_(a * a, np.sin(a))[0] * np.ix_(a * a, np.sin(a))[1], (x5,)),
    "np.piecewise": (lambda a: np.piecewise(a, [a < 0], [lambda v: v ** 3, np.sin]), (x5,)),
    "np.sliding_window_view": (lambda a: sliding_window_view(a * a, 3) ** 2, (x5,)),
}
