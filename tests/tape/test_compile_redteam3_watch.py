"""`tape.compile` against eager `autodiff`, third round, what the function reads besides its
arguments: weights in container subclasses (an OrderedDict state dict, namedtuples), sets and
buffers, a model's weights six attributes deep, the globals read by the methods of the objects
it calls and by a user module's functions, objects whose attribute lookup raises, a custom
rule's bookkeeping, and a cache the function fills once. Every change is made after the
program was confirmed (calls 0 and 1 alike), so a stale replay would show.
"""
import array
import collections
import types

import numpy as np
import pytest

import tape
from tape import Const, Duplicated
from compile_sequences import sequences as _sequences
from test_compile_redteam3 import _rng

_ParamsTuple = collections.namedtuple("_ParamsTuple", "w b")


def _container(kind):
    w, b = np.ones(3), np.zeros(3)
    if kind == "OrderedDict":
        return collections.OrderedDict(w=w, b=b)
    if kind == "defaultdict":
        params = collections.defaultdict(float)
        params.update(w=w, b=b)
        return params
    if kind == "namedtuple":
        return _ParamsTuple(w, b)
    return collections.deque([w, b])


def _item(params, name):
    if isinstance(params, (tuple, collections.deque)):
        return params[0 if name == "w" else 1]
    return params[name]


@pytest.mark.parametrize("kind", ["OrderedDict", "defaultdict", "namedtuple", "deque"])
@pytest.mark.parametrize("how", ["in place", "rebound"])
def test_parameters_in_a_container_subclass_updated_after_confirmation(kind, how):
    """A state dict (OrderedDict), a namedtuple of weights...: read from the closure and
    updated by an optimizer step after the program was confirmed. Only exact lists, tuples
    and dicts were watched: the replay kept the old weights."""
    def setup():
        params = _container(kind)

        def f(x):
            return np.sum(np.tanh(x * _item(params, "w")) + _item(params, "b"))

        def make_args(c):
            if c:
                if how == "in place" or kind == "namedtuple":
                    _item(params, "w")[...] -= 0.1 * c
                    _item(params, "b")[0] = c
                elif kind == "deque":
                    params[0] = params[0] - 0.1 * c
                else:
                    params["w"] = params["w"] - 0.1 * c
            return [Duplicated(_rng(c).normal(size=3), np.zeros(3))]
        return f, make_args
    _sequences(setup, [0, 0, 0, 1, 2, 2, 3])


def test_a_bound_method_reading_an_ordered_dict_of_weights():
    class Model:
        def __init__(self):
            self.state = collections.OrderedDict(w=np.ones(3), s=1.0)

        def loss(self, x):
            return np.sum((x * self.state["w"]) ** 2) * self.state["s"]

    def setup():
        model = Model()

        def make_args(c):
            if c == 1:
                model.state["w"] *= 1.5
            elif c == 2:
                model.state["s"] = 0.5
            return [Duplicated(_rng(c).normal(size=3), np.zeros(3))]
        return model.loss, make_args
    _sequences(setup, [0, 0, 0, 1, 1, 2, 2])


def test_a_dict_subclass_with_attributes():
    class Config(dict):
        pass

    def setup():
        cfg = Config(w=np.ones(3))
        cfg.scale = 1.0

        def f(x):
            return np.sum(x * cfg["w"]) * cfg.scale

        def make_args(c):
            if c:
                cfg.scale = 1.0 + c
            return [Duplicated(_rng(c).normal(size=3), np.zeros(3))]
        return f, make_args
    _sequences(setup, [0, 0, 0, 1, 2])


@pytest.mark.parametrize("kind", ["set", "bytearray", "array"])
def test_a_set_or_buffer_it_reads_changed_after_confirmation(kind):
    def setup():
        skipped = {1}
        scale = bytearray(b"\x01") if kind == "bytearray" else array.array("d", [1.0])

        def f(x, n):
            y = x
            for i in range(n):
                if kind == "set" and i in skipped:
                    continue
                y = np.sin(y)
            return np.sum(y) * scale[0]

        def make_args(c):
            if c:
                skipped.add(c)
                scale[0] = c + 1
            return [Duplicated(_rng(c).normal(size=3), np.zeros(3)), Const(4)]
        return f, make_args
    _sequences(setup, [0, 0, 0, 2, 2, 3])


