"""Long generated programs are cut into short nested functions (tape/program_split.py), so that
looking up the current line (tracemalloc does at every allocation) costs no more than in a short
one; the cut program computes what the uncut one does."""
import ast
import tracemalloc
import types

import numpy as np
import pytest

import tape
from tape import Active, Const, Duplicated, ForwardWithPrimal, Reverse
from tape.pytree import flatten
from tape.program_split import _segments_keep_their_names, load, split_long_function

PROGRAM = '''def run(leaves, seeds, n=3):
    a, b, = leaves
    total = 0.0
    c = [x * 2 for x in range(n)]
    d = sorted(c, key=lambda v: -v)
    total = total + a
    del c
    if seeds is None: return None
    for i in range(n):
        total = total + i * b
    e = f = total
    try:
        g = 1 / (e - f)
    except ZeroDivisionError as err:
        g = str(err)
    with_ = [total, d, g]
    e, f = f, e
    e = None
    return total, with_, f, (lambda: total)()
'''


def _run(source, *args):
    namespace = {}
    exec(compile(source, "<test>", "exec"), namespace)  # noqa: S102
    return namespace["run"](*args)



@pytest.mark.parametrize("segment", [1, 2, 3, 5])
def test_a_cut_program_computes_what_the_uncut_one_does(segment):
    split = split_long_function(PROGRAM, segment=segment)
    assert split != PROGRAM and "nonlocal" in split
    for args in [((1.0, 2.0), "seeds", 4), ((1.0, 2.0), None), ((0.5, -1.0), [1])]:
        assert _run(split, *args) == _run(PROGRAM, *args)


def test_short_programs_are_left_as_they_are():
    assert split_long_function(PROGRAM, segment=50) == PROGRAM


def test_every_name_that_crosses_segments_is_declared_nonlocal():
    """Otherwise an assignment would make a name local to its segment and a later segment
    would read the outer (stale) value."""
    split = split_long_function(PROGRAM, segment=2)
    outer = ast.parse(split).body[0]
    segments = [n for n in outer.body if isinstance(n, ast.FunctionDef)]
    assert len(segments) >= 3
    names = [{n.id for s in seg.body for n in ast.walk(s) if isinstance(n, ast.Name)}
             for seg in segments]
    for i, seg in enumerate(segments):
        declared = {n for s in seg.body if isinstance(s, ast.Nonlocal) for n in s.names}
        stores = {n.id for s in seg.body for n in ast.walk(s)
                  if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
        elsewhere = set().union(*(names[:i] + names[i + 1:]))
        assert (stores & elsewhere) - {"x", "v"} <= declared   # x, v: comprehension, lambda


def test_a_cut_that_would_change_a_variable_keeps_the_uncut_function():
    bad = ("def run(x):\n    x = 1\n    def _segment0():\n        x = 2\n    _segment0()\n"
           "    return x\n")
    assert not _segments_keep_their_names(compile(bad, "<t>", "exec"))
    good = bad.replace("        x = 2", "        nonlocal x\n        x = 2")
    assert _segments_keep_their_names(compile(good, "<t>", "exec"))
    # a statement written across lines at the body's indentation does not compile when cut:
    # the uncut function runs
    spread = "def run(x):\n" + "    x = x + 1\n" * 4 + "    y = (x +\n    1)\n    return y\n"
    assert load(spread, {}, segment=2)(0) == 5


def _code_lengths(code) -> list:
    """Lines of every code object in a function's code, nested ones included."""
    out = [len({line for *_, line in code.co_lines() if line is not None})]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out += _code_lengths(const)
    return out


@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_a_long_compiled_program_is_cut_and_replays_as_eager(mode):
    rng = np.random.default_rng(0)
    W0, xs, n = rng.standard_normal((3, 3)) * 0.5, rng.standard_normal((300, 2, 3)), 300

    def loss(W, xs):
        h, total = np.zeros((2, 3)), 0.0
        for t in range(n):
            h = np.tanh(h @ W + xs[t])
            total = total + np.sum(h * h)
        return total / n

    if mode == "reverse":
        call = (Reverse, Active, Active, Const)
        args = (Active(W0), Const(xs))
    else:
        call = (ForwardWithPrimal, Duplicated, Duplicated, Const)
        args = (Duplicated(W0, rng.standard_normal((3, 3))), Const(xs))
    g = tape.compile(call[0], loss, *call[1:])
    for _ in range(2):
        g(*args)
    tracemalloc.start()    # the replays under tracemalloc run the cut program
    try:
        got = g(*args)
    finally:
        tracemalloc.stop()
    want = tape.autodiff(call[0], loss, call[1], *args)
    got, want = flatten(got)[0], flatten(want)[0]
    assert len(got) == len(want) > 0
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)
    assert g.stats.hits >= 1 and g.stats.eager_calls == 0
    (cut,) = [c.cell_contents for c in g._last.run.__closure__
              if isinstance(c.cell_contents, list)]
    lengths = _code_lengths(cut[0].__code__)
    assert sum(lengths) > 2000 and len(lengths) > 5
    assert max(lengths) < 1000      # each code object a line lookup scans stays short
    assert g(*args) is not None     # and without tracemalloc the uncut one
    assert "def run(" in str(g) and "_segment" not in str(g)   # print(g) shows it uncut
