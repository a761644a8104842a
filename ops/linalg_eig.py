"""np.linalg.eig and eigvals: A V = V diag(w) for a general (real or complex) square matrix.

Assumes distinct eigenvalues: the derivatives divide by w_j - w_i (inf/nan where two coincide).
With M = V^-1 dA V and F_ij = 1 / (w_j - w_i) off the diagonal (0 on it):

    dw = diag(M),   dV = V (F o M) + V diag(c)

where c fixes the normalisation LAPACK gives each column (geev: unit 2-norm, the entry of
largest modulus real): Re c_j = -Re(v_j^H dv0_j) keeps the norm, Im c_j = -Im(dv0_kj) / v_kj
keeps the entry k of largest modulus real (dv0 = V (F o M)). For complex input, where LAPACK
makes that entry real and positive, eigenvector derivatives match differences of NumPy's own
output wherever that entry does not change (ties in modulus are where the normalisation jumps).
For real input the sign of each vector is left to the algorithm and jumps: under
perturbations of 1e-6 in 2.5% of random 2x2 to 5x5 matrices (complex-pair vectors), and between
an input that is already upper Hessenberg and its neighbours (real-eigenvalue vectors too). So
only sign-invariant functions of the vectors (v**2, v v^T, V diag(k) V^-1) are differentiable
there; the rule gives the derivative with the sign of the vector returned held fixed. The
reverse rules are the adjoints in the transpose convention (docs/complex.md).

For real input NumPy returns real results when every eigenvalue is real and complex ones
otherwise; the rules follow the dtype NumPy chose, and a real input gets the real part of its
cotangent.
"""
from __future__ import annotations

import numpy as np

from tape.backend import array_module
from tape.core import primal
from tape.rules import register_function

from ._util import add_tangents, defprimitive
from .linalg import solve
from .linalg_common import (EigResult, _cj, _diag, _diag_embed, _gap_inverse, _mT, _re,
                            check_square)


def _largest_entry(v):
    """A constant 0/1 mask marking, in each column, the entry of largest modulus."""
    value = primal(v)
    xp = array_module(value)
    k = xp.argmax(xp.abs(value), axis=-2)
    n = value.shape[-2]
    return (xp.arange(n)[:, None] == k[..., None, :]).astype(np.finfo(value.dtype).dtype)


def _eigenvector_tangent(w, v, m, mask):
    """dV from M = V^-1 dA V, in LAPACK's normalisation."""
    dv0 = v @ (_gap_inverse(w) * m)
    c = -_re(np.sum(_cj(v) * dv0, axis=-2))
    if np.iscomplexobj(v):
        vk = np.real(np.sum(mask * v, axis=-2))
        c = c - 1j * np.imag(np.sum(mask * dv0, axis=-2)) / vk
    return dv0 + v * c[..., None, :]


def _eig_augmented(cfg, a):
    w, v = eig(a)
    return (w, v), (w, v, _largest_entry(v), np.iscomplexobj(a))


def _eig_reverse(cfg, saved, g):
    w, v, mask, complex_input = saved
    gw, gv = g
    if not np.iscomplexobj(w):        # real results: only the real part of g belongs to them
        gw, gv = _re(gw) if gw is not None else None, _re(gv) if gv is not None else None
    gm = None if gw is None else _diag_embed(gw)           # the cotangent of M
    if gv is not None:
        s = np.sum(gv * v, axis=-2)                        # diag(V^T gV): the scale c's share
        g0 = gv - _cj(v) * _re(s)[..., None, :]
        if np.iscomplexobj(v):
            vk = np.real(np.sum(mask * v, axis=-2))
            g0 = g0 - 1j * mask * (np.imag(s) / vk)[..., None, :]
        gm = add_tangents(gm, _gap_inverse(w) * (_mT(v) @ g0))
    ga = solve(_mT(v), gm @ _mT(v))                       # V^-T gM V^T
    return (ga if complex_input else _re(ga),)


def _eig_forward(cfg, primals, tangents):
    w, v = eig(primals[0])
    m = solve(v, tangents[0] @ v)
    return (w, v), (_diag(m), _eigenvector_tangent(w, v, m, _largest_entry(v)))


eig = defprimitive("eig", lambda a: tuple(np.linalg.eig(a)), _eig_augmented, _eig_reverse,
                   _eig_forward, multiple_results=True)


def _eig(a, /):
    check_square(a, "np.linalg.eig")
    return EigResult(*eig(a))


register_function(np.linalg.eig, _eig)


# eigenvalues only. LAPACK's geev computes the same eigenvalues, in the same order, with and
# without vectors, so the vectors the rules need come from eig.
def _eigvals_augmented(cfg, a):
    w, v = eig(a)
    return w, (w, v, np.iscomplexobj(a))


def _eigvals_reverse(cfg, saved, g):
    w, v, complex_input = saved
    if not np.iscomplexobj(w):
        g = _re(g)
    ga = solve(_mT(v), g[..., :, None] * _mT(v))          # V^-T diag(g) V^T
    return (ga if complex_input else _re(ga),)


def _eigvals_forward(cfg, primals, tangents):
    w, v = eig(primals[0])
    return w, _diag(solve(v, tangents[0] @ v))


eigvals = defprimitive("eigvals", lambda a: np.linalg.eig(a)[0], _eigvals_augmented,
                       _eigvals_reverse, _eigvals_forward)


def _eigvals(a, /):
    check_square(a, "np.linalg.eigvals")
    return eigvals(a)


register_function(np.linalg.eigvals, _eigvals)
