"""Keep the C heap from growing with the number of checkpoints (glibc, CLI only).

An analysis allocates and frees blocks of a few MB to a few hundred MB, checkpoint after
checkpoint, from two threads.  glibc's default policy raises its mmap threshold after each large
free (so later blocks come from the heap instead of fresh mappings) and gives each thread its own
arena; the freed blocks fragment those heaps, and the peak RSS grows with the number of
checkpoints.  One arena, and returning freed memory at the top of the heap at once, keeps it flat,
for a slightly slower analysis (the heap is re-grown more often).  The measurements and the
commands behind them: docs/performance.md, "Memory".

This changes the whole process's allocator, so only the command-line entry point does it (it owns
the process); ``ckptscan.analyze`` leaves a host program's allocator alone.  Nothing happens when
the user set any ``MALLOC_*`` variable (their choice wins), off glibc, or with
``CKPTSCAN_KEEP_MALLOC=1``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

_M_TRIM_THRESHOLD = -1  # mallopt parameters (glibc malloc.h)
_M_ARENA_MAX = -8


def bound_heap_growth() -> bool:
    """Apply the settings above; True when they were applied."""
    if not sys.platform.startswith("linux") or os.environ.get("CKPTSCAN_KEEP_MALLOC") == "1":
        return False
    if any(k.startswith("MALLOC_") for k in os.environ):
        return False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_ARENA_MAX, 1)) and bool(mallopt(_M_TRIM_THRESHOLD, 0))
