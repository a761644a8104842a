"""Fused neural-network ops: the softmax family, cross-entropy, normalisations (the elementwise
activations sigmoid, softplus, silu and gelu live in `ops.activations` and are re-exported here).

Each op is one primitive whose reverse rule is cheaper than differentiating its composite
formula: softmax's vector-Jacobian product is `y * (g - sum(g * y))`, one pass over the saved
output, instead of the tape of exp, sum and divide. Rules are written with differentiable NumPy
calls, so second derivatives work; inside a rule the values may be tracers of an outer
differentiation, which is why the primal is obtained by calling the primitive itself (the outer
level then records the fused op too). Residuals are the cheapest ones: softmax and log_softmax
keep their output, the norms keep x and their per-slice statistics, silu and gelu keep the
sigmoid / tanh / normal CDF they computed (in NumPy each recomputed op is another pass over
memory).

>>> from tape import autodiff, Reverse, Active
>>> x = np.array([1.0, 2.0, 3.0])
>>> (g,), = autodiff(Reverse, lambda x: logsumexp(x), Active, Active(x))
>>> bool(np.allclose(g, softmax(x)))
True

Conventions:

- `axis` is an int or a tuple of ints (negative counts from the end); logsumexp also takes None.
- logsumexp of a slice that is entirely -inf is -inf; its gradient there is nan (no finite shift).
- cross_entropy's 'mean' over zero non-ignored positions is nan, as in PyTorch.
- gelu's exact form uses the normal CDF `ndtr` of `ops.special` (Cephes' rational
  approximation: absolute error below 1e-15).
"""
from __future__ import annotations

import math

import numpy as np

from tape.backend import array_module
from tape.core import Tracer, nondiff_value, peek
from tape.rules import register_method

from ._util import (add_tangents, as_float, broadcast_tangent, defprimitive, shape_of,
                    unbroadcast)
from .activations import gelu, sigmoid, silu, softplus  # noqa: F401  (part of ops' public API)

_AxisError = getattr(np, "exceptions", np).AxisError


# -- axis bookkeeping -------------------------------------------------------------------------------
def _axes(axis, ndim: int) -> tuple:
    """`axis` as a sorted tuple of non-negative ints (None: every axis); out of range raises."""
    if axis is None:
        return tuple(range(ndim))
    for a in (axis,) if isinstance(axis, (int, np.integer)) else axis:
        if not -ndim <= a < ndim:
            raise _AxisError(int(a), ndim)
    if isinstance(axis, (int, np.integer)):
        return (int(axis) % ndim,)
    axes = tuple(sorted(int(a) % ndim for a in axis))
    if len(set(axes)) != len(axes):
        raise ValueError("duplicate value in 'axis'")
    return axes


def _kept(shape: tuple, axes: tuple) -> tuple:
    """`shape` with the reduced axes set to 1 (the keepdims shape)."""
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


def _dropped(shape: tuple, axes: tuple) -> tuple:
    return tuple(n for i, n in enumerate(shape) if i not in axes)


def _count(shape: tuple, axes: tuple) -> int:
    return math.prod(shape[i] for i in axes)


def _mean(a, axes: tuple, n: int):
    return np.sum(a, axis=axes, keepdims=True) / n



def _finite_max(x, axes):
    """The max over `axes` (kept), replaced by 0 where it is +-inf: a safe shift for exp."""
    return _finite(array_module(x).max(x, axis=axes, keepdims=True))


def _finite(m):
    """`m` with +-inf replaced by 0."""
    xp = array_module(m)
    return xp.where(xp.isfinite(m), m, 0)


# -- logsumexp, softmax, log_softmax ------------------------------------------------------------------
def _shifted_exp(x, axis):
    """(exp(x - m), m) with m the finite max over `axis`; one temporary, filled in place."""
    xp = array_module(x)
    m = _finite_max(x, axis)
    e = xp.subtract(x, m, out=xp.empty_like(x))   # out=: a 0-d result stays an array
    return xp.exp(e, out=e), m


def _lse_impl(x, axis, keepdims):
    x = as_float(x)
    xp = array_module(x)
    e, m = _shifted_exp(x, axis)
    out = xp.log(xp.sum(e, axis=axis, keepdims=True)) + m
    return out if keepdims else xp.reshape(out, _dropped(shape_of(x), axis))


