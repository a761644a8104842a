"""Buffer reuse in a generated program (tape/program_code.py): results written over arrays
that die at the same line.

An elementwise step whose operand array is used for the last time by that step may write its
result into that operand (``v5 = sin_impl(v4, out=v4)``), and in the adjoint a product with a
cotangent that dies at that step may be taken in place (``ct9 = _times_into(ct9, d)``). No
new array is allocated: for arrays above glibc's mmap threshold (128 kB, 16k float64) a fresh
array can cost page faults or a trim of the heap, and the reused buffer is still in cache.
Arrays below `MIN_SIZE` entries are left alone.

The values are eager mode's bits: the same ufunc on the same operands into a buffer of the
result's dtype, shape *and layout* (a later sum adds in the order of the layout). NumPy
treats an output identical to an input as no overlap and runs the same loop. A new ufunc
result follows its operands' memory order, so a result is written over an operand only
where every other array operand has that operand's strides, checked at each call.

Which arrays may be written over (`reusable_values`): those only the program holds. A value
made by an *inline* step (tape/program.py: a ufunc without keywords on real floating arrays of
the result's shape, whose reverse reads values rather than saved residuals) is a fresh array.
It stays the program's alone while every step that reads it is an inline step too: any other
reader might keep a reference (a residual, a view such as ``x[0]`` or ``x.T``, user code), and
writing over the array would change what that reference sees. Leaves, results, guarded values
and values shared by a common subexpression are never written over.

>>> import numpy as np
>>> lines = ["    v2 = sin_impl(v1)", "    v3 = add_impl(v2, v0)", "    return (v3,), ()"]
>>> reuse = {0: ([1], ["v1"]), 1: ([2, 0], ["v2", "v0"])}
>>> reuse_buffers(lines, reuse, reusable={1, 2}, last={"v0": 1, "v1": 0, "v2": 1})[:2]
['    v2 = sin_impl(v1, out=v1)', '    v3 = add_impl(v2, v0, out=v2) if v0.strides == v2.strides else add_impl(v2, v0)']
"""
from __future__ import annotations

import numpy as np

from .program import AUGMENTED, _param_slots
from .program_cse import written_in_place


def reusable_values(steps, inline, values, excluded) -> set[int]:
    """Slots whose arrays a step reading them last may write its result into: results of
    inline steps, read by inline steps only, ndarrays, and not in `excluded` (leaves, results,
    guarded values, slots of repeated steps)."""
    made = set()
    for i in inline:
        kind, fn, cfg, ins, consts, params, outs = steps[i]
        if kind == AUGMENTED and isinstance(fn.impl, np.ufunc) and not fn.multiple_results:
            made.update(outs)
    for i, (kind, fn, cfg, ins, consts, params, outs) in enumerate(steps):
        if i not in inline:
            made.difference_update(ins)
            made.difference_update(_param_slots(params))
    return {s for s in made - set(excluded) if values[s][0] is np.ndarray}


# Arrays smaller than this are left alone: allocating them is cheap, and the layout checks
# below would cost more than they save.
MIN_SIZE = 4096


def large(value) -> bool:
    """Whether a traced value ``(type, shape, dtype)`` is an array worth reusing."""
    return value[0] is np.ndarray and int(np.prod(value[1])) >= MIN_SIZE


def operands_to_reuse(step, values, reusable) -> list[int]:
    """The operands of an inline `step` that its result could be written into: reusable arrays
    of the result's type, shape and dtype, in operand order, of at least `MIN_SIZE` entries."""
    kind, fn, cfg, ins, consts, params, outs = step
    if not isinstance(fn.impl, np.ufunc) or fn.multiple_results:
        return []
    result = values[outs[0]]
    if not large(result):
        return []
    return [s for s in dict.fromkeys(ins) if s in reusable and values[s] == result]


