"""More elementwise ops: abs, sign, maximum/minimum, hypot, arctan2, logaddexp, copysign, remainder,
ldexp/frexp/modf, real/imag/conj, clip, sinc, nan_to_num, heaviside.

Conventions at non-smooth points (each derivative is a one-sided or averaged value):

- ``|x|'(0) = 0`` (abs and fabs). For complex z the cotangent is ``g * conj(z) / |z|`` (JAX's),
  0 at z = 0. sign has no derivative for real x; for complex x it is ``z / |z|``, derivative 0
  at z = 0.
- maximum, minimum, fmax, fmin: the cotangent goes to the selected argument; on ties
  (``x == y``) it is **split equally**, half to each (as in JAX and PyTorch), so
  ``maximum(x, x)`` has derivative 1. Where maximum/minimum return a NaN it goes to the NaN
  argument; fmax/fmin send it to the argument they return.
- clip(x, lo, hi): x receives the cotangent where ``lo <= x <= hi`` (bounds included, as in
  PyTorch); a bound receives it where it strictly binds. When ``lo > hi`` (NumPy then returns
  hi) it all goes to hi.
- hypot and arctan2 have derivative 0 at the origin.
- logaddexp(-inf, -inf) splits the derivative equally (the limit along x == y), not NaN.
- copysign(x, y): ``d/dx = +1`` where the signs of x and y agree, else -1 (signed zeros
  count); y carries no derivative.
- remainder(x, y) = x - n*y with n = floor(x/y): ``d/dx = 1``, ``d/dy = -n``; fmod likewise
  with n = trunc(x/y). The jumps are ignored.
- sinc'(0) = 0; derivatives of every order are accurate near 0 (series there).
- nan_to_num: derivative 1 where x is finite and 0 where it was replaced.
- heaviside(x, h0): no derivative in x; derivative 1 in h0 where x == 0.
- modf's fractional part is computed as fmod(x, 1) (equal for finite x).
"""
from __future__ import annotations

import math

import numpy as np

from tape.core import Tracer, is_complex, peek, primal
from tape.rules import inactive, register_function, register_method, register_ufunc

from ._util import (add_tangents, as_array, broadcast_tangent, defprimitive, shape_of,
                    times_partial, unbroadcast)
from .activations import sigmoid
from .elementwise import binary, elementwise, route_ufunc, self_adjoint, ufunc_inputs, unary

_NOVALUE = object()


# -- abs ----------------------------------------------------------------------------------------
def _abs_factor(x, ans):
    """d|x|: sign(x) for real x (0 at 0); conj(x)/|x| for complex x (0 at 0)."""
    if np.iscomplexobj(x):
        return np.conj(x) / np.where(ans == 0, 1.0, ans)
    return np.sign(x)


def _abs_augmented(cfg, x):
    ans = np.absolute(x)
    return ans, _abs_factor(x, ans)


def _abs_reverse(cfg, factor, g):
    if np.iscomplexobj(factor):
        g = np.real(g)   # the result is real, so is its cotangent (see `real`)
    return (times_partial(g, factor),)


def _abs_forward(cfg, primals, tangents):
    x, = primals
    ans = np.absolute(x)
    t = times_partial(tangents[0], _abs_factor(x, ans))
    return ans, (np.real(t) if np.iscomplexobj(x) else t)


absolute = route_ufunc(np.absolute, defprimitive(
    "absolute", np.absolute, _abs_augmented, _abs_reverse,
    _abs_forward))
fabs = unary(np.fabs, np.sign)


# -- sign ---------------------------------------------------------------------------------------
_sign_of_real = inactive(np.sign)


def sign(x, **kw):
    """np.sign: piecewise constant for real x (no derivative); for complex x NumPy gives
    ``z / |z|`` (0 at 0), which is differentiable away from 0 and is built here from `absolute`
    and `divide` so that every mode and order follows (derivative 0 at z = 0, as for |z|).

    >>> from tape import autodiff, Forward, Duplicated
    >>> autodiff(Forward, np.sign, Duplicated(np.array([2j]), np.array([1.0 + 0j])))[0]
    array([0.5+0.j])
    """
    if kw:
        x, = ufunc_inputs("sign", (x,), kw)
    if not is_complex(peek(x)):
        return _sign_of_real(x)
    size = absolute(x)
    at_zero = size == 0
    return np.where(at_zero, 0, x / np.where(at_zero, 1, size))


