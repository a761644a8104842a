"""Eager autodiff, the semantics of Enzyme's activity model on realistic programs.

Every mode is compared with every other on the same program: the reverse gradient (Active, and
Duplicated accumulating into a shadow that is not zero), forward tangents one direction at a
time, BatchDuplicated forward columns and reverse lanes, a split-mode tape reversed with two
seeds, the checkpointed function, and central finite differences in float64; Hessians by
forward-over-reverse, reverse-over-reverse and reverse-over-forward. Then the rules of the
model: shadows accumulate (+=), the shadow of an overwritten buffer is its seed and is zeroed
(reverse) or overwritten (forward), Const arguments are left as they are, aliasing, pytrees,
nesting, custom rules, and the errors that name the argument at fault.
"""
from __future__ import annotations

import dataclasses
from collections import namedtuple

import numpy as np
import pytest
import scipy.special as sc

import tape
from tape import (Active, BatchDuplicated, BatchDuplicatedNoNeed, Const, Duplicated, Forward,
                  ForwardWithPrimal, MixedDuplicated, Reverse, ReverseSplitNoPrimal,
                  ReverseSplitWithPrimal, ReverseWithPrimal, autodiff, autodiff_thunk,
                  checkpoint)
from tape.errors import ActivityError
from tape.scipy import linalg as tsl
from tape.scipy import stats as tss
from tape.scipy.special import logsumexp

X4 = np.array([0.3, -0.7, 1.1, 0.2])
SPD = np.array([[4.0, 1.0, 0.5, 0.0], [1.0, 3.0, 0.2, 0.1],
                [0.5, 0.2, 5.0, 0.3], [0.0, 0.1, 0.3, 2.0]])


def _fd(f, x, eps=1e-6):
    return np.array([(f(x + e) - f(x - e)) / (2 * eps)
                     for e in np.eye(x.size) * eps]).reshape(x.shape)


def _every_mode(f, x):
    """The gradient of scalar `f` at `x` by each mode, by name."""
    eye = tuple(np.eye(x.size, dtype=x.dtype))
    out = {"reverse": autodiff(Reverse, f, Active, Active(x.copy()))[0][0]}
    shadow = np.full_like(x, 0.5)       # Duplicated adds into what the shadow holds
    autodiff(Reverse, f, Active, Duplicated(x.copy(), shadow))
    out["duplicated"] = shadow - 0.5
    out["forward"] = np.array([autodiff(Forward, f, Duplicated(x.copy(), e))[0] for e in eye])
    out["batch forward"] = np.array(autodiff(Forward, f, BatchDuplicated(x.copy(), eye))[0])
    lanes = (np.zeros_like(x), np.ones_like(x))
    autodiff(Reverse, f, Active, BatchDuplicated(x.copy(), lanes))
    tol = 100 * np.finfo(x.dtype).eps      # the second lane held 1 before: one rounding
    np.testing.assert_allclose(lanes[1] - 1, lanes[0], rtol=tol, atol=tol)
    out["batch reverse"] = lanes[0]
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, f, Active, Active)
    held = x.copy()
    split_tape, primal, _ = fwd(Active(held))
    np.testing.assert_allclose(primal, f(x), rtol=1e-13)
    out["split"] = rev(Active(held), 1.0, split_tape)[0][0]
    np.testing.assert_allclose(rev(Active(held), -2.0, split_tape)[0][0], -2 * out["split"],
                               rtol=1e-13)
    out["checkpoint"] = autodiff(Reverse, checkpoint(f), Active, Active(x.copy()))[0][0]
    return out


def _hessians(f, x):
    grad = lambda z: autodiff(Reverse, f, Active, Active(z))[0][0]   # noqa: E731
    eye = np.eye(x.size)
    return {
        "forward over reverse": np.array(autodiff(Forward, grad, BatchDuplicated(
            x.copy(), tuple(eye)))[0]),
        "reverse over reverse": np.array([autodiff(Reverse, lambda z: grad(z)[i], Active,
                                                   Active(x.copy()))[0][0]
                                          for i in range(x.size)]),
        "reverse over forward": np.array([autodiff(Reverse, lambda z: autodiff(
            Forward, f, Duplicated(z, e))[0], Active, Active(x.copy()))[0][0] for e in eye]),
        "finite differences of the gradient": np.array(
            [_fd(lambda z: grad(z)[i], x, 1e-5) for i in range(x.size)]),
    }


