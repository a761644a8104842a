"""`tape.compile` on complex programs: each compiled function is called several times with new
values of one signature (zeros, the branch cut of angle/log/sqrt, values on both sides of an
`np.where` on `abs(z) > 1`), complex64 and complex128, and must give eager `autodiff`'s results,
shadows and dtypes, from one trace and no eager call. A few gradients are also checked against
central finite differences on the real and imaginary parts (docs/complex.md's convention:
df/dx + i df/dy for a real f)."""
import copy

import numpy as np
import pytest

import tape
from tape import (Active, BatchDuplicated, Const, Duplicated, Forward, ForwardWithPrimal,
                  Reverse, ReverseHolomorphic, ReverseHolomorphicWithPrimal, ReverseWithPrimal,
                  autodiff)

C64, C128 = np.complex64, np.complex128

# sqrt's and log's partials are infinite at 0 (eager and compiled alike).
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _rng(seed=0):
    return np.random.default_rng(seed)


def _z(rng, shape, dtype=C128):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


def _tol(x):
    dt = np.asarray(x).dtype
    return 2e-5 if dt in (np.float32, np.complex64) else 1e-12


def _same(eager, compiled, where="result"):
    if isinstance(eager, (tuple, list)):
        assert isinstance(compiled, (tuple, list)) and len(eager) == len(compiled), where
        for i, (e, c) in enumerate(zip(eager, compiled)):
            _same(e, c, f"{where}[{i}]")
        return
    if eager is None:
        assert compiled is None, where
        return
    assert type(compiled) is type(eager), (where, type(eager), type(compiled))
    e, c = np.asarray(eager), np.asarray(compiled)
    assert c.dtype == e.dtype and c.shape == e.shape, (where, e.dtype, c.dtype)
    t = _tol(e)
    np.testing.assert_allclose(c, e, rtol=t, atol=t * max(1.0, float(np.max(np.abs(e), initial=0))),
                               err_msg=where)


def _against_eager(mode, f, ret, types, make, n=4, traces=1):
    """Compile f, call it with make(k) for k < n, and compare every call with eager autodiff
    (results, then the values and shadows of the arguments)."""
    g = tape.compile(mode, f, *((ret,) if ret is not None else ()), *types)
    for k in range(n):
        args = make(k)
        ea, ca = copy.deepcopy(args), copy.deepcopy(args)
        eager = autodiff(mode, f, *((ret,) if ret is not None else ()), *ea)
        compiled = g(*ca)
        _same(eager, compiled, f"call {k}")
        for i, (a, b) in enumerate(zip(ea, ca)):
            _same(a.val, b.val, f"call {k} arg {i} value")
            if hasattr(a, "dval"):
                _same(a.dval, b.dval, f"call {k} arg {i} shadow")
    assert g.stats.eager_calls == 0, g.stats.eager_reasons
    if traces is not None:
        assert g.stats.traces == traces, g.stats
    return g


def _fd_grad(f, z, h=1e-6):
    """df/dx + i df/dy of a real f at complex z, by central differences."""
    z = np.asarray(z, dtype=C128)
    out = np.zeros_like(z)
    for i in np.ndindex(z.shape):
        for unit, part in ((1.0, 1.0), (1j, 1j)):
            zp, zm = z.copy(), z.copy()
            zp[i] += h * unit
            zm[i] -= h * unit
            out[i] += part * (f(zp) - f(zm)) / (2 * h)
    return out


# Values one signature meets across calls: generic, with zeros, on the negative real axis with
# both signs of zero in the imaginary part (angle, log and sqrt jump there), mixed moduli.
_VALUES = [
    lambda r: _z(r, 4),
    lambda r: np.array([0, 1 + 1j, -2 + 0j, 0.5j]),
    lambda r: np.array([-1 + 0j, -1 - 0j, complex(-3, 1e-300), complex(-3, -1e-300)]),
    lambda r: 3 * _z(r, 4),
]


def _vals(k, dtype, rng):
    return np.asarray(_VALUES[k % len(_VALUES)](rng)).astype(dtype)


