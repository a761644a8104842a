"""Looking at a tape: a table of its records, Graphviz pictures, and a step-by-step reverse sweep.

A split-mode tape (`autodiff_thunk`'s `forward`, or `record` below) holds the records of one
forward pass. Records keep the residuals their reverse rule needs, not their results, so the
shapes of intermediate values are recovered by sweeping the tape once with zero cotangents:
every slot on a path to the result receives a cotangent of its value's shape and dtype. (A
value no path to the result uses has no cotangent; its shape shows as ``?``.)

- `show(tape)` -> a table: record, op, input slots with shape/dtype, output shape, saved bytes.
- `to_dot(tape, path)` -> Graphviz DOT text; ``path`` ending in ``.svg``/``.png`` is rendered
  with the ``dot`` program (`GraphvizNotFound` when it is missing; the ``.dot`` is written).
- `reverse_steps(tape, seed)` -> the reverse sweep one record at a time, for teaching.
- `record(f, *annotated)` -> the tape of a plain ``autodiff(Reverse, f, ...)`` call.

>>> import numpy as np
>>> from tape import Active
>>> t = record(lambda x: np.sum(np.sin(x) * x), Active(np.ones(3)))
>>> print(show(t))                                        # doctest: +NORMALIZE_WHITESPACE
#   op        inputs                              output           saved
#0  sin       %0 (3,) float64                     %1 (3,) float64    24 B
#1  multiply  %1 (3,) float64, %0 (3,) float64    %2 (3,) float64    48 B
#2  sum       %2 (3,) float64                     %3 () float64       0 B
total: 3 records, 48 B saved (distinct arrays)
>>> [s.index for s in reverse_steps(t)]
[2, 1, 0]
"""
from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any, Callable, Iterator, NamedTuple

import numpy as np

from .activities import Active, Annotation, Const, ReverseSplitWithPrimal
from .core import Tracer
from .pytree import flatten
from .split import SplitTape, _saved_arrays, autodiff_thunk

__all__ = ["show", "to_dot", "record", "reverse_steps", "slot_shapes", "saved_bytes",
           "GraphvizNotFound", "Step"]


class GraphvizNotFound(RuntimeError):
    """The ``dot`` program is needed to render SVG/PNG and is not on PATH."""


class Step(NamedTuple):
    """One record of a reverse sweep: its cotangent in, the cotangents it sends to its inputs."""
    index: int
    record: tuple
    cotangent: Any
    input_cotangents: tuple


def record(f: Callable, *args: Any, ret: type = Active) -> SplitTape:
    """Run `f` once and return its tape (split mode), for `show`, `to_dot` and `reverse_steps`.

    Arguments are annotated as for `autodiff` (a plain value is `Const`).

    >>> from tape import Active
    >>> len(record(lambda x: x * x + 1.0, Active(2.0)))
    2
    """
    annotated = [a if isinstance(a, Annotation) else Const(a) for a in args]
    fwd, _ = autodiff_thunk(ReverseSplitWithPrimal, f, ret, *(type(a) for a in annotated))
    tape, _, _ = fwd(*annotated)
    return tape


def _result_slots(tape: SplitTape) -> list:
    """(slot, value) of every traced leaf of the result and of every overwritten argument."""
    trace = tape._trace
    out = []
    if tape._out is not None:
        for x in flatten(tape._out)[0]:
            if isinstance(x, Tracer) and x.level is trace:
                out.append((x.slot, x.value))
    for arg in tape._groups:     # buffers f wrote into (the f!(y, x) case) are results too
        for t, first in zip(arg.tracers, arg.first_slots):
            if isinstance(t, Tracer) and first is not None and t.slot != first:
                out.append((t.slot, t.value))
    return out