SCIPY_PROGRAMS = {
    "special likelihood": lambda x: np.sum(sc.gammaln(x ** 2 + 1.0) - sc.xlogy(x ** 2, sc.expit(x))
                                           + sc.erf(x) * sc.log_ndtr(x)),
    "norm logpdf, traced loc and scale": lambda x: np.sum(tss.norm.logpdf(
        x, loc=x[0], scale=np.exp(x[1]))),
    "t and gamma": lambda x: np.sum(tss.t.logpdf(x, df=3.0 + x[0] ** 2)
                                    + tss.gamma.logcdf(np.exp(x), a=2.0)),
    "multivariate normal, traced covariance": lambda x: tss.multivariate_normal.logpdf(
        np.ones(4), mean=x, cov=SPD + np.diag(x ** 2)),
    "cho_factor / cho_solve": lambda x: np.sum(tsl.cho_solve(tsl.cho_factor(SPD + np.outer(x, x)),
                                                             x)),
    "expm": lambda x: np.sum(tsl.expm(0.1 * np.outer(x, x[::-1]))),
    "solve_triangular + lu_solve": lambda x: np.sum(
        tsl.solve_triangular(np.triu(SPD) + np.diag(x ** 2), x)
        + tsl.lu_solve(tsl.lu_factor(SPD + np.diag(x)), x ** 2)),
    "softmax cross-entropy": lambda x: logsumexp(2.0 * x) - 2.0 * x[2],
}


@pytest.mark.parametrize("name", SCIPY_PROGRAMS)
def test_every_mode_agrees_with_finite_differences_on_scipy_code(name):
    f = SCIPY_PROGRAMS[name]
    want = _fd(f, X4)
    for mode, got in _every_mode(f, X4).items():
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8, err_msg=mode)


@pytest.mark.parametrize("name", ["special likelihood", "multivariate normal, traced covariance",
                                  "cho_factor / cho_solve"])
def test_hessians_agree_in_every_nesting(name):
    hessians = _hessians(SCIPY_PROGRAMS[name], X4)
    want = hessians.pop("finite differences of the gradient")
    for how, got in hessians.items():
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=how)


# --------------------------------------------------------------------------------------------
# Shadows: accumulate, seed, zero, overwrite

def lotka_volterra(du, u, p, t):
    """An in-place right-hand side f!(du, u, p, t) as ODE solvers call it."""
    a, b, c, d = p
    du[0] = a * u[0] - b * u[0] * u[1]
    du[1] = -c * u[1] + d * u[0] * u[1] * np.sin(t)


U, P, T = np.array([1.2, 0.8]), np.array([1.5, 1.0, 3.0, 1.0]), 0.7


def _rhs(u, p, t=T):
    du = np.zeros(2)
    lotka_volterra(du, u, p, t)
    return du


def _jacobian(f, x):
    return np.array([(f(x + e) - f(x - e)) / 2e-6 for e in np.eye(x.size) * 1e-6]).T


def test_in_place_rhs_vjp_seeds_from_the_output_shadow_and_zeroes_it():
    lam = np.array([0.3, -1.7])
    du, ddu, du_shadow, dp = np.zeros(2), lam.copy(), np.full(2, 1.0), np.zeros(4)
    (derivs,) = autodiff(Reverse, lotka_volterra, Const, Duplicated(du, ddu),
                         Duplicated(U.copy(), du_shadow), Duplicated(P.copy(), dp), Active(T))
    np.testing.assert_allclose(du, _rhs(U, P), rtol=1e-15)         # the primal is written
    assert np.array_equal(ddu, np.zeros(2))                           # the seed is consumed
    np.testing.assert_allclose(du_shadow - 1.0, _jacobian(lambda u: _rhs(u, P), U).T @ lam,
                               rtol=1e-7)                             # added, not overwritten
    np.testing.assert_allclose(dp, _jacobian(lambda p: _rhs(U, p), P).T @ lam, rtol=1e-7)
    np.testing.assert_allclose(derivs[3], lam @ _jacobian(lambda t: _rhs(U, P, t[0]),
                                                          np.array([T]))[:, 0], rtol=1e-7)


