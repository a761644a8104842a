"""Property test of `tape.compile`: generated programs, compiled once and called several times
with different argument values, must return and write exactly what eager `tape.autodiff` does
on fresh copies of the same arguments (primal, derivatives, shadows, written buffers).

The programs mix elementwise ops, matmul, reductions, views, slicing reads, in-place writes
(into `np.zeros_like` buffers, Duplicated buffers and Duplicated pytree leaves), boolean masks,
argmax indices, Python branches on values and loops whose count comes from a Const array, so
that successive calls hit replays, fail guards and retrace.
"""
from __future__ import annotations

import copy
import types
import warnings

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tape
from tape import Active, Const, Duplicated, Reverse, ReverseWithPrimal

SHAPE = (3, 4)
RTOL, ATOL = 1e-10, 1e-12


# --------------------------------------------------------------------------------------------
# The op vocabulary. Each step maps (x, env) -> x' with x of shape (3, 4); env holds the other
# arguments: a (Active float or (4,) array), W (4, 4), n (Const int array), c (Const float),
# buf (Duplicated (3, 4), written in place) and p (Duplicated dict or list: w (4,), b (3, 1)).


def _w(p):
    return p["w"] if isinstance(p, dict) else p[0]


def _b(p):
    return p["b"] if isinstance(p, dict) else p[1]


def _zeros_write(x, e):
    out = np.zeros_like(x)
    out[1:] = x[:-1] * 2.0
    out[0, ::2] = np.sin(x[2, ::2])
    out[:, 3] += x[:, 0]
    return out


def _view_write(x, e):
    out = np.zeros_like(x)
    view = out[:, 1:]
    view[...] = x[:, :-1]
    view *= 1.5
    out[:, 0] = x[:, 3]
    return out


def _buf_row(x, e):
    e["buf"][1] = x[2] * e["a"]
    return x + 0.5 * e["buf"]


def _buf_augment(x, e):
    e["buf"][:] += np.sin(x)
    return x * np.tanh(e["buf"])


def _buf_view(x, e):
    view = e["buf"][1:, ::2]
    view *= np.tanh(x[:2, ::2])
    return x + e["buf"]


def _mask_write(x, e):
    out = np.zeros_like(x)
    mask = x > 0.1
    out[mask] = np.sin(x[mask])
    return out + 0.5 * x


def _branch(x, e):
    if x.sum() > 0:
        return np.sin(x)
    return x * 0.5


def _branch_max(x, e):
    if np.max(x) > 1.0:
        return x / np.max(x)
    return x + 0.1


def _loop(x, e):
    for _ in range(int(e["n"][0])):
        x = np.tanh(x @ e["W"]) + 0.5 * x
    return x


def _param(x, e):
    return x * _w(e["p"]) + _b(e["p"])


def _param_write(x, e):
    b = _b(e["p"])
    b[0] = np.sum(x[0]) * 0.1
    b *= 0.9
    return x - b


