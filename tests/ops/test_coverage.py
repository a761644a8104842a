"""Every function of the issue's coverage table has a derivative rule, and non-differentiable
functions are registered inactive rather than silently returning zeros."""
import numpy as np
import pytest

import ops
from tape import Active, Reverse, autodiff
from tape.tracer import FUNCTION_RULES, UFUNC_RULES

UFUNCS = """add subtract multiply divide true_divide negative positive power float_power exp
exp2 expm1 log log2 log10 log1p sqrt cbrt square reciprocal absolute fabs sin cos tan arcsin
arccos arctan sinh cosh tanh arcsinh arccosh arctanh maximum minimum fmax fmin hypot arctan2
logaddexp logaddexp2 copysign matmul""".split()

FUNCTIONS = """clip where sum mean prod max min amax amin var std cumsum cumprod nansum nanmean
average ptp reshape transpose moveaxis swapaxes expand_dims squeeze broadcast_to concatenate
stack hstack vstack split flip roll repeat tile pad take take_along_axis triu tril diag
diagonal trace dot vdot inner outer tensordot einsum kron sort select""".split()

LINALG = "inv solve det slogdet cholesky eigh svd qr norm pinv lstsq matrix_power".split()

INACTIVE = "argmax argmin argsort nonzero".split()
INACTIVE_UFUNCS = "greater less equal floor ceil isnan".split()   # sign: z/|z| for complex


def _is_inactive(rule):
    return getattr(rule, "__hecate_inactive__", False)


@pytest.mark.parametrize("name", UFUNCS)
def test_ufunc_has_a_rule(name):
    rule = UFUNC_RULES.get(getattr(np, name))
    assert rule is not None and not _is_inactive(rule)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_function_has_a_rule(name):
    rule = FUNCTION_RULES.get(getattr(np, name))
    assert rule is not None and not _is_inactive(rule)


@pytest.mark.parametrize("name", LINALG)
def test_linalg_function_has_a_rule(name):
    rule = FUNCTION_RULES.get(getattr(np.linalg, name))
    assert rule is not None and not _is_inactive(rule)


@pytest.mark.parametrize("name", INACTIVE)
def test_selection_functions_are_inactive(name):
    assert _is_inactive(FUNCTION_RULES[getattr(np, name)])


@pytest.mark.parametrize("name", INACTIVE_UFUNCS)
def test_non_differentiable_ufuncs_are_inactive(name):
    assert _is_inactive(UFUNC_RULES[getattr(np, name)])


@pytest.mark.parametrize("name", ["logsumexp", "softmax", "log_softmax", "cross_entropy",
                                  "sigmoid", "softplus", "silu", "gelu", "layer_norm",
                                  "rms_norm"])
def test_fused_op_is_exported(name):
    assert callable(getattr(ops, name))


def test_more_differentiable_functions_than_hips_autograd():
    differentiable = [r for r in list(UFUNC_RULES.values()) + list(FUNCTION_RULES.values())
                      if not _is_inactive(r)]
    assert len(differentiable) > 115


def test_function_without_a_rule_raises_naming_it():
    with pytest.raises(NotImplementedError, match="numpy.histogram"):
        autodiff(Reverse, lambda x: np.sum(np.histogram(x)[0]), Active, Active(np.ones(3)))
