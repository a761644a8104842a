"""`tape.compile` with BatchDuplicated arguments (batched ForwardWithPrimal and
ReverseWithPrimal) on functions that write in place: into the batched argument (an index, a
mask, an integer index split by a slice, `np.copyto(..., where=)`, `+=`), into intermediates
through views (`y.T[...]`, a column, a reshape), `np.add.at`, cumulative ops, reductions with
`where=`, matmul / einsum, `solve` / `inv` and custom rules (vectorized or not). Each compiled
function is called with new values three times at one width, then at other widths (1, 2, 3);
every lane of every call must equal the unbatched `Duplicated` call with that shadow, and the
compiled call must equal eager batch mode. A `Const` argument changes at every call, including
`Const` index arrays, masks and `where=` arrays that decide which entries a write touches.
"""
import numpy as np
import pytest

import tape
from tape import (Active, BatchDuplicated, Const, Duplicated, ForwardWithPrimal,
                  ReverseWithPrimal, autodiff)

WIDTHS = (2, 2, 2, 1, 3)
TOL = {np.float64: 1e-10, np.float32: 2e-4}


def _close(got, want, dtype, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=TOL[dtype], atol=TOL[dtype], err_msg=what)


def _scalar(body):
    """The reverse-mode function: a weighted sum of the body's array result."""
    def f(x, c):
        y = body(x, c)
        return np.sum(y * np.cos(np.arange(np.size(y)) + 0.3).reshape(np.shape(y)))
    return f


def _run(mode, body, make_x, make_c, dtype, seed):
    """Calls the compiled function WIDTHS times; checks compiled == eager batch == each lane."""
    rng = np.random.default_rng(seed)
    if mode == "rev":
        f, kind, ret, lane_ret = _scalar(body), ReverseWithPrimal, Active, Active
    else:
        f, kind, ret, lane_ret = body, ForwardWithPrimal, BatchDuplicated, Duplicated
    g = tape.compile(kind, f, ret, BatchDuplicated, Const)
    for call, width in enumerate(WIDTHS):
        x, c = make_x(rng).astype(dtype), make_c(rng)
        if isinstance(c, np.ndarray) and c.dtype.kind == "f":
            c = c.astype(dtype)
        shadows = tuple(rng.uniform(-1, 1, x.shape).astype(dtype) for _ in range(width))

        def args():
            return (BatchDuplicated(x.copy(), tuple(s.copy() for s in shadows)),
                    Const(c.copy() if isinstance(c, np.ndarray) else c))
        compiled_args, eager_args = args(), args()
        got = g(*compiled_args)
        want = autodiff(kind, f, ret, *eager_args)
        where = f"{mode} call {call} width {width}"
        _close(got[1], want[1], dtype, f"{where}: primal, compiled vs eager")
        _close(compiled_args[0].val, eager_args[0].val, dtype, f"{where}: written x")
        for w in range(width):
            lane = Duplicated(x.copy(), shadows[w].copy())
            single = autodiff(kind, f, lane_ret, lane, args()[1])
            _close(eager_args[0].dval[w], lane.dval, dtype, f"{where}: shadow {w}, eager vs lane")
            _close(compiled_args[0].dval[w], lane.dval, dtype,
                   f"{where}: shadow {w}, compiled vs lane")
            if mode == "fwd":
                _close(want[0][w], single[0], dtype, f"{where}: tangent {w}, eager vs lane")
                _close(got[0][w], single[0], dtype, f"{where}: tangent {w}, compiled vs lane")
            _close(got[1], single[1], dtype, f"{where}: primal vs lane")
    assert g.stats.eager_calls == 0, g.stats.eager_reasons
    return g


def _u(shape, lo=-1.0, hi=1.0):
    return lambda rng: rng.uniform(lo, hi, shape)


# -- the function bodies -----------------------------------------------------------------------

def _set_index(x, c):
    x[1] = x[0] * c[0]
    x[-1] -= x[2] ** 2
    return x * x


def _scale_mask(x, c):
    x[x > 0] *= 3.0
    return np.sin(x) * c


def _split_index(x, c):
    x[[0, 2], :, 1] = x[[1, 0], :, 0] * c[0]
    return x * x


def _copyto_where(x, c):
    np.copyto(x, np.sin(x) * c, where=x > 0)
    return x * x


def _iadd_reversed(x, c):
    x += x[::-1] * c
    return x * x


def _transposed_write(x, c):
    y = x * c
    y.T[1] = x[:, 0] ** 2
    return y * x


def _column_scale(x, c):
    y = np.exp(x) * c
    y[:, 1] *= 3
    return y * x


