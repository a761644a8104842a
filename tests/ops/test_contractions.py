"""Contractions: matmul/@, dot, vdot, inner, outer, tensordot, einsum, kron.

Each function is checked against NumPy's primal and against finite differences (forward and
reverse mode, first and second order) over hypothesis-drawn shapes.
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tape.errors import NonDifferentiableError
from tape import Active, Const, Reverse, autodiff
from tape.core import config_for
from tape.testing import arrays, check_grads, traced_value

from ops.contractions import _einsum_augmented, _matmul_augmented, normalize_subscripts

FAST = settings(max_examples=25, deadline=None)


def check_traced_primal(f, *args):
    """The value f returns on traced arguments equals NumPy's on plain ones."""
    got, want = traced_value(f, *args, mode="reverse"), f(*args)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert np.shape(got) == np.shape(want)


# -- matmul ---------------------------------------------------------------------------------------
@st.composite
def matmul_pair(draw):
    shapes = draw(hnp.mutually_broadcastable_shapes(signature=np.matmul.signature, max_dims=2,
                                                    max_side=3)).input_shapes
    return tuple(draw(arrays(s)) for s in shapes)


@FAST
@given(matmul_pair())
def test_matmul_grads_with_1d_and_broadcast_batches(pair):
    a, b = pair
    check_traced_primal(lambda x, y: x @ y, a, b)
    check_grads(lambda x, y: x @ y, a, b)
    check_grads(lambda x, y: np.matmul(x, y), a, b)


@FAST
@given(matmul_pair())
def test_matmul_with_one_constant_operand(pair):
    a, b = pair
    check_grads(lambda x: x @ b, a)   # ndarray on the right: Tracer.__matmul__
    check_grads(lambda y: a @ y, b)   # ndarray on the left: __array_ufunc__


def test_matmul_broadcast_batch_cotangent_is_summed():
    a = np.arange(6.0).reshape(1, 2, 3)
    b = np.ones((4, 3, 5))
    (ga, gb), = autodiff(Reverse, lambda x, y: np.sum(x @ y), Active, Active(a), Active(b))
    assert ga.shape == (1, 2, 3) and gb.shape == (4, 3, 5)
    np.testing.assert_allclose(ga, np.full((1, 2, 3), 20.0), atol=1e-11)
    np.testing.assert_allclose(gb, np.broadcast_to(a.sum(axis=1)[..., None], (4, 3, 5)), atol=1e-11)


def test_matmul_saves_only_the_operand_the_active_side_needs():
    x, y = np.ones((2, 3)), np.ones((3, 4))
    _, saved = _matmul_augmented(config_for((True, False)), x, y)
    assert saved[0] is None and saved[1] is y
    _, saved = _matmul_augmented(config_for((False, True)), x, y)
    assert saved[0] is x and saved[1] is None
    (gx, gy), = autodiff(Reverse, lambda x, y: np.sum(x @ y), Active, Active(x), Const(y))
    assert gy is None
    np.testing.assert_allclose(gx, np.full((2, 3), 4.0), atol=1e-11)


def test_matmul_unsupported_keyword_raises():
    with pytest.raises(NotImplementedError):
        autodiff(Reverse, lambda x: np.sum(np.matmul(x, x, axes=[(0, 1), (0, 1), (0, 1)])),
                 Active, Active(np.ones((2, 2))))


# -- dot, vdot, inner, outer, kron ----------------------------------------------------------------
@st.composite
def dot_pair(draw):
    """Operands of np.dot: scalars, vectors, matrices and stacks, with a's last axis matching
    b's second-to-last (or only) axis."""
    na, nb = draw(st.integers(0, 3)), draw(st.integers(0, 3))
    side = st.integers(1, 3)
    k = draw(side)
    sa = tuple(draw(side) for _ in range(max(na - 1, 0))) + ((k,) if na else ())
    if nb == 0:
        sb = ()
    elif nb == 1:
        sb = (k,) if na else (draw(side),)
    else:
        sb = tuple(draw(side) for _ in range(nb - 2)) + (k if na else draw(side), draw(side))
    return draw(arrays(sa)), draw(arrays(sb))


@FAST
@given(dot_pair())
def test_dot_grads(pair):
    a, b = pair
    check_traced_primal(np.dot, a, b)
    check_grads(np.dot, a, b)
    if np.ndim(a):
        check_grads(lambda x, y: x.dot(y), a, b)


