"""The walkthroughs run again with every `autodiff` call of the script routed through
`tape.compile`, and each compiled result is checked against eager `autodiff`.

Each script runs in its own process under `route_through_compile` (run this file as
``python tests/docs/test_walkthroughs_compiled.py SCRIPT REPORT.json``): `tape.autodiff` (the
name the scripts import) becomes a router that keeps one compiled function per
(function, mode, activity types), calls it, and repeats the call with eager `autodiff` on deep
copies of the arguments, comparing results, raised errors, shadows and written buffers. The
script must still exit 0 (its own asserts then hold for compiled results); the report says how
many calls were replayed, traced or run eagerly, and lists every difference found.
"""
from __future__ import annotations

import collections
import copy
import hashlib
import json
import os
import pathlib
import runpy
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPTS = sorted((ROOT / "docs" / "walkthroughs").glob("[0-9][0-9]_*.py"))

# Scripts whose every `autodiff` call legitimately runs eagerly under `compile`, and why.
ALL_EAGER: dict = {}   # script stem -> the one eager reason (every call eager)
RTOL, ATOL = 1e-11, 1e-13   # relative to the largest entry; replays run the same NumPy calls
# Walkthroughs that compiled replays do not run yet (each with a minimal repro in the reason).
KNOWN_FAILURES: dict = {}   # script stem -> why it fails compiled (strict xfail)


# --------------------------------------------------------------------------------------------
# Comparing a compiled call with an eager one


def differences(got, want, path="result") -> list[str]:
    """Where two results (nested tuples, dicts, arrays, numbers, pytrees) differ.

    >>> differences((np.ones(2), None), (np.ones(2), None))
    []
    >>> differences((1.0,), (1.5,))
    ['result[0]: max |compiled - eager| = 5.000e-01 (scale 1.500e+00); 1.0 != 1.5']
    """
    from tape.pytree import flatten
    if got is None or want is None:
        return [] if got is None and want is None else [f"{path}: {got!r} != {want!r}"]
    numeric = (np.ndarray, np.generic, int, float, complex)
    if isinstance(got, numeric) or isinstance(want, numeric):
        return _numeric_difference(got, want, path)
    if type(got) is not type(want):
        return [f"{path}: {type(got).__name__} != {type(want).__name__}"]
    if isinstance(got, (tuple, list)):
        if len(got) != len(want):
            return [f"{path}: length {len(got)} != {len(want)}"]
        return [d for i, (a, b) in enumerate(zip(got, want))
                for d in differences(a, b, f"{path}[{i}]")]
    if isinstance(got, dict):
        if got.keys() != want.keys():
            return [f"{path}: keys {sorted(map(str, got))} != {sorted(map(str, want))}"]
        return [d for k in got for d in differences(got[k], want[k], f"{path}[{k!r}]")]
    got_leaves, want_leaves = flatten(got)[0], flatten(want)[0]
    if len(got_leaves) == 1 and got_leaves[0] is got:   # an opaque leaf: compare by value
        return [] if got == want else [f"{path}: {got!r} != {want!r}"]
    return differences(tuple(got_leaves), tuple(want_leaves), f"{path}.leaves")


def _numeric_difference(got, want, path):
    a, b = np.asarray(got), np.asarray(want)
    if isinstance(got, np.ndarray) != isinstance(want, np.ndarray) or a.shape != b.shape:
        return [f"{path}: {type(got).__name__}{a.shape} != {type(want).__name__}{b.shape}"]
    if a.dtype != b.dtype and not (np.isscalar(got) and np.isscalar(want)):
        return [f"{path}: dtype {a.dtype} != {b.dtype}"]
    if a.dtype.kind not in "fc" or b.dtype.kind not in "fc":
        return [] if np.array_equal(a, b) else [f"{path}: {got!r} != {want!r}"]
    scale = max(1.0, float(np.max(np.abs(b), initial=0.0)))
    if np.allclose(a, b, rtol=RTOL, atol=ATOL * scale, equal_nan=True):
        return []
    worst = float(np.nanmax(np.abs(a - b))) if a.size else 0.0
    return [f"{path}: max |compiled - eager| = {worst:.3e} (scale {scale:.3e})"
            + (f"; {got!r} != {want!r}" if a.size <= 4 else "")]


