"""A generator of NumPy programs for `tape.compile`, and the comparison of each program's
compiled calls with eager `autodiff` (tests/tape/test_compile_redteam7.py).

A program is straight-line NumPy code with branches over a few arguments,
``f(x, s, W, c, k, b, t)``: x (R, C) Duplicated, s a float (Active, or Duplicated in forward
mode), W (C, C) Duplicated or Const, c (C,) Const floats, k (C,) Const permutation, b (R, C) a
Duplicated buffer the program may write, t a Const Python float; its closure holds cl (C,) and
M (C, C) (18 kB at C = 48, where eager mode shares copies of closed-over arrays), and its
globals a list `hist`. Statements are drawn from the templates below: elementwise unary and
binary ops with broadcasting, reductions with axis/keepdims, matmul/einsum, views
(reshape, transpose, slices, flips), fancy and boolean indexing, in-place writes into the
Duplicated buffers, into `np.zeros_like` buffers and through views, Const arrays read and
written, closures read and changed, Python branches on traced and Const values, `int(...)` and
argmax indices, masks of data-dependent size, random draws, linear algebra that may raise.

`run_case` compiles the program and calls it seven times: new values (a flipped `x` on the
second call to take other branches), the first values again, closures changed in place, Const
values changing, some calls with another R, float32 buffers or other memory layouts (Fortran
order, strided views), the last call on the same argument objects again. Each call is compared
with eager autodiff on copies of its arguments: the primal and derivatives, the arguments and
shadows afterwards, the closure arrays, `hist`, the global NumPy generator (seeded alike before
each side), and errors (the same type). What the caller gets back is then overwritten, as a
caller may.
"""
from __future__ import annotations

import copy
import textwrap
import warnings
from typing import Callable, NamedTuple

import numpy as np
from hypothesis import strategies as st

import tape
from tape import (Active, BatchDuplicated, Const, Duplicated, Forward, ForwardWithPrimal,
                  Reverse, ReverseWithPrimal)

# Templates: {a} and {b} are values of shape (R, C) made so far, {n} the new one.

