"""`tape.compile` against eager `autodiff`, twelfth round: checkpoints inside a compiled
function, x / y's derivative in y applied as -(g * ans) / y in compiled programs, forward-mode
return-activity guessing and annotated functions, and the `**` shortcuts' dtypes and guards.

Every call is compared with the same call through eager `autodiff` on fresh arguments, over
several calls with changing inputs (a program is confirmed by its second trace and replayed
from the third call on), and where eager and compiled agree on a tame point, with central
finite differences or the analytic derivative.
"""
import warnings

import numpy as np
import pytest

import tape
from tape import (Active, BatchDuplicated, Const, Duplicated, DuplicatedNoNeed, Forward,
                  ForwardWithPrimal, Reverse, ReverseWithPrimal, autodiff)


def _same(a, b):
    """Bit-identical results (values, dtypes, signed zeros, NaNs, None, Python types)."""
    if isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b), (a, b)
        for u, v in zip(a, b):
            _same(u, v)
        return
    if a is None or b is None:
        assert a is b, (a, b)
        return
    assert type(a) is type(b), (a, b)
    a1, b1 = np.asarray(a), np.asarray(b)
    assert a1.shape == b1.shape and a1.dtype == b1.dtype, (a, b)
    assert np.array_equal(a1, b1, equal_nan=True), (a, b)
    assert np.array_equal(np.signbit(a1.real), np.signbit(b1.real)), (a, b)


def _outcome(call):
    try:
        return "ok", call()
    except Exception as e:   # noqa: BLE001  (compared with eager mode's error)
        return "raised", (type(e), str(e))


def _fd(f, x, h=1e-6):
    x = np.asarray(x, float)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = h
        g[i] = (f(x + e) - f(x - e)) / (2 * h)
    return g


# --------------------------------------------------------------------------------------------
# tape.checkpoint inside a compiled function


def _checkpoint_then_primal(x):
    y = tape.checkpoint(np.tanh)(x)
    scale = float(np.sum(tape.primal(y)))   # a Python number from the checkpoint's result
    return np.sum(x ** 2) * scale


def _checkpoint_then_bool(x):
    s = tape.checkpoint(lambda h: np.sum(np.sin(h)))(x)
    if s:   # truth of the checkpoint's 0-d result
        return np.sum(x ** 2)
    return np.sum(x ** 3)


def _checkpoint_then_str(x):
    s = tape.checkpoint(lambda h: np.sum(np.sin(h)))(x)
    return np.sum(x ** 2) * len(str(s))


@pytest.mark.parametrize("f, points", [
    (_checkpoint_then_primal, [[1.0, 2.0], [1.0, 2.0], [2.0, 3.0]]),
    (_checkpoint_then_bool, [[1.0, 2.0], [1.0, 2.0], [3.0, -3.0]]),
    (_checkpoint_then_str, [[1.0, 2.0], [1.0, 2.0], [-1.0, -2.0]]),
], ids=["primal", "bool", "str"])
def test_python_read_of_a_checkpoint_result_is_not_replayed_stale(f, points):
    g = tape.compile(Reverse, f, Active, Active)
    for p in points:
        x = np.array(p)
        _same(g(Active(x.copy())), autodiff(Reverse, f, Active, Active(x.copy())))


def test_checkpoint_result_read_through_python_has_the_finite_difference_gradient_eagerly():
    x = np.array([2.0, 3.0])
    (g,), = autodiff(Reverse, _checkpoint_then_primal, Active, Active(x))
    # tape.primal cuts the scale's derivative: d/dx (sum x^2 * c) with c held
    c = float(np.sum(np.tanh(x)))
    np.testing.assert_allclose(g, _fd(lambda z: np.sum(z ** 2) * c, x), rtol=1e-8)


def _dropout(h):
    keep = np.random.rand(*h.shape) > 0.3
    return np.tanh(h) * keep


def _checkpointed_dropout(x):
    y = tape.checkpoint(_dropout)(x)
    return np.sum(y * y) + np.random.rand()   # a draw after the checkpoint too


def _scan_dropout(x, xs):
    def step(c, xi):
        c = np.tanh(c * xi) * (np.random.rand(*c.shape) > 0.2)
        return c, np.sum(c)
    c, ys = tape.checkpointed_scan(step, x, xs, every=2)
    return np.sum(c) + np.sum(ys)


