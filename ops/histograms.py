"""Weighted histograms with traced weights: `np.histogram`, `np.histogram2d` and
`np.histogramdd` with ``weights=w``.

A histogram is linear in its weights: each bin sums the weights of the data points that fall
in it, so the derivative of a bin with respect to a weight is 1 when the point falls in that
bin and 0 otherwise (points outside the range, and NaN points, reach no bin). The data and the
bins are constants: the counts are piecewise constant in the data, so a traced `sample`,
`bins` or `range` is refused. The primal is NumPy's own call (the same bits, whatever path
NumPy takes: bincount for equal bins, cumulative sums for given edges); `density=True` is the
weighted counts divided, as NumPy divides them, by the bin widths and the total.
"""
from __future__ import annotations

import numpy as np

from tape.core import Tracer, nondiff_value, peek, primal
from tape.rules import inactive, register_function

from ._util import defprimitive, shape_of
from .indexing import _dtype, getitem, scatter_add
from .shape import ravel


def _call(which, data, bins, range_, weights):
    """NumPy's counts for the weights `weights` (the first result only)."""
    if which == "histogram":
        return np.histogram(data, bins=bins, range=range_, weights=weights)[0]
    return np.histogramdd(data, bins=bins, range=range_, weights=weights)[0]


def _bins_of(which, data, edges):
    """(flat bin of each point, whether it falls in a bin), by NumPy's rules: left-closed
    bins, the last one closed on the right too; points outside (or NaN) fall in none."""
    if which == "histogram":
        edges = (edges,)
        data = np.reshape(data, (-1, 1))
    counts = []
    for d, e in enumerate(edges):
        column = data[:, d]
        index = np.searchsorted(e, column, side="right")
        index[column == e[-1]] -= 1
        counts.append(index)
    sizes = np.array([len(e) - 1 for e in edges])
    inside = np.all([(c >= 1) & (c <= n) for c, n in zip(counts, sizes)], axis=0)
    flat = np.ravel_multi_index(tuple(np.where(inside, c - 1, 0) for c in counts),
                                tuple(sizes))
    return flat, inside


def _hist_impl(w, which, data, bins, range_, edges):
    if isinstance(w, Tracer):   # an outer level's traced value: recorded at that level
        return weighted_histogram(w, which=which, data=data, bins=bins, range_=range_,
                                  edges=edges)
    return _call(which, data, bins, range_, w)


def _hist_augmented(cfg, w, which, data, bins, range_, edges):
    return _hist_impl(w, which, data, bins, range_, edges), (which, data, edges, shape_of(w))


def _hist_reverse(cfg, saved, g):
    which, data, edges, shape = saved
    flat, inside = _bins_of(which, data, edges)
    return (np.reshape(getitem(ravel(g), index=flat) * inside, shape),)


def _hist_forward(cfg, primals, tangents, which, data, bins, range_, edges):
    flat, inside = _bins_of(which, data, edges)
    t = tangents[0]
    sizes = tuple(len(e) - 1 for e in ((edges,) if which == "histogram" else edges))
    dtype = _dtype(t) if which == "histogram" else np.float64
    scattered = scatter_add(ravel(t) * inside, index=flat, shape=(int(np.prod(sizes)),),
                            dtype=dtype)
    return (_hist_impl(primals[0], which, data, bins, range_, edges),
            np.reshape(scattered, sizes if which == "histogramdd" else sizes[0]))


weighted_histogram = defprimitive("weighted_histogram", _hist_impl, _hist_augmented,
                                  _hist_reverse, _hist_forward)


def _refuse_traced(name, **arguments):
    for argument, value in arguments.items():
        if _carries_derivative(value):
            raise NotImplementedError(
                f"numpy.{name} of a traced `{argument}` has no derivative rule in hecate: the "
                "counts are piecewise constant in it. Pass plain data and bins (tape.primal(x)"
                "); only `weights` may be traced, the histogram is linear in them.")