def _reshape_write(x, c):
    y = x * 2
    y.reshape(3, 2)[1] = x[0, :2] ** 2
    y.reshape(-1)[5] = x[0, 0] * x[1, 1]
    return y * c


def _add_at(x, c):
    y = np.zeros_like(x[:3])
    np.add.at(y, [0, 0, 2, 1], x * c)
    z = np.zeros_like(x.reshape(2, 2))
    np.add.at(z, ([0, 0, 1], [1, 1, 0]), x[1:] ** 2)
    return y * x[:3] + z.sum()


def _cumulative(x, c):
    return (np.cumsum(x, axis=1) * c + np.cumprod(x * c, axis=0)
            + np.cumsum(x[::-1, ::2])[::-1].sum())


def _reductions_where(x, c):
    return (np.sum(x ** 2, where=x > 0, axis=0) * c[0]
            + np.prod(x, axis=1, where=x < 0.5).sum()
            + np.max(x, initial=-5.0, where=x > -0.2))


def _matmul_einsum(x, c):
    return x @ x.T @ (x * c) + np.einsum("ij,jk->ik", x, x.T) + np.einsum("ii", x * c)


def _solve_inv(x, c):
    a = x[:, :3] + 3 * np.eye(3)
    y = np.linalg.solve(a, x) * c[:, None]
    y[:, 0] = np.linalg.inv(a) @ x[:, 3]
    return y


def _rule(vectorized):
    """x * sum(x), with hand-written rules; a plain-array rule when not vectorized."""
    def fn(x):
        return x * np.sum(x)

    def lane_sum(t):
        return np.sum(t, axis=-1, keepdims=True) if np.ndim(t) > 1 else np.sum(t)

    def reverse(cfg, x, g):
        if not vectorized:
            g = np.asarray(g)
        return (g * np.sum(x) + lane_sum(g * x),)

    def forward(cfg, xs, ts):
        t = ts[0] if vectorized else np.asarray(ts[0])
        return fn(xs[0]), t * np.sum(xs[0]) + xs[0] * lane_sum(t)
    return tape.custom_rule(fn, augmented_primal=lambda cfg, x: (fn(x), x), reverse=reverse,
                            forward=forward, vectorized=vectorized, name=f"times_sum_{vectorized}")


def _mask_rule(vectorized):
    """3x where x > 0; the rules scale a copy of the (co)tangent in place through a mask."""
    def fn(x):
        return np.where(x > 0, 3 * x, x)

    def scaled(t, x):
        out = t.copy() if vectorized else np.array(t, copy=True)
        out[..., x > 0] *= 3
        return out
    return tape.custom_rule(fn, augmented_primal=lambda cfg, x: (fn(x), x.copy()),
                            reverse=lambda cfg, x, g: (scaled(g, x),),
                            forward=lambda cfg, xs, ts: (fn(xs[0]), scaled(ts[0], xs[0])),
                            vectorized=vectorized, name=f"triple_positive_{vectorized}")


RULES = {v: (_rule(v), _mask_rule(v)) for v in (True, False)}


def _with_rules(vectorized):
    times_sum, triple = RULES[vectorized]

    def body(x, c):
        y = times_sum(x * c)
        x[0] = y[1] * 2               # the batched argument written after the rule saw it
        y[::2] *= 2.0
        y.reshape(-1)[1] = x[2] ** 2
        z = x * 1.0
        z[1:] = triple(x[1:] * c[1:])
        return y * z
    return body


CASES = {
    "set_index": (_set_index, _u(4), _u(1)),
    "scale_mask": (_scale_mask, _u(6), _u(6, 0.5, 1.5)),
    "split_index": (_split_index, _u((3, 2, 2)), _u(1, 0.5, 1.5)),
    "copyto_where": (_copyto_where, _u(5), _u(5, 0.5, 1.5)),
    "iadd_reversed": (_iadd_reversed, _u(5), _u(5, 0.5, 1.5)),
    "transposed_write": (_transposed_write, _u((3, 3)), _u(3, 0.5, 1.5)),
    "column_scale": (_column_scale, _u((3, 3)), _u((3, 3), 0.5, 1.5)),
    "reshape_write": (_reshape_write, _u((2, 3)), _u((2, 3), 0.5, 1.5)),
    "add_at": (_add_at, _u(4), _u(4, 0.5, 1.5)),
    "cumulative": (_cumulative, _u((3, 4)), _u((3, 4), 0.5, 1.5)),
    "reductions_where": (_reductions_where, _u((4, 3)), _u(1, 0.5, 1.5)),
    "matmul_einsum": (_matmul_einsum, _u((3, 3)), _u((3, 3), 0.5, 1.5)),
    "solve_inv": (_solve_inv, _u((3, 4)), _u(3, 0.5, 1.5)),
    "rule_vectorized": (_with_rules(True), _u(5), _u(5, 0.5, 1.5)),
    "rule_per_direction": (_with_rules(False), _u(5), _u(5, 0.5, 1.5)),
}


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("mode", ["fwd", "rev"])
@pytest.mark.parametrize("name", list(CASES))
def test_lanes_of_compiled_batched_writes_equal_single_directions(name, mode, dtype):
    body, make_x, make_c = CASES[name]
    _run(mode, body, make_x, make_c, dtype, seed=[len(name), ord(name[0]), len(mode)])