def _lse_softmax(x, axis):
    """The derivative of logsumexp, softmax(x) along `axis`, as exp(x - m) / sum(exp(x - m))
    with m the finite max: not exp(x - logsumexp(x)), whose rounding of the output is an error
    of up to ulp(logsumexp) in x - out (at [1e16, 1e16] that gave [1, 1] for [0.5, 0.5]). m
    cancels from the quotient, so it carries no derivative of its own. Not the softmax
    primitive: that makes a slice with a +inf entry all NaN, where this derivative keeps the
    0 of every finite entry beside it, as before."""
    top = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - _finite(top))
    if bool(np.all(np.isfinite(top)) or np.any(np.isnan(top))):   # (NaN: a NaN derivative)
        return e / np.sum(e, axis=axis, keepdims=True)
    # A slice with a +inf entry: its +inf entries share the derivative (the limit along equal
    # values), the others get 0; a slice of -inf entries only: 1 / n each. np.logaddexp's
    # partials at two infinities are the same. (inf / inf or 0 / 0 would give NaN.)
    with np.errstate(invalid="ignore"):
        weights = e / np.sum(e, axis=axis, keepdims=True)
    at_inf = x == np.inf
    n_inf = np.sum(at_inf, axis=axis, keepdims=True)
    weights = np.where(top == np.inf, at_inf / np.maximum(n_inf, 1), weights)
    count = math.prod(shape_of(x)) // max(math.prod(shape_of(top)), 1)
    return np.where(top == -np.inf, 1.0 / count, weights)


def _lse_augmented(cfg, x, axis, keepdims):
    return _logsumexp(x, axis=axis, keepdims=keepdims), (x, axis, keepdims)


def _lse_reverse(cfg, saved, g):
    x, axis, keepdims = saved
    g_kd = g if keepdims else np.reshape(g, _kept(shape_of(x), axis))
    return (g_kd * _lse_softmax(x, axis),)


def _lse_forward(cfg, primals, tangents, axis, keepdims):
    x, = primals
    out = _logsumexp(x, axis=axis, keepdims=keepdims)
    return out, np.sum(_lse_softmax(x, axis) * tangents[0], axis=axis, keepdims=keepdims)


_logsumexp = defprimitive("logsumexp", _lse_impl, _lse_augmented, _lse_reverse, _lse_forward)


def logsumexp(x, axis=None, keepdims=False):
    """log(sum(exp(x))) over `axis`, shifted by the max so that it never overflows.

    The gradient is softmax(x) along `axis`.

    >>> bool(np.isclose(logsumexp(np.array([1000.0, 1000.0])), 1000.0 + np.log(2.0)))
    True
    >>> logsumexp(np.zeros((2, 3)), axis=1, keepdims=True).shape
    (2, 1)
    """
    return _logsumexp(x, axis=_axes(axis, np.ndim(x)), keepdims=bool(keepdims))



def _logaddexp_reduce(base_log):
    """np.logaddexp.reduce / np.logaddexp2.reduce on a traced array: logsumexp along `axis`
    (ufunc.reduce's default axis is 0), in base e or 2."""
    def reduce(a, axis=0, dtype=None, out=None, keepdims=False, **unsupported):
        name = f"np.logaddexp{'2' if base_log != 1.0 else ''}.reduce"
        if dtype is not None or out is not None or unsupported:
            given = [k for k, v in (("dtype", dtype), ("out", out)) if v is not None]
            raise NotImplementedError(
                f"{name} of a traced value takes axis and keepdims only, not "
                f"{', '.join(given + sorted(unsupported))}; write ops.logsumexp(x, axis) "
                "(or tape.scipy.special.logsumexp) and cast or copy the result")
        shape = shape_of(a)
        if len(shape) == 0 and axis in (0, -1, None, ()):
            return a * 1.0   # NumPy reduces a 0-d array to its value (as a float)
        axes = _axes(axis, len(shape))
        if any(shape[k] == 0 for k in axes):   # the identity, -inf: nothing to differentiate
            ufunc = np.logaddexp if base_log == 1.0 else np.logaddexp2
            return ufunc.reduce(np.zeros(shape, np.result_type(peek(a), np.float16)),
                                axis=axis, keepdims=keepdims)
        if base_log == 1.0:
            return logsumexp(a, axis=axis, keepdims=keepdims)
        return logsumexp(a * base_log, axis=axis, keepdims=keepdims) / base_log
    reduce.__name__ = f"logaddexp{'2' if base_log != 1.0 else ''}_reduce"
    return reduce


register_method("logaddexp.reduce", _logaddexp_reduce(1.0))
register_method("logaddexp2.reduce", _logaddexp_reduce(math.log(2.0)))

