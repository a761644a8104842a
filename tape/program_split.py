"""Long generated programs as a chain of short nested functions.

CPython finds the source line of an instruction by scanning its code object's line table from
the start (``PyCode_Addr2Line``): cheap for ordinary functions, but O(n) for a generated program
of n lines. `tracemalloc` asks for the line at every allocation, so under it a replay of an
unrolled 1024-step loop (about 30,000 lines) took 9 to 11 s against 0.05 s without it:
quadratic in the program's length (0.5 s with the cut). `load` cuts such a body into nested
functions of at most `SEGMENT` statements each, called in order, for the calls made while
`tracemalloc` traces. A value used by one segment only stays local to
it; a value that crosses segments is a variable of the outer function (a cell, declared
``nonlocal`` where it is assigned), so each value is still released at the line that releases
it, and the cut program computes exactly what the uncut one does. Short programs are left
as they are.

The cut works on the generated text: a statement starts at the function body's indentation
(generated code writes no expression across lines), and the names that cross segments are
the function's own local variables (from the compiled uncut function, ``co_varnames``) seen in
the text of more than one part. Anything unexpected (a cut that does not compile, a segment
whose local variable another part names) keeps the uncut function.

>>> src = "def run(x):\\n" + "".join(f"    x = x + {i}\\n" for i in range(5)) + "    return x\\n"
>>> load(src, {}, segment=2)(0)
10
>>> tracemalloc.start(); load(src, {}, segment=2)(0); tracemalloc.stop()
10
>>> "def _segment0():" in split_long_function(src, segment=2)
True
"""
from __future__ import annotations

import collections
import re
import tracemalloc
import types

SEGMENT = 200   # top-level statements per nested function
_INDENT = "    "
_NAME = re.compile(r"[A-Za-z_]\w*")
_CLAUSE = re.compile(r"(else|elif|except|finally|case)\b")
_LEAVES = re.compile(r"\b(return|yield|await|global|nonlocal)\b")


def load(source: str, namespace: dict, segment: int = SEGMENT):
    """Compile a generated program's `source` (one ``def run(...)``) in `namespace` and return
    its function ``run``. A long one (``2 * segment`` statements or more) runs cut into
    segments whenever `tracemalloc` is tracing: the cut is made at the first such call. Other
    calls run the uncut function, so compiling pays nothing for the cut (it takes about as
    long again as compiling: every value that crosses segments becomes a cell).

    >>> load("def run(x):\\n    return x + 1\\n", {})(1)
    2
    """
    code = compile(source, "<hecate program>", "exec")
    exec(code, namespace)  # noqa: S102
    uncut = namespace["run"]
    if sum(1 for line in source.splitlines()[1:] if _starts_statement(line)) < 2 * segment:
        return uncut
    cut = []

    def run(*args, **kwargs):
        if not tracemalloc.is_tracing():
            return uncut(*args, **kwargs)
        if not cut:
            cut.append(_cut(source, namespace, segment, code) or uncut)
        return cut[0](*args, **kwargs)
    return run


def _cut(source, namespace, segment, code):
    """The cut function, defined in `namespace` (which keeps its uncut ``run``), or None where
    the cut does not compile or would change a variable (`_segments_keep_their_names`)."""
    split = split_long_function(source, segment, _function_code(code))
    try:
        cut = compile(split, "<hecate program>", "exec")
    except SyntaxError:
        return None
    if not _segments_keep_their_names(cut):
        return None
    uncut = namespace["run"]
    exec(cut, namespace)  # noqa: S102
    namespace["run"], function = uncut, namespace["run"]
    return function


def split_long_function(source: str, segment: int = SEGMENT, code=None) -> str:
    """`source` (one function definition, body at 4 spaces) with its body cut into nested
    functions of at most `segment` statements, called in order; `source` itself when the body
    has fewer than ``2 * segment`` statements. Statements that may leave the function (a
    return) stay in it, between the segments. `code`: the uncut function's code object
    (compiled here when not given)."""
    lines = source.splitlines()
    if not lines or not lines[0].startswith("def "):
        return source
    units, body = [], lines[1:]          # units: (statements, may leave), in order
    statements = [i for i, line in enumerate(body) if _starts_statement(line)]
    if len(statements) < 2 * segment:
        return source
    if code is None:
        code = _function_code(compile(source, "<hecate program>", "exec"))
    starts = statements + [len(body)]
    run, count = [], 0
    for a, b in zip(starts, starts[1:]):
        text = body[a:b]
        if any(_LEAVES.search(line) for line in text):
            if run:
                units.append((run, False))
                run, count = [], 0
            units.append((text, True))
            continue
        run.extend(text)
        count += 1
        if count == segment:
            units.append((run, False))
            run, count = [], 0
    if run:
        units.append((run, False))
    local = set(code.co_varnames) | set(code.co_cellvars)
    seen: dict = {}     # name -> how many parts name it
    for text, _ in units:
        for name in set(_NAME.findall("\n".join(text))) & local:
            seen[name] = seen.get(name, 0) + 1
    params = set(code.co_varnames[:code.co_argcount + code.co_kwonlyargcount])
    shared = {n for n, k in seen.items() if k > 1} | params
    out = [lines[0]]
    crossing = sorted(shared - params)
    if crossing:   # the outer function binds them, so that `nonlocal` finds them
        out.append(f"{_INDENT}{' = '.join(crossing)} = None")
    k = 0
    for text, leaves in units:
        if leaves:
            out.extend(text)
            continue
        names = sorted(set(_NAME.findall("\n".join(text))) & shared)
        out.append(f"{_INDENT}def _segment{k}():")
        if names:
            out.append(f"{_INDENT * 2}nonlocal {', '.join(names)}")
        out.extend(_INDENT + line for line in text)
        out.append(f"{_INDENT}_segment{k}()")
        k += 1
    return "\n".join(out) + "\n"


def _starts_statement(line: str) -> bool:
    """Whether a line of the body starts a statement: written at the body's indentation, and
    not a comment or a clause of the statement before (``else:``, ``except ...:``)."""
    return (line.startswith(_INDENT) and line[4:5] not in (" ", "#", "")
            and not _CLAUSE.match(line, 4))


def _function_code(module_code):
    """The code object of the one function a compiled module defines."""
    return next(c for c in module_code.co_consts if isinstance(c, types.CodeType))


def _segments_keep_their_names(module_code) -> bool:
    """Whether the cut changed no variable: a segment's local variable is named by no code
    outside that segment (in the outer function, another segment or what they define; a
    crossing name a segment failed to declare ``nonlocal`` shows there, as a variable or a
    global lookup). The check that makes the text cut safe; attribute names that happen to
    match only keep the uncut function."""
    outer = _function_code(module_code)
    parts = [c for c in outer.co_consts if isinstance(c, types.CodeType)]
    named = [_names(c) for c in parts]
    outer_names = set(outer.co_varnames) | set(outer.co_cellvars) | set(outer.co_names)
    parts_naming = collections.Counter(name for names in named for name in names)
    for code, names in zip(parts, named):
        if code.co_name.startswith("_segment") and any(
                name in outer_names or parts_naming[name] > 1 for name in code.co_varnames):
            return False
    return True


def _names(code) -> set:
    """Every name a code object and the code it defines use: variables and global lookups."""
    found = set(code.co_varnames) | set(code.co_cellvars) | set(code.co_freevars)
    found |= set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            found |= _names(c)
    return found
