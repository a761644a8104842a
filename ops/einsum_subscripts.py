"""Reading ``np.einsum``'s arguments as NumPy does: subscripts (string or operand-list form) and
the keywords ``dtype=``, ``order=`` and ``casting=``.

`normalize_subscripts` turns the subscripts into the one form every rule of
`ops.contractions.einsum` works with: an explicit output, ellipses spelled as letters, and each
size-1 axis broadcast against a longer one given a letter of its own (summed inside its operand,
which for size 1 is the identity). What NumPy refuses is refused here too, with NumPy's reason.

>>> normalize_subscripts("...ij,jk", ((5, 2, 3), (3, 4)))
(('aij', 'jk'), 'aik')
>>> sublist_subscripts([0, 1], [1, 2], output=[0, 2])
'AB,BC->AC'
"""
from __future__ import annotations

import functools
import string
import warnings
from typing import Any, Sequence

import numpy as np

LETTERS = string.ascii_letters
_ELLIPSIS = "..."


def _spare_letters(used: str):
    """Letters not in `used`, one at a time; running out is NumPy's 52-label limit."""
    for c in LETTERS:
        if c not in used:
            yield c
    raise ValueError("einsum: the subscripts, their ellipses and their broadcast axes need more "
                     f"than the {len(LETTERS)} letters a-z and A-Z")


def _check_ellipses(term: str, subscripts: str) -> None:
    if term.count(_ELLIPSIS) > 1 or "." in term.replace(_ELLIPSIS, ""):
        raise ValueError(f"einsum subscripts {subscripts!r}: each operand and the output may "
                         "hold at most one '...', and '.' only as part of one")


@functools.lru_cache(maxsize=1024)
def normalize_subscripts(subscripts: str, shapes: tuple, sum_ellipsis: bool = False) -> tuple:
    """`(inputs, output)` with an explicit output, ellipses replaced by letters, and size-1
    broadcast axes given letters of their own (summed, which for size 1 is the identity).

    With `sum_ellipsis` (NumPy's behaviour when ``optimize`` is not False) an explicit output
    without '...' sums the ellipsis axes; otherwise that is refused, as ``np.einsum`` does.

    >>> normalize_subscripts("...ij,jk", ((5, 2, 3), (3, 4)))
    (('aij', 'jk'), 'aik')
    >>> normalize_subscripts("i...->i", ((2, 3),), sum_ellipsis=True)
    (('ia',), 'i')
    """
    s = subscripts.replace(" ", "")
    if s.count("->") > 1:
        raise ValueError(f"einsum subscripts {subscripts!r} contain more than one '->'")
    lhs, explicit, out = s.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ValueError(f"einsum subscripts {subscripts!r} name {len(terms)} operands, "
                         f"but {len(shapes)} were given")
    for t in terms + [out]:
        _check_ellipses(t, subscripts)
    for ch in s.replace("->", "").replace(_ELLIPSIS, "").replace(",", ""):
        if ch not in LETTERS:
            raise ValueError(f"invalid character {ch!r} in einsum subscripts {subscripts!r}")
    spare = _spare_letters(s)
    counts = {}
    for t in terms:
        for c in t.replace(_ELLIPSIS, ""):
            counts[c] = counts.get(c, 0) + 1
    # Ellipses: each covers its operand's unnamed axes, aligned to the right.
    n_ell = [len(shp) - len(t.replace(_ELLIPSIS, "")) if _ELLIPSIS in t else 0
             for t, shp in zip(terms, shapes)]
    ell = "".join(next(spare) for _ in range(max(n_ell, default=0)))
    terms = [t.replace(_ELLIPSIS, ell[len(ell) - n:]) for t, n in zip(terms, n_ell)]
    if not explicit:
        out = ell + "".join(sorted(c for c, n in counts.items() if n == 1))
    elif _ELLIPSIS in out:
        out = out.replace(_ELLIPSIS, ell)
    elif ell and not sum_ellipsis:
        raise ValueError("output has more dimensions than subscripts given in einstein sum, "
                         "but no '...' ellipsis provided to broadcast the extra dimensions.")
    size = {}
    for t, shp in zip(terms, shapes):
        if len(t) != len(shp):
            raise ValueError(f"einsum subscripts {t!r} do not match an operand of shape {shp}")
        for c, n in zip(t, shp):
            if size.get(c, 1) not in (1, n) and n != 1:
                raise ValueError(f"einsum: size mismatch for index {c!r} ({size[c]} vs {n})")
            if n != 1:          # a size-1 axis broadcasts against any other, 0 included
                size[c] = n
            else:
                size.setdefault(c, 1)
    fixed = []
    for t, shp in zip(terms, shapes):
        own = {c: n for c, n in zip(t, shp)}
        if any(own[c] != n for c, n in zip(t, shp)):
            raise ValueError(f"einsum: repeated index in {t!r} has different sizes {shp}")
        renamed = {c: next(spare) for c in own if own[c] == 1 and size[c] != 1}
        fixed.append("".join(renamed.get(c, c) for c in t))
    if len(set(out)) != len(out) or any(c not in size for c in out):
        raise ValueError(f"einsum output subscripts {out!r} must be distinct input letters")
    return tuple(fixed), out


