"""Second-order examples for the everyday numerical routines (np.gradient, np.interp, np.cross,
convolutions, polynomials, np.trapezoid, np.unique, np.real_if_close) and the nan*-reductions,
plus variants of reductions and sorts whose awkward cases (zeros, NaN, traced bounds, every
axis) deserve a second-order check of their own. Merged into test_nested_every_op.EXAMPLES.

Inputs stay away from kinks: interpolation points inside segments, distinct values for
max/min/sort/unique, no ties at the median.
"""
import warnings

import numpy as np

x5 = np.array([0.3, -0.7, 1.1, 2.0, 0.45])
y5 = np.array([1.2, 0.5, -0.4, 0.9, -1.3])
xn5 = np.array([0.3, np.nan, 1.1, 2.0, 0.45])       # one NaN entry (a constant mask)
M23 = np.array([[0.3, -0.7, 1.1], [1.5, 0.4, -0.9]])
N23 = np.array([[0.8, 1.3, -0.2], [-1.1, 0.6, 0.45]])
T234 = np.random.default_rng(7).standard_normal((2, 3, 4))
coords5 = np.array([0.0, 0.4, 1.1, 1.5, 2.6])         # uneven spacing
c4 = np.array([0.3 + 0.8j, -0.7 + 0.2j, 1.1 - 0.5j, 0.4 + 0.1j])
NAN_MASK = np.array([[False, True, False], [False, False, False]])


def _with_nan(a):
    """a with NaN where NAN_MASK is set: a traced array holding NaN entries."""
    return np.where(NAN_MASK, np.nan, a)


def _cross2(a, b):
    with warnings.catch_warnings():   # 2-vectors: deprecated by NumPy 2.0, still supported
        warnings.simplefilter("ignore", DeprecationWarning)
        return np.cross(a, b)