class _Linear:
    def __init__(self, seed):
        self.weight = _rng(seed).normal(size=(3, 3))
        self.bias = np.zeros(3)

    def __call__(self, h):
        return h @ self.weight + self.bias


class _Attention:
    def __init__(self, seed):
        self.query, self.key = _Linear(seed), _Linear(seed + 1)

    def __call__(self, h):
        return np.tanh(self.query(h) * self.key(h))


class _Block:
    def __init__(self, seed):
        self.attention, self.mlp = _Attention(seed), _Linear(seed + 5)

    def __call__(self, h):
        return h + self.mlp(self.attention(h))


class _Encoder:
    def __init__(self):
        self.blocks = [_Block(k) for k in range(2)]


class _Model:
    def __init__(self):
        self.encoder = _Encoder()

    def loss(self, x):
        h = x
        for block in self.encoder.blocks:
            h = block(h)
        return np.sum(h ** 2)

    def parameters(self):
        for block in self.encoder.blocks:
            yield from (block.attention.query.weight, block.attention.key.bias, block.mlp.weight)


@pytest.mark.parametrize("how", ["in place", "rebound"])
@pytest.mark.parametrize("as_closure", [False, True], ids=["bound method", "closure"])
def test_weights_six_attributes_deep_updated_between_calls(how, as_closure):
    """`model.encoder.blocks[i].attention.query.weight`, updated by an optimizer step outside
    the function: the watch stopped three steps deep, and the replay kept the old weights."""
    def setup():
        model = _Model()

        def make_args(c):
            if c:
                if how == "in place":
                    for p in model.parameters():
                        p -= 0.01 * c
                else:
                    for block in model.encoder.blocks:
                        block.attention.query.weight = block.attention.query.weight * 0.9
            return [Duplicated(_rng(c).normal(size=(2, 3)), np.zeros((2, 3)))]
        f = model.loss if not as_closure else (lambda x: model.loss(x))
        return f, make_args
    _sequences(setup, [0, 0, 0, 1, 2, 3])


SCALE = 1.0


class _Scaled:
    def __init__(self):
        self.weight = np.ones(3)

    def __call__(self, h):
        return h * self.weight * SCALE

    @property
    def effective(self):
        return self.weight * SCALE

    @staticmethod
    def activation(h):
        return np.tanh(h) * SCALE


def test_a_global_read_by_the_methods_of_an_object_it_calls():
    """The globals of a method reached through an object (`layer(x)`, a property, a static
    method) were not watched: changing the module-level SCALE replayed the old one."""
    def setup():
        global SCALE
        SCALE = 1.0
        layer = _Scaled()

        def f(x):
            return np.sum(layer(x)) + np.sum(layer.effective) + np.sum(_Scaled.activation(x))

        def make_args(c):
            global SCALE
            if c:
                SCALE = 1.0 + c
            return [Duplicated(_rng(c).normal(size=3), np.zeros(3))]
        return f, make_args
    _sequences(setup, [0, 0, 0, 1, 2])


_CONFIG = None   # a user module as a global (set by the test)


def _config_module():
    module = types.ModuleType("redteam3_config")
    exec("import numpy as np\nK = 1.0\nW = np.ones(3)\n"
         "def scaled(x):\n    return x * K\n", module.__dict__)
    return module


@pytest.mark.parametrize("reached", ["closure", "global"])
def test_a_user_module_read_through_its_function(reached):
    """`config.scaled(x)` reads `config.K`: the module's function was watched by identity
    only, so a new K replayed the old one. A module in a closure (imported inside a factory)
    was walked as an object, attribute by attribute."""
    def setup():
        config = _config_module()
        globals()["_CONFIG"] = config

        def f_closure(x):
            return np.sum(config.scaled(x) * config.W)

        def f_global(x):
            return np.sum(_CONFIG.scaled(x) * _CONFIG.W)

        def make_args(c):
            if c == 1:
                config.K = 3.0
            elif c == 2:
                config.W *= 2.0
            elif c == 3:
                config.W = np.full(3, 5.0)
            return [Duplicated(_rng(c).normal(size=3), np.zeros(3))]
        return (f_closure if reached == "closure" else f_global), make_args
    _sequences(setup, [0, 0, 0, 1, 1, 2, 3])