@pytest.mark.parametrize("mode", [Reverse, ReverseWithPrimal])
def test_checkpoint_drawing_from_np_random_under_compile_equals_eager_and_rng_position(mode):
    x = np.linspace(-1.0, 1.0, 5)
    xs = np.arange(1.0, 6.0) / 3
    cases = [(_checkpointed_dropout, (Active,), lambda k: (Active(x * (k + 1)),)),
             (_scan_dropout, (Active, Const), lambda k: (Active(x * (k + 1)), Const(xs)))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for f, types_, args in cases:
            g = tape.compile(mode, f, Active, *types_)
            for k in (0, 0, 1, 2):
                np.random.seed(k)
                got = _outcome(lambda: g(*args(k)))
                after_compiled = np.random.rand()
                np.random.seed(k)
                want = _outcome(lambda: autodiff(mode, f, Active, *args(k)))
                after_eager = np.random.rand()
                assert got[0] == want[0] == "ok"
                _same(got[1], want[1])
                assert after_compiled == after_eager   # same stream position afterwards


def _writes_const_dict_then_checkpoints(x, cfg):
    s = 2.0 if cfg["training"] else 3.0
    cfg["training"] = False
    y = tape.checkpoint(np.tanh)(x)
    return s * np.sum(x * x) + np.sum(y)


def _appends_to_const_list_then_checkpoints(x, hist):
    hist.append(1.0)
    y = tape.checkpoint(np.tanh)(x)
    return float(len(hist)) * np.sum(x * x) + np.sum(y)


def _writes_const_dict_then_nests(x, cfg):
    s = 2.0 if cfg["training"] else 3.0
    cfg["training"] = False
    (gx,), = autodiff(Reverse, lambda z: np.sum(z ** 3), Active, Active(x))
    return s * np.sum(x * x) + np.sum(gx)


@pytest.mark.parametrize("f, fresh", [
    (_writes_const_dict_then_checkpoints, lambda: {"training": True}),
    (_appends_to_const_list_then_checkpoints, list),
    (_writes_const_dict_then_nests, lambda: {"training": True}),
], ids=["dict-checkpoint", "list-checkpoint", "dict-nested-autodiff"])
def test_a_stopped_trace_does_not_leave_writes_into_const_containers(f, fresh):
    x = np.array([0.3, -0.4])
    g = tape.compile(Reverse, f, Active, Active, Const)
    mine, theirs = fresh(), fresh()
    _same(g(Active(x.copy()), Const(mine)), autodiff(Reverse, f, Active, Active(x.copy()),
                                                        Const(theirs)))
    assert mine == theirs


def _writes_const_dict(x, cfg):
    s = 2.0 if cfg["training"] else 3.0
    cfg["training"] = False
    return s * np.sum(x * x)


def test_a_write_into_a_const_dict_argument_happens_on_replays_too():
    x = np.array([0.3, -0.4])
    g = tape.compile(Reverse, _writes_const_dict, Active, Active, Const)
    for _ in range(3):
        mine, theirs = {"training": True}, {"training": True}
        _same(g(Active(x.copy()), Const(mine)),
              autodiff(Reverse, _writes_const_dict, Active, Active(x.copy()), Const(theirs)))
        assert mine == theirs


# --------------------------------------------------------------------------------------------
# x / y: the derivative in y as -(g * ans) / y, compiled against eager in every mode


def _div_cases():
    r = np.array
    return {
        "broadcast": (lambda x, y: np.sum(np.sin(x / y) ** 2),
                      lambda k: r([-1.0, 0.0, 1.0]).reshape(3, 1) + k,
                      lambda k: r([0.5, -2.0, 3.0, 1e-3]) * (k + 1)),
        "zero-inf-nan": (lambda x, y: np.sum(x / y * 2),
                         lambda k: r([1.0, np.nan, np.inf, -0.0]) + k,
                         lambda k: r([0.0, 1.0, np.inf, -0.0]) * (k + 1)),
        "huge-tiny": (lambda x, y: np.sum(np.log(x / y)),
                      lambda k: r([1e300, 1e-300, 3.0]) * (k + 1),
                      lambda k: r([1e-10, 1e200, 1e160])),
        "0-d": (lambda x, y: x / y * x, lambda k: r(2.0 + k), lambda k: r(-3.0 + k)),
        "self": (lambda x, y: np.sum(x / x + y / (y * x)),
                 lambda k: r([1.0, 2.0, 0.0]) + k, lambda k: r([3.0, 1e200, 1e-200])),
        "float32": (lambda x, y: np.sum(x / y),
                    lambda k: r([1.0, -2.0, 3.0], np.float32) + k,
                    lambda k: r([1e-30, 2.0, 1e30], np.float32)),
    }


@pytest.mark.parametrize("name", list(_div_cases()))
def test_division_compiled_equals_eager_bitwise_in_every_mode(name):
    f, mx, my = _div_cases()[name]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for mode in (Reverse, ReverseWithPrimal):
            def batched(k):
                x, y = mx(k), my(k)
                return (BatchDuplicated(x, (np.zeros_like(x), np.ones_like(x))),
                        BatchDuplicated(y, (np.ones_like(y), np.full_like(y, 2.0))))
            for types_, args in [
                    ((Active, Active), lambda k: (Active(mx(k)), Active(my(k)))),
                    ((Const, Duplicated), lambda k: (Const(mx(k)),
                                                     Duplicated(my(k), np.ones_like(my(k))))),
                    ((BatchDuplicated, BatchDuplicated), batched)]:
                g = tape.compile(mode, f, Active, *types_)
                for k in (0, 0, 1, 2):
                    a, b = args(k), args(k)
                    _same(g(*a), autodiff(mode, f, Active, *b))
                    _same([getattr(v, "dval", None) for v in a],
                          [getattr(v, "dval", None) for v in b])
                assert g.stats.eager_calls == 0 and g.stats.traces == 1
        quotient = (lambda x, y: x / y)
        for mode in (Forward, ForwardWithPrimal):
            def dup(k):
                x, y = mx(k), my(k)
                return (Duplicated(x, np.full_like(x, 0.5)),
                        Duplicated(y, np.full_like(y, -1.5)))
            def bdup(k):
                x, y = mx(k), my(k)
                return (BatchDuplicated(x, (np.full_like(x, 0.5), np.ones_like(x))),
                        BatchDuplicated(y, (np.full_like(y, -1.5), np.full_like(y, 3e-200))))
            for fn in (f, quotient):
                for ret, args in [(Duplicated, dup), (DuplicatedNoNeed, dup),
                                  (BatchDuplicated, bdup)]:
                    g = tape.compile(mode, fn, ret, *(type(a) for a in args(0)))
                    for k in (0, 0, 1, 2):
                        _same(g(*args(k)), autodiff(mode, fn, ret, *args(k)))
                    assert g.stats.eager_calls == 0 and g.stats.traces == 1


@pytest.mark.parametrize("f, args", [
    (lambda x, y: np.sum(np.sin(x / y)), lambda k: (Active(np.linspace(-1, 1, 3) + k),
                                                    Active(0.5 + k))),
    (lambda x, y: np.sin(x / y), lambda k: (Active(1.5 + k), Active(0.0))),
    (lambda x, y: np.sum(np.sin(x / y)), lambda k: (Const(np.arange(3).reshape(3, 1) + k),
                                                    Active(np.array([1.0, -2.0, 1e-170])))),
    (lambda y: np.sum(3 / y), lambda k: (Active(np.array([1.0, -2.0, 1e-170, 0.0]) + k),)),
    (lambda x, y: np.sum(x / y), lambda k: (Active(np.array([1.0, -2.0, 3.0]) + k),
                                            Const(np.array([0, 2, -3])))),
    (lambda x, y: np.sum(np.abs(x / y) ** 2),
     lambda k: (Active(np.array([1 + 2j, -2j, 3.0]) + k),
                Active(np.array([1e-200j, 2 + 1j, 1e200])))),
    (lambda x, y: np.real(np.sum(x / y)),
     lambda k: (Active(np.array([1j, -2.0, 3.0], np.complex64) + k),
                Active(np.array([1.0, 2.0, 1e-20], np.complex64)))),
    (lambda x, y: np.real(np.sum(x / y)), lambda k: (Active(np.array([1j, -2.0, 3.0]) + k),
                                                     Active(1j + k))),
], ids=["python-float-divisor", "python-zero-divisor", "int-numerator-broadcast",
        "python-int-numerator", "int-divisor", "complex-abs", "complex64", "python-complex"])
def test_division_with_scalars_ints_and_complex_compiled_equals_eager(f, args):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for mode in (Reverse, ReverseWithPrimal):
            g = tape.compile(mode, f, Active, *(type(a) for a in args(0)))
            for k in (0, 0, 1, 2):
                _same(g(*args(k)), autodiff(mode, f, Active, *args(k)))
            assert g.stats.eager_calls == 0


def test_compiled_divisor_derivative_keeps_its_value_beyond_1e154():
    # d/dy sum(log(x / y)) = -1/y; the partial -ans/y alone underflows to 0 at y = 1e200
    f = lambda x, y: np.sum(np.log(x / y))
    y = np.array([1e200, 1e-200, 4.0])
    g = tape.compile(Reverse, f, Active, Const, Active)
    for k in range(3):
        (_, gy), = g(Const(np.ones(3) * (k + 1)), Active(y))
        np.testing.assert_allclose(gy, -1.0 / y, rtol=1e-15)
    np.testing.assert_allclose(g(Const(np.ones(3)), Active(np.array([3.0, 2.0, 4.0])))[0][1],
                               _fd(lambda z: f(np.ones(3), z), np.array([3.0, 2.0, 4.0])),
                               rtol=1e-7)


# --------------------------------------------------------------------------------------------
# Forward mode: the return activity guessed, annotated functions


def _argmax(x):
    return np.argmax(x)


def _positive(x):
    return x > 1.5


def _square_into(y, x):
    y[...] = x * x


@pytest.mark.parametrize("mode", [Forward, ForwardWithPrimal])
@pytest.mark.parametrize("f, args", [
    (_argmax, lambda k: (Duplicated(np.array([1.0, 2.0]) + k, np.ones(2)),)),
    (_positive, lambda k: (Duplicated(np.array([1.0, 2.0]) + k, np.ones(2)),)),
    (_square_into, lambda k: (Duplicated(np.zeros(2), np.zeros(2)),
                              Duplicated(np.array([1.0, 2.0]) + k, np.ones(2)))),
    (_argmax, lambda k: (BatchDuplicated(np.array([1.0, 2.0]) + k,
                                         (np.ones(2), np.zeros(2))),)),
], ids=["int-result", "bool-result", "in-place-None", "batched-int-result"])
def test_forward_compile_without_activities_guesses_a_const_return_as_eager(f, args, mode):
    g = tape.compile(mode, f)
    for k in (0, 0, 1):
        _same(g(*args(k)), autodiff(mode, f, *args(k)))


def test_forward_compile_with_explicit_returns_on_int_and_in_place_results_equals_eager():
    x = np.array([1.0, 2.0])
    for mode in (Forward, ForwardWithPrimal):
        for f, ret, args in [
                (_argmax, Const, lambda k: (Duplicated(x + k, np.ones(2)),)),
                (_argmax, Duplicated, lambda k: (Duplicated(x + k, np.ones(2)),)),
                (_square_into, Duplicated, lambda k: (Duplicated(np.zeros(2), np.zeros(2)),
                                                      Duplicated(x + k, np.ones(2))))]:
            g = tape.compile(mode, f, ret, *(type(a) for a in args(0)))
            for k in (0, 0, 1):
                a, b = args(k), args(k)
                _same(g(*a), autodiff(mode, f, ret, *b))
                _same([v.val for v in a] + [v.dval for v in a],
                      [v.val for v in b] + [v.dval for v in b])
            assert g.stats.eager_calls == 0


@pytest.mark.parametrize("mode, ret, arg", [
    (Reverse, Active, lambda: Active(np.array([1.0, 2.0]))),
    (Forward, Duplicated, lambda: Duplicated(np.array([1.0, 2.0]), np.ones(2))),
])
def test_compile_takes_a_const_annotated_function_as_autodiff_does(mode, ret, arg):
    f = (lambda x: np.sum(x * x)) if mode is Reverse else (lambda x: x * x)
    g = tape.compile(mode, Const(f), ret, type(arg()))
    _same(g(arg()), autodiff(mode, Const(f), ret, arg()))


def test_active_python_int_compiles_as_the_float_eager_mode_makes_of_it():
    for mode in (Reverse, ReverseWithPrimal):
        g = tape.compile(mode, lambda a, x: a * a * np.sum(x), Active, Active, Const)
        for k in (3, 3, 4, 5):
            x = np.array([1.0, 2.0])
            got = g(Active(k), Const(x))
            _same(got, autodiff(mode, lambda a, x: a * a * np.sum(x), Active, Active(k),
                                Const(x)))
            assert got[0][0] == 2.0 * k * 3.0


# --------------------------------------------------------------------------------------------
# `**` shortcuts: dtypes, in place on views, exponents from Const arguments


@pytest.mark.parametrize("exponent", [2, 0.5, -1, 3, 2.0, np.int64(2), np.float32(0.5)],
                         ids=["2", "0.5", "-1", "3", "2.0", "int64-2", "float32-0.5"])
@pytest.mark.parametrize("x", [
    np.array([1.5, 300.0, 1e-4], np.float16),
    np.array([1.1, 3e20, 1e-4], np.float32),
    np.array([1.1 + 1e-4j, -3e10j, 1e-4], np.complex64),
], ids=["float16", "float32", "complex64"])
def test_power_dtypes_compiled_equal_eager_and_numpy(x, exponent):
    f = lambda z: z ** exponent
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = tape.compile(ForwardWithPrimal, f, Duplicated, Duplicated)
        for k in (0, 0, 1):
            xk = (x + k).astype(x.dtype)
            got = g(Duplicated(xk, np.ones_like(xk)))
            _same(got, autodiff(ForwardWithPrimal, f, Duplicated,
                                Duplicated(xk, np.ones_like(xk))))
            _same(got[1], xk ** exponent)   # NumPy's own dtype and bits
        assert g.stats.eager_calls == 0


def _ipow_on_views(y, x):
    y[...] = x
    v = y[::2]
    v **= -1
    w = y.T
    w **= 2
    y[0] = y[0] ** 0.5


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex64])
@pytest.mark.parametrize("mode", [Reverse, ReverseWithPrimal, Forward, ForwardWithPrimal])
def test_in_place_power_on_views_compiled_equals_eager(dtype, mode):
    ret = Const if mode.kind == "reverse" else Duplicated

    def args(k):
        y = np.zeros((2, 2), dtype)
        x = (np.array([[4.0, -2.0], [3.0, 1e-3]]) * (k + 1)).astype(dtype)
        return Duplicated(y, np.ones_like(y)), Duplicated(x, np.full_like(x, 0.5))
    g = tape.compile(mode, _ipow_on_views, ret, Duplicated, Duplicated)
    for k in (0, 0, 1, 2):
        a, b = args(k), args(k)
        _same(g(*a), autodiff(mode, _ipow_on_views, ret, *b))
        _same([v.val for v in a] + [v.dval for v in a], [v.val for v in b] + [v.dval for v in b])
    assert g.stats.eager_calls == 0
    y, x = args(2)
    _ipow_on_views(y.val, x.val)
    _same(y.val, a[0].val)   # the written values are NumPy's


