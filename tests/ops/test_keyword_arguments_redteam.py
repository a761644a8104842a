"""NumPy's keyword arguments on traced values: `out=` (tuples, views, aliases of an input,
buffers that are Duplicated arguments), `where=` masks that keep old entries, `dtype=`,
`casting=`, `keepdims`, `initial=` and tuple or negative `axis=`, through ufuncs, their
reduce / accumulate / reduceat / outer methods, reductions, and functions that take `out=`.

Each function runs on plain NumPy (the primal, and every written buffer, with `out` returned
as the very object NumPy returns), under eager reverse and forward mode and under
`tape.compile` (three calls with new values), against central finite differences in float64.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import tape
from tape import Active, Duplicated, Forward, Reverse, ReverseWithPrimal, autodiff
from numeric_checks import fd_gradient_of

X = np.array([[0.31, -1.22, 2.03], [0.74, 0.52, -0.37]])
Y = np.array([[1.1, 0.45, -0.6], [0.2, 0.9, 1.3]])
W2 = np.array([0.7, -1.3])
W3 = np.array([1.0, -2.0, 3.0])
MASK = np.array([[True, False, True], [True, True, False]])


def check(f, *xs, ref=None, rtol=1e-12, grad_rtol=1e-6):
    """f(*xs) -> a scalar, possibly writing its arguments. `ref` is f without its float32
    casts (their derivative is the identity), for finite differences that float32 rounding
    would swamp."""
    ref = ref or f
    xs = [np.array(x, dtype=float) for x in xs]
    plain = [x.copy() for x in xs]
    want = float(f(*plain))
    grads = [fd_gradient_of(ref, xs, i) for i in range(len(xs))]

    args, shadows = [x.copy() for x in xs], [np.zeros_like(x) for x in xs]
    _, value = autodiff(ReverseWithPrimal, f, Active,
                        *[Duplicated(a, s) for a, s in zip(args, shadows)])
    np.testing.assert_allclose(value, want, rtol=rtol, atol=rtol)
    for got, expected in zip(args + shadows, plain + grads):
        np.testing.assert_allclose(got, expected, rtol=grad_rtol, atol=grad_rtol)

    directions = [np.linspace(-1.0, 1.0, x.size).reshape(x.shape) + 0.3 for x in xs]
    args = [x.copy() for x in xs]
    tangent, = autodiff(Forward, f, *[Duplicated(a, d.copy()) for a, d in zip(args, directions)])
    np.testing.assert_allclose(tangent, sum(np.sum(g * d) for g, d in zip(grads, directions)),
                               rtol=grad_rtol, atol=grad_rtol)
    for got, expected in zip(args, plain):
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=rtol)

    compiled = tape.compile(ReverseWithPrimal, f, Active, *[Duplicated] * len(xs))
    rng = np.random.default_rng(0)
    for call in range(3):
        inputs = [x * (1 + 0.3 * call * rng.standard_normal(x.shape)) for x in xs]
        plain = [x.copy() for x in inputs]
        want = float(f(*plain))
        grads = [fd_gradient_of(ref, inputs, i) for i in range(len(xs))]
        args, shadows = [x.copy() for x in inputs], [np.zeros_like(x) for x in inputs]
        _, value = compiled(*[Duplicated(a, s) for a, s in zip(args, shadows)])
        np.testing.assert_allclose(value, want, rtol=rtol, atol=rtol, err_msg=f"call {call}")
        for got, expected in zip(args + shadows, plain + grads):
            np.testing.assert_allclose(got, expected, rtol=grad_rtol, atol=grad_rtol,
                                       err_msg=f"call {call}")


def _is(returned, buffer):
    assert returned is buffer, (type(returned), type(buffer))
    return buffer


def _into(fn, shape, **kw):
    """sum(b * b + b) for b = fn(x * y, out=b, **kw), a buffer allocated like x."""
    def f(x, y):
        b = np.zeros_like(x, shape=shape)
        _is(fn(x * y, out=b, **kw), b)
        return np.sum(b * b + b)
    return f


# -- ufunc calls ------------------------------------------------------------------------------
def _out_tuple(x, y):
    b = np.zeros_like(x)
    _is(np.add(x, y, out=(b,)), b)            # a 1-tuple: NumPy returns the array itself
    return np.sum(b * b * W3)


def _alias_with_mask(x, y):
    _is(np.multiply(x, y, out=y, where=x > 0), y)   # y's old entries stay where x <= 0
    return np.sum(y * y * W3)


def _mask_keeps_duplicated_values(x, y):
    _is(np.sin(y, out=x, where=np.array([True, False, False])), x)
    return np.sum(x * x * W3)


def _into_view_of_buffer(x, y):
    b = np.zeros_like(x, shape=(3, 2, 3))
    view = b[1]
    _is(np.multiply(x, y, out=view), view)
    return np.sum(b * b) + np.sum(b[1] * W3)


def _into_strided_view_of_argument(x, y):
    np.exp(y[:, ::2], out=x[:, 1:])           # overwrites part of a Duplicated argument
    return np.sum(x * x * W3)


def _broadcast_with_mask(x, y):
    b = np.ones_like(x, shape=(2, 2, 3)) * x
    np.add(x, y, out=b, where=np.array([[[True]], [[False]]]))
    return np.sum(b * b)


def _chain_in_one_buffer(x, y):
    b = np.zeros_like(x)
    np.add(x, y, out=b)
    np.multiply(b, x, out=b)
    np.sin(b, out=b, where=y > 0.3)
    return np.sum(b * W3)


def _frexp_out(x, y):
    m, e = np.zeros_like(x), np.zeros(x.shape, dtype=np.int32)
    returned = np.frexp(x * y, out=(m, e))
    assert returned[0] is m and returned[1] is e
    return np.sum(m * W3 * e)


def _modf_out_with_none(x, y):
    fraction = np.zeros_like(x)
    returned = np.modf(x * y, out=(fraction, None))
    assert returned[0] is fraction
    return np.sum(fraction * W3 + returned[1])


def _divmod_out_masked_alias(x, y):
    q = np.zeros_like(x)
    returned = np.divmod(x, 0.7, out=(q, y), where=x > 0)
    assert returned[0] is q and returned[1] is y
    return np.sum(y * W3 + q * y)


UFUNC_CALLS = {
    "out 1-tuple": _out_tuple,
    "out aliases the masked input": _alias_with_mask,
    "where keeps a Duplicated buffer's old values": _mask_keeps_duplicated_values,
    "out a view of a buffer": _into_view_of_buffer,
    "out a strided view of an argument": _into_strided_view_of_argument,
    "where broadcast over a larger out": _broadcast_with_mask,
    "one buffer written three times": _chain_in_one_buffer,
    "frexp out pair": _frexp_out,
    "modf out (buffer, None)": _modf_out_with_none,
    "divmod out pair aliasing y, masked": _divmod_out_masked_alias,
    "order subok casting accepted": lambda x, y: np.sum(
        np.add(x, y, order="F", subok=True, casting="same_kind") * W3),
}


@pytest.mark.parametrize("name", list(UFUNC_CALLS))
def test_ufunc_calls_with_keywords(name):
    check(UFUNC_CALLS[name], X, Y)


# -- ufunc methods ----------------------------------------------------------------------------
def _reduce_out(axis, shape, **kw):
    def f(x, y):
        b = np.zeros_like(x, shape=shape)
        _is(np.add.reduce(x * y, axis=axis, out=b, **kw), b)
        return np.sum(b * b + b)
    return f


def _accumulate_into_argument(x, y):
    _is(np.add.accumulate(x, axis=1, out=x), x)
    return np.sum(x * y)


def _multiply_accumulate_out(x, y):
    b = np.zeros_like(x)
    _is(np.multiply.accumulate(x * y, axis=-1, out=b), b)
    return np.sum(b * W3)


def _reduceat_out(x, y):
    b = np.zeros_like(x, shape=(2, 2))
    _is(np.add.reduceat(x * y, [0, 2], axis=-1, out=b), b)
    return np.sum(b * b)


def _outer_out(x, y):
    b = np.zeros_like(x, shape=(3, 3))
    _is(np.multiply.outer(x[0], y[1], out=b), b)
    return np.sum(b * b)


METHODS = {
    "add.reduce axis tuple": lambda x, y: np.add.reduce(x * y, axis=(0, 1)) ** 2,
    "add.reduce axis -1": lambda x, y: np.sum(np.add.reduce(x * y, axis=-1) ** 2 * W2),
    "add.reduce keepdims initial": lambda x, y: np.sum(
        np.add.reduce(x * y, axis=1, keepdims=True, initial=2.5) ** 2 * W2[:, None]),
    "add.reduce where initial": lambda x, y: np.add.reduce(
        x * y, axis=None, where=MASK, initial=1.0) ** 2,
    "add.reduce out": _reduce_out(0, (3,)),
    "add.reduce out tuple": _reduce_out(1, (2,)),
    "add.reduce out keepdims where": _reduce_out(-2, (1, 3), keepdims=True, where=MASK),
    "maximum.reduce initial": lambda x, y: np.sum(
        np.maximum.reduce(x * y, axis=1, initial=0.1) * W2),
    "maximum.reduce where initial": lambda x, y: np.sum(
        np.maximum.reduce(x * y, axis=0, where=MASK, initial=-5.0) * W3),
    "maximum.reduce -2 keepdims": lambda x, y: np.sum(
        np.maximum.reduce(x * y, axis=-2, keepdims=True) * W3),
    "minimum.reduce axis tuple": lambda x, y: np.minimum.reduce(x * y, axis=(0, 1)) * 3.0,
    "multiply.reduce where initial": lambda x, y: np.sum(
        np.multiply.reduce(x * y, axis=1, where=MASK, initial=1.5) * W2),
    "multiply.accumulate axis -2": lambda x, y: np.sum(
        np.multiply.accumulate(x * y, axis=-2) * W3),
    "multiply.accumulate out": _multiply_accumulate_out,
    "add.accumulate out is the argument": _accumulate_into_argument,
    "add.reduceat out": _reduceat_out,
    "multiply.outer out": _outer_out,
}


@pytest.mark.parametrize("name", list(METHODS))
def test_ufunc_methods_with_keywords(name):
    check(METHODS[name], X, Y)


# -- reductions and functions given out= ------------------------------------------------------
def _argmax_into_int_buffer(x, y):
    b = np.zeros(2, dtype=np.intp)
    _is(np.argmax(x * y, axis=1, out=b), b)
    return np.sum(x[np.arange(2), b] * W2)


def _dot_into_view(x, y):
    b = np.zeros_like(x, shape=(3, 2, 2))
    view = b[1]
    _is(np.dot(x, y.T, out=view), view)
    return np.sum(b * b) + np.sum(b[1] * W2)


def _concatenate_into_view(x, y):
    b = np.zeros_like(x, shape=(3, 6))
    view = b[1:]
    _is(np.concatenate([x, y], axis=1, out=view), view)
    return np.sum(b * b)


def _clip_into_argument(x, y):
    _is(np.clip(x, -0.5, y, out=x), x)
    return np.sum(x * x * W3)


def _einsum_into_argument_view(x, y):
    row = x[1]
    _is(np.einsum("ij,ij->j", x[:1], y, out=row), row)   # the second row of x is rewritten
    return np.sum(x * x * W3)


REDUCTIONS = {
    "sum out where": _into(np.sum, (3,), axis=0, where=MASK),
    "sum out initial keepdims": _into(np.sum, (2, 1), axis=-1, keepdims=True, initial=0.5),
    "sum out axis tuple": _into(np.sum, (), axis=(0, 1)),
    "prod out where": _into(np.prod, (2,), axis=1, where=MASK),
    "mean out where": _into(np.mean, (3,), axis=0, where=MASK),
    "max out where initial": _into(np.max, (2,), axis=1, where=MASK, initial=-3.0),
    "min out keepdims": _into(np.min, (1, 3), axis=0, keepdims=True),
    "cumprod out": _into(np.cumprod, (2, 3), axis=0),
    "cumsum out flat": _into(np.cumsum, (6,)),
    "ptp out": _into(np.ptp, (2,), axis=1),
    "var out where": _into(np.var, (3,), axis=0, where=MASK),
    "std out ddof": _into(np.std, (2,), axis=1, ddof=1),
    "argmax out": _argmax_into_int_buffer,
    "any out": lambda x, y: np.sum(_is(np.any(x > y, axis=0, out=(b := np.zeros(3, bool))), b)
                                   * x[0]),
    "all where keepdims": lambda x, y: np.sum(np.all(x > 0, axis=1, where=MASK, keepdims=True)
                                              * x * y),
    "clip out is the argument": _clip_into_argument,
    "round out": None,
    "take out": _into(lambda a, out: np.take(a, [5, 0], out=out), (2,)),
    "dot out a view": _dot_into_view,
    "concatenate out a view": _concatenate_into_view,
    "einsum out a row of an argument": _einsum_into_argument_view,
}


@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reductions_and_functions_with_out(name):
    f = REDUCTIONS[name]
    if name == "round out":   # piecewise constant: the derivative comes from x * y alone
        rounded = _into(lambda a, out: np.round(a, 1, out=out), (2, 3))
        f = lambda x, y: rounded(x, y) + np.sum(x * y)   # noqa: E731
    check(f, X, Y)


# -- float32: dtype= and casting="unsafe" -----------------------------------------------------
def _float32_cases():
    def dtype_call(x, y, dt=np.float32):
        r = np.multiply(x, y, dtype=dt)
        assert r.dtype == dt
        return np.sum(r.astype(np.float64) * W3)

    def unsafe_out(x, y, dt=np.float32):
        b = np.zeros_like(x, dtype=dt)
        _is(np.multiply(x, y, out=b, casting="unsafe", where=x > 0), b)
        assert b.dtype == dt
        return np.sum(b.astype(np.float64) * W3)

    def reduce_dtype(x, y, dt=np.float32):
        r = np.add.reduce(x * y, axis=0, dtype=dt)
        assert r.dtype == dt
        return np.sum(r.astype(np.float64) * W3)

    def accumulate_dtype(x, y, dt=np.float32):
        r = np.add.accumulate(x * y, axis=1, dtype=dt)
        assert r.dtype == dt
        return np.sum(r.astype(np.float64) * W3)

    def cumsum_dtype_into_float64(x, y, dt=np.float32):
        b = np.zeros_like(x)
        _is(np.cumsum(x * y, axis=1, dtype=dt, out=b), b)
        return np.sum(b * W3)

    def mean_dtype(x, y, dt=np.float32):
        r = np.mean(x * y, axis=1, dtype=dt, where=MASK)
        assert r.dtype == dt
        return np.sum(r.astype(np.float64) * W2)

    return {f.__name__: f for f in (dtype_call, unsafe_out, reduce_dtype, accumulate_dtype,
                                     cumsum_dtype_into_float64, mean_dtype)}


FLOAT32 = _float32_cases()


@pytest.mark.parametrize("name", list(FLOAT32))
def test_float32_results_and_buffers_of_float64_inputs(name):
    f = FLOAT32[name]
    check(f, X, Y, ref=lambda x, y: f(x, y, dt=np.float64), rtol=1e-6, grad_rtol=1e-5)
    # an Active float64 input gets a float64 gradient, whatever the float32 on the way
    (gx, gy), = autodiff(Reverse, f, Active, Active(X.copy()), Active(Y.copy()))
    assert gx.dtype == np.float64 and gy.dtype == np.float64


# -- a traced value written into a plain array is refused, naming the call and the fix ---------
def _plain(*shape):
    return np.zeros(shape)


REFUSED = {
    "sin": (lambda x: np.sin(x, out=_plain(2, 3)), "np.sin"),
    "add out tuple": (lambda x: np.add(x, x, out=(_plain(2, 3),)), "np.add"),
    "add where": (lambda x: np.add(x, x, out=_plain(2, 3), where=x > 0), "np.add"),
    "divmod": (lambda x: np.divmod(x, 0.7, out=(_plain(2, 3), _plain(2, 3))), "np.divmod"),
    "matmul": (lambda x: np.matmul(x, x.T, out=_plain(2, 2)), "np.matmul"),
    "einsum": (lambda x: np.einsum("ij->j", x, out=_plain(3)), "np.einsum"),
    "sum": (lambda x: np.sum(x, axis=0, out=_plain(3)), "np.sum"),
    "cumsum": (lambda x: np.cumsum(x, axis=0, out=_plain(2, 3)), "np.cumsum"),
}


@pytest.mark.parametrize("name", list(REFUSED))
@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_a_plain_out_is_refused_naming_the_call(name, mode):
    write, named = REFUSED[name]
    _refused(write, mode, named)


def _refused(write, mode, *named):
    def f(x):
        write(x)
        return np.sum(x)
    with pytest.raises((tape.NonDifferentiableError, NotImplementedError)) as info:
        if mode == "reverse":
            autodiff(Reverse, f, Active, Duplicated(X.copy(), np.zeros_like(X)))
        else:
            autodiff(Forward, f, Duplicated(X.copy(), np.ones_like(X)))
    for name in named:
        assert name in str(info.value), str(info.value)


# -- findings ---------------------------------------------------------------------------------
METHOD_OUT = {
    "x.sum": (lambda a, out: a.sum(axis=0, out=out), (3,)),
    "x.mean": (lambda a, out: a.mean(0, None, out), (3,)),
    "x.max": (lambda a, out: a.max(axis=1, out=out), (2,)),
    "x.std": (lambda a, out: a.std(axis=0, out=out), (3,)),
    "x.cumsum": (lambda a, out: a.cumsum(axis=1, out=out), (2, 3)),
    "x.cumprod": (lambda a, out: a.cumprod(axis=0, out=out), (2, 3)),
    "x.take": (lambda a, out: a.take([2, 0], axis=1, out=out), (2, 2)),
    "x.round": (lambda a, out: a.round(1, out=out), (2, 3)),
}


@pytest.mark.parametrize("name", list(METHOD_OUT))
def test_ndarray_methods_write_into_a_traced_out(name):
    method, shape = METHOD_OUT[name]

    def f(x, y):
        b = np.zeros_like(x, shape=shape)
        _is(method(x * y, b), b)
        return np.sum(b * b) + np.sum(x * y)

    check(f, X, Y)


CASTS_NUMPY_REFUSES = {
    "float into an int out": lambda x: np.multiply(
        x, 10.0, out=np.zeros_like(x, dtype=np.int64)),
    "float into an int out, masked": lambda x: np.exp(
        x, out=np.zeros_like(x, dtype=np.int64), where=x > 0),
    "dtype=int64 of float inputs": lambda x: np.add(x, x, dtype=np.int64),
    "casting='no' with dtype=float32": lambda x: np.add(x, x, casting="no", dtype=np.float32),
    "casting='equiv' into a float32 out": lambda x: np.add(
        x, x, out=np.zeros_like(x, dtype=np.float32), casting="equiv"),
}


@pytest.mark.parametrize("name", list(CASTS_NUMPY_REFUSES))
@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_a_cast_that_numpy_refuses_is_refused(name, mode):
    call = CASTS_NUMPY_REFUSES[name]
    with pytest.raises(TypeError) as plain:
        call(X.copy())
    assert "Cannot cast" in str(plain.value)

    def f(x):
        call(x)
        return np.sum(x)
    with pytest.raises(TypeError, match="Cannot cast"):
        if mode == "reverse":
            autodiff(Reverse, f, Active, Duplicated(X.copy(), np.zeros_like(X)))
        else:
            autodiff(Forward, f, Duplicated(X.copy(), np.ones_like(X)))


REFUSED_UNCLEARLY = {
    # TracerConversionError that names neither np.clip nor out=
    "clip": (lambda x: np.clip(x, 0.0, 1.0, out=_plain(2, 3)), ("clip", "zeros_like")),
    # "np.dot(..., out=) is not supported on traced values": no fix named
    "dot": (lambda x: np.dot(x, x.T, out=_plain(2, 2)), ("np.dot", "zeros_like")),
    "take": (lambda x: np.take(x, [0, 1], axis=1, out=_plain(2, 2)), ("np.take", "zeros_like")),
    "concatenate": (lambda x: np.concatenate([x, x], out=_plain(4, 3)),
                    ("np.concatenate", "zeros_like")),
    # named `numpy.add(..., out=...)` and explained as what `x += value` runs
    "add.reduce": (lambda x: np.add.reduce(x, axis=0, out=_plain(3)), ("add.reduce",)),
    "multiply.accumulate": (lambda x: np.multiply.accumulate(x, axis=0, out=_plain(2, 3)),
                            ("multiply.accumulate",)),
}


@pytest.mark.parametrize("name", list(REFUSED_UNCLEARLY))
def test_a_plain_out_refusal_names_the_call_and_the_fix(name):
    write, named = REFUSED_UNCLEARLY[name]
    _refused(write, "reverse", *named)


def test_no_warnings_escape_from_the_float_into_int_buffers():
    # casting="unsafe" is NumPy's spelling for a deliberate truncation: no warning, no error.
    def f(x, y):
        counts = np.zeros_like(x, dtype=np.int64)
        np.multiply(x, 10.0, out=counts, casting="unsafe", where=MASK)
        return np.sum(counts * x * y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check(f, X, Y)
