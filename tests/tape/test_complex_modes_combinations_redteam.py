"""Complex programs in the less common combinations of modes and annotations: nested
holomorphic derivatives, hvp of a real function of complex inputs, BatchDuplicated forward
writes into complex buffers (eager and compiled), MixedDuplicated containers with complex
scalars in forward, compiled and split modes, ReverseHolomorphic with MixedDuplicated and
checkpoint, and real inputs through complex intermediates in batched, compiled and second-order
modes. Everything is checked against NumPy and central finite differences (docs/complex.md:
reverse mode on a real f(z) gives df/dx + i df/dy; forward tangents are complex directions)."""
import numpy as np
import pytest
from numeric_checks import fd_gradient_complex

import tape
from tape import (Active, BatchDuplicated, Duplicated, Forward, MixedDuplicated, Reverse,
                  ReverseHolomorphic, ReverseHolomorphicWithPrimal, ReverseSplitWithPrimal,
                  autodiff, autodiff_thunk, checkpoint)

H = 1e-6


def _rng(seed):
    return np.random.default_rng(seed)


def _z(rng, shape):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def _directional(f, args, dirs):
    plus = f(*[a + H * d for a, d in zip(args, dirs)])
    minus = f(*[a - H * d for a, d in zip(args, dirs)])
    return (plus - minus) / (2 * H)


# -- nested holomorphic derivatives: f''(z) ----------------------------------------------------

F = lambda z: z ** 3 * np.exp(z)                              # noqa: E731
D2F = lambda z: (6 * z + 6 * z ** 2 + z ** 3) * np.exp(z)     # noqa: E731
Z0 = 0.3 + 0.4j


def _holo_derivative(z):
    return autodiff(ReverseHolomorphic, F, Active, Active(z))[0][0]


def test_forward_over_reverse_holomorphic_is_the_second_derivative_times_the_direction():
    (t,) = autodiff(Forward, _holo_derivative, Duplicated, Duplicated(Z0, 1j))
    assert t == pytest.approx(1j * D2F(Z0), rel=1e-12)


def test_reverse_holomorphic_over_forward_and_over_itself_is_the_second_derivative():
    first = lambda z: autodiff(Forward, F, Duplicated, Duplicated(z, 1.0 + 0j))[0]  # noqa: E731
    (g,), = autodiff(ReverseHolomorphic, first, Active, Active(Z0))
    assert g == pytest.approx(D2F(Z0), rel=1e-12)
    (g,), = autodiff(ReverseHolomorphic, _holo_derivative, Active, Active(Z0))
    assert g == pytest.approx(D2F(Z0), rel=1e-12)

    za, weights = np.array([Z0, 1 - 0.5j]), np.array([1.0, 2.0])

    def weighted_shadow(z):        # inner derivative accumulated into a Duplicated shadow
        d = np.zeros_like(z)
        autodiff(ReverseHolomorphic, lambda q: np.sum(F(q)), Active, Duplicated(z, d))
        return np.sum(d * weights)
    (g,), = autodiff(ReverseHolomorphic, weighted_shadow, Active, Active(za.copy()))
    np.testing.assert_allclose(g, D2F(za) * weights, rtol=1e-12)


def test_reverse_over_reverse_holomorphic_of_a_real_loss():
    loss = lambda z: np.abs(_holo_derivative(z)) ** 2                          # noqa: E731
    (g,), = autodiff(Reverse, loss, Active, Active(Z0))
    d1 = lambda z: (3 * z ** 2 + z ** 3) * np.exp(z)                           # noqa: E731
    want = fd_gradient_complex(lambda z: np.abs(d1(z[()])) ** 2, np.array(Z0))
    assert g == pytest.approx(complex(want), rel=1e-8)


# -- hvp of a real function of complex inputs ---------------------------------------------------

def test_hvp_of_a_real_function_of_complex_inputs_is_the_directional_derivative_of_the_gradient():
    rng = _rng(1)
    z, w = _z(rng, 3), _z(rng, 3)
    loss = lambda z: (np.sum(np.abs(z * w) ** 2) + np.real(np.sum(z * z * 1j))     # noqa: E731
                      + np.sum(np.abs(z) ** 3))
    grad = lambda z: autodiff(Reverse, loss, Active, Active(z))[0][0]             # noqa: E731
    for v in (np.ones(3) + 0j, 1j * np.ones(3), _z(rng, 3)):
        np.testing.assert_allclose(tape.hvp(loss, z, v), _directional(grad, [z], [v]),
                                   rtol=1e-7, atol=1e-7)


# -- BatchDuplicated forward with writes into complex buffers -----------------------------------

