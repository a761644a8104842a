"""Elementwise ufuncs: arithmetic, powers, exponentials and logarithms, trigonometric and
hyperbolic functions, and np.where. More (abs, maximum/minimum, clip, hypot, real/imag, ...) in
`elementwise_more`.

Each derivative is written with differentiable NumPy calls, so the rules can themselves be
differentiated (higher order), and run on CuPy arrays unchanged. Constants are Python floats so
that float32 inputs keep float32 derivatives. Partial derivatives are applied through
`times_partial`, so strong-zero mode holds. Complex inputs: rules use the transpose convention
(the cotangent of a holomorphic f is ``g * f'(z)``, the real formula, no conjugation);
`autodiff` conjugates at its boundary so users see Enzyme.jl's convention (docs/complex.md).

Ufunc keyword arguments on traced values: ``dtype=`` casts the inputs first, so that each
cotangent goes back in its input's own dtype; ``where=`` without ``out=`` raises
NotImplementedError (the entries it leaves out are uninitialised, which has no derivative: use
``np.where`` instead); ``out=`` (with or without ``where=``) is handled by the tracer before the
rule is called; ``casting``, ``order`` and ``subok`` are accepted and ignored.

Conventions at singular points: x**y has derivative 0 in y where x == 0 (the limit for y > 0),
and x**0 has derivative 0 in x everywhere, x = 0 included. Elsewhere a derivative at a
singularity is what its formula gives (inf for sqrt at 0, nan outside a domain).
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from tape.core import STRONG_ZERO, Tracer, is_complex, nondiff_value, peek, primal
from tape.operators import check_cast
from tape.rule_tables import array_of_sequence
from tape.rules import register_function, register_ufunc

from ._util import (add_tangents, broadcast_tangent, defprimitive, scale_tangent, shape_of,
                    times_partial, unbroadcast)

LN2 = math.log(2.0)
LN10 = math.log(10.0)


# -- routing a ufunc, with its keyword arguments, to a primitive ---------------------------------
_IGNORED_KWARGS = frozenset(("casting", "order", "subok"))


def route_ufunc(ufunc, prim):
    """Send ``ufunc(traced, ...)`` to `prim`, translating the ufunc's keyword arguments."""
    name = ufunc.__name__

    def call(*args, **kw):
        if kw:
            args = ufunc_inputs(name, args, kw)
        return prim(*args)

    call.__name__ = name
    register_ufunc(ufunc, call, primitive=prim)
    return prim


def ufunc_inputs(name: str, args: tuple, kw: dict) -> tuple:
    """The inputs of ``numpy.<name>(*args, **kw)`` with its keywords applied: ``dtype=``
    becomes a cast of each input; keywords that would leave entries uncomputed are refused."""
    unknown = set(kw) - _IGNORED_KWARGS - {"dtype", "where", "out"}
    if unknown:
        raise NotImplementedError(
            f"numpy.{name}: keyword argument(s) {sorted(unknown)} are not supported on traced "
            "values")
    if kw.get("where", True) is not True:
        raise NotImplementedError(
            f"numpy.{name}(..., where=mask) is not supported on traced values: the entries it "
            f"skips are uninitialised. Use np.where(mask, numpy.{name}(...), other) instead")
    if kw.get("out") is not None:
        raise NotImplementedError(f"numpy.{name}(..., out=...) is not supported here")
    dtype = kw.get("dtype")
    if dtype is None:
        return args
    dtype = np.dtype(dtype)
    for i, a in enumerate(args):
        if type(a) not in (bool, int, float, complex):   # (a Python number is cast weakly)
            check_cast(name, f"input {i}", a, dtype, kw.get("casting", "same_kind"))
    return tuple(_cast(a, dtype) for a in args)


def _cast(a, dtype):
    if isinstance(a, Tracer):
        return a if a.dtype == dtype else a.astype(dtype)
    if hasattr(a, "astype"):
        return a.astype(dtype, copy=False)
    return dtype.type(a)


def _is_number(v) -> bool:
    return isinstance(v, numbers.Number)


