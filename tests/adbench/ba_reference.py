"""ADBench's BA reprojection residual of one observation, written directly from its formula
(no Hecate): the reference the vectorised objective and its Jacobian are checked against."""
import numpy as np


def residual_one(cam, X, w, feat):
    """ADBench's reprojection residual of one observation, in NumPy functions that take
    complex arguments (for the complex step)."""
    rot, Xc = cam[0:3], X - cam[3:6]
    sqtheta = rot @ rot
    if sqtheta != 0:
        theta = np.sqrt(sqtheta)
        axis = rot / theta
        Xc = (Xc * np.cos(theta) + np.cross(axis, Xc) * np.sin(theta)
              + axis * (axis @ Xc) * (1 - np.cos(theta)))
    else:
        Xc = Xc + np.cross(rot, Xc)
    p = Xc[:2] / Xc[2]
    rsq = p @ p
    p = p * (1 + cam[9] * rsq + cam[10] * rsq * rsq)
    return w * (p * cam[6] + cam[7:9] - feat)
