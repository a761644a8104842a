"""Red team: `tape.compile` in batched modes (BatchDuplicated in Forward / ForwardWithPrimal
and in Reverse / ReverseWithPrimal) on realistic functions, called many times with changing
values and a changing batch width W (1, 2, 5 and back), each call against eager batch mode on
fresh copies of the same arguments: values, returned tangents / derivatives and every shadow
(the W shadows of written buffers too), to 1e-12 relative.
"""
import copy
import dataclasses

import numpy as np
import pytest

import tape
from tape import (Active, BatchDuplicated, BatchDuplicatedNoNeed, Const, Duplicated, Forward,
                  ForwardWithPrimal, Reverse, ReverseWithPrimal, autodiff)

FW, FWP, RV, RVP = Forward, ForwardWithPrimal, Reverse, ReverseWithPrimal
WIDTHS = (1, 2, 5, 2, 1, 5)


def close(a, b, path="result"):
    if isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b), (path, a, b)
        for k, (x, y) in enumerate(zip(a, b)):
            close(x, y, f"{path}[{k}]")
    elif isinstance(a, dict):
        assert type(a) is type(b) and list(a) == list(b), path
        for k in a:
            close(a[k], b[k], f"{path}[{k!r}]")
    elif a is None or b is None:
        assert a is None and b is None, (path, a, b)
    elif isinstance(a, (bool, str)):
        assert a == b, (path, a, b)
    elif hasattr(a, "__dict__") and not isinstance(a, (np.ndarray, np.generic)):
        assert type(a) is type(b), (path, type(a), type(b))
        close(dict(vars(a)), dict(vars(b)), f"{path}.vars")
    else:
        assert type(a) is type(b), (path, type(a), type(b))
        x, y = np.asarray(a), np.asarray(b)
        assert x.shape == y.shape and x.dtype == y.dtype, (path, x.shape, y.shape)
        np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-12, err_msg=path)


def dirs(rng, width, x):
    """W directions in the structure of `x` (arrays, floats, dicts, lists)."""
    if isinstance(x, dict):
        per = {k: dirs(rng, width, v) for k, v in x.items()}
        return tuple({k: per[k][i] for k in x} for i in range(width))
    if isinstance(x, list):
        per = [dirs(rng, width, v) for v in x]
        return tuple([p[i] for p in per] for i in range(width))
    if isinstance(x, float):
        return tuple(float(rng.normal()) for _ in range(width))
    return tuple(rng.normal(size=np.shape(x)) for _ in range(width))


def bd(rng, width, x):
    return BatchDuplicated(x, dirs(rng, width, x))


def run(mode, f, ret, make_args, widths=WIDTHS, seed=0, expect_hits=True):
    """Compiled against eager on copies of make_args(rng, W) for W in `widths`."""
    rng = np.random.default_rng(seed)
    g = None
    for k, width in enumerate(widths):
        args = make_args(rng, width)
        if g is None:
            g = tape.compile(mode, f, ret, *[type(a) for a in args])
        mine, theirs = copy.deepcopy(args), copy.deepcopy(args)
        got = g(*mine)
        want = autodiff(mode, f, ret, *theirs)
        close(got, want, f"call {k} (W={width})")
        for i, (a, b) in enumerate(zip(mine, theirs)):
            close(a.val, b.val, f"call {k} (W={width}): argument {i}")
            if isinstance(b, Duplicated):
                close(a.dval, b.dval, f"call {k} (W={width}): shadow {i}")
    if expect_hits:
        assert g.stats.hits >= 1, g.stats
    return g


# -- realistic functions ----------------------------------------------------------------------

def mlp(params, x, y):
    h = np.tanh(x @ params["W1"] + params["b1"])
    z = h @ params["W2"] + params["b2"]
    m = np.max(z, axis=1, keepdims=True)
    lse = m + np.log(np.sum(np.exp(z - m), axis=1, keepdims=True))
    logp = z - lse
    return -np.mean(np.take_along_axis(logp, y[:, None], axis=1))


def _mlp_params(rng):
    return {"W1": rng.normal(size=(3, 4)), "b1": rng.normal(size=4),
            "W2": rng.normal(size=(4, 3)), "b2": rng.normal(size=3)}


def test_mlp_pytree_params_reverse():
    def args(rng, w):
        p = _mlp_params(rng)
        return [bd(rng, w, p), Const(rng.normal(size=(5, 3))),
                Const(rng.integers(0, 3, size=5))]
    run(RVP, mlp, Active, args)


