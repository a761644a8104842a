"""Second-order differentiation of multi-step user programs: Newton's method, Gauss-Newton /
Levenberg-Marquardt steps, physics energies, an MLP loss, a Cholesky-parametrised Gaussian,
in-place buffers, kinks, sorting, data-dependent loops, pytrees of parameters, and compiled
gradients inside an outer differentiation.

Every Hessian is checked against central differences of the reverse-mode gradient (itself
checked against differences of f), and every route (tape.hessian, tape.hvp,
tape.hvp_and_gradient_, forward-over-reverse, reverse-over-reverse, reverse-over-forward)
against that Hessian times v."""
import numpy as np
import pytest

import tape
import tape.scipy.linalg as tsl
from tape import (Active, BatchDuplicated, Duplicated, Forward, Reverse, autodiff, gradient,
                  gradient_, hessian, hvp, hvp_and_gradient_, jacobian)
from numeric_checks import fd_jacobian_of


def _grad(f):
    def g(x):
        return autodiff(Reverse, f, Active, Active(x))[0][0]
    return g


def _fd_grad(f, x, eps=1e-6):
    out = np.zeros(x.size)
    for i in range(x.size):
        e = np.zeros(x.size)
        e[i] = eps
        e = e.reshape(x.shape)
        out[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return out.reshape(x.shape)


def _fd_hessian(g, x, eps=1e-5):
    return fd_jacobian_of(g, x, eps)


def _check_all_routes(f, x, rtol=1e-6, seed=0):
    """Every second-order route agrees with differences of the (checked) gradient."""
    n = x.size
    v = np.random.default_rng(seed).standard_normal(x.shape)
    g = _grad(f)(x)
    np.testing.assert_allclose(g, _fd_grad(f, x), rtol=1e-5, atol=1e-6)
    H_fd = _fd_hessian(_grad(f), x)
    scale = max(1.0, np.max(np.abs(H_fd)))
    atol = rtol * scale
    H = np.reshape(hessian(f, x), (n, n))
    np.testing.assert_allclose(H, H_fd, rtol=rtol, atol=atol)
    np.testing.assert_allclose(H, H.T, rtol=1e-9, atol=1e-9 * scale)
    Hv = H @ np.reshape(v, -1)
    routes = {
        "hvp": lambda: hvp(f, x, v),
        "forward over reverse": lambda: autodiff(Forward, _grad(f), Duplicated(x, v))[0],
        "reverse over reverse": lambda: autodiff(
            Reverse, lambda y: np.sum(_grad(f)(y) * v), Active, Active(x))[0][0],
        "reverse over forward": lambda: autodiff(
            Reverse, lambda y: autodiff(Forward, f, Duplicated(y, v))[0], Active, Active(x))[0][0],
    }
    for name, route in routes.items():
        np.testing.assert_allclose(np.reshape(route(), -1), Hv, rtol=1e-9, atol=1e-9 * scale,
                                   err_msg=name)
    res, grad = np.zeros_like(x), np.zeros_like(x)
    hvp_and_gradient_(res, grad, f, x, v)
    np.testing.assert_allclose(res.reshape(-1), Hv, rtol=1e-9, atol=1e-9 * scale)
    np.testing.assert_allclose(grad, g, rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------------------------
# Findings


def _f_dict(p):
    return p["a"] ** 3 * np.sum(p["w"] ** 2)


def _grad_into_dict_shadow(p):
    """The gradient through a Duplicated dict shadow whose scalar leaf is a Python float (as
    make_zero builds it). Inside an outer differentiation the gradient at that leaf is traced by
    the outer level; the leaf of a dict can be replaced by it."""
    dp = {"a": 0.0, "w": np.zeros_like(p["w"])}
    autodiff(Reverse, _f_dict, Active, Duplicated(p, dp))
    return dp


_P = {"a": 2.0, "w": np.array([1.0, 2.0])}
# grad_a = 3 a^2 |w|^2, grad_w = 2 a^3 w; d/da of those: 6 a |w|^2 = 60, 6 a^2 w = [24, 48]


def test_dict_float_leaf_shadow_plain_call():
    dp = _grad_into_dict_shadow(_P)
    assert dp["a"] == pytest.approx(60.0)
    np.testing.assert_allclose(dp["w"], [16.0, 32.0])


def test_forward_over_reverse_into_a_dict_shadow_with_a_float_leaf():
    t, = autodiff(Forward, _grad_into_dict_shadow,
                  Duplicated(_P, {"a": 1.0, "w": np.zeros(2)}))
    assert t["a"] == pytest.approx(60.0)
    np.testing.assert_allclose(t["w"], [24.0, 48.0])


def test_reverse_over_reverse_into_a_dict_shadow_with_a_float_leaf():
    (d,), = autodiff(Reverse, lambda p: _grad_into_dict_shadow(p)["a"], Active, Active(_P))
    assert d["a"] == pytest.approx(60.0)       # d/da 3 a^2 |w|^2
    np.testing.assert_allclose(d["w"], [24.0, 48.0])   # d/dw 3 a^2 |w|^2 = 6 a^2 w


def test_forward_over_gradient_underscore_into_a_dict_with_a_float_leaf():
    def g(p):
        return gradient_(Reverse, {"a": 0.0}, lambda q: q["a"] ** 3, p)["a"]
    t, = autodiff(Forward, g, Duplicated({"a": 2.0}, {"a": 1.0}))
    assert t == pytest.approx(12.0)


def test_forward_over_batched_reverse_into_dict_float_leaves():
    def g(p):
        dps = ({"a": 0.0}, {"a": 0.0})
        autodiff(Reverse, lambda q: q["a"] ** 3, BatchDuplicated(p, dps))
        return dps[0]["a"] + 2 * dps[1]["a"]
    assert g({"a": 2.0}) == pytest.approx(36.0)
    t, = autodiff(Forward, g, Duplicated({"a": 2.0}, {"a": 1.0}))
    assert t == pytest.approx(3 * 6 * 2.0)


def test_hessian_of_a_vector_function_names_hessian():
    with pytest.raises(tape.errors.ActivityError, match=r"^hessian"):
        hessian(lambda x: x ** 3, np.array([1.0, 2.0]))


# --------------------------------------------------------------------------------------------
# Statistics and ML programs

_RNG = np.random.default_rng(11)
_X = _RNG.standard_normal((30, 3))
_Y = (_X @ np.array([1.0, -2.0, 0.5]) + _RNG.standard_normal(30) > 0).astype(float)


def _logistic_nll(w):
    z = _X @ w
    return np.sum(np.logaddexp(0.0, z) - _Y * z) + 0.5 * w @ w


def test_newton_logistic_regression_matches_the_closed_form_hessian():
    w = np.zeros(3)
    for _ in range(7):
        w = w - np.linalg.solve(hessian(_logistic_nll, w), gradient(Reverse, _logistic_nll, w)[0])
    assert np.linalg.norm(gradient(Reverse, _logistic_nll, w)[0]) < 1e-10
    p = 1 / (1 + np.exp(-_X @ w))
    want = _X.T @ (_X * (p * (1 - p))[:, None]) + np.eye(3)
    np.testing.assert_allclose(hessian(_logistic_nll, w), want, rtol=1e-10, atol=1e-12)
    _check_all_routes(_logistic_nll, w)


_XD = _RNG.standard_normal((6, 3))
_LAB = np.array([0, 2, 1, 1, 0, 2])


def _mlp_xent(theta):
    W1, b1, W2 = theta[:12].reshape(3, 4), theta[12:16], theta[16:28].reshape(4, 3)
    h = np.tanh(_XD @ W1 + b1)
    logits = h @ W2
    logits = logits - np.max(logits, axis=1, keepdims=True)
    logp = logits - np.log(np.sum(np.exp(logits), axis=1, keepdims=True))
    return -np.mean(logp[np.arange(6), _LAB])


def test_mlp_softmax_cross_entropy_all_routes():
    _check_all_routes(_mlp_xent, 0.5 * np.random.default_rng(1).standard_normal(28))


_YG = _RNG.standard_normal((5, 3))


def _gauss_cholesky(p):
    L = np.zeros_like(p, shape=(3, 3))
    L[np.tril_indices(3)] = p[:6]
    L[np.diag_indices(3)] = np.exp(p[[0, 2, 5]])
    mu = p[6:9]
    S = L @ L.T
    Lc = np.linalg.cholesky(S)
    Z = tsl.solve_triangular(Lc, (_YG - mu).T, lower=True)
    return 0.5 * np.sum(Z ** 2) + 2.5 * np.linalg.slogdet(S)[1]


def test_cholesky_parametrised_gaussian_all_routes():
    _check_all_routes(_gauss_cholesky, 0.3 * np.random.default_rng(2).standard_normal(9),
                      rtol=1e-5)


_T = np.linspace(0, 1, 8)
_OBS = 2 * np.exp(-1.3 * _T) + 0.1


def _residual(p):
    return p[0] * np.exp(-p[1] * _T) + p[2] - _OBS


@pytest.mark.parametrize("inner", [Forward, Reverse])
def test_levenberg_marquardt_step_differentiated_through_its_jacobian(inner):
    def step(p):
        J = jacobian(inner, _residual, p)[0]
        return p - np.linalg.solve(J.T @ J + 0.1 * np.eye(3), J.T @ _residual(p))
    p0 = np.array([1.5, 1.0, 0.0])
    want = _fd_hessian(step, p0, eps=1e-6)
    for outer in (Forward, Reverse):
        np.testing.assert_allclose(jacobian(outer, step, p0)[0], want, rtol=1e-6, atol=1e-7)


# --------------------------------------------------------------------------------------------
# Physics energies

_EDGES = np.array([[0, 1], [1, 2], [2, 3], [3, 0], [0, 2]])
_REST = np.array([1.0, 1.2, 0.9, 1.1, 1.5])


def _springs(x):
    P = x.reshape(4, 2)
    d = P[_EDGES[:, 0]] - P[_EDGES[:, 1]]
    return 0.5 * np.sum((np.linalg.norm(d, axis=1) - _REST) ** 2)


def _spring_forces_squared(x):
    """|F|^2 with the forces assembled by scatter-add (np.add.at)."""
    P = x.reshape(4, 2)
    d = P[_EDGES[:, 0]] - P[_EDGES[:, 1]]
    length = np.sqrt(np.sum(d * d, axis=1))
    f = d * ((length - 1.0) / length)[:, None]
    F = np.zeros_like(P)
    np.add.at(F, _EDGES[:, 0], -f)
    np.add.at(F, _EDGES[:, 1], f)
    return 0.5 * np.sum(F ** 2)


_IU = np.triu_indices(4, k=1)
_P0 = (np.array([[0, 0, 0], [1.1, 0, 0], [0, 1.2, 0], [0, 0, 1.05]])
       + 0.05 * np.random.default_rng(3).standard_normal((4, 3)))


def _lennard_jones(x):
    P = x.reshape(4, 3)
    D = P[:, None, :] - P[None, :, :]
    inv6 = 1.0 / np.sum(D ** 2, axis=-1)[_IU] ** 3
    return np.sum(4 * (inv6 ** 2 - inv6))


def _lennard_jones_masked(x):
    P = x.reshape(4, 3)
    D = P[:, None, :] - P[None, :, :]
    r = np.sqrt(np.sum(D ** 2, axis=-1) + np.eye(4))    # (the eye keeps the diagonal off 0)
    s = np.where(np.triu(np.ones((4, 4), bool), 1), 1.0 / r, 0.0)
    return np.sum(4 * (s ** 12 - s ** 6))


@pytest.mark.parametrize("f, x, rtol", [
    (_springs, np.random.default_rng(4).standard_normal(8), 1e-6),
    (_spring_forces_squared, np.random.default_rng(5).standard_normal(8), 1e-6),
    (_lennard_jones, _P0.reshape(-1), 1e-5),
    (_lennard_jones_masked, _P0.reshape(-1), 1e-5),
], ids=["springs", "spring-forces-add-at", "lennard-jones-triu", "lennard-jones-where"])
def test_physics_energy_all_routes(f, x, rtol):
    _check_all_routes(f, x, rtol=rtol)


def test_lennard_jones_hessian_has_the_rigid_motion_null_space():
    H = hessian(_lennard_jones, _P0.reshape(-1))
    for axis in range(3):       # translations
        t = np.zeros((4, 3))
        t[:, axis] = 1.0
        np.testing.assert_allclose(H @ t.reshape(-1), 0, atol=1e-8 * np.max(np.abs(H)))


# --------------------------------------------------------------------------------------------
# In-place buffers, views, kinks, sorting, loops


def _buffer_program(x):
    M = x.reshape(3, 4)
    Y = np.zeros_like(M)
    Y[:, 0] += M[:, 1] * M[:, 2]
    Y[:, 1:] = np.cumsum(M[:, 1:] ** 2, axis=1)
    row = Y[1]                      # a view, written through
    row -= 0.5 * M[0] * M[2]
    Y.T[2] /= 1 + M[:, 3] ** 2
    y = np.empty_like(x)
    np.multiply(x, x, out=y)
    y[y.size // 2:] = np.tanh(y[y.size // 2:])
    return np.sum(Y * np.cos(M)) + y @ np.roll(x, 1)


def _recurrence_in_place(x):
    y = x.copy()
    for i in range(1, y.size):
        y[i] = y[i] + 0.5 * np.sin(y[i - 1])
    return np.sum(y ** 3)


def _kinks(x):
    a = np.where(x > 0, x ** 3, -2 * x ** 2)
    b = np.maximum(x, 0.3) ** 2
    d = np.clip(x, -0.5, 0.5) ** 3
    return np.sum(a * b) + np.sum(np.abs(x) * x ** 2) + np.sum(d * x)


def _sorted_losses(x):
    s = np.sort(x)
    r = x[np.argsort(x)]
    return (np.sum(np.arange(1, x.size + 1) * s ** 2) + np.sum(np.diff(r) ** 2 * r[1:])
            + np.sum(np.partition(x, 2)[:2] ** 2) + np.quantile(x, 0.3) ** 2
            + np.median(x) ** 2 * np.max(x))


def _until_small(x):
    s = x * 0
    t = x.copy()
    while np.sum(t ** 2) > 1e-3:    # trip count depends on x
        s = s + t
        t = 0.5 * t * np.cos(t)
    return np.sum(s ** 2)


@pytest.mark.parametrize("f, x", [
    (_buffer_program, np.random.default_rng(6).standard_normal(12)),
    (_recurrence_in_place, np.random.default_rng(7).standard_normal(5)),
    (_kinks, np.array([0.8, -0.7, 1.3, -1.1, 0.1, 0.45])),
    (_sorted_losses, np.array([0.3, -1.2, 2.0, 0.7, -0.1])),
    (_until_small, np.array([0.4, 0.9])),
], ids=["buffers-views", "recurrence", "kinks", "sorting", "data-dependent-loop"])
def test_control_and_buffers_all_routes(f, x):
    _check_all_routes(f, x, rtol=1e-5)


def test_gradient_penalty_is_third_order():
    def L(x):
        return np.sum(np.sin(x) * x ** 2) + np.prod(x)

    def penalised(x):
        return L(x) + np.sum(_grad(L)(x) ** 2) + np.trace(hessian(L, x))
    _check_all_routes(penalised, np.random.default_rng(8).standard_normal(3), rtol=1e-5)


# --------------------------------------------------------------------------------------------
# Pytrees of parameters

_XP = _RNG.standard_normal((6, 3))
_YP = _RNG.standard_normal(6)
_PARAMS = {"W": 0.5 * _RNG.standard_normal((3, 2)), "b": np.array([0.1, -0.2]),
           "v": 0.5 * _RNG.standard_normal(2), "c": 0.3}


def _regression_loss(p):
    h = np.tanh(_XP @ p["W"] + p["b"])
    return 0.5 * np.mean((h @ p["v"] + p["c"] - _YP) ** 2)


def _to_flat(p):
    return np.concatenate([np.reshape(p[k], -1) for k in _PARAMS])


def _from_flat(z):
    out, i = {}, 0
    for k, val in _PARAMS.items():
        n = int(np.size(val))
        out[k] = z[i:i + n].reshape(np.shape(val)) if np.ndim(val) else z[i]
        i += n
    return out


def test_dict_of_parameters_hessian_and_hvps():
    z0 = _to_flat(_PARAMS)
    H_fd = _fd_hessian(_grad(lambda z: _regression_loss(_from_flat(z))), z0)
    H = hessian(_regression_loss, _PARAMS)
    np.testing.assert_allclose(H, H_fd, rtol=1e-6, atol=1e-8)
    V = {"W": np.ones((3, 2)), "b": np.array([0.5, -1.0]), "v": np.array([2.0, 0.1]), "c": 0.7}
    want = H @ _to_flat(V)
    np.testing.assert_allclose(_to_flat(hvp(_regression_loss, _PARAMS, V)), want, rtol=1e-9,
                               atol=1e-12)
    fwd, = autodiff(Forward, _grad(_regression_loss), Duplicated(_PARAMS, V))
    np.testing.assert_allclose(_to_flat(fwd), want, rtol=1e-9, atol=1e-12)

    def along_v(p):
        g = _grad(_regression_loss)(p)
        return sum(np.sum(g[k] * V[k]) for k in g)
    rev, = autodiff(Reverse, along_v, Active, Active(_PARAMS))[0]
    np.testing.assert_allclose(_to_flat(rev), want, rtol=1e-9, atol=1e-12)
    res = {k: (np.zeros_like(val) if np.ndim(val) else 0.0) for k, val in _PARAMS.items()}
    grad = {k: (np.zeros_like(val) if np.ndim(val) else 0.0) for k, val in _PARAMS.items()}
    hvp_and_gradient_(res, grad, _regression_loss, _PARAMS, V)
    np.testing.assert_allclose(_to_flat(res), want, rtol=1e-9, atol=1e-12)
    assert isinstance(res["c"], float)
    np.testing.assert_allclose(_to_flat(grad), _to_flat(_grad(_regression_loss)(_PARAMS)),
                               rtol=1e-12, atol=1e-14)


# --------------------------------------------------------------------------------------------
# Compiled gradients inside an outer differentiation (run eagerly, by the docs)

_STATE = {"a": 2.0}


def _scaled_cube(w):
    return _STATE["a"] * np.sum(w ** 3) + 0.1 * np.sum(np.logaddexp(0.0, _X[:, :2] @ w))


def test_compiled_gradient_inside_outer_forward_and_reverse():
    cg = tape.compile(Reverse, _scaled_cube, Active, Active)
    w0, v = np.array([0.3, -0.8]), np.array([1.0, 0.5])
    cg(Active(w0))                       # traced and cached at this point
    g = lambda w: cg(Active(w))[0][0]    # noqa: E731
    H = _fd_hessian(g, w0)
    np.testing.assert_allclose(hessian(_scaled_cube, w0), H, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(autodiff(Forward, g, Duplicated(w0, v))[0], H @ v, rtol=1e-6)
    np.testing.assert_allclose(
        autodiff(Reverse, lambda w: g(w) @ v, Active, Active(w0))[0][0], H @ v, rtol=1e-6)
    assert cg.stats.eager_reasons[-1] == "called inside another differentiation"

    # a value the outer level traces reaches the compiled function only through global state
    def outer(a):
        _STATE["a"] = a
        try:
            return np.sum(cg(Active(w0))[0][0])
        finally:
            _STATE["a"] = 2.0
    want = 3 * np.sum(w0 ** 2)
    assert autodiff(Forward, outer, Duplicated(2.0, 1.0))[0] == pytest.approx(want)
    assert autodiff(Reverse, outer, Active, Active(2.0))[0][0] == pytest.approx(want)
    assert outer(2.0) == pytest.approx(np.sum(g(w0)))   # and the replay afterwards is right


def test_compiled_forward_inside_outer_reverse_and_compiled_outer_over_eager_inner():
    cf = tape.compile(Forward, _scaled_cube, Duplicated, Duplicated)
    w0, v = np.array([0.3, -0.8]), np.array([1.0, 0.5])
    cf(Duplicated(w0, v))
    H = _fd_hessian(_grad(_scaled_cube), w0)
    got, = autodiff(Reverse, lambda w: cf(Duplicated(w, v))[0], Active, Active(w0))[0]
    np.testing.assert_allclose(got, H @ v, rtol=1e-6)
    outer = tape.compile(Forward, _grad(_scaled_cube), Duplicated, Duplicated)
    for w in (w0, 1.1 * w0):
        np.testing.assert_allclose(outer(Duplicated(w, v))[0],
                                   _fd_hessian(_grad(_scaled_cube), w) @ v, rtol=1e-6)
