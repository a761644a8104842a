"""Matrix functions: expm, expm_frechet, sqrtm.

- expm: its derivative in direction E is the Fréchet derivative L(A, E), the upper-right
  block of expm([[A, E], [0, A]]) (Mathias 1996). The reverse rule is the same block formula
  at A^T (the adjoint of L(A, .) is L(A^T, .)). Both call expm itself, so every order nests
  (each order doubles the block size).
- sqrtm: X = sqrtm(A) satisfies X X = A, so dX solves the Sylvester equation
  X dX + dX X = dA; the reverse rule solves the transposed one. Needs A with no eigenvalue on
  the closed negative real axis (where the principal root is not differentiable).

Both functions are holomorphic, so the rules, written with plain transposes, also hold for
complex matrices (docs/complex.md).
"""
from __future__ import annotations

import numpy as np
import scipy.linalg

from ops._util import defprimitive, shape_of
from tape.backend import array_module

from .linalg_base import (Array, _as_array, _check_finite, _float_dtype, _mT, _square,
                          _traced)
from .linalg_solvers import solve_sylvester


# -- expm ----------------------------------------------------------------------------------------
def _block(a, e):
    """[[a, e], [0, a]] for (stacks of) n x n matrices."""
    zeros = array_module(a).zeros(shape_of(a), dtype=_float_dtype(a, e))
    return np.concatenate([np.concatenate([a, e], axis=-1),
                           np.concatenate([zeros, a], axis=-1)], axis=-2)


def _frechet(a, e):
    """L(a, e): the derivative of expm at a in direction e."""
    n = shape_of(a)[-1]
    return _expm(_block(a, e))[..., :n, n:]


def _expm_augmented(cfg, a):
    return _expm(a), a


def _expm_forward(cfg, primals, tangents):
    a, = primals
    return _expm(a), _frechet(a, tangents[0])


_expm = defprimitive("expm", lambda a: scipy.linalg.expm(a), _expm_augmented,
                     lambda cfg, a, g: (_frechet(_mT(a), g),), _expm_forward)


def expm(A: Array) -> Array:
    """The matrix exponential of A (n x n, leading axes are batch axes), as
    scipy.linalg.expm; differentiable to any order through Fréchet derivatives.

    >>> import numpy as np
    >>> from tape import gradient, Reverse
    >>> a = np.array([[0.0, 1.0], [0.0, 0.0]])
    >>> expm(a)
    array([[1., 1.],
           [0., 1.]])
    >>> gradient(Reverse, lambda a: np.trace(expm(a)), a)[0]   # d tr e^A = e^(A^T)
    array([[1., 0.],
           [1., 1.]])
    """
    A = _as_array(A)
    _square(A, "A", "expm")
    return _expm(A)


def expm_frechet(A: Array, E: Array, method: str | None = None, compute_expm: bool = True,
                 check_finite: bool = True):
    """The Fréchet derivative of the matrix exponential at A in direction E, as
    scipy.linalg.expm_frechet: ``(expm(A), L)``, or ``L`` with ``compute_expm=False``.
    Computed from the block matrix [[A, E], [0, A]], so it is differentiable in A and E to any
    order (SciPy's own algorithm gives the same values to rounding).

    >>> import numpy as np
    >>> a, e = np.diag([1.0, 2.0]), np.eye(2)
    >>> expm_A, L = expm_frechet(a, e)
    >>> bool(np.allclose(L, np.diag(np.exp([1.0, 2.0]))))
    True
    """
    A, E = _as_array(A), _as_array(E)
    if not _traced(A, E):   # plain values: SciPy's own routine and results (float64)
        return scipy.linalg.expm_frechet(A, E, method=method, compute_expm=compute_expm,
                                         check_finite=check_finite)
    _check_finite(check_finite, "expm_frechet", A, E)
    n = _square(A, "A", "expm_frechet")
    double = np.result_type(_float_dtype(A, E), np.float64)   # SciPy's precision, float32 too
    A, E = A.astype(double), E.astype(double)
    if shape_of(E) != shape_of(A):
        raise ValueError(f"expm_frechet: E must have the shape of A, {shape_of(A)}; got "
                         f"{shape_of(E)}")
    block = _expm(_block(A, E))
    L = block[..., :n, n:]
    return (block[..., :n, :n], L) if compute_expm else L


# -- sqrtm ---------------------------------------------------------------------------------------
def _sqrtm_augmented(cfg, a):
    x = _sqrtm(a)
    return x, x


def _sqrtm_reverse(cfg, x, g):
    xt = _mT(x)
    return (solve_sylvester(xt, xt, g),)


def _sqrtm_forward(cfg, primals, tangents):
    x = _sqrtm(primals[0])
    return x, solve_sylvester(x, x, tangents[0])


_sqrtm = defprimitive("sqrtm", lambda a: scipy.linalg.sqrtm(a), _sqrtm_augmented, _sqrtm_reverse,
                      _sqrtm_forward)


def sqrtm(A: Array) -> Array:
    """The principal square root X of A (X @ X == A), as scipy.linalg.sqrtm (its deprecated
    `disp` and `blocksize` arguments are not offered). Real when A has no eigenvalue on the
    negative real axis, complex otherwise, as in SciPy. Differentiable to any order where A
    has no eigenvalue on the closed negative real axis (the derivative solves a Sylvester
    equation that is singular there).

    >>> import numpy as np
    >>> from tape import gradient, Reverse
    >>> a = np.array([[4.0, 0.0], [0.0, 9.0]])
    >>> sqrtm(a)
    array([[2., 0.],
           [0., 3.]])
    >>> gradient(Reverse, lambda a: np.trace(sqrtm(a)), a)[0]   # d tr sqrt(A) = A^(-1/2) / 2
    array([[0.25      , 0.        ],
           [0.        , 0.16666667]])
    """
    A = _as_array(A)
    _square(A, "A", "sqrtm")
    return _sqrtm(A)
