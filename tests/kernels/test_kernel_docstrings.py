"""Every example in the kernels' docstrings runs and prints what it says."""
import doctest
import importlib
import pkgutil

import numpy as np
import pytest

import kernels

MODULES = sorted(m.name for m in pkgutil.iter_modules(kernels.__path__, "kernels."))


@pytest.mark.parametrize("name", ["kernels"] + MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    before = kernels.is_reference_forced()
    try:
        for test in finder.find(module, name, globs=dict({"np": np}, **vars(module))):
            runner.run(test)
    finally:
        kernels.force_reference(before)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed"


def test_public_functions_have_examples_and_type_hints():
    for name in ("swa_attention", "delta_rule", "titans_rule", "hebbian_rule", "memory_read",
                 "detect_gpu", "select_backend", "force_reference", "info"):
        fn = getattr(kernels, name)
        assert ">>>" in (fn.__doc__ or ""), name
        hints = getattr(fn, "__annotations__", {}) or getattr(fn.__init__, "__annotations__", {})
        assert hints, name
