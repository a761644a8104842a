"""`tape.compile` against eager `autodiff`, thirteenth round: state a compiled function reads
through objects the watch does not look into (a `weakref.ref` back-reference to a parent
model, a bound method of a builtin container or array, a `contextvars.ContextVar`, a custom
descriptor, a memoryview), and user-style functions whose Python decisions, shapes and
in-place writes depend on the data.

Every call is compared with the same call through eager `autodiff` on fresh arguments, in
Reverse, ReverseWithPrimal, Forward, ForwardWithPrimal and batched forward / reverse modes,
over several calls with changing inputs (a program is confirmed by its second trace and
replayed from the third call on).
"""
import contextvars
import warnings
import weakref

import numpy as np
import pytest

import tape
from tape import (Active, BatchDuplicated, Const, Duplicated, Forward, ForwardWithPrimal,
                  Reverse, ReverseWithPrimal, autodiff)

MODES = {
    "Reverse": (Reverse, Active, "rev"),
    "ReverseWithPrimal": (ReverseWithPrimal, Active, "rev"),
    "Forward": (Forward, Duplicated, "fwd"),
    "ForwardWithPrimal": (ForwardWithPrimal, Duplicated, "fwd"),
    "BatchForward": (Forward, BatchDuplicated, "bfwd"),
    "BatchReverse": (Reverse, Active, "brev"),
}


def _close(a, b):
    if isinstance(a, (tuple, list)):
        assert isinstance(b, (tuple, list)) and len(a) == len(b), (a, b)
        for u, v in zip(a, b):
            _close(u, v)
        return
    if a is None or b is None:
        assert a is b, (a, b)
        return
    a1, b1 = np.asarray(a), np.asarray(b)
    assert a1.shape == b1.shape, (a, b)
    assert np.allclose(a1, b1, rtol=1e-12, atol=1e-300, equal_nan=True), (a, b)


def _annotate(kind, x):
    x = np.array(x, float)
    tangent = np.linspace(0.3, 1.7, x.size).reshape(x.shape)
    if kind == "rev":
        return Duplicated(x, np.zeros_like(x))
    if kind == "fwd":
        return Duplicated(x, tangent)
    if kind == "bfwd":
        return BatchDuplicated(x, (tangent, 2 * tangent))
    return BatchDuplicated(x, (np.zeros_like(x), np.zeros_like(x)))


def _activity(kind):
    return Duplicated if kind in ("rev", "fwd") else BatchDuplicated


def _shadows(a):
    return [a.val, list(a.dval) if isinstance(a, BatchDuplicated) else a.dval]


def _outcome(call):
    try:
        return "ok", call()
    except Exception as e:   # noqa: BLE001  (compared with eager mode's error)
        return "raised", (type(e), str(e))


def _compare(mode_name, f, calls, n_const=0, before=None):
    """calls: (differentiated arrays, Const values); `before(i)` changes state between calls."""
    mode, ret, kind = MODES[mode_name]
    g = tape.compile(mode, f, ret, *[_activity(kind)] * len(calls[0][0]), *[Const] * n_const)
    for i, (xs, cs) in enumerate(calls):
        if before is not None:
            before(i)
        a1 = [_annotate(kind, x) for x in xs]
        a2 = [_annotate(kind, x) for x in xs]
        r1 = _outcome(lambda: g(*a1, *[Const(np.copy(c)) for c in cs]))
        r2 = _outcome(lambda: autodiff(mode, f, ret, *a2, *[Const(np.copy(c)) for c in cs]))
        assert r1[0] == r2[0], (i, r1, r2)
        if r1[0] == "raised":
            assert r1[1] == r2[1], (i, r1, r2)
            continue
        _close(r1[1], r2[1])
        _close([_shadows(a) for a in a1], [_shadows(a) for a in a2])
    return g


def _points(seed, *shapes, n=7):
    rng = np.random.default_rng(seed)
    return [([rng.standard_normal(s) for s in shapes], []) for _ in range(n)]


_SCALES = [1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 1.5]
_ALL = list(MODES)


# --------------------------------------------------------------------------------------------
# State read through objects the watch does not walk: silent stale replays


class _Model:
    def __init__(self, head_class):
        self.temperature = 1.0
        self.head = head_class(self)


class _Head:
    """A layer holding a weak back-reference to its parent model (no reference cycle)."""

    def __init__(self, parent):
        self._parent = weakref.ref(parent)
        self.w = np.ones(3)

    def __call__(self, x):
        return np.sum(np.tanh(x * self.w) / self._parent().temperature)


class _ProxyHead(_Head):
    def __init__(self, parent):
        self._parent = weakref.proxy(parent)
        self.w = np.ones(3)

    def __call__(self, x):
        return np.sum(np.tanh(x * self.w) / self._parent.temperature)


