"""Second-order examples for arrays made from traced values: np.linspace, np.logspace and
np.geomspace with traced endpoints, np.meshgrid, np.full_like with a traced fill value, and
lists of traced values given to NumPy (np.array([...]) builds a stack; np.mean([...]) and the
other functions convert their list arguments first). Merged into
test_nested_every_op.EXAMPLES.

geomspace's endpoints share a sign and stay away from 0 (its derivative divides by them).
"""
import numpy as np

x3 = np.array([0.3, -0.7, 1.1])
y2 = np.array([1.2, 0.5])
s21 = np.array([[0.4], [-0.9]])


def _grid_product(x, y):
    a, b = np.meshgrid(x, y)
    return a * b + a ** 2


def _sparse_ij(x, y):
    a, b = np.meshgrid(x, y, indexing="ij", sparse=True)
    return np.sin(a) * b


def _written_list_buffer(x):
    out = np.zeros_like([x[0], 1.0, 2.0])   # a traced buffer, written below
    out[1:] = x[1:] * x[0]
    return out ** 2


EXAMPLES = {
    "np.broadcast_arrays": (lambda a, b: np.prod(np.broadcast_arrays(a, b), axis=0) * a,
                            (s21, x3)),
    "np.linspace": (lambda a, b: np.sin(np.linspace(a, b, 4)), (0.3, 1.7)),
    "np.linspace[broadcast endpoints, axis=1, no endpoint]": (
        lambda a, b: np.linspace(a, b, 3, endpoint=False, axis=1) ** 2, (s21, x3)),
    "np.linspace[retstep]": (lambda a, b: np.linspace(a, b, 5, retstep=True)[1] ** 3,
                             (0.3, 1.7)),
    "np.logspace": (lambda a, b: np.logspace(a, b, 4), (0.1, 0.9)),
    "np.logspace[traced base]": (lambda a, b, c: np.logspace(a, b, 3, base=c), (0.1, 0.9, 1.7)),
    "np.geomspace": (lambda a, b: np.geomspace(a, b, 4), (0.6, 2.3)),
    "np.geomspace[negative, axis=-1]": (
        lambda a, b: np.geomspace(-a, -b, 3, axis=-1), (np.array([0.6, 1.4]), 2.3)),
    "np.geomspace[complex]": (lambda a, b: np.real(np.geomspace(a + 0.5j, b - 1j, 3))
                              + np.imag(np.geomspace(a + 0.5j, b - 1j, 3)) ** 2, (0.7, 1.9)),
    "np.meshgrid": (_grid_product, (x3, y2)),
    "np.meshgrid[ij, sparse]": (_sparse_ij, (x3, y2)),
    "np.full_like[plain array, traced fill]": (lambda s: np.full_like(np.zeros(3), s * s),
                                               (0.7,)),
    "ndarray.astype[traced Python float]": (lambda s: np.asarray(s).astype(complex) ** 3,
                                            (0.7,)),
    "np.astype": (lambda x: np.astype(x * x, np.complex128, copy=False) ** 3, (x3,)),
    "np.stack[np.array of a nested mixed list]": (
        lambda x: np.array([[x[0], 1.0], (x[1] * x[2], 2)]) ** 2, (x3,)),
    "np.stack[nested lists]": (lambda x: np.stack([[x[0], 1.0], [2.0, x[1]]], axis=1) ** 2,
                               (x3,)),
    "np.concatenate[nested lists]": (lambda x: np.concatenate(([x[0], 1.0], x[1:])) ** 2,
                                     (x3,)),
    "np.mean[list of traced scalars]": (lambda x: np.mean([x[0], 2.0, x[1] * x[2]]) ** 2, (x3,)),
    "np.std[list]": (lambda x: np.std([x[0], 2.0, x[2]]), (x3,)),
    "np.linalg.norm[list]": (lambda x: np.linalg.norm([x[0], 2.0, x[1]]), (x3,)),
    "np.dot[lists]": (lambda x: np.dot([x[0], x[1]], [[1.0, x[2]], [2.0, 0.5]]) ** 2, (x3,)),
    "np.append[list]": (lambda x: np.append([x[0], 1.0], x[1:]) ** 2, (x3,)),
    "np.zeros_like[list, written]": (_written_list_buffer, (x3,)),
}
