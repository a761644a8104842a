"""Fused neural-network ops: primal against NumPy formulas, derivatives against finite
differences (forward and reverse, first and second order), the fused rules against the gradient
of the composite formula, stability at +-1000, and cross_entropy's ignore_index."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tape import Active, Duplicated, Forward, Reverse, ReverseWithPrimal, autodiff
from tape.testing import arrays, arrays_and_axes, check_grads, shapes

from ops.nn import (_softmax_augmented, cross_entropy, gelu, layer_norm, log_softmax, logsumexp,
                    rms_norm, sigmoid, silu, softmax, softplus)
from ops.special import erf, erfc, ndtr
from tape.core import config_for

FAST = settings(max_examples=15, deadline=None)


@st.composite
def array_and_axis(draw, min_dims=1):
    x = draw(arrays(shapes(min_dims=min_dims, max_dims=3)))
    return x, draw(st.integers(-x.ndim, x.ndim - 1))


def ref_logsumexp(x, axis=None, keepdims=False):
    return np.log(np.sum(np.exp(x), axis=axis, keepdims=keepdims))


def ref_softmax(x, axis):
    e = np.exp(x)
    return e / np.sum(e, axis=axis, keepdims=True)


# -- softmax family ---------------------------------------------------------------------------------
@FAST
@given(arrays_and_axes(min_dims=1), st.booleans())
def test_logsumexp(xa, keepdims):
    x, axis = xa
    f = lambda x: logsumexp(x, axis=axis, keepdims=keepdims)   # noqa: E731
    np.testing.assert_allclose(f(x), ref_logsumexp(x, axis, keepdims), rtol=1e-13,
                               atol=1e-14)
    assert np.shape(f(x)) == np.shape(ref_logsumexp(x, axis, keepdims))
    check_grads(f, x)


@FAST
@given(array_and_axis())
def test_softmax(xa):
    x, axis = xa
    np.testing.assert_allclose(softmax(x, axis), ref_softmax(x, axis), rtol=1e-13, atol=1e-15)
    check_grads(lambda x: softmax(x, axis), x)


@FAST
@given(array_and_axis())
def test_log_softmax(xa):
    x, axis = xa
    np.testing.assert_allclose(log_softmax(x, axis), np.log(ref_softmax(x, axis)), rtol=1e-12,
                               atol=1e-13)
    check_grads(lambda x: log_softmax(x, axis), x)


@pytest.mark.parametrize("row", [[np.inf, 0.0], [np.inf, np.inf], [-np.inf, 0.0],
                                 [-np.inf, -np.inf], [np.nan, 0.0], [1000.0, 0.0]])
def test_softmax_at_infinities_is_scipy_s(row):
    # A +inf entry makes the whole slice NaN (exp(x - max) / sum), not NaN beside zeros.
    special = pytest.importorskip("scipy.special")
    x = np.array([row, [1.0, 2.0]])
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(softmax(x, axis=1), special.softmax(x, axis=1),
                                   rtol=1e-15, atol=1e-300)
        assert softmax(x.astype(np.float32), axis=1).dtype == np.float32


def test_softmax_over_a_tuple_of_axes():
    x = np.random.default_rng(0).standard_normal((2, 3, 2))
    y = softmax(x, axis=(0, -1))
    np.testing.assert_allclose(np.sum(y, axis=(0, 2)), np.ones(3), atol=1e-12)
    check_grads(lambda x: softmax(x, axis=(0, -1)), x)


def test_softmax_saves_only_its_output():
    x = np.array([0.5, -1.0, 2.0])
    y, saved = _softmax_augmented(config_for((True,)), x, axis=(0,))
    assert saved[0] is y and not any(s is x for s in saved)


def test_logsumexp_of_an_all_minus_inf_slice_is_minus_inf():
    with np.errstate(divide="ignore"):
        out = logsumexp(np.array([[-np.inf, -np.inf], [0.0, -np.inf]]), axis=1)
    np.testing.assert_array_equal(out, [-np.inf, 0.0])


def test_bad_axis_raises():
    with pytest.raises(np.exceptions.AxisError):
        softmax(np.ones((2, 3)), axis=2)


# -- cross_entropy ---------------------------------------------------------------------------------
def ref_cross_entropy(logits, targets, axis, ignore_index, reduction):
    """Per position: logsumexp over classes minus the target's logit, by explicit loops."""
    x = np.moveaxis(logits, axis, -1)
    per = np.zeros(targets.shape)
    for pos in np.ndindex(targets.shape):
        t = targets[pos]
        if t != ignore_index:
            per[pos] = math.log(sum(math.exp(v) for v in x[pos])) - x[pos][t]
    if reduction == "none":
        return per
    if reduction == "sum":
        return per.sum()
    return per.sum() / np.sum(targets != ignore_index)


