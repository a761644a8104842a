"""tape.scipy.integrate: differentiable counterparts of scipy.integrate.

`trapezoid(y, x=None, dx=1.0, axis=-1)` is scipy.integrate.trapezoid (NumPy's np.trapezoid,
differentiable in `y`, `x` and `dx`).

`odeint(func, y0, t, args=(), **kwargs)` solves ``dy/dt = func(y, t, *args)`` with SciPy's
LSODA (scipy.integrate.odeint, which it calls) and is differentiable with respect to `y0`, the
times `t` and every traced value in `args` (arrays, numbers, or pytrees of them):

- Reverse mode uses the adjoint method. The adjoint a(t) = dL/dy(t) obeys
  ``da/dt = -(df/dy)^T a`` and jumps by the output's cotangent at each time of `t`; the
  parameter gradient is ``int a^T df/dargs dt``. The state, the adjoint and the parameter
  integral are integrated together backwards, one scipy.integrate.odeint call per interval of
  the reversed time grid (one call cannot span the grid: the adjoint jumps at every time in
  `t`), restarting the state from the stored forward solution at each time. The
  vector-Jacobian products ``a^T df/dy`` and ``a^T df/dargs`` come from this engine's reverse
  mode applied to `func` at each evaluation, so `func` is ordinary NumPy code.
  Time derivatives: ``dL/dt_i = g_i . f(y_i, t_i)`` for i > 0 and
  ``dL/dt_0 = -a(t_0+) . f(y_0, t_0)``.
- Forward mode integrates the forward sensitivities ``ds/dt = (df/dy) s + (df/dargs) v`` with
  the state, in one odeint call over `t`; the Jacobian-vector products come from this engine's
  forward mode on `func`.

Both rules call `odeint` itself on an augmented system, so they are differentiable in turn:
second derivatives (forward-over-reverse, reverse-over-reverse) work, at the price of an
augmented system with nested derivatives of `func` (several times the work of the first
order).

Accuracy: the derivatives are derivatives of the exact ODE solution, computed by further ODE
solves, so they agree with the derivative of the computed solution to about the solver's
tolerance. `rtol` and `atol` (and the other keyword arguments: `mxstep`, `hmax`, `h0`,
`tcrit`, ...) are passed to every solve, primal and derivative alike; tighten them (e.g.
``rtol=atol=1e-10``) when derivatives are compared with finite differences. `Dfun`,
`col_deriv`, `ml` and `mu` describe `func`'s Jacobian and are used for the primal solve only.
`full_output=True` is not available on traced input.

`func` must receive every traced value it depends on through `y`, `t` or `args`: a traced
value captured in a closure raises an error (it would otherwise get no derivative).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import scipy.integrate

from ops._util import defprimitive, shape_of
from tape.activities import Active, Duplicated, Forward, Reverse
from tape.api import autodiff
from tape.core import Tracer
from tape.batching import Batched
from tape.errors import BatchingFallback, PytreeError
from tape.pytree import flatten, unflatten

__all__ = ["odeint", "trapezoid"]

# Keyword arguments about func's own Jacobian: they do not describe the augmented systems.
_JACOBIAN_OPTIONS = ("Dfun", "col_deriv", "ml", "mu")


class _Dynamics:
    """A right-hand side ``call(y, t, leaves)`` with its derivatives by this engine's reverse
    and forward modes. Static: holds no traced value (those come in through y, t, leaves)."""

    def vjp(self, y, t, leaves, cot, wrt: Sequence[int]):
        """(cot^T df/dy, [cot^T df/dleaves[k] for k in wrt])."""
        def scalar(y, *diff):
            full = list(leaves)
            for k, v in zip(wrt, diff):
                full[k] = v
            return np.sum(cot * self.call(y, t, full))
        derivs, = autodiff(Reverse, scalar, Active, Active(y),
                           *[Active(leaves[k]) for k in wrt])
        return derivs[0], derivs[1:]

    def jvp(self, y, t, leaves, ty, tleaves: dict):
        """df/dy ty + sum_k df/dleaves[k] tleaves[k]."""
        keys = sorted(tleaves)

        def f(y, *diff):
            full = list(leaves)
            for k, v in zip(keys, diff):
                full[k] = v
            return self.call(y, t, full)
        tangent, = autodiff(Forward, f, Duplicated(y, ty),
                            *[Duplicated(leaves[k], tleaves[k]) for k in keys])
        return tangent


class _System(_Dynamics):
    """dy/dt = func(y, t, *args), with args rebuilt from their flat leaves."""

    def __init__(self, func: Callable, treedef, tfirst: bool):
        self.func, self.treedef, self.tfirst = func, treedef, tfirst

    # Equal for the same function (by identity) and argument structure, so that the two
    # traces tape.compile compares agree and a compiled odeint replays (the function is called
    # afresh at each replay, and the compiled function's watch sees what it reads).
    def __eq__(self, other):
        return (type(other) is _System and other.func is self.func
                and other.tfirst == self.tfirst and other.treedef == self.treedef)

    def __hash__(self):
        return hash((id(self.func), self.tfirst))

    def call(self, y, t, leaves):
        args = unflatten(self.treedef, leaves)
        out = self.func(t, y, *args) if self.tfirst else self.func(y, t, *args)
        if isinstance(out, (list, tuple)):
            out = np.stack([o * np.ones(()) for o in out])
        return out


def _flat(values) -> Any:
    """One vector of all the values' entries."""
    if not values:
        return np.zeros(0)
    return np.concatenate([np.reshape(v, (-1,)) * np.ones(1) for v in values])


