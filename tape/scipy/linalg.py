"""tape.scipy.linalg: differentiable counterparts of scipy.linalg, under SciPy's names and
signatures.

Call these in place of scipy.linalg's functions on traced values (SciPy's own functions
turn their inputs into plain arrays, which would drop the derivative). On plain arrays each
function calls SciPy and returns exactly what SciPy returns.

- Matrix functions: `expm`, `expm_frechet`, `sqrtm` (module `linalg_matfuncs`).
- Structured solvers: `solve_triangular`, `solve_banded`, `solve_sylvester`,
  `solve_continuous_lyapunov` (`linalg_solvers`).
- Factorisations: `cholesky`, `cho_factor`/`cho_solve`, `lu_factor`/`lu_solve`
  (`linalg_decomp`); the factor objects are tuples holding traced arrays, the pivots are
  integers without derivative.
- What np.linalg already differentiates, with SciPy's signatures: `inv`, `det`, `solve`
  (`assume_a`, `lower`, `transposed`), `eigh`/`eigvalsh` (generalised problems excluded),
  `svd`/`svdvals`, `qr`, `norm`.

The derivatives are those of the function SciPy computes: where a routine reads one triangle
(`cholesky`, `cho_factor`, `cho_solve`, `solve_triangular`, `eigh`, `solve(assume_a='pos')`,
...) or only a band (`solve_banded`), the entries it never reads have derivative zero. All
rules are written with differentiable operations, so every function here nests to any order
(Hessians, forward-over-reverse). Conventions for np.linalg's rules (distinct eigenvalues and
singular values for vector derivatives, full rank) are in `ops.linalg`.

>>> import numpy as np
>>> from tape import gradient, Reverse
>>> a = np.array([[1.0, 0.5], [0.0, 2.0]])
>>> g, = gradient(Reverse, lambda a: np.sum(expm(a) @ solve_triangular(a, np.ones(2))), a)
>>> g.shape
(2, 2)
"""
from __future__ import annotations

import numpy as np
import scipy.linalg

from ops._util import shape_of
from tape.core import primal
from tape.inactive_code import inactive

from .linalg_base import (Array, _as_array, _check_finite, _float_dtype, _matrix_rhs, _mT,
                          _refuse_complex, _square, _symmetric_from, _traced)
from .linalg_decomp import cho_factor, cho_solve, cholesky, lu_factor, lu_solve
from .linalg_matfuncs import expm, expm_frechet, sqrtm
from .linalg_solvers import solve_banded, solve_sylvester, solve_triangular

__all__ = ["expm", "expm_frechet", "sqrtm", "solve_triangular", "solve_banded",
           "solve_sylvester", "solve_continuous_lyapunov", "cholesky", "cho_factor",
           "cho_solve", "lu_factor", "lu_solve", "inv", "det", "solve", "eigh", "eigvalsh",
           "svd", "svdvals", "qr", "norm"]


def solve_continuous_lyapunov(a: Array, q: Array) -> Array:
    """Solve ``a x + x a^H = q``, as scipy.linalg.solve_continuous_lyapunov: the Sylvester
    equation with b = a^H, differentiable in a and q.

    >>> import numpy as np
    >>> solve_continuous_lyapunov(np.diag([1.0, 2.0]), np.diag([2.0, 8.0]))
    array([[1., 0.],
           [0., 2.]])
    """
    a, q = _as_array(a), _as_array(q)
    if not _traced(a, q):
        return scipy.linalg.solve_continuous_lyapunov(a, q)
    return solve_sylvester(a, _mT(np.conj(a) if np.iscomplexobj(a) else a), q)


def inv(a: Array, overwrite_a: bool = False, check_finite: bool = True) -> Array:
    """The inverse of a square matrix (or a stack), as scipy.linalg.inv; differentiable
    through np.linalg.inv's rule.

    >>> import numpy as np
    >>> inv(np.array([[2.0, 0.0], [0.0, 4.0]]))
    array([[0.5 , 0.  ],
           [0.  , 0.25]])
    """
    a = _as_array(a)
    if not _traced(a):
        return scipy.linalg.inv(a, check_finite=check_finite)
    _check_finite(check_finite, "inv", a)
    return np.linalg.inv(a)


