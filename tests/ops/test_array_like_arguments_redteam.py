"""NumPy functions with a traced array in one argument and an array-like in another (a list,
a tuple, a nested list, a Python or NumPy scalar, a 0-d array, an int list), or a list holding
traced 0-d entries ([x[0], 2.0]): the registered function rules must coerce those arguments
as NumPy does.

Each passing check compares the primal with plain NumPy on the same array-likes, reverse mode
with central finite differences in float64, forward mode with a directional difference, and
`tape.compile` on two inputs. The strict xfails are crashes on valid input and silent wrong
values.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.special as sp

import tape.scipy.special as tsp
from tape.testing import traced_value
from numeric_checks import check_all_modes as check

V = np.array([0.31, 1.22, 2.03])
M = np.array([[0.31, 1.22], [0.74, 0.52]])
L2 = [0.5, 1.5]
L3 = [0.5, 1.5, -0.7]
LM = [[2.0, 0.3], [0.1, 1.5]]


# -- passing: array-likes next to a traced array ---------------------------------------------------
CASES = {
    # contractions
    "dot(x, np.float32)": (lambda x: np.dot(x, np.float32(2)), V),
    "dot(0-d array, x)": (lambda x: np.dot(np.array(2.0), x), V),
    "dot(x, int list)": (lambda x: np.dot(x, [1, 2, 3]), V),
    "dot([x0, 2, 1], x)": (lambda x: np.dot([x[0], 2.0, 1.0], x), V),
    "dot(mixed, nested mixed)": (lambda x: np.dot([x[0], 1.0], [[x[1], 2.0], [0.5, x[2]]]), V),
    "matmul(list matrix, x)": (lambda x: np.matmul(LM, x), M),
    "nested mixed @ x": (lambda x: [[x[0, 0], 1.0], [0.5, 2.0]] @ x, M),
    "inner(list, x)": (lambda x: np.inner(L2, x), M),
    "outer(x, scalar)": (lambda x: np.outer(x, 2.0), V),
    "outer([x0, 1], x)": (lambda x: np.outer([x[0], 1.0], x), V),
    "vdot(list, x)": (lambda x: np.vdot(L3, x), V),
    "tensordot(list, x)": (lambda x: np.tensordot(LM, x, axes=([1], [0])), M),
    "tensordot(x, list, 0)": (lambda x: np.tensordot(x, L2, axes=0), V),
    "tensordot(mixed, x)": (lambda x: np.tensordot([x[0], 2.0], x[:2], axes=1), V),
    "einsum(list, x)": (lambda x: np.einsum("ij,jk->ik", LM, x), M),
    "einsum(mixed, x)": (lambda x: np.einsum("i,j->ij", [x[0], 2.0], x), V),
    "einsum(x, scalar)": (lambda x: np.einsum("i,->i", x, 2.0), V),
    "kron(list, x)": (lambda x: np.kron(LM, x), M),
    "kron(mixed, x)": (lambda x: np.kron([x[0], 2.0], x), V),
    "cross(mixed, mixed)": (lambda x: np.cross([x[0], 2.0, 1.0], [0.5, x[1], 0.2]), V),
    "linalg.cross(x, list)": (lambda x: np.linalg.cross(x, L3), V),
    "linalg.outer(x, list)": (lambda x: np.linalg.outer(x, L2), V),
    "linalg.vecdot(x, list)": (lambda x: np.linalg.vecdot(x, L2), M),
    "vecdot(x, mixed)": (lambda x: np.vecdot(x, [x[0, 1], 1.0]), M),
    "multi_dot(list, x, list)": (lambda x: np.linalg.multi_dot([LM, x, L2]), M),
    # selection, clipping, extrema
    "where(list cond, x, list)": (lambda x: np.where([True, False, True], x, L3), V),
    "where(cond, x, mixed)": (lambda x: np.where([True, False, True], x, [x[1], 2.0, x[0]]), V),
    "clip(mixed, mixed, scalar)": (lambda x: np.clip([x[0], 2.0, x[2]], [0.0, x[0], 1.0], 1.9),
                                   V),
    "clip(x, 0-d, np.float32)": (lambda x: np.clip(x, np.array(0.5), np.float32(1.5)), V),
    "maximum(mixed, x)": (lambda x: np.maximum([x[1], 0.0, 1.0], x), V),
    "fmax(list, x)": (lambda x: np.fmax(L3, x), V),
    "select(conds, [list, x])": (lambda x: np.select([[True, False, False], [False, True, True]],
                                                     [L3, x]), V),
    "select(default=mixed)": (lambda x: np.select([x > 1], [x], default=[x[0], 0.1, 0.2]), V),
    "piecewise(x, list conds, [f, const])": (lambda x: np.piecewise(
        x, [[True, False, True]], [lambda t: t ** 2, 0.5]), V),
    "choose(idx, [list, x])": (lambda x: np.choose([0, 1, 0], [L3, x]), V),
    # joining
    "concatenate([x, list, mixed])": (lambda x: np.concatenate([x, L2, [x[0], 3.0]]), V),
    "stack([x, list, mixed])": (lambda x: np.stack([x, L3, [x[0], 1.0, x[2]]]), V),
    "hstack([x, list, 3.0, x1])": (lambda x: np.hstack([x, L2, 3.0, x[1]]), V),
    "column_stack([x, list, mixed])": (lambda x: np.column_stack([x, L3, [x[0], 1.0, 2.0]]),
                                       V),
    "append(list, x)": (lambda x: np.append(L2, x), V),
    "append(x, nested mixed, axis)": (lambda x: np.append(x, [[x[0, 0], 1.0]], axis=0), M),
    "insert(x, list idx, mixed)": (lambda x: np.insert(x, [0, 2], [x[1], 2.0]), V),
    "insert(list, 1, x0)": (lambda x: np.insert(L3, 1, x[0]), V),
    "insert(x, 1, mixed, axis)": (lambda x: np.insert(x, 1, [x[0, 0], 1.0], axis=0), M),
    # interpolation, polynomials, signals
    "interp(x, list, list)": (lambda x: np.interp(x, [0.0, 1.0, 3.0], [1.0, -2.0, 0.5]), V),
    "interp(list, list, x)": (lambda x: np.interp([0.5, 1.5, 2.5], [0.0, 1.0, 3.0], x), V),
    "interp(x, list, mixed)": (lambda x: np.interp(x, [0.0, 1.0, 3.0], [x[0], 2.0, 0.5]), V),
    "interp(0.7, mixed xp, list)": (lambda x: np.interp(0.7, [0.0, x[1], 3.0], [1.0, 2.0, 0.5]),
                                    V),
    "polyval(list, x)": (lambda x: np.polyval([1.0, -2.0, 0.5], x), V),
    "polyval(x, list)": (lambda x: np.polyval(x, [0.3, 1.1]), V),
    "polyval(mixed, x)": (lambda x: np.polyval([x[0], 2.0, 1.0], x), V),
    "polyval(x, mixed)": (lambda x: np.polyval(x, [x[0], 0.3]), V),
    "convolve(list, x)": (lambda x: np.convolve(L2, x), V),
    "convolve(x, list, same)": (lambda x: np.convolve(x, L2, mode="same"), V),
    "correlate(list, x, valid)": (lambda x: np.correlate(L3, x, mode="valid"), V),
    "correlate(mixed, x)": (lambda x: np.correlate([x[0], 1.0], x), V),
    # linear algebra
    "solve(list, x)": (lambda x: np.linalg.solve(LM, x), M),
    "solve(x, list)": (lambda x: np.linalg.solve(x, L2), M),
    "solve(x, mixed)": (lambda x: np.linalg.solve(x, [x[0, 0], 1.0]), M),
    "lstsq(mixed, x)": (lambda x: np.linalg.lstsq([[x[0, 0] + 3, 0.3], [0.1, 1.5]], x,
                                                  rcond=None)[0], M),
    "norm(x, ord=np.int64)": (lambda x: np.linalg.norm(x, ord=np.int64(1)), V),
    "norm(x, ord=2.5)": (lambda x: np.linalg.norm(x, ord=2.5), V),
    "norm(x, ord=-1) matrix": (lambda x: np.linalg.norm(x, ord=-1), M),
    "norm(mixed)": (lambda x: np.linalg.norm([x[0], 2.0, x[1]]), V),
    "det(mixed)": (lambda x: np.linalg.det([[x[0], 1.0], [2.0, x[1]]]), V),
    "eigvalsh(mixed)": (lambda x: np.linalg.eigvalsh([[x[0], 0.3], [0.3, x[1]]]), V),
    # differences, padding, statistics, integration
    "diff(prepend=list)": (lambda x: np.diff(x, prepend=L2), V),
    "diff(append=scalar)": (lambda x: np.diff(x, append=2.0), V),
    "diff(n=2, prepend=mixed)": (lambda x: np.diff(x, n=2, prepend=[x[0], 1.0]), V),
    "pad(constant_values=list)": (lambda x: np.pad(x, 1, constant_values=L2), V),
    "pad(constant_values=pairs)": (lambda x: np.pad(
        x, ((1, 2), (0, 1)), constant_values=((0.5, 1.5), (2.0, 3.0))), M),
    "pad(constant_values=np.float32)": (lambda x: np.pad(x, 1, constant_values=np.float32(2)),
                                        V),
    "average(weights=list, axis)": (lambda x: np.average(x, axis=1, weights=L2), M),
    "average(weights=mixed)": (lambda x: np.average(x, weights=[x[0], 1.0, 2.0]), V),
    "average(mixed, weights=x)": (lambda x: np.average([x[0], 2.0, x[1]], weights=x), V),
    "cov(list, x)": (lambda x: np.cov(L3, x), V),
    "cov(x, aweights=list)": (lambda x: np.cov(x, aweights=[1.0, 2.0]), M),
    "cov(x, fweights=int list)": (lambda x: np.cov(x, fweights=[1, 2]), M),
    "corrcoef(mixed, x)": (lambda x: np.corrcoef([x[0], 2.0, x[1]], x), V),
    "trapezoid(list, x)": (lambda x: np.trapezoid(L3, x), V),
    "trapezoid(x, mixed)": (lambda x: np.trapezoid(x, [0.0, x[0], 1.5]), V),
    "trapezoid(x, dx=np.float32)": (lambda x: np.trapezoid(x, dx=np.float32(0.5)), V),
    "gradient(x, list)": (lambda x: np.gradient(x, [0.0, 0.4, 1.5]), V),
    "gradient(list, x)": (lambda x: np.gradient(L3, x), V),
    "gradient(x, mixed)": (lambda x: np.gradient(x, [0.0, x[0], 1.5]), V),
    "gradient(x, 0-d)": (lambda x: np.gradient(x, np.array(0.5)), V),
    "gradient(2-d, list, scalar)": (lambda x: np.gradient(x, [0.0, 0.7], 0.5)[0], M),
    # indexing
    "take(x, nested list)": (lambda x: np.take(x, [[1, 0], [2, 2]]), V),
    "take(mixed, list)": (lambda x: np.take([x[0], 2.0, x[1]], [2, 0]), V),
    "searchsorted(list, x) as weights": (lambda x: x * np.searchsorted([0.0, 1.0, 2.0], x), V),
    # binary ufuncs with a list or a NumPy scalar
    "copysign(list, x - 1)": (lambda x: np.copysign([-1.0, 1.0, -2.0], x - 1.0), V),
    "ldexp(x, int list)": (lambda x: np.ldexp(x, [1, -2, 3]), V),
    "ldexp(x, np.int32)": (lambda x: np.ldexp(x, np.int32(2)), V),
    "float_power(list, x)": (lambda x: np.float_power([0.5, 1.5, 2.0], x), V),
    "float_power(x, int list)": (lambda x: np.float_power(x, [1, 2, 3]), V),
    "fmod(list, x)": (lambda x: np.fmod([0.7, 3.5, 3.9], x), V),
    "remainder(list, x)": (lambda x: np.remainder([0.7, 3.5, 3.9], x), V),
    "list % x": (lambda x: [0.7, 3.5, 3.9] % x, V),
    "divmod(list, x)[1]": (lambda x: np.divmod([0.7, 3.5, 3.9], x)[1], V),
    "divmod(x, list) builtin": (lambda x: divmod(x, [0.7, 0.5, 0.9])[1], V),
    "logaddexp2(x, list)": (lambda x: np.logaddexp2(x, L3), V),
    "power(int list, x)": (lambda x: np.power([1, 2, 3], x), V),
    "x * bool list": (lambda x: x * [True, False, True], V),
    # scipy.special with a list argument
    "gammainc(list, x)": (lambda x: sp.gammainc([0.5, 1.5, 0.7], x), V),
    "gammaincc(list, x)": (lambda x: sp.gammaincc([0.5, 1.5, 0.7], x), V),
    "xlogy(list, x)": (lambda x: sp.xlogy([0.5, 1.5, 0.7], x), V),
    "xlogy(x, list)": (lambda x: sp.xlogy(x, [0.5, 1.5, 0.7]), V),
    "xlog1py(list, x)": (lambda x: sp.xlog1py([0.5, 1.5, 0.7], x), V),
    "beta(list, x)": (lambda x: sp.beta([0.5, 1.5, 0.7], x), V),
    "betainc(list, list, x)": (lambda x: sp.betainc([0.5, 1.5, 0.7], [1.0, 2.0, 3.0], x / 3), V),
    "kv(list, x)": (lambda x: sp.kv([0.5, 1.5, 0.7], x), V),
    "jv(int list, x)": (lambda x: sp.jv([0, 1, 2], x), V),
    "zeta(list, x)": (lambda x: sp.zeta([2.0, 3.5, 4.0], x), V),
    "tape polygamma(int list, x)": (lambda x: tsp.polygamma([0, 1, 2], x), V),
    "tape logsumexp(x, b=list)": (lambda x: tsp.logsumexp(x, b=[0.5, 1.5, 0.7]), V),
    "tape logsumexp(x, axis, b=list)": (lambda x: tsp.logsumexp(x, axis=1, b=[0.5, 2.0]), M),
    "tape logsumexp(x, b=np.float32)": (lambda x: tsp.logsumexp(x, b=np.float32(2.0)), V),
}


@pytest.mark.parametrize("case", list(CASES))
def test_array_like_arguments(case):
    f, x = CASES[case]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        check(f, x)


# -- findings ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("cond", ["list", "traced comparison"])
def test_where_with_a_list_holding_traced_entries(cond):
    mask = (lambda x: [True, False, True]) if cond == "list" else (lambda x: x > 1)
    check(lambda x: np.where(mask(x), [x[1], 2.0, x[0]], x), V, compiled=False)


def test_solve_with_a_nested_list_matrix_holding_a_traced_entry():
    check(lambda x: np.linalg.solve([[x[0, 0] + 3, 0.3], [0.1, 1.5]], x), M, compiled=False)


@pytest.mark.parametrize("side", ["right", "left"])
def test_matmul_with_a_list_holding_a_traced_entry(side):
    if side == "right":
        check(lambda x: np.matmul(x, [x[0, 1], 1.0]), M, compiled=False)
    else:
        check(lambda x: np.matmul([[x[0, 0], 1.0], [0.5, 2.0]], x), M, compiled=False)


def test_heaviside_of_a_list_with_a_traced_h0():
    x = V.copy()
    want = np.heaviside([-1.0, 0.0, 2.0], x)
    got = traced_value(lambda x: np.heaviside([-1.0, 0.0, 2.0], x), x, mode="reverse")
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)


def test_select_with_a_traced_default_only():
    check(lambda x: np.select([x > 1], [2.0], default=x), V, compiled=False)


def test_pad_with_a_tuple_of_constant_values_holding_a_traced_entry():
    f = lambda x: np.pad(x, 1, constant_values=(x[0], 2.0))   # noqa: E731
    try:
        check(f, V, compiled=False)
    except NotImplementedError as e:
        assert "pad" in str(e)


@pytest.mark.parametrize("case", ["logsumexp(list)", "logsumexp(x, b=list)", "softmax(list)"])
def test_tape_scipy_reductions_of_lists_holding_traced_entries(case):
    f = {"logsumexp(list)": lambda x: tsp.logsumexp([x[0], 1.5, x[1]]),
         "logsumexp(x, b=list)": lambda x: tsp.logsumexp(x, b=[x[0], 1.5, 0.7]),
         "softmax(list)": lambda x: tsp.softmax([x[0], 1.5, x[1]])}[case]
    plain = {"logsumexp(list)": lambda x: sp.logsumexp([x[0], 1.5, x[1]]),
             "logsumexp(x, b=list)": lambda x: sp.logsumexp(x, b=[x[0], 1.5, 0.7]),
             "softmax(list)": lambda x: sp.softmax([x[0], 1.5, x[1]])}[case]
    x = V.copy()
    np.testing.assert_allclose(np.asarray(traced_value(f, x, mode="reverse")), plain(x),
                               rtol=1e-12, atol=1e-12)
    check(f, x, compiled=False)