def _model_calls(head_class, mode_name):
    model = _Model(head_class)

    def before(i):
        model.temperature = _SCALES[i]

    _compare(mode_name, model.head, _points(1, (3,)), before=before)


@pytest.mark.parametrize("mode_name", _ALL)
def test_a_parent_attribute_read_through_a_weakref(mode_name):
    _model_calls(_Head, mode_name)


@pytest.mark.parametrize("mode_name", ["Reverse", "Forward"])
def test_a_parent_attribute_read_through_a_weakref_proxy(mode_name):
    _model_calls(_ProxyHead, mode_name)


_CFG = {"s": 1.0}
_lookup = _CFG.get            # a bound method of a builtin: `builtin_function_or_method`
_W = np.ones(3)
_w_total = _W.sum


def _scaled_by_bound_dict_get(x):
    return np.sum(x ** 2) * _lookup("s")


def _scaled_by_bound_array_sum(x):
    return np.sum(x ** 2) * _w_total()


@pytest.mark.parametrize("mode_name", ["Reverse", "Forward", "BatchReverse"])
def test_a_dict_read_through_its_bound_get(mode_name):
    _compare(mode_name, _scaled_by_bound_dict_get, _points(2, (3,)),
             before=lambda i: _CFG.__setitem__("s", _SCALES[i]))


@pytest.mark.parametrize("mode_name", ["Reverse", "ForwardWithPrimal"])
def test_an_array_read_through_its_bound_sum(mode_name):
    _W[:] = 1.0
    _compare(mode_name, _scaled_by_bound_array_sum, _points(3, (3,)),
             before=lambda i: _W.__setitem__(0, _SCALES[i]))


_SCALE_VAR = contextvars.ContextVar("scale", default=1.0)


def _scaled_by_context_var(x):
    return np.sum(x ** 2) * _SCALE_VAR.get()


@pytest.mark.parametrize("mode_name", ["Reverse", "Forward"])
def test_a_context_variable_set_between_calls(mode_name):
    token = _SCALE_VAR.set(1.0)
    try:
        _compare(mode_name, _scaled_by_context_var, _points(4, (3,)),
                 before=lambda i: _SCALE_VAR.set(_SCALES[i]))
    finally:
        _SCALE_VAR.reset(token)


_DESC_CFG = {"s": 1.0}


class _FromConfig:
    """A descriptor whose __get__ reads a global dict."""

    def __get__(self, obj, cls):
        return _DESC_CFG["s"]


class _Layer:
    scale = _FromConfig()


_layer = _Layer()


def _scaled_by_descriptor(x):
    return np.sum(np.sin(x)) * _layer.scale


@pytest.mark.parametrize("mode_name", ["Reverse", "Forward"])
def test_a_custom_descriptor_reading_a_global(mode_name):
    _compare(mode_name, _scaled_by_descriptor, _points(5, (3,)),
             before=lambda i: _DESC_CFG.__setitem__("s", _SCALES[i]))


_MV_BASE = np.ones(1)
_MV = memoryview(_MV_BASE)


def _scaled_by_memoryview(x):
    return np.sum(x ** 2) * _MV[0]


def test_an_array_read_through_a_memoryview():
    _MV_BASE[0] = 1.0
    _compare("Reverse", _scaled_by_memoryview, _points(6, (3,)),
             before=lambda i: _MV_BASE.__setitem__(0, _SCALES[i]))


# --------------------------------------------------------------------------------------------
# Data-dependent decisions, shapes and in-place writes (passing: replays follow the values)


def _halve_until_small(x):
    y, k = x, 0
    while np.max(np.abs(y)) > 0.5:
        y = y / 2.0
        k += 1
    return np.sum(y ** 2) * (k + 1)


def _group_sums(x, c):
    u, inv = np.unique(c, return_inverse=True)
    out = 0.0
    for k in range(len(u)):
        out = out + np.sum(x[inv == k]) * (k + 1)
    return out


def _solve_or_lstsq(a, b):
    try:
        s = np.linalg.solve(a, b)
    except np.linalg.LinAlgError:
        s = np.linalg.lstsq(a, b, rcond=None)[0]
    return np.sum(s ** 2)


def _interleaved_views(x, y):
    z = np.zeros((4, 4))
    z[::2] += x
    w = z.T
    w[0] = y[0] * np.sum(x)
    z[1, ::2] = y[1:3] ** 2
    w[:, 3] *= z[0]
    return np.sum(z * np.arange(16.0).reshape(4, 4)) + np.sum(w ** 2)


