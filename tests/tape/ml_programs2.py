"""Machine-learning programs ported from PyTorch/JAX tutorials to plain NumPy, for
tests/tape/test_ml_user_programs_redteam2.py.

``PROGRAMS``: name -> (f, params, consts, change); ``f(params, *consts)`` returns a scalar,
``params`` (an array or a dict of arrays) is differentiated, ``consts`` are the data, and
``change(consts)`` changes one of them in place (a data loader reusing its buffers).
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

import tape
from tape import Duplicated, Forward, Reverse, autodiff

RNG = np.random.default_rng(20)


def _normal(*shape, scale=1.0):
    return RNG.normal(size=shape) * scale


# -- the programs ---------------------------------------------------------------------------------
def _layer_norm(x, g, b):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * g + b


def _gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def transformer_block(p, x):
    """Pre-LN block: fused qkv split, two heads, causal mask by np.triu and np.where(-inf)."""
    B, T, D = x.shape
    q, k, v = np.split(_layer_norm(x, p["g1"], p["b1"]) @ p["Wqkv"], 3, axis=-1)
    q, k, v = (a.reshape(B, T, 2, D // 2).transpose(0, 2, 1, 3) for a in (q, k, v))
    s = np.where(np.triu(np.ones((T, T)), k=1).astype(bool), -np.inf,
                 q @ k.swapaxes(-2, -1) / np.sqrt(D // 2))
    a = np.exp(s - s.max(-1, keepdims=True))
    a = a / a.sum(-1, keepdims=True)
    x = x + (a @ v).transpose(0, 2, 1, 3).reshape(B, T, D) @ p["Wo"]
    return np.sum((x + _gelu(_layer_norm(x, p["g2"], p["b2"]) @ p["W1"]) @ p["W2"]) ** 2) / x.size


def conv1d_net(p, x, y):
    """Two 1-d convolutions by sliding_window_view + einsum, ReLU, padding, mean pooling."""
    h = np.einsum("bclk,ock->bol", sliding_window_view(x, 3, axis=-1), p["w1"])
    h = np.maximum(h + p["b1"][None, :, None], 0.0)
    win = sliding_window_view(np.pad(h, ((0, 0), (0, 0), (1, 1))), 3, axis=2)
    return np.mean((np.einsum("bclk,ock->bol", win, p["w2"]).mean(axis=-1) - y) ** 2)


def _im2col_indices(C, H, W):
    i = (np.tile(np.repeat(np.arange(3), 3), C).reshape(-1, 1)
         + np.repeat(np.arange(H - 2), W - 2).reshape(1, -1))
    j = np.tile(np.arange(3), 3 * C).reshape(-1, 1) + np.tile(np.arange(W - 2), H - 2).reshape(1, -1)
    return np.repeat(np.arange(C), 9).reshape(-1, 1), i, j


def conv2d_im2col(p, x, y):
    """cs231n's im2col by fancy indexing xp[:, k, i, j], leaky ReLU, integer-label NLL."""
    N, C, H, W = x.shape
    k, i, j = _im2col_indices(C, H + 2, W + 2)
    cols = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))[:, k, i, j]
    out = p["W"].reshape(2, -1) @ cols.transpose(1, 2, 0).reshape(C * 9, -1) + p["b"][:, None]
    out = out.reshape(2, H, W, N).transpose(3, 0, 1, 2)
    feat = np.maximum(out, 0.01 * out).reshape(N, -1) @ p["fc"]
    logp = feat - np.log(np.sum(np.exp(feat), axis=1, keepdims=True))
    return -np.mean(logp[np.arange(N), y])


def tied_embeddings(p, tokens, targets):
    """W[tokens] in, the same E transposed out; logsumexp by the max shift."""
    h = p["E"][tokens]
    logits = np.tanh(h @ p["W"] + h) @ p["E"].T
    m = logits.max(axis=1, keepdims=True)
    lse = np.log(np.exp(logits - m).sum(axis=1)) + m[:, 0]
    return np.mean(lse - logits[np.arange(len(targets)), targets])


def vae(p, x, eps):
    """Gaussian VAE: reparameterisation with Const noise, analytic KL."""
    h = np.tanh(x @ p["We"] + p["be"])
    mu, logvar = h @ p["Wmu"], h @ p["Wlv"]
    z = mu + np.exp(0.5 * logvar) * eps
    rec = 0.5 * np.sum((x - np.tanh(z @ p["Wd"])) ** 2, axis=1)
    return np.mean(rec + 0.5 * np.sum(mu ** 2 + np.exp(logvar) - 1 - logvar, axis=1))


def realnvp(p, x):
    """An invertible linear layer (slogdet) and two affine couplings."""
    _, logdet = np.linalg.slogdet(p["W"] + np.eye(4))
    z, total = x @ (p["W"] + np.eye(4)).T, logdet * np.ones(len(x))
    for layer in range(2):
        a, b = (z[:, :2], z[:, 2:]) if layer == 0 else (z[:, 2:], z[:, :2])
        h = np.tanh(a @ p[f"Wh{layer}"])
        s = np.tanh(h @ p[f"Ws{layer}"])
        b = b * np.exp(s) + h @ p[f"Wt{layer}"]
        z = np.concatenate([a, b] if layer == 0 else [b, a], axis=1)
        total = total + s.sum(axis=1)
    return -np.mean(-0.5 * np.sum(z ** 2, axis=1) - 2 * np.log(2 * np.pi) + total)


