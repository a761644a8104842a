"""Walkthrough 1: scalars and the tape.

Reverse mode runs the function once, forwards, recording each operation on a *tape* (a Wengert
list), then walks the tape backwards carrying the derivative of the output with respect to each
intermediate value (its *cotangent*). This script shows the tape of a small function record by
record, replays the reverse sweep one step at a time, and checks every number it prints.

Run: python docs/walkthroughs/01_scalars_and_the_tape.py
"""
import math
import pathlib
import sys

try:
    import tape
except ImportError:   # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
    import tape

import numpy as np
from tape import Active, Reverse, autodiff
from tape.visualize import record, reverse_steps, show


def f(x):
    return np.sin(x) * x ** 2 + x


def df(x):          # by hand: d/dx [sin(x) x^2 + x]
    return math.cos(x) * x ** 2 + 2 * x * math.sin(x) + 1


x0 = 3.0

# 1. The one-line call. `Active` says: the result is a differentiated scalar, and so is x.
#    autodiff returns ((dx,),): a tuple of derivatives, one per argument.
((dx,),) = autodiff(Reverse, f, Active, Active(x0))
print(f"f'({x0}) = {dx:.12f}")
assert abs(dx - df(x0)) < 1e-12
fd = (f(x0 + 1e-6) - f(x0 - 1e-6)) / 2e-6
print(f"central difference: {fd:.12f}")
assert abs(dx - fd) < 1e-8

# 2. The tape of that call. `tape.record` runs f once in split mode and keeps the tape (a plain
#    autodiff call sweeps and frees it). Each record: op, input slots (%n: the n-th value the
#    trace has seen; %0 is x), output slot, and the bytes it saved for the reverse sweep.
t = record(f, Active(x0))
print("\nThe tape:")
print(show(t))
ops = [r[0].name for r in t.records]
assert ops == ["sin", "power", "multiply", "add"], ops

# 3. The reverse sweep, step by step. Start with cotangent 1 on the result (df/df = 1); each
#    record takes its output's cotangent and sends one to each input (the chain rule, one
#    local derivative at a time). When a value is used twice (x is used three times) its
#    cotangents *add up*.
print("\nThe reverse sweep (cotangent in -> cotangents out):")
sin_x, x2 = math.sin(x0), x0 ** 2
expected = {   # the local derivatives, by hand, for the assertions
    "add": (1.0, 1.0),
    "multiply": (x2, sin_x),                 # d(a*b)/da = b, d(a*b)/db = a, times 1
    "power": (2 * x0 * sin_x, None),         # d(x^2)/dx = 2x, times the incoming sin(x)
    "sin": (math.cos(x0) * x2,),             # d(sin x)/dx = cos x, times the incoming x^2
}
total = 0.0
for step in reverse_steps(t, seed=1.0):
    prim, _, _, in_slots, out_slot = step.record
    outs = ", ".join("const" if s is None else f"%{s} <- {float(c):+.6f}"
                     for s, c in zip(in_slots, step.input_cotangents) if c is not None or s is None)
    print(f"  #{step.index} {prim.name:8s} %{out_slot} has {float(step.cotangent):+.6f};  {outs}")
    for c, e in zip(step.input_cotangents, expected[prim.name]):
        if e is not None:
            assert abs(float(c) - e) < 1e-12, (prim.name, c, e)
    for s, c in zip(in_slots, step.input_cotangents):
        if s == 0 and c is not None:      # contributions to x (slot 0) accumulate
            total += float(c)
print(f"sum of the contributions to x (%0): {total:.12f}")
assert abs(total - dx) < 1e-12

# 4. The same tape can be swept with another seed: the sweep is linear in the seed.
steps = list(reverse_steps(t, seed=2.5))
assert abs(sum(float(c) for s in steps for sl, c in zip(s.record[3], s.input_cotangents)
               if sl == 0) - 2.5 * dx) < 1e-12
print("seed 2.5 gives 2.5 * f'(x): checked")
