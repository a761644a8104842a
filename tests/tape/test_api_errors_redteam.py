"""Bad input at the public API: each error names the argument, leaf, shape or dtype at fault
and the fix, writes nothing into the caller's arrays, and is the same compiled and eager.

The strict xfails are the places that fall short today: a bare NumPy TypeError naming an
engine class, destinations written before a later one is refused, and messages that describe
the engine's internals (a "shadow") rather than the argument the caller passed.
"""
import re

import numpy as np
import pytest

import kernels
import tape
from tape import (Active, ActivityError, Const, Duplicated, Forward, Reverse,
                  ReverseSplitWithPrimal, autodiff, autodiff_thunk, checkpointed_scan,
                  gradient, hvp, hvp_, hvp_and_gradient_)

X = np.array([1.0, 2.0, 3.0])


def _error(call):
    """(type, message) of the exception `call()` raises."""
    with pytest.raises(Exception) as info:
        call()
    return type(info.value), str(info.value)


def _product(x, y):
    return np.sum(x * y)


def _sum_of_dict(d):
    return np.sum(d["a"] * d["b"])


def _sum_of_list(items):
    return np.sum(items[0] * items[1])


def _read_only():
    s = np.zeros(3)
    s.flags.writeable = False
    return s


# (function, activity types, arguments, what the message must contain)
_MISUSES = {
    "shadow shape": (_product, (Duplicated, Const),
                     lambda: (Duplicated(X.copy(), np.zeros(4)), Const(X)),
                     r"argument 0 \(`x`\) has shape \(4,\) but the primal has shape \(3,\)"),
    "shadow dtype": (_product, (Duplicated, Const),
                     lambda: (Duplicated(X.copy(), np.zeros(3, np.float32)), Const(X)),
                     r"argument 0 \(`x`\) has dtype float32 but the primal has dtype float64"),
    "shadow list": (_product, (Duplicated, Const),
                    lambda: (Duplicated(X.copy(), [0.0, 0.0, 0.0]), Const(X)),
                    r"argument 0 \(`x`\).*shadow list.*make_zero"),
    "dict key order": (_sum_of_dict, (Duplicated,),
                       lambda: (Duplicated({"a": X.copy(), "b": X.copy()},
                                           {"b": np.zeros(3), "a": np.zeros(3)}),),
                       r"another order, \['b', 'a'\].*\['a', 'b'\]"),
    "dict missing key": (_sum_of_dict, (Duplicated,),
                         lambda: (Duplicated({"a": X.copy(), "b": X.copy()},
                                             {"a": np.zeros(3)}),),
                         r"primal has keys \['a', 'b'\], the shadow keys \['a'\]"),
    "nested leaf shape": (_sum_of_dict, (Duplicated,),
                          lambda: (Duplicated({"a": X.copy(), "b": X.copy()},
                                              {"a": np.zeros(3), "b": np.zeros(2)}),),
                          r"d\['b'\] \(argument 0\) has shape \(2,\)"),
    "extra list item": (_sum_of_list, (Duplicated,),
                        lambda: (Duplicated([X.copy(), X.copy()], [np.zeros(3)] * 3),),
                        r"list of length 2, the shadow a list of length 3"),
    "tuple for list": (_sum_of_list, (Duplicated,),
                       lambda: (Duplicated([X.copy(), X.copy()],
                                           (np.zeros(3), np.zeros(3))),),
                       r"list of length 2, the shadow a tuple of length 2"),
    "read-only shadow": (_product, (Duplicated, Const),
                         lambda: (Duplicated(X.copy(), _read_only()), Const(X)),
                         r"argument 0 \(`x`\) is read-only.*np\.zeros_like"),
    "integer Active": (lambda x: np.sum(x * 2.0), (Active,),
                       lambda: (Active(np.arange(3)),),
                       r"argument 0 \(`x`\) is marked Active.*int64.*astype\(float\)"),
    "non-scalar Active return": (lambda x: x * 2.0, (Active,), lambda: (Active(X.copy()),),
                                 r"shape \(3,\).*Reduce it to a scalar"),
    "list of arrays returned": (lambda x: [x * 2.0, x * 3.0], (Active,),
                                lambda: (Active(X.copy()),), r"a list of 2 values.*jacobian"),
    "complex Active return": (lambda x: np.sum(x * (1 + 1j)), (Active,),
                              lambda: (Active(X.copy()),), r"ReverseHolomorphic"),
}


@pytest.mark.parametrize("case", sorted(_MISUSES))
def test_compiled_and_eager_refuse_alike_and_write_nothing(case):
    f, types, make_args, expected = _MISUSES[case]
    outcomes = []
    for run in (lambda args: tape.compile(Reverse, f, Active, *types)(*args),
                lambda args: autodiff(Reverse, f, Active, *args)):
        args = make_args()
        before = [(np.copy(a.val) if isinstance(a.val, np.ndarray) else None,
                   np.copy(a.dval) if isinstance(getattr(a, "dval", None), np.ndarray)
                   else None) for a in args]
        outcomes.append(_error(lambda: run(args)))
        for a, (val, dval) in zip(args, before):
            if val is not None:
                np.testing.assert_array_equal(a.val, val)
            if dval is not None:
                np.testing.assert_array_equal(a.dval, dval)
    (compiled_type, compiled_msg), (eager_type, eager_msg) = outcomes
    assert compiled_type is eager_type and issubclass(compiled_type, ActivityError)
    assert compiled_msg == eager_msg
    assert re.search(expected, compiled_msg), compiled_msg


