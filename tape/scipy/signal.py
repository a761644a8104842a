"""tape.scipy.signal: differentiable counterparts of scipy.signal.

`convolve` and `correlate` of N-d arrays (modes 'full', 'valid', 'same'), differentiable in
both inputs. They rest on one primitive, the convolution in 'full' or 'valid' mode, whose
derivatives are convolutions again (a convolution is bilinear):

- full:  out = a * b   ->  da = valid(g, flip(b)),  db = valid(g, flip(a))
- valid: out = a * b   ->  da = full(g, flip(b)),   db = valid(flip(a), g)

so the rules stay inside the primitive and every order of nesting works. 'same' is the centre
of 'full', and correlation is convolution with the reversed, conjugated second input. The
primal is computed by scipy.signal.convolve with the `method` asked for ('auto', 'direct' or
'fft'); the derivatives use the same method. Complex inputs follow the engine's convention
(docs/complex.md): the rules are transposes, without conjugation.

>>> from tape import gradient, Reverse
>>> a, b = np.array([1.0, 2.0, 3.0]), np.array([0.0, 1.0, 0.5])
>>> convolve(a, b)
array([0. , 1. , 2.5, 4. , 1.5])
>>> gradient(Reverse, lambda a: np.sum(convolve(a, b, mode="valid")), a)   # b flipped
(array([0.5, 1. , 0. ]),)
"""
from __future__ import annotations

from typing import Any

import numpy as np
import scipy.signal as _signal
from numpy.typing import ArrayLike

from ops._util import defprimitive, shape_of
from tape.batching import Batched
from tape.core import Tracer, peek

_MODES = ("full", "valid", "same")
_METHODS = ("auto", "direct", "fft")


# -- the primitive: full or valid convolution ------------------------------------------------------
def _conv_impl(a, b, mode, method):
    # Speed-up: a batched first input (W tangents) is one convolution with a batch axis, along
    # which b has length 1 (so it convolves each direction separately). Other batched
    # combinations fall back to one call per direction (through Batched.__array__).
    if type(a) is Batched and type(b) is not Batched:
        kernel = np.asarray(b)[None]
        return Batched(_signal.convolve(a.data, kernel, mode=mode, method=method))
    return _signal.convolve(a, b, mode=mode, method=method)


def _conv_augmented(cfg, a, b, mode, method):
    out = _conv(a, b, mode=mode, method=method)
    return out, (a if cfg.active[1] else shape_of(a), b if cfg.active[0] else shape_of(b),
                 mode, method)


def _flip(x):
    return np.flip(x, axis=tuple(range(len(shape_of(x))))) if shape_of(x) else x


def _conv_reverse(cfg, saved, g):
    a, b, mode, method = saved
    ga = gb = None
    if cfg.active[0]:
        ga = _conv(g, _flip(b), mode="valid" if mode == "full" else "full", method=method)
    if cfg.active[1]:
        if mode == "full":
            gb = _conv(g, _flip(a), mode="valid", method=method)
        else:
            gb = _conv(_flip(a), g, mode="valid", method=method)
    return ga, gb


def _conv_forward(cfg, primals, tangents, mode, method):
    a, b = primals
    ta, tb = tangents
    out = _conv(a, b, mode=mode, method=method)
    t = None
    if ta is not None:
        t = _conv(ta, b, mode=mode, method=method)
    if tb is not None:
        tb_part = _conv(a, tb, mode=mode, method=method)
        t = tb_part if t is None else t + tb_part
    return out, t


_conv = defprimitive("scipy.signal.convolve", _conv_impl, _conv_augmented, _conv_reverse,
                     _conv_forward)


# -- the public functions --------------------------------------------------------------------------
def _as_value(x):
    return x if isinstance(x, Tracer) else np.asarray(x)


def _check(name: str, in1, in2, mode: str, method: str) -> None:
    if mode not in _MODES:
        raise ValueError(f"{name}: mode must be one of {_MODES}; got {mode!r}")
    if method not in _METHODS:
        raise ValueError(f"{name}: method must be one of {_METHODS}; got {method!r}")
    if np.ndim(in1) != np.ndim(in2):
        raise ValueError(f"{name}: in1 and in2 should have the same dimensionality; got shapes "
                         f"{np.shape(in1)} and {np.shape(in2)}")


def _convolve(name: str, in1, in2, mode: str, method: str):
    s1, s2 = np.shape(in1), np.shape(in2)
    if mode == "full":
        return _conv(in1, in2, mode="full", method=method)
    if mode == "same":
        full = _conv(in1, in2, mode="full", method=method)
        start = [(n2 - 1) // 2 for n2 in s2]    # the centre of 'full', of in1's shape
        return full[tuple(slice(i, i + n1) for i, n1 in zip(start, s1))]
    if all(n1 >= n2 for n1, n2 in zip(s1, s2)):
        return _conv(in1, in2, mode="valid", method=method)
    if all(n2 >= n1 for n1, n2 in zip(s1, s2)):   # convolution commutes: put the larger first
        return _conv(in2, in1, mode="valid", method=method)
    raise ValueError(f"{name}: for 'valid' mode one input must be at least as large as the "
                     f"other in every dimension; got shapes {s1} and {s2}")


def _empty_or_scalar(in1, in2):
    """SciPy's special cases: 0-d inputs multiply; an empty input gives an empty result."""
    if np.ndim(in1) == 0:
        return in1 * in2
    if np.size(peek(in1)) == 0 or np.size(peek(in2)) == 0:
        return np.array([])
    return None


def convolve(in1: ArrayLike, in2: ArrayLike, mode: str = "full", method: str = "auto") -> Any:
    """N-d convolution of `in1` and `in2` (scipy.signal.convolve), differentiable in both.

    `mode`: 'full' (every overlap), 'valid' (complete overlaps only; one input must be at least
    as large as the other in every dimension) or 'same' (the centre of 'full', of in1's shape).

    >>> convolve(np.array([1.0, 2.0, 3.0]), np.array([1.0, 1.0]), mode="same")
    array([1., 3., 5.])
    >>> convolve(np.ones((3, 3)), np.ones((2, 2)), mode="valid")
    array([[4., 4.],
           [4., 4.]])
    """
    in1, in2 = _as_value(in1), _as_value(in2)
    _check("convolve", in1, in2, mode, method)
    special = _empty_or_scalar(in1, in2)
    return special if special is not None else _convolve("convolve", in1, in2, mode, method)


def correlate(in1: ArrayLike, in2: ArrayLike, mode: str = "full", method: str = "auto") -> Any:
    """N-d cross-correlation of `in1` and `in2` (scipy.signal.correlate): the convolution of
    in1 with in2 reversed on every axis (and conjugated), differentiable in both.

    >>> correlate(np.array([1.0, 2.0, 3.0]), np.array([0.0, 1.0, 0.5]))
    array([0.5, 2. , 3.5, 3. , 0. ])
    >>> correlate(np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.5]), mode="valid")
    array([2. , 3.5])
    """
    in1, in2 = _as_value(in1), _as_value(in2)
    _check("correlate", in1, in2, mode, method)
    if np.iscomplexobj(peek(in2)):
        in2 = np.conj(in2)
    special = _empty_or_scalar(in1, in2)
    if special is not None:
        return special
    return _convolve("correlate", in1, _flip(in2), mode, method)