@st.composite
def ce_case(draw):
    logits = draw(arrays(shapes(min_dims=1, max_dims=3)))
    axis = draw(st.integers(-logits.ndim, logits.ndim - 1))
    n_classes = logits.shape[axis]
    t_shape = tuple(n for i, n in enumerate(logits.shape) if i != axis % logits.ndim)
    ignore_index = draw(st.sampled_from([-100, 0]))
    raw = draw(st.lists(st.integers(0, n_classes), min_size=math.prod(t_shape),
                        max_size=math.prod(t_shape)))
    # Value n_classes stands for "ignored"; keep at least one counted position.
    targets = np.array([ignore_index if v == n_classes else v for v in raw],
                       dtype=np.int64).reshape(t_shape)
    counted = [c for c in range(n_classes) if c != ignore_index]
    if counted and not np.any(targets != ignore_index):
        targets.flat[0] = counted[0]
    # 'mean' over no counted position is nan (tested separately).
    reduction = draw(st.sampled_from(["mean", "sum", "none"] if counted else ["sum", "none"]))
    return logits, targets, axis, ignore_index, reduction


@settings(max_examples=25, deadline=None)
@given(ce_case())
def test_cross_entropy(case):
    logits, targets, axis, ignore_index, reduction = case
    f = lambda x: cross_entropy(x, targets, axis, ignore_index, reduction)   # noqa: E731
    np.testing.assert_allclose(f(logits), ref_cross_entropy(logits, targets, axis, ignore_index,
                                                            reduction), rtol=1e-12, atol=1e-12)
    check_grads(f, logits)


def test_cross_entropy_ignored_rows_have_zero_loss_and_gradient():
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((4, 5))
    targets = np.array([2, -100, 4, -100])
    loss = cross_entropy(logits, targets)
    manual = np.mean([ref_logsumexp(logits[i]) - logits[i, targets[i]] for i in (0, 2)])
    np.testing.assert_allclose(loss, manual, rtol=1e-14, atol=1e-14)

    (g,), = autodiff(Reverse, lambda x: cross_entropy(x, targets), Active, Active(logits))
    assert np.all(g[[1, 3]] == 0)
    expected = ref_softmax(logits, -1) - np.eye(5)[np.where(targets < 0, 0, targets)]
    np.testing.assert_allclose(g[[0, 2]], expected[[0, 2]] / 2, rtol=1e-13, atol=1e-13)

    per = cross_entropy(logits, targets, reduction="none")
    assert per[1] == 0 and per[3] == 0


def test_cross_entropy_class_axis_first_and_all_ignored():
    logits = np.random.default_rng(2).standard_normal((3, 2, 2))
    targets = np.array([[0, 2], [1, -100]])
    per = cross_entropy(logits, targets, axis=0, reduction="none")
    np.testing.assert_allclose(per, ref_cross_entropy(logits, targets, 0, -100, "none"), atol=1e-12)
    with np.errstate(invalid="ignore"):
        assert np.isnan(cross_entropy(logits, np.full((2, 2), -100), axis=0))


def test_cross_entropy_rejects_bad_targets():
    with pytest.raises(IndexError):
        cross_entropy(np.zeros((2, 3)), np.array([0, 3]))
    with pytest.raises(TypeError):
        cross_entropy(np.zeros((2, 3)), np.array([0.0, 1.0]))
    with pytest.raises(ValueError):
        cross_entropy(np.zeros((2, 3)), np.array([0, 1, 2]))
    with pytest.raises(ValueError):
        cross_entropy(np.zeros((2, 3)), np.array([0, 1]), reduction="max")


# -- activations -----------------------------------------------------------------------------------
ACTIVATIONS = {
    "sigmoid": (sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    "softplus": (softplus, lambda x: np.log(1 + np.exp(x))),
    "silu": (silu, lambda x: x / (1 + np.exp(-x))),
    "gelu_tanh": (lambda x: gelu(x, approximate=True), lambda x: 0.5 * x * (
        1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))),
    "gelu": (gelu, lambda x: x * 0.5 * (1 + np.vectorize(math.erf)(x / np.sqrt(2)))),
    "erf": (erf, np.vectorize(math.erf)),
    "erfc": (erfc, np.vectorize(math.erfc)),
    "ndtr": (ndtr, lambda x: 0.5 * np.vectorize(math.erfc)(-x / np.sqrt(2))),
}


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
@settings(max_examples=8, deadline=None)
@given(x=arrays(shapes(max_dims=2), low=-4.0, high=4.0))
def test_activation(name, x):
    fused, reference = ACTIVATIONS[name]
    np.testing.assert_allclose(fused(x), reference(x), rtol=1e-13, atol=1e-15)
    check_grads(fused, x)