@FAST
@given(hnp.array_shapes(min_dims=0, max_dims=3, max_side=3), st.data())
def test_vdot_grads(shape, data):
    a, b = data.draw(arrays(shape)), data.draw(arrays(shape))
    check_traced_primal(np.vdot, a, b)
    check_grads(np.vdot, a, b)


@st.composite
def inner_pair(draw):
    k = draw(st.integers(1, 3))
    sa = draw(hnp.array_shapes(min_dims=0, max_dims=2, max_side=3))
    sb = draw(hnp.array_shapes(min_dims=0, max_dims=2, max_side=3))
    if sa and sb:
        sa, sb = sa[:-1] + (k,), sb[:-1] + (k,)
    return draw(arrays(sa)), draw(arrays(sb))


@FAST
@given(inner_pair())
def test_inner_grads(pair):
    a, b = pair
    check_traced_primal(np.inner, a, b)
    check_grads(np.inner, a, b)


@FAST
@given(arrays(max_dims=2, max_side=3), arrays(max_dims=2, max_side=3))
def test_outer_grads(a, b):
    check_traced_primal(np.outer, a, b)
    check_grads(np.outer, a, b)


@FAST
@given(arrays(max_dims=3, max_side=3), arrays(max_dims=2, max_side=3))
def test_kron_grads_with_different_ranks(a, b):
    check_traced_primal(np.kron, a, b)
    check_traced_primal(np.kron, b, a)
    check_grads(np.kron, a, b)


def test_scalar_operands_multiply():
    b = np.array([[1.0, 2.0], [3.0, 4.0]])
    for f in (np.dot, np.inner, np.kron):
        (ga, gb), = autodiff(Reverse, lambda x, y: np.sum(f(x, y)), Active, Active(2.0),
                             Active(b))
        assert ga == pytest.approx(10.0)
        np.testing.assert_allclose(gb, np.full((2, 2), 2.0), atol=1e-12)


# -- tensordot ------------------------------------------------------------------------------------
@st.composite
def tensordot_case(draw):
    sa = draw(hnp.array_shapes(min_dims=0, max_dims=3, max_side=3))
    n_contract = draw(st.integers(0, len(sa)))
    a_axes = draw(st.permutations(range(len(sa))))[:n_contract]
    free_b = draw(hnp.array_shapes(min_dims=0, max_dims=2, max_side=3))
    nb = n_contract + len(free_b)
    b_axes = draw(st.permutations(range(nb)))[:n_contract]
    sb, free = [None] * nb, iter(free_b)
    for i, j in zip(a_axes, b_axes):
        sb[j] = sa[i]
    sb = tuple(n if n is not None else next(free) for n in sb)
    # Sometimes spell axes with negative indices or as a single int.
    a_spec = [i - len(sa) if draw(st.booleans()) else i for i in a_axes]
    b_spec = [j - nb if draw(st.booleans()) else j for j in b_axes]
    axes = (a_spec, b_spec)
    if n_contract == 1 and draw(st.booleans()):
        axes = (a_spec[0], b_spec[0])
    return draw(arrays(sa)), draw(arrays(sb)), axes


@settings(max_examples=30, deadline=None)
@given(tensordot_case())
def test_tensordot_grads_with_axis_pairs(case):
    a, b, axes = case
    f = lambda x, y: np.tensordot(x, y, axes=axes)
    check_traced_primal(f, a, b)
    check_grads(f, a, b)


def test_tensordot_crossed_axis_pairs():
    # a's axes (0, 2) pair with b's axes (2, 0): the cotangents must be transposed back.
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 5, 2))
    f = lambda x, y: np.tensordot(x, y, axes=([0, 2], [2, 0]))
    check_traced_primal(f, a, b)
    check_grads(f, a, b)
    g = lambda x, y: np.tensordot(x, y, axes=([-1, 0], [0, -1]))
    check_grads(g, a, b)


