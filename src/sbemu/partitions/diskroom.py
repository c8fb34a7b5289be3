"""The room a partition's store has on its disk for new messages.

LMDB cannot delete anything on a disk that is completely full (every transaction writes new
copies of the pages it changes), so a store that filled its disk with messages could not even
commit the completions that would make room again: it would fail every commit for good.
Keeping DISK_RESERVE free for what must always commit (completions, dead-letters, log records,
timers) breaks that: below it the partition takes no new messages (server-busy) while
receives, completions and dead-letters go on (health.py decides; this room measures).

The store (store.py) owns one DiskRoom and tells it of each commit; it also says how many
bytes LMDB freed inside its file (reused before the file grows), counted as room once the
disk runs low, so a queue that was drained takes messages again although its file did not
shrink.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

MIB = 1 << 20
# Room kept free on the store's disk for what must always commit: below it the partition
# takes no new messages. A quarter of a disk smaller than four times this.
DISK_RESERVE = 16 * MIB
DISK_FULL_BELOW = MIB  # a write that failed with less free space than this ran out of disk
# With more room than ROOM_WATCH a commit measures it only every ROOM_EVERY commits (statvfs
# costs a few microseconds of the commit thread); below it every commit does.
ROOM_WATCH = 4 << 30
ROOM_EVERY = 64


class DiskRoom:
    """Room for new messages on the disk under one store, beyond the reserve: `bytes` (None:
    the disk cannot say) and whether there is none, `low` (the partition refuses new
    messages)."""

    __slots__ = ("path", "bytes", "low", "_free_pages", "_unmeasured")

    def __init__(self, path: str, free_pages: Callable[[], int]) -> None:
        self.path = path
        self.bytes: int | None = None
        self.low = False
        self._free_pages = free_pages  # bytes LMDB freed inside the store's file (0: unknown)
        self._unmeasured = 0  # commits since the room was last measured

    def measure(self) -> int | None:
        """Measure the room left beyond the disk's reserve (`bytes`) and whether there is
        none (`low`; it stays low until half the reserve is free again, so sends do not
        flap). Runs after commits (on the commit's thread, see committed()) and, while room is
        low, from the partition's timer (health.py). Returns the room."""
        self._unmeasured = 0
        try:
            vfs = os.statvfs(self.path)
        except OSError:
            return self.bytes  # (a failing disk: the commits report it)
        reserve = min(DISK_RESERVE, vfs.f_blocks * vfs.f_frsize // 4)
        free = vfs.f_bavail * vfs.f_frsize
        if free < 3 * reserve:
            free += self._free_pages()
        room = free - reserve
        self.bytes = room
        self.low = room < (reserve // 2 if self.low else 0)
        return room

    def committed(self) -> None:
        """A commit landed: measure again, every commit while the room is below ROOM_WATCH
        (or unknown), else every ROOM_EVERY commits. A fault while measuring is not the
        commit's: it is ignored (the commit is durable)."""
        self._unmeasured += 1
        room = self.bytes
        if room is None or room < ROOM_WATCH or self._unmeasured >= ROOM_EVERY:
            with contextlib.suppress(Exception):  # committed: a measuring fault must not say not
                self.measure()

    def disk_full_note(self) -> str:
        """After a failed write: ' (the disk is full)' when it ran out of space (then there is
        no room); LMDB reports a write the disk had no room for (a short write) as an I/O
        error."""
        try:
            vfs = os.statvfs(self.path)
        except OSError:
            return ""
        if vfs.f_bavail * vfs.f_frsize >= DISK_FULL_BELOW:
            return ""
        self.bytes, self.low = 0, True
        return " (the disk is full)"
