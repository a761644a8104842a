"""The ADBench tests import `models.bench.adbench` (and `benchmarks.harness`, the checkout's entry
point, from the repository root), and get ADBench's own files through the `adbench_data`
fixture, which skips when they are absent (a user's checkout has no ../shared)."""
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture
def adbench_data():
    from models.bench.adbench import io

    folder = io.data_dir()
    if folder is None:
        pytest.skip(f"ADBench's files are not available (../shared/adbench next to the "
                    f"repository, or ${io.ENV_VAR})")
    return folder
