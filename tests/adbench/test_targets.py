"""The ADBench targets `hecate bench` prints: every problem's derivative/objective limit and
GMM's time against PyTorch at every size, for eager and compiled Hecate alike."""
import doctest

from models.bench import harness


def row(problem, inp, tool, ratio, derivative_s):
    return {"problem": problem, "input": inp, "tool": tool, "ratio": ratio,
            "derivative_s": derivative_s}


def test_eager_and_compiled_rows_of_every_problem_and_size_are_judged():
    rows = [row("gmm", "d2_K5", "hecate", 4.0, 2.0),
            row("gmm", "d2_K5", "hecate-compiled", 2.9, 1.0),
            row("gmm", "d2_K5", "torch", 2.2, 1.6), row("lstm", "l2", "hecate-compiled", 2.4, 9.0),
            row("ba", "ba1", "hecate", 6.0, 1.0), {"problem": "ba", "input": "ba2",
                                                   "tool": "hecate", "error": "boom"}]
    got = {label: (round(value, 3), value <= limit)
           for label, value, limit in harness.adbench_targets(rows)}
    assert got == {
        "GMM d2_K5: Hecate gradient/objective <= 3": (4.0, False),
        "GMM d2_K5: Hecate gradient time <= PyTorch eager's": (1.25, False),
        "GMM d2_K5: Hecate compiled gradient/objective <= 3": (2.9, True),
        "GMM d2_K5: Hecate compiled gradient time <= PyTorch eager's": (0.625, True),
        "LSTM l2: Hecate compiled gradient/objective <= 4": (2.4, True),
        "BA ba1: Hecate Jacobian/objective <= 3": (6.0, False),
    }


def test_docstring_examples():
    assert doctest.testmod(harness).failed == 0
