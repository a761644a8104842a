"""The ```python blocks of README.md and docs/*.md run, and give what their text says.

Each block runs in a fresh namespace, in a temporary directory. A block that continues an
earlier one (README's tour uses the names its first block imported) gets that block run
first, as listed in CONTEXT. Blocks that cannot run here are listed in SKIP with the reason;
SKIP entries carry a piece of the block's first line, so a moved or edited block is noticed
instead of skipping another one. Values the prose states are asserted in CHECKS (run in the
block's namespace after it). A block that needs an optional package that is not installed
is skipped (REQUIRES, or a ModuleNotFoundError naming one of OPTIONAL).
"""
import contextlib
import io
import pathlib
import re
import textwrap
import warnings

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FILES = ["README.md"] + sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))
FENCE = re.compile(r"^( *)```python[^\n]*\n(.*?)^\1```", re.S | re.M)

# Packages a block may need that a plain install lacks: a ModuleNotFoundError naming one skips.
OPTIONAL = {"scipy", "hypothesis", "openai", "cupy", "onnx", "onnxruntime", "fastapi",
            "uvicorn", "httpx", "mpi4py", "torch", "jax", "autograd", "matplotlib"}

# (file, block index, text in the block's first line) -> reason
SKIP = {
    ("docs/serving.md", 0, "from openai import OpenAI"):
        "needs a running `hecate serve` (a trained run) and the openai client",
}

# (file, block index) -> code run before the block, in its namespace
CONTEXT = {
    ("README.md", 1): [("README.md", 0)],
    ("README.md", 2): [("README.md", 0), ("README.md", 1)],
    ("docs/complex.md", 1): ["import numpy as np\nfrom tape import autodiff, Reverse, Active",
                             ("docs/complex.md", 0)],
    ("docs/complex.md", 2): [
        "import numpy as np\nfrom tape import autodiff, Reverse, Active",
        ("docs/complex.md", 0), ("docs/complex.md", 1)],
    ("docs/complex.md", 3): ["import numpy as np\nfrom tape import autodiff, Reverse, Active, "
                             "Duplicated, set_runtime_activity"],
    ("docs/complex.md", 4): [
        "import numpy as np\nfrom tape import autodiff_thunk, ReverseSplitNoPrimal, Active\n"
        "z = 3.1 + 2.7j"],
}

# (file, block index) -> the exception the text says the block raises (its name)
RAISES = {("docs/complex.md", 2): "NaNError"}

# (file, block index) -> modules to importorskip
REQUIRES: dict = {}


def _check_readme_0(ns, out):
    assert ns["dA"].tolist() == [2.0, 4.0, 6.0]
    assert ns["dx"].tolist() == [4.0, 1.0] and ns["dy"].tolist() == [0.0, 0.0]
    x0 = np.ones(3)
    assert np.allclose(ns["hvp"], [2 * np.cos(2 * x0[0]), 0.0, 0.0], rtol=1e-12)
    a = ns["autodiff"]
    assert a(ns["Reverse"], lambda x: x**2, ns["Active"], ns["Active"](3.0)) == ((6.0,),)
    assert a(ns["ReverseWithPrimal"], lambda x: x**2, ns["Active"], ns["Active"](3.0)) \
        == ((6.0,), 9.0)
    assert a(ns["Reverse"], lambda x, c: c * x**2, ns["Active"], ns["Active"](2.0),
             ns["Const"](3.0)) == ((12.0, None),)
    assert a(ns["Forward"], lambda x: x**2, ns["Duplicated"](3.0, 1.0)) == (6.0,)


def _check_readme_1(ns, out):
    W, x = ns["W"], ns["x"]
    s = 1 - np.tanh(W @ x) ** 2
    assert np.allclose(ns["dx"], W.T @ s, rtol=1e-12)   # two seeds: row 0 plus row 1
    assert ns["jvp"](ns["Duplicated"](0.0, 1.0)) == (1.0, 0.0)
    assert np.allclose(ns["t1"], s * W[:, 0]) and np.allclose(ns["t2"], s * W[:, 1])
    g = ns["gradient"](ns["Reverse"], lambda x, c: c * np.sum(x**2), x, ns["Const"](2.0))
    assert g[1] is None and np.array_equal(g[0], [4.0, 4.0, 4.0])
    J, = ns["jacobian"](ns["Forward"], lambda x: np.tanh(W @ x), x, chunk=2)
    assert J.shape == (2, 3) and np.allclose(J, s[:, None] * W)
    H = ns["hessian"](lambda x: np.sum(x**4), x)
    assert np.allclose(H, np.diag(12 * x**2))
    H = ns["hessian"](lambda p: p["b"] * np.sum(p["w"]**4), {"w": x, "b": 2.0})
    assert H.shape == (4, 4)
    assert ns["autodiff"](ns["set_strong_zero"](ns["Reverse"]), lambda x: np.minimum(1.0, 1.0 / x),
                          ns["Active"], ns["Active"](0.0)) == ((0.0,),)
    assert "records" in out or "#0" in out


