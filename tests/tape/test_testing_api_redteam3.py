"""Red-team tests of `tape.testing` (check_grads, check_rule), round 3: mutation testing of
user rules with planted bugs (each must be caught with default options) and correct functions
at inputs mixing magnitudes from 1e-6 to 1e6 in one array (each must pass): false passes
first, then false failures, then unclear messages."""
import numpy as np
import pytest

import tape.scipy.special as sp
from tape import custom_rule, easy_rule, primal
from tape.testing import GradientCheckError, check_grads, check_rule


def _rule(fn, augmented, reverse, forward=None, **kw):
    return custom_rule(fn, augmented_primal=augmented, reverse=reverse, forward=forward, **kw)


def _one_entry(k, factor):
    """Multipliers 1 everywhere but `factor` at flat index k."""
    def mask(x):
        out = np.ones(np.shape(x))
        out.flat[k] = factor
        return out
    return mask


def _square(rev_mask=None, fwd_mask=None):
    """x**2 whose reverse / forward derivatives are multiplied entrywise by the masks."""
    def reverse(cfg, x, g):
        return (2 * x * g * (rev_mask(x) if rev_mask else 1.0),)

    def forward(cfg, p, t):
        return p[0] ** 2, 2 * p[0] * t[0] * (fwd_mask(p[0]) if fwd_mask else 1.0)
    return _rule(lambda x: x ** 2, lambda cfg, x: (x ** 2, x), reverse, forward, name="sq")


def _cubic(rev_mask=None):
    """x**3/3 + x (derivative x**2 + 1, between 1 and 5 on [-2, 2])."""
    def reverse(cfg, x, g):
        return (g * (x * x + 1) * (rev_mask(x) if rev_mask else 1.0),)
    return _rule(lambda x: x ** 3 / 3 + x, lambda cfg, x: (x ** 3 / 3 + x, x), reverse,
                 lambda cfg, p, t: (p[0] ** 3 / 3 + p[0], t[0] * (p[0] ** 2 + 1)), name="cubic")


def _batch_only_sin(where):
    """sin, its rules wrong by 1% only with a batch width above 1 (`where`: "rev" or "fwd")."""
    def reverse(cfg, x, g):
        return (g * np.cos(x) * (1.01 if cfg.width > 1 and where == "rev" else 1.0),)

    def forward(cfg, p, t):
        return np.sin(p[0]), t[0] * np.cos(p[0]) * (1.01 if cfg.width > 1 and where == "fwd"
                                                    else 1.0)
    return _rule(np.sin, lambda cfg, x: (np.sin(x), x), reverse, forward, name="batch_sin")


# == (A) false passes: wrong rules that pass ====================================================

# A tolerance relative to the largest entry of a tangent, or to the whole projection uᵀ(J·v)
# with directions scaled by |x|, lets an entry 1000 times smaller than another of the same
# argument be wrong by any factor: tangents must be compared entry by entry.
def test_a_doubled_entry_beside_a_large_one_is_caught_by_check_rule():
    x = np.array([1e3, 2.0])
    with pytest.raises(GradientCheckError):
        check_rule(_square(rev_mask=_one_entry(1, 2.0), fwd_mask=_one_entry(1, 2.0)), x)


def test_a_doubled_entry_beside_a_large_one_is_caught_by_check_grads():
    x = np.array([1e3, 2.0])
    with pytest.raises(GradientCheckError):
        check_grads(_square(rev_mask=_one_entry(1, 2.0), fwd_mask=_one_entry(1, 2.0)), x,
                    order=1)


def test_the_same_doubled_entry_is_caught_at_similar_magnitudes():
    x = np.array([100.0, 2.0])
    wrong = _square(rev_mask=_one_entry(1, 2.0), fwd_mask=_one_entry(1, 2.0))
    with pytest.raises(GradientCheckError):
        check_rule(wrong, x)
    with pytest.raises(GradientCheckError):
        check_grads(wrong, x, order=1)


