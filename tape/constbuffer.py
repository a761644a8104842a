"""Const array arguments are passed to the function as `ConstBuffer` views.

A view shares memory with the user's array, so non-active writes land in it as usual; writing an
*active* value into it would silently drop the derivative, so it is refused with an error that
names the argument. Records that saved the buffer's memory before such a write get a copy of
what they saw first (copy on write), so the reverse sweep never reads the new values.
Everything else behaves as a plain ndarray (results are plain ndarrays).
"""
from __future__ import annotations

import sys
import weakref
import zlib

import numpy as np

from .aliasing import refuse_aliased_write
from .core import _TRACE_STACK, Tracer
from .errors import ActivityError, ConstWriteError
from .residuals import _map_items, _may_change
from .rule_tables import array_of_sequence


def _has_tracer(x) -> bool:
    if isinstance(x, Tracer):
        return True
    if isinstance(x, (list, tuple)):
        return any(_has_tracer(v) for v in x)
    return False


def _plain(x):
    if isinstance(x, ConstBuffer):
        return x.view(np.ndarray)
    if type(x) in (list, tuple):
        return type(x)(_plain(v) for v in x)
    return x


class ConstBuffer(np.ndarray):
    """An ndarray view that refuses traced writes, naming the Const argument."""

    def __array_finalize__(self, obj):
        self._argument = getattr(obj, "_argument", "a Const argument")
        alias_error = getattr(obj, "_alias_error", None)
        if alias_error is not None:   # a view of an argument that shares memory with another
            self._alias_error = alias_error

    def _check_alias(self):
        alias_error = self.__dict__.get("_alias_error")
        if alias_error is not None:
            refuse_aliased_write(alias_error)

    def _refuse(self):
        raise ConstWriteError(
            f"{self._argument} is Const, but an active (differentiated) value was written into "
            "it; its derivative would be lost. Mark the argument Duplicated(x, dx) instead, "
            "with a shadow of its own (set_runtime_activity makes Duplicated(x, x) Const)")

    def __setitem__(self, index, value):
        self._check_alias()
        if _has_tracer(value):
            self._refuse()
        _protect_saved(self)
        self.view(np.ndarray)[index] = _plain(value)

    def dot(self, b, out=None):
        """`c.dot(x)` as `np.dot(c, x)` when `x` is traced: NumPy's method would convert `x` to
        a plain array (its derivative lost) where the function dispatches to the tracer, and a
        compiled trace, whose Consts are tracers, differentiates `c.dot(x)` too."""
        if _has_tracer(b):
            return np.dot(self, b) if out is None else np.dot(self, b, out=out)
        return super().dot(b) if out is None else super().dot(b, out)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        out = kwargs.get("out")
        if method == "at" and isinstance(inputs[0], ConstBuffer):
            # np.add.at(c, idx, v) writes into its first operand, which takes no `out=`.
            if _has_tracer(inputs):
                inputs[0]._refuse()
            inputs[0]._check_alias()
            _protect_saved(inputs[0])
        elif out is None and _has_tracer(inputs):
            # `c @ x`, `c * x` with a traced x: the tracer records the call with this buffer
            # as it is. A plain view of it would look like a caller's array that may change,
            # which the record would have to copy (one copy of c per use, as in a loop).
            if not any(isinstance(i, Tracer) for i in inputs):   # tracers inside a list only
                # NumPy makes an array of the list; the ufunc then dispatches to that
                # traced array.
                return getattr(ufunc, method)(*map(array_of_sequence, inputs), **kwargs)
            return NotImplemented
        if out is not None:
            if any(isinstance(o, ConstBuffer) for o in out) and _has_tracer(inputs):
                self._refuse()
            for o in out:
                if isinstance(o, ConstBuffer):
                    o._check_alias()
                    _protect_saved(o)
            kwargs["out"] = tuple(_plain(o) for o in out)
        result = getattr(ufunc, method)(*(_plain(i) for i in inputs), **kwargs)
        if out is None:
            return result
        # NumPy hands back `out` itself (`c *= 0.9` keeps c), not the plain view written
        if len(out) == 1:
            return out[0] if out[0] is not None else result
        return tuple(r if o is None else o for o, r in zip(out, result))

    def __array_function__(self, func, types, args, kwargs):
        if not all(issubclass(t, np.ndarray) for t in types):
            return NotImplemented    # a traced argument too: its type records the call
        for target in _written_by(func, args, kwargs):
            if isinstance(target, ConstBuffer):
                target._check_alias()
                _protect_saved(target)
        result = func(*_plain(args), **{k: _plain(v) for k, v in kwargs.items()})
        if func in _NEW_BUFFERS:
            return _traced_buffer(result) if _called_by_user(sys._getframe(1)) else result
        if _called_by_user(sys._getframe(1)):
            # np.reshape(c, ...), np.transpose(c), np.split(c, 2): a view of the argument
            # stays a ConstBuffer, so that writes through it copy the records' residuals too.
            return _views_kept(result, args)
        return result

    @property
    def flat(self):
        """`c.flat`, whose writes (``c.flat[i] = v``) NumPy makes without a hook: the records
        that saved this buffer's memory get copies first, as for ``c[i] = v``."""
        _protect_saved(self)
        return self.view(np.ndarray).flat

    @flat.setter
    def flat(self, value):
        self._check_alias()
        if _has_tracer(value):
            self._refuse()
        _protect_saved(self)
        self.view(np.ndarray).flat = value

    def note_saved(self, trace) -> None:
        """A record of `trace` keeps this buffer by reference: remember a checksum of its bytes
        (once per place in memory), checked when the function returns (`refuse_unseen_writes`).
        The writes this class sees copy the records first and forget the checksum."""
        digests = trace.__dict__.get("const_digests")
        if digests is None:
            digests = trace.const_digests = {}
        place = (self.__array_interface__["data"][0], self.shape, self.strides, self.dtype.str)
        if place not in digests:
            # Memory nobody can write (a read-only array or np.load's mmap_mode="r") needs no
            # checksum: reading a large read-only dataset twice per call would cost the most.
            digests[place] = (self, _checksum(self) if _may_change(self) else None)

    def copy(self, order="C"):
        """A copy; made by the user's function, one that may receive traced values (see
        `_traced_buffer`)."""
        result = self.view(np.ndarray).copy(order)
        return _traced_buffer(result) if _called_by_user(sys._getframe(1)) else result


