"""NumPy's indexing rules in every mode: eager Reverse, ReverseWithPrimal and Forward,
tape.compile (Reverse and Forward, three calls with new values), BatchDuplicated (forward and
reverse, widths 1, 2 and 3, and a compiled batched forward), tape.checkpoint around the indexing
code, and tape.hessian (forward over reverse).

The corners: an integer (Python, np.int64, a 0-d array) beside an array index, which makes it an
advanced index (`x[[0, 2], :, 1]`, `x[1, :, [0, 1]]`: separated advanced indices move their axes
to the front); Python and NumPy bool scalars beside arrays; boolean masks of partial rank;
np.newaxis between and beside advanced indices; Ellipsis in the middle (also standing for no
axis); negative steps; repeated entries in reads (cotangents accumulate), in `x[i] = v` (the last
write is kept), in `x[i] += v` (not cumulative) and np.add.at (cumulative); writes through
transposed, reshaped and strided views; and integer indices computed from traced values.

Each case is a function of x alone (the indices are constants, or computed from x). Primals are
compared with plain NumPy, derivatives with central differences in float64: the reverse gradient
of sum(w * f(x)), the forward tangent J t, batched lanes J t_k and s_k J, and the Hessian of
sum(w * f(x)**2) / 2, which is J^T diag(w) J for these f (linear in x).
"""
from __future__ import annotations

import copy

import numpy as np
import pytest

import tape
from tape import (Active, BatchDuplicated, Const, Duplicated, Forward, ForwardWithPrimal,
                  Reverse, ReverseWithPrimal, autodiff)

EPS = 1e-6
TOL = dict(rtol=1e-6, atol=1e-7)

X = np.linspace(-1.3, 1.7, 60).reshape(3, 4, 5) + 0.1 * np.cos(np.arange(60)).reshape(3, 4, 5)
M34 = np.array([[True, False, True, False], [False, True, True, False],
                [True, False, False, True]])
M45 = np.arange(20).reshape(4, 5) % 3 == 0


def _jacobian(f, x):
    out = np.asarray(f(x.copy()), dtype=float)
    jac = np.zeros((out.size, x.size))
    for k in range(x.size):
        step = np.zeros(x.size)
        step[k] = EPS
        step = step.reshape(x.shape)
        jac[:, k] = ((np.asarray(f(x + step)) - np.asarray(f(x - step))) / (2 * EPS)).ravel()
    return out, jac


def _weights(shape):
    return np.cos(np.arange(int(np.prod(shape))) + 0.5).reshape(shape)


def _into(f):
    def g(y, x):
        y[...] = f(x)
    return g


def _close(got, want, what):
    got, want = np.asarray(got, dtype=float), np.asarray(want, dtype=float)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, NumPy's {want.shape}"
    np.testing.assert_allclose(got, want, err_msg=what, **TOL)


def _call_values(x, k):
    # new values at each compiled call (traced integer indices then pick other elements)
    return x * (1 + 0.3 * k) + 0.1 * k


# -- one check per mode -------------------------------------------------------------------------
def _reverse(f, x):
    out, jac = _jacobian(f, x)
    w = _weights(out.shape)
    dx = np.zeros_like(x)
    _, value = autodiff(ReverseWithPrimal, lambda x: np.sum(w * f(x)), Active,
                        Duplicated(x.copy(), dx))
    _close(value, np.sum(w * out), "primal")
    _close(dx, (w.ravel() @ jac).reshape(x.shape), "reverse gradient")


def _forward(f, x):
    out, jac = _jacobian(f, x)
    t = np.linspace(-1, 1, x.size).reshape(x.shape) + 0.3
    tangent, primal = autodiff(ForwardWithPrimal, f, Duplicated(x.copy(), t.copy()))
    _close(primal, out, "forward primal")
    _close(tangent, (jac @ t.ravel()).reshape(out.shape), "forward tangent")


def _compiled_reverse(f, x):
    w = _weights(np.shape(f(x.copy())))
    loss = lambda x: np.sum(w * f(x))   # noqa: E731
    compiled = tape.compile(ReverseWithPrimal, loss, Active, Duplicated)
    for k in range(3):
        xk = _call_values(x, k)
        out, jac = _jacobian(f, xk)
        dx = np.zeros_like(x)
        _, value = compiled(Duplicated(xk.copy(), dx))
        _close(value, np.sum(w * out), f"compiled primal, call {k}")
        _close(dx, (w.ravel() @ jac).reshape(x.shape), f"compiled gradient, call {k}")