def _softmax_impl(x, axis):
    e, _ = _shifted_exp(as_float(x), axis)
    xp = array_module(e)
    total = xp.sum(e, axis=axis, keepdims=True)
    e /= total
    # The shift keeps every finite entry's exp at most 1, so an infinite total means a +inf
    # input: the whole slice is NaN, as SciPy's and NumPy's exp(x - max(x)) / sum give it
    # (inf / inf alone would leave the slice's finite entries at 0).
    if not xp.all(xp.isfinite(total)):
        e = xp.where(xp.isinf(total), xp.nan, e).astype(e.dtype, copy=False)
    return e


def _softmax_jvp(y, t, axis):
    return y * (t - np.sum(y * t, axis=axis, keepdims=True))


def _softmax_augmented(cfg, x, axis):
    y = _softmax(x, axis=axis)
    return y, (y, axis)


def _softmax_reverse(cfg, saved, g):
    y, axis = saved
    return (_softmax_jvp(y, g, axis),)   # the Jacobian is symmetric: VJP = JVP


def _softmax_forward(cfg, primals, tangents, axis):
    y = _softmax(primals[0], axis=axis)
    return y, _softmax_jvp(y, tangents[0], axis)


_softmax = defprimitive("softmax", _softmax_impl, _softmax_augmented, _softmax_reverse,
                        _softmax_forward)


def softmax(x, axis=-1):
    """exp(x) / sum(exp(x)) along `axis` (an int or a tuple); saves only its output.

    >>> softmax(np.array([0.0, 0.0, 1000.0]))
    array([0., 0., 1.])
    """
    return _softmax(x, axis=_axes(axis, np.ndim(x)))


def _log_softmax_impl(x, axis):
    return x - _lse_impl(x, axis, True)


def _log_softmax_augmented(cfg, x, axis):
    y = _log_softmax(x, axis=axis)
    return y, (y, axis)


def _log_softmax_reverse(cfg, saved, g):
    y, axis = saved
    return (g - np.exp(y) * np.sum(g, axis=axis, keepdims=True),)


def _log_softmax_forward(cfg, primals, tangents, axis):
    y = _log_softmax(primals[0], axis=axis)
    t = tangents[0]
    return y, t - np.sum(np.exp(y) * t, axis=axis, keepdims=True)


_log_softmax = defprimitive("log_softmax", _log_softmax_impl, _log_softmax_augmented,
                            _log_softmax_reverse, _log_softmax_forward)


def log_softmax(x, axis=-1):
    """x - logsumexp(x) along `axis`: log-probabilities, finite even for huge logits.

    >>> log_softmax(np.array([0.0, 1000.0]))
    array([-1000.,     0.])
    """
    return _log_softmax(x, axis=_axes(axis, np.ndim(x)))


# -- cross_entropy ---------------------------------------------------------------------------------
def _onehot(x, safe, axis):
    xp = array_module(safe)
    classes = xp.arange(shape_of(x)[axis]).reshape(
        tuple(-1 if i == axis else 1 for i in range(len(shape_of(x)))))
    return classes == xp.expand_dims(safe, axis)


def _ce_targets(targets, ignore_index):
    """(mask of counted positions, targets with ignored entries replaced by class 0)."""
    xp = array_module(targets)
    mask = targets != ignore_index
    return mask, xp.where(mask, targets, 0)


def _pick(x, safe, axis):
    """x at the target class along `axis` (kept as size 1)."""
    if isinstance(x, Tracer):   # an outer level differentiates x: a differentiable gather
        return np.sum(np.where(_onehot(x, safe, axis), x, 0.0), axis=axis, keepdims=True)
    return array_module(x).take_along_axis(x, array_module(x).expand_dims(safe, axis), axis=axis)


def _ce_reduce(per_position, mask, reduction):
    if reduction == "none":
        return per_position
    total = np.sum(per_position)
    # A Python int count keeps float32 losses float32.
    return total if reduction == "sum" else total / int(mask.sum())


def _check_targets(targets, mask, n, ignore_index):
    # Inside the primitive, so a compiled program checks each call's targets.
    if bool(((targets < 0) | (targets >= n))[mask].any()):
        raise IndexError(f"cross_entropy targets must lie in [0, {n}) or equal "
                         f"ignore_index={ignore_index}")


def _ce_core(x, targets, axis, ignore_index, reduction):
    mask, safe = _ce_targets(targets, ignore_index)
    _check_targets(targets, mask, shape_of(x)[axis], ignore_index)
    lse = _logsumexp(x, axis=(axis,), keepdims=True)
    per = np.reshape(lse - _pick(x, safe, axis), shape_of(targets))
    return _ce_reduce(np.where(mask, per, 0.0), mask, reduction), lse