@FAST
@given(st.integers(0, 2), st.data())
def test_tensordot_grads_with_int_axes(n, data):
    shared = data.draw(hnp.array_shapes(min_dims=n, max_dims=n, max_side=3)) if n else ()
    sa = data.draw(hnp.array_shapes(min_dims=0, max_dims=2, max_side=3)) + shared
    sb = shared + data.draw(hnp.array_shapes(min_dims=0, max_dims=2, max_side=3))
    a, b = data.draw(arrays(sa)), data.draw(arrays(sb))
    f = lambda x, y: np.tensordot(x, y, axes=n)
    check_traced_primal(f, a, b)
    check_grads(f, a, b)


# -- einsum ---------------------------------------------------------------------------------------
EINSUM_CASES = [
    "ij,jk->ik", "ii->i", "ii", "ij->", "bij,bjk->bik", "...ij,...jk->...ik", "i,i->", "ij,ij->ij",
    "ijk->kji", "i,j->ij", "ij,jk", "ba", "iij->j", "iii->i", "ijj,jk->ik", "ij,jk,kl->il",
    "ij,k->", "...i,...i", "i...->...", "Ab,bC->AC", "ii,ij->j", "b,b,b->b",
]


@st.composite
def einsum_operands(draw, subscripts):
    """Operands for `subscripts`: one size per letter; '...' is a batch shape that may be
    broadcast (size-1 axes and missing leading axes) differently in each operand."""
    lhs = subscripts.split("->")[0]
    letters = sorted(set(lhs.replace(".", "").replace(",", "")))
    size = {c: draw(st.integers(1, 3)) for c in letters}
    terms = lhs.split(",")
    n_ell = sum("..." in t for t in terms)
    batch = []
    if n_ell:
        batch = draw(hnp.mutually_broadcastable_shapes(num_shapes=n_ell, max_dims=2,
                                                       max_side=3)).input_shapes
    batch = iter(batch)
    ops = []
    for t in terms:
        head, ell, tail = t.partition("...")
        shape = tuple(size[c] for c in head) + (next(batch) if ell else ()) + tuple(
            size[c] for c in tail)
        ops.append(draw(arrays(shape)))
    return ops


@pytest.mark.parametrize("subscripts", EINSUM_CASES)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_einsum_grads(subscripts, data):
    ops = data.draw(einsum_operands(subscripts))
    f = lambda *xs: np.einsum(subscripts, *xs)
    check_traced_primal(f, *ops)
    check_grads(f, *ops)


def test_einsum_repeated_index_cotangent_sits_on_the_diagonal():
    a = np.arange(9.0).reshape(3, 3)
    (g,), = autodiff(Reverse, lambda x: np.sum(np.einsum("ii->i", x) * np.arange(3.0)),
                     Active, Active(a))
    np.testing.assert_array_equal(g, np.diag([0.0, 1.0, 2.0]))
    (g,), = autodiff(Reverse, lambda x: np.einsum("ii", x), Active, Active(a))
    np.testing.assert_array_equal(g, np.eye(3))


def test_einsum_index_summed_in_one_operand_broadcasts_back():
    a, b = np.ones((2, 3)), np.arange(4.0)
    (ga, gb), = autodiff(Reverse, lambda x, y: np.einsum("ij,k->i", x, y).sum(), Active,
                         Active(a), Active(b))
    np.testing.assert_array_equal(ga, np.full((2, 3), 6.0))
    np.testing.assert_array_equal(gb, np.full(4, 6.0))


def test_einsum_size_one_axes_broadcast_like_numpy():
    a, b = np.arange(3.0).reshape(1, 3), np.arange(2.0).reshape(2, 1) + 1
    check_traced_primal(lambda x, y: np.einsum("ij,ij->ij", x, y), a, b)
    check_grads(lambda x, y: np.einsum("ij,ij->ij", x, y), a, b)
    c, d = np.ones((2, 1, 3, 4)), np.ones((5, 4, 2))
    check_traced_primal(lambda x, y: np.einsum("...ij,...jk", x, y), c, d)


def test_einsum_operand_list_form():
    a, b = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(3, 4)
    f = lambda x, y: np.einsum(x, [0, 1], y, [1, 2], [0, 2])
    check_traced_primal(f, a, b)
    check_grads(f, a, b)
    g = lambda x, y: np.einsum(x, [Ellipsis, 27], y, [27, 0])   # implicit output, 'A' < 'b'
    check_traced_primal(g, a, b)
    check_grads(g, a, b)


