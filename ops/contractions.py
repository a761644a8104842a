"""Contractions: matmul (and `@`), dot, vdot, inner, outer, tensordot, einsum, kron, and
NumPy 2's vecdot, matvec and vecmat.

Three primitives carry the derivatives; the other functions are written in terms of them.

- ``matmul(x, y)``: the reverse rule is two matmuls with the last two axes swapped, summed over
  broadcast batch dimensions (1-D operands are promoted as NumPy does and demoted again).
- ``tensordot(a, b, axes=(a_axes, b_axes))``: the reverse rule is a tensordot of the cotangent
  with the other operand, transposed back into the operand's axis order.
- ``einsum(*operands, subscripts=(inputs, output))``: subscripts are normalised once (explicit
  output, ellipses and size-1 broadcasting spelled as letters). The cotangent of operand k is
  the einsum of the output cotangent with the other operands into k's subscripts:

  * a letter of k that is neither in the output nor in another operand was summed inside k
    alone, so the cotangent is constant along it and is broadcast back (a view, not a copy);
  * a letter repeated in k (``'ii->i'``) took a diagonal, so the cotangent is scattered onto
    that diagonal (zeros elsewhere), as the reverse of np.diagonal is.

Every rule is built from these primitives and other differentiable NumPy calls, so derivatives of
any order work. Complex operands follow the holomorphic (transpose, not adjoint) convention of the
other rules; `vdot` conjugates its first argument through `np.conjugate`.
"""
from __future__ import annotations

import math

import numpy as np

from tape.backend import array_module
from tape.core import Tracer, peek
from tape.rules import inactive, register_function, register_ufunc
from tape.views import mark_view

from ._util import add_tangents, defprimitive, numpy_scalar, shape_of, unbroadcast
from .einsum_plan import contract
from .einsum_subscripts import (checked_result_dtype, normalize_subscripts,
                                sublist_subscripts)
from .indexing import scatter_add
from .shape import transpose

def _dtype(x):
    dt = getattr(x, "dtype", None)
    return dt if dt is not None else np.asarray(x).dtype   # np.result_type reads a list as a dtype


def _swap_last(x):
    """x with its last two axes exchanged (a batched transpose)."""
    nd = len(shape_of(x))
    return np.transpose(x, tuple(range(nd - 2)) + (nd - 1, nd - 2))


# -- matmul ---------------------------------------------------------------------------------------
def _sequence_as_array(x):
    """A plain (nested) list or tuple operand, as NumPy would read it."""
    return np.asarray(x) if isinstance(x, (list, tuple)) else x


def _matmul_augmented(cfg, x, y):
    # d(x@y)/dx needs y and d(x@y)/dy needs x: keep an operand only if the other side is active.
    x, y = _sequence_as_array(x), _sequence_as_array(y)
    saved = (x if cfg.active[1] else None, y if cfg.active[0] else None,
             shape_of(x), shape_of(y))
    return np.matmul(x, y), saved


def _matmul_reverse(cfg, saved, g):
    x, y, sx, sy = saved
    nx, ny = len(sx), len(sy)
    if nx == 1 and ny == 1:          # an inner product: g is a scalar
        return (g * y if cfg.active[0] else None), (g * x if cfg.active[1] else None)
    # Promote 1-D operands as NumPy does ((k,) -> (1, k) on the left, (k, 1) on the right).
    gs = shape_of(g)
    if ny == 1:
        gs = gs + (1,)
    if nx == 1:
        gs = gs[:-1] + (1,) + gs[-1:]
    g2 = np.reshape(g, gs) if gs != shape_of(g) else g
    gx = gy = None
    if cfg.active[0]:
        y_t = np.reshape(y, (1, sy[0])) if ny == 1 else _swap_last(y)
        gx = matmul(g2, y_t)
        gx = np.reshape(unbroadcast(gx, (1, sx[0])), sx) if nx == 1 else unbroadcast(gx, sx)
    if cfg.active[1] and ny == 2 and nx > 2:
        # A stack times one matrix (x @ W): fold the batch into the rows, so the batch sum
        # happens inside a single matmul instead of on a (batch, k, m) intermediate.
        # The row count is spelled out: a -1 cannot be inferred when k or m is 0.
        rows = math.prod(sx[:-1])
        gy = matmul(_swap_last(np.reshape(x, (rows, sx[-1]))), np.reshape(g, (rows, sy[-1])))
    elif cfg.active[1]:
        x_t = np.reshape(x, (sx[0], 1)) if nx == 1 else _swap_last(x)
        gy = matmul(x_t, g2)
        gy = np.reshape(unbroadcast(gy, (sy[0], 1)), sy) if ny == 1 else unbroadcast(gy, sy)
    return gx, gy


