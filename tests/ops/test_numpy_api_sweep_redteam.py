"""A sweep of the public NumPy API called as unmodified code would call it, with keyword
arguments, under Reverse and Forward gradients: primal equal to plain NumPy, both modes equal to
central finite differences. Known defects are strict xfails."""
import numpy as np
import pytest

from tape import Duplicated, Forward, ForwardWithPrimal, Reverse, autodiff, gradient

RNG = np.random.default_rng(0)
A = RNG.uniform(0.1, 0.9, (3, 4))
_S = RNG.uniform(0.1, 0.9, (3, 3))
SPD = _S @ _S.T + 3 * np.eye(3)
B = np.array([0.3, 0.7, 0.2, 0.9])
T4 = np.array([0.0, 0.5, 1.5, 1.7])
L, F = np.linalg, np.fft


def _outs(o):
    return [np.asarray(t) for t in o] if isinstance(o, (tuple, list)) else [np.asarray(o)]


def _objective(fn, outs):
    ws = [np.random.default_rng(1).uniform(0.5, 1.5, o.shape) for o in outs]

    def obj(x):
        total = 0.0
        for o, w, ref in zip(_outs(fn(x)), ws, outs):
            if ref.dtype.kind in "fc":
                total = total + np.sum(o * w)
        return total
    return obj


def _fd(f, x, h=1e-4):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        def at(d):
            y = x.copy()
            y[i] += d
            return f(y)
        g[i] = (-at(2 * h) + 8 * at(h) - 8 * at(-h) + at(-2 * h)) / (12 * h)
    return g