def test_in_place_rhs_forward_overwrites_the_output_tangent_and_batches():
    du, ddu = np.zeros(2), np.array([99.0, 99.0])
    vu, vp = np.array([1.0, 0.0]), np.array([0.0, 0.0, 1.0, 0.0])
    autodiff(Forward, lotka_volterra, Const, Duplicated(du, ddu), Duplicated(U.copy(), vu),
             Duplicated(P.copy(), vp), Const(T))
    ju, jp = _jacobian(lambda u: _rhs(u, P), U), _jacobian(lambda p: _rhs(U, p), P)
    np.testing.assert_allclose(ddu, ju @ vu + jp @ vp, rtol=1e-7)
    lanes = tuple(np.full(2, 7.0) for _ in range(4))
    autodiff(Forward, lotka_volterra, Const, BatchDuplicated(np.zeros(2), lanes),
             BatchDuplicated(U.copy(), tuple(np.zeros(2) for _ in range(4))),
             BatchDuplicated(P.copy(), tuple(np.eye(4))), Const(T))
    np.testing.assert_allclose(np.array(lanes).T, jp, rtol=1e-7)
    seeds = (np.array([1.0, 0.0]), np.array([0.0, 1.0]))
    du_lanes, dp_lanes = (np.zeros(2), np.zeros(2)), (np.zeros(4), np.zeros(4))
    autodiff(Reverse, lotka_volterra, Const, BatchDuplicated(np.zeros(2), seeds),
             BatchDuplicated(U.copy(), du_lanes), BatchDuplicated(P.copy(), dp_lanes), Const(T))
    np.testing.assert_allclose(np.array(du_lanes), ju, rtol=1e-7)
    np.testing.assert_allclose(np.array(dp_lanes), jp, rtol=1e-7)
    assert all(not s.any() for s in seeds)


def test_split_tape_of_an_in_place_rhs_accumulates_over_two_reversals():
    lam = np.array([0.3, -1.7])
    fwd, rev = autodiff_thunk(ReverseSplitNoPrimal, lotka_volterra, Const, Duplicated,
                              Duplicated, Duplicated, Const)
    du, ddu, du_shadow, dp = np.zeros(2), np.zeros(2), np.zeros(2), np.zeros(4)
    u, p = U.copy(), P.copy()
    args = (Duplicated(du, ddu), Duplicated(u, du_shadow), Duplicated(p, dp), Const(T))
    split_tape, primal, _ = fwd(*args)
    assert primal is None
    for _ in range(2):
        ddu[:] = lam
        rev(*args, split_tape)
        assert not ddu.any()
    np.testing.assert_allclose(dp, 2 * _jacobian(lambda p: _rhs(U, p), P).T @ lam, rtol=1e-7)


def test_a_partial_write_keeps_the_other_entries_of_the_output_shadow():
    def first_only(y, x):
        y[0] = 3.0 * x[0]

    dy = np.array([7.0, 8.0, 9.0])
    autodiff(Forward, first_only, Const, Duplicated(np.ones(3), dy),
             Duplicated(np.ones(3), np.ones(3)))
    assert np.array_equal(dy, [3.0, 8.0, 9.0])
    dy, dx = np.array([7.0, 8.0, 9.0]), np.zeros(3)
    autodiff(Reverse, first_only, Const, Duplicated(np.ones(3), dy), Duplicated(np.ones(3), dx))
    assert np.array_equal(dy, [0.0, 8.0, 9.0]) and np.array_equal(dx, [21.0, 0.0, 0.0])


def test_shadows_that_are_views_of_a_larger_buffer_receive_the_gradient():
    grads = np.zeros((4, 3))
    x = np.array([0.1, 0.5, 0.9])
    autodiff(Reverse, lambda x: np.sum(np.sin(x)), Active, Duplicated(x, grads[1]))
    autodiff(Reverse, lambda x: np.sum(np.sin(x)), Active, Duplicated(x, grads[:3, 2]))
    want = np.zeros((4, 3))
    want[1] += np.cos(x)
    want[:3, 2] += np.cos(x)
    np.testing.assert_allclose(grads, want, rtol=1e-15)


def test_const_arguments_are_left_as_they_are_and_written_ones_as_python_writes():
    c = np.array([3.0, 4.0])
    kept = c.copy()
    (derivs,) = autodiff(Reverse, lambda a, c: np.sum(a * c), Active, Active(np.ones(2)), Const(c))
    assert derivs[1] is None and np.array_equal(c, kept)

    def scales_c(a, c):
        c *= 2.0
        return np.sum(a * c)

    (derivs,) = autodiff(Reverse, scales_c, Active, Active(np.ones(2)), Const(c))
    assert np.array_equal(c, 2 * kept) and np.array_equal(derivs[0], 2 * kept)


# --------------------------------------------------------------------------------------------
# Aliasing