def _matmul_forward(cfg, primals, tangents):
    x, y = (_sequence_as_array(p) for p in primals)
    tx, ty = tangents
    return (matmul(x, y), add_tangents(None if tx is None else matmul(tx, y),
                                       None if ty is None else matmul(x, ty)))


matmul = defprimitive("matmul", np.matmul, _matmul_augmented, _matmul_reverse, _matmul_forward)
matmul.reverse_results = "fresh"   # never None for an active argument; new arrays (or views)


def _matmul(x1, x2, /, **kwargs):
    """np.matmul(x1, x2) and `x1 @ x2` on traced values (1-D operands, broadcast stacks)."""
    _refuse_keywords("matmul", kwargs)
    return matmul(x1, x2)


register_ufunc(np.matmul, _matmul)


def _refuse_keywords(name: str, kwargs: dict) -> None:
    given = sorted(k for k, v in kwargs.items() if v is not None)
    if given:
        raise NotImplementedError(f"np.{name} with {given} is not supported on traced values")


def _conjugated(x):
    return np.conjugate(x) if np.issubdtype(_dtype(x), np.complexfloating) else x


def _vecdot(x1, x2, /, *, axis=-1, keepdims=False, **kwargs):
    """np.vecdot: the dot product along `axis` (the first operand conjugated), broadcasting
    the other axes, as one batched matmul of a row by a column."""
    _refuse_keywords("vecdot", kwargs)
    a = np.moveaxis(_conjugated(_sequence_as_array(x1)), axis, -1)
    b = np.moveaxis(_sequence_as_array(x2), axis, -1)
    out = matmul(a[..., None, :], b[..., :, None])[..., 0, 0]
    return np.expand_dims(out, axis) if keepdims else numpy_scalar(out)


def _matvec(x1, x2, /, **kwargs):
    """np.matvec: matrices (last two axes) times vectors (last axis), broadcast stacks."""
    _refuse_keywords("matvec", kwargs)
    return numpy_scalar(matmul(x1, _sequence_as_array(x2)[..., None])[..., 0])


def _vecmat(x1, x2, /, **kwargs):
    """np.vecmat: conjugated vectors (last axis) times matrices (last two axes)."""
    _refuse_keywords("vecmat", kwargs)
    return numpy_scalar(matmul(_conjugated(_sequence_as_array(x1))[..., None, :], x2)[..., 0, :])


for _name, _rule in (("vecdot", _vecdot), ("matvec", _matvec), ("vecmat", _vecmat)):
    if hasattr(np, _name):          # NumPy 2.0 has vecdot, 2.2 matvec and vecmat
        register_ufunc(getattr(np, _name), _rule)


# -- tensordot ------------------------------------------------------------------------------------
def _tensordot_augmented(cfg, a, b, axes):
    saved = (a if cfg.active[1] else None, b if cfg.active[0] else None,
             len(shape_of(a)), len(shape_of(b)), axes)
    return np.tensordot(a, b, axes=axes), saved


def _tensordot_reverse(cfg, saved, g):
    a, b, na, nb, (a_axes, b_axes) = saved
    free_a = [i for i in range(na) if i not in a_axes]
    free_b = [i for i in range(nb) if i not in b_axes]
    ga = gb = None
    if cfg.active[0]:
        # Contract g's trailing (b-free) axes with b's free axes; what is left is a's free axes,
        # then b's contracted axes in b's order, each standing for its paired axis of a.
        g_axes = tuple(range(len(free_a), len(free_a) + len(free_b)))
        ga = tensordot(g, b, axes=(g_axes, tuple(free_b)))
        order = free_a + [a_axes[b_axes.index(j)] for j in sorted(b_axes)]
        ga = _transpose_to(ga, order)
    if cfg.active[1]:
        gb = tensordot(a, g, axes=(tuple(free_a), tuple(range(len(free_a)))))
        order = [b_axes[a_axes.index(i)] for i in sorted(a_axes)] + free_b
        gb = _transpose_to(gb, order)
    return ga, gb


