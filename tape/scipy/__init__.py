"""SciPy functions that are not ufuncs, under SciPy's own names, differentiable
(as autograd.scipy and jax.scipy): `tape.scipy.special`, `.stats`, `.signal`, `.linalg`,
`.integrate`. Needs SciPy (the `scipy` extra).

These are modules of ops, registered like `ops/`; the engine itself never imports them.
"""
