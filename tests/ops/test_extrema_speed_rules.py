"""max/min rules (ops/extrema.py) on the paths their speed-ups take: no ties (the mask alone),
ties (1 / count per slice), few hits in a large array (a masked copy) and many (a product),
NaN slices, initial= and where=, forward mode, Hessians and compiled replays that switch
between ties and none. Gradients are checked against central differences in float64 where
the function is smooth, and against the documented convention (the cotangent split equally
among tied entries) where it is not."""
import numpy as np
import pytest

import tape
from numeric_checks import fd_jacobian_of
from tape import Active, BatchDuplicated, Const, Duplicated, Forward, Reverse, autodiff

RNG = np.random.default_rng(20240611)
# (2, 600, 2): reducing the middle axis leaves 4 hits among 2400 entries (the sparse path);
# (4, 5, 3): every reduction has many hits per entry (the dense path).
BIG = (2, 600, 2)
SMALL = (4, 5, 3)
AXES = [None, 1, -2, (1, 2), (0, 1, 2), 0, (0, 2)]


def grad(f, x):
    (g,), = autodiff(Reverse, f, Active, Active(x))
    return g


def jvp(f, x, t):
    return autodiff(Forward, f, Duplicated(x, t))[0]


def weighted(fn, w, **kw):
    return lambda x: np.sum(fn(x, **kw) * w)


def out_shape(fn, x, **kw):
    return np.shape(fn(x, **kw))


def convention(x, axis, keepdims, w, kind="max"):
    """The documented reverse rule: w (the output's cotangent) split equally among the entries
    equal to their slice's extremum (NaN entries in a slice holding NaN)."""
    best = (np.max if kind == "max" else np.min)(x, axis=axis, keepdims=True)
    hit = (x == best) | (np.isnan(x) & np.isnan(best))
    count = np.sum(hit, axis=axis, keepdims=True)
    wk = np.reshape(w, np.shape(best)) if not keepdims else w
    return np.where(hit, wk / count, 0.0)


@pytest.mark.parametrize("shape", [BIG, SMALL])
@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("fn", [np.max, np.min, np.amax, np.nanmin, np.ptp])
def test_gradient_and_jvp_match_central_differences_without_ties(fn, axis, keepdims, shape):
    x = RNG.standard_normal(shape)
    w = RNG.standard_normal(out_shape(fn, x, axis=axis, keepdims=keepdims))
    f = weighted(fn, w, axis=axis, keepdims=keepdims)
    g = grad(f, x)
    assert g.shape == x.shape and g.dtype == x.dtype
    h = 1e-6   # the extremum stays where it is for a step this small: f is linear there
    for _ in range(3):
        v = RNG.standard_normal(shape)
        fd = (f(x + h * v) - f(x - h * v)) / (2 * h)
        np.testing.assert_allclose(np.sum(g * v), fd, rtol=1e-7, atol=1e-8)
        np.testing.assert_allclose(jvp(f, x, v), fd, rtol=1e-7, atol=1e-8)


def ties_array(shape):
    x = np.round(RNG.uniform(0, 3, shape))   # each slice ties, many of them several times
    return x