def _transpose_to(x, order):
    """x, whose axis i stands for axis order[i], in natural axis order."""
    perm = tuple(int(p) for p in np.argsort(order))
    return x if perm == tuple(range(len(perm))) else np.transpose(x, perm)


def _tensordot_forward(cfg, primals, tangents, axes):
    a, b = primals
    ta, tb = tangents
    return (tensordot(a, b, axes=axes),
            add_tangents(None if ta is None else tensordot(ta, b, axes=axes),
                         None if tb is None else tensordot(a, tb, axes=axes)))


tensordot = defprimitive("tensordot", lambda a, b, axes: np.tensordot(a, b, axes=axes),
                         _tensordot_augmented, _tensordot_reverse, _tensordot_forward)


def _tensordot(a, b, axes=2):
    """np.tensordot with `axes` an int N (last N of a with first N of b; a 0-d array too) or a
    pair of axis sequences (or ints); negative axes allowed, out-of-range ones refused.

    >>> import tape
    >>> tape.autodiff(tape.Reverse, lambda x: np.tensordot(x, np.ones(3), axes=([1], [0])).sum(),
    ...               tape.Active, tape.Active(np.ones((2, 3))))
    ((array([[1., 1., 1.],
           [1., 1., 1.]]),),)
    """
    na, nb = len(shape_of(a)), len(shape_of(b))
    if isinstance(axes, (int, np.integer)) or (isinstance(axes, np.ndarray) and axes.ndim == 0):
        n = int(axes)
        a_axes, b_axes = tuple(range(na - n, na)), tuple(range(n))
    else:
        a_axes, b_axes = axes
        a_axes = (a_axes,) if isinstance(a_axes, (int, np.integer)) else tuple(a_axes)
        b_axes = (b_axes,) if isinstance(b_axes, (int, np.integer)) else tuple(b_axes)
        if len(a_axes) != len(b_axes):
            raise ValueError("shape-mismatch for sum: tensordot axes differ in length")
        a_axes = tuple(_axis_in_range(i, na, "a") for i in a_axes)
        b_axes = tuple(_axis_in_range(i, nb, "b") for i in b_axes)
    return tensordot(a, b, axes=(a_axes, b_axes))


def _axis_in_range(axis, ndim: int, name: str) -> int:
    # A modulo alone would read axis 5 of a 2-d operand as axis 1 (NumPy refuses it).
    if not -ndim <= int(axis) < ndim:
        raise np.exceptions.AxisError(f"np.tensordot: axis {int(axis)} is out of bounds for "
                                      f"operand {name} of dimension {ndim}")
    return int(axis) % ndim


register_function(np.tensordot, _tensordot)


# -- einsum ---------------------------------------------------------------------------------------
def _einsum_impl(*operands, subscripts, optimize=False):
    inputs, output = subscripts
    xp = next((m for m in map(array_module, operands) if m is not np), np)
    return contract(xp, inputs, output, operands, optimize)


def _einsum_augmented(cfg, *operands, subscripts, optimize=False):
    active = cfg.active
    # Operand j is needed by the cotangent of every *other* active operand.
    n_active = sum(active)
    saved_ops = tuple(op if n_active - bool(active[j]) > 0 else None
                      for j, op in enumerate(operands))
    shapes = tuple(shape_of(op) for op in operands)
    return (einsum(*operands, subscripts=subscripts, optimize=optimize),
            (saved_ops, shapes, subscripts, optimize))


def _einsum_reverse(cfg, saved, g):
    operands, shapes, (inputs, output), optimize = saved
    return tuple(_einsum_operand_ct(g, k, operands, shapes[k], inputs, output, optimize)
                 if cfg.active[k] else None for k in range(len(inputs)))


def _einsum_operand_ct(g, k, operands, shape, inputs, output, optimize):
    """Cotangent of operand k: einsum(output cotangent, other operands -> k's letters)."""
    subs = inputs[k]
    others = [j for j in range(len(inputs)) if j != k]
    reachable = set(output).union(*(inputs[j] for j in others))
    letters = "".join(dict.fromkeys(c for c in subs if c in reachable))
    if not others and letters == output:
        reduced = g
    else:
        reduced = einsum(g, *(operands[j] for j in others),
                         subscripts=((output,) + tuple(inputs[j] for j in others), letters),
                         optimize=optimize)
    return _expand(reduced, letters, subs, shape)


