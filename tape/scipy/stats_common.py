"""Helpers shared by the distributions of tape.scipy.stats: masks of comparisons, the double
`where` that keeps NaNs of unused branches out of derivatives, and NaN results for invalid
parameters (as SciPy gives).

Masks (support, valid parameters) are comparisons of the (traced) values: they are piecewise
constant, so they carry no derivative, and a compiled function computes them again at each call
(deciding on `np.all(mask)` replays while the outcome is the same) rather than guarding the
values. A value outside the support is replaced by a safe one *before* the formula (so that
log(-1) is never computed: its NaN partial derivative would turn the zero cotangent of the unused
branch into NaN) and the result is selected after.

>>> x = np.array([0.5, -1.0])                      # log(x) only where x > 0
>>> select(x > 0, np.log(guard(x > 0, x, 1.0)), -np.inf)
array([-0.69314718,        -inf])
"""
from __future__ import annotations

import functools
from typing import Any

import numpy as np

from tape.core import Tracer, primal


def plain(x: Any) -> np.ndarray:
    """The plain NumPy value under any tracers, as an array.

    >>> plain(2.0)
    array(2.)
    """
    return np.asarray(primal(x))


def as_value(x: Any) -> Any:
    """A traced value as it is; anything else (a list, a number) as a NumPy array.

    >>> as_value([1, 2])
    array([1, 2])
    """
    return x if isinstance(x, Tracer) else np.asarray(x)


def guard(mask: np.ndarray, x: Any, fill: float) -> Any:
    """`x` where `mask` holds, `fill` elsewhere (x unchanged when the mask is all True).

    >>> guard(np.array([True, False]), np.array([3.0, -1.0]), 0.5)
    array([3. , 0.5])
    """
    return x if np.all(mask) else np.where(mask, x, fill)


def select(mask: np.ndarray, value: Any, other: float) -> Any:
    """`value` where `mask` holds, the constant `other` elsewhere; no derivative reaches the
    unused entries of `value`.

    >>> select(np.array([True, False]), np.array([1.0, 2.0]), -np.inf)
    array([  1., -inf])
    """
    if np.all(mask):
        return value
    return np.where(mask, value, other)


def nan_where_invalid(valid: np.ndarray, value: Any) -> Any:
    """`value`, NaN where the parameters are not `valid` (SciPy's result there). The NaN enters
    as a factor, so the derivative is NaN there too rather than a finite number of an undefined
    function.

    >>> nan_where_invalid(np.array([True, False]), np.array([1.0, 2.0]))
    array([ 1., nan])
    """
    if np.all(valid):
        return value
    return value * np.where(valid, 1.0, np.nan)


def standardize(x: Any, loc: Any, scale: Any) -> tuple:
    """((x - loc) / scale, scale > 0): the standardized variable (computed with a safe scale of 1
    where the scale is not positive) and where the scale is valid.

    >>> standardize(3.0, 1.0, np.array([2.0, -1.0]))
    (array([1., 2.]), array([ True, False]))
    """
    scale = as_value(scale)
    valid = scale > 0
    scale = guard(valid, scale, 1.0)
    return (as_value(x) - as_value(loc)) / scale, valid


def log_scale(scale: Any, valid: np.ndarray) -> Any:
    """log(scale), with 1 in place of invalid scales (their results are NaN anyway).

    >>> float(log_scale(np.e, np.array(True)))
    1.0
    """
    return np.log(guard(valid, scale, 1.0))


def log_probability(p: Any, q: Any) -> Any:
    """log p, for a probability p with complement q = 1 - p (a CDF and its survival function,
    computed separately): log(p) below 1/2 and log1p(-q) above, as SciPy's logcdf and logsf
    split at the median, because log(p) keeps no digits once p rounds to 1. Each branch gets
    a safe argument where it is not taken, so no NaN or inf slope reaches the derivative.

    >>> float(log_probability(1.0, 1e-20))   # log(1 - 1e-20), which log(p) gives as 0
    -1e-20
    """
    high = as_value(p) >= 0.5
    if not np.any(high):
        return np.log(p)
    from_q = np.log1p(-guard(high, as_value(q), 0.5))
    if np.all(high):
        return from_q
    return np.where(high, from_q, np.log(guard(~high, as_value(p), 0.5)))


