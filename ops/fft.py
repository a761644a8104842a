"""np.fft on traced values: fft, ifft, fft2, ifft2, fftn, ifftn, rfft, irfft, rfft2, irfft2,
rfftn, irfftn, hfft, ihfft, fftshift and ifftshift, with NumPy's `n` / `s`, `axis` / `axes` and
`norm` arguments, real and complex input, forward and reverse mode, every order.

Each function is NumPy's own algorithm spelled with three primitives (`ops.fft_rules`): a
complex transform over given axes (`c2c`), a real-to-half-spectrum transform along one axis
(`r2c`) and its inverse (`c2r`). Resizing an axis to `n` (NumPy crops or pads with zeros) is a
slice or an np.pad, which are differentiable on their own (their transposes are pad and slice).

>>> from tape import autodiff, Reverse, Active
>>> x = np.array([1.0, 2.0, 0.0, -1.0])
>>> (g,), = autodiff(Reverse, lambda x: np.sum(np.abs(np.fft.rfft(x)) ** 2), Active, Active(x))
>>> np.round(g, 12)      # the half spectrum counts interior bins once: not Parseval's 2 n x
array([ 6., 10.,  2., -2.])

Derivatives follow docs/complex.md: a real input (rfft's, or a real array given to fft) gets a
real derivative, a complex one gets df/dx + i df/dy; forward mode gives complex tangents for
complex results. Things that have no derivative raise rather than return a wrong number:
`out=` is refused on traced values, rfft/ihfft/rfftn refuse complex input (as NumPy does).
irfft reads only the real part of the DC bin (and of the Nyquist bin for even n), so the
imaginary parts there get a zero derivative, which is the derivative of what NumPy computes.
"""
from __future__ import annotations

import operator
import warnings
from typing import Sequence

import numpy as np
from numpy.lib.array_utils import normalize_axis_index

from tape.core import Tracer
from tape.rules import register_function

from ._util import shape_of
from .fft_rules import _SWAP, c2c, c2r, canonical_norm, r2c


# -- arguments ----------------------------------------------------------------------------------
def _array(a, out, name: str):
    if out is not None:
        raise NotImplementedError(f"np.fft.{name}(..., out=...) is not supported on traced "
                                  "values; use the returned array")
    return a if isinstance(a, Tracer) else np.asarray(a)


def _points(n, default: int, name: str) -> int:
    """A transform length: `default` for None, else a positive int (NumPy's message)."""
    if n is None:
        n = default
    try:
        n = operator.index(n)
    except TypeError:
        raise TypeError(f"np.fft.{name}: the number of points must be an integer, got "
                        f"{type(n).__name__} {n!r}") from None
    if n < 1:
        raise ValueError(f"Invalid number of FFT data points ({n}) specified.")
    return n


def _fit(a, axis: int, n: int):
    """`a` cropped or zero-padded to `n` entries along the non-negative `axis`."""
    shape = shape_of(a)
    if shape[axis] > n:
        return a[(slice(None),) * axis + (slice(0, n),)]
    if shape[axis] < n:
        widths = [(0, 0)] * len(shape)
        widths[axis] = (0, n - shape[axis])
        return np.pad(a, widths)
    return a


def _real_input(a, name: str):
    if np.dtype(getattr(a, "dtype", np.float64)).kind == "c":
        raise TypeError(f"np.fft.{name} takes real input, got dtype {a.dtype}; use np.fft."
                        f"{name.replace('rfft', 'fft').replace('ihfft', 'ifft')} for complex "
                        "input, or pass np.real(a)")


