"""Names in a generated program (tape/program_code.py, tape/program_forward.py): the constants
it reads from its namespace (functions, configs, arrays) get names that cannot be mistaken for
the program's own variables."""
from __future__ import annotations

import keyword
import re


class Constants:
    """Names for the constants a generated program reads (functions, configs, arrays), each
    called `const(value, hint)`: a name made from the hint that is neither taken in the
    namespace `ns` nor one of the program's own variables (``v3``, ``ct3``, ``g``, ``calls``:
    a function whose ``__name__`` is ``g`` must not be read as the variable), nor a keyword.

    >>> const = Constants({})
    >>> const(len, "len"), const(abs, "v1"), const(min, "g"), const(max, "lambda")
    ('len', '_v1', '_g', '_lambda')
    """

    def __init__(self, ns):
        self.ns, self.names, self.counts = ns, {}, {}

    def __call__(self, value, hint="k"):
        name = self.names.get(id(value))
        if name is not None:
            return name
        hint = "".join(ch if ch.isalnum() else "_" for ch in hint)
        n = self.counts.get(hint, 0) + 1
        self.counts[hint] = n
        name = hint if n == 1 else f"{hint}{n}"
        while not _usable(name) or name in self.ns:
            name = "_" + name if not _usable(name) else name + "_"
        self.ns[name] = value
        self.names[id(value)] = name
        return name


# The local variables of generated programs (reverse and forward): values, cotangents,
# tangents, residuals and the names the templates assign or take as arguments.
_LOCAL = re.compile(r"(?:v|ct|t|s)\d+|g|_t|leaves|seeds|recorded|calls|strict|tangents|run")


def _usable(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name) and not _LOCAL.fullmatch(name)