REAL_LOSSES = {
    "abs2": lambda z: np.sum(np.abs(z) ** 2),
    "abs": lambda z: np.sum(np.abs(z)),
    "angle": lambda z: np.sum(np.angle(z) * np.arange(1, 5)),
    "real-imag-attrs": lambda z: np.sum(z.real ** 2 * z.imag - 3 * np.imag(z)),
    "conj": lambda z: np.real(np.sum(np.conj(z) * z * z * 1j)),
    "log-branch": lambda z: np.sum(np.imag(np.log(np.where(z == 0, 1, z)))),
    "sqrt-branch": lambda z: np.sum(np.imag(np.sqrt(z)) * np.arange(4)),
    "where-abs>1": lambda z: np.sum(np.where(np.abs(z) > 1, np.abs(z) ** 2, np.real(z * z))),
    "fft": lambda z: np.sum(np.abs(np.fft.fft(z)) ** 2 * np.arange(4)),
    "ifft-ortho": lambda z: np.sum(np.real(np.fft.ifft(z * z, norm="ortho")) * np.arange(4)),
    "fft-pad": lambda z: np.sum(np.abs(np.fft.fft(z, n=6))),
    "irfft": lambda z: np.sum(np.fft.irfft(z) * np.arange(6)),
    "vdot": lambda z: np.real(np.vdot(z, z * 2j + 1)),
    "prod-with-zeros": lambda z: np.abs(np.prod(z + 0.5)) ** 2 + np.real(np.prod(z) * 1j),
    "sign": lambda z: np.real(np.sum(np.sign(z) * z * np.arange(4))),
}


@pytest.mark.parametrize("dtype", [C128, C64])
@pytest.mark.parametrize("name", list(REAL_LOSSES))
def test_real_losses_of_complex_values_over_branches_match_eager(name, dtype):
    f, rng = REAL_LOSSES[name], _rng(1)
    _against_eager(Reverse, f, Active, (Active,), lambda k: (Active(_vals(k, dtype, rng)),))
    rng = _rng(2)
    _against_eager(ReverseWithPrimal, f, Active, (Duplicated,),
                   lambda k: (Duplicated(_vals(k, dtype, rng), np.full(4, 1 - 2j, dtype)),))


def _square(rng, k, dtype=C128):
    return (_z(rng, (3, 3)) + 3 * np.eye(3)).astype(dtype)


def _hermitian(rng, k, dtype=C128):
    a = _z(rng, (3, 3))
    return (a + a.conj().T + 7 * np.eye(3)).astype(dtype)


MATRIX_LOSSES = {
    "matmul": (lambda a: np.sum(np.abs(a @ a.conj().T @ a) ** 2), _square),
    "einsum": (lambda a: np.real(np.einsum("ij,jk,ki->", a, a.conj(), a * 1j)), _square),
    "inv": (lambda a: np.sum(np.abs(np.linalg.inv(a)) ** 2), _square),
    "solve": (lambda a: np.sum(np.abs(np.linalg.solve(a, a[:, 0] * 1j)) ** 2), _square),
    "det-abs": (lambda a: np.abs(np.linalg.det(a)), _square),
    "det-real": (lambda a: np.real(np.linalg.det(a) * (1 - 1j)), _square),
    "slogdet": (lambda a: np.linalg.slogdet(a)[1] + np.imag(np.linalg.slogdet(a)[0]), _square),
    "eigh-values": (lambda a: np.sum(np.linalg.eigh(a)[0] ** 2 * np.arange(3)), _hermitian),
    "eigh-vectors": (lambda a: np.sum(np.abs(np.linalg.eigh(a)[1]) ** 2 * np.arange(3)),
                     _hermitian),
    "svd-values": (lambda a: np.sum(np.linalg.svd(a)[1] ** 3), _square),
    "svd-rebuilt": (lambda a: np.sum(np.abs((lambda u, s, vh: (u * s) @ vh)(
        *np.linalg.svd(a))) * np.arange(3)), _square),
    "cholesky": (lambda a: np.sum(np.abs(np.linalg.cholesky(a)) ** 2 * np.arange(3)),
                 _hermitian),
}


@pytest.mark.parametrize("dtype", [C128, C64])
@pytest.mark.parametrize("name", list(MATRIX_LOSSES))
def test_linalg_on_complex_matrices_matches_eager(name, dtype):
    f, make = MATRIX_LOSSES[name]
    rng = _rng(3)
    _against_eager(Reverse, f, Active, (Active,),
                   lambda k: (Active(make(rng, k, dtype)),), n=3)
    rng = _rng(4)
    _against_eager(ReverseWithPrimal, f, Active, (Duplicated,),
                   lambda k: (Duplicated(make(rng, k, dtype), np.zeros((3, 3), dtype)),), n=3)


