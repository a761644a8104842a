"""The ADBench objectives for PyTorch eager mode, written as a PyTorch user would.

float64 tensors; the objective is timed under ``torch.no_grad()`` (no graph is built), the
gradient as a forward pass with ``requires_grad`` leaves plus ``torch.autograd.grad``. For BA,
one forward pass is followed by one backward pass per residual component
(``retain_graph=True``): the per-observation blocks come out of the gradients with respect to
the gathered camera and point rows, as in `ba.py`.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from . import ba as ba_numpy
from .gmm import multigammaln
from .runners import Prepared, lower_indices


def _t(a, grad=False):
    return torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=grad)


def _flat(grads):
    return torch.cat([g.reshape(-1) for g in grads]).numpy()

# -- GMM --------------------------------------------------------------------------------------


def gmm_objective(alphas, means, icf, x, gamma, m):
    n, d = x.shape
    K = alphas.shape[0]
    q, l = icf[:, :d], icf[:, d:]
    Qdiags = torch.exp(q)
    sum_qs = q.sum(1)
    rows, cols = lower_indices(d)
    Ls = icf.new_zeros((K, d, d))
    Ls[:, rows, cols] = l
    xcentered = x[None, :, :] - means[:, None, :]
    Qxcentered = Qdiags[:, None, :] * xcentered + xcentered @ Ls.transpose(1, 2)
    inner = (alphas + sum_qs)[:, None] - 0.5 * (Qxcentered ** 2).sum(2)
    nw = d + m + 1
    prior = ((0.5 * gamma * gamma * ((Qdiags ** 2).sum(1) + (l ** 2).sum(1)) - m * sum_qs).sum()
             - K * (nw * d * (math.log(gamma) - 0.5 * math.log(2)) - multigammaln(0.5 * nw, d)))
    return (-n * d * 0.5 * math.log(2 * math.pi) + torch.logsumexp(inner, 0).sum()
            - n * torch.logsumexp(alphas, 0) + prior)


def prepare_gmm(inp) -> Prepared:
    params = [_t(inp.alphas, True), _t(inp.means, True), _t(inp.icf, True)]
    x = _t(inp.x)

    def objective():
        with torch.no_grad():
            return gmm_objective(*params, x, inp.gamma, inp.m).item()

    def derivative():
        return _flat(torch.autograd.grad(gmm_objective(*params, x, inp.gamma, inp.m), params))
    return Prepared(objective, derivative)

# -- LSTM -------------------------------------------------------------------------------------


def lstm_cell(weight, bias, hidden, cell, x):
    gates = torch.stack((x, hidden, x, hidden)) * weight + bias
    forget, ingate, outgate = torch.sigmoid(gates[:3])
    change = torch.tanh(gates[3])
    cell = cell * forget + ingate * change
    return outgate * torch.tanh(cell), cell


def lstm_objective(main_params, extra_params, state, sequence):
    n_layers, b = main_params.shape[0] // 2, sequence.shape[1]
    params = main_params.reshape(n_layers, 2, 4, b)
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
        total = total + torch.dot(sequence[t + 1], ypred - torch.log(2 + torch.exp(ypred).sum()))
    return -total / ((sequence.shape[0] - 1) * b)


def prepare_lstm(inp) -> Prepared:
    params = [_t(inp.main_params, True), _t(inp.extra_params, True)]
    state, sequence = _t(inp.state), _t(inp.sequence)

    def objective():
        with torch.no_grad():
            return lstm_objective(*params, state, sequence).item()

    def derivative():
        return _flat(torch.autograd.grad(lstm_objective(*params, state, sequence), params))
    return Prepared(objective, derivative)

# -- BA ---------------------------------------------------------------------------------------


def rodrigues_rotate_point(rot, X):
    sqtheta = (rot ** 2).sum(1, keepdim=True)
    nonzero = sqtheta != 0
    theta = torch.sqrt(torch.where(nonzero, sqtheta, torch.ones_like(sqtheta)))  # see ba.py
    w = rot / theta
    costheta, sintheta = torch.cos(theta), torch.sin(theta)
    tmp = (w * X).sum(1, keepdim=True) * (1 - costheta)
    rotated = X * costheta + torch.linalg.cross(w, X) * sintheta + w * tmp
    return torch.where(nonzero, rotated, X + torch.linalg.cross(rot, X))


def reproj_error(cams, X, w, feats):
    Xcam = rodrigues_rotate_point(cams[:, 0:3], X - cams[:, 3:6])
    proj = Xcam[:, :2] / Xcam[:, 2:]
    rsq = (proj ** 2).sum(1, keepdim=True)
    distorted = proj * (1 + cams[:, 9:10] * rsq + cams[:, 10:11] * rsq * rsq)
    return w[:, None] * (distorted * cams[:, 6:7] + cams[:, 7:9] - feats)


def prepare_ba(inp) -> Prepared:
    n, m, p = inp.sizes["n"], inp.sizes["m"], inp.sizes["p"]
    cams, X, w, feats = _t(inp.cams), _t(inp.X), _t(inp.w, True), _t(inp.feats)
    cam_idx, point_idx = torch.from_numpy(inp.obs[:, 0]), torch.from_numpy(inp.obs[:, 1])

    def objective():
        with torch.no_grad():
            return reproj_error(cams[cam_idx], X[point_idx], w, feats).numpy(), (1 - w ** 2).numpy()

    def derivative():
        obs_cams = cams[cam_idx].requires_grad_(True)
        obs_X = X[point_idx].requires_grad_(True)
        err = reproj_error(obs_cams, obs_X, w, feats)
        blocks = np.empty((p, 2, 15))
        for j in range(2):
            dcams, dX, dw = torch.autograd.grad(err[:, j].sum(), (obs_cams, obs_X, w),
                                                retain_graph=j == 0)
            blocks[:, j, :11], blocks[:, j, 11:14], blocks[:, j, 14] = dcams, dX, dw
        dw_err, = torch.autograd.grad((1 - w ** 2).sum(), w)
        return ba_numpy.assemble(n, m, p, inp.obs, blocks, dw_err.numpy())
    return Prepared(objective, derivative)
