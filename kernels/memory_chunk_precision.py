"""When the chunked memories' WY form loses precision, measured on the chunks it already computes.

The chunkwise-parallel forms (`kernels.memory_chunked`, `kernels.memory_chunked_titans`,
`kernels.memory_periodic_chunked`) write every chunk's transition ``X_C = X_0 Phi + ...`` as the
retention's decay minus delta corrections, and solve a triangular system per chunk. Four
conditions make those sums lose the relative precision the sequential loop keeps; each check
here reads quantities the forward run has formed anyway and costs far less than the run:

- `transitions_cancel`: a transition far smaller than the decay (the keys erase the state much
  faster than the retention does): the call runs the sequential loop.
- `updates_cancel`: a token's updates computed as a difference that cancels along its own key
  (`erased_tokens`: the tokens before it in its chunk erased that direction while others only
  decay) in a chunk whose updates are all as small as that cancellation's error: the loop.
- `transitions_grow` (or `thin_transitions_grow` for chunks of fewer tokens than d, where the
  transition is not formed): a float32 transition grown against the decay: the call runs the
  chunked form in float64.
- `solve_amplifies`: a float32 delta-rule triangular solve summing many terms of alternating
  signs (tokens that reflect the state along clustered keys): float64 too.
- `decays_underflow`: a chunk's cumulative decay below the dtype's normal range while the state
  entering the chunk is large enough for the loop's step-by-step products to stay normal: the
  sequential loop.

`squared_norms` gives the per-chunk squared norms the first and third take. The thresholds and
the measurements behind them are next to their constants.

Keys that erase one direction of the state while another only decays (every key the same unit
vector, ``theta`` near ``1 - alpha``, values 0) keep the transition's Frobenius norm near the
decay, so `transitions_cancel` passes there. What loses the precision is every quantity
proportional to the updates ``u_i = theta_i (v_i - M_{i-1} k_i)``: the WY form computes their
state part through ``W_i^T = theta_i Phi_{<i} k_i`` (the transition up to token i along its key)
as ``theta_i g_i k_i`` less corrections, and where that direction was erased ``W_i`` is many
orders smaller than ``theta_i g_i |k_i|`` with an absolute error of a few eps of the latter.
The update then carries an absolute error of a few eps times ``theta_i g_i |k_i| |M0|``;
Titans' momentum is a sum of updates, and ``dtheta`` multiplies the prediction errors, so these
are the results that go wrong (the memory itself keeps its decaying direction's scale).
Measured there before `updates_cancel` (against a long double loop, relative to each result's
scale): s_final 4e-10 (float64 Titans) and 0.66 (float32 Titans, period 16), dtheta 1e5 (float64
delta, period 16) and 3e13 (float32), against the loop's 1e-15 and 3e-6; with d = 64 (chunks of
32 tokens, fewer than d, where the transitions are not checked) dtheta 1e63 of scale (float64
delta, period 64) and s_final 12 (float32 Titans). ``|W_i| / (theta_i g_i |k_i|)`` measured 0 to
6e-8 on those calls. The cases are tests in tests/kernels/test_memory_redteam_round3.py.
That error matters only where the chunk's updates are all about as small: there the values are
0 and every update is the erased direction's remnant. With values written the updates are of
their size; a model's calls (`hecate train`, default config) meet erased tokens in about half
the calls. `updates_cancel` compares the two (`UPDATE_RATIO`).

Not seen by `updates_cancel`: a direction erased by a chunk's last tokens that no later key of
the chunk reads (the transition's smallest singular value would show it, at about ``d^3`` per
chunk). With one such token per chunk (d = 2, ``theta`` within 1e-6 of ``1 - alpha``, the other
keys orthogonal, reads along the erased key) the chunked form without `updates_cancel`
measured every result within the bounds of those tests, delta and Titans, float32 and float64,
per token and period 16: the loop loses the same precision on that token
(``(1 - alpha) m - theta m``).
"""
from __future__ import annotations

import numpy as np

from tape.backend import array_module