def _expand(reduced, letters, subs, shape):
    """Spread `reduced` (indexed by the distinct `letters`) over an operand indexed by `subs`:
    onto the diagonal of repeated letters, and broadcast along letters missing from it."""
    if letters == subs:
        return reduced
    repeated = {c for c in subs if subs.count(c) > 1}
    if repeated:
        reduced = _onto_diagonal(reduced, letters, subs, shape, repeated)
        # Its axes are those of `subs` whose letter it kept, in order; the letters summed
        # inside this operand alone are added by broadcasting below.
        letters = "".join(c for c in subs if c in letters or c in repeated)
    if letters == subs:
        return reduced
    keep_shape = tuple(n if c in letters else 1 for c, n in zip(subs, shape))
    return np.broadcast_to(np.reshape(reduced, keep_shape), shape)


def _onto_diagonal(reduced, letters, subs, shape, repeated):
    """`reduced` (indexed by the distinct `letters`) written onto the diagonals of the repeated
    letters of `subs`, zeros elsewhere: a scatter of the n entries, not a product with an
    identity tensor. Covers the axes of `subs` whose letter is in `letters` or repeated (a
    repeated letter missing from `letters` is constant along its diagonal)."""
    xp = array_module(reduced)
    size = dict(zip(subs, shape))
    kept = "".join(c for c in dict.fromkeys(subs) if c in letters or c in repeated)
    present = [c for c in kept if c in letters]
    if "".join(present) != letters:
        reduced = transpose(reduced, tuple(letters.index(c) for c in present))
    if len(present) != len(kept):
        reduced = np.broadcast_to(
            np.reshape(reduced, tuple(size[c] if c in letters else 1 for c in kept)),
            tuple(size[c] for c in kept))
    # One index array per axis, varying along its letter's axis of `kept`: the advanced index
    # of the kept axes of `subs` has `kept`'s shape, and selects each diagonal entry once.
    ranges = {c: xp.arange(size[c]).reshape(tuple(-1 if d == c else 1 for d in kept))
              for c in kept}
    index = tuple(ranges[c] for c in subs if c in kept)
    target = tuple(n for c, n in zip(subs, shape) if c in kept)
    return scatter_add(reduced, index=index, shape=target, dtype=_dtype(reduced))


def _einsum_forward(cfg, primals, tangents, subscripts, optimize=False):
    tangent = None
    for k, t in enumerate(tangents):
        if t is not None:
            ops = list(primals)
            ops[k] = t
            tangent = add_tangents(tangent, einsum(*ops, subscripts=subscripts,
                                                   optimize=optimize))
    return einsum(*primals, subscripts=subscripts, optimize=optimize), tangent


einsum = defprimitive("einsum", _einsum_impl, _einsum_augmented, _einsum_reverse,
                      _einsum_forward)


def _einsum(*args, out=None, optimize=False, dtype=None, order="K", casting="safe"):
    """np.einsum on traced values: any subscripts (implicit or explicit output, repeated
    indices, '...'), the operand-list form ``einsum(a, [0, 1], b, [1, 2], [0, 2])``, every
    `optimize`, and `dtype`, `order`, `casting` as NumPy reads them (a cast `casting` forbids
    raises NumPy's TypeError; `dtype` casts the operands first, differentiably). A traced `out`
    is written by the tracer before this is called; a plain one cannot hold a derivative."""
    if out is not None:
        raise NotImplementedError("np.einsum(..., out=) with a plain `out` is not supported on "
                                  "traced values; allocate it with np.zeros_like")
    if isinstance(args[0], str):
        subscripts, operands = args[0], args[1:]
    else:
        output = args[-1] if len(args) % 2 else None
        pairs = args[:-1] if len(args) % 2 else args
        operands = pairs[0::2]
        subscripts = sublist_subscripts(*pairs[1::2], output=output)
    shapes = tuple(shape_of(op) for op in operands)
    normalized = normalize_subscripts(subscripts, shapes, optimize is not False)
    if len(operands) == 1 and set(normalized[0][0]) == set(normalized[1]):
        # NumPy returns this view whatever dtype=, order= and casting= say (unchecked).
        return _einsum_view(operands[0], normalized)
    keywords = dtype is not None or order != "K" or casting != "safe"
    if keywords:
        checked_result_dtype(normalized, operands, dtype, order, casting)
    if dtype is not None and any(_dtype(op) != np.dtype(dtype) for op in operands):
        # NumPy computes in `dtype`: the operands are cast to it (a complex one to a real
        # dtype loses its imaginary part, as NumPy's 'unsafe' cast does).
        operands = tuple(op.astype(dtype) if hasattr(op, "astype") else
                         np.asarray(op, dtype=dtype) for op in operands)
    result = einsum(*operands, subscripts=normalized, optimize=optimize)
    if keywords and str(order).upper() in ("C", "F"):
        result = np.asarray(result, order=str(order).upper())
    return result


