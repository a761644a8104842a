"""User code that keeps state, for the compile tests: a custom rule and an inactive function
that count their runs, a rule whose result depends on how often it ran, and the comparison of
how often each ran at each call, compiled against eager.

State kept in a list or dict is seen by the compiled function (it watches what the function
reads, and runs eagerly when that changes), so the counters are `itertools.count` objects,
which it cannot compare: the replay alone decides how often they tick.
"""
import itertools
import re

import numpy as np

import tape
from tape import Active, ReverseWithPrimal, autodiff, custom_rule

import compile_sequences

RP = ReverseWithPrimal
KINDS = ("impl", "aug", "rev", "inactive", "tick")


def _ticks(counter) -> int:
    return int(re.search(r"\d+", repr(counter)).group())


class Counted:
    """`rule` doubles its argument and `scale` (inactive) gives 1.5, both counting their runs;
    `tick` multiplies by 1 + the number of its earlier runs (a run too many changes every later
    value and derivative)."""

    def __init__(self):
        self.counts = {k: itertools.count() for k in KINDS}
        impl, aug, rev, inactive, tick = (self.counts[k] for k in KINDS)

        def double(x):
            next(impl)
            return x * 2.0

        def double_aug(cfg, x):
            next(aug)
            return x * 2.0, None

        def double_rev(cfg, saved, g):
            next(rev)
            return (g * 2.0,)
        self.rule = custom_rule(double, augmented_primal=double_aug, reverse=double_rev,
                                check_primal=False)

        @tape.inactive
        def scale(x):
            next(inactive)
            return np.float64(1.5) + 0.0 * np.sum(x)
        self.scale = scale

        def ticked(x):
            return x * (1.0 + next(tick))

        def ticked_aug(cfg, x):
            factor = 1.0 + next(tick)
            return x * factor, factor

        def ticked_rev(cfg, factor, g):
            return (g * factor,)
        self.tick = custom_rule(ticked, augmented_primal=ticked_aug, reverse=ticked_rev,
                                check_primal=False)

    def snapshot(self) -> dict:
        return {k: _ticks(c) for k, c in self.counts.items()}


def _differences(snapshots) -> list:
    return [{k: b[k] - a[k] for k in b if b[k] != a[k]}
            for a, b in zip(snapshots, snapshots[1:])]


def runs_per_call(make_f, types, make_args, calls):
    """How often each piece of user code ran at each call: compiled, then eager, and the
    compiled function's stats. Errors are not compared here (`counted_sequences` does)."""
    out = []
    for compiled in (True, False):
        counted = Counted()
        f = make_f(counted)
        g = tape.compile(RP, f, Active, *types) if compiled else None
        snapshots = [counted.snapshot()]
        for c in calls:
            args = make_args(c)
            try:
                g(*args) if compiled else autodiff(RP, f, Active, *args)
            except Exception:   # noqa: BLE001  (the counts are compared)
                pass
            snapshots.append(counted.snapshot())
        out.append(_differences(snapshots))
        if compiled:
            stats = g.stats
    return out[0], out[1], stats


def counted_sequences(make_f, make_args, calls):
    """`compile_sequences.sequences` (every call's result, error, arguments and shadows,
    compiled against eager) for ``make_f(Counted())``, and then the runs of user code per
    call compared too. Returns the compiled function."""
    runs = []

    def setup():
        counted, snapshots = Counted(), []
        runs.append((counted, snapshots))

        def args(c):
            snapshots.append(counted.snapshot())
            return make_args(c)
        return make_f(counted), args
    g = compile_sequences.sequences(setup, calls)
    (_, _), (mine, mine_snaps), (theirs, their_snaps) = runs
    compiled = _differences(mine_snaps + [mine.snapshot()])
    eager = _differences(their_snaps + [theirs.snapshot()])
    assert compiled == eager, (compiled, eager, g.stats)
    return g