# The smallest ratio of a chunk transition's Frobenius norm to the retention's decay over the
# chunk (`transitions_cancel`) that the chunked form accepts, per dtype. Below it the WY form's
# "decay minus corrections" cancels, with relative errors of about 1-10 eps / ratio (delta)
# and 20-300 eps / ratio (Titans). Measured over 550 random calls (d = 1 to 16, chunks of 16
# to 128 tokens, values 0, theta up to 2, alpha up to 0.9), the chunked form left the tests'
# tolerances against the loop (1e-10 float64, 1e-4 float32) in the erasing regime only at
# ratios below 5e-6 (float64) and 1.3e-2 (float32): margins of 200x and 8x.
CANCELLATION_RATIO = {"float64": 1e-3, "float32": 0.1}
# The smallest ``|W_i| / (theta_i g_i |k_i|)`` of a token whose updates are not taken as erased
# (`erased_tokens`), any dtype (the ratio is the inputs', not the precision's: a float64 run
# of a float32 call would measure the same). Keys erasing one direction (d = 2, every key e_1,
# values 0, theta / (1 - alpha) drawn from 0-0.1 up to 0.9-1, 64 tokens) measured errors,
# before `updates_cancel`, against the bound of test_keys_erasing_one_direction (8 times the loop's
# error + RTOL / 10) of about 1 / ratio: float64 1x at 3e-6 and 0.2x at 3e-5 (delta, period
# 16), 0.2x at 1e-4 and 40x at 1e-6 (Titans); float32 0.4x to 0.5x at 2e-2 and 2x to 4x at 2e-3
# (delta, period 16), 0.1x to 0.3x at 5e-2, 3x at 8e-3 and 40x to 100x at 1e-5 to 4e-5
# (Titans). So float32 calls with ratios from 1e-3 to about 2e-2 on such keys still exceed
# that bound (undetected), as a float32 threshold of 0.1 sent random inputs to the loop where
# the chunked results were within their tests' tolerances (tests/kernels/
# test_cuda_chunked_emulated.py: 70 tokens in a chunk of 64, d = 8). Random inputs reach such
# ratios in chunks long against d: minima of 1e-2 to 4e-2 over 20 sequences (gates uniform in
# 0.05 to 0.6, keys of norm about 1, as tests/kernels/tokenwise.memory_args draws them) in
# chunks of 64 tokens at d = 8 and of 128 at d = 16, 6e-2 in chunks of 32 at d = 8, 0.18 in 16
# at d = 8; the default gates and unit keys (test_memory_scale.make_args) gave at least 0.16
# (d = 4) to 0.79 (d = 32) in the default chunks, theta up to 3 at least 6.5e-2 from d = 4 and
# 2.4e-4 at d = 2. The loop keeps the precision on those keys because every key is the same
# axis (the erased direction's entries stay apart): with the keys and queries turned by 0.7 rad
# in the plane its own errors measured 1.2e3 and 2.8e3 of scale (float64 delta, period 16, and
# Titans), 8e-3 and 9e11 (float32 Titans and delta, period 16), and the chunked form's without
# the check 0.6x to 12x those.
ERASURE_RATIO = 1e-3
# The smallest ratio, per dtype, of a chunk's largest update ``max_j |u_j|`` to the scale of
# its erased tokens' cancellation ``max_i theta_i g_i |k_i| |M0|_F`` that the chunked form
# accepts (`updates_cancel`): about 1000 eps, where the updates' relative error from the
# cancellation is of order 1e-3. Measured ratios: 0 (float32) and 2.6e-48 to 5.3e-20 (float64)
# on the eight calls of test_keys_erasing_one_direction; over 200 steps of `hecate train`
# (default config, float32) at least 5.5e-3 (median 5.9e-2) on the 471 of 880 calls with
# erased tokens: none went to the loop (the former check on the erased tokens alone sent them
# all). Between them the results are no longer
# noise but lose precision like eps / ratio: with every key e_1 and random values scaled to
# put the ratio at 8e-4, 8e-3 and 8e-2 (delta, period 16, float32), dalpha measured 5e-4, 5e-5
# and 5e-6 of its scale against 1e-7 for the loop; the loop keeps the precision only because
# every key is one axis: with the keys and queries turned by 0.7 rad in the plane (ratios 1e-3,
# 1e-2 and 0.1) the loop's own dtheta measured 4e-4, 2e-5 and 4e-7 of scale, the chunked
# form's 1.3e-3, 1.3e-4 and 1.2e-5; float64 (ratios 1e-11 to 1e-9) 9e-5 to 2e-7 for the loop,
# 4e-4 to 2e-6 chunked. Not caught: on those axis-aligned keys with values written, periodic
# Titans' ds0 measured 7e-3 of scale (float32; float64 8e-12) against the loop's 2.5e-7 (3e-16),
# at any value scale (the reverse carry along the erased key, not the updates); turned keys
# give the loop 1.7e-3 (1.6e-12) and the chunked form 2.5e-3 (5e-12).
UPDATE_RATIO = {"float64": 2e-13, "float32": 1e-4}
# How far a chunk transition may grow against its decay before a float32 call runs in float64
# (`transitions_grow`): its squared Frobenius norm may exceed the decay's own, ``d decay^2``,
# by as much as one direction grown GROWTH_RATIO-fold, ``(GROWTH_RATIO^2 - 1) decay^2``
# (`growth_limit`). A limit of ``GROWTH_RATIO^2 d decay^2`` let growth in a few directions pass
# at larger d: 7-fold in one direction per chunk at d = 64 measured 15x to 70x the float32
# loop's error (Titans, periodic sub-chunks of 32 tokens). While every token has ``theta |k|^2
# <= 2 (1 - alpha)`` no direction grows (each token's factor ``(1 - alpha) I - theta k k^T`` is
# at most ``1 - alpha`` in norm); above, the state grows against the decay inside a chunk and the
# WY form's triangular solve and products carry that growth: float32 results measured 1e-5 to
# 5e-5 of their scale away from an exact float64 computation (delta, d = 32 and 64, theta 1.5
# to 2, alpha 0 to 0.9, keys clustered; the float32 loop 2e-6 to 5e-6). Such calls run the
# chunked form in float64 (about 1e-15 from exact) and cast back. Where a chunk has fewer
# tokens than d the transition is not formed by the forward run (Titans per token for d > 16,
# periodic sub-chunks shorter than d): `thin_transitions_grow` takes its norm from the Gram
# matrices of its factors instead. Unchecked there, float32 results
# measured up to 1.5e-2 of scale from exact against 3e-5 for the loop (Titans d = 64, keys
# clustered, theta 0 to 3, momentum near 1; periodic delta with sub-chunks of 32 at d = 64).
GROWTH_RATIO = 2.0
# The largest ``max_i sum_j |T_ij| theta_j |k_j|^2`` of a float32 chunk's triangular inverse
# ``T = (I + diag(theta) A)^-1`` run in float32, in chunks of 16 tokens (`solve_amplifies`;
# ``sqrt(C / 16)`` times that in longer chunks C). Tokens with ``theta |k|^2`` near ``1 + r``
# reflect the state along their keys (factor ``r - theta |k|^2`` near -1): the transitions do
# not grow, but along clustered keys the entries of T stay near theta instead of decaying, with
# alternating signs, and the WY form sums about C such terms into results of size 1 (T's rows,
# ``W = T (theta gp K)``, ``Phi = gC I - W^T DK``). Float32 errors grow with that sum: measured
# 4e-6 to 1.4e-5 of scale against 4e-7 to 1.4e-6 for the float32 loop (delta, d = 16 to 64,
# theta 1.4 to 2, alpha 0 to 0.02, keys clustered: 4x to 28x); one such call measured 4e-6,
# 1.1e-5 and 2.5e-5 in chunks of 8, 16 and 32 tokens, and 4.6e-6 with T alone in float64. The
# sums measured 15 to 78 there. With ``theta |k|^2 <= 1`` every entry of T is at most theta_i,
# and the sums measured at most 4.5, 4.8 and 5.8 (random unit keys, theta 0.9 to 1, chunks of
# 16, 32 and 64 tokens: about like sqrt(C), the reflecting ones like C); random keys at theta 1.3
# to 1.9 reach 6 to 13 with errors near the loop's, and run in float64 too. The delta rule
# only: Titans' momentum adds to the coupling (``A_ij = W_{i-1,j} k_i . k_j``), and its sums
# reach 12 for random unit keys with theta up to 1 on calls that `transitions_grow` keeps in
# float32, against 11 to 20 for its reflecting class (6x to 30x the loop's error), so the sum
# does not tell them apart there.
REFLECTION_LIMIT = 5.0


