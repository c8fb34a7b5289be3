"""Letting go of the resident pages of a store's file, so memory does not grow with the data.

A partition's LMDB environment is a read-only shared map of its data.mdb: every page the
process reads or LMDB writes stays resident (counted in the server's RSS) until it is unmapped.
ResidentPages.release() drops them (MADV_DONTNEED): they stay in the kernel's page cache and
fault back in when read again, so the server's resident memory does not grow with the data it
has written or read. Linux only; a no-op elsewhere.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
from collections.abc import Callable


def _load_madvise() -> Callable[[int, int], int] | None:
    if not sys.platform.startswith("linux") or not hasattr(mmap, "MADV_DONTNEED"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    fn = libc.madvise
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return lambda addr, length: int(fn(addr, length, mmap.MADV_DONTNEED))


_MADVISE = _load_madvise()


def _mapping_of(path: str) -> tuple[int, int] | None:
    """(address, length) of this process's mapping of `path` (from /proc/self/maps)."""
    real = os.path.realpath(path)
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and fields[5].rstrip("\n") == real:
                    lo, hi = (int(x, 16) for x in fields[0].split("-"))
                    return lo, hi - lo
    except OSError:
        return None
    return None


class ResidentPages:
    """The mapping of one file (a store's data.mdb) in this process, found once and forgotten
    when the map may have moved (PartitionStore.grow, reopen)."""

    __slots__ = ("path", "_mapping")

    def __init__(self, path: str) -> None:
        self.path = path
        self._mapping: tuple[int, int] | None = None

    def release(self) -> None:
        """Unmap the pages of the file this process touched (MADV_DONTNEED). Call it between
        transactions of the thread that reads the store, never on a closed one."""
        if _MADVISE is None:
            return
        if self._mapping is None:
            self._mapping = _mapping_of(self.path) or (0, 0)
        addr, length = self._mapping
        if length:
            _MADVISE(addr, length)

    def forget(self) -> None:
        """The map may have moved: find it again at the next release()."""
        self._mapping = None