register_ufunc(np.sign, sign)


# -- maximum, minimum, fmax, fmin ---------------------------------------------------------------
def selection(ufunc, first_wins):
    """A binary ufunc that returns one of its arguments: ``first_wins(x, y)`` says where the
    first is returned; on ties the cotangent is split equally. Only the masks are saved."""

    def masks(x, y):
        x, y = primal(x), primal(y)   # piecewise constant: no derivative to keep
        return first_wins(x, y), x == y

    def augmented_primal(cfg, x, y):
        return ufunc(x, y), (masks(x, y), shape_of(x), shape_of(y))

    def reverse(cfg, saved, g):
        (wins, tie), sx, sy = saved
        gx = np.where(wins, g, np.where(tie, 0.5 * g, 0))
        return (unbroadcast(gx, sx) if cfg.active[0] else None,
                unbroadcast(g - gx, sy) if cfg.active[1] else None)

    def forward(cfg, primals, tangents):
        x, y = primals
        wins, tie = masks(x, y)
        tx, ty = (0 if t is None else t for t in tangents)
        t = np.where(wins, tx, np.where(tie, 0.5 * (tx + ty), ty))
        ans = ufunc(x, y)
        return ans, broadcast_tangent(t, shape_of(ans))

    return route_ufunc(ufunc, defprimitive(ufunc.__name__, ufunc, augmented_primal, reverse,
                                           forward))


maximum = selection(np.maximum, lambda x, y: (x > y) | np.isnan(x))
minimum = selection(np.minimum, lambda x, y: (x < y) | np.isnan(x))
fmax = selection(np.fmax, lambda x, y: (x > y) | np.isnan(y))
fmin = selection(np.fmin, lambda x, y: (x < y) | np.isnan(y))


# -- smooth binary functions --------------------------------------------------------------------
def _nonzero(v):
    """`v` with zeros replaced by 1, for a quotient whose numerator is 0 there too."""
    return np.where(v == 0, 1.0, v)


hypot = binary(np.hypot, lambda x, y, ans: x / _nonzero(ans),
               lambda x, y, ans: y / _nonzero(ans), uses_ans=True)
# x / (x^2 + y^2) as (x / r) / r with r = hypot(x, y): the sum of squares under- or overflows
# below 1e-162 or above 1e154 (where _nonzero then took it for 1: 1e-170 for 1e169).
def _over_squared_hypot(top, x, y):
    r = _nonzero(np.hypot(x, y))
    return (top / r) / r


arctan2 = binary(np.arctan2, lambda y, x, ans: _over_squared_hypot(x, x, y),
                 lambda y, x, ans: _over_squared_hypot(-y, x, y))


def _logaddexp_partials(log_base):
    """d/dx log_b(b**x + b**y) = sigmoid((x - y) ln b), 1/2 where both arguments are -inf.
    Not b**(x - ans): the rounding of ans is an error of up to ulp(ans) in x - ans (at x = y
    = 1e16 both partials were 1, not 1/2); x - y is exact where the partials are not 0 or 1.
    Two equal infinities give 1/2 each, the limit along x = y, as NumPy's own result there
    comes quietly: no invalid-value warning (or error under np.errstate) from inf - inf."""
    def d_first(x, y, ans):
        with np.errstate(invalid="ignore"):   # the unselected NaN of inf - inf
            d = np.where((x == y) & np.isinf(x), 0.0, x - y)
        return sigmoid(d if log_base == 1.0 else d * log_base)

    return d_first, lambda x, y, ans: d_first(y, x, ans)


logaddexp = binary(np.logaddexp, *_logaddexp_partials(1.0), uses_ans=True)
logaddexp2 = binary(np.logaddexp2, *_logaddexp_partials(math.log(2.0)), uses_ans=True)


def _quotient(x, y, ans):
    """The integer n with x == n*y + ans: piecewise constant, so computed on plain values."""
    x, y, ans = primal(x), primal(y), primal(ans)
    return np.rint((x - ans) / y)


remainder = binary(np.remainder, lambda x, y, ans: 1.0,
                   lambda x, y, ans: -_quotient(x, y, ans), uses_ans=True)
fmod = binary(np.fmod, lambda x, y, ans: 1.0, lambda x, y, ans: -_quotient(x, y, ans),
              uses_ans=True)
register_ufunc(np.divmod, lambda x, y, **kw: (np.floor_divide(x, y, **kw),
                                              np.remainder(x, y, **kw)))


