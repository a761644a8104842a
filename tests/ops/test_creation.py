"""Arrays made from traced values (ops/creation.py): np.linspace, np.logspace and np.geomspace
with traced endpoints, np.meshgrid, np.full / np.full_like with a traced fill value, buffers
from np.zeros_like and friends, np.atleast_*, np.column_stack and np.dstack of 0-d values.
Primal values match NumPy (dtype, shape, values) and derivatives agree with finite
differences, forward and reverse, to second order."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from tape import Active, Const, Duplicated, Forward, Reverse, autodiff, gradient
from tape.testing import arrays, check_grads, traced_value

FEW = settings(max_examples=20, deadline=None)


def same(got, expected):
    assert type(got) is type(expected) or not isinstance(expected, (list, tuple))
    got_leaves = got if isinstance(got, (list, tuple)) else (got,)
    expected_leaves = expected if isinstance(expected, (list, tuple)) else (expected,)
    assert len(got_leaves) == len(expected_leaves)
    for g, e in zip(got_leaves, expected_leaves):
        assert np.result_type(g) == np.result_type(e)
        assert np.shape(g) == np.shape(e)
        np.testing.assert_allclose(g, e, rtol=1e-13, atol=1e-13)


def check(f, *args, grads=True):
    """f on traced arguments gives NumPy's result, in both modes; derivatives are right
    (of the real and imaginary parts, for a complex result)."""
    expected = f(*args)
    same(traced_value(f, *args, mode="forward"), expected)
    if any(np.iscomplexobj(e) for e in (expected if isinstance(expected, (list, tuple)) else
                                           (expected,))):
        f = _real_parts(f)
    else:
        same(traced_value(f, *args, mode="reverse"), expected)
    if grads:
        check_grads(f, *args)


def _real_parts(f):
    def parts(*args):
        out = f(*args)
        return tuple(np.real(o) + 0.5 * np.imag(o) for o in out) if isinstance(
            out, (list, tuple)) else (
            np.real(out) + 0.5 * np.imag(out))
    return parts


@st.composite
def endpoints(draw, low=-2.0, high=2.0):
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=3))
    start, stop = (draw(arrays(s, low=low, high=high)) for s in shapes.input_shapes)
    ndim = len(shapes.result_shape) + 1
    return start, stop, draw(st.integers(-ndim, ndim - 1))


@FEW
@given(endpoints(), st.integers(0, 5), st.booleans(), st.booleans())
def test_linspace(ends, num, endpoint, retstep):
    start, stop, axis = ends
    check(lambda a, b: np.linspace(a, b, num, endpoint=endpoint, retstep=retstep, axis=axis),
          start, stop, grads=False)
    check_grads(lambda a, b: np.sin(np.linspace(a, b, num, endpoint=endpoint, axis=axis)),
                start, stop, order=1)


@FEW
@given(endpoints(-1.0, 1.0), st.integers(0, 5), st.booleans(),
       st.sampled_from([10.0, 2, "traced"]))
def test_logspace(ends, num, endpoint, base):
    start, stop, axis = ends
    if base == "traced":
        check(lambda a, b, c: np.logspace(a, b, num, endpoint=endpoint, base=c, axis=axis),
              start, stop, 1.7)
    else:
        check(lambda a, b: np.logspace(a, b, num, endpoint=endpoint, base=base, axis=axis),
              start, stop)


@FEW
@given(endpoints(0.3, 2.0), st.integers(0, 5), st.booleans(), st.booleans())
def test_geomspace(ends, num, endpoint, negative):
    start, stop, axis = ends
    sign = -1.0 if negative else 1.0
    check(lambda a, b: np.geomspace(sign * a, sign * b, num, endpoint=endpoint, axis=axis),
          start, stop, grads=False)
    check_grads(lambda a, b: np.geomspace(sign * a, sign * b, num, endpoint=endpoint, axis=axis),
                start, stop, order=1)


@pytest.mark.parametrize("f", [
    lambda a, b: np.linspace(a, b, 4, dtype=np.float32),
    lambda a, b: np.linspace(a, b, 4, dtype=int),
    lambda a, b: np.linspace(a, b * 1j, 3),
    lambda a, b: np.linspace([a, 1.0], b, 3, axis=1),
    lambda a, b: np.geomspace(a, b, 4, dtype=complex),
    lambda a, b: np.geomspace(a + 0.5j, b - 1j, 3),
    lambda a, b: np.geomspace(a, b, 4, dtype=int),
    lambda a, b: np.logspace(a, b, 3, base=[2.0, 3.0]),
    lambda a, b: np.logspace(a, b, 3, dtype=np.float32),
], ids=["float32", "int", "complex stop", "list start", "geom complex dtype",
        "geom complex", "geom int", "array base", "log float32"])
def test_spaced_dtypes_and_lists(f):
    check(f, 0.7, 1.9, grads=np.result_type(f(0.7, 1.9)) in (np.float64, np.complex128))


def test_retstep_and_bad_num():
    y, step = traced_value(lambda a, b: np.linspace(a, b, 5, retstep=True), 1.0, 3.0)
    assert step == 0.5
    check_grads(lambda a, b: np.linspace(a, b, 5, retstep=True)[1] ** 2, 1.0, 3.0)
    with pytest.raises(ValueError, match="must be non-negative"):
        autodiff(Reverse, lambda a: np.sum(np.linspace(a, 1.0, -1)), Active, Active(0.0))


@FEW
@given(st.lists(arrays(None, min_dims=1, max_dims=1), min_size=1, max_size=3),
       st.sampled_from(["xy", "ij"]), st.booleans(), st.booleans())
def test_meshgrid(vectors, indexing, sparse, copy):
    check(lambda *xs: np.meshgrid(*xs, indexing=indexing, sparse=sparse, copy=copy), *vectors,
          grads=len(vectors) < 3)


def test_meshgrid_of_lists_and_errors():
    check(lambda a, b: np.meshgrid([a, 1.0, b], np.array([2.0, 3.0])) , 0.3, 0.9)
    check(lambda x: np.meshgrid(x.reshape(2, 2), indexing="ij"), np.arange(4.0))
    with pytest.raises(ValueError, match="indexing"):
        autodiff(Reverse, lambda x: np.sum(np.meshgrid(x, indexing="yx")[0]), Active,
                 Active(np.ones(2)))


# -- full, full_like, buffers ------------------------------------------------------------------

@FEW
@given(arrays(None, max_dims=2), st.sampled_from([None, np.float64, complex, int]),
       st.sampled_from(["full", "full_like plain", "full_like traced", "full_like list"]))
def test_full_with_traced_fill(fill, dtype, how):
    shape = (2,) + fill.shape

    def f(v):
        if how == "full":
            return np.full(shape, v, dtype=dtype)
        if how == "full_like plain":
            return np.full_like(np.zeros(shape), v, dtype=dtype)
        if how == "full_like list":
            return np.full_like(np.zeros(shape), [v, v * 2.0][0], dtype=dtype)
        return np.full_like(np.ones(shape) * v, v * 3.0, dtype=dtype)
    check(f, fill, grads=dtype is not int)


def test_full_buffers_are_writable_and_levels_are_kept():
    def f(x):
        out = np.full(3, x[0])        # a private buffer: writes are recorded
        out[1] = x[1] ** 2
        return out
    check(f, np.array([0.5, -1.5]))

    def outer(a):   # a fill value of the inner trace, a shape from the outer one
        def inner(b):
            buf = np.full_like(a * np.ones(2), b * b)
            buf[0] = a * b
            return np.sum(buf)
        return gradient(Reverse, inner, 0.8)[0]   # a + 2 b
    check_grads(outer, 1.1)
    (g,), = autodiff(Reverse, outer, Active, Active(1.1))
    assert g == pytest.approx(1.0)


def test_like_buffers_of_lists_take_writes():
    def f(p):
        out = np.ones_like([p[0], 2.0, 3.0])   # traced buffer from a list
        out[1:] = p * 2.0
        empty = np.empty_like((p[0], p[1]))
        empty[...] = p[::-1]
        return out * np.sum(empty)
    check(f, np.array([0.4, -1.1]))


@pytest.mark.parametrize("f", [lambda x: np.array(x) * 2, lambda x: np.copy(x) ** 2,
                               lambda x: np.array(x, ndmin=2) * x],
                         ids=["array", "copy", "ndmin"])
def test_copies_of_a_traced_python_float(f):
    check(f, 1.5)


def test_astype_of_a_traced_python_float():
    check(lambda x: np.asarray(x).astype(np.complex128) * (2 + 1j), 1.5)
    (g,), = autodiff(Reverse, lambda x: x.astype(np.float64) * 3.0, Active, Active(1.5))
    assert g == 3.0
    out, = autodiff(Forward, lambda x: x.astype(np.float64) * 3.0, Duplicated(1.5, 1.0))
    assert out == 3.0


# -- atleast_*, column_stack, dstack of 0-d and list arguments -----------------------------------

@pytest.mark.parametrize("f", [
    lambda a, b: np.atleast_1d(a),
    lambda a, b: np.atleast_2d(a, [b, 1.0]),
    lambda a, b: np.atleast_3d([[a, b]]),
    lambda a, b: np.column_stack((a, b)),
    lambda a, b: np.column_stack(([a, 1.0], np.array([b, 2.0]))),
    lambda a, b: np.dstack((a, [b])),
    lambda a, b: np.dstack(([a, b], [1.0, 2.0])),
], ids=["atleast_1d", "atleast_2d", "atleast_3d list", "column_stack 0-d", "column_stack lists",
        "dstack 0-d", "dstack lists"])
def test_atleast_and_stacks_of_scalars(f):
    check(f, 0.3, -1.2)


def test_plain_calls_still_numpys():
    assert np.linspace(0, 1, 3).tolist() == [0.0, 0.5, 1.0]
    autodiff(Reverse, lambda x: np.sum(np.linspace(0.0, 1.0, 3) * x), Active,
             Active(np.ones(3)), )
    (g, _), = autodiff(Reverse, lambda x, c: np.sum(np.linspace(x, c, 3)), Active,
                       Active(0.0), Const(1.0))
    assert g == pytest.approx(1.5)


@pytest.mark.parametrize("module", ["ops.creation", "ops.lists"])
def test_docstring_examples(module):
    import doctest
    import importlib
    result = doctest.testmod(importlib.import_module(module), extraglobs={"np": np})
    assert result.attempted > 0 and result.failed == 0