# -- unary --------------------------------------------------------------------------------------
def elementwise(name, fn, derivative, of="x", times=None):
    """A primitive for the elementwise function `fn`. ``derivative(v)`` is fn' written in terms
    of the input (``of="x"``) or of the result (``of="ans"``), whichever is cheaper; only that
    one is saved for the reverse sweep. ``times(g, v)``, when given, is ``g * derivative(v)``
    in an order that stays finite where the derivative alone under- or overflows (outside
    strong-zero mode, whose zero cotangents need the plain product)."""
    use_ans = of == "ans"

    def applied(g, v):
        if times is None or STRONG_ZERO.get():
            return times_partial(g, derivative(v))
        return times(g, v)

    def augmented_primal(cfg, x):
        ans = fn(x)
        return ans, (ans if use_ans else x)

    def reverse(cfg, v, g):
        return (applied(g, v),)

    def forward(cfg, primals, tangents):
        x, = primals
        ans = fn(x)
        return ans, applied(tangents[0], ans if use_ans else x)

    prim = defprimitive(name, fn, augmented_primal, reverse, forward)
    # The same rule as straight-line code for a compiled program (tape/program.py): the
    # result is fn(x), the cotangent of x is g * derivative(ans or x) (or times(g, ans or x)).
    prim.inline = ("unary", derivative, use_ans, times)
    return prim


def unary(ufunc, derivative, of="x", times=None):
    """A unary ufunc with derivative `derivative` (see `elementwise`), routed from NumPy."""
    return route_ufunc(ufunc, elementwise(ufunc.__name__, ufunc, derivative, of, times))


def self_adjoint(ufunc):
    """A unary ufunc that is a real-linear map equal to its own transpose (negation, scaling by a
    constant, conjugation): both rules apply the ufunc itself, and nothing is saved."""
    prim = defprimitive(ufunc.__name__, ufunc,
                        lambda cfg, x: (ufunc(x), None),
                        lambda cfg, saved, g: (ufunc(g),),
                        lambda cfg, primals, tangents: (ufunc(primals[0]), ufunc(tangents[0])))
    prim.inline = ("map", ufunc)   # for compiled programs: the cotangent is ufunc(g)
    return route_ufunc(ufunc, prim)


negative = self_adjoint(np.negative)
positive = self_adjoint(np.positive)
deg2rad = self_adjoint(np.deg2rad)
radians = self_adjoint(np.radians)
rad2deg = self_adjoint(np.rad2deg)
degrees = self_adjoint(np.degrees)

square = unary(np.square, lambda x: 2.0 * x)
# -ans^2 applied as -(g * ans) * ans: the square alone underflows beyond |x| = 1e154 (and
# overflows below 1e-154) where the product with g is a number.
reciprocal = unary(np.reciprocal, lambda ans: -np.square(ans), of="ans",
                   times=lambda g, ans: -(g * ans) * ans)
sqrt = unary(np.sqrt, lambda ans: 0.5 / ans, of="ans")
cbrt = unary(np.cbrt, lambda ans: 1.0 / (3.0 * np.square(ans)), of="ans")

exp = unary(np.exp, lambda ans: ans, of="ans")
exp2 = unary(np.exp2, lambda ans: LN2 * ans, of="ans")
expm1 = unary(np.expm1, lambda x: np.exp(x))   # (ans + 1 cancels to 0 from x = -37 on)
log = unary(np.log, lambda x: 1.0 / x)
log2 = unary(np.log2, lambda x: 1.0 / (LN2 * x))
log10 = unary(np.log10, lambda x: 1.0 / (LN10 * x))
log1p = unary(np.log1p, lambda x: 1.0 / (1.0 + x))

sin = unary(np.sin, lambda x: np.cos(x))
cos = unary(np.cos, lambda x: -np.sin(x))
tan = unary(np.tan, lambda ans: 1.0 + np.square(ans), of="ans")
# (1 - x)(1 + x) rather than 1 - x**2: accurate near |x| = 1, where these derivatives blow up.
# The square roots are taken apart, 1 - x as -(x - 1) and 1 + x as x - (-1), so that on the
# branch cuts of the complex functions (real z beyond +-1, where NumPy's value is that of the
# side the signed zero imaginary part names) the derivative is that side's too: adding a real
# 1.0 turns an imaginary part of -0.0 into +0.0, and sqrt((1 - z)(1 + z)) picks the other side.
arcsin = unary(np.arcsin, lambda x: 1.0 / (np.sqrt(-(x - 1.0)) * np.sqrt(x - (-1.0))))
arccos = unary(np.arccos, lambda x: -1.0 / (np.sqrt(-(x - 1.0)) * np.sqrt(x - (-1.0))))
arctan = unary(np.arctan, lambda x: 1.0 / (1.0 + np.square(x)))

sinh = unary(np.sinh, lambda x: np.cosh(x))
cosh = unary(np.cosh, lambda x: np.sinh(x))
# Each derivative above is (up to its sign) a partner function of the same x: a compiled
# program that also computes the partner of that x reads its value instead of calling the
# derivative (tape/program_code.py). The same ufunc on the same x: the same bits.
for _prim, _partner, _sign in ((sin, np.cos, 1), (cos, np.sin, -1), (sinh, np.cosh, 1),
                               (cosh, np.sinh, 1)):
    _prim.derivative_is = (_partner, _sign)