def test_a_closure_module_with_an_attribute_loader_that_raises():
    """`ctypes` in a closure: walking it reached `ctypes.cdll`, whose attribute lookup loads
    a library and raised OSError out of the compiled call."""
    import ctypes

    def setup():
        def f(x):
            return np.sum(x ** 2) * ctypes.sizeof(ctypes.c_double)
        return f, lambda c: [Duplicated(_rng(c).normal(size=3), np.zeros(3))]
    _sequences(setup, [0, 0, 1, 2])


def test_an_object_whose_attribute_lookup_raises_does_not_break_the_call():
    class Loader:
        def __getattr__(self, name):
            raise OSError(f"cannot load {name}")

    def setup():
        loader = Loader()
        holder = {"loader": loader, "w": np.ones(3)}

        def f(x):
            return np.sum(x * holder["w"])
        return f, lambda c: [Duplicated(_rng(c).normal(size=3), np.zeros(3))]
    _sequences(setup, [0, 0, 1, 2])


RULE_SCALE = {"k": 1.0}


def _scaled_sine(x):
    return np.sin(x) * RULE_SCALE["k"]


_scaled_sine_rule = tape.custom_rule(
    _scaled_sine, augmented_primal=lambda cfg, x: (np.sin(x) * RULE_SCALE["k"], x),
    reverse=lambda cfg, x, g: (np.cos(x) * RULE_SCALE["k"] * g,))


def test_a_custom_rule_reading_a_global_stays_compiled_and_sees_it():
    """The rule's own bookkeeping (the shapes it checked, a set the first call fills) is not
    the function's state: the signature stays compiled, and a new scale traces again."""
    def setup():
        RULE_SCALE["k"] = 1.0

        def f(x):
            return np.sum(_scaled_sine_rule(x) ** 2)

        def make_args(c):
            if c:
                RULE_SCALE["k"] = 1.0 + c
            return [Duplicated(_rng(c).normal(size=3), np.zeros(3))]
        return f, make_args
    g = _sequences(setup, [0, 0, 0, 1, 2, 2])
    assert g.stats.eager_calls == 0 and g.stats.hits >= 3, g.stats


_MASKS = {}


class _CausalScores:
    def mask(self, n):
        if n not in _MASKS:   # a cache of masks per length, filled on first use
            _MASKS[n] = np.tril(np.ones((n, n)))
        return _MASKS[n]

    def __call__(self, q):
        return np.sum(np.where(self.mask(q.shape[0]) > 0, q @ q.T, 0.0) ** 2)


def test_a_mask_cache_filled_by_the_first_call_is_not_a_counter():
    """A method filling a module-level cache of causal masks changes what the function reads
    at the first call of each length only: correct at every call, and compiled afterwards
    (the first change used to make the signature eager for good)."""
    def setup():
        _MASKS.clear()
        scores = _CausalScores()

        def make_args(c):
            n = 3 if c == 3 else 4
            return [Duplicated(_rng(c).normal(size=(n, 2)), np.zeros((n, 2)))]
        return (lambda q: scores(q)), make_args
    g = _sequences(setup, [0, 1, 2, 4, 5, 3, 3, 3, 3])
    assert g.stats.hits >= 3, g.stats


def test_an_assert_that_pytest_rewrote_does_not_put_the_test_session_in_the_watch():
    """pytest rewrites `assert` into calls of its helpers (`@pytest_ar._call_reprcompare`);
    the watch walked them into the session's state: 36,795 values (60 ms a trace) by the end
    of this suite. Test frameworks are libraries, not the user's state."""
    def f(x):
        y = np.sin(x)
        assert y.shape == x.shape, "same shape"
        return np.sum(y)
    g = tape.compile(tape.Reverse, f, tape.Active, Duplicated)
    for _ in range(2):
        g(Duplicated(np.ones(3), np.zeros(3)))
    watched = [what for entry in g._cache.values() if not isinstance(entry, str)
               for compiled in entry for what, _, _ in compiled.watched]
    assert len(watched) < 10, watched[:20]