STEPS = {
    "sin": lambda x, e: np.sin(x),
    "exp": lambda x, e: np.exp(np.tanh(x)),
    "tanh": lambda x, e: np.tanh(1.3 * x),
    "log1p_square": lambda x, e: np.log(1.0 + x ** 2),
    "mul_active": lambda x, e: x * e["a"],
    "add_row": lambda x, e: x + e["W"][1],
    "sub": lambda x, e: x - np.tanh(x[::-1]),
    "div": lambda x, e: x / (1.0 + x ** 2),
    "square": lambda x, e: np.tanh(x) ** 2 - 0.5 * x,
    "maximum": lambda x, e: np.maximum(x, 0.2 * e["a"]),
    "where": lambda x, e: np.where(x > e["c"], np.tanh(x) * x, -x),
    "matmul": lambda x, e: np.tanh(0.5 * (x @ e["W"])),
    "centre": lambda x, e: x - x.mean(axis=0),
    "normalise_rows": lambda x, e: x / (1.0 + np.sum(x * x, axis=1, keepdims=True)),
    "reshape_view": lambda x, e: (x.reshape(2, 6)[:, ::-1] * 1.5).reshape(3, 4),
    "transpose_view": lambda x, e: x.T[::-1].T + x.T.T,
    "gather_rows": lambda x, e: x[[2, 0, 1]] * x[:, :1],
    "const_scale": lambda x, e: x * e["c"] + 1.0,
    "mask_sum": lambda x, e: x + 0.1 * np.sum(x[x > 0]),
    "argmax_flat": lambda x, e: x * 0.5 * x.ravel()[np.argmax(x)],
    "argmax_row": lambda x, e: x + x[np.argmax(x.sum(axis=1))],
    "zero_d_product": lambda x, e: x * np.sum(x) * 0.1 + x[1, 2],
    "zeros_write": _zeros_write,
    "view_write": _view_write,
    "buf_row": _buf_row,
    "buf_augment": _buf_augment,
    "buf_view": _buf_view,
    "mask_write": _mask_write,
    "branch": _branch,
    "branch_max": _branch_max,
    "loop": _loop,
    "param": _param,
    "param_write": _param_write,
}


def make_function(steps, ret):
    """The program as a function of (x, a, W, n, c, buf, p)."""
    def f(x, a, W, n, c, buf, p):
        env = {"a": a, "W": W, "n": n, "c": c, "buf": buf, "p": p}
        for name in steps:
            x = STEPS[name](x, env)
        if ret is Active:
            return np.sum(np.sin(x)) + 0.5 * np.sum(buf * buf) + np.sum(_w(p))
        return x
    return f


# --------------------------------------------------------------------------------------------
# Arguments: values drawn per call, annotated as fresh copies for each side.

Spec = types.SimpleNamespace


def draw_values(rng, spec, c, n, x=None):
    values = {
        "x": rng.uniform(-2.0, 2.0, SHAPE) if x is None else x,
        "a": (float(rng.uniform(-1.5, 1.5)) if spec.a_kind == "float"
              else rng.uniform(-1.5, 1.5, (4,))),
        "W": rng.uniform(-1.0, 1.0, (4, 4)),
        "n": np.array([n]),
        "c": c,
        "buf": rng.uniform(-1.0, 1.0, SHAPE),
        "p_w": rng.uniform(-1.0, 1.0, (4,)),
        "p_b": rng.uniform(-1.0, 1.0, (3, 1)),
    }
    return values


def draw_shadows(rng):
    """Nonzero initial shadows: Duplicated accumulates into them (and a written buffer's
    shadow is its cotangent seed)."""
    return {"x": rng.normal(size=SHAPE), "W": rng.normal(size=(4, 4)),
            "buf": rng.normal(size=SHAPE), "p_w": rng.normal(size=(4,)),
            "p_b": rng.normal(size=(3, 1))}


def _pytree(kind, w, b):
    return {"w": w, "b": b} if kind == "dict" else [w, b]


def annotate(spec, values, shadows):
    v, s = copy.deepcopy(values), copy.deepcopy(shadows)
    return [
        Duplicated(v["x"], s["x"]),
        Active(v["a"]),
        Duplicated(v["W"], s["W"]) if spec.W_activity is Duplicated else Const(v["W"]),
        Const(v["n"]),
        Const(v["c"]),
        Duplicated(v["buf"], s["buf"]),
        Duplicated(_pytree(spec.p_kind, v["p_w"], v["p_b"]),
                   _pytree(spec.p_kind, s["p_w"], s["p_b"])),
    ]


def assert_same(got, want, where="result"):
    """Same structure, types, shapes, dtypes, and values to float64 tolerances."""
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), f"{where}: {type(got)} against an array"
        assert got.shape == want.shape and got.dtype == want.dtype, (
            f"{where}: {got.shape} {got.dtype} against {want.shape} {want.dtype}")
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=where)
    elif isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want), f"{where}: {got!r} {want!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{where}[{i}]")
    elif isinstance(want, dict):
        assert type(got) is dict and got.keys() == want.keys(), f"{where}: {got!r} {want!r}"
        for k in want:
            assert_same(got[k], want[k], f"{where}[{k!r}]")
    elif want is None:
        assert got is None, f"{where}: {got!r} against None"
    else:
        assert type(got) is type(want), f"{where}: {type(got)} against {type(want)}"
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=where)