def _window_at_argmax(x):
    k = np.argmax(x[:-2])
    return np.sum(x[k:k + 2] ** 2)


def _prefix_to_searchsorted(x):
    c = np.cumsum(np.abs(x))
    k = np.searchsorted(c, 1.0)
    return np.sum(x[:k + 1] ** 2)


def _masked_writes(x):
    y = np.zeros_like(x)
    m = x > 0
    y[m] = x[m] ** 2
    y[~m] = np.exp(x[~m])
    y[y > 0.5] *= 3.0
    return np.sum(y * np.arange(6.0))


def _sqrt_or_abs_under_warning_errors(x):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        try:
            y = np.sqrt(x)
        except RuntimeWarning:
            y = np.sqrt(np.abs(x))
    return np.sum(y)


def _pairwise_recursion(x):
    if x.shape[0] == 1:
        return x[0] ** 2
    mid = x.shape[0] // 2
    left, right = _pairwise_recursion(x[:mid]), _pairwise_recursion(x[mid:])
    return left * right if tape.primal(left) > tape.primal(right) else left + right


def _label_of_formatted_const(x, c):
    labels = {f"{v:.1f}": i for i, v in enumerate(c)}
    i = labels.get("1.0", 0)
    return np.sum(x * x[i])


def _singular_every_other(seed):
    rng = np.random.default_rng(seed)
    a = [rng.standard_normal((3, 3)) for _ in range(7)]
    a[2] = np.array([[1.0, 2, 3], [2, 4, 6], [0, 1, 1]])
    a[4] = np.diag([1.0, 0, 0])
    return [([a[i], rng.standard_normal(3)], []) for i in range(7)]


def _with_consts(points, consts):
    return [(xs, [c]) for (xs, _), c in zip(points, consts)]


_DATA_CASES = {
    "while": (_halve_until_small, lambda: [([np.array([1.0, 2, 3]) * s], [])
                                          for s in [1, 1, 0.1, 5, 0.3, 40, 1]], 0),
    "unique_groups": (_group_sums, lambda: _with_consts(_points(7, (5,)), [
        np.array(v) for v in ([0, 1, 1, 2, 0], [0, 1, 1, 2, 0], [3] * 5, [0, 1, 2, 3, 4],
                              [1, 0, 1, 0, 1], [0, 1, 1, 2, 0], [5, 1, 5, 1, 2])]), 1),
    "solve_or_lstsq": (_solve_or_lstsq, lambda: _singular_every_other(8), 0),
    "views": (_interleaved_views, lambda: _points(9, (4,), (4,)), 0),
    "argmax_window": (_window_at_argmax, lambda: _points(10, (6,)), 0),
    "searchsorted_prefix": (_prefix_to_searchsorted, lambda: _points(11, (6,)), 0),
    "masked_writes": (_masked_writes, lambda: _points(12, (6,)), 0),
    "warning_errors": (_sqrt_or_abs_under_warning_errors, lambda: [
        ([np.array(v)], []) for v in ([1.0, 2, 3], [1.0, 2, 3], [-1.0, 2, 3], [4.0, 2, 3],
                                      [4.0, -2, 3], [1.0, 5, 3], [1.0, 5, 3])], 0),
    "recursion": (_pairwise_recursion, lambda: _points(13, (5,)), 0),
    "formatted_labels": (_label_of_formatted_const, lambda: _with_consts(_points(14, (3,)), [
        np.array(v) for v in ([1.0, 2, 3], [1.0, 2, 3], [2.0, 1, 3], [0.0, 0, 1],
                              [2.0, 2, 2], [1.04, 2, 3], [1.06, 0.96, 3])]), 1),
}


@pytest.mark.parametrize("mode_name", _ALL)
@pytest.mark.parametrize("case", list(_DATA_CASES))
def test_data_dependent_user_functions(case, mode_name):
    f, calls, n_const = _DATA_CASES[case]
    _compare(mode_name, f, calls(), n_const=n_const)


def test_np_ix_of_computed_indices_is_inactive():
    # np.ix_ only builds index arrays; it had no rule (NotImplementedError when the indices
    # came from traced values through argsort).
    x = np.random.default_rng(9).standard_normal((4, 4))

    def f(x):
        return np.sum(x[np.ix_(np.argsort(x.sum(1))[:2], np.argsort(x.sum(0))[-2:])] ** 2)
    rows, cols = np.argsort(x.sum(1))[:2], np.argsort(x.sum(0))[-2:]
    want = np.zeros_like(x)
    want[np.ix_(rows, cols)] = 2 * x[np.ix_(rows, cols)]
    for mode in (Reverse, Forward):
        np.testing.assert_allclose(tape.gradient(mode, f, x)[0], want, rtol=1e-14)