# -- copysign: |x| with the sign of y ---------------------------------------------------------
def _copysign_augmented(cfg, x, y):
    flip = np.signbit(primal(x)) != np.signbit(primal(y))
    return np.copysign(x, y), (flip, shape_of(x))


def _copysign_reverse(cfg, saved, g):
    flip, sx = saved
    return unbroadcast(np.where(flip, -g, g), sx) if cfg.active[0] else None, None


def _copysign_forward(cfg, primals, tangents):
    x, y = primals
    ans = np.copysign(x, y)
    tx = tangents[0]
    if tx is None:
        return ans, None
    flip = np.signbit(primal(x)) != np.signbit(primal(y))
    return ans, broadcast_tangent(np.where(flip, -tx, tx), shape_of(ans))


copysign = route_ufunc(np.copysign, defprimitive("copysign", np.copysign, _copysign_augmented,
                                                 _copysign_reverse, _copysign_forward))


# -- ldexp, frexp, modf ---------------------------------------------------------------------------
def _ldexp_augmented(cfg, x, exponent):
    return np.ldexp(x, exponent), (exponent, shape_of(x))


def _ldexp_reverse(cfg, saved, g):
    exponent, shape = saved
    return (unbroadcast(np.ldexp(g, exponent), shape),)


def _ldexp_forward(cfg, primals, tangents, exponent):
    ans = np.ldexp(primals[0], exponent)
    return ans, broadcast_tangent(np.ldexp(tangents[0], exponent), shape_of(ans))


ldexp_ = defprimitive("ldexp", lambda x, exponent: np.ldexp(x, exponent), _ldexp_augmented,
                      _ldexp_reverse, _ldexp_forward)


def _ldexp(x, exponent, **kw):
    """x * 2**exponent: linear in x; the integer exponent carries no derivative."""
    if kw:
        x, = ufunc_inputs("ldexp", (x,), kw)
    return ldexp_(x, exponent=primal(exponent))


def _frexp(x, **kw):
    """(mantissa, exponent) with mantissa = ldexp(x, -exponent), differentiable in x."""
    if kw:
        x, = ufunc_inputs("frexp", (x,), kw)
    exponent = np.frexp(primal(x))[1]
    return ldexp_(x, exponent=-exponent), exponent


def _modf(x, **kw):
    """(fractional part, integral part); only the fractional part has a derivative."""
    if kw:
        x, = ufunc_inputs("modf", (x,), kw)
    return np.fmod(x, 1.0), np.trunc(primal(x))


register_ufunc(np.ldexp, _ldexp)
register_ufunc(np.frexp, _frexp)
register_ufunc(np.modf, _modf)


# -- heaviside ------------------------------------------------------------------------------------
def _heaviside(x, h0, **kw):
    """Step function: constant in x, equal to h0 (and differentiable in it) where x == 0."""
    if kw:
        x, h0 = ufunc_inputs("heaviside", (x, h0), kw)
    return np.where(x == 0, h0, _step(x))


@inactive
def _step(x):
    """np.heaviside(x, 0) of the plain values: a replayed step of a compiled function."""
    return np.heaviside(x, 0.0)


register_ufunc(np.heaviside, _heaviside)


# -- complex parts ------------------------------------------------------------------------------
conjugate = self_adjoint(np.conjugate)


def _real_reverse(cfg, was_complex, g):
    # The transpose of z -> Re z embeds the real cotangent as a complex one. The cotangent of a
    # real value can arrive with an imaginary part (from a complex operation it fed, such as
    # r * w with complex w); only its real part is a cotangent of r, so it is taken here, where
    # the value came out of a complex one, and at real inputs.
    return (np.real(g) + 0j if was_complex else g,)


real = defprimitive(
    "real", np.real, lambda cfg, x: (np.real(x), np.iscomplexobj(x)), _real_reverse,
    lambda cfg, primals, tangents: (np.real(primals[0]), np.real(tangents[0])))
register_method("real", real)
# np.real(a) is `a.real` in NumPy, a view of `a` (for a real `a`, the same values): the tracer's
# property marks it as one, so that writes through either side are seen by the other.
register_function(np.real, lambda val: val.real if isinstance(val, Tracer) else np.real(val))


def _imag_forward(cfg, primals, tangents):
    x, = primals
    return np.imag(x), (np.imag(tangents[0]) if np.iscomplexobj(x) else None)