def test_activations_on_python_floats():
    (g,), = autodiff(Reverse, sigmoid, Active, Active(0.0))
    assert g == 0.25
    t, = autodiff(Forward, softplus, Duplicated(0.0, 1.0))
    assert t == 0.5


def test_erf_accuracy_against_math_erf():
    x = np.concatenate([np.linspace(-8, 8, 20001), np.geomspace(1e-300, 1.0, 300),
                        -np.geomspace(1e-300, 1.0, 300), [30.0, -30.0, np.inf, -np.inf]])
    ref = np.array([math.erf(v) for v in x])
    got = erf(x)
    assert np.max(np.abs(got - ref)) < 1e-15
    small = (np.abs(x) < 1) & (x != 0)
    assert np.max(np.abs(got - ref)[small] / np.abs(ref[small])) < 1e-15
    assert np.isnan(erf(np.array(np.nan)))
    # The normal CDF keeps its relative accuracy deep in the left tail.
    z = np.array([-10.0, -20.0, -37.0])
    ref_tail = np.array([0.5 * math.erfc(-v / math.sqrt(2)) for v in z])
    np.testing.assert_allclose(ndtr(z), ref_tail, rtol=1e-12)
    w = np.linspace(-6, 26, 3201)
    np.testing.assert_allclose(erfc(w), [math.erfc(v) for v in w], rtol=1e-12, atol=0)


