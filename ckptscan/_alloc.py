"""Keep the C heap from growing with the number of checkpoints (glibc, CLI only).

An analysis allocates and frees blocks of a few MB to a few hundred MB, checkpoint after
checkpoint, from two threads.  glibc's default policy raises its mmap threshold after each large
free (so later blocks come from the heap instead of fresh mappings) and gives each thread its own
arena; the freed blocks fragment those heaps, and the peak RSS of a 1B-geometry analysis grew from
896 MB (2 checkpoints) to 1180 MB (50).  One arena, and returning freed memory at the top of the
heap at once, keeps it flat: 791 MB for 2, 10 and 50 checkpoints
(``benchmarks/bench.py --memory 2,10,50 --peak-env MALLOC_ARENA_MAX=1,MALLOC_TRIM_THRESHOLD_=0``),
for a slower analysis (the heap is re-grown more often; in-process runs of the 1B pair took
4.0-4.8 s against 3.5-4.4 s, within the benchmark machine's noise; docs/performance.md).

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