def reuse_buffers(lines: list[str], candidates: dict, reusable, last: dict) -> list[str]:
    """`lines` with ``out=`` added to the call at each line of `candidates` (line index ->
    (operand slots to try in order, names of the step's array operands)) whose operand is read
    for the last time on that line (`last`: value name -> index of the line that reads it
    last; the rewritten lines read no value anew).

    The result must have the layout eager mode gives it, since a later sum or product adds in
    the order of the layout: a ufunc's new result follows its operands' memory order, so with
    other array operands the call writes over one only when all have its strides
    (``v8 = add_impl(v5, v7, out=v5) if v7.strides == v5.strides else add_impl(v5, v7)``);
    a lone array operand (a fresh, contiguous result) is followed anyway."""
    out = list(lines)
    for n, (slots, arrays) in candidates.items():
        line = out[n]
        lhs, _, call = line.partition(" = ")
        if not call.endswith(")"):
            continue
        for s in slots:
            if s in reusable and last.get(f"v{s}") == n:
                into = f"{call[:-1]}, out=v{s})"
                others = [a for a in dict.fromkeys(arrays) if a != f"v{s}"]
                if others:
                    same = " and ".join(f"{a}.strides == v{s}.strides" for a in others)
                    into = f"{into} if {same} else {call}"
                out[n] = f"{lhs} = {into}"
                break
    return out


def times_into(g, d):
    """``g * d`` written into `g` (which the caller owns and drops) where that gives eager
    mode's result: `g` a NumPy array and `d` a number or a NumPy array of `g`'s strides; else
    a new ``g * d``, whose layout NumPy picks from both, as eagerly (CuPy arrays too).

    >>> g = np.ones((2, 3)); times_into(g, 2.0) is g
    True
    >>> times_into(g, np.ones((3, 2)).T) is g, times_into(g, np.ones(())) is g
    (False, False)
    """
    number = type(d) in (float, int) or isinstance(d, np.generic)
    if type(g) is np.ndarray and (number or (type(d) is np.ndarray and d.strides == g.strides)):
        g *= d
        return g
    return g * d


def write_inline_reverse(writer, terms, ins, out: int, indent: str, consumed: bool) -> None:
    """Add an inline reverse's `terms` ((argument index, expression, fresh) each) to the
    cotangents of the step's operand slots `ins`, through the `AdjointWriter`; `out` is the
    slot of the step's result, whose cotangent is ``g = ct<out>``.

    `consumed`: that cotangent is an array of at least `MIN_SIZE` entries dropped after the
    step (not a returned gradient). Where the program owns it and sums in place, it is handed
    on: to the one argument that takes it unchanged (``x + c``), or, with no such argument,
    multiplied in place (`times_into`) for the last term once the other terms have read it."""
    g, state = f"ct{out}", writer.states.get(out)
    consumed = consumed and writer.inplace and state is not None and state.owned
    passed = [n for n, (_, term, _) in enumerate(terms) if term == g]
    for n, (k, term, fresh) in enumerate(terms):
        if consumed and passed == [n]:
            fresh = True
        elif consumed and not passed and fresh and n == len(terms) - 1:
            term = _multiply_in_place(term, g, writer.lines, indent)
        writer.add(ins[k], term, indent, may_be_none=False, fresh=fresh)


def _multiply_in_place(term: str, g: str, lines: list, indent: str) -> str:
    """A term ``g * factor`` written as ``g = _times_into(g, factor)`` (appended to `lines`):
    the term is then `g` itself. Any other term is returned as it is."""
    prefix = f"{g} * "
    if not term.startswith(prefix):
        return term
    lines.append(f"{indent}{g} = _times_into({g}, {term[len(prefix):]})")
    return g


def derivative_partners(steps, inline, useful, computed, values) -> dict[int, str]:
    """``{step: expression}`` for the inline unary steps whose derivative the program already
    computes: sin's is cos of the same x, cos's is -sin (`Primitive.derivative_is`). Where a
    `computed` step applies that partner ufunc to the same operand slot (and nothing else),
    the reverse reads its value (``v7`` or ``-v7``) rather than evaluating it again; not
    where a later step writes into that value (``c[0] = 5.0``)."""
    made, written = {}, written_in_place(steps)
    for i, (kind, fn, cfg, ins, consts, params, outs) in enumerate(steps):
        if (computed[i] and outs[0] not in written and getattr(fn, "pure", False)
                and isinstance(fn.impl, np.ufunc) and len(ins) == 1 and ins[0] is not None and not params
                and not fn.multiple_results and values[outs[0]] == values[ins[0]]):
            made.setdefault((fn.impl, ins[0]), outs[0])
    found = {}
    for i in inline:
        kind, fn, cfg, ins, consts, params, outs = steps[i]
        partner = getattr(fn, "derivative_is", None)
        if partner is not None and useful[i] and (partner[0], ins[0]) in made:
            slot = made[partner[0], ins[0]]
            found[i] = f"v{slot}" if partner[1] > 0 else f"-v{slot}"
    return found