def _compiled_forward(f, x):
    compiled = tape.compile(ForwardWithPrimal, f, Duplicated, Duplicated)
    for k in range(3):
        xk = _call_values(x, k)
        out, jac = _jacobian(f, xk)
        t = np.sin(np.arange(x.size) + k).reshape(x.shape)
        tangent, primal = compiled(Duplicated(xk.copy(), t.copy()))
        _close(primal, out, f"compiled forward primal, call {k}")
        _close(tangent, (jac @ t.ravel()).reshape(out.shape), f"compiled tangent, call {k}")


def _batched_forward(f, x):
    out, jac = _jacobian(f, x)
    for width in (1, 2, 3):
        dirs = tuple(np.sin(np.arange(x.size) * (k + 1)).reshape(x.shape) for k in range(width))
        got = autodiff(Forward, f, BatchDuplicated(x.copy(), copy.deepcopy(dirs)))[0]
        for k in range(width):
            _close(got[k], (jac @ dirs[k].ravel()).reshape(out.shape), f"width {width}, lane {k}")


def _batched_reverse(f, x):
    out, jac = _jacobian(f, x)
    for width in (1, 2, 3):
        seeds = tuple(_weights(out.shape) * (k + 1) - 0.1 * k for k in range(width))
        grads = tuple(np.zeros_like(x) for _ in range(width))
        autodiff(Reverse, _into(f), Const, BatchDuplicated(np.zeros_like(out), copy.deepcopy(seeds)),
                 BatchDuplicated(x.copy(), grads))
        for k in range(width):
            _close(grads[k], (seeds[k].ravel() @ jac).reshape(x.shape),
                   f"width {width}, lane {k}")


def _compiled_batched_forward(f, x):
    compiled = tape.compile(Forward, f, BatchDuplicated, BatchDuplicated)
    for k in range(2):
        xk = _call_values(x, k)
        out, jac = _jacobian(f, xk)
        dirs = tuple(np.cos(np.arange(x.size) * (j + 2) + k).reshape(x.shape) for j in range(2))
        got = compiled(BatchDuplicated(xk.copy(), copy.deepcopy(dirs)))[0]
        for j in range(2):
            _close(got[j], (jac @ dirs[j].ravel()).reshape(out.shape), f"call {k}, lane {j}")


def _checkpointed(f, x):
    out, jac = _jacobian(f, x)
    w = _weights(out.shape)
    inner = tape.checkpoint(f)
    dx = np.zeros_like(x)
    autodiff(Reverse, lambda x: np.sum(w * inner(x)), Active, Duplicated(x.copy(), dx))
    _close(dx, (w.ravel() @ jac).reshape(x.shape), "checkpointed gradient")


def _hessian(f, x):
    out, jac = _jacobian(f, x)
    w = _weights(out.shape)
    got = tape.hessian(lambda x: np.sum(w * f(x) ** 2) / 2, x.copy())
    _close(np.reshape(got, (x.size, x.size)), jac.T @ (w.ravel()[:, None] * jac), "hessian")


MODES = {"reverse": _reverse, "forward": _forward, "compiled reverse": _compiled_reverse,
         "compiled forward": _compiled_forward, "batched forward": _batched_forward,
         "batched reverse": _batched_reverse, "compiled batched forward": _compiled_batched_forward,
         "checkpoint": _checkpointed, "hessian": _hessian}


def _all_modes(f, x, skip=()):
    failures = []
    for name, check in MODES.items():
        if name in skip:
            continue
        try:
            check(f, x)
        except Exception as e:   # collect every mode's failure, then report them together
            failures.append(f"{name}: {type(e).__name__}: {str(e)[:300]}")
    assert not failures, "\n".join(failures)


# -- the cases -----------------------------------------------------------------------------------
def _write(index, source, scale=2.0):
    def f(x):
        y = x * 1.0
        y[index] = scale * x[source]
        return y
    return f


def _add(index, source):
    def f(x):
        y = x * 1.0
        y[index] += 3.0 * x[source]    # repeated entries: one write each, as in NumPy
        return y
    return f


def _add_at(index, source):
    def f(x):
        y = x * 1.0
        np.add.at(y, index, 2.0 * x[source])
        return y
    return f


def _transposed_view(x):
    y = x * 1.0
    y.T[[0, 0], 1] = x[:, 2, [1, 3]].T * 2
    return y


def _permuted_view_separated(x):
    y = x * 1.0
    y.transpose(2, 0, 1)[[0, 1], :, 2] = x[:, 1, [2, 3]].T * 3
    return y


def _reshaped_view(x):
    y = x * 1.0
    y.reshape(12, 5)[[1, 1, 7], ::-1] = x[0, :3] * 2
    return y


def _strided_view_mask(x):
    y = x * 1.0
    y[::2][M45[None].repeat(2, 0)] = np.tile(x[1][M45], 2) * 2
    return y


def _reversed_view_separated(x):
    y = x * 1.0
    y[..., ::-1][1, :, [0, 0]] = x[0, :, [1, 2]] * 2
    return y


