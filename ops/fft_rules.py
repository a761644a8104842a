"""The three primitives under np.fft, each with its rules: `c2c` (complex to complex over given
axes), `r2c` (real to half spectrum along one axis) and `c2r` (half spectrum to real along one
axis). Sizes are already fitted by the caller (`ops.fft`), so every primitive is a fixed linear
map and its rules are linear maps too, written with these same primitives (so they are
differentiable again, to every order).

Transposes, in the transpose convention of docs/complex.md (a cotangent `g` of `y` pairs with
`dy` as ``Re sum(g * dy)``, no conjugate):

- The DFT matrix ``F[j, k] = exp(-2 pi i jk / n)`` is symmetric, and so is the inverse one, so a
  c2c transform is its own transpose: same direction, same norm.
- r2c is ``y = S F x`` for real x, S keeping the first ``m = n // 2 + 1`` bins. Its transpose is
  ``Re(F pad(g))`` = ``n * irfft(w * conj(g))`` where `w` halves the bins that irfft counts twice
  (all but DC and, for even n, Nyquist): irfft(H) is ``Re(IF pad(c * H))`` with c = 2 on those
  bins, 1 elsewhere.
- c2r is ``y = Re(IF pad(c * H))``, so its transpose is ``c * conj(rfft(Re g)) / n``.

The factors n and 1/n are exactly what swapping the norm's direction gives ("backward" and
"forward" trade places, "ortho" stays), so each rule is one primitive call with the swapped
norm, a conjugate and the weights.
"""
from __future__ import annotations

import numpy as np

from tape.backend import array_module
from tape.batching import Batched

from ._util import defprimitive, shape_of

NORMS = {None: "backward", "backward": "backward", "ortho": "ortho", "forward": "forward"}
_SWAP = {"backward": "forward", "ortho": "ortho", "forward": "backward"}


def canonical_norm(norm) -> str:
    """`norm` as one of "backward", "ortho", "forward" (None means "backward")."""
    try:
        return NORMS[norm]
    except (KeyError, TypeError):
        raise ValueError(f'Invalid norm value {norm!r}; should be "backward", "ortho" or '
                         '"forward" (or None, meaning "backward").') from None


def _is_real(x) -> bool:
    return np.dtype(getattr(x, "dtype", np.float64)).kind != "c"


def _bin_weights(n: int, axis: int, value: float, like):
    """`value` on the bins of an n-point half spectrum that irfft counts twice (1 .. (n-1)//2),
    1 on DC and Nyquist; shaped to broadcast along the negative `axis`, in the real precision
    of `like`."""
    w = np.ones(n // 2 + 1, dtype=np.finfo(getattr(like, "dtype", np.float64)).dtype)
    w[1:(n - 1) // 2 + 1] = value
    w = array_module(like).asarray(w)
    return w.reshape(w.shape + (1,) * (-axis - 1))


def _batchwise(transform):
    """Speed-up: a batched tangent (`tape.batching.Batched`: W directions stacked on a leading
    axis) is transformed in one call instead of once per direction. The primitives' axes are
    negative, so they never reach the batch axis."""
    def impl(x, **params):
        if type(x) is Batched:
            return Batched(transform(x.data, **params))
        return transform(x, **params)
    return impl


# -- c2c: fftn / ifftn over `axes` (negative ints), sizes as given -----------------------------
@_batchwise
def _c2c_impl(x, axes, norm, inverse):
    fft = array_module(x).fft
    return (fft.ifftn if inverse else fft.fftn)(x, axes=axes, norm=norm)


def _c2c_augmented(cfg, x, axes, norm, inverse):
    return c2c(x, axes=axes, norm=norm, inverse=inverse), (axes, norm, inverse, _is_real(x))


def _c2c_reverse(cfg, saved, g):
    axes, norm, inverse, real_input = saved
    gx = c2c(g, axes=axes, norm=norm, inverse=inverse)   # the DFT matrix is symmetric
    return (np.real(gx) if real_input else gx,)


def _c2c_forward(cfg, primals, tangents, axes, norm, inverse):
    params = dict(axes=axes, norm=norm, inverse=inverse)
    return c2c(primals[0], **params), c2c(tangents[0], **params)


c2c = defprimitive("fft_c2c", _c2c_impl, _c2c_augmented, _c2c_reverse, _c2c_forward)


# -- r2c: rfft along `axis` (negative), n = the input's length there -----------------------------
@_batchwise
def _r2c_impl(x, axis, norm):
    return array_module(x).fft.rfft(x, axis=axis, norm=norm)


def _r2c_augmented(cfg, x, axis, norm):
    return r2c(x, axis=axis, norm=norm), (axis, norm, shape_of(x)[axis])


def _r2c_reverse(cfg, saved, g):
    axis, norm, n = saved
    h = _bin_weights(n, axis, 0.5, g) * np.conj(g)
    return (c2r(h, n=n, axis=axis, norm=_SWAP[norm]),)


def _r2c_forward(cfg, primals, tangents, axis, norm):
    return r2c(primals[0], axis=axis, norm=norm), r2c(tangents[0], axis=axis, norm=norm)


r2c = defprimitive("fft_r2c", _r2c_impl, _r2c_augmented, _r2c_reverse, _r2c_forward)


# -- c2r: irfft along `axis` (negative) to n points, the input holding n // 2 + 1 there ---------
@_batchwise
def _c2r_impl(h, n, axis, norm):
    return array_module(h).fft.irfft(h, n=n, axis=axis, norm=norm)


def _c2r_augmented(cfg, h, n, axis, norm):
    return c2r(h, n=n, axis=axis, norm=norm), (n, axis, norm, _is_real(h))


def _c2r_reverse(cfg, saved, g):
    n, axis, norm, real_input = saved
    spectrum = r2c(np.real(g), axis=axis, norm=_SWAP[norm])
    gh = _bin_weights(n, axis, 2.0, spectrum) * np.conj(spectrum)
    return (np.real(gh) if real_input else gh,)


def _c2r_forward(cfg, primals, tangents, n, axis, norm):
    params = dict(n=n, axis=axis, norm=norm)
    return c2r(primals[0], **params), c2r(tangents[0], **params)


c2r = defprimitive("fft_c2r", _c2r_impl, _c2r_augmented, _c2r_reverse, _c2r_forward)
