"""Machine-learning programs written the way NumPy users write them (cs231n assignments,
numpy-ml, "a network from scratch" tutorials, scikit-learn internals), for
tests/tape/test_ml_user_programs_redteam.py.

Each entry: ``name -> (f, x0, consts0, x1, consts1, smooth)``; ``f(x, *consts)`` returns a
float64 scalar, ``x`` is differentiated, the Consts (data, integer labels, Python floats) are
not; ``x1``/``consts1`` are a second point and second data (other labels) for the compiled
calls; ``smooth`` marks programs whose Hessian-vector product is checked.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided, sliding_window_view

RNG = np.random.default_rng(0)
N, D, H, C = 5, 4, 5, 3
X = RNG.normal(size=(N, D))
Y = RNG.integers(0, C, size=N)
Y2 = (Y + 1) % C


def softmax_cross_entropy(w, X, y):
    """cs231n's softmax loss: shift by the row max in place, integer-label fancy indexing."""
    W = w.reshape(D, C)
    scores = np.dot(X, W)
    scores -= np.max(scores, axis=1, keepdims=True)
    exp_scores = np.exp(scores)
    probs = exp_scores / np.sum(exp_scores, axis=1, keepdims=True)
    loss = np.sum(-np.log(probs[np.arange(X.shape[0]), y])) / X.shape[0]
    z = X @ W
    m = z.max(axis=1, keepdims=True)
    lse = np.log(np.sum(np.exp(z - m), axis=1)) + m[:, 0]
    return loss + np.mean(lse - z[np.arange(len(y)), y]) + 0.5e-2 * np.sum(W * W)


def _unpack(theta):
    W1 = theta[:D * H].reshape(D, H)
    b1 = theta[D * H:D * H + H]
    W2 = theta[D * H + H:D * H + H + H * C].reshape(H, C)
    return W1, b1, W2, theta[D * H + H + H * C:]


def mlp_relu_two_spellings(theta, X, y):
    """ReLU as np.maximum(0, x) and as x * (x > 0); log-softmax; labels by range()."""
    W1, b1, W2, b2 = _unpack(theta)
    h = np.maximum(0, X @ W1 + b1)
    h2 = X @ W1 + b1
    h2 = h2 * (h2 > 0)
    out = (h + h2) @ W2 + b2
    out = out - out.max(axis=1, keepdims=True)
    logp = out - np.log(np.exp(out).sum(axis=1, keepdims=True))
    return -logp[range(len(y)), y].mean()


def twolayer_manual_backprop(theta, X, y, reg):
    """cs231n's TwoLayerNet.loss with its hand-written backward pass (in-place writes into
    arrays the loss read: `dscores = probs; dscores[range(N), y] -= 1`,
    `dhidden[hidden <= 0] = 0`), differentiated through loss + a gradient penalty."""
    W1, b1, W2, b2 = _unpack(theta)
    n = X.shape[0]
    hidden = np.maximum(0, np.dot(X, W1) + b1)
    scores = np.dot(hidden, W2) + b2
    scores -= np.max(scores, axis=1, keepdims=True)
    exp_scores = np.exp(scores)
    probs = exp_scores / np.sum(exp_scores, axis=1, keepdims=True)
    loss = np.sum(-np.log(probs[np.arange(n), y])) / n
    loss += reg * (np.sum(W1 * W1) + np.sum(W2 * W2))
    dscores = probs
    dscores[range(n), y] -= 1
    dscores /= n
    dW2 = np.dot(hidden.T, dscores)
    db2 = np.sum(dscores, axis=0)
    dhidden = np.dot(dscores, W2.T)
    dhidden[hidden <= 0] = 0
    dW1 = np.dot(X.T, dhidden)
    dW2 += 2 * reg * W2
    dW1 += 2 * reg * W1
    return loss + 0.1 * (np.sum(dW1 ** 2) + np.sum(dW2 ** 2) + np.sum(db2 ** 2))


def svm_margins(w, X, y):
    """The multiclass SVM loss with `margins[np.arange(N), y] = 0` and a mask write."""
    W = w.reshape(D, C)
    scores = X @ W
    correct = scores[np.arange(N), y]
    margins = np.maximum(0, scores - correct[:, np.newaxis] + 1.0)
    margins[np.arange(N), y] = 0
    loss = np.sum(margins) / N
    binary = margins
    binary[margins > 0] = 1
    return loss + 0.5 * np.sum(W * W) + 0.1 * np.sum(np.sum(binary, axis=1) * correct)


