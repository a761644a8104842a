"""SciPy functions that are not ufuncs, under SciPy's own names, differentiable
(as autograd.scipy and jax.scipy): `tape.scipy.special`, `.stats`, `.signal`, `.linalg`,
`.integrate`. Needs SciPy (the `scipy` extra).

These are modules of ops, registered like `ops/`; the engine itself never imports them.

>>> import tape.scipy.stats
>>> from tape import gradient, Reverse
>>> gradient(Reverse, lambda x: tape.scipy.stats.norm.logpdf(x), 0.5)
(-0.5,)
"""
from . import integrate, linalg, signal, special, stats  # noqa: F401

__all__ = ["special", "stats", "signal", "linalg", "integrate"]