def _traced_cast(x):
    i = (np.abs(x[0, 0, :3]) * 3).astype(np.int64) % 3    # traced, cast to int
    return x[i, 1:, i[0]]


def _traced_cast_write(x):
    y = x * 1.0
    i = (np.abs(x[2, 3, :2]) * 3).astype(int) % 3
    y[i, :, 1] = x[i, :, 0] * 2
    return y


def _traced_int_beside_array(x):
    j = np.argmax(x[0, 0]) % 3
    return x[[0, 2], :, j]


def _traced_python_int(x):
    j = int(np.argmax(x[0, 0]))
    return x[1, :, [j, 0]]


def _traced_slice_bound_write(x):
    y = x * 1.0
    j = np.argmax(x[0, 0, :3])
    y[1, j:] = x[2, :4 - j] * 2
    return y


def _traced_bool_scalar_write(x):
    y = x * 1.0
    b = x[0, 0, 0] > 0          # a traced np.bool_ index
    y[..., b] = x[..., b] * 2
    return y


CASES = {
    # an integer beside an array index is an advanced index
    "int beside list (separated)": lambda x: x[[0, 2], :, 1],
    "int then list (separated)": lambda x: x[1, :, [0, 1]],
    "np.int64 then list": lambda x: x[np.int64(1), :, [0, 3]],
    "0-d array then repeated list": lambda x: x[np.array(2), :, [0, 1, 1]],
    "two 0-d arrays separated": lambda x: x[np.array(1), :, np.array(-2)],
    "0-d array and int": lambda x: x[np.array(1), 2],
    # bool scalars
    "True beside list": lambda x: x[[0, 2], True],
    "list, slice, True": lambda x: x[[0, 2], :, True],
    "int, slice, np.False_": lambda x: x[1, :, np.False_],
    "np.True_, int": lambda x: x[np.True_, 1],
    # masks of partial rank
    "2-d mask after a slice": lambda x: x[:, M45],
    "int then 2-d mask": lambda x: x[1, M45],
    "mask, slice, list": lambda x: x[np.array([True, False, True]), :, [0, 3]],
    # np.newaxis and Ellipsis
    "None between lists": lambda x: x[[0, 1], None, [1, 2]],
    "None, list, slice, list": lambda x: x[None, [0, 1], :, [1, 2]],
    "int, None, repeated list": lambda x: x[1, None, [0, 0, 3]],
    "lists around Ellipsis": lambda x: x[[0, 2], ..., [1, 3]],
    "lists around an empty Ellipsis": lambda x: x[:, [0, 1], ..., [1, 2]],
    # negative steps and repeated reads
    "reversed slices around a repeated list": lambda x: x[::-2, [1, 0, 1], ::-1],
    "repeated list, reversed slice, int": lambda x: x[[2, 2, 0], ::-1, -1],
    "repeated 2-d arrays beside an int": lambda x: x[np.array([[0, 0], [2, 0]]), 1,
                                                    np.array([[1], [1]])],
    # writes with repeated entries
    "set: repeated list, slice, int": _write(([0, 0], slice(None), 1), ([1, 2], slice(None), 0)),
    "set: int, slice, repeated list": _write((1, slice(None), [3, 3, 0]),
                                             (0, slice(None), [1, 2, 4])),
    "set: 0-d array, slice, repeated list": _write((np.array(2), slice(None), [1, 1]),
                                                   (0, slice(None), [0, 4])),
    "set: repeated list, slice, True": _write(([1, 1], slice(None), True),
                                              ([0, 2], slice(None), True)),
    "set: None, repeated list, slice, list": _write((None, [0, 0], slice(None), [1, 2]),
                                                    (None, [1, 2], slice(None), [3, 3])),
    "set: repeated lists around Ellipsis": _write(([0, 0], Ellipsis, [2, 2]),
                                                  ([1, 2], Ellipsis, [0, 1])),
    "set: reversed slices, repeated list": _write((slice(None, None, -1), [0, 0],
                                                   slice(None, None, -2)),
                                                  (slice(None, None, -1), [0, 0],
                                                   slice(None, None, -2))),
    "iadd: repeated list, slice, int": _add(([0, 0], slice(None), 1), ([1, 2], slice(None), 0)),
    "iadd: int, slice, repeated list": _add((2, slice(None), [3, 3]), (0, slice(None), [1, 2])),
    "iadd: repeated list, Ellipsis, int": _add(([0, 0], Ellipsis, 1), ([1, 2], Ellipsis, 0)),
    "add.at: repeated list, slice, int": _add_at(([0, 0], slice(None), 1),
                                                 ([1, 2], slice(None), 0)),
    "add.at: int, slice, repeated list": _add_at((1, slice(None), [2, 2, 0]),
                                                 (0, slice(None), [1, 3, 3])),
    # writes through views
    "view: x.T[repeated list, int]": _transposed_view,
    "view: transpose(...)[list, slice, int]": _permuted_view_separated,
    "view: reshape(...)[repeated list, ::-1]": _reshaped_view,
    "view: x[::2][mask]": _strided_view_mask,
    "view: x[..., ::-1][int, slice, repeated list]": _reversed_view_separated,
    # indices computed from traced values
    "traced: cast to int, beside an array": _traced_cast,
    "traced: cast to int, written": _traced_cast_write,
    "traced: argmax beside a list": _traced_int_beside_array,
    "traced: int(argmax) beside a list": _traced_python_int,
    "traced: slice bound": _traced_slice_bound_write,
    "traced: np.bool_ scalar index": _traced_bool_scalar_write,
}


