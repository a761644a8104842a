"""Walkthrough 5: custom rules and kernel pairs, verified three ways.

Sometimes the engine should *not* trace a function: it is a fused kernel, a call into compiled
code, or its tape would be too big. `tape.custom_rule` registers it as one opaque primitive
with hand-written rules: `augmented_primal` (compute, and save what the reverse rule needs) and
`reverse` (cotangent in, one cotangent per argument out). A hand-written rule is only as good as
its checks; Hecate's kernel pairs are verified three ways:

  (A) it equals the tape gradient of a reference written with ordinary (traced) operations;
  (B) it matches finite differences;
  (C) a stop-gradient barrier or a Const argument gives exactly no derivative.

Run: python docs/walkthroughs/05_custom_rules_and_kernel_pairs.py
"""
import pathlib
import sys

try:
    import tape
except ImportError:   # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
    import tape

import numpy as np
import kernels
from tape import Active, Const, Reverse, autodiff, custom_rule, inactive
from tape.testing import check_grads, check_rule


# An opaque op: x / sqrt(1 + x^2), a smooth clip. Its implementation calls NumPy on plain
# arrays (the engine does not look inside); the rules say how to differentiate it.
def _smooth_clip(x):
    return x / np.sqrt(1.0 + x * x)


def _augmented(cfg, x):
    r = 1.0 / np.sqrt(1.0 + x * x)
    return x * r, r                          # save 1/sqrt(1+x^2): the derivative is r^3


def _reverse(cfg, r, g):
    return (g * r ** 3,)                     # d/dx [x (1+x^2)^(-1/2)] = (1+x^2)^(-3/2)


def _forward(cfg, primals, tangents):
    (x,), (t,) = primals, tangents
    r = 1.0 / np.sqrt(1.0 + x * x)
    return x * r, t * r ** 3


smooth_clip = custom_rule(_smooth_clip, augmented_primal=_augmented, reverse=_reverse,
                          forward=_forward, name="smooth_clip")


def reference(x):                            # the same function, traced op by op
    return x / np.sqrt(1.0 + x * x)


rng = np.random.default_rng(0)
x = rng.standard_normal(5)
u = rng.standard_normal(5)                   # a cotangent: loss = u . f(x)

# (A) hand rule == tape gradient of the reference.
((g_rule,),) = autodiff(Reverse, lambda x: np.sum(u * smooth_clip(x)), Active, Active(x))
((g_tape,),) = autodiff(Reverse, lambda x: np.sum(u * reference(x)), Active, Active(x))
print("(A) hand rule :", np.round(g_rule, 8))
print("    tape      :", np.round(g_tape, 8))
assert np.allclose(g_rule, g_tape, rtol=1e-13, atol=1e-15)

# (B) finite differences: check_grads compares forward and reverse mode with central
#     differences (order 1: an opaque rule is once differentiable); check_rule tries every
#     activity combination (Const/Active/Duplicated/batch) of the rule.
check_grads(smooth_clip, x, order=1)
n = check_rule(smooth_clip, x)
print(f"(B) finite differences agree; check_rule ran {n} activity combinations")

# (C) no derivative where none should flow: through a stop-gradient barrier (an `inactive`
#     identity), and for a Const argument.
stop = inactive(lambda x: x)
((g_stop,),) = autodiff(Reverse, lambda x: np.sum(u * smooth_clip(stop(x))) + 0.0 * np.sum(x),
                        Active, Active(x))
print("(C) through a barrier:", g_stop)
assert not np.any(g_stop)
((g_x, g_c),) = autodiff(Reverse, lambda x, c: np.sum(smooth_clip(x) * smooth_clip(c)),
                         Active, Active(x), Const(x))
assert g_c is None and np.allclose(g_x, smooth_clip(x) / (1 + x * x) ** 1.5)
print("    Const argument -> None; the Active one is still right")

# A real kernel pair: the delta-rule memory of kernels/ (hand-written reverse-time
# recurrence), against its token-by-token program traced by the engine.
#   M_{t+1} = (1 - alpha_t) M_t - theta_t (M_t k_t - v_t) k_t^T,   y_t = M_{t+1} q_t
def delta_tokenwise(k, v, q, alpha, theta, m0):
    M, ys = m0, []
    for t in range(k.shape[0]):
        M = (1 - alpha[t]) * M - theta[t] * np.outer(M @ k[t] - v[t], k[t])
        ys.append(M @ q[t])
    return np.stack(ys), M


s, d = 6, 4
k, v, q = rng.standard_normal((3, s, d)) * 0.5
alpha, theta, m0 = rng.uniform(0.05, 0.2, s), rng.uniform(0.2, 0.8, s), rng.standard_normal((d, d)) * 0.1
wy, wm = rng.standard_normal((s, d)), rng.standard_normal((d, d))


def loss_of(rule):
    def loss(k, v, q, alpha, theta, m0):
        y, m = rule(k, v, q, alpha, theta, m0)
        return np.sum(wy * y) + np.sum(wm * m)
    return loss


args = (k, v, q, alpha, theta, m0)
(kern,) = autodiff(Reverse, loss_of(kernels.delta_rule), Active, *map(Active, args))
(ref,) = autodiff(Reverse, loss_of(delta_tokenwise), Active, *map(Active, args))
worst = max(float(np.max(np.abs(a - b))) for a, b in zip(kern, ref))
print(f"(A) kernels.delta_rule vs traced token loop: max |difference| = {worst:.1e}")
assert worst < 1e-12
check_grads(kernels.delta_rule, *args, order=1, modes=("rev",))
print("(B) kernels.delta_rule matches finite differences")
(blocked,) = autodiff(Reverse, lambda k, *r: loss_of(kernels.delta_rule)(stop(k), *r)
                      + 0.0 * np.sum(k), Active, *map(Active, args))
assert not np.any(blocked[0]) and np.allclose(blocked[1], kern[1])
print("(C) a barrier on k gives dk == 0 exactly, the other gradients unchanged")