def _cook(a, s, axes, invreal: bool = False) -> tuple:
    """NumPy's reading of `s` and `axes` (with its deprecation warnings): lists of lengths
    and of non-negative axes. A None length (deprecated) is the 1-d transform's default,
    taken when that axis' turn comes."""
    ndim = len(shape_of(a))
    shapeless = s is None
    if axes is None:
        if not shapeless:
            warnings.warn("`axes` should not be `None` if `s` is not `None` (Deprecated in "
                          "NumPy 2.0); pass the axes explicitly", DeprecationWarning,
                          stacklevel=4)
        axes = list(range(-len(s), 0)) if not shapeless else list(range(ndim))
    axes = [normalize_axis_index(operator.index(ax), ndim) for ax in axes]
    s = [shape_of(a)[ax] for ax in axes] if shapeless else list(s)
    if len(s) != len(axes):
        raise ValueError("Shape and axes have different lengths.")
    if invreal and shapeless and axes:
        s[-1] = (shape_of(a)[axes[-1]] - 1) * 2
    if None in s and not shapeless:
        warnings.warn("Passing an array containing `None` values to `s` is deprecated in "
                      "NumPy 2.0; pass the lengths", DeprecationWarning, stacklevel=4)
    # -1: the input's own length along that axis.
    s = [shape_of(a)[ax] if n is not None and n == -1 else n for n, ax in zip(s, axes)]
    return s, axes


# -- the transforms, axis by axis as NumPy runs them ----------------------------------------------
def _c2c_axes(a, sizes, axes, norm, inverse: bool, name: str):
    """Complex transforms along `axes` (non-negative), NumPy's fftn order: the last first.
    Distinct axes are fitted at once and made one primitive; a repeated axis is transformed
    once per mention, each time fitted to its length."""
    if not axes:
        return a
    ndim = len(shape_of(a))
    if len(set(axes)) == len(axes):
        for ax, n in zip(axes, sizes):
            a = _fit(a, ax, _points(n, shape_of(a)[ax], name))
        return c2c(a, axes=tuple(ax - ndim for ax in axes), norm=norm, inverse=inverse)
    for ax, n in reversed(list(zip(axes, sizes))):
        a = _fit(a, ax, _points(n, shape_of(a)[ax], name))
        a = c2c(a, axes=(ax - ndim,), norm=norm, inverse=inverse)
    return a


def _rfft_axis(a, n, axis: int, norm, name: str):
    n = _points(n, shape_of(a)[axis], name)
    return r2c(_fit(a, axis, n), axis=axis - len(shape_of(a)), norm=norm)


