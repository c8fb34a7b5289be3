"""Give the C heap back to the system after a burst of connections has closed.

Measured: the server's anonymous memory grew from 48 to 112 MB over 700 attached connections
that each sent a partial frame, and stayed there after they closed. Nothing was leaked (the
Python objects and proton's buffers were freed: tracemalloc's diff after the close is a few
hundred KB), but glibc keeps freed memory in its arenas when live allocations sit between the
free blocks, so the process never shrank. ``malloc_trim(0)`` hands those free pages back.

Issue 35: one big client is enough. After 10 clients of 50 MB messages the server sat 140 MB
above its start until 64 connections had closed: the freed buffers of large transfers sit in
glibc's arenas just the same. So a single close also counts when the heap holds more than
``FREE_LIMIT`` bytes more free than right after the last trim (glibc's ``mallinfo2``: the free
chunks a trim can give back).

It runs rarely: when connections closed since the last trim (at least ``MIN_CLOSED`` of them,
or any number with more than ``FREE_LIMIT`` held free), the count stayed put for ``SETTLE``
seconds and at least ``INTERVAL`` seconds passed since the last trim, off the event loop (a
trim of a 100 MB heap takes some tens of ms). So the memory of closed connections goes back
to the system within ``SETTLE`` + ``INTERVAL`` seconds (12 s) of the last close, up to
``FREE_LIMIT`` (16 MiB) left free in the heap, plus what glibc cannot give back (a free chunk
below a live one at the top of an arena is returned page by page; a page holding any live
allocation is not).
A large answer (a peek of 100 messages of 200 KB: 20 MB) leaves its temporaries (the records
read, each under ``LARGE_BLOCK``, so in the arenas) free in the heap while its peer holds the
connection open: a peer that never reads it kept the server 20-35 MB above the answer itself,
depending on what was allocated above them meanwhile. So the connection that produced one
also asks for a trim (:meth:`HeapTrimmer.ask`): at once, or ``ASK_INTERVAL`` after the last
asked one, several asks in between making one trim.

On a libc without ``malloc_trim`` (musl, macOS) it does nothing; without ``mallinfo2`` (glibc
before 2.33) only the ``MIN_CLOSED`` rule applies. Pure apart from the libc calls: the caller
passes ``now``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
from collections.abc import Callable

__all__ = ["HeapTrimmer", "libc_free_bytes", "libc_malloc_trim", "map_large_blocks"]

log = logging.getLogger("sbemu.heap")

MIN_CLOSED = 64  # connections closed since the last trim
INTERVAL = 10.0  # seconds between trims at least
SETTLE = 2.0  # seconds the connection count must stay put (the closed ones' buffers freed)
FREE_LIMIT = 16 * 1024 * 1024  # bytes held free in the heap worth a trim after a single close
ASK_INTERVAL = 1.0  # seconds between the trims asked for by large answers at least


def libc_malloc_trim() -> Callable[[], object] | None:
    """glibc's ``malloc_trim(0)``, or None where the C library has none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


_M_MMAP_THRESHOLD = -3  # mallopt's parameter (glibc malloc.h)
LARGE_BLOCK = 1 << 20  # bytes from which a block is mapped on its own


def map_large_blocks(threshold: int = LARGE_BLOCK) -> bool:
    """Have glibc map every block of ``threshold`` bytes or more on its own, so it goes back to
    the system the moment it is freed (True; False where the C library has no ``mallopt``).

    glibc raises its mmap threshold to the size of the largest mapped block freed so far (up to
    32 MiB), so after one large message the next ones of that size come from the arenas, where
    a freed 30 MB buffer below a live allocation stays with the process: six clients of 30 MB
    left the server 60 MB up after they closed, trims or not. Setting the threshold turns that
    adjustment off. Messages under 1 MiB, the common case, are not affected; a mapped block
    costs a map and an unmap, small beside copying a megabyte."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold))


class _MallInfo2(ctypes.Structure):
    _fields_ = [  # glibc's struct mallinfo2 (malloc.h), every field a size_t
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


def libc_free_bytes() -> Callable[[], int] | None:
    """Bytes glibc holds free in its arenas (``mallinfo2().fordblks``), or None without it."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        info = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    info.argtypes = []
    info.restype = _MallInfo2
    return lambda: int(info().fordblks)


class HeapTrimmer:
    """Decides when the heap is worth trimming: after connections closed (their buffers
    freed), not more than once per ``interval``."""

    def __init__(
        self,
        trim: Callable[[], object] | None = None,
        *,
        free_bytes: Callable[[], int] | None = None,
        min_closed: int = MIN_CLOSED,
        interval: float = INTERVAL,
        settle: float = SETTLE,
        free_limit: int = FREE_LIMIT,
    ) -> None:
        self.trim = trim
        self.free_bytes = free_bytes
        self.free_limit = free_limit
        self.min_closed = min_closed
        self.interval = interval
        self.settle = settle
        self._peak = 0  # most connections open since the last trim
        self._open = 0
        self._changed_at = float("-inf")  # when the open count last changed
        self._last = float("-inf")
        self._free_after = 0  # bytes held free right after the last trim
        self._asked_at = float("-inf")  # when the last asked trim was planned for
        self._asked = False  # an asked trim is planned and has not run yet
        self.trims = 0

    def due(self, open_connections: int, now: float) -> bool:
        """Whether to trim now (then call :meth:`run`, off the event loop)."""
        if open_connections != self._open:
            self._open, self._changed_at = open_connections, now
        self._peak = max(self._peak, open_connections)
        closed = self._peak - open_connections
        if self.trim is None or closed < 1:
            return False
        if now - self._changed_at < self.settle or now - self._last < self.interval:
            return False
        if closed < self.min_closed and (
            self.free_bytes is None or self.free_bytes() - self._free_after < self.free_limit
        ):
            self._peak = open_connections  # these closes left nothing worth giving back
            return False
        self._peak, self._last = open_connections, now
        return True

    def ask(self, now: float) -> float | None:
        """A large answer's temporaries were just freed: seconds from `now` after which to
        call :meth:`run_asked`, or None when a trim is planned already (it covers this one)
        or there is no trim."""
        if self.trim is None or self._asked:
            return None
        self._asked = True
        self._asked_at = max(now, self._asked_at + ASK_INTERVAL)
        return self._asked_at - now

    def run_asked(self) -> None:
        """The trim :meth:`ask` planned (any thread). Without the cyclic collection: the
        answer's temporaries are freed by reference counting, and a collection in another
        thread would hold the interpreter lock from the event loop for as long as it takes."""
        self._asked = False
        self.run(collect=False)

    def run(self, collect: bool = True) -> None:
        """Trim (any thread)."""
        if self.trim is None:
            return
        if collect:
            # Cycles first: a big transfer's buffers can hang on objects only the cyclic
            # collector frees (gcpolicy.py lets the young generation grow large, and an idle
            # server allocates too little to run it): 6 clients of 30 MB left 91 MB held
            # after a trim alone, 62 MB after the collection and the trim.
            gc.collect()
        self.trim()
        self.trims += 1
        # glibc still counts trimmed pages as free (they are only unmapped): what is freed
        # from now on is measured from here
        self._free_after = self.free_bytes() if self.free_bytes is not None else 0
        log.debug("heap trimmed (%d so far)", self.trims)