UNARY = [
    "np.sin({a})", "np.tanh(1.3 * {a})", "np.exp(np.tanh({a}))", "np.sqrt({a} * {a} + 1.0)",
    "np.log1p({a} ** 2)", "-{a}", "{a} ** 2 - 0.5 * {a}", "np.abs({a})", "np.maximum({a}, 0.2)",
    "np.clip({a}, -1.0, 1.0)", "np.cos({a}) * {a}", "{a} * 1.0",
]
BINARY = [
    "{a} + {b}", "{a} * {b}", "{a} - {b}", "{a} / (1.0 + {b} * {b})", "np.maximum({a}, {b})",
    "np.where({a} > {b}, {a}, 2.0 * {b})", "np.minimum({a}, {b}) + {a}",
]
BROADCAST = [
    "{a} * c", "{a} + cl", "{a} * s", "{a} * {b}[0]", "{a} * {b}.sum(axis=0, keepdims=True)",
    "{a} - {a}.mean(axis=1, keepdims=True)", "{a} / (1.0 + np.sum({b} ** 2))",
    "{a} * np.max({b}, axis=0)", "{a} + np.prod(np.tanh({b}), axis=1, keepdims=True)",
    "{a} * np.sum({b}, axis=1)[:, None]", "{a} + np.std({b}, axis=0)", "{a} * cl[None, :]",
    "{a} + c[k]", "{a} * np.sum({b}, keepdims=True)", "{a} * t",
    "{a} + (1.0 if t > 0 else 2.0) * {b}",
]
MATMUL = [
    "np.tanh({a} @ W)", "np.einsum('ij,jk->ik', {a}, W)",
    "{a} * np.einsum('ij,ij->i', {a}, {b})[:, None]", "0.1 * (({a} @ {b}.T) @ {b})",
    "np.dot({a}, W.T)", "{a} @ np.diag(c)", "np.matmul({a}, W) * {b}", "{a} @ (W * cl)",
]
VIEWS = [
    "{a}[::-1] + {b}", "{a}[:, ::-1] * {b}", "{a}.reshape(-1, 2).reshape({a}.shape)",
    "{a}.ravel().reshape({a}.shape) * 2.0", "np.transpose({a}).T + 0.0", "{a}.T[::-1].T",
    "np.flip({a}, 0)", "np.roll({a}, 1, axis=1)", "np.concatenate([{a}[1:], {a}[:1]])",
    "np.stack([{a}[:, j] for j in range(C)][::-1], axis=1)", "{a}.T.copy().T",
    "np.swapaxes({a}[None], 0, 1)[:, 0]", "np.broadcast_to({a}[:1], {a}.shape) * {b}",
]
FANCY = [
    "{a}[:, k]", "{a}[:, [C - 1] + list(range(C - 1))] * {b}", "np.take({a}, k, axis=1)",
    "{a} * {b}[int(np.argmax({b}[:, 0]))]", "{a} + {b}[np.argmax({b}, axis=0), np.arange(C)]",
    "np.take_along_axis({a}, np.argsort({b}, axis=1), axis=1)",
    "{a} * {a}[{a} > 0].sum()", "{a} + {b}[:, int(k[0]) % C][:, None]",
    "{a} * 0.5 * {a}.ravel()[np.argmax({a})]", "np.sort({a}, axis=1) + {b}",
    "{a} + 0.1 * np.sum({b}[{b} > 0.5] ** 2)", "{a} * (len(np.flatnonzero({b}[:, 0] > 0)) + 1.0)",
    "{a}[np.argsort({b}[:, 0])]", "np.where({b} > c, {a}, -{a})", "{a} * {b}[k[0] % {b}.shape[0]]",
    "{a} * {b}[int(k[0])]", "{a}[k[:{a}.shape[0]]]", "{a} @ np.linalg.inv(np.diag(c))",
    "{a}[:, ::-1][:, k]", "{a} * np.linalg.det(np.diag(c[:2]) + W[:2, :2])",
    "np.where(~({a} > 0) & ({b} < 0.5), {a}, {b})", "np.where(({a} > 1) | (c < 0), {a}, -{b})",
    "{a}[:, k & 1] * round(c[0])", "{a} * {b}[:, (k >> 1) ^ 1]",
]
# statements: may span lines; {n} is the new value
STATEMENTS = [
    "{n} = np.zeros_like({a})\n{n}[1:] = {a}[:-1] * 2.0\n{n}[0] = {b}[-1]",
    "{n} = np.zeros_like({a})\n{n}.T[0] = {a}[:, 1]\n{n}[:, 1:] += {b}[:, :-1]",
    "{n} = np.zeros_like({a})\nm_ = {a} > 0.2\n{n}[m_] = np.sin({b}[m_])\n{n} = {n} + 0.5 * {a}",
    "{n} = {a}.copy()\n{n}[:, k[:2]] = {b}[:, :2]",
    "{n} = {a} * 1.0\n{n} *= {b}",
    "{n} = {a} * 1.0\nvw_ = {n}[1:, ::2]\nvw_ += {b}[:-1, ::2]",
    "{n} = np.zeros_like({a})\nnp.copyto({n}, {a} * {b})",
    "{n} = np.empty_like({a})\n{n}[...] = np.tanh({a})",
    "{n} = np.zeros_like({a})\n{n}[:, 1] = {a}[:, 1]\n{n}[int(np.argmax({b}[:, 0]))] = 1.0",
    "{n} = np.zeros_like({a})\n{n}[np.argmax({b}, axis=0), np.arange(C)] = {a}[0]",
    "{n} = {a} + 0.0\n{n}[{n} < 0] *= 0.5",
    "{n} = {a}.copy()\n{n}.T[1:] = {b}.T[:-1]",
    "{n} = {a} * 1.0\nnp.copyto({n}, {b}, where={b} > 0)",
    "{n} = np.zeros_like({a})\nnp.add.at({n}, (k % {n}.shape[0], k), {a}[0])",
    # writes into the Duplicated buffer b (b stays a value)
    "b[1:] += {a}[:-1]\n{n} = b * 1.0",
    "b.T[0] = {a}[:, 0]\n{n} = {a} + b",
    "b[...] = {a}\n{n} = b * {b}",
    "b[:] = {a} * 2.0\n{n} = {a}",
    "np.copyto(b, {a})\n{n} = b + 1.0",
    "b *= {a}\n{n} = {b} + b",
    "b[{a} > 0] = 0.0\n{n} = {a} * b",
    "b[:, k[:2]] = {a}[:, :2]\n{n} = b - {a}",
    "b += c\n{n} = b * {a}",
    "b[0] = c\n{n} = {a} + b[0]",
    "bv_ = b[:, 1:]\nbv_ *= np.tanh({a}[:, :-1])\n{n} = b + {a}",
    "b[...] = 0.0\n{n} = {a}",
    "b.reshape(-1)[::2] = {a}.reshape(-1)[::2]\n{n} = b * 1.0",
    "b.ravel()[:C] = {a}[0]\n{n} = b + {b}",
    "b[::-1][0] = {a}[0]\n{n} = b * {a}",
    "b[:, :] = {a}\n{n} = b * 2.0",
    "b[0:] = {a} * {b}\n{n} = b",
    "b[()] = {a}\n{n} = b - 1.0",
    "np.copyto(b, 0.0)\n{n} = {a} + b",
    "b.fill(0.0)\n{n} = {a} * 1.0",
    "b[...] = {a}\nb[0] += 1.0\n{n} = b * {b}",
    # closure matrices (>= 16 kB when C = 48): read, changed and restored within the call
    "{n} = {a} @ M",
    "{n} = np.tanh({a} @ M) * {b}",
    "{n} = {a} @ M\nM[0, 0] += 1.0\n{n} = {n} + {b} @ M\nM[0, 0] -= 1.0",
    "{n} = {a} @ M.T + {b} @ M",
    "{n} = {a} * np.diag(M)",
    "{n} = {a} * 1.0\nn_ = 0\nwhile np.sum(np.abs({n})) > 3.0 and n_ < 3:\n"
    "    {n} = {n} * 0.5\n    n_ += 1",
    "j_ = int(np.argmax({b}[:, 0]))\n{n} = {a}[max(j_ - 1, 0):j_ + 1].sum(axis=0) * {a}",
    "if {a}[0, 0] > {b}[0, 0]:\n    {n} = {a}\nelse:\n    {n} = {b} * 1.0",
    "{n} = {a} * np.random.default_rng(int(k[0])).normal(size={a}.shape)",
    "{n} = {a} + 0.01 * np.random.normal(size={a}.shape)",
    "{n} = {a} * (1.0 if np.random.uniform() > 0.5 else 2.0)",
    "hist.append({a})\n{n} = {a} * len(hist)",
    "x.T[0] = {a}[:, 0]\n{n} = x * 2.0",
    "x[...] = {a}\n{n} = x + {b}",
    # x written
    "x[0] = {a}[1]\n{n} = x * {b}",
    "x *= 0.5\n{n} = {a} + x",
    # Const written with plain values, a traced value into a Const (refused in both)
    "c[0] = 0.5\n{n} = {a} * c",
    "c *= 2.0\n{n} = {a} + c",
    "np.copyto(c, 1.5)\n{n} = {a} * c",
    "{n} = {a} * c\nc[1] = 3.0",
    "{n} = {a} * c\nnp.asarray(c)[2] = 7.0",
    # closure read and written
    "{n} = {a} * cl\ncl[0] += 1.0",
    "{n} = {a} + cl[int(np.argmax(cl))]",
    # branches
    "if {a}.sum() > 0:\n    {n} = np.sin({a})\nelse:\n    {n} = {a} * 0.5",
    "if np.max({a}) > 1.0:\n    {n} = {a} / np.max({a})\nelse:\n    {n} = {a} + 0.1",
    "if c[0] > 0:\n    {n} = {a} * c\nelse:\n    {n} = {a} - {b}",
    "if int(k[0]) % 2 == 0:\n    {n} = np.tanh({a})\nelse:\n    {n} = {a} * {b}",
    "{n} = {a}\nfor _ in range(int(k[1]) % 3):\n    {n} = np.tanh({n} @ W) + 0.5 * {n}",
    "if int(np.argmax({a}.ravel())) % 2 == 0:\n    {n} = {a} * 2.0\nelse:\n    {n} = {b}",
    "if cl.sum() > 0:\n    {n} = {a} * cl\nelse:\n    {n} = -{a}",
    "if np.any({a} > 1.5):\n    {n} = np.mean({a}[{a} > 1.5]) * {b}\nelse:\n    {n} = {b}",
    "if float(s) > 0:\n    {n} = {a} * s\nelse:\n    {n} = {a}",
    "idx_ = np.flatnonzero({b}[:, 1] > 0)\n{n} = {a}.copy()\n{n}[idx_] = {b}[idx_] * 2.0",
    "{n} = {a}[{b}[:, 0] > 0]\n{n} = {a} + np.sum({n}, axis=0)",
]
FAMILIES = [UNARY, BINARY, BROADCAST, MATMUL, VIEWS, FANCY, STATEMENTS, STATEMENTS]