def _unflat(vector, like: Sequence):
    """Split `vector` into arrays (or floats) shaped like `like`."""
    out, start = [], 0
    for x in like:
        size = int(np.prod(shape_of(x), dtype=np.int64))
        piece = vector[start:start + size]
        out.append(np.reshape(piece, shape_of(x)) if shape_of(x) else piece[0])
        start += size
    return out


class _Adjoint(_Dynamics):
    """The augmented backward system: state (y, a, m), with
    dy/dt = f, da/dt = -(df/dy)^T a, dm/dt = -a^T df/dleaves[wrt]."""

    def __init__(self, system: _System, n: int, wrt: tuple):
        self.system, self.n, self.wrt = system, n, wrt

    def call(self, state, t, leaves):
        n = self.n
        y, a = state[:n], state[n:2 * n]
        f = self.system.call(y, t, leaves)
        ga, gleaves = self.system.vjp(y, t, leaves, a, self.wrt)
        return np.concatenate([f, -ga] + ([-_flat(gleaves)] if self.wrt else []))


class _Sensitivity(_Dynamics):
    """The augmented forward system: state (y, s) with args (leaves..., tangents of the
    leaves in `which`): dy/dt = f, ds/dt = df/dy s + df/dleaves v."""

    def __init__(self, system: _System, n: int, n_leaves: int, which: tuple):
        self.system, self.n, self.n_leaves, self.which = system, n, n_leaves, which

    def call(self, state, t, args):
        n = self.n
        y, s = state[:n], state[n:]
        leaves, tangents = list(args[:self.n_leaves]), args[self.n_leaves:]
        f = self.system.call(y, t, leaves)
        ds = self.system.jvp(y, t, leaves, s, dict(zip(self.which, tangents)))
        return np.concatenate([f, ds])


# -- the primitive: odeint(y0, t, *leaves) with the system and solver options as parameters ---
def _plain(out):
    if isinstance(out, Tracer):
        raise TypeError(
            "odeint: func returned a traced value for plain inputs, so it uses a traced value "
            "captured from outside (a closure or a global); pass every value to be "
            "differentiated through y0, t or args")
    return out


def _solve(y0, t, *leaves, system, options):
    options = dict(options)
    if options.get("Dfun") is not None:
        options["Dfun"] = _jacobian_with_args(options["Dfun"], system, leaves)
    return scipy.integrate.odeint(lambda y, tt: _plain(system.call(y, tt, list(leaves))), y0, t,
                                  **options)


