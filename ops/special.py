"""Special functions that NumPy lacks: erf, erfc and the standard normal CDF ndtr.

The primal values use Cephes' rational approximations (ndtr.c), vectorised with the array
module of the input, so the same code runs on CuPy arrays. Accuracy, measured against
`math.erf` / `math.erfc` over float64: erf's absolute error is below 1e-15 everywhere (relative
below 1e-15 on |x| < 1); erfc and ndtr keep a relative error below 1e-12 down to their
underflow, because the tails are computed directly rather than as 1 - erf.

The derivatives (2/sqrt(pi) exp(-x^2) and the normal density) are written with differentiable
NumPy calls, so higher derivatives work. The two helpers that build such elementwise primitives
from a derivative formula (`unary_primitive`, `unary_with_intermediate`) live here too; ops.nn
uses them for its activations.

>>> from tape import autodiff, Reverse, Active
>>> (g,), = autodiff(Reverse, erf, Active, Active(0.0))
>>> bool(np.isclose(g, 2 / np.sqrt(np.pi)))
True
"""
from __future__ import annotations

import math

import numpy as np

from tape.backend import array_module

from ._util import defprimitive, times_partial


def unary_primitive(name, impl, derivative, save_output=False):
    """An elementwise primitive whose derivative is `derivative(x)` (or `derivative(out)` with
    `save_output`, when the output is the cheaper residual, as for the sigmoid)."""

    def augmented(cfg, x):
        out = prim(x)   # an outer level, if any, records the primitive itself
        return out, (out if save_output else x)

    def reverse(cfg, saved, g):
        return (times_partial(g, derivative(saved)),)

    def forward(cfg, primals, tangents):
        out = prim(primals[0])
        return out, times_partial(tangents[0], derivative(out if save_output else primals[0]))

    prim = defprimitive(name, impl, augmented, reverse, forward)
    return prim


def unary_with_intermediate(name, parts, derivative):
    """An elementwise primitive `parts(x) -> (out, aux)` whose reverse rule reuses the saved
    intermediate: `derivative(x, aux)`. Speed-up: in NumPy every op is a pass over memory, so
    keeping sigmoid(x) or Phi(x) is cheaper than recomputing it."""

    def augmented(cfg, x):
        out, aux = parts(x)
        return out, (x, aux)

    def reverse(cfg, saved, g):
        return (times_partial(g, derivative(*saved)),)

    def forward(cfg, primals, tangents):
        out, aux = parts(primals[0])
        return out, times_partial(tangents[0], derivative(primals[0], aux))

    return defprimitive(name, lambda x: parts(x)[0], augmented, reverse, forward)


# Cephes ndtr.c: erf(x) = x T(x^2)/U(x^2) on |x| <= 1; erfc(x) = exp(-x^2) P(x)/Q(x) on [1, 8)
# and exp(-x^2) R(x)/S(x) beyond (Q, S and U are monic; their leading 1 is omitted).
_ERF_T = (9.60497373987051638749e0, 9.00260197203842689217e1, 2.23200534594684319226e3,
          7.00332514112805075473e3, 5.55923013010394962768e4)
_ERF_U = (3.35617141647503099647e1, 5.21357949780152679795e2, 4.59432382970980127987e3,
          2.26290000613890934246e4, 4.92673942608635921086e4)
_ERFC_P = (2.46196981473530512524e-10, 5.64189564831068821977e-1, 7.46321056442269912687e0,
           4.86371970985681366614e1, 1.96520832956077098242e2, 5.26445194995477358631e2,
           9.34528527171957607540e2, 1.02755188689515710272e3, 5.57535335369399327526e2)
_ERFC_Q = (1.32281951154744992508e1, 8.67072140885989742329e1, 3.54937778887819891062e2,
           9.75708501743205489753e2, 1.82390916687909736289e3, 2.24633760818710981792e3,
           1.65666309194161350182e3, 5.57535340817727675546e2)
_ERFC_R = (5.64189583547755073984e-1, 1.27536670759978104416e0, 5.01905042251180477414e0,
           6.16021097993053585195e0, 7.40974269950448939160e0, 2.97886665372100240670e0)
_ERFC_S = (2.26052863220117276590e0, 9.39603524938001434673e0, 1.20489539808096656605e1,
           1.70814450747565897222e1, 9.60896809063285878198e0, 3.36907645100081516050e0)


def _poly(x, coefs, monic=False):
    """Horner's rule; `monic` prepends the leading coefficient 1."""
    acc = x + coefs[0] if monic else coefs[0]
    for c in coefs[1:]:
        acc = acc * x + c
    return acc


def _erf_small(x):
    """erf on [-1, 1]."""
    z = x * x
    return x * _poly(z, _ERF_T) / _poly(z, _ERF_U, monic=True)


def _erfc_large(a):
    """erfc on a >= 1; 0 beyond 27, where exp(-a^2) underflows (as in Cephes)."""
    xp = array_module(a)
    c = xp.clip(a, 1.0, 27.0)   # keeps the polynomials finite for huge or infinite a
    ratio = xp.where(c < 8.0, _poly(c, _ERFC_P) / _poly(c, _ERFC_Q, monic=True),
                     _poly(c, _ERFC_R) / _poly(c, _ERFC_S, monic=True))
    return xp.where(a < 27.0, xp.exp(-c * c) * ratio, 0.0)


def _erf_impl(x):
    xp = array_module(x)
    ax = xp.abs(x)
    return xp.where(ax <= 1.0, _erf_small(xp.clip(x, -1.0, 1.0)),
                    xp.sign(x) * (1.0 - _erfc_large(ax)))


def _erfc_impl(x):
    xp = array_module(x)
    tail = _erfc_large(xp.abs(x))
    return xp.where(xp.abs(x) <= 1.0, 1.0 - _erf_small(xp.clip(x, -1.0, 1.0)),
                    xp.where(x > 0, tail, 2.0 - tail))


_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_SQRT_HALF = math.sqrt(0.5)

_erf = unary_primitive("erf", _erf_impl, lambda x: _TWO_OVER_SQRT_PI * np.exp(-x * x))
_erfc = unary_primitive("erfc", _erfc_impl, lambda x: -_TWO_OVER_SQRT_PI * np.exp(-x * x))
# Phi(x) = erfc(-x / sqrt 2) / 2 keeps full relative accuracy in the far left tail.
_ndtr = unary_primitive("ndtr", lambda x: 0.5 * _erfc_impl(-_SQRT_HALF * x),
                        lambda x: _INV_SQRT_2PI * np.exp(-0.5 * x * x))


def erf(x):
    """The error function, with derivative 2/sqrt(pi) exp(-x^2). Absolute error < 1e-15.

    >>> bool(abs(erf(np.array(0.5)) - math.erf(0.5)) < 1e-15)
    True
    """
    return _erf(x)


def erfc(x):
    """1 - erf(x), computed directly so that the right tail keeps its relative accuracy.

    >>> bool(np.isclose(erfc(np.array(10.0)), math.erfc(10.0), rtol=1e-13))
    True
    """
    return _erfc(x)


def ndtr(x):
    """The standard normal CDF Phi(x) = (1 + erf(x / sqrt 2)) / 2, accurate in both tails.

    >>> float(ndtr(np.array(0.0)))
    0.5
    """
    return _ndtr(x)
