"""Forward, reverse, batched and compiled derivatives agree at kinks, ties and special points.

At a tie or a kink each rule may pick its own subgradient, but every way of building the same
Jacobian must pick the same one: forward columns (J @ e_j, one pass each or batched), reverse
rows (e_i^T J, one sweep each, batched, or through `tape.jacobian`), and the `tape.compile`d
forms of each, including a compiled function traced at a point without ties and replayed at
one with ties. Second derivatives at smooth points and at ties agree between
forward-over-reverse, reverse-over-forward, reverse-over-reverse and forward-over-forward, and
are symmetric. In strong-zero mode (where a zero tangent or cotangent kills an infinite
partial) forward and reverse Jacobians have the same NaN pattern.
"""
import warnings

import numpy as np
import pytest

import tape
from tape import (Active, BatchDuplicated, Const, Duplicated, Forward, Reverse, autodiff,
                  set_strong_zero)

TOL = dict(rtol=1e-12, atol=1e-14)


def _seeds(f, x):
    y = np.asarray(f(x.copy()))
    return [np.eye(y.size)[i].reshape(y.shape) for i in range(y.size)]


def _every_jacobian(f, x):
    """The Jacobian of `f` at `x`, shaped (out.size, x.size), built ten ways."""
    n, eye = x.size, np.eye(x.size)
    seeds = _seeds(f, x)

    def rows(sweep):
        return np.array([np.ravel(sweep(s)) for s in seeds])

    def eager_row(s):
        return autodiff(Reverse, lambda z, s: np.sum(f(z) * s), Active, Active(x.copy()),
                        Const(s))[0][0]

    def batched_row(s):   # lane 1 of a two-lane reverse sweep
        lanes = (np.zeros(n), np.zeros(n))
        autodiff(Reverse, lambda z: np.sum(f(z) * s), Active, BatchDuplicated(x.copy(), lanes))
        return lanes[1]
    compiled_rev = tape.compile(Reverse, lambda z, s: np.sum(f(z) * s), Active, Active, Const)
    compiled_fwd = tape.compile(Forward, f, Duplicated, Duplicated)
    compiled_batch = tape.compile(Forward, f, BatchDuplicated, BatchDuplicated)
    out = {
        "forward columns": np.stack([np.ravel(autodiff(Forward, f, Duplicated(x.copy(), e))[0])
                                     for e in eye], 1),
        "batched forward": np.stack([np.ravel(t) for t in autodiff(
            Forward, f, BatchDuplicated(x.copy(), tuple(eye)))[0]], 1),
        "compiled forward": np.stack([np.ravel(compiled_fwd(Duplicated(x.copy(), e))[0])
                                      for e in eye], 1),
        "compiled batched forward": np.stack([np.ravel(t) for t in compiled_batch(
            BatchDuplicated(x.copy(), tuple(eye)))[0]], 1),
        "reverse rows": rows(eager_row),
        "batched reverse rows": rows(batched_row),
        "compiled reverse rows": rows(lambda s: compiled_rev(Active(x.copy()), Const(s))[0][0]),
    }
    for mode in (Forward, Reverse):
        for chunk in (None, 1):
            J = tape.jacobian(mode, f, x.copy(), chunk=chunk)[0]
            out[f"jacobian({mode!r}, chunk={chunk})"] = np.reshape(J, (-1, n))
    return out


def _assert_all_equal(results):
    (first, want), *rest = results.items()
    for name, got in rest:
        np.testing.assert_allclose(got, want, equal_nan=True, err_msg=f"{name} vs {first}",
                                   **TOL)