def det(a: Array, overwrite_a: bool = False, check_finite: bool = True) -> Array:
    """The determinant of a square matrix (or a stack), as scipy.linalg.det.

    >>> import numpy as np
    >>> float(det(np.array([[2.0, 1.0], [1.0, 3.0]])))
    5.0
    """
    a = _as_array(a)
    if not _traced(a):
        return scipy.linalg.det(a, check_finite=check_finite)
    _check_finite(check_finite, "det", a)
    # SciPy computes determinants in double precision (float32 input gives float64).
    return np.linalg.det(a.astype(np.result_type(_float_dtype(a), np.float64)))


_GENERAL = {None, "gen", "general"}
_SYMMETRIC = {"sym", "symmetric", "her", "hermitian", "pos", "positive definite"}
_TRIANGULAR = {"lower triangular": True, "upper triangular": False}


def solve(a: Array, b: Array, lower: bool = False, overwrite_a: bool = False,
          overwrite_b: bool = False, check_finite: bool = True, assume_a: str | None = None,
          transposed: bool = False) -> Array:
    """Solve ``a x = b`` (``a^T x = b`` with `transposed`), as scipy.linalg.solve. A 1-D `b`
    is one right-hand side. With `assume_a` 'sym', 'her' or 'pos' only the `lower` (else
    upper) triangle of `a` is read, and only it gets a derivative (real matrices); 'lower
    triangular' / 'upper triangular' read one triangle, 'diagonal' the diagonal. Other
    `assume_a` values are not differentiated (NotImplementedError).

    >>> import numpy as np
    >>> a = np.array([[4.0, 99.0], [1.0, 2.0]])          # 99 is never read below
    >>> solve(a, np.array([6.0, 5.0]), assume_a="pos", lower=True)
    array([1., 2.])
    """
    a, b = _as_array(a), _as_array(b)
    if not _traced(a, b):
        return scipy.linalg.solve(a, b, lower=lower, check_finite=check_finite,
                                  assume_a=assume_a, transposed=transposed)
    _check_finite(check_finite, "solve", a, b)
    _square(a, "a", "solve")
    if transposed:
        a = _mT(a)
    if assume_a in _GENERAL:
        return _matrix_rhs(np.linalg.solve, a, b)
    if assume_a in _SYMMETRIC:
        _refuse_complex(f"solve(assume_a={assume_a!r})", a)
        return _matrix_rhs(np.linalg.solve, _symmetric_from(a, bool(lower) != transposed), b)
    if assume_a in _TRIANGULAR:
        return solve_triangular(a, b, lower=_TRIANGULAR[assume_a] != transposed,
                                check_finite=False)
    if assume_a == "diagonal":
        d = np.diagonal(a, axis1=-2, axis2=-1)
        return b / d if len(shape_of(b)) == 1 else b / d[..., :, None]
    raise NotImplementedError(f"solve: assume_a={assume_a!r} is not differentiated; use "
                              "'gen', 'sym', 'pos', 'lower triangular', 'upper triangular', "
                              "'diagonal', or solve_banded")


# -- eigh and svd: np.linalg's rules, with SciPy's triangle and SciPy's signs ------------------
def _signs_like(vectors, reference):
    """+-1 per column so that `vectors` (traced) point as SciPy's `reference` columns do:
    eigen- and singular vectors are unique up to sign, and the LAPACK drivers differ."""
    plain = np.asarray(primal(vectors))
    dots = np.sum(plain * np.conj(reference), axis=-2)
    return _unit_signs(np.real(dots) < 0, plain)


def _unit_signs(negative: np.ndarray, like: np.ndarray) -> np.ndarray:
    """-1 where `negative`, else +1, in the real dtype of `like` (float32 vectors stay float32)."""
    return np.where(negative, -1.0, 1.0).astype(np.real(like).dtype)


# SciPy's signs carry no derivative; as `inactive` steps, a compiled function computes them
# again at each call instead of guarding the matrix.
@inactive
def _eigh_signs(a, v, lower, driver):
    """The signs that turn the eigenvectors `v` of `a` into SciPy's."""
    return _signs_like(v, scipy.linalg.eigh(np.asarray(a), lower=lower, driver=driver)[1])