def batchnorm_layernorm(p, X):
    """Batch norm over the batch (mean, var), then layer norm two ways (keepdims, std)."""
    gamma, beta, W = p[:D], p[D:2 * D], p[2 * D:].reshape(D, D)
    z = X @ W
    xhat = (z - z.mean(axis=0)) / np.sqrt(z.var(axis=0) + 1e-5)
    out = gamma * xhat + beta
    mu = out.mean(axis=-1, keepdims=True)
    ln = (out - mu) / np.sqrt(((out - mu) ** 2).mean(axis=-1, keepdims=True) + 1e-5)
    ln2 = (out - out.mean(-1, keepdims=True)) / out.std(-1, keepdims=True, ddof=0)
    return np.sum(np.tanh(ln) * np.arange(D)) + np.sum(ln2[:, :2] ** 3)


XL = RNG.normal(size=(8, 3))
YL = (RNG.random(8) > 0.5).astype(float)


def logistic_regression(w, X, y):
    """Three spellings of the logistic loss: logaddexp, log1p(exp), clipped probabilities."""
    z = X @ w[:3] + w[3]
    l1 = np.mean(np.logaddexp(0, -z) * y + np.logaddexp(0, z) * (1 - y))
    l2 = np.mean(y * np.log1p(np.exp(-z)) + (1 - y) * np.log1p(np.exp(z)))
    p = np.clip(1 / (1 + np.exp(-z)), 1e-7, 1 - 1e-7)
    l3 = -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))
    return l1 + l2 + l3 + 0.01 * w @ w


IMG = RNG.normal(size=(2, 6, 6))


def conv_im2col_maxpool(w, img):
    """im2col by sliding_window_view after np.pad, ReLU, 2x2 max-pool by reshape + max."""
    Wf = w.reshape(3, 2, 3, 3)
    xp = np.pad(img, ((0, 0), (1, 1), (1, 1)), mode="constant")
    cols = sliding_window_view(xp, (3, 3), axis=(1, 2)).transpose(1, 2, 0, 3, 4).reshape(36, -1)
    out = (cols @ Wf.reshape(3, -1).T).T.reshape(3, 6, 6)
    pooled = np.maximum(out, 0.0).reshape(3, 3, 2, 3, 2).max(axis=(2, 4))
    return np.sum(pooled ** 2)


def conv_as_strided(w, img):
    """Overlapping windows by as_strided, contracted with einsum."""
    xp = np.pad(img, ((0, 0), (1, 1), (1, 1)))
    c, hp, wp = xp.shape
    s0, s1, s2 = xp.strides
    win = as_strided(xp, shape=(c, hp - 2, wp - 2, 3, 3), strides=(s0, s1, s2, s1, s2))
    return np.sum(np.tanh(np.einsum("chwij,cij->hw", win, w.reshape(2, 3, 3))))


T = 4
XA = RNG.normal(size=(T, 3))


def causal_attention(p, X):
    """Scaled dot-product attention, causal mask by np.triu(..., k=1) * -1e9 and by
    np.where(mask, -np.inf, s); einsum in several spellings."""
    Wq, Wk, Wv = p[:9].reshape(3, 3), p[9:18].reshape(3, 3), p[18:].reshape(3, 3)
    q, k, v = X @ Wq, X @ Wk, X @ Wv
    s = q @ k.T / np.sqrt(3) + np.triu(np.ones((T, T)), k=1) * -1e9
    s = s - s.max(axis=-1, keepdims=True)
    a = np.exp(s)
    a /= a.sum(-1, keepdims=True)
    mask = np.triu(np.ones((T, T), dtype=bool), k=1)
    s2 = np.where(mask, -np.inf, np.einsum("td,sd->ts", q, k) / np.sqrt(3))
    a2 = np.exp(s2 - s2.max(-1, keepdims=True))
    a2 = a2 / a2.sum(-1, keepdims=True)
    return np.sum((a @ v) * np.einsum("ij,jd->id", a2, v)) + np.sum(np.einsum("ts, sd -> td", a, v) ** 2)


XM = RNG.normal(size=(6, 4))


