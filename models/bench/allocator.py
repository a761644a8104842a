"""The state of glibc's allocator while a benchmark measures.

Times of array code change by up to 2x with it, for every tool alike: glibc serves an array
above its mmap threshold with fresh pages (a page fault per 4 kB on first touch), and that
threshold (and the heap's trim threshold, twice it) rises only when a larger array is freed,
up to 32 MB. "primed" frees one 24 MB array first, as any program that has held a large
array has done, so that results do not depend on which benchmark ran before; "keep" makes
glibc keep all freed memory (no page faults at all: a what-if, set in a child process's
environment); "cold" leaves the process as it starts.
"""
from __future__ import annotations

ALLOCATOR_STATES = ("primed", "cold", "keep")
KEEP_TUNABLES = ("glibc.malloc.mmap_threshold=4294967295:"
                 "glibc.malloc.trim_threshold=4294967295")


def prime_allocator() -> None:
    """Touch and free one 24 MB array (the "primed" state).

    >>> prime_allocator()
    """
    import numpy as np   # (not at import: the harness sets BLAS's threads before NumPy loads)
    block = np.ones(3 * 2 ** 20)
    del block
