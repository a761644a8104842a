"""The ADBench objectives for JAX, written as a JAX user would, run with and without ``jax.jit``.

float64 (``jax_enable_x64``). Idiomatic JAX differs from the NumPy versions where JAX has a
better tool: ``.at[].set`` builds L, ``lax.scan`` runs the LSTM over time (a Python loop over
1023 steps would take minutes to compile under ``jit``), and BA differentiates a
per-observation residual with ``vmap(jacfwd(...))``. Without ``jit`` JAX dispatches op by op,
except that ``lax.scan`` compiles its body in any case (JAX's own behaviour), so the LSTM's
no-jit time measures a compiled loop body. Compilation happens in the warm-up call, which the
harness never times.
"""
from __future__ import annotations

import math

import numpy as np

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax.scipy.special import logsumexp  # noqa: E402

from . import ba as ba_numpy  # noqa: E402
from .gmm import multigammaln  # noqa: E402
from .runners import Prepared, lower_indices  # noqa: E402


def _ready_flat(grads):
    return np.concatenate([np.asarray(g).ravel() for g in jax.block_until_ready(grads)])


def _maybe_jit(f, use_jit, **kwargs):
    return jax.jit(f, **kwargs) if use_jit else f

# -- GMM --------------------------------------------------------------------------------------


def gmm_objective(alphas, means, icf, x, gamma, m):
    n, d = x.shape
    K = alphas.shape[0]
    q, l = icf[:, :d], icf[:, d:]
    Qdiags = jnp.exp(q)
    sum_qs = jnp.sum(q, axis=1)
    rows, cols = lower_indices(d)
    Ls = jnp.zeros((K, d, d)).at[:, rows, cols].set(l)
    xcentered = x[None, :, :] - means[:, None, :]
    Qxcentered = Qdiags[:, None, :] * xcentered + xcentered @ jnp.swapaxes(Ls, 1, 2)
    inner = (alphas + sum_qs)[:, None] - 0.5 * jnp.sum(Qxcentered ** 2, axis=2)
    nw = d + m + 1
    prior = (jnp.sum(0.5 * gamma * gamma * (jnp.sum(Qdiags ** 2, 1) + jnp.sum(l ** 2, 1))
                     - m * sum_qs)
             - K * (nw * d * (math.log(gamma) - 0.5 * math.log(2)) - multigammaln(0.5 * nw, d)))
    return (-n * d * 0.5 * math.log(2 * math.pi) + jnp.sum(logsumexp(inner, axis=0))
            - n * logsumexp(alphas) + prior)


def prepare_gmm(inp, use_jit: bool) -> Prepared:
    static = {"static_argnums": (4, 5)}
    f = _maybe_jit(gmm_objective, use_jit, **static)
    grad = _maybe_jit(jax.grad(gmm_objective, argnums=(0, 1, 2)), use_jit, **static)
    args = (jnp.asarray(inp.alphas), jnp.asarray(inp.means), jnp.asarray(inp.icf),
            jnp.asarray(inp.x), inp.gamma, inp.m)
    return Prepared(lambda: float(f(*args)), lambda: _ready_flat(grad(*args)))

# -- LSTM -------------------------------------------------------------------------------------


def lstm_cell(weight, bias, hidden, cell, x):
    gates = jnp.stack((x, hidden, x, hidden)) * weight + bias
    forget, ingate, outgate = jax.nn.sigmoid(gates[:3])
    change = jnp.tanh(gates[3])
    cell = cell * forget + ingate * change
    return outgate * jnp.tanh(cell), cell


def lstm_objective(main_params, extra_params, state, sequence):
    n_layers, b = main_params.shape[0] // 2, sequence.shape[1]
    params = main_params.reshape(n_layers, 2, 4, b)
    in_weight, out_weight, out_bias = extra_params

    def step(state, chars):
        current, following = chars
        x = current * in_weight
        new_state = []
        for i in range(n_layers):
            hidden, cell = lstm_cell(params[i, 0], params[i, 1], state[i, 0], state[i, 1], x)
            new_state.append(jnp.stack((hidden, cell)))
            x = hidden
        ypred = x * out_weight + out_bias
        term = jnp.dot(following, ypred - jnp.log(2 + jnp.sum(jnp.exp(ypred))))
        return jnp.stack(new_state), term

    _, terms = lax.scan(step, state.reshape(n_layers, 2, b), (sequence[:-1], sequence[1:]))
    return -jnp.sum(terms) / ((sequence.shape[0] - 1) * b)


def prepare_lstm(inp, use_jit: bool) -> Prepared:
    f = _maybe_jit(lstm_objective, use_jit)
    grad = _maybe_jit(jax.grad(lstm_objective, argnums=(0, 1)), use_jit)
    args = tuple(jnp.asarray(a) for a in
                 (inp.main_params, inp.extra_params, inp.state, inp.sequence))
    return Prepared(lambda: float(f(*args)), lambda: _ready_flat(grad(*args)))

# -- BA ---------------------------------------------------------------------------------------


def rodrigues_rotate_point(rot, X):
    sqtheta = jnp.sum(rot ** 2)
    nonzero = sqtheta != 0
    theta = jnp.sqrt(jnp.where(nonzero, sqtheta, 1.0))   # safe angle: see ba.py
    w = rot / theta
    costheta, sintheta = jnp.cos(theta), jnp.sin(theta)
    rotated = X * costheta + jnp.cross(w, X) * sintheta + w * (jnp.dot(w, X) * (1 - costheta))
    return jnp.where(nonzero, rotated, X + jnp.cross(rot, X))


def reproj_error(cam, X, w, feat):
    """One observation's weighted reprojection residual (2,)."""
    Xcam = rodrigues_rotate_point(cam[0:3], X - cam[3:6])
    proj = Xcam[:2] / Xcam[2]
    rsq = jnp.sum(proj ** 2)
    distorted = proj * (1 + cam[9] * rsq + cam[10] * rsq * rsq)
    return w * (distorted * cam[6] + cam[7:9] - feat)


def _ba_objective(cams, X, w, feats, cam_idx, point_idx):
    return jax.vmap(reproj_error)(cams[cam_idx], X[point_idx], w, feats), 1 - w ** 2


def _ba_blocks(cams, X, w, feats, cam_idx, point_idx):
    jac = jax.vmap(jax.jacfwd(reproj_error, argnums=(0, 1, 2)))
    dcams, dX, dw = jac(cams[cam_idx], X[point_idx], w, feats)      # (p,2,11) (p,2,3) (p,2)
    dw_err = jax.vmap(jax.grad(lambda wi: 1 - wi ** 2))(w)
    return jnp.concatenate([dcams, dX, dw[:, :, None]], axis=2), dw_err


def prepare_ba(inp, use_jit: bool) -> Prepared:
    n, m, p = inp.sizes["n"], inp.sizes["m"], inp.sizes["p"]
    f = _maybe_jit(_ba_objective, use_jit)
    blocks = _maybe_jit(_ba_blocks, use_jit)
    args = tuple(jnp.asarray(a) for a in
                 (inp.cams, inp.X, inp.w, inp.feats, inp.obs[:, 0], inp.obs[:, 1]))

    def objective():
        return jax.block_until_ready(f(*args))

    def derivative():
        b, dw_err = jax.block_until_ready(blocks(*args))
        return ba_numpy.assemble(n, m, p, inp.obs, np.asarray(b), np.asarray(dw_err))
    return Prepared(objective, derivative)
