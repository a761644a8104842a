"""Every example in tape.scipy's docstrings runs and prints what it says (the engine's doctest
test covers the top-level `tape.*` modules only; tape.scipy is a package of its own)."""
import doctest
import importlib
import pkgutil

import numpy as np
import pytest

import tape
import tape.scipy

MODULES = ["tape.scipy"] + sorted(m.name for m in pkgutil.iter_modules(tape.scipy.__path__,
                                                                        "tape.scipy."))
OURS = ["tape.scipy", "tape.scipy.special", "tape.scipy.stats", "tape.scipy.stats_common",
        "tape.scipy.stats_continuous", "tape.scipy.stats_discrete",
        "tape.scipy.stats_multivariate", "tape.scipy.signal"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    globs = {"np": np, **{k: getattr(tape, k) for k in tape.__all__}}
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(module, name, globs=dict(globs, **vars(module))):
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed"


@pytest.mark.parametrize("name", OURS)
def test_every_public_function_has_an_example(name):
    """Public functions and distribution methods have a docstring with a runnable example."""
    module = importlib.import_module(name)
    missing = []
    for attr, value in vars(module).items():
        if attr.startswith("_") or getattr(value, "__module__", None) != name:
            continue
        targets = [(attr, value)] if callable(value) and not hasattr(value, "name") else [
            (f"{attr}.{m}", getattr(value, m)) for m in dir(value)
            if not m.startswith("_") and callable(getattr(value, m))]
        missing += [label for label, f in targets if ">>>" not in (f.__doc__ or "")]
    assert not missing, f"no docstring example in {name}: {missing}"
