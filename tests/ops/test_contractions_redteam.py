"""Contractions as users write them: the corners a red-team pass found wrong or missing.

Each test compares with plain NumPy (values, dtypes, shapes, the errors it raises) or with
finite differences, and fails on the code before its fix.
"""
import doctest
import warnings

import numpy as np
import pytest

import ops.einsum_subscripts
from tape import Active, ReverseWithPrimal, Reverse, autodiff, compile
from tape.testing import check_grads, traced_value


def assert_like_numpy(f, *args, rtol=1e-12):
    """f on traced arguments (reverse and forward mode) gives NumPy's value, dtype and shape."""
    want = f(*args)
    for mode in ("reverse", "forward"):
        got = traced_value(f, *args, mode=mode)
        assert np.asarray(got).dtype == np.asarray(want).dtype, mode
        assert np.shape(got) == np.shape(want), mode
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)


def test_doctests_of_the_subscripts_module():
    assert doctest.testmod(ops.einsum_subscripts).failed == 0


@pytest.mark.parametrize("sx, sy", [((2, 3, 0), (0, 4)), ((2, 3, 5), (5, 0)), ((0, 3, 5), (5, 2))])
def test_matmul_of_a_stack_and_a_matrix_with_a_zero_size_axis(sx, sy):
    """The reverse rule reshaped with -1, which NumPy cannot infer next to a 0 (ValueError)."""
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(sx), rng.standard_normal(sy)
    (gx, gw), = autodiff(Reverse, lambda a, b: np.sum(a @ b), Active, Active(x), Active(w))
    assert gx.shape == sx and gw.shape == sy
    np.testing.assert_allclose(gx, np.broadcast_to(w.sum(axis=1), sx), atol=1e-12)
    np.testing.assert_allclose(gw, np.broadcast_to(x.sum(axis=(0, 1))[:, None], sy),
                               atol=1e-12)


def test_einsum_size_one_axis_broadcast_against_size_zero():
    """A size-1 axis against a size-0 one broadcasts to 0 (the size was taken as max(0, 1) = 1,
    and the reverse rule then failed to reshape)."""
    x, y = np.zeros((0, 4)), np.ones((1, 2))
    f = lambda a, b: np.einsum("bf,ba->fa", a, b)
    assert_like_numpy(f, x, y)
    (gx, gy), = autodiff(Reverse, lambda a, b: np.sum(f(a, b)), Active, Active(x), Active(y))
    assert gx.shape == (0, 4)
    np.testing.assert_array_equal(gy, np.zeros((1, 2)))


def _three_factor_loss(x, y, z):
    path = np.einsum_path("ij,jk,kl->il", x, y, z, optimize="optimal")[0]
    return np.sum(np.einsum("ij,jk,kl->il", x, y, z, optimize=path) ** 2)


def test_einsum_path_of_traced_operands_and_its_path_as_optimize():
    """np.einsum_path reads shapes only; on traced operands it raised NotImplementedError."""
    rng = np.random.default_rng(1)
    ops_ = [rng.standard_normal(s) for s in [(3, 4), (4, 5), (5, 2)]]
    check_grads(_three_factor_loss, *ops_, order=1)
    g = compile(ReverseWithPrimal, _three_factor_loss, Active, Active, Active, Active)
    for sizes in [(3, 4, 5, 2), (3, 4, 5, 2), (2, 30, 1, 40)]:
        xs = [rng.standard_normal(sizes[i:i + 2]) for i in range(3)]
        want = autodiff(ReverseWithPrimal, _three_factor_loss, Active, *map(Active, xs))
        got = g(*map(Active, xs))
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
        for a, b in zip(got[0], want[0]):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("keywords", [
    dict(dtype=np.complex128), dict(dtype="f8"), dict(dtype=np.float32, casting="same_kind"),
    dict(casting="no"), dict(casting="unsafe"), dict(order="F"), dict(order="c"),
    dict(dtype=np.complex64, casting="same_kind", optimize=True)])
def test_einsum_dtype_order_and_casting_as_numpy_reads_them(keywords):
    """They raised NotImplementedError on traced operands."""
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 5))
    f = lambda x, y: np.einsum("ij,jk->ik", x, y, **keywords)
    assert_like_numpy(f, a, b, rtol=1e-5)
    if np.finfo(np.dtype(keywords.get("dtype", "f8"))).eps < 1e-10:   # double precision
        check_grads(f, a, b, order=1)