def _sublist_letters(sublist: Sequence) -> str:
    # NumPy's mapping of the operand-list form: 0-25 -> 'A'-'Z', 26-51 -> 'a'-'z'.
    letters = []
    for i in sublist:
        if i is Ellipsis:
            letters.append(_ELLIPSIS)
            continue
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"einsum: each subscript must be either an integer or an ellipsis, "
                            f"got {i!r}")
        if not 0 <= i < 52:
            raise ValueError(f"einsum: subscript {i} is not within the valid range [0, 52)")
        letters.append(string.ascii_uppercase[i] if i < 26 else string.ascii_lowercase[i - 26])
    return "".join(letters)


def sublist_subscripts(*sublists: Sequence, output: Sequence | None = None) -> str:
    """The subscripts string of the operand-list form ``einsum(a, [0, 1], b, [1, 2], [0, 2])``.

    >>> sublist_subscripts([0, Ellipsis], [Ellipsis, 27])
    'A...,...b'
    """
    subscripts = ",".join(_sublist_letters(s) for s in sublists)
    return subscripts if output is None else subscripts + "->" + _sublist_letters(output)


def checked_result_dtype(subscripts: tuple, operands: Sequence[Any], dtype: Any, order: Any,
                         casting: Any) -> np.dtype:
    """The dtype ``np.einsum`` gives for normalised `subscripts` (`normalize_subscripts`),
    `operands` and the keywords `dtype`, `order`, `casting`, or NumPy's own error for a cast that
    `casting` forbids or an unknown `order` or `casting`; read from size-1 stand-ins of the
    operands, so it costs no arithmetic.

    >>> ops = (np.ones((2, 2)), np.ones(2, np.float32))
    >>> checked_result_dtype((("ij", "j"), "i"), ops, None, "K", "safe")
    dtype('float64')
    >>> checked_result_dtype((("ij", "j"), "i"), ops, np.complex64, "K", "same_kind")
    dtype('complex64')
    """
    inputs, output = subscripts
    stand_ins = [np.ones((1,) * len(term), dtype=_dtype_of(op))
                 for term, op in zip(inputs, operands)]
    with warnings.catch_warnings():      # the real cast warns (ComplexWarning), not this
        warnings.simplefilter("ignore")
        return np.einsum(",".join(inputs) + "->" + output, *stand_ins, dtype=dtype,
                         order=order, casting=casting).dtype


def _dtype_of(x) -> np.dtype:
    dt = getattr(x, "dtype", None)
    return dt if isinstance(dt, np.dtype) else np.asarray(x).dtype
