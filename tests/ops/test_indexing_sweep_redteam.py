"""A sweep of NumPy indexing on traced values: reads, writes (`x[i] = v`), augmented writes
(`x[i] += v`, `-=`, `*=`), writes through views, np.add.at, np.put, np.take,
np.take_along_axis / put_along_axis, np.place, np.putmask, np.compress and np.extract, with every
index kind NumPy has: Python and NumPy integers (negative too), slices with negative steps,
Ellipsis, None, boolean masks (full, per axis, 0-d True/False), integer arrays and lists (repeated
and negative entries, broadcasting against each other), advanced indices separated by a slice
(their axes move to the front), empty selections, 0-d index arrays and integer indices computed
from traced values (argmax, argsort).

Each case writes into its first argument in place, as user code does. The primal value and the
written argument must equal plain NumPy's (a repeated index in `x[i] += v` keeps one write per
element, np.add.at keeps them all); the reverse gradient and the forward tangent (of the result
and of the written argument) must equal central finite differences in float64. A subset runs
under tape.compile for three calls with new values and new index values.
"""
from __future__ import annotations

import numpy as np
import pytest

import tape
from tape import Active, Const, Duplicated, ForwardWithPrimal, ReverseWithPrimal, autodiff
from numeric_checks import fd_gradient_of

EPS = 1e-6
TOL = dict(rtol=1e-6, atol=1e-7)

X34 = np.array([[0.31, -1.22, 2.03, 0.74],
                [1.10, 0.45, -0.60, 0.20],
                [-0.83, 1.57, 0.92, -0.41]])
X234 = np.linspace(-1.3, 1.7, 24).reshape(2, 3, 4) + 0.1 * np.cos(np.arange(24)).reshape(2, 3, 4)


def _vals(*shape, seed=0):
    rng = np.random.default_rng(seed + 7 * len(shape) + int(np.prod(shape, dtype=int)))
    return rng.uniform(0.3, 1.7, shape)   # distinct values: argsort/argmax have no ties


def _loss(out):
    out = np.asarray(out) if not hasattr(out, "shape") else out
    w = np.cos(np.arange(np.size(out)) + 0.5).reshape(np.shape(out))
    return np.sum(w * out) + np.sum(out * out * out) / 3.0


def scalar(case):
    """f(x, v) -> the loss of its result and of what it wrote into x."""
    def g(x, v):
        r = case(x, v)
        total = _loss(x)
        if r is not None:
            total = total + _loss(r)
        return total
    return g


