"""`tape.compile` red team: integers and booleans computed from traced values steer the
program (an index from `np.argmax` / `np.argsort` / `np.searchsorted` / a count, a view taken
with it and then written, a write and a view whose overlap changes between calls, Python
containers indexed by a traced integer, a shape given by a traced integer).

Each function is compiled in Reverse, ReverseWithPrimal and Forward mode and called on a
sequence of inputs whose integers change at some calls and stay at others; every call is
compared with plain NumPy (primal), eager `autodiff` and float64 central differences.
"""
import operator

import numpy as np
import pytest

import tape
from tape import Active, Duplicated, Forward, Reverse, ReverseWithPrimal, autodiff


def _fd(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = eps
        g.flat[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


def _check(f, xs, modes=("Reverse", "ReverseWithPrimal", "Forward")):
    compiled = {"Reverse": tape.compile(Reverse, f, Active, Duplicated),
                "ReverseWithPrimal": tape.compile(ReverseWithPrimal, f, Active, Duplicated),
                "Forward": tape.compile(Forward, f, Duplicated, Duplicated)}
    for x in xs:
        x = np.array(x, dtype=float)
        ref = f(x.copy())
        fd = _fd(f, x)
        for name in modes:
            if name == "Forward":
                t = np.linspace(0.3, 1.7, x.size).reshape(x.shape)
                (tan,) = compiled[name](Duplicated(x.copy(), t.copy()))
                (tan_e,) = autodiff(Forward, f, Duplicated, Duplicated(x.copy(), t.copy()))
                np.testing.assert_allclose(tan, tan_e, rtol=1e-12, atol=1e-12)
                np.testing.assert_allclose(tan, np.sum(fd * t), rtol=1e-6, atol=1e-6)
                continue
            dx, dx_e = np.zeros_like(x), np.zeros_like(x)
            out = compiled[name](Duplicated(x.copy(), dx))
            autodiff(Reverse, f, Active, Duplicated(x.copy(), dx_e))
            if name == "ReverseWithPrimal":
                np.testing.assert_allclose(out[-1], ref, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(dx, dx_e, rtol=1e-12, atol=1e-12, err_msg=f"{name} {x}")
            np.testing.assert_allclose(dx, fd, rtol=1e-6, atol=1e-6, err_msg=f"{name} {x}")
    return compiled


# --------------------------------------------------------------------------------------------
# Finding: a shape given by a traced integer (np.reshape(x, (k, -1)) with k from np.argmax)
# is an unguarded input of the program, while its reverse is written for the traced shape.

# argmax 0, 0, 3, 1, 0: k = argmax % 2 + 2 is 2, 2, 3, 3, 2 (a change at the third call)
_RESHAPE_X = [np.array(v) for v in ([3., 1, 2, 0, 1, 1], [3., 1, 2, 0, 1, 1.5],
                                    [0., 1, 2, 3, 1, 1], [1., 5, 2, 0, 1, 1],
                                    [3., 1, 2, 0, 1, 1])]


def _element_of_reshape_minus_one(x):
    k = np.argmax(x) % 2 + 2
    return x.reshape(k, -1)[1, 0] ** 2    # x[3] ** 2 for k = 2, x[2] ** 2 for k = 3


def _element_of_np_reshape(x):
    k = np.argmax(x) % 2 + 2
    return np.reshape(x, (k, 6 // k))[1, 0] ** 2


def _transposed_element_times_x(x):
    k = np.argmax(x) % 2 + 2
    return np.sum(x.reshape(k, -1).T[0, 1] * x)


_RESHAPE_CASES = {"x.reshape(k, -1)[1, 0]": _element_of_reshape_minus_one,
                  "np.reshape(x, (k, 6 // k))[1, 0]": _element_of_np_reshape,
                  "sum(x.reshape(k, -1).T[0, 1] * x)": _transposed_element_times_x}


@pytest.mark.parametrize("mode", ["Reverse", "ReverseWithPrimal"])
@pytest.mark.parametrize("case", list(_RESHAPE_CASES))
def test_reshape_to_a_traced_integer_shape_reverse(case, mode):
    _check(_RESHAPE_CASES[case], _RESHAPE_X, modes=(mode,))


@pytest.mark.parametrize("case", list(_RESHAPE_CASES))
def test_reshape_to_a_traced_integer_shape_forward(case):
    _check(_RESHAPE_CASES[case], _RESHAPE_X, modes=("Forward",))


# --------------------------------------------------------------------------------------------
# Passing checks

# argmax / argmin of x[:3] and of x[3:] per call: (1 0 1 0) (1 0 2 1) (0 1 2 0) (2 0 1 0)
# (2 0 0 1) (0 1 0 1) (2 0 2 0): the two indices coincide at some calls and not at others.
_X6 = [np.array(v) * 0.3 + 0.13 for v in (
    [1, 5, 2, 0, 6, 4], [1, 5.5, 2, 3, 0, 4], [6, 1, 2, 0, 3, 4], [1, 2, 3, 0, 9, 4],
    [1, 2, 3, 7, 3.5, 4], [5, 1, 2, 6, 3, 4.2], [0, 1, 2, 3, 4, 5])]
_W23 = np.arange(6.0).reshape(2, 3)


def _column_view_then_write_elsewhere(x):
    y = x.reshape(2, 3) * 1.0
    r = y[:, np.argmax(x[:3])]
    y[:, np.argmax(x[3:])] = x[:2] ** 2
    return np.sum(r * np.array([1.0, 3.0])) + np.sum(y * _W23)


def _row_view_then_scaled_row(x):
    y = np.stack([x[:3], x[3:]]) * 1.0
    r = y[np.argmax(x[:3]) % 2]
    y[np.argmax(x[3:]) % 2] *= x[0]
    return np.sum(r * np.arange(3.0)) + np.sum(y ** 2)


def _two_windows_written(x):
    y = x * 1.0
    k, j = np.argmax(x[:3]), np.argmin(x[:3])
    r = y[k:k + 2]
    r *= 5.0
    y[j:j + 2] += x[3:5] ** 2
    return np.sum(r * np.array([2.0, 7.0])) + np.sum(y * np.arange(6.0))


def _swap_rows_through_views(x):
    y = x.reshape(3, 2) * 1.0
    a, b = y[np.argmax(x[:3])], y[np.argmin(x[3:])]
    a[...], b[...] = b * 1.0, a * 1.0
    return np.sum(y * np.arange(6.0).reshape(3, 2) ** 2)


def _window_add_of_itself(x):
    y = x * 1.0
    k, j = np.argmax(x[:3]), np.argmin(x[3:])
    y[k:k + 3] += y[j:j + 3]
    return np.sum(y * np.arange(6.0) ** 2)


def _write_into_the_argument_through_a_view(x):
    r = x.reshape(2, 3)[:, np.argmax(x[:3])]
    r *= 3
    return np.sum(np.sin(x))


def _out_into_a_row_view(x):
    y = x.reshape(2, 3) * 1.0
    r = y[np.argmax(x) % 2]
    np.multiply(r, x[:3], out=r)
    return np.sum(y * _W23)


def _chained_view_write(x):
    y = x.reshape(2, 3) * 1.0
    y[np.argmax(x) % 2][np.argmin(x) % 3] = x[0] * 7
    return np.sum(y * _W23)


def _scalar_read_is_a_copy(x):
    y = x * 1.0
    v = y[np.argmax(x)]
    v *= 4
    return np.sum(y * np.arange(6.0)) + v


def _zero_d_view_by_ellipsis(x):
    y = x * 1.0
    v = y[np.argmax(x), ...]
    v *= 4
    return np.sum(y * np.arange(6.0))


_OVERLAPS = {f.__name__: f for f in (
    _column_view_then_write_elsewhere, _row_view_then_scaled_row, _two_windows_written,
    _swap_rows_through_views, _window_add_of_itself, _write_into_the_argument_through_a_view,
    _out_into_a_row_view, _chained_view_write, _scalar_read_is_a_copy, _zero_d_view_by_ellipsis)}


@pytest.mark.parametrize("case", list(_OVERLAPS))
def test_views_and_writes_at_traced_indices_whose_overlap_changes(case):
    _check(_OVERLAPS[case], _X6)


# How the column index is computed decides whether y[:, j] is a view (NumPy integer) or a
# copy (0-d array, as np.where and np.asarray give): y[:, j] *= 3 writes y only in the first.
_COLUMN_INDEX = {
    "count_nonzero": lambda x: np.count_nonzero(x > 0.8) % 3,
    "searchsorted": lambda x: np.searchsorted(np.sort(x), x[0]) % 3,
    "argsort()[0]": lambda x: np.argsort(x)[0] % 3,
    "argmax(keepdims)[0]": lambda x: np.argmax(x, keepdims=True)[0] % 3,
    "floor().astype(int)": lambda x: np.floor(x[1] * 2).astype(int) % 3,
    "(x[0] > .5).astype(intp)": lambda x: (x[0] > 0.5).astype(np.intp),
    "digitize": lambda x: np.digitize(x[0], [0.3, 0.6]),
    "argmax().item()": lambda x: np.argmax(x).item() % 3,
    "np.where (0-d, a copy)": lambda x: np.where(np.argmax(x) > 2, 2, 0),
    "np.asarray (0-d, a copy)": lambda x: np.asarray(np.argmax(x) % 3),
}


@pytest.mark.parametrize("how", list(_COLUMN_INDEX))
def test_column_view_written_with_a_computed_index(how):
    get = _COLUMN_INDEX[how]

    def f(x):
        y = np.outer(x[:2], x[2:5])
        y[:, get(x)] *= 3
        return np.sum(y * _W23)
    _check(f, _X6)


_FUNCS = [np.sin, np.cos, np.tanh, np.exp, np.square, np.sqrt]
_PYTHON = {
    "list[argmax]": lambda x: np.sum(_FUNCS[np.argmax(x)](x)),
    "list[argmax:]": lambda x: sum(fn(x[0]) for fn in _FUNCS[np.argmax(x):]),
    "[1.0] * k": lambda x: np.sum(np.array([1.0] * (np.argmax(x) + 1)) * x[0]),
    "operator.index": lambda x: x[0] * (10.0, 20, 30, 40, 50, 60)[operator.index(np.argmax(x))],
    "range(...)[k]": lambda x: x[0] * range(10, 16)[np.argmax(x)],
    "str[k:]": lambda x: x[0] * len("abcdef"[np.argmax(x):]),
    "np.intp(k) into a list": lambda x: x[1] * [1.0, 2, 3, 4, 5, 6][np.intp(np.argmax(x))],
}


@pytest.mark.parametrize("case", list(_PYTHON))
def test_python_containers_indexed_by_a_traced_integer(case):
    compiled = _check(_PYTHON[case], _X6)
    assert compiled["Reverse"].stats.traces >= 2   # each new index is a guard's new outcome


_PARAMETERS = {
    "cumsum(axis=k)": lambda x: np.sum(np.cumsum(x.reshape(2, 3), axis=np.argmax(x) % 2) * _W23),
    "stack(axis=k)": lambda x: np.sum(np.stack([x.reshape(2, 3), x.reshape(2, 3) ** 2],
                                               axis=np.argmax(x) % 3).reshape(-1)
                                      * np.arange(12.0)),
    "roll(shift=argmin, axis=k)": lambda x: np.sum(np.roll(x.reshape(2, 3), np.argmin(x),
                                                           axis=np.argmax(x) % 2) * _W23),
    "matrix_power(n=k)": lambda x: np.sum(np.linalg.matrix_power(x[:4].reshape(2, 2),
                                                                  np.argmax(x) % 3 + 1)),
    "trace(offset=k)": lambda x: np.trace(np.outer(x, x), offset=np.argmax(x) - 2),
    "x ** argmax": lambda x: np.sum(x ** np.argmax(x)),
    "partition(kth=argmax)": lambda x: np.sum(np.partition(x, np.argmax(x))[:3] * np.arange(3.)),
    "transpose(axes from k)": lambda x: np.transpose(
        x.reshape(2, 3), (np.argmax(x) % 2, 1 - np.argmax(x) % 2)).reshape(-1)[1] ** 2,
    "delete(argmax)": lambda x: np.sum(np.delete(x, np.argmax(x)) * np.arange(5.0)),
    "insert(argmax)": lambda x: np.sum(np.insert(x, np.argmax(x), x[0] ** 2) * np.arange(7.0)),
}


@pytest.mark.parametrize("case", list(_PARAMETERS))
def test_traced_integer_as_an_axis_count_or_offset(case):
    _check(_PARAMETERS[case], _X6)
