"""Eager autodiff on user-style NumPy code that used to give silently wrong values.

Each test compares with plain NumPy (primal) and central finite differences or a hand-derived
derivative (which a wrong engine would miss), in every mode the pattern reaches.
"""
import numpy as np
import pytest

from tape import (ActivityError, Active, Const, Duplicated, Forward, ForwardWithPrimal, Reverse,
                  ReverseWithPrimal, autodiff)

WEIGHTS = np.array([1.0, 2.0, 3.0])
Z0 = np.array([0.3, -0.7, 1.1])


def _grad(f, z):
    return autodiff(Reverse, f, Active, Active(z))[0][0]


def _central(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = eps
        g[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


# -- nested differentiation: an inner record saved an outer level's tracer that f then wrote --

def _inner_saves_then_writes(x):
    def inner(z):
        w = x * 1.0                # a value of the outer level
        s = np.sum(z * w)          # the inner record of `*` saves w
        w[0] = 100.0               # rebinds the outer tracer w
        return s + np.sum(z * w)
    return np.sum(_grad(inner, Z0.copy()) * WEIGHTS)


def _inner_saves_then_writes_numpy(x):
    # d/dz [z.w_before + z.w_after] = w_before + w_after
    after = x.copy()
    after[0] = 100.0
    return np.sum((x + after) * WEIGHTS)


def _inner_saves_then_scales_buffer(x):
    def inner(z):
        w = np.zeros_like(x)
        w[:] = x
        s = np.sum(np.sin(z) * w)
        w *= 3.0                   # an in-place update of the outer buffer after the use
        return s
    return np.sum(_grad(inner, Z0.copy()))


def _inner_saves_then_scales_buffer_numpy(x):
    return np.sum(np.cos(Z0) * x)


@pytest.mark.parametrize("f, reference", [
    (_inner_saves_then_writes, _inner_saves_then_writes_numpy),
    (_inner_saves_then_scales_buffer, _inner_saves_then_scales_buffer_numpy),
])
def test_outer_tracer_written_after_an_inner_record_saved_it(f, reference):
    x = np.array([1.0, 2.0, 3.0])
    want_value, want_grad = reference(x), _central(reference, x)
    (g,), value = autodiff(ReverseWithPrimal, f, Active, Active(x.copy()))
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    np.testing.assert_allclose(g, want_grad, rtol=1e-6, atol=1e-8)
    v = np.array([0.5, -1.0, 2.0])
    tangent, value = autodiff(ForwardWithPrimal, f, Duplicated(x.copy(), v))
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    np.testing.assert_allclose(tangent, want_grad @ v, rtol=1e-6, atol=1e-8)


def test_outer_view_tracer_saved_then_base_written():
    # The inner rule sees a view of an outer buffer; writing the base refreshes the view tracer.
    def outer(x):
        def inner(z):
            buf = np.zeros_like(x)
            buf[:] = x
            head = buf[:2]
            s = np.sum(z[:2] * head)
            buf[:] = 0.0
            return s
        return np.sum(_grad(inner, Z0.copy()))
    x = np.array([1.0, 2.0, 3.0])
    (g,), value = autodiff(ReverseWithPrimal, outer, Active, Active(x.copy()))
    assert value == pytest.approx(3.0)
    np.testing.assert_allclose(g, [1.0, 1.0, 0.0])


# -- a closure or global that is the argument's own array, read after f wrote the argument ----

def _writes_then_reads_closure(shared):
    def f(a):
        a[0] = 10.0
        return np.sum(a * shared)    # NumPy: shared is a, so it sees the write
    return f


@pytest.mark.parametrize("annotate", [
    lambda x: (Reverse, Active, Duplicated(x, np.zeros(3))),
    lambda x: (Reverse, Active, Active(x)),
    lambda x: (Forward, Duplicated(x, np.ones(3))),
])
def test_closure_alias_read_after_a_write_is_refused(annotate):
    x = np.array([1.0, 2.0, 3.0])
    mode, *args = annotate(x)
    with pytest.raises(ActivityError, match=r"argument 0 \(`a`\).*read after the function wrote"):
        autodiff(mode, _writes_then_reads_closure(x), *args)


def test_closure_view_alias_read_after_an_update_is_refused():
    x = np.array([1.0, 2.0, 3.0, 4.0])
    head = x[:2]

    def f(a):
        a *= 2.0
        return np.sum(head * a[:2])
    with pytest.raises(ActivityError, match="shares memory with argument 0"):
        autodiff(Reverse, f, Active, Duplicated(x, np.zeros(4)))


def test_closure_alias_read_before_the_write_is_fine():
    x = np.array([1.0, 2.0, 3.0])
    dx = np.zeros(3)

    def f(a):
        s = np.sum(a * x)            # x is a, not yet written: NumPy reads the same values
        a[0] = 10.0
        return s + a[0]
    (_,), value = autodiff(ReverseWithPrimal, f, Active, Duplicated(x, dx))
    assert value == pytest.approx(14.0 + 10.0)
    # x is a constant inside f (a closure), a the argument: d/da sum(a * x) = x, then a[0] is
    # overwritten by a constant
    np.testing.assert_allclose(dx, [1.0, 2.0, 3.0])
    np.testing.assert_allclose(x, [10.0, 2.0, 3.0])


def test_unrelated_closure_after_a_write_is_fine():
    c = np.array([4.0, 5.0, 6.0])
    x = np.array([1.0, 2.0, 3.0])
    dx = np.zeros(3)

    def f(a):
        a *= 2.0
        return np.sum(a * c)
    autodiff(Reverse, f, Active, Duplicated(x, dx))
    np.testing.assert_allclose(dx, 2.0 * c)
    np.testing.assert_allclose(x, [2.0, 4.0, 6.0])


# -- a shadow that is its own primal --------------------------------------------------------

def test_shadow_sharing_memory_with_its_primal_is_refused():
    x = np.array([1.0, 2.0, 3.0])
    with pytest.raises(ActivityError, match="shadow of argument 0 .* shares memory with its primal"):
        autodiff(Reverse, lambda a: np.sum(a ** 2), Active, Duplicated(x, x))
    np.testing.assert_array_equal(x, [1.0, 2.0, 3.0])
    both = np.arange(6.0)
    with pytest.raises(ActivityError, match="shares memory with its primal"):
        autodiff(Reverse, lambda a: np.sum(a ** 2), Active, Duplicated(both[:4], both[2:]))


def test_shadow_beside_its_primal_in_one_array_is_fine():
    both = np.array([1.0, 2.0, 3.0, 0.0, 0.0, 0.0])
    autodiff(Reverse, lambda a: np.sum(a ** 2), Active, Duplicated(both[:3], both[3:]))
    np.testing.assert_allclose(both, [1.0, 2.0, 3.0, 2.0, 4.0, 6.0])


def test_forward_tangent_equal_to_its_primal_is_fine():
    x = np.array([1.0, 2.0, 3.0])
    tangent, = autodiff(Forward, lambda a: np.sum(a ** 2), Duplicated(x, x))
    assert tangent == pytest.approx(2.0 * np.sum(x * x))


def test_const_argument_still_reads_as_before():
    c = np.array([1.0, 2.0, 3.0])

    def f(a, c):
        y = np.sum(a * c)
        c *= 10.0
        return y + np.sum(a * c)
    (g, none), = autodiff(Reverse, f, Active, Active(np.ones(3)), Const(c))
    assert none is None
    np.testing.assert_allclose(g, 11.0 * np.array([1.0, 2.0, 3.0]))


# -- NumPy functions that return views: writes into the base are seen through them ----------

X6 = np.array([0.3, -0.7, 1.1, 0.4, 0.2, -0.5])


def _base_written_after_view(view):
    def f(x):
        y = x.copy()
        v = view(y)
        y[...] = y * 3.0 + 1.0       # NumPy: the view sees this write
        return np.sum(np.ravel(v) ** 2 * np.arange(1.0, np.size(v) + 1.0))
    return f


@pytest.mark.parametrize("view", [
    lambda y: np.real(y),
    lambda y: y.astype(np.float64, copy=False),
    lambda y: np.diagonal(y.reshape(2, 3)),
    lambda y: np.diag(y.reshape(3, 2), -1),
    lambda y: np.broadcast_to(y[:3], (2, 3)),
], ids=["np.real", "astype-copy-False", "diagonal", "diag-2d", "broadcast_to"])
def test_base_written_after_a_view_function(view):
    f = _base_written_after_view(view)
    want_grad = _central(f, X6.copy())
    (g,), value = autodiff(ReverseWithPrimal, f, Active, Active(X6.copy()))
    assert value == pytest.approx(f(X6.copy()), rel=1e-12)
    np.testing.assert_allclose(g, want_grad, rtol=1e-6, atol=1e-8)
    v = np.linspace(-1.0, 1.0, 6)
    tangent, value = autodiff(ForwardWithPrimal, f, Duplicated(X6.copy(), v))
    assert value == pytest.approx(f(X6.copy()), rel=1e-12)
    assert tangent == pytest.approx(want_grad @ v, rel=1e-6)


@pytest.mark.parametrize("view", [lambda y: np.real(y), lambda y: y.astype(float, copy=False)],
                         ids=["np.real", "astype-copy-False"])
def test_write_through_a_view_function_reaches_the_base(view):
    def f(x):
        y = x.copy()
        v = view(y)
        v[...] = 2.0 * v
        return np.sum(y ** 2 * np.arange(1.0, 7.0))
    (g,), value = autodiff(ReverseWithPrimal, f, Active, Active(X6.copy()))
    assert value == pytest.approx(f(X6.copy()), rel=1e-12)
    np.testing.assert_allclose(g, 8.0 * X6 * np.arange(1.0, 7.0), rtol=1e-12)


@pytest.mark.parametrize("view", [lambda y: np.diagonal(y.reshape(2, 3)),
                                  lambda y: np.broadcast_to(y, (2, 6))],
                         ids=["diagonal", "broadcast_to"])
def test_read_only_views_refuse_writes_as_numpy_does(view):
    with pytest.raises(ValueError, match="read-only"):
        view(X6.copy())[...] = 1.0

    def f(x):
        y = x.copy()
        view(y)[...] = 1.0
        return np.sum(y)
    with pytest.raises(ValueError, match="read-only"):
        autodiff(Reverse, f, Active, Active(X6.copy()))