def squared_norms(Phi, scale):
    """``|Phi / scale|_F^2`` of every chunk's ``Phi [B, N, a, b]`` with ``scale [B, N]``."""
    with np.errstate(all="ignore"):      # a scale of 0 (underflow) gives inf or NaN
        scaled = Phi / scale[..., None, None]
        return array_module(Phi).sum(scaled * scaled, axis=(-1, -2))


def transitions_cancel(parts) -> bool:
    """Whether a chunk's transition was computed as a difference that cancels: `parts` holds
    pairs ``(square, decay)`` (``[B, N]``, both divided by one scale per chunk): the squared
    Frobenius norm of rows or columns of every chunk's transition (``X_C = X_0 Phi + ...``)
    and the 2-norm of the retention's decay over them; true where
    ``|part|_F < CANCELLATION_RATIO * decay`` in some chunk. The WY form computes ``Phi`` as the
    decay minus the delta corrections, with an absolute error of a few eps times the decay:
    where the keys erase the state much faster than the retention decays it (``theta |k|^2``
    near ``1 - alpha`` on the same directions over many tokens, d = 1), ``Phi`` is far smaller
    than the decay and loses its relative precision; the sequential loop keeps it. A chunk of
    fewer tokens than d never cancels: the d - C directions orthogonal to its keys keep the
    decay, so ``|part|_F >= decay``. A decay of 0 (underflow) has no cancellation (NaN).

    >>> gC = np.array([[0.5]])
    >>> transitions_cancel([(squared_norms(np.full((1, 1, 1, 1), 0.4), gC), 1.0)])  # 0.5 - 0.1
    False
    >>> transitions_cancel([(squared_norms(np.full((1, 1, 1, 1), 1e-9), gC), 1.0)])
    True
    """
    def below(square, decay):
        ratio = CANCELLATION_RATIO.get(str(square.dtype), CANCELLATION_RATIO["float64"])
        return square < (ratio * decay) ** 2
    return _in_some_chunk(parts, below)


