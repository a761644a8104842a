"""Lists and tuples of traced values given to NumPy (ops/lists.py): np.array and its spellings,
the joining functions, np.r_/np.c_ and every function with a rule build traced arrays, with
NumPy's dtypes, shapes and errors, and are differentiated forward, reverse and nested. Outside
differentiation the numpy attributes are NumPy's own objects."""
import threading

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

import ops.numpy_patch as numpy_patch
from tape import (Active, Duplicated, Forward, NonDifferentiableError, Reverse, autodiff,
                  gradient, primal)
from tape.errors import TracerConversionError
from tape.testing import check_grads, traced_value
from tape.tracer import FUNCTION_RULES

FEW = settings(max_examples=25, deadline=None)
ORIGINAL = {name: getattr(np, name) for name in (
    "array", "asarray", "asanyarray", "ascontiguousarray", "mean", "stack", "full", "r_", "c_")}
ORIGINAL_NORM = np.linalg.norm


def same(got, expected):
    """Same dtype, shape and values (to rounding: the traced path computes through rules)."""
    assert np.result_type(got) == np.result_type(expected), (np.result_type(got),
                                                             np.result_type(expected))
    assert np.shape(got) == np.shape(expected)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


# -- random nested structures -------------------------------------------------------------------
# A structure is described by a spec tree, built from a parameter vector p (traced or plain):
# ("list" | "tuple", [children]), ("param", k, shape), ("sin", k), ("block", k, shape) (a whole
# traced sub-array), ("const", value) for floats, ints and plain arrays.

@st.composite
def specs(draw):
    dims = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    leaf = draw(st.sampled_from([(), (), (2,), (1, 2)]))
    counter = [0]

    def take(n):
        k = counter[0]
        counter[0] += n
        return k

    def node(dims):
        if not dims:
            kinds = ["param", "sin", "float", "int"] if leaf == () else ["param", "array"]
            kind = draw(st.sampled_from(kinds))
            size = int(np.prod(leaf))
            if kind == "param":
                return ("param", take(size), leaf)
            if kind == "sin":
                return ("sin", take(1))
            if kind == "float":
                return ("const", draw(st.floats(-2, 2)))
            if kind == "int":
                return ("const", draw(st.integers(-3, 3)))
            return ("const", draw(st.lists(st.floats(-2, 2), min_size=size, max_size=size))
                    if len(leaf) == 1 else np.full(leaf, draw(st.floats(-2, 2))))
        if draw(st.integers(0, 4)) == 0:   # a traced block standing for the whole sub-list
            shape = tuple(dims) + leaf
            return ("block", take(int(np.prod(shape))), shape)
        kind = draw(st.sampled_from(["list", "tuple"]))
        return (kind, [node(dims[1:]) for _ in range(dims[0])])

    tree = node(dims)
    assume(counter[0] > 0)
    p = np.random.default_rng(counter[0]).uniform(-1.5, 1.5, counter[0])
    return tree, p


def build(spec, p):
    kind = spec[0]
    if kind in ("list", "tuple"):
        items = [build(c, p) for c in spec[1]]
        return items if kind == "list" else tuple(items)
    if kind == "param":
        k, shape = spec[1], spec[2]
        return p[k] if shape == () else np.reshape(p[k:k + int(np.prod(shape))], shape)
    if kind == "sin":
        return np.sin(p[spec[1]]) * p[spec[1]]
    if kind == "block":
        k, shape = spec[1], spec[2]
        return np.reshape(p[k:k + int(np.prod(shape))], shape) * 1.5
    return spec[1]


