"""What differentiation hands back is the caller's own: Active derivatives are separate,
writable arrays (a rule may give one cotangent to two operands, or a read-only broadcast), and
a forward-mode tangent of a new result is not the caller's tangent array (a rule may pass a
tangent through), so that scaling one gradient in place, or refilling one tangent buffer
direction after direction, changes nothing else. Eager and compiled alike."""
import numpy as np
import pytest

import tape
from tape import Active, Duplicated, Forward, ForwardWithPrimal, Reverse, autodiff

C = np.array([1.0, 2.0])

TWO_ARGUMENT_PROGRAMS = {
    "sum(x + y)": lambda x, y: np.sum(x + y),
    "sum(sin(x + y))": lambda x, y: np.sum(np.sin(x + y)),
    "c @ (x + y)": lambda x, y: C @ (x + y),
    "sum(concatenate)": lambda x, y: np.sum(np.concatenate([x, y])),
    "sum(x * y) at x = y": lambda x, y: np.sum(x * y),
}


def _callers(f):
    g = tape.compile(Reverse, f, Active, Active, Active)
    return {"eager": lambda x, y: autodiff(Reverse, f, Active, Active(x), Active(y)),
            "compiled": lambda x, y: g(Active(x), Active(y))}


@pytest.mark.parametrize("name", TWO_ARGUMENT_PROGRAMS)
@pytest.mark.parametrize("how", ["eager", "compiled"])
def test_clipping_one_gradient_in_place_leaves_the_other(name, how):
    f = TWO_ARGUMENT_PROGRAMS[name]
    x, y = np.array([0.3, 0.7]), np.array([0.3, 0.7])
    call = _callers(f)[how]
    for _ in range(2):   # the compiled program's first call traces, the second replays
        (gx, gy), = call(x, y)
        want = autodiff(Reverse, f, Active, Active(x), Active(y))[0][1].copy()
        for g in (gx, gy):   # an optimiser's in-place clipping, gradient by gradient
            g *= 0.5
        np.testing.assert_allclose(gy, 0.5 * want, rtol=1e-14)


def test_a_pytree_of_derivatives_holds_separate_arrays():
    f = lambda p: np.sum(p["a"] + p["b"])   # noqa: E731
    (d,), = autodiff(Reverse, f, Active, Active({"a": np.ones(3), "b": np.ones(3)}))
    assert not np.shares_memory(d["a"], d["b"])
    assert d["a"].flags.writeable and d["b"].flags.writeable


@pytest.mark.parametrize("mode", [Forward, ForwardWithPrimal])
@pytest.mark.parametrize("how", ["eager", "compiled"])
def test_jacobian_columns_from_one_refilled_tangent_buffer_stay_distinct(mode, how):
    """The tangent of x + 1.0 is x's tangent passed through; the result is new memory, so its
    tangent must be too."""
    f = lambda x: x + 1.0   # noqa: E731
    g = tape.compile(mode, f, Duplicated, Duplicated)
    x, t = np.array([1.0, 2.0]), np.zeros(2)
    columns = []
    for k in range(2):
        t[...] = 0.0
        t[k] = 1.0
        out = (autodiff(mode, f, Duplicated, Duplicated(x, t)) if how == "eager"
               else g(Duplicated(x, t)))
        columns.append(out[0])
    np.testing.assert_array_equal(np.array(columns), np.eye(2))


def test_a_view_result_keeps_the_view_of_its_tangent():
    """A result that is a view of the argument has the same view of the shadow as its
    tangent (as Enzyme): both alias what the caller passed."""
    x, t = np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.0, 0.0])
    (dy,) = autodiff(Forward, lambda v: v[1:], Duplicated, Duplicated(x, t))
    assert np.shares_memory(dy, t)
