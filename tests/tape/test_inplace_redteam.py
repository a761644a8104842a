"""In-place NumPy as users write it: ufunc `out=` (tuples, `where=` masks), writes that cast
(float into integer or boolean buffers), 0-d buffers, and the scalar-or-array type of full
reductions (which decides whether `s += 1` is seen through another name).

Each function runs on plain NumPy (the primal), under eager reverse and forward mode (against
central finite differences in float64) and under `tape.compile` (against eager, call by call
with changing inputs).
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from tape.errors import NonDifferentiableError
import tape
from tape import Active, Duplicated, Forward, ReverseWithPrimal, autodiff
from numeric_checks import fd_gradient_of

W = np.array([1.0, -2.0, 3.0, 0.5])
X0 = np.array([0.31, -1.22, 2.03, 0.74])
Y0 = np.array([1.1, 0.45, -0.6, 0.2])


def check(f, *xs, compiled_calls=4):
    """f(*xs) -> a scalar: primal against NumPy, gradient (reverse) and JVP (forward) against
    finite differences, compiled reverse against eager on calls with changing inputs."""
    xs = [np.array(x, dtype=float) for x in xs]
    want = float(f(*[x.copy() for x in xs]))
    grads = [fd_gradient_of(f, xs, i) for i in range(len(xs))]
    shadows = [np.zeros_like(x) for x in xs]
    _, value = autodiff(ReverseWithPrimal, f, Active,
                        *[Duplicated(x.copy(), s) for x, s in zip(xs, shadows)])
    np.testing.assert_allclose(value, want, rtol=1e-12, atol=1e-12)
    for got, grad in zip(shadows, grads):
        np.testing.assert_allclose(got, grad, rtol=1e-6, atol=1e-6)
    directions = [np.linspace(-1.0, 1.0, x.size).reshape(x.shape) + 0.3 for x in xs]
    tangent, = autodiff(Forward, f,   # a written argument's tangent overwrites its shadow
                         *[Duplicated(x.copy(), t.copy()) for x, t in zip(xs, directions)])
    np.testing.assert_allclose(tangent, sum(np.sum(g * t) for g, t in zip(grads, directions)),
                               rtol=1e-6, atol=1e-6)
    compiled = tape.compile(ReverseWithPrimal, f, Active, *[Duplicated] * len(xs))
    rng = np.random.default_rng(0)
    for call in range(compiled_calls):
        inputs = [x * (1 + 0.5 * call * rng.standard_normal(x.shape)) for x in xs]
        eager_args, compiled_args = [x.copy() for x in inputs], [x.copy() for x in inputs]
        eager_d, compiled_d = [np.zeros_like(x) for x in inputs], [np.zeros_like(x) for x in inputs]
        _, eager = autodiff(ReverseWithPrimal, f, Active,
                            *[Duplicated(a, d) for a, d in zip(eager_args, eager_d)])
        _, replay = compiled(*[Duplicated(a, d) for a, d in zip(compiled_args, compiled_d)])
        np.testing.assert_allclose(replay, eager, rtol=1e-12, atol=1e-12)
        for a, b in zip(eager_args + eager_d, compiled_args + compiled_d):
            np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12)


# -- writes that cast -----------------------------------------------------------------------------
def test_a_float_written_into_an_integer_buffer_carries_no_derivative():
    # The buffer truncates x * 10: its entries are piecewise constant in x (they gave 10 * W).
    def f(x, y):
        counts = np.zeros_like(x, dtype=np.int64)
        counts[:] = x * 10
        return np.sum(counts * W) + np.sum(x * y)

    dx = np.zeros(4)
    _, value = autodiff(ReverseWithPrimal, f, Active, Duplicated(X0.copy(), dx),
                        Duplicated(Y0.copy(), np.zeros(4)))
    assert value == pytest.approx(f(X0.copy(), Y0))
    np.testing.assert_allclose(dx, Y0)
    tangent, = autodiff(Forward, f, Duplicated(X0.copy(), np.ones(4)),
                        Duplicated(Y0.copy(), np.zeros(4)))
    assert tangent == pytest.approx(Y0.sum())


def test_a_float_written_into_a_boolean_buffer_or_through_out_carries_no_derivative():
    def through_bool(x, y):
        flags = np.zeros_like(x, dtype=bool)
        flags[:] = x
        return np.sum(flags * W) + np.sum(x * y)

    def through_out(x, y):
        counts = np.zeros_like(x, dtype=np.int64)
        np.multiply(x, 10, out=counts, casting="unsafe")
        return np.sum(counts * W) + np.sum(x * y)

    for f in (through_bool, through_out):
        dx = np.zeros(4)
        autodiff(ReverseWithPrimal, f, Active, Duplicated(X0.copy(), dx),
                 Duplicated(Y0.copy(), np.zeros(4)))
        np.testing.assert_allclose(dx, Y0)
        check(f, X0, Y0)


def test_integer_counts_accumulated_in_a_buffer():
    check(lambda x, y: _counts(x) @ (x * W) + np.sum(y), X0, Y0)


def _counts(x):
    n = np.zeros_like(x, dtype=np.int64)
    n += x > 0
    n *= 3
    return n


def test_a_float_summed_into_an_integer_buffer_is_refused_as_numpy_refuses_it():
    # NumPy's `n += x` keeps n's dtype and raises when the result does not cast 'same_kind'
    # (float into int, int into bool); a traced buffer raised nothing and truncated.
    def into_int(x):
        n = np.zeros_like(x, dtype=np.int64)
        n += x * 10
        return np.sum(n * x)

    def into_bool(x):
        b = np.zeros_like(x, dtype=bool)
        b += (x > 0).astype(np.int64)
        return np.sum(b * x)
    for f in (into_int, into_bool):
        with pytest.raises(TypeError) as plain:
            f(X0.copy())
        with pytest.raises(type(plain.value), match="same_kind"):
            autodiff(ReverseWithPrimal, f, Active, Duplicated(X0.copy(), np.zeros(4)))
        with pytest.raises(type(plain.value), match="same_kind"):
            autodiff(Forward, f, Duplicated, Duplicated(X0.copy(), np.ones(4)))


def test_in_place_sums_that_numpy_allows_keep_the_buffer_dtype():
    # float64 into float32 ('same_kind'), ints into ints, and `@=`.
    def f32(x):
        n = np.zeros_like(x, dtype=np.float32)
        n += x * 10
        n *= np.float64(2.0)
        assert n.dtype == np.float32
        return np.sum(n * x)
    dx = np.zeros(4)
    _, value = autodiff(ReverseWithPrimal, f32, Active, Duplicated(X0.copy(), dx))
    np.testing.assert_allclose(value, f32(X0.copy()), rtol=1e-12)
    np.testing.assert_allclose(dx, 40 * X0, rtol=1e-6)   # d/dx sum(20 x x), n rounded to f32

    def f(x):
        n = np.zeros_like(x)
        n += x * 10
        n *= np.float64(2.0)
        m = np.zeros(4, dtype=np.int64)
        m += 1
        m *= 3
        b = np.zeros_like(x, shape=(2, 2))
        b += 1.0
        b @= np.eye(2) * x[0]
        return np.sum(n * x) + np.sum(m * x) + np.sum(b)
    check(f, X0)


def test_matmul_in_place_into_a_plain_array_names_the_fix():
    def f(x):
        b = np.ones((2, 2))
        b @= np.eye(2) * x[0]
        return np.sum(b)
    with pytest.raises(tape.errors.NonDifferentiableError, match="zeros_like"):
        autodiff(ReverseWithPrimal, f, Active, Duplicated(X0.copy(), np.zeros(4)))


# -- 0-d buffers ----------------------------------------------------------------------------------
def test_a_zero_dimensional_buffer_written_with_ellipsis_or_out():
    # The reverse of s[...] = v met a NumPy scalar cotangent and raised TypeError.
    def assigned(x, y):
        s = np.zeros_like(x, shape=())
        s[...] = np.sum(x * y)
        return s * 2.0

    def reduced_into(x, y):
        s = np.zeros_like(x, shape=())
        np.add.reduce(x * y, out=s)
        return s * 3.0

    def aliased(x, y):
        s = np.zeros_like(x, shape=())
        seen = s[...]            # a 0-d view: sees the write below
        s += np.sum(x * y)
        return seen * 2.0 + s

    for f in (assigned, reduced_into, aliased):
        check(f, X0, Y0)


# -- ufunc out= -----------------------------------------------------------------------------------
def test_ufuncs_with_two_outputs_write_an_out_tuple():
    # np.divmod(x, c, out=(q, r)) wrote the pair (q, r) into q and raised ValueError.
    def divmod_(x, y):
        q, r = np.zeros_like(x), np.zeros_like(x)
        np.divmod(x, 0.7, out=(q, r))
        return np.sum(r * W * y) + np.sum(q * W)

    def modf_(x, y):
        fraction, whole = np.zeros_like(x), np.zeros_like(x)
        returned = np.modf(x * y, out=(fraction, whole))
        assert returned[0] is fraction and returned[1] is whole
        return np.sum(fraction * W) + np.sum(whole)

    for f in (divmod_, modf_):
        check(f, X0, Y0)


@pytest.mark.parametrize("case", ["divide", "log", "in_place", "broadcast", "two_outputs",
                                  "positional", "all", "none"])
def test_ufunc_where_with_out_keeps_the_unselected_entries(case):
    # Refused before, naming uninitialised entries, which `out=` does not leave.
    mask = np.array([True, False, True, False])

    def f(x, y):
        c = np.zeros_like(x)
        if case == "divide":    # the guarded division idiom: no nan from the skipped entries
            np.divide(x, y, out=c, where=y != 0)
        elif case == "log":
            np.log(x, out=c, where=x > 0)
        elif case == "in_place":
            np.multiply(x, y, out=x, where=mask)
            c = x * x
        elif case == "broadcast":
            c = np.zeros_like(x, shape=(4, 2))
            np.add(x[:, None], y[None, :2], out=c, where=np.array([True, False]))
        elif case == "two_outputs":
            r = np.zeros_like(x)
            np.divmod(x, 0.7, out=(c, r), where=x > 0)
            c = c + r * y
        elif case == "positional":
            np.multiply(x, y, c, where=x > 0)
        elif case == "all":
            np.add(x, y, out=c, where=True)
        else:
            np.add(x, y, out=c, where=False)
        return np.sum(c * c)

    y = Y0.copy()
    if case == "divide":
        y[1] = y[3] = 0.0      # finite differences in y stay away from the zeros
        check(lambda x: f(x, y), X0)
        dx = np.zeros(4)
        autodiff(ReverseWithPrimal, f, Active, Duplicated(X0.copy(), dx), tape.Const(y))
        np.testing.assert_allclose(dx, [2 * X0[0] / y[0] ** 2, 0, 2 * X0[2] / y[2] ** 2, 0])
    else:
        check(f, X0, y)


# -- full reductions return NumPy scalars, as NumPy's do ------------------------------------------
REDUCTIONS = {
    "std": lambda x, y: np.std(x * y),
    "std_ddof": lambda x, y: np.std(x, ddof=1),
    "nanstd": lambda x, y: np.nanstd(x * y),
    "inner": lambda x, y: np.inner(x, y),
    "interp": lambda x, y: np.interp(0.1, np.sort(y), x),
    "matrix_2_norm": lambda x, y: np.linalg.norm(np.outer(x, y) + np.eye(4), 2),
    "tensordot": lambda x, y: np.tensordot(x, y, axes=1),   # a 0-d array in NumPy too
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_an_in_place_update_of_a_reduction_is_seen_through_another_name_as_in_numpy(name):
    # np.std, np.inner, np.interp and the matrix 2-norm gave 0-d arrays where NumPy gives
    # np.float64, so `t = s; s += 1` also changed t: a wrong primal and gradient.
    reduction = REDUCTIONS[name]

    def f(x, y):
        s = reduction(x, y)
        t = s
        s += 1.0
        s *= y[1]
        return t + 0.5 * s

    check(f, X0, Y0)
    for mode in ("reverse", "forward"):
        seen = []

        def record(x, y):
            seen.append(type(tape.primal(reduction(x, y))))
            return np.sum(x)

        if mode == "reverse":
            autodiff(ReverseWithPrimal, record, Active, Duplicated(X0.copy(), np.zeros(4)),
                     Duplicated(Y0.copy(), np.zeros(4)))
        else:
            autodiff(Forward, record, Duplicated(X0.copy(), np.ones(4)),
                     Duplicated(Y0.copy(), np.ones(4)))
        assert seen[0] is type(reduction(X0.copy(), Y0.copy())), mode


def test_forward_mode_updates_a_zero_dimensional_array_whose_tangent_is_a_scalar():
    # The tangent of a 0-d tensordot is a NumPy scalar: the in-place add raised TypeError.
    def f(x, y):
        s = np.tensordot(x, y, axes=1)
        s += 1.0
        return s * 2.0

    tangent, = autodiff(Forward, f, Duplicated(X0.copy(), np.ones(4)),
                        Duplicated(Y0.copy(), np.zeros(4)))
    assert tangent == pytest.approx(2 * Y0.sum())


# -- functions given out= ------------------------------------------------------------------------
A0 = np.arange(1.0, 7.0).reshape(2, 3) / 3
B0 = np.arange(1.0, 7.0).reshape(3, 2) / 4 - 0.5
WITH_OUT = {
    # np.linalg.multi_dot ignored out=: the buffer kept its zeros (a silent wrong value).
    "multi_dot": (lambda a, b, c: np.linalg.multi_dot([a, b], out=c), (2, 2)),
    "sum": (lambda a, b, c: np.sum(a @ b, axis=0, out=c), (2,)),
    "mean": (lambda a, b, c: np.mean(a @ b, axis=1, out=c), (2,)),
    "max": (lambda a, b, c: np.max(a @ b, axis=1, out=c), (2,)),
    "cumsum": (lambda a, b, c: np.cumsum(a @ b, axis=1, out=c), (2, 2)),
    "dot": (lambda a, b, c: np.dot(a, b, out=c), (2, 2)),
    "einsum": (lambda a, b, c: np.einsum("ij,jk->ik", a, b, out=c), (2, 2)),
    "concatenate": (lambda a, b, c: np.concatenate([a, b.T], axis=1, out=c), (2, 6)),
    "take": (lambda a, b, c: np.take(a, [0, 2], axis=1, out=c), (2, 2)),
    "trace": (lambda a, b, c: np.trace(a @ b, out=c), ()),
    "matmul": (lambda a, b, c: np.matmul(a, b, out=c), (2, 2)),
}


@pytest.mark.parametrize("name", sorted(WITH_OUT))
def test_functions_write_their_result_into_out_and_return_it(name):
    op, shape = WITH_OUT[name]

    def f(a, b):
        c = np.zeros_like(a, shape=shape)
        assert op(a, b, c) is c
        return np.sum(c * c)

    check(f, A0, B0, compiled_calls=2)


def test_multi_dot_into_a_plain_out_is_refused():
    def f(a, b):
        c = np.zeros((2, 2))
        np.linalg.multi_dot([a, b], out=c)    # was ignored: c kept its zeros
        return np.sum(c)

    with pytest.raises(NonDifferentiableError, match="np.zeros_like"):
        autodiff(ReverseWithPrimal, f, Active, Duplicated(A0.copy(), np.zeros_like(A0)),
                 Duplicated(B0.copy(), np.zeros_like(B0)))


def test_an_out_that_is_a_const_argument_is_refused_naming_it():
    def f(x, c):
        np.multiply(x, 2.0, out=c)
        return np.sum(c)

    with pytest.raises(tape.ActivityError, match=r"argument 1 \(`c`\) is Const.*Duplicated"):
        autodiff(ReverseWithPrimal, f, Active, Duplicated(X0.copy(), np.zeros(4)),
                 tape.Const(np.zeros(4)))


# -- in-place functions and ufunc methods ---------------------------------------------------------
X6 = np.array([0.3, -1.2, 2.0, 0.7, 1.4, -0.9])
W6 = np.array([1.0, -2.0, 3.0, 0.5, 1.5, -0.7])
Y3 = np.array([1.1, 0.4, -0.6])
IN_PLACE = {
    "put_repeated": lambda x, y: np.put(x, [0, 0, 3], y),
    "put_cycled": lambda x, y: np.put(x, [0, 1, 3, 4], y[:2]),
    "put_wrap": lambda x, y: np.put(x, [7, -1, 2], y, mode="wrap"),
    "put_clip": lambda x, y: np.put(x, [9, 0], y[:2], mode="clip"),
    "put_scalar": lambda x, y: np.put(x, [0, 1, 3], y[0]),
    "put_transposed_view": lambda x, y: np.put(x.reshape(2, 3).T, [0, 1, 5], y),
    "place": lambda x, y: np.place(x, x < 0.5, y[:2]),
    "putmask": lambda x, y: np.putmask(x, x < 0.5, y),
    "fill_diagonal_tall": lambda x, y: np.fill_diagonal(x.reshape(3, 2), y),
    "fill_diagonal_wrap": lambda x, y: np.fill_diagonal(x.reshape(3, 2), y[1], wrap=True),
    "add_at_repeated": lambda x, y: np.add.at(x, [0, 0, 5], y),
    "subtract_at": lambda x, y: np.subtract.at(x, [1, 1], y[:2] * 2),
    "add_at_rows": lambda x, y: np.add.at(x.reshape(2, 3), [1, 1], y),
    "add_at_pairs": lambda x, y: np.add.at(x.reshape(2, 3), ([0, 1, 1], [2, 2, 2]), y),
    "add_at_constant_into_view": lambda x, y: np.add.at(x[1:], [0, 0], 1.0),
    "view": lambda x, y: x.view().__setitem__(1, y[0]),
}


@pytest.mark.parametrize("name", sorted(IN_PLACE))
def test_in_place_numpy_functions_on_an_argument(name):
    # np.put, np.place, np.putmask, np.fill_diagonal, ufunc.at and x.view() had no rule.
    write = IN_PLACE[name]

    def f(x, y):
        write(x, y)
        return np.sum(W6 * x * x) + np.sum(y)

    check(f, X6, Y3, compiled_calls=3)


def test_in_place_functions_read_a_const_index_or_mask_at_each_compiled_call():
    def f(x, i, m):
        np.add.at(x, i, x[:3] ** 2)
        np.subtract.at(x, i, 1.5)
        np.put(x, i, x[3:] * 2)
        np.putmask(x, m, x[::-1] * 3)
        return np.sum(W6 * x * x)

    compiled = tape.compile(ReverseWithPrimal, f, Active, Duplicated, tape.Const, tape.Const)
    rng = np.random.default_rng(3)
    for call in range(5):
        x = rng.standard_normal(6)
        i, m = np.array([call % 6, call % 6, (call + 1) % 6]), rng.random(6) > 0.5
        results = []
        for run in (lambda *a: autodiff(ReverseWithPrimal, f, Active, *a), compiled):
            arg, shadow = x.copy(), np.zeros(6)
            _, value = run(Duplicated(arg, shadow), tape.Const(i.copy()), tape.Const(m.copy()))
            results.append((value, arg, shadow))
        for eager, replay in zip(*results):
            np.testing.assert_allclose(replay, eager, rtol=1e-12, atol=1e-12)


def test_ufunc_outer():
    check(lambda x, y: np.sum(np.add.outer(x.reshape(2, 3), y) ** 2), X6, Y3)
    check(lambda x, y: np.sum(np.maximum.outer(x, y) * np.arange(18.0).reshape(6, 3)), X6, Y3)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tape.CompileWarning)
        yield