@pytest.mark.parametrize("name", ["abs", "angle", "where-abs>1", "fft", "conj"])
def test_compiled_gradient_is_df_dx_plus_i_df_dy(name):
    f, rng = REAL_LOSSES[name], _rng(5)
    g = tape.compile(Reverse, f, Active, Active)
    for _ in range(3):
        z = 2 * _z(rng, 4)
        (grad,), = g(Active(z))
        np.testing.assert_allclose(grad, _fd_grad(f, z), rtol=1e-6, atol=1e-6)
    assert g.stats.traces == 1 and g.stats.eager_calls == 0


def test_compiled_linalg_gradient_is_df_dx_plus_i_df_dy():
    rng = _rng(6)
    f = lambda a: np.abs(np.linalg.det(a)) + np.sum(np.abs(np.linalg.inv(a) @ a.conj()))
    g = tape.compile(Reverse, f, Active, Active)
    for k in range(2):
        a = _square(rng, k)
        (grad,), = g(Active(a))
        np.testing.assert_allclose(grad, _fd_grad(f, a), rtol=1e-6, atol=1e-6)
    assert g.stats.traces == 1 and g.stats.eager_calls == 0


@pytest.mark.parametrize("rdtype,cdtype", [(np.float64, C128), (np.float32, C64)])
def test_real_inputs_made_complex_inside_f(rdtype, cdtype):
    rng = _rng(7)

    def f(x, c):
        z = np.exp(1j * x) * x + x.astype(cdtype) * c
        return np.sum(np.abs(np.fft.fft(z)) ** 2) + np.sum(np.angle(z))

    g = _against_eager(ReverseWithPrimal, f, Active, (Active, Const), lambda k: (
        Active(rng.standard_normal(4).astype(rdtype)), Const(_z(rng, 4, cdtype))))
    (dx, _), val = g(Active(np.ones(4, rdtype)), Const(np.ones(4, cdtype)))
    assert dx.dtype == rdtype and np.asarray(val).dtype == rdtype


def _buffers(rng, dtype, seed_shadow=False):
    rdtype = np.float32 if dtype == C64 else np.float64
    shadow = _z(rng, 4, dtype) if seed_shadow else np.zeros(4, dtype)
    return (Duplicated(_z(rng, 4, dtype), shadow),
            Duplicated(rng.standard_normal(4).astype(rdtype), np.zeros(4, rdtype)))


def _writes_through_views(z, x):
    z.real[...] = x * 2
    z.imag[1:] += x[1:] ** 2
    np.copyto(z[:1], z[2:3] * 1j)
    v = z[::2]
    v *= 1j + x[:2]
    np.multiply(z, 1 - 1j, out=z)
    np.conj(z, out=z)


@pytest.mark.parametrize("dtype", [C128, C64])
def test_writes_into_complex_buffers_and_views_reverse(dtype):
    rng = _rng(8)

    def loss(z, x):
        _writes_through_views(z, x)
        return np.sum(np.abs(z) ** 2 * np.arange(4)) + np.sum(np.angle(z))

    _against_eager(ReverseWithPrimal, loss, Active, (Duplicated, Duplicated),
                   lambda k: _buffers(rng, dtype))

    def no_result(z, x):   # the seed is the shadow of the overwritten buffer
        _writes_through_views(z, x)
        z.real *= np.sin(z.imag)

    _against_eager(Reverse, no_result, Const, (Duplicated, Duplicated),
                   lambda k: _buffers(rng, dtype, seed_shadow=True))


@pytest.mark.parametrize("dtype", [C128, C64])
def test_writes_into_complex_buffers_and_views_forward(dtype):
    rng = _rng(9)
    rdtype = np.float32 if dtype == C64 else np.float64

    def f(z, x):
        _writes_through_views(z, x)
        return np.where(np.abs(z) > 1, z * z, np.conj(z)) + np.abs(z)

    _against_eager(ForwardWithPrimal, f, Duplicated, (Duplicated, Duplicated), lambda k: (
        Duplicated(_z(rng, 4, dtype), _z(rng, 4, dtype)),
        Duplicated(rng.standard_normal(4).astype(rdtype), rng.standard_normal(4).astype(rdtype))))


