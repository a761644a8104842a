"""Split mode inside a differentiated function: the cotangent seed (an Active result's `dret`,
or the shadow a Duplicated result is seeded through) may itself be traced, so a VJP is
differentiated with respect to its cotangent and its point, forward and reverse."""
import numpy as np
import pytest

from tape import (Active, Duplicated, ReverseSplitNoPrimal, ReverseSplitWithPrimal,
                  autodiff_thunk)
from tape.testing import check_grads

WEIGHTS = np.array([1.0, 3.0])


def _f(x):
    return np.sin(x) * x


def vjp_active_result(x, dy, mode=ReverseSplitWithPrimal):
    forward, reverse = autodiff_thunk(mode, _f, Active, Active)
    tape, _, _ = forward(Active(x))
    (dx,), = reverse(Active(x), dy, tape)
    return np.sum(dx * WEIGHTS)


def vjp_duplicated_result(x, dy):
    forward, reverse = autodiff_thunk(ReverseSplitWithPrimal, _f, Duplicated, Duplicated)
    dx = np.zeros_like(x)
    tape, _, shadow = forward(Duplicated(x, dx))
    shadow[...] = dy          # the seed is written into the result's shadow
    reverse(Duplicated(x, dx), tape)
    return np.sum(dx * WEIGHTS)


def vjp_scalar_seed(x, seed):
    forward, reverse = autodiff_thunk(ReverseSplitNoPrimal, lambda x: np.sum(_f(x)), Active,
                                      Active)
    tape, _, _ = forward(Active(x))
    (dx,), = reverse(Active(x), seed, tape)
    return np.sum(dx * WEIGHTS)


@pytest.mark.parametrize("vjp", [vjp_active_result, vjp_duplicated_result,
                                 lambda x, dy: vjp_active_result(x, dy, ReverseSplitNoPrimal)])
def test_vjp_differentiated_in_its_cotangent_and_point(vjp):
    x, dy = np.array([0.3, 0.5]), np.array([1.0, -2.0])
    # The VJP is linear in dy: its dy-gradient is the Jacobian applied to the weights.
    check_grads(vjp, x, dy, modes=("fwd", "rev"), order=1)


def test_scalar_seed_is_traced():
    check_grads(vjp_scalar_seed, np.array([0.3, 0.5]), 2.0, modes=("fwd", "rev"), order=1)
