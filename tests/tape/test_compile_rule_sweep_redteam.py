"""`tape.compile` on the losses of benchmarks/rule_ratios.py (``np.sum(op(x) * w)`` around one
NumPy operation) whose compiled function traced more than once or ran eagerly in the
``--compiled`` sweep, on small inputs.

Each loss is compiled with the sweep's activities (the differentiated arrays `Duplicated`, index
arrays, masks and data `Const`) and called with three inputs of the same shapes and dtypes and
other values. The values must equal eager autodiff's (and the gradient central finite
differences), and the rules must replay each call's Const arrays (index arrays, histogram
data) rather than guard their values or refuse them, which would trace again at every new
input (and, past `max_traces`, run the signature eagerly).
"""
from __future__ import annotations

import numpy as np
import pytest

import tape
import tape.scipy.special as tss
from tape import Active, Const, Duplicated, Reverse, autodiff

N = 8
W = np.cos(np.arange(3 * N) + 0.5)   # weights: sliced to the output's length


def _weighted(op):
    def loss(*args):
        out = op(*args)
        return np.sum(out * W[:np.size(out)].reshape(np.shape(out)))
    return loss


def _select(x):
    return np.select([x < -1, x < 1], [x ** 2, np.sin(x)], default=x)


def _bincount(x, i):
    return np.bincount(i, weights=x, minlength=N)


def _histogram(x, d):
    return np.histogram(d, bins=4, range=(0.0, 1.0), weights=x)[0]


def _choose(a, b, i):
    return np.choose(i, [a, b])


def _multigammaln(x):
    return tss.multigammaln(x, 5)


def _unique(x):
    return np.unique(x)


def _inputs(name, k):
    """The k-th input of a case: other values, the same shapes, output shapes and branches."""
    r = np.random.default_rng(100 + k)
    x = r.uniform(-2, 2, N)
    if name == "select":
        x[:3] = [-1.5 - 0.1 * k, 0.3 + 0.1 * k, 1.5 + 0.1 * k]   # every branch, away from kinks
        x[np.abs(np.abs(x) - 1) < 0.05] = 0.5
        return (x,)
    if name == "bincount":
        return (x, r.permutation(N))               # every bin, max index N - 1
    if name == "histogram":
        return (x, r.uniform(0.05, 0.95, N))
    if name == "choose":
        return (x, r.uniform(-2, 2, N), r.integers(0, 2, N))
    if name == "multigammaln":
        return (r.uniform(3, 6, N),)
    if name == "unique":
        return (r.permutation(N) + 0.25 * k,)        # N distinct values
    raise KeyError(name)


CASES = {   # name: (op, indices of the differentiated arguments)
    "select": (_select, (0,)),
    "bincount": (_bincount, (0,)),
    "histogram": (_histogram, (0,)),
    "choose": (_choose, (0, 1)),
    "multigammaln": (_multigammaln, (0,)),
    "unique": (_unique, (0,)),
}


def _specs(args, active):
    return [Duplicated(a.copy(), np.zeros_like(a)) if k in active else Const(a.copy())
            for k, a in enumerate(args)]


def _central_differences(loss, args, k, h=1e-6):
    x = args[k]
    grad = np.empty_like(x)
    for j in range(x.size):
        up, down = x.copy(), x.copy()
        up[j] += h
        down[j] -= h
        hi = loss(*[up if m == k else a for m, a in enumerate(args)])
        lo = loss(*[down if m == k else a for m, a in enumerate(args)])
        grad[j] = (hi - lo) / (2 * h)
    return grad


def _run(name):
    """Compile the case's loss and call it with three inputs against eager autodiff, plain NumPy
    and central differences; return the compiled function's stats."""
    op, active = CASES[name]
    loss = _weighted(op)
    n_args = len(_inputs(name, 0))
    g = tape.compile(Reverse, loss, Active, *[Duplicated if k in active else Const
                                              for k in range(n_args)])
    for k in range(3):
        args = _inputs(name, k)
        want, got = _specs(args, active), _specs(args, active)
        assert autodiff(Reverse, loss, Active, *want) == ((None,) * n_args,)
        assert g(*got) == ((None,) * n_args,)
        for m in active:
            np.testing.assert_array_equal(got[m].dval, want[m].dval)   # float64: bit-equal
            np.testing.assert_allclose(want[m].dval, _central_differences(loss, args, m),
                                       rtol=1e-6, atol=1e-8)
    return g.stats


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_gradient_equals_eager_over_new_inputs(name):
    stats = _run(name)
    assert stats.traces + stats.eager_calls >= 1


@pytest.mark.parametrize("name", [
    "select",
    "bincount",
    "histogram",
    "choose",
    "multigammaln",
])
def test_rule_replays_new_inputs_without_tracing_again(name):
    stats = _run(name)
    assert stats.eager_calls == 0 and stats.traces == 1 and stats.guard_failures == 0, stats
