"""Machine-learning code written in plain NumPy by people who never heard of Hecate.

The programs (tests/tape/ml_programs.py) are compared, in float64, with plain NumPy for the
primal (value and dtype) and with central finite differences for the gradient, in every mode:
ReverseWithPrimal (Active, and Duplicated accumulating into a shadow that is not zero),
Forward along a direction, BatchDuplicated forward and reverse lanes, `tape.compile` of
Reverse and Forward called at changing points with changing Const data (other labels), each
call against eager autodiff and NumPy, and Hessian-vector products on the smooth ones. The
caller's arrays must come back unchanged. Then the idioms around them: max-pool ties and the
other kinks (every mode takes the same subgradient), float32 models with float64 data,
random draws under `tape.compile` (fresh per call, never a replayed draw), weights updated in
place between compiled calls, and `X.dot(W)`.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import tape
from tape import (Active, BatchDuplicated, Const, Duplicated, Forward, ForwardWithPrimal,
                  Reverse, ReverseWithPrimal, autodiff)
from tape.errors import TracerConversionError

from ml_programs import PROGRAMS


def _copy(c):
    return c.copy() if isinstance(c, np.ndarray) else c


def _consts(cs):
    return [Const(_copy(c)) for c in cs]


def _fd_gradient(f, x, consts, eps=1e-6):
    g = np.zeros_like(x)
    for i in range(x.size):
        step = np.zeros_like(x)
        step.flat[i] = eps * max(1.0, abs(x.flat[i]))
        g.flat[i] = (f(x + step, *map(_copy, consts))
                     - f(x - step, *map(_copy, consts))) / (2 * step.flat[i])
    return g


def _close(got, want, tol):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert np.all(np.isfinite(got)), got
    scale = max(1.0, float(np.max(np.abs(want))))
    assert np.max(np.abs(got - want)) <= tol * scale, (got, want)


def _program(name):
    f, x0, c0, x1, c1, smooth = PROGRAMS[name]
    return f, x0, c0, (x0 * 0.9 + 0.05 if x1 is None else x1), c1, smooth


NAMES = sorted(PROGRAMS)


@pytest.mark.parametrize("name", NAMES)
def test_reverse_against_numpy_and_finite_differences(name):
    f, x0, c0, _, _, _ = _program(name)
    want = f(x0.copy(), *map(_copy, c0))
    x, consts = x0.copy(), [_copy(c) for c in c0]
    (grad, *rest), value = autodiff(ReverseWithPrimal, f, Active, Active(x),
                                    *[Const(c) for c in consts])
    assert np.asarray(value).dtype == np.asarray(want).dtype
    np.testing.assert_allclose(value, want, rtol=1e-12, atol=1e-13)
    assert rest == [None] * len(c0)
    np.testing.assert_array_equal(x, x0)   # the caller's arrays are left as they were
    for c, before in zip(consts, c0):
        np.testing.assert_array_equal(c, before)
    fd = _fd_gradient(f, x0, c0)
    assert grad.dtype == x0.dtype
    _close(grad, fd, 1e-6)
    shadow = np.full_like(x0, 0.5)            # Duplicated adds into what the shadow holds
    autodiff(Reverse, f, Active, Duplicated(x0.copy(), shadow), *_consts(c0))
    _close(shadow - 0.5, fd, 1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_forward_and_batch_lanes(name):
    f, x0, c0, _, _, _ = _program(name)
    fd = _fd_gradient(f, x0, c0)
    rng = np.random.default_rng(1)
    v = rng.normal(size=x0.shape)
    tangent, value = autodiff(ForwardWithPrimal, f, Duplicated(x0.copy(), v.copy()), *_consts(c0))
    np.testing.assert_allclose(value, f(x0.copy(), *map(_copy, c0)), rtol=1e-12, atol=1e-13)
    _close(tangent, np.sum(fd * v), 1e-6)
    directions = tuple(rng.normal(size=x0.shape) for _ in range(3))
    (tangents,) = autodiff(Forward, f, BatchDuplicated(x0.copy(), directions), *_consts(c0))
    for t, d in zip(tangents, directions):
        _close(t, np.sum(fd * d), 1e-6)
    lanes = (np.zeros_like(x0), np.ones_like(x0))
    autodiff(Reverse, f, Active, BatchDuplicated(x0.copy(), lanes), *_consts(c0))
    _close(lanes[0], fd, 1e-6)
    _close(lanes[1] - 1, fd, 1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_compiled_calls_follow_new_points_and_new_data(name):
    f, x0, c0, x1, c1, _ = _program(name)
    rev = tape.compile(ReverseWithPrimal, f, Active, Active, *[Const] * len(c0))
    fwd = tape.compile(ForwardWithPrimal, f, Duplicated, Duplicated, *[Const] * len(c0))
    v = np.cos(np.arange(x0.size) + 0.5).reshape(x0.shape)
    for x, consts in ((x0, c0), (x1, c0), (x0, c1), (x1, c1), (x0, c0)):
        (grad, *_), value = rev(Active(x.copy()), *_consts(consts))
        (want_grad, *_), want = autodiff(ReverseWithPrimal, f, Active, Active(x.copy()),
                                         *_consts(consts))
        np.testing.assert_allclose(value, f(x.copy(), *map(_copy, consts)), rtol=1e-12,
                                   atol=1e-13)
        np.testing.assert_allclose(value, want, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(grad, want_grad, rtol=1e-10, atol=1e-12)
        tangent, value = fwd(Duplicated(x.copy(), v.copy()), *_consts(consts))
        want_tangent, want = autodiff(ForwardWithPrimal, f, Duplicated(x.copy(), v.copy()),
                                      *_consts(consts))
        np.testing.assert_allclose(value, want, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(tangent, want_tangent, rtol=1e-10, atol=1e-12)
    assert rev.stats.eager_calls == 0 and fwd.stats.eager_calls == 0


SMOOTH = [name for name in NAMES if PROGRAMS[name][5]]


@pytest.mark.parametrize("name", SMOOTH)
def test_hessian_vector_product(name):
    f, x0, c0, _, _, _ = _program(name)
    fx = lambda z: f(z, *map(_copy, c0))   # noqa: E731
    u = np.sin(np.arange(x0.size) + 1.0)
    grad = lambda z: tape.gradient(Reverse, fx, z)[0]   # noqa: E731
    want = (grad(x0 + 1e-5 * u) - grad(x0 - 1e-5 * u)) / 2e-5
    _close(tape.hvp(fx, x0.copy(), u), want, 1e-5)


@pytest.mark.parametrize("name", ["causal attention", "embeddings repeated", "gru preallocated",
                                  "cs231n manual backprop"])
def test_compiled_batch_lanes(name):
    f, x0, c0, x1, c1, _ = _program(name)
    rng = np.random.default_rng(3)
    directions = tuple(rng.normal(size=x0.shape) for _ in range(3))
    fwd = tape.compile(Forward, f, BatchDuplicated, BatchDuplicated, *[Const] * len(c0))
    rev = tape.compile(Reverse, f, Active, BatchDuplicated, *[Const] * len(c0))
    for x, consts in ((x0, c0), (x1, c1), (x0, c1)):
        (got,) = fwd(BatchDuplicated(x.copy(), directions), *_consts(consts))
        (want,) = autodiff(Forward, f, BatchDuplicated(x.copy(), directions), *_consts(consts))
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
        lanes = (np.zeros_like(x), np.full_like(x, 2.0))
        rev(BatchDuplicated(x.copy(), lanes), *_consts(consts))
        want_lanes = (np.zeros_like(x), np.full_like(x, 2.0))
        autodiff(Reverse, f, Active, BatchDuplicated(x.copy(), want_lanes), *_consts(consts))
        np.testing.assert_allclose(lanes, want_lanes, rtol=1e-10, atol=1e-12)


# -- kinks: every mode takes the same subgradient ---------------------------------------------
TIES = np.array([1.0, 1.0, 0.5, 2.0, 1.0, 1.0, 2.0, 0.3, 0.1, 0.2, 3.0, 3.0, 0.2, 0.1, 3.0, 3.0])
KINKS = {
    "max-pool ties": (lambda x: np.sum(x.reshape(2, 2, 2, 2).max(axis=(1, 3))
                                       * np.array([[1.0, 2.0], [3.0, 4.0]])),
                      [0.25, 0.25, 0, 1, 0.25, 0.25, 1, 0, 0, 1.5, 1, 1, 1.5, 0, 1, 1]),
    "global max ties": (lambda x: 2.0 * np.max(x), [0] * 10 + [0.5, 0.5, 0, 0, 0.5, 0.5]),
    "relu at 0, np.maximum": (lambda x: np.sum(np.maximum(0, x - 1.0)),
                              [.5, .5, 0, 1, .5, .5, 1, 0, 0, 0, 1, 1, 0, 0, 1, 1]),
    "relu at 0, x * (x > 0)": (lambda x: np.sum((x - 1.0) * ((x - 1.0) > 0)),
                               [0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 1, 1, 0, 0, 1, 1]),
    "clip at its bounds": (lambda x: np.sum(np.clip(x, 1.0, 2.0)),
                           [1, 1, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
    "top-3 by np.sort with ties": (lambda x: np.sum(np.sort(x)[-3:]), [0] * 11 + [1, 0, 0, 1, 1]),
}


@pytest.mark.parametrize("name", sorted(KINKS))
def test_kinks_take_one_subgradient_in_every_mode(name):
    f, want = KINKS[name]
    eye = np.eye(TIES.size)
    (grad,), = autodiff(Reverse, f, Active, Active(TIES.copy()))
    np.testing.assert_array_equal(grad, want)
    forward = [autodiff(Forward, f, Duplicated(TIES.copy(), e))[0] for e in eye]
    (batch,) = autodiff(Forward, f, BatchDuplicated(TIES.copy(), tuple(eye)))
    rev, fwd = tape.compile(Reverse, f, Active, Active), tape.compile(Forward, f, Duplicated,
                                                                       Duplicated)
    for got in (forward, batch, rev(Active(TIES.copy()))[0][0], rev(Active(TIES.copy()))[0][0],
                [fwd(Duplicated(TIES.copy(), e))[0] for e in eye]):
        np.testing.assert_array_equal(got, want)


# -- float32 models with float64 data: NumPy's result dtypes -----------------------------------
X64 = np.random.default_rng(5).normal(size=(4, 3))
FLOAT32 = {
    "float32 weights, float64 data": lambda w: np.sum(np.tanh(X64 @ w)),
    "float32 data": lambda w: np.sum(np.tanh(X64.astype(np.float32) @ w)),
    "np.float64 scalar": lambda w: np.sum(w * np.float64(0.5)),
    "Python float": lambda w: np.sum(w * 0.5 + 1.0),
    "integer array": lambda w: np.sum(w / np.arange(1, 4)),
    "mean, dtype=float64": lambda w: np.mean(w ** 2, dtype=np.float64),
    "sum / len": lambda w: np.sum(w) / len(w),
    "astype(float32) of float64": lambda w: np.sum((X64 @ w).astype(np.float32)),
    "0-d float64 array": lambda w: np.sum(w * np.array(2.0)),
    "where with a float64 scalar": lambda w: np.sum(np.where(w > 0, w, np.float64(0.01) * w)),
    "logsumexp": lambda w: np.log(np.sum(np.exp(w - np.max(w)))) + np.max(w),
    "std": lambda w: np.std(w),
    "solve": lambda w: np.sum(np.linalg.solve(np.eye(3, dtype=np.float32) * 2 + np.outer(w, w), w)),
}


@pytest.mark.parametrize("name", sorted(FLOAT32))
def test_float32_models_keep_numpys_dtypes(name):
    f = FLOAT32[name]
    w = np.array([0.3, -0.7, 0.5], dtype=np.float32)
    want = f(w.copy())
    (grad,), value = autodiff(ReverseWithPrimal, f, Active, Active(w.copy()))
    tangent, value_f = autodiff(ForwardWithPrimal, f, Duplicated(w.copy(), np.ones(3, np.float32)))
    (grad_c,), value_c = tape.compile(ReverseWithPrimal, f, Active, Active)(Active(w.copy()))
    for v in (value, value_f, value_c):
        assert np.asarray(v).dtype == np.asarray(want).dtype
        np.testing.assert_allclose(v, want, rtol=1e-6)
    assert grad.dtype == grad_c.dtype == np.float32
    np.testing.assert_array_equal(grad_c, grad)
    assert np.asarray(tangent).dtype == np.asarray(want).dtype
    np.testing.assert_allclose(tangent, np.sum(grad), rtol=1e-4, atol=1e-5)
    fd = _fd_gradient(lambda z: np.float64(f(z.astype(np.float32))), w.astype(np.float64), [],
                      eps=1e-3)
    np.testing.assert_allclose(grad, fd, rtol=2e-2, atol=2e-2)


# -- random draws under tape.compile: fresh per call, never a replayed draw --------------------
XR = np.random.default_rng(6).normal(size=(4, 3))
W_R = np.array([0.3, -0.2, 0.1])


def _stochastic_depth(w, X):
    if np.random.default_rng().random() < 0.5:   # a fresh, unseeded generator per call
        return np.sum(X @ w)
    return np.sum(np.tanh(X @ w) ** 2)


def _one_unit_dropout(w, X):
    keep = np.random.default_rng().random(1) > 0.5
    return np.sum(np.tanh(X @ w) ** 2 * keep)


DROPOUT_GENERATOR = np.random.default_rng(42)


def _dropout_generator(w, X):
    return np.sum((np.tanh(X @ w) * (DROPOUT_GENERATOR.random((4,)) > 0.5) / 0.5) ** 2)


def _dropout_legacy(w, X):
    return np.sum((np.tanh(X @ w) * (np.random.rand(4) < 0.5) / 0.5) ** 2)


@pytest.mark.parametrize("f", [_stochastic_depth, _one_unit_dropout, _dropout_generator,
                               _dropout_legacy], ids=lambda f: f.__name__)
@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_compiled_random_draws_are_never_replayed(f, mode):
    """Two traces whose few draws happen to agree (one coin: half the time) confirmed a program
    that replayed that draw at every later call; a generator made without a seed inside `f`
    is now seen at the first trace."""
    for attempt in range(8):   # each attempt had about one chance in two to replay a draw
        if mode == "reverse":
            g = tape.compile(Reverse, f, Active, Active, Const)
            call = lambda: g(Active(W_R.copy()), Const(XR))[0][0]   # noqa: E731
        else:
            g = tape.compile(Forward, f, Duplicated, Duplicated, Const)
            call = lambda: g(Duplicated(W_R.copy(), np.ones(3)), Const(XR))[0]   # noqa: E731
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(4):
                call()
        assert g.stats.hits == 0, g.stats
        assert g.stats.eager_calls >= 3
        assert any("random" in str(w.message) for w in caught)


def test_seeded_dropout_under_compile_matches_eager_call_by_call():
    g = tape.compile(ReverseWithPrimal, _dropout_legacy, Active, Active, Const)
    for seed in range(4):
        np.random.seed(seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", tape.CompileWarning)
            (grad, _), value = g(Active(W_R.copy()), Const(XR))
        np.random.seed(seed)
        (want_grad, _), want = autodiff(ReverseWithPrimal, _dropout_legacy, Active,
                                        Active(W_R.copy()), Const(XR))
        assert value == want
        np.testing.assert_array_equal(grad, want_grad)


# -- weights updated in place between compiled calls -------------------------------------------
class _Model:
    def __init__(self):
        rng = np.random.default_rng(7)
        self.params = {"W1": rng.normal(size=(4, 5)) * 0.5, "b1": np.zeros(5)}
        self.shift = np.zeros(5)
        self.temperature = 1.0

    def loss(self, W2, X, y):
        h = np.maximum(0, X @ self.params["W1"] + self.params["b1"] - self.shift)
        s = h @ W2 / self.temperature
        s = s - s.max(1, keepdims=True)
        return -(s - np.log(np.exp(s).sum(1, keepdims=True)))[np.arange(len(y)), y].mean()


def test_compiled_method_follows_its_models_updates():
    model, rng = _Model(), np.random.default_rng(8)
    X, y, W2 = rng.normal(size=(6, 4)), rng.integers(0, 3, 6), rng.normal(size=(5, 3))
    rev = tape.compile(ReverseWithPrimal, model.loss, Active, Active, Const, Const)
    updates = [lambda: model.params["W1"].__isub__(0.1 * np.sign(model.params["W1"])),
               lambda: model.params["b1"].__setitem__(slice(None), 0.3),
               lambda: model.shift.__iadd__(0.2),
               lambda: setattr(model, "temperature", 2.0),
               lambda: model.params.__setitem__("W1", model.params["W1"] * 0.5),
               lambda: None]
    for update in updates:
        (grad, _, _), value = rev(Active(W2.copy()), Const(X), Const(y))
        (want_grad, _, _), want = autodiff(ReverseWithPrimal, model.loss, Active,
                                           Active(W2.copy()), Const(X), Const(y))
        assert value == pytest.approx(want, rel=1e-13)
        np.testing.assert_allclose(grad, want_grad, rtol=1e-12, atol=1e-15)
        update()
        W2 = W2 - 0.1 * grad


# -- X.dot(W) -----------------------------------------------------------------------------------
def test_dot_method_of_a_const_argument_is_differentiated_in_every_mode():
    """`X.dot(W)` with X a Const argument: eager mode refused it (NumPy's method converts W)
    while the compiled trace differentiated it."""
    X = np.arange(12.0).reshape(3, 4) / 10
    W = np.linspace(-1, 1, 8).reshape(4, 2)

    def f(W, X):
        return np.sum(np.tanh(X.dot(W))) + np.sum(X.T.dot(np.ones(3)).dot(W) ** 2)

    fd = _fd_gradient(f, W, [X])
    (grad, _), value = autodiff(ReverseWithPrimal, f, Active, Active(W.copy()), Const(X))
    assert value == pytest.approx(f(W, X), rel=1e-13)
    _close(grad, fd, 1e-6)
    (tangent,) = autodiff(Forward, f, Duplicated(W.copy(), np.ones_like(W)), Const(X))
    _close(tangent, fd.sum(), 1e-6)
    (compiled, _), = tape.compile(Reverse, f, Active, Active, Const)(Active(W.copy()), Const(X))
    np.testing.assert_allclose(compiled, grad, rtol=1e-12)


def test_dot_method_of_a_plain_array_names_the_call_and_the_fix():
    X = np.ones((3, 4))

    def f(W):
        return np.sum(X.T.dot(
            W.T))
    with pytest.raises(TracerConversionError, match=r"`X\.T\.dot\( ?W\.T\)`.*`A @ B` or "
                                                    r"`np\.dot\(A, B\)`"):
        autodiff(Reverse, f, Active, Active(np.ones((2, 3))))


# -- np.logaddexp.reduce (a log-sum-exp spelled with the ufunc's method) -------------------------
def test_logaddexp_reduce_in_every_mode():
    Z = np.random.default_rng(9).normal(size=(4, 3))

    def f(w, Z):
        s = Z * w
        return (np.sum(np.logaddexp.reduce(s, axis=1) ** 2) + np.logaddexp.reduce(s.ravel())
                + np.sum(np.logaddexp2.reduce(s)) + np.sum(np.logaddexp.reduce(s, 1, keepdims=True)))

    w = np.array([0.3, -0.7, 0.5])
    fd = _fd_gradient(f, w, [Z])
    (grad, _), value = autodiff(ReverseWithPrimal, f, Active, Active(w.copy()), Const(Z))
    np.testing.assert_allclose(value, f(w, Z), rtol=1e-13)
    _close(grad, fd, 1e-6)
    (tangent,) = autodiff(Forward, f, Duplicated(w.copy(), np.ones(3)), Const(Z))
    _close(tangent, fd.sum(), 1e-6)
    rev = tape.compile(Reverse, f, Active, Active, Const)
    for z in (Z, Z * 2, Z):
        np.testing.assert_allclose(rev(Active(w.copy()), Const(z))[0][0],
                                   _fd_gradient(f, w, [z]), rtol=1e-6, atol=1e-8)
    fx = lambda v: f(v, Z)   # noqa: E731
    u = np.array([0.2, 1.0, -0.5])
    grad_at = lambda v: tape.gradient(Reverse, fx, v)[0]   # noqa: E731
    _close(tape.hvp(fx, w.copy(), u), (grad_at(w + 1e-5 * u) - grad_at(w - 1e-5 * u)) / 2e-5,
           1e-5)
    with pytest.raises(NotImplementedError, match=r"np\.logaddexp\.reduce.*dtype"):
        autodiff(Reverse, lambda v: np.logaddexp.reduce(v, dtype=np.float32), Active, Active(w))