def multihead_masked_assign(w, X):
    """Multi-head reshape/transpose, `s[..., ~mask] = -np.inf` on a traced score tensor."""
    Wq, Wk = w[:16].reshape(4, 4), w[16:32].reshape(4, 4)
    B, S, nh, hd = 2, 3, 2, 2
    x = X.reshape(B, S, 4)
    q = (x @ Wq).reshape(B, S, nh, hd).transpose(0, 2, 1, 3)
    k = (x @ Wk).reshape(B, S, nh, hd).transpose(0, 2, 1, 3)
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(hd)
    s[..., ~np.tril(np.ones((S, S), dtype=bool))] = -np.inf
    s = s - s.max(-1, keepdims=True)
    a = np.exp(s)
    a /= a.sum(-1, keepdims=True)
    return np.sum((a @ q).transpose(0, 2, 1, 3).reshape(B, S, 4) ** 2)


XS = RNG.normal(size=(5, 2))


def _sigmoid(z):
    return 1 / (1 + np.exp(-z))


def gru_preallocated(p, xs):
    """A GRU cell over time writing `h[t + 1] = ...` into np.zeros_like(p, shape=...)."""
    hg, ig = 3, 2
    o = hg * (ig + hg)
    Wz, Wr, Wh = (p[i * o:(i + 1) * o].reshape(hg, ig + hg) for i in range(3))
    h = np.zeros_like(p, shape=(len(xs) + 1, hg))
    for t in range(len(xs)):
        hx = np.concatenate([xs[t], h[t]])
        z, r = _sigmoid(Wz @ hx), _sigmoid(Wr @ hx)
        hc = np.tanh(Wh @ np.concatenate([xs[t], r * h[t]]))
        h[t + 1] = (1 - z) * h[t] + z * hc
    return np.sum(h[1:] ** 2)


def lstm_stack(p, xs):
    """An LSTM cell: np.split of the gates, np.hstack, states collected in a list."""
    hl, ig = 2, 2
    W, b = p[:4 * hl * (ig + hl)].reshape(4 * hl, ig + hl), p[4 * hl * (ig + hl):]
    h, c, hs = np.zeros(hl), np.zeros(hl), []
    for t in range(xs.shape[0]):
        i, f, o, g = np.split(W @ np.hstack([xs[t], h]) + b, 4)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
        hs.append(h)
    Hs = np.stack(hs)
    return np.mean(Hs ** 2) + np.sum(Hs[-1])


XK = RNG.normal(size=(7, 2))


def kmeans_soft(mu, X, beta):
    """Soft k-means: responsibilities by broadcasting, distances by the expanded square."""
    mu = mu.reshape(3, 2)
    d2 = ((X[:, None, :] - mu[None, :, :]) ** 2).sum(-1)
    r = np.exp(-beta * d2)
    r /= r.sum(axis=1, keepdims=True)
    d2b = np.sum(X ** 2, 1)[:, None] - 2 * X @ mu.T + np.sum(mu ** 2, 1)[None, :]
    return np.sum(r * d2b) / len(X)


P_TSNE = RNG.random((5, 5))
P_TSNE = P_TSNE + P_TSNE.T
np.fill_diagonal(P_TSNE, 0)
P_TSNE /= P_TSNE.sum()


def tsne_kl(y, P):
    """van der Maaten's tsne.py objective: num[range(n), range(n)] = 0, np.fill_diagonal on a
    traced copy and on a traced kernel."""
    Y = y.reshape(5, 2)
    sum_Y = np.sum(np.square(Y), 1)
    num = 1. / (1. + np.add(np.add(-2. * np.dot(Y, Y.T), sum_Y).T, sum_Y))
    num[range(5), range(5)] = 0.
    Q = np.maximum(num / np.sum(num), 1e-12)
    Pm, Qm = P.copy(), Q.copy()
    np.fill_diagonal(Pm, 1.0)
    np.fill_diagonal(Qm, 1.0)
    K = 1.0 / (1.0 + ((Y[:, None] - Y[None]) ** 2).sum(-1))
    np.fill_diagonal(K, 0.0)
    return np.sum(Pm * np.log(Pm / Qm)) + np.sum(P * np.log(np.maximum(K / K.sum(), 1e-12)))


XG = np.linspace(0, 1, 6)[:, None]
YG = np.sin(6 * XG[:, 0])