@inactive
def _svd_signs(a, u, full_matrices, lapack_driver):
    """The signs that turn the left singular vectors `u` of `a` (and its rows of Vh) into
    SciPy's."""
    ref_u = scipy.linalg.svd(np.asarray(a), full_matrices=full_matrices,
                             lapack_driver=lapack_driver)[0]
    return _signs_like(u, ref_u)


def _r_of(result):
    """SciPy's qr(mode='r') result: the tuple (R,) for one matrix, R itself for a stack."""
    return result[0] if isinstance(result, tuple) else result


@inactive
def _qr_signs(a, r):
    """The signs that turn R's rows (Q's columns) of `a` into SciPy's."""
    ref_r = _r_of(scipy.linalg.qr(np.asarray(a), mode="r"))
    diag = np.diagonal(np.asarray(r), axis1=-2, axis2=-1)
    ref_diag = np.diagonal(ref_r, axis1=-2, axis2=-1)[..., :np.shape(diag)[-1]]
    return _unit_signs(np.real(diag * np.conj(ref_diag)) < 0, diag)


def eigh(a: Array, b: Array | None = None, *, lower: bool = True, eigvals_only: bool = False,
         overwrite_a: bool = False, overwrite_b: bool = False, type: int = 1,
         check_finite: bool = True, subset_by_index=None, subset_by_value=None,
         driver: str | None = None):
    """Eigenvalues (ascending) and eigenvectors of a real symmetric matrix, as
    scipy.linalg.eigh: ``w, v`` or, with `eigvals_only`, ``w``. Only the `lower` (default)
    or upper triangle is read and differentiated; the eigenvectors have SciPy's signs.
    Eigenvector derivatives need distinct eigenvalues. The generalised problem (`b`) and
    subsets are not differentiated (NotImplementedError).

    >>> import numpy as np
    >>> from tape import gradient, Reverse
    >>> a = np.array([[2.0, 1.0], [1.0, 2.0]])
    >>> eigh(a, eigvals_only=True)
    array([1., 3.])
    >>> gradient(Reverse, lambda a: eigh(a, eigvals_only=True)[1], a)[0]   # lower triangle
    array([[0.5, 0. ],
           [1. , 0.5]])
    """
    a = _as_array(a)
    plain_kw = dict(lower=lower, eigvals_only=eigvals_only, type=type,
                    check_finite=check_finite, subset_by_index=subset_by_index,
                    subset_by_value=subset_by_value, driver=driver)
    if not _traced(a, b):
        return scipy.linalg.eigh(a, b, **plain_kw)
    _check_finite(check_finite, "eigh", a, b)
    if b is not None or subset_by_index is not None or subset_by_value is not None:
        raise NotImplementedError("eigh: the generalised problem (b) and eigenvalue subsets "
                                  "are not differentiated; call eigh(a) on the full matrix")
    _square(a, "a", "eigh")
    _refuse_complex("eigh", a)
    s = _symmetric_from(a, bool(lower))
    if eigvals_only:
        return np.linalg.eigvalsh(s)
    w, v = np.linalg.eigh(s)
    return w, v * _eigh_signs(a, v, lower, driver)[..., None, :]


def eigvalsh(a: Array, b: Array | None = None, *, lower: bool = True,
             overwrite_a: bool = False, overwrite_b: bool = False, type: int = 1,
             check_finite: bool = True, subset_by_index=None, subset_by_value=None,
             driver: str | None = None) -> Array:
    """Eigenvalues of a real symmetric matrix, as scipy.linalg.eigvalsh (see `eigh`).

    >>> import numpy as np
    >>> eigvalsh(np.array([[2.0, 1.0], [1.0, 2.0]]))
    array([1., 3.])
    """
    return eigh(a, b, lower=lower, eigvals_only=True, type=type, check_finite=check_finite,
                subset_by_index=subset_by_index, subset_by_value=subset_by_value,
                driver=driver)


