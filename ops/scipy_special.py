"""scipy.special's ufuncs called directly on traced values (through NumPy's ufunc protocol).

User code calls SciPy as usual, ``scipy.special.gammaln(x)``; a traced `x` hands the call to
the rule registered here for that ufunc object. Rules are written with differentiable calls
(NumPy's and these very ufuncs), so derivatives of every order work:

>>> import scipy.special
>>> from tape import autodiff, Reverse, Active
>>> (g,), = autodiff(Reverse, lambda x: scipy.special.gammaln(x), Active, Active(2.5))
>>> bool(np.isclose(g, scipy.special.digamma(2.5)))
True

Covered (each differentiable in its real arguments unless noted; see the modules for the
conventions at singular points):

- gamma family (`scipy_special_gamma`): gammaln, digamma (= psi), gamma, rgamma, loggamma,
  beta, betaln, gammainc / gammaincc (in x), betainc (in x), zeta (in q); and, as plain
  functions since SciPy's are not ufuncs, `polygamma(n, x)` and `multigammaln(a, d)` below.
- error functions (`scipy_special_erf`): erf, erfc, erfcx (complex too), erfinv, erfcinv,
  ndtr, ndtri, log_ndtr.
- logistic and information theory (`scipy_special_info`): logit, expit, log_expit, xlogy,
  xlog1py (complex too), entr, rel_entr, kl_div.
- Bessel functions (`scipy_special_bessel`): i0, i0e, i1, i1e, iv, ive, k0, k0e, k1, k1e, kv,
  kve, j0, j1, jv (= jn), y0, y1, yn, yv (in x); and NumPy's np.i0.
- more (`scipy_special_more`): gammaincinv, gammainccinv, betaincinv (in y), erfi, dawsn
  (complex too), exp1, expi, ndtri_exp, and SciPy's own exp2, exp10, expm1, log1p (complex
  too), cbrt, cosm1.
- no derivative (registered inactive): gammasgn, round.

Arguments without a closed-form derivative (Bessel orders, the shape parameters of gammainc
and betainc, zeta's first argument) and integer arguments (yn's order, polygamma's n) raise
NotImplementedError naming the function and the argument when they are differentiated.

SciPy is optional (the `scipy` extra): without it nothing is registered, and `polygamma` and
`multigammaln` raise ImportError when called.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from tape.core import Tracer, primal
from tape.rules import inactive, register_ufunc

try:
    import scipy.special as _sc
except ImportError:   # the optional dependency is absent: register nothing
    _sc = None

if _sc is not None:
    from . import (scipy_special_bessel, scipy_special_erf, scipy_special_gamma,  # noqa: F401
                   scipy_special_info, scipy_special_more)

    # Step-like functions: their derivative is zero wherever it exists.
    INACTIVE_UFUNCS = [_sc.gammasgn, _sc.round]
    for _uf in INACTIVE_UFUNCS:
        register_ufunc(_uf, inactive(_uf))


def _need_scipy(name: str) -> None:
    if _sc is None:
        raise ImportError(f"{name} needs SciPy; install the `scipy` extra "
                          "(pip install 'hecate[scipy]')")


def polygamma(n, x):
    """The polygamma function psi^(n)(x), the n-th derivative of digamma; differentiable in x
    (its derivative is polygamma(n + 1, x)). `n` is a non-negative integer (or array of them),
    never differentiated. SciPy's own `scipy.special.polygamma` is not a ufunc and cannot take
    traced values; this one can, with the same signature and values.

    >>> bool(np.isclose(polygamma(1, 1.0), np.pi ** 2 / 6))
    True
    """
    _need_scipy("polygamma")
    return scipy_special_gamma.polygamma_rule(n, x)


def multigammaln(a, d: int):
    """The log of the multivariate gamma function of dimension `d`,
    d(d-1)/4 log(pi) + sum_{j<d} gammaln(a - j/2); differentiable in `a`. Same signature,
    values and errors as `scipy.special.multigammaln` (which cannot take traced values).

    >>> import scipy.special
    >>> bool(np.isclose(multigammaln(3.5, 3), scipy.special.multigammaln(3.5, 3)))
    True
    """
    _need_scipy("multigammaln")
    d = primal(d)
    whole = isinstance(d, numbers.Integral) or (np.ndim(d) == 0 and float(d).is_integer())
    if not whole or d < 1:
        raise ValueError(f"multigammaln: d should be a positive integer (dimension); got {d!r}")
    d = int(d)
    if not isinstance(a, Tracer):
        a = np.asarray(a)
    # Tested on the traced values: a compiled function checks again at each call (a truth
    # guard) rather than guarding the values.
    if bool(np.any(a <= 0.5 * (d - 1))):
        raise ValueError(f"multigammaln: condition a > 0.5 * (d - 1) = {0.5 * (d - 1)} is not "
                         f"met by a = {primal(a)!r}")
    # As SciPy: the log-gammas summed in a's precision, then added to a float64 constant (a
    # float32 `a` gives a float64 result).
    terms = _sc.gammaln(a)
    for j in range(1, d):
        terms = terms + _sc.gammaln(a - 0.5 * j)
    return np.float64(0.25 * d * (d - 1) * math.log(math.pi)) + terms