def gp_marginal_likelihood(theta, X, y):
    """ARD RBF kernel, Cholesky, np.linalg.solve on the triangle, 2 sum log diag L."""
    ls, sf, sn = np.exp(theta[:2]), np.exp(theta[2]), np.exp(theta[3])
    Xs = X / ls
    sq = np.sum(Xs ** 2, 1)[:, None] + np.sum(Xs ** 2, 1)[None, :] - 2 * Xs @ Xs.T
    K = sf ** 2 * np.exp(-0.5 * np.maximum(sq, 0)) + (sn ** 2 + 1e-6) * np.eye(len(y))
    L = np.linalg.cholesky(K)
    a = np.linalg.solve(L, y)
    return 0.5 * a @ a + np.sum(np.log(np.diagonal(L))) + 0.5 * len(y) * np.log(2 * np.pi)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def lstm_state_buffers(p, xs):
    """LSTM whose states are written in place into preallocated H[t + 1], C[t + 1]."""
    T, B, _ = xs.shape
    n = p["Wh"].shape[0]
    H = np.zeros_like(p["Wh"], shape=(T + 1, B, n))
    C = np.zeros_like(H)
    for t in range(T):
        gates = xs[t] @ p["Wx"] + H[t] @ p["Wh"] + p["b"]
        i, f, g, o = np.split(gates, 4, axis=1)
        C[t + 1] = _sigmoid(f) * C[t] + _sigmoid(i) * np.tanh(g)
        H[t + 1] = _sigmoid(o) * np.tanh(C[t + 1])
    return np.sum(H[1:] @ p["Wout"]) + 0.1 * np.sum(C[-1] ** 2)


def _critic(p, x):
    return np.tanh(x @ p["W1"] + p["b1"]) @ p["w2"]


def wgan_gp(p, real, fake, alpha):
    """WGAN-GP: the critic's input gradient (a nested reverse pass) inside the loss."""
    xhat = alpha[:, None] * real + (1 - alpha[:, None]) * fake
    (gx,) = tape.gradient(Reverse, lambda x: np.sum(_critic(p, x)), xhat)
    penalty = np.mean((np.sqrt(np.sum(gx ** 2, axis=1) + 1e-12) - 1) ** 2)
    return np.mean(_critic(p, fake)) - np.mean(_critic(p, real)) + 10 * penalty


def _u(p, x):
    return np.tanh(x[:, None] * p["w1"] + p["b1"]) @ p["w2"]


def pinn(p, xs):
    """Physics-informed loss u' + u = cos x, u(0) = 1, with u' by forward mode inside."""
    (du,) = autodiff(Forward, lambda x: _u(p, x), Duplicated(xs, np.ones_like(xs)))
    return np.mean((du + _u(p, xs) - np.cos(xs)) ** 2) + (_u(p, np.zeros(1))[0] - 1.0) ** 2


def weight_decay(params, X, y, wd):
    """Decay on a dict of parameters by a generator over items(), biases skipped by name."""
    pred = np.tanh(X @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]
    decay = sum(np.sum(v ** 2) for k, v in params.items() if not k.startswith("b"))
    return np.mean((pred - y) ** 2) + wd * decay + 1e-3 * sum(np.abs(v).sum()
                                                                for v in params.values())


def crf_nll(p, X, tags):
    """Linear-chain CRF: log partition by the forward algorithm, gold path by fancy indexing."""
    E = X @ p["We"]
    alpha = E[0] + p["start"]
    for t in range(1, len(X)):
        s = alpha[:, None] + p["trans"] + E[t][None, :]
        m = s.max(axis=0)
        alpha = m + np.log(np.exp(s - m).sum(axis=0))
    log_z = np.log(np.sum(np.exp(alpha - alpha.max()))) + alpha.max()
    gold = (p["start"][tags[0]] + E[np.arange(len(tags)), tags].sum()
            + p["trans"][tags[:-1], tags[1:]].sum())
    return log_z - gold


def nerf_rendering(p, pts, deltas, target):
    """Volume rendering: softplus density, exclusive transmittance by np.cumprod."""
    h = np.maximum(pts @ p["W1"], 0)
    alpha = 1 - np.exp(-np.log1p(np.exp(h @ p["ws"])) * deltas)
    shifted = np.concatenate([np.ones((alpha.shape[0], 1)), 1 - alpha[:, :-1] + 1e-10], axis=1)
    w = alpha * np.cumprod(shifted, axis=1)
    color = np.sum(w[..., None] * _sigmoid(h @ p["Wc"]), axis=1)
    return np.mean((color - target) ** 2)


