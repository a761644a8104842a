"""NumPy's views among traced values: which indexing gives a view, and the links that let a write
into a view reach its base and a write into a base reach its live views, as in NumPy.
"""
from __future__ import annotations

import weakref

import numpy as np

from .core import Tracer, peek
from .rule_tables import METHOD_RULES


def mark_view(out, base, index=Ellipsis, to_base=None, from_base=None, check_memory=False):
    """Record that `out` is a NumPy view of `base`: writes into `out` reach `base`
    (`base[index] = out`, or `base[index] = to_base(out)` for reshaped or transposed views),
    and writes into `base` reach `out` (`out = base[index]`, or `from_base(base)`).
    With `check_memory`, only when NumPy itself returned a view (reshape may copy)."""
    if not (isinstance(out, Tracer) and isinstance(base, Tracer) and out.level is base.level):
        return out
    if check_memory and not np.may_share_memory(peek(out), peek(base)):
        return out
    out.view_of = (base, index, to_base, from_base)
    views = getattr(base, "views", None)
    if views is None:
        views = base.views = []
    elif len(views) % 64 == 63:   # keep the list short when many temporary views come and go
        views[:] = [ref for ref in views if ref() is not None]
    views.append(weakref.ref(out))
    return out


def mark_read_only_view(out, base, from_base):
    """Record that `out` is a read-only NumPy view of `base` (np.diagonal, np.broadcast_to):
    it sees later writes into `base` (re-derived as `from_base(base)`), and a write into it
    raises, as in NumPy."""
    out = mark_view(out, base, from_base=from_base)
    if getattr(out, "view_of", None) is not None:
        out.write_guard = _refuse_read_only_write
    return out


def is_read_only(tracer) -> bool:
    """Whether a write into `tracer` raises, as into NumPy's read-only view it stands for.

    >>> is_read_only(np.ones(2))
    False
    """
    return getattr(tracer, "write_guard", None) is _refuse_read_only_write


def _refuse_read_only_write(tracer):
    raise ValueError("assignment destination is read-only")


def _refresh_views(base):
    """After `base` was written, its live views see the new values, as NumPy views do: each
    is re-derived from `base` (`base[index]`, or `from_base(base)`)."""
    views = getattr(base, "views", None)
    if not views:
        return
    live = []
    for ref in views:
        view = ref()
        if view is None:
            continue
        live.append(ref)
        _, index, _, from_base = view.view_of
        view._become(METHOD_RULES["__getitem__"](base, index) if from_base is None
                     else from_base(base))
        _refresh_views(view)
    base.views = live


def _same(value):
    return value


def _is_view_index(index, ndim: int) -> bool:
    """Whether NumPy's `x[index]` is a view of `x` (NumPy's rules, exactly): basic indexing
    (ints, slices, None, Ellipsis) gives a view, except an integer on every axis, which gives a
    scalar (a copy). Advanced indexing (integer or boolean arrays, 0-d arrays, lists, bools)
    gives a copy."""
    items = index if isinstance(index, tuple) else (index,)
    only_integers = True
    for i in items:
        if isinstance(i, Tracer):   # a traced integer (a compiling trace's np.argmax): its type
            i = peek(i)             # decides, as NumPy's would (a NumPy integer, or a 0-d array)
        if isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_)):
            continue
        if i is None or i is Ellipsis or isinstance(i, slice):
            only_integers = False
            continue
        return False   # advanced indexing
    return not (only_integers and len(items) == ndim)