tanh = unary(np.tanh, lambda ans: 1.0 - np.square(ans), of="ans")
# 1 / cosh(arcsinh z) is 1 / sqrt(1 + z^2) on the side of the cut (the imaginary axis beyond
# +-i) that NumPy's value is on; squaring z loses which side that is. For real x, 1 / hypot(1,
# x) is exact to an ulp, where cosh(ans) amplifies the rounding of ans by |ans| (1e-14 at 1e300).
arcsinh = unary(np.arcsinh, lambda x: (1.0 / np.cosh(np.arcsinh(x)) if is_complex(x)
                                       else 1.0 / np.hypot(1.0, x)))
arccosh = unary(np.arccosh, lambda x: 1.0 / (np.sqrt(x - 1.0) * np.sqrt(x - (-1.0))))
arctanh = unary(np.arctanh, lambda x: 1.0 / ((1.0 - x) * (1.0 + x)))


# -- binary -------------------------------------------------------------------------------------
def binary(ufunc, d_first, d_second, uses_ans=False, times_second=None):
    """A broadcasting binary ufunc with partial derivatives ``d_first(x, y, ans)`` and
    ``d_second(x, y, ans)``; the result `ans` is saved only when ``uses_ans``.
    ``times_second(g, x, y, ans)``, when given, is ``g * d_second(x, y, ans)`` in an order
    that keeps it finite where the partial alone under- or overflows (outside strong-zero
    mode, whose zero cotangents need the plain product)."""

    def second_term(g, x, y, ans):
        if times_second is None or STRONG_ZERO.get():
            return times_partial(g, d_second(x, y, ans))
        return times_second(g, x, y, ans)

    def augmented_primal(cfg, x, y):
        ans = ufunc(x, y)
        return ans, (x, y, ans if uses_ans else None)

    def reverse(cfg, saved, g):
        x, y, ans = saved
        gx = gy = None
        if cfg.active[0]:
            gx = unbroadcast(times_partial(g, d_first(x, y, ans)), shape_of(x))
        if cfg.active[1]:
            gy = unbroadcast(second_term(g, x, y, ans), shape_of(y))
        return gx, gy

    def forward(cfg, primals, tangents):
        x, y = primals
        ans = ufunc(x, y)
        tx, ty = tangents
        t = add_tangents(None if tx is None else times_partial(tx, d_first(x, y, ans)),
                         None if ty is None else second_term(ty, x, y, ans))
        return ans, broadcast_tangent(t, shape_of(ans))

    prim = defprimitive(ufunc.__name__, ufunc, augmented_primal, reverse, forward)
    # For compiled programs, when nothing broadcasts: the cotangents are g * d_first(x, y, ans)
    # and g * d_second(x, y, ans) (or times_second), ans passed only when the rule saves it.
    prim.inline = ("binary", d_first, d_second, uses_ans, times_second)
    prim.reverse_results = "fresh"   # never None for an active argument; new arrays
    return route_ufunc(ufunc, prim)


def _linear_binary(ufunc, sign_second):
    """add and subtract: the reverse rule needs only shapes, so only shapes are saved."""

    def augmented_primal(cfg, x, y):
        return ufunc(x, y), (shape_of(x), shape_of(y))

    def reverse(cfg, saved, g):
        sx, sy = saved
        gx = unbroadcast(g, sx) if cfg.active[0] else None
        gy = None
        if cfg.active[1]:
            # Negate after summing down to y's shape (speed-up: a broadcast y, as in
            # `x - mean`, has far fewer elements than g; the result is the same bits).
            gy = unbroadcast(g, sy)
            if sign_second < 0:
                gy = -gy
        return gx, gy

    def forward(cfg, primals, tangents):
        ans = ufunc(*primals)
        tx, ty = tangents
        if ty is not None and sign_second < 0:
            ty = -ty
        return ans, broadcast_tangent(add_tangents(tx, ty), shape_of(ans))

    prim = defprimitive(ufunc.__name__, ufunc, augmented_primal, reverse, forward)
    prim.inline = ("linear", sign_second)   # for compiled programs, when nothing broadcasts
    prim.reverse_results = "set"   # never None for an active argument; may be g itself
    return route_ufunc(ufunc, prim)


add = _linear_binary(np.add, +1)
subtract = _linear_binary(np.subtract, -1)


