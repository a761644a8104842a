"""Argument checks and layout helpers shared by the kernel pairs."""
from __future__ import annotations

import math

import numpy as np

from tape.core import peek


def shape(x) -> tuple:
    return tuple(getattr(peek(x), "shape", ()))


def dtype(x):
    return getattr(peek(x), "dtype", None)


def check_same(name: str, ref_name: str, ref, others: dict, expect_shape: tuple,
               what: str) -> None:
    """Raise a clear error unless every array in `others` has `expect_shape` and the dtype of
    `ref` (a floating dtype)."""
    ref_dtype = dtype(ref)
    if ref_dtype is None or getattr(ref_dtype, "kind", "") != "f":
        got = (f"{type(peek(ref)).__name__} with dtype {ref_dtype}" if ref_dtype is not None
               else f"a {type(peek(ref)).__name__}")
        raise TypeError(f"{name}: `{ref_name}` must be a floating-point array, got {got}; pass "
                        f"np.asarray({ref_name}, dtype=np.float32) (or float64)")
    _check_array_form(name, ref_name, ref)
    for arg, x in others.items():
        if dtype(x) is None:
            raise TypeError(f"{name}: `{arg}` must be an array of {ref_dtype} (as `{ref_name}`), "
                            f"got {type(peek(x)).__name__}; pass np.asarray({arg}, "
                            f"dtype={ref_name}.dtype)")
        _check_array_form(name, arg, x)
        if shape(x) != expect_shape:
            raise ValueError(f"{name}: `{arg}` must have shape {expect_shape} ({what}); got "
                             f"{shape(x)}")
        if dtype(x) != ref_dtype:
            raise TypeError(f"{name}: `{arg}` has dtype {dtype(x)} but `{ref_name}` has "
                            f"{ref_dtype}; kernel pairs need one floating dtype")


def _check_array_form(name: str, arg: str, x) -> None:
    """Refuse the array forms the kernels would misread: np.matrix (always 2-D), masked arrays
    (the mask would be ignored) and a non-native byte order (one dispatch keeps it, another
    does not)."""
    plain = peek(x)
    if isinstance(plain, (np.matrix, np.ma.MaskedArray)):
        raise TypeError(f"{name}: `{arg}` is a {type(plain).__name__}; kernel pairs take plain "
                        f"arrays: pass np.asarray({arg}) (a masked array's mask is not applied)")
    if not getattr(plain.dtype, "isnative", True):
        raise TypeError(f"{name}: `{arg}` has the non-native byte order {plain.dtype.str}; "
                        f"pass {arg}.astype({arg}.dtype.newbyteorder('='))")


def batch_size(lead: tuple) -> int:
    return math.prod(lead) if lead else 1


def seq_to_time_major(xp, a, B: int, s: int):
    """[..., s, d] -> contiguous [s, B, d]."""
    d = a.shape[-1]
    return xp.ascontiguousarray(xp.moveaxis(xp.reshape(a, (B, s, d)), 1, 0))


def gate_to_time_major(xp, a, B: int, s: int):
    """[..., s] -> contiguous [s, B, 1] (broadcasts against a [B, d] vector)."""
    return xp.ascontiguousarray(xp.reshape(a, (B, s)).T)[:, :, None]


def seq_from_time_major(xp, a, lead: tuple):
    """[s, B, d] -> [..., s, d]."""
    s, _, d = a.shape
    return xp.reshape(xp.moveaxis(a, 0, 1), lead + (s, d))


def gate_from_time_major(xp, a, lead: tuple):
    """[s, B] -> [..., s]."""
    return xp.reshape(a.T, lead + (a.shape[0],))


def round_bf16(xp, a):
    """Round float32 values to the nearest bfloat16 (ties to even), kept in float32: the
    reference's emulation of bf16 storage, bit for bit what the CUDA conversion does.

    >>> import numpy as np
    >>> round_bf16(np, np.array([1 + 2.0 ** -9, 1 + 3 * 2.0 ** -9], dtype=np.float32)).tolist()
    [1.0, 1.0078125]
    """
    bits = xp.ascontiguousarray(a, dtype=xp.float32).view(xp.uint32)
    rounded = (bits + (0x7FFF + ((bits >> 16) & 1))) & 0xFFFF0000
    # NaN payloads must stay NaN after rounding (a carry could turn them into inf).
    return xp.where(xp.isnan(a), a, rounded.view(xp.float32))