def _check_complex_0(ns, out):
    assert repr(ns["mode"]) == "set_nan_check(set_strong_zero(Reverse))"


def _check_complex_1(ns, out):
    a, R, A = ns["autodiff"], ns["Reverse"], ns["Active"]
    from tape import set_strong_zero
    (d,), = a(R, ns["f"], A, A(0.0))
    assert np.isnan(d)
    assert a(set_strong_zero(R), ns["f"], A, A(0.0)) == ((0.0,),)


def _check_complex_4(ns, out):
    fwd, rev, z, A = ns["fwd"], ns["rev"], ns["z"], ns["Active"]
    (gu,), = rev(A(z), 1.0 + 0j, fwd(A(z))[0])
    (gv,), = rev(A(z), 1j, fwd(A(z))[0])
    assert np.isclose(gu, 6.2 - 5.4j) and np.isclose(gv, 5.4 + 6.2j)


CHECKS = {("README.md", 0): _check_readme_0, ("README.md", 1): _check_readme_1,
          ("docs/complex.md", 0): _check_complex_0, ("docs/complex.md", 1): _check_complex_1,
          ("docs/complex.md", 4): _check_complex_4}


def blocks(file):
    text = (ROOT / file).read_text()
    return [(text[:m.start()].count("\n") + 1, textwrap.dedent(m.group(2)))
            for m in FENCE.finditer(text)]


ALL = [(f, i, line) for f in FILES for i, (line, _) in enumerate(blocks(f))]


def _source(ref):
    if isinstance(ref, str):
        return ref
    return blocks(ref[0])[ref[1]][1]


def _exec(code, ns, name):
    exec(compile(code, name, "exec"), ns)


def test_skip_list_matches_the_blocks():
    for (f, i, first), reason in SKIP.items():
        found = blocks(f)
        assert i < len(found), f"SKIP names {f} block {i}, which does not exist"
        assert first in found[i][1].splitlines()[0], \
            f"SKIP entry {f} block {i} ({reason}) no longer matches: {found[i][1][:60]!r}"
    for key in list(CONTEXT) + list(RAISES) + list(CHECKS):
        assert key[1] < len(blocks(key[0])), f"{key} names no block"


@pytest.mark.parametrize("file,index,line", ALL, ids=[f"{f}#{i}(line{ln})" for f, i, ln in ALL])
def test_block_runs(file, index, line, tmp_path, monkeypatch):
    where = f"{file} block {index} (line {line})"
    for (f, i, _), reason in SKIP.items():
        if (f, i) == (file, index):
            pytest.skip(reason)
    for mod in REQUIRES.get((file, index), ()):
        pytest.importorskip(mod)
    monkeypatch.chdir(tmp_path)
    ns = {"__name__": "__doc_snippet__"}
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for ref in CONTEXT.get((file, index), ()):
                _exec(_source(ref), ns, f"<context of {where}>")
            try:
                _exec(blocks(file)[index][1], ns, f"<{where}>")
            except Exception as e:
                expected = RAISES.get((file, index))
                if expected is None or type(e).__name__ != expected:
                    raise
            else:
                assert (file, index) not in RAISES, \
                    f"{where}: the text says it raises {RAISES[(file, index)]}; it did not"
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] in OPTIONAL:
            pytest.skip(f"{where} needs {e.name}")
        raise AssertionError(f"{where}: {type(e).__name__}: {e}") from e
    except AssertionError:
        raise
    except Exception as e:
        raise AssertionError(f"{where}: {type(e).__name__}: {e}") from e
    check = CHECKS.get((file, index))
    if check is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            check(ns, out.getvalue())
