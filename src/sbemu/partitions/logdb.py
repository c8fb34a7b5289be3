"""The partition log inside a partition's LMDB environment: reading it, its bounds, trimming it.

The log database (store.LOG_DB) holds the partition's events, key: 8-byte big-endian offset,
value: a version-1 record or a run record standing for several consecutive offsets (see
records.py: `log_extent` says how many, `expand_log` gives their version-1 records). The meta
key TRIMMED_BELOW_META records where trimming left the log (every record below it is gone),
so a reader can tell a trimmed log from one that starts later.

These functions work on a cursor or transaction they are given: the store (store.py) opens the
transactions, holds its remap lock and turns LMDB's errors into StoreError; the log readers of
sbemu.logs run read_log_events in their own read-only environments. No lmdb import here.
"""

from __future__ import annotations

import struct
from typing import Any

from .records import expand_log, log_extent

_U64 = struct.Struct(">Q")
NEXT_OFFSET_META = b"next_log_offset"
TRIMMED_BELOW_META = b"log_trimmed_below"
TRIM_LIMIT = 50_000  # log records deleted per trim_log() call (one write transaction)


def read_log_events(
    cur: Any, start: int, end: int | None, limit: int
) -> tuple[list[tuple[int, bytes]], int | None]:
    """Up to `limit` log events from offset `start` (to `end`, exclusive; None: the last) on
    a cursor of the log database, run records expanded (records.expand_log): the events as
    (offset, version-1 record) and where the next read starts (None: nothing further).

    A `start` inside a run record (a reader's resume point, a trimmed log's first offset)
    begins in that run: its earlier events are skipped."""
    out: list[tuple[int, bytes]] = []
    key = _U64.pack(start)
    if cur.set_range(key):
        if _U64.unpack(cur.key())[0] > start:  # the record before may be a run holding start
            if not cur.prev():
                cur.set_range(key)
            elif _U64.unpack(cur.key())[0] + log_extent(cur.value()) <= start:
                cur.next()  # it ends before `start`: begin after it
    elif not cur.last() or _U64.unpack(cur.key())[0] + log_extent(cur.value()) <= start:
        return out, None
    while True:
        first = _U64.unpack(cur.key())[0]
        if end is not None and first >= end:
            return out, None
        value = bytes(cur.value())
        events = expand_log(value)
        for i, event in enumerate(events):
            off = first + i
            if off < start:
                continue
            if (end is not None and off >= end) or len(out) >= limit:
                return out, off
            out.append((off, event))
        if not cur.next():
            return out, None


def log_bounds(txn: Any, log_db: Any, meta_db: Any) -> tuple[int, int]:
    """(first offset still stored, next offset) in a transaction: the log holds [first, end)."""
    raw = txn.get(NEXT_OFFSET_META, db=meta_db)
    end = _U64.unpack(raw)[0] if raw else 0
    cur = txn.cursor(db=log_db)
    if cur.first():
        first = _U64.unpack(cur.key())[0]
        if cur.last():
            end = max(end, _U64.unpack(cur.key())[0] + log_extent(cur.value()))
    else:
        low = txn.get(TRIMMED_BELOW_META, db=meta_db)
        first = min(end, _U64.unpack(low)[0]) if low else end
    return first, end


def trim_log(txn: Any, log_db: Any, meta_db: Any, below: int, limit: int) -> int:
    """Delete up to `limit` log records below offset `below` in a write transaction.

    Records meta TRIMMED_BELOW_META (never lowered) so readers can tell a trimmed log from
    one that starts later. Returns how many records (offsets) were deleted. A run record that
    reaches `below` stays whole, and the log then starts at its first offset."""
    deleted = 0
    cur = txn.cursor(db=log_db)
    last = -1  # the first offset past what was deleted
    kept: int | None = None  # where a run reaching `below` keeps the log
    if cur.first():
        while deleted < limit:
            off = _U64.unpack(cur.key())[0]
            if off >= below:
                break
            extent = log_extent(cur.value())
            if off + extent > below:
                kept = off
                break
            last = off + extent
            deleted += extent
            if not cur.delete():  # moves to the next record
                break
            if cur.key() == b"":
                break
    if deleted:
        nxt = txn.get(NEXT_OFFSET_META, db=meta_db)
        end = max(last, _U64.unpack(nxt)[0] if nxt else 0)
        if kept is not None:
            mark = kept
        else:
            mark = min(below, end) if deleted < limit else last
        old = txn.get(TRIMMED_BELOW_META, db=meta_db)
        if not old or _U64.unpack(old)[0] < mark:
            txn.put(TRIMMED_BELOW_META, _U64.pack(mark), db=meta_db)
    return deleted
