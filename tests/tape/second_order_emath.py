"""Second-order examples for np.emath (numpy.lib.scimath): complex results outside the real
domain. Merged into test_nested_every_op.EXAMPLES."""
import numpy as np

mixed = np.array([-0.5, 0.3, 0.7])
beyond = np.array([-2.0, 1.5])

EXAMPLES = {
    "np.logn": (lambda x: np.emath.logn(3.0, x), (mixed,)),
    "np.logn[base]": (lambda x: np.emath.logn(x + 2.0, 5.0), (mixed,)),
    "np.sqrt[emath]": (np.emath.sqrt, (mixed,)),
    "np.arcsin[emath, beyond one]": (np.emath.arcsin, (beyond,)),
    "np.arccos[emath, beyond one]": (np.emath.arccos, (beyond,)),
    "np.power[emath]": (lambda x: np.emath.power(x, 3.0), (mixed,)),
}
