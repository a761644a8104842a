"""`tape.compile` in Forward and ForwardWithPrimal against eager `autodiff`, bit for bit.

The generated programs of tests/tape/test_compile_programs.py (elementwise ops, matmul,
reductions, views, in-place writes into fresh, Duplicated and pytree buffers, masks, argmax,
branches and loops on values), run in forward mode with changing values, each call compared
with eager forward mode on copies of the same arguments: primal, returned tangent, buffers
written and their shadows, errors. Then return activities, scalars, pytrees, float32,
complex numbers, finite differences and what the program leaves out.
"""
import numpy as np
import pytest

import tape
from tape import (BatchDuplicated, Const, Duplicated, DuplicatedNoNeed, Forward,
                  ForwardWithPrimal, autodiff)

from forward_compare import identical, run_sequence
from test_compile_programs import SHAPE, STEPS, Active, make_function

FW, FWP = Forward, ForwardWithPrimal


def _program_args(spec, rng):
    """The arguments of a generated program for one call, in forward mode (`a` a Python
    float or an array, Duplicated or Const; W Duplicated or Const; buf and p Duplicated)."""
    def dup(x, dx):
        return Duplicated(x, dx)
    a = float(rng.uniform(-1.5, 1.5)) if spec["a_kind"] == "float" else rng.uniform(-1.5, 1.5,
                                                                                    (4,))
    da = float(rng.normal()) if spec["a_kind"] == "float" else rng.normal(size=(4,))
    W = rng.uniform(-1.0, 1.0, (4, 4))
    p = {"w": rng.uniform(-1, 1, (4,)), "b": rng.uniform(-1, 1, (3, 1))}
    dp = {"w": rng.normal(size=(4,)), "b": rng.normal(size=(3, 1))}
    if spec["p_kind"] == "list":
        p, dp = [p["w"], p["b"]], [dp["w"], dp["b"]]
    return [dup(rng.uniform(-2.0, 2.0, SHAPE), rng.normal(size=SHAPE)),
            dup(a, da) if spec["a_active"] else Const(a),
            dup(W, rng.normal(size=(4, 4))) if spec["W_active"] else Const(W),
            Const(np.array([int(rng.integers(0, 3))])),
            Const(float(rng.choice([-0.3, 0.0, 0.4]))),
            dup(rng.uniform(-1.0, 1.0, SHAPE), rng.normal(size=SHAPE)),
            dup(p, dp)]


def _specs(n, seed=1234):
    rng = np.random.default_rng(seed)
    names = sorted(STEPS)
    for _ in range(n):
        yield {"steps": tuple(rng.choice(names, size=int(rng.integers(1, 6)))),
               "mode": [FW, FWP][int(rng.integers(2))],
               "ret": [Duplicated, Duplicated, Const, DuplicatedNoNeed][int(rng.integers(4))],
               "scalar": bool(rng.integers(2)),
               "a_kind": ["float", "array"][int(rng.integers(2))],
               "a_active": bool(rng.integers(3)),
               "W_active": bool(rng.integers(2)),
               "p_kind": ["dict", "list"][int(rng.integers(2))],
               "seed": int(rng.integers(2 ** 31))}


@pytest.mark.parametrize("spec", list(_specs(60)), ids=lambda s: "-".join(s["steps"]))
def test_generated_programs_equal_eager_forward_mode(spec):
    f = make_function(spec["steps"], Active if spec["scalar"] else None)
    rng = np.random.default_rng(spec["seed"])
    calls = [_program_args(spec, rng) for _ in range(3)]
    calls[1][0].val[...] = -calls[0][0].val   # the opposite x flips branches on sums, masks
    calls.append(calls[0])
    g = run_sequence(spec["mode"], f, spec["ret"], lambda c: calls[c], range(len(calls)))
    stats = g.stats
    assert not [r for r in stats.eager_reasons if r.startswith("tracing failed")], stats
    assert stats.eager_calls == 0, stats
    assert stats.hits >= 1, stats


# -- return activities and what comes back ------------------------------------------------------

def _f(x, c):
    y = np.sin(x) * c + x ** 2
    if x.sum() > 0:
        return np.tanh(y) * 0.5
    return y / 3.0


