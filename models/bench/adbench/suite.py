"""The ADBench suite as the harness runs it: problems, their standard sizes, inputs and tools.

An input comes from ADBench's file when `io.data_dir()` finds the files, else from
`generate` (same shapes and format, fixed seed), and says which in its ``source``.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from . import generate, io, runners


@dataclass(frozen=True)
class Size:
    """One standard input of a problem: its label, its file under the data folder, and how to
    generate an equivalent input."""
    label: str
    relpath: str
    generated: Callable[[], object]


@dataclass(frozen=True)
class Problem:
    """An ADBench problem: its standard sizes and the reader of its files."""
    name: str
    derivative: str          # what is differentiated: "gradient" or "Jacobian"
    sizes: tuple
    reader: Callable


def _gmm(folder, d, K, n):
    return Size(f"d{d}_K{K} n={n}", f"gmm/{folder}/gmm_d{d}_K{K}.txt",
                lambda: generate.gmm(d, K, n))


def _lstm(l, c):
    return Size(f"l{l}_c{c}", f"lstm/lstm_l{l}_c{c}.txt", lambda: generate.lstm(l, c))


def _ba(k, n, m, p):
    return Size(f"ba{k} (n={n} m={m} p={p})", f"ba/ba{k}_n{n}_m{m}_p{p}.txt",
                lambda: generate.ba(n, m, p))


PROBLEMS = {
    "gmm": Problem("gmm", "gradient", (
        _gmm("1k", 2, 5, 1000), _gmm("1k", 10, 25, 1000), _gmm("1k", 20, 50, 1000),
        _gmm("1k", 64, 10, 1000), _gmm("10k", 10, 25, 10000)), io.read_gmm),
    "lstm": Problem("lstm", "gradient", (_lstm(2, 1024), _lstm(4, 1024)), io.read_lstm),
    "ba": Problem("ba", "Jacobian", (
        _ba(1, 49, 7776, 31843), _ba(2, 21, 11315, 36455), _ba(3, 161, 48126, 182072)),
        io.read_ba),
}


def load(problem: Problem, size: Size, generated_only: bool = False):
    """(input, source): ADBench's file when available (and not `generated_only`), else a
    generated input of the same size."""
    folder = None if generated_only else io.data_dir()
    if folder is not None and (folder / size.relpath).is_file():
        return problem.reader(folder / size.relpath), f"ADBench {size.relpath}"
    return size.generated(), "generated (seed 0)"

# --------------------------------------------------------------------------------------------
# Tools: Hecate and the peers, each as a `prepare(problem_name, input) -> runners.Prepared`.


@dataclass(frozen=True)
class Tool:
    """Hecate or a peer, and how to prepare its calls on an input."""
    name: str
    module: str | None       # the peer module under models.bench.adbench (None: Hecate)
    options: tuple = ()      # extra positional arguments of its prepare functions
    package: str = ""        # the library it needs, for the version and the "skipped" note

    def prepare(self, problem: str, inp) -> runners.Prepared:
        if self.module is None:
            return getattr(runners, f"hecate_{problem}")(inp, *self.options)
        module = importlib.import_module(f"{__package__}.{self.module}")
        return getattr(module, f"prepare_{problem}")(inp, *self.options)


TOOLS = (
    Tool("hecate", None),
    Tool("hecate-compiled", None, (True,)),   # tape.compile: traced once, then replayed
    Tool("autograd", "peer_autograd", package="autograd"),
    Tool("torch", "peer_torch", package="torch"),
    Tool("jax", "peer_jax", (False,), package="jax"),
    Tool("jax-jit", "peer_jax", (True,), package="jax"),
)


def available_tools(names=None):
    """(tools, skipped): the tools whose library imports (restricted to `names` if given), and
    a 'name: reason' note for each one left out."""
    tools, skipped = [], []
    for tool in TOOLS:
        if names and tool.name not in names:
            continue
        try:
            if tool.module is not None:
                importlib.import_module(f"{__package__}.{tool.module}")
        except Exception as exc:   # a broken install is treated like a missing one
            skipped.append(f"{tool.name}: {type(exc).__name__}: {exc}")
            continue
        tools.append(tool)
    return tools, skipped
