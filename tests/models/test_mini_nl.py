"""The mini-NL chain (project -> delta-rule memory -> gate -> loss) against finite differences."""
import numpy as np
import pytest

from models.mini_nl import example_inputs, mini_nl_loss
from tape import Active, Const, Reverse, autodiff
from tape.testing import GradientCheckError, check_grads


@pytest.mark.parametrize("seed", [0, 1])
def test_mini_nl_matches_finite_differences(seed):
    # Two points; order 1 because the kernel pair is once differentiable.
    w_proj, w_gate, x, target = example_inputs(seed=seed)
    check_grads(lambda wp, wg: mini_nl_loss(wp, wg, x, target), w_proj, w_gate,
                modes=("fwd", "rev"), order=1)


def test_mini_nl_checker_catches_a_wrong_gradient():
    # The check above has teeth: adding a term whose reverse rule is wrong makes it fail.
    w_proj, w_gate, x, target = example_inputs(seed=0)
    (dp, _), = autodiff(Reverse, lambda wp, wg: mini_nl_loss(wp, wg, x, target), Active,
                        Active(w_proj), Active(w_gate))
    assert np.abs(dp).max() > 0
    with pytest.raises(GradientCheckError):
        check_grads(lambda wp: mini_nl_loss(wp, w_gate, x, target) + _wrong(wp), w_proj,
                    modes=("rev",), order=1)


def _wrong(wp):
    from tape import custom_rule

    # A deliberately wrong rule: forward sum(wp), reverse claims zero gradient.
    rule = custom_rule(lambda a: np.sum(a),
                       augmented_primal=lambda cfg, a: (np.sum(a), np.shape(a)),
                       reverse=lambda cfg, shape, g: (np.zeros(shape),), name="wrong_sum")
    return rule(wp)


def test_mini_nl_loss_is_const_in_data():
    w_proj, w_gate, x, target = example_inputs(seed=0)
    (_, _, dx, dt), = autodiff(Reverse, mini_nl_loss, Active, Active(w_proj), Active(w_gate),
                               Const(x), Const(target))
    assert dx is None and dt is None
