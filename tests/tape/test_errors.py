"""Bad input gets a clear error naming the argument, leaf path, shape or dtype at fault."""
import dataclasses

import numpy as np
import pytest

from tape import (Active, ActivityError, Const, Duplicated, Forward, NonDifferentiableError,
                  PytreeError, Reverse, autodiff)


def test_active_in_forward_mode():
    with pytest.raises(ActivityError, match="Active is not allowed in forward mode; use Duplicated"):
        autodiff(Forward, lambda x: x * 2, Active(1.0))


def test_active_return_in_forward_mode():
    with pytest.raises(ActivityError, match="use Duplicated"):
        autodiff(Forward, lambda x: x * 2, Active, Duplicated(1.0, 1.0))


def test_shadow_wrong_shape_names_argument():
    def f(weights):
        return np.sum(weights)
    with pytest.raises(ActivityError, match=r"weights.*shape \(2,\).*\(3,\)"):
        autodiff(Reverse, f, Active, Duplicated(np.ones(3), np.zeros(2)))


def test_shadow_wrong_dtype():
    with pytest.raises(ActivityError, match="dtype float32.*float64"):
        autodiff(Reverse, np.sum, Active, Duplicated(np.ones(3), np.zeros(3, np.float32)))


@dataclasses.dataclass
class Proj:
    w_k: np.ndarray
    w_v: np.ndarray


@dataclasses.dataclass
class Model:
    proj: Proj
    scale: float


def test_shadow_wrong_shape_reports_leaf_path():
    model = Model(Proj(np.ones((2, 3)), np.ones(3)), 1.0)
    dmodel = Model(Proj(np.zeros((3, 2)), np.zeros(3)), 0.0)
    with pytest.raises(ActivityError, match=r"model\.proj\.w_k"):
        autodiff(Reverse, lambda model: np.sum(model.proj.w_k), Active,
                 Duplicated(model, dmodel))


def test_shadow_wrong_structure():
    with pytest.raises(ActivityError, match="structure"):
        autodiff(Reverse, lambda p: np.sum(p["a"]), Active,
                 Duplicated({"a": np.ones(2)}, {"b": np.zeros(2)}))


def test_shadow_wrong_array_module():
    class FakeGpuArray:
        """Looks like a CuPy array to the engine's module check."""
        __cuda_array_interface__ = {}
        shape = (3,)
        dtype = np.dtype(np.float64)
        ndim = 1
    with pytest.raises(ActivityError, match="cupy array but the primal is a numpy array"):
        autodiff(Reverse, np.sum, Active, Duplicated(np.ones(3), FakeGpuArray()))


@pytest.mark.parametrize("annotation", [Active, lambda x: Duplicated(x, np.zeros_like(x))])
def test_integer_arrays_cannot_be_active(annotation):
    with pytest.raises(ActivityError, match=r"argument 0 \(`x`\).*int64.*Const"):
        autodiff(Reverse, lambda x: np.sum(x), Active, annotation(np.arange(3)))


def test_active_value_written_into_plain_array():
    def f(x):
        out = np.zeros(2)
        out[:] = x * 2
        return np.sum(out)
    with pytest.raises(NonDifferentiableError, match="zeros_like"):
        autodiff(Reverse, f, Active, Active(np.ones(2)))


def test_active_scalar_written_into_plain_array_element():
    def f(x):
        out = np.zeros(3)
        out[0] = x[0]
        return np.sum(out)
    with pytest.raises((NonDifferentiableError, ValueError)) as info:
        autodiff(Reverse, f, Active, Active(np.ones(2)))
    err = info.value
    text = str(err) + str(err.__cause__ or "")
    assert "zeros_like" in text


def test_float_of_active_tracer_refuses():
    with pytest.raises(NonDifferentiableError, match="drop its derivative"):
        autodiff(Reverse, lambda x: float(x) * 2, Active, Active(1.0))


def test_non_scalar_return_without_seed():
    with pytest.raises(ActivityError, match=r"real scalar.*shape \(3,\)"):
        autodiff(Reverse, lambda x: x * 2, Active, Active(np.ones(3)))


def test_complex_return_in_reverse_needs_seed():
    with pytest.raises(ActivityError, match="real scalar"):
        autodiff(Reverse, lambda x: x * 1j, Active, Active(1.0))


def test_unsupported_object_in_pytree_names_type_and_place():
    class Opaque:
        pass
    with pytest.raises(PytreeError, match=r"Opaque.*\['b'\].*register_pytree"):
        autodiff(Reverse, lambda p: np.sum(p["a"]), Active,
                 Active({"a": np.ones(2), "b": Opaque()}))


def test_non_callable_f():
    with pytest.raises(ActivityError, match="callable"):
        autodiff(Reverse, 3.0, Active, Active(1.0))


def test_duplicated_immutable_scalar_in_reverse():
    with pytest.raises(ActivityError, match="Active"):
        autodiff(Reverse, lambda x: x * 2, Active, Duplicated(1.0, 0.0))


def test_missing_rule_raises_not_implemented_naming_it():
    with pytest.raises(NotImplementedError, match="numpy.histogram"):
        autodiff(Reverse, lambda x: np.sum(np.histogram(x)[0]), Active, Active(np.ones(2)))


def test_active_value_written_into_const_buffer_names_the_argument():
    def f(x, cache):
        cache[0] = x
        return x
    with pytest.raises(ActivityError, match=r"argument 1 \(`cache`\) is Const.*Duplicated"):
        autodiff(Reverse, f, Active, Active(1.0), Const(np.zeros(2)))


def test_active_value_added_into_const_buffer_names_the_argument():
    def f(x, cache):
        cache += x
        return np.sum(x)
    with pytest.raises(ActivityError, match=r"`cache`\) is Const"):
        autodiff(Forward, f, Duplicated(np.ones(2), np.ones(2)), Const(np.zeros(2)))


def test_const_buffer_still_takes_plain_writes_and_computes_normally():
    cache = np.zeros(2)

    def f(x, cache):
        cache[:] = [1.0, 2.0]                 # a plain write lands in the user's array
        return np.sum(x * cache) + cache.sum()
    (g, _), = autodiff(Reverse, f, Active, Active(np.ones(2)), Const(cache))
    np.testing.assert_array_equal(cache, [1.0, 2.0])
    np.testing.assert_array_equal(g, [1.0, 2.0])
