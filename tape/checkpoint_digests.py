"""The digests `tape.checkpoint` keeps instead of copies, and compares in the recomputation.

A checkpointed call keeps O(1) memory per value it checks: a weighted sum of each plain array
an operation on its inputs reads (`read_digest`, kept per owner of the memory; those that die,
temporaries, by kind: `retire`, `Temporaries`), the exact Python parameters of each such
operation (`operation_key`), and a digest of each result (`result_digest`). Equal values give
equal digests; a change, a permutation too, almost surely another.
"""
from __future__ import annotations

import functools

import numpy as np

from .backend import array_module
from .core import Tracer, primal
from .residuals import operands


def plain_reads(args, params) -> list:
    """The plain NumPy arrays among an operation's operands and parameters (`operands`: one
    level of tuples and lists opened, an index ``x[i, j]``)."""
    return [x for x in operands(args, params)
            if isinstance(x, np.ndarray) and x.dtype.kind in "biufc" and x.size]


@functools.lru_cache(maxsize=16)
def _weights(n: int) -> np.ndarray:
    return np.cos(np.arange(n) * 0.7071)


def owner_of(x: np.ndarray) -> np.ndarray:
    """The array whose memory `x` views (`x` itself when it owns its memory): reads are noted
    per owner, since f makes a fresh view (``c[::-1]``, ``c.T``) of a closed-over array at
    every run, and only the owner is the same object in the recomputation."""
    base = x.base
    while isinstance(base, np.ndarray):
        x, base = base, base.base
    return x


def read_digest(x) -> tuple:
    """Shape, dtype, where in its owner's memory a view lies, and a weighted sum of a plain
    array's values (one pass): equal contents give equal digests (the same operations on the
    same values), and a change, a permutation too, almost surely another."""
    a = np.asarray(x)
    place = None
    if a.base is not None:
        place = (a.__array_interface__["data"][0] - owner_of(a).__array_interface__["data"][0],
                 a.strides)
    flat = a.reshape(-1)
    if flat.dtype.kind == "c":
        flat = np.concatenate([flat.real, flat.imag])
    flat = flat.astype(np.float64, copy=False)
    return (a.shape, a.dtype.str, place, float(flat @ _weights(flat.size)))


# Left out of an operation's key (speed-up: first). NumPy floats are a plain intermediate's
# values in the first run (np.sum of a plain array) where the recomputation has traced ones; a
# Python float (an attribute `layer.scale`) is the same in both runs of a deterministic call.
_OPAQUE = (np.ndarray, Tracer, np.floating)


def operation_key(prim, args, params) -> tuple:
    """An operation on the call's inputs by its name and its exact Python parameters (an index
    ``b[i]``: a loop variable that a lambda reads late; a Python float such as a scale read
    from an attribute); arrays, traced values and NumPy floats are left out ("*"): the first
    run holds some intermediates as plain arrays that the recomputation traces, and the plain
    arrays it reads are checked by their digests."""
    return (prim.name, tuple(map(_exact, args)),
            tuple((k, _exact(params[k])) for k in sorted(params)) if params else ())


def _exact(v):
    if isinstance(v, _OPAQUE):
        return "*"
    t = type(v)
    if t in (int, bool, str, type(None), type(Ellipsis)):
        return v
    if t is float:
        return ("float", v.hex())   # (-0.0 and NaN told apart and comparable)
    if isinstance(v, (np.integer, np.bool_)):
        return v.item()
    if t is slice:
        return ("slice", _exact(v.start), _exact(v.stop), _exact(v.step))
    if t in (tuple, list):
        return (t.__name__,) + tuple(_exact(x) for x in v)
    if isinstance(v, np.dtype):
        return ("dtype", v.str)
    return "*"


def near_key(key: tuple, keys) -> bool:
    """Whether `keys` hold `key` up to rounding in its Python floats (64 eps relative): a float
    taken from a traced value with `tape.primal` (a spectral norm used as a scale) may come out
    one rounding apart from the first run's plain computation."""
    return key in keys or any(k[0] == key[0] and _close(k, key) for k in keys)