def no_derivative(name: str, argument: str, value: Any) -> None:
    """Raise a clear error when `value` is being differentiated although the function has no
    derivative in that argument (a count of a discrete distribution, an integer shift).

    >>> no_derivative("poisson.logpmf", "k", 3)   # a plain value passes
    """
    if isinstance(value, Tracer):
        raise NotImplementedError(
            f"{name}: the argument {argument!r} is discrete (an integer count or shift) and has "
            f"no derivative, but a traced value was passed; pass it as a plain array (mark it "
            f"Const, or pass np.asarray(...) of its value)")


def squeeze_output(out: Any) -> Any:
    """SciPy's multivariate results: size-1 axes removed.

    >>> squeeze_output(np.ones((1, 3, 1))).shape
    (3,)
    """
    return np.squeeze(out) if 1 in np.shape(out) else out


def at_least_double(v: Any) -> Any:
    """A float16/float32 (complex64) array, scalar or traced value in float64 (complex128), as
    SciPy's distributions promote their arguments (``promote_types(dtype, float64)``) and
    compute; anything else as it is.

    >>> at_least_double(np.float32(0.5)).dtype, at_least_double(2)
    (dtype('float64'), 2)
    """
    dtype = getattr(v, "dtype", None)
    if dtype is None or not isinstance(v, (np.ndarray, np.generic, Tracer)):
        return v
    dtype = np.dtype(dtype)
    if dtype.kind not in "fc" or dtype.itemsize >= (8 if dtype.kind == "f" else 16):
        return v
    wide = np.float64 if dtype.kind == "f" else np.complex128
    return v.astype(wide) if isinstance(v, (np.ndarray, Tracer)) else wide(v)


def _promoting(method):
    @functools.wraps(method)
    def promoted(self, *args: Any, **kwargs: Any) -> Any:
        return method(self, *map(at_least_double, args),
                      **{k: at_least_double(v) for k, v in kwargs.items()})
    return promoted


class _Distribution:
    """A distribution: a namespace of methods with SciPy's names. Calling it with parameters
    freezes them, as scipy.stats does: ``norm(loc, scale).logpdf(x)``. Every method computes
    in at least double precision (`at_least_double`), as SciPy's do."""

    name = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, member in list(vars(cls).items()):
            if not name.startswith("_") and callable(member):
                setattr(cls, name, _promoting(member))

    def __repr__(self) -> str:
        return f"<tape.scipy.stats.{self.name}>"

    def __call__(self, *args: Any, **kwargs: Any) -> "FrozenDistribution":
        """The distribution with its parameters fixed (scipy.stats' frozen distribution).

        >>> from tape.scipy.stats import norm
        >>> float(norm(1.0, 2.0).cdf(1.0))
        0.5
        """
        return FrozenDistribution(self, args, kwargs)


class FrozenDistribution:
    """A distribution with fixed parameters: each method takes the variable (and any further
    argument) and passes the frozen parameters after it, as SciPy's frozen distributions do.
    Only the methods of the distribution itself exist (logpdf, cdf, ...; no mean or rvs).

    >>> from tape.scipy.stats import t
    >>> frozen = t(3.0, loc=1.0)
    >>> float(frozen.cdf(1.0)), float(frozen.logpdf(1.0)) == float(t.logpdf(1.0, 3.0, loc=1.0))
    (0.5, True)
    """

    def __init__(self, dist: _Distribution, args: tuple, kwargs: dict):
        self.dist, self.args, self.kwds = dist, args, kwargs

    def __getattr__(self, name: str) -> Any:
        method = getattr(type(self.dist), name, None) if not name.startswith("_") else None
        if method is None or not callable(method):
            raise AttributeError(
                f"the frozen tape.scipy.stats.{self.dist.name} has no method {name!r}; it has "
                "the distribution's own: "
                + ", ".join(n for n in dir(type(self.dist)) if not n.startswith("_")))
        bound = getattr(self.dist, name)

        def frozen(x: Any, **kwargs: Any) -> Any:
            return bound(x, *self.args, **self.kwds, **kwargs)
        frozen.__doc__ = bound.__doc__
        return frozen

    def __repr__(self) -> str:
        return f"<frozen tape.scipy.stats.{self.dist.name}{self.args!r}>"