RETURNS_ACTIVE = [
    "np.sum(c * c) + 0.0 * t", "np.sum({a} * t)",
    "np.sum({a}) + np.sum(np.random.default_rng(3).normal(size={a}.shape) * {b})",
    "np.sum(np.sin({a})) + 0.5 * np.sum(b * b)", "np.sum({a} * {b})", "np.sum({a})",
    "np.mean({a} ** 2) + np.sum(x)", "np.sum({a}) * s",
]
RETURNS_ARRAY = ["{a}", "{a} + b", "{a} * 1.0", "np.sum({a}, axis=0)", "x", "b", "c", "{a}.T",
                 "{a}[0]", "c * 1.0", "({a}, c)", "[{a}, b]", "{a}[::-1]"]

SOURCE_HEAD = "C = {C}\n\ndef make(cl, M):\n    def f(x, s, W, c, k, b, t):\n"


class Case(NamedTuple):
    """A generated program and how it is compiled and called."""
    lines: tuple
    ret_expr: str
    C: int
    mode: object
    ret: type
    W_dup: bool
    batch: bool
    seed: int

    @property
    def source(self) -> str:
        body = "\n".join(self.lines + (f"return {self.ret_expr}",))
        return SOURCE_HEAD.format(C=self.C) + textwrap.indent(body, " " * 8) + "\n    return f\n"

    def make(self, cl, M) -> Callable:
        namespace = {"np": np, "hist": []}
        exec(compile(self.source, "<generated program>", "exec"), namespace)
        return namespace["make"](cl, M)