def run_both(g, mode, f, ret, compiled_args, eager_args):
    """Call the compiled and the eager function; return both outcomes (value or error)."""
    outcomes = []
    for call in (lambda: g(*compiled_args),
                 lambda: tape.autodiff(mode, f, ret, *eager_args)):
        try:
            outcomes.append(("ok", call()))
        except Exception as e:   # noqa: BLE001  (errors must match too)
            outcomes.append(("error", e))
    return outcomes


def compare_call(g, spec, f, compiled_args, eager_args, label):
    (kind_c, got), (kind_e, want) = run_both(g, spec.mode, f, spec.ret, compiled_args,
                                             eager_args)
    if kind_e == "error" or kind_c == "error":
        assert (kind_c, type(got)) == (kind_e, type(want)), (
            f"{label}: compiled gave {kind_c} {got!r}, eager gave {kind_e} {want!r}")
        assert str(got) == str(want), label
        return
    assert_same(got, want, f"{label}: returned")
    for i, (a, b) in enumerate(zip(compiled_args, eager_args)):
        assert_same(a.val, b.val, f"{label}: argument {i} value")
        if isinstance(b, Duplicated):
            assert_same(a.dval, b.dval, f"{label}: argument {i} shadow")


# --------------------------------------------------------------------------------------------
# The property


def specs(step_names, a_kinds=("float", "array")):
    return st.builds(
        Spec,
        steps=st.lists(st.sampled_from(sorted(step_names)), min_size=1, max_size=5).map(tuple),
        mode=st.sampled_from([Reverse, ReverseWithPrimal]),
        ret=st.sampled_from([Active, Active, Const]),
        a_kind=st.sampled_from(a_kinds),
        W_activity=st.sampled_from([Const, Duplicated]),
        p_kind=st.sampled_from(["dict", "list"]),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=specs(STEPS),
       seed=st.integers(0, 2 ** 32 - 1),
       cs=st.lists(st.sampled_from([-0.3, 0.0, 0.4]), min_size=3, max_size=3),
       ns=st.lists(st.integers(0, 2), min_size=3, max_size=3))
def test_compiled_program_matches_eager(spec, seed, cs, ns):
    """One compiled function, five calls with changing values (the last two on the same
    objects), each compared with eager autodiff on copies of the same arguments."""
    f = make_function(spec.steps, spec.ret)
    g = tape.compile(spec.mode, f, spec.ret, Duplicated, Active, spec.W_activity, Const, Const,
                     Duplicated, Duplicated)
    rng = np.random.default_rng(seed)

    first = draw_values(rng, spec, cs[0], ns[0])
    calls = [first,
             # the opposite x flips branches on sums and masks
             draw_values(rng, spec, cs[1], ns[1], x=-first["x"] + rng.normal(0, 0.1, SHAPE)),
             draw_values(rng, spec, cs[2], ns[2]),
             first]   # the first values again: a replay without a new trace
    with warnings.catch_warnings():
        warnings.simplefilter("error", tape.CompileWarning)   # nothing here draws randomly
        for k, values in enumerate(calls):
            shadows = draw_shadows(rng)
            compiled_args = annotate(spec, values, shadows)
            eager_args = annotate(spec, values, shadows)
            compare_call(g, spec, f, compiled_args, eager_args, f"call {k}")
            if k == len(calls) - 1:   # again on the same objects: shadows accumulate
                compare_call(g, spec, f, compiled_args, eager_args, f"call {k}, again")

    stats = g.stats
    assert stats.traces >= 1
    assert stats.hits + stats.eager_calls + stats.traces >= len(calls) + 1
    assert not [r for r in stats.eager_reasons if r.startswith("tracing failed")], \
        stats.eager_reasons