@pytest.mark.parametrize("mode", [FW, FWP])
@pytest.mark.parametrize("ret", [Duplicated, DuplicatedNoNeed, Const])
def test_return_activities_give_eager_mode_s_tuples(mode, ret):
    def args(k):
        x = np.linspace(0.1, 1, 5) * (1 if k % 2 else -3)
        return [Duplicated(x, np.full(5, 0.3)), Const(np.arange(5.0))]
    g = run_sequence(mode, _f, ret, args, [0, 1, 0, 1, 2])
    assert g.stats.eager_calls == 0 and g.stats.guard_failures >= 1, g.stats


def test_no_return_activity_acts_as_duplicated():
    g = tape.compile(FWP, _f)
    x, dx, c = np.linspace(-1, 1, 5), np.ones(5), np.arange(5.0)
    for _ in range(2):
        identical(g(Duplicated(x, dx), Const(c)), autodiff(FWP, _f, Duplicated(x, dx), Const(c)))
    assert g.stats.hits == 1


def test_python_floats_give_python_floats():
    def f(x, y):
        return x * x * y + np.sin(x)
    g = run_sequence(FWP, f, Duplicated, lambda k: [Duplicated(1.0 + k, 1.0),
                                                   Duplicated(2.0, 0.5 * k)], [0, 1, 2])
    got = g(Duplicated(3.0, 1.0), Duplicated(2.0, 0.0))
    assert type(got[0]) is float and type(got[1]) is float


def test_pytrees_in_and_out():
    def f(p, c):
        h = np.tanh(p["w"] @ c + p["b"])
        return {"h": h, "sum": np.sum(h * h), "const": c[0], "n": 3}

    def args(k):
        p = {"w": np.arange(6.0).reshape(2, 3) / (k + 1), "b": np.ones(2) * k}
        dp = {"w": np.ones((2, 3)), "b": np.array([1.0, -1.0])}
        return [Duplicated(p, dp), Const(np.array([0.5, -1.0, 2.0]))]
    g = run_sequence(FWP, f, Duplicated, args, [0, 1, 1])
    assert g.stats.eager_calls == 0


def test_a_result_that_is_an_argument_or_a_constant():
    def f(x, c):
        return x, c * 2.0, 1.5, np.ones(2)
    g = run_sequence(FWP, f, Duplicated, lambda k: [Duplicated(np.ones(2) * k, np.ones(2)),
                                                   Const(np.arange(2.0))], [0, 1])
    assert g.stats.eager_calls == 0


# -- numbers ------------------------------------------------------------------------------------

def test_float32_programs():
    def f(x, w):
        return np.tanh(x @ w) * np.float32(0.5) + x.sum() * 2.0

    def args(k):
        rng = np.random.default_rng(k)
        return [Duplicated(rng.normal(size=(3, 4)).astype(np.float32),
                           rng.normal(size=(3, 4)).astype(np.float32)),
                Duplicated(rng.normal(size=(4, 4)).astype(np.float32),
                           np.ones((4, 4), np.float32))]
    run_sequence(FWP, f, Duplicated, args, [0, 1, 2])


def test_complex_numbers():
    def f(z, x):
        w = z * z * np.exp(1j * x) + np.conj(z)   # a real input's tangent made complex
        return w * (x + 2.0j)

    def args(k):
        z = np.array([1 + 2j, -0.5j, 3.0]) * (k + 1)
        return [Duplicated(z, np.array([1.0, 1j, 0.5 - 0.5j])),
                Duplicated(np.array([0.1, 0.2, -0.3]), np.ones(3))]
    run_sequence(FWP, f, Duplicated, args, [0, 1, 1])