def generate(pick: Callable, n_statements: int, array_return: bool) -> tuple:
    """``(lines, return expression)`` of a program; `pick(options)` chooses."""
    names, lines = ["x", "b"], []
    for i in range(n_statements):
        family = pick(FAMILIES)
        template = pick(family)
        a, b, new = pick(names), pick(names), f"v{i}"
        if family is STATEMENTS:
            lines.extend(template.format(a=a, b=b, n=new).split("\n"))
        else:
            lines.append(f"{new} = " + template.format(a=a, b=b))
        names.append(new)
    a, b = pick(names[-3:]), pick(names)
    ret = pick(RETURNS_ARRAY if array_return else RETURNS_ACTIVE).format(a=a, b=b)
    return tuple(lines), ret


@st.composite
def cases(draw, max_statements: int = 6):
    """Programs with their mode, return activity, W's activity, batch (two directions or
    seeds at once) and the seed of their argument values."""
    def pick(options):
        return draw(st.sampled_from(options))
    mode = pick([Reverse, ReverseWithPrimal, Forward, ForwardWithPrimal])
    forward = mode.kind == "forward"
    ret = pick([Duplicated, Const]) if forward else pick([Active, Active, Const])
    batch = draw(st.booleans())
    if batch and ret is Duplicated:
        ret = BatchDuplicated
    n = draw(st.integers(1, max_statements))
    lines, ret_expr = generate(pick, n, array_return=forward or ret is Const)
    return Case(lines, ret_expr, pick([4, 4, 20, 48]), mode, ret, draw(st.booleans()), batch,
                draw(st.integers(0, 2 ** 32 - 1)))


