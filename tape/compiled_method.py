"""How a compiled function behaves as a method, a copy and a pickle (mixed into
`tape.compiled.CompiledFunction`): ``@compile(...)`` in a class body compiles one function per
instance (or per class, above ``@classmethod``); copies and pickles of an instance compile
afresh, since a program watches the objects it was traced with."""
from __future__ import annotations

import copy
import types


class MethodBehaviour:
    """Descriptor, copy and pickle support of a compiled function (see the module docstring)."""

    def _for(self, f):
        """A compiled function of `f` with this one's mode, activities and cache bounds."""
        return type(self)(self.mode, f, self._activities, self.max_traces, self.max_programs)

    def __set_name__(self, owner, name):
        self._attribute = "_compiled_" + name

    def __get__(self, obj, objtype=None):
        """As a method (``@compile(...)`` on a function in a class body), the compiled method
        bound to `obj`: one compiled function per instance, which watches the instance's
        attributes as ``compile(mode, obj.method, ...)`` does. It is kept in the instance's
        ``__dict__`` (as `functools.cached_property` keeps its value), so it lives and dies
        with the instance; a pickled or deep-copied instance compiles afresh. An instance
        without a ``__dict__`` (``__slots__``) gets a fresh one at each access, so each call
        traces. Above ``@staticmethod`` it stays unbound; above ``@classmethod`` it is bound
        to the class (one compiled function per class)."""
        if isinstance(self.f, staticmethod):
            return self
        if isinstance(self.f, classmethod):
            return self._bound_to_class(objtype if objtype is not None else type(obj))
        if obj is None:
            return self
        state = getattr(obj, "__dict__", None)
        kept = state.get(self._attribute) if state is not None else None
        if kept is not None and kept.f.__self__ is obj:   # (copy.copy shares the __dict__'s)
            return kept
        compiled = self._for(types.MethodType(self.f, obj))
        compiled._per_instance = True
        if state is not None:
            state[self._attribute] = compiled
        return compiled

    def _bound_to_class(self, cls):
        with self._lock:
            per_class = self.__dict__.setdefault("_per_class", {})
            if cls not in per_class:
                per_class[cls] = self._for(types.MethodType(self.f.__func__, cls))
            return per_class[cls]

    def __reduce_ex__(self, protocol):
        if self._per_instance:   # an instance's own program: its copy compiles afresh
            return (type(None), ())
        return super().__reduce_ex__(protocol)

    def __deepcopy__(self, memo):
        """A compiled function of the copied `f` (a bound method of the copied instance), with
        an empty cache: the programs watch the original's objects."""
        if self._per_instance:
            return None   # the copied instance compiles afresh, as after pickling
        return self._for(copy.deepcopy(self.f, memo))
