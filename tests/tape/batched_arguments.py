"""Arguments of the generated programs (tests/tape/test_compile_programs.py) in batch mode, for
the batched compile tests: every differentiated argument with W tangents or W shadows."""
import numpy as np

from tape import BatchDuplicated, Const

from test_compile_programs import SHAPE


def directions(rng, width, shape, dtype=np.float64) -> tuple:
    """W random directions of one shape (W Python floats for a Python float argument)."""
    if shape == ():
        return tuple(float(rng.normal()) for _ in range(width))
    return tuple(rng.normal(size=shape).astype(dtype) for _ in range(width))


def batched(rng, width, x):
    """`x` (an array, a float, a dict or a list of arrays) as BatchDuplicated with W
    directions in its own structure."""
    if isinstance(x, dict):
        per = [directions(rng, width, np.shape(v)) for v in x.values()]
        return BatchDuplicated(x, tuple(dict(zip(x, d)) for d in zip(*per)))
    if isinstance(x, list):
        per = [directions(rng, width, np.shape(v)) for v in x]
        return BatchDuplicated(x, tuple(list(d) for d in zip(*per)))
    return BatchDuplicated(x, directions(rng, width, np.shape(x)))


def program_args(spec, rng, scalar_activity=None) -> list:
    """The arguments (x, a, W, n, c, buf, p) of a generated program for one call: the
    differentiated ones batched with ``spec["width"]`` directions; `a`, when active, annotated
    by `scalar_activity` (Active in reverse mode) or batched (None)."""
    width = spec["width"]

    def batch(x):
        return batched(rng, width, x)
    a = (float(rng.uniform(-1.5, 1.5)) if spec["a_kind"] == "float"
         else rng.uniform(-1.5, 1.5, (4,)))
    W = rng.uniform(-1.0, 1.0, (4, 4))
    p = {"w": rng.uniform(-1, 1, (4,)), "b": rng.uniform(-1, 1, (3, 1))}
    if spec["p_kind"] == "list":
        p = [p["w"], p["b"]]
    active_a = batch(a) if scalar_activity is None else scalar_activity(a)
    return [batch(rng.uniform(-2.0, 2.0, SHAPE)),
            active_a if spec["a_active"] else Const(a),
            batch(W) if spec["W_active"] else Const(W),
            Const(np.array([int(rng.integers(0, 3))])),
            Const(float(rng.choice([-0.3, 0.0, 0.4]))),
            batch(rng.uniform(-1.0, 1.0, SHAPE)),
            batch(p)]