def _jacobian_with_args(dfun: Callable, system: "_System", leaves) -> Callable:
    """The user's Dfun as SciPy calls it for the wrapped right-hand side, ``(y, t)``: its
    `args` and the `tfirst` order are applied here, as SciPy applies them to the user's
    own call (the wrapped call passes neither)."""
    args = unflatten(system.treedef, list(leaves))
    if system.tfirst:
        return lambda y, tt: dfun(tt, y, *args)
    return lambda y, tt: dfun(y, tt, *args)


def _augmented_options(options: tuple) -> tuple:
    return tuple((k, v) for k, v in options if k not in _JACOBIAN_OPTIONS)


def _odeint_augmented(cfg, y0, t, *leaves, system, options):
    ys = _odeint(y0, t, *leaves, system=system, options=options)
    return ys, (y0, t, leaves, ys, cfg.active, system, options)


def _refuse_batched(values) -> None:
    # A batch of W directions runs once per direction (the engine catches this): the solver
    # integrates one vector.
    if any(isinstance(v, Batched) for v in values):
        raise BatchingFallback("odeint integrates one direction at a time")


def _odeint_reverse(cfg, saved, g):
    y0, t, leaves, ys, active, system, options = saved
    _refuse_batched([g])
    n, steps = shape_of(y0)[0], shape_of(t)[0]
    wrt = tuple(k for k in range(len(leaves)) if active[2 + k])
    adjoint = _Adjoint(system, n, wrt)
    options = _augmented_options(options)
    a = g[steps - 1]
    m = np.zeros(sum(int(np.prod(shape_of(leaves[k]), dtype=np.int64)) for k in wrt))
    gt = [None] * steps
    for i in range(steps - 1, 0, -1):
        if active[1]:   # moving t_i moves where y is read: dL/dt_i = g_i . f(y_i, t_i)
            gt[i] = np.sum(g[i] * system.call(ys[i], t[i], leaves))
        state = np.concatenate([ys[i], a, m]) if wrt else np.concatenate([ys[i], a])
        state = _odeint(state, np.stack([t[i], t[i - 1]]), *leaves, system=adjoint,
                        options=options)[1]
        a = state[n:2 * n] + g[i - 1]
        if wrt:
            m = state[2 * n:]
    grads = [a if active[0] else None, None]
    if active[1]:
        # Starting later shifts the whole solution: dL/dt_0 = -a(t_0+) . f(y_0, t_0).
        gt[0] = -np.sum((a - g[0]) * system.call(y0, t[0], leaves))
        grads[1] = np.stack([v * np.ones(()) for v in gt])
    per_leaf = dict(zip(wrt, _unflat(m, [leaves[k] for k in wrt]))) if wrt else {}
    return tuple(grads) + tuple(per_leaf.get(k) for k in range(len(leaves)))


def _odeint_forward(cfg, primals, tangents, *, system, options):
    y0, t, *leaves = primals
    ty0, tt, *tleaves = tangents
    _refuse_batched(tangents)
    n, steps = shape_of(y0)[0], shape_of(t)[0]
    ys = _odeint(y0, t, *leaves, system=system, options=options)
    s0 = ty0 if ty0 is not None else np.zeros(n)
    if tt is not None:   # s(t_0) = dy0 - f(y0, t0) dt0, so that dY_0 = dy0
        s0 = s0 - system.call(y0, t[0], leaves) * tt[0]
    which = tuple(k for k, v in enumerate(tleaves) if v is not None)
    sens = _Sensitivity(system, n, len(leaves), which)
    out = _odeint(np.concatenate([y0, s0]), t, *leaves, *[tleaves[k] for k in which],
                  system=sens, options=_augmented_options(options))
    dys = out[:, n:]
    if tt is not None:   # dY_i = s(t_i) + f(Y_i, t_i) dt_i
        fs = np.stack([system.call(ys[i], t[i], leaves) for i in range(steps)])
        dys = dys + fs * tt[:, None]
    return ys, dys