def _ce_augmented(cfg, x, targets, axis, ignore_index, reduction):
    loss, lse = _ce_core(x, targets, axis, ignore_index, reduction)
    return loss, (x, lse, targets, axis, ignore_index, reduction)


def _ce_reverse(cfg, saved, g):
    x, lse, targets, axis, ignore_index, reduction = saved
    mask, safe = _ce_targets(targets, ignore_index)
    weight = mask.astype(x.dtype)
    if reduction == "mean":
        weight = weight / int(mask.sum())
    w = np.reshape(g * weight, _kept(shape_of(x), (axis,)))
    if isinstance(x, Tracer) or isinstance(lse, Tracer) or isinstance(w, Tracer):
        # Differentiated again: the formula with an explicit one-hot, in differentiable ops.
        return ((np.exp(x - lse) - _onehot(x, safe, axis).astype(x.dtype)) * w,)
    # Speed-up for plain arrays: softmax * w in place, then w taken off at the targets, with
    # no float one-hot as large as the logits (a vocabulary-sized array per position).
    xp = array_module(x)
    grad = x - lse
    grad = xp.exp(grad, out=grad)
    grad *= w
    index = xp.expand_dims(safe, axis)
    xp.put_along_axis(grad, index, xp.take_along_axis(grad, index, axis=axis) - w, axis=axis)
    return (grad,)


def _ce_forward(cfg, primals, tangents, targets, axis, ignore_index, reduction):
    x, = primals
    t = tangents[0]
    loss, lse = _ce_core(x, targets, axis, ignore_index, reduction)
    mask, safe = _ce_targets(targets, ignore_index)
    # d(lse - x[target]) = sum(softmax * t) - t[target]
    per = np.sum(np.exp(x - lse) * t, axis=axis, keepdims=True) - _pick(t, safe, axis)
    per = np.reshape(per, shape_of(targets)) * mask.astype(x.dtype)
    return loss, _ce_reduce(per, mask, reduction)


_cross_entropy = defprimitive("cross_entropy",
                              lambda x, **params: _ce_core(x, **params)[0],
                              _ce_augmented, _ce_reverse, _ce_forward)


def cross_entropy(logits, targets, axis=-1, ignore_index=-100, reduction="mean"):
    """Softmax cross-entropy of `logits` against integer class indices `targets`.

    `targets` has the shape of `logits` without `axis` and carries no derivative. Positions
    whose target equals `ignore_index` contribute zero loss and zero gradient; 'mean' divides
    by the number of the other positions ('sum' and 'none' are the alternatives). The
    gradient is (softmax(logits) - onehot(targets)) times the cotangent, in one pass.

    >>> logits = np.array([[2.0, 0.0], [0.0, 2.0], [5.0, 5.0]])
    >>> loss = cross_entropy(logits, np.array([0, 0, -100]))
    >>> bool(np.isclose(loss, (np.log1p(np.exp(-2.0)) + np.log1p(np.exp(2.0))) / 2))
    True
    """
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    if not isinstance(logits, Tracer):
        logits = as_float(logits)
    shape = shape_of(logits)
    ax, = _axes(axis, len(shape))
    t = nondiff_value(targets)   # a compiled program passes each call's targets
    if not isinstance(t, Tracer):
        t = array_module(logits).asarray(t)
    dtype, t_shape = peek(t).dtype, tuple(peek(t).shape)
    if not np.issubdtype(dtype, np.integer):
        raise TypeError(f"cross_entropy targets must be integer class indices, got {dtype}")
    if t_shape != _dropped(shape, (ax,)):
        raise ValueError(f"targets of shape {t_shape} do not match logits of shape "
                         f"{shape} without axis {ax}")
    return _cross_entropy(logits, targets=t, axis=ax, ignore_index=ignore_index,
                          reduction=reduction)


# -- layer_norm, rms_norm ------------------------------------------------------------------------
def _check_affine(x, **params):
    shape = shape_of(x)
    for name, p in params.items():
        if p is not None and np.broadcast_shapes(shape, shape_of(p)) != shape:
            raise ValueError(f"{name} of shape {shape_of(p)} must broadcast to the input's "
                             f"shape {shape}")


def _affine(y, w, b):
    if w is not None:
        y = y * w
    return y if b is None else y + b


def _ln_stats(x, axis, eps):
    n = _count(shape_of(x), axis)
    mu = _mean(x, axis, n)
    c = x - mu
    return mu, 1 / np.sqrt(_mean(c * c, axis, n) + eps)


def _ln_impl(x, w, b, axis, eps):
    mu, rstd = _ln_stats(x, axis, eps)
    return _affine((x - mu) * rstd, w, b)