def test_power_exponent_from_a_const_argument_switching_between_2_2point0_and_3():
    x = np.array([1.1, -3e20, 1e-4], np.float32)
    fs = [lambda z, p: z ** p,
          lambda z, p: z ** int(p[0]) if np.ndim(p) else z ** p,
          lambda z, p: (lambda y: (y.__ipow__(p), y)[1])(z * 1)]
    sequence = [2, 2.0, 3, 2, 0.5, -1, -1.0, 2, True, np.int64(2), 2]
    with np.errstate(all="ignore"):
        for f in fs:
            for mode in (ForwardWithPrimal, ReverseWithPrimal):
                if mode.kind == "forward":
                    g = tape.compile(mode, f, Duplicated, Duplicated, Const)
                    ret, arg = Duplicated, lambda: Duplicated(x.copy(), np.ones_like(x))
                    fn = f
                else:
                    fn = (lambda f: lambda z, p: np.sum(f(z, p)))(f)
                    g = tape.compile(mode, fn, Active, Active, Const)
                    ret, arg = Active, lambda: Active(x.copy())
                ps = ([np.array([p]) for p in sequence] if f is fs[1] else sequence)
                for p in ps + ps[::-1]:
                    _same(g(arg(), Const(p)), autodiff(mode, fn, ret, arg(), Const(p)))
                assert g.stats.eager_calls == 0