def test_the_same_array_twice_gets_each_argument_its_own_derivative():
    x = np.array([1.0, 2.0])
    (d,) = autodiff(Reverse, lambda a, b: np.sum(a * b ** 2), Active, Active(x), Active(x))
    assert np.array_equal(d[0], x ** 2) and np.array_equal(d[1], 2 * x * x)
    s1, s2 = np.zeros(2), np.zeros(2)
    autodiff(Reverse, lambda a, b: np.sum(a * b ** 2), Active, Duplicated(x, s1), Duplicated(x, s2))
    assert np.array_equal(s1, x ** 2) and np.array_equal(s2, 2 * x * x)
    shared = np.zeros(2)
    autodiff(Reverse, lambda a, b: np.sum(a * b), Active, Duplicated(x, shared),
             Duplicated(x, shared))
    assert np.array_equal(shared, 2 * x)
    base, dbase = np.array([1.0, 2.0, 3.0, 4.0]), np.zeros(4)
    autodiff(Reverse, lambda a, v: np.sum(a ** 2) + np.sum(v ** 3), Active,
             Duplicated(base, dbase), Duplicated(base[1:3], dbase[1:3]))
    assert np.array_equal(dbase, 2 * base + np.r_[0, 3 * base[1:3] ** 2, 0])


@pytest.mark.parametrize("mode", [Reverse, Forward])
def test_a_write_through_one_of_two_aliased_arguments_is_refused_naming_both(mode):
    def writes(a, b):
        a[0] = 5.0 * b[1]
        return np.sum(a * b)

    x = np.array([1.0, 2.0])
    args = ((Active,) if mode is Reverse else ()) + (Duplicated(x, np.ones(2)),
                                                     Duplicated(x, np.ones(2)))
    with pytest.raises(ActivityError, match=r"argument 0 \(`a`\) shares memory with argument 1"):
        autodiff(mode, writes, *args)


# --------------------------------------------------------------------------------------------
# Pytrees

Params = namedtuple("Params", "w b")


@dataclasses.dataclass
class Layer:
    w: np.ndarray
    b: float


W2 = np.array([[1.0, 2.0], [0.5, -1.0]])
X2 = np.array([0.3, -0.2])


def _loss(p, x):
    return np.sum(np.tanh(p.w @ x + p.b) ** 2)


def test_pytree_activities_agree_with_each_other():
    (want, _), = autodiff(Reverse, _loss, Active, Active(Params(W2, 0.1)), Const(X2))
    assert isinstance(want, Params)
    (got, _), = autodiff(Reverse, _loss, Active, Active(Layer(W2, 0.1)), Const(X2))
    np.testing.assert_allclose(got.w, want.w, rtol=1e-15)
    shadow = Layer(np.zeros((2, 2)), 0.0)
    for _ in range(2):                      # a float leaf in a dataclass accumulates too
        autodiff(Reverse, _loss, Active, Duplicated(Layer(W2, 0.1), shadow), Const(X2))
    np.testing.assert_allclose(shadow.w, 2 * want.w, rtol=1e-15)
    np.testing.assert_allclose(shadow.b, 2 * want.b, rtol=1e-15)
    mixed = Params(np.zeros((2, 2)), 0.0)
    ((floats, _),) = autodiff(Reverse, _loss, Active, MixedDuplicated(Params(W2, 0.1), mixed),
                              Const(X2))
    assert floats.w is None and floats.b == pytest.approx(want.b, rel=1e-15)
    np.testing.assert_allclose(mixed.w, want.w, rtol=1e-15)
    tangent = autodiff(Forward, _loss, Duplicated(Params(W2, 0.1), Params(np.ones((2, 2)), 1.0)),
                       Const(X2))[0]
    assert tangent == pytest.approx(np.sum(want.w) + want.b, rel=1e-12)


def test_pytree_results_in_forward_batch_and_split_modes():
    tangent, value = autodiff(ForwardWithPrimal, lambda p: Layer(p.w * 2.0, p.b ** 2),
                              Duplicated(Layer(W2, 0.5), Layer(np.ones((2, 2)), 1.0)))
    assert isinstance(tangent, Layer) and tangent.b == 1.0 and np.all(tangent.w == 2.0)
    assert value.b == 0.25
    lanes = autodiff(Forward, lambda p: Layer(p.w * 2.0, p.b ** 2), BatchDuplicated(
        Layer(W2, 0.5), (Layer(np.ones((2, 2)), 1.0), Layer(np.zeros((2, 2)), 2.0))))[0]
    assert [lane.b for lane in lanes] == [1.0, 2.0] and not lanes[1].w.any()

    def outputs(p):
        return {"y": p["w"] @ np.ones(2), "s": np.sum(p["w"]) * p["b"]}

    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, outputs, Duplicated, Duplicated)
    p, dp = {"w": W2, "b": 0.1}, {"w": np.zeros((2, 2)), "b": 0.0}
    split_tape, value, seed = fwd(Duplicated(p, dp))
    seed["y"][:] = [1.0, 2.0]
    seed["s"] = 1.0
    rev(Duplicated(p, dp), split_tape)
    np.testing.assert_allclose(dp["w"], np.outer([1.0, 2.0], [1.0, 1.0]) + 0.1, rtol=1e-15)
    assert dp["b"] == pytest.approx(np.sum(W2))