imag = defprimitive(
    "imag", np.imag, lambda cfg, x: (np.imag(x), np.iscomplexobj(x)),
    # The transpose of z -> Im z = Re(-i z) is g -> -i g (g real: see `real`); a real input gets
    # no cotangent.
    lambda cfg, was_complex, g: (-1j * np.real(g) if was_complex else None,),
    _imag_forward, function=np.imag)


def _angle(z, deg=False):
    """The argument of z: arctan2(Im z, Re z) (constant 0 or pi for real z)."""
    a = np.arctan2(np.imag(z), np.real(z))
    return a * (180.0 / np.pi) if deg else a


register_function(np.angle, _angle)


# -- clip ---------------------------------------------------------------------------------------
def _clip_masks(x, lo, hi):
    """Where clip(x, lo, hi) takes lo, hi and x (None for an absent bound): a bound where it
    strictly binds, hi wherever max(x, lo) > hi, and x everywhere else."""
    x, lo, hi = primal(x), primal(lo), primal(hi)
    from_hi = None if hi is None else (x if lo is None else np.maximum(x, lo)) > hi
    from_lo = None if lo is None else (x < lo) if from_hi is None else (x < lo) & ~from_hi
    bound = from_lo if from_hi is None else from_hi if from_lo is None else from_lo | from_hi
    return (None if bound is None else ~bound), from_lo, from_hi


def _clip_augmented(cfg, x, lo, hi):
    return np.clip(x, lo, hi), (_clip_masks(x, lo, hi), shape_of(x), shape_of(lo),
                                shape_of(hi))


def _clip_reverse(cfg, saved, g):
    masks, *shapes = saved
    return tuple(
        None if not active else unbroadcast(g if mask is None else np.where(mask, g, 0), shape)
        for active, mask, shape in zip(cfg.active, masks, shapes))


def _clip_forward(cfg, primals, tangents):
    ans = np.clip(*primals)
    t = None
    for mask, tangent in zip(_clip_masks(*primals), tangents):
        if tangent is not None:
            t = add_tangents(t, tangent if mask is None else np.where(mask, tangent, 0))
    return ans, broadcast_tangent(t, shape_of(ans))


clip_ = defprimitive("clip", np.clip, _clip_augmented, _clip_reverse, _clip_forward)


def _clip(a, a_min=_NOVALUE, a_max=_NOVALUE, out=None, *, min=_NOVALUE, max=_NOVALUE, **kw):
    """np.clip(a, a_min, a_max): differentiable in `a` and in the bounds where they bind."""
    if kw:
        a, = ufunc_inputs("clip", (a,), kw)
    result = clip_(a, _bound(a_min, min, "min"), _bound(a_max, max, "max"))
    if out is None:
        return result
    out[...] = result   # a tracer buffer records the write; a plain one refuses a tracer
    return out


def _bound(positional, keyword, name):
    if positional is not _NOVALUE and keyword is not _NOVALUE:
        raise TypeError(f"np.clip: pass the {name} bound once, positionally or as {name}=")
    value = keyword if positional is _NOVALUE else positional
    return None if value is _NOVALUE else value


register_function(np.clip, _clip)


# -- sinc ---------------------------------------------------------------------------------------
_SINC_SERIES_BELOW = 1e-2
# d/dx sinc(x) = sum_{k>=1} (-1)^k 2k pi^2k x^(2k-1) / (2k+1)!, first four terms over x.
_SINC_SERIES = (-np.pi ** 2 / 3, np.pi ** 4 / 30, -np.pi ** 6 / 840, np.pi ** 8 / 45360)


def _sinc_derivative(x):
    """(cos(pi x) - sinc(x)) / x, by its Taylor series near 0 where the quotient cancels, so that
    higher derivatives (which differentiate this expression) are accurate there too."""
    small = np.abs(primal(x)) < _SINC_SERIES_BELOW
    safe = np.where(small, 1.0, x)
    exact = (np.cos(np.pi * safe) - np.sinc(safe)) / safe
    x2 = np.square(x)
    c1, c2, c3, c4 = _SINC_SERIES
    series = x * (c1 + x2 * (c2 + x2 * (c3 + x2 * c4)))
    return np.where(small, series, exact)


sinc = elementwise("sinc", np.sinc, _sinc_derivative)
register_function(np.sinc, sinc)