CONSTRUCTORS = {
    "array": lambda s: np.array(s),
    "asarray": lambda s: np.asarray(s),
    "asanyarray": lambda s: np.asanyarray(s),
    "array[float64]": lambda s: np.array(s, dtype=np.float64),
    "array[complex]": lambda s: np.array(s, dtype=complex),
    "array[ndmin=4]": lambda s: np.array(s, ndmin=4),
    "ascontiguousarray": lambda s: np.ascontiguousarray(s),
    "stack": lambda s: np.stack(s),
    "stack[axis=-1]": lambda s: np.stack(s, axis=-1),
    "concatenate": lambda s: np.concatenate(s),
    "hstack": lambda s: np.hstack(s),
    "vstack": lambda s: np.vstack(s),
    "dstack": lambda s: np.dstack(s),
    "column_stack": lambda s: np.column_stack(s),
    "r_": lambda s: np.r_[tuple(s)],
    "c_": lambda s: np.c_[tuple(s)],
    "atleast_2d": lambda s: np.atleast_2d(s),
    "mean": lambda s: np.mean(s, axis=0),
    "sum": lambda s: np.sum(s),
    "linalg.norm": lambda s: np.linalg.norm(s),
    "append": lambda s: np.append(s, [1.0]),
    "zeros_like": lambda s: np.zeros_like(s),
}


def _outcome(f, *args):
    try:
        return f(*args), None
    except Exception as e:   # NumPy's own error for this structure: the traced path gives it too
        return None, type(e)


@FEW
@given(specs(), st.sampled_from(sorted(CONSTRUCTORS)), st.sampled_from(["forward", "reverse"]))
def test_nested_lists_match_numpy(spec_p, name, mode):
    spec, p = spec_p
    f = lambda p: CONSTRUCTORS[name](build(spec, p))   # noqa: E731
    expected, error = _outcome(f, p)
    if error is not None:
        with pytest.raises(error):
            traced_value(f, p, mode=mode)
        return
    same(traced_value(f, p, mode=mode), expected)


REAL_CONSTRUCTORS = sorted(set(CONSTRUCTORS) - {"array[complex]", "zeros_like"})


@settings(max_examples=12, deadline=None)
@given(specs(), st.sampled_from(REAL_CONSTRUCTORS))
def test_nested_lists_gradients(spec_p, name):
    spec, p = spec_p
    f = lambda p: CONSTRUCTORS[name](build(spec, p))   # noqa: E731
    assume(_outcome(f, p)[1] is None)
    check_grads(lambda p: np.sin(f(p)) * 1.3, p)   # forward, reverse, batch; to second order


# -- functions given lists, fixed examples (second order) ----------------------------------------
P4 = np.array([0.3, -0.8, 1.2, 0.5])


def mixed(p):
    """A list mixing traced 0-d values, floats and ints."""
    return [p[0], 1.5, p[1] * p[2], 2, np.sin(p[3])]