# ---------------------------------------------------------------------------------------------
# Calls


def draw_values(rng, R, dtype, C, flip=None) -> dict:
    x = rng.uniform(-2, 2, (R, C)).astype(dtype)
    if flip is not None and flip.shape == x.shape:
        x = (-flip + rng.normal(0, 0.1, x.shape)).astype(dtype)
    return dict(
        x=x, s=float(rng.uniform(-1.5, 1.5)), W=rng.uniform(-1, 1, (C, C)),
        c=rng.choice([-0.3, 0.0, 0.4, 1.2], size=C).astype(float),
        k=rng.permutation(C), b=rng.uniform(-1, 1, (R, C)).astype(dtype),
        dx=rng.normal(size=(R, C)).astype(dtype), dW=rng.normal(size=(C, C)),
        # a zero shadow of a written buffer seeds a read-only broadcast zero (C >= 20)
        db=rng.normal(size=(R, C)).astype(dtype) * (rng.uniform() < 0.6),
        ds=float(rng.normal()), t=float(rng.choice([-1.0, 0.0, -0.0, 2.5])),
    )


def laid_out(a: np.ndarray, layout: str) -> np.ndarray:
    """`a` in C order, Fortran order, or as a strided view of a larger array."""
    if layout == "F":
        return np.asfortranarray(a)
    if layout == "strided":
        big = np.zeros((a.shape[0] * 2, a.shape[1] + 1), a.dtype)
        view = big[::2, 1:]
        view[...] = a
        return view
    return a


def annotate(v: dict, case: Case, layout: str = "C") -> list:
    """Fresh annotated arguments holding copies of the values `v`."""
    v = copy.deepcopy(v)
    v["x"] = laid_out(v["x"], layout)
    v["b"] = laid_out(v["b"], "C" if layout == "F" else layout)
    forward = case.mode.kind == "forward"
    if case.batch:
        B = BatchDuplicated
        s = B(v["s"], (v["ds"], -v["ds"])) if forward else Active(v["s"])
        return [B(v["x"], (v["dx"], v["dx"] * 0.5)), s,
                B(v["W"], (v["dW"], v["dW"][::-1].copy())) if case.W_dup else Const(v["W"]),
                Const(v["c"]), Const(v["k"]), B(v["b"], (v["db"], v["db"] * -2.0)),
                Const(v["t"])]
    s = Duplicated(v["s"], v["ds"]) if forward else Active(v["s"])
    return [Duplicated(v["x"], v["dx"]), s,
            Duplicated(v["W"], v["dW"]) if case.W_dup else Const(v["W"]),
            Const(v["c"]), Const(v["k"]), Duplicated(v["b"], v["db"]), Const(v["t"])]


class Mismatch(AssertionError):
    """A compiled call that differs from eager autodiff."""


def same(got, want, where: str, rtol: float) -> None:
    """Same structure, types, shapes and dtypes, values to `rtol` (NaNs equal)."""
    if isinstance(want, np.ndarray) or isinstance(got, np.ndarray):
        if not (isinstance(got, np.ndarray) and isinstance(want, np.ndarray)):
            raise Mismatch(f"{where}: {type(got).__name__} against {type(want).__name__}")
        if got.shape != want.shape or got.dtype != want.dtype:
            raise Mismatch(f"{where}: {got.shape} {got.dtype} against {want.shape} {want.dtype}")
        if not np.allclose(got, want, rtol=rtol, atol=rtol * 1e-2, equal_nan=True):
            raise Mismatch(f"{where}: values differ\n{got}\n{want}")
    elif isinstance(want, (tuple, list)):
        if type(got) is not type(want) or len(got) != len(want):
            raise Mismatch(f"{where}: {got!r} against {want!r}")
        for i, (g, w) in enumerate(zip(got, want)):
            same(g, w, f"{where}[{i}]", rtol)
    elif want is None or got is None:
        if got is not want:
            raise Mismatch(f"{where}: {got!r} against {want!r}")
    else:
        if type(got) is not type(want):
            raise Mismatch(f"{where}: {type(got).__name__} against {type(want).__name__} "
                           f"({got!r}, {want!r})")
        if not np.allclose(got, want, rtol=rtol, atol=rtol * 1e-2, equal_nan=True):
            raise Mismatch(f"{where}: {got!r} against {want!r}")