# With seed 0, u_1 * v_1 is -0.0066 for any 5-entry argument: a reverse rule wrong at entry 1
# hides below rtol in the projection (uᵀJ)·v along that one direction.
X5 = np.array([0.95, 0.01, 0.76, 0.79, -1.98])


def test_a_reverse_rule_one_percent_wrong_at_one_entry_is_caught_by_check_rule():
    with pytest.raises(GradientCheckError):
        check_rule(_cubic(rev_mask=_one_entry(1, 1.01)), X5)


def test_check_grads_catches_that_reverse_rule():
    with pytest.raises(GradientCheckError, match="reverse mode"):
        check_grads(_cubic(rev_mask=_one_entry(1, 1.01)), X5, order=1)


def test_a_batch_only_reverse_bug_is_caught_at_a_python_float():
    with pytest.raises(GradientCheckError):
        check_rule(_batch_only_sin("rev"), 0.4)


def test_batch_only_bugs_are_caught_at_a_0d_array_and_forward_at_a_float():
    with pytest.raises(GradientCheckError, match="BatchDuplicated"):
        check_rule(_batch_only_sin("rev"), np.array(0.4))
    with pytest.raises(GradientCheckError, match="BatchDuplicated"):
        check_rule(_batch_only_sin("fwd"), 0.4)
    with pytest.raises(GradientCheckError, match="batch forward"):
        check_grads(_batch_only_sin("fwd"), 0.4, order=1)


# -- planted bugs that are caught (kinds not covered elsewhere) ---------------------------------

X = np.array([0.3, -1.2, 0.7, 0.5])
Y = np.array([0.5, 0.9, -0.4, 1.1])
W = np.array([1.3, 0.6, -0.8, -1.5])
M = np.random.default_rng(3).standard_normal((4, 4))


@pytest.mark.parametrize("where", ["rev", "fwd"])
def test_a_transposed_jacobian_of_a_square_linear_map_is_caught(where):
    lin = _rule(lambda x: M @ x, lambda cfg, x: (M @ x, None),
                lambda cfg, s, g: ((M if where == "rev" else M.T) @ g,),
                lambda cfg, p, t: (M @ p[0], (M.T if where == "fwd" else M) @ t[0]), name="lin")
    mode = "ReverseWithPrimal" if where == "rev" else "ForwardWithPrimal"
    with pytest.raises(GradientCheckError, match=mode):
        check_rule(lin, X)
    with pytest.raises(GradientCheckError, match="reverse" if where == "rev" else "forward"):
        check_grads(lin, X, order=1)


@pytest.mark.parametrize("where", ["rev", "fwd"])
def test_a_missing_term_of_relative_size_1e_3_is_caught_in_a_large_array(where):
    # f = 1.001 sin x; the rule forgets the 0.001 sin x term in one mode.
    f = lambda x: 1.001 * np.sin(x)   # noqa: E731
    rule = _rule(f, lambda cfg, x: (f(x), x),
                 lambda cfg, x, g: (g * np.cos(x) * (1.0 if where == "rev" else 1.001),),
                 lambda cfg, p, t: (f(p[0]), t[0] * np.cos(p[0]) * (1.0 if where == "fwd"
                                                                     else 1.001)), name="m")
    x = np.linspace(-1.3, 1.3, 1024)
    with pytest.raises(GradientCheckError):
        check_rule(rule, x, modes=(where,))
    with pytest.raises(GradientCheckError):
        check_grads(rule, x, order=1, modes=(where,))


def _xyz(arg, where):
    """x * y * z whose rules are 1% wrong for argument `arg` in mode `where`."""
    def reverse(cfg, s, g):
        x, y, z = s
        parts = [g * y * z, g * x * z, g * x * y]
        if where == "rev":
            parts[arg] = 1.01 * parts[arg]
        return tuple(parts)

    def forward(cfg, p, t):
        x, y, z = p
        parts = [y * z, x * z, x * y]
        if where == "fwd":
            parts[arg] = 1.01 * parts[arg]
        return x * y * z, sum(ti * pi for ti, pi in zip(t, parts) if ti is not None)
    return _rule(lambda x, y, z: x * y * z, lambda cfg, x, y, z: (x * y * z, (x, y, z)),
                 reverse, forward, name="xyz")