# --------------------------------------------------------------------------------------------
# Nesting

def test_nested_derivatives_keep_their_perturbations_apart():
    assert autodiff(Reverse, lambda x: x * autodiff(Reverse, lambda y: x + y, Active,
                                                    Active(2.0))[0][0], Active, Active(3.0)) \
        == ((1.0,),)
    assert autodiff(Forward, lambda x: x * autodiff(Forward, lambda y: x + y,
                                                    Duplicated(2.0, 1.0))[0],
                    Duplicated(3.0, 1.0)) == (1.0,)
    assert autodiff(Forward, lambda x: x * autodiff(Reverse, lambda y: x * y, Active,
                                                    Active(2.0))[0][0],
                    Duplicated(3.0, 1.0)) == (6.0,)


def test_inner_split_checkpoint_and_duplicated_shadows_nest():
    f = lambda z: np.sum(np.sin(z) * z ** 2)   # noqa: E731
    x = np.array([0.3, -0.7, 1.1])
    want = np.diag(-x ** 2 * np.sin(x) + 4 * x * np.cos(x) + 2 * np.sin(x))

    def by_split(z):
        fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, f, Active, Active)
        split_tape, _, _ = fwd(Active(z))
        return rev(Active(z), 1.0, split_tape)[0][0]

    def by_checkpoint(z):
        return autodiff(Reverse, checkpoint(f), Active, Active(z))[0][0]

    def by_shadow(z):
        dz = np.zeros_like(z)
        autodiff(Reverse, f, Active, Duplicated(z, dz))
        return dz

    for inner in (by_split, by_checkpoint, by_shadow):
        columns = autodiff(Forward, inner, BatchDuplicated(x.copy(), tuple(np.eye(3))))[0]
        np.testing.assert_allclose(np.array(columns), want, rtol=1e-12, err_msg=inner.__name__)
        row = autodiff(Reverse, lambda z: inner(z)[1], Active, Active(x.copy()))[0][0]
        np.testing.assert_allclose(row, want[1], rtol=1e-12, err_msg=inner.__name__)


# --------------------------------------------------------------------------------------------
# Custom rules, inactive functions, modifiers, dtypes

def _xsin_rules():
    def augmented(cfg, x, y):
        return x * np.sin(y), (x, y)

    def reverse(cfg, saved, g):
        x, y = saved
        return (g * np.sin(y) if cfg.active[0] else None,
                g * x * np.cos(y) if cfg.active[1] else None)

    def forward(cfg, primals, tangents):
        (x, y), (tx, ty) = primals, tangents
        tangent = 0.0
        if tx is not None:
            tangent = tangent + tx * np.sin(y)
        if ty is not None:
            tangent = tangent + ty * x * np.cos(y)
        return x * np.sin(y), tangent
    return dict(augmented_primal=augmented, reverse=reverse, forward=forward)


@pytest.mark.parametrize("options", [{}, {"vectorized": False}, {"differentiable": True}])
def test_a_custom_rule_agrees_with_finite_differences_in_every_mode(options):
    xsin = tape.custom_rule(lambda x, y: x * np.sin(y), name="xsin", **_xsin_rules(), **options)
    f = lambda v: np.sum(xsin(v[:2], v[2:]) ** 2)   # noqa: E731
    want = _fd(f, X4)
    for mode, got in _every_mode(f, X4).items():
        np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-9, err_msg=mode)


def test_an_easy_rule_with_output_survives_writes_into_its_result():
    my_tanh = tape.easy_rule(lambda x: np.tanh(x), partials=lambda out, x: 1 - out ** 2,
                             with_output=True, name="my_tanh")

    def f(x):
        y = my_tanh(x)
        y *= 2.0             # the saved output must not see these writes
        y[0] = 5.0
        return np.sum(y * x)

    want = _fd(f, X4)
    for mode, got in _every_mode(f, X4).items():
        np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-9, err_msg=mode)