# -- normalisations --------------------------------------------------------------------------------
def ref_layer_norm(x, w, b, axis, eps):
    mu = np.mean(x, axis=axis, keepdims=True)
    var = np.var(x, axis=axis, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


def ref_rms_norm(x, w, axis, eps):
    y = x / np.sqrt(np.mean(x * x, axis=axis, keepdims=True) + eps)
    return y * (1 if w is None else w)


@st.composite
def norm_case(draw):
    """x, axis (int or tuple) and parameter shapes that broadcast against x."""
    x = draw(arrays(shapes(min_dims=1, max_dims=3)))
    n = x.ndim
    axis = draw(st.sampled_from([-1, 0, tuple(range(n))] + ([(0, -1)] if n > 1 else [])))
    param_shape = draw(st.sampled_from([x.shape, x.shape[-1:], (1,) * n]))
    params = [draw(arrays(param_shape)) if draw(st.booleans()) else None for _ in range(2)]
    return x, axis, params[0], params[1]


@settings(max_examples=20, deadline=None)
@given(norm_case())
def test_layer_norm(case):
    x, axis, w, b = case
    eps = 0.1   # keeps derivatives of near-constant slices small enough for finite differences
    np.testing.assert_allclose(layer_norm(x, w, b, axis, eps), ref_layer_norm(x, w, b, axis, eps),
                               rtol=1e-12, atol=1e-12)
    live = [a for a in (x, w, b) if a is not None]
    check_grads(lambda *a: layer_norm(*_fill(a, w, b), axis=axis, eps=eps), *live)


@settings(max_examples=20, deadline=None)
@given(norm_case())
def test_rms_norm(case):
    x, axis, w, _ = case
    eps = 0.1
    np.testing.assert_allclose(rms_norm(x, w, axis, eps), ref_rms_norm(x, w, axis, eps),
                               rtol=1e-12, atol=1e-12)
    check_grads(lambda *a: rms_norm(*_fill(a, w, None)[:2], axis=axis, eps=eps),
                *[a for a in (x, w) if a is not None])


def _fill(live, w, b):
    """(x, w, b) from the differentiated arguments, with None where the parameter is absent."""
    it = iter(live)
    return next(it), (None if w is None else next(it)), (None if b is None else next(it))


def test_norms_with_default_eps_and_only_parameters_active():
    rng = np.random.default_rng(3)
    x, w, b = rng.standard_normal((3, 5)), rng.standard_normal(5), rng.standard_normal(5)
    check_grads(lambda x, w, b: layer_norm(x, w, b), x, w, b)
    check_grads(lambda w: layer_norm(x, w), w)
    check_grads(lambda b: layer_norm(x, None, b), b)
    check_grads(lambda x, w: rms_norm(x, w), x, w)
    with pytest.raises(ValueError):
        layer_norm(x, np.ones((2, 3, 5)))


def test_float32_stays_float32():
    x = np.random.default_rng(5).standard_normal((3, 4)).astype(np.float32)
    for f in (lambda x: logsumexp(x, axis=1), softmax, log_softmax, sigmoid, softplus, silu, gelu,
              lambda x: gelu(x, approximate=True), erf, layer_norm, rms_norm,
              lambda x: cross_entropy(x, np.array([0, 1, -100]))):
        (g,), out = autodiff(ReverseWithPrimal, lambda x: np.sum(f(x)), Active, Active(x))
        assert np.asarray(f(x)).dtype == np.float32 and g.dtype == np.float32
        assert np.asarray(out).dtype == np.float32


# -- stability at large |x| ------------------------------------------------------------------------
def test_stable_at_plus_minus_1000():
    big = np.array([1000.0, -1000.0])
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        np.testing.assert_array_equal(softplus(big), [1000.0, 0.0])
        np.testing.assert_array_equal(sigmoid(big), [1.0, 0.0])
        np.testing.assert_allclose(logsumexp(np.array([1000.0, 1000.0])), 1000 + np.log(2),
                                   atol=1e-9)
        np.testing.assert_allclose(logsumexp(np.array([-1000.0, -1000.0])), -1000 + np.log(2),
                                   atol=1e-9)
        np.testing.assert_allclose(log_softmax(big), [0.0, -2000.0], atol=1e-9)
        np.testing.assert_array_equal(softmax(big), [1.0, 0.0])
        np.testing.assert_allclose(cross_entropy(big[None], np.array([1])), 2000.0, atol=1e-9)
        np.testing.assert_array_equal(gelu(big), [1000.0, 0.0])
        np.testing.assert_array_equal(silu(big), [1000.0, 0.0])

        def grad(f, x):
            (g,), = autodiff(Reverse, lambda x: np.sum(f(x)), Active, Active(x))
            return g
        np.testing.assert_array_equal(grad(softplus, big), [1.0, 0.0])
        np.testing.assert_array_equal(grad(sigmoid, big), [0.0, 0.0])
        np.testing.assert_allclose(grad(logsumexp, np.array([1000.0, 1000.0])), [0.5, 0.5],
                                   atol=1e-12)
        np.testing.assert_allclose(grad(lambda x: log_softmax(x)[0], big), [0.0, 0.0], atol=1e-12)
        np.testing.assert_allclose(grad(lambda x: cross_entropy(x[None], np.array([1])), big),
                                   [1.0, -1.0], atol=1e-12)
        for f in (gelu, silu, lambda x: gelu(x, approximate=True)):
            np.testing.assert_array_equal(grad(f, big), [1.0, 0.0])


# -- fused rules against the composite formula --------------------------------------------------------
def composite_cross_entropy(x, targets):
    onehot = np.eye(x.shape[-1])[targets]
    lse = np.log(np.sum(np.exp(x), axis=-1))
    return np.sum(lse - np.sum(x * onehot, axis=-1)) / x.shape[0]


def composite_layer_norm(x, w, b):
    n = x.shape[-1]
    c = x - np.sum(x, axis=-1, keepdims=True) / n
    return c / np.sqrt(np.sum(c * c, axis=-1, keepdims=True) / n + 1e-5) * w + b


COMPOSITES = [
    (lambda x: logsumexp(x, axis=-1), lambda x: np.log(np.sum(np.exp(x), axis=-1))),
    (softmax, lambda x: np.exp(x) / np.sum(np.exp(x), axis=-1, keepdims=True)),
    (log_softmax, lambda x: x - np.log(np.sum(np.exp(x), axis=-1, keepdims=True))),
    (lambda x: cross_entropy(x, np.array([1, 0, 3])),
     lambda x: composite_cross_entropy(x, np.array([1, 0, 3]))),
    (sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    (softplus, lambda x: np.log(1 + np.exp(x))),
    (silu, lambda x: x / (1 + np.exp(-x))),
    (lambda x: gelu(x, approximate=True),
     lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))),
    (gelu, lambda x: 0.5 * x * (1 + erf(x / np.sqrt(2)))),
    (lambda x: layer_norm(x, np.arange(4.0), np.ones(4)),
     lambda x: composite_layer_norm(x, np.arange(4.0), np.ones(4))),
    (rms_norm, lambda x: x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) / 4 + 1e-6)),
]


@pytest.mark.parametrize("fused, composite", COMPOSITES)
def test_fused_rule_equals_gradient_of_composite(fused, composite):
    rng = np.random.default_rng(4)
    x, u, v = (rng.standard_normal((3, 4)) for _ in range(3))
    u = u if np.ndim(fused(x)) == 2 else rng.standard_normal(np.shape(fused(x)))

    def grad(f):
        def g(x):
            (gx,), = autodiff(Reverse, lambda x: np.sum(f(x) * u), Active, Active(x))
            return gx
        return g
    np.testing.assert_allclose(fused(x), composite(x), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(grad(fused)(x), grad(composite)(x), rtol=1e-11, atol=1e-13)
    # Second order: the Hessian-vector product, forward over reverse.
    hv_fused, = autodiff(Forward, grad(fused), Duplicated(x, v))
    hv_comp, = autodiff(Forward, grad(composite), Duplicated(x, v))
    np.testing.assert_allclose(hv_fused, hv_comp, rtol=1e-10, atol=1e-12)