def svd(a: Array, full_matrices: bool = True, compute_uv: bool = True,
        overwrite_a: bool = False, check_finite: bool = True, lapack_driver: str = "gesdd"):
    """``U, s, Vh`` (or ``s`` without `compute_uv`), as scipy.linalg.svd, with SciPy's
    signs; differentiable through np.linalg.svd's rule, which needs full_matrices=False for a
    non-square `a` (SciPy's default is True) and distinct nonzero singular values for U and Vh.

    >>> import numpy as np
    >>> svd(np.diag([3.0, 2.0]), compute_uv=False)
    array([3., 2.])
    """
    a = _as_array(a)
    if not _traced(a):
        return scipy.linalg.svd(a, full_matrices=full_matrices, compute_uv=compute_uv,
                                check_finite=check_finite, lapack_driver=lapack_driver)
    _check_finite(check_finite, "svd", a)
    if not compute_uv:
        return np.linalg.svd(a, compute_uv=False)
    u, s, vh = np.linalg.svd(a, full_matrices=full_matrices)
    signs = _svd_signs(a, u, full_matrices, lapack_driver)
    return u * signs[..., None, :], s, vh * signs[..., :, None]


def svdvals(a: Array, overwrite_a: bool = False, check_finite: bool = True) -> Array:
    """The singular values of `a`, descending, as scipy.linalg.svdvals.

    >>> import numpy as np
    >>> svdvals(np.array([[0.0, 2.0], [1.0, 0.0]]))
    array([2., 1.])
    """
    a = _as_array(a)
    if not _traced(a):
        return scipy.linalg.svdvals(a, check_finite=check_finite)
    _check_finite(check_finite, "svdvals", a)
    return np.linalg.svd(a, compute_uv=False)


_QR_MODES = {"full": "complete", "economic": "reduced"}


def qr(a: Array, overwrite_a: bool = False, lwork: int | None = None, mode: str = "full",
       pivoting: bool = False, check_finite: bool = True):
    """QR factorisation as scipy.linalg.qr: ``Q, R`` for mode 'full' (default) or
    'economic', ``(R,)`` for mode 'r'; R's diagonal has SciPy's signs. Differentiable through
    np.linalg.qr's rule (full rank, m >= n; mode 'full' only for square `a`). Pivoting and
    mode 'raw' are not differentiated (NotImplementedError).

    >>> import numpy as np
    >>> q, r = qr(np.array([[3.0, 1.0], [4.0, 2.0]]))
    >>> bool(np.allclose(q @ r, [[3.0, 1.0], [4.0, 2.0]]))
    True
    """
    a = _as_array(a)
    if not _traced(a):
        return scipy.linalg.qr(a, mode=mode, pivoting=pivoting, check_finite=check_finite)
    _check_finite(check_finite, "qr", a)
    if pivoting or mode not in ("full", "economic", "r"):
        raise NotImplementedError(f"qr: mode={mode!r} with pivoting={pivoting} is not "
                                  "differentiated; use mode 'full', 'economic' or 'r' without "
                                  "pivoting")
    m, n = shape_of(a)[-2:]
    q, r = np.linalg.qr(a, mode=_QR_MODES.get(mode, "reduced"))
    signs = _qr_signs(a, r)   # R's rows, Q's columns
    r = r * signs[..., :, None]
    if mode == "r":
        if m > n:   # SciPy's 'r' is the full (m, n) R
            r = np.concatenate([r, np.zeros(shape_of(r)[:-2] + (m - n, n), dtype=_float_dtype(r))],
                               axis=-2)
        return (r,) if len(shape_of(a)) == 2 else r   # as SciPy returns it
    return q * signs[..., None, :], r


def norm(a: Array, ord=None, axis=None, keepdims: bool = False,
         check_finite: bool = True) -> Array:
    """Matrix or vector norm, as scipy.linalg.norm (np.linalg.norm's rules).

    >>> import numpy as np
    >>> float(norm(np.array([3.0, 4.0])))
    5.0
    """
    a = _as_array(a)
    if not _traced(a):
        return scipy.linalg.norm(a, ord=ord, axis=axis, keepdims=keepdims,
                                 check_finite=check_finite)
    _check_finite(check_finite, "norm", a)
    return np.linalg.norm(a, ord=ord, axis=axis, keepdims=keepdims)