def _einsum_view(a, subscripts):
    """One operand and no letter summed: NumPy returns a writeable view (a transpose, or a
    diagonal for a repeated letter), so writes into the result reach `a`, and back."""
    (term,), output = subscripts
    if len(set(term)) == len(term):
        return transpose(a, tuple(term.index(c) for c in output))
    out = einsum(a, subscripts=subscripts)
    shape = shape_of(a)
    xp = array_module(a)
    on_diagonal = []   # the mask of the entries the view shows, made at the first write

    def to_base(v):
        if not on_diagonal:
            on_diagonal.append(
                _expand(xp.ones(shape_of(out), dtype=bool), output, term, shape) != 0)
        return np.where(on_diagonal[0], _expand(v, output, term, shape), a)
    return mark_view(out, a, to_base=to_base,
                     from_base=lambda b: einsum(b, subscripts=subscripts))


register_function(np.einsum, _einsum)
# The path depends on the shapes alone: traced operands are read as their plain values.
register_function(np.einsum_path, inactive(np.einsum_path))


# -- composites -----------------------------------------------------------------------------------
def _dot(a, b, out=None):
    """np.dot: a product for scalars, matmul while b has at most two axes, otherwise a
    tensordot of a's last axis with b's second-to-last."""
    if out is not None:
        raise NotImplementedError("np.dot(..., out=) is not supported on traced values")
    a, b = _sequence_as_array(a), _sequence_as_array(b)
    na, nb = len(shape_of(a)), len(shape_of(b))
    if na == 0 or nb == 0:
        return np.multiply(_strong(a), _strong(b))
    if nb <= 2:
        return matmul(a, b)
    return tensordot(a, b, axes=((na - 1,), (nb - 2,)))


def _strong(x):
    """A Python number as the 0-d array np.dot and np.inner make of it: its dtype counts in
    the result's (np.dot(float32 array, 0.1) is float64), where `*` would keep float32."""
    value = peek(x)
    if type(value) not in (int, float, complex, bool):
        return x
    strong = np.asarray(value).dtype
    return x.astype(strong) if isinstance(x, Tracer) else np.asarray(x)


def _vdot(a, b):
    """np.vdot: the dot product of the flattened arrays, conjugating the first."""
    a, b = _conjugated(_sequence_as_array(a)), _sequence_as_array(b)
    return matmul(np.reshape(a, (-1,)), np.reshape(b, (-1,)))


def _inner(a, b):
    """np.inner: contract the last axes of a and b (a product for scalars)."""
    na, nb = len(shape_of(a)), len(shape_of(b))
    if na == 0 or nb == 0:
        return np.multiply(_strong(a), _strong(b))
    return numpy_scalar(tensordot(a, b, axes=((na - 1,), (nb - 1,))))


def _outer(a, b, out=None):
    """np.outer: the flattened a as a column times the flattened b as a row."""
    if out is not None:
        raise NotImplementedError("np.outer(..., out=) is not supported on traced values")
    return np.multiply(np.reshape(a, (-1, 1)), np.reshape(b, (1, -1)))


def _kron(a, b):
    """np.kron: a broadcast product of a and b with interleaved axes, then merged pairs."""
    sa, sb = shape_of(a), shape_of(b)
    nd = max(len(sa), len(sb))
    sa, sb = (1,) * (nd - len(sa)) + sa, (1,) * (nd - len(sb)) + sb
    a2 = np.reshape(a, tuple(d for n in sa for d in (n, 1)))
    b2 = np.reshape(b, tuple(d for n in sb for d in (1, n)))
    return np.reshape(np.multiply(a2, b2), tuple(m * n for m, n in zip(sa, sb)))


register_function(np.dot, _dot)
register_function(np.vdot, _vdot)
register_function(np.inner, _inner)
register_function(np.outer, _outer)
register_function(np.kron, _kron)
