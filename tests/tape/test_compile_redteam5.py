"""`tape.compile` against eager `autodiff`, fifth round: Python lists that the function changes
after a step used them, closure arrays it changes (and restores) within one call, steps whose
results nothing reads but that raise in eager mode, and Python's view of Const values and of
the results of inactive functions (hashing, isinstance).

Every test compares a compiled sequence of calls with the same calls through eager `autodiff`
on fresh copies of the arguments (tests/tape/compile_sequences.py). The strict xfails are
wrong behaviours to fix; flip them when fixed.
"""
import warnings

import numpy as np
import pytest

import tape
from tape import Active, Const, Duplicated, ReverseWithPrimal, autodiff

from compile_sequences import sequences

RP = ReverseWithPrimal


def _rng(k):
    return np.random.default_rng(k)


def _dup(x):
    x = np.asarray(x, dtype=float)
    return Duplicated(x.copy(), np.zeros_like(x))


def _calls_on(shape, n=3):
    """`setup` for `sequences`: f with Duplicated normal arguments of `shape`, call by call."""
    def setup_for(f):
        return lambda: (f, lambda c: [_dup(_rng(c).normal(size=shape))])
    return setup_for, list(range(n))


# -- Python lists the function changes after a step used them -------------------------------
# A list in a step's operands or parameters was kept by reference in the program (and in eager
# mode's residuals): a change made later in the same call reached the earlier steps.

def test_a_list_operand_changed_later_in_the_call():
    def f(x):
        w = [1.0, 2.0]
        s = np.sum(x * w)
        w[0] = 5.0
        return s + np.sum(x * w)
    setup_for, calls = _calls_on((2,))
    sequences(setup_for(f), calls)


def test_a_shape_list_changed_later_in_the_call():
    def f(x):
        shape, s = [2, 12], 0.0
        for t in range(2):
            s = s + np.sum(np.reshape(x, shape)[0] * (t + 1))
            shape[0], shape[1] = 4, 6
        return s
    setup_for, calls = _calls_on((2, 3, 4))
    sequences(setup_for(f), calls)


def test_an_index_list_inside_a_tuple_changed_later_in_the_call():
    def f(x):
        rows = [0, 1]
        a = np.sum(x[rows, 0])
        rows[0] = 1
        return a + 10.0 * np.sum(x[rows, 0])
    setup_for, calls = _calls_on((2, 2))
    sequences(setup_for(f), calls)


def test_a_write_index_list_changed_after_the_write():
    def f(x):
        buf = np.zeros_like(x)
        idx = [0]
        buf[idx] = x[1] * 2.0
        idx[0] = 1
        buf[idx] = x[0] * 3.0
        return np.sum(buf ** 2)
    setup_for, calls = _calls_on((3,))
    sequences(setup_for(f), calls)


def test_lists_grown_or_rotated_in_a_loop_and_lists_changed_between_calls():
    """Index lists that become fancy indices are copied; lists the caller changes between
    calls (a closure list, an attribute) are watched: these agree with eager mode."""
    def grow(x):
        idx, s = [0], 0.0
        for t in range(3):
            s = s + np.sum(x[idx] * (t + 1)) + np.sum(np.take(x, idx))
            idx.append(t + 1)
        return s

    def rotate(x):
        perm, s = [0, 1, 2], 0.0
        for t in range(3):
            s = s + np.sum(np.transpose(x, perm)[0] * (t + 1))
            perm.append(perm.pop(0))
        return s
    for f, shape in ((grow, (4,)), (rotate, (2, 3, 4))):
        setup_for, calls = _calls_on(shape)
        sequences(setup_for(f), calls)

    def setup():
        weights, holder = [1.0, 2.0], {"shape": [2, 2]}

        def f(x):
            return np.sum(x[:2] * weights) + np.sum(np.reshape(x, holder["shape"])[0] * 3.0)

        def make_args(c):
            weights[0] += c   # both changed in place between calls
            holder["shape"][:] = [[2, 2], [1, 4], [4, 1]][c % 3]
            return [_dup(_rng(c).normal(size=4))]
        return f, make_args
    g = sequences(setup, [0, 1, 2, 3, 0])
    assert g.stats.traces >= 2


# -- closure arrays the function changes within one call -------------------------------------

def test_a_closure_array_changed_and_restored_within_the_call():
    def setup():
        w = np.ones(3)

        def f(x):
            a = np.sum(x * w)
            w[...] *= 2.0
            b = np.sum(x * w)
            w[...] /= 2.0
            return a + b
        return f, lambda c: [_dup(np.arange(3.0) + c)]
    sequences(setup, [0, 1, 2])


def test_a_scratch_array_refilled_within_each_call():
    def setup():
        scratch = np.zeros(3)

        def f(x):
            scratch[:] = [1.0, 2.0, 3.0]
            a = x * scratch
            scratch[:] = [4.0, 5.0, 6.0]
            return np.sum(a + x * scratch)
        return f, lambda c: [_dup(np.arange(3.0) + c)]
    sequences(setup, [0, 1, 2, 3])


# -- steps whose results nothing reads, that raise in eager mode -----------------------------
# Dead-code elimination dropped them, so the compiled call returned (and wrote the shadows)
# where eager autodiff raises; now a step that may raise runs (one that may only warn, where
# the caller's settings make warnings raise: tape/program_unused.py).

def _validates(check, good, bad):
    def setup():
        def f(x, c):
            check(x, c)
            return np.sum(x ** 2)
        return f, lambda k: [_dup(np.ones(3) * (k + 1)), Const(bad if k == 2 else good)]
    sequences(setup, [0, 1, 2])


def test_an_unused_cholesky_still_raises():
    _validates(lambda x, c: np.linalg.cholesky(c), 2.0 * np.eye(3), -np.eye(3))


