"""Second-order examples for np.fft: every transform with its `n` / `s` (cropping and
zero-padding, odd and even lengths), `axis` / `axes` (subsets, negative, repeated) and each
`norm`, on real and complex input. Merged into test_nested_every_op.EXAMPLES.

The transforms are linear, so their second derivatives vanish; each example multiplies the
input by itself first (``a * a``) so that the second-order check sees a nonzero Hessian that
goes through the transform's reverse rule twice.
"""
import numpy as np

rng = np.random.default_rng(11)
r5 = rng.standard_normal(5)
r6 = rng.standard_normal(6)
R34 = rng.standard_normal((3, 4))
R235 = rng.standard_normal((2, 3, 5))
c5 = rng.standard_normal(5) + 1j * rng.standard_normal(5)
C34 = rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4))
C43 = rng.standard_normal((4, 3)) + 1j * rng.standard_normal((4, 3))
h4 = rng.standard_normal(4) + 1j * rng.standard_normal(4)   # a half spectrum, imaginary DC


def sq(f):
    """f of the input squared: a nonzero second derivative through f's rules."""
    return lambda a: f(a * a)


EXAMPLES = {
    # complex transforms
    "np.fft.fft": (sq(np.fft.fft), (r5,)),
    "np.fft.fft[complex]": (sq(np.fft.fft), (c5,)),
    "np.fft.fft[n=8, norm=ortho]": (sq(lambda a: np.fft.fft(a, n=8, norm="ortho")), (r5,)),
    "np.fft.fft[n=3, axis=0, norm=forward, complex]": (
        sq(lambda a: np.fft.fft(a, n=3, axis=0, norm="forward")), (C34,)),
    "np.fft.ifft": (sq(np.fft.ifft), (c5,)),
    "np.fft.ifft[n=7, axis=-2, norm=ortho, real]": (
        sq(lambda a: np.fft.ifft(a, n=7, axis=-2, norm="ortho")), (R34,)),
    "np.fft.ifft[n=2, norm=forward]": (sq(lambda a: np.fft.ifft(a, n=2, norm="forward")), (c5,)),
    "np.fft.fftn": (sq(np.fft.fftn), (C34,)),
    "np.fft.fftn[s=(5, 2), axes=(1, 0), norm=ortho, real]": (
        sq(lambda a: np.fft.fftn(a, s=(5, 2), axes=(1, 0), norm="ortho")), (R34,)),
    "np.fft.fftn[repeated axis, s=(3, 6)]": (
        sq(lambda a: np.fft.fftn(a, s=(3, 6), axes=(0, 0))), (C43,)),
    "np.fft.ifftn": (sq(np.fft.ifftn), (C34,)),
    "np.fft.ifftn[s=(2, 6), axes=(-1, 0), norm=forward]": (
        sq(lambda a: np.fft.ifftn(a, s=(2, 6), axes=(-1, 0), norm="forward")), (C34,)),
    "np.fft.fft2": (sq(np.fft.fft2), (R235,)),
    "np.fft.fft2[s=(4, 3), axes=(0, 2), norm=ortho]": (
        sq(lambda a: np.fft.fft2(a, s=(4, 3), axes=(0, 2), norm="ortho")), (R235,)),
    "np.fft.ifft2": (sq(np.fft.ifft2), (C34,)),
    "np.fft.ifft2[norm=forward, real]": (sq(lambda a: np.fft.ifft2(a, norm="forward")), (R34,)),
    # real input, half spectrum
    "np.fft.rfft": (sq(np.fft.rfft), (r5,)),
    "np.fft.rfft[norm=ortho, n=7]": (sq(lambda a: np.fft.rfft(a, n=7, norm="ortho")), (r6,)),
    "np.fft.rfft[n=4, axis=0, norm=forward]": (
        sq(lambda a: np.fft.rfft(a, n=4, axis=0, norm="forward")), (R34,)),
    "np.fft.rfft[even n]": (sq(np.fft.rfft), (r6,)),
    "np.fft.rfftn": (sq(np.fft.rfftn), (R34,)),
    "np.fft.rfftn[s=(5, 3), axes=(-1, 0), norm=ortho]": (
        sq(lambda a: np.fft.rfftn(a, s=(5, 3), axes=(-1, 0), norm="ortho")), (R34,)),
    "np.fft.rfftn[repeated axis]": (sq(lambda a: np.fft.rfftn(a, axes=(1, 1))), (R34,)),
    "np.fft.rfft2": (sq(np.fft.rfft2), (R235,)),
    "np.fft.rfft2[s=(2, 6), norm=forward]": (
        sq(lambda a: np.fft.rfft2(a, s=(2, 6), norm="forward")), (R235,)),
    # half spectrum to real output
    "np.fft.irfft": (sq(np.fft.irfft), (h4,)),
    "np.fft.irfft[n=7, norm=ortho]": (sq(lambda a: np.fft.irfft(a, n=7, norm="ortho")), (h4,)),
    "np.fft.irfft[n=3, axis=0, norm=forward]": (
        sq(lambda a: np.fft.irfft(a, n=3, axis=0, norm="forward")), (C43,)),
    "np.fft.irfft[real input, n=10]": (sq(lambda a: np.fft.irfft(a, n=10)), (r5,)),
    "np.fft.irfftn": (sq(np.fft.irfftn), (C34,)),
    "np.fft.irfftn[s=(4, 5), axes=(1, 0), norm=ortho]": (
        sq(lambda a: np.fft.irfftn(a, s=(4, 5), axes=(1, 0), norm="ortho")), (C34,)),
    "np.fft.irfftn[repeated axis]": (sq(lambda a: np.fft.irfftn(a, axes=(0, 0))), (C43,)),
    "np.fft.irfft2": (sq(np.fft.irfft2), (C34,)),
    "np.fft.irfft2[s=(3, 3), norm=forward]": (
        sq(lambda a: np.fft.irfft2(a, s=(3, 3), norm="forward")), (C43,)),
    # Hermitian transforms
    "np.fft.hfft": (sq(np.fft.hfft), (h4,)),
    "np.fft.hfft[n=5, norm=ortho, real]": (sq(lambda a: np.fft.hfft(a, n=5, norm="ortho")), (r5,)),
    "np.fft.hfft[n=8, axis=0, norm=forward]": (
        sq(lambda a: np.fft.hfft(a, n=8, axis=0, norm="forward")), (C34,)),
    "np.fft.ihfft": (sq(np.fft.ihfft), (r5,)),
    "np.fft.ihfft[n=4, axis=0, norm=ortho]": (
        sq(lambda a: np.fft.ihfft(a, n=4, axis=0, norm="ortho")), (R34,)),
    "np.fft.ihfft[n=9, norm=forward]": (sq(lambda a: np.fft.ihfft(a, n=9, norm="forward")), (r6,)),
    # shifts
    "np.fft.fftshift": (sq(np.fft.fftshift), (R34,)),
    "np.fft.fftshift[axes=0, complex]": (sq(lambda a: np.fft.fftshift(a, axes=0)), (C34,)),
    "np.fft.ifftshift": (sq(np.fft.ifftshift), (R235,)),
    "np.fft.ifftshift[axes=(-1,), complex]": (sq(lambda a: np.fft.ifftshift(a, axes=(-1,))),
                                              (c5,)),
}
