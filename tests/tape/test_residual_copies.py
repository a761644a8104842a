"""What a record keeps of arrays the function does not differentiate.

A Const argument is kept by reference and copied only when written (`tape.constbuffer`), by
any of NumPy's ways of writing into it; a closed-over array is copied when a record saves it,
and a copy is shared by later records while the array's bits are unchanged. So a weight
matrix used at every step of a loop is kept once, whichever way it reaches the function, and
a write between two uses still gives each record the values it saw."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from tape import Active, ActivityError, Const, Reverse, autodiff
from tape.residuals import same_bits

W0 = np.array([3.0, 1.0, 2.0])

WRITES = {
    "fill": lambda c: c.fill(2.0),
    "sort": lambda c: c.sort(),
    "partition": lambda c: c.partition(1),
    "put method": lambda c: c.put([0], 7.0),
    "np.put": lambda c: np.put(c, [0], 7.0),
    "np.copyto": lambda c: np.copyto(c, 5.0),
    "np.place": lambda c: np.place(c, c > 1.5, 0.0),
    "np.putmask": lambda c: np.putmask(c, c > 1.5, 0.0),
    "np.put_along_axis": lambda c: np.put_along_axis(c, np.array([0]), 4.0, axis=0),
    "byteswap in place": lambda c: c.byteswap(inplace=True),
    "a view's fill": lambda c: c[::-1].fill(0.0),
    "setitem": lambda c: c.__setitem__(0, 9.0),
    "in-place operator": lambda c: c.__imul__(3.0),
}

USES = {"x * c": lambda x, c: x * c, "c * x": lambda x, c: c * x,
        "c @ diag(x)": lambda x, c: c @ (np.eye(3) * x)}


@pytest.mark.parametrize("use", list(USES))
@pytest.mark.parametrize("write", list(WRITES))
def test_a_const_written_after_its_use_gives_the_derivative_at_the_values_used(write, use):
    def f(x, c):
        y = np.sum(USES[use](x, c))
        WRITES[write](c)
        return y
    c = W0.copy()
    (gx, _), = autodiff(Reverse, f, Active, Active(np.ones(3)), Const(c))
    np.testing.assert_array_equal(gx, W0)


def test_a_const_written_between_uses_gives_each_use_its_values():
    def f(x, c):
        y = np.sum(x * c)
        c.fill(0.5)
        return y + np.sum(x * x * c)
    (gx, _), = autodiff(Reverse, f, Active, Active(np.ones(3)), Const(W0.copy()))
    np.testing.assert_array_equal(gx, W0 + 1.0)


def _peak_bytes(call) -> int:
    call()
    tracemalloc.start()
    try:
        start, _ = tracemalloc.get_traced_memory()
        call()
        return tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()


STEPS = 40
W = np.random.default_rng(0).standard_normal((64, 64)) * 0.1     # 32 kB


def rnn_closure(h):
    for _ in range(STEPS):
        h = np.tanh(W @ h)
    return np.sum(h)


def rnn_const(h, w):
    for _ in range(STEPS):
        h = np.tanh(w @ h)
    return np.sum(h)


@pytest.mark.parametrize("how", ["closure", "Const"])
def test_weights_used_at_every_step_are_kept_once(how):
    h = np.random.default_rng(1).standard_normal(64)
    if how == "closure":
        call = lambda: autodiff(Reverse, rnn_closure, Active, Active(h))     # noqa: E731
    else:
        call = lambda: autodiff(Reverse, rnn_const, Active, Active(h), Const(W))  # noqa: E731
    (g, *_), = call()
    np.testing.assert_allclose(g, autodiff(Reverse, rnn_closure, Active, Active(h))[0][0])
    # One copy per step would be STEPS * 32 kB = 1.3 MB; the carries are 40 * 0.5 kB.
    assert _peak_bytes(call) < 8 * W.nbytes


def test_a_closed_over_array_scaled_between_uses_is_copied_again():
    A = np.random.default_rng(2).standard_normal((64, 64))

    def f(x):
        M = A.copy()       # a workspace of 32 kB, above the size where copies are shared
        y = 0.0
        for _ in range(3):
            y = y + np.sum(np.sin(M @ x))
            M *= 0.5
        return y

    x = np.random.default_rng(3).standard_normal(64)
    want, M = np.zeros(64), A.copy()
    for _ in range(3):
        want += M.T @ np.cos(M @ x)
        M = M * 0.5
    (g,), = autodiff(Reverse, f, Active, Active(x))
    np.testing.assert_allclose(g, want, rtol=1e-12)


def test_shared_copies_compare_bits():
    assert same_bits(np.full(4, np.nan), np.full(4, np.nan))
    assert not same_bits(np.zeros(4), -np.zeros(4))
    assert not same_bits(np.arange(4.0), np.arange(4.0)[::-1].copy())
    assert same_bits(np.arange(6, dtype=np.float32).reshape(2, 3),
                      np.arange(6, dtype=np.float32).reshape(2, 3))


BYPASSES = {
    "np.asarray": lambda c: np.asarray(c).__setitem__(0, 9.0),
    "view as ndarray": lambda c: c.view(np.ndarray).__setitem__(0, 9.0),
    "unbound ndarray.fill": lambda c: np.ndarray.fill(c, 2.0),
    "memoryview": lambda c: memoryview(c).cast("B").__setitem__(slice(0, 8), b"\0" * 8),
    "sign of a zero": lambda c: np.asarray(c).__setitem__(1, -0.0),
}


@pytest.mark.parametrize("write", list(BYPASSES))
def test_a_const_written_around_the_argument_after_its_use_is_refused(write):
    def f(x, c):
        y = np.sum(x / c)
        BYPASSES[write](c)
        return y
    c = np.array([3.0, 0.0, 2.0])
    with np.errstate(divide="ignore"), pytest.raises(ActivityError, match="`c`.*is Const"):
        autodiff(Reverse, f, Active, Active(np.ones(3)), Const(c))


def test_a_const_written_around_the_argument_before_its_use_or_through_it_is_accepted():
    def f(x, c):
        np.asarray(c)[0] = 9.0     # before any use: every record sees the new value
        y = np.sum(x * c)
        c[1] = 5.0                 # through the argument: the record keeps a copy
        return y + np.sum(c * x)
    (gx, _), = autodiff(Reverse, f, Active, Active(np.ones(3)), Const(np.array([3.0, 1, 2])))
    np.testing.assert_array_equal(gx, [18.0, 6.0, 4.0])


def test_a_read_only_const_is_not_checksummed_but_a_read_only_view_of_a_writable_base_is():
    base = np.array([3.0, 1.0, 2.0])
    view = base.view()
    view.flags.writeable = False

    def f(x, c):
        y = np.sum(x * c)
        base[0] = 9.0          # the memory behind the read-only view changes
        return y
    with pytest.raises(ActivityError, match="is Const"):
        autodiff(Reverse, f, Active, Active(np.ones(3)), Const(view))

    frozen = np.array([3.0, 1.0, 2.0])
    frozen.flags.writeable = False
    (gx, _), = autodiff(Reverse, lambda x, c: np.sum(x * c), Active, Active(np.ones(3)),
                        Const(frozen))
    np.testing.assert_array_equal(gx, frozen)