@pytest.mark.parametrize("shape", [BIG, SMALL])
@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("kind", ["max", "min"])
def test_ties_share_the_cotangent_equally(kind, axis, keepdims, shape):
    x = ties_array(shape)
    if shape == BIG:   # few hits: one tie of two in one slice, a single extremum elsewhere
        x = RNG.standard_normal(shape)
        x[0, 7, 1] = x[0, 9, 1] = 10.0 if kind == "max" else -10.0
    fn = np.max if kind == "max" else np.min
    w = RNG.standard_normal(out_shape(fn, x, axis=axis, keepdims=keepdims))
    g = grad(weighted(fn, w, axis=axis, keepdims=keepdims), x)
    np.testing.assert_allclose(g, convention(x, axis, keepdims, w, kind), rtol=1e-15,
                               atol=1e-300)
    # forward mode is the transpose: <jvp(t), w> = <t, gradient>
    t = RNG.standard_normal(shape)
    np.testing.assert_allclose(jvp(weighted(fn, w, axis=axis, keepdims=keepdims), x, t),
                               np.sum(t * g), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape", [BIG, SMALL])
def test_ties_directional_derivative_moving_tied_entries_together(shape):
    """Moving every tied entry of a slice by the same amount keeps them tied, so f is smooth
    along that direction and central differences apply."""
    x = RNG.standard_normal(shape)
    x[:, 3, :] = x[:, 4, :] = 10.0   # a tie of two in every slice along axis 1
    w = RNG.standard_normal((shape[0], shape[2]))
    f = weighted(np.max, w, axis=1)
    v = RNG.standard_normal(shape)
    v[:, 4, :] = v[:, 3, :]
    h = 1e-6
    fd = (f(x + h * v) - f(x - h * v)) / (2 * h)
    np.testing.assert_allclose(np.sum(grad(f, x) * v), fd, rtol=1e-7)


@pytest.mark.parametrize("shape", [BIG, SMALL])
@pytest.mark.parametrize("axis", [None, 1, (1, 2)])
def test_nan_entries_share_the_cotangent(axis, shape):
    x = RNG.standard_normal(shape)
    x[0, 1, 0] = x[0, 2, 0] = np.nan   # two NaN in one slice
    x[1, 3, 1] = np.nan
    fn_out = np.max(x, axis=axis)
    w = RNG.standard_normal(np.shape(fn_out))
    g = grad(weighted(np.max, w, axis=axis), x)
    want = convention(x, axis, False, w)
    np.testing.assert_allclose(g, want, rtol=1e-15, atol=1e-300)
    assert np.count_nonzero(g[np.isnan(x)]) == 3 and not np.isnan(g).any()


@pytest.mark.parametrize("shape", [BIG, SMALL])
def test_initial_slices_below_it_get_nothing_and_entries_tied_with_it_get_all(shape):
    x = RNG.uniform(-2, -1, shape)
    x[0, 4, 0] = 0.5    # above initial: the slice's extremum
    x[1, 2, 1] = 0.0    # tied with initial=0.0: gets the cotangent
    w = RNG.standard_normal((shape[0], shape[2]))
    g = grad(lambda x: np.sum(np.max(x, axis=1, initial=0.0) * w), x)
    want = np.zeros(shape)
    want[0, 4, 0] = w[0, 0]
    want[1, 2, 1] = w[1, 1]
    np.testing.assert_allclose(g, want, rtol=1e-15, atol=0.0)
    t = RNG.standard_normal(shape)
    np.testing.assert_allclose(jvp(lambda x: np.sum(np.max(x, axis=1, initial=0.0) * w), x, t),
                               np.sum(want * t), rtol=1e-12)


def test_where_with_initial_leaves_the_masked_entries_out():
    x = RNG.standard_normal(BIG)
    mask = np.ones(BIG, bool)
    top = np.unravel_index(np.argmax(x), BIG)
    mask[top] = False   # the largest entry is left out: the next one wins its slice
    w = RNG.standard_normal((BIG[0], BIG[2]))
    f = lambda x: np.sum(np.max(x, axis=1, initial=-np.inf, where=mask) * w)  # noqa: E731
    g = grad(f, x)
    assert g[top] == 0
    v = RNG.standard_normal(BIG)
    h = 1e-6
    np.testing.assert_allclose(np.sum(g * v), (f(x + h * v) - f(x - h * v)) / (2 * h),
                               rtol=1e-7)


@pytest.mark.parametrize("fn", [np.max, np.min])
def test_float32_keeps_its_dtype(fn):
    x = RNG.standard_normal(BIG).astype(np.float32)
    for axis in (None, 1):
        g = grad(lambda x: np.sum(fn(x, axis=axis) * 2), x)
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, convention(x, axis, True, np.float32(2.0),
                                                 "max" if fn is np.max else "min"), rtol=1e-7)


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
def test_infinite_cotangent_stays_at_the_extremum_slices():
    """The gradient is the cotangent times the weights: an infinite cotangent gives 0 * inf
    (NaN) at the other entries of its slice, as the product rule of the weights says, and
    leaves the other slices alone."""
    x = RNG.standard_normal(BIG)
    w = np.ones((BIG[0], BIG[2]))
    w[0, 0] = np.inf
    g = grad(lambda x: np.sum(np.max(x, axis=1) * w), x)
    np.testing.assert_array_equal(np.isnan(g), np.broadcast_to(
        (np.arange(BIG[0])[:, None, None] == 0) & (np.arange(BIG[2]) == 0)
        & (x != np.max(x, axis=1, keepdims=True)), BIG))
    assert np.all(np.isfinite(g[1]))