LIST_FUNCTIONS = {
    "np.array": lambda p: np.array(mixed(p)) ** 2,
    "np.array[nested tuple]": lambda p: np.array(((p[0], 1.0), [p[1], p[2] ** 2])) ** 2,
    "np.array[traced arrays]": lambda p: np.array([p[:2], [1.0, p[3]], p[2:]]) ** 2,
    "np.mean": lambda p: np.mean(mixed(p)) ** 2,
    "np.std": lambda p: np.std(mixed(p)),
    "np.var": lambda p: np.var([p[0], p[1], 3.0]),
    "np.sum": lambda p: np.sum(mixed(p)) ** 2,
    "np.prod": lambda p: np.prod(mixed(p)),
    "np.max": lambda p: np.max(mixed(p)) * p[0],
    "np.min": lambda p: np.min([p[0], p[1], 0.1]) * p[2],
    "np.linalg.norm": lambda p: np.linalg.norm(mixed(p)),
    "np.append": lambda p: np.append(mixed(p), [p[0], 7.0]) ** 2,
    "np.dot": lambda p: np.dot(mixed(p), [1.0, 2.0, -1.0, 0.5, 3.0]) ** 2,
    "np.dot[matrix]": lambda p: np.dot([[p[0], 1.0], [2.0, p[1]]], [p[2], p[3]]) ** 2,
    "np.outer": lambda p: np.outer([p[0], 1.0], mixed(p)),
    "np.einsum": lambda p: np.einsum("i,i->", mixed(p), mixed(p)),
    "np.cumsum": lambda p: np.cumsum(mixed(p)) ** 2,
    "np.average": lambda p: np.average(mixed(p), weights=[p[0] ** 2, 1.0, 1.0, 2.0, 1.0]),
    "np.concatenate": lambda p: np.concatenate(([p[0], 1.0], [2.0], p[1:])) ** 2,
    "np.stack": lambda p: np.stack([[p[0], 1.0], [2.0, p[1]]], axis=1) ** 2,
    "np.hstack": lambda p: np.hstack([[p[0], 1.0], [p[1] * p[2]]]) ** 2,
    "np.vstack": lambda p: np.vstack(([p[0], 1.0], [2.0, p[1]])) ** 2,
    "np.column_stack": lambda p: np.column_stack(([p[0], 1.0], [2.0, p[1]])) ** 2,
    "np.dstack": lambda p: np.dstack(([p[0], 1.0], [2.0, p[1]])) ** 2,
    "np.r_": lambda p: np.r_[p[0], 1.0, [p[1], 2], p[2:]] ** 2,
    "np.r_[directive]": lambda p: np.r_["0,2", [p[0], 1.0], [2.0, p[1]]] ** 2,
    "np.c_": lambda p: np.c_[[p[0], 1.0], [2.0, p[1]], p[2:]] ** 2,
    "np.r_[slices]": lambda p: np.r_[p[0], 0:3, 1:2:3j, [p[1], 4]] ** 2,
    "np.r_[trans1d=0]": lambda p: np.r_["0,2,0", [p[0], 1.0], [2.0, p[1]]] ** 2,
    "np.r_[3-d, trans1d=1]": lambda p: np.r_["1,3,1", [p[0], 1.0], [[[2.0], [p[1]]]]] ** 2,
    "np.r_[axis=-1, ints]": lambda p: np.r_["-1", [[p[0]], [2]], [[3], [p[1]]]] ** 2,
    "np.c_[scalars]": lambda p: np.c_[p[0], 2, p[1] * p[2]] ** 2,
    "np.full": lambda p: np.full((2, 3), p[0] * p[1]) ** 2,
    "np.full[list]": lambda p: np.full((2, 2), [p[0], 1.0]) ** 2,
    "np.full_like[plain a]": lambda p: np.full_like(np.zeros(3), p[0] ** 2) * p[1],
    "np.zeros_like[list]": lambda p: np.zeros_like([p[0], 1.0]) + p[1] ** 2,
}


def _buffer(p):
    out = np.zeros_like([p[0], p[1], 0.0])   # a traced buffer from a list
    out[0] = p[0] * p[1]
    out[2] = np.sin(p[2])
    return out ** 2


LIST_FUNCTIONS["np.zeros_like[written]"] = _buffer


@pytest.mark.parametrize("name", sorted(LIST_FUNCTIONS))
def test_functions_given_lists(name):
    f = LIST_FUNCTIONS[name]
    expected = f(P4)
    same(traced_value(f, P4, mode="forward"), expected)
    same(traced_value(f, P4, mode="reverse"), expected)
    check_grads(f, P4)


# -- copy, dtype and errors -----------------------------------------------------------------------

def test_copy_and_dtype_semantics_of_a_traced_argument():
    seen = {}

    def f(x):
        seen["asarray"] = np.asarray(x) is x
        seen["copy=False"] = np.array(x, copy=False) is x
        seen["asanyarray"] = np.asanyarray(x) is x
        copied = np.array(x)
        seen["array copies"] = copied is not x
        copied[0] = 10.0   # a private buffer: x is unchanged
        seen["x unchanged"] = primal(x)[0] == 0.5
        seen["float32"] = np.result_type(np.array(x, dtype=np.float32)) == np.float32
        seen["int is plain"] = type(np.asarray(x, dtype=int)) is np.ndarray
        seen["ndmin"] = np.shape(np.array(x, ndmin=3)) == (1, 1, 2)
        seen["contiguous 0-d"] = np.shape(np.ascontiguousarray(x[0])) == (1,)
        return np.sum(x * copied)
    (g,), = autodiff(Reverse, f, Active, Active(np.array([0.5, 2.0])))
    np.testing.assert_allclose(g, [10.0, 4.0])   # copied = [10, x1]: d/dx (10 x0 + x1^2)
    assert all(seen.values()), seen


