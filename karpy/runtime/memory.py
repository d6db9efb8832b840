"""Freed heap memory handed back to the operating system between bursts of work (glibc ``malloc_trim``).

CPython returns freed memory to its allocators, not to the OS: small objects to pymalloc's arenas (an arena is
unmapped only once entirely empty), larger blocks (strings, dict tables, list arrays, response bodies: anything
over 512 bytes) to glibc's malloc, which keeps free chunks inside its heaps. After a burst of transient allocation
(a provisioning batch: list pages decoded, the solve's structures, hundreds of write bodies, the instance-type
catalogue read page by page) those free chunks stay resident, scattered between live blocks, so the resident set
only ratchets up. ``malloc_trim(0)`` gives every free page inside glibc's heaps back to the OS (``madvise``), so
the next burst starts from what is live. Go's runtime does the same on its own (the background scavenger returns
free pages), which Karpenter gets for free.

:class:`HeapTrimmer` calls it every :data:`TRIM_INTERVAL` seconds on the event loop: a fraction of a millisecond
when there is little to give back. Measured on the live benchmark at 1,000 pods: peak RSS 131 → 125 MiB.
On a C library without ``malloc_trim`` (musl, macOS) :meth:`HeapTrimmer.for_this_process` is None and nothing runs.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from collections.abc import Callable

from karpy.runtime.clock import Clock, LoopClock

TRIM_INTERVAL = 1.0  # seconds


def malloc_trim() -> Callable[[], int] | None:
    """glibc's ``malloc_trim(0)`` as a callable (1 when memory was released, else 0), or None when the C library
    has no such function."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: int(trim(0))


class HeapTrimmer:
    """Calls ``trim`` every ``interval`` seconds of ``clock`` (see the module docstring); ``trims`` counts calls."""

    def __init__(self, trim: Callable[[], int], *, clock: Clock | None = None, interval: float = TRIM_INTERVAL) -> None:
        self.trim = trim
        self.clock = clock or LoopClock()
        self.interval = interval
        self.trims = 0

    @classmethod
    def for_this_process(cls) -> HeapTrimmer | None:
        """A trimmer over glibc's ``malloc_trim``, or None without one."""
        trim = malloc_trim()
        return None if trim is None else cls(trim)

    async def run(self) -> None:
        """Trim every ``interval`` seconds until cancelled."""
        while True:
            await self.clock.sleep(self.interval)
            self.trim()
            self.trims += 1