def test_einsum_dtype_casts_complex_operands_and_python_scalars():
    rng = np.random.default_rng(3)
    c = rng.standard_normal((2, 3)) + 1j * rng.standard_normal((2, 3))
    b = rng.standard_normal(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        assert_like_numpy(lambda x, y: np.einsum("ij,j->i", x, y, dtype="f8", casting="unsafe"),
                          c, b)
    assert_like_numpy(lambda x: np.einsum("ij,->ij", x, 2.0, dtype=np.complex128), b[None])
    check_grads(lambda x, y: np.einsum(x, [0, 1], y, [1], [0], dtype=np.complex128), c, b,
                order=1)


@pytest.mark.parametrize("keywords, error", [
    (dict(dtype=np.float32), TypeError), (dict(casting="no"), TypeError),
    (dict(casting="bogus"), ValueError), (dict(order="X"), ValueError)])
def test_einsum_keywords_numpy_refuses_are_refused(keywords, error):
    a, b = np.ones((2, 3)), np.ones((3, 2), np.float32)
    with pytest.raises(error):
        np.einsum("ij,jk->ik", a, b, **keywords)
    with pytest.raises(error):
        traced_value(lambda x, y: np.einsum("ij,jk->ik", x, y, **keywords), a, b)


def test_one_operand_einsum_without_sums_is_numpy_s_view_whatever_the_dtype():
    a = np.arange(6.0).reshape(2, 3)
    assert_like_numpy(lambda x: np.einsum("ij->ji", x, dtype=np.complex128), a)


@pytest.mark.parametrize("subscripts, shapes", [
    ("......i", [(2,)]), ("...iAi...->", [(2, 3, 2)]), ("ji,......Aj", [(2, 2), (2, 1)]),
    ("i...->...i...", [(2, 3)])])
def test_einsum_two_ellipses_in_one_term_are_refused(subscripts, shapes):
    """NumPy refuses them; they were read as one ellipsis repeated."""
    ops_ = [np.ones(s) for s in shapes]
    with pytest.raises(ValueError):
        np.einsum(subscripts, *ops_)
    with pytest.raises(ValueError, match="at most one '...'"):
        traced_value(lambda *xs: np.einsum(subscripts, *xs), *ops_)


@pytest.mark.parametrize("sublist, error", [([0, -1], ValueError), ([0, 52], ValueError),
                                            ([0, 1.0], TypeError), ([0, True], TypeError)])
def test_einsum_operand_list_subscripts_out_of_range_are_refused(sublist, error):
    """-1 was read as 'Z' and True as 'B' (values NumPy refuses to give)."""
    x = np.ones((2, 3))
    with pytest.raises(error):
        np.einsum(x, sublist)
    with pytest.raises(error):
        traced_value(lambda a: np.einsum(a, sublist), x)


@pytest.mark.parametrize("optimize", [True, "greedy", "optimal"])
def test_einsum_with_optimize_sums_ellipsis_axes_missing_from_the_output(optimize):
    """NumPy's optimized einsum sums them ('i...->i' is a row sum); it was refused."""
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((3, 4, 2)), rng.standard_normal((4, 2))
    for subscripts, ops_ in [("i...->i", (a,)), ("i...,...->i", (a, b)), ("...j->", (b,))]:
        f = lambda *xs: np.einsum(subscripts, *xs, optimize=optimize)
        assert_like_numpy(f, *ops_)
        check_grads(f, *ops_, order=1)
    with pytest.raises(ValueError):
        traced_value(lambda x: np.einsum("i...->i", x), a)      # optimize=False refuses


@pytest.mark.parametrize("shapes, axes", [(((2, 3), (3, 4)), ([5], [0])),
                                          (((2, 3), (2, 4)), ([-3], [0])),
                                          (((), (3,)), ([0], [0]))])
def test_tensordot_axes_out_of_range_are_refused(shapes, axes):
    """Axis 5 of a 2-d operand was read as axis 1 (a value NumPy refuses to give), and a 0-d
    operand raised ZeroDivisionError."""
    a, b = (np.ones(s) for s in shapes)
    with pytest.raises(IndexError):
        np.tensordot(a, b, axes=axes)
    with pytest.raises(IndexError, match="out of bounds"):
        traced_value(lambda x, y: np.tensordot(x, y, axes=axes), a, b)


def test_tensordot_axes_as_a_zero_dimensional_array_and_list_operands():
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((3, 4))
    assert_like_numpy(lambda x, y: np.tensordot(x, y, axes=np.array(1)), a, b)
    # np.result_type read a list as a dtype specification
    assert_like_numpy(lambda x: np.vdot([1.0, 2.0, 3.0], x), b[:, 0])
    assert_like_numpy(lambda x: np.einsum("i,i", [1.0, 2.0, 3.0], x, dtype=np.complex128), b[:, 0])


def _complex(rng, *shape):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


@pytest.mark.skipif(not hasattr(np, "matvec"), reason="np.matvec and np.vecmat need NumPy 2.2")
def test_vecdot_matvec_vecmat():
    """NumPy 2's contraction ufuncs had no rule (NotImplementedError on traced operands)."""
    rng = np.random.default_rng(6)
    r = lambda *s: rng.standard_normal(s)      # noqa: E731
    cases = [(np.vecdot, r(3), r(3)), (np.vecdot, r(2, 1, 3), r(4, 3)),
             (lambda x, y: np.vecdot(x, y, axis=0, keepdims=True), r(3, 2), r(3, 1)),
             (np.vecdot, _complex(rng, 2, 3), _complex(rng, 3)),
             (np.matvec, r(4, 1, 2, 3), r(5, 3)), (np.matvec, _complex(rng, 2, 3), r(3)),
             (np.vecmat, r(5, 3), r(4, 1, 3, 2)), (np.vecmat, _complex(rng, 3), _complex(rng, 3, 2))]
    for f, x, y in cases:
        assert_like_numpy(f, x, y)
        check_grads(f, x, y, order=1)
    with pytest.raises(NotImplementedError, match="axes"):
        traced_value(lambda x: np.vecdot(x, x, axes=[(-1,), (-1,), ()]), r(3))