def test_an_unused_inverse_still_raises():
    _validates(lambda x, c: np.linalg.inv(c), 2.0 * np.eye(3), np.zeros((3, 3)))


def test_an_unused_gather_out_of_bounds_still_raises():
    _validates(lambda x, c: x[c], np.array([0, 1]), np.array([0, 7]))


def test_an_unused_step_under_errstate_raise_still_raises():
    def check(x, c):
        with np.errstate(invalid="raise"):
            np.log(x * c)
    _validates(check, np.ones(3), -np.ones(3))


def test_an_unused_warning_step_under_warnings_as_errors():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _validates(lambda x, c: np.sqrt(x * c), np.ones(3), -np.ones(3))


def test_an_unused_gather_out_of_bounds_of_the_traced_call_raises():
    """The out-of-bounds index is in the traced call itself: eager's error."""
    _validates(lambda x, c: x[c], np.array([0, 7]), np.array([0, 7]))


# -- Const values and inactive results as Python sees them -----------------------------------
# Eager mode hands f a ConstBuffer (an ndarray) and plain NumPy results of inactive functions;
# a compiled trace hands it tracers, which hash by identity and are not ndarrays.

def _const_probe(probe, ints=False):
    def setup():
        def f(x, c):
            return np.sum(x) * probe(x, c)

        def make_args(k):
            c = _rng(k + 5).integers(0, 3, size=3) if ints else _rng(k + 5).normal(size=3)
            return [_dup(_rng(k).normal(size=3)), Const(c)]
        return f, make_args
    sequences(setup, [0, 1, 2, 3])


LABELS = {0: 1.0, 1: 2.0, 2: 3.0}


def test_a_dict_lookup_with_a_const_element():
    _const_probe(lambda x, c: LABELS.get(c[0], -1.0), ints=True)


def test_set_membership_and_counts_of_const_elements():
    _const_probe(lambda x, c: float(c[0] in {0, 2}) + float(len(set(c))), ints=True)


def test_a_dict_lookup_with_an_argmax_index():
    _const_probe(lambda x, c: LABELS.get(np.argmax(x), -1.0))


def test_isinstance_of_a_const_argument():
    _const_probe(lambda x, c: 2.0 if isinstance(c, np.ndarray) else 1.0)


def test_isinstance_of_a_const_element():
    _const_probe(lambda x, c: 2.0 if isinstance(c[0], (int, np.integer)) else 1.0, ints=True)


def test_isinstance_of_a_mask():
    _const_probe(lambda x, c: 2.0 if isinstance(c > 0, np.ndarray) else 1.0)


def test_float_of_a_copied_const_raises_as_eager():
    _const_probe(lambda x, c: float(np.copy(c)[0]))


def test_equality_and_list_membership_of_const_elements_are_guarded():
    _const_probe(lambda x, c: float(c[0] in [0, 2]) + float(c[1] == 1) + float(max(c)),
                 ints=True)


# -- passing: scalar kinds, mixed precision, shadow layouts ---------------------------------

def test_scalar_kinds_interleaved_in_one_compiled_function():
    """Active Python floats, NumPy scalars, 0-d arrays, float32, ints and bools, one after
    another through one compiled function, as eager (types of the derivatives, errors)."""
    values = [3.0, np.float64(3.5), np.array(2.0), np.float32(1.5), 3,
              np.array(2.5, dtype=np.float32), 4.0, True, np.int64(2), np.float64(1.0)]

    def setup():
        return (lambda x: x * x + np.sin(x) if x > 2 else -x,
                lambda c: [Active(values[c])])
    sequences(setup, list(range(len(values))) + [0, 1, 2])


@pytest.mark.parametrize("dtypes", [(np.float32, np.float64), (np.float64, np.float32),
                                    (np.float32, np.float32)])
def test_mixed_precision_inline_rules_equal_eager_bit_for_bit(dtypes):
    def f(x, y):
        return np.sum(np.sin(x * y) + x * 3.0 + x * y + (y - x) ** 2 + x / (y * y + 1)
                      + np.arctan2(x, y) + x * np.float64(2.5))
    g = tape.compile(RP, f, Active, Duplicated, Duplicated)
    for k in range(3):
        args = [[Duplicated(_rng(k + j).normal(size=5).astype(t), np.zeros(5, t))
                 for j, t in enumerate(dtypes)] for _ in range(2)]
        got, want = g(*args[0]), autodiff(RP, f, Active, *args[1])
        assert type(got[1]) is type(want[1])
        np.testing.assert_array_equal(got[1], want[1])
        for a, b in zip(*args):
            assert a.dval.dtype == b.dval.dtype
            np.testing.assert_array_equal(a.dval, b.dval)


def test_shadows_and_primals_of_any_layout():
    layouts = {
        "F shadow": lambda x: Duplicated(x, np.zeros(x.shape, order="F")),
        "strided shadow": lambda x: Duplicated(x, np.zeros((3, 8))[:, ::2]),
        "float32 shadow": lambda x: Duplicated(x, np.zeros(x.shape, np.float32)),
        "broadcast shadow": lambda x: Duplicated(x, np.broadcast_to(np.zeros(4), (3, 4))),
        "F primal": lambda x: Duplicated(np.asfortranarray(x), np.zeros(x.shape)),
        "strided primal": lambda x: Duplicated(np.repeat(x, 2, axis=1)[:, ::2], np.zeros(x.shape)),
    }
    f = lambda x: np.sum(np.sin(x) * x)   # noqa: E731
    for name, make in layouts.items():
        def setup(make=make):
            return f, lambda c: [_dup(_rng(c).normal(size=(3, 4))) if c < 2
                                 else make(_rng(c).normal(size=(3, 4)))]
        sequences(setup, [0, 1, 2, 3, 0])
