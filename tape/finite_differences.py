"""Finite differences with error bars, and the comparisons of `tape.testing`'s checkers.

A central difference ``(f(x + h v) - f(x - h v)) / 2h`` is wrong by rounding (about
``eps_machine * |f| / h``) and by truncation (about ``h² |f'''|``); near a kink or at badly
scaled points no single step is good. So a comparison first tries the given step and, only when
it disagrees, tries steps from 100 times larger to a million times smaller. The estimate whose
neighbours agree best with it is compared with the engine, its disagreement with them serving
as its error bar. A disagreement that survives is real; one-sided differences then tell a
wrong derivative from a point where `f` is not differentiable.

>>> est = Estimate(lambda x: [x ** 3], [np.array([2.0])], [np.array([1.0])], 1e-6)
>>> got = [np.array([12.0])]
>>> agrees(lambda d: scalar_gap(got, d, [np.ones(1)]), est, 1e-5, 0.0)[0]
True
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Sequence

import numpy as np

from .pytree import flatten

_FALLBACK_STEPS = (100.0, 10.0, 0.1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6)


class GradientCheckError(AssertionError):
    """A derivative disagrees with finite differences (or with another mode)."""


def output_leaves(y) -> list:
    """The leaves of a result as float64 (or complex128) arrays."""
    leaves, _ = flatten(y)
    return [np.asarray(v, dtype=np.result_type(v, np.float64)) for v in leaves]


def is_float(x) -> bool:
    return np.issubdtype(np.result_type(x), np.inexact)


def random_like(x, rng, scale=1.0):
    """A random direction shaped like `x` (real and imaginary parts for complex `x`), its
    entries scaled by `scale` (a number, or an array shaped like `x`)."""
    if isinstance(x, float):
        return float(rng.standard_normal() * scale)
    if isinstance(x, complex):
        return complex(rng.standard_normal(), rng.standard_normal()) * float(scale)
    dtype = np.result_type(x)
    if dtype.kind == "c":
        re, im = rng.standard_normal((2,) + np.shape(x))
        return ((re + 1j * im) * scale).astype(dtype)
    return (rng.standard_normal(np.shape(x)) * scale).astype(dtype)


def input_scale(x):
    """The size of each of `x`'s entries, at least 1 (an array shaped like `x`, a float for a
    Python number): a step of eps * scale moves every entry by a relative amount it can
    represent (a step of 1e-6 is below the rounding of 1e6) and no more (a step sized for the
    array's largest entry, 1e6, would cross the pole of 1/x at an entry 1e-3)."""
    values = np.abs(np.asarray(x))
    with np.errstate(invalid="ignore"):
        scale = np.where(np.isfinite(values), np.maximum(values, 1.0), 1.0).astype(np.float64)
    return float(scale) if isinstance(x, (int, float, complex)) else scale


def widened(x):
    """`x` in double precision when it is a lower-precision float (for finite differences)."""
    dtype = np.result_type(x)
    if isinstance(x, (float, complex, int, bool)) or dtype.kind not in "fc" or dtype.itemsize * (
            2 if dtype.kind == "f" else 1) >= 16:
        return x
    return np.asarray(x, dtype=np.complex128 if dtype.kind == "c" else np.float64)[()]


def precision_bits(x) -> int:
    """Bits of the mantissa of `x`'s (real) floating-point type."""
    dtype = np.result_type(x)
    if dtype.kind == "c":
        dtype = np.empty(0, dtype).real.dtype
    return int(np.finfo(dtype).nmant) if dtype.kind == "f" else 0


def fitting_rtol(args, rtol: float) -> float:
    """`rtol`, widened for arguments of less than double precision: the engine computes in
    their precision, the finite differences in float64."""
    eps = max(np.finfo(np.result_type(a)).eps for a in args)
    return max(rtol, 1000 * eps)


def dot(a, b) -> float:
    """The real inner product Re(sum(conj(a) * b)): a complex number counts as the pair of its
    real and imaginary parts."""
    return float(np.real(np.vdot(np.asarray(a), np.asarray(b))))


def inner(a, b) -> float:
    la, _ = flatten(a)
    lb, _ = flatten(b)
    return sum(dot(x, y) for x, y in zip(la, lb))


def term_size(a, b) -> float:
    """The size of the terms ``a_j b_j`` of an inner product, as the root of the sum of their
    squares: the scale of its relative tolerance. Rounding independent from term to term sums
    to about this times its relative size, and an error common to every term shows in the
    inner product itself; the sum of the terms' absolute values, which grows with their
    number, would hide a derivative wrong at one entry of a large array.

    >>> term_size(np.array([3.0, -4.0]), np.ones(2))
    5.0
    """
    products = np.abs(np.asarray(a)) * np.abs(np.asarray(b))
    top = float(np.max(products, initial=0.0))
    if top == 0.0 or not np.isfinite(top):
        return top
    return top * float(np.sqrt(np.sum((products / top) ** 2)))


def _magnitude(a, b) -> float:
    """sum |a_j| |b_j|: the size of the terms of the inner product (a scale for cancellation)."""
    return float(np.sum(np.abs(np.asarray(a)) * np.abs(np.asarray(b))))


def _axpy(a, v, x):
    if isinstance(x, (float, complex)):
        return x + a * v
    return np.asarray(x + a * v, dtype=np.result_type(x))


class Estimate:
    """J·v of `f` at `args` along `direction` (None for a fixed argument) by central
    differences, at the step `eps` and, on demand, at other steps with an error bar."""

    def __init__(self, f: Callable, args: Sequence, direction: Sequence, eps: float):
        self.f, self.args, self.direction, self.eps = f, list(args), list(direction), eps
        self._at: dict = {}

    def _shifted(self, step):
        return [_axpy(step, v, x) if v is not None else x
                for x, v in zip(self.args, self.direction)]

    def _point_rounding(self, step) -> float:
        """The typical relative error of the step that the rounding of ``x ± step v`` makes:
        eps |x_j| / (step |v_j|) averaged over the moved entries j (a step 1e-12 |x| is
        rounded by 1e-4 of itself). The average, not the largest: an entry whose random
        direction is near zero would swamp the error bar of every output, though it moves
        only those that depend on it."""
        total, count = 0.0, 0
        for x, v in zip(self.args, self.direction):
            if v is None:
                continue
            ax, av = np.abs(np.asarray(x)), np.abs(np.asarray(v))
            moved = av > 0
            if np.any(moved):
                with np.errstate(all="ignore"):
                    ratio = np.broadcast_to(ax, av.shape)[moved] / av[moved]
                ratio = ratio[np.isfinite(ratio)]
                total += float(np.sum(ratio))
                count += ratio.size
        return total / max(count, 1) * np.finfo(np.float64).eps / step

    def _evaluate(self, step):
        if step not in self._at:
            with np.errstate(all="ignore"):
                yp = output_leaves(self.f(*self._shifted(step)))
                ym = output_leaves(self.f(*self._shifted(-step)))
                values = [(a - b) / (2 * step) for a, b in zip(yp, ym)]
                point = self._point_rounding(step)
                # The rounding of f's values, and that of the shifted points (relative to
                # the estimate, as |x f'| eps / step).
                noise = [(np.abs(a) + np.abs(b)) * np.finfo(np.float64).eps / step
                         + point * np.abs(d) for a, b, d in zip(yp, ym, values)]
            self._at[step] = (values, noise, [np.asarray(a == b) for a, b in zip(yp, ym)])
        return self._at[step]

    @property
    def value(self) -> list:
        """The estimate at the given step."""
        return self._evaluate(self.eps)[0]

    @property
    def noise(self) -> list:
        """The rounding error of `value`, leaf by leaf."""
        return self._evaluate(self.eps)[1]

    def refined(self) -> tuple:
        """(estimate, error bar, step): among the steps tried, the one whose estimate its
        neighbours agree with best; the error bar is that disagreement plus rounding.

        An end step (the largest or the smallest) is compared with its two nearest steps, not
        with one alone (the two smallest may share a rounding artefact). An entry whose two
        shifted values are exactly equal at a step while a larger step moved it is unresolved
        there (the change was below the rounding of f or of an intermediate, such as 1 + x²):
        its error bar is the size of the estimate at the nearest larger step that moved it."""
        steps = sorted({self.eps} | {self.eps * s for s in _FALLBACK_STEPS}, reverse=True)
        values = [self._evaluate(s) for s in steps]
        n = len(values)
        unresolved = []
        last = None   # per leaf, |estimate| at the nearest larger step where f moved
        for value, _, equal in values:
            if last is None:
                last = [np.zeros(np.shape(v)) for v in value]
            unresolved.append([np.where(e, m, 0.0) for e, m in zip(equal, last)])
            last = [np.where(e, m, np.abs(v)) for e, m, v in zip(equal, last, value)]
        best, best_err, best_bad = 0, None, np.inf
        for k, (value, noise, _) in enumerate(values):
            near = [j for j in (k - 1, k + 1) if 0 <= j < n]
            if len(near) == 1 and n > 2:
                near.append(2 * near[0] - k)
            neighbours = [values[j][0] for j in near]
            err = [sum(np.abs(v - nb[i]) for nb in neighbours) / len(neighbours) + noise[i]
                   + unresolved[k][i] for i, v in enumerate(value)]
            bad = sum(float(np.sum(e)) for e in err)
            if np.isfinite(bad) and all(np.all(np.isfinite(v)) for v in value) and bad < best_bad:
                best, best_err, best_bad = k, err, bad
        if best_err is None:
            return values[0][0], [np.full(np.shape(v), np.inf) for v in values[0][0]], steps[0]
        return values[best][0], best_err, steps[best]

    def one_sided(self, step) -> tuple:
        """(forward, backward) one-sided differences at `step`."""
        with np.errstate(all="ignore"):
            y0 = output_leaves(self.f(*self.args))
            yp = output_leaves(self.f(*self._shifted(step)))
            ym = output_leaves(self.f(*self._shifted(-step)))
        return ([(a - b) / step for a, b in zip(yp, y0)],
                [(b - c) / step for b, c in zip(y0, ym)])


def scalar_gap(got: float | list, numeric: list, u: list, got_terms: float = 0.0) -> tuple:
    """(|got - uᵀ numeric|, scale, uᵀ numeric) for a scalar check; `got` is either the
    engine's uᵀJv or its J·v leaves."""
    want = sum(dot(a, b) for a, b in zip(u, numeric))
    terms = sum(term_size(a, b) for a, b in zip(u, numeric))
    if isinstance(got, list):
        got_terms = max(got_terms, sum(term_size(a, b) for a, b in zip(u, got)))
        got = sum(dot(a, b) for a, b in zip(u, got))
    scale = max(abs(got), abs(want), terms, got_terms)
    return abs(got - want), scale, want, got


def agrees(gap: Callable, est: Estimate, rtol: float, atol: float,
           weights: list | None = None) -> tuple:
    """(whether the engine agrees with finite differences, a description of the comparison).

    `gap(numeric_leaves)` returns ``(difference, scale, want, got)``; the tolerance is
    ``atol + rtol * scale`` plus the estimate's error bar (`weights` project a leafwise error
    bar on the scalar, as `u` does)."""
    def error_bar(errors):
        if weights is None:
            return sum(float(np.max(e, initial=0.0)) for e in errors)
        return sum(_magnitude(w, e) for w, e in zip(weights, errors))

    diff, scale, want, got = gap(est.value)
    tol = atol + rtol * scale + error_bar(est.noise)
    if diff <= tol:
        return True, None
    value, err, step = est.refined()
    diff2, scale2, want2, got2 = gap(value)
    bar = error_bar(err)
    tol2 = atol + rtol * scale2 + 2 * bar
    if diff2 <= tol2:
        return True, None
    describe = (f"{got2!r} vs finite differences {want2!r} (difference {diff2:.3g}, "
                f"relative {diff2 / max(scale2, 1e-300):.3g}; tolerance {tol2:.3g})")
    # At a kink the one-sided differences stay apart as the step shrinks; for a smooth f
    # their gap is about h |f''| and shrinks with h.
    gaps = []
    for h in (step, step / 10):
        forward, backward = est.one_sided(h)
        gaps.append((gap(forward)[2], gap(backward)[2]))
    far, near = (abs(a - b) for a, b in gaps)
    if (np.isfinite(near) and near > 0.5 * far and near > 100 * (bar + rtol * scale2)
            and near > 1e-3 * scale2):
        describe += (f". The one-sided differences disagree ({gaps[1][0]:.6g} forward, "
                     f"{gaps[1][1]:.6g} backward, at steps {step:.3g} and {step / 10:.3g}): "
                     "f is not differentiable at this point (a kink or a jump), so the "
                     "derivative there is a convention; check at points away from it")
    elif not np.isfinite(want2):
        describe += (". The finite differences are not finite: f is undefined near this "
                     "point; check it where f is smooth")
    return False, describe


MODES = ("fwd", "rev", "batch")


def check_options(caller: str, modes, eps, rtol, atol, order: int = 1) -> tuple:
    """The checkers' options, refused when they would make the check vacuous or meaningless
    (a misspelt mode checks nothing and passes); returns `modes` as a tuple.

    >>> check_options("check_grads", ["rev"], 1e-6, 1e-5, 0.0)
    ('rev',)
    """
    if isinstance(modes, str) or not all(isinstance(m, str) for m in modes):
        raise TypeError(f"{caller}: modes must be a sequence of mode names from {MODES}, got "
                        f"{modes!r}; e.g. modes=('rev',)")
    modes = tuple(modes)
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise ValueError(f"{caller}: modes={modes!r} " + (f"holds unknown names {unknown}"
                         if unknown else "is empty") + f", so nothing would be checked; pick "
                         f"from {MODES} ('fwd': forward mode, 'rev': reverse mode, 'batch': "
                         "batch modes)")
    if isinstance(order, bool) or not isinstance(order, (int, np.integer)) or order < 1:
        raise ValueError(f"{caller}: order must be a positive integer (1: first derivatives, "
                         f"2: also second ones), got {order!r}")
    for name, value, positive in (("eps", eps, True), ("rtol", rtol, False),
                                  ("atol", atol, False)):
        ok = isinstance(value, (int, float, np.floating, np.integer)) and np.isfinite(value)
        if not ok or value < 0 or (positive and value == 0):
            raise ValueError(f"{caller}: {name} must be a finite number "
                             f"{'above' if positive else 'at least'} 0, got {value!r}"
                             + ("; the default step is 1e-6" if name == "eps" else ""))
    return modes


def plain_function(f):
    """`f` without functools.partial wrappers (for its name and parameters)."""
    while isinstance(f, functools.partial):
        f = f.func
    return f


def function_name(f) -> str:
    inner_f = plain_function(f)
    return getattr(inner_f, "name", getattr(inner_f, "__name__", "f"))


def argument_labels(f, n: int) -> list:
    """``argument i `name` `` for the first `n` positional parameters of `f`."""
    target = plain_function(f)
    try:
        params = [p.name for p in inspect.signature(getattr(target, "impl", target))
                  .parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return [f"argument {i}" + (f" `{params[i]}`" if i < len(params) else "") for i in range(n)]


def leafwise_gap(got: list, want: list, rtol: float, atol: float) -> tuple:
    """(index of the worst leaf, largest difference, its tolerance, index in the leaf) when
    `got` and `want` differ by more than ``atol + rtol * (largest entry of the leaf)``;
    (None, ...) when they agree."""
    worst = (None, 0.0, 0.0, None)
    for k, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape:
            return k, np.inf, 0.0, None
        if not g.size:
            continue
        scale = max(float(np.max(np.abs(w))), float(np.max(np.abs(g))))
        tol = atol + rtol * scale
        with np.errstate(invalid="ignore"):
            diff = np.abs(g - w)
        diff = np.where(np.isnan(diff) & ~(np.isnan(g) & np.isnan(w)), np.inf,
                        np.nan_to_num(diff, nan=0.0))
        j = int(np.argmax(diff))
        if diff.flat[j] > tol and diff.flat[j] - tol > worst[1] - worst[2]:
            where = tuple(int(n) for n in np.unravel_index(j, g.shape)) if g.ndim else ()
            worst = (k, float(diff.flat[j]), tol, where)
    return worst


def entrywise_gap(got: list, want: list, bar: list, rtol: float, atol: float,
                  floor: float = 0.0) -> tuple:
    """(index of the leaf, index in it, difference, tolerance) of the entry of `got` that
    exceeds its own tolerance by most, or (None, ...) when every entry agrees with `want`.
    An entry's tolerance is ``atol + rtol * |entry| + bar + floor * (largest entry of the
    leaf)``: its own size and its finite-difference error bar `bar`, so an entry much smaller
    than another of the same leaf is still compared at its own size (`floor`: the rounding of
    the engine, relative to the leaf's largest entry)."""
    worst, worst_excess = (None, None, 0.0, 0.0), 0.0
    for k, (g, w, e) in enumerate(zip(got, want, bar)):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape:
            return k, None, np.inf, 0.0
        if not g.size:
            continue
        with np.errstate(invalid="ignore", over="ignore"):
            size = np.maximum(np.abs(g), np.abs(w))
            top = float(np.max(np.where(np.isfinite(size), size, 0.0)))
            tol = atol + rtol * size + np.asarray(e) + floor * top
            diff = np.abs(g - w)
            excess = diff - tol
        both_nan = np.isnan(g) & np.isnan(w)
        excess = np.where(both_nan, -1.0, np.where(np.isnan(excess), np.inf, excess))
        j = int(np.argmax(excess))
        if excess.flat[j] > worst_excess:
            where = tuple(int(n) for n in np.unravel_index(j, g.shape)) if g.ndim else ()
            worst_excess = float(excess.flat[j])
            worst = (k, where, float(np.broadcast_to(diff, g.shape).flat[j]),
                     float(np.broadcast_to(tol, g.shape).flat[j]))
    return worst


_ENTRY_BY_ENTRY = 32   # entries compared one by one; a larger argument is halved first


def worst_entry(est: Estimate, i: int, grad, u: list, rtol: float, atol: float) -> str:
    """Where a reverse-mode gradient is wrong: ``"; the gradient differs most at index (j,):
    got g, finite differences e"``, or "" when no entry disagrees by itself.

    `grad` is the engine's gradient of x -> Re <u, f(x)> for argument i; `est` is an
    `Estimate` of that f (its point and step serve). Each entry is compared with the central
    difference along it alone (its step scaled by the entry's size); an argument of more than
    32 entries is first halved, keeping the half whose (uᵀJ)·v along a random direction
    disagrees more, until 32 are left (two evaluations per entry, four per halving). A
    function that raises at those points gives "" (the failure is reported all the same)."""
    try:
        return _worst_entry(est, i, grad, u, rtol, atol)
    except Exception:   # noqa: BLE001 (only the detail of a failure's message is lost)
        return ""


def _worst_entry(est, i, grad, u, rtol, atol) -> str:
    x = est.args[i]
    shape = np.shape(x)
    g = np.asarray(grad)
    if g.shape != shape or not g.size:
        return ""
    flat_g = g.ravel()
    scale = np.ravel(np.broadcast_to(input_scale(x), shape)).astype(np.float64)
    is_complex = np.iscomplexobj(x)

    def along(weights) -> Estimate:
        d = (weights * scale).reshape(shape)
        if isinstance(x, (float, complex)):
            d = complex(d) if is_complex else float(d.real)
        else:
            d = d.astype(np.result_type(x))
        return Estimate(est.f, est.args, [d if k == i else None for k in range(len(est.args))],
                        est.eps)

    def projected(leaves) -> float:
        return sum(dot(w, v) for w, v in zip(u, leaves))

    candidates = np.arange(flat_g.size)
    if candidates.size > _ENTRY_BY_ENTRY:
        rng = np.random.default_rng(0)
        r = rng.standard_normal(flat_g.size)
        if is_complex:
            r = r + 1j * rng.standard_normal(flat_g.size)
        while candidates.size > _ENTRY_BY_ENTRY:
            worst = None
            for half in np.array_split(candidates, 2):
                w = np.zeros_like(r)
                w[half] = r[half]
                e = along(w)
                want = projected(e.value)
                got = dot(flat_g, w * scale)
                tol = (atol + rtol * max(abs(got), abs(want), term_size(flat_g, w * scale))
                       + sum(_magnitude(a, b) for a, b in zip(u, e.noise)))
                with np.errstate(invalid="ignore"):
                    ratio = abs(got - want) / tol if tol > 0 else abs(got - want)
                ratio = np.inf if np.isnan(ratio) else ratio
                if worst is None or ratio > worst[0]:
                    worst = (ratio, half)
            candidates = worst[1]
    units = (1.0, 1j) if is_complex else (1.0,)

    def expected(j, refined=False) -> tuple:
        """(the finite-difference gradient entry j, its error bar)."""
        value, bar = 0j if is_complex else 0.0, 0.0
        for unit in units:
            w = np.zeros(flat_g.size, dtype=np.complex128 if is_complex else np.float64)
            w[j] = unit
            e = along(w)
            leaves, err = (e.refined()[:2] if refined else (e.value, e.noise))
            value = value + unit * projected(leaves) / scale[j]
            bar += sum(_magnitude(a, b) for a, b in zip(u, err)) / scale[j]
        return value, bar

    found = {j: expected(j) for j in candidates}
    top = max([float(np.max(np.abs(flat_g[candidates])))]
              + [abs(v) for v, _ in found.values() if np.isfinite(v)])
    tol = atol + rtol * top

    def excess(j, value, bar):
        gap = abs(flat_g[j] - value)
        return np.inf if np.isnan(gap) else gap - tol - 2 * bar
    order = sorted(candidates, key=lambda j: -excess(j, *found[j]))
    for j in order[:3]:
        if excess(j, *found[j]) <= 0:
            break
        value, bar = expected(j, refined=True)
        if excess(j, value, bar) > 0:
            where = tuple(int(n) for n in np.unravel_index(int(j), shape))
            got, value = ((complex(flat_g[j]), complex(value)) if is_complex
                          else (float(np.real(flat_g[j])), float(np.real(value))))
            at = f"differs most at index {where}" if where else "(a single entry)"
            return f"; the gradient {at}: got {got!r}, finite differences {value!r}"
    return ""


__all__: list[Any] = ["GradientCheckError", "Estimate", "agrees", "scalar_gap", "leafwise_gap",
                      "entrywise_gap", "check_options", "term_size", "worst_entry"]
