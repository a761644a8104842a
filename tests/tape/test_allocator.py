"""`tape.keep_freed_memory`: glibc keeps freed blocks, so repeated temporaries stop faulting.

The settings are process-wide, so each check runs in a fresh interpreter."""
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tape

ROOT = Path(__file__).resolve().parents[2]

# The page faults of 100 repetitions of a few 128 KB temporaries (a memory chunk's blocks),
# after one warm-up repetition. glibc's defaults fault every block in again (about 23,000
# faults measured); with freed memory kept there are none to speak of.
FAULTS = textwrap.dedent("""
    import resource, sys
    import numpy as np
    sys.path.insert(0, {root!r})
    from tape.allocator import keep_freed_memory
    kept = keep_freed_memory() if sys.argv[1] == "keep" else None
    lr = np.ones((32, 8, 16), np.float32)
    def temporaries():
        terms = lr[..., :, None] * np.tri(16, k=-1, dtype=lr.dtype)
        return np.exp(np.tri(16, dtype=lr.dtype) @ terms) * np.tri(16, dtype=lr.dtype)
    temporaries()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(100):
        temporaries()
    print(kept, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")


def _faults(mode: str):
    out = subprocess.run([sys.executable, "-c", FAULTS.format(root=str(ROOT)), mode],
                         capture_output=True, text=True, check=True).stdout.split()
    return out[0], int(out[1])


glibc_only = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                                reason="mallopt's settings are glibc's")


@glibc_only
def test_freed_memory_is_reused_without_page_faults():
    kept, with_setting = _faults("keep")
    _, by_default = _faults("default")
    assert kept == "True"
    # Without the setting every repetition faults its 128 KB blocks in again; if glibc's
    # defaults ever stop doing that, the comparison below says nothing, and the test says so.
    if by_default < 1000:
        pytest.skip(f"glibc's defaults did not fault here ({by_default} faults)")
    assert with_setting < by_default / 20


def test_returns_a_bool_and_is_exported():
    assert tape.keep_freed_memory is tape.allocator.keep_freed_memory
    assert tape.keep_freed_memory() in (True, False)