FORWARD = {
    "poly": lambda z: z ** 3 - 2j * z ** 2 + z,
    "exp-log": lambda z: np.exp(z) * np.log(z + 3),
    "non-holomorphic": lambda z: np.conj(z) * z.real + np.abs(z) * np.angle(z),
    "fft": lambda z: np.fft.ifft(np.fft.fft(z) * z),
    "where": lambda z: np.where(np.abs(z) > 1, z * z, np.conj(z)),
    "linalg": lambda z: np.linalg.inv(np.outer(z, z.conj()) + 4 * np.eye(4)) @ z
    + np.linalg.det(np.diag(z) + 1),
}


@pytest.mark.parametrize("dtype", [C128, C64])
@pytest.mark.parametrize("name", list(FORWARD))
def test_forward_complex_tangents_match_eager_and_differences(name, dtype):
    f, rng = FORWARD[name], _rng(10)
    for mode in (Forward, ForwardWithPrimal):
        _against_eager(mode, f, Duplicated, (Duplicated,), lambda k: (
            Duplicated(_vals(k, dtype, rng) if name != "exp-log" else _z(rng, 4, dtype),
                       _z(rng, 4, dtype)),), n=3)
    if dtype == C128:   # tangent in direction dz = difference quotient of f along dz
        g = tape.compile(Forward, f, Duplicated, Duplicated)
        z, dz, h = 2 * _z(rng, 4), _z(rng, 4), 1e-6
        (df,) = g(Duplicated(z, dz))
        np.testing.assert_allclose(df, (f(z + h * dz) - f(z - h * dz)) / (2 * h),
                                   rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [C128, C64])
@pytest.mark.parametrize("width", [1, 3])
def test_batched_complex_reverse_and_forward(dtype, width):
    rng = _rng(11)

    def bdup(shape, zero=False):
        return BatchDuplicated(_z(rng, shape, dtype), tuple(
            np.zeros(shape, dtype) if zero else _z(rng, shape, dtype) for _ in range(width)))

    def into(y, z, a):
        y.real[...] = np.abs(z[1:]) ** 2
        y.imag[1:] += np.angle(z[2:])
        y += np.fft.fft(z * np.conj(z[::-1]))[:3]
        y -= np.linalg.inv(a + 3 * np.eye(3)) @ z[:3]

    _against_eager(Reverse, into, Const, (BatchDuplicated,) * 3,
                   lambda k: (bdup(3), bdup(4, zero=True), bdup((3, 3), zero=True)), n=3)
    _against_eager(ForwardWithPrimal, lambda z: np.where(np.abs(z) > 1, z * z, z.real)
                   + np.linalg.det(np.outer(z, z) + np.eye(4)), BatchDuplicated,
                   (BatchDuplicated,), lambda k: (BatchDuplicated(
                       _vals(k, dtype, rng), tuple(_z(rng, 4, dtype) for _ in range(width))),),
                   n=3)


@pytest.mark.parametrize("mode", [ReverseHolomorphic, ReverseHolomorphicWithPrimal])
def test_holomorphic_modes_answer_eagerly_with_the_complex_derivative(mode):
    """docs/compile.md: the holomorphic modes run eagerly; they must still give f'(z)."""
    rng = _rng(12)
    f = lambda z: np.sum(z ** 3 * np.exp(z) + np.linalg.det(np.outer(z, z) + np.eye(3)))
    g = tape.compile(mode, f, Active, Duplicated)
    for k in range(2):
        z = _z(rng, 3, [C128, C64][k])
        got_shadow, ref_shadow = np.zeros_like(z), np.zeros_like(z)
        got = g(Duplicated(z.copy(), got_shadow))
        _same(autodiff(mode, f, Active, Duplicated(z.copy(), ref_shadow)), got)
        _same(ref_shadow, got_shadow)
        zc, h = z.astype(C128), 1e-6
        fd = [(f(zc + h * e) - f(zc - h * e)) / (2 * h) for e in np.eye(3)]
        np.testing.assert_allclose(got_shadow, fd, rtol=1e-6 if k == 0 else 1e-4, atol=1e-5)
    assert g.stats.eager_calls == 2 and g.stats.traces == 0


def test_copyto_with_a_traced_mask_into_a_complex_buffer_traces_once():
    rng = _rng(13)

    def f(z, x):
        np.copyto(z, x * 1j, where=x > 0)
        return np.sum(np.abs(z) ** 2 * np.arange(4))

    _against_eager(Reverse, f, Active, (Duplicated, Duplicated),
                   lambda k: _buffers(rng, C128), n=5)
