"""glibc's allocator, told to give memory back (a long-running process that loads models now and then).

Why (measured in docs/memory.md): the daemon loads the GGUF model (~155 MB) and the companion
(~120 MB) while it embeds, on its embedding thread, and lets both go after a quiet spell.  With
glibc's defaults what they freed largely stayed resident:

* every thread that allocates gets its own arena (up to 8 per core), each a 64 MB reservation
  whose pages, once touched, stay until trimmed -- Edge's search pool, the API's and the
  store's threads each kept one;
* the mmap threshold is dynamic: freeing a large mmapped block (a model's buffers) raises it to
  that block's size (up to 32 MB), so every later allocation below that size comes from an
  arena instead of its own mapping, and interleaved with long-lived ones it cannot be returned
  -- loading and unloading both models left ~35 MB more anonymous memory with the dynamic
  threshold than with a fixed one, malloc_trim included.

:func:`tune` fixes both (``mallopt``; it must run before the process starts threads, so the
limit applies to every arena); :func:`trim` returns free pages inside the arenas after a model
is dropped.  Not glibc (musl): both are no-ops that say so.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

# mallopt parameters (glibc malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8

ARENA_MAX = 2  # the main arena and one shared by every other thread
# Fixed (not glibc's dynamic one): a block this size or more is its own mapping, returned when freed.
# 1 MiB rather than glibc's starting 128 KiB: the companion's working arrays (~0.8 MB) stay in the
# arena, reused, instead of a fresh mapping (page faults) per operation; the memory gain was the same.
MMAP_THRESHOLD = 1024 * 1024


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt, libc.malloc_trim  # noqa: B018 -- glibc's, absent from musl
    except (OSError, AttributeError):
        return None
    return libc


def tune(arena_max: int = ARENA_MAX, mmap_threshold: int = MMAP_THRESHOLD) -> dict[str, int]:
    """Limit the arenas and fix the mmap threshold; the settings applied ({} when not glibc).

    Call it first thing in the process, before any thread starts: an arena made before
    stays.  Idempotent.
    """
    libc = _libc()
    if libc is None:
        return {}
    applied = {}
    for name, param, value in (
        ("arena_max", M_ARENA_MAX, arena_max),
        ("mmap_threshold", M_MMAP_THRESHOLD, mmap_threshold),
        ("trim_threshold", M_TRIM_THRESHOLD, 2 * mmap_threshold),  # a heap's free top goes back past this
    ):
        if libc.mallopt(param, value) == 1:
            applied[name] = value
    return applied


def trim() -> bool:
    """Give the free pages of every arena back to the OS (``malloc_trim(0)``); True when some were."""
    libc = _libc()
    return bool(libc.malloc_trim(0)) if libc is not None else False


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (2.33 on): every field a size_t, summed over all arenas."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost"
        )
    ]  # fmt: skip


def usage() -> dict[str, int]:
    """What malloc holds now, in bytes ({} when not glibc 2.33+): ``in_use`` by live blocks in the arenas,
    ``free`` inside the arenas (resident until trimmed), ``mapped`` the blocks of MMAP_THRESHOLD or more,
    each its own mapping (their size, not what of it was touched).  For diagnosis: it names native growth
    that tracemalloc, which sees Python's allocations only, does not."""
    libc = _libc()
    if libc is None or not hasattr(libc, "mallinfo2"):
        return {}
    libc.mallinfo2.restype = _MallInfo2
    info = libc.mallinfo2()
    return {"in_use": info.uordblks, "free": info.fordblks, "mapped": info.hblkhd}