def _arguments_state(args):
    """What a call may change in its arguments: primals (written buffers) and shadows."""
    return [(a.val, getattr(a, "dval", None)) if hasattr(a, "val") else a for a in args]


def _fingerprint(args) -> str | None:
    """A digest of every array in the arguments (None when one is not contiguous), made
    without copying: a check deferred past a memory measurement must see the same inputs."""
    from tape.pytree import flatten
    digest = hashlib.blake2b()
    for leaf in flatten(_arguments_state(args))[0]:
        if isinstance(leaf, np.ndarray):
            if not leaf.flags.c_contiguous:
                return None
            digest.update(memoryview(leaf).cast("B"))
        else:
            digest.update(repr(leaf).encode())
    return digest.hexdigest()


# --------------------------------------------------------------------------------------------
# The router that replaces tape.autodiff


class CompileRouter:
    """`autodiff(mode, f, ...)` answered by ``tape.compile(mode, f, *types)(*args)``, checked
    against eager `autodiff` on deep copies of the arguments."""

    def __init__(self, eager_autodiff):
        self.eager = eager_autodiff
        self.compiled: dict = {}          # (id(f), mode, types) -> (f, compiled function)
        self.checking = False             # autodiff calls made by a check run eagerly
        self.calls = collections.Counter()
        self.skipped = collections.Counter()
        self.deferred: list = []
        self.checked = 0
        self.mismatches: list[str] = []

    def __call__(self, mode, f, *args):
        import tape
        if self.checking:
            return self.eager(mode, f, *args)
        if not isinstance(mode, tape.Mode) or not callable(f) or (
                mode.kind == "reverse" and mode.split):
            self.calls["not routed"] += 1
            return self.eager(mode, f, *args)
        self.calls[mode.name] += 1
        ret, rest = (args[0], args[1:]) if args and isinstance(args[0], type) else (None, args)
        check = self._prepare_check(rest)
        rng_before = np.random.get_state()
        try:
            result, error = self._compiled(mode, f, ret, rest)(*rest), None
        except Exception as e:   # noqa: BLE001  (eager autodiff must raise the same)
            result, error = None, e
        rng_after = np.random.get_state()
        where = f"{getattr(f, '__qualname__', f)!s} ({mode.name}, call {sum(self.calls.values())})"
        if isinstance(check, str):
            self.skipped[check] += 1
        elif check[0] == "deferred":
            self.deferred.append((where, mode, f, ret, rest, copy.deepcopy((result, error)),
                                  check[1], rng_before))
        else:
            np.random.set_state(rng_before)   # the eager call draws what the compiled one drew
            self._compare(where, mode, f, ret, rest, check[1], result, error)
            np.random.set_state(rng_after)
        if error is not None:
            raise error
        return result

    def _compiled(self, mode, f, ret, rest):
        import tape
        from tape.activities import Annotation, Const
        from tape.pytree import is_inactive
        annotated = [a if isinstance(a, Annotation) else Const(a) for a in rest]
        types = tuple(Const if is_inactive(a.val) else type(a) for a in annotated)
        mode_key = tuple(getattr(mode, k) for k in mode.__slots__)
        key = (id(f), mode_key, ret, types if ret is not None else None)
        if key not in self.compiled:
            # Without a return activity the argument types cannot be given positionally
            # (the first would be read as the return's); compile then checks none of them.
            g = (tape.compile(mode, f, ret, *types) if ret is not None
                 else tape.compile(mode, f))
            self.compiled[key] = (f, g)   # f is kept alive so that its id is not reused
        return self.compiled[key][1]

    def _prepare_check(self, args):
        """Deep copies of the arguments for the eager call, or why there is no check."""
        from tape.core import _TRACE_STACK, Tracer
        from tape.pytree import flatten
        if _TRACE_STACK.get():
            return "inside another differentiation (nested AD)"
        try:
            leaves = flatten(_arguments_state(args))[0]
        except Exception:   # noqa: BLE001
            leaves = []
        if any(isinstance(x, Tracer) for x in leaves):
            return "arguments are traced values"
        if tracemalloc.is_tracing():   # a copy now would show in the script's measurement
            fingerprint = _fingerprint(args)
            if fingerprint is None or any(hasattr(a, "dval") for a in args):
                return "a memory measurement is running"
            return ("deferred", fingerprint)
        try:
            return ("now", copy.deepcopy(args))
        except Exception as e:   # noqa: BLE001
            return f"arguments cannot be deep-copied ({type(e).__name__})"

    def _compare(self, where, mode, f, ret, args, copies, result, error):
        self.checked += 1
        self.checking = True
        try:
            returns = () if ret is None else (ret,)
            want, want_error = self.eager(mode, f, *returns, *copies), None
        except Exception as e:   # noqa: BLE001
            want, want_error = None, e
        finally:
            self.checking = False
        if (error is None) != (want_error is None):
            def outcome(e):
                return "returned" if e is None else f"raised {e!r}"
            self.mismatches.append(f"{where}: compiled {outcome(error)}, eager "
                                   f"{outcome(want_error)}")
            return
        if error is not None:
            if type(error) is not type(want_error) or str(error) != str(want_error):
                self.mismatches.append(f"{where}: compiled raised {error!r}, eager {want_error!r}")
            return
        found = differences(result, want) + differences(
            _arguments_state(args), _arguments_state(copies), "arguments after the call")
        self.mismatches.extend(f"{where}: {d}" for d in found)

    def finish(self) -> dict:
        """Run the deferred checks; the counts of the compiled functions and of the checks."""
        for where, mode, f, ret, args, (result, error), fingerprint, rng in self.deferred:
            if _fingerprint(args) != fingerprint:
                self.skipped["arguments changed before a deferred check"] += 1
                continue
            np.random.set_state(rng)
            self._compare(where + " [deferred]", mode, f, ret, args, args, result, error)
        totals = collections.Counter()
        reasons = set()
        for _, g in self.compiled.values():
            stats = getattr(g, "stats", None)
            if stats is None:
                continue
            totals.update(hits=stats.hits, traces=stats.traces,
                          eager_calls=stats.eager_calls, guard_failures=stats.guard_failures,
                          programs=stats.programs)
            reasons.update(stats.eager_reasons)
        return dict(calls=dict(self.calls), compiled_functions=len(self.compiled),
                    **{k: totals[k] for k in ("hits", "traces", "eager_calls",
                                              "guard_failures", "programs")},
                    eager_reasons=sorted(reasons), checked=self.checked,
                    deferred=len(self.deferred), skipped=dict(self.skipped),
                    mismatches=self.mismatches)


