"""Property test of the engine as a whole: random straight-line NumPy programs mixing
elementwise ops, broadcasting, reductions, layout changes, reads and in-place writes are checked
against finite differences, forward and reverse, first and second order."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tape.testing import arrays, check_grads

# Each step maps (x, y) -> x', with x of shape (3, 4) and y of shape (4,) throughout.
STEPS = {
    "sin": lambda x, y: np.sin(x),
    "tanh_scaled": lambda x, y: np.tanh(0.5 * x),
    "mul_broadcast": lambda x, y: x * y,
    "add_broadcast": lambda x, y: x + y,
    "square_decay": lambda x, y: x * np.exp(-0.1 * x * x),
    "centre_rows": lambda x, y: x - x.mean(axis=1, keepdims=True),
    "normalise": lambda x, y: x / np.sqrt(1.0 + np.sum(x * x, axis=0)),
    "transpose_round_trip": lambda x, y: (x.T * 2.0).T,
    "reshape_round_trip": lambda x, y: np.reshape(np.reshape(x, (6, 2)) - 1.0, (3, 4)),
    "gather_rows": lambda x, y: x[[2, 0, 1]] + x[0],
    "matmul": lambda x, y: x @ np.outer(y, y) * 0.1,
    "write_row": None,        # in-place write into a zeros_like buffer, below
    "augmented_add": None,    # x += ..., on a private copy
}


def _write_row(x, y):
    out = np.zeros_like(x)
    out[1:] = x[:-1] * y
    out[0, ::2] = np.sin(x[2, ::2])
    return out


def _augmented_add(x, y):
    out = x.copy()
    out += np.tanh(y)
    out[:, 0] *= 2.0
    return out


STEPS["write_row"] = _write_row
STEPS["augmented_add"] = _augmented_add


@settings(max_examples=60, deadline=None)
@given(program=st.lists(st.sampled_from(sorted(STEPS)), min_size=1, max_size=4),
       x=arrays((3, 4), low=-1.5, high=1.5), y=arrays((4,), low=-1.5, high=1.5))
def test_random_program(program, x, y):
    def f(x, y):
        for name in program:
            x = STEPS[name](x, y)
        return x

    check_grads(f, x, y, rtol=1e-4, atol=1e-6)