def gp_nll(lp, X, y):
    """GP negative log marginal likelihood: np.linalg.cholesky and two triangular solves."""
    ell, sf, sn = np.exp(lp)
    K = sf ** 2 * np.exp(-0.5 * (X - X.T) ** 2 / ell ** 2) + (sn ** 2 + 1e-8) * np.eye(len(X))
    L = np.linalg.cholesky(K)
    alpha = np.linalg.solve(L.T, np.linalg.solve(L, y))
    return 0.5 * y @ alpha + np.sum(np.log(np.diag(L))) + 0.5 * len(X) * np.log(2 * np.pi)


ZF = RNG.normal(size=(5, 2))


def flows(p, Z):
    """A linear flow (slogdet and log|det|), an affine coupling and a planar flow."""
    A = p[:4].reshape(2, 2) + 2 * np.eye(2)
    _, logdet = np.linalg.slogdet(A)
    out = Z @ A.T
    ld2 = np.log(np.abs(np.linalg.det(A)))
    z1, z2 = out[:, :1], out[:, 1:]
    sc = np.tanh(z1 * p[4] + p[5])
    y2 = z2 * np.exp(sc) + z1 * p[6]
    u, w, b = p[7:9], p[9:11], p[11]
    hz = np.tanh(out @ w + b)
    f = out + hz[:, None] * u
    ldp = np.log(np.abs(1 + ((1 - hz ** 2)[:, None] * w) @ u))
    logpz = -0.5 * np.sum(f ** 2, axis=1) - 0.5 * np.sum(y2 ** 2, axis=1)
    return -np.mean(logpz + logdet + ld2 + sc.sum(axis=1) + ldp)


XV = RNG.random((4, 3))
EPS = RNG.normal(size=(4, 2))


def vae_elbo(p, X, eps):
    """A VAE's negative ELBO: the reparameterisation mu + exp(logvar / 2) * eps."""
    We, Wd, bd = p[:12].reshape(3, 4), p[12:18].reshape(2, 3), p[18:21]
    hq = X @ We
    mu, logvar = hq[:, :2], hq[:, 2:]
    logits = (mu + np.exp(0.5 * logvar) * eps) @ Wd + bd
    rec = np.sum(X * logits - np.logaddexp(0, logits), axis=1)
    kl = -0.5 * np.sum(1 + logvar - mu ** 2 - np.exp(logvar), axis=1)
    return -np.mean(rec - kl)


A_SPD = RNG.normal(size=(3, 3))
A_SPD = A_SPD @ A_SPD.T + np.eye(3)


def adam_unrolled(w0, A, lr):
    """Three Adam steps written in place (`m *= b1; m += (1 - b1) * g`), then the loss:
    the meta-gradient with respect to the initial weights."""
    w, m, v = w0.copy(), np.zeros_like(w0), np.zeros_like(w0)
    b1, b2 = 0.9, 0.999
    for t in range(1, 4):
        g = A @ w + np.sin(w)
        m *= b1
        m += (1 - b1) * g
        v *= b2
        v += (1 - b2) * g * g
        w -= lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + 1e-8)
    return 0.5 * w @ A @ w


def clip_by_norm(w, A):
    """Gradient clipping by norm inside f: a Python branch on the norm, min() with a scalar."""
    g = A @ w + w ** 3
    norm = np.linalg.norm(g)
    if norm > 1.0:
        g = g * (1.0 / norm)
    g2 = g * min(1.0, 2.0 / (np.sqrt(np.sum(g * g)) + 1e-6))
    return np.sum((w - 0.1 * g2) ** 2)


IDX = np.array([0, 2, 2, 1, 0, 2])


def embeddings_repeated(e, idx):
    """W[idx] with repeated indices, np.add.at into np.zeros_like, np.take, bincount weights."""
    E = e.reshape(4, 3)
    h = np.tanh(E[idx]).sum(axis=0)
    G = np.zeros_like(E)
    np.add.at(G, idx, E[idx] * 2)
    cnt = np.bincount(idx, weights=E[idx, 0], minlength=4)
    return np.sum(h ** 2) + np.sum(G * E) + np.sum(np.take(E, idx, axis=0) ** 3) + cnt @ cnt


XE = RNG.normal(size=(2, 3, 4))
YE = np.array([[0, 1, 2], [2, 2, 0]])


