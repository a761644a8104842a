"""Helpers shared by the np.linalg rules: batch-aware matrix algebra written with differentiable
NumPy calls, complex conjugation that costs nothing on real values, and the map from a matrix to
the Hermitian matrix that LAPACK sees when it reads one triangle only.

Complex rules use the transpose convention of docs/complex.md: a reverse rule is the adjoint of
the forward rule under the pairing Re(sum(cotangent * tangent)), with no conjugation. So a
C-linear step (matmul, solve) transposes, and a conjugate-linear one (conj, ^H) conjugates.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from tape.backend import array_module
from tape.core import Tracer, primal

from ._util import shape_of

EigResult = namedtuple("EigResult", "eigenvalues eigenvectors")
EighResult = namedtuple("EighResult", "eigenvalues eigenvectors")
SVDResult = namedtuple("SVDResult", "U S Vh")
QRResult = namedtuple("QRResult", "Q R")
SlogdetResult = namedtuple("SlogdetResult", "sign logabsdet")


def _mT(x):
    """Swap the last two axes."""
    nd = len(shape_of(x))
    return np.transpose(x, tuple(range(nd - 2)) + (nd - 1, nd - 2))


def _cj(x):
    """conj(x); a real value is returned as it is (no record on the tape)."""
    return np.conj(x) if np.iscomplexobj(x) else x


def _re(x):
    """The real part of a complex value; a real value as it is. A real result's cotangent may
    arrive complex (docs/complex.md): only its real part belongs to the result."""
    return np.real(x) if np.iscomplexobj(x) else x


def _mH(x):
    """The conjugate transpose of each matrix of a stack."""
    return _cj(_mT(x))


def _eye(n, like):
    return array_module(like).eye(n, dtype=like.dtype)


def _real_dtype(like):
    return np.finfo(like.dtype).dtype if like.dtype.kind in "fc" else np.dtype(np.float64)


def _real_eye(n, like):
    """The identity matrix in the real dtype of `like` (it multiplies real and complex alike)."""
    return array_module(like).eye(n, dtype=_real_dtype(like))


def _tril_mask(n, like, k=0):
    """A real 0/1 matrix: ones on and below the k-th diagonal."""
    xp = array_module(like)
    return xp.tril(xp.ones((n, n), dtype=_real_dtype(like)), k)


def _diag(x):
    """The diagonal of each matrix of a stack."""
    return np.sum(x * _real_eye(shape_of(x)[-1], x), axis=-1)


def _diag_embed(v):
    """Diagonal matrices with the vectors of `v` on their diagonals."""
    return v[..., :, None] * _real_eye(shape_of(v)[-1], v)


def _expand2(x):
    """Append two unit axes, so that a value per matrix broadcasts against the matrices."""
    return np.reshape(x, shape_of(x) + (1, 1))


def _gap_inverse(w):
    """F[..., i, j] = 1 / (w_j - w_i) off the diagonal, 0 on it (w real or complex). A gap
    within rounding of the values (1000 eps of the largest) counts as none: its inverse is
    inf, so that a derivative through a double eigenvalue comes out inf or NaN, as at an exact
    one, rather than finite noise (a double eigenvalue as rounding leaves it, 1e-15 apart)."""
    eye = _eye(shape_of(w)[-1], w)
    gaps = w[..., None, :] - w[..., :, None]
    v = primal(w)
    xp = array_module(v)
    scale = xp.max(xp.abs(v), axis=-1, keepdims=True)[..., None] if v.size else 0.0
    tiny = 1000 * float(xp.finfo(v.dtype).eps) * scale
    none = (xp.abs(primal(gaps)) <= tiny) & (primal(eye) == 0)
    with np.errstate(divide="ignore"):
        return (1 - eye) / (~none).astype(_real_dtype(v)) / (gaps + eye)


def _as_array(x):
    # np.array, not np.asarray: a list holding traced values becomes a traced array (np.array
    # is Hecate's while something is traced).
    return x if isinstance(x, Tracer) or hasattr(x, "shape") else np.array(x)


def _hermitian(hermitian):
    # CuPy's svd has no `hermitian` keyword: pass it only when it matters.
    return {"hermitian": True} if hermitian else {}


def _uplo_lower(UPLO: str, where: str) -> bool:
    """True for UPLO='L', False for 'U' (either case, as NumPy accepts)."""
    uplo = UPLO.upper() if isinstance(UPLO, str) else UPLO
    if uplo not in ("L", "U"):
        raise ValueError(f"{where}: UPLO must be 'L' or 'U', got {UPLO!r}")
    return uplo == "L"


# -- one triangle: eigh, eigvalsh, cholesky and the hermitian=True paths read only one triangle of
# their input (the diagonal's imaginary part is ignored), so they compute a function of that
# triangle. Their derivatives go through the map below and its adjoint, which makes them right
# for any input, symmetric or not.
def _strict_mask(n, like, lower):
    mask = _tril_mask(n, like, -1)
    return mask if lower else _mT(mask)


def hermitian_from_triangle(x, lower: bool):
    """The Hermitian (real: symmetric) matrix whose `lower` (else upper) triangle is x's: the
    strict triangle, its conjugate mirrored, and the real part of the diagonal.

    >>> hermitian_from_triangle(np.array([[1.0, 9.0], [2.0, 3.0]]), lower=True)
    array([[1., 2.],
           [2., 3.]])
    """
    n = shape_of(x)[-1]
    strict = x * _strict_mask(n, x, lower)
    return strict + _mH(strict) + _re(x) * _real_eye(n, x)


def triangle_adjoint(g, lower: bool):
    """The adjoint of `hermitian_from_triangle` (transpose convention): a cotangent of the
    Hermitian matrix becomes one of the input, zero on the triangle that is not read.

    >>> triangle_adjoint(np.array([[1.0, 4.0], [2.0, 3.0]]), lower=True)
    array([[1., 0.],
           [6., 3.]])
    """
    n = shape_of(g)[-1]
    return ((g + _mH(g)) * _strict_mask(n, g, lower)
            + _re(g) * _real_eye(n, g))


def check_square(a, where: str) -> None:
    """Raise np.linalg.LinAlgError unless `a` is a stack of square matrices (as NumPy does)."""
    shape = shape_of(a)
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise np.linalg.LinAlgError(
            f"{where}: expected a square matrix or a stack of them (last two dimensions "
            f"equal), got shape {shape}")
