"""`hecate bench`: Hecate side by side with autograd, PyTorch and JAX (never part of the tests'
timings). Installed with the package, so `hecate bench` works from any install:

- `models.bench.harness`: the command (measurement, report, plots);
- `models.bench.adbench`: ADBench's objectives, file formats and the peers' versions;
- `models.bench.overhead`: the recorded-op overhead benchmark;
- `models.bench.lm_peers`: the language model against same-size PyTorch peers on the same data
  (the peers' networks in `models.bench.peer_nets`, which only it loads, once torch is found).

The repository's ``benchmarks/`` folder holds the scripts that only run from a checkout
(``kernels.py``, ``train.py``, ``checkpoint.py``, ...) and entry points that call this package
(``benchmarks/harness.py``, ``benchmarks/overhead.py``); this package never imports it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

# The folder holding the `models` package: the repository root in a checkout (editable install
# or none), site-packages in a regular install.
PACKAGE_PARENT = Path(__file__).resolve().parents[2]


def checkout_root() -> Optional[Path]:
    """The repository root when this package runs from a checkout (it has ``benchmarks/`` and
    ``pyproject.toml`` next to ``models/``), else None (an installed package)."""
    root = PACKAGE_PARENT
    if (root / "benchmarks").is_dir() and (root / "pyproject.toml").is_file():
        return root
    return None


__all__ = ["PACKAGE_PARENT", "checkout_root"]