def test_copy_false_and_ragged_lists_raise_numpys_errors():
    def f(x):
        np.asarray([x[0], 1.0], copy=False)
    with pytest.raises(ValueError, match="copy"):
        autodiff(Reverse, lambda x: f(x) or np.sum(x), Active, Active(np.ones(2)))
    with pytest.raises(ValueError, match="inhomogeneous"):
        autodiff(Reverse, lambda x: np.sum(np.array([x, [1.0]])), Active, Active(np.ones(2)))
    with pytest.raises(ValueError, match="copy"):
        autodiff(Reverse, lambda x: np.sum(np.array(x, dtype=np.float32, copy=False)), Active,
                 Active(np.ones(2)))


def test_non_numeric_and_ufunc_lists_raise_clear_errors():
    with pytest.raises(NonDifferentiableError, match="dtype <U"):
        autodiff(Reverse, lambda x: np.sum(np.array([x, "a"])), Active, Active(1.0))
    with pytest.raises(TracerConversionError, match=r"np.array\(\[a, b\]\)"):
        autodiff(Reverse, lambda x: np.sum(np.sin([x, 1.0])), Active, Active(1.0))
    with pytest.raises(NotImplementedError, match="matrix"):
        autodiff(Reverse, lambda x: np.sum(np.r_["r", [x, 1.0]]), Active, Active(1.0))


def test_integer_results_carry_no_derivative():
    def f(x):
        ints = np.array([x, 2.0], dtype=int)
        assert type(ints) is np.ndarray and ints.dtype == int
        return x * np.sum(ints)
    (g,), = autodiff(Reverse, f, Active, Active(3.0))
    assert g == 5.0


# -- levels: nesting and mixing values of two traces in one list ----------------------------------

def test_values_of_two_levels_in_one_list():
    def outer(a):
        def inner(b):
            return np.sum(np.array([a * b, b, 2.0]) ** 2)   # a is of the outer trace
        return gradient(Reverse, inner, 1.3)[0]              # 2 a^2 b + 2 b
    np.testing.assert_allclose(outer(0.7), 2 * 0.49 * 1.3 + 2 * 1.3)
    (g,), = autodiff(Reverse, outer, Active, Active(0.7))
    np.testing.assert_allclose(g, 4 * 0.7 * 1.3)
    check_grads(outer, 0.7)
    hv, = autodiff(Forward, lambda a: gradient(Reverse, lambda b: np.mean([a * b, b ** 3]), a)[0],
                   Duplicated(0.7, 1.0))
    np.testing.assert_allclose(hv, (1 + 6 * 0.7) / 2)   # d/da of (a + 3 a^2) / 2


# -- outside differentiation: NumPy's own objects --------------------------------------------------

def _originals_in_place():
    return (all(getattr(np, n) is f for n, f in ORIGINAL.items())
            and np.linalg.norm is ORIGINAL_NORM)


def test_numpy_attributes_are_numpys_outside_tracing_and_wrapped_inside():
    assert _originals_in_place()
    inside = {}

    def f(x):
        inside["wrapped"] = not any(getattr(np, n) is fn for n, fn in ORIGINAL.items())
        inside["norm"] = np.linalg.norm is not ORIGINAL_NORM
        inside["rules found"] = FUNCTION_RULES[np.mean] is FUNCTION_RULES[ORIGINAL["mean"]]
        return x.sum() + x.T.mean()   # methods look their rule up through np.sum at call time
    autodiff(Reverse, f, Active, Active(np.ones(2)))
    assert all(inside.values()), inside
    assert _originals_in_place()
    # The wrappers stay keys to their rules; NumPy never reaches them outside tracing.
    for key, rule in FUNCTION_RULES.items():
        original = getattr(key, "__wrapped__", None)
        if numpy_patch._WRAPPERS.get(original) is key:
            assert FUNCTION_RULES[original] is rule


