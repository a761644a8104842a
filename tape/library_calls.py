"""Which NumPy or SciPy function asked for a traced value to become a plain one, and what to
use instead: read from the call stack when an error message is read (`tape.errors`)."""
import ast
import importlib
import inspect
import linecache
import sys

import numpy as np


ENGINE_PACKAGES = ("tape", "ops", "kernels")


def package_of(frame) -> str:
    return frame.f_globals.get("__name__", "").partition(".")[0]


def outside_engine(frame):
    """`frame`, or the first of its callers that is not the engine's code (None if none is)."""
    while frame is not None and package_of(frame) in ENGINE_PACKAGES:
        frame = frame.f_back
    return frame


def scipy_refusal(module: str, function: str, how: str = "") -> str:
    """The refusal of SciPy's `module.function` called on a traced value."""
    return (f"{module}.{function} was called on a traced value{how}; SciPy's functions "
            f"compute on plain arrays, so the derivative would be lost. "
            + _scipy_replacement(module, function))


# Random draws whose parameters NumPy's generators convert themselves (C code, no dispatch), and
# the standard draw that gives them differentiably.
RANDOM_DRAWS = {
    "normal": "loc + scale * rng.standard_normal(size) for rng.normal(loc, scale, size).",
    "uniform": "low + (high - low) * rng.random(size) for rng.uniform(low, high, size).",
    "exponential": "scale * rng.standard_exponential(size) for rng.exponential(scale, size).",
    "lognormal": "np.exp(mean + sigma * rng.standard_normal(size)) for rng.lognormal(mean, "
                 "sigma, size).",
    "laplace": "loc + scale * rng.laplace(0.0, 1.0, size) for rng.laplace(loc, scale, size).",
    "logistic": "loc + scale * rng.logistic(0.0, 1.0, size) for rng.logistic(loc, scale, "
                "size).",
    "gumbel": "loc + scale * rng.gumbel(0.0, 1.0, size) for rng.gumbel(loc, scale, size).",
    "multivariate_normal": "mean + rng.standard_normal(size + mean.shape) @ L.T with L = "
                           "np.linalg.cholesky(cov) for rng.multivariate_normal(mean, cov, size).",
}
for _name in ("gamma", "beta", "chisquare", "standard_t", "weibull", "pareto", "poisson",
              "binomial", "vonmises", "wald", "rayleigh", "dirichlet", "triangular"):
    RANDOM_DRAWS[_name] = None   # no parameter-free draw to transform
del _name