def fd_hessian(f, x, h=1e-5):
    """Central differences of the reverse-mode gradient, one column per entry."""
    return fd_jacobian_of(lambda v: grad(f, v), x, h).reshape(x.shape + x.shape)


@pytest.mark.parametrize("axis", [None, 1, (0, 2)])
def test_hessian_matches_differences_of_the_gradient(axis):
    x = RNG.standard_normal((2, 3, 2))
    f = lambda x: (np.sum(np.max(x, axis=axis) ** 3)  # noqa: E731
                   + np.sum(np.sin(np.min(x * x, axis=axis, keepdims=True))))
    H = tape.hessian(f, x)
    np.testing.assert_allclose(H, fd_hessian(f, x), rtol=1e-6, atol=1e-6)
    assert np.count_nonzero(H) > 0


def test_hessian_with_ties_splits_each_order():
    """With a tie of two, f = max(x) ** 2 is 2 m times the equal split at first order; the
    second order splits again: the tied entries' block is 2 * (1/2) * (1/2) each."""
    x = np.array([[1.0, 3.0, 3.0], [0.0, -1.0, 2.0]])
    H = tape.hessian(lambda x: np.max(x) ** 2, x).reshape(6, 6)
    want = np.zeros((6, 6))
    want[np.ix_([1, 2], [1, 2])] = 0.5
    np.testing.assert_allclose(H, want, rtol=1e-15, atol=0.0)


def test_batched_reverse_matches_one_seed_at_a_time():
    x = RNG.standard_normal(BIG)
    x[1, 4, 0] = x[1, 8, 0] = 10.0   # a tie of two
    w = RNG.standard_normal((BIG[0], BIG[2]))
    f = lambda x: np.max(x, axis=1) * w  # noqa: E731
    seeds = [np.zeros((BIG[0], BIG[2])) for _ in range(2)]
    seeds[0][1, 0] = 1.0
    seeds[1][0, 1] = 1.0
    shadows = (np.zeros(BIG), np.zeros(BIG))
    autodiff(Reverse, lambda x, y: y.__setitem__(..., f(x)), Const, BatchDuplicated(
        x, shadows), BatchDuplicated(np.zeros((BIG[0], BIG[2])), tuple(s.copy() for s in seeds)))
    for seed, shadow in zip(seeds, shadows):
        np.testing.assert_allclose(shadow, convention(x, 1, False, seed * w), rtol=1e-15,
                                   atol=1e-300)


def test_compiled_gradient_follows_ties_appearing_and_going():
    w = RNG.standard_normal((BIG[0], BIG[2]))
    f = lambda x: np.sum(np.max(x, axis=1) * w)  # noqa: E731
    g = tape.compile(Reverse, f, Active, Duplicated)
    plain = RNG.standard_normal(BIG)
    tied = plain.copy()
    tied[0, 3, 0] = tied[0, 5, 0] = 10.0
    for x in (plain, tied, plain, tied):
        dx = np.zeros(BIG)
        g(Duplicated(x, dx))
        np.testing.assert_allclose(dx, convention(x, 1, False, w), rtol=1e-15, atol=1e-300)
