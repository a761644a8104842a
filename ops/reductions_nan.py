"""NaN-ignoring reductions beyond nansum/nanmean/nanprod: nanmax, nanmin, nanvar, nanstd,
nancumsum, nancumprod. (nanmedian, nanquantile and nanpercentile live in `ops.sorting`.)

Each replaces the NaN entries by a neutral value that carries no derivative and reduces with the
plain rule, so NaN entries get a zero derivative and the others the derivative of the reduction
over the non-NaN entries:

- nanmax / nanmin fill with -inf / +inf (ties among the remaining entries share the cotangent,
  as for np.max). A slice that is entirely NaN gives NaN, with NumPy's RuntimeWarning, and no
  derivative.
- nanvar / nanstd count the non-NaN entries per slice; where that count minus ddof is not
  positive the result is NaN (NumPy's RuntimeWarning) and carries no derivative. nanstd'(0) = 0
  on constant slices, as for np.std.
- nancumsum / nancumprod fill with 0 / 1, as NumPy defines them.

>>> from tape import autodiff, Reverse, Active
>>> (g,), = autodiff(Reverse, lambda x: np.nanmax(x), Active,
...                  Active(np.array([1.0, np.nan, 3.0])))
>>> g
array([0., 0., 1.])
"""
from __future__ import annotations

import warnings

import numpy as np

from tape.core import Tracer, primal
from tape.rules import register_function

from . import averages, extrema
from . import reductions as _r
from ._util import shape_of


def _warn(message):
    warnings.warn(message, RuntimeWarning, stacklevel=4)


def _nan_extremum(kind):
    reduce = extrema._max if kind == "max" else extrema._min
    numpy_fn = np.nanmax if kind == "max" else np.nanmin
    fill = -np.inf if kind == "max" else np.inf

    def nan_reduce(a, axis=None, out=None, keepdims=False, initial=_r._NO_VALUE,
                   where=_r._NO_VALUE):
        _r._refuse(f"nan{kind}", out, where)
        extra = {"initial": initial} if _r._given(initial) else {}
        if not _r._differentiable(a):
            return numpy_fn(primal(a), axis=axis, keepdims=keepdims, **extra)
        filled, nan = _r._without_nan(a, fill)
        result = reduce(filled, axis=axis, keepdims=keepdims, **extra)
        if not nan.any():
            return result
        empty = np.all(nan, axis=axis, keepdims=keepdims)
        if _r._given(initial):   # an initial value makes no slice empty
            return result
        if np.any(empty):
            _warn("All-NaN slice encountered")
            return np.where(empty, np.nan, result)
        return result
    nan_reduce.__doc__ = (f"np.nan{kind}: np.{kind} over the non-NaN entries; NaN entries get "
                          "a zero derivative.")
    return nan_reduce


def _nanvar(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=_r._NO_VALUE,
            mean=_r._NO_VALUE, correction=_r._NO_VALUE):
    """np.nanvar: the variance of the non-NaN entries of each slice."""
    _r._refuse("nanvar", out, where)
    if _r._given(correction):
        ddof = correction
    if not _r._differentiable(a, dtype) and not isinstance(mean, Tracer):
        extra = {"mean": mean} if _r._given(mean) else {}
        return np.nanvar(primal(a), axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims,
                         **extra)
    filled, nan = _r._without_nan(a, 0)
    axes = _r.normalize_axis(axis, len(shape_of(a)))
    # Counts in the input's real precision: an integer array would promote float32 to float64.
    wanted = np.dtype(_r._dtype(a) if dtype is None else dtype)
    real = np.finfo(wanted).dtype if wanted.kind in "fc" else np.dtype(np.float64)
    count = np.sum(~nan, axis=axes, keepdims=True).astype(real)
    if _r._given(mean):
        centre = mean
    else:
        centre = _r.sum_(filled, axis=axes, dtype=dtype, keepdims=True) / np.maximum(count, 1)
    d = np.where(nan, 0, filled - centre) if nan.any() else filled - centre
    square = d.real * d.real + d.imag * d.imag if np.iscomplexobj(d) else d * d
    total = _r.sum_(square, axis=axes, dtype=dtype, keepdims=bool(keepdims))
    dof = count - ddof
    if not keepdims:
        dof = np.reshape(dof, shape_of(total))
    bad = dof <= 0
    if not np.any(bad):
        return total / dof
    _warn("Degrees of freedom <= 0 for slice.")
    return np.where(bad, np.nan, total / np.where(bad, 1, dof))


def _nanstd(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=_r._NO_VALUE,
            mean=_r._NO_VALUE, correction=_r._NO_VALUE):
    """np.nanstd: sqrt(nanvar), with nanstd'(0) = 0 on constant slices."""
    return averages.sqrt_of_variance(_nanvar(a, axis=axis, dtype=dtype, out=out, ddof=ddof,
                                             keepdims=keepdims, where=where, mean=mean,
                                             correction=correction))


def _nan_scan(name, fill):
    numpy_fn = getattr(np, f"nan{name}")
    scan = getattr(_r, f"_{name}")

    def nan_scan(a, axis=None, dtype=None, out=None):
        if not _r._differentiable(a, dtype):
            return numpy_fn(primal(a), axis=axis, dtype=dtype, out=out)
        return scan(_r._without_nan(a, fill)[0], axis=axis, dtype=dtype, out=out)
    nan_scan.__doc__ = (f"np.nan{name}: np.{name} with NaN entries taken as {fill} (they get a "
                        "zero derivative).")
    return nan_scan


for _fn, _rule in [(np.nanmax, _nan_extremum("max")), (np.nanmin, _nan_extremum("min")),
                   (np.nanvar, _nanvar), (np.nanstd, _nanstd),
                   (np.nancumsum, _nan_scan("cumsum", 0)),
                   (np.nancumprod, _nan_scan("cumprod", 1))]:
    register_function(_fn, _rule)
