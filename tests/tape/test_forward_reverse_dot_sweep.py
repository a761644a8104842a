"""Forward mode against reverse mode on every case of benchmarks/rule_ratio_cases.py (one NumPy or
SciPy operation each), on small float64 inputs.

For a random direction v of the differentiated arguments and a random cotangent w of the
output, the JVP (`Forward`, `Duplicated(x, v)`) and the VJP (`ReverseWithPrimal` on
``sum(op(x) * w)``) must satisfy the dot-product identity <w, J v> == <J^T w, v> to rounding,
relative to |w| |J v| + |J^T w| |v|. Besides:
- `ForwardWithPrimal`'s primal and the reverse pass's loss equal plain NumPy's;
- `Forward`'s tangent equals `ForwardWithPrimal`'s;
- `BatchDuplicated` with two directions equals two single-direction calls;
- every result is a NumPy value (no tracer leaks out);
- both J v and J^T w are nonzero (so the identity is not 0 == 0);
- away from kinks and ties, J v equals central differences of NumPy along v.
"""
from __future__ import annotations

import numpy as np
import pytest

from benchmarks.rule_ratio_cases import CASES, CUBIC, MAT, SPECIAL, VEC
from tape import (Active, BatchDuplicated, Const, Duplicated, Forward, ForwardWithPrimal,
                  ReverseWithPrimal, autodiff)

# Small sizes: VEC stays 1000 because "split 1000, one part" needs a multiple of 1000 and
# "top-k via argpartition" at least 100 entries; MAT >= 20 for "partition axis=1" (kth 10) and
# "kron" (s // 10 rows).
SIZE = {VEC: 1000, MAT: 20, CUBIC: 12, SPECIAL: 200}
BY_NAME = {c.name: c for c in CASES}

# Central differences do not apply here: a tie or near-tie that the step reorders, a kink
# that the step crosses, or an output whose shape follows the values. The AD checks still run.
NO_FINITE_DIFFERENCES = {
    "max with ties",            # ties: a subgradient, not a derivative
    "sort 1-D", "x[argsort(x)]", "sort descending [::-1]",   # 1000 values: gaps below the step
    "partition k=n/2",          # NumPy's arrangement of the two sides moves with the values
    "unique (values)",          # rounded values: the output's length changes under the step
    "interp wrt x",             # 1000 knots: the step crosses some
}


def _flat(a):
    return np.asarray(a, dtype=np.float64).ravel()


def _plain(value):
    return value is None or isinstance(value, (float, int, np.ndarray, np.generic))


def _specs(args, active, shadows):
    return [Duplicated(a.copy(), shadows[k].copy()) if k in active else Const(a.copy())
            for k, a in enumerate(args)]


def _check(case):
    rng = np.random.default_rng(0)
    args = tuple(np.asarray(a) for a in case.make(SIZE[case.sizes], rng))
    active = case.active
    want = case.op(*[a.copy() for a in args])
    directions = np.random.default_rng(1)
    v = {k: directions.standard_normal(args[k].shape) for k in active}
    v2 = {k: directions.standard_normal(args[k].shape) for k in active}
    w = directions.standard_normal(np.shape(want))

    # Forward with primal: the primal is NumPy's, the tangent Forward's.
    jv, primal = autodiff(ForwardWithPrimal, case.op, *_specs(args, active, v))
    assert _plain(jv) and _plain(primal), (type(jv), type(primal))
    assert np.shape(primal) == np.shape(want) and np.shape(jv) == np.shape(want)
    np.testing.assert_allclose(primal, want, rtol=1e-13, atol=1e-13)
    (jv_only,) = autodiff(Forward, case.op, *_specs(args, active, v))
    assert _plain(jv_only)
    np.testing.assert_allclose(jv_only, jv, rtol=1e-13, atol=1e-13)

    # Reverse: J^T w into the shadows, and the loss's value.
    def loss(*a):
        return np.sum(case.op(*a) * w)

    zeros = {k: np.zeros(args[k].shape) for k in active}
    specs = _specs(args, active, zeros)
    grads, value = autodiff(ReverseWithPrimal, loss, Active, *specs)
    assert _plain(value) and all(_plain(g) for g in grads)
    np.testing.assert_allclose(value, loss(*[a.copy() for a in args]), rtol=1e-12, atol=1e-12)
    jtw = {k: specs[k].dval for k in active}

    # The dot-product identity, relative to the magnitudes (Cauchy-Schwarz bounds each side).
    lhs = float(np.dot(_flat(w), _flat(jv)))
    rhs = sum(float(np.dot(_flat(jtw[k]), _flat(v[k]))) for k in active)
    scale = (np.linalg.norm(_flat(w)) * np.linalg.norm(_flat(jv))
             + sum(np.linalg.norm(_flat(jtw[k])) * np.linalg.norm(_flat(v[k])) for k in active))
    assert np.any(_flat(jv) != 0) and any(np.any(jtw[k] != 0) for k in active), \
        "J v or J^T w is zero: the identity would hold trivially"
    assert abs(lhs - rhs) <= 1e-9 * scale, (lhs, rhs, scale)

    # Batch mode: two directions in one pass equal two single-direction calls.
    batch = [BatchDuplicated(a.copy(), (v[k].copy(), v2[k].copy())) if k in active
             else Const(a.copy()) for k, a in enumerate(args)]
    (tangents,) = autodiff(Forward, case.op, *batch)
    (jv2,) = autodiff(Forward, case.op, *_specs(args, active, v2))
    assert len(tangents) == 2 and all(_plain(t) for t in tangents)
    np.testing.assert_allclose(tangents[0], jv, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tangents[1], jv2, rtol=1e-12, atol=1e-12)

    # J v against central differences of plain NumPy along v.
    if case.name not in NO_FINITE_DIFFERENCES:
        h = 1e-7   # a divisor within 1e-4 of 0 ("divide") needs a step well below it
        up = case.op(*[a + h * v[k] if k in active else a for k, a in enumerate(args)])
        down = case.op(*[a - h * v[k] if k in active else a for k, a in enumerate(args)])
        fd = (np.asarray(up) - np.asarray(down)) / (2 * h)
        np.testing.assert_allclose(jv, fd, rtol=1e-4, atol=1e-4 * np.max(np.abs(fd)))


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_forward_and_reverse_agree(name):
    _check(BY_NAME[name])