def _writes(z, x, w):
    z.real[...] = x
    z.imag += x ** 2
    z[1] = w * 2j
    z[2:] *= np.exp(1j * x[2:])
    return np.sum(np.abs(z * np.array([1 + 2j, -0.5j, 0.7])) ** 2) + np.real(np.sum(z * z))


def _batched_write_args(rng, w):
    z, x = _z(rng, 3), rng.standard_normal(3)
    dz = (_z(rng, 3), _z(rng, 3))
    dx = (rng.standard_normal(3), rng.standard_normal(3))
    dw = (1j, 0.5 + 0j)        # Python complex shadows of a Python complex primal
    return z, x, w, dz, dx, dw


def _check_batched_writes(call, rng, w):
    z, x, w, dz, dx, dw = _batched_write_args(rng, w)
    zc, dzc = z.copy(), tuple(d.copy() for d in dz)
    (t,) = call(BatchDuplicated(zc, dzc), BatchDuplicated(x, dx), BatchDuplicated(w, dw))
    ref = z.copy()
    _writes(ref, x, w)
    np.testing.assert_allclose(zc, ref, rtol=1e-13, atol=1e-13)
    for k in range(2):
        zp, zm = z + H * dz[k], z - H * dz[k]
        fp = _writes(zp, x + H * dx[k], w + H * dw[k])
        fm = _writes(zm, x - H * dx[k], w - H * dw[k])
        assert t[k] == pytest.approx((fp - fm) / (2 * H), rel=1e-7, abs=1e-7)
        np.testing.assert_allclose(dzc[k], (zp - zm) / (2 * H), rtol=1e-7, atol=1e-7)


def test_batched_forward_writes_into_complex_buffers_eager_and_compiled():
    rng = _rng(2)
    _check_batched_writes(lambda *a: autodiff(Forward, _writes, BatchDuplicated, *a), rng,
                          0.3 - 0.2j)
    g = tape.compile(Forward, _writes, BatchDuplicated, *(BatchDuplicated,) * 3)
    for w in (0.3 - 0.2j, -1.1 + 0.4j):
        _check_batched_writes(g, rng, w)
    assert g.stats.eager_calls == 0 and g.stats.traces == 1, g.stats


# -- MixedDuplicated containers with complex scalars --------------------------------------------

def _mixed(rng):
    return {"s": 0.3 + 0.4j, "a": _z(rng, 3)}


def test_mixed_duplicated_complex_scalar_and_array_in_compiled_forward():
    rng = _rng(3)
    f = lambda p: p["a"] * p["s"] ** 2 + np.conj(p["s"]) * np.abs(p["a"])       # noqa: E731
    g = tape.compile(Forward, f, Duplicated, MixedDuplicated)
    for _ in range(2):
        p, dp = _mixed(rng), {"s": complex(*rng.standard_normal(2)), "a": _z(rng, 3)}
        (t,) = g(MixedDuplicated(p, dp))
        (te,) = autodiff(Forward, f, Duplicated, MixedDuplicated(p, dp))
        want = _directional(lambda s, a: f({"s": s, "a": a}), [p["s"], p["a"]],
                            [dp["s"], dp["a"]])
        np.testing.assert_allclose(t, want, rtol=1e-7, atol=1e-7)
        np.testing.assert_allclose(t, te, rtol=1e-12, atol=1e-12)
    assert g.stats.eager_calls == 0


def test_mixed_duplicated_complex_scalar_and_array_in_split_and_compiled_reverse():
    rng = _rng(4)
    loss = lambda p: (np.sum(np.abs(p["a"] * p["s"] ** 2 + np.conj(p["s"])) ** 2)   # noqa: E731
                      + np.real(p["s"] ** 2 * 1j))
    p = _mixed(rng)
    ws = fd_gradient_complex(lambda s: loss({"s": s[()], "a": p["a"]}), np.array(p["s"]))
    wa = fd_gradient_complex(lambda a: loss({"s": p["s"], "a": a}), p["a"])

    dp = {"s": 0j, "a": np.zeros(3, complex)}
    fwd, rev = autodiff_thunk(ReverseSplitWithPrimal, loss, Active, MixedDuplicated)
    tp, y, _ = fwd(MixedDuplicated(p, dp))
    assert y == pytest.approx(loss(p), rel=1e-13)
    (g,), = rev(MixedDuplicated(p, dp), 2.0, tp)
    assert g["s"] == pytest.approx(2 * complex(ws), rel=1e-8) and g["a"] is None
    np.testing.assert_allclose(dp["a"], 2 * wa, rtol=1e-7, atol=1e-8)

    dp = {"s": 0j, "a": np.zeros(3, complex)}
    (g,), = tape.compile(Reverse, loss, Active, MixedDuplicated)(MixedDuplicated(p, dp))
    assert g["s"] == pytest.approx(complex(ws), rel=1e-8)
    np.testing.assert_allclose(dp["a"], wa, rtol=1e-7, atol=1e-8)