def _views_kept(result, args):
    """`result` (an array, or a list or tuple of arrays) with each array that shares memory
    with a ConstBuffer among `args` made a ConstBuffer of that argument."""
    if type(result) in (list, tuple):
        return type(result)(_views_kept(r, args) for r in result)
    if type(result) is not np.ndarray:
        return result
    for a in args:
        if isinstance(a, ConstBuffer) and np.may_share_memory(result, a):
            view = result.view(ConstBuffer)
            view.__dict__.update((k, v) for k, v in a.__dict__.items() if k != "_scanned")
            return view
    return result


def _writing_method(name: str):
    """ndarray's method `name`, which writes into the array (``c.fill(0)``, ``c.sort()``):
    the records that saved this buffer's memory get copies first, as for ``c[i] = v``."""
    method = getattr(np.ndarray, name)

    def write(self, *args, **kwargs):
        self._check_alias()
        _protect_saved(self)
        return method(self.view(np.ndarray), *args, **kwargs)
    write.__name__ = write.__qualname__ = name
    write.__doc__ = f"ndarray.{name}, into a Const argument's memory (see `_writing_method`)."
    return write


for _name in ("fill", "sort", "partition", "put", "setfield", "byteswap"):
    setattr(ConstBuffer, _name, _writing_method(_name))


# NumPy functions that write into an argument: the position and name of that argument.
_WRITERS = {np.copyto: (0, "dst"), np.put: (0, "a"), np.place: (0, "arr"),
            np.putmask: (0, "a"), np.fill_diagonal: (0, "a"), np.put_along_axis: (0, "arr")}


def _written_by(func, args, kwargs) -> list:
    """The arrays a NumPy function call writes into: its destination argument, and `out=`."""
    written = []
    where = _WRITERS.get(func)
    if where is not None:
        position, name = where
        written.append(args[position] if len(args) > position else kwargs.get(name))
    out = kwargs.get("out")
    if out is not None:
        written.extend(out if isinstance(out, tuple) else (out,))
    return written


