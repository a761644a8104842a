"""Second-order examples for NumPy 2's contraction ufuncs (np.vecdot, np.matvec, np.vecmat),
broadcast stacks and complex operands included. Merged into test_nested_every_op.EXAMPLES."""
import numpy as np

M23 = np.array([[0.3, -0.7, 1.1], [1.5, 0.4, -0.9]])
N23 = np.array([[0.8, 1.3, -0.2], [-1.1, 0.6, 0.45]])
v3 = np.array([0.5, -1.2, 0.7])
c3 = np.array([0.3 + 0.8j, -0.7 + 0.2j, 1.1 - 0.5j])

EXAMPLES = {}
if hasattr(np, "matvec"):           # NumPy 2.2
    EXAMPLES.update({
        "np.vecdot": (lambda a, b: np.vecdot(a, b * a), (M23, N23)),
        "np.vecdot[complex, axis=0]": (lambda a, c: np.vecdot(a * c[:2, None], a, axis=0),
                                       (M23, c3)),
        "np.matvec": (lambda a, v: np.matvec(a * a, v * v[::-1]), (M23, v3)),
        "np.vecmat": (lambda v, a: np.vecmat(v[:2] * c3[:2], a * a), (v3, M23)),
    })