def test_a_tape_from_another_thunk_or_a_wrong_seed_is_refused_before_any_write():
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, lambda a: np.sum(np.sin(a)), Active,
                              Duplicated)
    fwd2, _ = autodiff_thunk(ReverseSplitWithPrimal, lambda a: np.sum(np.cos(a)), Active,
                             Duplicated)
    dx = np.zeros(3)
    t, _, _ = fwd(Duplicated(X, dx))
    t2, _, _ = fwd2(Duplicated(X, np.zeros(3)))
    with pytest.raises(ActivityError, match="recorded by another autodiff_thunk"):
        rev(Duplicated(X, dx), 1.0, t2)
    with pytest.raises(ActivityError, match=r"seed has shape \(3,\) but the result has shape"):
        rev(Duplicated(X, dx), np.ones(3), t)
    np.testing.assert_array_equal(dx, 0.0)


def test_a_carry_changing_dtype_in_checkpointed_scan_names_the_step_and_the_fix():
    def loss(h):
        h, _ = checkpointed_scan(lambda c, x: (c.astype(np.float32), np.sum(c)), h,
                                 np.ones((4, 3)), every=2)
        return np.sum(h)
    with pytest.raises(TypeError, match=r"dtype of carry at step 0 from float64 to float32.*"
                                        r"astype"):
        autodiff(Reverse, loss, Active, Active(X))


# --------------------------------------------------------------------------------------------
# Findings


@pytest.mark.parametrize("compiled", [False, True])
def test_a_list_duplicated_times_a_const_array_is_differentiated_as_an_array(compiled):
    """NumPy makes an array of a list operand; so does Hecate, a list of traced values too:
    the gradient reaches the list shadow, in eager and compiled mode alike."""
    shadow = [0.0, 0.0, 0.0]
    args = (Duplicated([1.0, 2.0, 3.0], shadow), Const(X))
    if compiled:
        tape.compile(Reverse, _product, Active, Duplicated, Const)(*args)
    else:
        autodiff(Reverse, _product, Active, *args)
    np.testing.assert_allclose(shadow, X, rtol=1e-15)


def test_hvp_and_gradient_underscore_refusing_grad_leaves_res_untouched():
    res, grad = np.zeros(3), np.zeros(4)
    with pytest.raises(ActivityError, match=r"grad has shape \(4,\)"):
        hvp_and_gradient_(res, grad, lambda a: np.sum(a ** 3), X, X)
    np.testing.assert_array_equal(res, 0.0)


@pytest.mark.parametrize("res_b", [np.zeros(2), None], ids=["wrong shape", "missing"])
def test_hvp_underscore_refusing_one_leaf_writes_no_other(res_b):
    res = {"a": np.zeros(3)} if res_b is None else {"a": np.zeros(3), "b": res_b}
    with pytest.raises(ActivityError, match=r"res\['b'\]"):
        hvp_(res, lambda d: np.sum(d["a"] ** 3) + np.sum(d["b"] ** 3), {"a": X, "b": X},
             {"a": X, "b": X})
    np.testing.assert_array_equal(res["a"], 0.0)


@pytest.mark.parametrize("v", [np.ones(4), np.ones(3, int), [1.0, 1.0, 1.0]],
                         ids=["shape", "dtype", "type"])
def test_hvp_names_v_when_it_does_not_match_x(v):
    _, msg = _error(lambda: hvp(lambda a: np.sum(a ** 3), X, v))
    assert "`v`" in msg and "shadow" not in msg


def test_gradient_of_a_vector_names_gradient_and_jacobian_in_both_modes():
    msgs = [_error(lambda: gradient(m, lambda a: a * 2.0, X))[1] for m in (Reverse, Forward)]
    for msg in msgs:
        assert "gradient" in msg and "jacobian" in msg, msg


def test_compiled_arity_mismatch_names_the_activity_types():
    g = tape.compile(Reverse, _product, Active, Duplicated)   # one type short: y has none
    _, msg = _error(lambda: g(Duplicated(X.copy(), np.zeros(3)), Const(X)))
    assert "`y`" in msg and "return" in msg, msg


def test_compiled_call_with_too_few_arguments_names_the_missing_one_like_eager():
    g = tape.compile(Reverse, _product, Active, Duplicated, Const)
    _, compiled = _error(lambda: g(Duplicated(X.copy(), np.zeros(3))))
    _, eager = _error(lambda: autodiff(Reverse, _product, Active,
                                       Duplicated(X.copy(), np.zeros(3))))
    assert "'y'" in eager
    assert "`y`" in compiled or "'y'" in compiled, compiled


def test_compile_as_a_bare_decorator_shows_the_decorator_form():
    def f(x):
        return x
    _, msg = _error(lambda: tape.compile(f))
    assert "@compile(Reverse" in msg or "@tape.compile(Reverse" in msg, msg


@pytest.mark.parametrize("shadow", [np.zeros(4), np.zeros(3, np.float32)],
                         ids=["shape", "dtype"])
def test_shadow_shape_and_dtype_errors_give_the_fix(shadow):
    _, msg = _error(lambda: autodiff(Reverse, _product, Active, Duplicated(X.copy(), shadow),
                                     Const(X)))
    assert "make_zero" in msg or "zeros_like" in msg, msg


def test_delta_rule_given_a_list_gives_the_fix():
    rng = np.random.default_rng(0)
    k, v, q = rng.standard_normal((3, 5, 4))
    a, th, m0 = np.full(5, 0.1), np.full(5, 0.5), np.zeros((4, 4))
    _, msg = _error(lambda: kernels.delta_rule(k.tolist(), v, q, a, th, m0))
    assert "dtype None" not in msg and "np.asarray(k" in msg, msg