# -- nan_to_num ---------------------------------------------------------------------------------
def _nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """x where finite (derivative 1), the replacement values elsewhere (derivative 0)."""
    out = np.where(np.isfinite(x), x, _filled(x, nan, posinf, neginf))
    if np.iscomplexobj(peek(x)):
        return out
    # A traced replacement value carries its derivative into the entries it replaces.
    dtype = peek(out).dtype
    for value, where in ((nan, np.isnan), (posinf, np.isposinf), (neginf, np.isneginf)):
        if isinstance(value, Tracer):
            out = np.where(where(x), value if np.result_type(peek(value)) == dtype
                           else value.astype(dtype), out)
    return out


@inactive
def _filled(x, nan, posinf, neginf):
    """np.nan_to_num of the plain values (a replayed step of a compiled function)."""
    return np.nan_to_num(x, copy=True, nan=nan, posinf=posinf, neginf=neginf)


register_function(np.nan_to_num, _nan_to_num)


# -- np.emath (numpy.lib.scimath): complex results where the real function has none ------------
def _to_complex_where(x, outside):
    """`x` as complex (complex64 for single-precision input, as NumPy's scimath) when some real
    entry lies `outside` the real function's domain; `x` itself otherwise. The decision is
    taken on traced comparisons, so a compiled function guards it."""
    x = as_array(x)
    if np.iscomplexobj(x) or not bool(np.any(outside(x))):
        return x
    return x.astype(_scimath_complex(x))


def _scimath_complex(x):
    """The complex type NumPy's scimath gives a real `x`: complex64 for single precision and
    the small integers, complex128 otherwise (half precision included: scimath's list of
    single types leaves float16 out)."""
    single = np.result_type(x).type in (np.float32, np.int8, np.int16, np.uint8, np.uint16)
    return np.complex64 if single else np.complex128


def _below_zero(x):
    return x < 0


def _beyond_one(x):
    return np.abs(x) > 1


def _emath_power(x, p):
    x = _to_complex_where(x, _below_zero)
    p = p if isinstance(p, Tracer) else np.asarray(p)   # an array, as NumPy's: not weak
    if np.issubdtype(np.result_type(p), np.integer) and bool(np.any(p < 0)):
        p = p * 1.0   # a negative integer power of an integer: float, as NumPy
    return np.power(x, p)


def _emath_inverse_sine(x, cosine: bool):
    """np.emath.arcsin / arccos. Beyond |x| = 1 NumPy's value lies on the complex function's
    branch cut, where the complex derivative does not exist; the real-line formulas give the
    same values (sign(x) pi/2 + i arccosh|x| for arcsin) and their one-sided derivatives."""
    fn = np.arccos if cosine else np.arcsin
    x = as_array(x)
    if np.iscomplexobj(x) or not bool(np.any(_beyond_one(x))):
        return fn(x)
    complex_type = _scimath_complex(x)
    work = np.float32 if complex_type is np.complex64 else np.float64
    if x.dtype != work:   # computed in the precision of the complex result, as NumPy's
        x = x.astype(work)
    inside = np.abs(x) <= 1
    real = fn(np.where(inside, x, 0.0))
    beyond = np.arccosh(np.where(inside, 2.0, np.abs(x)))
    if cosine:   # pi - i arccosh|x| below -1, -i arccosh x above 1
        outer = np.where(x < 0, np.pi, 0.0) - 1j * beyond
    else:
        outer = np.where(x < 0, -np.pi / 2, np.pi / 2) + 1j * beyond
    return np.where(inside, real + 0j, outer).astype(complex_type, copy=False)


register_function(np.emath.arcsin, lambda x: _emath_inverse_sine(x, cosine=False))
register_function(np.emath.arccos, lambda x: _emath_inverse_sine(x, cosine=True))
for _name, _fn, _outside in (("sqrt", np.sqrt, _below_zero), ("log", np.log, _below_zero),
                             ("log2", np.log2, _below_zero), ("log10", np.log10, _below_zero),
                             ("arctanh", np.arctanh, _beyond_one)):
    register_function(getattr(np.emath, _name),
                      lambda x, _fn=_fn, _outside=_outside: _fn(_to_complex_where(x, _outside)))
register_function(np.emath.power, _emath_power)
register_function(np.emath.logn, lambda n, x: np.log(_to_complex_where(x, _below_zero))
                  / np.log(_to_complex_where(n, _below_zero)))
