"""Writes through NumPy views of traced arrays, against plain NumPy: the views of moveaxis,
expand_dims, atleast_2d, squeeze, x.view(), np.array(copy=False), rot90, split, unstack, chains
of views of views, writes by np.copyto and ufunc out=, overlapping views written in sequence,
writes into a Duplicated argument through a view, and the read-only views (broadcast_to,
diagonal, sliding_window_view) with the views derived from them.

Each function runs on plain NumPy (the primal, the argument after the call), under eager reverse
and forward mode (against central finite differences of the whole function in float64) and
under `tape.compile` (three calls with new values).
"""
from __future__ import annotations

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

import tape
from tape import Active, Duplicated, Forward, ReverseWithPrimal, autodiff

from numeric_checks import fd_gradient

X = np.arange(1.0, 13.0).reshape(3, 4) / 7.0 - 0.6
WEIGHTS = np.arange(1.0, 13.0).reshape(3, 4) ** 0.5


def _total(y, *pool):
    """A scalar that sees every entry of the buffer and of each view read."""
    return np.sum(y * WEIGHTS) + sum((0.3 + 0.1 * k) * np.sum(v * v) for k, v in enumerate(pool))


def check(f, x=X):
    """Primal and written argument against NumPy; the shadow (reverse) and the tangent
    (forward) against finite differences; compiled reverse on three calls with new values."""
    plain = x.copy()
    want = f(plain)
    grad = fd_gradient(f, x)
    arg, shadow = x.copy(), np.zeros_like(x)
    _, value = autodiff(ReverseWithPrimal, f, Active, Duplicated(arg, shadow))
    np.testing.assert_allclose(value, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(arg, plain, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(shadow, grad, rtol=1e-6, atol=1e-6)
    direction = np.linspace(-1.0, 1.0, x.size).reshape(x.shape) + 0.3
    arg = x.copy()
    tangent, = autodiff(Forward, f, Duplicated(arg, direction.copy()))
    np.testing.assert_allclose(tangent, np.sum(grad * direction), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(arg, plain, rtol=1e-12, atol=1e-12)
    compiled = tape.compile(ReverseWithPrimal, f, Active, Duplicated)
    for call in range(3):
        xi = x * (1.0 + 0.3 * call) + 0.1 * call
        plain = xi.copy()
        want = f(plain)
        arg, shadow = xi.copy(), np.zeros_like(xi)
        _, value = compiled(Duplicated(arg, shadow))
        np.testing.assert_allclose(value, want, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(arg, plain, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(shadow, fd_gradient(f, xi), rtol=1e-6, atol=1e-6)


def _through(make_view, write):
    def f(x):
        y = x * 1.0
        v = make_view(y)
        write(v)
        return _total(y, v)
    return f


def _set_first(v):
    v[0] = 2.5 * v[1]


WRITES_THROUGH_VIEWS = {
    "moveaxis": _through(lambda y: np.moveaxis(y.reshape(3, 2, 2), 0, -1), _set_first),
    "expand_dims": _through(lambda y: np.expand_dims(y, 1),
                            lambda v: v.__setitem__((slice(None), 0, 1), v[:, 0, 0] ** 2)),
    "expand_dims_two_axes": _through(lambda y: np.expand_dims(y, (0, 2)),
                                     lambda v: v.__setitem__((0, 1), 2.5 * v[0, 0])),
    "atleast_2d_of_1d": _through(lambda y: np.atleast_2d(y.reshape(-1)),
                                 lambda v: v.__setitem__((0, 5), -v[0, 6])),
    "atleast_3d": _through(np.atleast_3d, _set_first),
    "squeeze": _through(lambda y: y[None, :, None].squeeze(), _set_first),
    "squeeze_axis": _through(lambda y: y[None, :, None].squeeze(axis=0), _set_first),
    "none_then_reversed": _through(lambda y: y[:, None, ::-1], _set_first),
    "view_same_dtype": _through(lambda y: y.view(np.float64), _set_first),
    "array_copy_false": _through(lambda y: np.array(y.T, copy=False), _set_first),
    "ascontiguousarray_of_rows": _through(lambda y: np.ascontiguousarray(y[1:]), _set_first),
    "asfortranarray_of_transpose": _through(lambda y: np.asfortranarray(y.T), _set_first),
    "astype_copy_false": _through(lambda y: y.astype(np.float64, copy=False), _set_first),
    "rot90": _through(np.rot90, _set_first),
    "split": _through(lambda y: np.split(y, 2, axis=1)[1], _set_first),
    "unstack": _through(lambda y: np.unstack(y, axis=1)[2], _set_first),
    "matrix_transpose": _through(lambda y: y.mT, _set_first),
    "reshape_fortran_of_transpose": _through(lambda y: y.T.reshape(-1, order="F"), _set_first),
    "ravel_k_of_transpose": _through(lambda y: y.T.ravel(order="K"), _set_first),
    "copyto_broadcast_row": _through(lambda y: y.T, lambda v: np.copyto(v[1:3], v[0] ** 2)),
    "copyto_where": _through(lambda y: y[::2], lambda v: np.copyto(v, -v, where=v > 0)),
    "ufunc_out_strided_transpose": _through(lambda y: y.T[::2],
                                            lambda v: np.multiply(v, v, out=v)),
    "ufunc_out_tuple": _through(lambda y: y.T, lambda v: np.divmod(v, 0.3, out=(v, v.copy()))),
    "cumsum_out": _through(lambda y: y.T, lambda v: np.cumsum(v, axis=0, out=v)),
    "add_at": _through(lambda y: y.T, lambda v: np.add.at(v, [0, 0, 2], v[1] * 2)),
    "fill_diagonal": _through(lambda y: y.T, lambda v: np.fill_diagonal(v, v[0, 1])),
    "zero_d_view_iadd": _through(lambda y: y[1, 2, ...], lambda v: v.__iadd__(4.0)),
}


@pytest.mark.parametrize("name", list(WRITES_THROUGH_VIEWS))
def test_writes_through_views_reach_the_base_as_in_numpy(name):
    check(WRITES_THROUGH_VIEWS[name])


def _sum_out_into_a_column(x):
    y = x * 1.0
    np.sum(y, axis=1, out=y[..., 0])   # reads the row sums before the column is written
    return _total(y)


def _chain_of_views(x):
    y = x * 1.0
    v = y.T[::-1].reshape(2, 2, 3)[..., 1:]
    w = v.swapaxes(0, 2)[0]
    w[...] = w * 5.0
    return _total(y, v, w)


def _view_written_after_the_base(x):
    y = x * 1.0
    v = y[1:, ::2].T
    y[2] = y[0] ** 2
    v[0, 1] = v[1, 0] * 2.0
    return _total(y, v)


def _two_overlapping_views(x):
    y = x * 1.0
    a, b = y[:2], y[1:].T
    a[1] = a[0] * 3.0
    b[2] = b[1] * b[0]
    return _total(y, a, b)


def _overlapping_out(x):
    y = x.reshape(-1) * 1.0
    np.add(y[:-1], y[1:], out=y[1:])
    y[2:] *= y[:-2]
    return _total(y.reshape(3, 4))


def _duplicated_through_a_chain(x):
    v = x[::2].T[1:]
    v *= v
    return np.sum(x * WEIGHTS) + np.sum(v)


def _duplicated_through_ravel(x):
    v = x.ravel()
    v[3:] = v[:-3] ** 2
    return np.sum(np.sin(x) * WEIGHTS)


def _duplicated_out_into_a_column(x):
    np.exp(x[:, 1], out=x[:, 2])
    return np.sum(x * WEIGHTS)


def _read_only_views_see_later_writes(x):
    y = x * 1.0
    row = y[0] * 1.0
    b = np.broadcast_to(row, (3, 4))
    d = y.T.diagonal(1)
    row[1] = 3.0 * row[2]
    y[2, 3] = y[0, 3] ** 2
    y[1, 2] = 7.0
    return np.sum(b * WEIGHTS) + np.sum(d * np.arange(1.0, 3.0)) + np.sum(y)


@pytest.mark.parametrize("f", [_sum_out_into_a_column, _chain_of_views,
                               _view_written_after_the_base, _two_overlapping_views,
                               _overlapping_out, _duplicated_through_a_chain,
                               _duplicated_through_ravel, _duplicated_out_into_a_column,
                               _read_only_views_see_later_writes])
def test_sequences_of_writes_through_views(f):
    check(f)


# -- complex arrays: .real and .imag are views -----------------------------------------------------
Z = np.array([[1 + 2j, -0.5 + 0.3j, 0.2 - 1j], [0.7 + 0.1j, -1.1 - 0.4j, 0.9 + 0.9j]])


def _imag_written(z):
    w = z * 1.0
    v = w.imag
    v[0] = v[1] * 2.0 + w.real[0]
    v += 0.5
    np.copyto(w[:, ::2].real, v[:, :2] * 2.0)
    return np.sum(np.abs(w) ** 2)


def _duplicated_imag_written(z):
    v = z.T.imag
    v[1] = v[0] * z.real[:, 1]
    return np.sum(np.abs(z) ** 2)


@pytest.mark.parametrize("f", [_imag_written, _duplicated_imag_written])
def test_writes_through_real_and_imag_views(f):
    plain = Z.copy()
    want = f(plain)
    grad = np.zeros_like(Z)   # d/dRe + i d/dIm of the real result
    for j in np.ndindex(Z.shape):
        for unit in (1.0, 1j):
            e = np.zeros_like(Z)
            e[j] = 1e-6 * unit
            grad[j] += unit * (f(Z + e) - f(Z - e)) / 2e-6
    arg, shadow = Z.copy(), np.zeros_like(Z)
    _, value = autodiff(ReverseWithPrimal, f, Active, Duplicated(arg, shadow))
    assert value == pytest.approx(want, rel=1e-12)
    np.testing.assert_allclose(arg, plain, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(shadow, grad, rtol=1e-6, atol=1e-6)
    compiled = tape.compile(ReverseWithPrimal, f, Active, Duplicated)
    for call in range(3):
        zi = Z * (1.0 + 0.2 * call) - 0.1j * call
        plain = zi.copy()
        want = f(plain)
        arg = zi.copy()
        _, value = compiled(Duplicated(arg, np.zeros_like(zi)))
        assert value == pytest.approx(want, rel=1e-12)
        np.testing.assert_allclose(arg, plain, rtol=1e-12, atol=1e-12)


# -- read-only views: a write NumPy refuses is refused ---------------------------------------------
def _diag(x):
    return (x * 1.0).diagonal()


def _bcast(x):
    return np.broadcast_to(x[0] * 1.0, (3, 4))


def _fill(v):
    v[...] = 1.0


REFUSED = {
    "diagonal_reshaped": lambda x: _fill(_diag(x).reshape(3, 1)),
    "diagonal_none": lambda x: _fill(_diag(x)[None]),
    "diagonal_view": lambda x: _fill(_diag(x).view()),
    "diagonal_asarray": lambda x: _fill(np.asarray(_diag(x))),
    "diagonal_real": lambda x: _fill(_diag(x).real),
    "diagonal_expand_dims": lambda x: _fill(np.expand_dims(_diag(x), 0)),
    "diagonal_ipow": lambda x: _diag(x).__ipow__(2.0),
    "diagonal_ufunc_out": lambda x: np.exp(x[:, 0], out=(x * 1.0).diagonal()),
    "broadcast_moveaxis": lambda x: _fill(np.moveaxis(_bcast(x), 0, 1)),
    "broadcast_squeeze": lambda x: _fill(np.broadcast_to(x[0] * 1.0, (1, 4)).squeeze()),
    "broadcast_split": lambda x: _fill(np.split(_bcast(x), 2, axis=1)[0]),
    "broadcast_rot90": lambda x: _fill(np.rot90(_bcast(x))),
    "broadcast_fill": lambda x: _bcast(x).fill(2.0),
    "broadcast_put": lambda x: np.put(_bcast(x), [0], [2.0]),
    "broadcast_putmask": lambda x: np.putmask(_bcast(x), _bcast(x) > 0, 2.0),
    "broadcast_add_at": lambda x: np.add.at(_bcast(x), [0], 2.0),
    "broadcast_mask_write": lambda x: _bcast(x).__setitem__(_bcast(x) > 0, 2.0),
    "broadcast_copyto": lambda x: np.copyto(_bcast(x), 0.0),
    "broadcast_real_setter": lambda x: setattr(_bcast(x), "real", 0.0),
    "broadcast_of_an_argument": lambda x: np.broadcast_to(x, (2, 3, 4)).__setitem__(0, 0.0),
}


def _refused_everywhere(f):
    with pytest.raises(ValueError, match="read-only"):
        f(X.copy())
    with pytest.raises(ValueError, match="read-only"):
        autodiff(Forward, f, Duplicated(X.copy(), np.ones_like(X)))
    with pytest.raises(ValueError, match="read-only"):
        autodiff(ReverseWithPrimal, lambda x: (f(x), np.sum(x))[1], Active,
                 Duplicated(X.copy(), np.zeros_like(X)))
    compiled = tape.compile(ReverseWithPrimal, lambda x: (f(x), np.sum(x))[1], Active, Duplicated)
    with pytest.raises(ValueError, match="read-only"):
        compiled(Duplicated(X.copy(), np.zeros_like(X)))


@pytest.mark.parametrize("name", list(REFUSED))
def test_writes_into_views_of_read_only_views_are_refused(name):
    _refused_everywhere(REFUSED[name])


# -- findings ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("write", [
    lambda v: v.__setitem__((0, 0, 0), 1.0),
    lambda v: v.__iadd__(1.0),
    lambda v: np.negative(v, out=v),
])
def test_a_write_into_a_sliding_window_view_is_refused(write):
    _refused_everywhere(lambda x: write(sliding_window_view(x * 1.0, 2, axis=1)))


def _windows_read_after_a_write(x):
    y = x * 1.0
    v = sliding_window_view(y, 2, axis=1)
    y[0, 1] = 3.0 * y[0, 0]
    return np.sum(v * np.arange(18.0).reshape(3, 3, 2))


def test_sliding_windows_see_later_writes_into_the_base():
    check(_windows_read_after_a_write)


def test_imag_of_a_real_array_is_read_only():
    _refused_everywhere(lambda x: (x * 1.0).imag.__setitem__(0, 1.0))


def _conj_of_real_written(x):
    y = x * 1.0
    v = y.conj()          # NumPy: for a real array, the array itself
    v[0] = 2.5 * v[1]
    return _total(y, v)


def test_conj_of_a_real_array_is_the_array_itself():
    check(_conj_of_real_written)


def _ravel_of_a_written_column(x):
    y = x * 1.0
    v = y[:, 1]           # a strided view
    v += 1.0
    r = v.ravel()         # NumPy: a copy (v is not contiguous)
    r[0] = 9.0
    return _total(y, r)


def test_ravel_of_a_written_strided_view_is_a_copy():
    check(_ravel_of_a_written_column)


def _ravel_of_a_diagonal_written(x):
    y = x * 1.0
    r = y.diagonal().ravel()   # NumPy: a writable copy
    r[0] = 9.0
    return np.sum(y * y) + np.sum(r ** 3)


def test_ravel_of_a_diagonal_is_a_writable_copy():
    check(_ravel_of_a_diagonal_written)


def _require_written(x):
    y = x * 1.0
    v = np.require(y, requirements="C")   # NumPy: the array itself
    v[0] = 2.5 * v[1]
    return _total(y, v)


def test_require_returns_the_array_itself():
    check(_require_written)


@pytest.mark.parametrize("requirements", [None, "C", "F", "O", "W", ["C", "O"], "E", "A"])
@pytest.mark.parametrize("view", [lambda y: y, lambda y: y[:, 1], lambda y: y.T,
                                  lambda y: np.broadcast_to(y[0], (2, 3))],
                         ids=["whole", "column", "transpose", "broadcast"])
def test_require_copies_where_numpy_s_does(view, requirements):
    """np.require gives the array itself where it meets the requirements, else a copy (a view
    that must own its data, a read-only one that must be writeable, another layout): a write
    into the result reaches the base exactly where NumPy's does."""
    def f(x):
        y = x * 1.0
        v = np.require(view(y), None, requirements)
        if v.flags.writeable:
            v[(0,) * v.ndim] = 2.5 * v[(-1,) * v.ndim]
        return np.sum(y * np.arange(1.0, 7.0).reshape(2, 3)) + np.sum(v * v)
    x = np.arange(6.0).reshape(2, 3) + 0.5
    (g,), value = autodiff(ReverseWithPrimal, f, Active, Active(x.copy()))
    assert value == pytest.approx(f(x), rel=1e-14)
    np.testing.assert_allclose(g, fd_gradient(f, x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("view", [lambda y: y[:, 1], lambda y: y[:, ::2], lambda y: y.T,
                                  lambda y: y[0], lambda y: y],
                         ids=["column", "strided", "transpose", "row", "whole"])
def test_ravel_is_a_view_only_where_numpy_s_is(view):
    """np.ravel (order C) gives a view only of a C-contiguous array; of a strided one (a column)
    a copy, where reshape(-1) would be a view: a write into it must not reach the base."""
    def f(x):
        y = x * 1.0
        r = view(y).ravel()
        r[0] = 9.0
        return np.sum(y * np.arange(1.0, 7.0).reshape(2, 3)) + np.sum(r)
    x = np.arange(6.0).reshape(2, 3)
    (g,), value = autodiff(ReverseWithPrimal, f, Active, Active(x.copy()))
    assert value == pytest.approx(f(x), rel=1e-14)
    np.testing.assert_allclose(g, fd_gradient(f, x), rtol=1e-6, atol=1e-8)