def test_mlp_pytree_params_forward():
    def args(rng, w):
        p = _mlp_params(rng)
        return [bd(rng, w, p), bd(rng, w, rng.normal(size=(5, 3))),
                Const(rng.integers(0, 3, size=5))]
    run(FWP, mlp, BatchDuplicated, args)
    run(FW, mlp, BatchDuplicatedNoNeed, args, seed=1)


def inplace_stencil(out, x, c):
    # in-place writes through views of a buffer, a data-dependent branch
    out[0] = x[0]
    out[1:] = x[1:] * x[:-1]
    if x.sum() > 0:
        out *= c
    else:
        out += np.sin(x)
    out[::2] -= 0.5 * out[1::2] if out.shape[0] % 2 == 0 else 0.0


def test_inplace_buffer_views_and_branch_reverse():
    def args(rng, w):
        x = rng.normal(size=6) + (2.0 if w % 2 else -2.0)
        return [bd(rng, w, np.zeros(6)), bd(rng, w, x), Const(np.array(rng.uniform(1, 2)))]
    run(RV, inplace_stencil, Const, args)


def test_inplace_buffer_views_and_branch_forward():
    def args(rng, w):
        x = rng.normal(size=6) + (2.0 if w % 2 else -2.0)
        return [bd(rng, w, np.zeros(6)), bd(rng, w, x), Const(np.array(rng.uniform(1, 2)))]
    run(FW, inplace_stencil, Const, args)


def solve_loss(A, b, c):
    x = np.linalg.solve(A + 4.0 * np.eye(3), b)
    Ai = np.linalg.inv(A + 5.0 * np.eye(3))
    return np.sum(x * (Ai @ b)) + c * np.sum(np.sum(Ai, axis=0, keepdims=True) @ x)


def test_linalg_solve_inv_reverse():
    def args(rng, w):
        return [bd(rng, w, rng.normal(size=(3, 3))), bd(rng, w, rng.normal(size=3)),
                Active(float(rng.normal()))]
    run(RVP, solve_loss, Active, args)


def test_linalg_solve_inv_forward():
    def args(rng, w):
        return [bd(rng, w, rng.normal(size=(3, 3))), bd(rng, w, rng.normal(size=3)),
                bd(rng, w, float(rng.normal()))]
    run(FWP, solve_loss, BatchDuplicated, args)


def scatter_sorted(x, v, order_src):
    # integer indices from argsort of a Const, scatter via np.add.at
    idx = np.argsort(order_src)
    acc = np.zeros_like(x[:4])
    np.add.at(acc, idx[:5] % 4, x[idx[:5]] * v[:5])
    soft = np.exp(acc - np.max(acc))
    soft = soft / np.sum(soft)
    return soft * np.sum(x ** 2)


def test_scatter_add_at_argsort_const_forward():
    def args(rng, w):
        return [bd(rng, w, rng.normal(size=6)), bd(rng, w, rng.normal(size=6)),
                Const(rng.permutation(6).astype(float))]
    run(FWP, scatter_sorted, BatchDuplicated, args)


def test_scatter_add_at_argsort_const_reverse():
    def f(out, x, v, s):
        out[...] = scatter_sorted(x, v, s)

    def args(rng, w):
        return [bd(rng, w, np.zeros(4)), bd(rng, w, rng.normal(size=6)),
                bd(rng, w, rng.normal(size=6)), Const(rng.permutation(6).astype(float))]
    run(RVP, f, Const, args)


def logsumexp_keepdims(x, t):
    m = np.max(x, axis=-1, keepdims=True)
    lse = np.log(np.sum(np.exp(x - m), axis=-1, keepdims=True)) + m
    p = np.exp(x - lse)
    return np.sum(p * t, axis=0, keepdims=True) * np.mean(lse, axis=0, keepdims=True)


def test_softmax_logsumexp_keepdims_both_modes():
    def args_f(rng, w):
        return [bd(rng, w, rng.normal(size=(4, 5))), Const(rng.normal(size=(4, 5)))]
    run(FWP, logsumexp_keepdims, BatchDuplicated, args_f)

    def g(out, x, t):
        out[...] = logsumexp_keepdims(x, t)

    def args_r(rng, w):
        return [bd(rng, w, np.zeros((1, 5))), bd(rng, w, rng.normal(size=(4, 5))),
                Const(rng.normal(size=(4, 5)))]
    run(RV, g, Const, args_r)


