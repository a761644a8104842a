"""How an einsum is computed: through BLAS where it maps onto a matrix product.

NumPy's ``np.einsum`` (with its default ``optimize=False``) runs its own C loops, which never
call BLAS: ``np.einsum("kij,nkj->nki", A, B)`` at K=25, d=10, n=1000 is ten times slower than
the same contraction as a batched ``matmul``. ``optimize=True`` finds the BLAS route, but pays
about 35 us of Python planning on every call, which dominates small arrays.

`contract` plans once per subscripts and shapes (a cached `Plan`) and then

- for two operands whose letters split into batch, free and contracted ones (no letter repeated
  inside an operand) and enough arithmetic to pay for it, transposes and reshapes them into one
  ``matmul`` of ``[batch, free_a, contracted] @ [batch, contracted, free_b]`` (letters summed
  inside one operand alone are summed first);
- for three or more operands with enough arithmetic, contracts pairwise along NumPy's greedy
  path (``np.einsum_path``), computed once;
- otherwise calls ``np.einsum`` directly, the fastest route for small arrays.

Results equal ``np.einsum``'s up to the order of the floating-point sums. An explicit
``optimize=`` other than False is the caller's choice and is passed to ``np.einsum`` as given.
The primal and every derivative rule of `ops.contractions.einsum` go through here, on NumPy and
CuPy arrays alike.

>>> a, b = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(3, 4)
>>> bool(np.allclose(contract(np, ("ij", "jk"), "ik", (a, b)), a @ b))
True
"""
from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple, Optional

import numpy as np

# Below this many multiply-adds (the product of every letter's size) np.einsum's own loop is
# faster than the transposes and reshapes of a matmul (measured on 3x3 to 16x16 operands).
MIN_WORK = 2048


class MatmulPlan(NamedTuple):
    """Two operands as one (batched) matmul; see the module docstring."""
    sum_a: tuple            # axes of operand a summed inside a alone
    sum_b: tuple
    perm_a: tuple           # a (after the sums) -> [batch..., free_a..., contracted...]
    perm_b: tuple           # b (after the sums) -> [batch..., contracted..., free_b...]
    shape_a: tuple          # [n_batch, n_free_a, n_contracted]
    shape_b: tuple          # [n_batch, n_contracted, n_free_b]
    shape_out: tuple        # [batch..., free_a..., free_b...] sizes
    perm_out: tuple         # that order -> the output's letter order


class Plan(NamedTuple):
    route: str                          # "einsum", "matmul" or "path"
    matmul: Optional[MatmulPlan] = None


def _sizes(inputs: tuple, shapes: tuple) -> dict:
    return {c: n for term, shape in zip(inputs, shapes) for c, n in zip(term, shape)}


def _matmul_plan(a: str, b: str, output: str, size: dict) -> Optional[MatmulPlan]:
    if len(set(a)) != len(a) or len(set(b)) != len(b):
        return None                     # a diagonal: leave it to np.einsum
    batch = [c for c in output if c in a and c in b]
    free_a = [c for c in output if c in a and c not in b]
    free_b = [c for c in output if c in b and c not in a]
    contracted = [c for c in a if c in b and c not in output]
    sum_a = tuple(i for i, c in enumerate(a) if c not in b and c not in output)
    sum_b = tuple(i for i, c in enumerate(b) if c not in a and c not in output)
    a_kept = [c for c in a if c in b or c in output]
    b_kept = [c for c in b if c in a or c in output]
    n = lambda letters: math.prod(size[c] for c in letters)     # noqa: E731
    produced = batch + free_a + free_b
    return MatmulPlan(
        sum_a, sum_b,
        tuple(a_kept.index(c) for c in batch + free_a + contracted),
        tuple(b_kept.index(c) for c in batch + contracted + free_b),
        (n(batch), n(free_a), n(contracted)), (n(batch), n(contracted), n(free_b)),
        tuple(size[c] for c in produced),
        tuple(produced.index(c) for c in output))


@functools.lru_cache(maxsize=1024)
def plan(inputs: tuple, output: str, shapes: tuple) -> Plan:
    """The route for normalised subscripts (`ops.einsum_subscripts.normalize_subscripts`: explicit
    output, no ellipsis, equal sizes for a letter) and operand shapes.

    >>> plan(("kij", "nkj"), "nki", ((25, 10, 10), (1000, 25, 10))).route
    'matmul'
    >>> plan(("ij", "jk"), "ik", ((3, 3), (3, 3))).route
    'einsum'
    """
    size = _sizes(inputs, shapes)
    work = math.prod(size.values())
    if work < MIN_WORK or len(inputs) == 1:
        return Plan("einsum")
    if len(inputs) == 2:
        mm = _matmul_plan(inputs[0], inputs[1], output, size)
        return Plan("matmul", mm) if mm is not None else Plan("einsum")
    return Plan("path")


@functools.lru_cache(maxsize=1024)
def _greedy_path(subscripts: str, shapes: tuple) -> list:
    # np.einsum_path reads only the shapes: zero-strided stand-ins cost no memory.
    stand_ins = [np.broadcast_to(np.zeros((), np.float64), s) for s in shapes]
    return np.einsum_path(subscripts, *stand_ins, optimize="greedy")[0]


def _as_matmul(xp, p: MatmulPlan, a, b):
    if p.sum_a:
        a = xp.sum(a, axis=p.sum_a)
    if p.sum_b:
        b = xp.sum(b, axis=p.sum_b)
    a = xp.reshape(xp.transpose(a, p.perm_a), p.shape_a)
    b = xp.reshape(xp.transpose(b, p.perm_b), p.shape_b)
    return xp.transpose(xp.reshape(xp.matmul(a, b), p.shape_out), p.perm_out)


def _plain_dtypes(operands) -> bool:
    """Float and complex operands only: matmul and einsum agree on every other dtype's result
    type too, but not always on its overflow or bool arithmetic, so those stay with einsum."""
    return all(getattr(op, "dtype", np.dtype(object)).kind in "fc" for op in operands)


def contract(xp: Any, inputs: tuple, output: str, operands: tuple, optimize: Any = False):
    """The einsum ``inputs[0],inputs[1],...->output`` of plain (NumPy or CuPy) `operands`,
    by the route `plan` picks (module docstring); `optimize` other than False goes to
    ``np.einsum`` unchanged.

    >>> a = np.arange(24.0).reshape(2, 3, 4)
    >>> bool(np.allclose(contract(np, ("bij", "bjk"), "bik", (a, a.swapaxes(1, 2))),
    ...                  a @ a.swapaxes(1, 2)))
    True
    """
    subscripts = ",".join(inputs) + "->" + output
    if optimize is not False or not _plain_dtypes(operands):
        return xp.einsum(subscripts, *operands, optimize=optimize)
    shapes = tuple(op.shape for op in operands)
    p = plan(inputs, output, shapes)
    if p.route == "einsum":
        return xp.einsum(subscripts, *operands)
    if p.route == "matmul":
        out = _as_matmul(xp, p.matmul, *operands)
    elif xp is np:
        out = np.einsum(subscripts, *operands, optimize=_greedy_path(subscripts, shapes))
    else:
        out = xp.einsum(subscripts, *operands, optimize="greedy")
    return out[()] if out.ndim == 0 else out      # NumPy's plain einsum returns a scalar