def test_finite_differences_float64():
    def f(x, c):
        y = np.tanh(x @ c) + np.log1p(x * x).sum(axis=1, keepdims=True)
        return y / (1.0 + np.exp(-x[:, :1])) - np.maximum(x, 0.1)[:, 1:2] ** 3

    rng = np.random.default_rng(3)
    x, c, v = rng.normal(size=(3, 4)), rng.normal(size=(4, 2)), rng.normal(size=(3, 4))
    g = tape.compile(FWP, f, Duplicated, Duplicated, Const)
    for scale in (1.0, -0.7):
        tangent, primal = g(Duplicated(x * scale, v), Const(c))
        h = 1e-6
        fd = (f(x * scale + h * v, c) - f(x * scale - h * v, c)) / (2 * h)
        np.testing.assert_allclose(tangent, fd, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(primal, f(x * scale, c), rtol=1e-15)


# -- in-place functions -------------------------------------------------------------------------

def test_in_place_function_writes_primal_and_tangent_into_the_buffers():
    def f(y, z, x, c):
        y[0] = x[0] ** 2 + x[1]
        y[1] = x[0] * x[1]
        z[:] = c * 2.0        # a value with no tangent: z's shadow is zeroed, as eagerly
        y[2:] += np.sin(x[2:]) * c[2:]

    def args(k):
        return [Duplicated(np.zeros(4), np.full(4, 7.0)), Duplicated(np.ones(4), np.ones(4)),
                Duplicated(np.arange(4.0) + k, np.array([1.0, 0.0, 0.5, -1.0])),
                Const(np.linspace(0, 1, 4))]
    for ret in (Const, Duplicated):
        for mode in (FW, FWP):
            g = run_sequence(mode, f, ret, args, [0, 1, 2])
            assert g.stats.eager_calls == 0, g.stats


def test_fresh_buffers_are_fresh_at_each_replay():
    def f(x):
        out = np.zeros_like(x)
        out[1:] = x[:-1] * 2.0
        out[0] = np.sum(x)
        view = out[1:]
        view *= 1.5
        return out
    g = run_sequence(FWP, f, Duplicated, lambda k: [Duplicated(np.arange(4.0) * k, np.ones(4))],
                     [0, 1, 2])
    t1, p1 = g(Duplicated(np.ones(4), np.ones(4)))
    t2, p2 = g(Duplicated(np.ones(4), np.ones(4)))
    assert p1 is not p2 and t1 is not t2


# -- what the program leaves out ------------------------------------------------------------

def test_const_paths_and_const_returns_do_no_tangent_work():
    def f(x, c):
        heavy = np.tanh(c @ c.T) + np.exp(c).sum()   # constants only: no tangent
        return np.sin(x) * heavy[0, 0]

    args = [Duplicated(np.ones(3), np.ones(3)), Const(np.eye(3))]
    g = tape.compile(FW, f, Duplicated, Duplicated, Const)
    identical(g(*args), autodiff(FW, f, Duplicated, *args))
    source = str(g)
    assert "2 with a forward rule" in source, source   # sin and the product
    assert "matmul_fwd" not in source and "tanh_fwd" not in source, source

    h = tape.compile(FWP, f, Const, Duplicated, Const)
    identical(h(*args), autodiff(FWP, f, Const, *args))
    assert "0 with a forward rule" in str(h), str(h)
    assert "t0" not in str(h).split("tangents", 1)[1], str(h)


def test_printed_program_is_the_forward_program():
    g = tape.compile(FW, lambda x: np.sin(x) @ x, Duplicated, Duplicated)
    g(Duplicated(np.ones(3), np.ones(3)))
    text = str(g)
    assert "(Forward)" in text and "def run(leaves, tangents" in text, text


def test_batched_activities_are_compiled():
    def f(x):
        return np.sin(x) * x
    g = tape.compile(FW, f, Duplicated, BatchDuplicated)
    x = np.ones(3)
    args = BatchDuplicated(x, (np.ones(3), np.arange(3.0)))
    identical(g(args), autodiff(FW, f, Duplicated, args))
    assert g.stats.eager_calls == 0 and g.stats.traces == 1, g.stats   # (more: test_compile_batched*.py)


@pytest.mark.parametrize("f", [lambda x, y: x + y, lambda x, y: y - x, lambda x, y: -x + y,
                               lambda x, y: x * 2.0 + y, lambda x, y: x + np.arange(3)])
def test_a_tangent_passed_into_a_wider_result_is_as_wide(f):
    """A float32 tangent passed through into a float64 result (x32 + y64) is float64 in eager
    forward mode (the result's space); the inline tangent of the program was float32."""
    x, y = np.ones(3, np.float32), np.linspace(0.5, 1.5, 3)
    args = [Duplicated(x, np.full(3, 0.25, np.float32)), Const(y)]
    g = tape.compile(FWP, f, Duplicated, Duplicated, Const)
    for _ in range(3):
        got = g(*args)
    want = autodiff(FWP, f, Duplicated, *args)
    assert want[0].dtype == np.float64 and got[0].dtype == want[0].dtype
    identical(got, want)
    assert g.stats.eager_calls == 0
