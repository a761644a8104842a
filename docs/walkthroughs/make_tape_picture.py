"""Render tape_picture.svg, the tape of sum(sin(h) * h**2) after a matrix layer.

Run: python docs/walkthroughs/make_tape_picture.py  (needs graphviz's `dot` for the SVG;
without it the DOT text is written to tape_picture.dot: render it with
`dot -Tsvg tape_picture.dot -o tape_picture.svg`, or paste it into any Graphviz viewer).
"""
import pathlib
import sys

try:
    import tape
except ImportError:   # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
    import tape

import numpy as np
from tape import Active, Const, record
from tape.visualize import GraphvizNotFound, to_dot

HERE = pathlib.Path(__file__).resolve().parent
W = np.arange(6.0).reshape(2, 3) / 10


def f(x, b):
    h = np.tanh(W @ x + b)
    return np.sum(np.sin(h) * h ** 2)


if __name__ == "__main__":
    t = record(f, Active(np.array([0.1, -0.2, 0.3])), Const(np.ones(2)))
    print(t.show())
    out = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "tape_picture.svg"
    try:
        to_dot(t, out)
        print("wrote", out)
    except GraphvizNotFound as e:
        print(e)