CASES = {
    # statistics with keywords
    "cov[ddof=0,aweights]": (lambda x: np.cov(x, ddof=0, aweights=B), A),
    "cov[bias,fweights]": (lambda x: np.cov(x, bias=True, fweights=[1, 2, 1, 3]), A),
    "cov[aweights traced]": (lambda x: np.cov(B, aweights=x[0]), A),
    "corrcoef[rowvar=False]": (lambda x: np.corrcoef(x, rowvar=False), A),
    "average[weights 2d traced]": (lambda x: np.average(x, weights=np.ones((3, 4)) + x), A),
    "quantile[method=nearest]": (lambda x: np.quantile(x, 0.3, axis=0, method="nearest"), A),
    "percentile[midpoint]": (lambda x: np.percentile(x, 35, axis=0, method="midpoint"), A),
    "quantile[q traced]": (lambda x: np.quantile(B, x[0, 0]), A),
    "nanpercentile[nan]": (lambda x: np.nanpercentile(np.where(x > 0.5, x, np.nan), 40, axis=1), A),
    "nanmedian[nan]": (lambda x: np.nanmedian(np.where(x > 0.5, x, np.nan), axis=0), A),
    "median[axis tuple]": (lambda x: np.median(x[None], axis=(0, 2)), A),
    "std[where]": (lambda x: np.std(x, where=x > 0.3), A),
    "max[where,initial]": (lambda x: np.max(x, where=x < 0.6, initial=0.0), A),
    # cumulative, differences, integration
    "gradient[coords]": (lambda x: np.gradient(x[0], T4), A),
    "gradient[edge_order=2]": (lambda x: np.gradient(x, edge_order=2), A),
    "gradient[traced spacing]": (lambda x: np.gradient(B, x[0] + np.arange(4.0)), A),
    "trapezoid[x traced]": (lambda x: np.trapezoid(x[0], x=np.cumsum(x[1])), A),
    "ediff1d[to_begin traced]": (lambda x: np.ediff1d(x, to_end=[1.0], to_begin=x[0, :1]), A),
    "diff[append traced]": (lambda x: np.diff(x, axis=0, append=x[:1]), A),
    "cumulative_prod[include_initial]": (lambda x: np.cumulative_prod(x, axis=0, include_initial=True), A),
    "nancumprod[nan]": (lambda x: np.nancumprod(np.where(x > 0.5, x, np.nan), axis=1), A),
    "unwrap[discont,axis]": (lambda x: np.unwrap(x * 10, discont=4.0, axis=0), A),
    # shape manipulation
    "pad[reflect]": (lambda x: np.pad(x, ((1, 0), (2, 1)), mode="reflect"), A),
    "pad[symmetric]": (lambda x: np.pad(x, 1, mode="symmetric"), A),
    "pad[wrap]": (lambda x: np.pad(x, 1, mode="wrap"), A),
    "pad[mean]": (lambda x: np.pad(x, 1, mode="mean"), A),
    "delete[mask]": (lambda x: np.delete(x, [True, False, True, False], axis=1), A),
    "insert[traced values]": (lambda x: np.insert(x, [0, 2], x[:, :1], axis=1), A),
    "choose[mode=clip]": (lambda x: np.choose([0, 1, 2, 5], [x[0], x[1], x[2]], mode="clip"), A),
    "piecewise": (lambda x: np.piecewise(x, [x < 0.5, x >= 0.5], [lambda t: t**2, lambda t: 2 * t]), A),
    "take_along_axis[axis=None]": (lambda x: np.take_along_axis(x, np.argsort(x, axis=None), axis=None), A),
    "partition[kth list]": (lambda x: np.partition(x[0], [1, 2]), A),
    "meshgrid[ij]": (lambda x: np.meshgrid(x[0], x[1, :3], indexing="ij"), A),
    # polynomials, interpolation, histograms
    "polyfit[w]": (lambda x: np.polyfit(np.arange(4.0), x[0], 1, w=B), A),
    "polyfit[2d y]": (lambda x: np.polyfit(np.arange(4.0), x.T, 1), A),
    "interp[period]": (lambda x: np.interp(x[0] * 10, [0.0, 1.0, 2.0], [1.0, 2.0, 0.5], period=3.0), A),
    "interp[x, xp, fp traced]": (lambda x: np.interp(x[0] * 0.5 + 0.2, np.cumsum(x[1]), x[2]), A),
    "histogram[density,weights]": (lambda x: np.histogram(B, bins=3, weights=x[0], density=True)[0], A),
    "histogram2d[weights]": (lambda x: np.histogram2d(B, B[::-1], bins=2, weights=x[0])[0], A),
    # ufunc methods and products
    "add.reduceat": (lambda x: np.add.reduceat(x, [0, 2], axis=1), A),
    "maximum.accumulate": (lambda x: np.maximum.accumulate(x, axis=1), A),
    "einsum[sublist]": (lambda x: np.einsum(x, [0, 1], x, [2, 1], [0, 2]), A),
    "cross[axis broadcast]": (lambda x: np.cross(x[:, :3], x[::-1, 1:]), A),
    "correlate[full]": (lambda x: np.correlate(x[0], x[1, :3], mode="full"), A),
    # linear algebra
    "linalg.lstsq[x, residuals]": (lambda x: L.lstsq(x, np.arange(4.0), rcond=None)[:2], A.T.copy()),
    "linalg.multi_dot[vector ends]": (lambda x: L.multi_dot([x[0], x.T, x, x[1]]), A),
    "linalg.norm[-2]": (lambda x: L.norm(x, -2), A),
    "linalg.cond[fro]": (lambda x: L.cond(x, "fro"), SPD),
    "linalg.pinv[hermitian]": (lambda x: L.pinv(x, hermitian=True), SPD),
    "linalg.tensorinv": (lambda x: L.tensorinv(x, ind=1), SPD),
    "linalg.slogdet[batch]": (lambda x: L.slogdet(np.stack([x, -x]))[1], SPD),
    # FFT
    "fft.irfft[n odd, ortho]": (lambda x: F.irfft(x, n=7, norm="ortho"), A),
    "fft.hfft[n]": (lambda x: F.hfft(x, n=7), A),
    "fft.rfftn[s]": (lambda x: np.abs(F.rfftn(x, s=(4, 6), axes=(0, 1))), A),
    "fft.irfft2[s]": (lambda x: F.irfft2(x, s=(3, 5), axes=(0, 1)), A),
    "fft.fftshift[axes]": (lambda x: F.fftshift(x, axes=1), A),
    # ndarray methods and operators
    "ndarray.repeat[counts]": (lambda x: x.repeat([1, 2, 0], axis=0), A),
    "ndarray.take[mode=clip]": (lambda x: x.take([0, 20], mode="clip"), A),
    "ndarray.var[complex]": (lambda x: (x + 1j * x[::-1]).var(), A),
    "ndarray.__ipow__[traced exponent]": (lambda x: (x + 1.0).__ipow__(x), A),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_sweep_primal_and_gradients(name):
    fn, x = CASES[name]
    x = x.copy()
    outs = _outs(fn(x.copy()))
    primal = autodiff(ForwardWithPrimal, fn, Duplicated(x.copy(), np.zeros_like(x)))[-1]
    got = _outs(primal)
    assert len(got) == len(outs)
    for a, b in zip(got, outs):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)
    obj = _objective(fn, outs)
    expected = _fd(obj, x)
    scale = max(1.0, float(np.max(np.abs(expected))))
    for mode in (Reverse, Forward):
        g = gradient(mode, obj, x.copy())[0]
        np.testing.assert_allclose(g, expected, rtol=1e-6, atol=1e-6 * scale, err_msg=str(mode))