@dataclasses.dataclass
class Model:
    scale: np.ndarray


def const_container(x, cfg, model):
    # Const containers: a dict of arrays / floats and an object with an attribute
    y = x * cfg["w"] + cfg["shift"]
    if cfg["flag"]:
        y = np.cos(y)
    return np.sum(y * model.scale, axis=0)


def test_const_containers_and_changing_widths():
    def args(rng, w):
        # a bool in a Const is part of the signature: it follows W so that both repeat
        cfg = {"w": rng.normal(size=(3, 2)), "shift": np.array(rng.normal()),
               "flag": w % 2 == 1}
        return [bd(rng, w, rng.normal(size=(3, 2))), Const(cfg),
                Const(Model(rng.normal(size=2)))]
    run(FWP, const_container, BatchDuplicated, args)

    def loss(x, cfg, model):
        return np.sum(const_container(x, cfg, model) ** 2)
    run(RVP, loss, Active, args)


def test_python_float_argument_with_w_tangents():
    def f(a, x):
        return a * np.sum(np.sin(a * x)) + a ** 2

    def args(rng, w):
        return [bd(rng, w, float(rng.normal())), bd(rng, w, rng.normal(size=3))]
    run(FWP, f, BatchDuplicated, args)
    run(FW, f, BatchDuplicatedNoNeed, args)

    def args_r(rng, w):
        return [Active(float(rng.normal())), bd(rng, w, rng.normal(size=3))]
    run(RVP, f, Active, args_r)


def test_w_changes_while_shapes_stay_same_values():
    # the same values, only W changes: a program for one W must not serve another
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 3))
    d5 = tuple(rng.normal(size=(2, 3)) for _ in range(5))

    def f(x):
        return np.exp(x) * x[::-1]
    g = tape.compile(FWP, f, BatchDuplicated, BatchDuplicated)
    for width in (5, 2, 1, 5, 2):
        got = g(BatchDuplicated(x.copy(), tuple(d.copy() for d in d5[:width])))
        want = autodiff(FWP, f, BatchDuplicated,
                        BatchDuplicated(x.copy(), tuple(d.copy() for d in d5[:width])))
        close(got, want)
    assert g.stats.hits >= 2, g.stats


def _view_shadows(rng, width, shape):
    """W shadows that are non-contiguous views of one base array."""
    base = rng.normal(size=(width, shape[1], 2 * shape[0]))
    return base, tuple(base[k].T[::2] for k in range(width))


def test_noncontiguous_view_shadows_reverse():
    def f(out, x, w):
        out[...] = np.tanh(x @ w)
        out[0] += np.sum(x)

    rng = np.random.default_rng(5)
    g = tape.compile(RV, f, Const, BatchDuplicated, BatchDuplicated, BatchDuplicated)
    for width in WIDTHS:
        x, w = rng.normal(size=(3, 4)), rng.normal(size=(4, 2))
        seeds = tuple(rng.normal(size=(3, 2)) for _ in range(width))
        results = []
        for call in (g, lambda *a: autodiff(RV, f, Const, *a)):
            bx, sx = _view_shadows(np.random.default_rng(width), width, (3, 4))
            sw = tuple(np.asfortranarray(np.ones((4, 2))) for _ in range(width))
            so = tuple(np.asfortranarray(s) for s in seeds)
            out = np.zeros((3, 2))
            call(BatchDuplicated(out, so), BatchDuplicated(x.copy(), sx),
                 BatchDuplicated(w.copy(), sw))
            results.append((out, so, bx, sw))
        close(results[0], results[1], f"W={width}")
    assert g.stats.hits >= 1, g.stats


def test_noncontiguous_view_shadows_forward_written_buffer():
    def f(out, x):
        out[...] = x[:, ::-1] ** 2
        out[:, 0] += np.sum(x, axis=1)

    rng = np.random.default_rng(6)
    g = tape.compile(FW, f, Const, BatchDuplicated, BatchDuplicated)
    for width in WIDTHS:
        x = rng.normal(size=(3, 4))
        tx = tuple(rng.normal(size=(4, 3)).T for _ in range(width))
        results = []
        for call in (g, lambda *a: autodiff(FW, f, Const, *a)):
            base = np.full((width, 4, 6), 7.0)
            sout = tuple(base[k].T[::2] for k in range(width))   # (3, 4) strided views
            out = np.zeros((3, 4))
            call(BatchDuplicated(out, sout), BatchDuplicated(x.copy(), tuple(t.copy() for t in tx)))
            results.append((out, base))
        close(results[0], results[1], f"W={width}")
    assert g.stats.hits >= 1, g.stats