def test_einsum_implicit_output_and_optimize():
    a, b = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(3, 4)
    assert normalize_subscripts("ba", ((2, 3),)) == (("ba",), "ab")
    assert normalize_subscripts("Ab,bC", ((2, 3), (3, 4))) == (("Ab", "bC"), "AC")
    f = lambda x, y: np.einsum("ij,jk", x, y, optimize=True)
    check_traced_primal(f, a, b)
    check_grads(f, a, b)


def test_einsum_saves_only_the_operands_other_actives_need():
    x, y, z = np.ones((2, 3)), np.ones((3, 4)), np.ones(4)
    subs = normalize_subscripts("ij,jk,k->i", (x.shape, y.shape, z.shape))
    _, (saved, *_) = _einsum_augmented(config_for((True, False, False)), x, y, z,
                                       subscripts=subs)
    assert saved[0] is None and saved[1] is y and saved[2] is z
    _, (saved, *_) = _einsum_augmented(config_for((False, False, True)), x, y, z,
                                       subscripts=subs)
    assert saved[2] is None


def test_einsum_errors():
    x = np.ones((2, 3))
    run = lambda f: autodiff(Reverse, lambda a: np.sum(f(a)), Active, Active(x))
    with pytest.raises(ValueError):
        run(lambda a: np.einsum("...j->", np.ones((2, 2, 3)) * a))
    with pytest.raises(ValueError):
        run(lambda a: np.einsum("ijk", a))
    with pytest.raises(ValueError):
        run(lambda a: np.einsum("ij,ij", a, np.ones((3, 2))))
    with pytest.raises(NonDifferentiableError, match="np.einsum.*out="):
        run(lambda a: np.einsum("ij", a, out=np.zeros((2, 3))))


def test_plain_list_operands_are_read_as_arrays():
    """np.dot(x, [1., 2.]) once treated the list as a scalar (an elementwise product)."""
    from tape.testing import check_grads
    x = np.array([1.5, 2.0])
    for f, want in [(lambda x: np.dot(x, [1.0, 2.0]), 5.5), (lambda x: x @ [1.0, 2.0], 5.5),
                    (lambda x: np.dot([[1.0, 2.0], [0.0, 1.0]], x), [5.5, 2.0]),
                    (lambda x: np.inner(x, [1.0, 2.0]), 5.5)]:
        np.testing.assert_allclose(f(x), want, atol=1e-11)
        check_grads(f, x, order=2)


@pytest.mark.parametrize("subscripts", ["ij->ji", "ij", "ii->i", "iij->ji", "...i->i...",
                                        "iji->ij"])
def test_einsum_of_one_operand_without_sums_is_a_writeable_view_as_in_numpy(subscripts):
    """NumPy returns a view (a transpose or a diagonal) that writes reach the operand through,
    and that sees later writes into the operand."""
    def f(x):
        y = x * 1.0
        v = np.einsum(subscripts, y)
        v[(0,) * v.ndim] = 10.0 * v[(-1,) * v.ndim]
        v *= 2.0
        y[(-1,) * y.ndim] += 1.0            # seen by v
        return np.sum(np.sin(y)) + np.sum(v ** 2)
    shape = {"ij->ji": (2, 3), "ij": (2, 3), "ii->i": (3, 3), "iij->ji": (2, 2, 3),
             "...i->i...": (2, 3), "iji->ij": (2, 3, 2)}[subscripts]
    x = np.random.default_rng(0).standard_normal(shape)
    check_traced_primal(f, x)
    check_grads(f, x)


@pytest.mark.parametrize("f", [lambda x: np.dot(x, 0.1), lambda x: np.dot(0.1, x),
                               lambda x: np.inner(x, 0.1), lambda x: np.dot(x, 3),
                               lambda x: np.dot(x, np.float32(0.1)), lambda x: np.dot(x, 1j)],
                         ids=["dot-float", "float-dot", "inner-float", "dot-int", "dot-float32",
                              "dot-complex"])
@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_dot_and_inner_with_a_python_number_keep_numpy_dtype(f, mode):
    """np.dot and np.inner make a 0-d array of a Python number (its dtype counts, as `*`'s weak
    scalar would not): float32 with 0.1 is float64, computed in float64."""
    x = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    got, want = traced_value(f, x, mode=mode), f(x)
    assert np.asarray(got).dtype == np.asarray(want).dtype
    np.testing.assert_array_equal(got, want)
