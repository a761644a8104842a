"""Engine properties: long chains, threads, memory release, escaped tracers, saved values."""
import gc
import threading
import weakref

import numpy as np
import pytest

from tape import (Active, Const, Duplicated, EscapedTracerError, Forward, Reverse, ReverseWithPrimal,
                  autodiff,
                  custom_rule,
                  primal)
from tape.core import ReverseTrace



def numeric_gradient(f, x, eps=1e-6):
    """Central differences of a scalar function of a vector, entry by entry."""
    return np.array([(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(len(x))])

def test_100k_op_chain_has_no_recursion_limit():
    def f(x):
        for _ in range(100_000):
            x = x * 1.0
        return x
    (g,), = autodiff(Reverse, f, Active, Active(2.0))
    assert g == 1.0


def test_two_threads_differentiate_concurrently():
    results, errors = {}, []
    barrier = threading.Barrier(2)

    def work(name, scale):
        try:
            def f(x):
                barrier.wait(timeout=10)     # both tapes are open at the same time
                y = x
                for _ in range(2000):
                    y = np.sin(y) * scale + x
                return np.sum(y)
            x = np.linspace(0.1, 0.5, 4)
            (g,), = autodiff(Reverse, f, Active, Active(x))
            results[name] = g
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
    t1 = threading.Thread(target=work, args=("a", 0.5))
    t2 = threading.Thread(target=work, args=("b", 0.25))
    t1.start(), t2.start()
    t1.join(), t2.join()
    assert not errors, errors
    for name, scale in (("a", 0.5), ("b", 0.25)):
        def single(x):
            y = x
            for _ in range(2000):
                y = np.sin(y) * scale + x
            return np.sum(y)
        (expected,), = autodiff(Reverse, single, Active, Active(np.linspace(0.1, 0.5, 4)))
        np.testing.assert_array_equal(results[name], expected)


def test_tape_is_released_after_the_call():
    refs = []

    class Marked(np.ndarray):
        pass

    def f(x):
        y = np.sin(x)                  # the sin record saves x's value
        refs.append(weakref.ref(primal(y)))
        z = y * y                      # the mul record saves y's value
        return np.sum(z)
    x = np.linspace(0, 1, 1000)
    autodiff(Reverse, f, Active, Duplicated(x, np.zeros_like(x)))
    gc.collect()
    assert refs[0]() is None, "a saved intermediate outlived the call"


def test_trace_is_closed_and_escaped_tracer_refused():
    leaked = []

    def f(x):
        leaked.append(x)
        return x * 2
    autodiff(Reverse, f, Active, Active(1.0))

    def g(y):
        return y * leaked[0]
    with pytest.raises(EscapedTracerError):
        autodiff(Reverse, g, Active, Active(1.0))


def test_saved_value_not_corrupted_by_later_inplace_write():
    def f(x, y):
        z = y * x            # saves y's current value for dz/dx
        y[0] = 5.0           # a later in-place write to y
        return np.sum(z)
    x, dx = np.array([1.0, 2.0]), np.zeros(2)
    y, dy = np.array([3.0, 4.0]), np.zeros(2)
    autodiff(Reverse, f, Active, Duplicated(x, dx), Duplicated(y, dy))
    np.testing.assert_array_equal(dx, [3.0, 4.0])
    np.testing.assert_array_equal(y, [5.0, 4.0])            # the write happened (Enzyme)
    np.testing.assert_array_equal(dy, [1.0, 2.0])           # adjoint of y's initial value


def test_owned_buffer_written_many_times_after_use():
    def f(x):
        buf = np.zeros_like(x)
        total = 0.0
        for i in range(len(x)):
            buf[i] = x[i] * (i + 1)
            total = total + np.sum(buf * buf)   # records save buf's current value
        return total
    x = np.array([0.5, -1.0, 2.0])
    (g,), = autodiff(Reverse, f, Active, Active(x))
    # total = sum_k sum_{i<=k} (x_i (i+1))^2  =>  d/dx_i = 2 x_i (i+1)^2 (n - i)
    n = len(x)
    expected = [2 * x[i] * (i + 1) ** 2 * (n - i) for i in range(n)]
    np.testing.assert_allclose(g, expected, atol=1e-10)


def test_cotangents_freed_during_sweep():
    # Records are consumed while sweeping; after backward the tape holds nothing.
    with ReverseTrace() as trace:
        x = trace.new_leaf(np.ones(3))
        y = np.sum(np.sin(x) * 2)
        assert len(trace.records) == 3
        out = trace.backward({y.slot: np.ones(())}, [x.slot])
    assert trace.records == []
    np.testing.assert_allclose(out[x.slot], 2 * np.cos(1.0) * np.ones(3), atol=1e-12)


def test_augmented_assignment_on_duplicated_buffer():
    def f(y, x):
        y += x * x
        y *= 2.0
    x, dx = np.array([1.0, 2.0]), np.zeros(2)
    y, dy = np.array([1.0, 1.0]), np.array([1.0, 1.0])
    autodiff(Reverse, f, Duplicated(y, dy), Duplicated(x, dx))
    np.testing.assert_array_equal(y, [4.0, 10.0])
    np.testing.assert_array_equal(dx, [4.0, 8.0])    # d(2(y + x^2))/dx = 4x
    np.testing.assert_array_equal(dy, [2.0, 2.0])    # adjoint of y's initial value


def test_scalar_augmented_assignment_rebinds_like_python():
    def f(x):
        y = x
        y += 1.0             # floats are immutable: x must keep its value
        return x * y
    (g,), = autodiff(Reverse, f, Active, Active(2.0))
    assert g == pytest.approx(2 * 2.0 + 1.0)


def test_writes_through_a_basic_view_reach_the_base_array():
    def f(x):
        out = np.zeros((2, 3)) * x[0]       # a traced buffer
        row = out[1]                        # a view, as in NumPy
        row[:] = x * 2.0
        row[0] += x[1]
        for r in out:                       # iteration yields views too
            r[2] = r[2] * 3.0
        return np.sum(out * out)
    x = np.array([0.5, -1.0, 2.0])
    (g,), = autodiff(Reverse, f, Active, Active(x))

    def plain(x):
        out = np.zeros((2, 3)) * x[0]
        row = out[1]
        row[:] = x * 2.0
        row[0] += x[1]
        for r in out:
            r[2] = r[2] * 3.0
        return np.sum(out * out)
    numeric = numeric_gradient(plain, x)
    np.testing.assert_allclose(g, numeric, rtol=1e-6, atol=1e-6)
    primal_value = autodiff(ReverseWithPrimal, f, Active, Active(x))[1]
    assert primal_value == pytest.approx(plain(x))


def test_float32_stays_float32():
    seen = []
    spy = custom_rule(lambda x: x * 2.0,
                      augmented_primal=lambda cfg, x: (x * 2.0, None),
                      reverse=lambda cfg, s, g: (seen.append(g.dtype) or g * 2.0,))
    x = np.array([1.0, 2.0], dtype=np.float32)
    (g,), = autodiff(Reverse, lambda x: np.sum(spy(x)), Active, Active(x))
    assert g.dtype == np.float32 and seen == [np.float32]
    np.testing.assert_array_equal(g, [2.0, 2.0])


def test_writes_through_reshaped_and_transposed_views_reach_the_base():
    def body(x, np_zeros_like):
        out = np_zeros_like(x).reshape(2, 3)
        flat = out.reshape(-1)              # a view in NumPy
        flat[1:4] = x[:3] * 2.0
        out.T[2] = x[3:5]                   # .T is a view: out[:, 2] = x[3:5]
        copy = out.T.reshape(-1)            # a copy in NumPy: writes must not reach out
        copy[0] = 100.0
        return np.sum(out * out) + copy[0] * x[5]

    def traced(x):
        return body(x, np.zeros_like)

    x = np.array([0.5, -1.0, 2.0, 0.3, -0.7, 1.1])
    (g,), = autodiff(Reverse, traced, Active, Active(x))
    value = autodiff(ReverseWithPrimal, traced, Active, Active(x))[1]
    assert value == pytest.approx(body(x, np.zeros_like))
    numeric = numeric_gradient(lambda x: body(x, np.zeros_like), x)
    np.testing.assert_allclose(g, numeric, rtol=1e-6, atol=1e-8)


def test_writes_through_flipped_and_rotated_views_reach_the_base():
    def body(x, zeros_like):
        out = zeros_like(x).reshape(2, 3) + 1.0
        np.flip(out, axis=1)[0] = x[:3]          # out[0] = x[2::-1]
        np.rot90(out)[0, 1] = x[3] * x[4]       # rot90 is a view of out too
        return np.sum(out * np.arange(1.0, 7.0).reshape(2, 3)) + x[5]

    def traced(x):
        return body(x, np.zeros_like)

    x = np.array([0.5, -1.0, 2.0, 0.3, -0.7, 1.1])
    (g,), = autodiff(Reverse, traced, Active, Active(x))
    assert autodiff(ReverseWithPrimal, traced, Active, Active(x))[1] == pytest.approx(
        body(x, np.zeros_like))
    numeric = numeric_gradient(lambda x: body(x, np.zeros_like), x)
    np.testing.assert_allclose(g, numeric, rtol=1e-6, atol=1e-8)


def test_writes_into_split_pieces_reach_the_base():
    def body(x, zeros_like):
        out = zeros_like(x) + 1.0
        left, right = np.split(out, 2)
        left[:] = x[:3] * 2.0
        right[1] = x[4] ** 2
        return np.sum(out * np.arange(1.0, 7.0)) + x[3]

    x = np.array([0.5, -1.0, 2.0, 0.3, -0.7, 1.1])
    (g,), = autodiff(Reverse, lambda x: body(x, np.zeros_like), Active, Active(x))
    numeric = numeric_gradient(lambda x: body(x, np.zeros_like), x)
    np.testing.assert_allclose(g, numeric, rtol=1e-6, atol=1e-8)


def test_views_see_later_writes_into_their_base():
    def body(x, zeros_like):
        out = zeros_like(x).reshape(2, 3)
        row, col, flat, flipped = out[0], out[:, 1], out.reshape(-1), np.flip(out, axis=1)
        out[0] = x[:3]                     # every earlier view sees this write
        out[1, 1] = x[3] * x[4]
        row[2] = row[2] * 2.0              # and writes through one view reach the others
        return (np.sum(row * 1.5) + np.sum(col ** 2) + np.sum(flat * np.arange(6.0))
                + np.sum(flipped[:, 0] * x[5]))

    x = np.array([0.5, -1.0, 2.0, 0.3, -0.7, 1.1])
    traced = lambda x: body(x, np.zeros_like)   # noqa: E731
    (g,), = autodiff(Reverse, traced, Active, Active(x))
    assert autodiff(ReverseWithPrimal, traced, Active, Active(x))[1] == pytest.approx(
        body(x, np.zeros_like))
    np.testing.assert_allclose(g, numeric_gradient(traced, x), rtol=1e-6, atol=1e-8)
    t, = autodiff(Forward, traced, Duplicated(x, np.ones(6)))
    assert t == pytest.approx(np.sum(numeric_gradient(traced, x)), rel=1e-6)


def test_writes_into_a_const_array_after_use_do_not_change_the_gradient():
    def g(x, W):
        y = x * W          # the record keeps W
        W[0] = 100.0       # a plain (inactive) write into the Const array
        return y.sum()

    def h(x, W):
        y = np.sin(x) @ W
        W *= 3.0           # in place through a ufunc
        return y
    W = np.array([1.0, 2.0])
    (dx, dW), = autodiff(Reverse, g, Active, Active(np.ones(2)), Const(W))
    np.testing.assert_array_equal(dx, [1.0, 2.0])
    np.testing.assert_array_equal(W, [100.0, 2.0])       # the write still reaches the caller
    W = np.array([1.0, 2.0])
    (dx, _), = autodiff(Reverse, h, Active, Active(np.ones(2)), Const(W))
    np.testing.assert_allclose(dx, np.cos(1.0) * np.array([1.0, 2.0]), atol=1e-12)
    np.testing.assert_array_equal(W, [3.0, 6.0])


def test_a_const_scratch_buffer_rewritten_in_a_loop_keeps_every_saved_value():
    def f(x, buf):
        total = 0.0
        for i in range(50):
            total = total + np.sum(x * buf)   # the record keeps buf as it is now
            buf[0] = float(i)                  # later writes must not reach that record
        return total
    (dx, _), = autodiff(Reverse, f, Active, Active(np.ones(3)), Const(np.ones(3)))
    # buf[0] is 1 at step 0 and i - 1 at step i >= 1
    np.testing.assert_array_equal(dx, [1.0 + sum(range(49)), 50.0, 50.0])
