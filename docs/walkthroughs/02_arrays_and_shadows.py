"""Walkthrough 2: arrays and Duplicated shadows.

An array argument is passed as `Duplicated(x, dx)`: the primal `x` and its *shadow* `dx`, an
array of the same shape into which reverse mode *adds* the gradient. Adding (not overwriting)
is what lets one shadow collect contributions from several calls, or from several uses of x.
A function that writes its result into an output array (Julia's `f!(y, x)`) gets its VJP by
seeding the output's shadow; after the sweep that shadow is zeroed where the output was
overwritten. Every number printed is checked.

Run: python docs/walkthroughs/02_arrays_and_shadows.py
"""
import pathlib
import sys

try:
    import tape
except ImportError:   # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
    import tape

import numpy as np
from tape import Active, Const, Duplicated, Reverse, autodiff


def loss(A):
    return np.sum(A ** 2)                 # gradient 2A


# 1. Shadows accumulate. Two calls with the same shadow give the sum of two gradients; this
#    is how gradients of a sum of losses (or of minibatches) are collected without copies.
A, dA = np.array([1.0, 2.0, 3.0]), np.zeros(3)
autodiff(Reverse, loss, Active, Duplicated(A, dA))
print("after one call:  dA =", dA)
assert np.array_equal(dA, 2 * A)
autodiff(Reverse, loss, Active, Duplicated(A, dA))
print("after two calls: dA =", dA)
assert np.array_equal(dA, 4 * A)
dA[:] = 0                                 # so reset shadows between independent gradients

# The same accumulation happens inside one call: x used twice gets both contributions.
((g,),) = autodiff(Reverse, lambda x: np.sum(x * x), Active, Active(A))
print("d/dx sum(x*x) =", g)
assert np.array_equal(g, 2 * A)


# 2. The f!(y, x) VJP. f writes into y and returns nothing (Const). Seeding dy with a vector
#    u asks for u^T J: the vector-Jacobian product lands in dx.
def f_(y, x):
    y[0] = x[0] ** 2 + x[1]
    y[1] = x[0] * x[1]


x, dx = np.array([2.0, 3.0]), np.zeros(2)
y, dy = np.zeros(2), np.array([1.0, 0.0])       # u = e_0: the first row of the Jacobian
autodiff(Reverse, f_, Const, Duplicated(y, dy), Duplicated(x, dx))
J = np.array([[2 * x[0], 1.0], [x[1], x[0]]])   # the Jacobian, by hand
print("y =", y, " dx = u^T J =", dx, " dy after =", dy)
assert np.array_equal(y, [7.0, 6.0])
assert np.array_equal(dx, J[0]) and np.array_equal(dy, [0.0, 0.0])

# Why is dy zeroed? After the sweep a shadow holds the derivative with respect to the value
# the array had when f was *called*. f overwrote every entry of y, so the old values do not
# influence anything: their derivative is 0. Had dy kept the seed, a second call with the same
# shadows would add the old seed again. An entry f does not overwrite passes its seed through:
def g_(y, x):
    y[0] = x[0] * x[1]                   # y[1] is left alone


x, dx, y, dy = np.array([2.0, 3.0]), np.zeros(2), np.array([5.0, 7.0]), np.array([1.0, 10.0])
autodiff(Reverse, g_, Const, Duplicated(y, dy), Duplicated(x, dx))
print("partial overwrite: dx =", dx, " dy =", dy)
assert np.array_equal(dx, [3.0, 2.0]) and np.array_equal(dy, [0.0, 10.0])

# Rows of the Jacobian one seed at a time, checked against central differences.
x = np.array([0.3, -1.2])
rows = []
for u in np.eye(2):
    dx, y, dy = np.zeros(2), np.zeros(2), u.copy()
    autodiff(Reverse, f_, Const, Duplicated(y, dy), Duplicated(x.copy(), dx))
    rows.append(dx)


def f_value(x):
    y = np.zeros(2)
    f_(y, x)
    return y


h = 1e-6
fd = np.stack([(f_value(x + h * e) - f_value(x - h * e)) / (2 * h) for e in np.eye(2)], axis=1)
print("Jacobian by reverse sweeps:\n", np.stack(rows))
assert np.allclose(np.stack(rows), fd, atol=1e-8)
print("matches central differences")