EXAMPLES = {
    # differences and integration
    "np.gradient": (lambda f: np.gradient(f * f), (x5,)),
    "np.gradient[coordinates, edge_order=2]": (
        lambda f, x: np.gradient(f * f, x, edge_order=2), (x5, coords5)),
    "np.gradient[2-d, spacings per axis]": (
        lambda f, h: np.gradient(f * f, h, coords5[:3]), (M23, 0.7)),
    "np.trapezoid": (lambda y, x: np.trapezoid(y * y, x=x), (x5, coords5)),
    "np.trapezoid[dx, axis=0]": (lambda y, h: np.trapezoid(y * y, dx=h, axis=0), (M23, 0.3)),
    "np.diff[n=2, traced prepend and append]": (
        lambda a, p: np.diff(a * a, n=2, axis=0, prepend=p, append=p * p), (M23, N23[:1])),
    # interpolation
    "np.interp": (lambda x, fp: np.interp(x, coords5, fp * fp), (np.array([0.2, 1.3, 2.2]), y5)),
    "np.interp[traced xp, left/right]": (
        lambda x, xp, lr: np.interp(x, xp, y5, left=lr[0], right=lr[1]),
        (np.array([-0.5, 0.7, 1.3, 3.0]), coords5, np.array([0.1, -0.2]))),
    "np.interp[period]": (lambda x, fp: np.interp(x, coords5, fp, period=3.0),
                          (np.array([-0.9, 0.7, 4.3]), y5)),
    # products, convolutions, polynomials
    "np.cross": (lambda a, b: np.cross(a * a, b), (M23, N23)),
    "np.cross[axisa, axisb, axisc]": (
        lambda a, b: np.cross(a, b * b, axisa=0, axisb=0, axisc=0), (M23.T.copy(), N23.T.copy())),
    "np.cross[2-vectors]": (lambda a, b: _cross2(a * a, b), (M23[:, :2], N23[:, :2])),
    "np.convolve": (lambda a, v: np.convolve(a * a, v), (x5, y5[:3])),
    "np.convolve[same, complex]": (lambda a, v: np.convolve(a * a, v, mode="same"), (c4, x5[:3])),
    "np.correlate": (lambda a, v: np.correlate(a, v * v, mode="full"), (x5, y5[:3])),
    "np.correlate[complex, valid]": (lambda a, v: np.correlate(a * a, v), (x5, c4[:2])),
    "np.polyval": (lambda p, x: np.polyval(p * p, x), (y5[:3], x5)),
    "np.polyfit": (lambda x, y: np.polyfit(x, y * y, 2), (coords5, x5)),
    "np.polyfit[w, 2-d y]": (lambda y, w: np.polyfit(coords5, y, 1, w=w * w),
                             (np.stack([x5, y5], axis=1), 1.0 + coords5)),
    "np.real_if_close": (lambda z: np.real_if_close(z * z + 0j), (x5,)),
    # unique: away from ties every value occurs once
    "np.unique": (lambda a: np.unique(a * a), (x5,)),
    "np.unique[repeated values, axis=0]": (
        lambda a: np.unique(np.concatenate([a, a[:1]]), axis=0)[0] ** 2, (M23,)),
    "np.unique_all": (lambda a: np.unique_all(a * a).values, (x5,)),
    "np.unique_counts": (lambda a: np.unique_counts(a * a).values, (x5,)),
    "np.unique_inverse": (lambda a: np.unique_inverse(a * a).values, (x5,)),
    "np.unique_values": (lambda a: np.sort(np.unique_values(a * a)), (x5,)),
    # nan-reductions
    "np.nanmax": (lambda a: np.nanmax(_with_nan(a * a), axis=1), (M23,)),
    "np.nanmin": (lambda a: np.nanmin(_with_nan(a * a), axis=0), (M23,)),
    "np.nanvar": (lambda a: np.nanvar(_with_nan(a), axis=1, ddof=1), (M23,)),
    "np.nanstd": (lambda a: np.nanstd(_with_nan(a)), (M23,)),
    "np.nancumsum": (lambda a: np.nancumsum(_with_nan(a * a), axis=1), (M23,)),
    "np.nancumprod": (lambda a: np.nancumprod(_with_nan(a), axis=1), (M23,)),
    "np.nanmedian": (lambda a: np.nanmedian(_with_nan(a * a), axis=1), (M23,)),
    "np.nanquantile": (lambda a, q: np.nanquantile(_with_nan(a), q, axis=1),
                       (M23, np.array([0.3, 0.8]))),
    "np.nanpercentile": (lambda a: np.nanpercentile(_with_nan(a), 35.0), (M23,)),
    "np.nansum[axis=0]": (lambda a: np.nansum(_with_nan(a * a), axis=0), (M23,)),
    "np.nanmean[axis=1]": (lambda a: np.nanmean(_with_nan(a * a), axis=1), (M23,)),
    "np.nanprod[axis=1]": (lambda a: np.nanprod(_with_nan(a), axis=1), (M23,)),
    # reductions and sorts on every axis, zeros, traced bounds and weights
    "np.cumprod[several zeros, axis=None]": (
        lambda a: np.cumprod(a * np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]])), (M23,)),
    "np.clip[traced bounds]": (lambda x, lo, hi: np.clip(x, lo, hi),
                               (x5, np.full(5, -0.5), np.array([0.0, 1.0, 1.0, 1.5, 1.0]))),
    "np.clip[None lower bound]": (lambda x, hi: np.clip(x, None, hi), (x5, 0.8)),
    "np.sort[axis=None]": (lambda a: np.sort(a * a + a, axis=None), (M23,)),
    "np.sort[axis=-3]": (lambda a: np.sort(a * a + a, axis=-3), (T234,)),
    "np.partition[axis=0]": (lambda a: np.partition(a * a + a, 1, axis=0), (T234[:, 0].T.copy(),)),
    "np.median[axis=(0, 2)]": (lambda a: np.median(a * a + a, axis=(0, 2)), (T234,)),
    "np.ptp[axis=None]": (lambda a: np.ptp(a * a + a), (M23,)),
    "np.average[traced weights, axis=0]": (
        lambda a, w: np.average(a, axis=0, weights=w * w), (M23, np.array([0.7, 1.3]))),
    "np.kron[2-d]": (lambda a, b: np.kron(a, b * b), (M23, N23[:, :2])),
}
