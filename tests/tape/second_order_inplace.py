"""Second-order examples for the in-place functions of ops/indexing.py (np.put, np.place,
np.putmask, np.fill_diagonal, np.add.at, np.subtract.at), merged into test_nested_every_op.
Each writes into a copy, so the example stays a function of its arguments."""
import numpy as np

x5 = np.array([0.3, -0.7, 1.1, 0.5, -1.3])
v2 = np.array([0.8, -0.4])
M33 = np.array([[0.3, -0.7, 1.1], [1.5, 0.4, -0.9], [0.2, 0.6, -0.5]])
v3 = np.array([1.2, 0.5, -0.4])


def _written(write):
    def f(x, v):
        out = x.copy()
        write(out, v)
        return out * x
    return f


EXAMPLES = {
    "np.put": (_written(lambda a, v: np.put(a, [0, 3, 0], v)), (x5, v2)),
    "np.place": (_written(lambda a, v: np.place(a, x5 > 0, v)), (x5, v2)),
    "np.putmask": (_written(lambda a, v: np.putmask(a, x5 > 0, v)), (x5, v2)),
    "np.fill_diagonal": (_written(lambda a, v: np.fill_diagonal(a, v)), (M33, v3)),
    "ndarray.add.at": (_written(lambda a, v: np.add.at(a, [1, 1, 4], v[[0, 1, 0]] * v[0])),
                       (x5, v2)),
    "ndarray.subtract.at": (_written(lambda a, v: np.subtract.at(a, [2, 2], v * v)), (x5, v2)),
}
