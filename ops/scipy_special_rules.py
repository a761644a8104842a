"""The one rule factory behind scipy.special's ufuncs on traced values.

An elementwise function of several arguments is described by one partial derivative per
argument, ``d(*args, ans)``, written with differentiable calls (NumPy's and scipy.special's own
ufuncs, which this package registers), so that its rules can themselves be differentiated. An
argument whose derivative has no closed form (the order of a Bessel function, the shape
parameters of the incomplete gamma and beta functions) is marked `no_closed_form`: calling the
function with that argument differentiated raises NotImplementedError naming the function and
the argument, rather than returning zero. An integer argument (the order of yn, the n of
polygamma) is marked the same way: it has no derivative at all.

Complex input is refused (NotImplementedError) unless the function is declared
``complex_ok``, i.e. holomorphic with partials that hold for complex arguments (the transpose
convention of docs/complex.md: the cotangent is ``g * f'(z)``).
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from tape.backend import array_module
from tape.core import peek, primal

from ._util import (add_tangents, broadcast_tangent, defprimitive, shape_of, times_partial,
                    unbroadcast)
from .elementwise import route_ufunc


class no_closed_form:
    """Marks an argument that cannot be differentiated; `why` completes the sentence
    "the derivative with respect to <name> ..."."""

    def __init__(self, name: str, why: str = "has no closed form"):
        self.name, self.why = name, why

    def error(self, function: str, position: int) -> NotImplementedError:
        return NotImplementedError(
            f"{function}: the derivative with respect to argument {position} `{self.name}` "
            f"{self.why}, so it is not implemented; pass `{self.name}` as a constant (Const, or "
            "a value that is not differentiated) and differentiate the other arguments only")


def integer_argument(name: str) -> no_closed_form:
    """An argument that is an integer by definition: there is nothing to differentiate."""
    return no_closed_form(name, "is not defined (it is an integer argument)")


def _refuse_complex(function: str, args) -> None:
    for i, a in enumerate(args):
        if np.iscomplexobj(peek(a)):
            raise NotImplementedError(
                f"{function}: complex input (argument {i}) is not supported on traced values; "
                "its derivative rule holds for real arguments only. Pass real arrays, or "
                "differentiate a real parametrisation of the complex argument")


def elementwise_rule(name: str, impl: Callable, partials: Sequence, *, uses_ans: bool = False,
                     complex_ok: bool = False, ufunc=None):
    """A broadcasting elementwise primitive of ``len(partials)`` arguments, routed from `ufunc`
    when one is given. ``partials[i](*args, ans)`` is the partial derivative with respect to
    argument i (`ans` is None unless ``uses_ans``), or a `no_closed_form` marker."""
    label = f"scipy.special.{name}" if ufunc is not None else name
    blocked = [(i, p) for i, p in enumerate(partials) if isinstance(p, no_closed_form)]

    def check(active, args):
        for i, marker in blocked:
            if active[i]:
                raise marker.error(label, i)
        if not complex_ok:
            _refuse_complex(label, args)

    def augmented_primal(cfg, *args):
        check(cfg.active, args)
        ans = prim(*args)   # an outer level, if any, records the primitive itself
        return ans, (args, ans if uses_ans else None)

    def reverse(cfg, saved, g):
        args, ans = saved
        return tuple(unbroadcast(times_partial(g, d(*args, ans)), shape_of(a))
                     if active else None
                     for a, d, active in zip(args, partials, cfg.active))

    def forward(cfg, primals, tangents):
        check([t is not None for t in tangents], primals)
        ans = prim(*primals)
        tangent = None
        for t, d in zip(tangents, partials):
            if t is not None:
                tangent = add_tangents(tangent, times_partial(t, d(*primals, ans)))
        return ans, broadcast_tangent(_in_dtype_of(tangent, ans), shape_of(ans))

    prim = defprimitive(name, impl, augmented_primal, reverse, forward)
    if ufunc is not None:
        route_ufunc(ufunc, prim)
    return prim


def _in_dtype_of(tangent, ans):
    """The tangent in the result's float dtype: SciPy's partials may come in another one
    (float64 of a float16 input; float32 where a Python float meets float32 data)."""
    want, have = getattr(peek(ans), "dtype", None), getattr(peek(tangent), "dtype", None)
    if want is None or have is None or want == have or want.kind not in "fc" \
            or have.kind != want.kind:
        return tangent
    return tangent.astype(want)


def special_ufunc(ufunc, *partials, uses_ans: bool = False, complex_ok: bool = False,
                  name: str | None = None):
    """Register the scipy.special ufunc `ufunc` with its partial derivatives (see
    `elementwise_rule`); returns the primitive. `name` is the public name, for ufuncs that
    SciPy calls from a wrapper (zeta calls the ufunc `_zeta`)."""
    return elementwise_rule(name or ufunc.__name__, ufunc, partials, uses_ans=uses_ans,
                            complex_ok=complex_ok, ufunc=ufunc)


def safe_ratio(x, y):
    """x / y, except 0 where x == 0 and y == 0 (the convention of xlogy-like functions, whose
    y-derivative x/y is 0 wherever x is). Only that corner is replaced, so the mixed second
    derivative d/dx (x / y) = 1 / y stays right wherever y != 0."""
    return x / np.where((x == 0) & (y == 0), 1.0, y)


def asymptotic_beyond(x, limit: float, direct, series: Callable, even: bool = False):
    """A slope formula `direct` that cancels for large real x, with `series(t)`, its asymptotic
    expansion in t = 1/x^2, where x > limit (|x| > limit for an `even` one). Complex x keeps
    `direct`; a CuPy x stays on its device."""
    value = primal(x)
    xp = array_module(value)
    if xp.iscomplexobj(value):
        return direct
    size = xp.abs(xp.asarray(value)) if even else xp.asarray(value)
    far = size > limit
    if not bool(xp.any(far)):
        return direct
    t = 1.0 / np.where(far, x, limit) ** 2
    return np.where(far, series(t), direct)