def reverse_steps(tape: SplitTape, seed: Any = 1.0, seeds: dict | None = None) -> Iterator[Step]:
    """Sweep `tape` backwards one record at a time, yielding each `Step`.

    `seed` is the cotangent of the result (one traced result leaf); or give `seeds`, a dict
    from slot to cotangent. The tape is kept (a split-mode tape may be swept again).

    >>> from tape import Active
    >>> t = record(lambda x: 3.0 * x * x, Active(2.0))
    >>> [(s.record[0].name, float(s.cotangent)) for s in reverse_steps(t)]
    [('multiply', 1.0), ('multiply', 2.0)]
    """
    if seeds is None:
        results = _result_slots(tape)
        if len(results) != 1:
            raise ValueError(f"the tape has {len(results)} traced results; pass seeds={{slot: "
                             "cotangent}} to say where the sweep starts")
        seeds = {results[0][0]: seed}
    ct: dict = dict(seeds)
    records = tape._trace.records
    for i in range(len(records) - 1, -1, -1):
        prim, cfg, saved, in_slots, out_slot = records[i]
        if type(out_slot) is int:
            g = ct.pop(out_slot, None)
            if g is None:
                continue
        else:
            g = tuple(ct.pop(s, None) for s in out_slot)
            if all(x is None for x in g):
                continue
        cts = tuple(prim.reverse(cfg, saved, g))
        yield Step(i, records[i], g, cts)
        for s, c in zip(in_slots, cts):
            if s is not None and c is not None:
                ct[s] = c if s not in ct else ct[s] + c


def _spec(x) -> tuple:
    dtype = getattr(x, "dtype", None)
    if dtype is None and isinstance(x, (int, float, complex)):
        dtype = np.asarray(x).dtype
    return tuple(np.shape(x)), (str(dtype) if dtype is not None else type(x).__name__)


def slot_shapes(tape: SplitTape) -> dict:
    """``{slot: (shape, dtype)}`` for the arguments, the results and every slot the result
    depends on (found by one reverse sweep with zero cotangents)."""
    specs = {}
    for arg in tape._groups:
        for leaf, first in zip(arg.leaves, arg.first_slots):
            if first is not None:
                specs[first] = _spec(leaf)
    results = _result_slots(tape)
    for s, v in results:
        specs[s] = _spec(v)
    zeros = {s: np.zeros_like(np.asarray(v)) for s, v in results
             if np.issubdtype(np.asarray(v).dtype, np.inexact)}
    if tape.width is not None or not zeros:
        return specs      # a batch tape's cotangents are stacked; keep what is known
    try:
        for step in reverse_steps(tape, seeds=zeros):
            out_slot = step.record[4]
            outs = (out_slot,) if type(out_slot) is int else out_slot
            gs = (step.cotangent,) if type(out_slot) is int else step.cotangent
            for s, g in zip(outs, gs):
                if g is not None:
                    specs.setdefault(s, _spec(g))
            for s, c in zip(step.record[3], step.input_cotangents):
                if s is not None and c is not None:
                    specs.setdefault(s, _spec(c))
    except Exception:   # noqa: BLE001 -- a rule that cannot sweep zeros: show what is known
        pass
    return specs


def _collect(saved: Any, found: dict) -> None:
    """Arrays (and NumPy scalars, which rules often save) in a record's residuals, by id."""
    if isinstance(saved, np.generic):
        found.setdefault(id(saved), saved)
    elif isinstance(saved, (float, complex)):    # a saved Python number: its float64 bytes
        found.setdefault(id(saved), np.asarray(saved))
    elif isinstance(saved, (tuple, list)):
        for v in saved:
            _collect(v, found)
    elif isinstance(saved, dict):
        for v in saved.values():
            _collect(v, found)
    else:
        _saved_arrays(saved, found)


def saved_bytes(saved: Any) -> int:
    """Bytes of the arrays a record keeps for its reverse rule (each array counted once)."""
    found: dict = {}
    _collect(saved, found)
    return sum(int(a.nbytes) for a in found.values())


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024 or unit == "MiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def _slot(s, specs) -> str:
    if s is None:
        return "const"
    shape, dtype = specs.get(s, ("?", ""))
    return f"%{s} {shape} {dtype}".rstrip()


def show(tape: SplitTape) -> str:
    """The tape as a table: index, op, input slots (shape, dtype), output, saved bytes, total.

    See the module docstring for an example.
    """
    specs = slot_shapes(tape)
    rows, every = [], {}
    for i, (prim, _, saved, in_slots, out_slot) in enumerate(tape._trace.records):
        outs = (out_slot,) if type(out_slot) is int else out_slot
        _collect(saved, every)
        rows.append((f"#{i}", prim.name, ", ".join(_slot(s, specs) for s in in_slots),
                     ", ".join(_slot(s, specs) for s in outs), _fmt_bytes(saved_bytes(saved))))
    header = ("#", "op", "inputs", "output", "saved")
    widths = [max([len(header[k])] + [len(r[k]) for r in rows]) for k in range(5)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths[:4])) + "  " + header[4]]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r[:4], widths[:4]))
                     + "  " + r[4].rjust(widths[4]))
    total = sum(int(a.nbytes) for a in every.values())
    lines.append(f"total: {len(rows)} records, {_fmt_bytes(total)} saved (distinct arrays)")
    return "\n".join(lines)


