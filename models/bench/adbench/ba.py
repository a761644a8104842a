"""ADBench's bundle-adjustment residuals in plain NumPy, and their sparse Jacobian with Hecate.

Observation i sees point X_j through camera c (11 parameters: angle-axis rotation r, centre C,
focal length f, principal point (u0, v0), radial distortion k1, k2):

    X' = rodrigues(r, X_j - C);  p = X'[:2] / X'[2];  p *= 1 + k1 |p|^2 + k2 |p|^4
    reprojection residual = w_i (f p + (u0, v0) - feature_i)   (2 per observation)
    weight residual       = 1 - w_i^2                          (1 per observation)

The residuals are computed for all p observations at once, on the camera and point rows that
each observation uses, laid out coordinate-major: a camera parameter or a point coordinate is
one row of p values (`CameraRows`, points (3, p)). Every step is then an elementwise operation
on contiguous rows, and a sum over the 3 coordinates adds 3 rows; NumPy is many times slower
at summing the short rows of a (p, 3) array, in the objective and in its reverse sweep alike.

The Jacobian (ADBench's layout: 2p reprojection rows then p weight rows; columns: 11 per
camera, 3 per point, 1 per weight) is sparse: reprojection row (i, j) depends only on the 11
parameters of observation i's camera, the 3 of its point and its weight. This module gets it
by **reverse mode, one sweep per residual component**: differentiating the vectorised
``sum_i residual_i[j]`` with respect to the gathered camera rows, point rows and weights gives,
in column i of each input gradient, exactly d residual_i[j] / d (camera, point, weight of i),
because no observation's residual depends on another observation's column. Two sweeps
(j = x, y) give all 15 nonzeros of the 2p reprojection rows; a third differentiates the
elementwise weight residual. The CSR pattern depends only on the observations, and is kept
from one call to the next while they are unchanged.

One primal pass and one reverse sweep with a batch of two cotangents (the residuals written
into a ``BatchDuplicated`` buffer whose shadows seed x and y) computes the same Jacobian; it
was about 10% faster eagerly on ADBench's ba1 but 30% slower on ba3 (p = 182072), and
`tape.compile` runs batched calls eagerly.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np

from tape import Active, Const, Duplicated, Reverse, autodiff, custom_rule

from .io import BAInput

N_CAM_PARAMS = 11
ROW_WIDTH = N_CAM_PARAMS + 4      # nonzeros of a reprojection row: camera, point, weight


# Hecate has no rule for np.cross, so this module registers one primitive the way Hecate's
# error message tells a user to: d(a x b) = da x b + a x db, hence the cotangents b x g and
# g x a. The rules compute with `cross` itself, so that they are differentiable again (an
# outer differentiation records them). `cross(a, b)` is np.cross(a, b, axis=0) for (3, p) a
# and b, written out row by row: np.cross moves the axis and is about 8x slower on such rows.
def _cross_rows(a, b):
    return np.stack([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2],
                     a[0] * b[1] - a[1] * b[0]])


def _cross_augmented(cfg, a, b):
    return cross(a, b), (a if cfg.active[1] else None, b if cfg.active[0] else None)


def _cross_reverse(cfg, saved, g):
    a, b = saved
    return (cross(b, g) if cfg.active[0] else None, cross(g, a) if cfg.active[1] else None)


def _cross_forward(cfg, primals, tangents):
    (a, b), (ta, tb) = primals, tangents
    t = None if ta is None else cross(ta, b)
    if tb is not None:
        t = cross(a, tb) if t is None else t + cross(a, tb)
    return cross(a, b), t


cross = custom_rule(_cross_rows, augmented_primal=_cross_augmented, reverse=_cross_reverse,
                    forward=_cross_forward, differentiable=True, name="cross")


class CameraRows(NamedTuple):
    """The camera parameters of p observations, one row (or rows) of p values per parameter."""
    rotation: np.ndarray         # (3, p) angle-axis
    centre: np.ndarray           # (3, p)
    focal: np.ndarray            # (p,)
    principal_point: np.ndarray  # (2, p)
    k1: np.ndarray               # (p,)
    k2: np.ndarray               # (p,)

    @classmethod
    def of(cls, rows: np.ndarray) -> "CameraRows":
        """Views of the 11 rows of `rows` (11, p), in ADBench's parameter order.

        >>> CameraRows.of(np.arange(22.0).reshape(11, 2)).k2.tolist()
        [20.0, 21.0]
        """
        return cls(rows[0:3], rows[3:6], rows[6], rows[7:9], rows[9], rows[10])


def gather(inp: BAInput) -> tuple[CameraRows, np.ndarray]:
    """The camera and the point of each observation, coordinate-major: (CameraRows, (3, p))."""
    return (CameraRows.of(np.take(inp.cams.T, inp.obs[:, 0], axis=1)),
            np.take(inp.X.T, inp.obs[:, 1], axis=1))


def rodrigues_rotate_point(rot: np.ndarray, X: np.ndarray) -> np.ndarray:
    """Rotate each column of X (3, p) by the angle-axis vector in the same column of rot.

    >>> quarter_turn_about_z = np.array([[0.0, 0.0], [0.0, 0.0], [np.pi / 2, 0.0]])
    >>> np.round(rodrigues_rotate_point(quarter_turn_about_z, np.eye(3)[:, :2]), 12).tolist()
    [[0.0, 0.0], [1.0, 1.0], [0.0, 0.0]]
    """
    sqtheta = np.sum(rot ** 2, axis=0)
    nonzero = sqtheta != 0
    # At angle 0 the small-angle form X + r x X is used. The general form is still evaluated
    # there (vectorised code computes both branches), on a safe angle of 1 so that neither its
    # value nor its derivative is a NaN that the unselected branch would carry into the result.
    # Without a zero angle (the usual case) the selection would change nothing: it is skipped
    # (a decision on traced values, which tape.compile checks at every replay).
    every = bool(np.all(nonzero))
    theta = np.sqrt(sqtheta if every else np.where(nonzero, sqtheta, 1.0))
    w = rot / theta
    costheta, sintheta = np.cos(theta), np.sin(theta)
    tmp = np.sum(w * X, axis=0) * (1 - costheta)
    rotated = X * costheta + cross(w, X) * sintheta + w * tmp
    if every:
        return rotated
    return np.where(nonzero, rotated, X + cross(rot, X))


def radial_distort(k1: np.ndarray, k2: np.ndarray, proj: np.ndarray) -> np.ndarray:
    """Apply the radial distortion 1 + k1 r^2 + k2 r^4 to each projected point (2, p)."""
    rsq = np.sum(proj ** 2, axis=0)
    return proj * (1 + k1 * rsq + k2 * rsq * rsq)


def project(cam: CameraRows, X: np.ndarray) -> np.ndarray:
    """Project each point X (3, p) with the camera in the same column: (2, p)."""
    Xcam = rodrigues_rotate_point(cam.rotation, X - cam.centre)
    distorted = radial_distort(cam.k1, cam.k2, Xcam[:2] / Xcam[2])
    return distorted * cam.focal + cam.principal_point


def reproj_error(cam: CameraRows, X: np.ndarray, w: np.ndarray, feats: np.ndarray) -> np.ndarray:
    """Weighted reprojection residuals (2, p) of observations with gathered cameras, points
    (3, p), weights (p,) and features (2, p)."""
    return w * (project(cam, X) - feats)


def weight_error(w: np.ndarray) -> np.ndarray:
    """The weight residuals 1 - w^2 (p,)."""
    return 1 - w ** 2


def objective(inp: BAInput):
    """ADBench's BA objective: the reprojection residuals (p, 2) and weight residuals (p,).

    >>> from models.bench.adbench import generate
    >>> reproj, w_err = objective(generate.random_ba(2, 3, 5, seed=0))
    >>> reproj.shape, w_err.shape
    ((5, 2), (5,))
    """
    cam, X = gather(inp)
    return reproj_error(cam, X, inp.w, inp.feats.T).T, weight_error(inp.w)


@dataclass
class SparseJacobian:
    """A CSR matrix, as ADBench stores the BA Jacobian."""
    nrows: int
    ncols: int
    indptr: np.ndarray     # (nrows + 1,)
    indices: np.ndarray    # column of each value, sorted within a row
    data: np.ndarray

    def todense(self) -> np.ndarray:
        dense = np.zeros((self.nrows, self.ncols))
        rows = np.repeat(np.arange(self.nrows), np.diff(self.indptr))
        dense[rows, self.indices] = self.data
        return dense


def _component(j: int) -> Callable:
    def f(cam, X, w, feats):
        return np.sum(reproj_error(cam, X, w, feats)[j])
    f.__name__ = f"reprojection_residual_{'xy'[j]}"
    return f


def _total_weight_error(w):
    return np.sum(weight_error(w))


_COMPONENTS = (_component(0), _component(1))


def jacobian(inp: BAInput, differentiate: Callable = autodiff) -> SparseJacobian:
    """The sparse Jacobian of `objective` by per-component reverse mode (module docstring).
    `differentiate` is `autodiff` or a compiled stand-in (`runners.compiled_autodiff`).

    >>> from models.bench.adbench import generate
    >>> J = jacobian(generate.random_ba(2, 3, 5, seed=0))
    >>> (J.nrows, J.ncols), J.data.size
    ((15, 36), 155)
    """
    n, m, p = inp.sizes["n"], inp.sizes["m"], inp.sizes["p"]
    cam, X = gather(inp)
    feats = inp.feats.T
    # grads[j, :, i]: the 15 nonzeros of reprojection row 2i + j, a row of p per parameter
    grads = np.zeros((2, ROW_WIDTH, p))
    for component, g in zip(_COMPONENTS, grads):
        differentiate(Reverse, component, Active, Duplicated(cam, CameraRows.of(g)),
                      Duplicated(X, g[N_CAM_PARAMS:N_CAM_PARAMS + 3]), Duplicated(inp.w, g[-1]),
                      Const(feats))
    indptr, indices = csr_pattern(n, m, p, inp.obs)
    data = np.empty(indices.size)
    data[:2 * p * ROW_WIDTH].reshape(p, 2, ROW_WIDTH)[...] = grads.transpose(2, 0, 1)
    dw_err = data[2 * p * ROW_WIDTH:]
    dw_err[...] = 0
    differentiate(Reverse, _total_weight_error, Active, Duplicated(inp.w, dw_err))
    return SparseJacobian(3 * p, N_CAM_PARAMS * n + 3 * m + p, indptr, indices, data)


class _Pattern(NamedTuple):
    sizes: tuple
    obs: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray


_last_pattern: list = [None]   # one slot, replaced whole (no lock needed to read or swap it)


def csr_pattern(n: int, m: int, p: int, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(indptr, indices) of the BA Jacobian in ADBench's layout: per reprojection row the 11
    camera columns, the 3 point columns and the weight column (in increasing order); one weight
    column per weight row. The last pattern is kept (read-only) and returned again while the
    sizes and the observations are equal to its own.

    >>> indptr, indices = csr_pattern(2, 1, 1, np.array([[1, 0]]))   # camera 1 sees point 0
    >>> indptr.tolist(), indices[:15].tolist(), int(indices[-1])
    ([0, 15, 30, 31], [11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25], 25)
    """
    obs = np.asarray(obs)
    last = _last_pattern[0]
    if last is not None and last.sizes == (n, m, p) and np.array_equal(last.obs, obs):
        return last.indptr, last.indices
    cam_cols = N_CAM_PARAMS * obs[:, :1] + np.arange(N_CAM_PARAMS)           # (p, 11)
    point_cols = N_CAM_PARAMS * n + 3 * obs[:, 1:] + np.arange(3)             # (p, 3)
    weight_cols = N_CAM_PARAMS * n + 3 * m + np.arange(p)                     # (p,)
    row_cols = np.concatenate([cam_cols, point_cols, weight_cols[:, None]], axis=1)
    indices = np.concatenate([np.repeat(row_cols[:, None, :], 2, axis=1).ravel(), weight_cols])
    indptr = np.concatenate([np.arange(0, 2 * p * ROW_WIDTH + 1, ROW_WIDTH),
                             2 * p * ROW_WIDTH + np.arange(1, p + 1)])
    for a in (indptr, indices):
        a.setflags(write=False)   # shared by the Jacobians of every call
    _last_pattern[0] = _Pattern((n, m, p), obs.copy(), indptr, indices)
    return indptr, indices


def assemble(n, m, p, obs, blocks, dw_err) -> SparseJacobian:
    """The CSR matrix (`csr_pattern`) of the reprojection rows' nonzeros `blocks` (p, 2, 15)
    and the weight rows' `dw_err` (p,)."""
    indptr, indices = csr_pattern(n, m, p, obs)
    data = np.concatenate([np.asarray(blocks).ravel(), dw_err])
    return SparseJacobian(3 * p, N_CAM_PARAMS * n + 3 * m + p, indptr, indices, data)
