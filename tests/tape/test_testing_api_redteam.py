"""Red-team tests of the gradient-testing API (`tape.testing`) and the Jacobian helpers
(`jacobian`, `hessian`, `gradient`, `onehot`), as users call them to test their own code: a
checker that passes a wrong derivative, or a Jacobian helper that returns a wrong one, is a
silent wrong value by proxy. Each test failed before the fix it guards."""
import numpy as np
import pytest

from tape import (ActivityError, Const, Forward, ForwardWithPrimal, Reverse, ReverseWithPrimal,
                  custom_rule, gradient, hessian, jacobian, onehot)
from tape.testing import GradientCheckError, arrays, check_grads, check_rule, traced_value

M = np.array([[0.3, -1.2, 0.5], [0.7, 0.2, -0.9]])


def _central_jacobian(f, x, h=1e-6):
    """d f / d x by central differences in float64, shaped f(x).shape + x.shape."""
    columns = []
    for j in range(x.size):
        e = np.zeros(x.size)
        e[j] = h
        e = e.reshape(x.shape)
        columns.append((np.asarray(f(x + e)) - np.asarray(f(x - e))) / (2 * h))
    out_shape = np.shape(f(x))
    return np.stack(columns, axis=-1).reshape(out_shape + x.shape)


# -- Jacobians of arrays that are not C-contiguous (a transpose, Fortran order) ---------------

def test_onehot_of_a_transposed_array_has_its_one():
    units = onehot(M.T)
    assert len(units) == M.size
    np.testing.assert_array_equal(np.stack(units).reshape(M.size, M.size), np.eye(M.size))


