"""Elementwise ufuncs. Each derivative is written with differentiable NumPy calls, so the rules
can themselves be differentiated (higher order), and run on CuPy arrays unchanged.

Conventions at non-smooth points: |x|' = 0 at 0; maximum/minimum send the whole cotangent to
the first argument on ties; sign, floor, ceil, round and the comparisons have no derivative.
"""
from __future__ import annotations

import numpy as np

from ._util import (add_tangents, broadcast_tangent, defprimitive, scale_tangent, shape_of,
                    unbroadcast)


def unary(ufunc, derivative, name=None):
    """A unary ufunc whose derivative is `derivative(x, ans)`, elementwise."""

    def augmented_primal(cfg, x, **kw):
        ans = ufunc(x, **kw)
        return ans, (x, ans)

    def reverse(cfg, saved, g):
        x, ans = saved
        return (g * derivative(x, ans),)

    def forward(cfg, primals, tangents, **kw):
        x, = primals
        ans = ufunc(x, **kw)
        return ans, tangents[0] * derivative(x, ans)

    return defprimitive(name or ufunc.__name__, ufunc, augmented_primal, reverse, forward,
                        ufunc=ufunc)


# -- unary: derivative(x, ans) ------------------------------------------------------------------
negative = unary(np.negative, lambda x, ans: -np.ones_like(x))
positive = unary(np.positive, lambda x, ans: np.ones_like(x))
sin = unary(np.sin, lambda x, ans: np.cos(x))
cos = unary(np.cos, lambda x, ans: -np.sin(x))
tan = unary(np.tan, lambda x, ans: 1 + ans ** 2)
exp = unary(np.exp, lambda x, ans: ans)
log = unary(np.log, lambda x, ans: 1 / x)
tanh = unary(np.tanh, lambda x, ans: 1 - ans ** 2)
sqrt = unary(np.sqrt, lambda x, ans: 0.5 / ans)
square = unary(np.square, lambda x, ans: 2 * x)


# -- binary ------------------------------------------------------------------------------------
def binary(ufunc, d_first, d_second, name=None):
    """A binary broadcasting ufunc with partials `d_first(x, y, ans)`, `d_second(x, y, ans)`."""

    def augmented_primal(cfg, x, y, **kw):
        ans = ufunc(x, y, **kw)
        return ans, (x, y, ans)

    def reverse(cfg, saved, g):
        x, y, ans = saved
        gx = unbroadcast(g * d_first(x, y, ans), shape_of(x)) if cfg.active[0] else None
        gy = unbroadcast(g * d_second(x, y, ans), shape_of(y)) if cfg.active[1] else None
        return gx, gy

    def forward(cfg, primals, tangents, **kw):
        x, y = primals
        ans = ufunc(x, y, **kw)
        tx, ty = tangents
        t = add_tangents(None if tx is None else tx * d_first(x, y, ans),
                         None if ty is None else ty * d_second(x, y, ans))
        return ans, broadcast_tangent(t, shape_of(ans))

    return defprimitive(name or ufunc.__name__, ufunc, augmented_primal, reverse, forward,
                        ufunc=ufunc)


def _linear_binary(ufunc, sign_second):
    """add and subtract: the reverse rule needs only shapes, so only shapes are saved."""

    def augmented_primal(cfg, x, y, **kw):
        return ufunc(x, y, **kw), (shape_of(x), shape_of(y))

    def reverse(cfg, saved, g):
        sx, sy = saved
        gx = unbroadcast(g, sx) if cfg.active[0] else None
        gy = None
        if cfg.active[1]:
            gy = unbroadcast(g if sign_second > 0 else -g, sy)
        return gx, gy

    def forward(cfg, primals, tangents, **kw):
        ans = ufunc(*primals, **kw)
        tx, ty = tangents
        if ty is not None and sign_second < 0:
            ty = -ty
        return ans, broadcast_tangent(add_tangents(tx, ty), shape_of(ans))

    return defprimitive(ufunc.__name__, ufunc, augmented_primal, reverse, forward, ufunc=ufunc)


add = _linear_binary(np.add, +1)
subtract = _linear_binary(np.subtract, -1)


def _mul_augmented(cfg, x, y, **kw):
    # Keep only what the active side needs: d(xy)/dx = y, d(xy)/dy = x.
    return np.multiply(x, y, **kw), (x if cfg.active[1] else shape_of(x),
                                     y if cfg.active[0] else shape_of(y))


def _mul_reverse(cfg, saved, g):
    x, y = saved
    gx = unbroadcast(g * y, shape_of(x) if cfg.active[1] else x) if cfg.active[0] else None
    gy = unbroadcast(g * x, shape_of(y) if cfg.active[0] else y) if cfg.active[1] else None
    return gx, gy


def _mul_forward(cfg, primals, tangents, **kw):
    x, y = primals
    ans = np.multiply(x, y, **kw)
    tx, ty = tangents
    t = add_tangents(scale_tangent(tx, y), scale_tangent(ty, x))
    return ans, broadcast_tangent(t, shape_of(ans))


multiply = defprimitive("multiply", np.multiply, _mul_augmented, _mul_reverse, _mul_forward,
                        ufunc=np.multiply)

true_divide = binary(np.true_divide, lambda x, y, ans: 1 / y, lambda x, y, ans: -ans / y)


def _power_d_base(x, y, ans):
    # y * x**(y-1), written so that x = 0 with integer-valued y > 0 gives no NaN.
    return y * np.power(x, y - 1)


def _power_d_exponent(x, y, ans):
    # ans * log(x); taken as 0 where x == 0 (the limit for y > 0) instead of 0 * -inf = nan.
    safe = np.where(x == 0, 1.0, x)
    return np.where(x == 0, 0.0, ans * np.log(safe))


power = binary(np.power, _power_d_base, _power_d_exponent)


# -- where: a selection, differentiable in both branches -----------------------------------------
def _where_augmented(cfg, x, y, condition):
    return np.where(condition, x, y), (condition, shape_of(x), shape_of(y))


def _where_reverse(cfg, saved, g):
    condition, sx, sy = saved
    zero = np.zeros_like(g)
    gx = unbroadcast(np.where(condition, g, zero), sx) if cfg.active[0] else None
    gy = unbroadcast(np.where(condition, zero, g), sy) if cfg.active[1] else None
    return gx, gy


def _where_forward(cfg, primals, tangents, condition):
    x, y = primals
    ans = np.where(condition, x, y)
    tx, ty = (t if t is not None else np.zeros_like(p) for t, p in zip(tangents, primals))
    return ans, np.where(condition, tx, ty) + np.zeros_like(ans)


where = defprimitive("where", lambda x, y, condition: np.where(condition, x, y),
                     _where_augmented, _where_reverse, _where_forward)


def _where(condition, x=None, y=None):
    from tape.core import primal
    if x is None and y is None:
        return np.nonzero(primal(condition))
    return where(x, y, condition=primal(condition))


from tape.rules import register_function  # noqa: E402

register_function(np.where, _where)