def _carries_derivative(value) -> bool:
    """Whether `value` (or an item of a list or tuple) is traced with a derivative. A compiling
    trace's Const values are tracers without one, which `nondiff_value` keeps as they are."""
    if isinstance(value, (list, tuple)):
        return any(_carries_derivative(v) for v in value)
    return isinstance(value, Tracer) and nondiff_value(value) is not value


@inactive
def _edges(data, bins, range_, weights):
    """np.histogram's bin edges (np.histogram_bin_edges computes them the same way)."""
    return np.histogram_bin_edges(data, bins=bins, range=range_, weights=weights)


def _density(hist, widths):
    return hist / widths / np.sum(hist)


def histogram(a, bins=10, range=None, density=None, weights=None):
    """np.histogram with traced `weights` (the data and bins plain).

    >>> hist, edges = histogram(np.array([0.1, 0.6, 0.7]), 2, (0, 1), weights=np.ones(3))
    >>> hist
    array([1., 2.])
    """
    _refuse_traced("histogram", a=a, bins=bins, range=range)
    bins, range = primal(bins), primal(range)   # (a compiled function checks Const ones)
    if not isinstance(weights, Tracer):
        return np.histogram(primal(a), bins=bins, range=range, density=density,
                            weights=weights)
    # Const data and the edges computed from it are recorded nondiff values: a compiled
    # function bins each call's data.
    data = nondiff_value(a if isinstance(a, Tracer) else np.asarray(a))
    edges = _edges(data, bins, range, weights)
    hist = weighted_histogram(weights, which="histogram", data=data, bins=bins, range_=range,
                              edges=nondiff_value(edges))
    if density:
        hist = _density(hist, np.diff(edges).astype(float))
    return hist, edges


def histogramdd(sample, bins=10, range=None, density=None, weights=None):
    """np.histogramdd with traced `weights` (the sample and bins plain).

    >>> hist, edges = histogramdd(np.array([[0.1, 0.2], [0.6, 0.9]]), 2, [(0, 1), (0, 1)],
    ...                           weights=np.array([2.0, 3.0]))
    >>> hist
    array([[2., 0.],
           [0., 3.]])
    """
    _refuse_traced("histogramdd", sample=sample, bins=bins, range=range)
    # Const values of a compiling trace are read (and checked at each call).
    sample, bins, range = primal(sample), primal(bins), primal(range)
    if not isinstance(weights, Tracer):
        return np.histogramdd(sample, bins=bins, range=range, density=density,
                              weights=weights)
    try:   # NumPy's reading of `sample`: an (N, D) array, or D sequences of N coordinates
        _, _ = sample.shape
        data = np.asarray(sample)
    except (AttributeError, ValueError):
        data = np.atleast_2d(sample).T
    _, edges = np.histogramdd(data, bins=bins, range=range, weights=peek(weights))
    hist = weighted_histogram(weights, which="histogramdd", data=data, bins=bins,
                              range_=range, edges=tuple(edges))
    if density:
        total = np.sum(hist)
        for i, e in enumerate(edges):
            shape = np.ones(len(edges), int)
            shape[i] = len(e) - 1
            hist = hist / np.diff(e).reshape(shape)
        hist = hist / total
    return hist, edges


# NumPy's Python code behind the dispatcher (its call of np.histogramdd dispatches again).
_NUMPY_HISTOGRAM2D = np.histogram2d._implementation


def histogram2d(x, y, bins=10, range=None, density=None, weights=None):
    """np.histogram2d with traced `weights`: NumPy's own steps, through histogramdd.

    >>> hist, xedges, yedges = histogram2d(np.array([0.1, 0.6]), np.array([0.2, 0.9]), 2,
    ...                                    [(0, 1), (0, 1)], weights=np.array([2.0, 3.0]))
    >>> hist
    array([[2., 0.],
           [0., 3.]])
    """
    _refuse_traced("histogram2d", x=x, y=y, bins=bins, range=range)
    return _NUMPY_HISTOGRAM2D(x, y, bins=bins, range=range, density=density, weights=weights)


for _np_fn, _rule in [(np.histogram, histogram), (np.histogramdd, histogramdd),
                      (np.histogram2d, histogram2d)]:
    register_function(_np_fn, _rule)