# -- first order: ten ways to build the Jacobian at ties ---------------------------------------
def _split(g):
    return lambda z: g(z[: z.size // 2], z[z.size // 2:])


TIES = {
    "maximum ties and signed zeros": (_split(np.maximum), [1., -0., 2., np.nan, 1., 0., 2., 1.]),
    "fmin with NaN and ties": (_split(np.fmin), [np.nan, 1., np.nan, 2., 1., np.nan, np.nan, 2.]),
    "fmax with NaN and ties": (_split(np.fmax), [np.nan, 1., np.nan, 2., 1., np.nan, np.nan, 2.]),
    "amax over axis 0 with ties": (lambda z: np.amax(z.reshape(2, 3), axis=0),
                                   [1., 3., 3., 1., 2., 3.]),
    "amin over two axes with ties": (lambda z: np.amin(z.reshape(2, 2, 2), axis=(0, 2)),
                                     [1., 1., 2., 0., 1., 1., 0., 0.]),
    "max keepdims times x": (lambda z: np.max(z.reshape(2, 3), axis=1, keepdims=True)
                             * z.reshape(2, 3), [1., 3., 3., 2., 2., 0.]),
    "minimum.reduce ties": (lambda z: np.minimum.reduce(z.reshape(2, 2), axis=0),
                            [1., 0., 1., 0.]),
    "maximum.accumulate ties": (np.maximum.accumulate, [1., 1., 0., 2., 2.]),
    "ptp over axis with ties": (lambda z: np.ptp(z.reshape(2, 3), axis=1),
                                [1., 1., 2., 3., 3., 3.]),
    "nanmax with NaN and ties": (lambda z: np.nanmax(z.reshape(2, 3), axis=1),
                                 [1., 3., np.nan, 3., np.nan, 3.]),
    "clip at traced bounds": (lambda z: np.clip(z[:3], z[3:], 1.0), [0., 1., 0.5, 0., 0.5, 0.5]),
    "sort 2-D with ties": (lambda z: np.sort(z.reshape(2, 2), axis=0), [2., 1., 2., 1.]),
    "argsort gather with ties": (lambda z: z[np.argsort(z)] * np.arange(1.0, 5.0),
                                 [2., 1., 2., 1.]),
    "partition with ties": (lambda z: np.partition(z, 2), [2., 1., 2., 2., 0.]),
    "median over axis with ties": (lambda z: np.median(z.reshape(2, 3), axis=1),
                                   [1., 1., 1., 2., 3., 2.]),
    "quantiles with ties": (lambda z: np.quantile(z, [0.25, 0.5, 1.0]), [1., 2., 2., 0., 2.]),
    "percentile higher with ties": (lambda z: np.percentile(z, 40, method="higher"),
                                    [3., 1., 3., 2.]),
    "nanmedian with ties": (np.nanmedian, [1., 2., np.nan, 2., 0.]),
    "norm of zero rows": (lambda z: np.linalg.norm(z.reshape(2, 2), axis=1), [0., 0., 1., 2.]),
    "norm ord=inf with ties": (lambda z: np.linalg.norm(z, ord=np.inf), [1., -1., 0.5]),
    "abs, sign, heaviside at 0": (lambda z: np.abs(z) + np.sign(z) * z
                                  + np.heaviside(z, 0.5) * z, [0., -0., 1., -1.]),
    "round, floor at half and integers": (lambda z: np.round(z) * z + np.floor(z) * z,
                                          [0.5, 1.5, 1., -1.]),
    "where with equal branches": (lambda z: np.where(z[:2] >= z[2:], z[:2], z[2:]),
                                  [1., 2., 1., 3.]),
    "unique-based weights": (lambda z: np.unique(z, return_inverse=True)[1] * z, [1., 2., 1.]),
}


@pytest.mark.parametrize("name", sorted(TIES))
def test_every_way_of_building_the_jacobian_picks_the_same_subgradient(name):
    f, x = TIES[name]
    x = np.array(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        _assert_all_equal(_every_jacobian(f, x))


# -- compiled at a point without ties, replayed at ties ----------------------------------------
REPLAYS = {
    "max": (lambda z: 2.0 * np.max(z), [1., 2., 3.], [[3., 3., 1.], [2., 2., 2.],
                                                      [np.nan, 1., 1.]]),
    "amax over axis": (lambda z: np.amax(z.reshape(2, 2), axis=1), [1., 2., 3., 4.],
                       [[2., 2., 4., 4.], [1., 1., 0., 0.]]),
    "ptp": (np.ptp, [1., 2., 3.], [[1., 1., 3.], [2., 2., 2.]]),
    "maximum": (_split(np.maximum), [1., 2., 3., 0.], [[1., 2., 1., 2.], [1., np.nan, 0., 0.]]),
    "clip": (lambda z: np.clip(z, 0., 1.), [0.5, 2., -1.], [[0., 1., 0.5], [1., 1., 0.]]),
    "sort": (np.sort, [3., 1., 2.], [[2., 2., 1.], [1., 1., 1.]]),
    "median": (np.median, [4., 1., 2., 3.], [[2., 2., 1., 0.], [1., 1., 1., 1.]]),
    "norm": (np.linalg.norm, [1., 2.], [[0., 0.]]),
    "abs": (np.abs, [1., -2.], [[0., -0.]]),
    "maximum.accumulate": (np.maximum.accumulate, [1., 2., 3.], [[2., 2., 1.]]),
}


@pytest.mark.parametrize("name", sorted(REPLAYS))
def test_compiled_away_from_a_tie_replays_the_eager_convention_at_it(name):
    f, traced_at, ties = REPLAYS[name]
    x0 = np.array(traced_at)
    seeds = _seeds(f, x0)
    h = lambda z, s: np.sum(f(z) * s)   # noqa: E731
    fwd = tape.compile(Forward, f, BatchDuplicated, BatchDuplicated)
    rev = tape.compile(Reverse, h, Active, Active, Const)
    for x in [x0] + [np.array(t) for t in ties]:
        eye = tuple(np.eye(x.size))
        want = autodiff(Forward, f, BatchDuplicated(x.copy(), eye))[0]
        got = fwd(BatchDuplicated(x.copy(), eye))[0]
        np.testing.assert_allclose(np.array(got), np.array(want), equal_nan=True, **TOL)
        for s in seeds:
            want = autodiff(Reverse, h, Active, Active(x.copy()), Const(s))[0][0]
            got = rev(Active(x.copy()), Const(s))[0][0]
            np.testing.assert_allclose(got, want, equal_nan=True, **TOL)


# -- second order: symmetric, and the same in every nesting ------------------------------------
def _grad(f):
    return lambda z: autodiff(Reverse, f, Active, Active(z))[0][0]


def _every_hessian(f, x):
    g, eye = _grad(f), np.eye(x.size)
    return {
        "tape.hessian": tape.hessian(f, x.copy()),
        "tape.hessian chunk=1": tape.hessian(f, x.copy(), chunk=1),
        "forward over reverse": np.stack([autodiff(Forward, g, Duplicated(x.copy(), e))[0]
                                          for e in eye], 1),
        "reverse over forward": np.stack([autodiff(
            Reverse, lambda z, e=e: autodiff(Forward, f, Duplicated(z, e))[0], Active,
            Active(x.copy()))[0][0] for e in eye]),
        "reverse over reverse": np.stack([autodiff(
            Reverse, lambda z, e=e: np.sum(g(z) * e), Active, Active(x.copy()))[0][0]
            for e in eye]),
        "forward over forward": np.array([[autodiff(
            Forward, lambda z, a=a: autodiff(Forward, f, Duplicated(z, a))[0],
            Duplicated(x.copy(), b))[0] for b in eye] for a in eye]),
        "jacobian(Reverse) of the gradient": tape.jacobian(Reverse, g, x.copy())[0],
    }


X4 = np.array([0.3, -1.2, 0.7, 2.1])
SMOOTH = {
    "maximum": lambda z: np.sum(np.maximum(z ** 2, z[::-1]) * z),
    "amax over axis": lambda z: np.sum(np.amax(np.outer(z, z), axis=0) * z),
    "abs cubed": lambda z: np.sum(np.abs(z) ** 3 * z[::-1]),
    "clip": lambda z: np.sum(np.clip(z * z[0], -0.5, 0.5) ** 2 * z),
    "sort": lambda z: np.sort(z ** 2) @ np.arange(4.0) * np.sum(z),
    "median": lambda z: np.median(z ** 3) * np.sum(z ** 2),
    "quantile": lambda z: np.quantile(z ** 3, 0.3) * z[0],
    "partition": lambda z: np.sum(np.partition(z ** 2 * z[1], 2)[:2] ** 2),
    "norms": lambda z: np.linalg.norm(z) ** 3 + np.linalg.norm(z * z, ord=1) * z[0]
    + np.linalg.norm(z ** 3, ord=np.inf) * z[1],
    "where": lambda z: np.sum(np.where(z > 0, z ** 3, np.sin(z)) * z[0]),
    "minimum.reduce and ptp": lambda z: np.minimum.reduce(z ** 3 * z[::-1])
    + np.ptp(z ** 2 * z[0]) * z[1],
    "fmax, fmin": lambda z: np.sum(np.fmax(z ** 3, np.cos(z)) * z + np.fmin(z, z[::-1]) ** 2),
    "sign, round, floor, heaviside": lambda z: np.sum((np.sign(z) + np.round(z) + np.floor(z)
                                                       + np.heaviside(z, 0.5)) * z ** 3),
    "nanmax, nanquantile": lambda z: np.nanmax(z ** 3 * z[0]) + np.nanquantile(z ** 3, .4) * z[2],
    "unique": lambda z: np.sum(np.unique(z ** 2) ** 2 * z[0]),
    "spectral and nuclear norms": lambda z: np.linalg.norm(z.reshape(2, 2), 2) ** 2
    + np.linalg.norm(z.reshape(2, 2), "nuc") ** 2,
}


@pytest.mark.parametrize("name", sorted(SMOOTH))
def test_hessians_at_smooth_points_agree_in_every_nesting_and_are_symmetric(name):
    f = SMOOTH[name]
    results = _every_hessian(f, X4)
    _assert_all_equal(results)
    H = results["tape.hessian"]
    np.testing.assert_allclose(H, H.T, **TOL)
    g, h = _grad(f), 1e-5
    fd = np.stack([(g(X4 + h * e) - g(X4 - h * e)) / (2 * h) for e in np.eye(4)], 1)
    np.testing.assert_allclose(H, fd, rtol=1e-6, atol=1e-6 * np.max(np.abs(fd)))


AT_TIES = {
    "max squared with ties": (lambda z: np.max(z) ** 2 * z[0], [1., 2., 2., 0.]),
    "maximum cubed with ties": (lambda z: np.sum(np.maximum(z[:2], z[2:]) ** 3),
                                [1., 2., 1., 2.]),
    "abs at 0": (lambda z: np.sum(np.abs(z) * z ** 2), [0., 1., -1.]),
    "clip at its bounds": (lambda z: np.sum(np.clip(z, 0., 1.) ** 2 * z), [0., 1., 0.5]),
    "sort with ties": (lambda z: np.sort(z) @ np.array([1., 2., 3.]) * np.sum(z), [2., 2., 1.]),
    "median with ties": (lambda z: np.median(z) ** 2 * z[3], [1., 2., 2., 0.]),
    "norm at 0": (np.linalg.norm, [0., 0., 0.]),
    "norm cubed at 0": (lambda z: np.linalg.norm(z) ** 3, [0., 0., 0.]),
    "ptp with ties": (lambda z: np.ptp(z) ** 2, [1., 3., 3., 1.]),
    "quantile with ties": (lambda z: np.quantile(z, 0.3) ** 2, [1., 2., 2., 0.]),
    "partition with ties": (lambda z: np.sum(np.partition(z, 1)[:2] ** 2), [2., 1., 1., 3.]),
    "fmax with NaN": (lambda z: np.sum(np.fmax(z[:2], z[2:]) ** 2), [np.nan, 1., 2., np.nan]),
    "relu squared at 0": (lambda z: np.sum(np.maximum(z, 0) ** 2), [0., 1., -1.]),
    "max of abs with ties": (lambda z: np.max(np.abs(z)) ** 2, [1., -1., 0.]),
    "std of a constant": (np.std, [1., 1., 1.]),
}


@pytest.mark.parametrize("name", sorted(AT_TIES))
def test_hessians_at_ties_agree_in_every_nesting(name):
    f, x = AT_TIES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        _assert_all_equal(_every_hessian(f, np.array(x)))


# -- strong zero: the same NaN pattern in forward and reverse ----------------------------------
def _strong_jacobians(f, x):
    F, R = set_strong_zero(Forward), set_strong_zero(Reverse)
    eye = np.eye(x.size)
    return {
        "reverse": np.reshape(tape.jacobian(R, f, x.copy())[0], (-1, x.size)),
        "reverse rows, chunk=1": np.reshape(tape.jacobian(R, f, x.copy(), chunk=1)[0],
                                            (-1, x.size)),
        "forward": np.reshape(tape.jacobian(F, f, x.copy())[0], (-1, x.size)),
        "forward columns": np.stack([np.ravel(autodiff(F, f, Duplicated(x.copy(), e))[0])
                                     for e in eye], 1),
    }


# sqrt'(0) = inf sits on entries that the selection drops: the cotangent there is 0 and the
# tangent of what is kept is finite, so strong zero gives 0 in both modes.
S = np.sqrt
SELECTIONS = {
    "maximum": (lambda z: np.maximum(S(z[:2]), S(z[2:])), [0., 1., 1., 0.]),
    "fmax": (lambda z: np.fmax(S(z), 0.5), [0., 1.]),
    "clip": (lambda z: np.clip(S(z), 0.5, 1.5), [0., 1., 4.]),
    "where": (lambda z: np.where(z > 0.5, S(z), 0.0), [0., 1.]),
    "select": (lambda z: np.select([z > 0.5], [S(z)], 0.0), [0., 1.]),
    "sort": (lambda z: np.sort(S(z))[1:], [0., 1., 4.]),
    "argsort gather": (lambda z: S(z)[np.argsort(z)][1:], [0., 1., 4.]),
    "argmax gather": (lambda z: S(z)[np.argmax(z)], [0., 1., 4.]),
    "partition": (lambda z: np.partition(S(z), 1)[1:], [0., 1., 4.]),
    "median": (lambda z: np.median(S(z)), [0., 1., 4.]),
    "median, even count": (lambda z: np.median(S(z)), [0., 1., 4., 9.]),
    "quantile": (lambda z: np.quantile(S(z), 0.75), [0., 1., 4., 9.]),
    "nanmedian": (lambda z: np.nanmedian(S(z)), [0., 1., 4.]),
    "maximum.accumulate": (lambda z: np.maximum.accumulate(S(z)[::-1]), [0., 1., 4.]),
    "masked getitem": (lambda z: S(z)[z > 0.5], [0., 1., 4.]),
    "compress": (lambda z: np.compress([False, True, True], S(z)), [0., 1., 4.]),
    "unique": (lambda z: np.unique(S(z))[1:], [0., 1., 4.]),
    "norm at a zero row": (lambda z: np.linalg.norm(z.reshape(2, 2), axis=1), [0., 0., 1., 2.]),
    "sqrt, abs at inf and NaN": (lambda z: np.sqrt(np.abs(z)), [np.inf, -np.inf, np.nan, 4.]),
}
# The reductions that go through the `extremum` primitive instead make NaN of their own.
EXTREMA = {
    "max": (lambda z: np.max(S(z)), [0., 1., 4.]),
    "max with ties": (lambda z: np.max(S(z)), [0., 4., 4.]),
    "amax over an axis": (lambda z: np.amax(S(z).reshape(2, 2), axis=1), [0., 1., 4., 0.]),
    "min": (lambda z: np.min(-S(z)), [0., 1., 4.]),
    "nanmax": (lambda z: np.nanmax(S(z)), [0., 1., 4.]),
    "maximum.reduce": (lambda z: np.maximum.reduce(S(z)), [0., 1., 4.]),
    "ptp": (lambda z: np.ptp(S(z)), [0., 1., 4.]),
    "norm ord=inf": (lambda z: np.linalg.norm(S(z), ord=np.inf), [0., 1., 4.]),
}


@pytest.mark.parametrize("name", sorted(SELECTIONS))
def test_strong_zero_selections_give_the_same_jacobian_in_both_modes(name):
    f, x = SELECTIONS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        results = _strong_jacobians(f, np.array(x))
    _assert_all_equal(results)
    assert not np.isnan(results["reverse"][:, np.array(x) == 0.0]).any()


@pytest.mark.parametrize("name", sorted(EXTREMA))
def test_strong_zero_extrema_give_the_same_jacobian_in_both_modes(name):
    f, x = EXTREMA[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        _assert_all_equal(_strong_jacobians(f, np.array(x)))