@pytest.mark.parametrize("where", ["rev", "fwd"])
@pytest.mark.parametrize("arg", [0, 2])
def test_one_argument_of_three_one_percent_wrong_is_named(arg, where):
    label = ["argument 0 `x`", "argument 1 `y`", "argument 2 `z`"][arg]
    with pytest.raises(GradientCheckError, match=label):
        check_grads(_xyz(arg, where), X * 1e3, Y, W * 1e-3, order=1)
    with pytest.raises(GradientCheckError, match=f"{label}: (Active|Duplicated)"):
        check_rule(_xyz(arg, where), X, Y, W)


def _bad_cos(x):
    """cos x in value; its derivative is 1.01 times -sin x (the primal is cut out of the rest)."""
    return np.cos(primal(x)) + 1.01 * (np.cos(x) - np.cos(primal(x)))


@pytest.mark.parametrize("where", ["rev", "fwd"])
def test_a_second_derivative_one_percent_wrong_is_caught(where):
    rule = _rule(np.sin, lambda cfg, x: (np.sin(x), x),
                 lambda cfg, x, g: (g * (_bad_cos(x) if where == "rev" else np.cos(x)),),
                 lambda cfg, p, t: (np.sin(p[0]), t[0] * (_bad_cos(p[0]) if where == "fwd"
                                                          else np.cos(p[0]))),
                 differentiable=True, name="sin2")
    check_grads(rule, X, order=1)
    with pytest.raises(GradientCheckError, match="second derivatives"):
        check_grads(rule, X)
    with pytest.raises(GradientCheckError, match="second derivatives"):
        check_rule(rule, X)


def test_a_wrong_mixed_second_derivative_of_an_easy_rule_is_caught():
    # d/dx is sin(y) with y cut out: d2f/dxdy misses cos(y) on that side.
    rule = easy_rule(lambda x, y: x * np.sin(y),
                     partials=lambda x, y: (np.sin(primal(y)), x * np.cos(y)))
    with pytest.raises(GradientCheckError, match="second derivatives"):
        check_rule(rule, X, Y)
    with pytest.raises(GradientCheckError, match="second derivatives"):
        check_grads(rule, X, Y)


def _abs2(kind):
    """|z|^2 of a complex z (a real result); the right cotangent is 2 Re(g) conj(z)."""
    grads = {"ok": lambda z, g: 2 * g * np.conj(z), "no conj": lambda z, g: 2 * g * z,
             "half": lambda z, g: g * np.conj(z)}[kind]
    f = lambda z: np.real(z * np.conj(z))   # noqa: E731
    return _rule(f, lambda cfg, z: (f(z), z), lambda cfg, z, g: (grads(z, g),),
                 lambda cfg, p, t: (f(p[0]), 2 * np.real(np.conj(p[0]) * t[0])), name="abs2")


def test_conjugation_errors_of_a_real_result_of_a_complex_input():
    z = np.array([0.3 + 0.4j, -1.0 + 0.2j, 0.5 - 0.7j])
    check_rule(_abs2("ok"), z)
    check_grads(_abs2("ok"), z, order=1)
    for kind in ("no conj", "half"):
        with pytest.raises(GradientCheckError, match="ReverseWithPrimal"):
            check_rule(_abs2(kind), z)
        with pytest.raises(GradientCheckError, match="reverse mode"):
            check_grads(_abs2(kind), z, order=1)


@pytest.mark.parametrize("factor", [1.01, 1.001])
def test_a_rule_wrong_only_for_float32_is_caught_at_float32(factor):
    def mask(x):
        return factor if np.result_type(x) == np.float32 else 1.0
    rule = _rule(np.sin, lambda cfg, x: (np.sin(x), x),
                 lambda cfg, x, g: (g * np.cos(x) * mask(x),),
                 lambda cfg, p, t: (np.sin(p[0]), t[0] * np.cos(p[0]) * mask(p[0])),
                 name="f32_sin")
    check_rule(rule, X)
    with pytest.raises(GradientCheckError):
        check_rule(rule, X.astype(np.float32))


