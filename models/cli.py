"""The `hecate` command line.

`hecate demo` differentiates a few functions with every mode and prints each derivative next to
a central finite difference, so a new user sees the API work end to end. `hecate info` prints
the detected GPU and the backend the kernel pairs select (`kernels.info`). `hecate train`,
`hecate sample` and `hecate eval` train the Nested-Learning model and use its checkpoints
(`models.commands`); `hecate bench` runs the benchmarks (`models.bench`).

Every numeric flag is checked while the command line is parsed (`models.validation`); a user
mistake is one ``hecate <command>: error: ...`` line on stderr, never a traceback, unless
``--debug`` is given.

The commands that train, sample, evaluate, export and serve first ask the C allocator to keep
freed memory (`tape.allocator`), so that their temporaries are never page-faulted in again and
their speed does not depend on what the process allocated before. `hecate bench` sets the
allocator's state itself (`--allocator`), the same for every tool it compares.
"""
from __future__ import annotations

import argparse
import sys
from typing import Callable, Sequence

import numpy as np

from tape.allocator import keep_freed_memory


def _finite_difference(f: Callable, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central differences of a scalar function, entry by entry."""
    x = np.asarray(x, dtype=np.float64)
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        grad[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return grad


def demo(out=sys.stdout) -> int:
    """Differentiate a few functions and check each derivative against finite differences.

    Returns the number of mismatches (0 when everything agrees).
    """
    from tape import (Active, Const, Duplicated, Forward, Reverse, ReverseWithPrimal,
                      autodiff)

    failures = 0

    def report(title, got, expected):
        nonlocal failures
        ok = np.allclose(got, expected, rtol=1e-5, atol=1e-7)
        failures += not ok
        print(f"{'ok ' if ok else 'BAD'} {title}", file=out)
        print(f"      hecate:             {np.array2string(np.asarray(got), precision=6)}",
              file=out)
        print(f"      finite difference:  {np.array2string(np.asarray(expected), precision=6)}",
              file=out)

    print("Hecate demo: derivatives checked against central finite differences\n", file=out)

    (d,), = autodiff(Reverse, lambda x: x ** 2, Active, Active(3.0))
    report("autodiff(Reverse, x -> x**2, Active, Active(3.0))", d,
           _finite_difference(lambda x: x ** 2, np.array(3.0)))

    (d, _), primal = autodiff(ReverseWithPrimal, lambda x, c: c * np.sin(x), Active,
                              Active(0.5), Const(2.0))
    report(f"ReverseWithPrimal, x -> 2 sin(x) at 0.5 (primal {primal:.6f})", d,
           _finite_difference(lambda x: 2 * np.sin(x), np.array(0.5)))

    rng = np.random.default_rng(0)
    W, b = rng.standard_normal((4, 3)), rng.standard_normal(4)

    def loss(x):
        return np.sum(np.tanh(W @ x + b) ** 2)

    x, dx = rng.standard_normal(3), np.zeros(3)
    autodiff(Reverse, loss, Active, Duplicated(x, dx))
    report("Duplicated: gradient of sum(tanh(W x + b)**2) accumulated into dx", dx,
           _finite_difference(loss, x))

    v = rng.standard_normal(3)
    jvp, = autodiff(Forward, loss, Duplicated(x, v))
    report("Forward: directional derivative of the same loss along v", jvp,
           _finite_difference(lambda t: loss(x + t * v), np.array(0.0)))

    def f_(y, x):
        y[0] = x[0] ** 2 + x[1]
        y[1] = x[0] * x[1]
    x, dx = np.array([2.0, 3.0]), np.zeros(2)
    y, dy = np.zeros(2), np.array([1.0, 0.0])
    autodiff(Reverse, f_, Const, Duplicated(y, dy), Duplicated(x, dx))
    report("in-place f_(y, x): seed dy = [1, 0] gives dx = d y[0] / dx", dx,
           _finite_difference(lambda x: x[0] ** 2 + x[1], np.array([2.0, 3.0])))

    def second(x):
        (g,), = autodiff(Reverse, lambda z: np.sin(z) * z, Active, Active(x))
        return g
    d2, = autodiff(Forward, second, Duplicated(1.0, 1.0))
    report("nested: d2/dx2 [x sin x] at 1 by forward-over-reverse", d2,
           _finite_difference(lambda x: np.cos(x) * x + np.sin(x), np.array(1.0)))

    print(f"\n{'all derivatives agree' if not failures else f'{failures} mismatches'}",
          file=out)
    return failures


def bench(argv: Sequence[str]) -> int:
    """`hecate bench ...`: `models.bench.harness`, installed with this package (the
    repository's benchmarks/ folder is not needed)."""
    from .bench.harness import main as harness_main
    return harness_main(list(argv))


def _one_line(message: object) -> str:
    return " ".join(str(message).split())


def _run_guarded(command: str, debug: bool, fn: Callable[[], int]) -> int:
    """``fn()``, with every error it raises turned into one line on stderr: an operating-system
    error (a file that cannot be read or written) or lack of memory exits 1, an interruption
    130, anything else (unexpected: a bug, or a bad input no check foresaw) 1 with a pointer to
    ``--debug``. With `debug` the exception propagates, so Python prints the whole traceback."""
    prefix = f"hecate {command}: error:"
    try:
        return fn()
    except SystemExit:
        raise
    except BaseException as e:
        if debug:
            raise
        if isinstance(e, KeyboardInterrupt):
            print(f"hecate {command}: interrupted", file=sys.stderr)
            return 130
        if isinstance(e, MemoryError):
            print(f"{prefix} out of memory ({e or 'MemoryError'}): use a smaller model, batch or "
                  f"--seq-len", file=sys.stderr)
        elif isinstance(e, OSError):
            where = f": {e.filename}" if e.filename else ""
            print(f"{prefix} {_one_line(e.strerror or e)}{where}", file=sys.stderr)
        elif isinstance(e, Exception):
            print(f"{prefix} {type(e).__name__}: {_one_line(e)} (unexpected: run with --debug "
                  f"for the traceback)", file=sys.stderr)
        else:
            raise
        return 1


DEBUG_HELP = "on an error, show the full Python traceback instead of the one-line message"


def main(argv: Sequence[str] | None = None) -> int:
    """The ``hecate`` command. Returns the exit status: 0 on success, 2 for a bad command line
    or bad input (one line on stderr, never a traceback unless ``--debug`` is given, before or
    after the subcommand), 1 for other errors, 130 when interrupted."""
    from .validation import Parser

    argv = sys.argv[1:] if argv is None else list(argv)
    lead = 0
    while argv[lead:lead + 1] == ["--debug"]:
        lead += 1
    if argv[lead:lead + 1] == ["bench"]:   # the harness parses its own options
        rest = argv[lead + 1:]
        try:
            return _run_guarded("bench", bool(lead) or "--debug" in rest, lambda: bench(rest))
        except SystemExit as e:   # a bad option (already reported, one line), or --help
            return e.code if isinstance(e.code, int) else 2
    parser = Parser(prog="hecate", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("demo", help="differentiate a few functions, checked against finite "
                                "differences")
    sub.add_parser("info", help="the detected GPU and the backend kernel pairs use")
    sub.add_parser("bench", help="Hecate against autograd, PyTorch and JAX: ADBench and more "
                                 "(see `hecate bench --help`)")
    from .commands import add_parsers, check, run
    add_parsers(sub)   # train, sample, eval
    for command in sub.choices.values():   # --debug after the subcommand too
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                             help=DEBUG_HELP)
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:   # reported by the subcommand's parser, so the line names the command
            sub.choices[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
        check(sub.choices[args.command], args)
    except SystemExit as e:   # a bad flag (already reported, one line), or --help
        return e.code if isinstance(e.code, int) else 2

    def dispatch() -> int:
        if args.command in ("train", "sample", "eval", "export", "serve"):
            keep_freed_memory()
            return run(args)
        if args.command == "demo":
            return 1 if demo() else 0
        import kernels
        print(kernels.info())
        return 0

    return _run_guarded(args.command, args.debug, dispatch)


if __name__ == "__main__":
    sys.exit(main())