def config_driven(p, batch, cfg):
    """A Const dict batch and a Const config (depth, training flag, reduction) in control flow."""
    h = batch["x"]
    for _ in range(cfg["depth"]):
        h = np.tanh(h @ p["W"])
    if cfg["training"]:
        h = h * batch["mask"] / cfg["keep"]
    logits = h @ p["Wo"]
    logp = logits - logits.max(1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(1, keepdims=True))
    ce = -logp[np.arange(len(batch["y"])), batch["y"]]
    return ce.mean() if cfg["reduction"] == "mean" else ce.sum()


def _scale_first(consts):
    consts[0] *= 1.5


def _flip_labels(consts):
    consts[1][:] = (consts[1] + 1) % 3


def _reverse_tokens(consts):
    consts[0][:] = consts[0][::-1].copy()
    consts[1][0] = 2


def _flip_alpha(consts):
    consts[2][:] = 1 - consts[2]


def _next_batch(consts):
    consts[0]["x"] *= -1.0
    consts[0]["y"][:] = 1 - consts[0]["y"]
    consts[1]["training"] = not consts[1]["training"]
    consts[1]["depth"] += 1


def _dict(**shapes):
    return {k: _normal(*s[:-1], scale=s[-1]) for k, s in shapes.items()}


_NVP = {"W": _normal(4, 4, scale=0.3)}
for _l in range(2):
    _NVP.update(_dict(**{f"Wh{_l}": (2, 3, .5), f"Ws{_l}": (3, 2, .5), f"Wt{_l}": (3, 2, .5)}))

# name -> (f, params, consts, change a Const in place)
PROGRAMS = {
    "transformer block": (transformer_block, dict(
        g1=1 + _normal(4, scale=.1), b1=_normal(4, scale=.1), Wqkv=_normal(4, 12, scale=.5),
        Wo=_normal(4, 4, scale=.5), g2=1 + _normal(4, scale=.1), b2=_normal(4, scale=.1),
        W1=_normal(4, 6, scale=.5), W2=_normal(6, 4, scale=.5)), [_normal(2, 3, 4)], _scale_first),
    "conv1d sliding windows": (conv1d_net, _dict(w1=(3, 2, 3, .5), b1=(3, .1), w2=(2, 3, 3, .5)),
                               [_normal(2, 2, 7), _normal(2, 2)], _scale_first),
    "conv2d im2col": (conv2d_im2col, _dict(W=(2, 1, 3, 3, .5), b=(2, .1), fc=(32, 3, .3)),
                      [_normal(2, 1, 4, 4), np.array([0, 2])], _flip_labels),
    "tied embeddings": (tied_embeddings, _dict(E=(6, 3, .5), W=(3, 3, .5)),
                        [np.array([1, 3, 3, 0, 5]), np.array([3, 3, 0, 5, 1])], _reverse_tokens),
    "vae": (vae, _dict(We=(4, 3, .5), be=(3, .1), Wmu=(3, 2, .5), Wlv=(3, 2, .5), Wd=(2, 4, .5)),
            [_normal(5, 4), _normal(5, 2)], _scale_first),
    "realnvp": (realnvp, _NVP, [_normal(5, 4)], _scale_first),
    "gp marginal likelihood": (gp_marginal_likelihood, np.array([0.1, -0.2, 0.3, -1.0]),
                               [_normal(6, 2), _normal(6)], _scale_first),
    "lstm state buffers": (lstm_state_buffers, _dict(Wx=(2, 8, .5), Wh=(2, 8, .5), b=(8, .1),
                                                     Wout=(2, 1, 1.)), [_normal(4, 2, 2)],
                           _scale_first),
    "wgan-gp": (wgan_gp, _dict(W1=(2, 4, .7), b1=(4, .1), w2=(4, 1.)),
                [_normal(5, 2), _normal(5, 2), RNG.random(5)], _flip_alpha),
    "pinn": (pinn, _dict(w1=(5, 1.), b1=(5, .3), w2=(5, .5)), [np.linspace(0, 1, 5)],
             _scale_first),
    "weight decay": (weight_decay, dict(w1=_normal(3, 4), b1=_normal(4), w2=_normal(4),
                                        b2=np.array(0.3)), [_normal(6, 3), _normal(6), 1e-2],
                     _scale_first),
    "crf": (crf_nll, _dict(We=(3, 3, .5), trans=(3, 3, .5), start=(3, .5)),
            [_normal(4, 3), np.array([0, 2, 2, 1])], _flip_labels),
    "nerf": (nerf_rendering, _dict(W1=(3, 4, .5), ws=(4, .5), Wc=(4, 3, .5)),
             [_normal(2, 5, 3), np.full((2, 5), 0.3), RNG.random((2, 3))], _scale_first),
    "config driven": (config_driven, _dict(W=(3, 3, .6), Wo=(3, 2, .6)), [
        {"x": _normal(4, 3), "y": np.array([0, 1, 1, 0]),
         "mask": (RNG.random((4, 3)) > .3).astype(float)},
        {"depth": 2, "training": True, "keep": 0.7, "reduction": "mean"}], _next_batch),
}