def test_an_inactive_function_stops_the_derivative_in_every_mode():
    scale_of = tape.inactive(lambda x: np.std(x))
    f = lambda x: np.sum(x / scale_of(x))   # noqa: E731
    for mode, got in _every_mode(f, X4).items():
        np.testing.assert_allclose(got, np.full(4, 1 / np.std(X4)), rtol=1e-13, err_msg=mode)


def test_strong_zero_is_the_same_in_reverse_split_checkpoint_and_forward():
    f = lambda x: np.sum(np.where(x > 0, np.log(x), 0.0))   # noqa: E731
    x = np.array([0.0, 2.0])
    with np.errstate(all="ignore"):
        plain = autodiff(Reverse, f, Active, Active(x))[0][0]
        assert np.isnan(plain[0])                  # 0 * inf, as in JAX and Enzyme without it
        strong = tape.set_strong_zero(Reverse)
        for g in (f, checkpoint(f)):
            assert np.array_equal(autodiff(strong, g, Active, Active(x))[0][0], [0.0, 0.5])
        fwd, rev = autodiff_thunk(tape.set_strong_zero(ReverseSplitWithPrimal), f, Active, Active)
        split_tape, _, _ = fwd(Active(x))
        assert np.array_equal(rev(Active(x), 1.0, split_tape)[0][0], [0.0, 0.5])
        assert autodiff(tape.set_strong_zero(Forward), f, Duplicated(x, np.ones(2))) == (0.5,)


def test_float32_stays_float32_in_every_mode():
    x = np.array([1.0, 2.0, 3.0], np.float32)
    for mode, got in _every_mode(lambda x: np.sum(np.sin(x) * x), x).items():
        assert got.dtype == np.float32, mode


# --------------------------------------------------------------------------------------------
# Errors that name the argument

@pytest.mark.parametrize("call, match", [
    (lambda: autodiff(Reverse, lambda x: x * 2, Active, Duplicated(1.0, 0.0)),
     r"argument 0 \(`x`\) is Duplicated but is an immutable scalar .*Mark it Active"),
    (lambda: autodiff(Reverse, lambda x: x * 2.0, Active, Active(np.arange(3))),
     r"argument 0 \(`x`\) is marked Active but holds no floating-point value"),
    (lambda: autodiff(Reverse, np.sum, Active, Duplicated(np.ones(3), np.zeros(4))),
     r"shadow of argument 0 .* has shape \(4,\) but the primal has shape \(3,\)"),
    (lambda: autodiff(Reverse, np.sum, Active, Duplicated(np.ones(3), np.zeros(3, np.float32))),
     r"has dtype float32 but the primal has dtype float64"),
    (lambda: autodiff(Forward, lambda x: x * 2.0, Active(3.0)),
     r"argument 0 \(`x`\): Active is not allowed in forward mode"),
    (lambda: autodiff(Reverse, lambda x: x * 2.0, Active, Active(np.ones(2))),
     r"needs a real scalar result, but the function returned ndarray .* shape \(2,\)"),
    (lambda: autodiff(Reverse, np.sum, Duplicated, Active(np.ones(2))),
     r"a Duplicated return needs a seed"),
    (lambda: autodiff(Forward, lambda a, b: np.sum(a * b), BatchDuplicated(
        np.ones(2), (np.ones(2),)), BatchDuplicated(np.ones(2), (np.ones(2), np.ones(2)))),
     r"batch width mismatch: argument 0 \(`a`\) has width 1, argument 1 \(`b`\) has width 2"),
    (lambda: autodiff(Reverse, lambda p: p[0] * p[1], Active, Duplicated((2.0, 3.0),
                                                                          (0.0, 0.0))),
     r"immutable leaf p\[0\] \(argument 0\)"),
    (lambda: autodiff(Reverse, np.sum, Active, Duplicated(np.ones(2), None)),
     r"the shadow of argument 0 .* does not have the structure of its primal"),
    (lambda: autodiff(Forward, abs, Duplicated(2.0, 1j)),   # was the tangent 1j of |x|
     r"shadow of argument 0 .* is complex \(1j\) but the primal is real \(float\)"),
])
def test_activity_errors_name_the_argument(call, match):
    with pytest.raises(tape.HecateError, match=match):
        call()


# --------------------------------------------------------------------------------------------
# Findings (strict xfails flip to passing tests when fixed)