def _ln_augmented(cfg, x, w, b, axis, eps):
    mu, rstd = _ln_stats(x, axis, eps)
    out = _affine((x - mu) * rstd, w, b)
    return out, (x, mu, rstd, w, shape_of(w), shape_of(b), axis)


def _normalise_back(gy, xhat, scale, axis, n):
    """Cotangent of x through xhat = (x - shift) * scale, scale = 1/sqrt(mean(...)+eps)."""
    return scale * (gy - xhat * _mean(gy * xhat, axis, n))


def _ln_reverse(cfg, saved, g):
    x, mu, rstd, w, w_shape, b_shape, axis = saved
    gx = gw = gb = None
    n = _count(shape_of(x), axis)
    if cfg.active[0] or cfg.active[1]:
        xhat = (x - mu) * rstd
    if cfg.active[0]:
        gy = g if w is None else g * w
        gx = _normalise_back(gy - _mean(gy, axis, n), xhat, rstd, axis, n)
    if cfg.active[1]:
        gw = unbroadcast(g * xhat, w_shape)
    if cfg.active[2]:
        gb = unbroadcast(g, b_shape)
    return gx, gw, gb


def _ln_forward(cfg, primals, tangents, axis, eps):
    x, w, b = primals
    tx, tw, tb = tangents
    mu, rstd = _ln_stats(x, axis, eps)
    xhat = (x - mu) * rstd
    out = _affine(xhat, w, b)
    t = None
    if tx is not None:
        n = _count(shape_of(x), axis)
        t = _normalise_back(tx - _mean(tx, axis, n), xhat, rstd, axis, n)   # J is symmetric
        t = t if w is None else t * w
    if tw is not None:
        t = add_tangents(t, xhat * tw)
    return out, broadcast_tangent(add_tangents(t, tb), shape_of(out))


_layer_norm = defprimitive("layer_norm", _ln_impl, _ln_augmented, _ln_reverse, _ln_forward)


def layer_norm(x, weight=None, bias=None, axis=-1, eps=1e-5):
    """(x - mean) / sqrt(var + eps) over `axis`, then `* weight + bias` (both optional and
    broadcasting against x, e.g. shape (D,) for axis=-1).

    >>> y = layer_norm(np.array([[1.0, 2.0, 3.0]]), eps=0.0)
    >>> bool(np.allclose(y, [[-np.sqrt(1.5), 0.0, np.sqrt(1.5)]]))
    True
    """
    axes = _axes(axis, len(shape_of(x)))
    _check_affine(x, weight=weight, bias=bias)
    return _layer_norm(x, weight, bias, axis=axes, eps=eps)


def _rms_stats(x, axis, eps):
    return 1 / np.sqrt(_mean(x * x, axis, _count(shape_of(x), axis)) + eps)


def _rms_augmented(cfg, x, w, axis, eps):
    rrms = _rms_stats(x, axis, eps)
    return _affine(x * rrms, w, None), (x, rrms, w, shape_of(w), axis)


def _rms_reverse(cfg, saved, g):
    x, rrms, w, w_shape, axis = saved
    xhat = x * rrms
    gx = gw = None
    if cfg.active[0]:
        gx = _normalise_back(g if w is None else g * w, xhat, rrms, axis,
                             _count(shape_of(x), axis))
    if cfg.active[1]:
        gw = unbroadcast(g * xhat, w_shape)
    return gx, gw


def _rms_forward(cfg, primals, tangents, axis, eps):
    x, w = primals
    tx, tw = tangents
    rrms = _rms_stats(x, axis, eps)
    xhat = x * rrms
    t = None
    if tx is not None:
        t = _normalise_back(tx, xhat, rrms, axis, _count(shape_of(x), axis))
        t = t if w is None else t * w
    if tw is not None:
        t = add_tangents(t, xhat * tw)
    out = _affine(xhat, w, None)
    return out, broadcast_tangent(t, shape_of(out))


_rms_norm = defprimitive("rms_norm", lambda x, w, axis, eps: _affine(
    x * _rms_stats(x, axis, eps), w, None), _rms_augmented, _rms_reverse, _rms_forward)


def rms_norm(x, weight=None, axis=-1, eps=1e-6):
    """x / sqrt(mean(x^2) + eps) over `axis`, then `* weight` (optional, broadcasting).

    >>> rms_norm(np.array([3.0, -3.0]), eps=0.0)
    array([ 1., -1.])
    """
    axes = _axes(axis, len(shape_of(x)))
    _check_affine(x, weight=weight)
    return _rms_norm(x, weight, axis=axes, eps=eps)