def called_method(frame) -> tuple:
    """``(source, name)`` of the method call (`a.dot(b)`, `rng.normal(mu, s)`) that `frame`
    is running, or ``(None, None)``. NumPy's `ndarray.dot` and its random generators have no
    dispatch protocol: they convert a traced argument themselves, from user code, so no NumPy
    frame lies between."""
    if frame is None:
        return None, None
    try:
        line, end_line, start, end = list(frame.f_code.co_positions())[frame.f_lasti // 2]
    except (AttributeError, IndexError, ValueError):
        return None, None
    if None in (line, end_line, start, end):
        return None, None
    lines = [linecache.getline(frame.f_code.co_filename, n) for n in range(line, end_line + 1)]
    lines[-1] = lines[-1][:end]
    lines[0] = lines[0][start:]
    call = " ".join(text.strip() for text in lines)
    try:
        node = ast.parse(call, mode="eval").body
    except SyntaxError:
        return None, None
    called = getattr(node, "func", None)   # the outermost call only: not np.float64(a.dot(b))
    return (call, called.attr) if isinstance(called, ast.Attribute) else (None, None)


# SciPy modules whose functions have NumPy counterparts of the same name doing the same
# operation (the NumPy module, and the names; None: every name NumPy's module differentiates).
# Elsewhere a same-named NumPy function is another operation (scipy.ndimage.convolve is n-d
# with boundary modes, np.convolve 1-d and 'full'), so none is suggested.
_NUMPY_COUNTERPARTS = {
    "scipy.fft": ("fft", None),
    # not cholesky (SciPy's gives the upper factor) nor qr (SciPy's is the full one)
    "scipy.linalg": ("linalg", frozenset({"det", "eig", "eigh", "eigvals", "eigvalsh", "inv",
                                          "lstsq", "norm", "pinv", "solve", "svd",
                                          "svdvals"})),
    "scipy.integrate": ("", frozenset({"trapezoid"})),
    "scipy.special": ("", "ufunc"),   # the ufuncs of both (expm1, log1p, cbrt, exp2)
}

# What else does the job, for the SciPy functions with a usual differentiable stand-in.
_FIXED_ORDER_RULE = ("a fixed-order Gauss-Legendre rule is differentiated: "
                     "scipy.integrate.fixed_quad(f, a, b, n=20), or the nodes and weights of "
                     "np.polynomial.legendre.leggauss(n)")
_SCIPY_HINTS = {("scipy.integrate", "quad"): _FIXED_ORDER_RULE,
                ("scipy.integrate", "quad_vec"): _FIXED_ORDER_RULE}


def _numpy_counterpart(module: str, function: str):
    """`np.fft.rfft` for scipy.fft.rfft: NumPy's function doing the same operation, which
    Hecate differentiates; None where there is none."""
    where, names = _NUMPY_COUNTERPARTS.get(module, (None, ()))
    if where is None or "." in function or function.startswith("_"):
        return None
    if names is not None and names != "ufunc" and function not in names:
        return None
    namespace = getattr(np, where) if where else np
    found = getattr(namespace, function, None)
    if found is None:
        return None
    if names == "ufunc":   # NumPy's ufunc of that name, if SciPy's is one too
        scipy_function = getattr(sys.modules.get(module), function, None)
        if not (isinstance(found, np.ufunc) and isinstance(scipy_function, np.ufunc)):
            return None
    return ".".join(p for p in ("np", where, function) if p)


def _scipy_replacement(module: str, function: str) -> str:
    """What to use instead of SciPy's `module.function` (`norm(loc, scale).logpdf` for a frozen
    distribution's method): tape's counterpart where it exists, else NumPy's function doing
    the same operation, else a custom rule."""
    try:
        # Looked up by name when the message is read: tape.scipy is optional (it needs SciPy).
        counterpart = importlib.import_module(f"tape.{module}")
    except ImportError:
        counterpart = None
    names = [part.partition("(")[0] for part in function.split(".")]
    found = counterpart
    for name in names:
        if found is None or name.startswith("_"):   # public names only (not `__init__`)
            found = None
            break
        found = getattr(found, name, None)
    if found is not None and "(" in function:
        frozen = names[0]
        return (f"Use the differentiable tape.{module}.{frozen} instead, frozen the same way: "
                f"`from tape.{module} import {frozen}`, then {function}(...) (SciPy's "
                "signature)")
    if found is not None:
        return (f"Use the differentiable tape.{module}.{function} (`from tape.{module} import "
                f"{names[0]}`, SciPy's signature) instead")
    numpy = _numpy_counterpart(module, function)
    if numpy is not None:
        return f"Use {numpy}, which is differentiated, instead"
    where = f"tape.{module} has no {function}" if counterpart else f"there is no tape.{module}"
    hint = _SCIPY_HINTS.get((module, function))
    return (f"{where}: write it with NumPy operations (those are differentiated"
            + (f"; {hint}" if hint else "")
            + f"), or wrap {module}.{function} in a tape.custom_rule")


def _frozen_name(owner):
    """`norm(loc, scale)` for SciPy's frozen distribution `owner` (st.norm(0.3, 1.2)), or None."""
    cls = type(owner).__name__
    if not cls.endswith("_frozen"):
        return None
    dist = getattr(owner, "dist", None)
    name = getattr(dist, "name", None)
    if isinstance(name, str):   # rv_continuous_frozen, rv_discrete_frozen
        shapes = getattr(dist, "shapes", None)
        params = [p.strip() for p in shapes.split(",")] if shapes else []
        params += ["loc", "scale"] if "continuous" in cls else ["loc"]
        return f"{name}({', '.join(params)})"
    try:   # multivariate_normal_frozen: its distribution's parameters, not its options
        params = [p.name for p in list(inspect.signature(type(owner._dist).__call__).parameters
                                       .values())[1:]
                  if p.name != "seed" and not isinstance(p.default, bool)
                  and p.kind is p.POSITIONAL_OR_KEYWORD]
    except (AttributeError, TypeError, ValueError):
        params = []
    return f"{cls.removesuffix('_frozen')}({', '.join(params)})"


def _function_name(frame) -> str:
    """`vectorize.__call__`, `rv_continuous.logpdf`: the method's class where there is one;
    the class alone for its `__init__`, the function for SciPy's callable objects
    (scipy.special's MultiUFunc, scipy.fft's multimethods)."""
    owner = frame.f_locals.get("self")
    name = frame.f_code.co_name
    if name == "__ua_function__":
        # scipy.fft's backend: the multimethod the user called is its `method`
        method = frame.f_locals.get("method")
        return getattr(method, "__name__", None) or name
    if owner is None:
        return name
    if name == "__call__" and package_of(frame) == "scipy" and \
            isinstance(getattr(owner, "__name__", None), str):
        return owner.__name__   # scipy.special.legendre_p, a MultiUFunc
    frozen = _frozen_name(owner)
    if frozen is not None:
        return f"{frozen}.{name}"
    cls = type(owner).__name__.removesuffix('_gen')   # scipy.stats' norm_gen
    return cls if name == "__init__" else f"{cls}.{name}"


def _public_module(module: str) -> str:
    """`scipy.linalg` for `scipy.linalg._decomp_cholesky`; `scipy` for `scipy._lib._util`."""
    return ".".join(p for p in module.split(".")[:2] if not p.startswith("_"))


# The names a decorator's wrapper gives the function it wraps (preferred to its other
# closure variables, which may be helpers of the same module).
_WRAPPED_VARS = ("fun", "func", "function", "f", "wrapped", "hypotest_fun_in")


def _wrapped_function(frame):
    """(public module, name) of the library function a decorator's wrapper frame closes over
    (functools.wraps keeps it in the closure), or None. A class's `__init__` is named by its
    class (`BarycentricInterpolator`)."""
    package = frame.f_globals.get("__name__", "").partition(".")[0]
    found = []
    for var in frame.f_code.co_freevars:
        wrapped = frame.f_locals.get(var)
        module = getattr(wrapped, "__module__", None) or ""
        if callable(wrapped) and module.startswith(package + ".") and \
                _public_module(module) != package:
            name = getattr(wrapped, "__name__", var)
            qualname = getattr(wrapped, "__qualname__", None) or name
            if "<" not in qualname:   # not a function of a function's <locals>
                name = qualname.removesuffix(".__init__")
            found.append((var not in _WRAPPED_VARS, name.startswith("_"),
                          (_public_module(module), name)))
    return min(found, key=lambda entry: entry[:2])[2] if found else None


_WRAPPER_NAMES = ("wrapper", "wrapped", "inner", "decorated",
                  "axis_nan_policy_wrapper")   # scipy.stats' skew, entropy, gmean, ...


def library_caller(frame, resumed_by=None):
    """("scipy" or "numpy", public module, function) of the outermost SciPy or NumPy frame
    between `frame` and the user's code, or None. `resumed_by`: the frame that was running
    `frame`, a generator's, when the error was made (its own link is gone).

    The search ends at the engine's frames that run the user's code (the differentiated
    function was called from them): a SciPy function further out (an optimiser whose
    objective differentiates) did not ask for the conversion."""
    found, user = None, False
    for frame in _outward(frame, resumed_by):
        module = frame.f_globals.get("__name__", "")
        package = module.partition(".")[0]
        if package in ("scipy", "numpy"):
            public, name = _public_module(module), _function_name(frame)
            if public == package or name in _WRAPPER_NAMES:
                # A decorator's wrapper (scipy._lib's batching `wrapper`, scipy.special's
                # around spherical_jn) names neither the module nor the function; the function
                # it wraps does.
                public, name = _wrapped_function(frame) or (public, name)
            if found is None or public != package or found[1] == package:
                found = (package, public, name)
        elif package not in ENGINE_PACKAGES:
            if found is not None:
                return found
            user = True
        elif user:
            return found
    return found


def _outward(frame, resumed_by):
    """`frame` and its callers, outwards; past a stopped generator's frame, `resumed_by`'s."""
    while frame is not None:
        yield frame
        frame = frame.f_back
        if frame is None:
            frame, resumed_by = resumed_by, None
