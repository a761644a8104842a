"""Red-team checks of buffer reuse and derivative partners in compiled programs
(tape/program_inplace.py): a compiled float64 program must give eager `autodiff`'s bits for
values and gradients, whatever the layout of the arrays it writes over, and a partner value
(cos(x) read for sin's derivative) must be the cos of the values sin saw."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import tape
from test_compile_buffer_reuse import _compare as compare_with_eager
from tape import Active, Duplicated, Reverse, ReverseWithPrimal



def _inputs(call, shape=(6, 5)):
    return np.random.default_rng(call).uniform(0.2, 0.9, size=shape)


def _compare(f, *make, mode=Reverse):
    """Compiled and eager agree exactly on the gradients (and the value for
    ReverseWithPrimal) over several calls, and neither touches the inputs."""
    g = tape.compile(mode, f, Active, *[Duplicated] * len(make))
    compare_with_eager(f, g, *make, mode=mode)


def _fd_check(f, *xs, h=1e-6):
    """Central differences of f against eager gradients (float64)."""
    grads = [np.zeros_like(x) for x in xs]
    tape.autodiff(Reverse, f, Active, *[Duplicated(x.copy(), d) for x, d in zip(xs, grads)])
    for k, x in enumerate(xs):
        fd = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            up, dn = [a.copy() for a in xs], [a.copy() for a in xs]
            up[k][idx] += h
            dn[k][idx] -= h
            fd[idx] = (f(*up) - f(*dn)) / (2 * h)
        np.testing.assert_allclose(grads[k], fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("shape", [(64, 80), (128, 128), (70, 100)])
def test_a_sum_after_a_mixed_layout_add_written_over_an_operand_is_eager_s_bits(shape):
    def f(x, w):
        a = np.cos(w.T) * 0.3 + 0.5       # F-ordered, dies at ``a + b``
        b = np.sin(x) * 0.3               # C-ordered
        c = a + b                         # eager: C-ordered; compiled: written into a
        return np.sum(c * 1.7)
    _compare(f, lambda c: _inputs(c, shape), lambda c: _inputs(c + 7, shape[::-1]),
             mode=ReverseWithPrimal)


def test_a_partner_written_through_a_reshaped_view_is_not_read_for_the_derivative():
    # ``c.reshape(-1)[0] = 5`` changes c through a view: sin's reverse must not read c as cos(x).
    def f(x):
        c = np.cos(x)
        s = np.sin(x)
        r = c.reshape(-1)
        r[0] = 5.0
        return np.sum(s * s) + np.sum(c * c)
    _compare(f, _inputs)
    _fd_check(f, _inputs(0))


def test_an_operand_written_between_two_partners_is_not_a_shared_partner():
    # cos(y) after ``y[0] = 5`` is not the cos of the y sin saw.
    def f(x):
        y = x * 1.0
        a = np.sin(y)
        y[0] = 5.0
        b = np.cos(y)
        return np.sum(a * 2.0) + np.sum(b * 3.0)
    _compare(f, _inputs)
    _fd_check(f, _inputs(1))


def test_threads_calling_one_program_with_reused_buffers_get_their_own_bits():
    def f(x):
        return np.sum(np.exp(np.tanh(np.sin(x) * 0.5 + 1.0)) * 2.0)
    g = tape.compile(Reverse, f, Active, Duplicated)
    bad = []

    def work(k):
        for c in range(10):
            x = _inputs(100 * k + c, (80, 64))
            got, want = np.zeros_like(x), np.zeros_like(x)
            g(Duplicated(x, got))
            tape.autodiff(Reverse, f, Active, Duplicated(x, want))
            if not np.array_equal(got, want):
                bad.append((k, c))
    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad, bad


def test_a_broadcast_operand_s_gradient_behind_transposes_is_eager_s_bits():
    def f(x, w, b):
        p = np.sin(x) * np.cos(w.T + b)
        q = p * np.exp(w.T * 0.1)
        return np.sum(q.T * 1.3)
    _compare(f, lambda c: _inputs(c, (200, 150)), lambda c: _inputs(c + 7, (150, 200)),
             lambda c: _inputs(c + 9, (150,)))
