"""The derivatives of scipy.special's order-1 Bessel functions come from the orders 0 and 1
(C_2 by the recurrence, C_1/x by a power series near 0). Checked against SciPy's general-order
formula 0.5 (C_0 -+ C_2), an independent computation, from 1e-6 to 700, to a few hundred
units of rounding on the scale of the terms (both lose digits where they cancel, near an
extremum of C_1, and SciPy's own values carry about 1e-13 at large x)."""
import numpy as np
import pytest

sc = pytest.importorskip("scipy.special")
from tape import Active, Reverse, autodiff  # noqa: E402

X = np.concatenate([np.geomspace(1e-6, 700.0, 120), np.linspace(0.05, 40.0, 120)])
CASES = {   # function, its derivative by the general-order formula, the scale of its terms
    "j1": (sc.j1, lambda x: 0.5 * (sc.j0(x) - sc.jv(2.0, x)),
           lambda x: np.abs(sc.j0(x)) + np.abs(sc.jv(2.0, x))),
    "y1": (sc.y1, lambda x: 0.5 * (sc.y0(x) - sc.yv(2.0, x)),
           lambda x: np.abs(sc.y0(x)) + np.abs(sc.yv(2.0, x))),
    "i1": (sc.i1, lambda x: 0.5 * (sc.i0(x) + sc.iv(2.0, x)),
           lambda x: np.abs(sc.i0(x)) + np.abs(sc.iv(2.0, x))),
    "k1": (sc.k1, lambda x: -0.5 * (sc.k0(x) + sc.kv(2.0, x)),
           lambda x: np.abs(sc.k0(x)) + np.abs(sc.kv(2.0, x))),
    "i1e": (sc.i1e, lambda x: 0.5 * (sc.i0e(x) + sc.ive(2.0, x)) - np.sign(x) * sc.i1e(x),
            lambda x: np.abs(sc.i0e(x)) + np.abs(sc.ive(2.0, x)) + np.abs(sc.i1e(x))),
    "k1e": (sc.k1e, lambda x: sc.k1e(x) - 0.5 * (sc.k0e(x) + sc.kve(2.0, x)),
            lambda x: np.abs(sc.k0e(x)) + np.abs(sc.kve(2.0, x)) + np.abs(sc.k1e(x))),
}


@pytest.mark.parametrize("name", list(CASES))
def test_order_one_derivative_matches_the_general_order_formula(name):
    f, derivative, scale = CASES[name]
    x = X[np.isfinite(f(X)) & np.isfinite(derivative(X))]
    (got,), = autodiff(Reverse, lambda v: np.sum(f(v)), Active, Active(x.copy()))
    np.testing.assert_array_less(np.abs(got - derivative(x)), 5e-13 * scale(x) + 1e-300)


@pytest.mark.parametrize("name", ["j1", "i1", "i1e"])
def test_order_one_derivative_at_zero(name):
    # j1'(0) = i1'(0) = 1/2 and i1e'(0) = 1/2 (its kink in |x| has derivative 0 there)
    f = CASES[name][0]
    (got,), = autodiff(Reverse, lambda v: np.sum(f(v)), Active, Active(np.zeros(3)))
    np.testing.assert_allclose(got, 0.5, rtol=1e-15)