def _mul_augmented(cfg, x, y):
    # Keep only what the active side needs: d(xy)/dx = y, d(xy)/dy = x.
    return np.multiply(x, y), (x if cfg.active[1] else shape_of(x),
                               y if cfg.active[0] else shape_of(y))


def _mul_reverse(cfg, saved, g):
    x, y = saved
    gx = gy = None
    if cfg.active[0]:
        gx = unbroadcast(times_partial(g, y), shape_of(x) if cfg.active[1] else x)
    if cfg.active[1]:
        gy = unbroadcast(times_partial(g, x), shape_of(y) if cfg.active[0] else y)
    return gx, gy


def _mul_forward(cfg, primals, tangents):
    x, y = primals
    ans = np.multiply(x, y)
    tx, ty = tangents
    t = add_tangents(scale_tangent(tx, y), scale_tangent(ty, x))
    return ans, broadcast_tangent(t, shape_of(ans))


multiply = route_ufunc(np.multiply, defprimitive("multiply", np.multiply, _mul_augmented,
                                                 _mul_reverse, _mul_forward))
multiply.inline = ("product",)   # for compiled programs, when nothing broadcasts
multiply.reverse_results = "fresh"   # never None for an active argument; new arrays

def _reciprocal_of_divisor(x, y, ans):
    """d(x / y)/dx = 1 / y. A Python zero divisor gives NumPy's signed inf (and its warning),
    as ``x / 0.0`` does on arrays, where Python's own division would raise."""
    if isinstance(y, numbers.Number) and y == 0:
        return complex(np.divide(1.0, y)) if isinstance(y, complex) else float(np.divide(1.0, y))
    return 1.0 / y


# d(x / y)/dy = -ans / y, applied as -(g * ans) / y: the partial alone is -1/y^2 for x = 1,
# which underflows beyond |y| = 1e154 (the second derivative of log(y) lost its -(f'/f)^2 term
# there) and overflows below 1e-154, where the product with g is a number.
true_divide = binary(np.true_divide, _reciprocal_of_divisor, lambda x, y, ans: -ans / y,
                     uses_ans=True, times_second=lambda g, x, y, ans: -(g * ans) / y)


def _power_partials(ufunc):
    """Partials of x**y for np.power and np.float_power, safe at x == 0 (see module doc)."""

    def d_base(x, y, ans):
        if _is_number(y):   # the common x ** c
            if y == 2 and ufunc is np.power:   # speed-up: squares need no second power call
                return 2 * x
            return y * ufunc(x, y - 1) if y != 0 else np.zeros_like(x)
        # Only 0**0 needs care; the inner where keeps 0**-1 (and its nan derivatives) out.
        zero = (x == 0) & (y == 0)
        return np.where(zero, 0.0, y * ufunc(np.where(zero, 1.0, x), y - 1))

    def d_exponent(x, y, ans):
        zero = x == 0
        log_x = np.log(np.where(zero, 1.0, x))
        if _is_number(x):   # a Python base is weak: its log in the result's precision, so
            #                 that 2.0 ** (float32 y) keeps a float32 tangent
            dtype = getattr(peek(ans), "dtype", None)   # (a CuPy array's too)
            log_x = np.asarray(log_x, dtype=np.result_type(peek(ans)) if dtype is None
                               else dtype)
        return np.where(zero, 0.0, ans * log_x)

    return d_base, d_exponent


power = binary(np.power, *_power_partials(np.power), uses_ans=True)
float_power = binary(np.float_power, *_power_partials(np.float_power), uses_ans=True)


# -- where: a selection, differentiable in both branches -----------------------------------------
def _where_augmented(cfg, x, y, condition):
    return np.where(condition, x, y), (condition, shape_of(x), shape_of(y))


def _where_reverse(cfg, saved, g):
    condition, sx, sy = saved
    gx = unbroadcast(np.where(condition, g, 0), sx) if cfg.active[0] else None
    gy = unbroadcast(np.where(condition, 0, g), sy) if cfg.active[1] else None
    return gx, gy


def _where_forward(cfg, primals, tangents, condition):
    ans = np.where(condition, *primals)
    tx, ty = (0 if t is None else t for t in tangents)
    return ans, broadcast_tangent(np.where(condition, tx, ty), shape_of(ans))


where = defprimitive("where", lambda x, y, condition: np.where(condition, x, y),
                     _where_augmented, _where_reverse, _where_forward)
where.reverse_results = "fresh"   # never None for an active argument; new arrays


def _where(condition, x=None, y=None):
    if x is None and y is None:
        return np.nonzero(primal(condition))
    return where(array_of_sequence(x), array_of_sequence(y), condition=nondiff_value(condition))


register_function(np.where, _where)
