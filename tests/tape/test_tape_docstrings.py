"""Every example in the docstrings of tape (tape.scipy included) and ops runs and prints what
it says."""
import doctest
import importlib
import pkgutil

import numpy as np
import pytest

import ops
import tape

# The engine, its tape.scipy package and the ops that register the rules.
MODULES = sorted(m.name for package in (tape, ops)
                 for m in pkgutil.walk_packages(package.__path__, package.__name__ + "."))


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
