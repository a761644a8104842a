"""Buffers the function overwrites (Enzyme's semantics: the shadow seeds the final value and is
zeroed after the call). A write of the whole buffer leaves its old values no path to the
result, and a shadow of zeros seeds nothing; both must still give the derivatives a partial
write and a nonzero shadow give, eager and compiled."""
from __future__ import annotations

import numpy as np
import pytest

import tape
from tape import Active, Duplicated, Reverse, autodiff

N = 100   # above the size where a zero shadow is seeded without a copy

WHOLE_WRITES = {
    "ellipsis": lambda b, v: b.__setitem__(Ellipsis, v),
    "slice": lambda b, v: b.__setitem__(slice(None), v),
    "empty tuple": lambda b, v: b.__setitem__((), v),
    "slices and ellipsis": lambda b, v: b.__setitem__((slice(None), Ellipsis), v),
}


def make_f(write):
    def f(b, x):
        y = np.sum(np.sin(b) * x)      # the old values reach the result here only
        write(b, x ** 2)               # then the whole buffer is overwritten
        return y + np.sum(x)
    return f


def expected(b0, x, shadow):
    """d/db0 and d/dx of the result plus <shadow, final b> (final b = x**2)."""
    return np.cos(b0) * x, np.sin(b0) + 1.0 + 2.0 * x * shadow


def calls(f):
    compiled = tape.compile(Reverse, f, Active, Duplicated, Active)
    return {"eager": lambda *a: autodiff(Reverse, f, Active, *a), "compiled": compiled}


@pytest.mark.parametrize("spelling", list(WHOLE_WRITES))
@pytest.mark.parametrize("shadow_kind", ["zeros", "nonzero"])
def test_whole_buffer_writes(spelling, shadow_kind):
    rng = np.random.default_rng(0)
    for name, call in calls(make_f(WHOLE_WRITES[spelling])).items():
        for _ in range(3):   # compiled: trace, confirm, replay
            b0, x = rng.standard_normal(N), rng.standard_normal(N)
            shadow = np.zeros(N) if shadow_kind == "zeros" else rng.standard_normal(N)
            b, db = b0.copy(), shadow.copy() + 0.0
            db_in = db.copy()
            (_, gx), = call(Duplicated(b, db), Active(x))
            want_db, want_gx = expected(b0, x, db_in)
            np.testing.assert_allclose(b, x ** 2, rtol=1e-15, err_msg=name)
            # The shadow: its seed consumed (zeroed), then the old values' derivative added.
            np.testing.assert_allclose(db, want_db, rtol=1e-13, atol=1e-15, err_msg=name)
            np.testing.assert_allclose(gx, want_gx, rtol=1e-13, atol=1e-15, err_msg=name)


def test_partial_write_keeps_the_old_values_path():
    def f(b, x):
        b[1:] = x[1:] ** 2
        return np.sum(b * x)
    rng = np.random.default_rng(1)
    for name, call in calls(f).items():
        for _ in range(3):
            b0, x = rng.standard_normal(N), rng.standard_normal(N)
            b, db = b0.copy(), np.zeros(N)
            (_, gx), = call(Duplicated(b, db), Active(x))
            want_db = np.zeros(N)
            want_db[0] = x[0]                       # b0[0] survives the write
            want_gx = b.copy()
            want_gx[1:] += 2 * x[1:] * x[1:]
            np.testing.assert_allclose(db, want_db, rtol=1e-15, err_msg=name)
            np.testing.assert_allclose(gx, want_gx, rtol=1e-13, err_msg=name)


def test_a_gradient_from_a_zero_seed_is_zero_and_the_shadow_stays_usable():
    # x reaches the result only through the buffer, whose shadow is zero: its gradient is 0.
    def f(b, x):
        b[...] = np.exp(x)
        return np.sum(b) * 0.0
    for name, call in calls(f).items():
        for _ in range(3):
            b, db = np.ones(N), np.zeros(N)
            (_, gx), = call(Duplicated(b, db), Active(np.linspace(0, 1, N)))
            np.testing.assert_array_equal(gx, np.zeros(N), err_msg=name)
            db += 1.0   # the shadow is still the caller's own writable array
            np.testing.assert_array_equal(db, np.ones(N))
