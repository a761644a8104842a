"""Second-order examples for scipy.special's ufuncs on traced values (merged into
test_nested_every_op.EXAMPLES). Inputs stay inside each function's domain and away from its
poles, kinks and branch points. Empty when SciPy is not installed."""
import numpy as np

try:
    import scipy.special as sc
except ImportError:   # the `scipy` extra is optional
    sc = None

EXAMPLES: dict = {}
EXCLUDED: dict = {}

if sc is not None:
    from ops.scipy_special import multigammaln, polygamma

    x3 = np.array([0.3, -0.7, 1.1])            # signed, away from 0
    p3 = np.array([0.6, 1.3, 2.1])             # positive
    q3 = np.array([1.7, 0.8, 1.4])             # positive
    u3 = np.array([0.2, -0.45, 0.7])           # inside (-1, 1)
    w3 = np.array([0.15, 0.5, 0.8])            # inside (0, 1)
    n3 = np.array([-1.3, -2.6, 0.4])           # negative non-integers (between poles)
    M23 = np.array([[0.6, 1.3, 2.1], [1.7, 0.8, 1.4]])   # positive, to broadcast against p3

    EXAMPLES.update({
        # gamma family
        "scipy.special.gammaln": (sc.gammaln, (p3,)),
        "scipy.special.gammaln[negative x]": (sc.gammaln, (n3,)),
        "scipy.special.psi": (sc.psi, (p3,)),
        "scipy.special.gamma": (sc.gamma, (np.array([0.6, 1.3, -1.4]),)),
        "scipy.special.rgamma": (sc.rgamma, (np.array([0.6, 1.3, 2.7]),)),
        "scipy.special.rgamma[near and at poles]": (sc.rgamma, (np.array([-1.3, -2.0, 0.0]),)),
        "scipy.special.loggamma": (sc.loggamma, (p3,)),
        "scipy.special.beta": (sc.beta, (M23, q3)),
        "scipy.special.betaln": (sc.betaln, (p3, M23)),
        "scipy.special.betainc": (lambda x: sc.betainc(p3 + 1.0, q3, x), (w3,)),
        "scipy.special.gammainc": (lambda x: sc.gammainc(q3, x), (p3,)),
        "scipy.special.gammaincc": (lambda x: sc.gammaincc(M23, x), (p3,)),
        "scipy.special._zeta": (lambda q: sc.zeta(np.array([2.0, 3.5, 4.0]), q), (p3,)),
        "scipy.special.psi[polygamma(n, x)]": (lambda x: polygamma(np.array([0, 1, 3]), x), (p3,)),
        "scipy.special.gammaln[multigammaln]": (lambda a: multigammaln(a, 3), (p3 + 1.0,)),
        # error functions and the normal distribution
        "scipy.special.erf": (sc.erf, (x3,)),
        "scipy.special.erf[complex]": (sc.erf, (np.array([0.3 + 0.4j, -0.7 + 0.1j]),)),
        "scipy.special.erfc": (sc.erfc, (x3,)),
        "scipy.special.erfcx": (sc.erfcx, (x3,)),
        "scipy.special.erfcx[complex]": (sc.erfcx, (np.array([0.3 + 0.4j, 1.2 - 0.5j]),)),
        "scipy.special.erfinv": (sc.erfinv, (u3,)),
        "scipy.special.erfcinv": (sc.erfcinv, (w3 * 1.5,)),
        "scipy.special.ndtr": (sc.ndtr, (x3,)),
        "scipy.special.ndtri": (sc.ndtri, (w3,)),
        "scipy.special.log_ndtr": (sc.log_ndtr, (np.array([-9.0, -0.7, 0.3, 4.0]),)),
        # logistic and information theory
        "scipy.special.logit": (sc.logit, (w3,)),
        "scipy.special.expit": (sc.expit, (x3,)),
        "scipy.special.log_expit": (sc.log_expit, (x3,)),
        "scipy.special.xlogy": (sc.xlogy, (x3, M23)),
        "scipy.special.xlogy[complex]": (sc.xlogy, (np.array([0.3 + 0.4j]),
                                                    np.array([1.2 - 0.5j]))),
        "scipy.special.xlog1py": (sc.xlog1py, (M23, u3)),
        "scipy.special.entr": (sc.entr, (p3,)),
        "scipy.special.rel_entr": (sc.rel_entr, (p3, q3)),
        "scipy.special.kl_div": (sc.kl_div, (M23, q3)),
        # Bessel functions
        "scipy.special.i0": (sc.i0, (x3,)),
        "scipy.special.i0e": (sc.i0e, (x3,)),
        "scipy.special.i1": (sc.i1, (x3,)),
        "scipy.special.i1e": (sc.i1e, (x3,)),
        "scipy.special.iv": (lambda x: sc.iv(np.array([0.0, 1.5, 2.0]), x), (p3,)),
        "scipy.special.ive": (lambda x: sc.ive(np.array([0.0, 1.0, 2.0]), x), (x3,)),
        "scipy.special.k0": (sc.k0, (p3,)),
        "scipy.special.k0e": (sc.k0e, (p3,)),
        "scipy.special.k1": (sc.k1, (p3,)),
        "scipy.special.k1e": (sc.k1e, (p3,)),
        "scipy.special.kv": (lambda x: sc.kv(np.array([0.5, 1.5, 3.0]), x), (p3,)),
        "scipy.special.kve": (lambda x: sc.kve(1.5, x), (M23,)),
        "scipy.special.j0": (sc.j0, (x3,)),
        "scipy.special.j1": (sc.j1, (x3,)),
        "scipy.special.jv": (lambda x: sc.jv(np.array([0.0, 1.5, 2.0]), x), (p3,)),
        "scipy.special.jv[jn, integer order]": (lambda x: sc.jn(3, x), (x3,)),
        "scipy.special.y0": (sc.y0, (p3,)),
        "scipy.special.y1": (sc.y1, (p3,)),
        "scipy.special.yn": (lambda x: sc.yn(np.array([0, 1, 3]), x), (p3,)),
        "scipy.special.yv": (lambda x: sc.yv(2.5, x), (M23,)),
        "np.i0": (np.i0, (x3,)),
        # more
        "scipy.special.gammaincinv": (lambda y: sc.gammaincinv(q3, y), (w3,)),
        "scipy.special.gammainccinv": (lambda y: sc.gammainccinv(M23, y), (w3,)),
        "scipy.special.betaincinv": (lambda y: sc.betaincinv(p3 + 1.0, q3, y), (w3,)),
        "scipy.special.erfi": (sc.erfi, (x3,)),
        "scipy.special.erfi[complex]": (sc.erfi, (np.array([0.3 + 0.4j, -0.7 + 0.1j]),)),
        "scipy.special.dawsn": (sc.dawsn, (x3,)),
        "scipy.special.exp1": (sc.exp1, (p3,)),
        "scipy.special.expi": (sc.expi, (x3,)),
        "scipy.special.ndtri_exp": (sc.ndtri_exp, (-p3,)),
        "scipy.special.exp2": (sc.exp2, (x3,)),
        "scipy.special.exp10": (sc.exp10, (x3,)),
        "scipy.special.expm1": (sc.expm1, (x3,)),
        "scipy.special.log1p": (sc.log1p, (u3,)),
        "scipy.special.cbrt": (sc.cbrt, (x3,)),
        "scipy.special.cosm1": (sc.cosm1, (x3,)),
    })
    EXCLUDED.update({
        "scipy.special._riemann_zeta": "zeta(x) has no closed-form derivative in its only "
                                       "argument; differentiating it raises NotImplementedError",
    })
