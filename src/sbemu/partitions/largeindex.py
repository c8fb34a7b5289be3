"""Which stored records are large, known without reading them.

py-lmdb touches every page of a value it hands out (its "preload", with the GIL released).
The router lets go of a store's mapped pages every few seconds (resident.py), so on the event
loop, reading a 99 MB record only to find that it is large (and must be read off the loop:
largeread.py) faulted its 24,000 pages back in: 15-38 ms of the loop's CPU, up to 74 ms when
some came from the disk.

So the store notes each large record it writes, with its session, in a database of its own
(`large`, key: 8-byte sequence number + UTF-8 sub-queue name, value: b"" for no session, b"s"
+ the UTF-8 session id) and here in memory (a few entries: each stands for LARGE_RECORD bytes
or more of store). A read on the loop asks here first and answers "large" from the key alone.

Notes change only inside the store's write transactions (one at a time); each change puts a
new mapping in place of a sub-queue's old one, so a read on another thread always sees a whole
one. Records written before the index existed are not in it: a read meets them as before.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from itertools import islice
from typing import Any

_U64 = struct.Struct(">Q")
# what a read makes of a noted record instead of reading it: (sequence number, session id)
AheadOf = Callable[[int, str | None], Any]


class LargeIndex:
    """The large records of one store, by sub-queue: sequence number -> session id."""

    __slots__ = ("_by_queue",)

    def __init__(self) -> None:
        self._by_queue: dict[str, dict[int, str | None]] = {}

    def load(self, rows: Iterable[tuple[Any, Any]]) -> None:
        """Read the index back from its database's (key, value) rows."""
        by_queue: dict[str, dict[int, str | None]] = {}
        for key, value in rows:
            seq = _U64.unpack_from(key, 0)[0]
            queue = bytes(key[8:]).decode("utf-8")
            value = bytes(value)
            by_queue.setdefault(queue, {})[seq] = value[1:].decode("utf-8") if value else None
        self._by_queue = by_queue

    def of(self, queue: str) -> dict[int, str | None] | None:
        """The large records of `queue` (never changed in place; None: none)."""
        return self._by_queue.get(queue)

    def note(self, txn: Any, db: Any, large: list[tuple[str, int, str | None]]) -> None:
        """Note a batch's large records (WriteBatch.large: sub-queue, sequence number, session
        id) as they are written: in database `db` in write transaction `txn`, and here."""
        by_queue = self._by_queue
        for queue, seq, session_id in large:
            txn.put(_U64.pack(seq) + queue.encode("utf-8"),
                    b"" if session_id is None else b"s" + session_id.encode("utf-8"),
                    db=db)  # fmt: skip
            by_queue[queue] = {**by_queue.get(queue, {}), seq: session_id}

    def forget(self, txn: Any, db: Any, queue: str, keys: list[bytes]) -> None:
        """The records of `queue` at `keys` (8-byte sequence numbers) are being deleted in
        write transaction `txn`: drop the noted ones, from database `db` and here."""
        noted = self._by_queue.get(queue)
        if not noted:
            return
        unpack = _U64.unpack
        gone = {seq for seq in (unpack(key)[0] for key in keys) if seq in noted}
        if not gone:
            return
        name = queue.encode("utf-8")
        for seq in gone:
            txn.delete(_U64.pack(seq) + name, db=db)
        left = {seq: sid for seq, sid in noted.items() if seq not in gone}
        if left:
            self._by_queue[queue] = left
        else:
            del self._by_queue[queue]


def noted_from(noted: dict[int, str | None] | None, start: int) -> bool:
    """Whether a record at or after `start` is noted."""
    return bool(noted) and any(seq >= start for seq in noted)  # type: ignore[union-attr]


def first_noted(cur: Any, limit: int, noted: dict[int, str | None]) -> tuple[int, int] | None:
    """(place among the next `limit` records from the cursor's, sequence number) of the first
    noted one; None when none is. Keys only: no value is read. Moves the cursor."""
    unpack = _U64.unpack
    for i, key in enumerate(islice(cur.iternext(keys=True, values=False), limit)):
        seq = unpack(key)[0]
        if seq in noted:
            return i, seq
    return None


def scan_noting(
    cur: Any,
    limit: int,
    noted: dict[int, str | None],
    decode: Callable[[Any], Any],
    ahead_of: Callable[[int, str | None], Any],
) -> list[tuple[int, Any]]:
    """PartitionStore.scan from the cursor's record on when some are noted: a noted record is
    `ahead_of(sequence number, session id)`, not read; the others are decoded."""
    rows: list[tuple[int, Any]] = []
    unpack = _U64.unpack
    more = True
    while more and len(rows) < limit:
        seq = unpack(cur.key())[0]
        rows.append((seq, ahead_of(seq, noted[seq]) if seq in noted else decode(cur.value())))
        more = cur.next()
    return rows
