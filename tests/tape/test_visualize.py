"""Tape visualisation: the table, the DOT graph, rendering, and the step-by-step sweep."""
import shutil

import numpy as np
import pytest

import tape.visualize as viz
from tape import (Active, Const, Duplicated, Reverse, ReverseSplitWithPrimal, autodiff, autodiff_thunk,
                  record, show, to_dot)

W = np.arange(6.0).reshape(2, 3) / 10


def f(x):
    return np.sum(np.tanh(W @ x) ** 2)


def known_tape():
    return record(f, Active(np.array([0.1, -0.2, 0.3])))


def test_slot_shapes_and_saved_bytes_of_a_known_function():
    t = known_tape()
    names = [r[0].name for r in t.records]
    assert names == ["matmul", "tanh", "square", "sum"]
    specs = viz.slot_shapes(t)
    ins = [r[3] for r in t.records]
    outs = [r[4] for r in t.records]
    assert specs[ins[0][1]] == ((3,), "float64")          # x
    assert specs[outs[0]] == ((2,), "float64")            # W @ x
    assert specs[outs[3]] == ((), "float64")              # the sum
    # matmul keeps only W (48 B): x's cotangent needs W, and W (a constant) needs none;
    # tanh keeps its (2,) result, which power then saves again as its base
    assert viz.saved_bytes(t.records[0][2]) == 48
    assert viz.saved_bytes(t.records[1][2]) == 16
    assert t.records[2][2][0] is t.records[1][2] or viz.saved_bytes(t.records[2][2]) >= 16


def test_show_lists_ops_shapes_bytes_and_total():
    t = known_tape()
    text = show(t)
    assert text == t.show()
    lines = text.splitlines()
    assert len(lines) == 1 + 4 + 1
    assert "matmul" in lines[1] and "const" in lines[1] and "(2,) float64" in lines[1]
    assert "48 B" in lines[1]
    assert lines[-1].startswith("total: 4 records,")
    total = int(lines[-1].split(",")[1].split()[0])
    # distinct arrays only: power's saved base is the array tanh saved
    assert total == sum(a.nbytes for a in _distinct(t).values()) and total < sum(
        viz.saved_bytes(r[2]) for r in t.records)


def _distinct(t):
    found = {}
    for r in t.records:
        viz._collect(r[2], found)
    return found


def test_dot_contains_ops_and_edges():
    t = known_tape()
    text = to_dot(t)
    assert text.startswith("digraph tape {") and text.rstrip().endswith("}")
    for i, name in enumerate(["matmul", "tanh", "square", "sum"]):
        assert f"#{i} {name}" in text
    assert "s0 -> r0" in text and "r0 -> r1" in text and "r2 -> r3" in text
    assert t.to_dot() == text


def test_render_without_graphviz_says_so_and_still_writes_dot(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(viz.GraphvizNotFound, match="graphviz is not installed"):
        to_dot(known_tape(), tmp_path / "tape.svg")
    assert (tmp_path / "tape.dot").read_text().startswith("digraph")


def test_plain_dot_path_is_written(tmp_path):
    text = to_dot(known_tape(), tmp_path / "t.dot")
    assert (tmp_path / "t.dot").read_text() == text


@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz not installed")
def test_render_svg(tmp_path):
    to_dot(known_tape(), tmp_path / "t.svg")
    assert "<svg" in (tmp_path / "t.svg").read_text()


def test_reverse_steps_reproduce_the_gradient():
    x = np.array([0.1, -0.2, 0.3])
    t = record(f, Active(x))
    steps = list(viz.reverse_steps(t))
    assert [s.index for s in steps] == [3, 2, 1, 0]
    (expected,), = autodiff(Reverse, f, Active, Active(x))
    np.testing.assert_allclose(steps[-1].input_cotangents[1], expected, atol=1e-12)


def test_overwritten_argument_tape_and_thunk_tape():
    def f_(y, x):
        y[0] = x[0] ** 2 + x[1]
        y[1] = x[0] * x[1]
    x, y = np.array([2.0, 3.0]), np.zeros(2)
    t = record(f_, Duplicated(y, np.zeros(2)), Duplicated(x, np.zeros(2)), ret=Const)
    assert "setitem" in show(t) and "(2,) float64" in show(t)
    fwd, _ = autodiff_thunk(ReverseSplitWithPrimal, lambda x, c: c * np.sin(x), Active, Active,
                            Const)
    tape, _, _ = fwd(Active(0.5), Const(2.0))
    assert "sin" in tape.show() and "multiply" in tape.to_dot()