# == (B) false failures: right derivatives reported wrong =======================================

# At the smallest steps (1e-11, 1e-12 times |x|) the shifted points x ± h v carry a rounding of
# relative size eps / h (1e-4) in the step itself, and an intermediate such as 1 + x*x stops
# changing at all: the two smallest steps share the same artefact and agree with each other,
# which must not make them the finite differences' best estimate.
def test_sin_at_mixed_large_entries_passes():
    check_grads(np.sin, np.array([200.0, 7.27e5, -264.0]), order=1)


def test_a_large_multiple_of_log_1_plus_x_squared_at_1e_6_passes():
    check_grads(lambda x: 1e13 * np.log(1 + x * x), np.array([1e-6]), order=1)


def test_second_derivatives_of_std_of_cos_at_mixed_entries_pass():
    check_grads(lambda x: np.std(np.cos(x)), np.array([3.76e4, 1.34, 0.014]))


_MAT = np.array([[3.0, 0.4, -0.2], [0.1, 2.5, 0.3], [-0.3, 0.2, 3.5]])


def _matrix(y):
    return _MAT + 0.5 * np.tanh(y[:9]).reshape(3, 3)


# Smooth at every real input (no kink, pole or periodic function of a raw entry of size 1e6),
# finite at the ends of 1e-6..1e6.
_INNER = [np.tanh, np.arctan, np.arcsinh, lambda x: x / (1 + x * x), lambda x: x * x,
          np.cbrt, lambda x: np.log(np.abs(x)), lambda x: np.exp(np.sin(np.arctan(x))),
          lambda x: np.log1p(x * x), lambda x: np.hypot(x, 1.0), lambda x: sp.erf(x / 1e3),
          lambda x: 1.0 / x, lambda x: sp.gammaln(2 + np.abs(x)), lambda x: sp.i0e(x),
          lambda x: np.sinh(np.arctan(x)), lambda x: np.arctan2(x, 1.0 + x * x),
          lambda x: np.cos(np.tanh(x)) * x]
_OUTER = [lambda y: y, np.sum, np.prod, np.linalg.norm, sp.logsumexp, np.cumsum, np.sort,
          np.var, lambda y: y[::-1] * y, lambda y: y[[0, 3, 3, 1]],
          lambda y: y[:8].reshape(2, 4).T @ np.arange(1.0, 3.0),
          lambda y: np.outer(y[:3], y[3:6]).ravel(), sp.softmax,
          lambda y: {"a": y[:2], "b": np.sum(y)}, lambda y: np.linalg.inv(_matrix(y)),
          lambda y: np.linalg.det(_matrix(y)), lambda y: np.linalg.slogdet(_matrix(y))[1],
          lambda y: np.linalg.solve(_matrix(y), np.array([0.3, -1.0, 0.8])),
          lambda y: np.linalg.eigvalsh(_matrix(y) + _matrix(y).T),
          lambda y: np.linalg.cholesky(_matrix(y) @ _matrix(y).T),
          lambda y: np.linalg.svd(_matrix(y), compute_uv=False)]


def test_random_correct_functions_at_mixed_magnitudes_pass():
    rng = np.random.default_rng(7)
    for _ in range(60):
        x = rng.choice([-1.0, 1.0], 9) * 10.0 ** rng.uniform(-6, 6, 9)
        inner = [_INNER[i] for i in rng.integers(0, len(_INNER), rng.integers(1, 3))]
        outer = _OUTER[rng.integers(0, len(_OUTER))]

        def f(x, inner=inner, outer=outer):
            for g in inner:
                x = g(x)
            return outer(x)
        check_grads(f, x)


# == unclear messages ===========================================================================

def test_a_second_order_failure_of_check_rule_names_check_rule_and_the_rule():
    rule = easy_rule(lambda x: x ** 3, partials=lambda x: 3 * x * primal(x), name="cube")
    with pytest.raises(GradientCheckError, match=r"^check_rule\(`cube`\)"):
        check_rule(rule, X)
