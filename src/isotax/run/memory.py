"""Hand the C allocator's free pages back to the kernel after each cell.

A cell's tool output (fio's JSON, perf's CSV, a sampler's series) passes through the runner
as strings and lists of a few kB to a few hundred kB, which glibc's malloc serves from the
heap. Once freed they leave holes that a long-lived object above them keeps from the top of
the heap, so glibc never trims it, and a run of thousands of cells grows its resident memory
by ~10 kB a cell (the soak, docs/faults.md: +12% over 2,000 cells; calling malloc_trim by
hand on such a runner gave back 3.8 of the 4.7 MB its heap had grown). malloc_trim(0) returns
every whole free page, inside the heap too (MADV_DONTNEED), in about a millisecond: nothing
against a cell's seconds. Where the C library has no malloc_trim (musl), nothing is done.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


def give_back() -> None:
    """Return the allocator's free pages to the kernel (glibc's malloc_trim), if it can."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