def _irfft_axis(a, n, axis: int, norm, name: str):
    n = _points(n, (shape_of(a)[axis] - 1) * 2, name)
    return c2r(_fit(a, axis, n // 2 + 1), n=n, axis=axis - len(shape_of(a)), norm=norm)


def _axis(a, axis) -> int:
    return normalize_axis_index(operator.index(axis), len(shape_of(a)))


# -- the public functions -----------------------------------------------------------------------
def fft(a, n: int | None = None, axis: int = -1, norm: str | None = None,
        out=None):
    """np.fft.fft: the one-dimensional discrete Fourier transform.

    >>> fft(np.array([1.0, 2.0, 0.0]), n=4, norm="ortho")
    array([ 1.5+0.j,  0.5-1.j, -0.5+0.j,  0.5+1.j])
    """
    a = _array(a, out, "fft")
    return _c2c_axes(a, [n], [_axis(a, axis)], canonical_norm(norm), False, "fft")


def ifft(a, n: int | None = None, axis: int = -1, norm: str | None = None,
         out=None):
    """np.fft.ifft: the inverse of fft.

    >>> ifft(np.array([4.0, 0.0, 0.0, 0.0]))
    array([1.+0.j, 1.+0.j, 1.+0.j, 1.+0.j])
    """
    a = _array(a, out, "ifft")
    return _c2c_axes(a, [n], [_axis(a, axis)], canonical_norm(norm), True, "ifft")


def fftn(a, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
         norm: str | None = None, out=None):
    """np.fft.fftn: the transform over `axes` (all by default), each fitted to its `s` entry.

    >>> fftn(np.ones((2, 3)), s=(2, 2), axes=(0, 1)).real
    array([[4., 0.],
           [0., 0.]])
    """
    a = _array(a, out, "fftn")
    s, axes = _cook(a, s, axes)
    return _c2c_axes(a, s, axes, canonical_norm(norm), False, "fftn")


def ifftn(a, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
          norm: str | None = None, out=None):
    """np.fft.ifftn: the inverse of fftn.

    >>> ifftn(np.ones((2, 2)), norm="forward").real
    array([[4., 0.],
           [0., 0.]])
    """
    a = _array(a, out, "ifftn")
    s, axes = _cook(a, s, axes)
    return _c2c_axes(a, s, axes, canonical_norm(norm), True, "ifftn")


def fft2(a, s: Sequence[int] | None = None, axes: Sequence[int] = (-2, -1),
         norm: str | None = None, out=None):
    """np.fft.fft2: fftn over the last two axes by default.

    >>> fft2(np.eye(2)).real
    array([[2., 0.],
           [0., 2.]])
    """
    return fftn(a, s, axes, norm, out)


def ifft2(a, s: Sequence[int] | None = None, axes: Sequence[int] = (-2, -1),
          norm: str | None = None, out=None):
    """np.fft.ifft2: ifftn over the last two axes by default.

    >>> ifft2(2 * np.eye(2)).real
    array([[1., 0.],
           [0., 1.]])
    """
    return ifftn(a, s, axes, norm, out)


def rfft(a, n: int | None = None, axis: int = -1, norm: str | None = None,
         out=None):
    """np.fft.rfft: the n // 2 + 1 non-negative frequency terms of a real input's transform.

    >>> rfft(np.array([1.0, 2.0, 3.0]))
    array([ 6. +0.j       , -1.5+0.8660254j])
    """
    a = _array(a, out, "rfft")
    _real_input(a, "rfft")
    return _rfft_axis(a, n, _axis(a, axis), canonical_norm(norm), "rfft")


def irfft(a, n: int | None = None, axis: int = -1, norm: str | None = None,
          out=None):
    """np.fft.irfft: the real signal of n points (2 (m - 1) by default) whose half spectrum is
    `a`, cropped or zero-padded to n // 2 + 1 entries.

    >>> irfft(np.array([6.0, -1.5 + 0.8660254j]), n=3)
    array([1., 2., 3.])
    """
    a = _array(a, out, "irfft")
    return _irfft_axis(a, n, _axis(a, axis), canonical_norm(norm), "irfft")


def rfftn(a, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
          norm: str | None = None, out=None):
    """np.fft.rfftn: rfft along the last of `axes`, then fft along the others.

    >>> rfftn(np.ones((2, 4)), axes=(0, 1)).real
    array([[8., 0., 0.],
           [0., 0., 0.]])
    """
    a = _array(a, out, "rfftn")
    _real_input(a, "rfftn")
    s, axes = _cook(a, s, axes)
    if not axes:
        raise ValueError("np.fft.rfftn needs at least one axis; got axes=()")
    norm = canonical_norm(norm)
    a = _rfft_axis(a, s[-1], axes[-1], norm, "rfftn")
    return _c2c_axes(a, s[:-1], axes[:-1], norm, False, "rfftn")


def irfftn(a, s: Sequence[int] | None = None, axes: Sequence[int] | None = None,
           norm: str | None = None, out=None):
    """np.fft.irfftn: ifft along all but the last of `axes` (in order), then irfft along it.

    >>> irfftn(np.array([[8.0, 0.0, 0.0], [0.0, 0.0, 0.0]]), axes=(0, 1))
    array([[1., 1., 1., 1.],
           [1., 1., 1., 1.]])
    """
    a = _array(a, out, "irfftn")
    s, axes = _cook(a, s, axes, invreal=True)
    if not axes:
        raise ValueError("np.fft.irfftn needs at least one axis; got axes=()")
    norm = canonical_norm(norm)
    # NumPy runs the inverse transforms first to last; _c2c_axes runs its list last to first.
    a = _c2c_axes(a, s[-2::-1], axes[-2::-1], norm, True, "irfftn")
    return _irfft_axis(a, s[-1], axes[-1], norm, "irfftn")


def rfft2(a, s: Sequence[int] | None = None, axes: Sequence[int] = (-2, -1),
          norm: str | None = None, out=None):
    """np.fft.rfft2: rfftn over the last two axes by default.

    >>> rfft2(np.ones((2, 2))).real
    array([[4., 0.],
           [0., 0.]])
    """
    return rfftn(a, s, axes, norm, out)


def irfft2(a, s: Sequence[int] | None = None, axes: Sequence[int] = (-2, -1),
           norm: str | None = None, out=None):
    """np.fft.irfft2: irfftn over the last two axes by default.

    >>> irfft2(np.array([[4.0, 0.0], [0.0, 0.0]]))
    array([[1., 1.],
           [1., 1.]])
    """
    return irfftn(a, s, axes, norm, out)


def hfft(a, n: int | None = None, axis: int = -1, norm: str | None = None,
         out=None):
    """np.fft.hfft: the real transform of a signal with Hermitian symmetry, given by its first
    half: irfft of conj(a) with the norm's direction swapped.

    >>> hfft(np.array([1.0, 2.0, 3.0]), n=4)
    array([ 8., -2.,  0., -2.])
    """
    a = _array(a, out, "hfft")
    norm = _SWAP[canonical_norm(norm)]
    return _irfft_axis(np.conjugate(a), n, _axis(a, axis), norm, "hfft")


def ihfft(a, n: int | None = None, axis: int = -1, norm: str | None = None,
          out=None):
    """np.fft.ihfft: the inverse of hfft, conj(rfft(a)) with the norm's direction swapped.

    >>> ihfft(np.array([8.0, -2.0, 0.0, -2.0]))
    array([1.-0.j, 2.-0.j, 3.-0.j])
    """
    a = _array(a, out, "ihfft")
    _real_input(a, "ihfft")
    norm = _SWAP[canonical_norm(norm)]
    return np.conjugate(_rfft_axis(a, n, _axis(a, axis), norm, "ihfft"))


def _shift(x, axes, sign: int):
    x = x if isinstance(x, Tracer) else np.asarray(x)
    shape = shape_of(x)
    if axes is None:
        axes = tuple(range(len(shape)))
    if isinstance(axes, (int, np.integer)):
        return np.roll(x, sign * (shape[axes] // 2), axes)
    axes = tuple(axes)
    return np.roll(x, [sign * (shape[ax] // 2) for ax in axes], axes)


def fftshift(x, axes: int | Sequence[int] | None = None):
    """np.fft.fftshift: the zero-frequency term moved to the centre (a roll by n // 2).

    >>> fftshift(np.arange(5.0))
    array([3., 4., 0., 1., 2.])
    """
    return _shift(x, axes, 1)


def ifftshift(x, axes: int | Sequence[int] | None = None):
    """np.fft.ifftshift: the inverse of fftshift (a roll by -(n // 2)).

    >>> ifftshift(np.array([3.0, 4.0, 0.0, 1.0, 2.0]))
    array([0., 1., 2., 3., 4.])
    """
    return _shift(x, axes, -1)


for _np_fn, _rule in [(np.fft.fft, fft), (np.fft.ifft, ifft), (np.fft.fftn, fftn),
                      (np.fft.ifftn, ifftn), (np.fft.fft2, fft2), (np.fft.ifft2, ifft2),
                      (np.fft.rfft, rfft), (np.fft.irfft, irfft), (np.fft.rfftn, rfftn),
                      (np.fft.irfftn, irfftn), (np.fft.rfft2, rfft2), (np.fft.irfft2, irfft2),
                      (np.fft.hfft, hfft), (np.fft.ihfft, ihfft),
                      (np.fft.fftshift, fftshift), (np.fft.ifftshift, ifftshift)]:
    register_function(_np_fn, _rule)
