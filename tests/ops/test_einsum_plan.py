"""`ops.einsum_plan`: the BLAS routes of einsum give NumPy's values, dtypes and shapes, and the
derivative rules stay right when every contraction takes them.

`forced_routes` sets the work threshold to 0, so even the tiny arrays the gradient checks use
go through the matmul and path routes.
"""
import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ops import einsum_plan
from ops.einsum_plan import contract, plan
from tape.testing import check_grads

from test_contractions import EINSUM_CASES, check_traced_primal, einsum_operands


@contextlib.contextmanager
def forced_routes():
    saved = einsum_plan.MIN_WORK
    einsum_plan.MIN_WORK = 0
    plan.cache_clear()
    try:
        yield
    finally:
        einsum_plan.MIN_WORK = saved
        plan.cache_clear()


@st.composite
def contraction(draw, n_operands):
    """Random normalised subscripts over a few letters (batch, free, contracted and summed
    alone all occur; no letter repeated inside an operand), with sizes 1 to 4."""
    letters = "abcdef"
    size = {c: draw(st.integers(1, 4)) for c in letters}
    terms = [draw(st.lists(st.sampled_from(letters), min_size=0, max_size=4, unique=True))
             for _ in range(n_operands)]
    used = sorted(set().union(*terms))
    output = draw(st.permutations(used)).copy()
    output = output[:draw(st.integers(0, len(output)))]
    return tuple("".join(t) for t in terms), "".join(output), size


@pytest.mark.parametrize("n_operands", [2, 3])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_routes_equal_numpy_einsum(n_operands, dtype, data):
    inputs, output, size = data.draw(contraction(n_operands))
    rng = np.random.default_rng(0)
    ops = []
    for t in inputs:
        shape = tuple(size[c] for c in t)
        x = rng.standard_normal(shape)
        if dtype == np.complex128:
            x = x + 1j * rng.standard_normal(shape)
        ops.append(x.astype(dtype))
    want = np.einsum(",".join(inputs) + "->" + output, *ops)
    with forced_routes():
        got = contract(np, inputs, output, tuple(ops))
    assert type(got) is type(want) and np.shape(got) == np.shape(want)
    assert got.dtype == want.dtype
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * max(1, np.abs(want).max(
        initial=0)) * 16)


def test_the_routes_are_taken():
    assert plan(("kij", "nkj"), "nki", ((25, 10, 10), (1000, 25, 10))).route == "matmul"
    assert plan(("ij", "jk", "kl"), "il", ((64, 64),) * 3).route == "path"
    assert plan(("ii",), "i", ((100, 100),)).route == "einsum"
    assert plan(("iij", "jk"), "ik", ((30, 30, 30), (30, 30))).route == "einsum"   # a diagonal


def test_other_dtypes_and_explicit_optimize_are_numpy_s():
    a = np.arange(64 * 64).reshape(64, 64)
    np.testing.assert_array_equal(contract(np, ("ij", "jk"), "ik", (a, a)),
                                  np.einsum("ij,jk->ik", a, a))
    b = a > 2000
    np.testing.assert_array_equal(contract(np, ("ij", "jk"), "ik", (b, b)),
                                  np.einsum("ij,jk->ik", b, b))
    x = np.random.default_rng(0).standard_normal((64, 64))
    np.testing.assert_allclose(contract(np, ("ij", "jk"), "ik", (x, x), optimize="optimal"),
                               x @ x, rtol=1e-12, atol=1e-12)


def test_the_result_is_a_fresh_array():
    a = np.ones((64, 64))
    out = contract(np, ("ij",), "ji", (a,))
    assert not np.shares_memory(out, a) or out is not a
    r = contract(np, ("ij", "jk"), "ik", (a, a))
    r[0, 0] = 5.0
    assert a[0, 0] == 1.0


@pytest.mark.parametrize("subscripts", EINSUM_CASES)
@settings(max_examples=6, deadline=None)
@given(data=st.data())
def test_einsum_grads_through_the_blas_routes(subscripts, data):
    ops = data.draw(einsum_operands(subscripts))
    f = lambda *xs: np.einsum(subscripts, *xs)
    with forced_routes():
        check_traced_primal(f, *ops)
        check_grads(f, *ops)


def test_the_gmm_contraction_gradient():
    rng = np.random.default_rng(1)
    A, B = rng.standard_normal((3, 4, 4)), rng.standard_normal((5, 3, 4))
    f = lambda a, b: np.einsum("kij,nkj->nki", a, b) ** 2
    with forced_routes():
        check_traced_primal(f, A, B)
        check_grads(f, A, B)