@pytest.mark.parametrize("mode", [Forward, Reverse], ids=["forward", "reverse"])
def test_jacobian_of_a_transposed_input_and_output(mode):
    def f(x):
        return np.sin(x).T * 2.0
    for x in (M, M.T, np.asfortranarray(M)):
        want = _central_jacobian(f, x)
        np.testing.assert_allclose(jacobian(mode, f, x)[0], want, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(jacobian(mode, f, x, chunk=2)[0], want, rtol=1e-6,
                                   atol=1e-8)


def test_forward_gradient_and_hessian_of_a_transposed_input():
    x = M.T
    np.testing.assert_allclose(gradient(Forward, lambda x: np.sum(x ** 3), x)[0], 3 * x ** 2)
    want = np.diag((6 * x).ravel()).reshape(x.shape + x.shape)
    np.testing.assert_allclose(hessian(lambda x: np.sum(x ** 3), x), want)


# -- checker options that made the check vacuous ----------------------------------------------

X = np.array([0.3, -1.2, 0.7])
Y = np.array([0.5, 0.9, -0.4])


def _sin_rule(reverse_scale=1.0, forward_scale=1.0):
    return custom_rule(np.sin, augmented_primal=lambda cfg, x: (np.sin(x), x),
                       reverse=lambda cfg, x, g: (reverse_scale * g * np.cos(x),),
                       forward=lambda cfg, p, t: (np.sin(p[0]),
                                                  forward_scale * t[0] * np.cos(p[0])),
                       name="my_sin")


@pytest.mark.parametrize("modes", [("reverse",), ("forward", "rev"), ()],
                         ids=["misspelt", "one misspelt", "empty"])
def test_a_misspelt_or_empty_mode_is_refused_not_passed(modes):
    wrong = _sin_rule(reverse_scale=-1.0, forward_scale=-1.0)
    with pytest.raises(ValueError, match="modes="):
        check_grads(wrong, X, modes=modes)
    with pytest.raises(ValueError, match="modes="):
        check_rule(wrong, X, modes=modes)


def test_a_mode_string_and_meaningless_options_are_refused():
    with pytest.raises(TypeError, match=r"modes=\('rev',\)"):
        check_rule(_sin_rule(), X, modes="rev")
    for options in ({"eps": 0.0}, {"eps": -1e-6}, {"rtol": -1.0}, {"atol": np.nan},
                    {"order": 0}):
        with pytest.raises(ValueError, match=next(iter(options))):
            check_grads(np.sin, X, **options)


# -- check_grads: Const arguments, results with nothing to compare, in-place functions ---------

def test_check_grads_holds_const_arguments_and_still_checks_the_others():
    check_grads(lambda x, y: np.sin(x) * y, X, Const(Y))
    wrong = _sin_rule(reverse_scale=1.5)
    with pytest.raises(GradientCheckError, match="argument 0 `x`"):
        check_grads(lambda x, y: wrong(x) * y, X, Const(Y), order=1)


def test_check_grads_refuses_a_function_that_returns_nothing():
    def writes_into(y, x):
        y[:] = np.sin(x)
    with pytest.raises(ValueError, match="returned None"):
        check_grads(writes_into, np.zeros(3), X)
    with pytest.raises(ValueError, match="no floating-point"):
        check_grads(lambda x: np.argmax(x), X)


def test_check_grads_of_a_function_that_writes_into_its_argument():
    def scale_in_place(y, x):
        y *= np.sin(x)
        return y
    y = np.array([1.0, 2.0, 3.0])
    check_grads(scale_in_place, y, X)
    np.testing.assert_array_equal(y, [1.0, 2.0, 3.0])   # the caller's array is left alone
    wrong = _sin_rule(forward_scale=1.5, reverse_scale=1.5)

    def wrong_in_place(y, x):
        y *= wrong(x)
        return y
    with pytest.raises(GradientCheckError, match="argument 1 `x`"):
        check_grads(wrong_in_place, y, X, order=1)


def test_a_pytree_leaf_is_named_by_its_path():
    wrong = _sin_rule(reverse_scale=-1.0)
    with pytest.raises(GradientCheckError, match=r"leaf p\['b'\]"):
        check_grads(lambda p: np.sum(np.sin(p["w"])) + wrong(p["b"]), {"w": X, "b": 0.4},
                    order=1, modes=("rev",))


# -- check_rule: float16, rules that modify what they saved ------------------------------------

def test_check_rule_refuses_float16_where_a_wrong_rule_passed():
    with pytest.raises(ValueError, match="float16.*float32"):
        check_rule(_sin_rule(reverse_scale=1.9, forward_scale=1.9), X.astype(np.float16))


def test_a_reverse_rule_that_modifies_its_residuals_is_caught():
    def reverse(cfg, cos_x, g):
        cos_x *= 2.0                 # a second sweep over the same tape sees 2 cos(x)
        return (g * cos_x / 2.0,)
    rule = custom_rule(np.sin, augmented_primal=lambda cfg, x: (np.sin(x), np.cos(x)),
                       reverse=reverse,
                       forward=lambda cfg, p, t: (np.sin(p[0]), t[0] * np.cos(p[0])))
    with pytest.raises(GradientCheckError, match="residuals"):
        check_rule(rule, X)


def test_a_reverse_rule_that_writes_into_its_saved_result_is_caught():
    def reverse(cfg, y, g):
        out = g * y
        y *= 0.0                     # y is the result the caller holds
        return (out,)
    rule = custom_rule(np.exp, augmented_primal=lambda cfg, x: (lambda y: (y, y))(np.exp(x)),
                       reverse=reverse,
                       forward=lambda cfg, p, t: (np.exp(p[0]), t[0] * np.exp(p[0])))
    with pytest.raises(GradientCheckError, match="wrote into the rule's result"):
        check_rule(rule, X)


# -- hypothesis strategies draw what they say -------------------------------------------------

def _draws(strategy, n=30):
    hypothesis = pytest.importorskip("hypothesis")
    drawn = []

    @hypothesis.settings(max_examples=n, database=None, derandomize=True, deadline=None)
    @hypothesis.given(strategy)
    def collect(value):
        drawn.append(value)
    collect()
    return drawn


def test_complex_arrays_have_imaginary_parts_in_the_bounds():
    pytest.importorskip("hypothesis")
    drawn = _draws(arrays((3,), dtype=np.complex128, low=-1.0, high=1.0))
    assert all(z.dtype == np.complex128 for z in drawn)
    assert any(np.any(z.imag != 0) for z in drawn)
    assert all(np.all(np.abs(z.real) <= 1.0) and np.all(np.abs(z.imag) <= 1.0) for z in drawn)


def test_integer_arrays_are_drawn_in_the_bounds():
    pytest.importorskip("hypothesis")
    drawn = _draws(arrays((4,), dtype=np.int64, low=-2.5, high=3.0))
    assert all(a.dtype == np.int64 and a.min() >= -2 and a.max() <= 3 for a in drawn)


# -- one wrong entry of a large array ---------------------------------------------------------

def _sin_rule_wrong_at_entry_0(where):
    def partial(x, here):
        d = np.cos(x)
        return d * np.where(np.arange(d.size) == 0, 2.0, 1.0) if here else d
    return custom_rule(np.sin, augmented_primal=lambda cfg, x: (np.sin(x), x),
                       reverse=lambda cfg, x, g: (g * partial(x, where == "rev"),),
                       forward=lambda cfg, p, t: (np.sin(p[0]),
                                                  t[0] * partial(p[0], where == "fwd")),
                       name="my_sin")


@pytest.mark.parametrize("where", ["rev", "fwd"])
def test_a_rule_wrong_at_one_entry_of_a_large_array_is_caught(where):
    # The tolerance of the projected comparison grew with the number of entries (the sum
    # of the terms' sizes): at 10^5 entries a derivative twice too large at one entry passed.
    x = np.random.default_rng(1).standard_normal(100_000)
    rule = _sin_rule_wrong_at_entry_0(where)
    with pytest.raises(GradientCheckError, match="argument 0 `x`"):
        check_grads(rule, x, modes=(where,), order=1)
    with pytest.raises(GradientCheckError, match="argument 0 `x`"):
        check_rule(rule, x, modes=(where,))
    check_grads(_sin_rule_wrong_at_entry_0("neither"), x, modes=(where,), order=1)


# -- jacobian's modes --------------------------------------------------------------------------

@pytest.mark.parametrize("mode", [ForwardWithPrimal, ReverseWithPrimal],
                         ids=["ForwardWithPrimal", "ReverseWithPrimal"])
def test_jacobian_with_primal_returns_the_primal_too(mode):
    # The WithPrimal part of the mode was ignored: the bare tuple of Jacobians came back.
    result = jacobian(mode, lambda x, c: np.sin(x) * c, X, Const(2.0))
    np.testing.assert_allclose(result.derivs[0], np.diag(2.0 * np.cos(X)))
    assert result.derivs[1] is None
    np.testing.assert_allclose(result.val, 2.0 * np.sin(X))


def test_a_mode_that_is_not_a_mode_is_named():
    with pytest.raises(ActivityError, match="the first argument is the mode"):
        jacobian("forward", np.sin, X)
    with pytest.raises(ActivityError, match="the first argument is the mode"):
        gradient("reverse", np.sum, X)


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_traced_value_takes_const_and_pytree_arguments(mode):
    # Both raised a TypeError / ValueError from deep inside NumPy.
    np.testing.assert_allclose(traced_value(lambda x, c: x * c, X, Const(2.0), mode=mode),
                               2.0 * X)
    np.testing.assert_allclose(traced_value(lambda p: p["w"] * p["b"], {"w": X, "b": 2.0},
                                            mode=mode), 2.0 * X)