def _close(a, b) -> bool:
    if a == "*" and _is_float_key(b) or b == "*" and _is_float_key(a):
        return True   # a traced value in one run, its Python float in the other (a scan's carry)
    if type(a) is not type(b):
        return False
    if type(a) is tuple:
        if len(a) == 2 and a[0] == "float" and b[0] == "float":
            x, y = float.fromhex(a[1]), float.fromhex(b[1])
            return x == y or (x != x and y != y) or abs(x - y) <= 64 * 2.2e-16 * max(abs(x),
                                                                                     abs(y))
        return len(a) == len(b) and all(_close(u, v) for u, v in zip(a, b))
    return a == b


def _is_float_key(k) -> bool:
    return type(k) is tuple and len(k) == 2 and k[0] == "float"


MAX_TEMPORARIES = 16   # digests kept per shape, dtype and place; past that, not checked


def retire(temporaries: dict, entry) -> None:
    """Keep the digests of a plain array that died (a temporary) by its shape, dtype and place:
    O(1) memory per kind of temporary, so that a long loop in a checkpointed call does not keep
    one per step (past `MAX_TEMPORARIES` of a kind, that kind is not checked: None)."""
    for d in entry[1]:
        pool = temporaries.setdefault(d[:3], [])
        if pool is not None:
            pool.append(d[3])
            if len(pool) > MAX_TEMPORARIES:
                temporaries[d[:3]] = None


class Temporaries:
    """The digests of the plain arrays the first run read that no longer exist (temporaries,
    ``c * 1.0`` of a closed-over ``c``): a plain array that an operation on the inputs reads in
    the recomputation, and that is not one of the first run's arrays, must be one of these (a
    deterministic function makes it again, equal to a few roundings when it comes from a
    conversion of a traced value)."""

    def __init__(self, saved):
        self.saved, self.pool = saved, None

    def known(self, x, digest) -> bool:
        if self.pool is None:   # the first run's, and those read arrays that died since
            self.pool = {k: None if v is None else list(v)
                         for k, v in self.saved.temporaries.items()}
            for entry in self.saved.reads.values():
                if entry[0]() is None:
                    retire(self.pool, entry)
        candidates = self.pool.get(digest[:3])
        if not candidates:
            return True   # nothing of its kind to compare with (or too many: not checked)
        w = digest[3]
        if w in candidates:
            return True
        eps = float(np.finfo(x.dtype).eps) if x.dtype.kind in "fc" else 0.0
        tol = 64 * eps * float(np.sum(np.abs(x)))
        return any(abs(w - w0) <= tol for w0 in candidates)


def result_digest(value) -> tuple:
    """(shape, weighted sums, tolerance) of a float result: O(1) memory per output, unlike a
    copy. The weights tell a permutation from the original. The finite values are summed
    apart from where the infinities and NaNs are, so that one of those (a -inf mask) cannot
    hide a change of the rest."""
    v = primal(value)
    xp = array_module(v)
    flat = xp.asarray(v).ravel()
    parts = (flat.real, flat.imag) if xp.iscomplexobj(flat) else (flat,)
    weights = _weights(flat.size) if xp is np else xp.cos(xp.arange(flat.size) * 0.7071)
    sums, scale = [], 0.0
    for p in parts:
        finite = xp.isfinite(p)
        clean = p if bool(finite.all()) else xp.where(finite, p, 0)
        sums += [float(xp.sum(clean)), float(clean @ weights)]
        if clean is not p:   # where each kind of non-finite value is
            sums += [float(weights @ (p == xp.inf)), float(weights @ (p == -xp.inf)),
                     float(weights @ xp.isnan(p))]
        scale += float(xp.sum(xp.abs(clean)))
    # Rules may compute the primal in another order than the plain call did: a few roundings.
    tol = 64 * float(xp.finfo(flat.dtype).eps) * scale if flat.size else 0.0
    return (tuple(v.shape) if hasattr(v, "shape") else (), tuple(sums), tol)


def same_digest(before: tuple, after: tuple) -> bool:
    (shape, sums, tol), (shape2, sums2, _) = before, after
    if shape != shape2 or len(sums) != len(sums2):
        return False
    return all(a == b or abs(a - b) <= tol for a, b in zip(sums, sums2))