# -- a Const that decides where the writes go changes at every call ----------------------------

def _const_index_set(x, c):
    x[c] = x[::-1][: len(c)] * 2.0          # repeated indices among c: the last write wins
    y = x * 1.0
    y[c[:2]] *= x[c[2:]]
    return y * x


def _const_mask(x, c):
    x[c] *= 3.0
    y = np.exp(x)
    y.T[c.T] = x.T[~c.T] ** 2                # through a transposed view
    return y * x


def _const_where(x, c):
    y = np.ones_like(x)
    np.copyto(y, x * x, where=c)
    np.copyto(x, np.sin(x), where=~c)
    return y * x + np.sum(x, where=c)


def _const_add_at(x, c):
    y = np.zeros_like(x)
    np.add.at(y, c, x[: len(c)] ** 2)
    return np.cumsum(y) * x


def _ints(n, high, size):
    return lambda rng: rng.integers(0, high, size)


def _mask(size, count):
    def make(rng):
        m = np.zeros(np.prod(size), bool)
        m[rng.permutation(m.size)[:count]] = True       # one count: the guard on it holds
        return m.reshape(size)
    return make


CONST_CASES = {
    "const_index_set": (_const_index_set, _u(6), _ints(6, 6, 4)),
    "const_mask": (_const_mask, _u((2, 3)), _mask((2, 3), 3)),
    "const_where": (_const_where, _u(6), _mask(6, 2)),
    "const_add_at": (_const_add_at, _u(5), _ints(5, 3, 4)),
}


@pytest.mark.parametrize("mode", ["fwd", "rev"])
@pytest.mark.parametrize("name", list(CONST_CASES))
def test_a_const_deciding_the_writes_changes_between_calls(name, mode):
    body, make_x, make_c = CONST_CASES[name]
    _run(mode, body, make_x, make_c, np.float64, seed=[len(name), ord(name[-1]), len(mode)])


# -- a batched output buffer written through a mask, a transposed view, add.at and copyto -------

def _into_buffer(out, x, c):
    out[...] = np.linalg.solve(x + 3 * np.eye(3), x.T) * c
    out[out > 0] *= 2.0
    out.T[0] = np.cumsum(x[0])
    np.add.at(out, ([0, 0, 2], [1, 1, 2]), x[1] ** 2)
    np.copyto(out, out ** 2, where=c > 1)


@pytest.mark.parametrize("kind", [tape.Reverse, tape.Forward], ids=["rev", "fwd"])
def test_seeds_and_tangents_of_a_written_buffer_per_lane(kind):
    rng = np.random.default_rng(11)
    g = tape.compile(kind, _into_buffer, Const, BatchDuplicated, BatchDuplicated, Const)
    for call, width in enumerate(WIDTHS):
        x, c = rng.uniform(-1, 1, (3, 3)), rng.uniform(0.5, 1.5, (3, 3))
        s_out, s_x = ([rng.uniform(-1, 1, (3, 3)) for _ in range(width)] for _ in range(2))

        def args():
            return (BatchDuplicated(np.zeros((3, 3)), tuple(s.copy() for s in s_out)),
                    BatchDuplicated(x.copy(), tuple(s.copy() for s in s_x)), Const(c.copy()))
        compiled, eager = args(), args()
        g(*compiled)
        autodiff(kind, _into_buffer, Const, *eager)
        for w in range(width):
            lane = (Duplicated(np.zeros((3, 3)), s_out[w].copy()),
                    Duplicated(x.copy(), s_x[w].copy()), Const(c.copy()))
            autodiff(kind, _into_buffer, Const, *lane)
            for i in range(2):
                for what, batched in (("compiled", compiled), ("eager", eager)):
                    where = f"call {call} width {width}: {what} argument {i}"
                    _close(batched[i].val, lane[i].val, np.float64, f"{where}, value")
                    _close(batched[i].dval[w], lane[i].dval, np.float64, f"{where}, shadow {w}")
    assert g.stats.eager_calls == 0, g.stats.eager_reasons