def test_a_copy_inside_a_checkpointed_function():
    """x.copy() / np.copy(x) inside a checkpointed function (the fix CheckpointError itself
    suggests for writes into an argument) crashed: ops/creation.py set `.owned` on the plain
    array the checkpoint's transparent process returns."""
    def f(x):
        h = x.copy()
        h[0] = 3.0 * h[1]
        return np.sum(np.copy(h) ** 2)

    want = _fd(f, X4)
    got = autodiff(Reverse, checkpoint(f), Active, Active(X4.copy()))[0][0]
    np.testing.assert_allclose(got, want, rtol=1e-7)


@pytest.mark.parametrize("ret", [MixedDuplicated, BatchDuplicated, BatchDuplicatedNoNeed])
def test_reverse_mode_refuses_every_duplicated_kind_of_return(ret):
    """Every Duplicated kind of return (they subclass Duplicated) was left unseeded: every
    derivative silently zero, eager and compiled."""
    f = lambda x: np.sum(x ** 2)   # noqa: E731
    for mode in (Reverse, ReverseWithPrimal):
        with pytest.raises(ActivityError, match=f"a {ret.__name__} return needs a seed"):
            autodiff(mode, f, ret, Active(np.array([1.0, 2.0])))
        with pytest.raises(ActivityError, match=f"a {ret.__name__} return needs a seed"):
            tape.compile(mode, f, ret, Active)(Active(np.array([1.0, 2.0])))


def test_a_buffer_filled_inside_a_checkpointed_function():
    """`z = np.zeros_like(x); z[:] = x` in a checkpointed function: the first run makes
    plain buffers, and writing a traced value into one raised TracerConversionError (whose
    message suggests np.zeros_like). The recomputation is traced and differentiated."""
    def f(x):
        z = np.zeros_like(x)
        z[:] = x
        z[0] = 3.0 * z[1]
        buffer = np.empty_like(x)
        buffer[1:] = z[:3] ** 2
        buffer[0] = 1.0
        return np.sum(buffer * z)

    want = _fd(f, X4)
    for g in (checkpoint(f), checkpoint(checkpoint(f))):
        got = autodiff(Reverse, g, Active, Active(X4.copy()))[0][0]
        np.testing.assert_allclose(got, want, rtol=1e-7)


def test_a_write_into_a_plain_buffer_inside_a_checkpoint_is_still_refused():
    def f(x):
        plain = np.zeros(4)      # not np.zeros_like(x): it cannot carry the derivative
        plain[:] = x
        return np.sum(plain * x)

    with pytest.raises(tape.HecateError, match="would drop its derivative"):
        autodiff(Reverse, checkpoint(f), Active, Active(X4.copy()))


def test_split_forward_gives_a_shadow_for_every_duplicated_kind_of_return():
    for ret in (BatchDuplicated, MixedDuplicated):
        fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, lambda x: x ** 2, ret, Duplicated)
        x, dx = np.array([1.0, 2.0]), np.zeros(2)
        split_tape, _, seed = fwd(Duplicated(x, dx))
        assert isinstance(seed, np.ndarray), ret.__name__
        seed[:] = [1.0, 10.0]
        rev(Duplicated(x, dx), split_tape)
        assert np.array_equal(dx, [2.0, 40.0]), ret.__name__


def test_a_read_only_shadow_is_refused_before_anything_is_written():
    x, dx = np.array([1.0, 2.0]), np.zeros(2)
    locked = np.zeros(2)
    locked.flags.writeable = False
    with pytest.raises(ActivityError, match=r"shadow of argument 1 \(`b`\) is read-only"):
        autodiff(Reverse, lambda a, b: np.sum(a * b), Active, Duplicated(x, dx),
                 Duplicated(np.array([3.0, 4.0]), locked))
    assert not dx.any()
    lanes = (np.zeros(2), np.broadcast_to(np.zeros(1), (2,)))
    with pytest.raises(ActivityError, match=r"shadow 1 of argument 0 \(`a`\) is read-only"):
        autodiff(Reverse, np.sum, Active, BatchDuplicated(x, lanes))


def test_a_zero_dimensional_array_is_duplicated_when_nested_as_at_top_level():
    def inner_gradient(z):
        dz = np.zeros_like(z)
        autodiff(Reverse, lambda a: a ** 3, Active, Duplicated(z, dz))
        return dz

    x = np.array(2.0)
    assert inner_gradient(x) == 12.0
    assert autodiff(Reverse, inner_gradient, Active, Active(x))[0][0] == 12.0
    assert autodiff(Forward, inner_gradient, Duplicated(x, np.array(1.0)))[0] == 12.0