# -- findings ------------------------------------------------------------------------------------
W = np.random.default_rng(2).uniform(0.5, 1.5, 4)


@pytest.mark.parametrize("mode", [Reverse, Forward], ids=["rev", "fwd"])
def test_ix_of_float_arrays_is_differentiable(mode):
    g = gradient(mode, lambda x: np.sum(np.ix_(x, x[:2])[0].ravel() * W), B.copy())[0]
    np.testing.assert_allclose(g, W, rtol=1e-12)


@pytest.mark.xfail(strict=True, reason="Reverse gives nan, Forward 0: divide's pullback multiplies "
                   "the zero cotangent from nan_to_num's replaced entries by 1/0")
def test_nan_to_num_of_division_by_zero_reverse_matches_forward():
    f = lambda x: np.sum(np.nan_to_num(x / 0.0)) + np.sum(x * W)
    with np.errstate(all="ignore"):
        gf = gradient(Forward, f, B.copy())[0]
        gr = gradient(Reverse, f, B.copy())[0]
    np.testing.assert_allclose(gf, W, rtol=1e-12)
    np.testing.assert_allclose(gr, W, rtol=1e-12)


@pytest.mark.parametrize("probe", [np.isfortran, lambda x: not x.flags.c_contiguous],
                         ids=["isfortran", "flags"])
@pytest.mark.parametrize("mode", [Reverse, Forward], ids=["rev", "fwd"])
def test_layout_queries_on_traced_values(mode, probe):
    f = lambda x: np.sum(x * W) * (2.0 if probe(x) else 1.0)
    np.testing.assert_allclose(gradient(mode, f, B.copy())[0], W, rtol=1e-12)


def test_ufunc_where_into_plain_out_names_the_function():
    f = lambda x: np.sum(np.multiply(x, 2.0, where=x > 0.5, out=np.zeros(4)))
    with pytest.raises(Exception, match="multiply"):
        gradient(Reverse, f, B.copy())


@pytest.mark.parametrize("call,word", [
    (lambda x: (lambda y: (y.put([0, 3], x[:2]), y)[1])(np.zeros(5)), "put"),
    (lambda x: np.array([0, 1, 0, 1]).choose([x, 2 * x]), "choose"),
], ids=["put", "choose"])
def test_plain_ndarray_method_with_traced_argument_names_the_method(call, word):
    with pytest.raises(Exception, match=word):
        gradient(Reverse, lambda x: np.sum(call(x)), B.copy())
