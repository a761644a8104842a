"""The ADBench objectives for HIPS autograd: NumPy code on ``autograd.numpy``.

An autograd user writes NumPy, so these are the NumPy objectives of `gmm`, `lstm` and `ba`
with ``autograd.numpy`` imported as ``np``. Only BA differs in how the derivative is asked for:
``make_vjp`` records the residuals once and is then called with one seed per component.
"""
from __future__ import annotations

import math

import autograd
import autograd.numpy as np
import numpy

from . import ba as ba_numpy
from .gmm import lower_gather_index, multigammaln
from .runners import Prepared

# -- GMM --------------------------------------------------------------------------------------


def logsumexp(x, axis):
    mx = np.max(x, axis=axis, keepdims=True)
    return np.log(np.sum(np.exp(x - mx), axis=axis)) + np.squeeze(mx, axis=axis)


def gmm_objective(alphas, means, icf, x, gamma, m):
    n, d = x.shape
    K = alphas.shape[0]
    q, l = icf[:, :d], icf[:, d:]
    Qdiags = np.exp(q)
    sum_qs = np.sum(q, axis=1)
    Ls = np.concatenate([np.zeros((K, 1)), l], axis=1)[:, lower_gather_index(d)]
    xcentered = x[None, :, :] - means[:, None, :]
    Qxcentered = Qdiags[:, None, :] * xcentered + np.matmul(xcentered, np.swapaxes(Ls, 1, 2))
    inner = (alphas + sum_qs)[:, None] - 0.5 * np.sum(Qxcentered ** 2, axis=2)
    nw = d + m + 1
    prior = (np.sum(0.5 * gamma * gamma * (np.sum(Qdiags ** 2, axis=1) + np.sum(l ** 2, axis=1))
                    - m * sum_qs)
             - K * (nw * d * (math.log(gamma) - 0.5 * math.log(2)) - multigammaln(0.5 * nw, d)))
    return (-n * d * 0.5 * math.log(2 * math.pi) + np.sum(logsumexp(inner, axis=0))
            - n * logsumexp(alphas, axis=0) + prior)


def prepare_gmm(inp) -> Prepared:
    grad = autograd.grad(gmm_objective, argnum=(0, 1, 2))
    args = (inp.alphas, inp.means, inp.icf, inp.x, inp.gamma, inp.m)

    def derivative():
        return numpy.concatenate([g.ravel() for g in grad(*args)])
    return Prepared(lambda: gmm_objective(*args), derivative)

# -- LSTM -------------------------------------------------------------------------------------


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def lstm_cell(weight, bias, hidden, cell, x):
    gates = np.stack((x, hidden, x, hidden)) * weight + bias
    forget, ingate, outgate = sigmoid(gates[:3])
    change = np.tanh(gates[3])
    cell = cell * forget + ingate * change
    return outgate * np.tanh(cell), cell


def lstm_objective(main_params, extra_params, state, sequence):
    n_layers, b = main_params.shape[0] // 2, sequence.shape[1]
    params = np.reshape(main_params, (n_layers, 2, 4, b))
    layers = [(params[i, 0], params[i, 1]) for i in range(n_layers)]
    state = [(state[2 * i], state[2 * i + 1]) for i in range(n_layers)]
    in_weight, out_weight, out_bias = extra_params
    total = 0.0
    for t in range(sequence.shape[0] - 1):
        x = sequence[t] * in_weight
        new_state = []
        for (weight, bias), (hidden, cell) in zip(layers, state):
            hidden, cell = lstm_cell(weight, bias, hidden, cell, x)
            new_state.append((hidden, cell))
            x = hidden
        state = new_state
        ypred = x * out_weight + out_bias
        total = total + np.dot(sequence[t + 1], ypred - np.log(2 + np.sum(np.exp(ypred))))
    return -total / ((sequence.shape[0] - 1) * b)


def prepare_lstm(inp) -> Prepared:
    grad = autograd.grad(lstm_objective, argnum=(0, 1))
    args = (inp.main_params, inp.extra_params, inp.state, inp.sequence)

    def derivative():
        return numpy.concatenate([g.ravel() for g in grad(*args)])
    return Prepared(lambda: lstm_objective(*args), derivative)

# -- BA ---------------------------------------------------------------------------------------


def rodrigues_rotate_point(rot, X):
    sqtheta = np.sum(rot ** 2, axis=1, keepdims=True)
    nonzero = sqtheta != 0
    theta = np.sqrt(np.where(nonzero, sqtheta, 1.0))   # safe angle: see ba.py
    w = rot / theta
    costheta, sintheta = np.cos(theta), np.sin(theta)
    tmp = np.sum(w * X, axis=1, keepdims=True) * (1 - costheta)
    rotated = X * costheta + np.cross(w, X) * sintheta + w * tmp
    return np.where(nonzero, rotated, X + np.cross(rot, X))


def reproj_error(cams, X, w, feats):
    Xcam = rodrigues_rotate_point(cams[:, 0:3], X - cams[:, 3:6])
    proj = Xcam[:, :2] / Xcam[:, 2:]
    rsq = np.sum(proj ** 2, axis=1, keepdims=True)
    distorted = proj * (1 + cams[:, 9:10] * rsq + cams[:, 10:11] * rsq * rsq)
    return w[:, None] * (distorted * cams[:, 6:7] + cams[:, 7:9] - feats)


def prepare_ba(inp) -> Prepared:
    n, m, p = inp.sizes["n"], inp.sizes["m"], inp.sizes["p"]

    def objective():
        return (reproj_error(inp.cams[inp.obs[:, 0]], inp.X[inp.obs[:, 1]], inp.w, inp.feats),
                1 - inp.w ** 2)

    def derivative():
        cams, X = inp.cams[inp.obs[:, 0]], inp.X[inp.obs[:, 1]]
        vjp, _ = autograd.make_vjp(lambda c, x, w: reproj_error(c, x, w, inp.feats),
                                   argnum=(0, 1, 2))(cams, X, inp.w)
        blocks = numpy.empty((p, 2, 15))
        for j in range(2):
            seed = numpy.zeros((p, 2))
            seed[:, j] = 1.0
            dcams, dX, dw = vjp(seed)
            blocks[:, j, :11], blocks[:, j, 11:14], blocks[:, j, 14] = dcams, dX, dw
        dw_err = autograd.grad(lambda w: np.sum(1 - w ** 2))(inp.w)
        return ba_numpy.assemble(n, m, p, inp.obs, blocks, dw_err)
    return Prepared(objective, derivative)