def test_a_shadow_of_another_structure_is_described():
    with pytest.raises(ActivityError, match=r"keys \['a'\], the shadow keys \['b'\]"):
        autodiff(Reverse, lambda p: np.sum(p["a"]), Active,
                 Duplicated({"a": np.ones(2)}, {"b": np.zeros(2)}))
    with pytest.raises(ActivityError, match=r"at \['w'\]\[1\]: the primal is float, the "
                       r"shadow NoneType"):
        autodiff(Forward, lambda p: p["w"][0], Duplicated({"w": [1.0, 2.0]}, {"w": [1.0, None]}))


def test_forward_gradient_and_hessian_of_a_pytree_argument():
    p = {"w": np.array([1.0, 2.0]), "b": 0.5}
    f = lambda p: np.sum(np.tanh(p["w"] * p["b"]) ** 2)   # noqa: E731
    want = tape.gradient(Reverse, f, p)[0]
    got = tape.gradient(Forward, f, p)[0]
    np.testing.assert_allclose(got["w"], want["w"], rtol=1e-12)


def test_jacobian_of_a_dict_result_is_refused_clearly():
    with pytest.raises(ActivityError, match="array"):
        tape.jacobian(Reverse, lambda x: {"a": x * 2, "b": np.sum(x)}, np.array([1.0, 2.0]))


def test_a_const_instance_in_the_return_activity_place_is_explained():
    """Const(...) in the return activity's place reached f as an extra argument."""
    with pytest.raises(ActivityError, match="return activity must be a type, Const"):
        autodiff(Reverse, lambda x: np.sum(x), Const(1.0), Active(np.ones(2)))


@pytest.mark.parametrize("compiled", [False, True])
def test_a_written_buffer_returned_as_the_active_result_sums_both_seeds(compiled):
    """f writes a 0-d Duplicated buffer and returns it as its Active result: the result's seed
    (1) and the buffer's shadow (the seed of its final value) both weigh the same value, so
    d/dx of 1 * y + dy * y with y = 2 x is 2 (1 + dy). Eager mode let the shadow's seed
    replace the result's (2 where the answer is 4); compiled programs summed them."""
    def f(y, x):
        y[...] = x * 2.0
        return y

    def run(*args):
        if not compiled:
            return autodiff(Reverse, f, Active, *args)
        g = tape.compile(Reverse, f, Active, type(args[0]), Active)
        for _ in range(2):
            g(*(type(args[0])(a.val.copy(), tape.pytree.tree_map(np.copy, a.dval))
                if isinstance(a, Duplicated) else a for a in args))
        return g(*args)

    ((_, dx),) = run(Duplicated(np.array(0.0), np.array(1.0)), Active(np.array(1.0)))
    assert float(dx) == 4.0
    ((_, dxs),) = run(BatchDuplicated(np.array(0.0), (np.array(1.0), np.array(3.0))),
                      Active(np.array(1.0)))
    assert [float(d) for d in dxs] == [4.0, 8.0]


@pytest.mark.parametrize("write, refused", [
    (lambda x, o: np.einsum("ij,jk->ik", x, x, out=o), True),
    (lambda x, o: np.dot(x, x, out=o), True),
    (lambda x, o: np.cumsum(x, axis=0, out=o), True),
    (lambda x, o: np.add.reduce(x, axis=0, out=o[0]), True),
    (lambda x, o: np.add(x, x, out=o), False),          # ufunc calls broadcast into `out`
    (lambda x, o: np.clip(x, 0.0, 2.0, out=o), False),  # and so do clip, outer and fix
    (lambda x, o: np.outer(x[0], x[1], out=o), False),
    (lambda x, o: np.fix(x, out=o), False),
    (lambda x, o: np.around(x, out=o), True),
])
def test_a_traced_out_of_another_shape_is_refused_where_numpy_refuses_it(write, refused):
    # Writing the result into a larger traced `out` broadcast copies of it (NumPy raises).
    x0 = np.ones((3, 3))
    plain = np.zeros((2, 3, 3))
    numpy_refuses = False
    try:
        write(x0, plain)
    except ValueError:
        numpy_refuses = True
    assert numpy_refuses == refused

    def f(x):
        out = np.zeros((2, 3, 3)) + 0.0 * x[0, 0]
        write(x, out)
        return np.sum(out)
    if refused:
        with pytest.raises(ValueError, match="out"):
            autodiff(Reverse, f, Active, Active(x0))
    else:
        (dx,), = autodiff(Reverse, f, Active, Active(x0))
        assert dx.shape == (3, 3)