# A buffer made from a Const argument (np.zeros_like(c), c.copy()) is usually made to be filled,
# often with differentiated values: it is a traced constant of the innermost open trace, so
# such writes are recorded (as for np.zeros_like of a traced value), where a plain ndarray
# could not hold them.
_NEW_BUFFERS = (np.zeros_like, np.ones_like, np.empty_like, np.full_like, np.copy)


def _called_by_user(frame) -> bool:
    """Rules see Const arguments as they are: their own temporaries stay plain arrays. Frames
    of modules that only forward a call (they set `__hecate_transparent__`) are skipped."""
    while frame is not None and frame.f_globals.get("__hecate_transparent__"):
        frame = frame.f_back
    return (frame is not None
            and frame.f_globals.get("__name__", "").partition(".")[0] not in _ENGINE_PACKAGES)


_ENGINE_PACKAGES = ("tape", "ops", "kernels", "numpy")


def _traced_buffer(value):
    traces = _TRACE_STACK.get()
    if not traces or not isinstance(value, np.ndarray):
        return value
    return traces[-1].constant(value)


def _protect_saved(buffer):
    """Before `buffer` is written: records of the open tapes that hold arrays sharing its memory
    get copies of them. Records already scanned for this buffer hold copies by now, so each
    write scans only the records added since the last one (a loop writing into a Const
    scratch buffer stays linear)."""
    plain = buffer.view(np.ndarray)
    scanned = buffer.__dict__.setdefault("_scanned", {})
    for trace in _TRACE_STACK.get():
        records = getattr(trace, "records", None)
        if not records:
            continue
        # The trace itself, not only its id: the same buffer may reach a later
        # differentiation (an inner autodiff given Const(c) in a loop) whose trace has the
        # id of a finished one, and must not skip that one's count of records.
        seen = scanned.get(id(trace))
        start = seen[1] if seen is not None and seen[0]() is trace else 0
        for i in range(start, len(records)):
            record = records[i]
            saved = _copied_if_shared(record[2], plain)
            if saved is not record[2]:
                records[i] = record[:2] + (saved,) + record[3:]
        scanned[id(trace)] = (weakref.ref(trace), len(records))
        digests = trace.__dict__.get("const_digests")
        if digests:   # the records hold copies now: this write is seen
            for place in [p for p, (b, _) in digests.items() if np.may_share_memory(b, plain)]:
                del digests[place]


def _checksum(buffer) -> int:
    """CRC-32 of the buffer's bytes: one pass, no temporary for contiguous memory; any write
    that changes a bit (a -0.0, a NaN payload) changes it, but for a 2^-32 chance."""
    if buffer.dtype.hasobject:
        return 0
    plain = np.ascontiguousarray(buffer.view(np.ndarray))
    return zlib.crc32(memoryview(plain).cast("B")) if plain.size else 0


def refuse_unseen_writes(trace) -> None:
    """Raise if a Const argument that a record of `trace` keeps by reference was written
    through a path that bypasses it (no hook of this class ran): the records would read the
    new values in the sweep, and the derivative would silently be the one at those values."""
    digests = trace.__dict__.get("const_digests")
    if not digests:
        return
    trace.const_digests = None
    for buffer, checksum in digests.values():
        if checksum is not None and _checksum(buffer) != checksum:
            raise ActivityError(
                f"{buffer._argument} is Const and was written after an operation used it, "
                "through a path that bypasses the argument (np.asarray(c)[i] = v, "
                "c.view(np.ndarray), memoryview(c), as_strided(c), np.ndarray.fill(c, v)); "
                "the derivative would use the new values. Write through the argument itself "
                "(c[i] = v, np.copyto(c, v), c.fill(v)), or write into a copy (c = c.copy())")


def _copied_if_shared(saved, buffer):
    # Inside tuples, named tuples, lists and dicts, as `tape.residuals.protect` looks (a
    # user's rule may keep its residuals in a named tuple or a dict).
    if isinstance(saved, np.ndarray):
        return saved.copy() if np.may_share_memory(saved, buffer) else saved
    return _map_items(saved, _copied_if_shared, buffer)


def as_const(value, name):
    """`value` as seen by the differentiated function when annotated Const."""
    if type(value) is np.ndarray and value.ndim > 0:
        view = value.view(ConstBuffer)
        view._argument = name   # formatted only if an error needs it (speed-up)
        return view
    return value