@pytest.mark.parametrize("name", list(CASES))
def test_indexing_rule_in_every_mode(name):
    _all_modes(CASES[name], X)


# -- findings --------------------------------------------------------------------------------------
def _view_by_argmax(x):
    # np.argmax gives an np.int64: a basic index, so y[j] is a view and the write reaches y
    y = x * 1.0
    j = np.argmax(x[0, 0]) % 3
    r = y[j]
    r *= 3.0
    return y


def _reversed_view_by_argmax(x):
    y = x * 1.0
    j = np.argmax(x[0, 0]) % 3
    r = y[j, ::-1]
    r[0] = x[0, 0] * 2
    return y


VIEWS_BY_TRACED_INT = {"y[argmax] *= 3": _view_by_argmax,
                       "y[argmax, ::-1][0] = v": _reversed_view_by_argmax}
COMPILED = ("compiled reverse", "compiled forward", "compiled batched forward")


@pytest.mark.parametrize("name", list(VIEWS_BY_TRACED_INT))
def test_view_by_a_traced_integer_eager_modes(name):
    _all_modes(VIEWS_BY_TRACED_INT[name], X, skip=COMPILED)




@pytest.mark.parametrize("mode", COMPILED)
@pytest.mark.parametrize("name", list(VIEWS_BY_TRACED_INT))
def test_view_by_a_traced_integer_compiled(name, mode):
    MODES[mode](VIEWS_BY_TRACED_INT[name], X)


def test_compiled_write_through_column_view_by_argmax_minimal():
    def f(x):
        y = np.stack([x, x * 2])
        r = y[:, np.argmax(x)]       # a view of column argmax(x) in NumPy
        r *= 3.0
        return np.sum(y * y)
    x = np.array([1.0, 2.0, 5.0])
    compiled = tape.compile(ReverseWithPrimal, f, Active, Duplicated)
    dx = np.zeros(3)
    _, value = compiled(Duplicated(x.copy(), dx))
    np.testing.assert_allclose(value, f(x.copy()), rtol=1e-12)   # 1150.0 (compiled: 150.0)
    np.testing.assert_allclose(dx, [10.0, 20.0, 450.0], rtol=1e-12)


INDEX_CONSTS = {"slice(None, None, -1)": slice(None, None, -1),
                "(1, slice(1, None))": (1, slice(1, None))}


def _index_const_loss(x, i):
    return np.sum(x[i] ** 2)


@pytest.mark.parametrize("index", list(INDEX_CONSTS))
def test_reverse_takes_an_index_with_a_slice_as_const(index):
    i = INDEX_CONSTS[index]
    x = X[0].copy()
    dx = np.zeros_like(x)
    want = np.zeros_like(x)
    want[i] = 2 * x[i]
    autodiff(Reverse, _index_const_loss, Active, Duplicated(x.copy(), dx), Const(i))
    _close(dx, want, "gradient")
    compiled = tape.compile(Reverse, _index_const_loss, Active, Duplicated, Const)
    dx = np.zeros_like(x)
    compiled(Duplicated(x.copy(), dx), Const(i))
    _close(dx, want, "compiled gradient")




@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("index", list(INDEX_CONSTS))
def test_forward_takes_an_index_with_a_slice_as_const(index, compiled):
    i = INDEX_CONSTS[index]
    x = X[0].copy()
    t = np.sin(np.arange(x.size)).reshape(x.shape)
    f = lambda x, i: x[i] * 2.0     # noqa: E731
    if compiled:
        tangent, primal = tape.compile(ForwardWithPrimal, f, Duplicated, Duplicated, Const)(
            Duplicated(x.copy(), t.copy()), Const(i))
    else:
        tangent, primal = autodiff(ForwardWithPrimal, f, Duplicated(x.copy(), t.copy()), Const(i))
    _close(primal, x[i] * 2.0, "primal")
    _close(tangent, t[i] * 2.0, "tangent")
