"""Second-order examples for np.sign: constant for real input, ``z / |z|`` for complex input.
Merged into test_nested_every_op.EXAMPLES."""
import numpy as np

c3 = np.array([0.3 - 0.7j, -1.1 + 0.4j, 0.8 + 1.2j])

EXAMPLES = {
    "np.sign[complex]": (np.sign, (c3,)),
    "np.sign[complex, times z]": (lambda z: np.sign(z) * z * z, (c3,)),
    "np.sign[real]": (lambda x: np.sign(x) * x ** 3, (np.array([0.3, -0.7, 1.1]),)),
}
