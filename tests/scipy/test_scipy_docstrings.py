"""Every public function of tape.scipy has a runnable example (the examples themselves are run
by tests/tape/test_tape_docstrings.py)."""
import importlib

import pytest

OURS = ["tape.scipy", "tape.scipy.special", "tape.scipy.stats", "tape.scipy.stats_common",
        "tape.scipy.stats_continuous", "tape.scipy.stats_discrete",
        "tape.scipy.stats_multivariate", "tape.scipy.signal"]


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