def test_reverse_holomorphic_with_mixed_duplicated_and_checkpointed_duplicated():
    rng = _rng(5)
    p, dp = _mixed(rng), {"s": 0j, "a": np.zeros(3, complex)}
    (g,), = autodiff(ReverseHolomorphic, lambda p: np.sum(p["a"] * p["s"] ** 2), Active,
                     MixedDuplicated(p, dp))
    assert g["s"] == pytest.approx(2 * p["s"] * np.sum(p["a"]), rel=1e-12)
    np.testing.assert_allclose(dp["a"], np.full(3, p["s"] ** 2), rtol=1e-12)

    z, w = _z(rng, 3), _z(rng, 3)
    f = lambda z: np.sum(checkpoint(lambda q: np.exp(q) * q)(z) * w)            # noqa: E731
    plain = lambda z: np.sum(np.exp(z) * z * w)                                # noqa: E731
    dz = np.zeros(3, complex)
    _, value = autodiff(ReverseHolomorphicWithPrimal, f, Active, Duplicated(z.copy(), dz))
    assert value == pytest.approx(plain(z), rel=1e-13)
    np.testing.assert_allclose(dz, (np.exp(z) * (z + 1)) * w, rtol=1e-12)


# -- real inputs through complex intermediates, batched, compiled and second order ------------

_W = np.array([0.4 - 1.1j, 1.3 + 0.2j, -0.6 + 0.8j, 0.9 + 0.5j])
_A = np.array([[2.0 + 0.5j, 0.3 - 0.2j, -0.4j, 0.1],
               [0.2 + 0.1j, -1.5 + 0.3j, 0.6, 0.2j],
               [-0.3j, 0.4 + 0.4j, 1.8 - 0.6j, -0.5],
               [0.1 + 0.2j, -0.2, 0.3j, -2.1 + 0.1j]])

REAL_THROUGH_COMPLEX = {
    "fft": lambda x: np.sum(np.abs(np.fft.fft(x * _W)) ** 2 * np.arange(4)),
    "ifft": lambda x: np.sum(np.real(np.fft.ifft(np.fft.fft(x) * _W)) * x),
    "exp-angle": lambda x: (np.real(np.sum(np.exp(1j * x) * _W))
                            + np.sum(np.angle(np.exp(1j * x) + 2))),
    "abs-angle": lambda x: np.sum(np.abs(x + 1j * x ** 2) * np.angle(x * _W)),
    "attrs-conj": lambda x: np.sum((x * _W).real * (x * _W).imag + np.conj(x * _W).imag),
    "solve": lambda x: np.sum(np.abs(np.linalg.solve(_A + np.diag(x), _W)) ** 2),
    "inv": lambda x: np.real(np.trace(np.linalg.inv(_A + np.diag(x * 1j)))),
    "det": lambda x: np.abs(np.linalg.det(_A + np.outer(x, _W))),
}


@pytest.mark.parametrize("name", list(REAL_THROUGH_COMPLEX))
def test_real_inputs_through_complex_intermediates_batched_compiled_and_hvp(name):
    f, rng = REAL_THROUGH_COMPLEX[name], _rng(6)
    x = rng.standard_normal(4)
    want = fd_gradient_complex(f, x)
    # batched forward, eager and compiled: one direction per unit vector
    (t,) = autodiff(Forward, f, BatchDuplicated, BatchDuplicated(x.copy(), tuple(np.eye(4))))
    np.testing.assert_allclose(np.array(t), want, rtol=1e-6, atol=1e-7)
    g = tape.compile(Forward, f, BatchDuplicated, BatchDuplicated)
    for shift in (0.0, 0.1):
        (t,) = g(BatchDuplicated(x + shift, tuple(np.eye(4))))
        np.testing.assert_allclose(np.array(t), fd_gradient_complex(f, x + shift), rtol=1e-6, atol=1e-7)
    assert g.stats.eager_calls == 0
    # reverse jacobian in chunks (BatchDuplicated reverse passes); real dtype out
    (j,) = tape.jacobian(Reverse, f, x.copy(), chunk=2)
    assert j.dtype == np.float64
    np.testing.assert_allclose(j, want, rtol=1e-6, atol=1e-7)
    # hvp against differences of the (already checked) reverse gradient
    v = rng.standard_normal(4)
    grad = lambda y: autodiff(Reverse, f, Active, Active(y))[0][0]            # noqa: E731
    hv = tape.hvp(f, x.copy(), v)
    assert hv.dtype == np.float64
    np.testing.assert_allclose(hv, _directional(grad, [x], [v]), rtol=1e-6, atol=1e-6)