def check_memory_shapes(name: str, named: dict, states: tuple) -> int:
    """Check a memory rule's arguments (by name): `k`, `v`, `q` of shape ``[..., s, d]``, one
    gate value per token, the states ``[..., d, d]``; returns d. Errors name the function.

    >>> import numpy as np
    >>> k = np.zeros((2, 5, 3))
    >>> check_memory_shapes("delta_rule", {"k": k, "v": k, "q": k, "alpha": np.zeros((2, 5)),
    ...                                    "m0": np.zeros((2, 3, 3))}, ("m0",))
    3
    """
    k = named["k"]
    ks = shape(k)
    check_same(name, "k", k, {}, ks, "")        # an array of floats before its shape is read
    if len(ks) < 2:
        raise ValueError(f"{name}: `k` must have shape [..., s, d]; got {ks}")
    lead, d = ks[:-2], ks[-1]
    check_same(name, "k", k, {n: named[n] for n in ("v", "q")}, ks, "the shape of `k`")
    check_same(name, "k", k, {n: a for n, a in named.items()
                              if n not in ("k", "v", "q") + tuple(states)},
               ks[:-1], "one gate value per token, the shape of `k` without its last axis")
    check_same(name, "k", k, {n: named[n] for n in states}, lead + (d, d),
               "the leading axes of `k` followed by [d, d]")
    return d


# -- when a chunked form may stand in for the sequential loop -------------------------------------
# The chunked forms compute the same values by other products (triangular inverses, products of
# decays): equal up to rounding while the numbers stay far from overflow, but near it, or with
# NaN or inf among the inputs, the two orders of operations overflow, or spread a NaN, in
# different places. A chunked run is kept only when every input is finite and every quantity it
# made, scaled by how much the loop's own intermediates may exceed them, stays this many binary
# orders of magnitude below the largest finite number; otherwise the caller runs the loop.
OVERFLOW_MARGIN_BITS = 20


def max_abs(xp, a) -> float:
    """``max|a|`` as a float (0 for None or an empty array; NaN if `a` holds one)."""
    if a is None or a.size == 0:
        return 0.0
    return max(float(xp.max(a)), -float(xp.min(a)))     # no |a| temporary; NaN stays NaN


def input_growth(xp, arrays, span: int, d: int) -> float:
    """How much larger than the chunked quantities the loop's per-token intermediates may be:
    ``(span d prod(max(1, max|a|)))^2`` over `arrays` (the tokens' keys, values, queries, gates),
    or inf when one of them holds a NaN or an inf.

    >>> import numpy as np
    >>> input_growth(np, [np.full(3, 0.5), np.full(3, 2.0)], 4, 2)
    256.0
    >>> input_growth(np, [np.array([1.0, np.nan])], 4, 2)
    inf
    """
    factor = float(span * d)
    for a in arrays:
        top = max_abs(xp, a)
        if not math.isfinite(top):          # NaN (max of a NaN is NaN) or inf
            return math.inf
        factor *= max(1.0, top)
    return factor * factor if math.isfinite(factor) else math.inf


def within_range(xp, arrays, growth: float, dtype) -> bool:
    """Whether every array is finite and ``max|a| * growth`` stays `OVERFLOW_MARGIN_BITS`
    binary orders below the largest finite number of `dtype`.

    >>> import numpy as np
    >>> within_range(np, [np.ones(2)], 1e6, np.float32), within_range(np, [np.ones(2)], 1e40, np.float32)
    (True, False)
    >>> within_range(np, [np.array([np.inf])], 1.0, np.float64)
    False
    """
    limit = float(xp.finfo(dtype).max) * 2.0 ** -OVERFLOW_MARGIN_BITS
    if not growth < limit:
        return False
    for a in arrays:
        if not max_abs(xp, a) * growth < limit:        # also False for NaN and inf
            return False
    return True