def erased_tokens(W, th, g, K):
    """The tokens whose updates were computed as a difference that cancels along their own
    key (`ERASURE_RATIO`): the mask ``[B, N, C]`` of ``|W_i| < ERASURE_RATIO * theta_i g_i
    |k_i|``, or None where no token is, from the rows ``W [B, N, C, d]`` of the WY form's state
    coefficients (``U = U0 - W M0^T``; Titans: the M0 half of ``Wms``), the inner learning
    rates ``th``, the retention's decay before each token ``g`` (``gp``; Titans ``gr_{i-1}``)
    and the keys ``K`` (``O(C d)`` per chunk). ``W_i^T = theta_i Phi_{<i} k_i`` carries the
    chunk's transition up to token i along that token's key: ``theta_i g_i k_i`` less the
    delta corrections of the tokens before, with an absolute error of a few eps times
    ``theta_i g_i |k_i|``. Where the tokens before erased the direction of ``k_i``
    (``theta |k|^2`` near ``1 - alpha`` along it) while other directions only decay, ``W_i``
    is far smaller and loses its relative precision, and the update ``u_i`` gets an absolute
    error of a few eps times ``theta_i g_i |k_i| |M0|``. Whether that matters is
    `updates_cancel`'s question. Checked in chunks of any length (``W`` is formed in all). A
    token without a learning rate, key or decay (0) is not checked (NaN or inf compare false).

    >>> K = np.ones((1, 1, 3, 1)); g = np.ones((1, 1, 3)); th = np.full((1, 1, 3), 0.5)
    >>> W = 0.5 * np.array([1.0, 0.5, 0.25]).reshape(1, 1, 3, 1)    # factors 1 - 0.5 per token
    >>> erased_tokens(W, th, g, K), erased_tokens(W * [[[[1], [1], [1e-6]]]], th, g, K)
    (None, array([[[False, False,  True]]]))
    """
    xp = array_module(W)
    ratio = ERASURE_RATIO
    with np.errstate(all="ignore"):      # th g = 0 gives NaN or inf: not checked
        scaled = W / (th * g)[..., None]
        erased = (xp.einsum("bnci,bnci->bnc", scaled, scaled)
                  < (ratio * ratio) * xp.einsum("bnci,bnci->bnc", K, K))
    return erased if bool(xp.any(erased)) else None


