"""Second-order examples for segment reductions (add/multiply.reduceat), scatter extrema
(maximum.at / minimum.at), weighted histograms (linear in the weights, here squared first)
polyder / polyint, np.unwrap and np.pad's statistic and ramp modes. Merged into test_nested_every_op.EXAMPLES.

Scattered values stay apart from each other and from the buffer's values (no ties), so each
position's winner does not change within a finite-difference step.
"""
import numpy as np

x6 = np.array([0.3, -0.7, 1.1, 2.0, 0.45, -1.3])
M63 = np.random.default_rng(11).standard_normal((6, 3))
buffer3 = np.array([0.1, 0.5, -0.3])
values4 = np.array([0.7, 0.2, 0.4, -1.0])
index4 = np.array([0, 1, 0, 2])

data9 = np.array([0.1, 0.4, 0.35, 0.8, 0.9, 0.55, 1.0, 0.0, 0.3])
w9 = np.array([0.5, -1.0, 0.3, 2.0, -0.1, 0.7, 1.1, -0.6, 0.2])
sample9 = np.random.default_rng(12).random((9, 2))
p4 = np.array([0.5, -1.2, 2.0, 0.3])


def _scatter(ufunc):
    def f(a, v):
        out = a * a
        ufunc.at(out, index4, v * v)
        return out
    return f


EXAMPLES = {
    "ndarray.add.reduceat": (lambda x: np.add.reduceat(x * x, [0, 2, 2, 5], axis=0), (M63,)),
    "ndarray.multiply.reduceat": (lambda x: np.multiply.reduceat(x, [0, 3, 1]), (x6,)),
    "ndarray.maximum.at": (_scatter(np.maximum), (buffer3, values4)),
    "ndarray.minimum.at": (_scatter(np.minimum), (buffer3, values4)),
    "np.histogram": (lambda w: np.histogram(data9, 3, (0, 1), weights=w * w)[0], (w9,)),
    "np.histogram[density, edges]": (
        lambda w: np.histogram(data9, [0.0, 0.3, 1.0], weights=w * w, density=True)[0], (w9,)),
    "np.histogramdd": (lambda w: np.histogramdd(sample9, (2, 3), weights=w * w)[0], (w9,)),
    "np.histogram2d": (lambda w: np.histogram2d(sample9[:, 0], sample9[:, 1], 2,
                                                weights=w * w, density=True)[0], (w9,)),
    "np.pad[maximum, stat_length]": (
        lambda x: np.pad(x * x, ((1, 2), (2, 0)), "maximum", stat_length=2), (M63,)),
    "np.pad[mean]": (lambda x: np.pad(x * x, 2, "mean", stat_length=((1, 3), (2, 2))), (M63,)),
    "np.pad[median]": (lambda x: np.pad(x * x, 1, "median", stat_length=3), (x6,)),
    "np.pad[linear_ramp]": (
        lambda x: np.pad(x * x, ((1, 2), (2, 1)), "linear_ramp", end_values=0.5), (M63,)),
    "np.unwrap": (lambda p: np.unwrap(p * p, axis=0), (M63 * 3.0,)),
    "np.polyder": (lambda p: np.polyder(p * p, 2), (p4,)),
    "np.polyint": (lambda p, k: np.polyint(p * p, 2, k=k * k), (p4, np.array([0.3, -0.8]))),
}