def route_through_compile(script: str, report_path: str) -> None:
    """Run `script` as ``python script`` would, with `tape.autodiff` routed through
    `tape.compile`; write the router's counts to `report_path` (JSON), even on failure."""
    import tape
    router = CompileRouter(tape.autodiff)
    tape.autodiff = router   # before the script runs `from tape import autodiff`
    sys.argv = [script]
    sys.path[0] = str(pathlib.Path(script).resolve().parent)
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        report = router.finish()
        pathlib.Path(report_path).write_text(json.dumps(report, indent=1))


# --------------------------------------------------------------------------------------------
# Tests


def _run_routed(script, tmp_path, timeout=120):
    report_path = tmp_path / "report.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    result = subprocess.run([sys.executable, __file__, str(script), str(report_path)],
                            cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=timeout)
    report = json.loads(report_path.read_text()) if report_path.exists() else None
    return result, report


def _summary(name, r):
    replayed_or_traced = r["hits"] + r["traces"]
    return (f"{name}: {sum(r['calls'].values())} autodiff calls {r['calls']}; "
            f"{r['hits']} replayed, {r['traces']} traced, {r['eager_calls']} eager, "
            f"{r['guard_failures']} guard failures; {r['checked']} checked against eager "
            f"({r['deferred']} deferred), skipped {r['skipped']}; eager because "
            f"{r['eager_reasons']}; compiled path used {replayed_or_traced} times")