def updates_cancel(erased, th, g, K, X0, U=None, U0=None, W=None) -> bool:
    """Whether the cancellation of `erased_tokens` (the mask ``erased``, or None: no) reaches
    the updates' own scale in some chunk (`UPDATE_RATIO`): ``max_j |u_j| < UPDATE_RATIO[dtype]
    * max_i theta_i g_i |k_i| |X0|_F`` over the chunk's tokens j and its erased tokens i, with
    ``X0 [B, N, d, w]`` the states entering the chunks (Titans: the M0 half) and the updates
    ``U [B, N, C, d]``, or ``U0 - W X0^T`` formed for the chunks with erased tokens alone where
    the forward run does not form ``U`` (the delta rule's chunked forward). The erased token's
    update carries an absolute error of a few eps times ``theta_i g_i |k_i| |X0|``; results
    made of the chunk's updates (the momentum, the reads, the ``dtheta`` they multiply) lose
    their relative precision only where every update of the chunk is that small (keys that
    erase a direction of a state with no values to write: each update is the erased
    direction's remnant). Where the chunk writes values its updates are of their size and the
    cancellation stays at rounding level. ``O(C d + d w)`` per chunk (with ``U``); NaN: no.

    >>> K = np.ones((1, 1, 2, 1)); g = np.ones((1, 1, 2)); th = np.full((1, 1, 2), 0.5)
    >>> erased = np.array([[[False, True]]]); X0 = np.ones((1, 1, 1, 1))
    >>> U = np.array([0.5, 1e-3]).reshape(1, 1, 2, 1)                # a value written: no
    >>> updates_cancel(erased, th, g, K, X0, U), updates_cancel(erased, th, g, K, X0, U * 1e-15)
    (False, True)
    """
    if erased is None:
        return False
    xp = array_module(K)
    with np.errstate(all="ignore"):
        rows = xp.any(erased, axis=-1)                                   # [B, N]
        size = xp.where(erased[rows], th[rows] * g[rows], 0.0) * xp.sqrt(
            xp.einsum("rci,rci->rc", K[rows], K[rows]))
        state = xp.sqrt(xp.einsum("rij,rij->r", X0[rows], X0[rows]))
        if U is None:
            U = U0[rows] - W[rows] @ X0[rows].swapaxes(-1, -2)
        else:
            U = U[rows]
        scale = xp.sqrt(xp.max(xp.einsum("rci,rci->rc", U, U), axis=-1))
        ratio = UPDATE_RATIO.get(str(K.dtype), UPDATE_RATIO["float64"])
        return bool(xp.any(scale < ratio * xp.max(size, axis=-1) * state))


def transitions_grow(parts, d: int) -> bool:
    """Whether a float32 call should run in float64 (`GROWTH_RATIO`): `parts` as for
    `transitions_cancel` (float32 squares; other dtypes never grow here), true where
    ``|part|_F^2 > growth_limit(d) * decay^2`` in some chunk.

    >>> gC = np.array([[0.5]], np.float32)
    >>> transitions_grow([(squared_norms(np.full((1, 1, 1, 1), 0.9, np.float32), gC), 1.0)], 1)
    False
    >>> transitions_grow([(squared_norms(np.full((1, 1, 1, 1), 1.5, np.float32), gC), 1.0)], 1)
    True
    """
    if any(square.dtype != np.float32 for square, _ in parts):
        return False
    limit = growth_limit(d)
    return _in_some_chunk(parts, lambda square, decay: square > limit * decay ** 2)


def growth_limit(d: int) -> float:
    """The largest ``|Phi|_F^2 / decay^2`` of a float32 chunk transition run in float32: ``d``
    (the decay alone) plus one direction grown `GROWTH_RATIO`-fold.

    >>> growth_limit(64)
    67.0
    """
    return d + GROWTH_RATIO ** 2 - 1


def thin_transitions_grow(W, DK, gC) -> bool:
    """`transitions_grow` of the chunk transitions ``Phi = gC I - W^T DK`` (``W, DK [B, N, C,
    d]``, ``gC [B, N]``: the delta rule's form) without forming ``Phi`` (``O(C d^2)`` per
    chunk), for chunks of fewer tokens than d: ``|Phi|_F^2 - d gC^2 = |W^T DK|_F^2 - 2 gC
    <W, DK>``, with ``|W^T DK|_F^2 = <W W^T, DK DK^T>`` from the ``[C, C]`` Gram matrices
    (``O(C^2 d)``). Float32 only.

    >>> gC = np.ones((1, 1), np.float32)
    >>> W = np.zeros((1, 1, 2, 4), np.float32); DK = W.copy()
    >>> W[..., 0, 0] = 3.0; DK[..., 0, 0] = 1.0                  # Phi = diag(-2, 1, 1, 1)
    >>> thin_transitions_grow(W, DK, gC)
    False
    >>> W[..., 0, 0] = 9.0                                       # Phi = diag(-8, 1, 1, 1)
    >>> thin_transitions_grow(W, DK, gC)
    True
    """
    if W.dtype != np.float32:
        return False
    xp = array_module(W)
    d = W.shape[-1]
    with np.errstate(all="ignore"):
        square = xp.einsum("bnij,bnij->bn", W @ W.swapaxes(-1, -2),
                           DK @ DK.swapaxes(-1, -2))                       # |W^T DK|_F^2
        excess = square - 2 * gC * xp.einsum("bnci,bnci->bn", W, DK)
        return bool(xp.any(excess > (growth_limit(d) - d) * gC * gC))     # NaN: no growth