def test_duplicated_return_with_batch_arguments():
    # a Duplicated (not BatchDuplicated) return annotation with batch arguments: eager mode
    # returns the W-tuple of tangents all the same; the compiled function must agree
    def f(x, w):
        return np.tanh(x @ w)

    def args(rng, width):
        return [bd(rng, width, rng.normal(size=(2, 3))), bd(rng, width, rng.normal(size=(3, 2)))]
    g = run(FWP, f, Duplicated, args)
    rng = np.random.default_rng(9)
    (tangents, _) = g(*args(rng, 5))
    assert type(tangents) is tuple and len(tangents) == 5


def test_compiled_batched_call_inside_outer_differentiation():
    # the inner compiled batched call runs eagerly under an outer Reverse: d/dx of
    # sum_k <t_k, J(x) v_k> with J(x) v_k the forward tangents of f
    def f(x):
        return np.sin(x) * x

    g = tape.compile(FW, f, BatchDuplicated, BatchDuplicated)
    rng = np.random.default_rng(2)

    def outer(x, v1, v2):
        (t1, t2), = g(BatchDuplicated(x, (v1, v2)))
        return np.sum(t1 * t1) + np.sum(t2)

    def outer_eager(x, v1, v2):
        (t1, t2), = autodiff(FW, f, BatchDuplicated, BatchDuplicated(x, (v1, v2)))
        return np.sum(t1 * t1) + np.sum(t2)

    for _ in range(3):
        x, v1, v2 = rng.normal(size=4), rng.normal(size=4), rng.normal(size=4)
        got = autodiff(RV, outer, Active, Active(x), Const(v1), Const(v2))
        want = autodiff(RV, outer_eager, Active, Active(x), Const(v1), Const(v2))
        close(got, want)
        # closed form: t1 = (cos x * x + sin x) v1
        d = np.cos(x) * x + np.sin(x)
        dd = -np.sin(x) * x + 2 * np.cos(x)
        expect = 2 * (d * v1) * (dd * v1) + dd * v2
        np.testing.assert_allclose(got[0][0], expect, rtol=1e-12, atol=1e-12)


def _run_shared(mode, f, ret, make_args, widths=(1, 2, 5, 2)):
    """As `run`, for arguments whose shadows share memory: one deepcopy per side keeps the
    sharing within the call."""
    rng = np.random.default_rng(0)
    g = None
    for width in widths:
        args = make_args(rng, width)
        if g is None:
            g = tape.compile(mode, f, ret, *[type(a) for a in args])
        mine, theirs = copy.deepcopy(args), copy.deepcopy(args)
        close(g(*mine), autodiff(mode, f, ret, *theirs), f"W={width}")
        for a, b in zip(mine, theirs):
            close(a.val, b.val, f"W={width}: argument")
            close(a.dval, b.dval, f"W={width}: shadow")
    assert g.stats.hits >= 1 and g.stats.eager_calls == 0, g.stats
    return g


def _sin3(o, x):
    o[...] = np.sin(x) * 3


@pytest.mark.parametrize("mode", [FW, RV])
def test_shadows_sharing_memory(mode):
    # the W seeds of a written buffer overlap each other, and each overlaps x's shadow k
    def args(rng, width):
        bases = [rng.normal(size=5) for _ in range(width)]
        seeds = rng.normal(size=3 + width)
        return [BatchDuplicated(np.zeros(3), tuple(seeds[k:k + 3] for k in range(width))),
                BatchDuplicated(rng.normal(size=3), tuple(b[2:] for b in bases))]
    _run_shared(mode, _sin3, Const, args)

    def same(rng, width):   # one array as every direction's shadow, and as the seeds' too
        d = rng.normal(size=3)
        return [BatchDuplicated(np.zeros(3), (d,) * width),
                BatchDuplicated(rng.normal(size=3), (d,) * width)]
    _run_shared(mode, _sin3, Const, same)