@pytest.mark.parametrize("script", [
    pytest.param(s, marks=pytest.mark.xfail(strict=True, reason=KNOWN_FAILURES[s.stem]))
    if s.stem in KNOWN_FAILURES else s for s in SCRIPTS], ids=[s.stem for s in SCRIPTS])
def test_walkthrough_runs_compiled(script, tmp_path):
    result, report = _run_routed(script, tmp_path)
    assert report is not None, result.stdout[-2000:] + result.stderr[-4000:]
    print(_summary(script.stem, report))
    assert not report["mismatches"], "compiled != eager:\n" + "\n".join(report["mismatches"])
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert sum(report["calls"].values()) > 0, "the router saw no autodiff call"
    if script.stem in ALL_EAGER:
        assert report["hits"] + report["traces"] == 0
        assert report["eager_reasons"] == [ALL_EAGER[script.stem]]
    else:
        assert report["hits"] + report["traces"] > 0, "no call ran a compiled program"
        assert report["checked"] > 0, "no compiled call was checked against eager autodiff"


def test_router_replays_and_checks(tmp_path):
    """The router compiles once per signature, replays the repeat, and checks shadows."""
    script = tmp_path / "repeat.py"
    script.write_text(
        "import numpy as np\n"
        "from tape import Active, Duplicated, Reverse, autodiff\n"
        "def loss(x):\n    return np.sum(np.sin(x) * x)\n"
        "x, dx = np.array([0.5, 1.5]), np.zeros(2)\n"
        "for _ in range(3):\n    autodiff(Reverse, loss, Active, Duplicated(x, dx))\n"
        "assert np.allclose(dx, 3 * (np.cos(x) * x + np.sin(x)))\n")
    result, report = _run_routed(script, tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    assert (report["traces"], report["hits"], report["eager_calls"]) == (1, 2, 0)
    assert report["checked"] == 3 and not report["mismatches"]


def test_router_reports_what_eager_does_differently():
    """A check that can fail: an "eager" autodiff that answers differently is reported."""
    import tape
    wrong = CompileRouter(lambda mode, f, *args: ((np.array([0.5]),),))
    x = np.array([1.0])
    ((g,),) = wrong(tape.Reverse, lambda x: np.sum(x * x), tape.Active, tape.Active(x))
    assert np.allclose(g, 2 * x) and len(wrong.mismatches) == 1
    raising = CompileRouter(lambda mode, f, *args: 1 / 0)
    raising(tape.Reverse, lambda x: np.sum(x * x), tape.Active, tape.Active(x))
    assert "eager raised ZeroDivisionError" in raising.mismatches[0]


def test_differences_finds_what_differs():
    from tape import Duplicated
    a, b = np.array([1.0, 2.0]), np.array([1.0, 2.0 + 1e-6])
    assert differences(((a, None), 3.0), ((a.copy(), None), 3.0)) == []
    assert differences(((a, None),), ((b, None),))
    assert differences((None,), (a,)) and differences((a,), (a[:1],))
    assert differences(_arguments_state([Duplicated(a, a)]),
                       _arguments_state([Duplicated(a, b)]))


if __name__ == "__main__":
    route_through_compile(sys.argv[1], sys.argv[2])