def _label(*lines: str) -> str:
    """A DOT label: each line escaped, joined by DOT's newline escape."""
    return "\\n".join(x.replace("\\", "\\\\").replace('"', '\\"') for x in lines)


def dot_source(tape: SplitTape) -> str:
    """The DOT text of `to_dot`, without writing anything."""
    specs = slot_shapes(tape)
    producer: dict = {}
    lines = ["digraph tape {", "  rankdir=TB;",
             '  node [fontname="Helvetica", fontsize=10];',
             '  edge [fontname="Helvetica", fontsize=9];']
    for arg in tape._groups:
        for k, (first, leaf) in enumerate(zip(arg.first_slots, arg.leaves)):
            if first is None:
                continue
            shape, dtype = specs.get(first, ("?", ""))
            label = _label(str(arg.path(k)), f"%{first} {shape} {dtype}")
            lines.append(f'  s{first} [label="{label}", shape=ellipse, style=filled, '
                         'fillcolor="#dbe9f6"];')
            producer[first] = f"s{first}"
    for i, (prim, _, saved, in_slots, out_slot) in enumerate(tape._trace.records):
        outs = (out_slot,) if type(out_slot) is int else out_slot
        shape = ", ".join(str(specs.get(s, ("?",))[0]) for s in outs)
        label = _label(f"#{i} {prim.name}", shape, f"saved {_fmt_bytes(saved_bytes(saved))}")
        lines.append(f'  r{i} [label="{label}", shape=box, style="rounded,filled", '
                     'fillcolor="#f3f3f3"];')
        n_const = sum(s is None for s in in_slots)
        for s in in_slots:
            if s is not None and s in producer:
                lines.append(f'  {producer[s]} -> r{i} [label="%{s}"];')
        if n_const:
            lines.append(f'  c{i} [label="{n_const} const", shape=plaintext, fontsize=8];')
            lines.append(f"  c{i} -> r{i} [style=dashed, arrowsize=0.5];")
        for s in outs:
            producer[s] = f"r{i}"
    for s, _ in _result_slots(tape):
        if s in producer:
            lines.append(f'  out{s} [label="result %{s}", shape=doublecircle, fontsize=9];')
            lines.append(f"  {producer[s]} -> out{s};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_dot(tape: SplitTape, path: str | os.PathLike | None = None) -> str:
    """Graphviz DOT text of the tape: argument leaves, one box per record, data-flow edges.

    ``path=None`` only returns the text. A path ending in ``.svg`` or ``.png`` writes the DOT
    text next to it (same name, ``.dot``) and renders it with the ``dot`` program; without
    ``dot`` on PATH this raises `GraphvizNotFound` (the ``.dot`` file is still written). Any
    other path gets the DOT text.

    >>> from tape import Active
    >>> "sin" in to_dot(record(lambda x: 2.0 * __import__("numpy").sin(x), Active(1.0)))
    True
    """
    text = dot_source(tape)
    if path is None:
        return text
    path = os.fspath(path)
    root, ext = os.path.splitext(path)
    if ext.lower() not in (".svg", ".png"):
        with open(path, "w") as fh:
            fh.write(text)
        return text
    dot_path = root + ".dot"
    with open(dot_path, "w") as fh:
        fh.write(text)
    exe = shutil.which("dot")
    if exe is None:
        raise GraphvizNotFound(
            f"cannot render {path}: graphviz is not installed (no `dot` program on PATH). The "
            f"DOT text was written to {dot_path}; install graphviz (apt install graphviz, brew "
            f"install graphviz or conda install graphviz) and run "
            f"`dot -T{ext[1:].lower()} {dot_path} -o {path}`")
    subprocess.run([exe, f"-T{ext[1:].lower()}", dot_path, "-o", path], check=True,
                   capture_output=True)
    return text


# A tape's own methods: `tape_.show()` and `tape_.to_dot(path)` (tape.split sits below).
SplitTape.show = show
SplitTape.to_dot = to_dot
