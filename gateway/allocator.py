"""The C allocator of the gateway process: glibc's mmap threshold, fixed.

glibc serves a block above its mmap threshold (128 KiB at first) with a mapping of its own,
given back to the system when freed. But each such free raises the threshold to that block's
size (up to 32 MiB), and from then on blocks of that size come from the heap, where a freed one
stays resident. The gateway's large blocks are tables rebuilt under churn: the prefix index's
dict at its 100,000 hashes is ~10 MiB, rebuilt every ~250,000 new hashes, old and new alive at
once. Once the threshold has risen, each rebuild's table lands on the heap beside the last, and
the heap keeps both: a step of 10 MiB of RSS for good, ~920,000 W2 requests in
(bench/RESULTS.md). With the threshold fixed, glibc no longer moves it, and such tables are
mappings that go back to the system when freed. The gateway's default, 1 MiB, is above the
blocks of its hot path (uvloop hands over up to 256,000 bytes a read): at 128 KiB, W2 took ~8%
more CPU than with glibc's own threshold (a mapping made and unmapped per such block); at 1 MiB,
no more than with it (bench/RESULTS.md).

The setting is the whole process's, and for good: glibc has no call that brings its moving
threshold back, so a gateway started with `null` after one with a size, in one process, keeps
the size.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger(__name__)

_M_MMAP_THRESHOLD = -3  # (glibc's malloc.h)


def fix_mmap_threshold(size: int | None) -> bool:
    """Blocks of `size` bytes and more are mappings of their own, for good (None: glibc's
    moving threshold). False where the C library is not glibc, or refuses the size."""
    if size is None:
        return False
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "gnu_get_libc_version"):  # (musl's mallopt does nothing)
        log.info("allocator: not glibc; its mmap threshold left as it is")
        return False
    if libc.mallopt(_M_MMAP_THRESHOLD, ctypes.c_int(size)) != 1:
        log.warning("allocator: glibc refused an mmap threshold of %d bytes", size)
        return False
    log.info("allocator: glibc's mmap threshold fixed at %d bytes", size)
    return True
