"""Second-order examples for ops/rearranging.py (merged into test_nested_every_op)."""
import numpy as np

_rng = np.random.default_rng(7)
x5 = np.array([0.3, -0.7, 1.1, 0.5, -1.3])
v2 = np.array([0.8, -0.4])
M34 = _rng.standard_normal((3, 4))
B22, C22 = _rng.standard_normal((2, 2)), _rng.standard_normal((2, 2))
w4 = np.array([0.7, 1.2, 0.9, 1.6])

EXAMPLES = {
    "np.delete": (lambda a: np.delete(a, [0, 2]) ** 2, (x5,)),
    "np.delete[axis]": (lambda a: np.delete(a, 1, axis=1) ** 2, (M34,)),
    "np.insert": (lambda a, b: np.insert(a, 1, b) ** 2, (x5, v2)),
    "np.insert[axis, broadcast]": (lambda a, b: np.insert(a, 2, b, axis=0) ** 2, (M34, w4)),
    "np.resize": (lambda a: np.resize(a, (3, 4)) ** 2, (x5,)),
    "np.compress": (lambda a: np.compress([True, False, True], a, axis=0) ** 2, (M34,)),
    "np.extract": (lambda a: np.extract(M34 > 0, a) ** 2, (M34,)),
    "np.trim_zeros": (lambda a: np.trim_zeros(a * np.array([0.0, 1, 1, 0, 0])) ** 2, (x5,)),
    "np.choose": (lambda a, b: np.choose([0, 1, 0, 1], [a, b]) ** 2, (w4, -w4)),
    "np.ediff1d": (lambda a, b: np.ediff1d(a, to_end=b) ** 2, (x5, v2)),
    "np.block": (lambda a, b: np.block([[a, b], [b, a]]) ** 2, (B22, C22)),
    "np.vander": (lambda a: np.vander(a, 3), (x5,)),
    "np.bincount": (lambda w: np.bincount(np.array([0, 2, 2, 1, 0]), w) ** 2, (x5,)),
    "np.cov": (np.cov, (M34,)),
    "np.cov[y, rowvar, weights]": (lambda a, b, w: np.cov(a, b, rowvar=False, aweights=w),
                                   (M34.T, _rng.standard_normal((4, 2)), w4)),
    "np.corrcoef": (np.corrcoef, (M34,)),
}
