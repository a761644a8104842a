"""np.logaddexp.accumulate and np.logaddexp2.accumulate on traced values: running log-sum-exps.

The result is NumPy's own (the primitive's impl is `ufunc.accumulate`). With y the result along
the axis, y is nondecreasing and dy[i]/dx[j] = b**(x[j] - y[i]) for j <= i (b = e or 2), which
factors as w[j] * a[j+1] * ... * a[i] with

    w[k] = b**(x[k] - y[k])          (the weight of x[k] in y[k], in [0, 1])
    a[k] = b**(y[k-1] - y[k])        (the shrinking of the earlier weights at step k, in [0, 1])

so both rules are first-order linear recurrences (`ops.reductions.linear_recurrence`, a
log-depth vectorised scan) with coefficients in [0, 1]: no exponent is positive, so nothing
overflows for inputs over any range, and the rules are differentiable NumPy calls (second order
and beyond). The reverse rule is gx[j] = w[j] * S[j], S[j] = g[j] + a[j+1] * S[j+1]; the forward
rule is ty[i] = a[i] * ty[i-1] + w[i] * tx[i].

Where the running value is -inf (a prefix of -inf entries) the derivative is the limit along
equal entries, 1/(i+1) for each of the first i+1 entries, as np.logaddexp's own derivative
splits 1/2 each at (-inf, -inf); a -inf entry after a finite one gets 0.

>>> from tape import autodiff, Reverse, Active
>>> x = np.array([0.0, 0.0, np.log(2.0)])
>>> (g,), = autodiff(Reverse, lambda x: np.logaddexp.accumulate(x)[-1], Active, Active(x))
>>> np.round(g, 12)
array([0.25, 0.25, 0.5 ])
"""
from __future__ import annotations

import numpy as np
from numpy.lib.array_utils import normalize_axis_index

from tape.backend import array_module
from tape.core import peek, primal
from tape.rules import register_method

from ._util import defprimitive, shape_of
from .reductions import linear_recurrence, shift

_BASES = {"logaddexp": (np.logaddexp, np.exp), "logaddexp2": (np.logaddexp2, np.exp2)}


def _impl(x, axis, name):
    return _BASES[name][0].accumulate(x, axis=axis)


def _coefficients(x, y, axis, name):
    """(w, a) of the module docstring, as differentiable NumPy calls on x and y."""
    exp = _BASES[name][1]
    xp = array_module(peek(y))
    dtype = peek(y).dtype
    n = shape_of(y)[axis]
    along = [1] * len(shape_of(y))
    along[axis] = n
    steps = xp.arange(1, n + 1, dtype=dtype).reshape(along)   # k + 1
    empty = y == -np.inf   # the running value of a -inf prefix
    y_safe = np.where(empty, 0.0, y)
    w = np.where(empty, 1.0 / steps, exp(x - y_safe))
    before = shift(y, axis=axis, offset=1, fill=-np.inf)
    a = np.where(empty, (steps - 1) / steps, exp(before - y_safe))
    return w, a


def _augmented(cfg, x, axis, name):
    y = _prim(x, axis=axis, name=name)
    return y, (x, y, axis, name)


def _reverse(cfg, saved, g):
    x, y, axis, name = saved
    w, a = _coefficients(x, y, axis, name)
    s = linear_recurrence(shift(a, axis=axis, offset=-1, fill=0), g, axis=axis, reverse=True)
    return (w * s,)


def _forward(cfg, primals, tangents, axis, name):
    x, = primals
    y = _prim(x, axis=axis, name=name)
    w, a = _coefficients(x, y, axis, name)
    return y, linear_recurrence(a, w * tangents[0], axis=axis)


_prim = defprimitive("logaddexp_accumulate", _impl, _augmented, _reverse, _forward)


def _accumulate(name):
    ufunc = _BASES[name][0]

    def accumulate(a, axis=0, dtype=None):
        value = peek(a)
        if np.ndim(value) == 0 or axis is None and np.ndim(value) > 1:
            return ufunc.accumulate(primal(a), axis=axis, dtype=dtype)   # NumPy's own error
        axis = normalize_axis_index(0 if axis is None else axis, np.ndim(value))
        if dtype is not None:
            if np.dtype(dtype).kind != "f":
                raise TypeError(
                    f"np.{name}.accumulate of a traced value computes in a floating dtype; "
                    f"dtype={np.dtype(dtype)} has no derivative (NumPy has no loop for it "
                    "either): leave dtype out or give a float dtype")
            if np.dtype(dtype) != value.dtype:
                a = a.astype(dtype)
        elif value.dtype.kind != "f":   # NumPy's loop for it (none for complex: its error)
            a = a.astype(ufunc.resolve_dtypes((value.dtype, value.dtype, None))[-1])
        return _prim(a, axis=axis, name=name)
    accumulate.__name__ = f"{name}_accumulate"
    accumulate.__doc__ = f"np.{name}.accumulate on a traced array (a running log-sum-exp)."
    return accumulate


logaddexp_accumulate = _accumulate("logaddexp")
logaddexp2_accumulate = _accumulate("logaddexp2")

register_method("logaddexp.accumulate", logaddexp_accumulate)
register_method("logaddexp2.accumulate", logaddexp2_accumulate)