_odeint = defprimitive("odeint", _solve, _odeint_augmented, _odeint_reverse, _odeint_forward)


def _traced(tree) -> bool:
    leaves, _ = flatten(tree)
    return any(isinstance(v, Tracer) for v in leaves)


def odeint(func: Callable, y0: Any, t: Any, args: tuple = (), **kwargs: Any) -> Any:
    """Integrate ``dy/dt = func(y, t, *args)`` from ``y(t[0]) = y0``, returning y at each
    time of `t` (shape (len(t), len(y0)); (len(t), 1) for a scalar y0), as
    scipy.integrate.odeint (keyword arguments are SciPy's: rtol, atol, tfirst, mxstep, ...). Differentiable with respect to `y0`, `t` and
    the traced values in `args`, by the adjoint method in reverse mode and forward
    sensitivities in forward mode (see the module docstring), to second order.

    >>> import numpy as np
    >>> from tape import gradient, Reverse
    >>> decay = lambda y, t, k: -k * y
    >>> t = np.array([0.0, 1.0])
    >>> y = odeint(decay, np.array([1.0]), t, args=(0.5,), rtol=1e-10, atol=1e-10)
    >>> bool(np.isclose(y[1, 0], np.exp(-0.5)))
    True
    >>> dk, = gradient(Reverse, lambda k: odeint(decay, np.array([1.0]), t, args=(k,),
    ...                                         rtol=1e-10, atol=1e-10)[1, 0], 0.5)
    >>> bool(np.isclose(dk, -np.exp(-0.5), rtol=1e-6))   # d/dk e^(-k) = -e^(-k)
    True
    """
    args = args if isinstance(args, tuple) else (args,)
    try:
        leaves, treedef = flatten(args)
    except PytreeError:
        leaves, treedef = None, None
    if not (isinstance(y0, Tracer) or isinstance(t, Tracer)
            or (leaves is not None and any(isinstance(v, Tracer) for v in leaves))):
        return scipy.integrate.odeint(lambda *a: _plain(func(*a)), y0, t, args=args, **kwargs)
    if leaves is None:
        raise TypeError("odeint: args holds an object the engine cannot look into; with traced "
                        "y0 or t, pass args as arrays, numbers, or tuples / lists / dicts / "
                        "dataclasses of them")
    if kwargs.get("full_output"):
        raise NotImplementedError("odeint: full_output=True is not available when "
                                  "differentiating; call it on plain values for the solver's "
                                  "diagnostics")
    tfirst = bool(kwargs.pop("tfirst", False))
    y0 = y0 if isinstance(y0, Tracer) else np.asarray(y0, dtype=np.float64)
    t = t if isinstance(t, Tracer) else np.asarray(t, dtype=np.float64)
    if len(shape_of(y0)) == 0:   # SciPy integrates a scalar y0 as a vector of one
        y0 = np.reshape(y0, (1,))
    if len(shape_of(y0)) != 1:
        raise ValueError(f"odeint: y0 must be one-dimensional; got shape {shape_of(y0)}")
    if len(shape_of(t)) != 1 or shape_of(t)[0] < 1:
        raise ValueError(f"odeint: t must be a one-dimensional array of times; got shape "
                         f"{shape_of(t)}")
    system = _System(func, treedef, tfirst)
    return _odeint(y0, t, *leaves, system=system, options=tuple(sorted(kwargs.items())))


def trapezoid(y: Any, x: Any = None, dx: Any = 1.0, axis: int = -1) -> Any:
    """scipy.integrate.trapezoid: the trapezoidal rule along `axis` (np.trapezoid's
    differentiable rule).

    >>> float(trapezoid(np.array([0.0, 1.0, 4.0]), dx=0.5))
    1.5
    """
    return np.trapezoid(y, x=x, dx=dx, axis=axis)