@pytest.mark.parametrize("mode", [FW, RV])
def test_read_modify_write_buffer_and_out_kwargs(mode):
    def f(o, x, p):
        o += np.sin(x) * o
        o[0] = o[-1] * x[0]
        np.multiply(o, p["w"], out=o)
        np.copyto(p["buf"][:2], np.exp(x[1:]))
        np.add(p["buf"], o, out=p["buf"])

    def args(rng, w):
        return [bd(rng, w, rng.normal(size=3)), bd(rng, w, rng.normal(size=3)),
                bd(rng, w, {"w": rng.normal(size=3), "buf": np.zeros(3)})]
    g = run(mode, f, Const, args)
    assert g.stats.eager_calls == 0, g.stats


def test_compiled_batched_reverse_inside_outer_forward():
    def inner(x):
        return np.sum(np.sin(x) * x)
    g = tape.compile(RV, inner, Active, BatchDuplicated)

    def outer(x, out):
        d1, d2 = np.zeros_like(x), np.zeros_like(x)
        g(BatchDuplicated(x, (d1, d2)))   # runs eagerly: writes the W shadows, traced
        out[...] = d1 * 2 + d2

    rng = np.random.default_rng(1)
    for _ in range(3):
        x, v = rng.normal(size=3), rng.normal(size=3)
        out, dout = np.zeros(3), np.zeros(3)
        autodiff(FW, outer, Const, Duplicated(x, v), Duplicated(out, dout))
        np.testing.assert_allclose(out, 3 * (np.cos(x) * x + np.sin(x)), rtol=1e-12)
        np.testing.assert_allclose(dout, 3 * (-np.sin(x) * x + 2 * np.cos(x)) * v,
                                   rtol=1e-12, atol=1e-12)
    assert g.stats.eager_calls == 3 and g.stats.traces == 0, g.stats


@pytest.mark.parametrize("mode", [FW, RV])
def test_index_writes_into_batched_buffers(mode):
    # put_along_axis with an argsort of a Const, np.add.at straight into a written buffer,
    # an argsort of the differentiated x itself, and a 0-d buffer
    def f(o, acc, s, x, c, idx):
        order = np.argsort(c, axis=1)
        np.put_along_axis(o, order, np.take_along_axis(x, order[:, ::-1], axis=1) ** 2, axis=1)
        np.add.at(acc, idx, x[0] * x[1])
        own = np.argsort(x[0])
        s[...] = np.sum(x[1][own] * np.arange(3.0))

    def args(rng, w):
        return [bd(rng, w, np.zeros((2, 3))), bd(rng, w, rng.normal(size=3)),
                bd(rng, w, np.array(0.0)), bd(rng, w, rng.normal(size=(2, 3))),
                Const(rng.normal(size=(2, 3))), Const(rng.integers(0, 3, size=3))]
    g = run(mode, f, Const, args)
    assert g.stats.eager_calls == 0, g.stats


# -- findings -------------------------------------------------------------------------------

def _layer_norm(x, gamma):
    mu = x.mean(axis=1, keepdims=True)
    return gamma * (x - mu) / (x.std(axis=1, keepdims=True) + 1e-5)


def test_std_does_not_retrace_on_every_call():
    def args(rng, w):
        return [bd(rng, w, rng.normal(size=(3, 4))), Const(rng.normal(size=4))]
    g = run(FWP, _layer_norm, BatchDuplicated, args, widths=(2, 2, 2, 2), expect_hits=False)

    def loss(x, gamma):
        return np.sum(_layer_norm(x, gamma) ** 2)
    h = run(RVP, loss, Active, args, widths=(2, 2, 2, 2), expect_hits=False)
    assert g.stats.traces == 1 and h.stats.traces == 1, (g.stats, h.stats)


def test_tape_logsumexp_does_not_retrace_on_every_call():
    from tape.scipy.special import logsumexp

    def f(x):
        return np.sum(logsumexp(x, axis=1, keepdims=True) * x)

    def args(rng, w):
        return [bd(rng, w, rng.normal(size=(3, 4)))]
    g = run(RVP, f, Active, args, widths=(2, 2, 2, 2), expect_hits=False)
    h = run(FWP, f, BatchDuplicated, args, widths=(2, 2, 2, 2), expect_hits=False)
    assert g.stats.traces == 1 and h.stats.traces == 1, (g.stats, h.stats)