def test_wrappers_are_removed_after_an_error_and_after_nesting():
    def fails(x):
        raise KeyError("boom")
    with pytest.raises(KeyError):
        autodiff(Reverse, fails, Active, Active(1.0))
    assert _originals_in_place()

    def nested(x):
        gradient(Reverse, lambda y: np.sum(np.array([y, x])), 1.0)
        assert np.array is not ORIGINAL["array"]   # still inside the outer trace
        return np.sum(np.array([x, 1.0]))
    autodiff(Reverse, nested, Active, Active(1.0))
    assert _originals_in_place()


def test_wrappers_stay_while_another_thread_traces():
    opened, release, results = threading.Event(), threading.Event(), {}

    def other():
        def f(x):
            opened.set()
            release.wait(10)
            return np.sum(np.array([x, 2.0]) ** 2)
        results["other"] = autodiff(Reverse, f, Active, Active(3.0))[0][0]

    thread = threading.Thread(target=other)
    thread.start()
    assert opened.wait(10)
    try:
        results["main"] = autodiff(Reverse, lambda x: np.mean([x, x * x]), Active,
                                   Active(2.0))[0][0]
        # The other thread's trace is still open: wrapped, yet plain calls are NumPy's.
        assert np.array is not ORIGINAL["array"]
        a = np.arange(3.0)
        assert np.asarray(a) is a and np.array([1, 2]).dtype == np.array([1, 2]).dtype
    finally:
        release.set()
        thread.join(10)
    assert results == {"other": 6.0, "main": 2.5}
    assert _originals_in_place()


def test_a_users_own_replacement_is_left_alone(monkeypatch):
    def fake_mean(a, *args, **kwargs):
        return "fake"
    monkeypatch.setattr(np, "mean", fake_mean)
    seen = []
    autodiff(Reverse, lambda x: seen.append(np.mean is fake_mean) or x * 2, Active, Active(1.0))
    assert seen == [True] and np.mean is fake_mean
    monkeypatch.undo()
    assert _originals_in_place()
    (g,), = autodiff(Reverse, lambda x: np.mean([x, 2.0 * x]), Active, Active(1.0))
    assert g == 1.5   # NumPy's np.mean is back, and wrapped again while tracing

    def patch_inside(x):   # replaced while traced: not undone when the trace closes
        np.stack = fake_mean
        return x * 2
    try:
        autodiff(Reverse, patch_inside, Active, Active(1.0))
        assert np.stack is fake_mean
    finally:
        np.stack = ORIGINAL["stack"]


# The wrappers themselves (should a module bind one while tracing) compute exactly NumPy's result.
plain_items = st.one_of(st.floats(-3, 3), st.integers(-3, 3),
                        st.sampled_from([np.float32(1.5), np.int8(2), np.float64(0.25)]))


@FEW
@given(st.lists(plain_items, min_size=1, max_size=4),
       st.sampled_from([None, np.float32, np.float64, int, complex]),
       st.sampled_from([True, None]), st.integers(0, 3))
def test_wrapped_constructors_return_numpys_result(items, dtype, copy, ndmin):
    for name, kwargs in [("array", dict(dtype=dtype, copy=copy, ndmin=ndmin)),
                         ("asarray", dict(dtype=dtype, copy=copy)),
                         ("ascontiguousarray", dict(dtype=dtype))]:
        wrapper = numpy_patch._wrapper_of(getattr(np, name))
        expected = getattr(np, name)(items, **kwargs)
        got = wrapper(items, **kwargs)
        assert type(got) is type(expected) and got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)
    a = np.asarray(items, dtype=dtype)
    wrapped_array = numpy_patch._wrapper_of(np.array)
    assert numpy_patch._wrapper_of(np.asarray)(a) is a
    assert wrapped_array(a, copy=False) is a and wrapped_array(a) is not a
    mean = numpy_patch._wrapper_of(np.mean)
    np.testing.assert_array_equal(mean(items), np.mean(items))