def _scribble(obj) -> None:
    """The caller writes into the arrays it got back."""
    if isinstance(obj, np.ndarray):
        if obj.flags.writeable and obj.dtype.kind == "f":
            obj[...] = 12345.0
    elif isinstance(obj, (tuple, list)):
        for o in obj:
            _scribble(o)


def _outcome(call):
    try:
        return "ok", call()
    except Exception as e:   # noqa: BLE001  (errors are compared)
        return "error", e


def _plan(rng, n_calls):
    """Per call: rows, dtype and layout (the first calls plain)."""
    plan = []
    for i in range(n_calls):
        r = rng.uniform()
        R = 5 if i >= 3 and r < 0.2 else 3
        dtype = np.float32 if i >= 3 and 0.2 <= r < 0.3 else np.float64
        layout = ("C", "C", "F", "strided")[int(rng.integers(4))] if i >= 2 else "C"
        plan.append((R, dtype, layout))
    return plan


def run_case(case: Case, n_calls: int = 7):
    """Compile the program, call it `n_calls` times against eager autodiff (see the module
    docstring); raise `Mismatch` at the first difference. Returns the compiled function."""
    rng = np.random.default_rng(case.seed)
    C = case.C
    cl, M = rng.uniform(-1, 1, C), rng.uniform(-1, 1, (C, C)) / C
    f = case.make(cl, M)
    hist = f.__globals__["hist"]
    D = BatchDuplicated if case.batch else Duplicated
    g = tape.compile(case.mode, f, case.ret, D, D if case.mode.kind == "forward" else Active,
                     D if case.W_dup else Const, Const, Const, D, Const)
    prev, same_objects = None, None
    for i, (R, dtype, layout) in enumerate(_plan(rng, n_calls)):
        if i == 3:
            v = prev   # the previous values again
        else:
            v = draw_values(rng, R, dtype, C, flip=prev["x"] if i == 1 else None)
        if i in (2, 5):   # the closures changed in place
            cl[...] = rng.uniform(-1, 1, C)
            M[rng.integers(C)] += 0.1
        if i == n_calls - 1 and same_objects is not None:
            compiled_args, eager_args = same_objects
        else:
            compiled_args, eager_args = annotate(v, case, layout), annotate(v, case, layout)
        before = cl.copy(), M.copy(), list(hist)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            np.random.seed(1000 + i)
            kind_c, got = _outcome(lambda: g(*compiled_args))
            after = cl.copy(), M.copy(), len(hist), np.random.uniform()
            cl[...], M[...], hist[:] = before
            np.random.seed(1000 + i)
            kind_e, want = _outcome(lambda: tape.autodiff(case.mode, f, case.ret, *eager_args))
            drawn = np.random.uniform()
        where = f"call {i} (R={R}, {np.dtype(v['x'].dtype).name}, {layout})"
        if kind_c != kind_e or (kind_c == "error" and type(got) is not type(want)):
            raise Mismatch(f"{where}: compiled gave {kind_c} {got!r}, eager {kind_e} {want!r}; "
                           f"{g.stats}")
        rtol = 1e-4 if v["x"].dtype == np.float32 else 1e-9
        if kind_c == "ok":
            same(got, want, f"{where}: returned", rtol)
        for j, (p, q) in enumerate(zip(compiled_args, eager_args)):
            same(p.val, q.val, f"{where}: argument {j}", rtol)
            if isinstance(q, Duplicated):
                same(p.dval, q.dval, f"{where}: shadow of argument {j}", rtol)
        same(after[0], cl, f"{where}: closure cl", rtol)
        same(after[1], M, f"{where}: closure M", rtol)
        if after[2] != len(hist) or after[3] != drawn:
            raise Mismatch(f"{where}: hist {after[2]} against {len(hist)}, or the global "
                           "generator moved differently")
        if kind_c == "ok":
            _scribble(got)
            _scribble(want)
        prev = v
        if i == n_calls - 2:
            same_objects = compiled_args, eager_args
    return g
