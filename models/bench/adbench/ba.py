"""ADBench's bundle-adjustment residuals in plain NumPy, and their sparse Jacobian with Hecate.

Observation i sees point X_j through camera c (11 parameters: angle-axis rotation r, centre C,
focal length f, principal point (u0, v0), radial distortion k1, k2):

    X' = rodrigues(r, X_j - C);  p = X'[:2] / X'[2];  p *= 1 + k1 |p|^2 + k2 |p|^4
    reprojection residual = w_i (f p + (u0, v0) - feature_i)   (2 per observation)
    weight residual       = 1 - w_i^2                          (1 per observation)

The residuals are computed for all p observations at once, on the camera and point rows that
each observation uses (gathered with ``cams[obs[:, 0]]``, ``X[obs[:, 1]]``).

The Jacobian (ADBench's layout: 2p reprojection rows then p weight rows; columns: 11 per
camera, 3 per point, 1 per weight) is sparse: reprojection row (i, j) depends only on the 11
parameters of observation i's camera, the 3 of its point and its weight. This module gets it
by **reverse mode, one sweep per residual component**: differentiating the vectorised
``sum_i residual_i[j]`` with respect to the gathered (p, 11), (p, 3) and (p,) inputs gives,
in row i of each input gradient, exactly d residual_i[j] / d (camera, point, weight of i),
because no observation's residual depends on another observation's row. Two sweeps (j = x, y)
give all 15 nonzeros of the 2p reprojection rows; a third sweep differentiates the elementwise
weight residual. This is per-observation reverse mode, vectorised over observations.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tape import Active, Const, Duplicated, Reverse, autodiff, custom_rule

from .io import BAInput

N_CAM_PARAMS = 11


# Hecate has no rule for np.cross (np.linalg.cross has one, spelled out in several recorded
# elementwise ops), so this module registers one primitive the way Hecate's error message tells
# a user to: d(a x b) = da x b + a x db, hence the cotangents b x g and g x a. The rules compute
# with `cross` itself, so that they are differentiable again (an outer differentiation records
# them).
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


cross = custom_rule(np.cross, augmented_primal=_cross_augmented, reverse=_cross_reverse,
                    forward=_cross_forward, differentiable=True, name="cross")


def rodrigues_rotate_point(rot, X):
    """Rotate each row of X (p, 3) by the angle-axis vector in the same row of rot (p, 3)."""
    sqtheta = np.sum(rot ** 2, axis=1, keepdims=True)
    nonzero = sqtheta != 0
    # At angle 0 the small-angle form X + r x X is used. The general form is still evaluated
    # there (vectorised code computes both branches), on a safe angle of 1 so that neither its
    # value nor its derivative is a NaN that the unselected branch would carry into the result.
    theta = np.sqrt(np.where(nonzero, sqtheta, 1.0))
    w = rot / theta
    costheta, sintheta = np.cos(theta), np.sin(theta)
    w_cross_X = cross(w, X)
    tmp = np.sum(w * X, axis=1, keepdims=True) * (1 - costheta)
    rotated = X * costheta + w_cross_X * sintheta + w * tmp
    return np.where(nonzero, rotated, X + cross(rot, X))


def radial_distort(rad_params, proj):
    """Apply the radial distortion 1 + k1 r^2 + k2 r^4 to each projected point (p, 2)."""
    rsq = np.sum(proj ** 2, axis=1, keepdims=True)
    return proj * (1 + rad_params[:, :1] * rsq + rad_params[:, 1:] * rsq * rsq)


def project(cams, X):
    """Project each point X (p, 3) with the camera (p, 11) in the same row."""
    Xcam = rodrigues_rotate_point(cams[:, 0:3], X - cams[:, 3:6])
    distorted = radial_distort(cams[:, 9:11], Xcam[:, :2] / Xcam[:, 2:])
    return distorted * cams[:, 6:7] + cams[:, 7:9]


def reproj_error(cams, X, w, feats):
    """Weighted reprojection residuals (p, 2) of observations with gathered cameras and points."""
    return w[:, None] * (project(cams, X) - feats)


def weight_error(w):
    """The weight residuals 1 - w^2 (p,)."""
    return 1 - w ** 2


def objective(inp: BAInput):
    """ADBench's BA objective: the reprojection residuals (p, 2) and weight residuals (p,)."""
    return (reproj_error(inp.cams[inp.obs[:, 0]], inp.X[inp.obs[:, 1]], inp.w, inp.feats),
            weight_error(inp.w))


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


def _component(j):
    def f(cams, X, w, feats):
        return np.sum(reproj_error(cams, X, w, feats)[:, j])
    return f


def _total_weight_error(w):
    return np.sum(weight_error(w))


_COMPONENTS = (_component(0), _component(1))


def jacobian(inp: BAInput, differentiate=autodiff) -> SparseJacobian:
    """The sparse Jacobian of `objective` by per-component reverse mode (module docstring).
    `differentiate` is `autodiff` or a compiled stand-in (`runners.compiled_autodiff`)."""
    n, m, p = inp.sizes["n"], inp.sizes["m"], inp.sizes["p"]
    cams, X = inp.cams[inp.obs[:, 0]], inp.X[inp.obs[:, 1]]
    # blocks[i, j] = the 15 nonzeros of reprojection row 2i + j: camera, point, weight
    blocks = np.empty((p, 2, N_CAM_PARAMS + 4))
    for j in range(2):
        dcams, dX, dw = np.zeros_like(cams), np.zeros_like(X), np.zeros_like(inp.w)
        differentiate(Reverse, _COMPONENTS[j], Active, Duplicated(cams, dcams), Duplicated(X, dX),
                 Duplicated(inp.w, dw), Const(inp.feats))
        blocks[:, j, :N_CAM_PARAMS] = dcams
        blocks[:, j, N_CAM_PARAMS:N_CAM_PARAMS + 3] = dX
        blocks[:, j, -1] = dw
    dw_err = np.zeros_like(inp.w)
    differentiate(Reverse, _total_weight_error, Active, Duplicated(inp.w, dw_err))
    return assemble(n, m, p, inp.obs, blocks, dw_err)


def assemble(n, m, p, obs, blocks, dw_err) -> SparseJacobian:
    """CSR in ADBench's layout: per reprojection row the 11 camera columns, the 3 point columns
    and the weight column (in increasing order); one weight column per weight row."""
    cam_cols = N_CAM_PARAMS * obs[:, :1] + np.arange(N_CAM_PARAMS)           # (p, 11)
    point_cols = N_CAM_PARAMS * n + 3 * obs[:, 1:] + np.arange(3)             # (p, 3)
    weight_cols = N_CAM_PARAMS * n + 3 * m + np.arange(p)                     # (p,)
    row_cols = np.concatenate([cam_cols, point_cols, weight_cols[:, None]], axis=1)
    indices = np.concatenate([np.repeat(row_cols[:, None, :], 2, axis=1).ravel(), weight_cols])
    data = np.concatenate([blocks.ravel(), dw_err])
    width = N_CAM_PARAMS + 4
    indptr = np.concatenate([np.arange(0, 2 * p * width + 1, width),
                             2 * p * width + np.arange(1, p + 1)])
    return SparseJacobian(3 * p, N_CAM_PARAMS * n + 3 * m + p, indptr, indices, data)