def solve_amplifies(T, th, K) -> bool:
    """Whether a float32 call should run in float64 because its chunks' WY sums cancel
    (`REFLECTION_LIMIT`): ``max_i sum_j |T_ij| theta_j |k_j|^2`` above `REFLECTION_LIMIT` (times
    ``sqrt(C / 16)`` for chunks of C > 16 tokens) in some chunk, from the triangular inverses
    ``T [B, N, C, C]``, the inner learning rates ``th [B, N, C]`` and the keys ``K [B, N, C, d]``
    (``O(C^2 + C d)`` per chunk). Float32 only; NaN: no.

    >>> K = np.ones((1, 1, 4, 1), np.float32)
    >>> def amplifies(theta):
    ...     th = np.full((1, 1, 4), theta, np.float32)
    ...     A = np.tril(np.ones((4, 4), np.float32), -1)[None, None]     # one key, no decay
    ...     T = np.linalg.inv(np.eye(4, dtype=np.float32) + th[..., None] * A)
    ...     return solve_amplifies(T, th, K)
    >>> amplifies(0.9), amplifies(1.95)             # T_ij = -theta (1 - theta)^(i-j-1)
    (False, True)
    """
    if T.dtype != np.float32:
        return False
    xp = array_module(T)
    limit = REFLECTION_LIMIT * max(1.0, (T.shape[-1] / 16) ** 0.5)
    with np.errstate(all="ignore"):
        weights = th * xp.einsum("bncd,bncd->bnc", K, K)
        sums = (xp.abs(T) @ weights[..., None])[..., 0]
        return bool(xp.any(sums > limit))


def decays_underflow(logs: tuple, starts, ends, reads=None) -> bool:
    """Whether a token's cumulative decay within its chunk, ``exp(l_i)`` for each of the log
    decays in `logs` (a tuple of ``[B, N, C]``: the retention's, and Titans' momentum decay's),
    is below the smallest normal number of its dtype (a subnormal number
    or 0: digits lost) while its product with the largest entry of the state entering the chunk,
    `starts` ``[B, N, R, D]``, is a normal number and not negligible against the chunk's
    results: the state leaving it, `ends` ``[B, N, R, D]``, and its `reads` ``[B, N, C, D]``
    (where given). The chunked form decays the entering state by ``exp(l_i)`` and loses what
    the loop keeps by multiplying it by one retention at a time: a state of 1e20 under eight
    retentions of 1e-6, with nothing written, is 1e-28 in float32, where exp(l) is 0. A decay
    of exactly 0 (a retention of 0) loses nothing, and neither does one whose product is
    below the rounding of the chunk's other terms (an ordinary state far decayed).

    >>> logs = (np.log(np.full((1, 1, 8), 1e-6, np.float32)).cumsum(-1),)
    >>> large, zero = np.full((1, 1, 2, 2), 1e20, np.float32), np.zeros((1, 1, 2, 2), np.float32)
    >>> decays_underflow(logs, large, zero)
    True
    >>> decays_underflow(logs, large, np.ones((1, 1, 2, 2), np.float32))  # 1e-28 is negligible
    False
    """
    xp = array_module(starts)
    info = np.finfo(starts.dtype)
    floor = float(np.log(info.tiny))
    if not any(bool((l < floor).any()) for l in logs):   # the usual case: every decay normal
        return False
    with np.errstate(divide="ignore"):
        def log_top(a):
            return xp.log(xp.abs(a).max(axis=(-2, -1)))                   # [B, N]
        kept = log_top(ends)
        if reads is not None:
            kept = xp.maximum(kept, log_top(reads))
        top, negligible = log_top(starts)[..., None], kept[..., None] + float(np.log(info.eps))
        return any(bool(((l < floor) & (l + top > floor) & (l + top > negligible)).any())
                   for l in logs)


def _in_some_chunk(parts, test) -> bool:
    """Whether ``test(square, decay)`` holds in some chunk of some part (NaN compares false)."""
    for square, decay in parts:
        with np.errstate(all="ignore"):
            if bool(array_module(square).any(test(square, decay))):
                return True
    return False
