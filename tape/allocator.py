"""The C allocator's settings: keep freed memory for the next array instead of returning it.

A program that differentiates mid-size arrays allocates and frees the same temporaries again
and again: every operation's result, every cotangent. glibc's malloc serves a block above its
mmap threshold (128 KB when a process starts) with fresh pages from the kernel and gives them
back when the block is freed, and trims the top of its heap the same way; the next temporary
of that size then page-faults its memory in again, 4 KB at a time. The threshold rises by
itself only when a larger block is freed, so how fast a program runs depends on what it
allocated before. On the virtual machines measured a fault costs 1 to 3 us per page. A
process that has not yet freed a large array pays it on every temporary: a gradient through the
delta-rule memory kernel at the default model's size (float32, [32, 8, 16, 16] blocks of
128 KB) took 10.8 ms in a fresh process against 5.8 ms with freed memory kept. Where a large
array was freed earlier, as in `hecate train` (its data and parameters), the threshold has
already risen and little is left: 266 faults per training step (under 1% of the step) against
none.

`keep_freed_memory` raises both thresholds, so that freed blocks of up to 32 MB stay in the
process for the next allocation. The price is that the process's resident memory does not
shrink after its peak (blocks above 32 MB are still returned). The ``hecate`` commands that
train, evaluate and serve call it; a program of one's own may call it at its start. The
environment variable ``GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:
glibc.malloc.trim_threshold=4294967295`` does the same for a whole process from outside.
"""
from __future__ import annotations

import ctypes
import ctypes.util

_M_TRIM_THRESHOLD = -1      # mallopt's parameter numbers (malloc.h)
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD_MAX = 32 * 1024 * 1024     # glibc's largest mmap threshold on 64-bit systems
_TRIM_NEVER = 2 ** 31 - 1


def keep_freed_memory() -> bool:
    """Make glibc's malloc keep freed blocks of up to 32 MB for the next allocation (module
    docstring: no page faults for the temporaries a gradient makes again and again; the
    resident memory does not shrink after its peak). Returns whether the settings were
    applied: False where the C library is not glibc (macOS, musl), which changes nothing.

    >>> keep_freed_memory() in (True, False)
    True
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX)
                and mallopt(_M_TRIM_THRESHOLD, _TRIM_NEVER))
