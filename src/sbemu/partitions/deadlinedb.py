"""The partition's timers in its LMDB environment (store.DEADLINE_DB): their keys, and reading
what is due.

A timer's key is its due time first (8-byte big-endian ms), then its kind (one byte), the
message's 8-byte sequence number and the UTF-8 sub-queue name; its value is empty. So the first
key is the next thing due, and no message needs to be in memory for its timer to fire. These
functions work on the cursor the store gives them (store.py opens the transaction and turns
LMDB's errors into StoreError); what a timer does is deadlines.py's.
"""

from __future__ import annotations

import struct
from typing import Any

_U64 = struct.Struct(">Q")


def deadline_key(at_ms: int, kind: int, seq: int, queue: str) -> bytes:
    """The key of one timer: sorts by due time first."""
    return _U64.pack(max(at_ms, 0)) + bytes((kind,)) + _U64.pack(seq) + queue.encode("utf-8")


def parse_deadline_key(key: bytes) -> tuple[int, int, int, str]:
    """(due time ms, kind, sequence number, sub-queue) of a deadline_key()."""
    return (
        _U64.unpack_from(key, 0)[0],
        key[8],
        _U64.unpack_from(key, 9)[0],
        key[17:].decode("utf-8"),
    )


def due(cur: Any, start: bytes, now_ms: int, limit: int) -> list[bytes]:
    """Up to `limit` timer keys >= `start` that are due at `now_ms`, in order."""
    out: list[bytes] = []
    if not cur.set_range(start):
        return out
    for key in cur.iternext(keys=True, values=False):
        if _U64.unpack_from(key, 0)[0] > now_ms:
            break
        out.append(bytes(key))
        if len(out) >= limit:
            break
    return out


def first_due(cur: Any, start: bytes) -> int | None:
    """The due time of the first timer key >= `start` (None: no timers)."""
    if not cur.set_range(start):
        return None
    return int(_U64.unpack_from(cur.key(), 0)[0])