def einsum_label_smoothing(p, X, y):
    """einsum attention ("bqd,bkd->bqk", "...td,de->...te", spaces, swapaxes), label
    smoothing with np.eye(C)[y], clipped probabilities gathered with three index arrays."""
    Wq, Wk, Wo = p[:16].reshape(4, 4), p[16:32].reshape(4, 4), p[32:44].reshape(4, 3)
    q, k = np.einsum("btd,de->bte", X, Wq), np.einsum("...td,de->...te", X, Wk)
    s = (np.einsum("bqd,bkd->bqk", q, k) + np.einsum("bqd, bkd -> bqk", q, k)
         + q @ np.swapaxes(k, -1, -2)) / 6.0
    a = np.exp(s - s.max(-1, keepdims=True))
    a = a / a.sum(-1, keepdims=True)
    logits = np.einsum("bqk,bkd->bqd", a, X) @ Wo
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    target = np.eye(3)[y] * 0.9 + 0.1 / 3
    p_ = np.clip(np.exp(logp), 1e-7, 1 - 1e-7)
    return (-np.sum(target * logp) / y.size
            - np.mean(np.log(p_[np.arange(2)[:, None], np.arange(3)[None, :], y])))


ST = RNG.normal(size=(8, 3))


def top_k(w, S):
    """Top-k by np.argsort(-s)[:k], np.argpartition, np.sort(s)[::-1]."""
    s = S @ w
    k2 = np.argpartition(s, -3)[-3:]
    return (np.sum(s[np.argsort(-s)[:3]] ** 2) + np.sum(np.exp(s[k2]))
            + np.sum(np.sort(s)[::-1][:2]))


def _x(size, scale=1.0, shift=0.0):
    return RNG.normal(size=size) * scale + shift


PROGRAMS = {
    "softmax cross-entropy": (softmax_cross_entropy, _x(D * C), [X, Y], None, [X * 1.1, Y2], True),
    "mlp relu": (mlp_relu_two_spellings, _x(D * H + H + H * C + C), [X, Y], None,
                 [X * 0.7, Y2], False),
    "cs231n manual backprop": (twolayer_manual_backprop, _x(D * H + H + H * C + C, 0.5),
                               [X, Y, 0.01], None, [X * 0.5, Y2, 0.001], False),
    "svm margins": (svm_margins, _x(D * C), [X, Y], None, [X * 2, Y2], False),
    "batchnorm layernorm": (batchnorm_layernorm, _x(2 * D + D * D), [X], None, [X * 2 + 1], True),
    "logistic regression": (logistic_regression, _x(4), [XL, YL], None, [XL * 2, 1 - YL], True),
    "conv im2col maxpool": (conv_im2col_maxpool, _x(54), [IMG], None, [IMG * 1.5], False),
    "conv as_strided": (conv_as_strided, _x(18), [IMG], None, [IMG * 1.5], True),
    "causal attention": (causal_attention, _x(27, 0.5), [XA], None, [XA * 0.5], True),
    "multi-head masked assign": (multihead_masked_assign, _x(32, 0.5), [XM], None,
                                 [XM * 0.8 + 0.1], True),
    "gru preallocated": (gru_preallocated, _x(45, 0.5), [XS], None, [XS * 2], True),
    "lstm stack": (lstm_stack, _x(40, 0.5), [XS], None, [XS * 2], True),
    "kmeans soft": (kmeans_soft, _x(6), [XK, 2.0], None, [XK + 0.3, 0.5], True),
    "tsne kl": (tsne_kl, _x(10), [P_TSNE], None, [P_TSNE.T.copy()], True),
    "gp nll": (gp_nll, np.array([-1.0, 0.1, -1.5]), [XG, YG], None, [XG * 1.3, YG * 0.5], True),
    "flows": (flows, _x(12, 0.3), [ZF], None, [ZF * 2], True),
    "vae elbo": (vae_elbo, _x(21, 0.3), [XV, EPS], None, [XV, _x((4, 2))], True),
    "adam in place": (adam_unrolled, np.array([0.5, -0.3, 0.8]), [A_SPD, 0.1], None,
                      [A_SPD * 2, 0.05], True),
    "clip by norm": (clip_by_norm, np.array([0.5, -0.3, 0.8]), [A_SPD],
                     np.array([0.01, 0.02, -0.01]), [A_SPD * 0.01], False),
    "embeddings repeated": (embeddings_repeated, _x(12), [IDX], None,
                            [np.array([1, 1, 1, 0, 3, 3])], True),
    "einsum label smoothing": (einsum_label_smoothing, _x(44, 0.4), [XE, YE], None,
                               [XE * 0.5, YE[::-1].copy()], True),
    "top-k": (top_k, _x(3), [ST], None, [ST[::-1].copy()], False),
}