def check(case, x, v):
    x, v = np.array(x, dtype=float), np.array(v, dtype=float)
    g = scalar(case)
    # plain NumPy
    xn, vn = x.copy(), v.copy()
    want_r = case(xn, vn)
    want = float(g(x.copy(), v.copy()))
    grads = [fd_gradient_of(g, [x, v], i, eps=EPS) for i in range(2)]

    # reverse
    xr, vr, dx, dv = x.copy(), v.copy(), np.zeros_like(x), np.zeros_like(v)
    _, value = autodiff(ReverseWithPrimal, g, Active, Duplicated(xr, dx), Duplicated(vr, dv))
    np.testing.assert_allclose(value, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(xr, xn, rtol=1e-14, atol=1e-15)   # as NumPy wrote it
    np.testing.assert_allclose(dx, grads[0], **TOL)
    np.testing.assert_allclose(dv, grads[1], **TOL)

    # forward: the tangents of the result and of the written argument
    tx = np.array(np.linspace(-1.0, 1.0, x.size).reshape(x.shape) + 0.3)
    tv = np.array(np.linspace(0.7, -0.4, v.size).reshape(v.shape))
    xf, txf = x.copy(), tx.copy()
    tangent, primal_r = autodiff(ForwardWithPrimal, _result(case), Duplicated(xf, txf),
                                 Duplicated(v.copy(), tv.copy()))
    np.testing.assert_allclose(xf, xn, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(primal_r, np.sum(xn) if want_r is None else want_r,
                               rtol=1e-14, atol=1e-14)

    def after(x, v):
        x = x.copy()
        r = _result(case)(x, v)
        return x, np.asarray(r, dtype=float)
    plus = after(np.array(x + EPS * tx), np.array(v + EPS * tv))
    minus = after(np.array(x - EPS * tx), np.array(v - EPS * tv))
    np.testing.assert_allclose(txf, (plus[0] - minus[0]) / (2 * EPS), **TOL)
    np.testing.assert_allclose(tangent, (plus[1] - minus[1]) / (2 * EPS), **TOL)


def _result(case):
    def f(x, v):
        r = case(x, v)
        return np.sum(x) if r is None else r
    return f


# -- the cases: f(x, v) writes into x and may return a value --------------------------------------
def _set(index, value=lambda v: v):
    def f(x, v):
        x[index] = value(v)
    return f


def _aug(index, op, value=lambda v: v):
    def f(x, v):
        if op == "+":
            x[index] += value(v)
        elif op == "-":
            x[index] -= value(v)
        else:
            x[index] *= value(v)
    return f


def _through_view(index, op):
    def f(x, v):
        r = x[index]             # a view for a basic index, a copy otherwise (as NumPy)
        if op == "+":
            r += v
        elif op == "*":
            r *= v
        else:
            r[...] = v * r
        return r * 1.0
    return f


def _get(index):
    return lambda x, v: x[index] * v


NEG = np.array([-1, 0, -3])
REP = np.array([1, 1, 0, 1])
CASES = {
    # integer scalars
    "set int64": (_set(np.int64(-2), lambda v: v * v), X34, _vals(4)),
    "set (int, np.int64)": (_set((1, np.int64(-1))), X34, _vals()),
    "iadd (np.int32, -1)": (_aug((np.int32(2), -1), "+"), X34, _vals()),
    "imul 0-d array index (a copy in NumPy)": (_aug(np.array(1), "*"), X34, _vals(4)),
    "get 0-d array index": (_get((np.array(2), slice(None, None, -1))), X34, _vals(4)),
    # slices, Ellipsis, None
    "set ::-2 on both axes": (_set((slice(None, None, -2), slice(None, None, -3))), X34,
                              _vals(2, 2)),
    "isub [-1:0:-1]": (_aug((slice(-1, 0, -1), Ellipsis), "-"), X34, _vals(4)),
    "imul None, ..., ::-1": (_aug((None, Ellipsis, slice(None, None, -1)), "*"), X34,
                             _vals(1, 1, 4)),
    "set None, 1, None": (_set((None, 1, None)), X34, _vals(1, 4)),
    "set ... scalar broadcast": (_set((Ellipsis, 2)), X34, _vals()),
    "iadd empty slice": (_aug(slice(2, 2), "+"), X34, _vals(4)),
    "set empty negative-step slice": (_set((slice(None), slice(0, 3, -1))), X34, _vals(1)),
    # boolean masks
    "set full mask": (_set(X34 > 0.5), X34, _vals(int((X34 > 0.5).sum()))),
    "iadd full mask broadcast scalar": (_aug(X34 < 0.5, "+"), X34, _vals()),
    "imul per-axis mask": (_aug(np.array([True, False, True]), "*"), X34, _vals(4)),
    "set mask on axis 1 with slice": (_set((slice(None, None, -1),
                                            np.array([False, True, True, False]))),
                                      X34, _vals(3, 2)),
    "set 0-d True": (_set(True), X34, _vals(4)),
    "iadd np.True_": (_aug(np.True_, "+"), X34, _vals(3, 4)),
    "set 0-d False": (_set(False), X34, _vals(4)),
    "imul np.False_ with int": (_aug((np.False_, 1), "*"), X34, _vals(4)),
    "get 0-d True": (_get(np.True_), X34, _vals(4)),
    "get 0-d False, Ellipsis": (_get((Ellipsis, np.False_)), X34, _vals(1)),
    "set empty mask": (_set(np.zeros((3, 4), bool)), X34, _vals(1)),
    # integer arrays and lists: repeated, negative, broadcasting
    "set repeated rows (last wins)": (_set(REP), X34, _vals(4, 4)),
    "iadd repeated rows (last wins, no accumulation)": (_aug(REP, "+"), X34, _vals(4, 4)),
    "isub repeated list": (_aug([0, -3, 0, 2, -1], "-"), X34, _vals(5, 4)),
    "imul repeated pairs": (_aug(([0, 0, 2, -3], [1, 1, 3, 1]), "*"), X34, _vals(4)),
    "iadd repeated pairs, broadcast value": (_aug(([2, -1, 2], [0, -4, 0]), "+"), X34, _vals()),
    "set broadcasting index arrays": (_set((np.array([[0], [2], [0]]), np.array([1, 3, -3]))),
                                      X34, _vals(3, 3)),
    "iadd broadcasting index arrays": (_aug((np.array([[0], [-3]]), np.array([1, 3, 1])), "+"),
                                       X34, _vals(2, 3)),
    "imul negative array": (_aug((slice(None), NEG), "*"), X34, _vals(3, 3)),
    "set empty int array": (_set(np.array([], dtype=np.intp)), X34, _vals(4)),
    "iadd empty list": (_aug([], "+"), X34, _vals(4)),
    "iadd empty int array on axis 1": (_aug((slice(None), np.zeros(0, np.intp)), "+"), X34,
                                       _vals(1)),
    # mixed advanced and basic: separated advanced indices move to the front
    "set separated advanced": (_set(([1, 0, 1], slice(None), [3, 3, -1])), X234, _vals(3, 3)),
    "iadd separated advanced, repeated": (_aug(([1, 1, 1], slice(None, None, -1), [2, 2, 0]), "+"),
                                          X234, _vals(3, 3)),
    "imul adjacent advanced stay": (_aug((slice(None), [2, 0, 2], [1, -1, 1]), "*"), X234,
                                    _vals(2, 3)),
    "set int + array (separated by slice)": (_set((0, slice(1, None), [3, 0, 3])), X234,
                                             _vals(3, 2)),
    "iadd None + arrays + Ellipsis": (_aug((None, [1, 1], Ellipsis, [0, 2]), "+"), X234,
                                      _vals(2, 1, 3)),
    "set mask + int array": (_set((np.array([True, False]), slice(None), [1, 1, 0])), X234,
                             _vals(3, 3)),
    "iadd 2-d mask + repeated array": (_aug((np.array([[True, False, True], [False, True, False]]),
                                             [1, 1, 3]), "+"), X234, _vals(3)),
    # writes through views (basic index) and copies (advanced index)
    "view ::-1 iadd": (_through_view((slice(None, None, -1), 1), "+"), X34, _vals(3)),
    "view np.int64 imul": (_through_view(np.int64(-1), "*"), X34, _vals(4)),
    "view None/Ellipsis assign": (_through_view((None, Ellipsis, slice(1, 3)), "="), X34,
                                  _vals(3, 2)),
    "copy by 0-d array index": (_through_view(np.array(0), "+"), X34, _vals(4)),
    "copy by list": (_through_view([2, 2], "*"), X34, _vals(4)),
    "copy by True": (_through_view(True, "+"), X34, _vals(4)),
    "view 0-d buffer": (lambda x, v: _through_view(Ellipsis, "+")(x[1, 2, ...], v), X34, _vals()),
    "view of ravel, repeated list": (lambda x, v: _aug([0, 0, -7], "+")(x.ravel(), v), X34,
                                     _vals(3)),
    "copy of transposed ravel": (lambda x, v: _set([0, 5])(x.T.ravel(), v), X34, _vals(2)),
    "view of transpose, reversed + repeated": (
        lambda x, v: _set((slice(None, None, -1), [0, 0]))(x.T, v), X34, _vals(4, 2)),
    "list of a plain float and a traced scalar": (
        lambda x, v: _set(([0, -1], 0), lambda v: [1.5, v[0] * 2])(x, v), X34, _vals(2)),
    # a 0-d argument
    "0-d: x[()] = v": (_set((), lambda v: v * 2), np.array(0.7), _vals()),
    "0-d: x[...] += v": (_aug(Ellipsis, "+"), np.array(0.7), _vals()),
    "0-d: x[True] = v": (_set(True), np.array(0.7), _vals(1)),
    "0-d: x[np.False_] *= v": (_aug(np.False_, "*"), np.array(0.7), _vals(1)),
    "0-d: x[None, ..., None]": (_get((None, Ellipsis, None)), np.array(0.7), _vals(1, 1)),
    "0-d: add.at": (lambda x, v: np.add.at(x, (), v), np.array(0.7), _vals()),
    "0-d: put repeated": (lambda x, v: np.put(x, [0, 0], v), np.array(0.7), _vals(2)),
    "0-d: putmask": (lambda x, v: np.putmask(x, x > 0, v), np.array(0.7), _vals()),
    "0-d: place": (lambda x, v: np.place(x, x > 0, v), np.array(0.7), _vals(2)),
    "0-d: take": (lambda x, v: np.take(x, [0, 0, -1]) * v, np.array(0.7), _vals(3)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_index_kind(name):
    case, x, v = CASES[name]
    check(case, x, v)


# -- traced integer indices ------------------------------------------------------------------------
def _traced_index_cases():
    def set_at_argmax(x, v):
        x[np.argmax(v[:3])] = v * 2

    def iadd_argsort_repeated(x, v):
        i = np.argsort(v)            # traced; repeated by concatenation
        x[np.concatenate([i, i[:2]]) % 3] += v.sum() * v[:1]

    def imul_argmax_axis(x, v):
        x[np.argmax(x, axis=0), np.arange(4)] *= v

    def gather_argsort(x, v):
        return x[:, np.argsort(v)][::-1] * v

    def put_argsort(x, v):
        np.put(x, np.argsort(v) - 12, v ** 2)

    def add_at_argmax(x, v):
        np.add.at(x, (np.argmax(x, axis=1), np.argmin(x, axis=1)), v[:3] * x[:, 0])

    def take_traced(x, v):
        return np.take(x, np.argsort(v)[[0, 0, -1]], axis=1) * v[0]

    def take_along_argsort(x, v):
        return np.take_along_axis(x, np.argsort(x, axis=1), axis=1) * v

    def put_along_argmax(x, v):
        np.put_along_axis(x, np.argmax(x, axis=0, keepdims=True), v[None], axis=0)

    def int_from_traced(x, v):
        x[int(np.argmax(v[:3])), np.argmin(v)] -= v[0] * x[0, 0]

    return {k: val for k, val in locals().items()}


TRACED = _traced_index_cases()


@pytest.mark.parametrize("name", sorted(TRACED))
def test_traced_integer_index(name):
    check(TRACED[name], X34, _vals(4, seed=3))


# -- np.add.at, np.put, put/take_along_axis, place, putmask, compress, extract --------------------
FUNCS = {
    "add.at 0-d index": lambda x, v: np.add.at(x, np.int64(-1), v),
    "add.at repeated negative": lambda x, v: np.add.at(x, [-1, 2, -1, -1], v),
    "add.at broadcasting index arrays": lambda x, v: np.add.at(
        x, (np.array([[0], [0]]), np.array([1, 1, 3])), v),
    "add.at slice + repeated": lambda x, v: np.add.at(x, (slice(None, None, -1), [0, 0]), v),
    "add.at Ellipsis": lambda x, v: np.add.at(x, (Ellipsis, [3, 3]), v[:, None]),
    "add.at mask": lambda x, v: np.add.at(x, np.array([True, False, True]), v),
    "add.at empty": lambda x, v: np.add.at(x, [], v),
    "add.at after iadd (accumulate vs not)": lambda x, v: (
        x.__setitem__([0, 0], x[[0, 0]] + v), np.add.at(x, [1, 1], v))[0],
    "subtract.at repeated pairs": lambda x, v: np.subtract.at(x, ([2, 2, 0], [1, 1, 1]), v),
    "put negative repeated": lambda x, v: np.put(x, [-1, -12, -1, 5], v),
    "put empty": lambda x, v: np.put(x, [], v),
    "put_along_axis repeated (last wins)": lambda x, v: np.put_along_axis(
        x, np.array([[1, 1, 3], [0, 0, 0], [2, 3, 2]]), v, axis=1),
    "put_along_axis negative axis 0": lambda x, v: np.put_along_axis(
        x, np.array([[-1, 0, -1, 1]]), v, axis=-2),
    "take_along_axis negative repeated": lambda x, v: np.take_along_axis(
        x, np.array([[-1, -1], [0, 3], [2, -4]]), axis=1) * v,
    "take_along_axis None": lambda x, v: np.take_along_axis(x, np.array([11, -12, 11]), None) * v,
    "take negative repeated 2-d": lambda x, v: np.take(x, np.array([[-1, 0], [-1, -1]]),
                                                        axis=0) * v,
    "take 0-d index": lambda x, v: np.take(x, np.int64(-2), axis=1) * v,
    "take empty": lambda x, v: np.take(x, np.zeros((2, 0), np.intp), axis=1),
    "take flat scalar": lambda x, v: np.take(x, -5) * v,
    "place traced mask": lambda x, v: np.place(x, x > 0.5, v),
    "place nothing": lambda x, v: np.place(x, x > 10, v),
    "putmask traced mask cycled": lambda x, v: np.putmask(x, x < 0.5, v),
    "compress axis 1": lambda x, v: np.compress([True, False, True], x, axis=1) * v,
    "compress short condition": lambda x, v: np.compress(np.array([False, True]), x, axis=0) * v,
    "compress flat traced": lambda x, v: np.compress(x.ravel() > 0.5, x) * v[0],
    "compress empty": lambda x, v: np.compress([False, False], x, axis=0),
    "extract traced": lambda x, v: np.extract(x > 0.5, x) * v[0],
    "extract nothing": lambda x, v: np.extract(np.zeros((3, 4)), x),
}


FUNC_VALUES = {"add.at 0-d index": _vals(4), "add.at repeated negative": _vals(4, 4),
    "add.at broadcasting index arrays": _vals(2, 3), "add.at slice + repeated": _vals(3, 2),
    "add.at Ellipsis": _vals(3), "add.at mask": _vals(4), "add.at empty": _vals(4),
    "add.at after iadd (accumulate vs not)": _vals(2, 4),
    "subtract.at repeated pairs": _vals(3), "put negative repeated": _vals(3),
    "put empty": _vals(1),
    "put_along_axis repeated (last wins)": _vals(3, 3),
    "put_along_axis negative axis 0": _vals(1, 4),
    "take_along_axis negative repeated": _vals(3, 2), "take_along_axis None": _vals(3),
    "take negative repeated 2-d": _vals(2, 2, 4), "take 0-d index": _vals(3),
    "take flat scalar": _vals(), "putmask traced mask cycled": _vals(5),
    "compress axis 1": _vals(3, 2), "compress short condition": _vals(1, 4),
    "compress flat traced": _vals(2), "extract traced": _vals(2)}


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_indexing_functions(name):
    check(FUNCS[name], X34, FUNC_VALUES.get(name, _vals(4)))


# -- tape.compile: three calls with new values and new index values --------------------------------
ROWS = [[0, 1, 2], [2, 2, -1], [0, 0, 0]]      # each call: new index values, repeats too
COLUMNS = [[0, 1, 2], [3, 3, -1], [0, 0, 0]]


def _iadd_operator(x, v, i):
    x[i] += v


def _mask_iadd(x, v, i):
    mask = np.reshape(i, (3, 4)) > 0
    x[mask] += v[0, 0]


def _argsort_imul(x, v, i):
    x[np.argsort(v[:, 0])[i]] *= v


# name: (f(x, v, index), index values of the three calls, the shape of v)
COMPILED = {
    "set": (lambda x, v, i: x.__setitem__(i, v * x[i]), [[0, 2, 0], [1, 1, 1], [-1, 0, 2]], (3, 4)),
    "iadd": (lambda x, v, i: x.__setitem__(i, x[i] + v), ROWS, (3, 4)),
    "iadd operator": (_iadd_operator, ROWS, (3, 4)),
    "add.at": (lambda x, v, i: np.add.at(x, i, v * x[i]), ROWS, (3, 4)),
    "put": (lambda x, v, i: np.put(x, i, v), [[0, 5, 11], [3, 3, -1], [7, 7, 7]], (3,)),
    "take": (lambda x, v, i: np.take(x, i, axis=0) * v, ROWS, (3, 4)),
    "put_along_axis": (lambda x, v, i: np.put_along_axis(x, np.reshape(i, (3, 1)), v, axis=1),
                       COLUMNS, (3, 1)),
    "take_along_axis": (lambda x, v, i: np.take_along_axis(x, np.reshape(i, (3, 1)), axis=1) * v,
                        COLUMNS, (3, 1)),
    "mask iadd": (_mask_iadd, [[0, 1] * 6, [1] * 12, [0] * 11 + [1]], (3, 4)),
    "argsort inside, imul repeated": (_argsort_imul, [[0, 1, 2], [2, 2, 0], [1, 1, 1]], (3, 4)),
    "array + reversed slice": (lambda x, v, i: x.__setitem__((i, slice(None, None, -1)), v),
                               ROWS, (3, 4)),
}


@pytest.mark.parametrize("name", sorted(COMPILED))
def test_compiled_with_new_index_values(name):
    case, indices, vshape = COMPILED[name]

    def g(x, v, i):
        r = case(x, v, i)
        return _loss(x) + (0.0 if r is None else _loss(r))

    compiled = tape.compile(ReverseWithPrimal, g, Active, Duplicated, Duplicated, Const)
    rng = np.random.default_rng(5)
    for call, i in enumerate(indices):
        i = np.array(i)
        x = X34 * (1 + 0.3 * call * rng.standard_normal(X34.shape))
        v = rng.uniform(0.3, 1.7, vshape)
        xn = x.copy()
        case(xn, v.copy(), i)
        want = g(x.copy(), v.copy(), i)
        grads = [fd_gradient_of(lambda a, b: g(a, b, i), [x, v], k, eps=EPS) for k in range(2)]
        xc, dx, dv = x.copy(), np.zeros_like(x), np.zeros_like(v)
        _, value = compiled(Duplicated(xc, dx), Duplicated(v.copy(), dv), Const(i.copy()))
        np.testing.assert_allclose(value, want, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(xc, xn, rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(dx, grads[0], **TOL)
        np.testing.assert_allclose(dv, grads[1], **TOL)


@pytest.mark.parametrize("name", sorted(TRACED))
def test_compiled_traced_integer_index(name):
    # Each call permutes v, so argmax/argsort pick other elements than at the first call.
    case = TRACED[name]
    g = scalar(case)
    compiled = tape.compile(ReverseWithPrimal, g, Active, Duplicated, Duplicated)
    rng = np.random.default_rng(1)
    v0 = _vals(4, seed=3)
    for call in range(3):
        x = X34 * (1 + 0.4 * call * rng.standard_normal(X34.shape))
        v = rng.permutation(v0) * (1 + 0.1 * call)
        xn = x.copy()
        case(xn, v.copy())
        grads = [fd_gradient_of(g, [x, v], k, eps=EPS) for k in range(2)]
        xc, dx, dv = x.copy(), np.zeros_like(x), np.zeros_like(v)
        _, value = compiled(Duplicated(xc, dx), Duplicated(v.copy(), dv))
        np.testing.assert_allclose(value, g(x.copy(), v.copy()), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(xc, xn, rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(dx, grads[0], **TOL)
        np.testing.assert_allclose(dv, grads[1], **TOL)


# -- findings --------------------------------------------------------------------------------------
@pytest.mark.parametrize("index, x, v", [
    (0, X34, _vals(1, 4)),                                                  # basic
    ((slice(None), [2, 2, 0]), X34, _vals(1, 3, 3)),                         # repeated array
    ((np.array([True, False]), slice(None), [1, 1, 0]), X234, _vals(1, 3, 3)),  # mixed
], ids=["int", "repeated array", "mask+slice+array"])
def test_setitem_value_with_leading_unit_dims(index, x, v):
    check(_set(index, lambda v: v * v), x, v)


@pytest.mark.parametrize("v", [_vals(2), _vals(4)], ids=["cycled", "full"])
def test_put_with_a_two_dimensional_index(v):
    check(lambda x, v: np.put(x, np.array([[0, 11], [-1, 3]]), v), X34, v)


def test_forward_write_into_a_zero_dimensional_argument_with_a_scalar_tangent():
    from tape.errors import ActivityError

    def f(x):
        x[()] = x * 3
        return x * x
    with pytest.raises(ActivityError, match="x"):
        autodiff(tape.Forward, f, Duplicated(np.array(0.7), np.float64(1.0)))
